"""Peer comparisons measured one way everywhere: A B A B rounds on the same work, each round's ratio on the
wall clock and per process-CPU second, printed as median [min-max] over the rounds with both sides' thread
counts and the load average seen (docs/performance.md, "How ratios are measured")."""
from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    """One side's cost of one unit of work in one round (e.g. the median timed epoch)."""

    wall_s: float
    cpu_s: float


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> "Spread":
        return cls(statistics.median(values), min(values), max(values))

    def __str__(self) -> str:
        return f"{self.median:.2f}x [{self.low:.2f}-{self.high:.2f}]"


def timed(work: Callable[[], Any]) -> tuple[Any, Timing]:
    """``work()`` and what it cost this process (wall and CPU seconds, every thread)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, Timing(time.perf_counter() - wall, time.process_time() - cpu)


def alternate(ours: Callable[[], Timing], peer: Callable[[], Timing], rounds: int
              ) -> tuple[list[Timing], list[Timing], tuple[float, float]]:
    """``rounds`` of ours then peer (a drift in machine load hits both sides); the 1-minute load average
    before and after."""
    load_before = os.getloadavg()[0]
    mine, theirs = [], []
    for _ in range(rounds):
        mine.append(ours())
        theirs.append(peer())
    return mine, theirs, (load_before, os.getloadavg()[0])


def speedups(ours: list[Timing], peer: list[Timing]) -> dict[str, Spread]:
    """Per round, how many times faster ours is (peer seconds / our seconds), on each clock."""
    return {"wall": Spread.of([p.wall_s / o.wall_s for o, p in zip(ours, peer)]),
            "cpu": Spread.of([p.cpu_s / o.cpu_s for o, p in zip(ours, peer) if o.cpu_s > 0])}


def ratio_line(label: str, ours: list[Timing], peer: list[Timing], load: tuple[float, float], threads: int) -> str:
    """The printed verdict: per-CPU-second and per-wall-second speed-up, median [range] over the rounds."""
    ratio = speedups(ours, peer)
    return (f"{label}: dgbench / peer = {ratio['cpu']} per CPU-second, {ratio['wall']} per wall second; "
            f"{len(ours)} alternating rounds, {threads} thread(s) each side, load average {load[0]:.2f} -> "
            f"{load[1]:.2f}")


def median_epoch(timings: list[Timing]) -> Timing:
    """The median timed epoch of one run, on each clock (the first epoch warms up and is left out)."""
    timed = timings[1:] or timings
    return Timing(statistics.median(t.wall_s for t in timed), statistics.median(t.cpu_s for t in timed))


def record_epochs(record: dict[str, Any]) -> list[Timing]:
    """A dgbench record's epochs as (wall, rank 0's process CPU) seconds (its timing evidence)."""
    return [Timing(e["time_s"], e["per_rank"][0]["evidence"]["cpu_s"]) for e in record["epochs"]]


def epoch_timings(step: Callable[[int], Any], epochs: int) -> list[Timing]:
    """``step(epoch)`` for each epoch, each timed on both clocks in this process."""
    out = []
    for epoch in range(epochs):
        _, timing = timed(lambda: step(epoch))
        out.append(timing)
    return out
