"""The host's GEMM probe printed beside timing windows (dgbench.timing gemm-probe)."""
from __future__ import annotations

import re
import subprocess
import sys

import torch

from dgbench.timing import gemm_probe


def test_the_gemm_probe_is_a_positive_rate_and_restores_the_thread_count():
    threads = torch.get_num_threads()
    assert gemm_probe(size=256, repeats=2) > 0
    assert torch.get_num_threads() == threads


def test_the_gemm_probe_command_prints_one_rate():
    done = subprocess.run([sys.executable, "-m", "dgbench.timing", "gemm-probe"], capture_output=True, text=True,
                          check=True)
    assert re.fullmatch(r"host probe: 2048\^2 GEMM \d+ GFLOP/s per CPU-second \(1 thread\)\n", done.stdout)


def test_an_unknown_timing_command_prints_the_usage():
    done = subprocess.run([sys.executable, "-m", "dgbench.timing", "nonsense"], capture_output=True, text=True)
    assert done.returncode == 2 and "gemm-probe" in done.stderr
