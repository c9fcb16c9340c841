"""`edgebank`: Poursafaei et al.'s memorisation baseline (NeurIPS'22 §5) for edge streams.

EdgeBank predicts an edge (s, d) at time t if the pair was seen before: score 1 when some event
(s, d, t') with t' < t is in its memory, else 0. Two memories (``--bank``):

* ``unlimited`` (EdgeBank∞): every earlier event;
* ``time-window`` (EdgeBank_tw): only events with t - w <= t' < t. The paper sets w to the duration of
  the test split; that is the default here (``--time-window`` overrides it, in the store's time unit).
  DyGLib's ``fixed_proportion`` mode takes the window as a quantile of the history's times instead.

Choice (stated because it changes numbers): the memory at time t holds every event strictly before t,
training, validation and earlier test events alike — independent of the batch size, where DyGLib and
TGB add a batch's events after scoring the whole batch. Scores are exactly 0 or 1, so the averaged-tie
MRR rule matters for EdgeBank (:mod:`dgbench.metrics`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dgbench.options import Options, option
from dgbench.registry import register_model
from dgbench.store import STREAM, EdgeStreamStore, open_store
from dgbench.tasks.baselines import Baseline
from dgbench.tasks.link import stream_ranges

UNLIMITED, TIME_WINDOW = "unlimited", "time-window"
PAIR_TIME = np.dtype([("key", "<i8"), ("t", "<f8")])  # compared field by field: pair, then time


@dataclass(frozen=True)
class EdgeBankOptions(Options):
    bank: str = option(UNLIMITED, "EdgeBank memory: every pair seen (unlimited) or those seen within the last "
                                  "--time-window (time-window).", choices=(UNLIMITED, TIME_WINDOW))
    time_window: float | None = option(None, "EdgeBank_tw window in the store's time unit (default: the test "
                                             "split's duration, Poursafaei et al. §5).", positive=True)


class EdgeBank(Baseline):
    """Memorised pairs with the times they were seen; :meth:`score` looks up the latest time before t."""

    when_array = "t"

    def __init__(self, bank: str = UNLIMITED, time_window: float | None = None):
        super().__init__()
        self.bank, self.time_window = bank, time_window
        self.window = float("inf")

    def index(self, store_path: Path, max_events: int | None = None) -> None:
        store = open_store(store_path, STREAM)
        assert isinstance(store, EdgeStreamStore)
        stop, ranges = stream_ranges(store, max_events)
        columns = store.events(0, stop)
        self.num_nodes = store.num_nodes
        t = columns["t"].astype(np.float64)
        if self.bank == TIME_WINDOW:
            start, end = ranges["test"]
            self.window = self.time_window if self.time_window is not None else \
                float(t[end - 1] - t[start]) if end > start else 0.0
        keys = columns["src"].astype(np.int64) * self.num_nodes + columns["dst"].astype(np.int64)
        self.memory = np.empty(len(keys), dtype=PAIR_TIME)
        self.memory["key"], self.memory["t"] = keys, t
        self.memory.sort(order=["key", "t"])  # by pair, then time

    def latest_before(self, src: np.ndarray, dst: np.ndarray, when: np.ndarray) -> np.ndarray:
        """Per query, the latest time t' < when of its pair (-inf when never seen before)."""
        query = src.astype(np.int64) * self.num_nodes + dst.astype(np.int64)
        wanted = np.empty(len(query), dtype=PAIR_TIME)
        wanted["key"], wanted["t"] = query, when
        # entries before (pair, when) in (pair, time) order: the last of them is the pair's latest earlier
        # time when it is of the same pair
        position = np.searchsorted(self.memory, wanted, "left") - 1
        latest = np.full(len(query), -np.inf)
        hit = position >= 0
        hit[hit] = self.memory["key"][position[hit]] == query[hit]
        latest[hit] = self.memory["t"][position[hit]]
        return latest

    def score(self, src: np.ndarray, dst: np.ndarray, when: np.ndarray) -> np.ndarray:
        when = np.asarray(when, dtype=np.float64)
        latest = self.latest_before(src, dst, when)
        return (np.isfinite(latest) & (latest >= when - self.window)).astype(np.float64)

    def describe(self) -> dict[str, object]:
        return {"bank": self.bank, "window": None if self.window == float("inf") else self.window}


@register_model("edgebank", family="continuous", options=EdgeBankOptions,
                summary="EdgeBank baseline (Poursafaei et al.): memorised pairs, unlimited or time-window")
def edgebank(memory_dim: int = 0, edge_dim: int = 0, time_shift: float = 0.0, time_scale: float = 1.0,
             bank: str = UNLIMITED, time_window: float | None = None) -> EdgeBank:
    return EdgeBank(bank, time_window)
