"""The dry run's step-by-step discrete data (trainers/projection/lazydata.py, which keeps the dry run's memory flat in
P): it holds the same numbers as the run's whole DiscreteData, the dry run counts the same bytes, work and pattern on
it for every discrete scheme, and the snapshot scheme's dry run builds only rank 0's own steps and no pairs. Also the
projection's Sven micro-batch term (priced with the n a measured run chose)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dgbench.trainers.projection.dryrun import dry_run, partition_problem
from dgbench.trainers.projection.lazydata import (LazyDiscreteData, LazySteps, distinct_with_loops,
                                                  lazy_partition_problem, smoothed_step_counts)
from dgbench.registry import SCHEMES, load_plugins
from dgbench.trainers.config import RunConfig
from dgbench.trainers.discrete.data import TRAIN, DiscreteData
from dgbench.trainers.experiment import resolve

load_plugins("dgbench.trainers")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    from dgbench.generators.esdg_random import build
    return build(out=tmp_path_factory.mktemp("lazy") / "snapshots.zarr", nodes=40, snapshots=9, edge_factor=3.0,
                 seed=13)


def _config(store: Path, scheme: str, world: int, model: str = "cdgcn", **extra) -> RunConfig:
    return RunConfig(scheme, model, store, nproc=world, epochs=2, seed=7, hidden=6, out=store.parent / "runs",
                     **extra)


def test_lazy_data_holds_the_same_numbers_as_the_whole_data(store):
    run = resolve(_config(store, "single", 1))
    whole, lazy = DiscreteData(store, seed=7), lazy_partition_problem(run)
    assert isinstance(lazy, LazyDiscreteData) and not isinstance(whole, LazyDiscreteData)
    assert lazy.num_steps == whole.num_steps == len(lazy.adjacency)
    for t in range(whole.num_steps):
        a, b = whole.adjacency[t], lazy.adjacency[t]
        assert np.array_equal(a.rowptr, b.rowptr) and np.array_equal(a.col, b.col) and np.array_equal(a.val, b.val)
        assert np.array_equal(whole.degree_features[t], lazy.degree_features[t])
        assert np.array_equal(whole.target_keys[t + 1], lazy.target_keys[t + 1])
    assert np.array_equal(whole.first_layer_input[2:5], lazy.first_layer_input[2:5])
    rows = np.array([3, 0, 17])
    assert np.array_equal(whole.first_layer_input[:, rows], lazy.first_layer_input[:, rows])
    assert np.array_equal(whole.nonzeros_per_step(), lazy.nonzeros_per_step())
    assert np.array_equal(whole.edges_per_step, lazy.edges_per_step) and whole.work() == lazy.work()
    for x, y in zip(whole.split_pairs(TRAIN, 1), lazy.split_pairs(TRAIN, 1)):
        assert x.step == y.step and np.array_equal(x.src, y.src) and np.array_equal(x.dst, y.dst)


def _discrete_configs(store: Path, world: int) -> list[RunConfig]:
    out = []
    for scheme in sorted((s for s in SCHEMES.values() if s.family == "discrete"), key=lambda s: s.name):
        if scheme.world.problem(scheme.name, world) is not None:
            continue
        models = getattr(scheme, "models", None)
        model = "cdgcn" if models is None or "cdgcn" in models else models[0]
        extra = {"group_length": 3} if scheme.name.startswith("blad") else {}
        out.append(_config(store, scheme.name, world, model, **extra))
    return out


def _smoothed_configs(store: Path, world: int) -> list[RunConfig]:
    """The models paired with a smoothing (ESDG Table 1: tmgcn M-product, evolvegcn-o edge-life) under the
    two ESDG schemes."""
    return [_config(store, scheme, world, model) for scheme in ("snapshot", "vertex")
            for model in ("tmgcn", "evolvegcn-o")]


@pytest.mark.parametrize("world", [2, 4])
def test_dry_run_on_lazy_data_counts_what_it_counts_on_the_whole_data(store, world):
    """The same bytes per tag, (sender, receiver) matrices, per-rank work and totals, for every discrete
    scheme registered at this world and for the smoothed models (the exactness test compares the lazy dry
    run with real runs)."""
    configs = _discrete_configs(store, world)
    assert {"snapshot", "vertex"} <= {c.scheme for c in configs}
    for config in configs + _smoothed_configs(store, world):
        whole = dry_run(config, problem=lazy_partition_problem(resolve(config), kind=DiscreteData))
        lazy = dry_run(config)
        where = f"{config.scheme} P={world}"
        assert lazy.bytes_by_tag() == whole.bytes_by_tag(), where
        for tag, volume in whole.tags.items():
            assert np.array_equal(volume.pairs, lazy.tags[tag].pairs), (where, tag)
        for name, values in whole.work.items():
            assert np.allclose(values, lazy.work[name]), (where, name)
        assert lazy.extra == whole.extra, where


def _hashed_smoothed_counts(snapshots, num_nodes, window):
    """The smoothed per-step counts as the dry run first computed them (np.unique per step, the window's union
    re-sorted, the self loops merged in by a sort)."""
    from collections import deque
    recent, edges, nonzeros = deque(maxlen=window), [], []
    for snap in snapshots:
        recent.append(np.unique(snap.dst.astype(np.int64) * num_nodes + snap.src))
        union = np.unique(np.concatenate(recent))
        edges.append(len(union))
        nonzeros.append(distinct_with_loops(union, num_nodes))
    return np.array(edges), np.array(nonzeros)


@pytest.mark.parametrize("window", [1, 2, 3, 5])
def test_smoothed_step_counts_equal_the_hashed_counts(window):
    """The sorted streaming counts equal the np.unique ones, on steps with repeated edges, self loops, an
    empty step and vertices without edges."""
    from types import SimpleNamespace
    rng = np.random.default_rng(window)
    n, snapshots = 50, []
    for size in (120, 0, 300, 7, 200, 200, 1):
        src, dst = rng.integers(0, n // 2, size), rng.integers(0, n // 2, size)
        dst[: size // 4] = src[: size // 4]  # self loops
        snapshots.append(SimpleNamespace(src=src.astype(np.int32), dst=dst.astype(np.int32)))
    edges, nonzeros = smoothed_step_counts(iter(snapshots), n, window)
    expected_edges, expected_nonzeros = _hashed_smoothed_counts(snapshots, n, window)
    assert np.array_equal(edges, expected_edges) and np.array_equal(nonzeros, expected_nonzeros)
    assert (nonzeros < edges + n).any()  # the case of self loops already among the entries is met


@pytest.mark.parametrize("model", ["cdgcn", "tmgcn", "evolvegcn-o"])
def test_snapshot_dry_run_builds_only_rank_zeros_steps_and_no_pairs(store, monkeypatch, model):
    """What keeps the weak-scaling dry run small: Ã_t, Ã_t X_t and X_t are built for rank 0's own steps
    only (T/P of them), never every step, smoothed ones from the raw steps of their windows (rank 0's
    first, so inside its range); the training pairs are never drawn."""
    built: list[int] = []
    original = LazySteps._one

    def counting(self, t):
        if t not in self._cache:
            built.append(t)
        return original(self, t)

    monkeypatch.setattr(LazySteps, "_one", counting)
    drawn = []
    monkeypatch.setattr(LazyDiscreteData, "split_pairs", lambda self, *a, **k: drawn.append(a) or [])
    world = 4
    config = _config(store, "snapshot", world, model)
    problem = partition_problem(config)
    result = dry_run(config, problem=problem)
    steps = problem.num_steps
    own = -(-steps // world)
    assert result.total_bytes() > 0 and result.work["edges"][0] > 0
    if model != "evolvegcn-o":  # its weights evolve: no per-vertex sequences to redistribute
        assert result.bytes_by_tag()["to_vertex:forward"] > 0
    assert len(set(built)) <= own and max(built) < own, built  # rank 0 holds steps [0, ceil(T/P))
    assert drawn == []


@pytest.mark.parametrize("model", ["cdgcn", "tmgcn"])
def test_snapshot_dry_run_builds_each_of_rank_zeros_steps_once(store, monkeypatch, model):
    """Rank 0's views read each of its Ã_t several times (Ã_t X_t, the graph difference with t - 1, the move):
    the dry run keeps its block while building it, so each step is built once even where the data keeps
    fewer steps than rank 0 owns (here 2 of its 4), and afterwards keeps only those few again."""
    built: list[tuple[int, int]] = []  # (which sequence, step)
    original = LazySteps._one

    def counting(self, t):
        if t not in self._cache:
            built.append((id(self), t))
        return original(self, t)

    monkeypatch.setattr(LazySteps, "_one", counting)
    monkeypatch.setattr(LazyDiscreteData, "keep_steps", 2)
    config = _config(store, "snapshot", 2, model)
    problem = partition_problem(config)
    result = dry_run(config, problem=problem)
    assert result.total_bytes() > 0 and len({t for _, t in built}) == 4
    assert len(built) == len(set(built)), built
    assert len(problem.adjacency.held()) <= 2


def test_sven_micro_batches_cost_their_calibrated_overhead_and_a_measured_runs_n_is_kept(tmp_path):
    """Sven's n chunks per batch (Alg. 2) each cost ``per_microbatch_s`` beyond the first (calibrated on Sven's
    own runs); a dry run given the n its run chose (Eq. 12 at run time) is priced with that n."""
    import json

    from dgbench.trainers.projection.hardware import load_profile
    from dgbench.trainers.projection.projection import project_epoch
    from dgbench.generators.stream import build
    events = build(out=tmp_path / "stream.zarr", users=30, items=20, events=600, edge_dim=4, seed=5)
    rates = {"per_event_s": 1e-5, "per_position_s": 1e-5, "per_batch_s": 1e-3}
    profiles = []
    for extra in ({}, {"per_microbatch_s": 0.01}):
        path = tmp_path / f"profile{len(profiles)}.json"
        path.write_text(json.dumps({
            "schema": "dgbench.hardware", "version": 1, "name": "test", "source": "calibrated", "ranks_per_node": 2,
            "device": {"name": "cpu", "memory_bandwidth": 1e10},
            "links": {"intra": {"alpha_s": 1e-4, "bandwidth": 1e8}, "inter": {"alpha_s": 1e-3, "bandwidth": 1e7}},
            "compute": {"continuous": {"tgn": {**rates, **extra}}}}))
        profiles.append(load_profile(path))
    config = RunConfig("sven", "tgn", events, nproc=2, epochs=1, batch_size=100, memory_dim=8, neighbors=3, seed=1)
    dry = dry_run(config, eq12_n=5)
    assert dry.extra["microbatches_given"] and dry.extra["microbatches_counted"] == 5
    plain, chunked = project_epoch(dry, profiles[0]), project_epoch(dry, profiles[1])
    assert plain["microbatches"] is None  # the run's n, not one recomputed from the profile's link
    assert chunked["compute_s"] - plain["compute_s"] == pytest.approx(0.01 * 4 * dry.units)
    assert chunked["communication_s"] == plain["communication_s"]


@pytest.mark.parametrize("family", ["discrete", "continuous"])
def test_a_dry_run_neither_builds_nor_writes_evaluation_sets(tmp_path, family):
    """Dry runs score nothing: a fresh store has no evaluation sets beside it after one (building a snapshot
    store's sets is O(N·T), dgbench/tasks/options.py), and a real run still writes them."""
    from dgbench.generators.esdg_random import build
    from dgbench.generators.stream import build as stream
    if family == "discrete":
        store = build(out=tmp_path / "s.zarr", nodes=40, snapshots=9, edge_factor=3.0, seed=13)
        config = _config(store, "snapshot", 2)
    else:
        store = stream(out=tmp_path / "e.zarr", users=30, items=20, events=400, edge_dim=4, seed=1)
        config = RunConfig("sven", "tgn", store, nproc=2, epochs=1, seed=0, batch_size=100, memory_dim=8,
                           out=tmp_path / "runs")
    dry_run(config)
    sets_dir = store.parent / f"{store.name}.tasks"
    assert not sets_dir.exists() or not any(sets_dir.iterdir())
    from dgbench.tasks.options import evaluation_sets
    assert evaluation_sets(store, "random", None, 9)  # outside a dry run the sets are built as before
    assert any(sets_dir.iterdir())
