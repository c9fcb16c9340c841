"""Datasets by name (loaders/catalogue.py): every official board data store has a registry entry, `dgbench
prepare NAME` reproduces the official fingerprint from the registered raw file (downloaded into the cache or
given with --raw), refuses anything else without leaving a store, and says offline where to put the file."""
from __future__ import annotations

import json
import shutil
import socket
import tarfile
import urllib.error
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.errors import DgbenchError
from dgbench.store import open_store
from dgbench.loaders.catalogue import BOARD_DATASETS, Slice, build_board_store, first_rows

REPO = Path(__file__).resolve().parents[1]


def _official_data_stores() -> dict[str, str]:
    stores = json.loads((REPO / "leaderboards" / "official_stores.json").read_text())["stores"]
    return {s["name"]: s["fingerprint"] for s in stores if s["source"] == "dataset"}


def test_every_official_data_store_has_an_entry_with_its_fingerprint() -> None:
    assert {name: d.fingerprint for name, d in BOARD_DATASETS.items()} == _official_data_stores()


@pytest.mark.parametrize("name", sorted(BOARD_DATASETS))
def test_entry_is_https_with_a_card(name: str) -> None:
    dataset = BOARD_DATASETS[name]
    assert dataset.remote.url.startswith("https://")
    assert (REPO / dataset.card.page).is_file()
    assert all([dataset.card.source, dataset.card.licence, dataset.card.size, dataset.card.citation])


def test_offline_prepare_says_where_to_put_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args, **kwargs):
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr("dgbench.loaders.download.urllib.request.urlopen", offline)
    cache = tmp_path / "cache"
    result = CliRunner().invoke(cli, ["--quiet", "prepare", "collegemsg", "--cache-dir", str(cache),
                                      "--out", str(tmp_path / "c.zarr")])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert str(cache / "collegemsg" / "CollegeMsg.txt.gz") in result.output and "--raw" in result.output
    assert not (tmp_path / "c.zarr").exists()


def test_first_rows_is_header_and_complete_lines(tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_bytes(b"a,b\r\n1,2\r\n3,4\r\n5,")
    assert first_rows(source, Slice(rows=2), tmp_path / "two.csv").read_bytes() == b"a,b\r\n1,2\r\n3,4\r\n"
    with pytest.raises(DgbenchError, match="has 2 complete data lines; the slice is its first 3"):
        first_rows(source, Slice(rows=3), tmp_path / "three.csv")


# --------------------------------------------------------------------------- real files

@pytest.mark.realdata
@pytest.mark.parametrize("name, raw", [
    ("collegemsg", "snap_CollegeMsg/CollegeMsg.txt"),
    ("ia-enron-employees-weekly", "networkrepository_dynamic/ia-enron-employees.edges"),
    ("lastfm-slice", "jodie_lastfm/lastfm.csv")])
def test_prepare_by_name_reproduces_the_official_fingerprint(name: str, raw: str, shared_data: Path,
                                                             tmp_path: Path) -> None:
    """LastFM: the shared file is a cut-off copy of the upstream file; its first 108,501 lines are the slice."""
    result = CliRunner().invoke(cli, ["--quiet", "prepare", name, "--raw", str(shared_data / raw),
                                      "--out", str(tmp_path / "s.zarr")])
    assert result.exit_code == 0, result.output
    store = open_store(tmp_path / "s.zarr")
    assert store.fingerprint == BOARD_DATASETS[name].fingerprint
    assert store.provenance["board_dataset"] == name


@pytest.mark.realdata
def test_cached_file_with_the_registered_sha256_is_used(shared_data: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args, **kwargs):
        raise AssertionError("a cached file with the registered sha256 is not downloaded again")

    monkeypatch.setattr("dgbench.loaders.download.urllib.request.urlopen", offline)
    cache = tmp_path / "cache" / "wikipedia"
    cache.mkdir(parents=True)
    shutil.copy(shared_data / "jodie_wikipedia_tgn" / "wikipedia.csv", cache / "wikipedia.csv")
    path = build_board_store(BOARD_DATASETS["wikipedia"], tmp_path / "w.zarr", raw=None, cache_dir=tmp_path / "cache")
    assert open_store(path).fingerprint == BOARD_DATASETS["wikipedia"].fingerprint


@pytest.mark.realdata
def test_amlsim_archive_gives_the_official_store(shared_data: Path, tmp_path: Path) -> None:
    """Upstream ships a .tgz of the run's folder (and PNG plots); the folder read from it is the official store."""
    archive = tmp_path / "20K_fanin200cycle200.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(shared_data / "amlsim" / "ibm_amlsim_sample_20K" / "20K_fanin200cycle200", "20K_fanin200cycle200")
    path = build_board_store(BOARD_DATASETS["amlsim-20k"], tmp_path / "a.zarr", raw=archive, cache_dir=None)
    assert open_store(path).fingerprint == BOARD_DATASETS["amlsim-20k"].fingerprint


@pytest.mark.realdata
def test_other_file_is_refused_and_leaves_no_store(shared_data: Path, tmp_path: Path) -> None:
    lines = (shared_data / "jodie_wikipedia_tgn" / "wikipedia.csv").read_bytes().splitlines(keepends=True)
    short = tmp_path / "wikipedia.csv"
    short.write_bytes(b"".join(lines[:2000]))
    with pytest.raises(DgbenchError, match="not the official 43f8dc03e525; nothing was written"):
        build_board_store(BOARD_DATASETS["wikipedia"], tmp_path / "w.zarr", raw=short, cache_dir=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wikipedia.csv"]
    with pytest.raises(DgbenchError, match="not the registered 4aa6ba14"):
        build_board_store(BOARD_DATASETS["fb-forum"], tmp_path / "f.zarr",
                          raw=shared_data / "networkrepository_dynamic" / "ia-enron-employees.edges", cache_dir=None)
    assert not (tmp_path / "f.zarr").exists()
