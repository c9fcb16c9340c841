"""EdgeBank (unlimited and time-window) and persistence score exactly what their definitions say, and
rank recurring pairs above random ones on data where edges recur."""
from __future__ import annotations

import numpy as np
import pytest

from dgbench.models.edgebank import EdgeBank
from dgbench.models.persistence import Persistence
from dgbench.store import EdgeStreamStoreWriter, SnapshotStoreWriter
from dgbench.tasks.baselines import score_split
from dgbench.tasks.link import link_prediction_set


@pytest.fixture
def tiny_stream(tmp_path):
    """(0→5 @1), (1→6 @2), (0→5 @3), (2→7 @10), (0→6 @11); split 3/1/1 events."""
    path = tmp_path / "tiny.zarr"
    with EdgeStreamStoreWriter(path, num_nodes=8, directed=True, provenance={"source": "test"}) as writer:
        writer.append_events(np.array([0, 1, 0, 2, 0]), np.array([5, 6, 5, 7, 6]), np.array([1., 2., 3., 10., 11.]))
        writer.set_split(3, 4, "test")
        return writer.close()


def test_edgebank_unlimited_remembers_every_pair_seen_strictly_before(tiny_stream):
    bank = EdgeBank("unlimited")
    bank.index(tiny_stream, earliest_query=-np.inf)  # queries from the stream's start: every event kept
    src, dst = np.array([0, 0, 1, 2, 2, 3]), np.array([5, 5, 6, 7, 7, 5])
    when = np.array([1.0, 1.5, 20.0, 10.0, 10.5, 50.0])
    # (0,5) is first seen at 1: not before 1, seen before 1.5; (2,7) at 10: not before 10, before 10.5
    assert bank.score(src, dst, when).tolist() == [0, 1, 1, 0, 1, 0]


def test_edgebank_time_window_forgets_pairs_older_than_the_window(tiny_stream):
    bank = EdgeBank("time-window", time_window=5.0)
    bank.index(tiny_stream, earliest_query=-np.inf)
    assert bank.score(np.array([0, 0, 1]), np.array([5, 5, 6]), np.array([7.9, 8.1, 6.0])).tolist() == [1, 0, 1]
    default = EdgeBank("time-window")
    default.index(tiny_stream)
    assert default.window == pytest.approx(0.0)  # the test split is one event: its duration is 0
    assert default.describe() == {"bank": "time-window", "window": 0.0}


def test_persistence_counts_the_lookback_snapshots_holding_a_pair(tmp_path):
    path = tmp_path / "p.zarr"
    with SnapshotStoreWriter(path, num_nodes=4, directed=True, cut={"method": "generated"},
                             provenance={"source": "test"}) as writer:
        for pairs in ([(0, 1)], [(0, 1), (2, 3)], [(2, 3)], [(0, 1)]):
            src, dst = np.array(pairs).T
            writer.append_snapshot(src, dst)
        writer.close()
    one, three = Persistence(1), Persistence(3)
    one.index(path)
    three.index(path)
    src, dst, step = np.array([0, 2, 0, 1]), np.array([1, 3, 1, 0]), np.array([2, 2, 1, 2])
    assert one.score(src, dst, step).tolist() == [0, 1, 1, 0]
    assert three.score(src, dst, step).tolist() == [2, 2, 2, 0]


def test_edgebank_beats_chance_on_random_negatives_and_ties_on_historical_ones(tmp_path):
    """Poursafaei et al.'s point: memorisation wins against random negatives, not historical ones."""
    from dgbench.generators.stream import build
    store = build(out=tmp_path / "s.zarr", users=40, items=300, events=3000, repeat=0.8, seed=4)
    bank = EdgeBank("unlimited")
    bank.index(store)
    random = score_split(bank, link_prediction_set(store, "random", 5), "test").as_metrics()
    historical = score_split(bank, link_prediction_set(store, "historical", 5), "test").as_metrics()
    assert random["ap"] > 0.7 and random["mrr"] > 0.6
    assert historical["mrr"] < random["mrr"] - 0.2 and historical["ap"] < 0.55  # memorised negatives too


def test_persistence_beats_chance_where_edges_recur(tmp_path):
    from dgbench.generators.communities import build
    store = build(out=tmp_path / "c.zarr", nodes=200, snapshots=6, persistence=0.6, seed=1)
    baseline = Persistence(1)
    baseline.index(store)
    figures = score_split(baseline, link_prediction_set(store, "random", 5), "test").as_metrics()
    assert figures["ap"] > 0.7 and figures["positives"] > 0


def _brute_force_edgebank(src, dst, t, queries, window=np.inf) -> np.ndarray:
    """Per (s, d, when) query: 1 if some event (s, d, t') has when - window <= t' < when, else 0."""
    out = []
    for s, d, when in zip(*queries):
        seen = t[(src == s) & (dst == d) & (t < when)]
        out.append(float(len(seen) > 0 and seen.max() >= when - window))
    return np.array(out)


@pytest.mark.parametrize("bank", ["unlimited", "time-window"])
@pytest.mark.parametrize("block", [7, 1000, 1 << 22])
def test_edgebank_read_in_blocks_scores_every_evaluation_query_as_the_whole_stream(tmp_path, bank, block):
    """A pair's events before the validation split are kept as its latest one: the scores of every validation
    and test query (positives and negatives, times tied across the split's edge and the read blocks) equal a
    brute force over every event, for any block size; a query before the validation split is refused."""
    from dgbench.generators.stream import build
    from dgbench.store import open_store
    base = open_store(build(out=tmp_path / "b.zarr", users=30, items=60, events=3000, repeat=0.7, seed=2), "stream")
    columns = base.events()
    src, dst, t = columns["src"].astype(np.int64), columns["dst"].astype(np.int64), np.floor(columns["t"] / 3)
    path = tmp_path / "tied.zarr"
    with EdgeStreamStoreWriter(path, num_nodes=base.num_nodes, directed=True, provenance={"source": "test"},
                               time_dtype=np.float64) as writer:
        writer.append_events(src, dst, t)
        writer.close()
    edgebank = EdgeBank(bank, time_window=40.0 if bank == "time-window" else None)
    edgebank.index(path, block=block)
    for strategy in ("random", "historical"):
        evaluation = link_prediction_set(path, strategy, 5)
        for split in ("val", "test"):
            negatives = evaluation.get(split, "negatives")
            present = negatives >= 0
            when = np.broadcast_to(evaluation.get(split, "t")[:, None], negatives.shape)[present]
            queries = (np.r_[evaluation.get(split, "src"), evaluation.get(split, "negative_src")[present]],
                       np.r_[evaluation.get(split, "dst"), negatives[present]],
                       np.r_[evaluation.get(split, "t"), when])
            np.testing.assert_array_equal(edgebank.score(*queries),
                                          _brute_force_edgebank(src, dst, t, queries, edgebank.window))
    with pytest.raises(ValueError, match="earliest_query"):
        edgebank.score(src[:1], dst[:1], t[:1])
