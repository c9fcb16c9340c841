"""Which board tracks a run will fit, said before it trains, by the same rules `dgbench submit` applies.

The rules are the checks of :mod:`dgbench.leaderboard.tracks`; this module asks them about a run that
has not happened yet (a stand-in record with the run's epoch count, seed and whether it trains) and
states each track's entry rule from the same constants, so `run --help`, the run's first line,
leaderboards/RULES.md and `submit` cannot disagree. The human rules: leaderboards/RULES.md.
"""
from __future__ import annotations

from typing import Any

from dgbench.leaderboard.schema import Problem
from dgbench.leaderboard.tracks import (ACCURACY_METRICS, MIN_ACCURACY_EPOCHS, MIN_SEEDS, MIN_TIMED_EPOCHS, TRACKS,
                                        WARMUP_EPOCHS, qualifying_tracks)

TIMED_TRACKS = ("throughput", "scaling")
BASELINE_LINE = "baseline: accuracy track only"
BASELINE_WHY = "a baseline trains nothing, so it has no throughput to rank"


DEFAULT_EPOCHS = 4  # `dgbench run`'s --epochs when not given (trainers' RunConfig reads it from here)

def entry_rule(track: str) -> str:
    """The entry rule of ``track`` in one sentence (RULES.md states exactly this)."""
    if track in TIMED_TRACKS:
        return (f"at least {WARMUP_EPOCHS + MIN_TIMED_EPOCHS} epochs ({WARMUP_EPOCHS} warm-up + "
                f"{MIN_TIMED_EPOCHS} timed), and every timed epoch processed edges (events for streams)")
    if track == "accuracy":
        metrics = f"{', '.join(ACCURACY_METRICS[:-1])} or {ACCURACY_METRICS[-1]}"
        return (f"at least {MIN_ACCURACY_EPOCHS} epochs, an integer seed and a test {metrics} "
                f"({MIN_SEEDS} seeds make a ranked row)")
    raise KeyError(track)


def epochs_help() -> str:
    """`run --epochs`' help: the epochs each track needs."""
    timed = ", ".join(TIMED_TRACKS)
    return (f"Training epochs ({timed} tracks: {WARMUP_EPOCHS + MIN_TIMED_EPOCHS} = {WARMUP_EPOCHS} warm-up + "
            f"{MIN_TIMED_EPOCHS} timed; accuracy track: {MIN_ACCURACY_EPOCHS}).")


def planned_record(epochs: int, seed: Any, trains: bool) -> dict[str, Any]:
    """What the track rules read of a record, for a run not yet made (work 1 per epoch when it trains)."""
    return {"epochs": [{"work": 1 if trains else 0} for _ in range(epochs)],
            "final_metrics": {"test": {"ap": 0.5}}, "hyperparameters": {"seed": seed}}


def planned_problems(epochs: int, seed: Any, trains: bool) -> dict[str, list[Problem]]:
    """Each track's problems with the run that would be made (an empty list where it fits)."""
    return qualifying_tracks(planned_record(epochs, seed, trains))


def is_baseline_only(problems: dict[str, list[Problem]]) -> bool:
    """The timed tracks, and only they, refuse a record only because its epochs process nothing (a baseline's)."""
    refused = {track: found for track, found in problems.items() if found}
    return (set(refused) == set(TIMED_TRACKS)
            and all(p.field.endswith(".work") for found in refused.values() for p in found))


def fit_line(epochs: int, seed: Any, trains: bool) -> str:
    """One line: the tracks the run will fit and, per reason, the tracks it will not."""
    problems = planned_problems(epochs, seed, trains)
    if is_baseline_only(problems):
        return f"{BASELINE_LINE} ({BASELINE_WHY})"
    fits = [track for track, found in problems.items() if not found]
    if len(fits) == len(TRACKS):
        return f"tracks: this run fits {', '.join(fits)}"
    reasons: dict[str, list[str]] = {}
    for track, found in problems.items():
        if found:
            reasons.setdefault(_reason(found[0], track, epochs), []).append(track)
    told = "; ".join(f"{', '.join(tracks)}: {reason}" for reason, tracks in reasons.items())
    counted = "1 epoch fits" if epochs == 1 else f"{epochs} epochs fit"
    line = f"tracks: {counted} {', '.join(fits) or 'no track'} ({told})"
    enough = epochs_for_every_track(seed, trains)
    return line + (f"; --epochs {enough} fits every track" if enough else "")


def epochs_for_every_track(seed: Any, trains: bool, most: int = 100) -> int | None:
    """The fewest epochs with which the run fits every track (None if no epoch count does)."""
    return next((n for n in range(1, most + 1) if not any(planned_problems(n, seed, trains).values())), None)


def _reason(problem: Problem, track: str, epochs: int) -> str:
    """A problem in the words submit uses, less what the line already says (the track, the epoch count)."""
    reason = problem.reason.replace(f"has {epochs} epochs; ", "").replace(f"the {track} track needs", "needs")
    return reason if problem.field == "epochs" else str(problem)
