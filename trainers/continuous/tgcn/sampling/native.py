"""The compiled sampler kernels (sis_kernels.cpp): built with the system C++ compiler at first use, cached,
and loaded with ctypes; ``None`` when no compiler is available, and callers fall back to the pure-Python
reference (same algorithms, same random numbers, same touch counts; much slower).

Why compiled: the benchmarks compare SIS, ITS and BRS per operation, and a Python loop costs as much
as tens of array elements, which would hide the O(log n) vs O(n) difference the paper is about. All
three are in the same C++ file so the ratios compare algorithms, not languages.

The library is built once per source version into ``$DGBENCH_KERNEL_CACHE`` (default
``~/.cache/dgbench/kernels``, else the temporary directory) by ``$CXX`` (default ``g++``), written under
a temporary name and renamed, so ranks starting together do not race. ``DGBENCH_SIS_BACKEND`` =
``auto`` (default: native if it builds, else Python), ``native`` (fail if it does not build) or ``python``.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
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
    configured = os.environ.get("DGBENCH_KERNEL_CACHE")
    if configured:
        return Path(configured)
    home = Path.home() / ".cache" / "dgbench" / "kernels"
    try:
        home.mkdir(parents=True, exist_ok=True)
        return home
    except OSError:
        return Path(tempfile.gettempdir()) / "dgbench-kernels"


def _build(compiler: str) -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join([compiler, *FLAGS]).encode()).hexdigest()[:16]
    folder = _cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"sis_kernels-{digest}.so"
    if target.exists():
        return target
    partial = folder / f".{target.name}.{os.getpid()}.{threading.get_ident()}"
    with resources.as_file(SOURCE) as source:  # a real file for the compiler, wherever the package lies
        result = subprocess.run([compiler, *FLAGS, "-o", str(partial), str(source)], capture_output=True, text=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise OSError(f"{compiler} failed on {SOURCE.name}: {result.stderr.strip()[:500]}")
    os.replace(partial, target)
    return target


def _load() -> ctypes.CDLL:
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        raise OSError(f"no C++ compiler '{compiler}' on PATH")
    library = ctypes.CDLL(str(_build(compiler)))
    for name, (restype, argtypes) in SIGNATURES.items():
        function = getattr(library, name)
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
