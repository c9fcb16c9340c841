"""Discrete model zoo (T-GCN, WD-GCN, MPNN-LSTM, DySAT beside TM-GCN): epoch time and edges/s under
``single``, T-GCN and WD-GCN against their PyTorch Geometric (Temporal) equivalents, and AP after 10
epochs on a real store.

Run: ``.venv/bin/pytest benchmarks/test_models_bench.py --benchmark-disable -s`` (``make peers`` for the
PGT comparisons, which skip without it). ``DGBENCH_BENCH_ZOO_NODES`` (default 16384) and
``DGBENCH_BENCH_ZOO_SNAPSHOTS`` (32) size the esdg-random store of the epoch-time table (the issue's
``esdg-random -n 16384 -T 32``); the real store is SNAP CollegeMsg at 1-day windows from
``../shared/data`` (skipped when absent). The peer comparisons run on the 16384-vertex, 9-snapshot store
of benchmarks/test_discrete_bench.py's EvolveGCN-O comparison. Every ratio is measured within one run
(the median of the epochs after the first); the machine these ran on was shared, so absolute times vary
between runs more than the ratios.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from _alternate import Timing, alternate, median_epoch, ratio_line, record_epochs, speedups

from dgbench.generators.esdg_random import build
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import run_experiments

QUICK = bool(os.environ.get("DGBENCH_BENCH_QUICK"))  # CI's pass (scripts/bench_quick.sh): once, small stores
ZOO_NODES = int(os.environ.get("DGBENCH_BENCH_ZOO_NODES", "1024" if QUICK else "16384"))
ZOO_SNAPSHOTS = int(os.environ.get("DGBENCH_BENCH_ZOO_SNAPSHOTS", "8" if QUICK else "32"))
EPOCHS = 3  # the median of the two after the first (warm-up)
PEER_NODES, PEER_SNAPSHOTS, PEER_EPOCHS = (2048, 9, 3) if QUICK else (16384, 9, 9)
# A B A B rounds of each peer comparison (docs/performance.md: a ratio is its median and range over >= 3 rounds)
PEER_ROUNDS = int(os.environ.get("DGBENCH_PEER_ROUNDS", "1" if QUICK else "3"))
AP_EPOCHS, AP_THETA = 30, 1.0  # θ = 1: CollegeMsg's last days have 28 and 40 edges, θ = 0.1 would score 3 and 4
HIDDEN = 6
# label -> (registered model, its options); TM-GCN is the reference row
ZOO = {"tmgcn": ("tmgcn", {}), "tgcn": ("tgcn", {}), "tgcn-pygt": ("tgcn", {"variant": "pygt"}),
       "wdgcn": ("wdgcn", {}), "mpnn-lstm": ("mpnn-lstm", {}), "dysat": ("dysat", {})}
EVERY_MODEL = {**ZOO, "evolvegcn-o": ("evolvegcn-o", {}), "cdgcn": ("cdgcn", {})}


pytestmark = pytest.mark.usefixtures("one_thread")


def college_msg(shared_data: Path, out: Path) -> Path:
    from dgbench.loaders.prepare import build_file
    return build_file(out=out, fmt="snap", raw=shared_data / "snap_CollegeMsg" / "CollegeMsg.txt", to="snapshots",
                      window="1d")


@pytest.fixture(scope="module")
def esdg_store(tmp_path_factory) -> Path:
    return build(out=tmp_path_factory.mktemp("zoo-bench") / "esdg.zarr", nodes=ZOO_NODES, snapshots=ZOO_SNAPSHOTS,
                 seed=0)


@pytest.fixture
def college_store(shared_data, tmp_path) -> Path:
    """SNAP CollegeMsg at 1-day snapshots (skips when ../shared/data is absent)."""
    return college_msg(shared_data, tmp_path / "college.zarr")


def median_after_first(record: dict, key: str) -> float:
    return float(np.median([e[key] for e in record["epochs"][1:]]))


def config(store: Path, model: str, options: dict, epochs: int, **run) -> RunConfig:
    return RunConfig("single", model, store, epochs=epochs, hidden=HIDDEN, out=store.parent / "runs", **options, **run)


@pytest.mark.parametrize("store_name", ["esdg-random", "collegemsg"])
def test_zoo_epoch_time_under_single(benchmark, request, store_name):
    """Epoch time and edges/s of every new model beside TM-GCN's, one launch on one store."""
    store = request.getfixturevalue("esdg_store" if store_name == "esdg-random" else "college_store")

    def measure():
        return run_experiments([config(store, model, options, EPOCHS) for model, options in ZOO.values()])
    records = dict(zip(ZOO, benchmark.pedantic(measure, rounds=1, iterations=1)))
    reference = median_after_first(records["tmgcn"], "time_s")
    table = {label: {"epoch_s": round(median_after_first(r, "time_s"), 4),
                     "edges_per_s": round(median_after_first(r, "throughput")),
                     "time_vs_tmgcn": round(median_after_first(r, "time_s") / reference, 2)}
             for label, r in records.items()}
    benchmark.extra_info.update(store=store_name, fingerprint=records["tmgcn"]["dataset"].get("fingerprint"), **table)
    print(f"\n{store_name} (single, hidden {HIDDEN}, median of {EPOCHS - 1} epochs after the first):")
    for label, row in table.items():
        print(f"  {label:10s} {row}")
    assert all(row["edges_per_s"] > 0 for row in table.values())


# --------------------------------------------------------------------------- PyTorch Geometric (Temporal)

def _import_peers():
    """PyG's GCNConv and PGT's TGCN, unchanged. PGT's package imports ``torch_sparse`` only to name a type
    (no wheel for torch 2.13 on PyPI): when it is absent a placeholder module supplies that name."""
    if "torch_sparse" not in sys.modules and importlib.util.find_spec("torch_sparse") is None:
        placeholder = types.ModuleType("torch_sparse")
        placeholder.SparseTensor = type("SparseTensor", (), {})
        sys.modules["torch_sparse"] = placeholder
    from torch_geometric.nn import GCNConv  # noqa: PLC0415 - optional peer
    from torch_geometric_temporal.nn.recurrent import TGCN  # noqa: PLC0415 - optional peer
    return GCNConv, TGCN


def _require_peers():
    try:
        return _import_peers()
    except ImportError as exc:
        pytest.skip(f"PyTorch Geometric Temporal is not installed (`make peers` installs it): {exc}")


class PeerTGCN(torch.nn.Module):
    """Our ``tgcn --tgcn-variant pygt`` in PyG/PGT: GCNConv -> ReLU -> PGT's TGCN cell per snapshot."""

    def __init__(self, GCNConv, TGCN):
        super().__init__()
        self.first, self.cell = GCNConv(2, HIDDEN), TGCN(HIDDEN, HIDDEN)

    def load_ours(self, ours) -> None:
        """Copy our initial parameters (same seed) so both sides train the same numbers."""
        first, second = ours.layers
        with torch.no_grad():
            self.first.lin.weight.copy_(first.weight.t())
            self.first.bias.copy_(first.bias)
            for g, name in enumerate("zrh"):
                part = slice(g * HIDDEN, (g + 1) * HIDDEN)
                getattr(self.cell, f"conv_{name}").lin.weight.copy_(second.gate_weight[:, part].t())
                getattr(self.cell, f"conv_{name}").bias.copy_(second.gate_bias[part])
                linear = getattr(self.cell, f"linear_{name}")
                linear.weight.copy_(torch.cat([second.input_weight[g], second.temporal.hidden_weight[g]], dim=1))
                linear.bias.copy_(second.input_bias[part])

    def steps(self, features, edges, weights):
        h = None
        for x, edge_index, weight in zip(features, edges, weights):
            h = self.cell(torch.relu(self.first(x, edge_index, weight)), edge_index, weight, H=h)
            yield h


class PeerWDGCN(torch.nn.Module):
    """Our ``wdgcn`` in PyG: GCNConv -> ReLU -> GCNConv -> ReLU per snapshot (PGT's snapshot loop), then
    ``torch.nn.LSTM`` over the stacked sequence. PGT has no WD-GCN; its GConvLSTM puts Chebyshev
    convolutions inside the LSTM gates, a different model. The peer's strongest straightforward form: each
    snapshot's GCN normalisation computed once before training (PyG's ``gcn_norm``, then
    ``GCNConv(normalize=False)``), as dgbench computes Ã once; the default ``GCNConv`` renormalises in every
    call (15-25 % slower per epoch, the same losses)."""

    normalised_inputs = True  # _peer_epochs hands it gcn_norm's edges and weights

    def __init__(self, GCNConv):
        super().__init__()
        self.first = GCNConv(2, HIDDEN, normalize=False)
        self.second = GCNConv(HIDDEN, HIDDEN, normalize=False)
        self.lstm = torch.nn.LSTM(HIDDEN, HIDDEN)

    def load_ours(self, ours) -> None:
        first, second = ours.layers
        with torch.no_grad():
            self.first.lin.weight.copy_(first.weight.t())
            self.first.bias.copy_(first.bias)
            self.second.lin.weight.copy_(second.convolution.weight.t())
            self.second.bias.copy_(second.convolution.bias)
            self.lstm.load_state_dict(second.temporal.lstm.state_dict())

    def steps(self, features, edges, weights):
        convolved = [torch.relu(self.second(torch.relu(self.first(x, e, w)), e, w))
                     for x, e, w in zip(features, edges, weights)]
        out, _ = self.lstm(torch.stack(convolved))
        yield from out.unbind(0)


def _peer_epochs(store: Path, peer: torch.nn.Module, scorer: torch.nn.Linear, epochs: int
                 ) -> tuple[list[Timing], list[float]]:
    """Epoch (wall, process-CPU) seconds and losses of ``peer`` + our scorer on the same snapshots, features and
    pairs (mean BCE over the epoch's training pairs, one Adam step per epoch, as ours)."""
    from dgbench.trainers.discrete.data import TRAIN, DiscreteData
    data = DiscreteData(store)
    snaps = [data.store.snapshot(t) for t in range(data.num_steps)]
    edges = [torch.from_numpy(np.stack([s.src, s.dst]).astype(np.int64)) for s in snaps]
    weights = [None if s.weight is None else torch.from_numpy(s.weight.astype(np.float32)) for s in snaps]
    features = [torch.from_numpy(x) for x in data.degree_features]
    if getattr(peer, "normalised_inputs", False):  # once per snapshot, before the timed epochs
        from torch_geometric.nn.conv.gcn_conv import gcn_norm
        normalised = [gcn_norm(e, w, num_nodes=data.num_nodes, add_self_loops=True) for e, w in zip(edges, weights)]
        edges, weights = [e for e, _ in normalised], [w for _, w in normalised]
    optimizer = torch.optim.Adam([*peer.parameters(), *scorer.parameters()], lr=0.01)
    times, losses = [], []
    for epoch in range(epochs):
        start, cpu = time.perf_counter(), time.process_time()
        optimizer.zero_grad()
        pairs = data.split_pairs(TRAIN, epoch)
        of_step = {b.step: b for b in pairs}
        total = sum(len(b.src) for b in pairs)
        loss = torch.zeros(())
        for t, h in enumerate(peer.steps(features, edges, weights)):
            if t in of_step:
                b = of_step[t]
                logits = scorer(torch.cat([h[b.src], h[b.dst]], dim=1)).squeeze(1)
                loss = loss + torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, torch.from_numpy(b.label), reduction="sum")
        loss = loss / total
        loss.backward()
        optimizer.step()
        times.append(Timing(time.perf_counter() - start, time.process_time() - cpu))
        losses.append(loss.item())
    return times, losses


def _keep_freed_memory() -> bool:
    """glibc's allocator returns large freed blocks to the system, so a library that allocates and frees big
    workspaces every call (oneDNN's LSTM, the peer's) pays page faults on every call; raising the mmap and
    trim thresholds (as ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` would at start-up) keeps the
    memory in the process. Process-wide, so both sides run with it; dgbench's epoch does not change with it
    (its buffers are reused), the peer's was ~6 % faster per epoch (loaded host). Off with
    ``DGBENCH_PEER_DEFAULT_MALLOC=1`` (the setting of measurements before this option). Returns whether set."""
    if os.environ.get("DGBENCH_PEER_DEFAULT_MALLOC") or not sys.platform.startswith("linux"):
        return False
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))


def _compare(benchmark, tmp_path, label: str, model: str, options: dict, make_peer) -> None:
    from dgbench.registry import MODELS
    malloc_tuned = _keep_freed_memory()
    store = build(out=tmp_path / "peer.zarr", nodes=PEER_NODES, snapshots=PEER_SNAPSHOTS, seed=0)
    torch.manual_seed(0)  # the seed our run builds its model under: same initial parameters on both sides
    ours_model = MODELS[f"discrete:{model}"].factory(in_features=2, hidden=HIDDEN, **options)
    peer = make_peer()
    peer.load_ours(ours_model)
    scorer = torch.nn.Linear(2 * HIDDEN, 1)
    scorer.load_state_dict(ours_model.scorer.state_dict())

    first_losses: dict[str, float] = {}

    def ours() -> Timing:
        record = run_experiments([config(store, model, options, PEER_EPOCHS, threads=1)])[0]
        first_losses["dgbench"] = record["epochs"][0]["loss"]
        return median_epoch(record_epochs(record))

    def theirs() -> Timing:
        peer_state = {k: v.clone() for k, v in peer.state_dict().items()}  # every round from the same parameters
        scorer_state = {k: v.clone() for k, v in scorer.state_dict().items()}
        times, losses = _peer_epochs(store, peer, scorer, PEER_EPOCHS)
        peer.load_state_dict(peer_state)
        scorer.load_state_dict(scorer_state)
        first_losses["peer"] = losses[0]
        return median_epoch(times)
    mine, peer_times, load = benchmark.pedantic(lambda: alternate(ours, theirs, PEER_ROUNDS), rounds=1, iterations=1)
    ratio = speedups(mine, peer_times)
    benchmark.extra_info.update(speedup_wall=vars(ratio["wall"]), speedup_cpu=vars(ratio["cpu"]), nodes=PEER_NODES,
                                rounds=PEER_ROUNDS, load=load, malloc_tuned=malloc_tuned,
                                first_loss_ours=first_losses["dgbench"],
                                first_loss_peer=first_losses["peer"])
    per_round = {side: [f"{x.wall_s * 1e3:.1f} ({x.cpu_s * 1e3:.1f} CPU)" for x in timings]
                 for side, timings in (("dgbench", mine), ("peer", peer_times))}
    print(f"\n{label} at N={PEER_NODES}, T={PEER_SNAPSHOTS}, median of {PEER_EPOCHS - 1} epochs per round; per round "
          f"wall ms dgbench {per_round['dgbench']}, peer {per_round['peer']}; "
          f"first-epoch loss dgbench {first_losses['dgbench']:.6f}, peer {first_losses['peer']:.6f}; "
          f"freed memory kept in the process (mallopt): {malloc_tuned}")
    print(ratio_line(label, mine, peer_times, load, 1))
    ours_losses, peer_losses = [first_losses["dgbench"]], [first_losses["peer"]]
    # the same model, parameters and pairs: the first epoch's loss agrees (float rounding apart)
    assert ours_losses[0] == pytest.approx(peer_losses[0], rel=1e-4)


def test_tgcn_against_pytorch_geometric_temporal(benchmark, tmp_path):
    """Goal ≥ 3x: our ``tgcn --tgcn-variant pygt`` against GCNConv + PGT's ``TGCN`` cell per snapshot."""
    GCNConv, TGCN = _require_peers()
    _compare(benchmark, tmp_path, "T-GCN (pygt form) vs PyG GCNConv + PGT TGCN", "tgcn", {"variant": "pygt"},
             lambda: PeerTGCN(GCNConv, TGCN))


def test_wdgcn_against_pytorch_geometric(benchmark, tmp_path):
    """Goal ≥ 3x: our ``wdgcn`` against two PyG GCNConv per snapshot + torch's LSTM over the sequence."""
    GCNConv, _ = _require_peers()
    _compare(benchmark, tmp_path, "WD-GCN vs PyG GCNConv x2 + nn.LSTM", "wdgcn", {}, lambda: PeerWDGCN(GCNConv))


# --------------------------------------------------------------------------- accuracy on real data

def test_ap_after_thirty_epochs_on_collegemsg(benchmark, college_store):
    """AP/AUC of every discrete model after 30 epochs (= 30 full-batch Adam steps) on CollegeMsg daily,
    seed 0, θ = 1, the run's evaluation sets (random negatives). A model at chance on real data is a bug
    to find: T-GCN with a ReLU before its GRU died to constant scores (AUC 0.5) for seed 1.

    30 steps, not 10: after 10 steps TM-GCN's mean val/test AUC was seed luck (seeds 0, 1, 2: 0.44, 0.63,
    0.57 with σ placed as Eq. 2 writes it; 0.57, 0.60, 0.45 with the ReLU between layers), so a 10-step check
    failed on a model that learns. After 30 steps TM-GCN's seeds 0-3 gave 0.56, 0.60, 0.58, 0.59."""
    store = college_store

    def measure():
        return run_experiments([config(store, model, options, AP_EPOCHS, theta=AP_THETA, seed=0)
                                for model, options in EVERY_MODEL.values()])
    records = dict(zip(EVERY_MODEL, benchmark.pedantic(measure, rounds=1, iterations=1)))
    table = {label: {f"{split}_{metric}": round(r["final_metrics"][split][metric], 4)
                     for split in ("val", "test") for metric in ("ap", "auc")}
             for label, r in records.items()}
    benchmark.extra_info.update(seed=0, theta=AP_THETA, epochs=AP_EPOCHS,
                                fingerprint=records["tmgcn"]["dataset"].get("fingerprint"), **table)
    print(f"\nCollegeMsg daily, seed 0, theta {AP_THETA}, {AP_EPOCHS} epochs, hidden {HIDDEN}:")
    for label, row in table.items():
        print(f"  {label:12s} {row}")
    for label in ZOO:  # "above chance" (measured 0.56-0.73 for mean val/test AUC, seed 0, 30 steps)
        above = (table[label]["val_auc"] + table[label]["test_auc"]) / 2
        assert above > 0.55, f"{label} is at chance on CollegeMsg: {table[label]}"
