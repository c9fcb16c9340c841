"""Edge-life and M-product throughput (output nnz/s) and peak memory on an esdg-random store.

Size: DGBENCH_BENCH_EDGES total input edges (default 2,000,000; `make bench-quick` uses 200,000),
spread over 32 snapshots of m = 3N edges. Peak memory is measured in a fresh subprocess (Python heap
peak by tracemalloc, which numpy reports to, and the process high-water RSS) so the timed runs are not slowed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dgbench.store import open_store
from dgbench.loaders.smoothing import edge_life, m_product

SNAPSHOTS, EDGE_FACTOR = 32, 3.0
TOTAL_EDGES = int(os.environ.get("DGBENCH_BENCH_EDGES", 2_000_000))
ROUNDS = 1 if os.environ.get("DGBENCH_BENCH_QUICK") else 3
TRANSFORMS = {"edge-life": edge_life, "m-product": m_product}

MEMORY_PROBE = """
import json, sys, tracemalloc
from dgbench.memory import peak_rss_bytes as high_water_rss
from dgbench.loaders.smoothing import edge_life, m_product

transform = {"edge-life": edge_life, "m-product": m_product}[sys.argv[1]]
before = high_water_rss()
tracemalloc.start()
transform(sys.argv[2], sys.argv[3], int(sys.argv[4]), overwrite=True)
print(json.dumps({"traced_peak_bytes": tracemalloc.get_traced_memory()[1], "rss_before_bytes": before,
                  "max_rss_bytes": high_water_rss()}))
"""


@pytest.fixture(scope="module")
def input_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dgbench.generators.esdg_random import build
    nodes = max(2, round(TOTAL_EDGES / (SNAPSHOTS * EDGE_FACTOR)))
    return build(out=tmp_path_factory.mktemp("smoothing") / "esdg.zarr", nodes=nodes, snapshots=SNAPSHOTS,
                 edge_factor=EDGE_FACTOR, seed=0)


def peak_memory(name: str, source: Path, out: Path, window: int) -> dict[str, int]:
    env = {**os.environ, "DGBENCH_QUIET": "1"}
    probe = subprocess.run([sys.executable, "-c", MEMORY_PROBE, name, str(source), str(out), str(window)],
                           capture_output=True, text=True, check=True, env=env, cwd=Path(__file__).parents[1])
    measured = json.loads(probe.stdout)
    # What the transform adds to the process's high-water RSS, beyond the imports (numpy, zarr, loaders).
    measured["rss_growth_bytes"] = measured["max_rss_bytes"] - measured["rss_before_bytes"]
    return measured


@pytest.mark.parametrize("window", [4, 16])
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_smoothing_throughput(benchmark, input_store: Path, tmp_path: Path, name: str, window: int):
    out = tmp_path / f"{name}{window}.zarr"
    seconds: list[float] = []

    def run() -> None:
        began = time.perf_counter()
        TRANSFORMS[name](input_store, out, window, overwrite=True)
        seconds.append(time.perf_counter() - began)

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    source, result = open_store(input_store), open_store(out)
    largest_snapshot = int(source.edges_per_snapshot().max())
    benchmark.extra_info.update(
        input_nnz=source.num_edges, output_nnz=result.num_edges, window=window,
        output_nnz_per_s=result.num_edges / min(seconds),
        # 16 bytes per coalesced edge in memory: int64 key + float64 weight.
        window_bound_bytes=16 * window * largest_snapshot,
        output_in_memory_bytes=16 * result.num_edges,
        **peak_memory(name, input_store, tmp_path / "probe.zarr", window))
