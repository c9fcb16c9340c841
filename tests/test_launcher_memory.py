"""What the launcher holds while spawned ranks train: no data, only what the record cites
(docs/discrete-schemes.md, "The Flickr-sized store, trained")."""
from __future__ import annotations

import pickle
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from dgbench import launch as launching
from dgbench.generators.esdg_random import build
from dgbench.tasks.evalset import tasks_dir
from dgbench.tasks.options import evaluation_block
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import resolve, run_experiments


class RanksStarted(Exception):
    """Raised by the stand-in for the ranks once it has looked at the launcher."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Snapshots of ~60,000 distinct pairs: each evaluation split holds the 50,000 positives it may (a few MB)."""
    return build(out=tmp_path_factory.mktemp("launcher") / "s.zarr", nodes=50_000, snapshots=5, edge_factor=1.2,
                 seed=3)


def _config(store: Path, nproc: int) -> RunConfig:
    return RunConfig("snapshot", "cdgcn", store, nproc=nproc, epochs=1, seed=7)


def _evaluation_set_bytes(store: Path) -> int:
    return sum(f.stat().st_size for f in tasks_dir(store).rglob("*.npy"))


def _launcher_while_ranks_train(store: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run the experiment driver with nproc 2 up to the ranks' start; what the launcher holds then."""
    seen: dict[str, Any] = {}

    def ranks(fn: Any, nproc: int, args: tuple, backend: str, timeout_s: float) -> list[Any]:
        seen["traced_bytes"] = tracemalloc.get_traced_memory()[0]
        seen["args_bytes"] = len(pickle.dumps(args))
        seen["runs"] = args[0]
        raise RanksStarted

    monkeypatch.setattr(launching, "_spawn", ranks)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with pytest.raises(RanksStarted):
            run_experiments([_config(store, nproc=2)])
    finally:
        tracemalloc.stop()
    return {**seen, "held_bytes": seen["traced_bytes"] - before}


def test_the_launcher_holds_no_evaluation_arrays_while_spawned_ranks_train(store, monkeypatch):
    resolve(_config(store, nproc=2))  # builds the sets and imports what a run imports, before the baseline
    sets_bytes = _evaluation_set_bytes(store)
    assert sets_bytes > 4 * 2**20  # the test measures something: the sets are several MB
    seen = _launcher_while_ranks_train(store, monkeypatch)
    assert seen["held_bytes"] < sets_bytes / 4, (seen["held_bytes"], sets_bytes)
    (run,) = seen["runs"]
    assert [s.arrays for s in run.inputs["evaluation"]] == [{}]
    assert set(run.inputs) == {"evaluation"}  # the rest the ranks (and the record step) build for themselves


def test_the_spawn_arguments_carry_no_data(store, monkeypatch):
    seen = _launcher_while_ranks_train(store, monkeypatch)
    assert seen["args_bytes"] < min(64 * 2**10, _evaluation_set_bytes(store) / 100), seen["args_bytes"]


def test_the_record_cites_the_released_sets_as_the_full_ones(store):
    run = resolve(_config(store, nproc=2))
    full = run.inputs["evaluation"]
    assert all(s.arrays for s in full)
    run.keep_only_what_the_record_cites()
    released = run.inputs["evaluation"]
    assert evaluation_block(released) == evaluation_block(full)
    assert [s.citation() for s in released] == [s.citation() for s in full]


def test_a_run_in_this_process_keeps_its_evaluation_arrays(store, monkeypatch):
    """With one rank the launcher is the rank: it scores the sets itself."""
    seen: dict[str, Any] = {}

    def rank(ctx: Any, runs: list, quiet: bool) -> Any:
        seen["arrays"] = [s.arrays for s in runs[0].inputs["evaluation"]]
        raise RanksStarted

    monkeypatch.setattr("dgbench.trainers.experiment.train_runs", rank)
    with pytest.raises(RanksStarted):
        run_experiments([_config(store, nproc=1)])
    assert seen["arrays"] and all(seen["arrays"])


def test_building_a_set_hands_back_what_it_freed(store, monkeypatch):
    """The heap building freed (every snapshot's edge keys) is returned once the built arrays are gone."""
    from dgbench.tasks import evalset
    from dgbench.tasks.link import link_prediction_set
    returned: list[int] = []
    monkeypatch.setattr(evalset, "return_freed_memory", lambda: returned.append(tracemalloc.get_traced_memory()[0]))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        built = link_prediction_set(store, "random", 5)  # a set not built before: K = 5
    finally:
        tracemalloc.stop()
    set_bytes = sum(a.nbytes for a in built.arrays.values())
    assert set_bytes > 2**20 and len(returned) == 1
    assert returned[0] - before < set_bytes / 4, (returned[0] - before, set_bytes)
