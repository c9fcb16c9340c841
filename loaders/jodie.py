"""JODIE interaction CSVs (Kumar et al., KDD 2019): ``user_id,item_id,timestamp,state_label,features...``.

The header is one line (any names: copies with renamed headers are common; a file whose first line
is data is read without one); every column after
the fourth is an edge feature (JODIE's ``comma_separated_list_of_features``). Users and items are
separate id spaces, so the stream is bipartite with items shifted after users (as TGN/TGL do).
TGN's re-indexed copies (``u,i,ts,label``, items already shifted) read the same way.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dgbench.errors import InputError
from dgbench.loaders.events import Events, RawFile
from dgbench.loaders.edgelists import dated, time_format
from dgbench.loaders.formats import LoadOptions, register_format
from dgbench.loaders.guards import binary_labels
from dgbench.loaders.tgn import is_tgn_header
from dgbench.loaders.parsing import (FLOAT, ID, Column, TableSpec, data_lines, describe_fields, is_number, read_table,
                             split_fields)

FIXED = (Column("user", ID, nonnegative=True), Column("item", ID, nonnegative=True),
         Column("t", FLOAT, finite=True), Column("state_label", FLOAT, finite=True))


@register_format("jodie", summary="JODIE CSV (user_id,item_id,timestamp,state_label,features...), bipartite",
                 natural="stream", patterns=("*.csv",))
def load_jodie(path: Path, options: LoadOptions) -> Events:
    lines = data_lines(path, limit=2)
    if len(lines) < 2 and not (lines and any(is_number(f) for f in split_fields(lines[0], ","))):
        raise InputError(path, "no data rows (the file is empty or holds only comments/header)")
    first, second = (lines + [""])[:2]
    header = split_fields(first, ",")
    if is_tgn_header(header):
        raise InputError(path, f"header {','.join(header)!r} is TGN/DyGLib's processed layout (pandas index column, "
                               f"ids from 1, items shifted after users), not JODIE's: read it with --format tgn",
                         line=1)
    has_header = not any(is_number(field) for field in header)  # a data row is never taken for a header
    row = split_fields(second if has_header else first, ",")
    if len(row) < 3:
        raise InputError(path, f"first data row has {len(row)} comma-separated fields "
                               f"({describe_fields(second if has_header else first)}); JODIE rows are "
                               f"user_id,item_id,timestamp[,state_label[,features...]] separated by commas",
                         line=2 if has_header else 1)
    features = [Column(f"f{i}", FLOAT) for i in range(max(0, len(row) - 4))]
    columns = dated(FIXED[:min(4, len(row))] + tuple(features), row)
    spec = TableSpec(columns, delimiter=",", header=has_header)
    table = read_table(path, spec, drop_partial_last_line=options.drop_partial_last_line)
    cols = table.columns
    edge_features = (np.column_stack([cols[c.name] for c in features]).astype(np.float32)
                     if features else None)
    label = binary_labels(cols["state_label"], path, "state_label", options.force) if "state_label" in cols else None
    bipartite = True if options.bipartite is None else options.bipartite
    return Events(src=cols["user"], dst=cols["item"], t=cols["t"], source_file=path, time_unit="s",
                  label=label, edge_features=edge_features, bipartite=bipartite,
                  raw_files=[RawFile(path.name, table.sha256, table.size_bytes)], rows_dropped=table.rows_dropped,
                  details={"header": table.header, "edge_feature_dim": len(features),
                           "time_format": time_format(columns)})
