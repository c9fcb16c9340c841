"""Atomic file writes and crash-safe scratch folders.

Content goes to a temporary file beside the target, then is renamed into place, so a reader never
sees a half-written record, board page or registry; :func:`create_new` never replaces an existing file
(result records). Scratch folders (temporary stores, unpacked
archives, a store being replaced) carry their process id, so a later run removes what a killed one
left behind.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

STAMP = "-pid"  # <prefix>-pid<pid>-<random>: whose scratch folder it is


def write_atomic(path: str | Path, content: str) -> Path:
    """Write ``content`` to ``path`` (readable by everyone, like a normal file) in one rename."""
    path = Path(path)
    tmp = _temporary_beside(path, content)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _temporary_beside(path: Path, content: str) -> str:
    """``content`` in a new hidden file beside ``path`` (same file system, so a rename is atomic), mode 0644."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        os.chmod(tmp, 0o644)  # mkstemp makes it private
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def create_new(path: str | Path, content: str, attempts: int = 1000) -> Path:
    """Write ``content`` to a new file at ``path`` atomically, never replacing one: when the name is taken,
    ``<stem>-2<suffix>``, ``<stem>-3<suffix>``... (the first free one, claimed by a hard link, which fails
    when the name exists, so two writers never get the same name). Returns the path written."""
    path = Path(path)
    tmp = _temporary_beside(path, content)
    try:
        for number in range(1, attempts + 1):
            target = path if number == 1 else path.with_name(f"{path.stem}-{number}{path.suffix}")
            try:
                _claim(tmp, target, content)
                return target
            except FileExistsError:
                continue
        raise FileExistsError(f"{path}: {attempts} names taken")
    finally:
        Path(tmp).unlink(missing_ok=True)


def _claim(tmp: str, target: Path, content: str) -> None:
    """Give ``tmp``'s content the name ``target`` unless it exists (FileExistsError)."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: exclusive create, then write
        with open(target, "x", encoding="utf-8") as f:
            f.write(content)
        os.chmod(target, 0o644)


def scratch_dir(parent: str | Path, prefix: str, create: bool = True) -> Path:
    """A new hidden folder ``parent/<prefix>-pid<pid>-<random>``, after removing the ones of that prefix
    that killed runs left (:func:`remove_stale`). With ``create=False`` only the name is chosen (for an
    atomic rename)."""
    remove_stale(parent, prefix)
    path = Path(parent) / f"{prefix}{STAMP}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if create:
        path.mkdir(parents=True)
    return path


def remove_stale(parent: str | Path, prefix: str) -> None:
    """Delete the scratch folders ``prefix`` names in ``parent`` whose process no longer runs."""
    for path in stale_scratch(parent, prefix):
        shutil.rmtree(path, ignore_errors=True)


def stale_scratch(parent: str | Path, prefix: str) -> list[Path]:
    """The scratch folders ``prefix`` names in ``parent`` whose process no longer runs, oldest first."""
    stale = []
    for path in Path(parent).glob(f"{prefix}{STAMP}*"):
        try:
            pid = int(path.name[len(prefix) + len(STAMP):].split("-")[0])
        except ValueError:
            continue
        if not _pid_alive(pid):
            stale.append(path)
    return sorted(stale, key=_modified)


def _modified(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
