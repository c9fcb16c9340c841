"""`dgbench run` end to end on an edge stream: a sven run at P=2 writes a complete record."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from dgbench.cli import cli


def test_sven_run_writes_a_record(tmp_path: Path):
    runner = CliRunner()
    store = tmp_path / "st.zarr"
    assert runner.invoke(cli, ["--quiet", "prepare", "stream", "-o", str(store), "--events", "1200",
                               "--users", "60", "--items", "40"]).exit_code == 0
    result = runner.invoke(cli, ["--quiet", "run", "--scheme", "sven", "--model", "tgn", "--dataset", str(store),
                                 "--nproc", "2", "--epochs", "1", "--batch-size", "300", "--memory-dim", "16",
                                 "--out", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    record = json.loads(next((tmp_path / "runs").glob("sven-tgn-*.json")).read_text())
    assert (record["family"], record["scheme"], record["model"], record["world_size"]) == \
        ("continuous", "sven", "tgn", 2)
    epoch = record["epochs"][0]
    split = epoch["per_iteration"]
    assert split["iteration_s"] >= split["nm_communication_s"] + split["grad_allreduce_s"] - 1e-9
    assert epoch["nm_dispatch_bytes"] > 0 and epoch["nm_aggregate_bytes"] > 0 and epoch["grad_allreduce_bytes"] > 0
    assert epoch["events_per_s"] > 0 and epoch["peak_rss_bytes"] > 0
    extra = record["extra"]
    assert 0 <= extra["eta1"] < 1 and 0 <= extra["eta2"] < 1
    assert extra["partition"] == "reflexbicut" and extra["balance"]["balance_cost"] > 0
    assert extra["microbatches"]["n"] >= 1  # chosen by Eq. 12
    assert 0 <= record["final_metrics"]["test"]["ap"] <= 1


def test_bad_model_is_one_clear_error(stream_store: Path):
    result = CliRunner().invoke(cli, ["run", "--scheme", "sven", "--model", "gcn", "--dataset", str(stream_store)])
    assert result.exit_code == 1
    assert "unknown continuous-time model 'gcn'" in result.output


def test_list_shows_the_continuous_schemes_and_models():
    output = CliRunner().invoke(cli, ["list"]).output
    for name in ("depcache", "depcomm", "sven", "tgn", "jodie", "apan"):
        assert any(line.split()[:2] == [name, "continuous"] for line in output.splitlines()), name


def test_async_allreduce_outside_sven_is_refused(tmp_path: Path, stream_store: Path):
    result = CliRunner().invoke(cli, ["--quiet", "run", "--scheme", "depcomm", "--model", "tgn", "--dataset",
                                      str(stream_store), "--async-allreduce", "--out", str(tmp_path / "runs")])
    refusal = "--async-allreduce True: not an option of the continuous-time protocol, scheme 'depcomm'"
    assert result.exit_code == 1 and refusal in result.stderr and "(taken by scheme 'sven')" in result.stderr, \
        result.output
    assert not (tmp_path / "runs").exists()


def test_a_record_states_the_partition_that_ran(tmp_path: Path, stream_store: Path):
    result = CliRunner().invoke(cli, ["--quiet", "run", "--scheme", "depcomm", "--model", "jodie", "--dataset",
                                      str(stream_store), "--nproc", "2", "--epochs", "1", "--memory-dim", "8",
                                      "--out", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    record = json.loads(next((tmp_path / "runs").glob("*.json")).read_text())
    # depcomm's partition option defaults to sven's (HPDC §3.1.3): the record says what ran
    assert record["hyperparameters"]["partition"] == record["extra"]["partition"] == "reflexbicut"
    sent = record["extra"]["balance"]["measured_nm_sent_bytes_per_rank"]
    assert len(sent) == 2 and record["extra"]["balance"]["measured_max_nm_sent_bytes"] == max(sent) > 0
    last = record["epochs"][-1]
    assert sum(sent) == last["nm_dispatch_bytes"] + last["nm_aggregate_bytes"]
    assert "microbatches" not in record["hyperparameters"] and record["extra"]["microbatches"] == {}  # no pipelining
