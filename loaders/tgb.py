"""TGB link-property-prediction data sets (Huang et al., NeurIPS 2023 Datasets & Benchmarks) through py-tgb
(the optional ``[tgb]`` extra): `dgbench prepare tgbl-wiki` (and every other ``tgbl-*``) writes TGB's events
as a stream store with TGB's own split and imports TGB's negative sets as a fingerprinted evaluation set, so
that dgbench's MRR on it is TGB's (docs/interop.md).

What is TGB's, read from py-tgb 2.3.0 (``tgb/linkproppred/dataset.py``, ``negative_sampler.py``,
``evaluate.py``): ``LinkPropPredDataset(name, root).full_data`` holds ``sources``, ``destinations``,
``timestamps`` (int) and ``edge_feat``; ``train_mask``/``val_mask``/``test_mask`` split at the 70 % and 85 %
time quantiles (train ``t <= q70``, val ``q70 < t <= q85``, test ``t > q85``); a split's negatives are a
pickled dict ``{(src, dst, t): array of negative destinations}`` (``<name>_<split>_ns[_vN].pkl``) whose
arrays may differ in length; the Evaluator ranks a positive among its own negatives as
``0.5 * (#neg > pos + #neg >= pos) + 1`` and reports the mean of 1/rank, which is dgbench's averaged-tie
rank (dgbench.metrics). Node ids are TGB's own, unchanged (N = the largest id + 1).
"""
from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import numpy as np

from dgbench.errors import DgbenchError
from dgbench.registry import register_preparer
from dgbench.store import EdgeStreamStore, EdgeStreamStoreWriter, open_store
from dgbench.tasks import LINK_PREDICTION
from dgbench.tasks import negatives as ns
from dgbench.tasks.evalset import (EvaluationSet, EvaluationSpec, manifest_of, read_set, set_path, tasks_dir,
                                   write_set)
from dgbench.loaders.download import default_cache_dir, file_sha256

# py-tgb 2.3.0's link-prediction data sets (tgb/utils/info.py, DATA_URL_DICT)
TGB_LINK_DATASETS = ("tgbl-wiki", "tgbl-review", "tgbl-coin", "tgbl-comment", "tgbl-flight", "tgbl-subreddit",
                     "tgbl-lastfm", "tgbl-enron", "tgbl-uci")
TGB_STRATEGY = "tgb"  # the strategy name of an imported TGB negative set (link-prediction-tgb-k<K>)
TGB_SPLITS = ("val", "test")
TGB_HINT = "pip install 'dgbench[tgb]' (py-tgb)"


def _link_dataset_class() -> Any:
    try:
        from tgb.linkproppred.dataset import LinkPropPredDataset
    except ImportError as exc:
        raise DgbenchError(f"TGB data sets need py-tgb, which is not installed ({TGB_HINT})") from exc
    return LinkPropPredDataset


def write_tgb_stream(out: Path, full_data: Mapping[str, Any], masks: Mapping[str, np.ndarray], *, name: str,
                     overwrite: bool = False, provenance: dict[str, Any] | None = None) -> Path:
    """A stream store of TGB's ``full_data`` with TGB's split (``masks``: train/val/test boolean arrays over
    the events, which TGB keeps in time order, so each mask is one contiguous run)."""
    import dgbench
    src = np.asarray(full_data["sources"], dtype=np.int64)
    dst = np.asarray(full_data["destinations"], dtype=np.int64)
    t = np.asarray(full_data["timestamps"], dtype=np.int64)
    features = full_data.get("edge_feat")
    features = None if features is None else np.asarray(features, dtype=np.float32).reshape(len(t), -1)
    train_end, val_end = int(np.sum(masks["train"])), int(np.sum(masks["train"]) + np.sum(masks["val"]))
    expected = np.r_[np.zeros(train_end, int), np.ones(val_end - train_end, int), np.full(len(t) - val_end, 2)]
    found = np.select([np.asarray(masks["train"]), np.asarray(masks["val"])], [0, 1], 2)
    if not np.array_equal(found, expected):
        raise DgbenchError(f"{name}: TGB's train/val/test masks are not consecutive runs of the events")
    record = {"source": name, "format": "tgb", "loader": __name__, "dgbench_version": dgbench.__version__,
              **(provenance or {})}
    with EdgeStreamStoreWriter(out, num_nodes=int(max(src.max(), dst.max())) + 1, directed=True,
                               provenance=record, time_dtype=np.int64, overwrite=overwrite,
                               edge_feature_dim=0 if features is None else features.shape[1]) as writer:
        writer.append_events(src, dst, t, edge_features=features)
        writer.set_split(train_end, val_end, "tgb", quantiles=[0.70, 0.85])
        return writer.close()


def read_negatives_file(path: str | Path) -> dict[tuple, Any]:
    """TGB's pickled negative set of one split. A pickle can run code when read: only pass files from TGB
    (its download cache) or made by yourself."""
    with open(path, "rb") as handle:
        negatives = pickle.load(handle)
    if not isinstance(negatives, dict):
        raise DgbenchError(f"{path}: not a TGB negative set (a pickled dict keyed by (src, dst, t)); "
                           f"it holds a {type(negatives).__name__}")
    return negatives


def _split_arrays(store: EdgeStreamStore, split: str, negatives: Mapping[tuple, Any], columns: dict[str, np.ndarray],
                  where: str) -> dict[str, np.ndarray]:
    start, stop = store.split_ranges()[split]
    src, dst, t = columns["src"], columns["dst"], columns["t"]
    integral = t.dtype.kind in "iu"
    rows = []
    for event in range(start, stop):
        key = (int(src[event]), int(dst[event]), int(t[event]) if integral else float(t[event]))
        found = negatives.get(key)
        if found is None:
            raise DgbenchError(f"{where}: no negatives for {split} event {event} (src {key[0]}, dst {key[1]}, "
                               f"t {key[2]}): the negative set is not this store's")
        rows.append(np.asarray(found, dtype=np.int64).ravel())
    k = max((len(row) for row in rows), default=0)
    if k == 0:
        raise DgbenchError(f"{where}: the {split} split has no negatives")
    table = np.full((len(rows), k), ns.MISSING, dtype=np.int64)
    for i, row in enumerate(rows):
        table[i, :len(row)] = row
    positives = np.arange(start, stop)
    part = ns.StreamSplit(src, dst, t, store.num_nodes, start, stop, np.unique(dst),
                          ns.Before.of(src[:start], dst[:start], store.num_nodes, pairs=False))
    return {f"{split}_events": positives.astype(np.int64), f"{split}_src": src[start:stop],
            f"{split}_dst": dst[start:stop], f"{split}_t": t[start:stop].astype(np.float64),
            f"{split}_negative_src": np.where(table >= 0, src[start:stop, None], ns.MISSING),
            f"{split}_negatives": table, f"{split}_new_node": ns.stream_new_nodes(part)}


def import_tgb_negatives(store_path: str | Path, negatives: Mapping[str, str | Path | Mapping[tuple, Any]]
                         ) -> EvaluationSet:
    """Write TGB's negative sets (``{"val": file or dict, "test": file or dict}``) as the store's evaluation
    set ``link-prediction-tgb-k<K>`` (K: the most negatives of any positive; shorter rows padded with
    empty slots, which scoring ignores, as TGB ranks each positive among only its own) and return it.
    Every val/test event of the store must have its entry. Importing the same negatives again returns
    the set already there; different ones are refused."""
    store = open_store(store_path, "stream")
    assert isinstance(store, EdgeStreamStore)
    columns = {name: values.astype(np.int64) if name != "t" else values
               for name, values in store.events().items() if name in ("src", "dst", "t")}
    arrays: dict[str, np.ndarray] = {}
    files: dict[str, Any] = {}
    for split in TGB_SPLITS:
        given = negatives[split]
        mapping = given if isinstance(given, Mapping) else read_negatives_file(given)
        if not isinstance(given, Mapping):
            files[split] = {"file": Path(given).name, "sha256": file_sha256(Path(given))}
        arrays.update(_split_arrays(store, split, mapping, columns, f"{store_path}: {split} negatives"))
    k = max(arrays[f"{split}_negatives"].shape[1] for split in TGB_SPLITS)
    for split in TGB_SPLITS:  # one K for both splits
        table = arrays[f"{split}_negatives"]
        pad = np.full((len(table), k - table.shape[1]), ns.MISSING, dtype=np.int64)
        arrays[f"{split}_negatives"] = np.hstack([table, pad])
        arrays[f"{split}_negative_src"] = np.hstack([arrays[f"{split}_negative_src"], pad])
    spec = EvaluationSpec(LINK_PREDICTION, TGB_STRATEGY, k)
    details = {"source": "tgb", "files": files,
               "splits": {s: {"positives": len(arrays[f"{s}_negatives"]),
                              "negatives": int((arrays[f"{s}_negatives"] >= 0).sum())} for s in TGB_SPLITS}}
    path = set_path(store_path, spec)
    if path.exists():
        existing = read_set(path, store.fingerprint, num_nodes=store.num_nodes)
        if existing.fingerprint != manifest_of(spec, store.fingerprint, arrays, details)["fingerprint"]:
            raise DgbenchError(f"{path}: holds other TGB negatives than these; remove it to import these")
        return existing
    write_set(store_path, spec, store.fingerprint, arrays, details)
    return read_set(path, store.fingerprint, num_nodes=store.num_nodes)


def tgb_set_of(store_path: str | Path) -> EvaluationSet:
    """The store's imported TGB negative set (see :func:`import_tgb_negatives`)."""
    found = sorted(tasks_dir(store_path).glob(f"{LINK_PREDICTION}-{TGB_STRATEGY}-k*"))
    if not found:
        raise DgbenchError(f"{store_path}: no TGB negative set imported (prepare it with `dgbench prepare tgbl-*`, "
                           f"or dgbench.import_tgb_negatives)")
    store = open_store(store_path)
    return read_set(found[0], store.fingerprint, num_nodes=store.num_nodes)


def _register(name: str) -> None:
    options = [click.Option(["--root"], type=click.Path(path_type=Path), default=None,
                            help="TGB's data folder (default: $DGBENCH_CACHE/tgb); py-tgb downloads into it.")]

    def build(out: Path, overwrite: bool = False, *, root: Path | None = None) -> Path:
        dataset = _link_dataset_class()(name=name, root=str(root or default_cache_dir() / "tgb"), preprocess=True)
        masks = {"train": dataset.train_mask, "val": dataset.val_mask, "test": dataset.test_mask}
        path = write_tgb_stream(out, dataset.full_data, masks, name=name, overwrite=overwrite,
                                provenance={"tgb_root": str(dataset.root)})
        files = {"val": dataset.meta_dict["val_ns"], "test": dataset.meta_dict["test_ns"]}
        import_tgb_negatives(path, files)
        return path

    build.__doc__ = f"TGB's {name} through py-tgb, with its negative sets as an evaluation set"
    register_preparer(name, kind="dataset", produces="stream", options=options,
                      summary=f"TGB {name} through py-tgb ([tgb] extra), TGB's split and negative sets")(build)


for _name in TGB_LINK_DATASETS:
    _register(_name)
