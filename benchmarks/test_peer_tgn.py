"""TGN against a peer at equal settings: dgbench's ``single`` TGN beside PyTorch Geometric's TGN
(``torch_geometric.nn.TGNMemory`` + the attention embedding of PyG's ``examples/tgn.py``) on the same
real stream store (Wikipedia; LastFM too with ``DGBENCH_PEER_TGN_DATA``), the same chronological split and
the same negatives.

Why PyG and not DyGLib: DyGLib is a repository, not a package (its code would have to be fetched at
benchmark time from a pinned commit); PyG is a PyPI package already in the ``peers`` extra
(``make peers``), and the parts used here (TGNMemory, LastNeighborLoader, TransformerConv) are pure
Python on torch, so they run on the CPU build of torch 2.13 without torch-scatter/torch-sparse.

Equal (both sides): memory width M, time-encoding width M, embedding width M, 10 most recent temporal
neighbours, one attention layer, 2 heads, no dropout (the PyG example's 0.1 is set to 0: dgbench's TGN has
none), batch 600, Adam with the same lr (torch's fused kernel on both sides: dgbench's loop uses it, so the
peer gets it too and the optimizer's implementation is not part of the ratio), one negative destination per
positive (the very same ids: the peer draws them with dgbench's (seed, split, batch) recipe), BCE of positives
+ negatives averaged per batch, memory reset each epoch and carried from training into validation and test,
the same intra-op thread count (one process). AP: both sides score the run's fixed evaluation set (9 random
negatives per validation/test positive; AP over each positive and its first negative,
dgbench/tasks/evaluator.py).

Still different (each side as its library builds it; printed with the table):
* time encoding: dgbench cos(Δt w) with fixed w (trainable=False, see TimeEncoder); PyG a trained
  Linear(1, M) then cos, one module shared by messages and the embedding;
* the message's time feature: PyG encodes (event time - sender's last update) into the message; dgbench
  encodes (query time - memory time) when the mail is consumed (same GRU input width 2M + E + M);
* the embedding: dgbench is TGL's layer (query [h, φ(0)], keys/values [h_j, e_j, φ(Δt)], then
  LayerNorm(ReLU(W [agg, h]))); PyG's TransformerConv adds the projected [φ(rel t), e_j] to keys and values
  and a skip W_s h, no ReLU/LayerNorm (different parameter counts, both printed);
* the neighbour's time feature: dgbench (and TGN's paper, §3.1) φ(t - t_j) at the query time t; PyG's example
  φ(last_update(j) - t_j);
* a vertex without a message: dgbench (and the paper) keeps its memory; PyG's TGNMemory runs its GRU on a
  zero message (a never-seen vertex gets GRU(0, 0)) and sets its last update to 0;
* the neighbour loader: PyG's ``LastNeighborLoader.insert`` may keep older events of a vertex with more than
  k events in one batch (8 % of the (vertex, batch) pairs on the first 10k Wikipedia events at batch 600);
  dgbench's ``recent`` sampler keeps the k most recent;
* the protocol (dgbench ``--protocol``, docs/continuous-training.md "Protocols"; both are run): under
  ``tgl`` dgbench embeds one root per event endpoint and negative at its event time, with neighbours up to
  that time (earlier events of the same batch too), 3.2x PyG's roots on Wikipedia; under ``batch`` it
  embeds each distinct vertex once per batch at the batch's first event time, neighbours from earlier
  batches only, as PyG does (equal work; the remaining differences are listed in that doc section);
* PyG updates the endpoints' memory twice per batch (in ``memory(n_id)`` and again in ``update_state``: the
  same values recomputed, a cost, not a change of the model);
* Wikipedia here has no edge features (the shared file drops them): PyG's TGNMemory fails with a zero-width
  raw message (its ``_compute_msg`` keeps only the first empty message tensor), so the peer gets one
  all-zero feature column (E = 1 instead of 0);
* dgbench plans the next batches (sampling, negatives) on a background thread; PyG's loop is serial.

Peer forms (``PEER_FORMS``; ``PeerRun(..., form=...)``): ``example`` as PyG's example builds it (the speed
tables' default, ``DGBENCH_PEER_TGN_FORM``); ``fixed``, its time frequencies fixed to dgbench's
(``fix_time_frequencies``); ``paper``, fixed frequencies and the next three items above in TGN's paper form
on PyG's own modules (``keep_unmailed_memory``, ``insert_most_recent``, the query time in ``PeerTGN.embed``).
The example's trained cos(Linear(1, M) Δt) on second-valued Δt learns slowly, and the three departures cost
it more AP: one epoch, M = 100, Wikipedia first 10k, val / test AP (3 seeds) example 0.61 / 0.58, fixed
0.63 / 0.61, paper 0.77 / 0.75, dgbench ``batch`` 0.79 / 0.77 (docs/performance.md "Peers" has the ablation).
The message's time feature, the message's memory snapshot and the embedding layer moved nothing or lowered it.

Besides wall-clock events/s, each side's training pass is timed in process CPU seconds (one intra-op
thread; dgbench's prefetch thread included), which other jobs on shared cores hardly move.

Time to AP (``test_time_to_validation_ap``): each side trains ``DGBENCH_PEER_TGN_AP_EPOCHS`` epochs (default
5, 2 when quick), scoring validation after each; for each peer form against dgbench the target is the lower
of the two sides' best validation APs (an AP both reach), and each side's time is the training CPU seconds
summed up to the first epoch whose validation AP reaches it (evaluation passes not counted). The verdict is
taken against the peer form with the smallest dgbench speed-up.

Run (prints the equal-settings table; noisy on a shared machine)::

    nice -n 5 .venv/bin/python -m pytest -p no:cacheprovider benchmarks/test_peer_tgn.py --benchmark-disable -s

``-k batch`` / ``-k tgl`` picks dgbench's protocol (the peer is the same either way).

``DGBENCH_PEER_TGN_DATA`` (comma list of real streams, default "wikipedia"; "wikipedia,lastfm" adds LastFM),
``DGBENCH_PEER_TGN_EVENTS`` (default 20,000, 3,000 under ``DGBENCH_BENCH_QUICK``; 0 = all 157,474 Wikipedia
events), ``DGBENCH_PEER_TGN_ROUNDS`` (default 3 alternating runs per side, 1 when quick; the median is
reported), ``DGBENCH_PEER_TGN_MEMORY`` (comma list, default "100,172"), ``DGBENCH_PEER_TGN_LR`` (default
0.001), ``DGBENCH_PEER_TGN_THREADS`` (default 1), ``DGBENCH_PEER_TGN_FORM`` (the speed tables' peer form,
default "example").
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from _alternate import Spread
from _pyg_tgn_peer import BATCH, EXAMPLE, FIXED, HEADS, NEIGHBORS, PAPER, SEED, PeerRun, _import_pyg_tgn  # the peer
import torch

from dgbench.store import open_store
from dgbench.tasks.options import DEFAULT_EVAL_NEGATIVES, evaluation_sets
from dgbench.trainers.config import RunConfig
from dgbench.trainers.continuous.data import EventStream
from dgbench.trainers.continuous.loop import ContinuousTrainer
from dgbench.trainers.experiment import run_experiment

QUICK = bool(os.environ.get("DGBENCH_BENCH_QUICK"))  # CI's pass (scripts/bench_quick.sh): once, small
EVENTS = int(os.environ.get("DGBENCH_PEER_TGN_EVENTS", "3000" if QUICK else "20000")) or None
ROUNDS = int(os.environ.get("DGBENCH_PEER_TGN_ROUNDS", "1" if QUICK else "3"))
MEMORY_DIMS = [int(m) for m in os.environ.get("DGBENCH_PEER_TGN_MEMORY", "100,172").split(",")]
LR = float(os.environ.get("DGBENCH_PEER_TGN_LR", "0.001"))
THREADS = int(os.environ.get("DGBENCH_PEER_TGN_THREADS", "1"))
AP_EPOCHS = int(os.environ.get("DGBENCH_PEER_TGN_AP_EPOCHS", "2" if QUICK else "5"))
DATASETS = os.environ.get("DGBENCH_PEER_TGN_DATA", "wikipedia").split(",")
PEER_FORM = os.environ.get("DGBENCH_PEER_TGN_FORM", "example")  # the speed tables' peer (PEER_FORMS)
PROTOCOLS = ("batch", "tgl")  # dgbench's --protocol: PyG's (equal work) and TGL's
def peer_epochs(store: Path, memory_dim: int, events: int | None, epochs: int, lr: float = LR, seed: int = SEED,
                form: str = EXAMPLE) -> list[tuple[float, float]]:
    """(training CPU seconds, validation AP) of each of ``epochs`` PyG TGN epochs (validation after each)."""
    stream = EventStream.from_store(open_store(store), events)
    evaluation = evaluation_sets(store, "random", None, DEFAULT_EVAL_NEGATIVES, events)[0]
    run = PeerRun(stream, memory_dim, lr, seed, form)
    out = []
    for _ in range(epochs):
        _, cpu_seconds, _ = run.train_epoch()
        out.append((cpu_seconds, run.evaluate(evaluation, "val")["ap"]))
    return out


def peer_tgn(store: Path, memory_dim: int, events: int | None, lr: float = LR, seed: int = SEED,
             form: str = EXAMPLE) -> dict:
    """One PyG TGN epoch on the store's first ``events`` events: training events/s, validation/test AP."""
    stream = EventStream.from_store(open_store(store), events)
    evaluation = evaluation_sets(store, "random", None, DEFAULT_EVAL_NEGATIVES, events)[0]
    run = PeerRun(stream, memory_dim, lr, seed, form)
    seconds, cpu_seconds, trained = run.train_epoch()
    metrics = {split: run.evaluate(evaluation, split)["ap"] for split in ("val", "test")}
    return {"events_per_s": trained / seconds, "train_s": seconds, "events_per_cpu_s": trained / cpu_seconds,
            "val_ap": metrics["val"],
            "test_ap": metrics["test"], "parameters": sum(p.numel() for p in run.model.parameters())}


@contextmanager
def training_cpu_seconds(into: list[float]):
    """Process CPU seconds of each ContinuousTrainer.train_epoch (prefetch thread included): unlike wall
    time it hardly moves when other jobs share the cores. Measurement only; restored on exit."""
    original = ContinuousTrainer.train_epoch

    def measured(self, epoch, timer):
        start = time.process_time()
        try:
            return original(self, epoch, timer)
        finally:
            into.append(time.process_time() - start)
    ContinuousTrainer.train_epoch = measured
    try:
        yield
    finally:
        ContinuousTrainer.train_epoch = original


def ours_tgn(store: Path, memory_dim: int, events: int | None, lr: float = LR, seed: int = SEED,
             model: str = "tgn", batch_size: int = BATCH, neighbors: int = NEIGHBORS, protocol: str = "tgl") -> dict:
    """One epoch of dgbench's ``single`` model (TGN by default) at the same settings, under ``protocol``."""
    record, cpu = _ours_record(store, memory_dim, events, 1, lr, seed, model, batch_size, neighbors, protocol)
    epoch = record["epochs"][0]
    return {"events_per_s": epoch["events_per_s"], "train_s": epoch["time_s"],
            "events_per_cpu_s": epoch["work"] / cpu[0],
            "val_ap": record["final_metrics"]["val"]["ap"], "test_ap": record["final_metrics"]["test"]["ap"],
            "parameters": record["extra"]["parameters"], "code_commit": record.get("code", {}).get("commit")}


def ours_epochs(store: Path, memory_dim: int, events: int | None, epochs: int, protocol: str, lr: float = LR,
                seed: int = SEED) -> list[tuple[float, float]]:
    """(training CPU seconds, validation AP) of each of ``epochs`` dgbench TGN epochs under ``protocol``."""
    record, cpu = _ours_record(store, memory_dim, events, epochs, lr, seed, "tgn", BATCH, NEIGHBORS, protocol)
    return [(seconds, entry["metrics"]["val"]["ap"]) for seconds, entry in zip(cpu, record["epochs"])]


def _ours_record(store: Path, memory_dim: int, events: int | None, epochs: int, lr: float, seed: int, model: str,
                 batch_size: int, neighbors: int, protocol: str) -> tuple[dict, list[float]]:
    cpu: list[float] = []
    options = {} if protocol == "tgl" else {"protocol": protocol}  # the default stays unnamed (older records)
    with training_cpu_seconds(cpu):
        record = run_experiment(RunConfig(scheme="single", model=model, dataset=store, epochs=epochs,
                                          batch_size=batch_size, neighbors=neighbors, memory_dim=memory_dim,
                                          lr=lr, seed=seed, max_events=events, **options))
    return record, cpu


def time_to_ap(curves: dict[str, list[tuple[float, float]]]) -> tuple[float, dict[str, float | None]]:
    """The validation AP every side reaches (the lowest of the sides' best) and each side's training CPU
    seconds summed up to its first epoch at or above it."""
    target = min(max(ap for _, ap in curve) for curve in curves.values())
    out: dict[str, float | None] = {}
    for side, curve in curves.items():
        spent, out[side] = 0.0, None
        for seconds, ap in curve:
            spent += seconds
            if ap >= target:
                out[side] = spent
                break
    return target, out


@pytest.fixture
def peer_store(request, shared_data, tmp_path_factory) -> tuple[str, Path]:
    """(name, store) of the real stream ``request.param`` (``DATASETS``)."""
    from test_continuous_bench import real_store  # noqa: PLC0415 - the benchmarks' shared real-store builder
    return request.param, real_store(shared_data, request.param, tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module", autouse=True)
def equal_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)


def _median(runs: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def side_by_side(runs: dict[str, list[dict]], peer: str) -> tuple[dict[str, dict[str, float]], float, float]:
    """Per side, the median of each figure over its runs; dgbench's wall and per-CPU-second speed-up on ``peer``."""
    keys = ("events_per_s", "events_per_cpu_s", "train_s", "val_ap", "test_ap")
    table = {side: {key: _median(side_runs, key) for key in keys} for side, side_runs in runs.items()}
    return (table, table["dgbench"]["events_per_s"] / table[peer]["events_per_s"],
            table["dgbench"]["events_per_cpu_s"] / table[peer]["events_per_cpu_s"])


def round_ratios(runs: dict[str, list[dict]], peer: str) -> dict[str, Spread]:
    """dgbench's speed-up on ``peer`` round by round (A B A B: each pair ran back to back), on the wall clock and
    per process-CPU second: median [min-max] over the rounds."""
    pairs = list(zip(runs["dgbench"], runs[peer]))
    return {"wall": Spread.of([ours["events_per_s"] / theirs["events_per_s"] for ours, theirs in pairs]),
            "cpu": Spread.of([ours["events_per_cpu_s"] / theirs["events_per_cpu_s"] for ours, theirs in pairs])}


def ratio_summary(runs: dict[str, list[dict]], peer: str, load: tuple[float, float]) -> str:
    """The line a ratio is quoted from: per CPU-second and per wall second, median [range], rounds, threads, load."""
    ratio = round_ratios(runs, peer)
    return (f"dgbench / {peer}: {ratio['cpu']} per CPU-second, {ratio['wall']} per wall second "
            f"({len(runs['dgbench'])} alternating rounds, {THREADS} thread(s) each side, load average "
            f"{load[0]:.2f} -> {load[1]:.2f})")


def print_sides(runs: dict[str, list[dict]], table: dict[str, dict[str, float]]) -> None:
    """One row per side: the medians, the parameter count and every run's ev/s and ev/CPU-s."""
    print(f"{'side':8s} {'train ev/s':>11s} {'ev/CPU-s':>9s} {'train s':>8s} {'val AP':>7s} {'test AP':>8s} "
          f"{'params':>8s}  per run ev/s | ev/CPU-s")
    for side, side_runs in runs.items():
        row = table[side]
        print(f"{side:8s} {row['events_per_s']:11.0f} {row['events_per_cpu_s']:9.0f} {row['train_s']:8.2f} "
              f"{row['val_ap']:7.4f} {row['test_ap']:8.4f} {side_runs[0]['parameters']:8d}  "
              f"{[round(r['events_per_s']) for r in side_runs]} | {[round(r['events_per_cpu_s']) for r in side_runs]}")


def _need_pyg() -> None:
    try:
        _import_pyg_tgn()
    except ImportError as exc:
        pytest.skip(f"PyTorch Geometric is not installed (`make peers` installs it): {exc}")


def test_time_to_ap_takes_the_ap_both_sides_reach(benchmark):
    target, seconds = benchmark(time_to_ap, {"dgbench": [(2.0, 0.70), (2.0, 0.80), (2.0, 0.90)],
                                             "pyg": [(1.0, 0.60), (1.0, 0.85), (1.0, 0.84)]})
    assert target == 0.85 and seconds == {"dgbench": 6.0, "pyg": 2.0}


@pytest.mark.realdata
@pytest.mark.parametrize("memory_dim", MEMORY_DIMS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("peer_store", DATASETS, indirect=True)
def test_time_to_validation_ap(benchmark, peer_store, memory_dim, protocol):
    """Training CPU seconds each side needs to reach a validation AP both reach (printed, not asserted:
    timings are the coordinator's to publish from a quiet host)."""
    _need_pyg()
    name, store = peer_store
    load_before = os.getloadavg()[0]
    peers = {"pyg": EXAMPLE, "pyg-fixed": FIXED, "pyg-paper": PAPER}
    curves = benchmark.pedantic(lambda: {"dgbench": ours_epochs(store, memory_dim, EVENTS, AP_EPOCHS, protocol),
                                         **{peer: peer_epochs(store, memory_dim, EVENTS, AP_EPOCHS, form=form)
                                            for peer, form in peers.items()}},
                                rounds=1, iterations=1)  # in the report: CI's quick pass checks every benchmark ran
    print(f"\ntime to validation AP over {AP_EPOCHS} epochs, {name} first {EVENTS or 'all'} events, memory "
          f"{memory_dim}, dgbench --protocol {protocol}, {THREADS} thread(s), "
          f"load average {load_before:.2f} -> {os.getloadavg()[0]:.2f}")
    for side, curve in curves.items():
        print(f"{side:9s} per epoch (CPU-s, val AP): {[(round(c, 2), round(ap, 4)) for c, ap in curve]}")
    speedups = {}
    for peer in peers:  # each peer form against dgbench at the AP both of them reach
        target, seconds = time_to_ap({"dgbench": curves["dgbench"], peer: curves[peer]})
        ours, theirs = seconds["dgbench"], seconds[peer]
        assert ours is not None and theirs is not None and ours > 0 and theirs > 0
        speedups[peer] = theirs / ours
        print(f"dgbench / {peer} time-to-AP speed-up at val AP {target:.4f}: {speedups[peer]:.2f}x per CPU-second "
              f"({ours:.2f} against {theirs:.2f} CPU-s)")
    print(f"the verdict is against the strongest peer form: {min(speedups, key=speedups.__getitem__)}")


@pytest.mark.realdata
@pytest.mark.parametrize("memory_dim", MEMORY_DIMS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("peer_store", DATASETS, indirect=True)
def test_tgn_against_pyg_tgn(benchmark, peer_store, memory_dim, protocol):
    """Goals (per CPU-second): under ``batch`` (PyG's protocol, equal work) dgbench ≥ 1.5x the peer; under
    ``tgl`` dgbench ≥ 3x the peer's training events/s at memory 172 (it does 3.2x the roots), AP within noise."""
    _need_pyg()
    name, store = peer_store
    load_before = os.getloadavg()[0]

    def alternate() -> dict[str, list[dict]]:
        runs: dict[str, list[dict]] = {"dgbench": [], "pyg": []}
        for _ in range(ROUNDS):  # ours, peer, ours, peer, ...: drifts in machine load hit both sides
            runs["dgbench"].append(ours_tgn(store, memory_dim, EVENTS, protocol=protocol))
            runs["pyg"].append(peer_tgn(store, memory_dim, EVENTS, form=PEER_FORM))
        return runs
    runs = benchmark.pedantic(alternate, rounds=1, iterations=1)
    table, speedup, cpu_speedup = side_by_side(runs, "pyg")
    benchmark.extra_info.update(dataset=name, memory_dim=memory_dim, protocol=protocol, events=EVENTS or "all",
                                rounds=ROUNDS, lr=LR, threads=THREADS,
                                table=table, speedup=round(speedup, 3),
                                cpu_speedup=round(cpu_speedup, 3),
                                runs={side: [{k: v for k, v in r.items()} for r in rs] for side, rs in runs.items()})
    events = runs["dgbench"][0]
    print(f"\nTGN vs PyG TGN, {name} first {EVENTS or 'all'} events, memory=time=embedding {memory_dim}, "
          f"k={NEIGHBORS} recent, 1 layer, {HEADS} heads, dropout 0, batch {BATCH}, lr {LR}, 1 negative, "
          f"dgbench --protocol {protocol}, PyG form {PEER_FORM}, "
          f"{THREADS} thread(s), median of {ROUNDS} alternating 1-epoch runs (shared machine: noisy)")
    print_sides(runs, table)
    print(ratio_summary(runs, "pyg", (load_before, os.getloadavg()[0])))
    print(f"speed-up of the medians dgbench / PyG: {speedup:.2f}x wall, {cpu_speedup:.2f}x per CPU-second; dgbench "
          f"commit {events['code_commit']}")
    assert all(r["events_per_s"] > 0 for rs in runs.values() for r in rs)
    assert all(0.0 <= r["test_ap"] <= 1.0 for rs in runs.values() for r in rs)
