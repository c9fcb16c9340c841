"""Fixtures shared by tests/ and benchmarks/: the real-data folder (skipped cleanly when absent) and one_thread."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent


def shared_data_dir() -> Path:
    """Where the real public files live: $DGBENCH_SHARED_DATA, else ../shared/data beside the repo."""
    return Path(os.environ.get("DGBENCH_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    """The real-data folder; tests using it skip with a reason when it is absent."""
    root = shared_data_dir()
    if not root.is_dir():
        pytest.skip(f"real data folder {root} is absent (set DGBENCH_SHARED_DATA to point at it)")
    return root


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module: graphs this small train ~10x faster without intra-op threads fighting
    over the cores, and each rank of a 2-core machine has one core (use: pytestmark = usefixtures)."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
