"""`dgbench run --config FILE` and `--print-config`, and a record's config that re-runs it
(docs/python-api.md, docs/result-record.md)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import dgbench
from dgbench.cli import cli


def invoke(*args: str):
    return CliRunner().invoke(cli, ["run", *args])


def test_print_config_spells_out_every_option_and_reruns_as_a_config_file(esdg_store: Path, tmp_path: Path) -> None:
    printed = invoke("--scheme", "single", "--model", "tmgcn", "--dataset", str(esdg_store), "--epochs", "1",
                     "--hidden", "4", "--out", str(tmp_path / "runs"), "--print-config")
    assert printed.exit_code == 0, printed.output
    config = json.loads(printed.output)
    assert (config["scheme"], config["epochs"], config["hidden"], config["window"]) == ("single", 1, 4, 3)
    assert not (tmp_path / "runs").exists()  # printed, not run
    (tmp_path / "run.json").write_text(printed.output)
    result = invoke("--config", str(tmp_path / "run.json"))
    assert result.exit_code == 0, result.output
    record = json.loads(next((tmp_path / "runs").glob("*.json")).read_text())
    assert record["hyperparameters"] == {k: v for k, v in config.items() if k in record["hyperparameters"]}
    assert set(record["hyperparameters"]) <= set(config)


def test_the_command_line_wins_over_the_config_file(esdg_store: Path, tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"scheme": "single", "model": "tmgcn", "dataset": str(esdg_store),
                                                   "epochs": 3, "window": 2}))
    result = invoke("--config", str(tmp_path / "run.json"), "--epochs", "1", "--print-config")
    assert result.exit_code == 0, result.output
    assert (json.loads(result.output)["epochs"], json.loads(result.output)["window"]) == (1, 2)


@pytest.mark.parametrize("content, message", [
    ({"model": "tmgcn"}, "the run names no scheme, dataset: give --scheme, --dataset"),
    ({"scheme": "single", "model": "tmgcn", "dataset": "{store}", "blocks": 2}, "--blocks 2: not an option of"),
    ([1, 2], "a run config is one mapping"),
])
def test_a_bad_config_file_is_one_line(esdg_store: Path, tmp_path: Path, content, message: str) -> None:
    text = json.dumps(content).replace("{store}", str(esdg_store))
    (tmp_path / "run.json").write_text(text)
    result = invoke("--config", str(tmp_path / "run.json"), "--out", str(tmp_path / "runs"))
    assert result.exit_code == 1 and message in result.output, result.output
    assert not (tmp_path / "runs").exists()


def test_a_yaml_config_without_pyyaml_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)
    (tmp_path / "run.yaml").write_text("scheme: single\n")
    result = invoke("--config", str(tmp_path / "run.yaml"))
    assert result.exit_code == 1 and "needs PyYAML (pip install pyyaml); or write it as JSON" in result.output


def test_a_records_config_reruns_it(esdg_store: Path, tmp_path: Path) -> None:
    first = dgbench.run(scheme="single", model="tmgcn", dataset=esdg_store, epochs=1, hidden=4, window=2, seed=3,
                        out=tmp_path / "a")
    config = json.loads(json.dumps(first.config()))  # as a JSON file would hold it
    again = dgbench.run(**{**config, "out": tmp_path / "b"})
    assert again["hyperparameters"] == first["hyperparameters"]
    assert [e["loss"] for e in again["epochs"]] == [e["loss"] for e in first["epochs"]]
    assert again.metrics == first.metrics
