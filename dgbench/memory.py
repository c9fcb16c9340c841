"""Host memory high-water mark of the current process (no torch import, so probes stay small)."""
from __future__ import annotations

import sys


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
