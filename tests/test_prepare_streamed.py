"""The bounded-memory stream prepare (loaders/streamed.py) writes the store the in-memory path writes, keeps
its one-line errors, leaves nothing behind, and hands unsorted files to the in-memory path."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
import torch

import dgbench.loaders.streamed as streamed
from dgbench.errors import InputError
from dgbench.loaders.prepare import build_file
from dgbench.store import open_store

EVENTS, NODES = 6_000, 400


def tgl_folder(folder: Path, *, sorted_times: bool = True, features: bool = True, whole: bool = True) -> Path:
    """A TGL folder: sparse original ids, runs of equal times (repeats across blocks), ext_roll split."""
    rng = np.random.default_rng(3)
    t = np.sort(rng.integers(1_000_000_000, 1_000_000_060, EVENTS)).astype(np.float64)
    if not whole:
        t += 0.5
    if not sorted_times:
        t[100], t[101] = t[101] + 1, t[100]
    ids = rng.choice(10 * NODES, NODES, replace=False)
    roll = np.searchsorted([0.7 * EVENTS, 0.85 * EVENTS], np.arange(EVENTS), side="right")
    folder.mkdir()
    pacsv.write_csv(pa.table({"": np.arange(EVENTS), "src": ids[rng.integers(0, 30, EVENTS)],
                              "dst": ids[rng.integers(0, 20, EVENTS)], "time": t, "int_roll": roll,
                              "ext_roll": roll}), folder / "edges.csv")
    if features:
        torch.save(torch.from_numpy(rng.normal(size=(EVENTS, 3)).astype(np.float32)), folder / "edge_features.pt")
        torch.save(torch.ones(10 * NODES, 2), folder / "node_features.pt")
    return folder


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr("dgbench.loaders.parsing.BLOCK_BYTES", 20_000)  # ~15 parse blocks
    monkeypatch.setattr(streamed, "STREAM_BLOCK", 1_000)  # ~6 write blocks


def in_memory(monkeypatch, **kwargs) -> Path:
    with monkeypatch.context() as patch:
        patch.delitem(streamed.STREAM_SOURCES, "tgl")
        return build_file(fmt="tgl", **kwargs)


def attributes(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_text())["attributes"]


@pytest.mark.parametrize("features", [True, False], ids=["features", "plain"])
@pytest.mark.parametrize("whole", [True, False], ids=["whole-seconds", "fractional"])
def test_streamed_store_is_the_in_memory_store(tmp_path, monkeypatch, small_blocks, features, whole):
    folder = tgl_folder(tmp_path / "TGL", features=features, whole=whole)
    calls = []
    monkeypatch.setattr(streamed, "_take_block", lambda *a, _take=streamed._take_block: calls.append(1) or _take(*a))
    streamed_store = build_file(out=tmp_path / "streamed.zarr", fmt="tgl", raw=folder)
    assert len(calls) > 5  # it did stream, block by block
    reference = in_memory(monkeypatch, out=tmp_path / "memory.zarr", raw=folder)
    ours, theirs = attributes(streamed_store), attributes(reference)
    assert ours["fingerprint"] == theirs["fingerprint"]
    assert ours["arrays"] == theirs["arrays"]
    assert ours["provenance"] == theirs["provenance"]
    assert ours["provenance"]["duplicates"] > 0 and ours["split"]["method"] == "tgl-ext_roll"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no spill or scratch left


def test_unsorted_times_go_to_the_in_memory_path(tmp_path, small_blocks):
    store = open_store(build_file(out=tmp_path / "s.zarr", fmt="tgl", raw=tgl_folder(tmp_path / "TGL",
                                                                                      sorted_times=False)))
    assert store.provenance["rows_out_of_order"] == 1 and store.num_events == EVENTS
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_bad_line_late_in_the_file_is_one_line_naming_it_and_nothing_is_left(tmp_path, small_blocks):
    folder = tgl_folder(tmp_path / "TGL", features=False)
    lines = (folder / "edges.csv").read_text().splitlines(keepends=True)
    lines[5000] = lines[5000].replace(",", ",x", 1)  # src becomes 'x...'
    (folder / "edges.csv").write_text("".join(lines))
    with pytest.raises(InputError, match=r"edges\.csv:5001: field 'src': '.*' is not an integer"):
        build_file(out=tmp_path / "s.zarr", fmt="tgl", raw=folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["TGL"]


def test_a_split_going_back_is_refused_naming_the_event(tmp_path, small_blocks, monkeypatch):
    folder = tgl_folder(tmp_path / "TGL", features=False)
    lines = (folder / "edges.csv").read_text().splitlines(keepends=True)
    lines[4800] = lines[4800][:-2] + "0\n"  # event 4799 (line 4801 after the header) back in train
    (folder / "edges.csv").write_text("".join(lines))
    with pytest.raises(InputError) as streamed_error:
        build_file(out=tmp_path / "s.zarr", fmt="tgl", raw=folder)
    with pytest.raises(InputError) as memory_error:
        in_memory(monkeypatch, out=tmp_path / "m.zarr", raw=folder)
    assert str(streamed_error.value) == str(memory_error.value)
    assert "ext_roll goes back from 1 to 0 at event 4799" in str(streamed_error.value)


def test_a_spill_left_by_a_killed_prepare_is_removed_by_the_next(tmp_path, small_blocks):
    folder = tgl_folder(tmp_path / "TGL", features=False)
    dead = tmp_path / ".s.zarr.spill-pid999999999-deadbeef"  # the name scratch_dir gives, of a process long gone
    dead.mkdir()
    (dead / "src").write_bytes(b"\0" * 64)
    assert open_store(build_file(out=tmp_path / "s.zarr", fmt="tgl", raw=folder)).num_events == EVENTS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["TGL", "s.zarr"]
