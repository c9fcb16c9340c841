"""The stream prepare's count of repeated events (loaders/stores.py): one sort of a packed key, exactly the
count of events that repeat an earlier (src, dst, t), on sorted and unsorted streams alike."""
from __future__ import annotations

import numpy as np
import pytest

from dgbench.loaders.stores import RepeatCounter, count_repeated_events


def brute_force(src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> int:
    return len(t) - len(set(zip(src.tolist(), dst.tolist(), t.tolist())))


@pytest.mark.parametrize("time_sorted", [True, False])
@pytest.mark.parametrize("nodes", [7, 3_000_000_000])  # the second packs past int64: the lexsort path
def test_repeated_events_are_counted_exactly(time_sorted, nodes):
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, min(nodes, 7), 4000), rng.integers(0, min(nodes, 7), 4000)
    t = rng.integers(0, 50, 4000).astype(np.float64)
    if time_sorted:
        t = np.sort(t)
    expected = brute_force(src, dst, t)
    assert expected > 0
    assert count_repeated_events(src, dst, t, nodes) == expected


def test_a_stream_without_repeats_counts_none():
    t = np.array([0.0, 0.0, 1.0, 1.0])
    assert count_repeated_events(np.array([0, 1, 0, 0]), np.array([1, 0, 1, 2]), t, 3) == 0
    assert count_repeated_events(np.array([0]), np.array([1]), np.array([0.0]), 3) == 0


@pytest.mark.parametrize("block", [1, 13, 500, 4000])
def test_counted_block_by_block_the_count_is_the_same(block):
    """The bounded-memory prepare feeds the stream in blocks; a time run may span several blocks."""
    rng = np.random.default_rng(2)
    src, dst = rng.integers(0, 5, 4000), rng.integers(0, 5, 4000)
    t = np.sort(rng.integers(0, 30, 4000))  # runs of ~130 events: most span block boundaries
    counter = RepeatCounter(5)
    for a in range(0, len(t), block):
        counter.add(src[a:a + block], dst[a:a + block], t[a:a + block])
    assert counter.repeated == brute_force(src, dst, t) > 0


@pytest.mark.parametrize("distinct_share", [0.0, 0.5, 0.99])
def test_events_alone_at_their_time_are_never_counted(distinct_share):
    """Only events sharing a time are compared: streams of mostly distinct times still count exactly."""
    rng = np.random.default_rng(3)
    t = np.sort(np.where(rng.random(5000) < distinct_share, rng.random(5000) * 1e6, rng.integers(0, 40, 5000)))
    src, dst = rng.integers(0, 4, 5000), rng.integers(0, 4, 5000)
    assert count_repeated_events(src, dst, t, 4) == brute_force(src, dst, t)
