"""Peak RSS of node classification's decoder over synthetic source embeddings, gathered in memory or
written to disk and read block by block (docs/continuous-training.md, "Streams larger than memory").

    python scripts/node_decoder_memory.py EVENTS WIDTH {memory,spilled} [--spill-dir DIR] [--epochs 1]

Prints one JSON line with the peak RSS (ru_maxrss) before decoding and after. Memory figures are valid
on a loaded host; the seconds are not.
"""
from __future__ import annotations

import argparse
import json
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from dgbench.tasks.evalset import EvaluationSet, EvaluationSpec
from dgbench.tasks.node import SOURCE_STATE, DecoderOptions, NodeClassification

GATHERED_ROWS = 600  # rows per gathered batch, as a TGN batch of 600 events


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def label_arrays(events: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    cuts = (0, int(events * 0.7), int(events * 0.85), events)
    arrays = {}
    for split, a, b in zip(("train", "val", "test"), cuts[:-1], cuts[1:]):
        arrays[f"{split}_events"] = np.arange(a, b, dtype=np.int64)
        arrays[f"{split}_label"] = (rng.random(b - a) < 0.1).astype(np.int8)
    return arrays


def batches(events: int, width: int, labels: np.ndarray, seed: int) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed)
    for low in range(0, events, GATHERED_ROWS):
        high = min(events, low + GATHERED_ROWS)
        rows = rng.normal(0, 1, (high - low, width)) + labels[low:high, None]
        yield np.column_stack([np.arange(low, high, dtype=np.float64), rows])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("events", type=int)
    parser.add_argument("width", type=int)
    parser.add_argument("source", choices=("memory", "spilled"))
    parser.add_argument("--spill-dir", type=Path, default=Path("."))
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    arrays = label_arrays(args.events, np.random.default_rng(0))
    labels = np.concatenate([arrays[f"{s}_label"] for s in ("train", "val", "test")])
    spec = EvaluationSpec("node-classification", SOURCE_STATE, 0)
    task = NodeClassification(EvaluationSet(spec, "synthetic", "f", arrays, Path("labels")), 1,
                              DecoderOptions(epochs=args.epochs),
                              spill_dir=args.spill_dir if args.source == "spilled" else None)
    before, started = peak_rss_bytes(), time.perf_counter()
    figures = task.figures_from(batches(args.events, args.width, labels, 1))
    seconds = round(time.perf_counter() - started, 1)
    print(json.dumps({"events": args.events, "width": args.width, "source": args.source,
                      "test_auc": figures["test"]["auc"], "seconds_loaded_host": seconds,
                      "rss_before_bytes": before, "peak_rss_bytes": peak_rss_bytes()}), flush=True)


if __name__ == "__main__":
    main()
