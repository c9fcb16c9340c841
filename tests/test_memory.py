"""Peak RSS is the process's own, not inherited from a large parent that spawned it."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dgbench.memory import peak_rss_bytes

PARENT_BYTES = 512 * 2**20


def child_prints(code: str) -> int:
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="exec-inherited ru_maxrss is Linux behaviour")
def test_child_reports_its_own_peak_not_its_parents() -> None:
    ballast = np.ones(PARENT_BYTES // 8)  # touched, so resident in this (parent) process
    assert peak_rss_bytes() >= PARENT_BYTES
    inherited = child_prints("import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
    own = child_prints("from dgbench.memory import peak_rss_bytes; print(peak_rss_bytes())")
    del ballast
    assert inherited >= PARENT_BYTES  # the trap: ru_maxrss carries the parent's mark across exec
    assert 0 < own < PARENT_BYTES // 4
