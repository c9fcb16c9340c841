"""Store I/O against the bare tools: `prepare --format tgl` vs ``pyarrow.csv.read_csv`` of the same edges.csv,
and a full verified store read vs ``np.fromfile`` of the same bytes (docs/store-format.md, "Reading";
docs/loader-formats.md, "Preparing large files").

Goals (issue "The seeds' datasets at their real size"): prepare <= 2x read_csv at 20M rows; a full read
>= 0.5x np.fromfile's speed; prepare time per event constant in size (log-log slope <= 1.05). Rounds
alternate the two sides (benchmarks/_alternate.py); the ratios are printed as median [min-max] on the
wall clock and per CPU-second, with the load average seen. On a loaded machine they are not for
publication. Rows: DGBENCH_BENCH_ROWS (default 5,000,000; quick runs set it small); rounds:
DGBENCH_IO_ROUNDS (default 3).

    DGBENCH_BENCH_ROWS=20000000 .venv/bin/python -m pytest benchmarks/test_store_io.py --benchmark-disable -s

Peak memory of one prepare, in a fresh process (for /usr/bin/time -v):

    .venv/bin/python benchmarks/test_store_io.py generate ROWS FOLDER
    /usr/bin/time -v .venv/bin/python benchmarks/test_store_io.py prepare FOLDER OUT.zarr
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
import xxhash

sys.path.insert(0, str(Path(__file__).parent))
from _alternate import alternate, ratio_line, timed  # noqa: E402

ROWS = int(os.environ.get("DGBENCH_BENCH_ROWS", 5_000_000))
ROUNDS = int(os.environ.get("DGBENCH_IO_ROUNDS", 3))
WRITE_ROWS = 1 << 20  # rows generated and written per CSV block: the generator's memory is bounded too
T0, SPAN = 1_500_000_000, 3 * 365 * 86400


def write_tgl_edges(folder: Path, rows: int, seed: int = 0) -> Path:
    """A GDELT-like TGL folder: ``,src,dst,time,int_roll,ext_roll`` over ~rows/10 vertices (Zipf-skewed),
    integer times sorted with repeats (events share seconds), written block by block."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    nodes = max(100, rows // 10)
    gaps = SPAN / rows
    schema = pa.schema([("", pa.int64()), ("src", pa.int64()), ("dst", pa.int64()), ("time", pa.int64()),
                        ("int_roll", pa.int64()), ("ext_roll", pa.int64())])
    last_time = T0
    with pacsv.CSVWriter(folder / "edges.csv", schema) as writer:
        for first in range(0, rows, WRITE_ROWS):
            n = min(WRITE_ROWS, rows - first)
            index = np.arange(first, first + n)
            times = last_time + np.cumsum(rng.poisson(gaps, n))
            last_time = int(times[-1])
            roll = np.searchsorted([0.7 * rows, 0.85 * rows], index, side="right")
            ids = lambda: np.minimum(rng.zipf(1.3, n) - 1, nodes - 1)  # noqa: E731
            writer.write_table(pa.table([index, ids(), ids(), times, roll, roll], schema=schema))
    return folder


def read_csv(folder: Path) -> pa.Table:
    return pacsv.read_csv(folder / "edges.csv")


def prepare(folder: Path, out: Path) -> Path:
    from dgbench.loaders.prepare import build_file
    shutil.rmtree(out, ignore_errors=True)
    return build_file(out=out, fmt="tgl", raw=folder)


@pytest.fixture(scope="module")
def tgl_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tgl_edges(tmp_path_factory.mktemp("store-io") / "TGL", ROWS)


def test_prepare_vs_read_csv(benchmark, tgl_folder: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "prepared.zarr"
    ours, peer, load = alternate(lambda: timed(lambda: prepare(tgl_folder, out))[1],
                                 lambda: timed(lambda: read_csv(tgl_folder))[1], ROUNDS)
    benchmark.pedantic(prepare, args=(tgl_folder, out), rounds=1, iterations=1)
    line = ratio_line(f"prepare tgl {ROWS:,} rows vs pyarrow.csv.read_csv (goal >= 0.5, i.e. <= 2x)", ours, peer,
                      load, threads=os.cpu_count() or 1)
    benchmark.extra_info.update({"rows": ROWS, "prepare_s": [t.wall_s for t in ours],
                                 "read_csv_s": [t.wall_s for t in peer], "load": load})
    with capsys.disabled():
        print(f"\n{line}")
    from dgbench.store import open_store
    assert open_store(out).num_events == ROWS


def test_prepare_time_slope(benchmark, tgl_folder: Path, tmp_path: Path, capsys) -> None:
    """Prepare time against size: the log-log slope of the fastest of ROUNDS prepares at ROWS/4 and ROWS
    events (goal <= 1.05: time per event does not grow with size), on the wall clock and in CPU seconds."""
    import math
    small = write_tgl_edges(tmp_path / "quarter", ROWS // 4, seed=1)
    out = tmp_path / "slope.zarr"
    rounds = [(timed(lambda: prepare(small, out))[1], timed(lambda: prepare(tgl_folder, out))[1])
              for _ in range(ROUNDS)]
    slopes = {clock: math.log(min(getattr(b, clock) for _, b in rounds) / min(getattr(a, clock) for a, _ in rounds))
              / math.log(ROWS / (ROWS // 4)) for clock in ("wall_s", "cpu_s")}
    benchmark.pedantic(prepare, args=(small, out), rounds=1, iterations=1)
    benchmark.extra_info.update({"rows": [ROWS // 4, ROWS], "slope": slopes})
    with capsys.disabled():
        print(f"\nprepare time slope {ROWS // 4:,} -> {ROWS:,} events (goal <= 1.05): wall {slopes['wall_s']:.2f}, "
              f"CPU {slopes['cpu_s']:.2f}; load average {os.getloadavg()[0]:.2f}")


def test_store_read_vs_fromfile(benchmark, tgl_folder: Path, tmp_path: Path, capsys) -> None:
    """A full read of src, dst and t (verified: every file's digest and every id checked) against
    np.fromfile of the same bytes, uncompressed, from one flat file; both warm in the page cache. The
    verified read is also timed with a pool of 2 chunk threads (what reads used before): the thread
    count is chosen per CPU-second (docs/store-format.md, "One thread")."""
    import dgbench.store.chunks as chunks
    from dgbench.store import open_store
    path = prepare(tgl_folder, tmp_path / "read.zarr")
    names = ("src", "dst", "t")
    flat = tmp_path / "columns.bin"
    with open(flat, "wb") as handle:
        for name in names:
            open_store(path).read(name).tofile(handle)

    stores = {verify: open_store(path, verify=verify) for verify in (True, False)}  # opened once, as a run does

    def read_all(verify: bool) -> None:
        for name in names:
            stores[verify].read(name)

    def zarr_path() -> None:  # what reads cost before the direct chunk path: zarr's own array[:]
        for name in names:
            stores[True].array(name)[:]

    def read_in_pool() -> None:
        before, chunks.READ_THREADS = chunks.READ_THREADS, 2
        try:
            read_all(True)
        finally:
            chunks.READ_THREADS = before

    read_all(True), np.fromfile(flat, dtype=np.uint8)  # warm the page cache
    lines = []
    for label, work, threads in (("verified", lambda: read_all(True), chunks.READ_THREADS),
                                 ("verified, pool of 2 threads", read_in_pool, 2),
                                 ("unverified", lambda: read_all(False), chunks.READ_THREADS),
                                 ("zarr array[:]", zarr_path, chunks.READ_THREADS)):
        ours, peer, load = alternate(lambda: timed(work)[1], lambda: timed(lambda: np.fromfile(flat, np.uint8))[1],
                                     ROUNDS)
        lines.append(ratio_line(f"store read ({label}) of {flat.stat().st_size / 2**20:.0f} MiB vs np.fromfile "
                                f"(goal >= 0.5)", ours, peer, load, threads=threads))
        benchmark.extra_info[label] = [t.wall_s for t in ours]
        benchmark.extra_info[f"fromfile beside {label}"] = [t.wall_s for t in peer]
    benchmark.pedantic(read_all, args=(True,), rounds=1, iterations=1)
    with capsys.disabled():
        print("\n" + "\n".join(lines))


LAYOUTS = {"lz4 everywhere (stores before)": None, "raw below 4x, else lz4 (default)": 4.0, "raw everywhere": 1e12}


def write_columns_store(path: Path, rows: int, compress_at_ratio: float | None) -> Path:
    """A stream store of GDELT-like columns (Zipf ids, sorted times with repeats) written with the given
    COMPRESS_AT_RATIO (None: every array compressed, as before raw chunks existed)."""
    import dgbench.store.write as store_write
    from dgbench.store import EdgeStreamStoreWriter
    rng = np.random.default_rng(0)
    nodes = max(100, rows // 10)
    before, store_write.COMPRESS_AT_RATIO = store_write.COMPRESS_AT_RATIO, compress_at_ratio
    try:
        shutil.rmtree(path, ignore_errors=True)
        last = T0
        with EdgeStreamStoreWriter(path, num_nodes=nodes, directed=True, provenance={}) as writer:
            for first in range(0, rows, WRITE_ROWS):
                n = min(WRITE_ROWS, rows - first)
                ids = lambda: np.minimum(rng.zipf(1.3, n) - 1, nodes - 1)  # noqa: E731
                times = last + np.cumsum(rng.poisson(3, n))
                last = int(times[-1])
                writer.append_events(ids(), ids(), times)
            return writer.close()
    finally:
        store_write.COMPRESS_AT_RATIO = before


def with_checksums(path: Path, copy: Path, algorithm: str | None) -> Path:
    """A copy of the store as stores written before were: ``file_checksums`` in ``algorithm`` with no
    ``file_checksum_algorithm`` ("crc32"), or none at all (None: reads check the sha256 file digests)."""
    import json
    from dgbench.store.format import file_checksum, store_files
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(path, copy)
    doc = json.loads((copy / "zarr.json").read_text())
    attrs = doc["attributes"]
    attrs.pop("file_checksum_algorithm", None)
    if algorithm is None:
        del attrs["file_checksums"]
    else:
        attrs["file_checksums"] = {key: file_checksum(f.read_bytes(), algorithm)
                                   for key, f in store_files(copy).items()}
    (copy / "zarr.json").write_text(json.dumps(doc))
    return copy


def test_store_read_candidates(benchmark, tmp_path: Path, capsys) -> None:
    """The measurement behind the chunk layout and the per-read check (docs/store-format.md, "Codec and
    checksum"): a full read of src, dst and t of a ROWS-event store in each layout, checked with XXH3-128
    (the default), with CRC-32 and sha256 (stores written before) and unchecked, against np.fromfile of the
    same bytes; fastest of ROUNDS alternating rounds, per CPU-second and per wall second."""
    from dgbench.store import open_store
    names = ("src", "dst", "t")
    lines = [f"{ROWS:,} events, load average {os.getloadavg()[0]:.2f}; speed as a fraction of np.fromfile's "
             f"(goal >= 0.5 verified, per CPU-second)"]
    timings = {}
    for layout, ratio in LAYOUTS.items():
        path = write_columns_store(tmp_path / "layout.zarr", ROWS, ratio)
        flat = tmp_path / "columns.bin"
        with open(flat, "wb") as handle:
            for name in names:
                open_store(path).read(name).tofile(handle)
        on_disk = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        stores = {"xxh3-128": open_store(path),
                  "crc32": open_store(with_checksums(path, tmp_path / "crc.zarr", "crc32")),
                  "sha256": open_store(with_checksums(path, tmp_path / "sha.zarr", None)),
                  "unchecked": open_store(path, verify=False)}
        for check, store in stores.items():
            work = lambda: [store.read(name) for name in names]  # noqa: E731
            work()
            ours, peer, _ = alternate(lambda: timed(work)[1], lambda: timed(lambda: np.fromfile(flat, np.uint8))[1],
                                      ROUNDS)
            cpu = min(t.cpu_s for t in peer) / min(t.cpu_s for t in ours)
            wall = min(t.wall_s for t in peer) / min(t.wall_s for t in ours)
            timings[f"{layout} / {check}"] = {"cpu": cpu, "wall": wall, "bytes_on_disk": on_disk}
            lines.append(f"  {layout:<34} {on_disk / 2**20:7.1f} MiB on disk, {check:<9}: {cpu:.2f}x per CPU-second, "
                         f"{wall:.2f}x per wall second")
    lines.append(f"load average {os.getloadavg()[0]:.2f}")
    benchmark.extra_info.update(rows=ROWS, candidates=timings)
    benchmark.pedantic(lambda: [stores["xxh3-128"].read(name) for name in names], rounds=1, iterations=1)
    with capsys.disabled():
        print("\n" + "\n".join(lines))


CODECS = [("lz4", 5, "shuffle"), ("lz4", 1, "shuffle"), ("lz4", 9, "shuffle"), ("lz4", 5, "bitshuffle"),
          ("zstd", 1, "shuffle"), ("blosclz", 5, "shuffle")]
DIGESTS = {"sha256": lambda b: hashlib.sha256(b).digest(),
           "sha1": lambda b: hashlib.sha1(b).digest(),
           "blake2b-128": lambda b: hashlib.blake2b(b, digest_size=16).digest(), "crc32": zlib.crc32,
           "adler32": zlib.adler32, "xxh3-128": xxhash.xxh3_128_intdigest, "xxh3-64": xxhash.xxh3_64_intdigest,
           "xxh64": xxhash.xxh64_intdigest}
try:  # google-crc32c, when installed (not a dependency): the other fast standard check considered
    import google_crc32c
    DIGESTS["crc32c"] = google_crc32c.value  # takes read-only buffers only: not a writable chunk buffer
except ImportError:
    pass


def fastest(work, reps: int = 40) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def test_codec_and_digest_costs(benchmark, capsys) -> None:
    """The measurement behind the store's codec and file digest (docs/store-format.md, "Codec and checksum"):
    one thread, the fastest of 40 runs on one 1 MiB chunk of random ids, sorted ids and sorted times."""
    from numcodecs import Blosc, blosc
    threads, blosc.use_threads = blosc.use_threads, False  # one thread: put back at the end
    rng = np.random.default_rng(0)
    columns = {"random ids": rng.integers(0, 104_167, 1 << 18).astype(np.int32),
               "sorted ids": np.sort(rng.integers(0, 104_167, 1 << 18)).astype(np.int32),
               "times": np.sort(rng.integers(T0, T0 + SPAN, 1 << 17))}
    lines = [f"load average {os.getloadavg()[0]:.2f}; GB/s of raw bytes, one thread"]
    shuffles = {"noshuffle": Blosc.NOSHUFFLE, "shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}
    for cname, level, shuffle in CODECS:
        cells = []
        for label, values in columns.items():
            codec = Blosc(cname=cname, clevel=level, shuffle=shuffles[shuffle], typesize=values.itemsize)
            encoded, out = codec.encode(values), np.empty_like(values)
            decode = fastest(lambda: codec.decode(encoded, out))
            digest = fastest(lambda: hashlib.sha256(encoded).digest())
            rate = values.nbytes / 1e9
            cells.append(f"{label}: ratio {values.nbytes / len(encoded):.2f}, decode {rate / decode:.2f}, "
                         f"+sha256 {rate / (decode + digest):.2f}")
        lines.append(f"{cname}/{level}/{shuffle}: " + "; ".join(cells))
    chunk = columns["random ids"].tobytes()
    lines.append("digests: " + ", ".join(f"{name} {len(chunk) / fastest(lambda: digest(chunk)) / 1e9:.2f}"
                                         for name, digest in DIGESTS.items()))
    benchmark.pedantic(lambda: hashlib.sha256(chunk).digest(), rounds=1, iterations=1)
    blosc.use_threads = threads
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def main(argv: list[str]) -> None:
    """``generate ROWS FOLDER`` or ``prepare FOLDER OUT`` (one prepare in this process, for /usr/bin/time -v)."""
    if argv[:1] == ["generate"]:
        write_tgl_edges(Path(argv[2]), int(argv[1]))
    elif argv[:1] == ["prepare"]:
        prepare(Path(argv[1]), Path(argv[2]))
    else:
        raise SystemExit(main.__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
