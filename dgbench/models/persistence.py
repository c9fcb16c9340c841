"""`persistence`: the snapshot-store baseline — predict an edge of snapshot t+1 if it was in the last
snapshot(s).

Score of (u, v) for input step t (target snapshot t+1): the number of the ``--lookback`` most recent
input snapshots t-L+1..t that hold the pair (L = 1: "the edge persists"; larger L ranks pairs seen more
often in the recent past higher). The discrete models predict snapshot t+1 from snapshots 0..t; so
does this baseline, from the last L of them. It learns nothing, so every scheme gives the same record.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dgbench.options import Options, option
from dgbench.registry import register_model
from dgbench.store import SNAPSHOTS, SnapshotStore, open_store
from dgbench.tasks.baselines import Baseline


@dataclass(frozen=True)
class PersistenceOptions(Options):
    lookback: int = option(1, "Snapshots the persistence baseline looks back over (a pair scores how many "
                              "of them hold it).", positive=True)


class Persistence(Baseline):
    """Distinct pairs of every snapshot; :meth:`score` counts the look-back snapshots holding a pair."""

    when_array = "steps"

    def __init__(self, lookback: int = 1):
        super().__init__()
        self.lookback = lookback

    def index(self, store_path: Path, max_events: int | None = None) -> None:
        store = open_store(store_path, SNAPSHOTS)
        assert isinstance(store, SnapshotStore)
        self.num_nodes = store.num_nodes
        self.pairs = [np.unique(s.src.astype(np.int64) * self.num_nodes + s.dst) for s in store.snapshots()]

    def score(self, src: np.ndarray, dst: np.ndarray, when: np.ndarray) -> np.ndarray:
        query = src.astype(np.int64) * self.num_nodes + dst.astype(np.int64)
        steps = np.asarray(when, dtype=np.int64)
        out = np.zeros(len(query))
        for step in np.unique(steps):
            rows = steps == step
            for t in range(max(0, step - self.lookback + 1), step + 1):
                out[rows] += np.isin(query[rows], self.pairs[t], assume_unique=False)
        return out

    def describe(self) -> dict[str, object]:
        return {"lookback": self.lookback}


@register_model("persistence", family="discrete", options=PersistenceOptions,
                summary="Persistence baseline: an edge of t+1 is predicted if it was in the last snapshot(s)")
def persistence(in_features: int = 2, hidden: int = 6, lookback: int = 1) -> Persistence:
    return Persistence(lookback)
