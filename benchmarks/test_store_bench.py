"""Snapshot-store throughput: write, full read, one-snapshot read, and raw numpy.fromfile for the ratio.

Size: DGBENCH_BENCH_EDGES total edges (default 10,000,000; `make bench-quick` sets it lower), as an
esdg-random-like store of 32 snapshots with m = 3N uniform edges each. The full read decodes the
`src` and `dst` columns whole; the baseline reads the same number of bytes from one flat file with
numpy.fromfile (both from the page cache after the first round). Edges/s per test is in extra_info.

Integrity: every read of an opened store checks each file it reads against the digest
recorded at write time (sha256 of the compressed bytes) and the ids against N. ``*_unverified`` runs
the same read with ``open_store(verify=False)``: the ratio of the two is what verification costs.
``test_file_digests_at_close`` times the digests a writer adds when it closes (hashing every file
once); extra_info holds the bytes hashed and decoded, which noise cannot change.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from dgbench.store import SnapshotStoreWriter, file_digest, open_store, store_files

SNAPSHOTS, EDGE_FACTOR = 32, 3
TOTAL_EDGES = int(os.environ.get("DGBENCH_BENCH_EDGES", 10_000_000))
ROUNDS = 1 if os.environ.get("DGBENCH_BENCH_QUICK") else 5
NODES = max(2, TOTAL_EDGES // (SNAPSHOTS * EDGE_FACTOR))


@pytest.fixture(scope="module")
def snapshots() -> list[np.ndarray]:
    """Each snapshot as a (2, m) int32 array of uniform (src, dst) pairs, generated once."""
    rng = np.random.default_rng(0)
    return [rng.integers(0, NODES, size=(2, NODES * EDGE_FACTOR)).astype(np.int32) for _ in range(SNAPSHOTS)]


def write_store(path: Path, snapshots: list[np.ndarray]) -> Path:
    with SnapshotStoreWriter(path, num_nodes=NODES, directed=True, cut={"method": "generated"},
                             provenance={"source": "benchmark"}, overwrite=True) as writer:
        for pair in snapshots:
            writer.append_snapshot(pair[0], pair[1])
        return writer.close()


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory, snapshots) -> Path:
    return write_store(tmp_path_factory.mktemp("store-bench") / "esdg.zarr", snapshots)


def record_rate(benchmark, edges: int) -> None:
    benchmark.extra_info["edges"] = edges
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["edges_per_s"] = edges / benchmark.stats.stats.median


@pytest.mark.benchmark(group="store-write")
def test_write_snapshot_store(benchmark, snapshots, tmp_path):
    out = tmp_path / "written.zarr"
    benchmark.pedantic(write_store, args=(out, snapshots), setup=lambda: shutil.rmtree(out, ignore_errors=True),
                       rounds=ROUNDS, iterations=1)
    assert open_store(out).num_edges == sum(p.shape[1] for p in snapshots)
    record_rate(benchmark, open_store(out).num_edges)


@pytest.mark.benchmark(group="store-read")
def test_full_read(benchmark, store_path):
    store = open_store(store_path)
    src, dst = benchmark.pedantic(lambda: (store.read("src"), store.read("dst")), rounds=ROUNDS, iterations=1,
                                  warmup_rounds=1)
    assert len(src) == len(dst) == store.num_edges
    record_rate(benchmark, store.num_edges)


@pytest.mark.benchmark(group="store-read")
def test_full_read_unverified(benchmark, store_path):
    """The same full read without integrity checks (the cost baseline for test_full_read)."""
    store = open_store(store_path, verify=False)
    src, dst = benchmark.pedantic(lambda: (store.read("src"), store.read("dst")), rounds=ROUNDS, iterations=1,
                                  warmup_rounds=1)
    assert len(src) == len(dst) == store.num_edges
    record_rate(benchmark, store.num_edges)
    files = store_files(store_path)
    benchmark.extra_info["bytes_hashed_by_verified_read"] = sum(f.stat().st_size for k, f in files.items()
                                                                if k.split("/")[0] in ("src", "dst"))
    benchmark.extra_info["bytes_decoded"] = int(src.nbytes + dst.nbytes)


@pytest.mark.benchmark(group="store-write")
def test_file_digests_at_close(benchmark, store_path):
    """What recording file digests adds to closing a writer: one sha256 over every file of the store."""
    files = store_files(store_path)
    digests = benchmark.pedantic(lambda: {k: file_digest(f.read_bytes()) for k, f in files.items()},
                                 rounds=ROUNDS, iterations=1, warmup_rounds=1)
    assert digests == open_store(store_path).attrs["file_digests"]
    benchmark.extra_info["bytes_hashed"] = sum(f.stat().st_size for f in files.values())
    record_rate(benchmark, open_store(store_path).num_edges)


@pytest.mark.benchmark(group="store-read")
def test_numpy_fromfile_same_bytes(benchmark, store_path, tmp_path):
    """Baseline for the full read: the same src+dst bytes, uncompressed, in one flat file."""
    store = open_store(store_path)
    raw = tmp_path / "columns.bin"
    np.concatenate([store.read("src"), store.read("dst")]).tofile(raw)
    values = benchmark.pedantic(np.fromfile, args=(raw,), kwargs={"dtype": np.int32}, rounds=ROUNDS, iterations=1,
                                warmup_rounds=1)
    assert len(values) == 2 * store.num_edges
    record_rate(benchmark, store.num_edges)


@pytest.mark.benchmark(group="store-snapshot")
@pytest.mark.parametrize("verify", [True, False], ids=["verified", "unverified"])
def test_one_snapshot_read(benchmark, store_path, verify):
    store = open_store(store_path, verify=verify)
    middle = store.num_snapshots // 2
    snap = benchmark.pedantic(store.snapshot, args=(middle,), rounds=ROUNDS * 10, iterations=1, warmup_rounds=1)
    assert snap.num_edges == NODES * EDGE_FACTOR
    record_rate(benchmark, snap.num_edges)
