"""Synthetic node-classification label sets for the decoder's tests (keys are event ids in time order)."""
from __future__ import annotations

import numpy as np

from dgbench.tasks.node import SPLITS


def event_label_arrays(rng: np.random.Generator, sizes: tuple[int, int, int], positive_rate: float
                       ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per split, consecutive event ids and labels drawn positive with ``positive_rate``; and every label in order."""
    arrays: dict[str, np.ndarray] = {}
    start = 0
    for split, n in zip(SPLITS, sizes):
        arrays[f"{split}_events"] = np.arange(start, start + n)
        arrays[f"{split}_label"] = (rng.random(n) < positive_rate).astype(np.int8)
        start += n
    return arrays, np.concatenate([arrays[f"{split}_label"] for split in SPLITS])
