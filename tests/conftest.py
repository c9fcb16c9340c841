"""Small generated stores for tests (the real-data fixture `shared_data` is in the root conftest.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from dgbench import progress


@pytest.fixture(autouse=True, scope="session")
def quiet_progress():
    """No progress bars in test logs (ranks started by the tests read DGBENCH_QUIET too)."""
    before = os.environ.get("DGBENCH_QUIET")
    os.environ["DGBENCH_QUIET"] = "1"
    progress.set_quiet(True)
    yield
    if before is None:
        os.environ.pop("DGBENCH_QUIET", None)


@pytest.fixture
def esdg_store(tmp_path: Path) -> Path:
    """A small generated snapshot store (64 vertices, 8 snapshots)."""
    from dgbench.generators.esdg_random import build
    return build(out=tmp_path / "esdg.zarr", nodes=64, snapshots=8, edge_factor=3.0, seed=1)


@pytest.fixture
def stream_store(tmp_path: Path) -> Path:
    """A small generated bipartite edge stream (2,000 events, 4-dim edge features)."""
    from dgbench.generators.stream import build
    return build(out=tmp_path / "stream.zarr", users=50, items=40, events=2000, edge_dim=4, seed=1)


# The longest modules first (pytest --durations on a 2-core machine). `make test` runs two xdist workers that
# each take whole files (--dist loadfile) in collection order (--no-loadscope-reorder: xdist otherwise sorts
# files by their number of tests): a long file collected late would run alone at the end while the other
# worker idles. Only the order changes; every test still runs.
LONGEST_FIRST = ("test_conformance.py", "test_readme_tour.py", "test_projection.py", "test_conformance_continuous.py",
                 "test_eval_every.py", "test_launch_faults.py", "test_discrete_equivalence.py", "test_launch.py",
                 "test_tgcn.py", "test_blad_scheme.py", "test_plugins.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the modules of LONGEST_FIRST first, in that order (a stable sort: each file's own order is kept)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))
