"""What `dgbench run` prints and what the tools after it print about its record: the tracks it will fit
(said before training, in agreement with `submit`), a summary as its last line with no JSON unless
``--json``, and throughput in human units, events/s for streams, wherever it is printed."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench import progress
from dgbench.cli import cli
from dgbench.leaderboard.compare import comparison, format_comparison
from dgbench.leaderboard.fit import fit_line

NUMBER = r"\d+(\.\d+)?[kMG]?"  # 7.88k, 1.2M, 768
RATE = NUMBER + " {unit}/s"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def loud_run(monkeypatch, *args: str):
    """A run with progress on (its stderr shows the epoch lines); the quiet setting is restored after."""
    monkeypatch.delenv("DGBENCH_QUIET", raising=False)
    before = progress.is_quiet()
    try:
        return invoke("run", *args)
    finally:
        progress.set_quiet(before)


@pytest.fixture(scope="module")
def stream_run(tmp_path_factory) -> tuple[Path, str, str]:
    """One continuous-time run that fits every track: (record, stdout, stderr)."""
    folder = tmp_path_factory.mktemp("stream-run")
    store = folder / "stream.zarr"
    assert invoke("--quiet", "prepare", "stream", "--events", "600", "-o", str(store)).exit_code == 0
    result = invoke("--quiet", "run", "--scheme", "single", "--model", "jodie", "--dataset", str(store),
                    "--out", str(folder / "runs"))
    assert result.exit_code == 0, result.output
    return next((folder / "runs").glob("*.json")), result.stdout, result.stderr


def test_a_run_with_too_few_epochs_says_so_before_training_and_submit_agrees(esdg_store, tmp_path, monkeypatch):
    result = loud_run(monkeypatch, "--scheme", "single", "--model", "tmgcn", "--dataset", str(esdg_store),
                      "--epochs", "3", "--out", str(tmp_path / "runs"))
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith("tracks: "))
    first_epoch = next(i for i, line in enumerate(lines) if "epoch 1/3" in line)
    assert said < first_epoch, "the tracks line must come before training"
    assert lines[said] == fit_line(3, 0, trains=True)
    assert lines[said].startswith("tracks: 3 epochs fit accuracy (throughput, scaling: needs at least 4")
    assert "--epochs 4 fits every track" in lines[said]

    record = next((tmp_path / "runs").glob("*.json"))
    submitted = invoke("--quiet", "submit", str(record), "--board", str(tmp_path / "board"), "--allow-dirty")
    assert submitted.exit_code == 0, submitted.output
    entered = {m.group(1) for m in re.finditer(r"^accepted \S+ -> tracks/(\w+)/", submitted.stdout, re.M)}
    refused = {m.group(1) for m in re.finditer(r"^not entered on (\w+): ", submitted.stdout, re.M)}
    assert entered == {"accuracy"} and refused == {"throughput", "scaling"}
    assert "needs at least 4 (1 warm-up + 3 timed)" in submitted.stdout


def test_a_baseline_says_accuracy_track_only_at_run_start_and_at_submit(esdg_store, tmp_path):
    result = invoke("--quiet", "run", "--scheme", "single", "--model", "persistence", "--dataset", str(esdg_store),
                    "--out", str(tmp_path / "runs"))
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("baseline: accuracy track only")
    record = next((tmp_path / "runs").glob("*.json"))
    submitted = invoke("--quiet", "submit", str(record), "--board", str(tmp_path / "board"), "--allow-dirty")
    assert submitted.exit_code == 0, submitted.output
    assert submitted.stdout.splitlines()[-1] == f"baseline: accuracy track only: {record}"
    assert "not entered" not in submitted.stdout and submitted.stdout.count("accepted") == 1


def test_the_last_line_a_run_prints_is_its_summary_and_no_json_unless_asked(esdg_store, tmp_path, monkeypatch):
    result = loud_run(monkeypatch, "--scheme", "single", "--model", "tmgcn", "--dataset", str(esdg_store),
                      "--out", str(tmp_path / "runs"))
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 1 and "{" not in result.stdout
    last = [line.strip() for line in result.output.splitlines() if line.strip()][-1]  # a cleared bar leaves blanks
    assert last.startswith("wrote ") and "P=1" in last and "test ap" in last, last

    scripted = invoke("--quiet", "run", "--scheme", "single", "--model", "tmgcn", "--dataset", str(esdg_store),
                      "--out", str(tmp_path / "scripted"), "--json")
    assert scripted.exit_code == 0, scripted.output
    record = json.loads(scripted.stdout)
    written = next((tmp_path / "scripted").glob("*.json"))
    assert record == json.loads(written.read_text())
    assert scripted.stderr.splitlines()[-1].startswith(f"wrote {written}")


def test_each_seed_of_seeds_is_in_its_file_name(esdg_store, tmp_path):
    result = invoke("--quiet", "run", "--scheme", "single", "--model", "persistence", "--dataset", str(esdg_store),
                    "--seeds", "0,1,2", "--out", str(tmp_path / "runs"))
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (tmp_path / "runs").glob("*.json"))
    assert [re.search(r"-seed(\d)\.json$", n).group(1) for n in names] == ["0", "1", "2"], names
    assert "already exists" not in result.stderr


def test_a_stream_run_reads_events_per_second_everywhere_it_is_printed(stream_run, tmp_path):
    record, stdout, _ = stream_run
    events = re.compile(RATE.format(unit="events"))
    assert events.search(stdout.splitlines()[-1]) and "edges/s" not in stdout

    text = format_comparison(comparison([record, record]), "text", width=100)
    assert re.search(r"^events/s\s+" + NUMBER + r"\s", text, re.M), text
    assert "edges/s" not in text

    board = tmp_path / "board"
    assert invoke("--quiet", "submit", str(record), "--board", str(board), "--allow-dirty").exit_code == 0
    for fmt in ("md", "text"):
        rendered = invoke("leaderboard", "--board", str(board), "--format", fmt).stdout
        throughput = rendered.split("Throughput — ", 1)[1].split("Scaling — ")[0]  # the tables, not the track text
        assert events.search(throughput) and "edges/s" not in throughput, throughput


def test_a_stream_scaling_series_reads_events_per_second_on_every_board_format(stream_run, tmp_path):
    record, _, _ = stream_run
    board = tmp_path / "board"
    assert invoke("--quiet", "submit", str(record), "--board", str(board), "--allow-dirty").exit_code == 0
    events = re.compile(RATE.format(unit="events"))
    for fmt in ("md", "text", "html"):
        rendered = invoke("leaderboard", "--board", str(board), "--format", fmt).stdout
        scaling = rendered.split("Scaling — ", 1)[1].split("Accuracy — ")[0]  # the scaling tables, not the track text
        assert events.search(scaling) and "edges/s" not in scaling.lower(), (fmt, scaling)
    data = json.loads(invoke("leaderboard", "--board", str(board), "--format", "json").stdout)
    assert [s["unit"] for s in data["scaling"]] == ["events/s"]


def test_the_epoch_lines_show_validation_never_test(esdg_store, tmp_path, monkeypatch):
    result = loud_run(monkeypatch, "--scheme", "single", "--model", "tmgcn", "--dataset", str(esdg_store),
                      "--epochs", "2", "--out", str(tmp_path / "runs"))
    epoch_lines = [line for line in result.stderr.splitlines() if "single/tmgcn epoch " in line]
    assert epoch_lines and all("val ap" in line and "test" not in line for line in epoch_lines), epoch_lines
    assert re.search(RATE.format(unit="edges"), epoch_lines[-1])


def test_eval_every_shows_validation_when_scored_and_names_the_epoch_test_was_scored_on(esdg_store, tmp_path,
                                                                                      monkeypatch):
    result = loud_run(monkeypatch, "--scheme", "single", "--model", "tmgcn", "--dataset", str(esdg_store),
                      "--epochs", "4", "--eval-every", "2", "--out", str(tmp_path / "runs"))
    assert result.exit_code == 0, result.output
    epoch_lines = [line for line in result.stderr.splitlines() if "single/tmgcn epoch " in line]
    assert ["val ap" in line for line in epoch_lines] == [False, True, False, True], epoch_lines
    assert not re.search(r"test(:\w+)? (ap|auc|mrr|accuracy)", result.stderr), result.stderr  # no test score
    assert re.search(r"best val ap \d\.\d{4} at epoch [24]/4; test scored once, on that epoch's state", result.stderr)
    assert "test ap" in result.stdout.splitlines()[-1]  # the result, once, in the summary


def test_compare_groups_comparable_runs_and_names_the_rest(stream_run, esdg_store, tmp_path):
    record, _, _ = stream_run
    other = tmp_path / "esdg.json"
    assert invoke("--quiet", "run", "--scheme", "single", "--model", "tmgcn", "--dataset", str(esdg_store),
                  "--out", str(other)).exit_code == 0
    text = format_comparison(comparison([record, record, other]), "text", width=80)
    assert text.startswith("group 1: jodie on stream")
    assert f"not compared (no run of the same store, model, task and hyper-parameters):\n  {other}\n" in text
    assert max(len(line) for line in text.splitlines() if not line.startswith("  ")) <= 80
