"""Where one epoch of dgbench's TGN training goes: cProfile of ``train_epoch`` of a ``single``
run, its inclusive seconds sorted into the step's parts, torch.profiler's top operators (operator calls per
step beside them), the operators called most often per step and, with ``--shapes``, the top operators by
input shape.

Batches are planned inline (``prefetch=0``) so the sampler's share shows (training overlaps it with
compute on a background thread). Times are wall seconds on whatever else runs on the machine: noisy.
docs/performance.md ("The TGN step").

    nice -n 5 .venv/bin/python scripts/profile_tgn_step.py STORE --memory-dim 172 --events 20000 --protocol batch
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
from pathlib import Path

import torch

from dgbench.trainers.config import RunConfig
from dgbench.trainers.continuous.loop import ContinuousTrainer
from dgbench.trainers.experiment import run_experiment

# part of the step -> (module path suffix, function name) whose inclusive time is that part
PARTS = {
    "plan: sampler (TemporalSampler.sample)": ("trainers/continuous/sampler.py", "sample"),
    "plan: all (negatives, sampler, ids, route)": ("trainers/continuous/data.py", "plan"),
    "rows + views (NodeState.views; includes node_views)": ("trainers/continuous/state.py", "views"),
    "  memory update: views (node_views)": ("dgbench/models/temporal.py", "node_views"),
    "    of which GRU cell + time encoding (MemoryUpdater)": ("dgbench/models/temporal.py", "forward:MemoryUpdater"),
    "batch inputs (times, features, masks)": ("trainers/continuous/loop.py", "_inputs"),
    "embedding: attention (TGN.embed)": ("dgbench/models/temporal.py", "embed"),
    "  of which attention over the neighbours (TGN._attend)": ("dgbench/models/temporal.py", "_attend"),
    "edge predictor (forward)": ("dgbench/models/temporal.py", "forward:EdgePredictor"),
    "mailbox write: update rows (write_rows)": ("dgbench/models/temporal.py", "write_rows"),
    "mailbox write: merge into table (_store)": ("trainers/continuous/state.py", "_store"),
    "autograd backward": ("torch/_tensor.py", "backward"),
    "optimizer (Adam.step + zero_grad)": ("torch/optim/optimizer.py", "wrapper"),
    "counters (Eq. 1 redundancy, Eq. 7-9 bytes)": ("trainers/continuous/loop.py", "_count"),
    "gradient sync (no-op at P=1)": ("trainers/gradients.py", "synchronise"),
}


def _line_of(path: str, name: str, cls: str) -> int | None:
    """First line of ``cls.name`` (or of the module-level ``name``) in ``path``, to tell same-named functions apart."""
    import inspect

    import dgbench.models.temporal as temporal
    if path.endswith("models/temporal.py") and cls:
        return inspect.getsourcelines(getattr(getattr(temporal, cls), name))[1]
    return None


def inclusive_seconds(stats: pstats.Stats) -> dict[str, float]:
    out = {}
    for part, (path, spec) in PARTS.items():
        name, _, cls = spec.partition(":")
        line = _line_of(path, name, cls)
        total = 0.0
        for (file, lineno, func), (_, _, _, cumulative, callers) in stats.stats.items():
            if file.endswith(path) and func == name and (line is None or lineno == line):
                # recursion-safe: count time entered from outside this function only
                total += sum(c[3] for caller, c in callers.items() if caller[2] != func)
        out[part] = total
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--memory-dim", type=int, default=100)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ops", type=int, default=15, help="torch.profiler operators to list")
    parser.add_argument("--protocol", choices=("tgl", "batch"), default="tgl", help="dgbench's --protocol")
    parser.add_argument("--shapes", action="store_true", help="also list the top operators by input shape")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    profiler = cProfile.Profile()
    original = ContinuousTrainer.train_epoch
    seconds = {}

    def profiled(self, epoch, timer):
        import time
        start = time.perf_counter()
        profiler.enable()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=args.shapes) as ops:
            result = original(self, epoch, timer)
        profiler.disable()
        seconds["epoch"] = time.perf_counter() - start
        seconds["ops"] = ops
        return result

    ContinuousTrainer.train_epoch = profiled
    try:
        record = run_experiment(RunConfig(scheme="single", model="tgn", dataset=args.store, epochs=1, batch_size=600,
                                          neighbors=10, memory_dim=args.memory_dim, lr=0.001, seed=0,
                                          max_events=args.events, protocol=args.protocol, extra={"prefetch": 0}))
    finally:
        ContinuousTrainer.train_epoch = original
    stats = pstats.Stats(profiler)
    epoch = seconds["epoch"]
    trained = record["epochs"][0]["work"]
    steps = -(-trained // 600)  # batches of 600 events
    calls = sum(event.count for event in seconds["ops"].key_averages())
    print(f"TGN single, protocol {args.protocol}, memory {args.memory_dim}, {trained} training events, batch 600, "
          f"k=10, {args.threads} thread(s),"
          f" prefetch 0, profiled epoch {epoch:.2f}s ({trained / epoch:.0f} ev/s under the profilers); "
          f"commit {(record['code']['commit'] or 'not a git tree')[:10]} dirty={record['code']['dirty']}")
    print(f"{'part':52s} {'s':>7s} {'%':>6s}")
    for part, value in inclusive_seconds(stats).items():
        print(f"{part:52s} {value:7.2f} {100 * value / epoch:6.1f}")
    print(f"\ntorch.profiler, top {args.ops} operators by self CPU time:")
    table = seconds["ops"].key_averages().table(sort_by="self_cpu_time_total", row_limit=args.ops,
                                                max_name_column_width=40)
    print(table)
    print(f"operator calls per step (every aten operator, nested and backward ones included): {calls / steps:.0f}")
    print(f"\ntop {args.ops} operators by calls per step (self CPU ms per step beside them):")
    for event in sorted(seconds["ops"].key_averages(), key=lambda event: -event.count)[:args.ops]:
        print(f"{event.key[:48]:48s} {event.count / steps:8.1f} {event.self_cpu_time_total / steps / 1e3:8.2f}")
    if args.shapes:
        print(f"\ntop {args.ops} operators by (name, input shapes):")
        print(seconds["ops"].key_averages(group_by_input_shape=True).table(
            sort_by="self_cpu_time_total", row_limit=args.ops, max_name_column_width=30, max_shapes_column_width=70))


if __name__ == "__main__":
    main()
