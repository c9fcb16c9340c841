"""Generators: deterministic per seed, and each keeps the statistical promise its paper's knob makes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.store import open_store
from dgbench.store.validate import validate_store
from dgbench.generators import esdg_random, nonuniform, static_to_dynamic, stream

SMALL = {
    esdg_random: {"nodes": 64, "snapshots": 4, "edge_factor": 2.0},
    nonuniform: {"nodes": 64, "snapshots": 4, "mean_edges": 200, "std_edges": 50.0},
    static_to_dynamic: {"nodes": 64, "static_edges": 300, "snapshots": 4},
    stream: {"users": 30, "items": 20, "events": 1500, "edge_dim": 2, "label_rate": 0.1},
}


def build(module, tmp_path: Path, name: str = "g", **options):
    path = module.build(out=tmp_path / f"{name}.zarr", **options)
    return open_store(path)


def snapshot_pairs(store, t: int) -> np.ndarray:
    snap = store.snapshot(t)
    return np.stack([snap.src, snap.dst], axis=1)


@pytest.mark.parametrize("module", list(SMALL), ids=lambda m: m.__name__.split(".")[-1])
def test_same_seed_same_fingerprint_other_seed_differs(tmp_path, module):
    a = build(module, tmp_path, "a", seed=7, **SMALL[module])
    b = build(module, tmp_path, "b", seed=7, **SMALL[module])
    c = build(module, tmp_path, "c", seed=8, **SMALL[module])
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert validate_store(a.path) == []
    assert a.provenance["params"]["seed"] == 7 and a.provenance["source"] == "generator"


# --------------------------------------------------------------------------- esdg-random (ESDG §6.1)

def test_esdg_random_has_n_times_f_uniform_edges_per_snapshot(tmp_path):
    nodes, factor = 64, 8.0
    store = build(esdg_random, tmp_path, nodes=nodes, snapshots=6, edge_factor=factor, seed=0)
    assert list(store.edges_per_snapshot()) == [int(nodes * factor)] * 6
    for column in ("src", "dst"):
        ids = store.read(column)
        assert ids.min() >= 0 and ids.max() < nodes
        counts = np.bincount(ids, minlength=nodes)
        expected = len(ids) / nodes
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < (nodes - 1) + 5 * np.sqrt(2 * (nodes - 1)), f"{column} ids are not uniform (chi2 {chi2:.0f})"


# --------------------------------------------------------------------------- nonuniform (DGC)

def edge_count_std(tmp_path, std: float) -> float:
    store = build(nonuniform, tmp_path, f"std{std}", nodes=128, snapshots=40, mean_edges=600, std_edges=std, seed=3)
    return float(store.edges_per_snapshot().std())


def test_nonuniform_std_knob_sets_spread_of_edge_counts(tmp_path):
    store = build(nonuniform, tmp_path, nodes=128, snapshots=10, mean_edges=600, std_edges=0.0, seed=3)
    assert list(store.edges_per_snapshot()) == [600] * 10
    small, large = edge_count_std(tmp_path, 30.0), edge_count_std(tmp_path, 200.0)
    assert 0 < small < large
    assert 100 < large < 300 and 10 < small < 60


def appearance_spans(store) -> np.ndarray:
    """For each vertex, last - first + 1 over the snapshots in which it has an edge."""
    first = np.full(store.num_nodes, store.num_snapshots)
    last = np.full(store.num_nodes, -1)
    for snap in store.snapshots():
        seen = np.unique(np.concatenate([snap.src, snap.dst]))
        first[seen] = np.minimum(first[seen], snap.index)
        last[seen] = np.maximum(last[seen], snap.index)
    return last - first + 1


def test_nonuniform_vertex_sequence_lengths_differ(tmp_path):
    options = dict(nodes=100, snapshots=20, mean_edges=800, std_edges=0.0, seed=4)
    varied = appearance_spans(build(nonuniform, tmp_path, "varied", min_presence=0.2, **options))
    assert varied.min() <= 6 and varied.max() == 20 and varied.std() > 3
    always = appearance_spans(build(nonuniform, tmp_path, "always", min_presence=1.0, **options))
    assert np.all(always == 20)


# --------------------------------------------------------------------------- static-to-dynamic (BLAD)

@pytest.mark.parametrize("trend,full_at", [("increasing", -1), ("decreasing", 0)])
def test_static_to_dynamic_follows_trend_and_keeps_static_edges(tmp_path, trend, full_at):
    static_edges = 500
    store = build(static_to_dynamic, tmp_path, nodes=80, static_edges=static_edges, snapshots=8, trend=trend,
                  min_keep=0.3, seed=5)
    counts = store.edges_per_snapshot()
    steps = np.diff(counts) if trend == "increasing" else -np.diff(counts)
    assert np.all(steps > 0)
    assert counts[full_at] == static_edges and min(counts) == round(0.3 * static_edges)
    static = {tuple(p) for p in snapshot_pairs(store, full_at if full_at >= 0 else store.num_snapshots - 1)}
    for t in range(store.num_snapshots):
        assert {tuple(p) for p in snapshot_pairs(store, t)} <= static


def test_static_to_dynamic_explicit_fractions(tmp_path):
    store = build(static_to_dynamic, tmp_path, nodes=50, static_edges=400, snapshots=3, trend="0.5,0.1,0.9", seed=1)
    assert list(store.edges_per_snapshot()) == [200, 40, 360]


@pytest.mark.parametrize("trend", ["sideways", "0.5,0.2", "0.5,1.5,0.2"])
def test_static_to_dynamic_bad_trend(tmp_path, trend):
    with pytest.raises(DgbenchError, match="--trend"):
        static_to_dynamic.build(out=tmp_path / "x.zarr", snapshots=3, trend=trend)
    assert not (tmp_path / "x.zarr").exists()


# --------------------------------------------------------------------------- stream

def repeat_fraction(store) -> float:
    """Fraction of events whose destination is the source's previous partner."""
    events = store.events()
    last: dict[int, int] = {}
    repeats = 0
    for s, d in zip(events["src"].tolist(), events["dst"].tolist()):
        repeats += last.get(s) == d
        last[s] = d
    return repeats / len(events["src"])


def stream_store(tmp_path, name, **options):
    base = dict(users=200, items=300, events=4000, zipf=1.1, repeat=0.5, seed=2)
    return build(stream, tmp_path, name, **{**base, **options})


def test_stream_time_sorted_bipartite_features_labels(tmp_path):
    store = stream_store(tmp_path, "s", edge_dim=3, label_rate=0.2)
    events = store.events()
    assert np.all(np.diff(events["t"]) > 0)
    assert events["src"].min() >= 0 and events["src"].max() < 200
    assert events["dst"].min() >= 200 and events["dst"].max() < 500
    assert store.num_nodes == 500 and store.attrs["bipartite"] == {"num_users": 200, "num_items": 300}
    assert events["edge_features"].shape == (4000, 3)
    assert 0.15 < events["label"].mean() < 0.25


def test_stream_not_bipartite_shares_ids(tmp_path):
    store = stream_store(tmp_path, "s", items=0)
    events = store.events()
    assert store.num_nodes == 200 and store.attrs["bipartite"] is None
    assert events["dst"].max() < 200


def test_stream_repeat_knob_changes_repeat_fraction(tmp_path):
    low = repeat_fraction(stream_store(tmp_path, "low", repeat=0.1))
    high = repeat_fraction(stream_store(tmp_path, "high", repeat=0.9))
    assert high > low + 0.5 and high > 0.8


def top_decile_share(store) -> float:
    counts = np.sort(np.bincount(store.read("src"), minlength=200))[::-1]
    return counts[: len(counts) // 10].sum() / counts.sum()


def test_stream_zipf_skews_activity(tmp_path):
    uniform = top_decile_share(stream_store(tmp_path, "uniform", zipf=0.0))
    skewed = top_decile_share(stream_store(tmp_path, "skewed", zipf=1.5))
    assert uniform < 0.15 and skewed > 0.6


def test_static_to_dynamic_from_a_prepared_store(tmp_path):
    real = build(esdg_random, tmp_path, nodes=50, snapshots=3, edge_factor=2.0, seed=4)
    pairs = {tuple(p) for t in range(3) for p in snapshot_pairs(real, t).tolist()}
    blad = static_to_dynamic.build(out=tmp_path / "blad.zarr", static_store=real.path, snapshots=5, trend="increasing")
    opened = open_store(blad)
    assert opened.num_nodes == 50 and opened.provenance["params"]["static_edges"] == len(pairs)
    assert opened.provenance["params"]["static_store"]["fingerprint"] == real.fingerprint
    assert {tuple(p) for p in snapshot_pairs(opened, 4).tolist()} == pairs  # the last snapshot keeps them all
    with pytest.raises(DgbenchError, match="--nodes: the static graph comes from --static"):
        static_to_dynamic.build(out=tmp_path / "x.zarr", static_store=real.path, nodes=10)


def test_stream_partners_drawn_vectorised_are_the_event_by_event_ones():
    """`stream` draws repeat partners vectorised: same draws, same order, so the same stream as the loop."""
    from dgbench.generators.stream import draw_partners

    def event_by_event(src, dst_weights, repeat, last_partner, rng):
        fresh = rng.choice(len(dst_weights), size=len(src), p=dst_weights)
        dst = np.empty(len(src), dtype=np.int64)
        for i, (s, f) in enumerate(zip(src, fresh)):
            dst[i] = last_partner[s] if last_partner[s] >= 0 and rng.random() < repeat else f
            last_partner[s] = dst[i]
        return dst

    for seed in range(10):
        draw = np.random.default_rng(seed)
        users, items = int(draw.integers(1, 50)), int(draw.integers(1, 50))
        weights = draw.random(items)
        weights /= weights.sum()
        partners_loop, partners = np.full(users, -1), np.full(users, -1)
        rng_loop, rng = np.random.default_rng(seed + 100), np.random.default_rng(seed + 100)
        for _ in range(4):  # blocks carry each source's last partner over
            src = draw.integers(0, users, int(draw.integers(0, 300)))
            repeat = float(draw.random())
            np.testing.assert_array_equal(draw_partners(src, weights, repeat, partners, rng),
                                          event_by_event(src, weights, repeat, partners_loop, rng_loop))
            np.testing.assert_array_equal(partners, partners_loop)
        assert rng.random() == rng_loop.random()  # the generator is left where the loop left it


def test_esdg_random_presorted_snapshots_are_the_ones_the_writer_sorts(tmp_path):
    """esdg-random hands the writer snapshots it sorted itself: the store must be the one the writer's own
    sort gives from the unsorted pairs (same fingerprint)."""
    from dgbench.generators.common import snapshot_rngs
    from dgbench.generators.esdg_random import build
    from dgbench.store import SnapshotStoreWriter, open_store
    nodes, snapshots = 300, 5
    made = open_store(build(out=tmp_path / "made.zarr", nodes=nodes, snapshots=snapshots, edge_factor=3.0, seed=2))
    with SnapshotStoreWriter(tmp_path / "plain.zarr", num_nodes=nodes, directed=True, cut=made.attrs["cut"],
                             provenance=made.provenance) as writer:
        for t, rng in enumerate(snapshot_rngs(2, snapshots)):
            pairs = rng.integers(0, nodes, size=(2, 3 * nodes), dtype=np.int64).astype(np.int32)
            writer.append_snapshot(pairs[0], pairs[1], start=t)
        plain = open_store(writer.close())
    assert made.fingerprint == plain.fingerprint


def test_stream_weighted_picks_are_rng_choice_draws():
    """`stream` computes its cumulative weights once: the picks must stay rng.choice's, draw for draw."""
    from dgbench.generators.stream import cumulative, weighted_picks
    for seed in range(30):
        draw = np.random.default_rng(seed)
        weights = draw.random(int(draw.integers(1, 3000))) ** 3
        weights /= weights.sum()
        count = int(draw.integers(0, 2000))
        with_choice, with_picks = np.random.default_rng(seed + 1), np.random.default_rng(seed + 1)
        np.testing.assert_array_equal(weighted_picks(cumulative(weights), count, with_picks),
                                      with_choice.choice(len(weights), size=count, p=weights))
        assert with_picks.random() == with_choice.random()
