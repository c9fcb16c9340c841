"""Timestamped edge lists: Network Repository ``.edges``, KONECT ``out.*`` and SNAP temporal ``.txt``.

These families only differ in what they declare: delimiter, comment character, and which of
``u v t`` / ``u v w t`` layouts they use (chosen from the first data row). Parsing, relabelling
and time ordering are the shared core's (loaders.parsing, loaders.events).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dgbench.errors import InputError
from loaders.events import Events, RawFile
from loaders.formats import LoadOptions, register_format
from loaders.parsing import FLOAT, ID, WHITESPACE, Column, TableSpec, read_table, sniff

SRC, DST = Column("src", ID, nonnegative=True), Column("dst", ID, nonnegative=True)
TIME = Column("t", FLOAT, finite=True, whole_numbers=True)
WEIGHT = Column("weight", FLOAT, numpy_dtype="float32")
LAYOUTS = {3: (SRC, DST, TIME), 4: (SRC, DST, WEIGHT, TIME)}


def read_edge_list(path: Path, spec: TableSpec, options: LoadOptions, *, directed: bool,
                   bipartite: bool, details: dict) -> Events:
    """Parse ``path`` with ``spec`` (columns src, dst, t and optionally weight) into Events."""
    table = read_table(path, spec, drop_partial_last_line=options.drop_partial_last_line)
    cols = table.columns
    weight = cols.get("weight")
    return Events(src=cols["src"], dst=cols["dst"], t=cols["t"], source_file=path, time_unit="s",
                  weight=None if weight is None else weight.astype(np.float32, copy=False), directed=directed,
                  bipartite=bipartite, raw_files=[RawFile(path.name, table.sha256, table.size_bytes)],
                  rows_dropped=table.rows_dropped, details={**details, "layout": spec.names})


def _layout(path: Path, fields: list[str], family: str, accepted: tuple[int, ...]) -> tuple[Column, ...]:
    if len(fields) not in accepted:
        shapes = " or ".join(" ".join(c.name for c in LAYOUTS[n]) for n in accepted)
        raise InputError(path, f"first data row has {len(fields)} fields; a timestamped {family} file has "
                               f"{shapes} (a file without a time column is not a dynamic graph)")
    return LAYOUTS[len(fields)]


@register_format("network-repository", summary="Network Repository .edges (u v [w] t; comma or whitespace)",
                 natural="snapshots", patterns=("*.edges", "*.txt", "*.csv", "*.tsv"))
def load_network_repository(path: Path, options: LoadOptions) -> Events:
    comments = b"%#"
    _, fields = sniff(path, WHITESPACE, comments)
    delimiter = "," if len(fields) == 1 and "," in fields[0] else WHITESPACE
    if delimiter == ",":
        _, fields = sniff(path, ",", comments)
    columns = _layout(path, fields, "Network Repository", (3, 4))
    spec = TableSpec(columns, delimiter=delimiter, comments=comments)
    return read_edge_list(path, spec, options, directed=True, bipartite=bool(options.bipartite),
                          details={"delimiter": "comma" if delimiter == "," else "whitespace"})


@register_format("konect", summary="KONECT out.* TSV (% header; u v w t, space/tab separated)",
                 natural="snapshots", patterns=("out.*",))
def load_konect(path: Path, options: LoadOptions) -> Events:
    kind = _konect_kind(path)
    _, fields = sniff(path, WHITESPACE, b"%")
    columns = _layout(path, fields, "KONECT", (4,))
    spec = TableSpec(columns, delimiter=WHITESPACE, comments=b"%")
    bipartite = kind == "bip" if options.bipartite is None else options.bipartite
    return read_edge_list(path, spec, options, directed=kind != "sym", bipartite=bipartite,
                          details={"konect_kind": kind})


def _konect_kind(path: Path) -> str:
    """KONECT's first line, ``% sym|asym|bip <weights>``: undirected, directed or two-mode."""
    with open(path, "rb") as handle:
        first = handle.readline().decode("utf-8", errors="replace").split()
    return first[1] if len(first) > 1 and first[0] == "%" and first[1] in ("sym", "asym", "bip") else "asym"


@register_format("snap", summary="SNAP temporal edge list (SRC DST UNIXTS; # comments)",
                 natural="snapshots", patterns=("*.txt", "*.tsv", "*.csv"))
def load_snap(path: Path, options: LoadOptions) -> Events:
    _, fields = sniff(path, WHITESPACE, b"#")
    columns = _layout(path, fields, "SNAP temporal", (3,))
    spec = TableSpec(columns, delimiter=WHITESPACE, comments=b"#")
    return read_edge_list(path, spec, options, directed=True, bipartite=bool(options.bipartite), details={})
