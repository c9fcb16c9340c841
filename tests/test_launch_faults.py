"""Issue 19, jobs that end: a stopped rank, SIGINT/SIGTERM to the launcher and --nproc beyond the machine.

The signal cases are scripted: a launcher runs in its own process group (a subprocess), the test
signals it and checks that it exits non-zero within seconds and that none of its ranks is left.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import dgbench.launch as launch_module
from dgbench.errors import DgbenchError

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 5

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import torch.distributed as dist
    from dgbench.launch import launch

    def started(ctx, folder):
        with open(os.path.join(folder, f"rank{ctx.rank}.parent"), "w") as f:
            f.write(str(os.getppid()))
        with open(os.path.join(folder, f"rank{ctx.rank}.pid"), "w") as f:
            f.write(str(os.getpid()))

    def stop_rank_one(ctx, folder):
        started(ctx, folder)
        dist.barrier()
        if ctx.rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        dist.barrier()
        return ctx.rank

    def train_forever(ctx, folder):
        started(ctx, folder)
        while True:
            if ctx.world_size > 1:
                dist.barrier()
            time.sleep(0.05)

    class Held:  # as the discrete trainer's saved-activation meter: work inside __del__
        def __del__(self):
            time.sleep(0.01)

    def finalizers_forever(ctx, folder):
        started(ctx, folder)
        until = time.monotonic() + 60
        while time.monotonic() < until:
            Held()
            time.sleep(0.001)
        return "finished"

    if __name__ == "__main__":
        job, nproc, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
        try:
            print(launch(globals()[job], nproc, (folder,), timeout_s=float(sys.argv[4])))
        except Exception as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(1)
""")


class Launcher:
    """A launcher process in its own session, its rank pids, and cleanup that never leaves a process."""

    def __init__(self, tmp_path: Path, job: str, nproc: int, timeout_s: float = TIMEOUT_S):
        script = tmp_path / "job.py"
        script.write_text(SCRIPT)
        self.folder, self.nproc = tmp_path, nproc
        self.proc = subprocess.Popen([sys.executable, str(script), job, str(nproc), str(tmp_path), str(timeout_s)],
                                     cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def wait_started(self, limit_s: float = 120) -> list[int]:
        until = time.monotonic() + limit_s
        while time.monotonic() < until:
            files = [self.folder / f"rank{r}.pid" for r in range(self.nproc)]
            if all(f.exists() and f.read_text() for f in files):
                return [int(f.read_text()) for f in files]
            assert self.proc.poll() is None, self.proc.communicate()
            time.sleep(0.1)
        raise AssertionError("ranks did not start")

    def exit_within(self, seconds: float) -> tuple[int, str]:
        try:
            _, err = self.proc.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise AssertionError(f"the launcher did not exit within {seconds} s")
        return self.proc.returncode, err

    def kill_all(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def process_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pids: list[int], settle_s: float = 5.0) -> list[int]:
    """The pids still running (zombies count as gone) after up to ``settle_s``."""
    until = time.monotonic() + settle_s
    while True:
        running = [pid for pid in pids if process_state(pid) not in (None, "Z")]
        if not running or time.monotonic() > until:
            return running
        time.sleep(0.1)


@pytest.fixture
def launcher_factory(tmp_path):
    made: list[Launcher] = []

    def make(job: str, nproc: int) -> Launcher:
        made.append(Launcher(tmp_path, job, nproc))
        return made[-1]

    yield make
    for launcher in made:  # the whole group, also where the launcher is gone and a rank or its server is not
        launcher.kill_all()


def test_a_stopped_rank_ends_the_whole_job_within_the_timeout(launcher_factory):
    """Issue case 8: --timeout 5 and one rank SIGSTOPped (was: error at 37 s, then the launcher never exited)."""
    launcher = launcher_factory("stop_rank_one", 2)
    pids = launcher.wait_started()
    code, err = launcher.exit_within(TIMEOUT_S + 15)
    assert code == 1 and "rank 1" in err and "stopped" in err, err
    assert alive(pids) == []


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "group SIGINT"])
def test_a_signal_to_the_launcher_stops_every_rank(launcher_factory, how):
    """Issue case 9: SIGINT printed 'Aborted!' and kept running; SIGTERM left ranks training as orphans."""
    launcher = launcher_factory("train_forever", 2)
    pids = launcher.wait_started()
    time.sleep(0.5)
    if how == "group SIGINT":  # Ctrl-C in a terminal: the launcher and every rank get SIGINT
        os.killpg(launcher.proc.pid, signal.SIGINT)
    else:
        launcher.proc.send_signal(getattr(signal, how))
    code, err = launcher.exit_within(15)
    assert code == 1 and f"interrupted by {how.split()[-1]}" in err and "no record was written" in err, err
    assert alive(pids) == []


def test_a_killed_launcher_leaves_no_rank_and_no_fork_server(launcher_factory):
    """SIGKILL runs no handler: the ranks die with their parent, the fork server, which exits with the launcher."""
    launcher = launcher_factory("train_forever", 2)
    pids = launcher.wait_started()
    parents = {int((launcher.folder / f"rank{r}.parent").read_text()) for r in range(2)} - {launcher.proc.pid}
    launcher.proc.kill()
    launcher.proc.wait()
    assert alive(pids + sorted(parents)) == []


def test_an_interrupt_landing_in_a_finalizer_is_not_swallowed(launcher_factory):
    """Issue case 9: a SIGINT raised inside a __del__ is dropped by Python ('Exception ignored in ...')."""
    launcher = launcher_factory("finalizers_forever", 1)
    launcher.wait_started()
    time.sleep(0.5)
    launcher.proc.send_signal(signal.SIGINT)
    code, err = launcher.exit_within(10)
    assert code == 1 and "interrupted by SIGINT" in err, err


@pytest.mark.slow  # the default run checks this on the README tour's 2-rank runs (test_readme_tour.py::
# test_the_readme_tour_runs_as_written): a CLI run here is another ~17 s of interpreter and rank start-up
def test_a_successful_run_ends_without_a_traceback_from_stopped_ranks(tmp_path, esdg_store):
    """The launcher stops ranks still in their exit-time finalizers once it has every result: that ended each
    successful multi-rank run with "Exception ignored ... SystemExit: 143" on stderr."""
    done = subprocess.run([sys.executable, "-m", "dgbench", "--quiet", "run", "--scheme", "snapshot", "--model",
                           "tmgcn", "--dataset", str(esdg_store), "--nproc", "2", "--epochs", "1", "--out",
                           str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "SystemExit" not in done.stderr, done.stderr


def test_nproc_beyond_the_machine_is_refused_before_starting_anything(monkeypatch):
    """Issue case 10: --nproc 100000 started processes until the kernel killed them."""
    def no_processes(*args, **kwargs):
        raise AssertionError("a process would have been started")

    monkeypatch.setattr(launch_module.mp, "get_context", no_processes)
    monkeypatch.delenv(launch_module.FORCE_ENV, raising=False)
    with pytest.raises(DgbenchError, match=r"--nproc 100000: this machine holds at most \d+ ranks .*"
                                           rf"{launch_module.FORCE_ENV}=1"):
        launch_module.launch(lambda ctx: None, 100000, backend="gloo")


def test_the_bound_can_be_forced_and_more_ranks_than_cores_warns(monkeypatch):
    monkeypatch.setattr(launch_module, "_cores", lambda: 2)
    monkeypatch.setattr(launch_module, "_available_memory_bytes", lambda: 3 * 2**30)
    assert launch_module.check_nproc(2, "gloo", force=False) is None
    warning = launch_module.check_nproc(3, "gloo", force=False)
    assert warning is not None and "3 ranks on 2 cores" in warning
    with pytest.raises(DgbenchError, match=r"at most 12 ranks \(3.0 GiB available / 256 MiB per rank\)"):
        launch_module.check_nproc(13, "gloo", force=False)
    monkeypatch.setattr(launch_module, "_available_memory_bytes", lambda: 64 * 2**30)
    with pytest.raises(DgbenchError, match=r"at most 16 ranks \(2 cores x 8 ranks per core\)"):
        launch_module.check_nproc(17, "gloo", force=False)
    assert "17 ranks on 2 cores" in launch_module.check_nproc(17, "gloo", force=True)
    monkeypatch.setenv(launch_module.FORCE_ENV, "1")
    assert "1000 ranks" in launch_module.check_nproc(1000, "gloo")
