"""A record's system block (docs/result-record.md): nodes, ranks and accelerators per node, CPU and
accelerator software, the user's --system-desc; hardware_class tells node shapes apart; both families
record their model's parameter count; records written before the block existed still validate."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import dgbench
from dgbench import records
from dgbench.cli import cli
from dgbench.leaderboard.schema import validate_record
from dgbench.records import REPO_ROOT, hardware_class, seal_record, system_description
from dgbench.registry import MODELS


def test_a_cpu_run_records_its_system_and_validates(esdg_store: Path, tmp_path: Path) -> None:
    record = dgbench.run(scheme="snapshot", model="tmgcn", dataset=esdg_store, nproc=2, epochs=1, out=tmp_path)
    system = record["system"]
    assert (system["nodes"], system["ranks_per_node"], system["accelerators_per_node"]) == (1, 2, 0)
    assert system["launcher"] == "dgbench" and system["cpu_cores"] >= 1 and system["memory_bytes"] > 0
    assert isinstance(system["cpu_model"], str) and system["cpu_model"]
    assert record["hardware_class"] == f"cpu-{record['environment']['cpu_count']}c"
    model = MODELS["discrete:tmgcn"].build(in_features=2, hidden=record["hyperparameters"]["hidden"])
    assert record["extra"]["parameters"] == sum(p.numel() for p in model.parameters()) > 0
    assert validate_record(json.loads(record.path.read_text())) == []


def test_a_continuous_run_records_its_parameter_count(stream_store: Path, tmp_path: Path) -> None:
    record = dgbench.run(scheme="single", model="jodie", dataset=stream_store, epochs=1, out=tmp_path)
    assert record["extra"]["parameters"] > 0 and record["system"]["ranks_per_node"] == 1


def test_system_desc_is_recorded_and_a_bad_one_refused_before_training(esdg_store: Path, tmp_path: Path) -> None:
    desc = tmp_path / "system.json"
    desc.write_text(json.dumps({"interconnect": "InfiniBand NDR 400 Gb/s", "nodes_in_rack": 4}))
    args = ["run", "--scheme", "single", "--model", "tmgcn", "--dataset", str(esdg_store), "--epochs", "1"]
    result = CliRunner().invoke(cli, [*args, "--system-desc", str(desc), "--out", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    written = json.loads(next((tmp_path / "runs").glob("*.json")).read_text())
    assert written["system"]["description"] == {"interconnect": "InfiniBand NDR 400 Gb/s", "nodes_in_rack": 4}
    assert validate_record(written) == []
    desc.write_text("[1, 2]")
    result = CliRunner().invoke(cli, [*args, "--system-desc", str(desc), "--out", str(tmp_path / "bad")])
    assert result.exit_code == 1 and "a system description is a JSON object" in result.output
    assert not (tmp_path / "bad").exists()


def test_under_torchrun_nodes_come_from_the_local_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    system = system_description(8, torch.device("cpu"))
    assert (system["nodes"], system["ranks_per_node"], system["launcher"]) == (2, 4, "torchrun")


@pytest.fixture
def eight_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """What torch would report on a node of eight H100s (so the GPU path is checked on any machine)."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    monkeypatch.setattr(records, "_nvidia_driver_version", lambda: "550.54.15")


def test_gpu_systems_record_versions_and_node_shape_in_the_hardware_class(eight_gpus: None,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    one_node = system_description(8, torch.device("cuda", 0))
    assert (one_node["nodes"], one_node["accelerators_per_node"]) == (1, 8)
    assert (one_node["nccl"], one_node["cudnn"], one_node["driver"]) == ("2.21.5", "90100", "550.54.15")
    env = {"device_name": "NVIDIA H100 80GB HBM3", "cpu_count": 64}
    assert hardware_class(env, one_node) == "NVIDIA H100 80GB HBM3 x8"
    eight_nodes = {**one_node, "nodes": 8, "ranks_per_node": 1, "accelerators_per_node": 1}
    assert hardware_class(env, eight_nodes) == "NVIDIA H100 80GB HBM3 x1"
    assert hardware_class(env) == "NVIDIA H100 80GB HBM3"  # a record from before the system block


def a_board_record() -> dict:
    path = next((REPO_ROOT / "leaderboards" / "tracks").glob("*/*.json"))
    return json.loads(path.read_text())


def test_records_from_before_the_system_block_still_validate() -> None:
    older = (json.loads(path.read_text()) for path in (REPO_ROOT / "leaderboards" / "tracks").glob("*/*.json"))
    record = next(r for r in older if "system" not in r)
    assert validate_record(record) == []


def test_a_system_block_that_disagrees_with_the_hardware_class_is_refused() -> None:
    record = a_board_record()
    record["environment"]["device_name"] = "NVIDIA H100 80GB HBM3"
    record["system"] = {"nodes": 1, "ranks_per_node": 1, "accelerators_per_node": 8}
    record["hardware_class"] = "NVIDIA H100 80GB HBM3"
    problems = [str(p) for p in validate_record(seal_record({k: v for k, v in record.items() if k != "seal"}))]
    assert problems == ["hardware_class: is 'NVIDIA H100 80GB HBM3' but the environment says "
                        "'NVIDIA H100 80GB HBM3 x8'"]
    record["hardware_class"] = "NVIDIA H100 80GB HBM3 x8"
    record["system"]["nodes"] = 0
    problems = [str(p) for p in validate_record(seal_record({k: v for k, v in record.items() if k != "seal"}))]
    assert problems and problems[0].startswith("system.nodes")
