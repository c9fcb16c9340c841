"""`dgbench convert`: stream -> snapshots by time window or event count, streamed in blocks."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import dgbench.convert as convert
from dgbench.cli import cli
from dgbench.errors import DgbenchError
from dgbench.store import EdgeStreamStoreWriter, open_store
from dgbench.store.validate import validate_store

# Integer times with an empty stretch: windows of 100 s from origin 1000 -> 0, 0, 1, 3, 3, 3, 4 (2 is empty).
TIMES = np.array([1000, 1099, 1100, 1300, 1350, 1399, 1400])


@pytest.fixture
def tiny_stream(tmp_path):
    with EdgeStreamStoreWriter(tmp_path / "tiny.zarr", num_nodes=10, directed=True, provenance={"source": "test"},
                               edge_feature_dim=2) as writer:
        writer.append_events(np.arange(7), np.arange(7)[::-1] + 1, TIMES,
                             edge_features=np.ones((7, 2)), label=np.array([0, 1, 0, 1, 1, 0, 1]))
        writer.write_array("node_ids", np.arange(10) + 100)
        return writer.close()


@pytest.mark.parametrize("text,seconds", [("1d", 86400), ("12h", 43200), ("30m", 1800), ("45s", 45),
                                          ("3600", 3600), ("1.5h", 5400), ("2w", 1209600), ("0.25", 0.25),
                                          (90, 90)])
def test_parse_window(text, seconds):
    assert convert.parse_window(text) == seconds


@pytest.mark.parametrize("text", ["3x", "", "-1", "0", "1 day", "h", "1e3"])
def test_parse_window_rejects(text):
    with pytest.raises(DgbenchError, match="--window"):
        convert.parse_window(text)


def test_window_cut_keeps_empty_windows_time_and_labels(tiny_stream, tmp_path):
    out = convert.stream_to_snapshots(tiny_stream, tmp_path / "w.zarr", window=100)
    store = open_store(out, kind="snapshots")
    assert list(store.edges_per_snapshot()) == [2, 1, 0, 3, 1]
    snap = store.snapshot(3)
    np.testing.assert_array_equal(np.sort(snap.time), [1300, 1350, 1399])
    by_time = dict(zip(TIMES.tolist(), zip(np.arange(7).tolist(), [0, 1, 0, 1, 1, 0, 1])))
    for t, src, label in zip(snap.time.tolist(), snap.src.tolist(), snap.label.tolist()):
        assert by_time[t] == (src, label)
    assert store.attrs["cut"] == {"method": "time-window", "window_seconds": 100, "origin": 1000}
    np.testing.assert_array_equal(store.read("snapshot_start"), [1000, 1100, 1200, 1300, 1400])
    np.testing.assert_array_equal(store.node_ids(), np.arange(10) + 100)
    assert not store.has("edge_features")
    source = open_store(tiny_stream)
    assert store.provenance["converted_from"]["fingerprint"] == source.fingerprint
    assert store.provenance["conversion"]["dropped_arrays"] == ["edge_features"]
    assert store.provenance["parent_provenance"] == {"source": "test"}
    assert validate_store(out) == []


def test_window_cut_with_origin(tiny_stream, tmp_path):
    store = open_store(convert.stream_to_snapshots(tiny_stream, tmp_path / "w.zarr", window="1m", origin=950))
    # windows of 60 s from 950: 1000,1099 -> 0,2; 1100 -> 2; 1300,1350,1399 -> 5,6,7; 1400 -> 7
    assert list(store.edges_per_snapshot()) == [1, 0, 2, 0, 0, 1, 1, 2]
    with pytest.raises(DgbenchError, match="after the first event"):
        convert.stream_to_snapshots(tiny_stream, tmp_path / "late.zarr", window=60, origin=1001)


def test_event_count_cut(tiny_stream, tmp_path):
    store = open_store(convert.stream_to_snapshots(tiny_stream, tmp_path / "e.zarr", events_per_snapshot=3))
    assert list(store.edges_per_snapshot()) == [3, 3, 1]
    np.testing.assert_array_equal(store.read("snapshot_start"), [1000, 1300, 1400])
    assert store.attrs["cut"] == {"method": "event-count", "events_per_snapshot": 3}


def test_blocked_conversion_matches_one_block(stream_store, tmp_path, monkeypatch):
    whole = open_store(convert.stream_to_snapshots(stream_store, tmp_path / "whole.zarr", window=37.5))
    monkeypatch.setattr(convert, "BLOCK_EVENTS", 64)
    blocked = open_store(convert.stream_to_snapshots(stream_store, tmp_path / "blocked.zarr", window=37.5))
    assert blocked.fingerprint == whole.fingerprint
    source = open_store(stream_store).events()
    expected = np.bincount(np.floor((source["t"] - source["t"][0]) / 37.5).astype(int))
    np.testing.assert_array_equal(whole.edges_per_snapshot(), expected)
    counted = open_store(convert.stream_to_snapshots(stream_store, tmp_path / "count.zarr", events_per_snapshot=150))
    assert list(counted.edges_per_snapshot()) == [150] * 13 + [50]
    assert validate_store(blocked.path) == [] and validate_store(counted.path) == []


def test_conversion_arguments_are_checked(tiny_stream, esdg_store, tmp_path):
    with pytest.raises(DgbenchError, match="exactly one"):
        convert.stream_to_snapshots(tiny_stream, tmp_path / "x.zarr")
    with pytest.raises(DgbenchError, match="exactly one"):
        convert.stream_to_snapshots(tiny_stream, tmp_path / "x.zarr", window=10, events_per_snapshot=2)
    with pytest.raises(DgbenchError, match="a stream store is needed"):
        convert.stream_to_snapshots(esdg_store, tmp_path / "x.zarr", window=10)
    with pytest.raises(DgbenchError, match="limit"):
        convert.stream_to_snapshots(tiny_stream, tmp_path / "x.zarr", window=0.0001)
    assert not (tmp_path / "x.zarr").exists()


def test_convert_command(tiny_stream, tmp_path):
    runner = CliRunner()
    out = tmp_path / "c.zarr"
    ok = runner.invoke(cli, ["--quiet", "convert", str(tiny_stream), "--out", str(out), "--window", "100s"])
    assert ok.exit_code == 0 and ok.stdout.startswith(f"wrote {out}  (snapshots, 5 snapshots, 7 edges")
    again = runner.invoke(cli, ["--quiet", "convert", str(tiny_stream), "--out", str(out), "--window", "1h"])
    assert again.exit_code == 1 and "already exists" in again.stderr and "Traceback" not in again.output
    bad = runner.invoke(cli, ["--quiet", "convert", str(tiny_stream), "--out", str(out), "--window", "3 fortnights",
                              "--overwrite"])
    assert bad.exit_code == 1 and bad.stderr.strip().splitlines() == [
        "error: --window: '3 fortnights' is not a duration (use e.g. 1d, 12h, 30m, 45s or seconds)"]
    replaced = runner.invoke(cli, ["--quiet", "convert", str(tiny_stream), "--out", str(out),
                                   "--events-per-snapshot", "7", "--overwrite"])
    assert replaced.exit_code == 0 and open_store(out).num_snapshots == 1
    assert replaced.stderr.startswith(f"warning: {out} has 1 snapshot; no snapshot model trains on fewer than 2")
