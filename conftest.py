"""Fixtures shared by tests/ and benchmarks/: the real-data folder, skipped cleanly when absent."""
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
