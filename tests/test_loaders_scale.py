"""Slow: a 2M-event TGL folder (GDELT layout, 16-dim .pt edge features, rows slightly out of order).

Checks that memory-mapped features follow the time sort and that peak memory stays near the size
of the event columns (features are streamed, never loaded whole), in a fresh subprocess.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
import torch

from dgbench.store import open_store

pytestmark = pytest.mark.slow
EVENTS, EDGE_DIM, NODES = 2_000_000, 16, 16_682

PROBE = """
import json, sys
from pathlib import Path
from dgbench.memory import peak_rss_bytes
from dgbench.loaders.prepare import build_file
build_file(out=Path(sys.argv[2]), fmt="tgl", raw=Path(sys.argv[1]))
print(json.dumps({"max_rss_bytes": peak_rss_bytes()}))
"""


def test_tgl_two_million_events_stream_features_in_time_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    t = np.sort(rng.integers(0, 10**8, EVENTS))
    swap = rng.choice(EVENTS - 1, EVENTS // 100, replace=False)  # 1% of neighbours swapped: out of order
    t[swap], t[swap + 1] = t[swap + 1], t[swap].copy()
    roll = np.searchsorted([0.7 * EVENTS, 0.85 * EVENTS], np.arange(EVENTS), side="right")
    folder = tmp_path / "GDELT"
    folder.mkdir()
    table = pa.table({"": np.arange(EVENTS), "src": rng.integers(0, NODES, EVENTS),
                      "dst": rng.integers(0, NODES, EVENTS), "time": t, "int_roll": roll, "ext_roll": roll})
    pacsv.write_csv(table, folder / "edges.csv")
    features = torch.from_numpy(rng.normal(size=(EVENTS, EDGE_DIM)).astype(np.float32))
    torch.save(features, folder / "edge_features.pt")
    torch.save(torch.zeros(NODES, 4), folder / "node_features.pt")

    out = tmp_path / "gdelt.zarr"
    probe = subprocess.run([sys.executable, "-c", PROBE, str(folder), str(out)], capture_output=True, text=True,
                           env={"DGBENCH_QUIET": "1", "PATH": "/usr/bin:/bin"}, cwd=Path(__file__).parents[1])
    assert probe.returncode == 0, probe.stderr
    peak = json.loads(probe.stdout.strip().splitlines()[-1])["max_rss_bytes"]

    store = open_store(out)
    assert store.num_events == EVENTS and store.provenance["rows_out_of_order"] > 0
    order = np.argsort(t, kind="stable")
    sample = rng.choice(EVENTS, 2000, replace=False)
    stored = store.read("edge_features")
    assert np.array_equal(stored[sample], features.numpy()[order[sample]])
    assert store.split_ranges()["val"][0] == int(np.count_nonzero(roll == 0))
    # columns: ~2M x (3 int64 parse + copies); features (128 MB) must not be held twice on top
    print(f"peak RSS {peak / 2**20:.0f} MiB")
    assert peak < 1.5 * 2**30, f"peak RSS {peak / 2**20:.0f} MiB"
