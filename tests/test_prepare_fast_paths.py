"""The fast paths of `prepare file` store exactly what the general paths store.

Covers: the whole-file (memory-mapped) parse vs the block parser, SnapshotStoreWriter.append_snapshots
vs one append_snapshot per snapshot, and the column writer's own chunk encoding vs zarr's.
"""
from __future__ import annotations

import filecmp
import hashlib
from pathlib import Path

import numpy as np
import pytest

from dgbench import store
from dgbench.store import (
    CHUNK_ELEMENTS,
    EdgeStreamStoreWriter,
    SnapshotStoreWriter,
    open_store,
)
from dgbench.loaders import parsing
from dgbench.loaders.edgelists import DST, SRC, TIME, WEIGHT
from dgbench.loaders.parsing import WHITESPACE, TableSpec, read_table

SPEC = TableSpec((SRC, DST, WEIGHT, TIME), delimiter=WHITESPACE, comments=b"%#")


def _differing_files(a: Path, b: Path) -> list[str]:
    def walk(cmp: filecmp.dircmp) -> list[str]:
        found = cmp.diff_files + cmp.left_only + cmp.right_only
        for sub in cmp.subdirs.values():
            found += walk(sub)
        return found
    return walk(filecmp.dircmp(a, b))


def _edges_text(rows: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    columns = (rng.integers(0, 50, rows), rng.integers(0, 50, rows), rng.integers(1, 6, rows),
               np.sort(rng.integers(0, 10**6, rows)))
    lines = [f"{u} {v} {w} {t}" for u, v, w, t in zip(*columns)]
    return "\n".join(lines) + "\n"


def _block_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parsing, "_read_clean_file", lambda path, spec: None)


@pytest.mark.parametrize("text", [
    "% sym weighted\n% 200 50 50\n\n",  # Network Repository style header lines, then clean rows
    "\ufeff",  # a byte-order mark
    "",
])
def test_whole_file_parse_equals_block_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    path = tmp_path / "g.edges"
    path.write_bytes((text + _edges_text(2000)).encode())
    fast = read_table(path, SPEC, block_bytes=4096)
    assert parsing._parse_mapped(path, SPEC) is not None  # the fast path really was taken
    _block_path_only(monkeypatch)
    slow = read_table(path, SPEC, block_bytes=4096)
    assert fast.sha256 == slow.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert fast.rows == slow.rows == 2000
    for name in ("src", "dst", "weight", "t"):
        assert fast.columns[name].dtype == slow.columns[name].dtype
        assert np.array_equal(fast.columns[name], slow.columns[name])
    assert fast.columns["weight"].dtype == np.float32


@pytest.mark.parametrize("middle", ["% a comment\n", "  # indented comment\n", "1\t2  3 4\n"])
def test_files_needing_repairs_fall_back_to_the_block_parser(tmp_path: Path, middle: str) -> None:
    path = tmp_path / "g.edges"
    path.write_text("% header\n1 2 3 4\n" + middle + "5 6 7 8\n")
    assert parsing._parse_mapped(path, SPEC) is None
    table = read_table(path, SPEC)
    expected_src = [1, 1, 5] if middle.startswith("1\t") else [1, 5]
    assert table.columns["src"].tolist() == expected_src


def _snapshots(seed: int) -> list[dict[str, np.ndarray]]:
    """Unsorted snapshots with repeated pairs (equal times, different weights) and an empty one."""
    rng = np.random.default_rng(seed)
    snaps = []
    for size in (300, 0, 1, 500, 2):
        snaps.append({"src": rng.integers(0, 12, size).astype(np.int32),
                      "dst": rng.integers(0, 12, size).astype(np.int32),
                      "weight": rng.integers(0, 3, size).astype(np.float32), "time": rng.integers(0, 4, size)})
    presorted = {name: np.sort(values) for name, values in snaps[0].items()}  # in (dst, src) order...
    presorted["time"] = presorted["time"][::-1].copy()  # ...but repeated pairs out of time order
    snaps.append(presorted)
    return snaps


def test_append_snapshots_stores_what_append_snapshot_stores(tmp_path: Path) -> None:
    snaps = _snapshots(seed=1)
    with SnapshotStoreWriter(tmp_path / "one.zarr", num_nodes=12, directed=True, cut={}, provenance={},
                             time_dtype=np.int64) as writer:
        for k, snap in enumerate(snaps):
            writer.append_snapshot(**snap, start=k)
        one = open_store(writer.close())
    bounds = np.cumsum([0] + [len(s["src"]) for s in snaps])
    joined = {name: np.concatenate([s[name] for s in snaps]) for name in snaps[0]}
    with SnapshotStoreWriter(tmp_path / "many.zarr", num_nodes=12, directed=True, cut={}, provenance={},
                             time_dtype=np.int64) as writer:
        head = {name: values[:bounds[2]] for name, values in joined.items()}
        writer.append_snapshots(**head, bounds=bounds[:3], starts=[0, 1])  # two calls: offsets carry on
        writer.append_snapshots(**{n: v[bounds[2]:] for n, v in joined.items()}, bounds=bounds[2:] - bounds[2],
                                starts=list(range(2, len(snaps))))
        many = open_store(writer.close())
    assert many.fingerprint == one.fingerprint
    assert _differing_files(one.path, many.path) == []
    for k, snap in enumerate(snaps):  # the stored order is (dst, src), repeated pairs by time, then weight
        stored = many.snapshot(k)
        expected = np.lexsort((snap["weight"], snap["time"], snap["src"], snap["dst"]))
        assert np.array_equal(stored.time, snap["time"][expected])
        assert np.array_equal(stored.weight, snap["weight"][expected])


def test_append_snapshots_refuses_bad_bounds(tmp_path: Path) -> None:
    with SnapshotStoreWriter(tmp_path / "s.zarr", num_nodes=5, directed=True, cut={}, provenance={}) as writer, \
            pytest.raises(ValueError, match="bounds"):
        writer.append_snapshots(np.array([1, 2]), np.array([3, 4]), bounds=np.array([0, 1]))


def test_own_chunk_encoding_matches_zarr(tmp_path: Path) -> None:
    """Whole chunks encoded by the column writer are the files zarr writes, all-zero chunks left out."""
    rows = 3 * CHUNK_ELEMENTS + 17
    src = np.zeros(rows, dtype=np.int32)
    src[2 * CHUNK_ELEMENTS:] = 4  # chunks 0 and 1 are all zero: not stored
    t = np.sort(np.random.default_rng(0).random(rows))

    def write(path: Path, own_encoding: bool) -> Path:
        with EdgeStreamStoreWriter(path, num_nodes=5, directed=True, provenance={}, time_dtype=np.float64) as writer:
            if not own_encoding:
                for column in writer.columns.values():
                    column.encoder = None
            for a in range(0, rows, 300_000):
                writer.append_events(src[a:a + 300_000], src[a:a + 300_000], t[a:a + 300_000])
            return writer.close()

    own, by_zarr = write(tmp_path / "own.zarr", True), write(tmp_path / "zarr.zarr", False)
    for codec in (store.write.COMPRESSOR, None):  # compressed and raw chunks are both encoded by the writer
        assert store.write._chunk_encoder(np.dtype(np.int32), codec) is not None
    assert sorted(p.name for p in (own / "src" / "c").iterdir()) == ["2", "3"]
    assert _differing_files(own, by_zarr) == []
    assert np.array_equal(open_store(own).read("src"), src)
