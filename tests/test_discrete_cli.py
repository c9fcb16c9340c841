"""`dgbench run` end to end on a snapshot store: prepare, train at P=2, a complete record on disk."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.store import open_store
from dgbench.loaders.smoothing import M_PRODUCT, smooth_adjacencies


def test_snapshot_run_at_two_ranks_writes_a_record(tmp_path: Path):
    runner = CliRunner()
    store = tmp_path / "s.zarr"
    prepared = runner.invoke(cli, ["--quiet", "prepare", "esdg-random", "--nodes", "256", "--snapshots", "8",
                                   "-o", str(store)])
    assert prepared.exit_code == 0, prepared.output
    result = runner.invoke(cli, ["--quiet", "run", "--scheme", "snapshot", "--model", "tmgcn", "--dataset", str(store),
                                 "--nproc", "2", "--epochs", "2", "--out", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    record = json.loads(next((tmp_path / "runs").glob("snapshot-tmgcn-*.json")).read_text())
    assert (record["family"], record["task"], record["world_size"]) == ("discrete", "link_prediction", 2)
    assert record["dataset"]["num_snapshots"] == 8 and len(record["epochs"]) == 2
    epoch = record["epochs"][0]
    assert epoch["comm_bytes"] > 0 and epoch["throughput"] > 0 and epoch["peak_rss_bytes"] > 0
    # edges of the input snapshots the model aggregates: TM-GCN's M-product (ESDG Table 1), window 3
    raw = open_store(store)
    snapshots = ((s.src, s.dst, s.weight) for s in raw.snapshots() if s.index < raw.num_snapshots - 1)
    assert epoch["work"] == sum(len(src) for src, _, _ in smooth_adjacencies(snapshots, raw.num_nodes, M_PRODUCT, 3))
    assert record["extra"]["smoothing"] == {"applied": M_PRODUCT, "window": 3, "targets": "raw next snapshot",
                                            "chosen_by": "model pairing (ESDG Table 1)", "features_smoothed": True}
    assert len(epoch["per_rank"]) == 2
    for split in ("val", "test"):
        assert {"accuracy", "ap", "auc", "mrr", "hits@1", "positives"} <= set(record["final_metrics"][split])
    assert record["evaluation"]["sets"][0]["name"] == "link-prediction-random-k9"  # the fixed set scored
    assert record["hyperparameters"]["hidden"] == 6


def test_unknown_scheme_is_one_clear_error(esdg_store: Path):
    result = CliRunner().invoke(cli, ["run", "--scheme", "pipeline", "--model", "tmgcn", "--dataset", str(esdg_store)])
    assert result.exit_code == 1
    assert "unknown discrete-time scheme 'pipeline'" in result.output


def test_single_refuses_several_ranks(esdg_store: Path, tmp_path: Path):
    result = CliRunner().invoke(cli, ["run", "--scheme", "checkpoint", "--model", "cdgcn", "--dataset", str(esdg_store),
                                      "--nproc", "2", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "runs on one process" in result.output


def test_list_shows_the_discrete_schemes_and_models():
    output = CliRunner().invoke(cli, ["list"]).output
    for name in ("single", "checkpoint", "snapshot", "vertex", "tmgcn", "evolvegcn-o", "cdgcn"):
        assert any(line.split()[:2] == [name, "discrete"] for line in output.splitlines()), name


@pytest.mark.slow
def test_same_program_under_torchrun_records_every_rank(esdg_store: Path, tmp_path: Path):
    """Multi-node path: torchrun starts the ranks, `dgbench run` joins them unchanged."""
    torchrun = Path(sys.executable).with_name("torchrun")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--master_port", str(port), "-m", "dgbench", "run",
                           "--scheme", "vertex", "--model", "cdgcn", "--dataset", str(esdg_store), "--epochs", "1",
                           "--out", str(tmp_path / "runs")], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(next((tmp_path / "runs").glob("vertex-cdgcn-*.json")).read_text())
    assert record["world_size"] == 2 and len(record["epochs"][0]["per_rank"]) == 2
    assert record["epochs"][0]["comm_bytes"] > 0


@pytest.mark.parametrize("options, fragment", [
    (["--scheme", "single", "--blocks", "4"], "--blocks 4: not an option of the discrete-time protocol, scheme "
                                              "'single' or model 'tmgcn' (taken by scheme 'checkpoint'"),
    (["--scheme", "vertex", "--transfer", "gd"], "--transfer gd: not an option of the discrete-time protocol, "
                                                 "scheme 'vertex'"),
    (["--scheme", "snapshot", "--memory-dim", "8"], "(taken by the continuous-time protocol)"),
    (["--scheme", "snapshot", "--nb", "0"], "--blocks 0: must be >= 1"),
    (["--scheme", "snapshot", "--transfer", "gd"], "--transfer gd: scheme 'snapshot' with --blocks 1"),
])
def test_an_option_the_scheme_would_ignore_is_refused(tmp_path: Path, esdg_store: Path, options, fragment):
    result = CliRunner().invoke(cli, ["--quiet", "run", "--model", "tmgcn", "--dataset", str(esdg_store),
                                      "--out", str(tmp_path / "runs"), *options])
    assert result.exit_code == 1 and fragment in result.stderr, result.output
    assert not (tmp_path / "runs").exists()  # refused before anything ran or was written
