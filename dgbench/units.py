"""Numbers people read: a rate or a count with the k / M / G prefix that fits its magnitude.

Every printed throughput goes through :func:`rate` (run lines, `compare`, the board's tables), so a
stream run reads ``1.64k events/s`` and a snapshot run ``2.31M edges/s`` wherever it appears.
"""
from __future__ import annotations

PREFIXES = ((1e9, "G"), (1e6, "M"), (1e3, "k"))
FAMILY_WORK_UNITS = {"discrete": "edges", "continuous": "events"}


def work_unit(family: str) -> str:
    """What a family's epochs count as work: edges of snapshots, events of a stream."""
    return FAMILY_WORK_UNITS.get(family, "edges")


def human(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant figures and a k / M / G prefix: 1643 -> '1.64k'."""
    for factor, prefix in PREFIXES:
        if abs(value) >= factor * 0.9995:
            return f"{value / factor:.{digits}g}{prefix}"
    return f"{value:.{digits}g}"


def rate(per_second: float, family: str) -> str:
    """A throughput in its family's unit: '1.64k events/s', '2.31M edges/s', '0 edges/s'."""
    return f"{human(per_second)} {work_unit(family)}/s"
