"""Each negative strategy's negatives satisfy its definition (checked by brute force over Python sets),
every positive gets min(K, #candidates) of them, and an empty candidate set leaves slots MISSING — so a
strategy can never silently fall back to another (DyGLib issue #23)."""
from __future__ import annotations

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.tasks import negatives as ns
from dgbench.tasks.link import build_snapshot_set, build_stream_set, snapshot_targets, stream_ranges
from dgbench.tasks.evalset import EvaluationSpec
from dgbench.store import open_store

K = 4


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    from dgbench.generators.stream import build
    path = build(out=tmp_path_factory.mktemp("neg") / "s.zarr", users=12, items=10, events=400, seed=3)
    return open_store(path)


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    from dgbench.generators.esdg_random import build
    path = build(out=tmp_path_factory.mktemp("neg") / "g.zarr", nodes=14, snapshots=6, edge_factor=1.5, seed=2)
    return open_store(path)


def _stream_candidates(strategy, src, dst, t, start, i, pool):
    """The definition, literally: the allowed negative pairs of positive i."""
    now = {(s, d) for s, d, x in zip(src, dst, t) if x == t[i]}
    observed = set(zip(src[:start], dst[:start]))
    if strategy == "random":
        return {(src[i], d) for d in pool} - now
    if strategy == "historical":
        return observed - now
    before = {(s, d) for s, d, x in zip(src[start:], dst[start:], t[start:]) if x < t[i]}
    return before - observed - now


@pytest.mark.parametrize("strategy", ns.STRATEGIES)
def test_stream_negatives_satisfy_their_definition(stream, strategy):
    arrays, details = build_stream_set(stream, EvaluationSpec("link-prediction", strategy, K), None)
    _, ranges = stream_ranges(stream)
    columns = stream.events()
    src, dst, t = (columns["src"].tolist(), columns["dst"].tolist(), columns["t"].tolist())
    pool = sorted(set(dst))
    checked = 0
    for split in ("val", "test"):
        start, stop = ranges[split]
        neg_src, neg_dst = arrays[f"{split}_negative_src"], arrays[f"{split}_negatives"]
        assert neg_src.shape == (stop - start, K)
        for row, i in enumerate(range(start, stop)):
            allowed = _stream_candidates(strategy, src, dst, t, start, i, pool)
            pairs = [(s, d) for s, d in zip(neg_src[row].tolist(), neg_dst[row].tolist()) if d != ns.MISSING]
            assert all(p in allowed for p in pairs), (split, i, strategy)
            assert len(set(pairs)) == len(pairs)  # distinct
            assert len(pairs) == min(K, len(allowed))  # all of them when fewer: nothing from elsewhere
            assert (neg_dst[row, len(pairs):] == ns.MISSING).all() and (neg_src[row, len(pairs):] == ns.MISSING).all()
            checked += len(pairs)
    assert checked > 0


def test_the_first_inductive_positives_have_no_negative_rather_than_random_ones(stream):
    arrays, details = build_stream_set(stream, EvaluationSpec("link-prediction", ns.INDUCTIVE, K), None)
    first_time = arrays["test_t"] == arrays["test_t"][0]  # nothing in the split precedes these
    assert (arrays["test_negatives"][first_time] == ns.MISSING).all()
    assert details["splits"]["test"]["without_negatives"] >= int(first_time.sum())


def _snapshot_pairs(store, index):
    snap = store.snapshot(index)
    return set(zip(snap.src.tolist(), snap.dst.tolist()))


@pytest.mark.parametrize("strategy", [ns.RANDOM, ns.HISTORICAL])
def test_snapshot_negatives_satisfy_their_definition(snapshots, strategy):
    arrays, _ = build_snapshot_set(snapshots, EvaluationSpec("link-prediction", strategy, K))
    n = snapshots.num_nodes
    for split, tau in snapshot_targets(snapshots.num_snapshots).items():
        target = _snapshot_pairs(snapshots, tau)
        observed = set().union(*(_snapshot_pairs(snapshots, i) for i in range(tau)))
        src, dst = arrays[f"{split}_src"].tolist(), arrays[f"{split}_dst"].tolist()
        assert set(zip(src, dst)) == target  # every target pair is a positive (below the cap)
        assert (arrays[f"{split}_steps"] == tau - 1).all()
        for row, s in enumerate(src):
            if strategy == "random":
                allowed = {(s, d) for d in range(n) if d != s} - target
            else:
                allowed = {(a, b) for a, b in observed if a != b} - target
            pairs = [(a, b) for a, b in zip(arrays[f"{split}_negative_src"][row].tolist(),
                                            arrays[f"{split}_negatives"][row].tolist()) if b != ns.MISSING]
            assert all(p in allowed for p in pairs) and len(set(pairs)) == len(pairs)
            assert len(pairs) == min(K, len(allowed))


def test_inductive_negatives_are_refused_on_snapshot_stores_not_emptied(snapshots):
    with pytest.raises(DgbenchError, match="one snapshot each"):
        build_snapshot_set(snapshots, EvaluationSpec("link-prediction", ns.INDUCTIVE, K))


def test_unknown_strategy_is_refused():
    with pytest.raises(DgbenchError, match="unknown negative strategy 'hard'"):
        ns.check_strategy("hard")


def test_new_node_flags_follow_the_observed_period(stream):
    arrays, _ = build_stream_set(stream, EvaluationSpec("link-prediction", ns.RANDOM, 1), None)
    _, ranges = stream_ranges(stream)
    columns = stream.events()
    start = ranges["test"][0]
    seen = set(columns["src"][:start].tolist()) | set(columns["dst"][:start].tolist())
    pairs = zip(arrays["test_src"].tolist(), arrays["test_dst"].tolist())
    expected = [s not in seen or d not in seen for s, d in pairs]
    assert arrays["test_new_node"].tolist() == expected


def test_draw_is_uniform_over_the_allowed_values():
    rng = np.random.default_rng(0)
    candidates = ns.Ranges(np.arange(6, dtype=np.int64), np.zeros(3000, np.int64), np.full(3000, 6, np.int64))
    excluded = ns.Ranges(np.array([2], np.int64), np.zeros(3000, np.int64), np.ones(3000, np.int64))
    drawn = ns.draw(candidates, excluded, 2, rng)
    counts = np.bincount(drawn.ravel(), minlength=6)
    assert counts[2] == 0
    assert np.abs(counts[[0, 1, 3, 4, 5]] / 6000 - 0.2).max() < 0.03
    assert (np.bincount(drawn[:, 0], minlength=6)[[0, 1, 3, 4, 5]] > 450).all()  # the first slot is uniform too


def _whole_stream_set(store, spec, max_events):
    """The evaluation set built from the whole stream in memory: the definition the streamed build matches."""
    from dgbench.tasks.link import _rng, _counts
    stop, ranges = stream_ranges(store, max_events)
    cols = store.events(0, stop)
    src, dst, t = cols["src"].astype(np.int64), cols["dst"].astype(np.int64), cols["t"].astype(np.float64)
    arrays = {}
    for split in ("val", "test"):
        start, end = ranges[split]
        before = ns.Before.of(src[:start], dst[:start], store.num_nodes)
        part = ns.StreamSplit(src, dst, t, store.num_nodes, start, end, np.unique(dst), before)
        neg = ns.stream_negatives(spec.strategy, part, spec.negatives, _rng(spec, split))
        arrays.update({f"{split}_src": src[start:end], f"{split}_dst": dst[start:end], f"{split}_t": t[start:end],
                       f"{split}_negative_src": neg.src, f"{split}_negatives": neg.dst,
                       f"{split}_new_node": ns.stream_new_nodes(part)})
        _counts(neg.dst, arrays[f"{split}_new_node"])
    return arrays


@pytest.fixture(scope="module")
def tied_stream(tmp_path_factory):
    """Integer times with long runs of ties, so runs straddle the split edges and the read blocks."""
    from dgbench.store.write import EdgeStreamStoreWriter
    rng = np.random.default_rng(5)
    count, n = 3000, 40
    t = np.sort(rng.integers(0, 60, count))
    with EdgeStreamStoreWriter(tmp_path_factory.mktemp("tied") / "t.zarr", num_nodes=n, directed=True,
                               provenance={"source": "test"}) as writer:
        writer.append_events(rng.integers(0, n, count), rng.integers(0, n, count), t)
        path = writer.close()
    return open_store(path)


@pytest.mark.parametrize("strategy", ns.STRATEGIES)
@pytest.mark.parametrize("max_events", [None, 2100])
def test_a_stream_set_read_in_blocks_equals_the_one_built_from_the_whole_stream(tied_stream, strategy,
                                                                                 max_events, monkeypatch):
    import dgbench.tasks.link as link
    spec = EvaluationSpec("link-prediction", strategy, K)
    expected = _whole_stream_set(tied_stream, spec, max_events)
    _, ranges = stream_ranges(tied_stream, max_events)
    t = tied_stream.read("t").astype(np.float64)
    for split in ("val", "test"):  # the split edges fall inside runs of ties, or the test checks nothing
        start, end = ranges[split]
        assert t[start - 1] == t[start]
    monkeypatch.setattr(link, "TIE_READ", 5)  # tie runs span several reads
    for read_events in (7, 1000, 10**6):
        arrays, _ = build_stream_set(tied_stream, spec, max_events, read_events=read_events)
        for name, value in expected.items():
            np.testing.assert_array_equal(arrays[name], value, err_msg=f"{name}, blocks of {read_events}")
