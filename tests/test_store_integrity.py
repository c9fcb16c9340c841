"""Issue 19, stores: nothing lost, nothing mixed, nothing trained on that the fingerprint does not describe.

Each test reproduces one case of the adversarial pass (numbers as in the issue): --overwrite of what
is not a store (1), two writers racing for one path (2), a reader while the store is replaced (3), a
kill between the two renames of a replacement (4), a damaged store opened for training (5), store
attributes that reach file names (6) and an id >= N (7).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import dgbench.store as store_module
import dgbench.store.replace as replace_module
from dgbench.cli import cli
from dgbench.errors import StoreError
from dgbench.store import SnapshotStoreWriter, open_store
from dgbench.store.format import file_checksum
from dgbench.store.validate import validate_store

N = 40
ROOT = Path(__file__).resolve().parents[1]
TINY_ESDG = ["--quiet", "prepare", "esdg-random", "--nodes", "64", "--snapshots", "2"]


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of 500 elements, so tiny stores span several chunk files."""
    monkeypatch.setattr(store_module.write, "CHUNK_ELEMENTS", 500)


def write_store(path: Path, seed: int, overwrite: bool = False, snapshots: int = 4, edges: int = 600,
                provenance: dict | None = None) -> Path:
    rng = np.random.default_rng(seed)
    with SnapshotStoreWriter(path, num_nodes=N, directed=True, cut={"method": "test"},
                             provenance=provenance or {"generator": "test"}, overwrite=overwrite) as writer:
        for _ in range(snapshots):
            writer.append_snapshot(rng.integers(0, N, edges), rng.integers(0, N, edges),
                                   weight=rng.random(edges).astype(np.float32))
        return writer.close()


def content(path: Path) -> str:
    """sha256 of every snapshot as an opened store reads it (raises StoreError when it cannot)."""
    store = open_store(path)
    hasher = hashlib.sha256()
    for snap in store.snapshots():
        for column in (snap.src, snap.dst, snap.weight):
            hasher.update(column.tobytes())
    return hasher.hexdigest()


def set_attrs(path: Path, **changes) -> None:
    meta = path / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"].update(changes)
    meta.write_text(json.dumps(doc))


def reseal(path: Path) -> None:
    """Recompute every recorded digest and the fingerprint, as a careful forger would."""
    attrs = store_module.read_attrs(path)
    group = zarr.open_group(str(path), mode="r")
    for name, digest in attrs["arrays"].items():
        hasher = hashlib.sha256()
        store_module.array_digest_update(hasher, group[name][:])
        digest["sha256"] = hasher.hexdigest()
    header = store_module.fingerprint_header(attrs["kind"], attrs)
    contents = {key: f.read_bytes() for key, f in store_module.store_files(path).items()}
    set_attrs(path, arrays=attrs["arrays"], fingerprint=store_module.combine_fingerprint(attrs["kind"], header,
                                                                                           attrs["arrays"]),
              file_digests={key: store_module.file_digest(data) for key, data in contents.items()},
              file_checksums={key: file_checksum(data) for key, data in contents.items()})


def one_line_error(result, *fragments: str) -> str:
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


# --------------------------------------------------------------------------- 1. --overwrite replaces only a store

def test_overwrite_refuses_a_folder_that_is_not_a_store(tmp_path):
    important = tmp_path / "important"
    important.mkdir()
    (important / "notes.txt").write_text("x")
    result = CliRunner().invoke(cli, [*TINY_ESDG, "-o", str(important), "--overwrite"])
    one_line_error(result, "not a dgbench store", "--overwrite replaces only a dgbench store")
    assert (important / "notes.txt").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["important"]  # no scratch left either


def test_overwrite_refuses_a_store_folder_holding_other_files_a_file_and_a_link(tmp_path):
    store = write_store(tmp_path / "s.zarr", seed=0)
    (store / "my-notes.txt").write_text("keep me")
    with pytest.raises(StoreError, match="also holds 1 other entries .my-notes.txt."):
        write_store(store, seed=1, overwrite=True)
    assert (store / "my-notes.txt").exists()
    plain = tmp_path / "plain.zarr"
    plain.write_text("a file")
    with pytest.raises(StoreError, match="a file, not a store folder"):
        write_store(plain, seed=1, overwrite=True)
    link = tmp_path / "link.zarr"
    link.symlink_to(write_store(tmp_path / "target.zarr", seed=2), target_is_directory=True)
    with pytest.raises(StoreError, match="symbolic link"):
        write_store(link, seed=1, overwrite=True)
    assert plain.read_text() == "a file" and link.is_symlink()


def test_convert_overwrite_refuses_a_folder_that_is_not_a_store(tmp_path, stream_store):
    important = tmp_path / "important"
    important.mkdir()
    (important / "notes.txt").write_text("x")
    result = CliRunner().invoke(cli, ["--quiet", "convert", str(stream_store), "--window", "1d", "-o", str(important),
                                      "--overwrite"])
    one_line_error(result, "--overwrite replaces only a dgbench store")
    assert (important / "notes.txt").read_text() == "x"


def test_overwrite_replaces_a_store(tmp_path):
    path = write_store(tmp_path / "s.zarr", seed=0)
    replaced = write_store(path, seed=1, overwrite=True)
    assert content(replaced) == content(write_store(tmp_path / "b.zarr", seed=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.zarr", "s.zarr"]


# --------------------------------------------------------------------------- 2. two writers, one path

def test_second_writer_to_the_same_path_fails_and_the_first_store_stays(tmp_path):
    path = tmp_path / "s.zarr"
    rng = np.random.default_rng(0)
    first = SnapshotStoreWriter(path, num_nodes=N, directed=True, cut={}, provenance={})
    second = SnapshotStoreWriter(path, num_nodes=N, directed=True, cut={}, provenance={})  # both checked: free
    for writer in (first, second):
        writer.append_snapshot(rng.integers(0, N, 50), rng.integers(0, N, 50))
    fingerprint = open_store(first.close()).fingerprint
    with pytest.raises(StoreError, match="another writer created a store here while this one was writing"):
        second.close()
    assert open_store(path).fingerprint == fingerprint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]  # the loser's temporary store is gone


def test_two_concurrent_prepares_one_wins_one_fails_clearly(tmp_path):
    """Scripted race: two `dgbench prepare` processes to one --out at the same moment."""
    out = tmp_path / "race.zarr"
    command = [sys.executable, "-m", "dgbench", *TINY_ESDG, "-o", str(out)]
    procs = [subprocess.Popen([*command, "--seed", str(seed)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    results = [(proc.wait(timeout=120), proc.stdout.read(), proc.stderr.read()) for proc in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], results
    loser = next(err for code, _, err in results if code == 1)
    assert "already exists" in loser or "another writer created a store here" in loser, loser
    winner = next(out_ for code, out_, _ in results if code == 0)
    assert open_store(out).fingerprint[:16] in winner  # the store at the path is the winner's


# --------------------------------------------------------------------------- 3. reading while replaced

def test_a_reader_sees_one_version_or_fails_when_the_store_is_replaced_under_it(tmp_path):
    path = write_store(tmp_path / "s.zarr", seed=0)
    version_a = content(write_store(tmp_path / "a.zarr", seed=0))
    reader = open_store(path)
    first = reader.snapshot(0)
    write_store(path, seed=1, overwrite=True)  # replaced between two reads of one opened store
    try:
        rest = [reader.snapshot(t) for t in range(1, reader.num_snapshots)]
    except StoreError as exc:
        assert "replaced while it was read" in str(exc)
        return
    hasher = hashlib.sha256()
    for snap in [first, *rest]:
        for column in (snap.src, snap.dst, snap.weight):
            hasher.update(column.tobytes())
    assert hasher.hexdigest() == version_a, "the reader mixed two versions of the store"


def test_a_rank_opening_the_path_later_can_insist_on_the_store_the_job_started_on(tmp_path):
    path = write_store(tmp_path / "s.zarr", seed=0)
    started_on = open_store(path).fingerprint
    assert open_store(path, fingerprint=started_on).fingerprint == started_on
    write_store(path, seed=1, overwrite=True)
    with pytest.raises(StoreError, match="but the run started on .* .the store was replaced meanwhile."):
        open_store(path, fingerprint=started_on)


REPLACER = textwrap.dedent("""
    import sys, time
    import numpy as np
    import dgbench.store as store_module
    import dgbench.store.write
    dgbench.store.write.CHUNK_ELEMENTS = 500
    path, until = sys.argv[1], time.monotonic() + float(sys.argv[2])
    seed = 0
    while time.monotonic() < until:
        seed = 1 - seed
        rng = np.random.default_rng(seed)
        with store_module.SnapshotStoreWriter(path, num_nodes=40, directed=True, cut={"method": "test"},
                                              provenance={"generator": "test"}, overwrite=True) as writer:
            for _ in range(4):
                writer.append_snapshot(rng.integers(0, 40, 600), rng.integers(0, 40, 600),
                                       weight=rng.random(600).astype(np.float32))
            writer.close()
""")


def test_readers_racing_a_replacing_writer_never_mix_versions(tmp_path):
    """Scripted race: a process replaces the store with --overwrite in a loop for 3 s while this one reads."""
    versions = {content(write_store(tmp_path / f"v{seed}.zarr", seed=seed)) for seed in (0, 1)}
    path = write_store(tmp_path / "s.zarr", seed=0)
    replacer = subprocess.Popen([sys.executable, "-c", REPLACER, str(path), "3"], cwd=ROOT)
    whole, failed = 0, 0
    try:
        while replacer.poll() is None:
            try:
                assert content(path) in versions, "a read mixed two versions of the store"
                whole += 1
            except StoreError:
                failed += 1  # failing is allowed; mixing is not
    finally:
        replacer.wait(timeout=60)
    assert replacer.returncode == 0 and whole > 0, (whole, failed)


# --------------------------------------------------------------------------- 4. killed mid-replacement

KILLED_BETWEEN_RENAMES = textwrap.dedent("""
    import os, sys
    import numpy as np
    import dgbench.store as store_module
    import dgbench.store.replace
    dgbench.store.replace._exchange = lambda source, target: False  # a system without renameat2: two renames
    real_rename, final = os.rename, sys.argv[1]
    def rename(source, target):
        real_rename(source, target)
        if str(source) == final:  # the old store was moved aside: die before the new one goes in
            os._exit(9)
    os.rename = rename
    with store_module.SnapshotStoreWriter(final, num_nodes=40, directed=True, cut={}, provenance={},
                                          overwrite=True) as writer:
        writer.append_snapshot(np.arange(10), np.arange(10))
        writer.close()
""")


def test_a_kill_between_the_two_renames_leaves_a_store_the_next_prepare_puts_back(tmp_path):
    path = write_store(tmp_path / "s.zarr", seed=0)
    before = content(path)
    killed = subprocess.run([sys.executable, "-c", KILLED_BETWEEN_RENAMES, str(path)], cwd=ROOT)
    assert killed.returncode == 9
    assert not path.exists() and len(list(tmp_path.glob(".s.zarr.old-pid*"))) == 1  # the state a kill leaves
    with pytest.raises(StoreError, match="a store already exists"):
        write_store(path, seed=1)  # the next writer (no --overwrite) puts the old store back, then refuses
    assert content(path) == before and validate_store(path) == []
    assert list(tmp_path.glob(".s.zarr.*")) == []


def test_the_next_overwrite_after_a_kill_replaces_the_put_back_store(tmp_path):
    path = write_store(tmp_path / "s.zarr", seed=0)
    subprocess.run([sys.executable, "-c", KILLED_BETWEEN_RENAMES, str(path)], cwd=ROOT)
    write_store(path, seed=1, overwrite=True)
    assert content(path) == content(write_store(tmp_path / "b.zarr", seed=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.zarr", "s.zarr"]


# --------------------------------------------------------------------------- 5. damaged stores are refused

def test_a_flipped_byte_is_refused_on_read(tmp_path):
    path = write_store(tmp_path / "s.zarr", seed=0)
    chunk = path / "dst" / "c" / "1"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x10
    chunk.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="array 'dst': file 'dst/c/1' differs from the one written"):
        content(path)


def test_non_monotone_offsets_are_refused_on_open_even_when_resealed(tmp_path):
    path = write_store(tmp_path / "s.zarr", seed=0)
    offsets = zarr.open_group(str(path), mode="r+")["offsets"]
    values = offsets[:]
    values[1], values[2] = values[2], values[1]
    offsets[:] = values
    with pytest.raises(StoreError, match="array 'offsets'"):
        open_store(path)  # the offsets file differs from the one written
    reseal(path)  # digests and fingerprint made consistent again: the structure is still checked
    with pytest.raises(StoreError, match="array 'offsets': decreasing at snapshot 1"):
        open_store(path)


def test_an_edited_size_attribute_is_refused_on_open(tmp_path):
    path = write_store(tmp_path / "s.zarr", seed=0)
    set_attrs(path, num_nodes=N + 1)
    with pytest.raises(StoreError, match="fingerprint: stored .* but the store's attributes give"):
        open_store(path)


def test_a_store_relabelled_with_another_fingerprint_is_refused_on_open(tmp_path):
    official = open_store(write_store(tmp_path / "official.zarr", seed=0, snapshots=6))
    small = write_store(tmp_path / "small.zarr", seed=1)
    set_attrs(small, fingerprint=official.fingerprint, num_snapshots=official.num_snapshots,
              num_edges=official.num_edges)
    with pytest.raises(StoreError, match="zarr"):
        open_store(small)
    # ... and with the official store's array hashes copied too, the arrays on disk do not match them
    set_attrs(small, arrays=official.attrs["arrays"])
    with pytest.raises(StoreError, match="small.zarr: array '(offsets|src|dst|weight)'"):
        content(small)


def test_the_fingerprint_of_every_array_is_checked_for_stores_without_file_digests(tmp_path):
    """Stores written before file digests existed: each array is hashed whole on its first read."""
    path = write_store(tmp_path / "s.zarr", seed=0)
    doc = json.loads((path / "zarr.json").read_text())
    del doc["attributes"]["file_digests"], doc["attributes"]["file_checksums"]
    (path / "zarr.json").write_text(json.dumps(doc))
    assert content(path) == content(write_store(tmp_path / "same.zarr", seed=0))
    src = zarr.open_group(str(path), mode="r+")["src"]
    src[3] = (src[3] + 1) % N
    with pytest.raises(StoreError, match="array 'src': content differs from the hash recorded"):
        content(path)


# --------------------------------------------------------------------------- 6. attributes reaching file names

@pytest.mark.parametrize("name", ["/../../../escaped/evil", "..", "a\nb", "x" * 201, 12])
def test_unsafe_dataset_names_in_provenance_are_refused_on_open(tmp_path, name):
    path = write_store(tmp_path / "s.zarr", seed=0)
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"]["provenance"]["generator"] = name  # provenance is not in the fingerprint
    (path / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(StoreError, match="attribute 'provenance.generator'") as caught:
        open_store(path)
    assert len(str(caught.value)) < 400 and "\n" not in str(caught.value)
    assert validate_store(path)[0].startswith("attribute 'provenance.generator'")


def test_array_names_cannot_leave_the_store(tmp_path):
    path = write_store(tmp_path / "s.zarr", seed=0)
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"]["arrays"]["../outside"] = doc["attributes"]["arrays"]["src"]
    (path / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(StoreError, match="array name '../outside' is not a plain lowercase name"):
        open_store(path)


# --------------------------------------------------------------------------- 7. an id >= N

def test_an_id_beyond_the_vertex_count_is_one_line_naming_the_array(tmp_path):
    path = write_store(tmp_path / "s.zarr", seed=0)
    src = zarr.open_group(str(path), mode="r+")["src"]
    src[700] = N + 5
    reseal(path)  # even a store whose digests were all recomputed
    store = open_store(path)
    with pytest.raises(StoreError, match=rf"array 'src': vertex id {N + 5} at row 700 is outside 0..{N - 1}"):
        list(store.snapshots())


def test_a_long_attribute_is_cut_in_the_message(tmp_path):
    path = write_store(tmp_path / "s.zarr", seed=0)
    set_attrs(path, num_nodes="9" * 100_000)
    with pytest.raises(StoreError) as caught:
        open_store(path)
    assert "attribute 'num_nodes'" in str(caught.value) and len(str(caught.value)) < 400


def test_replacement_is_one_exchange_so_the_path_always_holds_a_store(tmp_path, monkeypatch):
    path = write_store(tmp_path / "s.zarr", seed=0)
    real_exchange = replace_module._exchange
    observed = []

    def exchange(source, target):
        observed.append(os.path.exists(target / "zarr.json"))  # before
        done = real_exchange(source, target)
        observed.append(os.path.exists(target / "zarr.json"))  # after
        return done

    monkeypatch.setattr(replace_module, "_exchange", exchange)
    write_store(path, seed=1, overwrite=True)
    assert observed == [True, True]
    assert content(path) == content(write_store(tmp_path / "b.zarr", seed=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.zarr", "s.zarr"]
