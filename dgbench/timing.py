"""Timing evidence: how clean a measured epoch was, and whether a run was contended.

Every epoch of every rank carries :class:`EpochEvidence` (wall and process-CPU seconds, intra-op
threads, how long this process's threads waited for a CPU, and the host's busy time and load during the
epoch); :func:`timing_summary` turns a record's epochs into its ``timing`` block: the CPU share, the
share of the host other tenants took, the spread of the timed epochs, and the ``contended`` verdict
with its reasons. Field meanings: docs/result-record.md ("Timing evidence"); the thresholds and the
measurements behind them: leaderboards/RULES.md ("Clean timing").

    python -m dgbench.timing quiet-check [--seconds S]    # exit 1 with one line when the host is loaded
    python -m dgbench.timing gemm-probe                   # the host's 1-thread FP32 GEMM rate, to print beside timings
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------- thresholds (RULES.md, "Clean timing")
MIN_CPU_SHARE = 0.80  # a 1-thread rank's CPU s / (wall s - seconds in collectives) below this: denied a CPU
MAX_RUN_DELAY_SHARE = 0.10  # the training thread waited for a CPU more than this share of the wall time
MAX_OTHERS_SHARE = 0.25  # other tenants (and steal) took more than this share of the host's CPU time
MAX_CV = 0.15  # coefficient of variation of the timed epochs' throughput above this: unstable
MIN_RANKED_EPOCHS = 5  # timed epochs (after the warm-up) a throughput or scaling row needs to rank
# /proc/stat counts 10 ms ticks: timed epochs shorter than this (all together) leave others' share unmeasured
MIN_HOST_WINDOW_S = 1.0
QUIET_CHECK_SECONDS = 5.0
QUIET_MAX_BUSY_SHARE = 0.15  # seed_board.sh starts only when the idle host's CPUs are at most this busy

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- reading the host

def _host_cpu_seconds() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole host since boot, summed over CPUs (/proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS, steal / CLOCK_TICKS


def _run_delay_seconds() -> float:
    """Seconds the calling thread (the one training) spent runnable but waiting for a CPU
    (/proc/thread-self/schedstat; 0 where the kernel has no schedstat)."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


@dataclass(frozen=True)
class HostSample:
    """Clocks and counters at one instant, for deltas over an epoch."""

    wall: float
    cpu: float
    run_delay: float
    host_busy: float
    host_steal: float

    @classmethod
    def now(cls) -> "HostSample":
        busy, steal = _host_cpu_seconds()
        return cls(time.perf_counter(), time.process_time(), _run_delay_seconds(), busy, steal)


@dataclass(frozen=True)
class EpochEvidence:
    """One rank's evidence for one epoch (seconds; ``host_*`` are the whole host's, all CPUs)."""

    wall_s: float
    cpu_s: float
    threads: int
    cores: int
    run_delay_s: float
    host_busy_s: float
    host_steal_s: float
    load_1m: float

    @classmethod
    def between(cls, start: HostSample, end: HostSample, threads: int) -> "EpochEvidence":
        return cls(end.wall - start.wall, end.cpu - start.cpu, threads, cores(),
                   max(0.0, end.run_delay - start.run_delay), max(0.0, end.host_busy - start.host_busy),
                   max(0.0, end.host_steal - start.host_steal), _load_average())

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- spreads

@dataclass(frozen=True)
class Spread:
    """Median and spread of a run's timed epochs (one figure, e.g. throughput)."""

    median: float
    q1: float
    q3: float
    minimum: float
    maximum: float
    cv: float  # sample standard deviation / mean (0 for fewer than two values)
    count: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @classmethod
    def of(cls, values: list[float]) -> "Spread":
        if not values:
            return cls(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
        ordered = sorted(float(v) for v in values)
        q1, q3 = (statistics.quantiles(ordered, n=4, method="inclusive")[i] for i in (0, 2)) \
            if len(ordered) > 1 else (ordered[0], ordered[0])
        mean = statistics.fmean(ordered)
        cv = statistics.stdev(ordered) / mean if len(ordered) > 1 and mean > 0 else 0.0
        return cls(statistics.median(ordered), q1, q3, ordered[0], ordered[-1], cv, len(ordered))

    def as_dict(self) -> dict[str, float]:
        return {"median": self.median, "q1": self.q1, "q3": self.q3, "iqr": self.iqr, "min": self.minimum,
                "max": self.maximum, "cv": self.cv, "count": self.count}


# --------------------------------------------------------------------------- the verdict

@dataclass(frozen=True)
class Contention:
    """The figures the ``contended`` verdict is taken from (timed epochs, all ranks) and its reasons."""

    cpu_share: float  # lowest rank's CPU s / (wall s x threads)
    active_cpu_share: float  # lowest rank's CPU s / ((wall s - seconds in collectives) x threads), at most 1
    run_delay_share: float  # highest rank's run-queue wait of its training thread / wall s
    others_share: float | None  # host CPU time not this job's / (wall s x cores); None: window too short
    steal_share: float
    load_per_core: float  # highest 1-minute load average less this job's threads, per core (shown, not judged:
    # it averages the past minute, so it still counts a load that ended before the run)
    reasons: tuple[str, ...]

    @property
    def contended(self) -> bool:
        return bool(self.reasons)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else 0.0


def assess(timed: list[dict[str, Any]]) -> Contention | None:
    """The verdict over ``timed`` epochs (record entries with per-rank ``evidence``); None without evidence."""
    ranks = [[r["evidence"] for r in epoch["per_rank"] if "evidence" in r] for epoch in timed]
    if not ranks or not all(ranks):
        return None
    world = len(ranks[0])
    per_rank = [[epoch[rank] for epoch in ranks] for rank in range(world)]
    waits = [[r.get("wait_s", 0.0) + r.get("collective_transfer_s", 0.0) for r in epoch["per_rank"]] for epoch in timed]
    shares, active, delays = [], [], []
    for rank, evidence in enumerate(per_rank):
        cpu = sum(e["cpu_s"] for e in evidence)
        thread_wall = sum(e["wall_s"] * e["threads"] for e in evidence)
        waited = sum(epoch_waits[rank] * e["threads"] for epoch_waits, e in zip(waits, evidence))
        shares.append(_ratio(cpu, thread_wall))
        active.append(min(1.0, _ratio(cpu, thread_wall - waited)))
        delays.append(_ratio(sum(e["run_delay_s"] for e in evidence), sum(e["wall_s"] for e in evidence)))
    first = per_rank[0]
    job_cpu = sum(sum(e["cpu_s"] for e in evidence) for evidence in per_rank)
    host_capacity = sum(e["wall_s"] * e["cores"] for e in first)
    window = sum(e["wall_s"] for e in first)
    others = _ratio(max(0.0, sum(e["host_busy_s"] for e in first) - job_cpu), host_capacity) \
        if window >= MIN_HOST_WINDOW_S else None
    steal = _ratio(sum(e["host_steal_s"] for e in first), host_capacity)
    threads = max(e["threads"] for e in first)
    own = world * threads  # this job's runnable threads count in the load average too
    load = max(max(0.0, e["load_1m"] - own) / e["cores"] for evidence in per_rank for e in evidence)
    reasons = []
    if threads == 1 and min(active) < MIN_CPU_SHARE:
        reasons.append(f"CPU share {min(active):.2f} < {MIN_CPU_SHARE} (a rank was denied its core)")
    if max(delays) > MAX_RUN_DELAY_SHARE:
        reasons.append(f"the training thread waited for a CPU {max(delays):.0%} of the time "
                       f"(> {MAX_RUN_DELAY_SHARE:.0%})")
    if others is not None and others > MAX_OTHERS_SHARE:
        reasons.append(f"other tenants took {others:.0%} of the host's CPU (> {MAX_OTHERS_SHARE:.0%})")
    return Contention(min(shares), min(active), max(delays), others, steal, load, tuple(reasons))


def timing_summary(epochs: list[dict[str, Any]], world_size: int, warmup: int = 1) -> dict[str, Any]:
    """A record's ``timing`` block: threads, the oversubscription warning, the timed epochs' spread and
    the contention verdict (docs/result-record.md, "Timing evidence")."""
    timed = epochs[warmup:] or epochs
    evidence = [r.get("evidence") for e in epochs for r in e["per_rank"]]
    threads = max((e["threads"] for e in evidence if e), default=None)
    host_cores = max((e["cores"] for e in evidence if e), default=cores())
    out: dict[str, Any] = {"threads_per_rank": threads, "cores": host_cores, "warmup_epochs": warmup,
                           "timed_epochs": len(timed), "warnings": [],
                           "throughput": Spread.of([e["throughput"] for e in timed]).as_dict(),
                           "time_s": Spread.of([e["time_s"] for e in timed]).as_dict()}
    if threads is not None and world_size * threads > host_cores:
        out["warnings"].append(f"{world_size} ranks x {threads} threads > {host_cores} cores: ranks share cores")
    verdict = assess(timed)
    if verdict is None:
        out.update(contended=None, reasons=["no timing evidence"])
        return out
    out.update(contended=verdict.contended, reasons=list(verdict.reasons),
               cpu_share=verdict.cpu_share, active_cpu_share=verdict.active_cpu_share,
               run_delay_share=verdict.run_delay_share, others_share=verdict.others_share,
               steal_share=verdict.steal_share, load_per_core=verdict.load_per_core)
    return out


# --------------------------------------------------------------------------- is the host quiet?

def host_load(seconds: float = QUIET_CHECK_SECONDS) -> tuple[float, float]:
    """(share of the host's CPU time busy over ``seconds``, 1-minute load average per core), with this
    process asleep: what other tenants take."""
    start, _ = _host_cpu_seconds()
    time.sleep(seconds)
    end, _ = _host_cpu_seconds()
    return min(1.0, _ratio(end - start, seconds * cores())), _load_average() / cores()  # ticks overshoot short windows


def quiet_problem(seconds: float = QUIET_CHECK_SECONDS) -> str | None:
    """One line saying why the host is too loaded to time on, or None when it is quiet enough. Judged on the
    CPU time others took while this process slept; the load average (which still counts the past minute,
    e.g. the previous run) is shown, not judged."""
    busy, load = host_load(seconds)
    if busy > QUIET_MAX_BUSY_SHARE:
        return (f"host is loaded: its CPUs were {busy:.0%} busy over {seconds:g} s (bound {QUIET_MAX_BUSY_SHARE:.0%}; "
                f"load average {load:.2f} per core); timing now would be refused as contended "
                f"(leaderboards/RULES.md, Clean timing)")
    return None


def gemm_probe(size: int = 2048, repeats: int = 5) -> float:
    """GFLOP per CPU-second of the best of ``repeats`` single-thread FP32 ``size``² products. An idle but slowed
    host (a throttled or overcommitted VM) passes :func:`quiet_problem` and still times everything slow; this
    rate, printed beside a timing window's steps, shows it (docs/performance.md, "Quiet-host measurements")."""
    import torch  # noqa: PLC0415 - only this probe needs it

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(size, size), torch.randn(size, size)
        a @ b
        best = float("inf")
        for _ in range(repeats):
            start = time.process_time()
            a @ b
            best = min(best, time.process_time() - start)
    finally:
        torch.set_num_threads(threads)
    return 2 * size**3 / max(best, 1e-9) / 1e9


USAGE = "usage: python -m dgbench.timing quiet-check [--seconds S] | gemm-probe\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["gemm-probe"]:
        print(f"host probe: {2048}^2 GEMM {gemm_probe():.0f} GFLOP/s per CPU-second (1 thread)")
        return 0
    if not argv or argv[0] != "quiet-check":
        sys.stderr.write(USAGE)
        return 2
    seconds = float(argv[2]) if len(argv) > 2 and argv[1] == "--seconds" else QUIET_CHECK_SECONDS
    problem = quiet_problem(seconds)
    if problem:
        sys.stderr.write(f"refused: {problem}\n")
        return 1
    print(f"host quiet enough to time on (CPUs at most {QUIET_MAX_BUSY_SHARE:.0%} busy)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
