"""The compiled sampler kernels (sis_kernels.cpp): built with the system C++ compiler at first use, cached,
and loaded with ctypes; ``None`` when no compiler is available, and callers fall back to the pure-Python
reference (same algorithms, same random numbers, same touch counts; much slower).

Why compiled: the benchmarks compare SIS, ITS and BRS per operation, and a Python loop costs as much
as tens of array elements, which would hide the O(log n) vs O(n) difference the paper is about. All
three are in the same C++ file so the ratios compare algorithms, not languages.

The library is built once per source version into ``$DGBENCH_KERNEL_CACHE`` (default
``~/.cache/dgbench/kernels``; used only when private to this user, else a fresh private temporary folder)
by ``$CXX`` (default ``g++``), written under an unpredictable temporary name and renamed, so ranks
starting together do not race; its hash is recorded beside it and checked before every load, and a
library without the kernels' symbols falls back to Python with a warning. ``DGBENCH_SIS_BACKEND`` =
``auto`` (default: native if it builds, else Python), ``native`` (fail if it does not build) or ``python``.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import warnings
from ctypes import POINTER, c_double, c_int, c_int64, c_uint64, c_void_p
from importlib import resources
from pathlib import Path

import numpy as np

from dgbench.errors import DgbenchError

SOURCE = resources.files(__package__) / "sis_kernels.cpp"  # package data (pyproject.toml)
FLAGS = ["-O2", "-std=c++17", "-shared", "-fPIC"]
BACKENDS = ("auto", "native", "python")

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}

I64P, F64P, U64P = POINTER(c_int64), POINTER(c_double), POINTER(c_uint64)
SIGNATURES = {
    "sis_sample_wor": (c_int64, [c_int, c_int64, I64P, F64P, I64P, I64P, c_int, F64P, c_int64, c_uint64, I64P, I64P]),
    "sis_frontier": (c_int64, [c_int, I64P, I64P, I64P, c_int64, c_int64, c_int64, F64P, c_int64, c_uint64, I64P,
                               I64P, I64P]),
    "sis_multilayer": (c_int64, [c_int, c_int, c_int64, I64P, I64P, I64P, c_int64, c_int64, c_int64, c_double,
                                 c_uint64, I64P, U64P, I64P]),
    "sis_forest_new": (c_void_p, [c_int64, c_double]),
    "sis_forest_free": (None, [c_void_p]),
    "sis_forest_reset": (None, [c_void_p]),
    "sis_forest_append": (c_int64, [c_void_p, c_int64, I64P, I64P, F64P]),
    "sis_forest_sample": (c_int64, [c_void_p, c_int64, I64P, I64P, c_int64, F64P, I64P]),
    "sis_forest_leaf": (c_double, [c_void_p, c_int64, c_int64]),
}


def requested_backend() -> str:
    value = os.environ.get("DGBENCH_SIS_BACKEND", "auto")
    if value not in BACKENDS:
        raise DgbenchError(f"DGBENCH_SIS_BACKEND={value!r}: expected one of {', '.join(BACKENDS)}")
    return value


def _cache_dir() -> Path:
    """``$DGBENCH_KERNEL_CACHE``, else ``~/.cache/dgbench/kernels``, each only if private to this user
    (:func:`_private_folder`); else a fresh private temporary folder with an unpredictable name (built
    again by each process: another user cannot create it first and plant a library there)."""
    configured = os.environ.get("DGBENCH_KERNEL_CACHE")
    folder = Path(configured) if configured else Path.home() / ".cache" / "dgbench" / "kernels"
    try:
        return _private_folder(folder)
    except OSError as exc:
        if configured:
            warnings.warn(f"DGBENCH_KERNEL_CACHE={configured}: {exc}; building in a private temporary folder",
                          stacklevel=3)
        return Path(tempfile.mkdtemp(prefix="dgbench-kernels-"))  # mode 0700, a random name


def _private_folder(folder: Path) -> Path:
    """``folder``, created 0700 if missing; OSError unless it is a real folder this user owns that no one
    else can write to (a library loaded from it runs with this user's rights)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    status = folder.lstat()
    if not stat.S_ISDIR(status.st_mode):
        raise OSError(f"{folder} is not a folder (a link?)")
    if status.st_uid != os.getuid():
        raise OSError(f"{folder} belongs to another user")
    if status.st_mode & 0o022:
        raise OSError(f"{folder} can be written by other users (mode {stat.S_IMODE(status.st_mode):o})")
    return folder


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_library_hash(library_path: Path) -> None:
    """Note the hash of a library just built beside it, for :func:`_verified` to check before loading."""
    sidecar = library_path.with_name(library_path.name + ".sha256")
    partial = Path(tempfile.mkstemp(dir=library_path.parent, prefix=f".{sidecar.name}.")[1])
    partial.write_text(_sha256(library_path) + "\n")
    os.replace(partial, sidecar)


def _verified(library_path: Path) -> bool:
    """Whether ``library_path`` is the library built there: its hash is the one recorded when it was."""
    sidecar = library_path.with_name(library_path.name + ".sha256")
    try:
        return library_path.is_file() and sidecar.read_text().strip() == _sha256(library_path)
    except OSError:
        return False


def _build(compiler: str) -> Path:
    """The kernels built from SOURCE by ``compiler`` (named by their digest), built now unless the cache
    holds a library whose hash is the one recorded when it was built there."""
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join([compiler, *FLAGS]).encode()).hexdigest()[:16]
    folder = _cache_dir()
    target = folder / f"sis_kernels-{digest}.so"
    if _verified(target):
        return target
    fd, name = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".so")  # unpredictable, 0600
    os.close(fd)
    partial = Path(name)
    with resources.as_file(SOURCE) as source:  # a real file for the compiler, wherever the package lies
        result = subprocess.run([compiler, *FLAGS, "-o", str(partial), str(source)], capture_output=True, text=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise OSError(f"{compiler} failed on {SOURCE.name}: {result.stderr.strip()[:500]}")
    os.replace(partial, target)
    record_library_hash(target)
    return target


def _load() -> ctypes.CDLL:
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        raise OSError(f"no C++ compiler '{compiler}' on PATH")
    path = _build(compiler)
    library = ctypes.CDLL(str(path))
    for name, (restype, argtypes) in SIGNATURES.items():
        try:
            function = getattr(library, name)
        except AttributeError:
            raise OSError(f"{path} has no '{name}' (not the sampler kernels)") from None
        function.restype, function.argtypes = restype, argtypes
    return library


def library() -> ctypes.CDLL | None:
    """The loaded kernels, or None when the Python reference is to be used (see the module docstring)."""
    backend = requested_backend()
    if backend == "python":
        return None
    with _lock:
        if "lib" not in _loaded:
            try:
                _loaded["lib"] = _load()
            except OSError as exc:
                if backend == "native":
                    raise DgbenchError(f"DGBENCH_SIS_BACKEND=native but the sampler kernels did not build: {exc}") \
                        from exc
                warnings.warn(f"sampler kernels not built ({exc}); using the pure-Python reference", stacklevel=2)
                _loaded["lib"] = None
        return _loaded["lib"]


def ptr(array: np.ndarray | None, kind=c_int64):
    """ctypes pointer to a C-contiguous array (None for a null pointer)."""
    if array is None:
        return None
    assert array.flags.c_contiguous
    return array.ctypes.data_as(POINTER(kind))
