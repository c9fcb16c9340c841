"""Small generated stores for tests (the real-data fixture `shared_data` is in the root conftest.py)."""
from __future__ import annotations

from pathlib import Path

import pytest


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
