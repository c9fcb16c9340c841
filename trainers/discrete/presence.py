"""Which vertex instances exist (DGC §2.1's V_t), the discrete protocol's ``--presence`` option.

``--presence edges``: V_t is the set of vertices with an edge (either end, to another vertex) in the
input the model aggregates at step t (snapshot t, or its smoothing when the run smooths).
``--presence lifetime``: V_t is the set of vertices alive at t by the store's ``vertex_lifetime`` array
(first and last snapshot per vertex, written by ``dgbench prepare nonuniform --presence lifetime``:
the same V_t as the generator's option of that name, DGC §7.3.1); a store without lifetimes is refused.
The generator joins only alive vertices, so on raw inputs every edge is inside V_t; a smoothed input
carries earlier snapshots' edges, so V_t also takes the vertices those touch (choice: an instance must
exist wherever the model aggregates, as under ``edges``). Under both, a vertex's sequence is its
present steps, a time encoder skips the others (the carry passes through unchanged, DGC §5.1.2's
masks), and a pair is scored with its vertices' latest present instance at or before the step (the
time encoder's output repeats it; zeros before the first). ``--presence all`` (the default) is the
all-vertex layout every scheme used before: every vertex exists in every snapshot. Every scheme runs
the same semantics, so ``single`` stays the reference. See docs/discrete-schemes.md (DGC section).
"""
from __future__ import annotations

import numpy as np

from dgbench.errors import DgbenchError

PRESENCE_CHOICES = ("all", "edges", "lifetime")
LIFETIME_ARRAY = "vertex_lifetime"  # [N, 2] int: first and last snapshot (inclusive) of each vertex


def input_edges(data) -> list[tuple[np.ndarray, np.ndarray]]:
    """(src, dst) of every input step as the model aggregates them: Ã_t's entries (row = dst, column =
    src) without the diagonal that the normalisation adds; smoothed inputs included."""
    out = []
    for a in data.adjacency:
        rowptr, col = np.asarray(a.rowptr), np.asarray(a.col).astype(np.int64)
        dst = np.repeat(np.arange(len(rowptr) - 1, dtype=np.int64), np.diff(rowptr))
        keep = col != dst
        out.append((col[keep], dst[keep]))
    return out


def edge_presence(data) -> np.ndarray:
    """[input steps, N] bool: vertex v has an edge in step t's input."""
    mask = np.zeros((data.num_steps, data.num_nodes), dtype=bool)
    for t, (src, dst) in enumerate(input_edges(data)):
        mask[t, src] = True
        mask[t, dst] = True
    return mask


def stored_lifetimes(store) -> np.ndarray:
    """[N, 2] first and last snapshot of each vertex from the store; refused when it has none."""
    if not store.has(LIFETIME_ARRAY):
        raise DgbenchError(f"--presence lifetime: {store.path} has no {LIFETIME_ARRAY} array (make the store with "
                           f"`dgbench prepare nonuniform --presence lifetime`, or run --presence edges)")
    lifetimes = np.asarray(store.read(LIFETIME_ARRAY)).astype(np.int64)
    if lifetimes.shape != (store.num_nodes, 2):
        raise DgbenchError(f"{store.path}: {LIFETIME_ARRAY} has shape {lifetimes.shape}, "
                           f"expected ({store.num_nodes}, 2)")
    return lifetimes


def alive_mask(lifetimes: np.ndarray, steps: int) -> np.ndarray:
    """[steps, N] bool: vertex v alive at step t (first <= t <= last)."""
    first, last = lifetimes[:, 0], lifetimes[:, 1]
    t = np.arange(steps)[:, None]
    return (first[None, :] <= t) & (t <= last[None, :])


def presence_mask(data, presence: str) -> np.ndarray | None:
    """[input steps, N] bool: V_t of every input step under ``presence`` (None for ``all``)."""
    if presence not in PRESENCE_CHOICES:
        raise DgbenchError(f"--presence {presence}: choose one of {', '.join(PRESENCE_CHOICES)}")
    if presence == "all":
        return None
    if presence == "edges":
        return edge_presence(data)
    return alive_mask(stored_lifetimes(data.store), data.num_steps) | edge_presence(data)


def apply_presence(data, presence: str) -> None:
    """Set ``data.presence`` and ``data.present`` (the mask, or None) for the placements to read."""
    data.presence = presence
    data.present = presence_mask(data, presence)
