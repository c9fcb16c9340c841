"""Node classification: dynamic node labels predicted from a link-prediction model's frozen embeddings.

The protocol of TGN (Rossi et al. 2020, §5) and DyGLib (Yu et al. 2023): labelled instances
(:func:`label_set`: ``source-state`` for streams, ``active-vertex`` for snapshot stores), an MLP
decoder (:class:`Decoder`, :func:`train_decoder`) trained once after the last epoch, AUC / AP and
F1 / accuracy at the validation-chosen threshold.
See docs/tasks.md (section "Node classification").
"""
from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterable, Iterator
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
SPILL_ROWS = 1 << 13  # rows normalised and decoded at a time when the embeddings are read from disk


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


READ_EVENTS = 1 << 20  # events read at a time while building a stream's label set


def _stream_labels(store: EdgeStreamStore, path: str | Path, max_events: int | None,
                   read_events: int = READ_EVENTS) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Every event of each split with its source, time and label, read from the store ``read_events`` at a
    time (the label set itself is held; the stream's other columns never are)."""
    from dgbench.tasks.link import stream_ranges
    stop, ranges = stream_ranges(store, max_events)
    arrays: dict[str, np.ndarray] = {}
    for split in SPLITS:
        a, b = ranges[split]
        arrays[f"{split}_events"] = np.arange(a, b, dtype=np.int64)
        for name, column, dtype in (("node", "src", np.int64), ("t", "t", np.float64), ("label", "label", np.int8)):
            blocks = [store.read(column, low, min(b, low + read_events)).astype(dtype)
                      for low in range(a, b, max(1, read_events))]
            arrays[f"{split}_{name}"] = np.concatenate(blocks) if blocks else np.zeros(0, dtype)
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


def train_decoder(inputs: dict[str, np.ndarray], labels: dict[str, np.ndarray], options: DecoderOptions,
                  block_rows: int | None = None) -> tuple[dict[str, np.ndarray], int]:
    """Decoder logits of every split (the epoch with the best validation AUC) and that epoch. One intra-op
    thread: batches of 200 rows are too small to share, and on a busy host two threads spin against each
    other (20 epochs of 2,100 rows: 39 s with two, 5 s with one, measured on the shared 2-core machine).
    ``block_rows``: the inputs are arrays mapped from disk, normalised and decoded that many rows at a time
    (the same figures; :class:`_BlockInputs`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train_decoder(inputs, labels, options, block_rows)
    finally:
        torch.set_num_threads(threads)


def _train_decoder(inputs: dict[str, np.ndarray], labels: dict[str, np.ndarray], options: DecoderOptions,
                   block_rows: int | None) -> tuple[dict[str, np.ndarray], int]:
    x: dict[str, Any]
    if block_rows is None:
        mean = inputs["train"].mean(axis=0)
        std = inputs["train"].std(axis=0) + 1e-6
        x = {s: torch.from_numpy(((v - mean) / std).astype(np.float32)) for s, v in inputs.items()}
    else:
        mean, std = _column_moments(inputs["train"], block_rows)
        x = {s: _BlockInputs(v, mean, std + 1e-6, block_rows) for s, v in inputs.items()}
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


def _column_moments(values: np.ndarray, block_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``values.mean(axis=0)`` and ``values.std(axis=0)`` reading ``block_rows`` rows at a time: numpy sums
    a C-ordered array's rows in order along axis 0, so carrying the running sum into each block's sum
    gives the same bits (as ``np.std``: the mean, then the mean squared deviation from it)."""
    def running_sum(transform: Any) -> np.ndarray:
        total: np.ndarray | None = None
        for low in range(0, len(values), block_rows):
            block = transform(np.asarray(values[low:low + block_rows], dtype=np.float64))
            total = np.add.reduce(block if total is None else np.concatenate([total[None], block]), axis=0)
        return total if total is not None else np.zeros(values.shape[1])

    def squared_deviation(block: np.ndarray) -> np.ndarray:
        deviation = block - mean
        return np.multiply(deviation, deviation, out=deviation)

    count = max(len(values), 1)
    mean = np.true_divide(running_sum(lambda block: block), count)
    return mean, np.sqrt(np.true_divide(running_sum(squared_deviation), count))


class _BlockInputs:
    """One split's decoder inputs normalised on read: the rows a training batch draws, or blocks of
    ``block_rows`` for the logits (elementwise the same as normalising the whole array at once)."""

    def __init__(self, values: np.ndarray, mean: np.ndarray, std: np.ndarray, block_rows: int):
        self.values, self.mean, self.std, self.block_rows = values, mean, std, block_rows
        self.shape = values.shape

    def __getitem__(self, rows: torch.Tensor) -> torch.Tensor:
        picked = np.asarray(self.values[rows.numpy()], dtype=np.float64)
        return torch.from_numpy(((picked - self.mean) / self.std).astype(np.float32))

    def blocks(self) -> Iterator[torch.Tensor]:
        for low in range(0, len(self.values), self.block_rows):
            yield self[torch.arange(low, min(len(self.values), low + self.block_rows))]


@torch.no_grad()
def _logits(decoder: Decoder, x: torch.Tensor | _BlockInputs) -> np.ndarray:
    decoder.eval()
    if isinstance(x, _BlockInputs):
        parts = [decoder(block).double().numpy() for block in x.blocks()]
        return np.concatenate(parts) if parts else np.zeros(0)
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

    def __init__(self, labels: EvaluationSet, num_nodes: int, options: DecoderOptions, epochs: int = 1,
                 spill_dir: Path | None = None):
        """``spill_dir``: where a stream's embeddings are written (a file deleted when closed) and read back
        block by block (:meth:`figures_from`), instead of being held; None: held in memory."""
        self.labels, self.num_nodes, self.options = labels, num_nodes, options
        self.epochs, self.evaluations, self.spill_dir = epochs, 0, spill_dir
        self.spill_rows = SPILL_ROWS

    @classmethod
    def for_run(cls, labels: EvaluationSet, num_nodes: int, task: Any, config: Any, spill_dir: Path | None = None
                ) -> NodeClassification:
        """The task as a run sets it: ``task``'s ``--decoder-epochs`` / ``--decoder-lr`` (either family's task
        options) and ``config``'s seed and epoch count (the decoder trains after the last epoch)."""
        return cls(labels, num_nodes, DecoderOptions(task.decoder_epochs, task.decoder_lr, config.seed),
                   epochs=config.epochs, spill_dir=spill_dir)

    def due(self) -> bool:
        """Whether this evaluation is the run's last (after its last training epoch): the decoder is
        trained once, on the final model's embeddings; earlier epochs report no metrics."""
        self.evaluations += 1
        return self.evaluations >= self.epochs

    def keys(self, split: str) -> np.ndarray:
        return instance_keys(self.labels, split, self.num_nodes)

    def all_keys(self) -> np.ndarray:
        return np.concatenate([self.keys(split) for split in SPLITS])

    def figures_from(self, batches: Iterable[np.ndarray]) -> dict[str, dict[str, float]]:
        """:meth:`figures` from gathered batches of (key, embedding...) rows; with a ``spill_dir`` (source-state
        labels, keyed by event id) each batch is written to a disk-backed array at its events' rows and the
        decoder reads it block by block: the same figures, holding one batch and the logits."""
        if self.spill_dir is None or self.labels.spec.strategy != SOURCE_STATE:
            every = np.concatenate(list(batches))
            return self.figures(every[:, 0].astype(np.int64), every[:, 1:])
        events = 1 + max(int(self.keys(split).max(initial=-1)) for split in SPLITS)
        with tempfile.TemporaryFile(dir=self.spill_dir, prefix="embeddings-") as handle:
            matrix: np.memmap | None = None
            seen = np.zeros(events, dtype=bool)
            for batch in batches:
                if matrix is None:
                    matrix = np.memmap(handle, dtype=np.float64, mode="w+", shape=(max(events, 1), batch.shape[1] - 1))
                ids = batch[:, 0].astype(np.int64)
                matrix[ids], seen[ids] = batch[:, 1:], True
            if matrix is None:
                raise ValueError("no embeddings were gathered")
            return self._decode({split: self._rows(matrix, seen, split) for split in SPLITS}, self.spill_rows)

    def _rows(self, matrix: np.memmap, seen: np.ndarray, split: str) -> np.ndarray:
        wanted = self.keys(split)
        if not seen[wanted].all():
            raise ValueError(f"{split}: {int((~seen[wanted]).sum())} of {len(wanted)} labelled instances have no "
                             f"embedding")
        if len(wanted) and int(wanted[-1]) - int(wanted[0]) + 1 == len(wanted):
            return matrix[int(wanted[0]):int(wanted[-1]) + 1]  # a view: rows stay on disk until read
        return matrix[wanted]

    def figures(self, keys: np.ndarray, embeddings: np.ndarray) -> dict[str, dict[str, float]]:
        """Train the decoder on the training instances' embeddings; metrics of validation and test."""
        keys = np.asarray(keys, np.int64)
        order = np.argsort(keys, kind="stable")
        keys, embeddings = keys[order], np.asarray(embeddings, np.float64)[order]
        inputs: dict[str, np.ndarray] = {}
        for split in SPLITS:
            wanted = self.keys(split)
            where = np.searchsorted(keys, wanted)
            found = (where < len(keys)) & (keys[np.minimum(where, len(keys) - 1)] == wanted)
            if not found.all():
                raise ValueError(f"{split}: {int((~found).sum())} of {len(wanted)} labelled instances have no "
                                 f"embedding")
            inputs[split] = embeddings[where]
        return self._decode(inputs)

    def _decode(self, inputs: dict[str, np.ndarray], block_rows: int | None = None) -> dict[str, dict[str, float]]:
        labels = {split: self.labels.get(split, "label").astype(np.float64) for split in SPLITS}
        scores, epoch = train_decoder(inputs, labels, self.options, block_rows)
        threshold = best_f1_threshold(scores["val"], labels["val"])
        out = {split: {**split_metrics(scores[split], labels[split], threshold), "decoder_epoch": float(epoch)}
               for split in ("val", "test")}
        out["val"]["train_auc"] = roc_auc(scores["train"], labels["train"])
        return out
