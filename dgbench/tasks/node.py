"""Node classification: dynamic node labels predicted from a link-prediction model's frozen embeddings.

The protocol of TGN (Rossi et al. 2020, §5) and DyGLib (Yu et al. 2023): labelled instances
(:func:`label_set`: ``source-state`` for streams, ``active-vertex`` for snapshot stores), an MLP
decoder (:class:`Decoder`, :func:`train_decoder`) trained once after the last epoch, AUC / AP and
F1 / accuracy at the validation-chosen threshold.
See docs/tasks.md (section "Node classification").
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from dgbench.errors import DgbenchError
from dgbench.metrics import accuracy, average_precision, f1_score, roc_auc
from dgbench.store import SNAPSHOTS, STREAM, EdgeStreamStore, SnapshotStore, open_store
from dgbench.tasks import NODE_CLASSIFICATION
from dgbench.tasks.evalset import EvaluationSet, EvaluationSpec, ensure_set

SPLITS = ("train", "val", "test")
SOURCE_STATE = "source-state"  # streams: the label of the event's source at the event time
ACTIVE_VERTEX = "active-vertex"  # snapshot stores: each vertex with an edge in input snapshot t
SNAPSHOT_FRACTIONS = (0.70, 0.15, 0.15)
DECODER_WIDTHS = (80, 10)
DECODER_DROPOUT = 0.1
DECODER_BATCH = 200


# --------------------------------------------------------------------------- label sets

def label_set(store_path: str | Path, max_events: int | None = None) -> EvaluationSet:
    """The store's node-classification label set (built and written beside it on first use)."""
    store = open_store(store_path)
    if store.kind == STREAM:
        assert isinstance(store, EdgeStreamStore)
        if not store.has("label"):
            raise DgbenchError(f"{store_path}: the store keeps no event labels (no 'label' column): no "
                               f"node-classification task (JODIE streams keep state_label)")
        used = max_events if max_events is not None and max_events < store.num_events else None
        task = NODE_CLASSIFICATION if used is None else f"{NODE_CLASSIFICATION}-first{used}"
        spec = EvaluationSpec(task, SOURCE_STATE, 0)
        return ensure_set(store_path, spec, store.fingerprint, lambda: _stream_labels(store, store_path, used))
    if store.kind == SNAPSHOTS:
        assert isinstance(store, SnapshotStore)
        if not store.has("node_label"):
            raise DgbenchError(f"{store_path}: the store keeps no vertex labels (no 'node_label' array): no "
                               f"node-classification task (AMLSim stores keep the SAR flags)")
        spec = EvaluationSpec(NODE_CLASSIFICATION, ACTIVE_VERTEX, 0)
        return ensure_set(store_path, spec, store.fingerprint, lambda: _snapshot_labels(store, store_path))
    raise DgbenchError(f"{store_path}: no node-classification task for stores of kind {store.kind!r}")


def _stream_labels(store: EdgeStreamStore, path: str | Path, max_events: int | None
                   ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from dgbench.tasks.link import stream_ranges
    stop, ranges = stream_ranges(store, max_events)
    columns = store.events(0, stop)
    labels = columns["label"].astype(np.int8)
    arrays: dict[str, np.ndarray] = {}
    for split in SPLITS:
        a, b = ranges[split]
        arrays.update({f"{split}_events": np.arange(a, b, dtype=np.int64),
                       f"{split}_node": columns["src"][a:b].astype(np.int64),
                       f"{split}_t": columns["t"][a:b].astype(np.float64), f"{split}_label": labels[a:b]})
    _check_classes(arrays, path)
    return arrays, {"events": stop, "instances": "every event; label of its source (JODIE state_label)",
                    "splits": _counts(arrays)}


def snapshot_steps(num_snapshots: int) -> dict[str, tuple[int, int]]:
    """Input steps [a, b) of each split: the T-1 input snapshots cut 70/15/15 in time order."""
    steps = num_snapshots - 1
    train_end = int(round(steps * SNAPSHOT_FRACTIONS[0]))
    val_end = int(round(steps * (SNAPSHOT_FRACTIONS[0] + SNAPSHOT_FRACTIONS[1])))
    if not 0 < train_end < val_end < steps:
        raise DgbenchError(f"node classification needs input steps for train, validation and test (70/15/15 % "
                           f"of the T-1 input snapshots); the store has {num_snapshots} snapshots")
    return {"train": (0, train_end), "val": (train_end, val_end), "test": (val_end, steps)}


def _snapshot_labels(store: SnapshotStore, path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    node_label = store.read("node_label").astype(np.int8)
    ranges = snapshot_steps(store.num_snapshots)
    if node_label.ndim == 2 and node_label.shape[0] != store.num_snapshots:
        raise DgbenchError(f"{path}: node_label has {node_label.shape[0]} rows for {store.num_snapshots} snapshots")
    arrays: dict[str, np.ndarray] = {}
    for split, (a, b) in ranges.items():
        steps, nodes = [], []
        for snap in store.snapshots(a, b):
            active = np.unique(np.concatenate([snap.src, snap.dst]).astype(np.int64))
            steps.append(np.full(len(active), snap.index, np.int64))
            nodes.append(active)
        step, node = np.concatenate(steps), np.concatenate(nodes)
        label = node_label[step, node] if node_label.ndim == 2 else node_label[node]
        arrays.update({f"{split}_step": step, f"{split}_node": node, f"{split}_label": label.astype(np.int8)})
    _check_classes(arrays, path)
    return arrays, {"instances": "each vertex with an edge in input snapshot t, labelled node_label",
                    "steps": {split: list(r) for split, r in ranges.items()}, "splits": _counts(arrays)}


def _check_classes(arrays: dict[str, np.ndarray], path: str | Path) -> None:
    train = arrays["train_label"]
    if not len(train) or train.min() == train.max():
        value = int(train[0]) if len(train) else "none"
        raise DgbenchError(f"{path}: every training label is {value}: a decoder cannot be trained "
                           f"(no node-classification task on this store)")


def _counts(arrays: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
    return {split: {"instances": int(len(arrays[f"{split}_label"])), "positives": int(arrays[f"{split}_label"].sum())}
            for split in SPLITS}


def instance_keys(labels: EvaluationSet, split: str, num_nodes: int) -> np.ndarray:
    """The key a family tags each instance's embedding with: the event id (streams), step·N + vertex
    (snapshot stores)."""
    if labels.spec.strategy == SOURCE_STATE:
        return labels.get(split, "events")
    return labels.get(split, "step") * np.int64(num_nodes) + labels.get(split, "node")


# --------------------------------------------------------------------------- decoder

@dataclass(frozen=True)
class DecoderOptions:
    """``--decoder-epochs``, ``--decoder-lr`` and the run's seed (initial weights, batch order, dropout)."""

    epochs: int = 50
    lr: float = 1e-3
    seed: int = 0


class Decoder(nn.Module):
    """d → 80 → 10 → 1 with ReLU and dropout (DyGLib ``models/modules.py`` MLPClassifier, TGN's MLP)."""

    def __init__(self, width: int):
        super().__init__()
        sizes = (width, *DECODER_WIDTHS)
        hidden: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            hidden += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(DECODER_DROPOUT)]
        self.layers = nn.Sequential(*hidden, nn.Linear(sizes[-1], 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x).squeeze(-1)


def train_decoder(inputs: dict[str, np.ndarray], labels: dict[str, np.ndarray], options: DecoderOptions
                  ) -> tuple[dict[str, np.ndarray], int]:
    """Decoder logits of every split (the epoch with the best validation AUC) and that epoch. One intra-op
    thread: batches of 200 rows are too small to share, and on a busy host two threads spin against each
    other (20 epochs of 2,100 rows: 39 s with two, 5 s with one, measured on the shared 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train_decoder(inputs, labels, options)
    finally:
        torch.set_num_threads(threads)


def _train_decoder(inputs: dict[str, np.ndarray], labels: dict[str, np.ndarray], options: DecoderOptions
                   ) -> tuple[dict[str, np.ndarray], int]:
    mean = inputs["train"].mean(axis=0)
    std = inputs["train"].std(axis=0) + 1e-6
    x = {s: torch.from_numpy(((v - mean) / std).astype(np.float32)) for s, v in inputs.items()}
    y = torch.from_numpy(labels["train"].astype(np.float32))
    # the run's own random streams stay untouched; loops evaluate under no_grad
    with torch.random.fork_rng(devices=[]), torch.enable_grad():
        torch.manual_seed(options.seed)
        decoder = Decoder(x["train"].shape[1]).float()  # float32 even where a run sets float64 as default
        optimizer = torch.optim.Adam(decoder.parameters(), lr=options.lr)
        order = torch.Generator().manual_seed(options.seed)
        best: tuple[float, int, dict[str, Any]] = (float("-inf"), -1, copy.deepcopy(decoder.state_dict()))
        for epoch in range(options.epochs):
            decoder.train()
            permutation = torch.randperm(len(y), generator=order)
            for start in range(0, len(y), DECODER_BATCH):
                rows = permutation[start:start + DECODER_BATCH]
                loss = F.binary_cross_entropy_with_logits(decoder(x["train"][rows]), y[rows])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            auc = roc_auc(_logits(decoder, x["val"]), labels["val"])
            if auc != auc:  # validation has one class: keep the last epoch
                auc = float(epoch) - 1e9
            if auc > best[0]:
                best = (auc, epoch, copy.deepcopy(decoder.state_dict()))
        decoder.load_state_dict(best[2])
        return {s: _logits(decoder, v) for s, v in x.items()}, best[1]


@torch.no_grad()
def _logits(decoder: Decoder, x: torch.Tensor) -> np.ndarray:
    decoder.eval()
    return decoder(x).double().numpy()


def best_f1_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    """The logit threshold (predict 1 where score > threshold) maximising F1 on these scores: midway
    between the last distinct score predicted positive and the next; 0 without a positive label."""
    y = labels > 0
    if not y.any():
        return 0.0
    order = np.argsort(-scores, kind="mergesort")
    s, hits = scores[order], np.cumsum(y[order])
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # last index of each distinct score
    f1 = 2 * hits[last] / (last + 1 + y.sum())
    k = last[int(np.argmax(f1))]
    return float((s[k] + s[k + 1]) / 2) if k + 1 < len(s) else float(s[k] - 1.0)


def split_metrics(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, float]:
    return {"auc": roc_auc(scores, labels), "ap": average_precision(scores, labels),
            "f1": f1_score(scores, labels, threshold), "accuracy": accuracy(scores, labels, threshold),
            "threshold": threshold, "instances": float(len(labels)), "positives": float(labels.sum())}


class NodeClassification:
    """The task a family's loop calls after link-prediction training: which instances to embed
    (:meth:`keys`), then :meth:`figures` from the gathered (key, embedding) rows."""

    def __init__(self, labels: EvaluationSet, num_nodes: int, options: DecoderOptions, epochs: int = 1):
        self.labels, self.num_nodes, self.options = labels, num_nodes, options
        self.epochs, self.evaluations = epochs, 0

    @classmethod
    def for_run(cls, labels: EvaluationSet, num_nodes: int, task: Any, config: Any) -> NodeClassification:
        """The task as a run sets it: ``task``'s ``--decoder-epochs`` / ``--decoder-lr`` (either family's task
        options) and ``config``'s seed and epoch count (the decoder trains after the last epoch)."""
        return cls(labels, num_nodes, DecoderOptions(task.decoder_epochs, task.decoder_lr, config.seed),
                   epochs=config.epochs)

    def due(self) -> bool:
        """Whether this evaluation is the run's last (after its last training epoch): the decoder is
        trained once, on the final model's embeddings; earlier epochs report no metrics."""
        self.evaluations += 1
        return self.evaluations >= self.epochs

    def keys(self, split: str) -> np.ndarray:
        return instance_keys(self.labels, split, self.num_nodes)

    def all_keys(self) -> np.ndarray:
        return np.concatenate([self.keys(split) for split in SPLITS])

    def figures(self, keys: np.ndarray, embeddings: np.ndarray) -> dict[str, dict[str, float]]:
        """Train the decoder on the training instances' embeddings; metrics of validation and test."""
        keys = np.asarray(keys, np.int64)
        order = np.argsort(keys, kind="stable")
        keys, embeddings = keys[order], np.asarray(embeddings, np.float64)[order]
        inputs, labels = {}, {}
        for split in SPLITS:
            wanted = self.keys(split)
            where = np.searchsorted(keys, wanted)
            found = (where < len(keys)) & (keys[np.minimum(where, len(keys) - 1)] == wanted)
            if not found.all():
                raise ValueError(f"{split}: {int((~found).sum())} of {len(wanted)} labelled instances have no "
                                 f"embedding")
            inputs[split], labels[split] = embeddings[where], self.labels.get(split, "label").astype(np.float64)
        scores, epoch = train_decoder(inputs, labels, self.options)
        threshold = best_f1_threshold(scores["val"], labels["val"])
        out = {split: {**split_metrics(scores[split], labels[split], threshold), "decoder_epoch": float(epoch)}
               for split in ("val", "test")}
        out["val"]["train_auc"] = roc_auc(scores["train"], labels["train"])
        return out
