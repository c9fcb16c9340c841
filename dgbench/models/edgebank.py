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
from dgbench.tasks.link import READ_EVENTS, stream_ranges

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
        self.earliest_query = -np.inf

    def index(self, store_path: Path, max_events: int | None = None, block: int = READ_EVENTS,
              earliest_query: float | None = None) -> None:
        """Read the store ``block`` events at a time, for queries at times >= ``earliest_query`` (default: the
        validation split's first time t_v, the earliest any evaluation set asks about). An event before that
        time only ever counts as its pair's latest, so each pair keeps just that one; later events are kept
        whole. The memory is then bounded by the distinct pairs and the evaluated splits, not by the stream,
        and the scores are those of keeping every event; :meth:`score` refuses an earlier query."""
        store = open_store(store_path, STREAM)
        assert isinstance(store, EdgeStreamStore)
        stop, ranges = stream_ranges(store, max_events)
        self.num_nodes = store.num_nodes
        if self.bank == TIME_WINDOW:
            start, end = ranges["test"]
            self.window = self.time_window if self.time_window is not None else \
                float(store.read("t", end - 1, end)[0]) - float(store.read("t", start, start + 1)[0]) \
                if end > start else 0.0
        first_query = ranges["val"][0]
        query_time = earliest_query if earliest_query is not None else \
            float(store.read("t", first_query, first_query + 1)[0]) if first_query < stop else np.inf
        self.earliest_query = query_time
        latest = np.empty(0, dtype=PAIR_TIME)  # one entry per pair seen strictly before query_time
        kept = []  # events at or after query_time
        for a in range(0, stop, block):
            entries = self._entries(store, a, min(a + block, stop))
            early = entries["t"] < query_time
            latest = _latest_per_pair(np.concatenate([latest, entries[early]]))
            kept.append(entries[~early])
        self.memory = np.concatenate([latest, *kept])
        self.memory.sort(order=["key", "t"])  # by pair, then time

    def _entries(self, store: EdgeStreamStore, start: int, stop: int) -> np.ndarray:
        """Events [start, stop) as (pair key, time) entries."""
        entries = np.empty(stop - start, dtype=PAIR_TIME)
        entries["key"] = store.read("src", start, stop).astype(np.int64) * self.num_nodes \
            + store.read("dst", start, stop).astype(np.int64)
        entries["t"] = store.read("t", start, stop).astype(np.float64)
        return entries

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
        if len(when) and when.min() < self.earliest_query:
            raise ValueError(f"EdgeBank was indexed for queries from t = {self.earliest_query:g} "
                             f"(earliest_query); asked about t = {when.min():g}")
        latest = self.latest_before(src, dst, when)
        return (np.isfinite(latest) & (latest >= when - self.window)).astype(np.float64)

    def describe(self) -> dict[str, object]:
        return {"bank": self.bank, "window": None if self.window == float("inf") else self.window}


def _latest_per_pair(entries: np.ndarray) -> np.ndarray:
    """Each pair's entry of the latest time."""
    if not len(entries):
        return entries
    ordered = entries[np.lexsort((entries["t"], entries["key"]))]
    last = np.r_[ordered["key"][1:] != ordered["key"][:-1], True]
    return ordered[last]


@register_model("edgebank", family="continuous", options=EdgeBankOptions,
                summary="EdgeBank baseline (Poursafaei et al.): memorised pairs, unlimited or time-window")
def edgebank(memory_dim: int = 0, edge_dim: int = 0, time_shift: float = 0.0, time_scale: float = 1.0,
             bank: str = UNLIMITED, time_window: float | None = None) -> EdgeBank:
    return EdgeBank(bank, time_window)
