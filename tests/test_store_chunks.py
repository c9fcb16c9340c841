"""Reads straight from chunk files (dgbench/store/chunks.py) return what zarr returns and refuse what it would."""
from __future__ import annotations

import numpy as np
import pytest

import dgbench.store.write as store_write
from dgbench.errors import StoreError
from dgbench.store import EdgeStreamStoreWriter, open_store
from dgbench.store.chunks import direct_layout

EVENTS, NODES = 5_000, 300


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(store_write, "CHUNK_ELEMENTS", 512)  # many chunks, some partly read


def write_stream(path, *, features: bool = True):
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, NODES, EVENTS), rng.integers(0, NODES, EVENTS)
    src[1024:2048] = 0  # whole chunks of zeros are never written: they must read back as zeros
    with EdgeStreamStoreWriter(path, num_nodes=NODES, directed=True, provenance={},
                               edge_feature_dim=3 if features else 0) as writer:
        writer.append_events(src, dst, np.arange(EVENTS), edge_features=rng.random((EVENTS, 3)) if features else None)
        return writer.close()


@pytest.mark.parametrize("verify", [True, False], ids=["verified", "unverified"])
def test_direct_reads_equal_zarr_reads_for_any_range(tmp_path, small_chunks, verify):
    store = open_store(write_stream(tmp_path / "s.zarr"), verify=verify)
    for name in ("src", "dst", "t", "edge_features"):
        array = store.array(name)
        assert direct_layout(array) is not None  # what the writer writes is read directly
        for start, stop in [(None, None), (0, 1), (100, 1500), (511, 513), (1024, 2048), (4999, None), (7, 7)]:
            np.testing.assert_array_equal(store.read(name, start, stop), array[start:stop])
    assert not store.read("src", 1024, 2048).any()


def test_a_frame_whose_header_disagrees_with_its_file_is_unreadable(tmp_path, small_chunks, monkeypatch):
    """Blosc trusts its header: a cut frame must fail, not decode garbage (unverified reads have no digest)."""
    monkeypatch.setattr(store_write, "COMPRESS_AT_RATIO", None)  # every array compressed, however little
    path = write_stream(tmp_path / "s.zarr", features=False)
    chunk = path / "dst" / "c" / "3"
    chunk.write_bytes(chunk.read_bytes()[:-5])
    store = open_store(path, verify=False)
    with pytest.raises(StoreError, match=r"array 'dst' rows 1000\.\.2000 unreadable .*its header records"):
        store.read("dst", 1000, 2000)
    np.testing.assert_array_equal(store.read("dst", 0, 1000), store.array("dst")[0:1000])



def test_a_forked_child_reads_with_its_own_threads(tmp_path, small_chunks, monkeypatch):
    """Ranks may be forked after the parent read a store: the child must not wait on the parent's threads
    (reads use a pool when READ_THREADS > 1)."""
    import multiprocessing
    import dgbench.store.chunks as chunks
    monkeypatch.setattr(chunks, "READ_THREADS", 2)
    monkeypatch.setattr(chunks, "_POOL", None)
    path = write_stream(tmp_path / "s.zarr", features=False)
    expected = open_store(path).read("dst")
    assert chunks._POOL is not None  # the parent's pool now exists
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        result = pool.apply_async(_read_dst, (str(path),))
        assert np.array_equal(result.get(timeout=60), expected)


def _read_dst(path: str) -> np.ndarray:
    return open_store(path).read("dst")


# --------------------------------------------------------------------------- raw chunks and their checksums

def test_ids_that_barely_compress_are_stored_raw_and_times_compressed(tmp_path, small_chunks):
    store = open_store(write_stream(tmp_path / "s.zarr", features=False))
    assert direct_layout(store.array("src"))[1] is None  # random ids: raw, read straight into place
    assert direct_layout(store.array("t"))[1] is not None  # 0, 1, 2, ...: compressed
    assert (store.path / "src" / "c" / "1").stat().st_size == 512 * store.array("src").dtype.itemsize


@pytest.mark.parametrize("damage", ["flip", "truncate", "swap", "extend"])
def test_a_damaged_raw_chunk_is_one_line_naming_the_file(tmp_path, small_chunks, damage):
    path = write_stream(tmp_path / "s.zarr", features=False)
    chunk = path / "dst" / "c" / "1"
    data = bytearray(chunk.read_bytes())
    if damage == "flip":
        data[len(data) // 3] ^= 0x01
    elif damage == "truncate":
        data = data[:-4]
    elif damage == "swap":
        data = bytearray((path / "dst" / "c" / "2").read_bytes())
    else:
        data += b"\0" * 8
    chunk.write_bytes(bytes(data))
    store = open_store(path)
    with pytest.raises(StoreError, match=r"array 'dst': file 'dst/c/1' differs from the one written") as error:
        store.read("dst")
    assert "\n" not in str(error.value)
    np.testing.assert_array_equal(store.read("dst", 0, 512), open_store(path, verify=False).read("dst", 0, 512))


def test_stores_without_checksums_are_verified_with_their_sha256_digests(tmp_path, small_chunks):
    """Stores written before file checksums existed keep being read and verified (file_digests)."""
    path = write_stream(tmp_path / "s.zarr", features=False)
    expected = open_store(path).read("dst")
    _rewrite_checksums(path, None)
    assert "file_checksums" not in open_store(path).attrs
    np.testing.assert_array_equal(open_store(path).read("dst"), expected)
    chunk = path / "dst" / "c" / "1"
    data = bytearray(chunk.read_bytes())
    data[7] ^= 0x40
    chunk.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"file 'dst/c/1' differs from the one written"):
        open_store(path).read("dst")


ALGORITHMS = ["xxh3-128", "crc32"]  # what stores are written with now, and what stores written before recorded


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_file_checksum_catches_every_single_bit_flip_a_length_change_and_a_word_swap(algorithm):
    from dgbench.store.format import file_checksum
    data = np.random.default_rng(3).integers(0, 256, 203, dtype=np.uint8).tobytes()  # not a whole number of words
    reference = file_checksum(data, algorithm)
    assert reference == file_checksum(bytearray(data), algorithm) == file_checksum(np.frombuffer(data, np.uint8),
                                                                                   algorithm)
    for byte in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[byte] ^= 1 << bit
            assert file_checksum(flipped, algorithm) != reference, (byte, bit)
    assert file_checksum(data + b"\0", algorithm) != reference and file_checksum(data[:-1], algorithm) != reference
    swapped = data[8:16] + data[:8] + data[16:]
    assert file_checksum(swapped, algorithm) != reference


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_file_checksum_catches_two_flipped_sign_bits(algorithm):
    """Two flipped top bits of 64-bit words (two float64 signs negated) cancel in a position-weighted sum
    modulo 2^64 with odd weights, the check tried before CRC-32; CRC-32 catches every pair of bit errors
    in a file this size, and XXH3-128 misses none of these pairs either."""
    from dgbench.store.format import file_checksum
    data = np.random.default_rng(6).standard_normal(64).tobytes()
    reference = file_checksum(data, algorithm)
    for first in range(64):
        for second in range(first + 1, 64):
            values = np.frombuffer(data, np.float64).copy()
            values[[first, second]] *= -1
            assert file_checksum(values.tobytes(), algorithm) != reference, (first, second)


def test_the_file_checksums_are_the_standard_functions_of_a_writable_buffer():
    """The documented checks (docs/store-format.md) are standard XXH3-128 and CRC-32, so any reader can
    recompute them, and a raw chunk's read checks the writable buffer it read into, the same value."""
    import binascii
    import xxhash
    from dgbench.store.format import CHECKSUM_ALGORITHM, CHECKSUM_CHARS, file_checksum
    data = np.random.default_rng(4).integers(0, 256, 100_003, dtype=np.uint8).tobytes()
    assert CHECKSUM_ALGORITHM == "xxh3-128"
    assert file_checksum(data) == f"{xxhash.xxh3_128_intdigest(data):032x}"
    assert file_checksum(data, "crc32") == f"{binascii.crc32(data):08x}"
    buffer = memoryview(np.frombuffer(data, np.uint8).copy()).cast("B")
    for algorithm, chars in CHECKSUM_CHARS.items():
        assert file_checksum(buffer, algorithm) == file_checksum(data, algorithm)
        assert len(file_checksum(data, algorithm)) == chars


def _rewrite_checksums(path, algorithm):
    """The store as it would have been written when its per-read check was ``algorithm`` (None: no
    ``file_checksums`` at all, as before they existed); everything else, fingerprint included, unchanged."""
    import json
    from dgbench.store.format import file_checksum, store_files
    doc = json.loads((path / "zarr.json").read_text())
    attrs = doc["attributes"]
    del attrs["file_checksum_algorithm"]
    if algorithm is None:
        del attrs["file_checksums"]
    else:
        attrs["file_checksums"] = {key: file_checksum(f.read_bytes(), algorithm)
                                   for key, f in store_files(path).items()}
    (path / "zarr.json").write_text(json.dumps(doc))


def _flip(chunk, where: int = 7) -> None:
    data = bytearray(chunk.read_bytes())
    data[where] ^= 0x40
    chunk.write_bytes(bytes(data))


def test_new_stores_record_xxh3_and_every_read_checks_it(tmp_path, small_chunks):
    """A store written now names its check; a wrong recorded value fails the read although the file is
    intact and the right size (the read compares, not only reads), as does a flipped raw or compressed chunk."""
    import json
    from dgbench.store.format import file_checksum
    path = write_stream(tmp_path / "s.zarr", features=False)
    attrs = open_store(path).attrs
    assert attrs["file_checksum_algorithm"] == "xxh3-128"
    assert all(len(value) == 32 for value in attrs["file_checksums"].values())
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"]["file_checksums"]["dst/c/1"] = file_checksum(b"another file")
    (path / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(StoreError, match=r"file 'dst/c/1' differs from the one written"):
        open_store(path).read("dst")
    other = write_stream(tmp_path / "o.zarr", features=False)
    for name in ("dst", "t"):  # raw (read into place) and lz4 (read, then decoded)
        _flip(other / name / "c" / "1")
        with pytest.raises(StoreError, match=rf"file '{name}/c/1' differs from the one written"):
            open_store(other).read(name)


def test_stores_written_with_crc32_keep_verifying_with_it(tmp_path, small_chunks):
    """Stores whose ``file_checksums`` are CRC-32 (written before the algorithm was recorded) read the same,
    validate clean with the same fingerprint, and a flipped byte in them is still refused."""
    from dgbench.store.validate import validate_store
    path = write_stream(tmp_path / "s.zarr", features=False)
    before = open_store(path)
    expected = {name: before.read(name) for name in ("src", "dst", "t")}
    _rewrite_checksums(path, "crc32")
    store = open_store(path)
    assert store.fingerprint == before.fingerprint and "file_checksum_algorithm" not in store.attrs
    assert all(len(value) == 8 for value in store.attrs["file_checksums"].values())
    for name, values in expected.items():
        np.testing.assert_array_equal(store.read(name), values)
    assert validate_store(path) == []
    for name in ("dst", "t"):
        _flip(path / name / "c" / "1")
        with pytest.raises(StoreError, match=rf"file '{name}/c/1' differs from the one written"):
            open_store(path).read(name)


def test_an_unknown_checksum_algorithm_is_refused_at_open(tmp_path, small_chunks):
    import json
    path = write_stream(tmp_path / "s.zarr", features=False)
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"]["file_checksum_algorithm"] = "md5"
    (path / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(StoreError, match=r"attribute 'file_checksum_algorithm' is 'md5', expected one of crc32, "
                                         r"xxh3-128"):
        open_store(path)


def test_validate_names_a_file_whose_recorded_checksum_is_wrong(tmp_path, small_chunks):
    import json
    from dgbench.store.validate import validate_store
    path = write_stream(tmp_path / "s.zarr", features=False)
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"]["file_checksums"]["src/c/1"] = "0" * 32
    (path / "zarr.json").write_text(json.dumps(doc))
    assert validate_store(path) == ["file 'src/c/1': differs from the checksum recorded when written"]


def test_a_chunk_folder_replaced_by_a_link_out_of_the_store_is_refused(tmp_path, small_chunks):
    import shutil
    path = write_stream(tmp_path / "s.zarr", features=False)
    outside = tmp_path / "outside"
    shutil.move(path / "src" / "c", outside)
    (path / "src" / "c").symlink_to(outside, target_is_directory=True)
    for verify in (True, False):
        with pytest.raises(StoreError, match=r"file 'src/c/0' is not a regular file inside the store"):
            open_store(path, verify=verify).read("src")


def test_a_flip_anywhere_in_a_whole_raw_chunk_is_caught(tmp_path, monkeypatch):
    """Raw chunks (1 MiB here) are read into place whole and checked in one pass: every byte counts, also
    when the kernel hands the file over in several reads."""
    import os
    rng = np.random.default_rng(5)
    events = 300_000
    with EdgeStreamStoreWriter(tmp_path / "s.zarr", num_nodes=NODES, directed=True, provenance={}) as writer:
        writer.append_events(rng.integers(0, NODES, events), rng.integers(0, NODES, events), np.arange(events))
        path = writer.close()
    chunk = path / "src" / "c" / "0"
    original = chunk.read_bytes()
    assert direct_layout(open_store(path).array("src"))[1] is None and len(original) >= 1 << 20
    readv = os.readv
    monkeypatch.setattr(os, "readv", lambda fd, buffers: readv(fd, [buffers[0][:100_000]]))  # short reads
    expected = open_store(path).read("src")
    for where in (0, len(original) // 2 + 5, len(original) - 1):
        damaged = bytearray(original)
        damaged[where] ^= 0x02
        chunk.write_bytes(bytes(damaged))
        with pytest.raises(StoreError, match=r"file 'src/c/0' differs from the one written"):
            open_store(path).read("src")
    chunk.write_bytes(original)
    np.testing.assert_array_equal(open_store(path).read("src"), expected)


def test_the_fingerprint_does_not_depend_on_the_per_read_check(tmp_path, small_chunks, monkeypatch):
    """The same events written with either per-read check give the same fingerprint and file digests (the
    content identity records and boards cite); only ``file_checksums`` and its algorithm differ."""
    new = open_store(write_stream(tmp_path / "new.zarr", features=False)).attrs
    monkeypatch.setattr(store_write, "CHECKSUM_ALGORITHM", "crc32")
    old = open_store(write_stream(tmp_path / "old.zarr", features=False)).attrs
    assert (new["file_checksum_algorithm"], old["file_checksum_algorithm"]) == ("xxh3-128", "crc32")
    assert new["fingerprint"] == old["fingerprint"] and new["file_digests"] == old["file_digests"]
    assert new["file_checksums"].keys() == old["file_checksums"].keys()
    assert all(new["file_checksums"][key] != old["file_checksums"][key] for key in new["file_checksums"])


# --------------------------------------------------------------------------- one thread or a pool

def _plant_id(path, name: str, row: int, value: int) -> str:
    """Write ``value`` at ``row`` of array ``name`` through zarr (its codec, raw or lz4) and record the
    changed chunk file's checksum, as a writer that skipped the id check would: only the range check can
    refuse it. Returns the chunk file's key."""
    import json
    import zarr
    from dgbench.store.format import file_checksum
    zarr.open_group(str(path), mode="r+")[name][row] = value
    key = f"{name}/c/{row // 512}"
    doc = json.loads((path / "zarr.json").read_text())
    doc["attributes"]["file_checksums"][key] = file_checksum((path / key).read_bytes())
    (path / "zarr.json").write_text(json.dumps(doc))
    return key


@pytest.mark.parametrize("threads", [1, 2], ids=["one-thread", "pool"])
@pytest.mark.parametrize("compress_at", [4.0, None], ids=["raw-ids", "lz4-ids"])
def test_reads_in_one_thread_or_a_pool_are_equal_verified_and_range_checked(tmp_path, small_chunks, monkeypatch,
                                                                            threads, compress_at):
    """Whatever thread count reads the chunks, and whether ids are stored raw or lz4, a read returns what
    zarr does, a flipped chunk fails its checksum and an id >= N planted with a valid checksum fails the
    range check."""
    import dgbench.store.chunks as chunks
    monkeypatch.setattr(store_write, "COMPRESS_AT_RATIO", compress_at)
    monkeypatch.setattr(chunks, "READ_THREADS", threads)
    monkeypatch.setattr(chunks, "_POOL", None)
    path = write_stream(tmp_path / "s.zarr", features=False)
    store = open_store(path)
    assert (direct_layout(store.array("dst"))[1] is None) == (compress_at is not None)
    for name in ("src", "dst", "t"):
        np.testing.assert_array_equal(store.read(name), store.array(name)[:])
    _plant_id(path, "dst", 700, NODES + 5)
    with pytest.raises(StoreError, match=rf"array 'dst': vertex id {NODES + 5} at row 700 is outside 0\.\.{NODES - 1}"):
        open_store(path).read("dst")
    assert open_store(path, verify=False).read("dst")[700] == NODES + 5  # the file holds it: the check refused it
    for name in ("dst", "t"):
        _flip(path / name / "c" / "3")
        with pytest.raises(StoreError, match=rf"file '{name}/c/3' differs from the one written"):
            open_store(path).read(name, 3 * 512)  # past the planted id
