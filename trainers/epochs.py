"""The one epoch driver every scheme of both families runs under.

A scheme supplies ``train_epoch(epoch, timer) -> (loss, work)`` (work = edges or events processed,
for throughput) and ``evaluate() -> {split: metrics}``; this module times the epoch, splits it into
transfer / compute / communication and into busy / wait / transfer (dgbench/dist.py's arrival probes),
takes the epoch's timing evidence (dgbench/timing.py: CPU seconds, threads, host load), reads the
counted collectives and peak memory, and merges the per-rank figures into the record's per-epoch
entries (docs/result-record.md). It never knows which scheme is on. With ``--eval-every N > 1`` a
:class:`Selection` scores validation every N epochs, keeps the best-validation state and scores test
once on it (docs/tasks.md).
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dgbench.dist import DistContext, PhaseTimer, peak_memory
from dgbench.errors import DgbenchError
from dgbench.progress import bar as progress_bar
from dgbench.progress import is_quiet
from dgbench.units import human
from dgbench.tasks import NODE_CLASSIFICATION
from dgbench.timing import EpochEvidence, HostSample

TrainEpoch = Callable[[int, PhaseTimer], tuple[float, int]]
Evaluate = Callable[[], dict[str, dict[str, float]]]
SELECTION_METRIC = ("val", "ap")  # the split and metric the best-validation state is chosen by


@dataclass
class Selection:
    """Model selection under ``--eval-every N`` (docs/tasks.md): validation alone on epochs N, 2N, ...
    and the last; each rank keeps a copy of its own scoring state (its shard where state is partitioned)
    whenever the validation AP improves (the earliest epoch wins a tie); after the last epoch that state is
    restored and test is scored once, on it. Every rank sees the same gathered scores, so all keep alike."""

    every: int
    validate: Evaluate  # validation splits only, from the current state
    test: Evaluate  # test splits only, from the current state (continuous: memory carried through validation)
    keep: Callable[[], Any]  # a copy of this rank's scoring state
    restore: Callable[[Any], None]
    best_epoch: int | None = None
    best_metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    validated: list[dict[str, Any]] = field(default_factory=list)
    test_metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    _kept: Any = None

    @property
    def active(self) -> bool:
        return self.every > 1

    def due(self, epoch: int, epochs: int) -> bool:
        """Whether validation is scored after ``epoch`` (0-based): epochs N, 2N, ... and the last."""
        return (epoch + 1) % self.every == 0 or epoch == epochs - 1

    def consider(self, epoch: int, metrics: dict[str, dict[str, float]], state: Any) -> None:
        """Record the epoch's validation and keep ``state`` (copied before validation: scoring moves the
        continuous memory on) if it is the best so far (NaN never is, unless nothing better was seen)."""
        split, name = SELECTION_METRIC
        score = float(metrics.get(split, {}).get(name, float("nan")))
        self.validated.append({"epoch": epoch, name: score if score == score else None})  # JSON has no NaN
        best = float("-inf") if not self.best_metrics else \
            float(self.best_metrics.get(split, {}).get(name, float("nan")))
        if self.best_epoch is None or _above(score, best):
            self.best_epoch, self.best_metrics, self._kept = epoch, metrics, state

    def finish(self) -> None:
        """Restore the best-validation state and score test once on it."""
        assert self.best_epoch is not None, "no epoch was validated"
        self.restore(self._kept)
        self._kept = None
        self.test_metrics = self.test()

    def final_metrics(self) -> dict[str, dict[str, float]]:
        """The record's final metrics: the best epoch's validation and the test scored on its state."""
        return {**self.best_metrics, **self.test_metrics}

    def summary(self) -> dict[str, Any]:
        """The record's ``model_selection`` block (docs/result-record.md)."""
        split, name = SELECTION_METRIC
        return {"eval_every": self.every, "criterion": f"{split} {name}", "best_epoch": self.best_epoch,
                "validated": self.validated, "test": "scored once, on the best-validation state",
                "final_metrics": self.final_metrics()}


def check_eval_every(every: int, task: str) -> None:
    """Node classification scores once, after the last epoch (its decoder trains on the final model's
    embeddings, dgbench/tasks/node.py): there is no per-epoch validation to select a state by."""
    if every > 1 and task == NODE_CLASSIFICATION:
        raise DgbenchError(f"--eval-every {every}: --task {task} scores validation and test once, after the last "
                           f"epoch; leave --eval-every at 1")


def model_selection_block(summary: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    """The record's ``extra.model_selection`` and its final metrics from rank 0's :meth:`Selection.summary`."""
    block = {k: v for k, v in summary.items() if k != "final_metrics"}
    return block, summary["final_metrics"]


def _above(score: float, best: float) -> bool:
    """Strictly better, NaN below every number."""
    if score != score:
        return False
    return best != best or score > best


def _summary_line(label: str, epoch: int, epochs: int, loss: float, elapsed: float, work: int, unit: str,
                  metrics: dict[str, dict[str, float]]) -> str:
    """One line per epoch: loss, time, throughput and the validation metric. Test scores are never shown
    per epoch: an epoch is not to be chosen by its test score (the record keeps them for auditing)."""
    rate = work / elapsed if elapsed > 0 else 0.0
    scores = "  ".join(f"{split} ap {m['ap']:.4f}" for split, m in metrics.items() if "ap" in m and not _is_test(split))
    return (f"{label} epoch {epoch + 1}/{epochs}: loss {loss:.4f}  {elapsed:.2f}s  "
            f"{human(rate)} {unit}/s  {scores}").rstrip()


def _is_test(split: str) -> bool:
    """``test`` and the further sets' ``test:historical`` ... (dgbench/tasks/evaluator.py's split names)."""
    return split.split(":", 1)[0] == "test"


def run_epochs(ctx: DistContext, *, epochs: int, train_epoch: TrainEpoch, evaluate: Evaluate,
               label: str = "train", unit: str = "items", selection: Selection | None = None) -> list[dict[str, Any]]:
    """Train ``epochs`` epochs on this rank; returns this rank's per-epoch figures. Rank 0 shows a
    progress bar over the epochs and one summary line per epoch on stderr (off with --quiet). Scoring
    is never inside an epoch's time. Without an active ``selection`` every epoch scores validation and
    test (``evaluate``); with one, see :class:`Selection` (its outcome stays in it)."""
    timer = PhaseTimer(ctx.device)
    figures = []
    bar = progress_bar(epochs, label, "epoch", scale=False) if ctx.is_main else None
    threads = torch.get_num_threads()
    for epoch in range(epochs):
        ctx.comm.reset()
        timer.reset()
        if ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(ctx.device)
        before = HostSample.now()
        start = time.perf_counter()
        loss, work = train_epoch(epoch, timer)
        elapsed = time.perf_counter() - start
        evidence = EpochEvidence.between(before, HostSample.now(), threads)
        comm = ctx.comm.totals()
        by_tag = ctx.comm.snapshot()
        ctx.comm.reset()
        metrics = _score_epoch(epoch, epochs, evaluate, selection, bar)
        transfer = timer.seconds.get("transfer", 0.0)
        figures.append({"epoch": epoch, "loss": float(loss), "time_s": elapsed, "transfer_s": transfer,
                        "communication_s": comm.seconds, "compute_s": max(0.0, elapsed - transfer - comm.seconds),
                        "comm_bytes": comm.bytes, "comm_elements": comm.elements, "comm_by_tag": by_tag,
                        "work": int(work), "throughput": work / elapsed if elapsed > 0 else 0.0,
                        "metrics": metrics, "phases": dict(timer.seconds), **peak_memory(ctx.device),
                        **_time_split(elapsed, comm.seconds, comm.wait_seconds),
                        "probes": comm.probes, "probe_floor_s": comm.probe_floor_seconds,
                        "evidence": evidence.as_dict()})
        if bar is not None:
            bar.set_postfix_str("", refresh=False)
            bar.update(1)
            if not is_quiet():
                bar.write(_summary_line(label, epoch, epochs, float(loss), elapsed, int(work), unit, metrics),
                          file=sys.stderr)
    if selection is not None and selection.active:
        if bar is not None:
            bar.set_postfix_str("scoring test on the best-validation state", refresh=True)
        selection.finish()
    if bar is not None:
        bar.close()
        if selection is not None and selection.active and not is_quiet():
            sys.stderr.write(_selection_line(label, epochs, selection) + "\n")
    return figures


def _score_epoch(epoch: int, epochs: int, evaluate: Evaluate, selection: Selection | None,
                 bar: Any) -> dict[str, dict[str, float]]:
    """The epoch's scores: validation and test, or under an active selection validation alone when due."""
    if selection is None or not selection.active:
        if bar is not None:
            bar.set_postfix_str("scoring validation and test", refresh=True)
        return evaluate()
    if not selection.due(epoch, epochs):
        return {}
    if bar is not None:
        bar.set_postfix_str("scoring validation", refresh=True)
    state = selection.keep()
    metrics = selection.validate()
    selection.consider(epoch, metrics, state)
    return metrics


def _selection_line(label: str, epochs: int, selection: Selection) -> str:
    """Which epoch's state the test was scored on (never the test score itself: the run's summary line
    reports the result, and no epoch is to be picked by it)."""
    split, name = SELECTION_METRIC
    best = selection.best_metrics.get(split, {}).get(name, float("nan"))
    assert selection.best_epoch is not None
    return (f"{label}: best {split} {name} {best:.4f} at epoch {selection.best_epoch + 1}/{epochs}; "
            f"test scored once, on that epoch's state")


def _time_split(elapsed: float, communication: float, waited: float) -> dict[str, float]:
    """The epoch as busy (the rank's own work, host-device moves included) + wait (for the last rank to
    arrive at a collective) + collective transfer; the three add up to the epoch's time."""
    waited = min(waited, communication)
    return {"busy_s": max(0.0, elapsed - communication), "wait_s": waited,
            "collective_transfer_s": communication - waited}


RANK_FIELDS = ("time_s", "transfer_s", "compute_s", "communication_s", "comm_bytes", "comm_elements", "comm_by_tag",
               "peak_rss_bytes")
EVIDENCE_FIELDS = ("busy_s", "wait_s", "collective_transfer_s", "probes", "probe_floor_s", "evidence")


def balance(ranks: list[dict[str, Any]]) -> dict[str, float | None]:
    """λ = max / min of the ranks' busy seconds (DGC §2.2.2's load balance; None when a rank was never
    busy) and the critical path: the longest busy + collective transfer of any rank (waiting excluded)."""
    if not all("busy_s" in r for r in ranks):
        return {}
    busy = [r["busy_s"] for r in ranks]
    return {"lambda": max(busy) / min(busy) if min(busy) > 0 else None,
            "critical_path_s": max(r["busy_s"] + r["collective_transfer_s"] for r in ranks)}


def merge_rank_epochs(per_rank: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One entry per epoch for the record: the slowest rank's times (and its busy / wait / transfer
    split), summed communication, the largest peak memory, rank 0's loss and metrics (all ranks agree),
    λ and the critical path, and the per-rank detail with each rank's timing evidence."""
    merged = []
    for epoch_of_ranks in zip(*per_rank):
        first = epoch_of_ranks[0]
        slowest = max(epoch_of_ranks, key=lambda f: f["time_s"])
        entry = {"epoch": first["epoch"], "loss": first["loss"], "metrics": first["metrics"],
                 "time_s": slowest["time_s"], "transfer_s": slowest["transfer_s"],
                 "compute_s": slowest["compute_s"], "communication_s": slowest["communication_s"],
                 "comm_bytes": sum(f["comm_bytes"] for f in epoch_of_ranks),
                 "comm_elements": sum(f["comm_elements"] for f in epoch_of_ranks),
                 "work": first["work"], "throughput": first["work"] / slowest["time_s"] if slowest["time_s"] else 0.0,
                 "peak_rss_bytes": max(f["peak_rss_bytes"] for f in epoch_of_ranks),
                 "per_rank": [{k: f[k] for k in (*RANK_FIELDS, *EVIDENCE_FIELDS) if k in f} for f in epoch_of_ranks]}
        entry.update({k: slowest[k] for k in ("busy_s", "wait_s", "collective_transfer_s") if k in slowest})
        entry.update(balance(epoch_of_ranks))
        if "cuda_max_allocated_bytes" in first:
            entry["cuda_max_allocated_bytes"] = max(f["cuda_max_allocated_bytes"] for f in epoch_of_ranks)
        merged.append(entry)
    return merged
