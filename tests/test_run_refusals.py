"""Issue 19 through `dgbench run`: a damaged or forged store is refused with one line and no record
(items 5-7), a record never leaves its --out or replaces a file (6), and --out is checked before
training (11)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import zarr
from click.testing import CliRunner

import dgbench.store as store_module
from dgbench.store.format import file_checksum
from dgbench.cli import cli
from dgbench.records import prepare_output, record_filename, write_record

RUN = ["--quiet", "run", "--scheme", "single", "--model", "tmgcn", "--epochs", "1"]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    from dgbench.generators.esdg_random import build
    return build(out=tmp_path / "s.zarr", nodes=64, snapshots=4, edge_factor=3.0, seed=1)


def run(store: Path, out: Path):
    return CliRunner().invoke(cli, [*RUN, "--dataset", str(store), "--out", str(out)])


def one_line_error(result, *fragments: str) -> str:
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output and "unexpected" not in errors[0], result.output
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def reseal(path: Path) -> None:
    """Make every recorded digest and the fingerprint agree with the content again (a careful forger)."""
    meta = path / "zarr.json"
    doc = json.loads(meta.read_text())
    attrs = doc["attributes"]
    group = zarr.open_group(str(path), mode="r")
    for name, digest in attrs["arrays"].items():
        hasher = hashlib.sha256()
        store_module.array_digest_update(hasher, group[name][:])
        digest["sha256"] = hasher.hexdigest()
    attrs["fingerprint"] = store_module.combine_fingerprint(
        attrs["kind"], store_module.fingerprint_header(attrs["kind"], attrs), attrs["arrays"])
    contents = {k: f.read_bytes() for k, f in store_module.store_files(path).items()}
    attrs["file_digests"] = {k: store_module.file_digest(data) for k, data in contents.items()}
    attrs["file_checksums"] = {k: file_checksum(data) for k, data in contents.items()}
    meta.write_text(json.dumps(doc))


def test_run_refuses_a_store_whose_content_no_longer_matches_its_fingerprint(store, tmp_path):
    src = zarr.open_group(str(store), mode="r+")["src"]
    src[10] = (src[10] + 1) % 64  # one value changed, still a valid id: decodes fine, trains fine
    one_line_error(run(store, tmp_path / "runs"), "array 'src'", "differs from the one written")
    assert not list((tmp_path / "runs").glob("*.json"))


def test_run_refuses_a_store_with_a_flipped_byte(store, tmp_path):
    chunk = store / "dst" / "c" / "0"
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0x01
    chunk.write_bytes(bytes(data))
    one_line_error(run(store, tmp_path / "runs"), "array 'dst'", "differs from the one written")
    assert not list((tmp_path / "runs").glob("*.json"))


def test_run_refuses_non_monotone_offsets(store, tmp_path):
    offsets = zarr.open_group(str(store), mode="r+")["offsets"]
    values = offsets[:]
    values[1], values[2] = values[2], values[1]
    offsets[:] = values
    reseal(store)
    one_line_error(run(store, tmp_path / "runs"), "array 'offsets': decreasing at snapshot 1")
    assert not list((tmp_path / "runs").glob("*.json"))


def test_run_names_an_id_beyond_the_vertex_count(store, tmp_path):
    src = zarr.open_group(str(store), mode="r+")["src"]
    src[5] = 64
    reseal(store)
    one_line_error(run(store, tmp_path / "runs"), "array 'src': vertex id 64 at row 5 is outside 0..63")


def test_a_provenance_name_cannot_place_the_record_outside_out(store, tmp_path):
    meta = store / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["provenance"]["generator"] = "/../../../escaped/evil"
    meta.write_text(json.dumps(doc))
    one_line_error(run(store, tmp_path / "runs"), "attribute 'provenance.generator'")
    assert not (tmp_path / "escaped").exists()


def test_record_file_names_are_built_from_safe_tokens_only(tmp_path):
    record = {"scheme": "../x", "model": "m/../../y", "world_size": 2, "started_at": "2026-01-02T03:04:05+00:00",
              "dataset": {"name": "/../../../escaped/evil"}}
    name = record_filename(record)
    assert "/" not in name and not name.startswith(".") and name.endswith("-p2-20260102T030405.json"), name
    written = write_record({**record, "epochs": []}, tmp_path / "runs")
    assert written.parent == tmp_path / "runs" and not (tmp_path / "escaped").exists()


def test_a_result_file_is_never_replaced(tmp_path):
    record = {"scheme": "single", "model": "tmgcn", "world_size": 1, "started_at": "2026-01-02T03:04:05+00:00",
              "dataset": {"name": "esdg-random"}}
    first = write_record({**record, "n": 1}, tmp_path / "runs")
    second = write_record({**record, "n": 2}, tmp_path / "runs")  # same second, same setup: same name
    assert first != second and second.name == first.name.replace(".json", "-2.json")
    assert json.loads(first.read_text())["n"] == 1 and json.loads(second.read_text())["n"] == 2
    chosen = tmp_path / "mine.json"
    chosen.write_text("keep")
    assert write_record(record, chosen) == tmp_path / "mine-2.json" and chosen.read_text() == "keep"


def test_out_is_checked_before_training(store, tmp_path, monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(store_module, "open_store", no_training)  # every run opens its store first
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    one_line_error(run(store, blocker / "x.json"), "is a file, not a folder for result records")
    one_line_error(run(store, blocker / "sub" / "x.json"), "cannot write the result record there", "before training")
    taken = tmp_path / "taken.json"
    taken.write_text("an earlier result")
    one_line_error(run(store, taken), "already exists; a result file is never replaced")
    assert taken.read_text() == "an earlier result"
    assert prepare_output(tmp_path / "new" / "folder") == tmp_path / "new" / "folder"
