"""The one epoch driver every scheme of both families runs under.

A scheme supplies ``train_epoch(epoch, timer) -> (loss, work)`` (work = edges or events processed,
for throughput) and ``evaluate() -> {split: metrics}``; this module times the epoch, splits it into
transfer / compute / communication and into busy / wait / transfer (dgbench/dist.py's arrival probes),
takes the epoch's timing evidence (dgbench/timing.py: CPU seconds, threads, host load), reads the
counted collectives and peak memory, and merges the per-rank figures into the record's per-epoch
entries (docs/result-record.md). It never knows which scheme is on.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from dgbench.dist import DistContext, PhaseTimer, peak_memory
from dgbench.progress import bar as progress_bar
from dgbench.progress import is_quiet
from dgbench.units import human
from dgbench.timing import EpochEvidence, HostSample

TrainEpoch = Callable[[int, PhaseTimer], tuple[float, int]]
Evaluate = Callable[[], dict[str, dict[str, float]]]


def _summary_line(label: str, epoch: int, epochs: int, loss: float, elapsed: float, work: int, unit: str,
                  metrics: dict[str, dict[str, float]]) -> str:
    """One line per epoch: loss, time, throughput and the validation metric. Test scores are never shown
    per epoch: an epoch is not to be chosen by its test score (the record keeps them for auditing)."""
    rate = work / elapsed if elapsed > 0 else 0.0
    scores = "  ".join(f"{split} ap {m['ap']:.4f}" for split, m in metrics.items() if "ap" in m and split != "test")
    return (f"{label} epoch {epoch + 1}/{epochs}: loss {loss:.4f}  {elapsed:.2f}s  "
            f"{human(rate)} {unit}/s  {scores}").rstrip()


def run_epochs(ctx: DistContext, *, epochs: int, train_epoch: TrainEpoch, evaluate: Evaluate,
               label: str = "train", unit: str = "items") -> list[dict[str, Any]]:
    """Train ``epochs`` epochs on this rank; returns this rank's per-epoch figures. Rank 0 shows a
    progress bar over the epochs and one summary line per epoch on stderr (off with --quiet)."""
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
        if bar is not None:
            bar.set_postfix_str("scoring validation and test", refresh=True)
        metrics = evaluate()
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
    if bar is not None:
        bar.close()
    return figures


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
