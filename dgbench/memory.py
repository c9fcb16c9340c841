"""Host memory high-water mark of the current process (no torch import, so probes stay small)."""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable
from functools import cache


def peak_rss_bytes() -> int:
    """High-water resident set size of this process since its last exec.

    Linux's VmHWM belongs to the address space, so exec starts it afresh; ``ru_maxrss`` survives exec,
    so a rank or probe spawned from a large parent (pytest, torchrun's launcher) would report the
    parent's size instead of its own. ``ru_maxrss`` is only the fallback where /proc is absent.
    """
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        import resource
        scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def current_rss_bytes() -> int:
    """Resident set size of this process now (VmRSS; 0 where /proc is absent)."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def return_freed_memory() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``; nothing where there is none).

    glibc serves allocations below its mmap threshold (which grows up to 32 MiB as large chunks are freed)
    from heaps it keeps mapped after ``free``, so memory a phase freed (a checkpointed block's activations, a
    partition's every-step edges) would stay in the process's resident set to no use. The values computed do
    not change: it frees nothing in use."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
