"""The three tracks and their entry rules (the human text is leaderboards/RULES.md).

A record enters a track only if that track's rule holds; with no track named, `dgbench submit`
files a record under every track it qualifies for. Figures are taken from timed epochs, that is,
every epoch after the warm-up (MLPerf and ESDG §6.3 both leave the first epoch out of timing).

A record on the throughput or scaling track *ranks* only when its timing is clean
(:func:`timing_problems`: timing evidence present, not contended, at least ``MIN_RANKED_EPOCHS`` timed
epochs, throughput CV within ``MAX_CV``); otherwise it is listed unranked with the reason
(leaderboards/RULES.md, "Clean timing"). The verdict is recomputed from the epochs' evidence, never
read from the record's own ``timing`` block.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from dgbench.leaderboard.schema import Problem
from dgbench.timing import MAX_CV, MIN_RANKED_EPOCHS, timing_summary

WARMUP_EPOCHS = 1
MIN_TIMED_EPOCHS = 3
MIN_ACCURACY_EPOCHS = 3
MIN_SEEDS = 3
ACCURACY_METRICS = ("ap", "auc", "accuracy")
# Hyper-parameters that do not change what is learned: runs differing only in these share an accuracy row.
NON_LEARNING_KEYS = {"seed", "out", "dataset", "timeout_s", "nproc", "backend", "device", "threads",
                     "stream_budget"}  # stream_budget: streamed and in-memory runs learn the same (tested)
TIMED_TRACKS = ("throughput", "scaling")  # the tracks whose figure is a time
# ... and those that change what is learned but not the work of an epoch.
RATE_NEUTRAL_KEYS = {"epochs", "lr", "eval_every"}  # eval_every: scoring is outside the timed epochs
# Hyper-parameters recorded since a later version, at the value older records ran with (so both group alike).
LATER_DEFAULTS = {"eval_every": 1}


@dataclass(frozen=True)
class Track:
    name: str
    title: str
    summary: str
    check: Callable[[dict[str, Any]], list[Problem]]


def _timed_epoch_problems(record: dict[str, Any], track: str) -> list[Problem]:
    epochs = record["epochs"]
    needed = WARMUP_EPOCHS + MIN_TIMED_EPOCHS
    if len(epochs) < needed:
        return [Problem("epochs", f"has {len(epochs)} epochs; the {track} track needs at least {needed} "
                                  f"({WARMUP_EPOCHS} warm-up + {MIN_TIMED_EPOCHS} timed)")]
    return [Problem(f"epochs[{i}].work", f"is 0: a timed epoch of the {track} track must process edges")
            for i, epoch in enumerate(epochs) if i >= WARMUP_EPOCHS and epoch["work"] <= 0]


def throughput_rule(record: dict[str, Any]) -> list[Problem]:
    return _timed_epoch_problems(record, "throughput")


def scaling_rule(record: dict[str, Any]) -> list[Problem]:
    return _timed_epoch_problems(record, "scaling")


def accuracy_rule(record: dict[str, Any]) -> list[Problem]:
    problems = []
    if len(record["epochs"]) < MIN_ACCURACY_EPOCHS:
        problems.append(Problem("epochs", f"has {len(record['epochs'])} epochs; the accuracy track needs "
                                          f"at least {MIN_ACCURACY_EPOCHS}"))
    test = record["final_metrics"].get("test")
    if not isinstance(test, dict) or all(test.get(m) is None for m in ACCURACY_METRICS):
        problems.append(Problem("final_metrics.test", f"needs at least one of {', '.join(ACCURACY_METRICS)}"))
    seed = record["hyperparameters"].get("seed")
    if type(seed) is not int:
        problems.append(Problem("hyperparameters.seed", f"is {seed!r}: the accuracy track needs the integer "
                                                        f"seed to count runs ({MIN_SEEDS} seeds per row)"))
    return problems


TRACKS: dict[str, Track] = {track.name: track for track in (
    Track("throughput", "Throughput", "edges/s (ESDG §6.3: edges of all snapshots per epoch second), median "
          "timed epoch, per dataset x model x hardware class x world size", throughput_rule),
    Track("scaling", "Scaling", "strong and weak scaling: speedup over the P = 1 run (the series' own, else "
          "the single scheme's; else the smallest world that ran, named as the base), with communication "
          "volume per epoch", scaling_rule),
    Track("accuracy", "Accuracy", f"test AP / AUC / accuracy, mean ± std over at least {MIN_SEEDS} seeds",
          accuracy_rule),
)}


def timing_problems(record: dict[str, Any]) -> list[str]:
    """Why ``record``'s times may not rank (empty when they may): each reason in a few words."""
    summary = timing_summary(record["epochs"], record["world_size"], WARMUP_EPOCHS)
    problems = []
    if summary["contended"] is None:
        problems.append("no timing evidence (recorded before dgbench kept it)")
    elif summary["contended"]:
        problems.append("contended: " + "; ".join(summary["reasons"]))
    if summary["timed_epochs"] < MIN_RANKED_EPOCHS:
        problems.append(f"{summary['timed_epochs']} timed epochs (ranking needs {MIN_RANKED_EPOCHS} after the "
                        f"{WARMUP_EPOCHS} warm-up)")
    cv = summary["throughput"]["cv"]
    if cv > MAX_CV:
        problems.append(f"unstable: throughput CV {cv:.0%} over the timed epochs (bound {MAX_CV:.0%})")
    return problems


def qualifying_tracks(record: dict[str, Any]) -> dict[str, list[Problem]]:
    """Each track's problems with ``record`` (an empty list where it qualifies)."""
    partial = partial_run_problems(record)
    return {name: partial + track.check(record) for name, track in TRACKS.items()}


def partial_run_problems(record: dict[str, Any]) -> list[Problem]:
    """A bounded probe (``--max-batches``: every pass cut after N batches) measures memory on stores too big
    to train here; its epochs are not epochs and its metrics score random pairs, so it fits no track."""
    cut = record["hyperparameters"].get("max_batches")
    if cut is None:
        return []
    return [Problem("hyperparameters.max_batches", f"is {cut}: a bounded probe (each pass cut after {cut} "
                                                   "batches) is not a whole epoch")]


def run_setup(record: dict[str, Any]) -> dict[str, Any]:
    """The hyper-parameters that change how fast an epoch runs (the scaling series' grouping key):
    a speedup is only measured between runs that differ in world size and store alone."""
    return {k: v for k, v in learning_setup(record).items() if k not in RATE_NEUTRAL_KEYS}


def learning_setup(record: dict[str, Any]) -> dict[str, Any]:
    """The hyper-parameters that change what is learned (the accuracy track's grouping key)."""
    given = {**LATER_DEFAULTS, **record["hyperparameters"]}
    return {k: v for k, v in sorted(given.items()) if k not in NON_LEARNING_KEYS}
