"""Putting a finished store in place atomically: rename without replacing, or exchange with the previous
store (renameat2), and recovering an interrupted replacement (docs/store-format.md, "Writing")."""
from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any


from dgbench.errors import StoreError
from dgbench.files import remove_stale, scratch_dir, stale_scratch
from dgbench.store.format import SCHEMA_NAMES


_AT_FDCWD, _RENAME_NOREPLACE, _RENAME_EXCHANGE = -100, 1, 2


def not_a_store(path: Path) -> str | None:
    """Why ``path`` may not be replaced by a store (None when it is a dgbench store and nothing else).

    Only a dgbench store is ever replaced: anything else at the path (a file, a link, a folder without
    a dgbench zarr.json, or a store folder holding other files) stays, and the writer refuses."""
    if path.is_symlink():
        return "a symbolic link (replace only real store folders)"
    if not path.is_dir():
        return "a file, not a store folder"
    try:
        attrs = json.loads((path / "zarr.json").read_text()).get("attributes", {})
    except (OSError, ValueError, AttributeError):
        return "a folder that is not a dgbench store (no readable zarr.json)"
    if not isinstance(attrs, dict) or attrs.get("schema") not in SCHEMA_NAMES.values():
        return "a folder that is not a dgbench store (its zarr.json has no dgbench schema)"
    declared = attrs.get("arrays") if isinstance(attrs.get("arrays"), dict) else {}
    foreign = sorted(entry.name for entry in path.iterdir() if entry.name != "zarr.json" and entry.name not in declared)
    if foreign:
        return f"a store folder that also holds {len(foreign)} other entries ({', '.join(foreign[:3])})"
    return None


def _renameat2(source: Path, target: Path, flags: int) -> bool:
    """Linux renameat2; False where the C library or the file system does not offer it."""
    function = getattr(_LIBC, "renameat2", None) if _LIBC is not None else None
    if function is None:
        return False
    if function(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(source), None, str(target))


def _load_libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    except OSError:
        return None


_LIBC = _load_libc()


def rename_no_replace(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` in one step that fails (FileExistsError) when ``target`` exists.

    Without renameat2, a plain rename still fails on an existing non-empty folder (every store is one),
    and the existence check only narrows the window for anything else."""
    if _renameat2(source, target, _RENAME_NOREPLACE):
        return
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, "exists", str(target))
    try:
        os.rename(source, target)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise FileExistsError(errno.EEXIST, "exists", str(target)) from exc
        raise


def _exchange(source: Path, target: Path) -> bool:
    """Swap two paths atomically (False where unsupported): the target never stops holding a store."""
    return _renameat2(source, target, _RENAME_EXCHANGE)


def _replace_in_two_renames(new: Path, final: Path) -> None:
    """The fallback without renameat2: move the old store aside, then the new one in. A writer killed
    between the two leaves the old store as .<name>.old-pid<pid>-*; the next writer puts it back."""
    old = scratch_dir(final.parent, f".{final.name}.old", create=False)
    os.rename(final, old)
    os.rename(new, final)
    shutil.rmtree(old, ignore_errors=True)


def recover_interrupted_replacement(final: Path) -> Path | None:
    """Put back the previous store a writer killed mid-replacement left aside, when nothing is at the
    path; delete left-aside copies when the path holds a store (the kill came after the new store went
    in). Returns the copy put back, if any."""
    leftovers = stale_scratch(final.parent, f".{final.name}.old")
    restored = None
    if leftovers and not os.path.lexists(final):
        candidates = [p for p in leftovers if not_a_store(p) is None]
        if candidates:
            try:
                rename_no_replace(candidates[-1], final)  # the newest: the store the path held last
                restored = candidates[-1]
                sys.stderr.write(f"note: {final}: put back the previous store that an interrupted replacement "
                                 f"had moved to {restored.name}\n")
            except FileExistsError:
                pass  # another writer put it back first
    if os.path.lexists(final):
        for leftover in leftovers:
            if leftover != restored:
                shutil.rmtree(leftover, ignore_errors=True)
    remove_stale(final.parent, f".{final.name}.tmp")  # a killed writer's unfinished store
    return restored


def check_replaceable(path: Path, overwrite: bool) -> None:
    """Refuse to write where something exists, unless ``overwrite`` and it is a dgbench store."""
    if not os.path.lexists(path):
        return
    reason = not_a_store(path)
    if not overwrite:
        if reason is None:
            raise StoreError(f"{path}: a store already exists (pass --overwrite to replace it)")
        raise StoreError(f"{path}: already exists and is {reason}; choose another --out")
    if reason is not None:
        raise StoreError(f"{path}: is {reason}; --overwrite replaces only a dgbench store")


def install_store(new: Path, final: Path, overwrite: bool) -> None:
    """Move the finished store ``new`` to ``final`` in one atomic step: never over anything unless
    ``overwrite`` and ``final`` is a dgbench store, which is then exchanged for the new one (and deleted)."""
    try:
        rename_no_replace(new, final)
        return
    except FileExistsError:
        if not overwrite:
            raise StoreError(f"{final}: another writer created a store here while this one was writing; "
                             f"it is kept (pass --overwrite to replace it)") from None
    check_replaceable(final, overwrite=True)
    if not _exchange(new, final):
        _replace_in_two_renames(new, final)
        return
    replaced = not_a_store(new)  # ``new`` now holds what was at the path
    if replaced is not None:  # it changed since the check: put it back untouched
        _exchange(new, final)
        raise StoreError(f"{final}: became {replaced} while the store was written; it is kept")
    shutil.rmtree(new, ignore_errors=True)
