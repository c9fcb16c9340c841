"""One record reduced to the figures the tables, plots and `compare` show.

Times and volumes are medians over the timed epochs (all epochs after the warm-up; every epoch when
a record has no more than the warm-up), so one slow epoch neither helps nor hurts a run.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from dgbench.leaderboard.tracks import WARMUP_EPOCHS


@dataclass(frozen=True)
class RunFigures:
    throughput: float  # edges (or events) per second, median timed epoch
    time_s: float
    transfer_s: float
    compute_s: float
    communication_s: float
    comm_bytes: float  # per epoch, all ranks
    peak_memory_bytes: int  # largest over epochs: device memory where measured, else host RSS
    timed_epochs: int
    test_metrics: dict[str, float | None]

    @property
    def breakdown(self) -> dict[str, float]:
        return {"transfer": self.transfer_s, "compute": self.compute_s, "communication": self.communication_s}


def timed_epochs(record: dict[str, Any]) -> list[dict[str, Any]]:
    epochs = record["epochs"]
    return epochs[WARMUP_EPOCHS:] or epochs


def run_figures(record: dict[str, Any]) -> RunFigures:
    timed = timed_epochs(record)

    def median(key: str) -> float:
        return float(statistics.median(epoch[key] for epoch in timed))

    peak = max(epoch.get("cuda_max_allocated_bytes", epoch["peak_rss_bytes"]) for epoch in record["epochs"])
    test = record["final_metrics"].get("test", {})
    return RunFigures(throughput=median("throughput"), time_s=median("time_s"), transfer_s=median("transfer_s"),
                      compute_s=median("compute_s"), communication_s=median("communication_s"),
                      comm_bytes=median("comm_bytes"), peak_memory_bytes=int(peak), timed_epochs=len(timed),
                      test_metrics=dict(test) if isinstance(test, dict) else {})


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0
