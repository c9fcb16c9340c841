"""Plausibility guards: a file that parsed but was read wrongly is refused before a store is written.

Each guard is one cheap vectorised pass and refuses with one line naming the evidence and the
option that settles it (``--columns`` to say which column is which, ``--time-unit``, or ``--force``
to write the store anyway). Thresholds are tuned so that every real file in ../shared/data passes;
docs/loader-formats.md lists the guards.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dgbench.errors import InputError
from dgbench.loaders.events import Events, PreparedEvents, count_out_of_order

MIN_ROWS = 100  # statistical guards look at files of at least this many events
MIN_ROWS_ONE_TIME = 10  # a handful of events at one instant can be real; ten or more is no dynamic graph
UNSORTED_SHARE = 0.2  # a time column with this share of backward steps is "sorted nowhere" (random: ~0.5)
NODES_PER_ROW = 0.9  # this many distinct vertices per event: an index column was read as ids
# Unix seconds of 1900-01-01 and 2100-01-01: the calendar any dynamic graph's seconds fall in
CALENDAR_SECONDS = (-2_208_988_800, 4_102_444_800)
OVERRIDE = "pass --columns SRC,DST,TIME to say which column is which, or --force to write it anyway"


def check_events(events: Events, force: bool, columns_given: bool = False) -> None:
    """Guards on the parsed columns in file order (before sorting and relabelling); the swapped-column
    guard is skipped when the columns were named (``--columns``)."""
    if force or events.num_rows == 0:
        return
    t, path = events.t, events.source_file
    check_time_range(path, t.min().item(), t.max().item(), events.num_rows, events.time_unit)
    if events.num_rows >= MIN_ROWS and not columns_given:
        _check_swapped_time(events, path)


def check_time_range(path: Path, low: float, high: float, rows: int, time_unit: str) -> None:
    """Refuse a time column with one value throughout, or (seconds) outside the calendar 1900-2100."""
    if low == high and rows >= MIN_ROWS_ONE_TIME:
        _refuse(path, f"every one of the {rows:,} events is at time {low}: the time column is "
                      f"probably not the time; {OVERRIDE}")
    if time_unit == "s" and (low < CALENDAR_SECONDS[0] or high > CALENDAR_SECONDS[1]):
        _refuse(path, f"times run from {low} to {high}, outside 1900-2100 as seconds: milliseconds or another "
                      f"unit? pass --time-unit ms|us|ns, --columns SRC,DST,TIME, or --force")


def _check_swapped_time(events: Events, path: Path) -> None:
    backward = count_out_of_order(events.t)
    if backward < UNSORTED_SHARE * events.num_rows:
        return
    for name in ("src", "dst", "weight"):
        values = getattr(events, name)
        if values is not None and values[0] != values[-1] and count_out_of_order(values) == 0:
            _refuse(path, f"the time column steps backwards on {backward:,} of {events.num_rows:,} rows while "
                          f"column {name} is sorted: time and {name} look swapped; {OVERRIDE}")


def check_prepared(prepared: PreparedEvents, force: bool) -> None:
    """Guards on the relabelled events: a vertex per event means an index column was read as ids."""
    if not force:
        check_vertex_count(prepared.source.source_file, prepared.num_nodes, prepared.rows)


def check_vertex_count(path: Path, num_nodes: int, rows: int) -> None:
    """Refuse (from MIN_ROWS events on) about as many distinct vertices as events."""
    if rows >= MIN_ROWS and num_nodes >= NODES_PER_ROW * rows:
        _refuse(path, f"{num_nodes:,} distinct vertices in {rows:,} events: a row-index column "
                      f"read as vertex ids? {OVERRIDE}")


def binary_labels(values: np.ndarray, path: Path, column: str, force: bool,
                  override: str = "pass --force to write it anyway") -> np.ndarray:
    """Event labels declared 0/1 (JODIE/TGN state labels) as int8; other values refused unless ``force``."""
    if len(values) and not force and not np.isin(values, (0, 1)).all():
        bad = values[~np.isin(values, (0, 1))]
        _refuse(path, f"column {column} holds {len(bad):,} values outside 0/1 (e.g. {bad[0]:g}): not a label "
                      f"column? {override}")
    fractional = values != np.round(values)
    if fractional.any():
        raise InputError(path, f"column {column} holds fractional labels (e.g. {values[fractional][0]})")
    if len(values) and (values.min() < -128 or values.max() > 127):
        raise InputError(path, f"column {column} holds labels beyond -128..127")
    return values.astype(np.int8)


def _refuse(path: Path, evidence: str) -> None:
    raise InputError(path, f"refused, looks misread: {evidence}")
