"""The raw-format families `dgbench prepare file --format F` knows, and how a --raw path is opened.

Each family module registers a :class:`Format`: a ``load(path, options) -> Events`` function, the
store kind its data naturally makes, and which files in an unpacked archive or folder are its own.
:func:`open_raw` accepts a file, a folder, or an archive (unpacked safely into a temporary folder
that is removed afterwards) and hands the format the path it should read.
"""
from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dgbench.errors import DgbenchError
from dgbench.files import scratch_dir
from loaders.archives import is_archive, unpack
from loaders.download import file_sha256
from loaders.events import Events, RawFile


@dataclass(frozen=True)
class LoadOptions:
    """Parsing choices shared by every format."""

    drop_partial_last_line: bool = False
    bipartite: bool | None = None  # None: the format's default (JODIE: True, others: False)


@dataclass(frozen=True)
class Format:
    """A raw-format family: how to load it and which files in a folder belong to it."""

    name: str
    summary: str
    natural: str  # "snapshots" or "stream": what `--to` defaults to
    load: Callable[[Path, LoadOptions], Events]
    patterns: tuple[str, ...]  # glob patterns of its main file inside a folder/archive
    folder_input: bool = False  # True: the format reads a whole folder (TGL, AMLSim)


FORMATS: dict[str, Format] = {}


def register_format(name: str, *, summary: str, natural: str, patterns: tuple[str, ...],
                    folder_input: bool = False) -> Callable:
    """Decorator: register ``load(path, options)`` as raw format ``name``."""
    def wrap(load: Callable[[Path, LoadOptions], Events]) -> Callable[[Path, LoadOptions], Events]:
        if name in FORMATS:
            raise ValueError(f"format '{name}' registered twice")
        FORMATS[name] = Format(name, summary, natural, load, patterns, folder_input)
        return load
    return wrap


def get_format(name: str) -> Format:
    if name not in FORMATS:
        raise DgbenchError(f"unknown --format '{name}' (known: {', '.join(sorted(FORMATS))})")
    return FORMATS[name]


@contextlib.contextmanager
def open_raw(raw: Path, fmt: Format, scratch: Path) -> Iterator[tuple[Path, RawFile | None]]:
    """The path ``fmt`` should read for ``raw`` and, for archives, a record of the archive itself."""
    raw = Path(raw)
    if not raw.exists():
        raise DgbenchError(f"--raw {raw}: no such file or folder")
    if raw.is_file() and is_archive(raw):
        scratch.mkdir(parents=True, exist_ok=True)
        folder = scratch_dir(scratch, ".dgbench-unpack")
        try:
            unpacked = unpack(raw, folder / "content")
            archive = RawFile(raw.name, file_sha256(raw), raw.stat().st_size, role="archive")
            yield pick_input(unpacked, fmt), archive
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    yield (raw if raw.is_file() or fmt.folder_input else pick_input(raw, fmt)), None


def pick_input(folder: Path, fmt: Format) -> Path:
    """The format's file in ``folder`` (largest match of its first matching pattern); folder formats: the folder."""
    if fmt.folder_input:
        inner = [p for p in folder.rglob("*") if p.is_file() and any(p.match(g) for g in fmt.patterns)]
        return min((p.parent for p in inner), key=lambda p: len(p.parts), default=folder)
    files = [p for p in folder.rglob("*") if p.is_file()]
    for pattern in fmt.patterns:  # most specific first: an archive's .edges beats its readme.txt
        matches = [p for p in files if p.match(pattern)]
        if matches:
            return max(matches, key=lambda p: p.stat().st_size)
    raise DgbenchError(f"{folder}: no {fmt.name} file in it (looked for {', '.join(fmt.patterns)})")
