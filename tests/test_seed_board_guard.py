"""scripts/seed_board.sh times nothing on a loaded host or beside another copy of itself, and says so in one
line (leaderboards/RULES.md, "Clean timing"); `python -m dgbench.timing quiet-check` is the check it runs."""
from __future__ import annotations

import fcntl
import os
import stat
import subprocess
from pathlib import Path

from dgbench import timing
from dgbench.records import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "seed_board.sh"


def _fake_bin(tmp_path: Path, host_busy: bool) -> Path:
    """A BIN folder whose python answers the quiet check as told and whose dgbench notes every call."""
    folder = tmp_path / "bin"
    folder.mkdir()
    calls = tmp_path / "dgbench-calls"
    verdict = ('echo "refused: host is loaded: its CPUs were 90% busy over 5 s (bound 15%)" >&2; exit 1'
               if host_busy else "exit 0")
    scripts = {"python": f'#!/bin/sh\nif [ "$2" = "dgbench.timing" ]; then {verdict}; fi\nexit 0\n',
               "dgbench": f'#!/bin/sh\necho "$@" >> {calls}\nexit 0\n'}
    for name, text in scripts.items():
        path = folder / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return folder


def _seed(tmp_path: Path, folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "BIN": str(folder), "TMPDIR": str(tmp_path)}
    return subprocess.run(["bash", str(SCRIPT), str(tmp_path / "board")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def test_seeding_refuses_to_start_on_a_loaded_host_in_one_line(tmp_path):
    done = _seed(tmp_path, _fake_bin(tmp_path, host_busy=True))
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and done.stderr.startswith("refused: host is loaded")
    assert not (tmp_path / "dgbench-calls").exists(), "nothing may run once the host is found loaded"


def test_seeding_refuses_a_second_copy_running_at_once(tmp_path):
    with open(tmp_path / "dgbench-seed-board.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = _seed(tmp_path, _fake_bin(tmp_path, host_busy=False))
    assert done.returncode == 1 and done.stderr.strip() == "refused: another scripts/seed_board.sh is running " \
                                                           "(one job at a time)"
    assert not (tmp_path / "dgbench-calls").exists()


def test_quiet_check_judges_the_cpu_time_others_took(monkeypatch, capsys):
    monkeypatch.setattr(timing, "host_load", lambda seconds: (0.9, 2.0))
    assert timing.main(["quiet-check"]) == 1
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and "90% busy" in line and f"bound {timing.QUIET_MAX_BUSY_SHARE:.0%}" in line
    monkeypatch.setattr(timing, "host_load", lambda seconds: (0.02, 2.0))  # a load average left by the last run
    assert timing.main(["quiet-check"]) == 0


def test_host_load_reports_a_share_between_zero_and_one():
    share, load = timing.host_load(0.2)
    assert 0.0 <= share <= 1.0 + 0.2 and load >= 0.0  # ticks are 10 ms: a short window may round up a little
