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

from dgbench.errors import DgbenchError, InputError
from dgbench.files import scratch_dir
from dgbench.loaders.archives import TAR_SUFFIXES, is_archive, unpack
from dgbench.loaders.download import file_sha256
from dgbench.loaders.events import Events, RawFile


@dataclass(frozen=True)
class LoadOptions:
    """Parsing choices shared by every format."""

    drop_partial_last_line: bool = False
    bipartite: bool | None = None  # None: the format's default (JODIE: True, others: False)
    member: str | None = None  # which dataset/file of a folder or archive holding several (--member)
    columns: str | None = None  # "src,dst,time[,weight][,label]" as header names or 1-based positions
    time_unit: str | None = None  # unit of numeric times (None: the format's own, seconds for most)
    force: bool = False  # write the store even when a plausibility guard finds the file looks misread


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
TIME_UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}  # per second


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


@dataclass(frozen=True)
class RawInput:
    """What a format reads for a --raw path: the path, the archive record, and the member's own name."""

    path: Path
    archive: RawFile | None = None
    member: str | None = None  # the file's path inside the archive/folder it was picked from


@contextlib.contextmanager
def open_raw(raw: Path, fmt: Format, scratch: Path, member: str | None = None) -> Iterator[RawInput]:
    """The input ``fmt`` should read for ``raw`` (a file, a folder, or an archive unpacked into scratch).

    Errors raised inside name archive members as ``ARCHIVE:path/inside``, never the scratch copy.
    """
    raw = Path(raw)
    if not raw.exists():
        raise DgbenchError(f"--raw {raw}: no such file or folder")
    if raw.is_file() and is_archive(raw):
        scratch.mkdir(parents=True, exist_ok=True)
        folder = scratch_dir(scratch, ".dgbench-unpack")
        try:
            with members_named_in(raw, folder / "content"):
                unpacked = unpack(raw, folder / "content")
                archive = RawFile(raw.name, file_sha256(raw), raw.stat().st_size, role="archive")
                path = pick_input(unpacked, fmt, member, shown=str(raw), stem=archive_stem(raw))
                yield RawInput(path, archive, _inside(path, unpacked))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    if raw.is_file() or (fmt.folder_input and member is None):
        yield RawInput(raw)
        return
    path = pick_input(raw, fmt, member, shown=str(raw), stem=raw.name)
    yield RawInput(path, None, _inside(path, raw))


def archive_stem(archive: Path) -> str:
    """``fb-forum.tar.gz`` -> ``fb-forum``: the name a member matching the archive would have."""
    name = archive.name
    for suffix in (*TAR_SUFFIXES, ".zip", ".gz", ".bz2", ".xz"):
        if name.lower().endswith(suffix):
            return name[:-len(suffix)]
    return archive.stem


def _inside(path: Path, root: Path) -> str | None:
    return None if path == root else path.relative_to(root).as_posix()


@contextlib.contextmanager
def members_named_in(archive: Path, content: Path) -> Iterator[None]:
    """Rewrite errors that name the unpacked copy so they name ``ARCHIVE:member/path`` instead."""
    try:
        yield
    except InputError as exc:
        raise InputError(_renamed(exc.file, archive, content), _renamed(exc.problem, archive, content),
                         exc.line, exc.field) from None
    except DgbenchError as exc:
        message = str(exc)
        if str(content) in message:
            raise DgbenchError(_renamed(message, archive, content)) from None
        raise


def _renamed(text: str, archive: Path, content: Path) -> str:
    return text.replace(f"{content}/", f"{archive}:").replace(str(content), str(archive))


def pick_input(folder: Path, fmt: Format, member: str | None = None, *, shown: str | None = None,
               stem: str = "") -> Path:
    """The format's file in ``folder``: the one ``member`` names, else the only match of the format's
    most specific pattern, else the match named like the archive/folder; several others are refused.

    Folder formats get the shallowest folder holding their file. Sizes never decide (a large decoy
    member must not win silently).
    """
    shown = shown or str(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    if member is not None:
        return _named_member(folder, files, member, fmt, shown)
    if fmt.folder_input:
        return _only_folder(folder, files, fmt, shown)
    for pattern in fmt.patterns:  # most specific first: an archive's .edges beats its readme.txt
        matches = [p for p in files if p.match(pattern)]
        if len(matches) == 1:
            return matches[0]
        named = [p for p in matches if stem and _is_named(p, stem, fmt)]
        if len(named) == 1:
            return named[0]
        if matches:
            listed = ", ".join(p.relative_to(folder).as_posix() for p in matches[:8])
            raise DgbenchError(f"{shown}: holds {len(matches)} {fmt.name} files ({listed}"
                               f"{', ...' if len(matches) > 8 else ''}); choose one with --member PATH")
    raise DgbenchError(f"{shown}: no {fmt.name} file in it (looked for {', '.join(fmt.patterns)})")


def _only_folder(folder: Path, files: list[Path], fmt: Format, shown: str) -> Path:
    """The shallowest folder holding the format's files; several at that depth are refused, named."""
    parents = sorted({p.parent for p in files if any(p.match(g) for g in fmt.patterns)})
    if not parents:
        return folder
    depth = min(len(p.parts) for p in parents)
    shallowest = [p for p in parents if len(p.parts) == depth]
    if len(shallowest) > 1:
        listed = ", ".join(p.relative_to(folder).as_posix() or "." for p in shallowest[:8])
        raise DgbenchError(f"{shown}: holds {len(shallowest)} {fmt.name} folders ({listed}); "
                           f"choose one with --member PATH")
    return shallowest[0]


def _is_named(path: Path, name: str, fmt: Format) -> bool:
    """``path`` is called ``name``: its file name, its name without extensions, or the format's
    pattern with ``name`` for the star (``wikipedia`` names TGN's ``ml_wikipedia.csv``)."""
    name, own = name.lower(), path.name.lower()
    return name in (own, own.split(".")[0]) or any(own == g.lower().replace("*", name) for g in fmt.patterns)


def _named_member(folder: Path, files: list[Path], member: str, fmt: Format, shown: str) -> Path:
    """The file or folder ``member`` names: a path inside ``folder``, or a file's name / name stem."""
    exact = folder / member
    if (exact.is_dir() if fmt.folder_input else exact.is_file()) and exact.resolve().is_relative_to(folder.resolve()):
        return exact
    matches = [p for p in files if _is_named(p, member, fmt)]
    if len(matches) == 1:
        return matches[0].parent if fmt.folder_input else matches[0]
    inside = ", ".join(p.relative_to(folder).as_posix() for p in files[:12])
    raise DgbenchError(f"{shown}: --member {member!r} names {len(matches) or 'no'} file"
                       f"{'' if len(matches) == 1 else 's'} in it (it holds: {inside}"
                       f"{', ...' if len(files) > 12 else ''})")
