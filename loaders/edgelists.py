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
* encoding: UTF-8/ASCII, or UTF-16/UTF-32 (decoded; loaders.parsing).

Parsing, relabelling and time ordering are the shared core's (loaders.parsing, loaders.events).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dgbench.errors import InputError
from loaders.events import Events, RawFile
from loaders.formats import LoadOptions, register_format
from loaders.parsing import (FLOAT, ID, SEPARATOR_NAMES, Column, TableSpec, clip, columns_by_role, data_lines,
                             first_text_line, is_number, read_table, sniff_separator, split_fields)

SRC, DST = Column("src", ID, nonnegative=True), Column("dst", ID, nonnegative=True)
TIME = Column("t", FLOAT, finite=True, whole_numbers=True)
WEIGHT = Column("weight", FLOAT, numpy_dtype="float32")
LAYOUTS = {3: (SRC, DST, TIME), 4: (SRC, DST, WEIGHT, TIME)}
# Header names of each column across published edge lists (lower case).
HEADER_ROLES = {
    "src": (("src", "source", "from", "u", "source_id", "sourceid", "from_id", "fromnodeid", "node1", "srcid",
             "sender", "user", "user_id"), SRC),
    "dst": (("dst", "target", "to", "v", "target_id", "targetid", "to_id", "tonodeid", "node2", "dstid", "tgt",
             "receiver", "item", "item_id"), DST),
    "weight": (("weight", "w", "rating", "sign", "value", "amount"), WEIGHT),
    "t": (("t", "time", "timestamp", "ts", "unixts", "unix_time", "epoch"), TIME),
}


def read_edge_list(path: Path, spec: TableSpec, options: LoadOptions, *, directed: bool,
                   bipartite: bool, details: dict) -> Events:
    """Parse ``path`` with ``spec`` (columns src, dst, t and optionally weight) into Events."""
    table = read_table(path, spec, drop_partial_last_line=options.drop_partial_last_line)
    cols = table.columns
    weight = cols.get("weight")
    if table.encoding != "UTF-8":
        details = {**details, "encoding": table.encoding}
    return Events(src=cols["src"], dst=cols["dst"], t=cols["t"], source_file=path, time_unit="s",
                  weight=None if weight is None else weight.astype(np.float32, copy=False), directed=directed,
                  bipartite=bipartite, raw_files=[RawFile(path.name, table.sha256, table.size_bytes)],
                  rows_dropped=table.rows_dropped, details={**details, "layout": spec.names})


def edge_list_spec(path: Path, family: str, comments: bytes, accepted: tuple[int, ...]) -> tuple[TableSpec, dict]:
    """The spec of an edge-list file (separator, header, columns) and what was sniffed, for provenance."""
    lines = data_lines(path, comments)
    if not lines:
        raise InputError(path, "no data rows (the file is empty or holds only comments/header)")
    separator = sniff_separator(lines)
    first = split_fields(lines[0], separator)
    header = len(lines) > 1 and not any(is_number(field) for field in first)
    details = {"delimiter": SEPARATOR_NAMES[separator], "header": lines[0] if header else None}
    if header:
        columns = _header_columns(path, first, split_fields(lines[1], separator), family, accepted)
    else:
        columns = _layout(path, first, family, accepted)
    spec = TableSpec(columns, delimiter=separator, header=header, comments=comments, strip_spaces=True)
    return spec, details


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
                               f"{shapes} (a file without a time column is not a dynamic graph){note}")
    return LAYOUTS[len(fields)]


@register_format("network-repository", summary="Network Repository .edges (u v [w] t; any separator)",
                 natural="snapshots", patterns=("*.edges", "*.txt", "*.csv", "*.tsv"))
def load_network_repository(path: Path, options: LoadOptions) -> Events:
    spec, details = edge_list_spec(path, "Network Repository", b"%#", (3, 4))
    return read_edge_list(path, spec, options, directed=True, bipartite=bool(options.bipartite), details=details)


@register_format("konect", summary="KONECT out.* (% header; u v w t, space/tab separated)",
                 natural="snapshots", patterns=("out.*",))
def load_konect(path: Path, options: LoadOptions) -> Events:
    kind = _konect_kind(path)
    spec, details = edge_list_spec(path, "KONECT", b"%", (4,))
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
    spec, details = edge_list_spec(path, "SNAP temporal", b"#", (3, 4))
    return read_edge_list(path, spec, options, directed=True, bipartite=bool(options.bipartite), details=details)
