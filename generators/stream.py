"""`stream`: a continuous-time interaction stream for memory-based TGNNs.

Sources act with power-law (Zipf) activity; with probability ``repeat`` a source re-interacts with a
partner it has met before (as in JODIE's Wikipedia/LastFM), otherwise with a power-law popular
destination. Inter-event gaps are exponential. Optional edge features (a noisy function of the pair,
so they carry signal) and rare positive labels. Bipartite streams shift item ids after the users.
"""
from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from dgbench.progress import progress
from dgbench.registry import register_preparer
from dgbench.store import EdgeStreamStoreWriter, id_dtype
from dgbench.generators.common import generator_provenance

OPTIONS = [
    click.Option(["--users"], type=click.IntRange(1), default=1000, show_default=True,
                 help="Source vertices (users when bipartite)."),
    click.Option(["--items"], type=click.IntRange(0), default=1000, show_default=True,
                 help="Destination vertices when bipartite; 0 = not bipartite (sources and destinations share ids)."),
    click.Option(["--events", "-E"], type=click.IntRange(1), default=20000, show_default=True),
    click.Option(["--zipf"], type=click.FloatRange(min=0), default=1.1, show_default=True,
                 help="Power-law exponent of activity and popularity (0 = uniform)."),
    click.Option(["--repeat"], type=click.FloatRange(0, 1), default=0.6, show_default=True,
                 help="Probability that an event repeats an earlier partner of its source."),
    click.Option(["--edge-dim"], type=click.IntRange(0), default=0, show_default=True,
                 help="Edge feature dimension (0 = none)."),
    click.Option(["--label-rate"], type=click.FloatRange(0, 1), default=0.0, show_default=True,
                 help="Fraction of events labelled positive (0 = no labels)."),
    click.Option(["--seed"], type=int, default=0, show_default=True),
]
BLOCK = 1 << 16


def zipf_weights(count: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    weights = np.arange(1, count + 1, dtype=np.float64) ** (-exponent)
    return rng.permutation(weights / weights.sum())


def cumulative(weights: np.ndarray) -> np.ndarray:
    """The normalised cumulative weights ``rng.choice(len(weights), p=weights)`` builds on every call."""
    cdf = weights.cumsum()
    cdf /= cdf[-1]
    return cdf


def weighted_picks(cdf: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``rng.choice(len(cdf), size=count, p=weights)`` with its cumulative weights computed once: the same
    draws (one uniform each, searched in the same cdf) without re-checking and re-summing every weight on
    every block, which made a stream's cost grow with blocks x vertices."""
    return cdf.searchsorted(rng.random(count), side="right")


def draw_partners(src: np.ndarray, dst_weights: np.ndarray, repeat: float, last_partner: np.ndarray,
                  rng: np.random.Generator, dst_cdf: np.ndarray | None = None) -> np.ndarray:
    """Destinations for a block of sources: repeat the last partner or pick by popularity.

    Event by event: a source that has a partner draws one uniform number and, below ``repeat``, repeats its
    last partner; otherwise it takes its fresh pick. Computed vectorised with the same draws in the same
    order (the fresh picks, then one uniform per event whose source has a partner), so the stream is the
    one the event-by-event loop gave (tests/test_generators.py)."""
    fresh = weighted_picks(cumulative(dst_weights) if dst_cdf is None else dst_cdf, len(src), rng)
    order = np.argsort(src, kind="stable")  # each source's events together, in time order
    by_src = src[order]
    first = np.ones(len(src), dtype=bool)
    first[1:] = by_src[1:] != by_src[:-1]
    carried = last_partner[by_src]
    has_partner = ~first | (carried >= 0)
    draws = np.zeros(len(src))
    has_partner_in_time = np.zeros(len(src), dtype=bool)
    has_partner_in_time[order] = has_partner
    draws[has_partner_in_time] = rng.random(int(has_partner_in_time.sum()))
    repeats = (has_partner_in_time & (draws < repeat))[order]
    position = np.arange(len(src))
    group_start = np.maximum.accumulate(np.where(first, position, 0))
    last_fresh = np.maximum.accumulate(np.where(repeats, -1, position))  # latest own pick so far
    from_block = last_fresh >= group_start
    dst_sorted = np.where(from_block, fresh[order][np.maximum(last_fresh, 0)], carried)
    dst = np.empty(len(src), dtype=np.int64)
    dst[order] = dst_sorted
    last = np.ones(len(src), dtype=bool)
    last[:-1] = first[1:]
    last_partner[by_src[last]] = dst_sorted[last]
    return dst


@register_preparer("stream", kind="generator", produces="stream", options=OPTIONS,
                   summary="Continuous-time interaction stream (power-law activity, repeats)")
def build(out: Path, overwrite: bool = False, users: int = 1000, items: int = 1000, events: int = 20000,
          zipf: float = 1.1, repeat: float = 0.6, edge_dim: int = 0, label_rate: float = 0.0,
          seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    bipartite = items > 0
    num_nodes = users + items if bipartite else users
    src_weights = zipf_weights(users, zipf, rng)
    dst_weights = zipf_weights(items if bipartite else users, zipf, rng)
    projection = rng.normal(size=(2, edge_dim)) if edge_dim else None
    last_partner = np.full(users, -1, dtype=np.int64)
    src_cdf, dst_cdf = cumulative(src_weights), cumulative(dst_weights)
    provenance = generator_provenance("stream", users=users, items=items, events=events, zipf=zipf,
                                      repeat=repeat, edge_dim=edge_dim, label_rate=label_rate, seed=seed)
    ids = id_dtype(num_nodes)
    t0 = 0.0
    with EdgeStreamStoreWriter(out, num_nodes=num_nodes, directed=True, provenance=provenance,
                               time_dtype=np.float64, edge_feature_dim=edge_dim, overwrite=overwrite,
                               bipartite={"num_users": users, "num_items": items} if bipartite else None) as writer:
        for start in progress(range(0, events, BLOCK), desc="stream", unit="block"):
            n = min(BLOCK, events - start)
            src = weighted_picks(src_cdf, n, rng)
            dst = draw_partners(src, dst_weights, repeat, last_partner, rng, dst_cdf)
            t = t0 + np.cumsum(rng.exponential(1.0, size=n))
            t0 = float(t[-1])
            features = None
            if projection is not None:
                pair = np.stack([np.sin(src * 0.37), np.cos(dst * 0.11)], axis=1)
                features = (pair @ projection + 0.1 * rng.normal(size=(n, edge_dim))).astype(np.float32)
            labels = (rng.random(n) < label_rate).astype(np.int8) if label_rate > 0 else None
            writer.append_events(src.astype(ids), (dst + (users if bipartite else 0)).astype(ids), t,
                                 edge_features=features, label=labels)
        return writer.close()
