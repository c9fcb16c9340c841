"""The public Python API (docs/python-api.md): its example runs as written, and each name behaves as the
command it mirrors (same refusals, same record figures, TGB's ranking rule)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import dgbench
from dgbench.errors import DgbenchError
from dgbench.records import REPO_ROOT


def doc_example() -> str:
    text = (REPO_ROOT / "docs" / "python-api.md").read_text()
    section = text[text.index("## Example"):]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "docs/python-api.md's example has no ```python block"
    return found.group(1)


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "DGBENCH_QUIET": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_the_documented_example_runs_as_written(tmp_path: Path) -> None:
    result = run_python(doc_example(), tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("stream 600 ")
    assert lines[1].startswith("single-jodie-") and lines[1].endswith(tuple("0123456789"))
    assert re.fullmatch(r"MRR 0\.\d{4}  Hits@1 0\.\d{4}  set [0-9a-f]{12}", lines[2])
    assert set(eval(lines[3])) == {"mrr"}  # noqa: S307 - the example prints a dict of floats
    records = list((tmp_path / "runs" / "api").glob("*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["model"] == "jodie"


def test_import_dgbench_loads_neither_torch_nor_zarr(tmp_path: Path) -> None:
    result = run_python("import sys, dgbench; print(sorted(m for m in ('torch', 'zarr', 'dgbench.trainers', 'pandas') "
                        "if m in sys.modules)); dgbench.open_store", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_prepare_takes_the_commands_options_by_python_name(tmp_path: Path) -> None:
    store = dgbench.prepare("esdg-random", out=tmp_path / "g.zarr", nodes=32, snapshots=5, edge_factor="2")
    assert (store.kind, store.num_nodes, store.num_snapshots) == ("snapshots", 32, 5)
    with pytest.raises(DgbenchError, match="takes no option nodez"):
        dgbench.prepare("esdg-random", out=tmp_path / "h.zarr", nodez=32)
    with pytest.raises(DgbenchError, match="nothing to prepare called 'nope'"):
        dgbench.prepare("nope", out=tmp_path / "i.zarr")
    with pytest.raises(DgbenchError, match="prepare 'esdg-random'"):
        dgbench.prepare("esdg-random", out=tmp_path / "j.zarr", nodes="many")


def test_run_refuses_what_the_command_refuses(esdg_store: Path, stream_store: Path, tmp_path: Path) -> None:
    with pytest.raises(DgbenchError, match="no-such-option"):
        dgbench.run(scheme="single", model="tmgcn", dataset=esdg_store, epochs=1, out=tmp_path,
                    **{"no-such-option": 1})
    with pytest.raises(DgbenchError, match="'jodie' is a continuous-time model"):
        dgbench.run(scheme="single", model="jodie", dataset=esdg_store, epochs=1, out=tmp_path)
    assert not list(tmp_path.glob("*.json"))


def test_evaluator_on_edgebank_scores_gives_the_edgebank_records_figures(stream_store: Path,
                                                                          tmp_path: Path) -> None:
    from dgbench.models.edgebank import EdgeBank
    record = dgbench.run(scheme="single", model="edgebank", dataset=stream_store, out=tmp_path)
    assert isinstance(record, dgbench.Record) and record.path.exists()
    assert json.loads(record.path.read_text())["final_metrics"] == record.metrics
    bank = EdgeBank()
    bank.index(stream_store)
    evaluator = dgbench.Evaluator(stream_store)
    assert evaluator.fingerprint == record["evaluation"]["fingerprint"]
    edges = evaluator.edges()
    when = np.broadcast_to(edges["t"][:, None], edges["negative_dst"].shape)
    negative = bank.score(edges["negative_src"].ravel(), edges["negative_dst"].ravel(), when.ravel())
    figures = evaluator.eval({"y_pred_pos": torch.tensor(bank.score(edges["src"], edges["dst"], edges["t"])),
                              "y_pred_neg": negative.reshape(edges["negative_dst"].shape)})
    assert figures == pytest.approx(record.metrics["test"], nan_ok=True)


def tgb_ranks(positive: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """TGB's rule, written out: 1 + (#negatives above + #negatives at least the positive) / 2."""
    above = (negative > positive[:, None]).sum(axis=1)
    at_least = (negative >= positive[:, None]).sum(axis=1)
    return 1 + 0.5 * (above + at_least)


def test_evaluator_ranks_as_tgb_with_ties_averaged_and_empty_slots_ignored(stream_store: Path) -> None:
    evaluator = dgbench.Evaluator(stream_store, split="val", negatives="random", eval_negatives=4)
    edges = evaluator.edges()
    rng = np.random.default_rng(0)
    positive = rng.integers(0, 3, len(edges["src"])).astype(float)  # few values: many ties
    negative = rng.integers(0, 3, edges["negative_dst"].shape).astype(float)
    assert (edges["negative_dst"] >= 0).all()
    ranks = tgb_ranks(positive, negative)
    figures = evaluator.eval({"y_pred_pos": positive, "y_pred_neg": negative})
    assert figures["mrr"] == pytest.approx((1 / ranks).mean())
    assert figures["hits@3"] == pytest.approx((ranks <= 3).mean())
    assert "hits@10" not in figures  # K = 4: every rank is at most 5
    assert evaluator.eval({"y_pred_pos": positive, "y_pred_neg": negative, "eval_metric": ["mrr"]}) == \
        {"mrr": figures["mrr"]}


def test_evaluator_refuses_scores_of_the_wrong_shape_or_missing(stream_store: Path) -> None:
    evaluator = dgbench.Evaluator(stream_store)
    n, k = evaluator.edges()["negative_dst"].shape
    with pytest.raises(DgbenchError, match=f"{n} positives with {k} negatives"):
        evaluator.eval({"y_pred_pos": np.zeros(n), "y_pred_neg": np.zeros((n, k + 1))})
    with pytest.raises(DgbenchError, match="lacks y_pred_neg"):
        evaluator.eval({"y_pred_pos": np.zeros(n)})
    with pytest.raises(DgbenchError, match="NaN"):
        evaluator.eval({"y_pred_pos": np.full(n, np.nan), "y_pred_neg": np.zeros((n, k))})
    with pytest.raises(DgbenchError, match="no metric mmr"):
        evaluator.eval({"y_pred_pos": np.zeros(n), "y_pred_neg": np.zeros((n, k)), "eval_metric": ["mmr"]})


def test_board_rows_are_one_flat_row_per_record(tmp_path: Path) -> None:
    from dgbench.leaderboard.board import submit
    from tests.leaderboard_records import make_record, write
    record = make_record(scheme="snapshot", world_size=2, test_ap=0.81)
    submit(write(record, tmp_path / "staging" / "r.json"), tmp_path / "board")
    rows = dgbench.board_rows(tmp_path / "board")
    assert rows and {row["track"] for row in rows} >= {"accuracy"}
    row = rows[0]
    assert (row["scheme"], row["world_size"], row["test_ap"]) == ("snapshot", 2, 0.81)
    assert row["fingerprint"] == record["dataset"]["fingerprint"]


def test_board_without_pandas_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    with pytest.raises(ImportError, match=r"needs pandas \(pip install pandas\)"):
        dgbench.board(tmp_path)


def test_board_is_a_dataframe_of_those_rows(tmp_path: Path) -> None:
    pandas = pytest.importorskip("pandas", reason="dgbench.board needs the optional pandas")
    from dgbench.leaderboard.board import submit
    from tests.leaderboard_records import make_record, write
    submit(write(make_record(test_ap=0.81), tmp_path / "staging" / "r.json"), tmp_path / "board")
    frame = dgbench.board(tmp_path / "board")
    assert isinstance(frame, pandas.DataFrame)
    assert frame.to_dict("records") == dgbench.board_rows(tmp_path / "board")
