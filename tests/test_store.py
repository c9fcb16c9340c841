"""Store contract: round trips, fingerprint stability/sensitivity, atomic writing, partial reads."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numcodecs
import numpy as np
import pytest

import dgbench.store as store_module
from dgbench.errors import StoreError
from dgbench.store import EdgeStreamStoreWriter, SnapshotStoreWriter, open_store
from dgbench.store.validate import validate_store

N = 50


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 1,000 elements, so small test stores span many chunk files."""
    monkeypatch.setattr(store_module.write, "CHUNK_ELEMENTS", 1000)


def random_snapshots(seed: int, count: int = 4, edges: int = 300):
    """Unsorted snapshot edges with weight/time/label columns, times increasing across snapshots."""
    rng = np.random.default_rng(seed)
    snaps = []
    for t in range(count):
        m = edges + 17 * t
        snaps.append({"src": rng.integers(0, N, m), "dst": rng.integers(0, N, m),
                      "weight": rng.random(m).astype(np.float32), "time": 1000 * t + rng.integers(0, 1000, m),
                      "label": rng.integers(0, 2, m).astype(np.int8)})
    return snaps


def write_snapshots(path: Path, snaps, provenance=None, node_ids=None, features=None, **kw) -> Path:
    with SnapshotStoreWriter(path, num_nodes=N, directed=True, cut={"method": "test"},
                             provenance=provenance or {"source": "test"}, **kw) as writer:
        for t, s in enumerate(snaps):
            writer.append_snapshot(s["src"], s["dst"], weight=s.get("weight"), time=s.get("time"),
                                   label=s.get("label"), start=t,
                                   features=None if features is None else features[t])
        if node_ids is not None:
            writer.write_array("node_ids", node_ids)
        return writer.close()


def random_events(seed: int, count: int = 5000, feature_dim: int = 3):
    rng = np.random.default_rng(seed)
    return {"src": rng.integers(0, N, count), "dst": rng.integers(0, N, count),
            "t": np.sort(rng.integers(0, 10**6, count)),
            "edge_features": rng.normal(size=(count, feature_dim)).astype(np.float32),
            "label": rng.integers(0, 2, count).astype(np.int8)}


def write_stream(path: Path, events, block: int, provenance=None, **kw) -> Path:
    with EdgeStreamStoreWriter(path, num_nodes=N, directed=False, provenance=provenance or {"source": "test"},
                               edge_feature_dim=events["edge_features"].shape[1], **kw) as writer:
        for a in range(0, len(events["t"]), block):
            part = {k: v[a:a + block] for k, v in events.items()}
            writer.append_events(part["src"], part["dst"], part["t"], edge_features=part["edge_features"],
                                 label=part["label"])
        return writer.close()


def sorted_by_dst_src(snap):
    """The stored order: (dst, src), repeated pairs by time, weight, label."""
    ties = [snap[k] for k in ("label", "weight", "time") if k in snap]
    order = np.lexsort((*ties, snap["src"], snap["dst"]))
    return {k: np.asarray(v)[order] for k, v in snap.items()}


# --------------------------------------------------------------------------- round trips

def test_snapshot_round_trip_one_and_all(tmp_path, small_chunks):
    snaps = random_snapshots(seed=0)
    features = np.random.default_rng(1).normal(size=(len(snaps), N, 2)).astype(np.float32)
    store = open_store(write_snapshots(tmp_path / "s.zarr", snaps, features=features), kind="snapshots")
    assert store.num_snapshots == len(snaps) and store.num_nodes == N
    assert list(store.edges_per_snapshot()) == [len(s["src"]) for s in snaps]
    one = store.snapshot(2)
    expected = sorted_by_dst_src(snaps[2])
    for name in ("src", "dst", "weight", "time", "label"):
        np.testing.assert_array_equal(getattr(one, name), expected[name])
    read_all = list(store.snapshots())
    assert [s.index for s in read_all] == list(range(len(snaps)))
    for got, want in zip(read_all, snaps):
        np.testing.assert_array_equal(got.src, sorted_by_dst_src(want)["src"])
        np.testing.assert_array_equal(got.time, sorted_by_dst_src(want)["time"])
    np.testing.assert_array_equal(store.frame(3), features[3])
    np.testing.assert_array_equal(store.read("snapshot_start"), np.arange(len(snaps)))
    assert validate_store(store.path) == []
    with pytest.raises(IndexError):
        store.snapshot(len(snaps))


def test_stream_round_trip_and_split(tmp_path, small_chunks):
    events = random_events(seed=0)
    store = open_store(write_stream(tmp_path / "e.zarr", events, block=777), kind="stream")
    assert store.num_events == len(events["t"])
    window = store.events(1234, 4321)
    for name, values in events.items():
        np.testing.assert_array_equal(window[name], values[1234:4321])
    ranges = store.split_ranges()
    assert ranges["train"][0] == 0 and ranges["test"][1] == store.num_events
    assert ranges["train"][1] == ranges["val"][0] and ranges["val"][1] == ranges["test"][0]
    assert ranges["train"][1] == round(0.7 * store.num_events)
    assert validate_store(store.path) == []


def test_empty_snapshots_are_kept(tmp_path):
    empty = {"src": np.zeros(0, int), "dst": np.zeros(0, int)}
    full = {"src": np.array([3, 1]), "dst": np.array([0, 0])}
    store = open_store(write_snapshots(tmp_path / "s.zarr", [empty, full, empty]))
    assert list(store.edges_per_snapshot()) == [0, 2, 0]
    assert store.snapshot(2).num_edges == 0
    np.testing.assert_array_equal(store.snapshot(1).src, [1, 3])


# --------------------------------------------------------------------------- fingerprint

def test_fingerprint_ignores_provenance_node_ids_and_blocking(tmp_path):
    events = random_events(seed=3)
    a = write_stream(tmp_path / "a.zarr", events, block=len(events["t"]), provenance={"source": "csv"})
    b = write_stream(tmp_path / "b.zarr", events, block=333, provenance={"source": "parquet", "x": 1})
    assert open_store(a).fingerprint == open_store(b).fingerprint
    snaps = random_snapshots(seed=3)
    shuffled = [{k: v[::-1] for k, v in s.items()} for s in snaps]  # same edges, other order
    c = write_snapshots(tmp_path / "c.zarr", snaps, node_ids=np.arange(N) * 7)
    d = write_snapshots(tmp_path / "d.zarr", shuffled, provenance={"source": "other"}, node_ids=np.arange(N))
    assert open_store(c).fingerprint == open_store(d).fingerprint


@pytest.mark.parametrize("column,row", [("src", 0), ("dst", 10), ("time", 5), ("weight", 299)])
def test_fingerprint_changes_with_one_value(tmp_path, column, row):
    snaps = random_snapshots(seed=4)
    base = open_store(write_snapshots(tmp_path / "base.zarr", snaps)).fingerprint
    changed = [dict(s) for s in snaps]
    values = changed[1][column].copy()
    values[row] = values[row] + 1 if column != "src" or values[row] < N - 1 else 0
    changed[1][column] = values
    assert open_store(write_snapshots(tmp_path / "changed.zarr", changed)).fingerprint != base


def test_fingerprint_changes_with_stream_time_and_split(tmp_path):
    events = random_events(seed=5)
    base = open_store(write_stream(tmp_path / "base.zarr", events, block=1000)).fingerprint
    later = dict(events, t=events["t"].copy())
    later["t"][-1] += 1
    assert open_store(write_stream(tmp_path / "t.zarr", later, block=1000)).fingerprint != base
    with EdgeStreamStoreWriter(tmp_path / "split.zarr", num_nodes=N, directed=False, provenance={},
                               edge_feature_dim=3) as writer:
        writer.append_events(events["src"], events["dst"], events["t"], edge_features=events["edge_features"],
                             label=events["label"])
        writer.set_split(100, 200, "manual")
        assert open_store(writer.close()).fingerprint != base


# --------------------------------------------------------------------------- writer guards

def test_existing_store_needs_overwrite(tmp_path):
    path = write_snapshots(tmp_path / "s.zarr", random_snapshots(seed=0))
    with pytest.raises(StoreError, match="already exists"):
        write_snapshots(path, random_snapshots(seed=1))
    old = open_store(path).fingerprint
    assert open_store(write_snapshots(path, random_snapshots(seed=1), overwrite=True)).fingerprint != old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]  # no old/tmp directories left


def test_stream_writer_rejects_unsorted_times(tmp_path):
    with EdgeStreamStoreWriter(tmp_path / "e.zarr", num_nodes=N, directed=True, provenance={}) as writer:
        writer.append_events([1, 2], [3, 4], [10, 20])
        with pytest.raises(StoreError, match="time order"):
            writer.append_events([1], [2], [15])


def test_writers_reject_out_of_range_ids(tmp_path):
    with SnapshotStoreWriter(tmp_path / "s.zarr", num_nodes=N, directed=True, cut={}, provenance={}) as writer:
        writer.append_snapshot([1, 2], [3, 4])
        with pytest.raises(StoreError, match=f"snapshot 1: dst vertex id {N} is outside 0..{N - 1}"):
            writer.append_snapshot([1, 2], [3, N])
    with EdgeStreamStoreWriter(tmp_path / "e.zarr", num_nodes=N, directed=True, provenance={}) as writer:
        writer.append_events([1, 2], [3, 4], [10, 20])
        with pytest.raises(StoreError, match="events from 2: src vertex id -1 is outside"):
            writer.append_events([-1], [2], [25])
        with pytest.raises(StoreError, match="2 sources but 1 destinations"):
            writer.append_events([1, 2], [2], [30, 31])


def test_open_store_errors(tmp_path, esdg_store):
    with pytest.raises(StoreError, match="not a dgbench store"):
        open_store(tmp_path)
    with pytest.raises(StoreError, match="a stream store is needed"):
        open_store(esdg_store, kind="stream")


# --------------------------------------------------------------------------- atomicity

def test_failing_generator_leaves_nothing(tmp_path):
    def failing_edges():
        yield np.arange(10), np.arange(10)
        raise RuntimeError("generator broke")

    path = tmp_path / "s.zarr"
    with pytest.raises(RuntimeError, match="generator broke"):
        with SnapshotStoreWriter(path, num_nodes=N, directed=True, cut={}, provenance={}) as writer:
            for src, dst in failing_edges():
                writer.append_snapshot(src, dst)
            writer.close()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(StoreError):
        open_store(path)
    assert validate_store(path) != []
    assert open_store(write_snapshots(path, random_snapshots(seed=0))).num_snapshots == 4


KILLED_WRITER = textwrap.dedent("""
    import sys, numpy as np
    import dgbench.store as s
    import dgbench.store.write
    dgbench.store.write.CHUNK_ELEMENTS = 1 << 12
    rng = np.random.default_rng(0)
    with s.EdgeStreamStoreWriter(sys.argv[1], num_nodes=1000, directed=True, provenance={}) as w:
        for block in range(100_000):
            t = np.arange(block * 50_000, (block + 1) * 50_000)
            w.append_events(rng.integers(0, 1000, len(t)), rng.integers(0, 1000, len(t)), t)
        w.close()
""")


def test_sigkilled_writer_leaves_no_valid_store_and_rerun_cleans(tmp_path):
    path = tmp_path / "big.zarr"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)])
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            temporaries = list(tmp_path.glob(".big.zarr.tmp-*"))
            if temporaries and len(list((temporaries[0] / "src" / "c").glob("*"))) >= 3:
                break
            assert proc.poll() is None, "writer finished before it could be killed"
            time.sleep(0.05)
        else:
            pytest.fail("writer never wrote chunks")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not path.exists()
    with pytest.raises(StoreError):
        open_store(path)
    assert validate_store(path) != []
    assert [p.name.split("-")[1] for p in tmp_path.glob(".big.zarr.tmp-*")] == [f"pid{proc.pid}"]
    write_stream(path, random_events(seed=0), block=1000)
    assert validate_store(path) == []
    assert list(tmp_path.glob(".big.zarr.tmp-*")) == []  # the dead writer's directory was cleaned


def test_store_without_final_attributes_is_incomplete(tmp_path):
    """The root attributes (with the fingerprint) are written last; without them a store is invalid."""
    writer = SnapshotStoreWriter(tmp_path / "s.zarr", num_nodes=N, directed=True, cut={}, provenance={})
    writer.append_snapshot([1, 2], [3, 4])
    writer.columns["src"].close()
    with pytest.raises(StoreError, match="not a dgbench store|incomplete"):
        open_store(writer.tmp)
    writer.abort()
    assert not writer.tmp.exists()


# --------------------------------------------------------------------------- partial reads

def test_one_snapshot_read_touches_only_its_chunks(tmp_path, small_chunks):
    snaps = random_snapshots(seed=6, count=6, edges=2500)
    store = open_store(write_snapshots(tmp_path / "s.zarr", snaps))
    first = store.snapshot(0)
    last_rows = int(store.offsets[-2])
    keep = {c for c in range(last_rows // 1000, store.num_edges // 1000 + 1)}
    # A well-formed Blosc frame of 3 elements: fails for sure where a 1,000-element chunk is expected
    # (garbled bytes are not enough: Blosc trusts its header and may decode them by chance).
    wrong_size_frame = numcodecs.Blosc(cname="lz4").encode(np.zeros(3, dtype=np.int8))
    for column in ("src", "dst", "weight", "time", "label"):
        for chunk in (store.path / column / "c").iterdir():
            if int(chunk.name) not in keep:
                chunk.write_bytes(wrong_size_frame)  # decoding this chunk now fails
    reopened = open_store(store.path)
    last = reopened.snapshot(len(snaps) - 1)
    np.testing.assert_array_equal(last.src, sorted_by_dst_src(snaps[-1])["src"])
    np.testing.assert_array_equal(last.weight, sorted_by_dst_src(snaps[-1])["weight"])
    with pytest.raises(StoreError, match="array '(src|dst|weight|time|label)': file '[a-z]+/c/[012]' differs"):
        reopened.snapshot(0)
    assert first.num_edges == len(snaps[0]["src"])


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("prefix", [".e.zarr.tmp", ".e.zarr.old", ".e.zarr.unsmoothed", ".dgbench-unpack"])
def test_scratch_left_by_a_killed_run_is_removed_by_the_next(tmp_path, prefix):
    from dgbench.files import remove_stale, scratch_dir
    from dgbench.loaders.smoothing import smooth  # noqa: F401  (the prepare path that uses .unsmoothed)
    dead = tmp_path / f"{prefix}-pid{_dead_pid()}-0123abcd"
    (dead / "content").mkdir(parents=True)
    alive = scratch_dir(tmp_path, prefix)  # this process: still running, so kept
    remove_stale(tmp_path, prefix)
    assert not dead.exists() and alive.exists()


def test_prepare_with_smoothing_cleans_a_killed_run_s_scratch(tmp_path):
    from click.testing import CliRunner
    from dgbench.cli import cli
    dead = tmp_path / f".e.zarr.unsmoothed-pid{_dead_pid()}-0123abcd"
    (dead / "plain.zarr").mkdir(parents=True)
    raw = tmp_path / "raw" / "msgs.txt"
    raw.parent.mkdir()
    raw.write_text("".join(f"{u} {u + 1} {1_600_000_000 + 86_400 * day}\n" for day in range(4) for u in range(5)))
    result = CliRunner().invoke(cli, ["--quiet", "prepare", "file", "--format", "snap", "--raw", str(raw),
                                      "--to", "snapshots", "--m-product", "2", "--out", str(tmp_path / "e.zarr")])
    assert result.exit_code == 0, result.output
    assert not dead.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["e.zarr", "raw"]
