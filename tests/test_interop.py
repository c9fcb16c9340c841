"""PyG / PGT / TGB interop (docs/interop.md): stores to and from PyG's TemporalData, snapshot stores as PyG
Data lists and PGT signals, TGB's negative sets imported as an evaluation set scored as TGB scores them."""
from __future__ import annotations

import importlib.util
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

import dgbench
from dgbench.errors import DgbenchError
from dgbench.store import open_store

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric", reason="PyG interop needs torch-geometric")


def _pgt_importable() -> bool:
    try:
        from torch_geometric_temporal.signal import DynamicGraphTemporalSignal  # noqa: F401
    except Exception:  # noqa: BLE001 - PGT's package import needs torch-sparse, often missing
        return False
    return True


# --------------------------------------------------------------------------- TemporalData

def test_stream_round_trips_through_temporal_data(stream_store: Path, tmp_path: Path) -> None:
    store = open_store(stream_store)
    data = store.to_temporal_data()
    assert data.num_events == store.num_events
    assert data.msg.shape == (store.num_events, 4) and data.msg.dtype == torch.float32
    back = dgbench.from_temporal_data(data, tmp_path / "back.zarr", like=store)
    assert back.fingerprint == store.fingerprint
    for name, values in store.events().items():
        np.testing.assert_array_equal(back.events()[name], values)
    assert back.provenance["source"] == "temporal-data"


def test_temporal_data_slice_is_those_events(stream_store: Path) -> None:
    store = open_store(stream_store)
    data = store.to_temporal_data(100, 200)
    np.testing.assert_array_equal(data.src.numpy(), store.events(100, 200)["src"])
    np.testing.assert_array_equal(data.t.numpy(), store.events(100, 200)["t"])


def test_from_temporal_data_sorts_by_time_and_defaults_the_graph(tmp_path: Path) -> None:
    from torch_geometric.data import TemporalData
    data = TemporalData(src=torch.tensor([3, 0, 1, 2]), dst=torch.tensor([4, 5, 6, 7]),
                        t=torch.tensor([30, 10, 10, 20]), y=torch.tensor([1, 0, 0, 1]))
    store = dgbench.from_temporal_data(data, tmp_path / "s.zarr")
    events = store.events()
    np.testing.assert_array_equal(events["src"], [0, 1, 2, 3])  # stable: 0 before 1 at t=10
    np.testing.assert_array_equal(events["label"], [0, 0, 1, 1])
    assert store.num_nodes == 8 and store.provenance["events_sorted_by_t"] is True
    assert store.split["method"] == "quantile"


def test_from_temporal_data_leaves_nothing_when_refused(tmp_path: Path) -> None:
    from torch_geometric.data import TemporalData
    data = TemporalData(src=torch.tensor([0, 9]), dst=torch.tensor([1, 2]), t=torch.tensor([1, 2]))
    with pytest.raises(DgbenchError, match="outside 0..4"):
        dgbench.from_temporal_data(data, tmp_path / "bad.zarr", num_nodes=5)
    assert list(tmp_path.iterdir()) == []


def test_missing_torch_geometric_is_one_line(stream_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch_geometric.data", None)
    with pytest.raises(DgbenchError, match="needs torch-geometric, which is not installed"):
        open_store(stream_store).to_temporal_data()


# --------------------------------------------------------------------------- snapshots

def test_snapshot_store_as_pyg_data_list(esdg_store: Path) -> None:
    store = open_store(esdg_store)
    graphs = store.to_pyg()
    assert len(graphs) == store.num_snapshots
    for graph, snapshot in zip(graphs, store.snapshots()):
        assert graph.num_nodes == store.num_nodes
        np.testing.assert_array_equal(graph.edge_index.numpy(), np.stack([snapshot.src, snapshot.dst]))
        if snapshot.weight is not None:
            np.testing.assert_array_equal(graph.edge_weight.numpy(), snapshot.weight)


def test_snapshot_arrays_are_pgts_inputs(esdg_store: Path) -> None:
    from dgbench.store.pyg import snapshot_arrays
    store = open_store(esdg_store)
    arrays = snapshot_arrays(store)
    assert [len(v) for v in arrays.values()] == [store.num_snapshots] * 4
    third = store.snapshot(3)
    np.testing.assert_array_equal(arrays["edge_indices"][3], np.stack([third.src, third.dst]))
    assert arrays["edge_weights"][3].shape == (third.num_edges,)


@pytest.mark.skipif(not _pgt_importable(), reason="torch_geometric_temporal does not import here "
                                                  "(its package import needs torch-sparse)")
def test_snapshot_store_as_pgt_signal(esdg_store: Path) -> None:
    store = open_store(esdg_store)
    signal = store.to_pgt()
    snapshots = list(signal)
    assert len(snapshots) == store.num_snapshots
    np.testing.assert_array_equal(snapshots[2].edge_index.numpy(), np.stack([store.snapshot(2).src,
                                                                            store.snapshot(2).dst]))


# --------------------------------------------------------------------------- TGB

def _tgb_like_data(rng: np.random.Generator, events: int = 400) -> tuple[dict, dict]:
    """Events and masks laid out as py-tgb's LinkPropPredDataset gives them (int times, quantile split)."""
    t = np.sort(rng.integers(0, 200, events))
    data = {"sources": rng.integers(0, 30, events), "destinations": rng.integers(30, 60, events), "timestamps": t,
            "edge_feat": rng.random((events, 2))}
    val_time, test_time = np.quantile(t, [0.70, 0.85])
    masks = {"train": t <= val_time, "val": (t > val_time) & (t <= test_time), "test": t > test_time}
    return data, masks


def _write_tgb_negatives(folder: Path, data: dict, masks: dict, rng: np.random.Generator) -> dict[str, Path]:
    """TGB's on-disk negative sets: one pickled dict per split keyed (src, dst, t), rows of any length."""
    files = {}
    for split in ("val", "test"):
        keyed = {}
        for s, d, t in zip(data["sources"][masks[split]], data["destinations"][masks[split]],
                           data["timestamps"][masks[split]]):
            keyed[(s, d, t)] = rng.choice(np.arange(30, 60), size=int(rng.integers(3, 8)), replace=False)
        files[split] = folder / f"tgbl-test_{split}_ns.pkl"
        files[split].write_bytes(pickle.dumps(keyed))
    return files


def _tgb_mrr(positive: np.ndarray, negatives: list[np.ndarray]) -> float:
    """TGB's Evaluator (evaluate.py, numpy branch) per query, averaged as TGB's examples do."""
    reciprocal = []
    for pos, neg in zip(positive, negatives):
        optimistic = (neg > pos).sum()
        pessimistic = (neg >= pos).sum()
        reciprocal.append(1.0 / np.float32(0.5 * (optimistic + pessimistic) + 1))
    return float(np.mean(reciprocal))


@pytest.fixture
def tgb_store(tmp_path: Path) -> tuple[Path, dict, dict, dict[str, Path]]:
    from dgbench.loaders.tgb import write_tgb_stream
    rng = np.random.default_rng(4)
    data, masks = _tgb_like_data(rng)
    path = write_tgb_stream(tmp_path / "tgb.zarr", data, masks, name="tgbl-test")
    return path, data, masks, _write_tgb_negatives(tmp_path, data, masks, rng)


def test_tgb_store_keeps_tgb_split_and_ids(tgb_store) -> None:
    path, data, masks, _ = tgb_store
    store = open_store(path)
    assert store.split_ranges()["val"] == (int(masks["train"].sum()), int((masks["train"] | masks["val"]).sum()))
    np.testing.assert_array_equal(store.events()["dst"], data["destinations"])


def test_tgb_negatives_scored_as_tgb_scores_them(tgb_store) -> None:
    path, data, masks, files = tgb_store
    dgbench.import_tgb_negatives(path, files)
    evaluator = dgbench.Evaluator(path, split="test", negatives="tgb")
    edges = evaluator.edges()
    keyed = pickle.loads(files["test"].read_bytes())
    rows = [keyed[(s, d, t)] for s, d, t in zip(data["sources"][masks["test"]], data["destinations"][masks["test"]],
                                                 data["timestamps"][masks["test"]])]
    for row, stored in zip(rows, edges["negative_dst"]):
        np.testing.assert_array_equal(stored[:len(row)], row)
        assert (stored[len(row):] == -1).all()
    rng = np.random.default_rng(0)
    score = rng.integers(0, 4, size=60).astype(float)  # few values: many ties, TGB averages them
    positive = score[edges["dst"]]
    negative = np.where(edges["negative_dst"] >= 0, score[np.maximum(edges["negative_dst"], 0)], 0.0)
    result = evaluator.eval({"y_pred_pos": positive, "y_pred_neg": negative})
    expected = _tgb_mrr(positive, [score[row] for row in rows])
    assert result["mrr"] == pytest.approx(expected, rel=1e-6)  # TGB computes 1/rank in float32
    assert result["positives"] == len(rows)


@pytest.mark.skipif(importlib.util.find_spec("tgb") is None, reason="py-tgb (the [tgb] extra) is not installed")
def test_tgb_evaluator_gives_the_same_mrr(tgb_store) -> None:
    from tgb.linkproppred.evaluate import Evaluator as TGBEvaluator
    path, data, masks, files = tgb_store
    dgbench.import_tgb_negatives(path, files)
    evaluator = dgbench.Evaluator(path, split="test", negatives="tgb")
    edges = evaluator.edges()
    score = np.random.default_rng(1).integers(0, 4, size=60).astype(float)
    positive = score[edges["dst"]]
    present = edges["negative_dst"] >= 0
    negative = np.where(present, score[np.maximum(edges["negative_dst"], 0)], 0.0)
    tgb = TGBEvaluator(name="tgbl-wiki")
    theirs = np.mean([tgb.eval({"y_pred_pos": np.array([p]), "y_pred_neg": n[m][None, :],
                                "eval_metric": ["mrr"]})["mrr"] for p, n, m in zip(positive, negative, present)])
    ours = evaluator.eval({"y_pred_pos": positive, "y_pred_neg": negative})["mrr"]
    assert ours == pytest.approx(float(theirs), rel=1e-6)


def test_tgb_import_is_idempotent_and_refuses_other_negatives(tgb_store, tmp_path: Path) -> None:
    path, data, masks, files = tgb_store
    first = dgbench.import_tgb_negatives(path, files)
    assert dgbench.import_tgb_negatives(path, files).fingerprint == first.fingerprint
    (tmp_path / "other").mkdir()
    other = _write_tgb_negatives(tmp_path / "other", data, masks, np.random.default_rng(99))
    with pytest.raises(DgbenchError, match="holds other TGB negatives"):
        dgbench.import_tgb_negatives(path, other)


def test_tgb_import_refuses_a_set_missing_an_event(tgb_store, tmp_path: Path) -> None:
    path, data, masks, files = tgb_store
    keyed = pickle.loads(files["test"].read_bytes())
    keyed.pop(next(iter(keyed)))
    with pytest.raises(DgbenchError, match="no negatives for test event"):
        dgbench.import_tgb_negatives(path, {"val": files["val"], "test": keyed})
    assert not (Path(f"{path}.tasks") / "link-prediction-tgb-k7").exists()


@pytest.mark.skipif(importlib.util.find_spec("tgb") is not None, reason="py-tgb is installed here")
def test_prepare_tgbl_without_py_tgb_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(DgbenchError, match=r"need py-tgb.*dgbench\[tgb\]"):
        dgbench.prepare("tgbl-wiki", out=tmp_path / "wiki.zarr", root=tmp_path / "tgb")
