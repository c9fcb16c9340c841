"""The `dgbench` command line: prepare/info/validate/list, one-line errors, --quiet."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.store import open_store

ESDG = ["prepare", "esdg-random", "--nodes", "32", "--snapshots", "3", "--edge-factor", "2", "--seed", "5"]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def assert_one_line_error(result, *fragments: str, exit_code: int = 1) -> None:
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no escaped exception
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    error_lines = [line for line in lines if line.startswith(("error:", "Error:"))]
    assert len(error_lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in error_lines[0]


def test_prepare_info_validate(runner, tmp_path):
    out = tmp_path / "e.zarr"
    prepared = runner.invoke(cli, ["--quiet", *ESDG, "--out", str(out)])
    assert prepared.exit_code == 0, prepared.output
    store = open_store(out)
    assert prepared.stdout.startswith(f"wrote {out}") and store.fingerprint[:16] in prepared.stdout
    assert store.num_snapshots == 3 and store.num_edges == 3 * 64

    info = runner.invoke(cli, ["info", str(out)])
    assert info.exit_code == 0
    assert f"fingerprint  {store.fingerprint}" in info.stdout and "snapshots    3" in info.stdout
    summary = json.loads(runner.invoke(cli, ["info", "--json", str(out)]).stdout)
    assert summary["num_edges"] == 192 and summary["edges_per_snapshot"] == {"min": 64, "median": 64.0, "max": 64}
    assert summary["provenance"]["params"]["seed"] == 5

    valid = runner.invoke(cli, ["validate", str(out)])
    assert valid.exit_code == 0 and valid.stdout.strip() == f"valid: {out}"


def test_info_of_stream_store(runner, stream_store):
    result = runner.invoke(cli, ["info", "--json", str(stream_store)])
    summary = json.loads(result.stdout)
    assert summary["kind"] == "stream" and summary["num_events"] == 2000 and summary["edge_feature_dim"] == 4
    assert summary["time_span"]["first"] < summary["time_span"]["last"]


def test_list_shows_generators(runner):
    result = runner.invoke(cli, ["list"])
    assert result.exit_code == 0
    for name in ("esdg-random", "nonuniform", "static-to-dynamic", "stream"):
        assert f"  {name} " in result.stdout


def test_existing_store_needs_overwrite(runner, tmp_path):
    out = tmp_path / "e.zarr"
    assert runner.invoke(cli, ["--quiet", *ESDG, "--out", str(out)]).exit_code == 0
    first = open_store(out).fingerprint
    again = runner.invoke(cli, ["--quiet", *ESDG, "--out", str(out), "--seed", "6"])
    assert_one_line_error(again, str(out), "already exists", "--overwrite")
    assert open_store(out).fingerprint == first
    replaced = runner.invoke(cli, ["--quiet", *ESDG, "--out", str(out), "--seed", "6", "--overwrite"])
    assert replaced.exit_code == 0 and open_store(out).fingerprint != first


def test_not_a_store(runner, tmp_path):
    assert_one_line_error(runner.invoke(cli, ["info", str(tmp_path)]), str(tmp_path), "not a dgbench store")
    assert_one_line_error(runner.invoke(cli, ["info", str(tmp_path / "absent.zarr")]), "does not exist")


def test_bad_option_is_a_usage_error(runner, tmp_path):
    result = runner.invoke(cli, ["prepare", "esdg-random", "--nodes", "many", "--out", str(tmp_path / "x.zarr")])
    assert_one_line_error(result, "--nodes", exit_code=2)
    unknown = runner.invoke(cli, ["prepare", "no-such-generator"])
    assert unknown.exit_code == 2 and "no-such-generator" in unknown.stderr
    assert not (tmp_path / "x.zarr").exists()


def test_generator_error_is_one_line(runner, tmp_path):
    result = runner.invoke(cli, ["--quiet", "prepare", "static-to-dynamic", "--trend", "sideways",
                                 "--out", str(tmp_path / "x.zarr")])
    assert_one_line_error(result, "--trend", "sideways")


def test_quiet_silences_progress_bars(runner, tmp_path, monkeypatch):
    monkeypatch.delenv("DGBENCH_QUIET", raising=False)  # the test session's own quiet setting
    loud = runner.invoke(cli, [*ESDG, "--out", str(tmp_path / "loud.zarr")])
    quiet = runner.invoke(cli, ["--quiet", *ESDG, "--out", str(tmp_path / "quiet.zarr")])
    assert loud.exit_code == quiet.exit_code == 0
    assert "esdg-random" in loud.stderr  # the progress bar's label
    assert quiet.stderr == ""
    monkeypatch.setenv("DGBENCH_QUIET", "1")
    by_environment = runner.invoke(cli, [*ESDG, "--out", str(tmp_path / "environment.zarr")])
    assert by_environment.exit_code == 0 and by_environment.stderr == ""


def test_unwritable_out_is_one_line_naming_the_path(runner, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = runner.invoke(cli, ["--quiet", *ESDG, "--out", str(blocker / "x.zarr")])
    assert_one_line_error(result, str(blocker))


def test_info_on_a_damaged_stream_is_one_line_naming_the_array(runner, stream_store):
    chunk = stream_store / "t" / "c" / "0"
    chunk.write_bytes(chunk.read_bytes()[:40])
    assert_one_line_error(runner.invoke(cli, ["info", str(stream_store)]), "array 't'", "damaged")


def test_run_help_groups_options_by_owner(runner):
    plain = runner.invoke(cli, ["run", "--help"]).stdout
    titles = [line for line in plain.splitlines() if line.endswith(":") and not line.startswith((" ", "Usage"))]
    assert [t.split(" (")[0].rstrip(":") for t in titles] == ["Run options", "Task options", "Scheme options",
                                                               "Model options"], titles
    assert "--epochs" in plain.split("Run options:")[1].split("Task options")[0]
    assert "--microbatches" in plain and "Pipelining granularity" not in plain  # a scheme's names, not its help
    assert len(plain.splitlines()) < 150


def test_run_help_for_a_scheme_shows_its_own_options_first_and_no_other_schemes(runner):
    sven = runner.invoke(cli, ["run", "--scheme", "sven", "--help"]).stdout
    first_section = sven.split("Options of scheme sven:")[1].split("Run options:")[0]
    assert "--partition" in first_section and sven.index("Options of scheme sven:") < sven.index("Run options:")
    assert "--nb " not in sven  # the checkpoint scheme's blocks
    assert len(sven.splitlines()) < len(runner.invoke(cli, ["run", "--help"]).stdout.splitlines())
