"""Safe unpacking of raw-data archives (.zip, .tar, .tar.gz/.tgz/.tar.bz2/.tar.xz, .gz, .bz2, .xz).

Members are checked before anything is written: no absolute paths, no ``..``, no links or device
files, and the declared total size is bounded (``max_bytes``) as is the expansion ratio
(``max_ratio``, zip-bomb guard). Bytes are counted while they are written, so an archive that lies
about its sizes is stopped at the limit too. Everything is unpacked into a fresh directory.
"""
from __future__ import annotations

import bz2
import gzip
import lzma
import os
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from collections.abc import Callable
from typing import IO, BinaryIO

from dgbench.errors import DgbenchError

MAX_BYTES = int(os.environ.get("DGBENCH_MAX_UNPACK_BYTES", 512 << 30))
MAX_RATIO = 1000  # text edge lists compress ~3-20x; a 1000x expansion is a bomb, not a dataset
RATIO_FREE_BYTES = 64 << 20  # small archives may expand by any ratio up to this size
COPY_BLOCK = 1 << 20
SINGLE_FILE = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")


class UnsafeArchive(DgbenchError):
    """An archive that would write outside its folder, hold links, or expand without bound."""


def is_archive(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(TAR_SUFFIXES) or path.suffix.lower() in (".zip", *SINGLE_FILE)


def unpack(archive: Path, dest: Path, *, max_bytes: int = MAX_BYTES, max_ratio: float = MAX_RATIO) -> Path:
    """Unpack ``archive`` into the new directory ``dest`` (must not exist); returns ``dest``."""
    archive, dest = Path(archive), Path(dest)
    limit = _byte_limit(archive, max_bytes, max_ratio)
    dest.mkdir(parents=True)
    try:
        name = archive.name.lower()
        if name.endswith(".zip"):
            _unpack_zip(archive, dest, limit)
        elif name.endswith(TAR_SUFFIXES):
            _unpack_tar(archive, dest, limit)
        else:
            opener = SINGLE_FILE[archive.suffix.lower()]
            with opener(archive, "rb") as source, open(dest / archive.stem, "wb") as target:
                _copy_limited(source, target, limit, archive)
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, lzma.LZMAError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise DgbenchError(f"{archive}: cannot unpack ({exc}); the download may be incomplete") from exc
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def _byte_limit(archive: Path, max_bytes: int, max_ratio: float) -> int:
    return int(min(max_bytes, max(RATIO_FREE_BYTES, archive.stat().st_size * max_ratio)))


def _safe_member(archive: Path, name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise UnsafeArchive(f"{archive}: member '{name}' would be written outside the unpack folder; refused")
    return path


def _check_total(archive: Path, declared: int, limit: int) -> None:
    if declared > limit:
        raise UnsafeArchive(f"{archive}: would expand to {declared:,} bytes (limit {limit:,}: "
                            f"a zip bomb or a wrong file); refused")


def _write_members(archive: Path, dest: Path, limit: int,
                   members: list[tuple[str, bool, Callable[[], BinaryIO]]]) -> None:
    """Write (name, is_dir, open) members under ``dest``, stopping once ``limit`` bytes were written
    (declared sizes can lie, so the bytes actually written are what count)."""
    written = 0
    for name, is_dir, open_member in members:
        target = dest / _safe_member(archive, name)
        if is_dir:
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with open_member() as source, open(target, "wb") as out:
            written += _copy_limited(source, out, limit - written, archive)


def _unpack_zip(archive: Path, dest: Path, limit: int) -> None:
    with zipfile.ZipFile(archive) as bundle:
        members = bundle.infolist()
        for info in members:
            _safe_member(archive, info.filename)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise UnsafeArchive(f"{archive}: member '{info.filename}' is a symbolic link; refused")
        _check_total(archive, sum(info.file_size for info in members), limit)
        _write_members(archive, dest, limit, [(info.filename, info.is_dir(), lambda info=info: bundle.open(info))
                                              for info in members])


def _unpack_tar(archive: Path, dest: Path, limit: int) -> None:
    with tarfile.open(archive) as bundle:
        members = bundle.getmembers()
        for member in members:
            _safe_member(archive, member.name)
            if not (member.isfile() or member.isdir()):
                raise UnsafeArchive(f"{archive}: member '{member.name}' is a link or device file; refused")
        _check_total(archive, sum(m.size for m in members if m.isfile()), limit)
        _write_members(archive, dest, limit, [(m.name, m.isdir(), lambda m=m: bundle.extractfile(m))
                                              for m in members])


def _copy_limited(source: IO[bytes], target: IO[bytes], budget: int, archive: Path) -> int:
    """Copy until EOF, refusing to write more than ``budget`` bytes; returns the bytes written."""
    written = 0
    while chunk := source.read(COPY_BLOCK):
        written += len(chunk)
        if written > budget:
            raise UnsafeArchive(f"{archive}: expands beyond the unpack limit (a zip bomb or a wrong file); refused")
        target.write(chunk)
    return written
