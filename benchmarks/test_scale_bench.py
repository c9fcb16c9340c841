"""Peak memory of `dgbench prepare amlsim` at the issue's scale (AMLSim 1M accounts, 200 steps, 124M rows).

The issue asks that a 124M-edge AMLSim run prepares within 24 GiB. A folder in the 2019 sample layout
(`transactions.csv` = sourceNodeId,targetNodeId,value,time with CRLF, `nodes.csv` with SAR flags) is
generated in blocks, then prepared in a fresh subprocess whose high-water RSS (VmHWM) is reported.
Rows: DGBENCH_BENCH_SCALE_ROWS (default DGBENCH_BENCH_ROWS, else 10,000,000); the full-scale check is

    DGBENCH_BENCH_SCALE_ROWS=124000000 .venv/bin/pytest benchmarks/test_scale_bench.py --benchmark-disable -s
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from _probe import LIMIT_BYTES, PROBE  # benchmarks/_probe.py (pytest puts benchmarks/ on the path)

ROWS = int(os.environ.get("DGBENCH_BENCH_SCALE_ROWS", os.environ.get("DGBENCH_BENCH_ROWS", 10_000_000)))
ACCOUNTS, STEPS, BLOCK = 1_000_000, 200, 5_000_000



@pytest.fixture(scope="module")
def amlsim_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Transactions in time order over STEPS steps between ACCOUNTS accounts, written block by block."""
    folder = tmp_path_factory.mktemp("amlsim-scale") / "run"
    folder.mkdir()
    rng = np.random.default_rng(0)
    options = pacsv.WriteOptions(include_header=False, quoting_style="none")
    with open(folder / "transactions.csv", "wb") as out:
        out.write(b"sourceNodeId,targetNodeId,value,time\r\n")
        for first in range(0, ROWS, BLOCK):
            rows = min(BLOCK, ROWS - first)
            steps = 1 + (np.arange(first, first + rows, dtype=np.int64) * STEPS) // ROWS
            block = pa.table({"s": rng.integers(0, ACCOUNTS, rows), "t": rng.integers(0, ACCOUNTS, rows),
                              "v": np.round(rng.gamma(2.0, 100.0, rows), 2), "step": steps})
            sink = pa.BufferOutputStream()
            pacsv.write_csv(block, sink, write_options=options)
            out.write(sink.getvalue().to_pybytes().replace(b"\n", b"\r\n"))
    fraud = rng.random(ACCOUNTS) < 0.01
    nodes = pa.table({"nodeid": np.arange(ACCOUNTS), "isFraud": fraud.astype(np.int8),
                      "init_balance": np.round(rng.uniform(100, 200, ACCOUNTS), 2),
                      "fraudStep": np.where(fraud, rng.integers(1, STEPS + 1, ACCOUNTS), -1)})
    pacsv.write_csv(nodes, folder / "nodes.csv")
    return folder


def test_prepare_amlsim_peak_memory(benchmark, amlsim_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "amlsim.zarr"

    def prepare() -> dict:
        started = time.perf_counter()
        probe = subprocess.run([sys.executable, "-c", PROBE, "--quiet", "prepare", "amlsim", "--raw",
                                str(amlsim_folder), "--out", str(out), "--overwrite"],
                               capture_output=True, text=True, env={**os.environ, "DGBENCH_QUIET": "1"})
        assert probe.returncode == 0, probe.stderr[-2000:]
        figures = json.loads(probe.stdout.strip().splitlines()[-1])
        return {**figures, "wall_s": time.perf_counter() - started}

    figures = benchmark.pedantic(prepare, rounds=1, iterations=1)
    from dgbench.store import open_store
    store = open_store(out)
    raw_bytes = (amlsim_folder / "transactions.csv").stat().st_size
    benchmark.extra_info.update(rows=ROWS, raw_bytes=raw_bytes, num_edges=store.num_edges,
                                num_snapshots=store.num_snapshots, bytes_per_row=figures["peak_rss_bytes"] / ROWS,
                                **figures)
    print(f"\nprepare amlsim {ROWS:,} rows ({raw_bytes / 2**30:.2f} GiB): {figures['seconds']:.1f} s, "
          f"peak RSS {figures['peak_rss_bytes'] / 2**30:.2f} GiB ({figures['peak_rss_bytes'] / ROWS:.0f} B/row)")
    assert store.num_edges == ROWS and store.num_snapshots == STEPS
    assert figures["peak_rss_bytes"] < LIMIT_BYTES
