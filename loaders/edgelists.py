"""Timestamped edge lists: Network Repository ``.edges``, KONECT ``out.*`` and SNAP temporal files.

These families differ only in their comment character and in which headerless layouts they
publish (``u v t`` / ``u v w t``, chosen from the first data row's field count). Everything else
is sniffed the same way for all three (docs/loader-formats.md lists each variant, with the public
file it was seen in):

* separator: comma, semicolon, tab or runs of spaces/tabs (SNAP publishes both ``SRC DST UNIXTS``
  text and ``SOURCE,TARGET,RATING,TIME`` CSV); spaces around a comma/semicolon/tab are dropped;
* header: a first line whose fields are all non-numeric is a header; when its names say which
  column is which (``source``/``target``/``time``/``weight`` and common spellings) the columns may
  come in any order, otherwise the header is skipped and the layout is positional;
* encoding: UTF-8/ASCII, or UTF-16/UTF-32 (decoded; dgbench.loaders.parsing).

Parsing, relabelling and time ordering are the shared core's (dgbench.loaders.parsing, dgbench.loaders.events).
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

import numpy as np

from dgbench.errors import DgbenchError, InputError
from dgbench.loaders.events import Events, RawFile
from dgbench.loaders.formats import LoadOptions, register_format
from dgbench.loaders.guards import OVERRIDE, binary_labels
from dgbench.loaders.parsing import (DATETIME, FLOAT, ID, SEPARATOR_NAMES, Column, TableSpec, clip, columns_by_role,
                                     data_lines, first_text_line, is_number, read_table, sniff_separator, split_fields)

SRC, DST = Column("src", ID, nonnegative=True), Column("dst", ID, nonnegative=True)
TIME = Column("t", FLOAT, finite=True, whole_numbers=True)
WEIGHT = Column("weight", FLOAT, numpy_dtype="float32")
LABEL = Column("label", FLOAT, finite=True)
LAYOUTS = {3: (SRC, DST, TIME), 4: (SRC, DST, WEIGHT, TIME)}
# Header names of each column across published edge lists (lower case).
HEADER_ROLES = {
    "src": (("src", "source", "from", "u", "source_id", "sourceid", "from_id", "fromnodeid", "node1", "srcid",
             "sender", "user", "user_id"), SRC),
    "dst": (("dst", "target", "to", "v", "target_id", "targetid", "to_id", "tonodeid", "node2", "dstid", "tgt",
             "receiver", "item", "item_id"), DST),
    "weight": (("weight", "w", "rating", "sign", "value", "amount"), WEIGHT),
    "t": (("t", "time", "timestamp", "ts", "unixts", "unix_time", "epoch"), TIME),
    "label": (("label", "state_label"), LABEL),
}
OPTION_ROLES = {"src": SRC, "dst": DST, "t": TIME, "weight": WEIGHT, "label": LABEL}  # --columns order


def read_edge_list(path: Path, spec: TableSpec, options: LoadOptions, *, directed: bool,
                   bipartite: bool, details: dict) -> Events:
    """Parse ``path`` with ``spec`` (columns src, dst, t and optionally weight, label) into Events."""
    table = read_table(path, spec, drop_partial_last_line=options.drop_partial_last_line)
    cols = table.columns
    weight, label = cols.get("weight"), cols.get("label")
    if table.encoding != "UTF-8":
        details = {**details, "encoding": table.encoding}
    return Events(src=cols["src"], dst=cols["dst"], t=cols["t"], source_file=path, time_unit="s",
                  weight=None if weight is None else weight.astype(np.float32, copy=False), directed=directed,
                  label=None if label is None else binary_labels(label, path, "label", options.force, OVERRIDE),
                  bipartite=bipartite, raw_files=[RawFile(path.name, table.sha256, table.size_bytes)],
                  rows_dropped=table.rows_dropped, details={**details, "layout": spec.names})


def edge_list_spec(path: Path, family: str, comments: bytes, accepted: tuple[int, ...],
                   options: LoadOptions | None = None) -> tuple[TableSpec, dict]:
    """The spec of an edge-list file (separator, header, columns) and what was sniffed, for provenance.

    ``options.columns`` (``--columns``) says which column is which; else a header naming them, else
    the family's positional layout. A time column holding date-times is read as such.
    """
    lines = data_lines(path, comments)
    if not lines:
        raise InputError(path, "no data rows (the file is empty or holds only comments/header)")
    separator = sniff_separator(lines)
    first = split_fields(lines[0], separator)
    header = len(lines) > 1 and not any(is_number(field) for field in first)
    details = {"delimiter": SEPARATOR_NAMES[separator], "header": lines[0] if header else None}
    row = split_fields(lines[1 if header else 0], separator)
    if options is not None and options.columns:
        columns = columns_from_option(path, options.columns, first if header else None, len(row))
        details["columns"] = options.columns
    elif header:
        columns = _header_columns(path, first, row, family, accepted)
    else:
        columns = _layout(path, row, family, accepted)
    columns = dated(columns, row)
    details["time_format"] = time_format(columns)
    spec = TableSpec(columns, delimiter=separator, header=header, comments=comments, strip_spaces=True)
    return spec, details


def time_format(columns: tuple[Column, ...]) -> str:
    """How the ``t`` column is written, for provenance."""
    dates = next(c for c in columns if c.name == "t").type == DATETIME
    return "ISO-8601, naive times taken as UTC" if dates else "number"


def dated(columns: tuple[Column, ...], row: list[str]) -> tuple[Column, ...]:
    """The time column (named ``t``) read as ISO-8601 date-times when the first data row holds one there."""
    position = next(i for i, c in enumerate(columns) if c.name == "t")
    text = row[position].strip().strip('"') if position < len(row) else ""
    if is_number(text) or not _looks_like_datetime(text):
        return columns
    return tuple(replace(c, type=DATETIME, whole_numbers=False) if c.name == "t" else c for c in columns)


def _looks_like_datetime(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def columns_from_option(path: Path, text: str, header: list[str] | None, width: int) -> tuple[Column, ...]:
    """``--columns SRC,DST,TIME[,WEIGHT][,LABEL]``: each a header name or a 1-based position ('-': none)."""
    picks = [p.strip() for p in text.split(",")]
    if not 3 <= len(picks) <= len(OPTION_ROLES) or "-" in picks[:3]:
        raise DgbenchError(f"--columns {text!r}: give src,dst,time[,weight][,label] as header names or "
                           f"1-based positions ('-' for no weight)")
    names = [h.strip().lower() for h in header] if header else []
    columns: list[Column] = [Column(f"_unused{i}") for i in range(width)]
    for pick, role in zip(picks, OPTION_ROLES):
        if pick == "-":
            continue
        position = _position(path, text, pick, names, width)
        if columns[position].type is not None:
            raise DgbenchError(f"--columns {text!r}: column {pick} is given twice")
        label = header[position].strip() if header else None
        columns[position] = replace(OPTION_ROLES[role], label=label)
    return tuple(columns)


def _position(path: Path, text: str, pick: str, names: list[str], width: int) -> int:
    if pick.isdigit():
        if not 1 <= int(pick) <= width:
            raise InputError(path, f"--columns {text!r}: position {pick} is not one of the file's columns 1..{width}")
        return int(pick) - 1
    if pick.lower() not in names:
        shown = ", ".join(names) if names else "none: the file has no header, give positions"
        raise InputError(path, f"--columns {text!r}: no column named {pick!r} (header names: {shown})")
    return names.index(pick.lower())


def _header_columns(path: Path, header: list[str], row: list[str], family: str,
                    accepted: tuple[int, ...]) -> tuple[Column, ...]:
    """Columns named by the header when it names source, target and time; else positional."""
    names = {name.strip().lower() for name in header}
    if all(names & set(HEADER_ROLES[role][0]) for role in ("src", "dst", "t")):
        return columns_by_role(path, header, HEADER_ROLES, ("src", "dst", "t"))
    return _layout(path, row, family, accepted, note=f" (header {clip(','.join(header))!r} names no "
                                                          f"source/target/time columns, so columns are positional)")


def _layout(path: Path, fields: list[str], family: str, accepted: tuple[int, ...],
            note: str = "") -> tuple[Column, ...]:
    if len(fields) not in accepted:
        shapes = " or ".join(" ".join(c.name for c in LAYOUTS[n]) for n in accepted)
        raise InputError(path, f"first data row has {len(fields)} fields; a timestamped {family} file has "
                               f"{shapes} (a file without a time column is not a dynamic graph; "
                               f"--columns SRC,DST,TIME says which columns to read){note}")
    return LAYOUTS[len(fields)]


@register_format("network-repository", summary="Network Repository .edges (u v [w] t; any separator)",
                 natural="snapshots", patterns=("*.edges", "*.txt", "*.csv", "*.tsv"))
def load_network_repository(path: Path, options: LoadOptions) -> Events:
    spec, details = edge_list_spec(path, "Network Repository", b"%#", (3, 4), options)
    return read_edge_list(path, spec, options, directed=True, bipartite=bool(options.bipartite), details=details)


@register_format("konect", summary="KONECT out.* (% header; u v w t, space/tab separated)",
                 natural="snapshots", patterns=("out.*",))
def load_konect(path: Path, options: LoadOptions) -> Events:
    kind = _konect_kind(path)
    spec, details = edge_list_spec(path, "KONECT", b"%", (4,), options)
    bipartite = kind == "bip" if options.bipartite is None else options.bipartite
    return read_edge_list(path, spec, options, directed=kind != "sym", bipartite=bipartite,
                          details={**details, "konect_kind": kind})


def _konect_kind(path: Path) -> str:
    """KONECT's first line, ``% sym|asym|bip <weights>``: undirected, directed or two-mode."""
    first = first_text_line(path).split()
    return first[1] if len(first) > 1 and first[0] == "%" and first[1] in ("sym", "asym", "bip") else "asym"


@register_format("snap", summary="SNAP temporal edge list (SRC DST [WEIGHT] TIME; text or CSV; # comments)",
                 natural="snapshots", patterns=("*.txt", "*.tsv", "*.csv"))
def load_snap(path: Path, options: LoadOptions) -> Events:
    spec, details = edge_list_spec(path, "SNAP temporal", b"#", (3, 4), options)
    return read_edge_list(path, spec, options, directed=True, bipartite=bool(options.bipartite), details=details)
