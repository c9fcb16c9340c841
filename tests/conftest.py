"""Fixtures shared by all tests: the real-data folder (skipped cleanly when absent) and small stores."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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


@pytest.fixture
def esdg_store(tmp_path: Path) -> Path:
    """A small generated snapshot store (64 vertices, 8 snapshots)."""
    from generators.esdg_random import build
    return build(out=tmp_path / "esdg.zarr", nodes=64, snapshots=8, edge_factor=3.0, seed=1)


@pytest.fixture
def stream_store(tmp_path: Path) -> Path:
    """A small generated bipartite edge stream (2,000 events, 4-dim edge features)."""
    from generators.stream import build
    return build(out=tmp_path / "stream.zarr", users=50, items=40, events=2000, edge_dim=4, seed=1)
