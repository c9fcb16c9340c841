"""Baselines every accuracy table shows: scorers that learn nothing by gradient.

A baseline is registered as a model of its family (``edgebank`` for streams, ``persistence`` for
snapshot stores; one file each under dgbench/models/) whose factory returns a :class:`Baseline`. The
family's trainer sees that and, instead of its training loop, lets the baseline read the store
(``index``), then scores the run's evaluation sets with the same :class:`~dgbench.tasks.evaluator.Evaluator`
every model goes through. A baseline has no parameters and moves nothing between ranks, so every
scheme of the family gives the same record (the conformance suite checks that it does); its epochs
process no training work (``work`` 0), so it never enters the throughput or scaling tracks.
"""
from __future__ import annotations

from abc import abstractmethod
from pathlib import Path

import numpy as np
import torch

from dgbench.tasks.evalset import EvaluationSet
from dgbench.tasks.evaluator import Evaluator, SplitFigures, split_name


class Baseline(torch.nn.Module):
    """A parameter-free scorer of (source, destination, when) queries. ``when`` is the query's time for
    streams and the input step (predicting snapshot step+1) for snapshot stores."""

    when_array = "t"  # the evaluation set's array giving each positive's ``when``

    @abstractmethod
    def index(self, store_path: Path, max_events: int | None = None) -> None:
        """Read what the baseline memorises from the store."""

    @abstractmethod
    def score(self, src: np.ndarray, dst: np.ndarray, when: np.ndarray) -> np.ndarray:
        """One score per query; larger means more likely an edge."""

    def describe(self) -> dict[str, object]:
        """The baseline's resolved settings, for the record."""
        return {}


def score_split(baseline: Baseline, evaluation: EvaluationSet, split: str) -> SplitFigures:
    """Score one split of ``evaluation``: its positives and every negative it holds (NaN where none)."""
    src, dst = evaluation.get(split, "src"), evaluation.get(split, "dst")
    when = evaluation.get(split, baseline.when_array)
    neg_src, neg_dst = evaluation.get(split, "negative_src"), evaluation.get(split, "negatives")
    present = neg_dst >= 0
    negative = np.full(neg_dst.shape, np.nan)
    negative[present] = baseline.score(neg_src[present], neg_dst[present],
                                       np.broadcast_to(when[:, None], neg_dst.shape)[present])
    return Evaluator(evaluation).score(split, baseline.score(src, dst, when), negative)


def evaluate_baseline(baseline: Baseline, sets: list[EvaluationSet],
                      splits: tuple[str, ...] = ("val", "test")) -> dict[str, dict[str, float]]:
    """Metrics of ``splits`` (validation and test) of every set, named as the trainers name them (``test``,
    ``test:historical``...)."""
    return {split_name(split, index, evaluation): score_split(baseline, evaluation, split).as_metrics()
            for split in splits for index, evaluation in enumerate(sets)}
