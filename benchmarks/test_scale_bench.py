"""Scale benchmarks: peak memory of `dgbench prepare amlsim` at the issue's scale (AMLSim 1M accounts, 200
steps, 124M rows), and per-rank wall, CPU and peak RSS of `snapshot` runs on growing snapshot stores.

The issue asks that a 124M-edge AMLSim run prepares within 24 GiB. A folder in the 2019 sample layout
(`transactions.csv` = sourceNodeId,targetNodeId,value,time with CRLF, `nodes.csv` with SAR flags) is
generated in blocks, then prepared in a fresh subprocess whose high-water RSS (VmHWM) is reported.
Rows: DGBENCH_BENCH_SCALE_ROWS (default DGBENCH_BENCH_ROWS, else 10,000,000); the full-scale check is

    DGBENCH_BENCH_SCALE_ROWS=124000000 .venv/bin/pytest benchmarks/test_scale_bench.py --benchmark-disable -s

The snapshot sweep (:func:`test_snapshot_rank_memory_sweep`) trains one epoch of cdgcn under `snapshot`
at P = 1, 2, 4 on esdg-random stores of growing N (T = 16, 3 edges per vertex per snapshot; the quick
pass: two small stores, P = 1 and 2; DGBENCH_BENCH_SWEEP_NODES=16384,65536 picks the sizes) and prints
each rank's peak RSS above a bare interpreter's, its ratio to P = 1's (goals 0.55 at P = 2 and 0.30 at
P = 4, ideal 0.5 / 0.25), the store bytes each rank read, and the log-log slopes of wall time and P = 1
memory against the edges (goal: 1.05 at most).

Generated stores at scale (:func:`test_generated_stream_scale`, :func:`test_generated_snapshot_store_scale`):
`prepare stream` at 1M / 20M / 100M events and `prepare esdg-random` at 65,536 / 262,144 / 2,300,000 vertices
(T = 16, f = 3), each then read whole (verified) against np.fromfile of the same bytes, in fresh processes;
wall, CPU and peak RSS of each, the read's ratio to the floor, and the log-log slopes per event / edge (goal
<= 1.05). The quick pass uses 100k / 400k events and 4,096 / 16,384 vertices;
DGBENCH_BENCH_SCALE_EVENTS=... and DGBENCH_BENCH_SCALE_NODES=... (comma-separated) pick the sizes.
"""
from __future__ import annotations

import json
import os
import shutil
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
        # --force: the guard against an index column read as ids refuses a store with more vertices than
        # events, which these synthetic accounts have at quick-mode sizes (1M accounts, 200k transactions)
        probe = subprocess.run([sys.executable, "-c", PROBE, "--quiet", "prepare", "amlsim", "--raw",
                                str(amlsim_folder), "--out", str(out), "--overwrite", "--force"],
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


QUICK = bool(os.environ.get("DGBENCH_BENCH_QUICK"))
SWEEP_NODES = [int(n) for n in os.environ.get("DGBENCH_BENCH_SWEEP_NODES", "").split(",") if n] or \
    ([1_024, 4_096] if QUICK else [16_384, 65_536, 262_144])
SWEEP_WORLDS = (1, 2) if QUICK else (1, 2, 4)
SWEEP_SNAPSHOTS = 8 if QUICK else 16
RANK_IMPORTS = "import torch, zarr, dgbench.trainers.experiment, dgbench.trainers.discrete.family"
MEMORY_GOALS = {2: 0.55, 4: 0.30}


def interpreter_rss() -> int:
    """Peak RSS of a fresh interpreter that imported what a rank imports (the floor every rank pays)."""
    code = f"{RANK_IMPORTS}\nfrom dgbench.memory import peak_rss_bytes\nprint(peak_rss_bytes())"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def train_snapshot(store: Path, world: int, out: Path) -> dict:
    """One epoch of cdgcn under `snapshot` on ``world`` ranks: wall and CPU seconds (ranks included) and the
    record's per-rank figures."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dgbench", "--quiet", "run", "--scheme", "snapshot", "--model", "cdgcn",
                    "--dataset", str(store), "--nproc", str(world), "--epochs", "1", "--out", str(out)],
                   check=True, capture_output=True, env={**os.environ, "DGBENCH_QUIET": "1"})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = json.loads(out.read_text())
    return {"wall_s": wall, "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "epoch_s": record["epochs"][-1]["time_s"], "ranks": record["extra"]["rank_data"]}


def log_log_slope(x: list[float], y: list[float]) -> float:
    return float(np.polyfit(np.log(x), np.log(y), 1)[0]) if len(x) > 1 else float("nan")


def _print_row(row: dict, goal: float | None) -> None:
    above = " ".join(f"{a:.0f}" for a in row["above_mib"])
    target = "" if goal is None else f" (goal {goal})"
    read = max(rank["store_bytes_read"] for rank in row["ranks"]) / 2**20
    print(f"{row['nodes']:>8} {row['edges']:>10} {row['world']:>2} {row['wall_s']:>7.1f} {row['cpu_s']:>7.1f} "
          f"{row['epoch_s']:>7.2f}  {above:<28} {row['ratio']:>5.2f}{target:<12} {read:>8.1f}")


def test_snapshot_rank_memory_sweep(benchmark, tmp_path: Path) -> None:
    from dgbench.generators.esdg_random import build
    floor = interpreter_rss()

    def sweep() -> list[dict]:
        rows = []
        for nodes in SWEEP_NODES:
            store = build(out=tmp_path / f"r{nodes}.zarr", nodes=nodes, snapshots=SWEEP_SNAPSHOTS, edge_factor=3.0,
                          seed=0)
            for world in SWEEP_WORLDS:
                figures = train_snapshot(store, world, tmp_path / f"r{nodes}-p{world}.json")
                rows.append({"nodes": nodes, "edges": nodes * 3 * SWEEP_SNAPSHOTS, "world": world, **figures})
        return rows

    rows = benchmark.pedantic(sweep, rounds=1, iterations=1)
    print(f"\nsnapshot / cdgcn, one epoch; rank memory above a bare interpreter's ({floor / 2**20:.0f} MiB)")
    print(f"{'N':>8} {'edges':>10} {'P':>2} {'wall s':>7} {'cpu s':>7} {'epoch s':>7}  "
          f"{'rank peak RSS above, MiB':<28} {'ratio':>5}{'':<12} {'read MiB':>8}")
    one_rank: dict[int, float] = {}
    for row in rows:
        above = [max(rank["peak_rss_bytes"] - floor, 1) / 2**20 for rank in row["ranks"]]
        one_rank.setdefault(row["nodes"], above[0])
        row.update(above_mib=above, ratio=max(above) / one_rank[row["nodes"]])
        _print_row(row, MEMORY_GOALS.get(row["world"]))
    singles = [row for row in rows if row["world"] == 1]
    edges = [row["edges"] for row in singles]
    slopes = {"wall": log_log_slope(edges, [row["wall_s"] for row in singles]),
              "epoch": log_log_slope(edges, [row["epoch_s"] for row in singles]),
              "memory": log_log_slope(edges, [row["above_mib"][0] for row in singles])}
    print("log-log slopes against the edges at P = 1 (goal <= 1.05): "
          + ", ".join(f"{name} {value:.2f}" for name, value in slopes.items()))
    benchmark.extra_info.update(interpreter_rss_bytes=floor, rows=rows, slopes=slopes)
    assert all(len(row["ranks"]) == row["world"] for row in rows)


# --------------------------------------------------------------------------- generated stores at scale

STREAM_EVENTS = [int(n) for n in os.environ.get("DGBENCH_BENCH_SCALE_EVENTS", "").split(",") if n] or \
    ([100_000, 400_000] if QUICK else [1_000_000, 20_000_000, 100_000_000])
STORE_NODES = [int(n) for n in os.environ.get("DGBENCH_BENCH_SCALE_NODES", "").split(",") if n] or \
    ([4_096, 16_384] if QUICK else [65_536, 262_144, 2_300_000])
STORE_SNAPSHOTS = 16

# One dgbench command in a fresh interpreter, timed from after the imports (wall and CPU of this process,
# its threads included), and its peak RSS (VmHWM).
GENERATE_PROBE = """
import json, sys, time
from dgbench.cli import cli
from dgbench.memory import peak_rss_bytes
wall, cpu = time.perf_counter(), time.process_time()
cli.main(args=sys.argv[1:], standalone_mode=False)
print(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                  "peak_rss_bytes": peak_rss_bytes()}))
"""

# A full verified read of every edge column in a fresh process, and np.fromfile of the same bytes (the
# floor), alternately 3 times, the fastest of each on the wall clock and in this process's CPU seconds;
# peak RSS (VmHWM) at the end (one read's columns and the flat file's bytes are alive at once).
READ_PROBE = """
import json, os, sys, time
import numpy as np
from dgbench.memory import peak_rss_bytes
from dgbench.store import open_store

def timed(work):
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, time.perf_counter() - wall, time.process_time() - cpu

store = open_store(sys.argv[1])
names = [n for n in ("src", "dst", "t", "weight", "time", "label") if store.has(n)]
flat = sys.argv[2]
with open(flat, "wb") as handle:
    for name in names:
        store.read(name).tofile(handle)
reads, floors = [], []
for _ in range(3):
    columns, wall, cpu = timed(lambda: [store.read(n) for n in names])
    size = sum(c.nbytes for c in columns)
    del columns
    reads.append((wall, cpu))
    flat_bytes, floor_wall, floor_cpu = timed(lambda: np.fromfile(flat, np.uint8))
    del flat_bytes
    floors.append((floor_wall, floor_cpu))
os.unlink(flat)
print(json.dumps({"read_wall_s": min(r[0] for r in reads), "read_cpu_s": min(r[1] for r in reads),
                  "fromfile_wall_s": min(f[0] for f in floors), "fromfile_cpu_s": min(f[1] for f in floors),
                  "bytes": size, "read_peak_rss_bytes": peak_rss_bytes()}))
"""


def _probe(args: list[str], code: str) -> dict:
    """``code`` in a fresh interpreter with ``args``: the figures it prints as its last line."""
    probe = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                           env={**os.environ, "DGBENCH_QUIET": "1"})
    assert probe.returncode == 0, probe.stderr[-2000:]
    return json.loads(probe.stdout.strip().splitlines()[-1])


def _generate_and_read(generator: list[str], store: Path) -> dict:
    """Generate ``store`` with `dgbench prepare`, then read it whole; both in fresh processes (one rank each)."""
    made = _probe(["--quiet", "prepare", *generator, "--out", str(store), "--overwrite"], GENERATE_PROBE)
    read = _probe([str(store), str(store.parent / f"{store.name}.flat")], READ_PROBE)
    return {"generate_wall_s": made["wall_s"], "generate_cpu_s": made["cpu_s"],
            "generate_peak_rss_bytes": made["peak_rss_bytes"], **read,
            "read_vs_fromfile_cpu": read["fromfile_cpu_s"] / max(read["read_cpu_s"], 1e-9),
            "read_vs_fromfile_wall": read["fromfile_wall_s"] / max(read["read_wall_s"], 1e-9)}


def _print_scale(title: str, unit: str, rows: list[dict]) -> dict[str, float]:
    """The per-size table and the log-log slopes of each clock against the size (goal <= 1.05)."""
    print(f"\n{title} (load average {os.getloadavg()[0]:.2f}; one process each, so per rank = per process)")
    print(f"{unit:>12} {'gen wall s':>10} {'gen cpu s':>9} {'gen RSS MiB':>11} {'read wall s':>11} {'read cpu s':>10} "
          f"{'read RSS MiB':>12} {'read/fromfile cpu':>17} {'wall':>5}")
    for row in rows:
        print(f"{row['size']:>12,} {row['generate_wall_s']:>10.1f} {row['generate_cpu_s']:>9.1f} "
              f"{row['generate_peak_rss_bytes'] / 2**20:>11.0f} {row['read_wall_s']:>11.2f} {row['read_cpu_s']:>10.2f} "
              f"{row['read_peak_rss_bytes'] / 2**20:>12.0f} {row['read_vs_fromfile_cpu']:>16.2f}x "
              f"{row['read_vs_fromfile_wall']:>4.2f}x")
    sizes = [row["size"] for row in rows]
    clocks = ("generate_wall_s", "generate_cpu_s", "generate_peak_rss_bytes", "read_wall_s", "read_cpu_s")
    slopes = {clock: log_log_slope(sizes, [row[clock] for row in rows]) for clock in clocks}
    print("log-log slopes against the size (goal <= 1.05 for time): "
          + ", ".join(f"{clock} {value:.2f}" for clock, value in slopes.items()))
    return slopes


def test_generated_stream_scale(benchmark, tmp_path: Path) -> None:
    """`prepare stream` at STREAM_EVENTS events (users = items = events / 20) and a full verified read of each
    store against np.fromfile of the same bytes: wall, CPU, peak RSS, and the slopes per event."""

    def sweep() -> list[dict]:
        rows = []
        for events in STREAM_EVENTS:
            people = str(max(100, events // 20))
            store = tmp_path / f"stream-{events}.zarr"
            rows.append({"size": events, **_generate_and_read(
                ["stream", "--events", str(events), "--users", people, "--items", people], store)})
            shutil.rmtree(store)
        return rows

    rows = benchmark.pedantic(sweep, rounds=1, iterations=1)
    slopes = _print_scale("generated streams: prepare stream, then a full verified read", "events", rows)
    benchmark.extra_info.update(rows=rows, slopes=slopes)
    assert all(row["bytes"] == row["size"] * 16 for row in rows)  # src, dst int32 and t float64 per event


def test_generated_snapshot_store_scale(benchmark, tmp_path: Path) -> None:
    """`prepare esdg-random` at STORE_NODES vertices (T = 16, 3 edges per vertex per snapshot) and a full
    verified read of each store against np.fromfile of the same bytes: wall, CPU, peak RSS, slopes per edge."""

    def sweep() -> list[dict]:
        rows = []
        for nodes in STORE_NODES:
            store = tmp_path / f"esdg-{nodes}.zarr"
            rows.append({"size": nodes * 3 * STORE_SNAPSHOTS, "nodes": nodes, **_generate_and_read(
                ["esdg-random", "--nodes", str(nodes), "--snapshots", str(STORE_SNAPSHOTS), "--edge-factor", "3"],
                store)})
            shutil.rmtree(store)
        return rows

    rows = benchmark.pedantic(sweep, rounds=1, iterations=1)
    slopes = _print_scale(f"generated snapshot stores ({', '.join(f'{n:,}' for n in STORE_NODES)} vertices, "
                          f"T = {STORE_SNAPSHOTS}): prepare esdg-random, then a full verified read", "edges", rows)
    benchmark.extra_info.update(rows=rows, slopes=slopes)
    assert all(row["bytes"] == row["size"] * 8 for row in rows)  # src, dst int32 per edge


# --------------------------------------------------------------------------- continuous epochs at scale

EPOCH_EVENTS = [int(n) for n in os.environ.get("DGBENCH_BENCH_EPOCH_EVENTS", "").split(",") if n] or \
    ([4_000, 16_000] if QUICK else [50_000, 200_000, 800_000])
EPOCH_VERTICES = 17_000  # as the 200M-event goal's stream (users + items)


def train_tgn(store: Path, events: int, budget: str, out: Path) -> dict:
    """One epoch of TGN (`single`, one thread, 1 evaluation negative) on the first ``events`` events, with the
    stream in memory (``budget`` the default) or read chunk by chunk (``budget`` "0"): the record's epoch
    seconds (training alone), training events and peak RSS, and the run's wall and CPU seconds."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    budget_option = [] if budget == "default" else ["--stream-budget", budget]
    subprocess.run([sys.executable, "-m", "dgbench", "--quiet", "run", "--scheme", "single", "--model", "tgn",
                    "--dataset", str(store), "--max-events", str(events), "--epochs", "1", "--threads", "1",
                    "--eval-negatives", "1", *budget_option, "--out", str(out)],
                   check=True, capture_output=True, env={**os.environ, "DGBENCH_QUIET": "1"})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    epoch = json.loads(out.read_text())["epochs"][-1]
    return {"wall_s": wall, "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "epoch_s": epoch["time_s"], "train_events": epoch["work"], "peak_rss_bytes": epoch["peak_rss_bytes"]}


def neighbour_slots_per_event(store: Path, events: int, k: int = 10) -> float:
    """Work per training event: the mean over the training events' two endpoints of min(k, the endpoint's earlier
    events), the real neighbour slots TGN's k most recent neighbours fill. It grows while vertices' histories are
    shorter than k (the first events of a stream), so a slope above 1 at small sizes can be more work per event."""
    from dgbench.store import open_store  # noqa: PLC0415 - the benchmark's own imports stay light
    from dgbench.trainers.continuous.data import EventStream  # noqa: PLC0415

    stream = EventStream.from_store(open_store(store), events)
    ends = np.stack([stream.src, stream.dst], 1).ravel()  # time order, both endpoints of each event
    order = np.argsort(ends, kind="stable")
    group_sizes = np.diff(np.r_[np.flatnonzero(np.r_[True, np.diff(ends[order]) != 0]), len(ends)])
    earlier = np.empty(len(ends), np.int64)
    earlier[order] = np.arange(len(ends)) - np.repeat(np.cumsum(group_sizes) - group_sizes, group_sizes)
    first, last = stream.ranges["train"]
    return float(np.minimum(earlier[2 * first:2 * last], k).mean())


def test_tgn_epoch_scale(benchmark, tmp_path: Path) -> None:
    """TGN's epoch on the first EPOCH_EVENTS events of one generated 17k-vertex stream, in memory and streamed:
    seconds per training event, the rank's peak RSS (the record's) and the log-log slope of the epoch's seconds
    against the events (goal <= 1.05)."""
    people = str(EPOCH_VERTICES // 2)
    store = tmp_path / "epoch-stream.zarr"
    subprocess.run([sys.executable, "-m", "dgbench", "--quiet", "prepare", "stream", "--events", str(max(EPOCH_EVENTS)),
                    "--users", people, "--items", people, "--out", str(store)], check=True, capture_output=True)

    def sweep() -> list[dict]:
        return [{"events": events, "budget": budget,
                 **train_tgn(store, events, budget, tmp_path / f"{events}-{budget}.json")}
                for budget in ("default", "0") for events in EPOCH_EVENTS]

    rows = benchmark.pedantic(sweep, rounds=1, iterations=1)
    slots = {events: neighbour_slots_per_event(store, events) for events in EPOCH_EVENTS}
    print(f"\nTGN, single, one epoch on the first N events of a {EPOCH_VERTICES:,}-vertex stream "
          f"(1 thread; load average {os.getloadavg()[0]:.2f})")
    print(f"{'events':>10} {'stream':>9} {'epoch s':>8} {'µs/train event':>14} {'wall s':>7} {'cpu s':>7} "
          f"{'RSS MiB':>8}")
    slopes = {}
    for budget in ("default", "0"):
        mine = [row for row in rows if row["budget"] == budget]
        for row in mine:
            per_event = row["epoch_s"] / row["train_events"] * 1e6
            source = "in memory" if budget == "default" else "streamed"
            print(f"{row['events']:>10,} {source:>9} {row['epoch_s']:>8.2f} {per_event:>14.1f} {row['wall_s']:>7.1f} "
                  f"{row['cpu_s']:>7.1f} {row['peak_rss_bytes'] / 2**20:>8.0f}")
        slopes[budget] = log_log_slope([row["events"] for row in mine], [row["epoch_s"] for row in mine])
    print("log-log slope of the epoch's seconds against the events (goal <= 1.05): "
          f"in memory {slopes['default']:.2f}, streamed {slopes['0']:.2f}")
    work = {events: slots[events] * events for events in EPOCH_EVENTS}
    work_slopes = {budget: log_log_slope([work[row["events"]] for row in rows if row["budget"] == budget],
                                         [row["epoch_s"] for row in rows if row["budget"] == budget])
                   for budget in ("default", "0")}
    print("neighbour slots per training event (k = 10): "
          + ", ".join(f"{events:,}: {slots[events]:.2f}" for events in EPOCH_EVENTS)
          + f"; slope against events x slots: in memory {work_slopes['default']:.2f}, streamed {work_slopes['0']:.2f}")
    benchmark.extra_info.update(rows=rows, slopes=slopes, slots=slots, work_slopes=work_slopes)
    assert all(row["epoch_s"] > 0 for row in rows)
