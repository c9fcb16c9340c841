"""What the arrival probe costs: the barrier dgbench/dist.py puts in front of each blocking collective.

Prints, for 2 gloo ranks, the median seconds of a barrier when both ranks arrive together, beside a
1-element all-reduce and a 64k-element all-to-all, and the record's own floor (``probe_floor_s``). A probe
costs about one small collective; an epoch with k probed collectives pays k times it (docs/result-record.md,
"Busy, wait and transfer"). Run:
    flock /tmp/dgbench-timing.lock .venv/bin/pytest benchmarks/test_arrival_probe_bench.py --benchmark-disable -s
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from dgbench.dist import DistContext
from dgbench.launch import launch

CALLS = 500


def _median_seconds(operation, calls: int = CALLS) -> float:
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        operation()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def _costs(ctx: DistContext) -> dict[str, float]:
    one, block = torch.zeros(1), torch.zeros(65536)
    out = torch.empty_like(block)
    return {"barrier (the probe)": _median_seconds(dist.barrier),
            "all_reduce 1 float": _median_seconds(lambda: dist.all_reduce(one)),
            "all_to_all 64k floats": _median_seconds(lambda: dist.all_to_all_single(out, block))}


def test_the_arrival_probe_costs_about_one_small_collective(benchmark):
    per_rank = benchmark.pedantic(lambda: launch(_costs, 2), rounds=1, iterations=1)
    print(f"\nmedian of {CALLS} calls, 2 gloo ranks, 1 thread each; load average "
          f"{open('/proc/loadavg').read().split()[0]}")
    for name in per_rank[0]:
        print(f"{name:>24}: " + "  ".join(f"rank {r} {costs[name] * 1e6:8.1f} us" for r, costs in enumerate(per_rank)))
    benchmark.extra_info.update({name: max(costs[name] for costs in per_rank) for name in per_rank[0]})
