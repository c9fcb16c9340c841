"""The temporal neighbour sampler: only events strictly before the query time, the right ones."""
from __future__ import annotations

import numpy as np
import pytest

from dgbench.trainers.continuous.sampler import TemporalSampler


@pytest.fixture(scope="module")
def stream():
    rng = np.random.default_rng(7)
    events = 3000
    src = rng.integers(0, 40, events)
    dst = rng.integers(0, 40, events)
    t = np.sort(rng.integers(0, 800, events)).astype(np.float64)  # many ties on purpose
    return src, dst, t


def _history(src, dst, t, vertex, time):
    """Brute force: (neighbour, event, time) of every event of ``vertex`` strictly before ``time``."""
    rows = []
    for e in range(len(src)):
        if t[e] >= time:
            continue
        if src[e] == vertex:
            rows.append((dst[e], e, t[e]))
        if dst[e] == vertex:
            rows.append((src[e], e, t[e]))
    return rows


@pytest.mark.parametrize("strategy", ["recent", "uniform"])
def test_never_returns_an_event_at_or_after_the_query_time(stream, strategy):
    src, dst, t = stream
    sampler = TemporalSampler(src, dst, t, 40)
    rng = np.random.default_rng(1)
    nodes = rng.integers(0, 40, 2000)
    times = rng.choice(t, 2000) + rng.choice([0.0, 0.5], 2000)  # exact event times and between them
    out = sampler.sample(nodes, times, 8, strategy, rng.random((2000, 8)))
    assert out.mask.any()
    assert np.all(out.times[out.mask] < np.broadcast_to(times[:, None], out.mask.shape)[out.mask])
    assert np.all(t[out.events[out.mask]] < np.broadcast_to(times[:, None], out.mask.shape)[out.mask])
    # every returned event really involves the query vertex and the returned neighbour
    e = out.events[out.mask]
    q = np.broadcast_to(nodes[:, None], out.mask.shape)[out.mask]
    n = out.nodes[out.mask]
    assert np.all(((src[e] == q) & (dst[e] == n)) | ((dst[e] == q) & (src[e] == n)))


def test_recent_returns_the_k_latest_events(stream):
    src, dst, t = stream
    sampler = TemporalSampler(src, dst, t, 40)
    rng = np.random.default_rng(2)
    for vertex, time in zip(rng.integers(0, 40, 40), rng.choice(t, 40)):
        history = _history(src, dst, t, vertex, time)
        out = sampler.sample(np.array([vertex]), np.array([time]), 5, "recent")
        got = sorted(out.events[0][out.mask[0]].tolist())
        expected_times = sorted(h[2] for h in history)[-5:]
        assert len(got) == min(5, len(history))
        # ties in time may be broken either way; the times returned must be the 5 latest
        assert sorted(t[got].tolist()) == expected_times


def test_uniform_draws_cover_the_whole_history(stream):
    src, dst, t = stream
    sampler = TemporalSampler(src, dst, t, 40)
    vertex, time = int(src[1500]), float(t[1500])
    history = {h[1] for h in _history(src, dst, t, vertex, time)}
    uniforms = np.random.default_rng(3).random((1, 4000))
    out = sampler.sample(np.array([vertex]), np.array([time]), 4000, "uniform", uniforms)
    drawn = set(out.events[0][out.mask[0]].tolist())
    assert drawn <= history and len(drawn) > 0.9 * len(history)


def test_vertex_without_history_gets_only_padding(stream):
    src, dst, t = stream
    sampler = TemporalSampler(src, dst, t, 41)  # vertex 40 never interacts
    out = sampler.sample(np.array([40, int(src[0])]), np.array([1e9, t[0]]), 3)
    assert not out.mask.any()  # vertex 40: no events; src[0] at the first time: nothing strictly before
    assert np.all(out.events == -1)
