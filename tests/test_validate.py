"""`dgbench validate`: each corruption made on disk is reported naming the array and the problem."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import dgbench.store as store_module
from dgbench.store.format import file_checksum
from dgbench.cli import cli
from dgbench.store import array_digest_update, combine_fingerprint, fingerprint_header, open_store
from dgbench.store.validate import validate_store


@pytest.fixture
def chunked_esdg_store(tmp_path, monkeypatch) -> Path:
    """A snapshot store whose columns span several 1,000-element chunks."""
    monkeypatch.setattr(store_module.write, "CHUNK_ELEMENTS", 1000)
    from dgbench.generators.esdg_random import build
    return build(out=tmp_path / "chunked.zarr", nodes=200, snapshots=6, edge_factor=4.0, seed=2)


def rewrite(path: Path, name: str, edit) -> None:
    """Change array ``name`` in place with zarr (mode r+), leaving the root attributes untouched."""
    array = zarr.open_group(str(path), mode="r+")[name]
    values = array[:]
    edit(values)
    array[:] = values


def set_attrs(path: Path, **changes) -> None:
    meta = path / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"].update(changes)
    meta.write_text(json.dumps(doc))


def reseal(path: Path) -> None:
    """Recompute every recorded digest (arrays, files) and the fingerprint, as a tool rewriting a store would."""
    attrs = store_module.read_attrs(path)
    group = zarr.open_group(str(path), mode="r")
    for name, digest in attrs["arrays"].items():
        hasher = hashlib.sha256()
        array_digest_update(hasher, group[name][:])
        digest["sha256"] = hasher.hexdigest()
    fingerprint = combine_fingerprint(attrs["kind"], fingerprint_header(attrs["kind"], attrs), attrs["arrays"])
    contents = {key: f.read_bytes() for key, f in store_module.store_files(path).items()}
    set_attrs(path, arrays=attrs["arrays"], fingerprint=fingerprint,
              file_digests={key: store_module.file_digest(data) for key, data in contents.items()},
              file_checksums={key: file_checksum(data) for key, data in contents.items()})


def only_problem(path: Path) -> str:
    problems = validate_store(path)
    assert problems, "corruption went unnoticed"
    return problems[0]


def test_generated_stores_are_valid(esdg_store, stream_store, chunked_esdg_store):
    for path in (esdg_store, stream_store, chunked_esdg_store):
        assert validate_store(path) == []


def test_truncated_chunk(chunked_esdg_store):
    chunk = chunked_esdg_store / "src" / "c" / "2"
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])
    problem = only_problem(chunked_esdg_store)
    assert problem.startswith("array 'src': chunk c/2 (rows 2000..2999) truncated")


def test_truncated_offsets_chunk_is_named_although_the_store_cannot_open(esdg_store):
    chunk = esdg_store / "offsets" / "c" / "0"  # opening a snapshot store reads offsets first
    chunk.write_bytes(chunk.read_bytes()[:20])
    problem = only_problem(esdg_store)
    assert problem.startswith("array 'offsets': chunk c/0 (rows 0..8) truncated"), problem
    assert str(esdg_store) not in problem  # the CLI adds the path once


def test_garbled_chunk(chunked_esdg_store):
    chunk = chunked_esdg_store / "dst" / "c" / "1"
    data = bytearray(chunk.read_bytes())
    data[16:] = bytes(len(data) - 16)  # same length, compressed payload zeroed
    chunk.write_bytes(bytes(data))
    problem = only_problem(chunked_esdg_store)
    assert problem.startswith("array 'dst': ") and ("chunk c/1 (rows 1000..1999) unreadable" in problem
                                                    or "content hash differs" in problem)


def test_decreasing_offsets(esdg_store):
    def swap(offsets):
        offsets[3], offsets[4] = offsets[4], offsets[3]
    rewrite(esdg_store, "offsets", swap)
    problem = only_problem(esdg_store)
    assert problem.startswith("array 'offsets': decreasing at snapshot 3")


def test_vertex_id_out_of_range(esdg_store):
    n = open_store(esdg_store).num_nodes
    rewrite(esdg_store, "dst", lambda dst: dst.__setitem__(7, n))
    assert any(p == f"array 'dst': vertex id {n} at row 7 is outside 0..{n - 1}" for p in validate_store(esdg_store))


def test_negative_vertex_id_in_stream(stream_store):
    rewrite(stream_store, "src", lambda src: src.__setitem__(100, -1))
    assert "array 'src': vertex id -1 at row 100" in only_problem(stream_store)


def test_unsorted_stream_times(stream_store):
    def swap(t):
        t[500], t[501] = t[501], t[500]
    rewrite(stream_store, "t", swap)
    assert "array 't': times not sorted at row 501" in validate_store(stream_store)[0]


def test_missing_array_directory(esdg_store):
    shutil.rmtree(esdg_store / "dst")
    assert "array 'dst': missing from the store directory" in only_problem(esdg_store)


def test_missing_offsets_directory(esdg_store):
    shutil.rmtree(esdg_store / "offsets")
    assert "array 'offsets'" in only_problem(esdg_store) and "missing" in only_problem(esdg_store)


def test_edited_value_breaks_content_hash(esdg_store):
    n = open_store(esdg_store).num_nodes
    rewrite(esdg_store, "src", lambda src: src.__setitem__(0, (src[0] + 1) % n))
    assert "array 'src': content hash differs from the one recorded when written" in validate_store(esdg_store)


def test_edited_attribute_breaks_fingerprint(esdg_store):
    set_attrs(esdg_store, num_nodes=open_store(esdg_store).num_nodes + 1)  # ids still in range
    assert only_problem(esdg_store).startswith("fingerprint: stored ")


def test_edited_fingerprint(stream_store):
    set_attrs(stream_store, fingerprint="0" * 64)
    assert only_problem(stream_store).startswith("fingerprint: stored 000000000000")


def test_unsorted_snapshot_even_when_hashes_match(esdg_store):
    store = open_store(esdg_store)
    dst = store.read("dst")
    a = int(store.offsets[1]) + int(np.flatnonzero(np.diff(dst[store.offsets[1]:store.offsets[2]]))[0])
    rewrite(esdg_store, "dst", lambda dst: dst.__setitem__(slice(a, a + 2), dst[a:a + 2][::-1].copy()))
    reseal(esdg_store)
    assert validate_store(esdg_store) == ["arrays 'src'/'dst': snapshot 1 is not sorted by (dst, src)"]


def test_snapshot_times_out_of_order(tmp_path):
    with store_module.SnapshotStoreWriter(tmp_path / "s.zarr", num_nodes=10, directed=True, cut={},
                                          provenance={}) as writer:
        writer.append_snapshot([1, 2], [3, 4], time=[10, 11])
        writer.append_snapshot([1, 2], [3, 4], time=[5, 20])  # 5 < 11: cut out of time order
        path = writer.close()
    assert only_problem(path) == "array 'time': snapshot 1 holds a time before the end of snapshot 0"


def test_not_a_store_and_incomplete_store(tmp_path, esdg_store):
    assert "not a dgbench store" in only_problem(tmp_path)
    doc = json.loads((esdg_store / "zarr.json").read_text())
    del doc["attributes"]["fingerprint"]
    (esdg_store / "zarr.json").write_text(json.dumps(doc))
    assert "incomplete store" in only_problem(esdg_store)


def test_cli_validate_reports_and_exits_nonzero(esdg_store):
    runner = CliRunner()
    ok = runner.invoke(cli, ["validate", str(esdg_store)])
    assert ok.exit_code == 0 and ok.output.startswith("valid:")
    shutil.rmtree(esdg_store / "dst")
    bad = runner.invoke(cli, ["validate", str(esdg_store)])
    assert bad.exit_code == 1
    assert f"invalid: {esdg_store}: array 'dst': missing from the store directory" in bad.stderr
    assert "Traceback" not in bad.output
