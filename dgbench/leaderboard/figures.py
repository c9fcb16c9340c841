"""One record reduced to the figures the tables, plots and `compare` show.

Throughput and communication volume are medians over the timed epochs (all epochs after the
warm-up; every epoch when a record has no more than the warm-up), so one slow epoch neither helps nor
hurts a run. The epoch time and its split into transfer / compute / communication are those of one
epoch, the median one (:func:`median_epoch`): medians taken phase by phase need not add up to the
median time (0.037 s of bars beside a 0.0351 s epoch), one epoch's split always does. Records with
the busy / wait / transfer split (dgbench/dist.py's arrival probes) are drawn as that split, older
ones as transfer / compute / communication. The throughput's spread over the timed epochs (IQR,
min/max, CV: dgbench/timing.py) comes with the median.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from dgbench.leaderboard.tracks import WARMUP_EPOCHS
from dgbench.timing import Spread


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
    spread: Spread | None = None  # of the timed epochs' throughput
    busy_s: float | None = None  # the median epoch's slowest rank: busy + wait + transfer = time_s
    wait_s: float | None = None
    collective_transfer_s: float | None = None
    balance: float | None = None  # λ of the median epoch: max / min busy seconds over ranks
    critical_path_s: float | None = None  # its longest busy + collective transfer of a rank

    @property
    def breakdown(self) -> dict[str, float]:
        """The median epoch's time in parts that add up to it: busy / wait / transfer where recorded."""
        split = (self.busy_s, self.wait_s, self.collective_transfer_s)
        if None not in split and abs(sum(split) - self.time_s) <= 1e-6 * max(self.time_s, 1e-9):  # type: ignore[arg-type]
            return {"busy": self.busy_s, "wait": self.wait_s, "transfer": self.collective_transfer_s}
        return {"transfer": self.transfer_s, "compute": self.compute_s, "communication": self.communication_s}


def timed_epochs(record: dict[str, Any]) -> list[dict[str, Any]]:
    epochs = record["epochs"]
    return epochs[WARMUP_EPOCHS:] or epochs


def median_epoch(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """The epoch of median time (the lower of the middle two for an even count; the earlier on ties)."""
    ordered = sorted(enumerate(epochs), key=lambda item: (item[1]["time_s"], item[0]))
    return ordered[(len(ordered) - 1) // 2][1]


def run_figures(record: dict[str, Any]) -> RunFigures:
    timed = timed_epochs(record)

    def median(key: str) -> float:
        return float(statistics.median(epoch[key] for epoch in timed))

    middle = median_epoch(timed)
    peak = max(epoch.get("cuda_max_allocated_bytes", epoch["peak_rss_bytes"]) for epoch in record["epochs"])
    test = record["final_metrics"].get("test", {})
    return RunFigures(throughput=median("throughput"), time_s=float(middle["time_s"]),
                      transfer_s=float(middle["transfer_s"]), compute_s=float(middle["compute_s"]),
                      communication_s=float(middle["communication_s"]), comm_bytes=median("comm_bytes"),
                      peak_memory_bytes=int(peak), timed_epochs=len(timed),
                      test_metrics=dict(test) if isinstance(test, dict) else {},
                      spread=Spread.of([epoch["throughput"] for epoch in timed]),
                      busy_s=_figure(middle, "busy_s"), wait_s=_figure(middle, "wait_s"),
                      collective_transfer_s=_figure(middle, "collective_transfer_s"),
                      balance=_figure(middle, "lambda"), critical_path_s=_figure(middle, "critical_path_s"))


def _figure(epoch: dict[str, Any], key: str) -> float | None:
    value = epoch.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0
