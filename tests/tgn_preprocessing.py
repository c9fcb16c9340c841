"""TGN's preprocessing of a JODIE CSV, re-implemented for tests from reading its script.

Source read: twitter-research/tgn ``utils/preprocess_data.py`` (commit cd1530a): ``preprocess``
reads ``u,i,ts,label,features`` rows (ts and label as floats, idx = row number), ``reindex`` shifts
items after users (bipartite) and adds 1 to u, i and idx, and ``run`` writes ``ml_<name>.csv`` with
pandas ``to_csv`` (a leading unnamed index column: ``,u,i,ts,label,idx``), ``ml_<name>.npy`` (edge
features with a zero row 0) and ``ml_<name>_node.npy`` (zeros, max id + 1 rows, 172 columns).
DyGLib's ``preprocess_data/preprocess_data.py`` (yule-BUAA/DyGLib, commit 3a4bc00) writes the same
three files into ``processed_data/<name>/`` (non-bipartite data sets: ids only shifted by 1).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

NODE_FEATURE_DIM = 172
Row = tuple[int, int, float, float]  # u, i, ts, label


def read_jodie_rows(jodie_csv: Path, limit: int | None = None) -> tuple[list[Row], np.ndarray]:
    """(u, i, ts, label) per complete row and the feature matrix; a cut-off last line is skipped."""
    rows, features = [], []
    with open(jodie_csv, newline="") as handle:
        width = None
        for number, line in enumerate(handle):
            fields = line.strip().split(",")
            if number == 0 or not line.endswith("\n"):
                continue  # the header; a last line without newline is a cut-off download
            width = width or len(fields)
            rows.append((int(fields[0]), int(fields[1]), float(fields[2]), float(fields[3])))
            features.append([float(x) for x in fields[4:]])
            if limit is not None and len(rows) == limit:
                break
    return rows, np.array(features, dtype=np.float64).reshape(len(rows), -1)


def write_tgn_processed(rows: list[Row], features: np.ndarray, folder: Path,
                        name: str, bipartite: bool = True, node_features: np.ndarray | None = None) -> Path:
    """Write ml_<name>.csv/.npy/_node.npy in TGN's layout; returns the CSV's path."""
    folder.mkdir(parents=True, exist_ok=True)
    users = [u for u, _, _, _ in rows]
    shift = max(users) + 1 if bipartite else 0
    lines = [",u,i,ts,label,idx\n"]
    highest = 0
    for index, (u, i, ts, label) in enumerate(rows):
        new_u, new_i = u + 1, i + shift + 1
        highest = max(highest, new_u, new_i)
        lines.append(f"{index},{new_u},{new_i},{ts!r},{label!r},{index + 1}\n")  # pandas writes floats by repr
    csv = folder / f"ml_{name}.csv"
    csv.write_text("".join(lines))
    np.save(folder / f"ml_{name}.npy", np.vstack([np.zeros((1, features.shape[1])), features]))
    if node_features is None:
        node_features = np.zeros((highest + 1, NODE_FEATURE_DIM))
    np.save(folder / f"ml_{name}_node.npy", node_features)
    return csv
