"""Datasets by name: every data store of the official board (leaderboards/official_stores.json) as a
registry entry — where its raw file is published (https), the raw file's sha256 where known, how the
store is made from it, the official fingerprint it must reproduce, and its dataset card (docs/datasets/).

`dgbench prepare NAME` downloads the raw file into the cache (resumable, checksummed: loaders/download.py),
builds the store in a hidden folder, and installs it only when its fingerprint is the official one. A
slice (LastFM) is defined on the upstream file: its header and first N data lines, byte for byte.
Without network the error says in one line where to put the file. See docs/datasets/README.md.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from dgbench.errors import DgbenchError
from dgbench.files import scratch_dir
from dgbench.registry import register_preparer
from dgbench.store import open_store
from dgbench.store.replace import check_replaceable, install_store
from dgbench.loaders.download import RemoteFile, default_cache_dir, fetch, file_sha256
from dgbench.loaders.formats import get_format
from dgbench.loaders.prepare import build_store, load_options

NR_DYNAMIC = "https://nrvis.com/download/data/dynamic"


@dataclass(frozen=True)
class Card:
    """What a dataset card says: source, licence, size and what to cite (the full card: ``page``)."""

    source: str
    licence: str
    size: str
    citation: str
    page: str  # docs/datasets/<name>.md


@dataclass(frozen=True)
class Slice:
    """The first ``rows`` data lines of the upstream file, after its ``header_lines`` (bytes kept as they are)."""

    rows: int
    header_lines: int = 1


@dataclass(frozen=True)
class BoardDataset:
    """An official store by name: its raw file, how it is prepared, and the fingerprint that results."""

    name: str
    format: str
    remote: RemoteFile  # what is downloaded (sha256: of that file, None where no one has published it)
    fingerprint: str  # leaderboards/official_stores.json
    card: Card
    read_sha256: str | None = None  # sha256 of the file the loader reads (inside an archive), where known
    member: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # `dgbench prepare file` options
    slice: Slice | None = None

    def summary(self) -> str:
        return f"board store: {self.card.size}"


def _card(name: str, source: str, licence: str, size: str, citation: str) -> Card:
    return Card(source, licence, size, citation, f"docs/datasets/{name}.md")


# The raw files' facts (sha256, sources, licences) are those of ../shared/data/*/PROVENANCE.md, where the
# same files were checked byte for byte; a sha256 of None is unknown here and pinned by the first download.
BOARD_DATASETS = {d.name: d for d in (
    BoardDataset(
        "amlsim-20k", "amlsim",
        RemoteFile("https://raw.githubusercontent.com/IBM/AMLSim/7338a4bcb1af9bcfea2201ad7daccfe2a4d569ca/sample/"
                   "20K_fanin200cycle200.tgz", "20K_fanin200cycle200.tgz", page="https://github.com/IBM/AMLSim"),
        "23008b6c594866d460070c310fe5e9f20b0d2072f910fa6303a2127ab6c0e21d",
        _card("amlsim-20k", "IBM AMLSim sample/20K_fanin200cycle200.tgz (git blob 5a996cac)", "Apache-2.0",
              "20,000 accounts, 120,558 transactions, 149 steps",
              "Weber et al., Scalable Graph Learning for Anti-Money Laundering, KDD AML workshop 2018")),
    BoardDataset(
        "collegemsg", "snap",
        RemoteFile("https://snap.stanford.edu/data/CollegeMsg.txt.gz", "CollegeMsg.txt.gz",
                   page="https://snap.stanford.edu/data/CollegeMsg.html"),
        "2f3aadc4092812db475d968fd9113d5bf16057ad2034dbbce1aa04d5bbdf85a1",
        _card("collegemsg", "SNAP CollegeMsg", "none stated; SNAP asks to cite the source paper",
              "1,899 vertices, 59,835 messages, 193 days (CollegeMsg.txt: 1,150,439 bytes)",
              "Panzarasa, Opsahl, Carley, Patterns and dynamics of users' behavior and interaction, JASIST 2009"),
        read_sha256="e00ba2415373dee52c00616065bcceaa4750e78de60d1855c76470600f10740f"),
    BoardDataset(
        "fb-forum", "network-repository",
        RemoteFile(f"{NR_DYNAMIC}/fb-forum.zip", "fb-forum.zip", page="https://networkrepository.com/fb-forum.php"),
        "55e4db67c532cc3e022362b6d1db3dde6712ca8720521def0c3114165c27b081",
        _card("fb-forum", "Network Repository fb-forum (T. Opsahl)", "CC BY-SA (Network Repository)",
              "899 vertices, 33,720 events (fb-forum.edges: 626,372 bytes)",
              "Rossi and Ahmed, The Network Data Repository, AAAI 2015; Opsahl, Social Networks 2013"),
        read_sha256="4aa6ba14f2440e582e1cec3357ef9a4ac8020fe72ec6b31a7ff746e291356088", member="fb-forum.edges"),
    BoardDataset(
        "ia-enron-employees-weekly", "network-repository",
        RemoteFile(f"{NR_DYNAMIC}/ia-enron-employees.zip", "ia-enron-employees.zip",
                   page="https://networkrepository.com/ia-enron-employees.php"),
        "5e28d797ced9bf07b5e36b8925d814b38fa1e634fc532653f28d89425e673ce7",
        _card("ia-enron-employees-weekly", "Network Repository ia-enron-employees", "CC BY-SA (Network Repository)",
              "151 vertices, 50,572 e-mails, weekly snapshots (ia-enron-employees.edges: 959,661 bytes)",
              "Rossi and Ahmed, The Network Data Repository, AAAI 2015"),
        read_sha256="550a509fdbbfa31dba52a7de85bc42ade8937bb1134c83bf5a3d8391061aeb34",
        member="ia-enron-employees.edges", options={"window": "7d"}),
    BoardDataset(
        "lastfm-slice", "jodie",
        RemoteFile("https://snap.stanford.edu/jodie/lastfm.csv", "lastfm.csv", page="https://snap.stanford.edu/jodie/"),
        "0206af5caafe8d943f468a2ac0628f9fce8a2018d82ec5bf6c40c34581d87fd4",
        _card("lastfm-slice", "JODIE lastfm.csv (Stanford SNAP): its first 108,501 events", "none stated",
              "1,049 vertices, 108,501 events of the full file's 1,293,103",
              "Kumar, Zhang, Leskovec, Predicting Dynamic Embedding Trajectory in Temporal Interaction Networks, "
              "KDD 2019"),
        slice=Slice(rows=108_501)),
    BoardDataset(
        "wikipedia", "jodie",
        RemoteFile("https://raw.githubusercontent.com/TantalizingPotato/TE-Conv/b0806ccf5eaa13d31821b6f50b5c48c41f77b9b6/"
                   "data/wikipedia.csv", "wikipedia.csv",
                   "b68d35966dd1c013bce7432184778eb6edb0766ad65cd66bb5ca7ed9876c81ab",
                   page="https://snap.stanford.edu/jodie/ (the board's store is TGN's re-indexed copy, no features)"),
        "43f8dc03e525b322db3fd9acef9c796315f5b23c2375554ae3a7bce866969867",
        _card("wikipedia", "JODIE wikipedia.csv as re-written by TGN's preprocessing (u,i,ts,label; features "
              "dropped), the copy in TantalizingPotato/TE-Conv at b0806cc", "none stated",
              "9,227 vertices, 157,474 edits (3,168,762 bytes)",
              "Kumar, Zhang, Leskovec, KDD 2019; Rossi et al., Temporal Graph Networks, 2020")),
)}


def first_rows(source: Path, cut: Slice, target: Path) -> Path:
    """Write ``cut``'s lines of ``source`` (header, then the first ``cut.rows`` data lines, each ended by its
    newline) to ``target``; a file with fewer complete data lines is refused."""
    wanted = cut.header_lines + cut.rows
    written = 0
    with open(source, "rb") as reading, open(target, "wb") as out:
        for line in reading:
            if not line.endswith(b"\n"):
                break
            out.write(line)
            written += 1
            if written == wanted:
                return target
    raise DgbenchError(f"{source}: has {max(0, written - cut.header_lines):,} complete data lines; the slice is "
                       f"its first {cut.rows:,}")


def _check_read_file(dataset: BoardDataset, store_path: Path) -> None:
    """The file the loader read is the registered one, where its sha256 is known."""
    if dataset.read_sha256 is None:
        return
    read = [raw.get("sha256") for raw in open_store(store_path).provenance.get("raw", [])]
    if dataset.read_sha256 not in read:
        raise DgbenchError(f"{dataset.name}: the file read has sha256 {', '.join(map(str, read))}, not the "
                           f"registered {dataset.read_sha256} (see {dataset.card.page})")


def build_board_store(dataset: BoardDataset, out: Path, *, raw: Path | None, cache_dir: Path | None,
                      overwrite: bool = False) -> Path:
    """Fetch (or take ``raw``), slice, parse, check the file read and the fingerprint, then install at ``out``:
    a store whose fingerprint is not the official one is never left at ``out``."""
    out = Path(out)
    check_replaceable(out, overwrite)
    source = raw if raw is not None else fetch(dataset.remote, (cache_dir or default_cache_dir()) / dataset.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = scratch_dir(out.parent, f".{out.name}.board")
    try:
        extra: dict[str, Any] = {"board_dataset": dataset.name, "card": dataset.card.page,
                                 "download_urls": [dataset.remote.url] if raw is None else []}
        if dataset.slice is not None:
            extra["slice"] = {"first_rows": dataset.slice.rows, "of": Path(source).name,
                              "of_sha256": file_sha256(Path(source))}
            source = first_rows(Path(source), dataset.slice, scratch / Path(source).name)
        options = dict(dataset.options)
        built = build_store(raw=Path(source), fmt=get_format(dataset.format), out=scratch / "store.zarr",
                            overwrite=False, to=None, window=options.pop("window", "auto"), duplicates="keep",
                            options=load_options(member=dataset.member, **options), source=dataset.name, extra=extra)
        _check_read_file(dataset, built)
        found = open_store(built).fingerprint
        if found != dataset.fingerprint:
            raise DgbenchError(f"{dataset.name}: the store made from {Path(source).name} has fingerprint {found[:12]}, "
                               f"not the official {dataset.fingerprint[:12]}; nothing was written to {out} "
                               f"(see {dataset.card.page})")
        install_store(built, out, overwrite)
        return out
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _register(dataset: BoardDataset) -> None:
    options = [click.Option(["--raw"], type=click.Path(path_type=Path), default=None,
                            help=f"Use this copy of {dataset.remote.filename} instead of downloading it."),
               click.Option(["--cache-dir"], type=click.Path(path_type=Path), default=None,
                            help="Where downloads are kept (default $DGBENCH_CACHE or ~/.cache/dgbench/raw).")]

    def build(out: Path, overwrite: bool = False, *, raw: Path | None = None, cache_dir: Path | None = None) -> Path:
        return build_board_store(dataset, out, raw=raw, cache_dir=cache_dir, overwrite=overwrite)

    build.__doc__ = dataset.summary()
    register_preparer(dataset.name, kind="dataset", produces="stream" if dataset.format == "jodie" else "snapshots",
                      options=options, summary=dataset.summary())(build)


for _dataset in BOARD_DATASETS.values():
    _register(_dataset)
