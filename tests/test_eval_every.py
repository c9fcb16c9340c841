"""`--eval-every N` (docs/tasks.md): validation on epochs N, 2N, ... and the last, the best-validation
state kept (parameters, and the node memory of the continuous family, sharded where the scheme partitions
it) and test scored once on it. Each world size is one launch training both families with N = 1 and N = 2;
every rank counts the evaluator's calls, and the selection is forced to keep the first validated epoch
(epoch 2 of 4) so that restoring it matters. With N = 1 every epoch's test is scored on that epoch's state,
so N = 2's one test must equal N = 1's test of epoch 2 (evaluation never changes the training trajectory).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dgbench.dist import DistContext
from dgbench.errors import DgbenchError
from dgbench.launch import launch
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import family_hooks, resolve, train_runs

pytestmark = pytest.mark.usefixtures("one_thread")  # in-process runs beside the other xdist worker

EPOCHS = 4
TIGHT = 1e-9
FORCED_BEST = 1  # epoch 2 of 4, 0-based as the record's epochs
DISCRETE = dict(model="tmgcn", hidden=6)
CONTINUOUS = dict(model="tgn", batch_size=200, memory_dim=16, neighbors=5)


def train_counting(ctx: DistContext, runs: list, first_wins: bool) -> list[tuple[dict[str, Any], list[str]]]:
    """On every rank: each run's rank result and the splits the evaluator scored, in order. ``first_wins``:
    the selection keeps the first validated epoch (no later score counts as better)."""
    import dgbench.trainers.epochs as epochs_module
    from dgbench.tasks.evaluator import Evaluator
    original_score, original_above = Evaluator.score, epochs_module._above
    out = []
    try:
        if first_wins:
            epochs_module._above = lambda score, best: False
        for run in runs:
            calls: list[str] = []

            def counting(self, split, positive, negative, calls=calls):
                calls.append(split)
                return original_score(self, split, positive, negative)

            Evaluator.score = counting  # type: ignore[method-assign]
            out.append((train_runs(ctx, [run], True)[0], calls))
    finally:
        Evaluator.score, epochs_module._above = original_score, original_above  # type: ignore[method-assign]
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    from dgbench.generators.esdg_random import build as snapshots
    from dgbench.generators.stream import build as stream
    folder = tmp_path_factory.mktemp("eval-every")
    return {"discrete": snapshots(out=folder / "esdg.zarr", nodes=48, snapshots=8, edge_factor=3.0, seed=1),
            "continuous": stream(out=folder / "stream.zarr", users=40, items=30, events=1200, edge_dim=4, seed=5)}


def _configs(stores: dict[str, Path], schemes: dict[str, str], nproc: int) -> list[RunConfig]:
    out = []
    for family, scheme in schemes.items():
        protocol = DISCRETE if family == "discrete" else CONTINUOUS
        for every in (1, 2):
            out.append(RunConfig(scheme=scheme, dataset=stores[family], nproc=nproc, epochs=EPOCHS, seed=3,
                                 lr=0.01, eval_every=every, out=stores[family].parent / "runs",
                                 extra={"dtype": "float64"}, **protocol))
    return out


def _records(configs: list[RunConfig]) -> list[tuple[dict[str, Any], list[list[str]]]]:
    """(record, each rank's scored splits) of every config, all trained in one launch."""
    runs = [resolve(config) for config in configs]
    per_rank = launch(train_counting, configs[0].nproc, (runs, True), timeout_s=300)
    return [(family_hooks(run.family).record(run, [rank[i][0] for rank in per_rank], "now"),
             [rank[i][1] for rank in per_rank]) for i, run in enumerate(runs)]


@pytest.fixture(scope="module")
def one_rank(stores):
    return _records(_configs(stores, {"discrete": "single", "continuous": "single"}, 1))


@pytest.fixture(scope="module")
def two_ranks(stores):
    # snapshot: snapshots split over the ranks, parameters replicated; sven: node memory partitioned by owner
    return _records(_configs(stores, {"discrete": "snapshot", "continuous": "sven"}, 2))


def _same(figures: dict[str, float], expected: dict[str, float]) -> bool:
    """Equal metrics; two launches of a distributed float64 run may differ in the last bits (reduction order)."""
    return figures.keys() == expected.keys() and all(figures[k] == pytest.approx(expected[k], rel=TIGHT, abs=TIGHT)
                                                     for k in figures)


def _check_pair(every_epoch: tuple, every_second: tuple) -> None:
    reference, reference_calls = every_epoch
    record, calls = every_second
    # (a) validation at epochs 2 and 4 only, test exactly once (after them), on every rank
    for rank_calls in calls:
        assert rank_calls == ["val", "val", "test"], rank_calls
    for rank_calls in reference_calls:
        assert rank_calls == ["val", "test"] * EPOCHS, rank_calls
    assert [sorted(e["metrics"]) for e in record["epochs"]] == [[], ["val"], [], ["val"]]
    selection = record["extra"]["model_selection"]
    assert selection["eval_every"] == 2 and record["hyperparameters"]["eval_every"] == 2
    assert [v["epoch"] for v in selection["validated"]] == [1, 3]
    assert selection["best_epoch"] == FORCED_BEST
    # the same training: evaluation (or its absence) leaves the trajectory alone
    assert [e["loss"] for e in record["epochs"]] == pytest.approx([e["loss"] for e in reference["epochs"]], rel=TIGHT)
    for epoch in (1, 3):
        assert _same(record["epochs"][epoch]["metrics"]["val"], reference["epochs"][epoch]["metrics"]["val"])
    # (b) the one test is the test of the restored epoch-2 state, not of the last epoch's
    assert _same(record["final_metrics"]["test"], reference["epochs"][FORCED_BEST]["metrics"]["test"])
    assert not _same(record["final_metrics"]["test"], reference["epochs"][-1]["metrics"]["test"])
    assert _same(record["final_metrics"]["val"], reference["epochs"][FORCED_BEST]["metrics"]["val"])
    # N = 1 stays as it was: per-epoch test, final metrics the last epoch's, no selection block
    assert reference["final_metrics"] == reference["epochs"][-1]["metrics"]
    assert "model_selection" not in reference["extra"] and reference["hyperparameters"]["eval_every"] == 1


@pytest.mark.parametrize("family", [0, 1], ids=["discrete-single", "continuous-single"])
def test_one_rank_validates_every_second_epoch_and_tests_the_best_state_once(one_rank, family):
    _check_pair(one_rank[2 * family], one_rank[2 * family + 1])


@pytest.mark.parametrize("family", [0, 1], ids=["discrete-snapshot", "continuous-sven"])
def test_two_ranks_restore_their_own_state_before_the_one_test(two_ranks, family):
    _check_pair(two_ranks[2 * family], two_ranks[2 * family + 1])


def test_tgcn_restores_its_grid_state_before_the_one_test(stores):
    """tgcn has its own driver and state (S-/G-state ranges); two virtual grid ranks in one process."""
    configs = [RunConfig(scheme="tgcn", model="dygnn", dataset=stores["continuous"], epochs=EPOCHS, seed=3, lr=0.01,
                         eval_every=every, batch_size=150, memory_dim=8, grid_ranks=2, intervals=3,
                         extra={"dtype": "float64"}) for every in (1, 2)]
    _check_pair(*_records(configs))


def test_continuous_best_validation_block_names_the_restored_epoch(one_rank):
    record, _ = one_rank[3]
    best = record["extra"]["best_validation"]
    assert best["epoch"] == FORCED_BEST and best["test"] == record["final_metrics"]["test"]


def test_node_classification_refuses_eval_every(stores):
    config = RunConfig(scheme="single", dataset=stores["continuous"], epochs=EPOCHS, eval_every=2,
                       task="node-classification", **CONTINUOUS)
    with pytest.raises(DgbenchError, match="--eval-every 2: --task node-classification"):
        resolve(config)


def test_older_records_group_with_new_ones_that_validated_every_epoch():
    from dgbench.leaderboard.tracks import learning_setup, run_setup
    older = {"hyperparameters": {"seed": 0, "lr": 0.01, "hidden": 6}}
    newer = {"hyperparameters": {**older["hyperparameters"], "eval_every": 1}}
    selecting = {"hyperparameters": {**older["hyperparameters"], "eval_every": 2}}
    assert learning_setup(older) == learning_setup(newer) != learning_setup(selecting)
    assert run_setup(older) == run_setup(selecting)  # scoring is outside the timed epochs


def test_selection_keeps_the_earliest_best_and_never_prefers_nan():
    from dgbench.trainers.epochs import Selection
    restored = []
    selection = Selection(2, validate=dict, test=lambda: {"test": {"ap": 0.5}}, keep=lambda: None,
                          restore=restored.append)
    for epoch, ap, state in ((1, float("nan"), "nan"), (3, 0.7, "first 0.7"), (5, 0.7, "tie"), (7, 0.6, "worse")):
        selection.consider(epoch, {"val": {"ap": ap}}, state)
    selection.finish()
    assert restored == ["first 0.7"] and selection.best_epoch == 3
    assert [v["ap"] for v in selection.summary()["validated"]] == [None, 0.7, 0.7, 0.6]
    assert selection.final_metrics() == {"val": {"ap": 0.7}, "test": {"ap": 0.5}}
    assert [epoch for epoch in range(5) if selection.due(epoch, 5)] == [1, 3, 4]
