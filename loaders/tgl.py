"""TGL dataset folders (Zhou et al., VLDB 2022): ``edges.csv`` + optional ``edge_features.pt``/``node_features.pt``.

``edges.csv`` is written by pandas with a leading unnamed edge-id column: ``,src,dst,time,int_roll,ext_roll``;
columns are found by their header names. ``ext_roll`` (0 train, 1 val, 2 test) becomes the stored
chronological split. Feature tensors are read with ``torch.load(weights_only=True)`` (never full
pickle) and memory-mapped, so GDELT's 191M x 182 edge features are streamed, not loaded whole.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from dgbench.errors import InputError
from dgbench.loaders.download import file_sha256
from dgbench.loaders.events import Events, RawFile
from dgbench.loaders.formats import LoadOptions, register_format
from dgbench.loaders.tgn import is_tgn_header
from dgbench.loaders.parsing import (FLOAT, ID, INT, Column, TableBlocks, TableSpec, columns_by_role, describe_fields,
                                    is_number, read_table, sniff, sniff_separator, split_fields, text_encoding)
from dgbench.loaders.streamed import STREAM_SOURCES, StreamSource, raw_file

ROLES = {"src": (("src",), Column("src", ID, nonnegative=True)),
         "dst": (("dst",), Column("dst", ID, nonnegative=True)),
         "t": (("time", "ts", "t"), Column("t", FLOAT, finite=True)),
         "ext_roll": (("ext_roll",), Column("ext_roll", INT))}
# GDELT 1.0 daily event exports: 57 tab-separated fields, 58 from April 2013 on (SOURCEURL added)
GDELT_EXPORT_FIELDS = (57, 58)
TGL_LAYOUT = "edges.csv with the header ',src,dst,time,int_roll,ext_roll', edge_features.pt, node_features.pt"
EDGE_FEATURE_FILES = ("edge_features.pt", "edge_features_e0.pt")
NODE_FEATURE_FILES = ("node_features.pt",)


def load_tensor(path: Path) -> Any:
    """A 2-D tensor from a .pt file: weights-only unpickling, memory-mapped when the file allows it."""
    import torch  # imported here: only TGL folders with features need it, and it is slow to import

    try:
        try:
            value = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # legacy (non-zip) serialisation cannot be memory-mapped
            value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is bad input, reported in one line
        raise InputError(path, f"not a weights-only torch tensor file ({str(exc).splitlines()[0][:160]})") from exc
    if not isinstance(value, torch.Tensor) or value.dim() != 2:
        raise InputError(path, f"expected a 2-D tensor, found {type(value).__name__}"
                               f"{'' if not isinstance(value, torch.Tensor) else f' of shape {tuple(value.shape)}'}")
    return value


def _first_existing(folder: Path, names: tuple[str, ...]) -> Path | None:
    return next((folder / n for n in names if (folder / n).is_file()), None)


def edges_spec(path: Path) -> tuple[Path, TableSpec]:
    """The folder's ``edges.csv`` and how to parse it (columns found by their header names)."""
    edges = path / "edges.csv" if path.is_dir() else path
    if not edges.is_file():
        raise InputError(edges, "no edges.csv in the TGL folder")
    header, _ = sniff(edges, ",", header=True)
    refuse_other_layouts(edges, header)
    return edges, TableSpec(columns_by_role(edges, header, ROLES, ("src", "dst", "t")), delimiter=",", header=True)


@register_format("tgl", summary="TGL folder: edges.csv (,src,dst,time,int_roll,ext_roll) + .pt features",
                 natural="stream", patterns=("edges.csv",), folder_input=True)
def load_tgl(path: Path, options: LoadOptions) -> Events:
    edges, spec = edges_spec(path)
    folder = edges.parent
    table = read_table(edges, spec, drop_partial_last_line=options.drop_partial_last_line)
    cols = table.columns
    raw_files = [RawFile(edges.name, table.sha256, table.size_bytes)]
    edge_features = _feature_tensor(folder, EDGE_FEATURE_FILES, table.rows, "edge", raw_files)
    node_features = _feature_tensor(folder, NODE_FEATURE_FILES, None, "node", raw_files)
    nodes = None
    if node_features is not None:
        nodes = np.arange(node_features.shape[0], dtype=np.int64)  # TGL node ids index node_features rows
    ext_roll = cols.get("ext_roll")
    return Events(src=cols["src"], dst=cols["dst"], t=cols["t"], source_file=edges, time_unit="s",
                  edge_features=edge_features, ext_roll=None if ext_roll is None else ext_roll.astype(np.int8),
                  bipartite=bool(options.bipartite), nodes=nodes,
                  node_features=None if node_features is None else node_features.float().numpy(),
                  raw_files=raw_files, rows_dropped=table.rows_dropped,
                  details={"header": table.header,
                           "edge_feature_dim": 0 if edge_features is None else int(edge_features.shape[1]),
                           "node_feature_dim": 0 if node_features is None else int(node_features.shape[1])})


def stream_tgl(path: Path, options: LoadOptions) -> StreamSource | None:
    """The TGL folder for the bounded-memory stream prepare (loaders/streamed.py); None for files that
    need the in-memory path (not UTF-8). Yields the same Events metadata as :func:`load_tgl`."""
    edges, spec = edges_spec(path)
    folder = edges.parent
    if not text_encoding(edges).is_utf8:
        return None
    blocks = TableBlocks(edges, spec, drop_partial_last_line=options.drop_partial_last_line)
    node_file = _first_existing(folder, NODE_FEATURE_FILES)
    nodes = None if node_file is None else np.arange(load_tensor(node_file).shape[0], dtype=np.int64)

    def finish(rows: int) -> Events:
        raw_files = [raw_file(blocks)]
        edge_features = _feature_tensor(folder, EDGE_FEATURE_FILES, rows, "edge", raw_files)
        node_features = _feature_tensor(folder, NODE_FEATURE_FILES, None, "node", raw_files)
        none = np.empty(0, dtype=np.int64)  # the columns stay in the spill files
        return Events(src=none, dst=none, t=none, source_file=edges, time_unit="s", edge_features=edge_features,
                      bipartite=bool(options.bipartite), nodes=nodes,
                      node_features=None if node_features is None else node_features.float().numpy(),
                      raw_files=raw_files, rows_dropped=blocks.rows_dropped,
                      details={"header": blocks.header,
                               "edge_feature_dim": 0 if edge_features is None else int(edge_features.shape[1]),
                               "node_feature_dim": 0 if node_features is None else int(node_features.shape[1])})

    roles = {c.name: c.name for c in spec.converted}
    return StreamSource(blocks, roles, finish, nodes=nodes, bipartite=bool(options.bipartite))


STREAM_SOURCES["tgl"] = stream_tgl


def refuse_other_layouts(edges: Path, header: list[str]) -> None:
    """One line naming what the file is when its first line is data, not TGL's header (a raw GDELT export)."""
    line = ",".join(header)
    if is_tgn_header(header):
        raise InputError(edges, f"header {line!r} is TGN/DyGLib's processed layout, not TGL's: read it with "
                                f"--format tgn", line=1)
    if not any(is_number(field) for field in split_fields(line, sniff_separator([line]))):
        return
    fields = line.split("\t")
    if len(fields) in GDELT_EXPORT_FIELDS and fields[0].isdigit() and re.fullmatch(r"\d{8}", fields[1]):
        raise InputError(edges, f"a raw GDELT 1.0 events export (tab-separated, {len(fields)} fields, no header), "
                                f"not TGL's GDELT: prepare gdelt reads TGL's processed folder ({TGL_LAYOUT})", line=1)
    raise InputError(edges, f"the first line is a data row ({describe_fields(line)}), not TGL's header: "
                            f"TGL's folder holds {TGL_LAYOUT}", line=1)


def _feature_tensor(folder: Path, names: tuple[str, ...], rows: int | None, what: str,
                    raw_files: list[RawFile]) -> Any:
    path = _first_existing(folder, names)
    if path is None:
        return None
    tensor = load_tensor(path)
    if rows is not None and tensor.shape[0] != rows:
        raise InputError(path, f"{tensor.shape[0]:,} {what} feature rows for {rows:,} edges in edges.csv")
    raw_files.append(RawFile(path.name, file_sha256(path), path.stat().st_size, role=f"{what}_features"))
    return tensor
