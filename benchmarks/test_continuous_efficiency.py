"""Continuous-time cost per unit of work: training CPU-seconds per root, evaluation CPU-seconds per scored
candidate, and how much of the GEMM ceiling the steps reach (docs/performance.md, "Continuous-time cost
per unit of work").

Per model (and negative strategy of the evaluation set), each round builds a fresh ``single`` trainer, trains
one epoch and scores validation and test (1 positive + K negatives per event), timed in process CPU seconds
(every thread: the planning thread's sampling counts) with one intra-op thread. A root is one embedded
vertex of a training batch (source, destination, negative: 3 per event); a candidate is one scored pair
(1 + K per event). GEMM FLOPs are counted with ``torch.utils.flop_counter.FlopCounterMode`` (matrix
products only: mm, addmm, bmm, ... forward and backward) over an identical, untimed epoch and evaluation
(the shapes depend on the data only, so the timed passes do the same products). The ceiling is the
single-thread FP32 rate of a large square product (``CEILING_SIZE``², default 2048) measured in the same
process. Figures are median [min-max] over the rounds.

Quiet-host command (the numbers in docs/performance.md)::

    DGBENCH_EFFICIENCY_EVENTS=0 DGBENCH_EFFICIENCY_ROUNDS=3 .venv/bin/python -m pytest -p no:cacheprovider \\
        benchmarks/test_continuous_efficiency.py --benchmark-disable -s

``test_evaluation_with_and_without_shared_roots`` (TGN, historical and random negatives) scores each round's
trained state twice, with and without shared (vertex, time) roots, alternating which goes first.

``test_work_and_phases_per_root_and_candidate`` says where the ratio comes from: the work a training root and an
evaluation candidate carry (roots embedded, distinct (vertex, time) pairs whose memory is updated, real
neighbour slots attended: counts, from the plans alone) and each phase's CPU per unit (planning, node views,
embedding, predictor, write-back; the rest is training's backward and Adam, evaluation's inputs and metrics).

``DGBENCH_EFFICIENCY_EVENTS``: events of the real Wikipedia stream (default 20,000, 3,000 under
``DGBENCH_BENCH_QUICK``; 0 = all 157,474); a generated stream stands in where the real-data folder is
absent. ``DGBENCH_EFFICIENCY_ROUNDS`` (default 3, 1 when quick). ``DGBENCH_EFFICIENCY_MODELS``: comma list
of ``model:strategy`` cases to run (default every case below). ``DGBENCH_EFFICIENCY_PROTOCOL``: dgbench's
``--protocol`` (default tgl; batch: PyG's), ``DGBENCH_EFFICIENCY_MEMORY``: memory width M (default 100).
"""
from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from conftest import shared_data_dir
from dgbench.dist import Comm, DistContext, PhaseTimer
from dgbench.trainers.config import RunConfig
from dgbench.trainers.continuous.family import build_trainer, partition_problem
from dgbench.trainers.continuous.data import BatchPlan
from dgbench.trainers.continuous.loop import ContinuousTrainer
from dgbench.trainers.continuous.state import distinct_queries
from dgbench.trainers.experiment import resolve

QUICK = bool(os.environ.get("DGBENCH_BENCH_QUICK"))
EVENTS = int(os.environ.get("DGBENCH_EFFICIENCY_EVENTS", "3000" if QUICK else "20000")) or None
ROUNDS = int(os.environ.get("DGBENCH_EFFICIENCY_ROUNDS", "1" if QUICK else "3"))
CEILING_SIZE = int(os.environ.get("DGBENCH_EFFICIENCY_CEILING_SIZE", "2048"))
# TGL's Wikipedia protocol: batch 600, memory 100, 10 recent neighbours; K = 9 negatives (dgbench's default)
PROTOCOL = dict(batch_size=600, memory_dim=int(os.environ.get("DGBENCH_EFFICIENCY_MEMORY", "100")), neighbors=10,
                lr=0.001, seed=0, protocol=os.environ.get("DGBENCH_EFFICIENCY_PROTOCOL", "tgl"))
CASES = ["tgn:random", "tgn:historical", "jodie:random", "apan:random"]
SELECTED = [c.strip() for c in os.environ.get("DGBENCH_EFFICIENCY_MODELS", ",".join(CASES)).split(",") if c.strip()]

pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass(frozen=True)
class Round:
    """One round's CPU seconds and work of a fresh trainer: a training epoch, then validation + test."""

    train_cpu_s: float
    train_roots: int
    eval_cpu_s: float
    eval_candidates: int
    train_faults: int = 0  # minor page faults of the epoch (first touches of fresh pages: kernel CPU)
    eval_faults: int = 0

    @property
    def train_per_root_us(self) -> float:
        return self.train_cpu_s / self.train_roots * 1e6

    @property
    def eval_per_candidate_us(self) -> float:
        return self.eval_cpu_s / self.eval_candidates * 1e6


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def show(figures: dict[str, float], unit: str = "") -> str:
    return f"{figures['median']:.3g}{unit} [{figures['min']:.3g}-{figures['max']:.3g}]"


def cpu_seconds(work: Callable[[], Any]) -> float:
    start = time.process_time()
    work()
    return time.process_time() - start


def gemm_ceiling_gflops(size: int = CEILING_SIZE, repeats: int = 3) -> float:
    """Single-thread FP32 GFLOP per CPU-second of a (size x size) by (size x size) product, best of ``repeats``
    (the machine's attainable GEMM rate: the goal's denominator)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        generator = torch.Generator().manual_seed(0)
        a, b = torch.randn(size, size, generator=generator), torch.randn(size, size, generator=generator)
        out = torch.empty(size, size)
        torch.mm(a, b, out=out)  # warm-up: first-touch of ``out`` and the library's buffers
        best = min(cpu_seconds(lambda: torch.mm(a, b, out=out)) for _ in range(repeats))
    finally:
        torch.set_num_threads(threads)
    return 2 * size ** 3 / max(best, 1e-9) / 1e9


@pytest.fixture(scope="module")
def efficiency_store(tmp_path_factory) -> Path:
    """The real Wikipedia stream (a prefix of EVENTS events is taken at run time), else a generated one."""
    out = tmp_path_factory.mktemp("efficiency")
    shared = shared_data_dir()
    if (shared / "jodie_wikipedia_tgn").is_dir():
        from test_continuous_bench import real_store
        return real_store(shared, "wikipedia", out)
    from dgbench.generators.stream import build
    return build(out=out / "stream.zarr", users=1000, items=500, events=EVENTS or 20000, edge_dim=8, seed=0)


def fresh_trainer(store: Path, model: str, negatives: str) -> ContinuousTrainer:
    run = resolve(RunConfig("single", model, store, max_events=EVENTS, negatives=negatives, **PROTOCOL))
    ctx = DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))
    problem = partition_problem(run)
    return build_trainer(ctx, run, run.scheme.partition(problem, 1, run.scheme_options), problem)


def work_of(trainer: ContinuousTrainer) -> tuple[int, int]:
    """(training roots: 3 per event, scored candidates of validation + test: 1 + K per event)."""
    ranges = trainer.stream.ranges
    a, b = ranges["train"]
    negatives = trainer.evaluation[0].get("val", "negatives").shape[1]
    scored = sum(ranges[split][1] - ranges[split][0] for split in ("val", "test"))
    return 3 * (b - a), scored * (1 + negatives)


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed_round(store: Path, model: str, negatives: str) -> Round:
    """A fresh trainer's epoch, then validation + test; the minor page faults of each beside its CPU (their
    kernel time is in the CPU seconds, and varies with the heap state a pass starts from)."""
    trainer = fresh_trainer(store, model, negatives)
    roots, candidates = work_of(trainer)
    faults = minor_faults()
    train_s = cpu_seconds(lambda: trainer.train_epoch(0, PhaseTimer()))
    train_faults, faults = minor_faults() - faults, minor_faults()
    eval_s = cpu_seconds(trainer.evaluate)
    return Round(train_s, roots, eval_s, candidates, train_faults, minor_faults() - faults)


def counted_flops(store: Path, model: str, negatives: str) -> tuple[int, int, int]:
    """(GEMM FLOPs of a training epoch, its batches, GEMM FLOPs of validation + test), on an untimed trainer
    (FlopCounterMode dispatches every operator through Python)."""
    trainer = fresh_trainer(store, model, negatives)
    with FlopCounterMode(display=False) as counter:
        trainer.train_epoch(0, PhaseTimer())
    train_flops = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        trainer.evaluate()
    batches = len(trainer.planner.batch_bounds("train", trainer.options.batch_size))
    return train_flops, batches, counter.get_total_flops()


def measure(store: Path, model: str, negatives: str) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    rounds = [timed_round(store, model, negatives) for _ in range(ROUNDS)]
    train_flops, batches, eval_flops = counted_flops(store, model, negatives)
    ceiling = spread([gemm_ceiling_gflops() for _ in range(ROUNDS)])
    train_rate = spread([train_flops / r.train_cpu_s / 1e9 for r in rounds])
    return {"events": EVENTS or "all", "rounds": ROUNDS, "threads": torch.get_num_threads(),
            "train_cpu_per_root_us": spread([r.train_per_root_us for r in rounds]),
            "eval_cpu_per_candidate_us": spread([r.eval_per_candidate_us for r in rounds]),
            "eval_candidate_over_train_root": spread([r.eval_per_candidate_us / r.train_per_root_us for r in rounds]),
            "train_cpu_s": spread([r.train_cpu_s for r in rounds]),
            "train_faults_per_root": spread([r.train_faults / r.train_roots for r in rounds]),
            "eval_faults_per_candidate": spread([r.eval_faults / r.eval_candidates for r in rounds]),
            "eval_cpu_s": spread([r.eval_cpu_s for r in rounds]),
            "train_roots": rounds[0].train_roots, "eval_candidates": rounds[0].eval_candidates,
            "gemm_flops_per_train_step": train_flops / max(batches, 1), "train_steps": batches,
            "gemm_flops_eval": eval_flops,
            "train_gemm_gflops_per_cpu_s": train_rate,
            "eval_gemm_gflops_per_cpu_s": spread([eval_flops / r.eval_cpu_s / 1e9 for r in rounds]),
            "ceiling_gflops_per_cpu_s": ceiling, "ceiling_size": CEILING_SIZE,
            "train_gemm_fraction_of_ceiling": train_rate["median"] / ceiling["median"],
            "load_average": [load_before, os.getloadavg()[0]]}


@pytest.mark.parametrize("case", CASES)
def test_cost_per_root_and_candidate(benchmark, efficiency_store, case):
    if case not in SELECTED:
        pytest.skip(f"{case} not in DGBENCH_EFFICIENCY_MODELS")
    model, negatives = case.split(":")
    result = benchmark.pedantic(measure, args=(efficiency_store, model, negatives), rounds=1, iterations=1)
    benchmark.extra_info.update(result, protocol=PROTOCOL["protocol"], memory_dim=PROTOCOL["memory_dim"])
    verdict = "met" if result["eval_cpu_per_candidate_us"]["median"] <= result["train_cpu_per_root_us"]["median"] \
        else "NOT met"
    print(f"\n{model} ({negatives} negatives), --protocol {PROTOCOL['protocol']}, M = {PROTOCOL['memory_dim']}, "
          f"{result['events']} events, {ROUNDS} rounds, 1 thread, load average "
          f"{result['load_average'][0]:.2f}->{result['load_average'][1]:.2f} (timings on a loaded host are noisy):\n"
          f"  training CPU per root      {show(result['train_cpu_per_root_us'], ' us')}\n"
          f"  evaluation CPU / candidate {show(result['eval_cpu_per_candidate_us'], ' us')} "
          f"(ratio {show(result['eval_candidate_over_train_root'])}; goal <= 1: {verdict})\n"
          f"  minor page faults          {show(result['train_faults_per_root'])} per root, "
          f"{show(result['eval_faults_per_candidate'])} per candidate\n"
          f"  GEMM per training step     {result['gemm_flops_per_train_step'] / 1e6:.1f} MFLOP "
          f"({result['train_steps']} steps)\n"
          f"  GEMM GFLOP per CPU-second  training {show(result['train_gemm_gflops_per_cpu_s'])}, evaluation "
          f"{show(result['eval_gemm_gflops_per_cpu_s'])}; ceiling ({CEILING_SIZE}^2, 1 thread) "
          f"{show(result['ceiling_gflops_per_cpu_s'])} -> training at "
          f"{100 * result['train_gemm_fraction_of_ceiling']:.1f} % of it")
    assert result["gemm_flops_per_train_step"] > 0 and result["ceiling_gflops_per_cpu_s"]["median"] > 0
    assert result["train_roots"] > 0 and result["eval_candidates"] > 0


def shared_roots_round(store: Path, model: str, negatives: str, shared_first: bool) -> dict[str, float]:
    """One round: a fresh trainer's training epoch (CPU per root), then validation + test scored twice from the
    same trained state (CPU per candidate), with each distinct (vertex, time) root embedded once ("shared") and
    with a root per candidate endpoint, in alternating order (docs/performance.md, "Distinct (vertex, time) roots")."""
    trainer = fresh_trainer(store, model, negatives)
    roots, candidates = work_of(trainer)
    out = {"train_per_root_us": cpu_seconds(lambda: trainer.train_epoch(0, PhaseTimer())) / roots * 1e6}
    trained = trainer.scoring_state()
    for shared in ((True, False) if shared_first else (False, True)):
        trainer.restore_scoring_state(trained)
        trainer.planner.share_roots = shared
        side = "shared" if shared else "per_endpoint"
        out[f"eval_{side}_per_candidate_us"] = cpu_seconds(trainer.evaluate) / candidates * 1e6
    return out


@pytest.mark.parametrize("case", ["tgn:historical", "tgn:random"])
def test_evaluation_with_and_without_shared_roots(benchmark, efficiency_store, case):
    if case not in SELECTED:
        pytest.skip(f"{case} not in DGBENCH_EFFICIENCY_MODELS")
    model, negatives = case.split(":")
    load_before = os.getloadavg()[0]
    rounds = benchmark.pedantic(lambda: [shared_roots_round(efficiency_store, model, negatives, i % 2 == 1)
                                         for i in range(ROUNDS)], rounds=1, iterations=1)
    figures = {key: spread([r[key] for r in rounds]) for key in rounds[0]}
    for side in ("shared", "per_endpoint"):
        figures[f"ratio_{side}"] = spread([r[f"eval_{side}_per_candidate_us"] / r["train_per_root_us"] for r in rounds])
    benchmark.extra_info.update(figures, load_average=[load_before, os.getloadavg()[0]])
    print(f"\n{model} ({negatives} negatives), {EVENTS or 'all'} events, {ROUNDS} rounds, 1 thread, load average "
          f"{load_before:.2f}->{os.getloadavg()[0]:.2f}: training CPU per root "
          f"{show(figures['train_per_root_us'])} us; "
          f"evaluation CPU per candidate, shared (vertex, time) roots {show(figures['eval_shared_per_candidate_us'])} "
          f"us (ratio {show(figures['ratio_shared'])}), a root per endpoint "
          f"{show(figures['eval_per_endpoint_per_candidate_us'])} us (ratio {show(figures['ratio_per_endpoint'])})")
    assert all(value > 0 for r in rounds for value in r.values())


WORK = ("roots", "pairs", "slots")  # per unit: roots embedded, distinct (vertex, time) views, real neighbour slots


def plan_work(plan: BatchPlan) -> dict[str, int]:
    """What one batch computes, from its plan: the roots it embeds (distinct (vertex, time) roots where the plan
    shares them), the distinct (vertex, time) pairs whose memory update runs (``NodeState.views``), the real
    neighbour slots its attention reads."""
    pairs = len(distinct_queries(plan.needed_ids, plan.query_times)[0])
    slots = int(plan.neighbors.mask.sum()) if plan.neighbors is not None else 0
    return {"roots": plan.query_roots, "pairs": pairs, "slots": slots}


def work_per_unit(trainer: ContinuousTrainer) -> dict[str, dict[str, float]]:
    """Per training root and per evaluation candidate (validation + test), :func:`plan_work` summed over the
    passes' batches and divided by the units (the plans depend on the data only, not on the trained state)."""
    planner, size = trainer.planner, trainer.options.batch_size
    roots, candidates = work_of(trainer)

    def summed(split: str) -> dict[str, int]:
        total = dict.fromkeys(WORK, 0)
        for index, (a, b) in enumerate(planner.batch_bounds(split, size)):
            for key, value in plan_work(planner.plan(split, index, a, b)).items():
                total[key] += value
        return total

    train = summed("train")
    evaluation, scored = trainer.evaluation[0], dict.fromkeys(WORK, 0)
    for split in ("val", "test"):
        planner.candidates = {split: (evaluation.get(split, "negative_src"), evaluation.get(split, "negatives"))}
        try:
            for key, value in summed(split).items():
                scored[key] += value
        finally:
            planner.candidates = {}
    return {"train_per_root": {key: train[key] / roots for key in WORK},
            "eval_per_candidate": {key: scored[key] / candidates for key in WORK}}


PHASES = {"planning": ("planner", "plan"), "node views": ("state", "views"), "embedding": ("model", "embed"),
          "predictor": ("predictor", "score_blocks"), "write-back": ("state", "begin_write")}


class PhaseClock:
    """CPU seconds of the calling thread inside each of :data:`PHASES`' methods of one trainer (the planning
    thread's for ``plan``), wrapped on the instances; :meth:`take` returns and clears them."""

    def __init__(self, trainer: ContinuousTrainer):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        owners = {"planner": trainer.planner, "state": trainer.state, "model": trainer.model,
                  "predictor": trainer.model.predictor}
        for phase, (owner, name) in PHASES.items():
            self._wrap(owners[owner], name, phase)

    def _wrap(self, owner: Any, name: str, phase: str) -> None:
        method = getattr(owner, name)

        def clocked(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[phase] += time.thread_time() - start
        setattr(owner, name, clocked)

    def take(self) -> dict[str, float]:
        out, self.seconds = self.seconds, dict.fromkeys(PHASES, 0.0)
        return out


def phases_round(store: Path, model: str, negatives: str) -> dict[str, dict[str, float]]:
    """One fresh trainer's epoch and validation + test, each phase's CPU µs per training root / evaluation
    candidate; "rest": the pass's CPU outside the phases (training: backward, Adam, inputs; evaluation: inputs,
    metrics)."""
    trainer = fresh_trainer(store, model, negatives)
    roots, candidates = work_of(trainer)
    clock = PhaseClock(trainer)
    out = {}
    for side, units, work in (("train_per_root_us", roots, lambda: trainer.train_epoch(0, PhaseTimer())),
                              ("eval_per_candidate_us", candidates, trainer.evaluate)):
        total = cpu_seconds(work)
        seconds = clock.take()
        seconds["rest"] = total - sum(seconds.values())
        seconds["total"] = total
        out[side] = {phase: value / units * 1e6 for phase, value in seconds.items()}
    return out


@pytest.mark.parametrize("case", ["tgn:historical", "tgn:random"])
def test_work_and_phases_per_root_and_candidate(benchmark, efficiency_store, case):
    if case not in SELECTED:
        pytest.skip(f"{case} not in DGBENCH_EFFICIENCY_MODELS")
    model, negatives = case.split(":")
    work = work_per_unit(fresh_trainer(efficiency_store, model, negatives))
    load_before = os.getloadavg()[0]
    rounds = benchmark.pedantic(lambda: [phases_round(efficiency_store, model, negatives) for _ in range(ROUNDS)],
                                rounds=1, iterations=1)
    phases = {side: {phase: spread([r[side][phase] for r in rounds]) for phase in rounds[0][side]}
              for side in rounds[0]}
    benchmark.extra_info.update(work=work, phases=phases, load_average=[load_before, os.getloadavg()[0]])
    lines = [f"\n{model} ({negatives} negatives), {EVENTS or 'all'} events, {ROUNDS} rounds, 1 thread, load average "
             f"{load_before:.2f}->{os.getloadavg()[0]:.2f}",
             "  work per training root / evaluation candidate: " + ", ".join(
                 f"{key} {work['train_per_root'][key]:.2f} / {work['eval_per_candidate'][key]:.2f}" for key in WORK)]
    for phase in phases["train_per_root_us"]:
        lines.append(f"  {phase:12s} training {show(phases['train_per_root_us'][phase])} us per root, evaluation "
                     f"{show(phases['eval_per_candidate_us'][phase])} us per candidate")
    print("\n".join(lines))
    assert all(work[side][key] > 0 for side in work for key in WORK)
    assert all(r[side]["total"] > 0 for r in rounds for side in r)
