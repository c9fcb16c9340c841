"""TGN/DyGLib processed data sets: ``ml_<name>.csv`` + ``ml_<name>.npy`` + ``ml_<name>_node.npy``.

The layout TGN's ``utils/preprocess_data.py`` (and DyGLib's ``preprocess_data/preprocess_data.py``)
writes with pandas: a leading unnamed index column, ``,u,i,ts,label,idx``, float ``ts`` and
``label``, ids starting at 1 (0 is padding) with items shifted after users; edge features hold a
zero padding row 0 and row ``idx`` for each event; node features are indexed by node id. Variants
and the folder/archive forms are listed in docs/loader-formats.md.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dgbench.errors import InputError
from dgbench.loaders.download import file_sha256
from dgbench.loaders.events import Events, RawFile
from dgbench.loaders.edgelists import dated, time_format
from dgbench.loaders.formats import LoadOptions, register_format
from dgbench.loaders.guards import binary_labels
from dgbench.loaders.parsing import FLOAT, ID, Column, TableSpec, columns_by_role, read_table, sniff

ROLES = {"src": (("u",), Column("src", ID, nonnegative=True)),
         "dst": (("i",), Column("dst", ID, nonnegative=True)),
         "t": (("ts",), Column("t", FLOAT, finite=True)),
         "label": (("label",), Column("label", FLOAT, finite=True)),
         "idx": (("idx",), Column("idx", ID, nonnegative=True))}


def is_tgn_header(fields: list[str]) -> bool:
    """``,u,i,ts,label,idx`` (pandas' unnamed index first) or the same without the index column."""
    names = [f.strip().lower() for f in fields]
    return names in (["", "u", "i", "ts", "label", "idx"], ["u", "i", "ts", "label", "idx"])


def dataset_name(csv_path: Path) -> str:
    """``ml_wikipedia.csv`` -> ``wikipedia``."""
    stem = csv_path.stem
    return stem[3:] if stem.lower().startswith("ml_") else stem


@register_format("tgn", summary="TGN/DyGLib processed ml_<name>.csv (,u,i,ts,label,idx) + ml_<name>[_node].npy",
                 natural="stream", patterns=("ml_*.csv",))
def load_tgn(path: Path, options: LoadOptions) -> Events:
    header, row = sniff(path, ",", header=True)
    columns = dated(columns_by_role(path, header, ROLES, ("src", "dst", "t")), row)
    spec = TableSpec(columns, delimiter=",", header=True)
    table = read_table(path, spec, drop_partial_last_line=options.drop_partial_last_line)
    cols = table.columns
    raw_files = [RawFile(path.name, table.sha256, table.size_bytes)]
    name = dataset_name(path)
    edge_rows = cols["idx"] if "idx" in cols else np.arange(1, table.rows + 1, dtype=np.int64)
    edge_features = _edge_features(path.with_name(f"ml_{name}.npy"), edge_rows, raw_files)
    highest = int(max(cols["src"].max(initial=0), cols["dst"].max(initial=0)))
    node_features = _node_features(path.with_name(f"ml_{name}_node.npy"), highest, raw_files)
    label = cols.get("label")
    bipartite = _ids_are_shifted(cols["src"], cols["dst"]) if options.bipartite is None else options.bipartite
    return Events(src=cols["src"], dst=cols["dst"], t=cols["t"], source_file=path, time_unit="s",
                  label=None if label is None else binary_labels(label, path, "label", options.force),
                  edge_features=edge_features, node_features=node_features, bipartite=bipartite,
                  raw_files=raw_files, rows_dropped=table.rows_dropped,
                  details={"header": table.header, "dataset": name, "time_format": time_format(columns),
                           "edge_feature_dim": 0 if edge_features is None else int(edge_features.shape[1]),
                           "node_feature_dim": 0 if node_features is None else int(node_features.shape[1])})


def _ids_are_shifted(src: np.ndarray, dst: np.ndarray) -> bool:
    """TGN's bipartite re-indexing puts every item after every user: then users and items are two id spaces."""
    return bool(len(src)) and int(src.max()) < int(dst.min())


def _load_matrix(path: Path, raw_files: list[RawFile], role: str) -> np.ndarray | None:
    if not path.is_file():
        return None
    try:
        values = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InputError(path, f"not a numpy .npy array ({str(exc).splitlines()[0][:160]})") from None
    if values.ndim != 2:
        raise InputError(path, f"expected a 2-D array, found shape {values.shape}")
    raw_files.append(RawFile(path.name, file_sha256(path), path.stat().st_size, role=role))
    return values


def _edge_features(path: Path, edge_rows: np.ndarray, raw_files: list[RawFile]) -> Any:
    """Each event's feature row (row ``idx``; row 0 is TGN's zero padding and belongs to no event)."""
    features = _load_matrix(path, raw_files, "edge_features")
    if features is None:
        return None
    low, high = int(edge_rows.min(initial=1)), int(edge_rows.max(initial=0))
    if low < 1 or high >= features.shape[0]:
        raise InputError(path, f"{features.shape[0]:,} feature rows (row 0 padding) for event idx "
                               f"{low:,}..{high:,} in the CSV")
    if np.array_equal(edge_rows, np.arange(1, len(edge_rows) + 1)):
        return features[1:len(edge_rows) + 1]
    return np.asarray(features[edge_rows])


def _node_features(path: Path, highest_id: int, raw_files: list[RawFile]) -> np.ndarray | None:
    """Node features indexed by node id (row 0 is padding: TGN ids start at 1)."""
    features = _load_matrix(path, raw_files, "node_features")
    if features is not None and features.shape[0] <= highest_id:
        raise InputError(path, f"{features.shape[0]:,} node feature rows, but the CSV has node id {highest_id:,}")
    return None if features is None else np.asarray(features, dtype=np.float32)
