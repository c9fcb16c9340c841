"""Which vertex instances exist (DGC §2.1's V_t), the discrete protocol's ``--presence`` option.

Stores carry no vertex-presence flags, so with ``--presence edges`` V_t is the set of vertices with an
edge (either end, to another vertex) in the input the model aggregates at step t (snapshot t, or its
smoothing when the run smooths): a vertex's sequence is its present steps, a time encoder skips the
others (the carry passes through unchanged, DGC §5.1.2's masks), and a pair is scored with its
vertices' latest present instance at or before the step (the time encoder's output repeats it; zeros
before the first). ``--presence all`` (the default) is the all-vertex layout every scheme used before:
every vertex exists in every snapshot. Every scheme runs the same semantics, so ``single`` stays the
reference.
"""
from __future__ import annotations

import numpy as np

from dgbench.errors import DgbenchError

PRESENCE_CHOICES = ("all", "edges")


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


def presence_mask(data, presence: str) -> np.ndarray | None:
    """[input steps, N] bool: vertex v has an edge in step t's input (None for ``all``)."""
    if presence not in PRESENCE_CHOICES:
        raise DgbenchError(f"--presence {presence}: choose one of {', '.join(PRESENCE_CHOICES)}")
    if presence == "all":
        return None
    mask = np.zeros((data.num_steps, data.num_nodes), dtype=bool)
    for t, (src, dst) in enumerate(input_edges(data)):
        mask[t, src] = True
        mask[t, dst] = True
    return mask


def apply_presence(data, presence: str) -> None:
    """Set ``data.presence`` and ``data.present`` (the mask, or None) for the placements to read."""
    data.presence = presence
    data.present = presence_mask(data, presence)
