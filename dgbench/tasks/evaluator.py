"""One evaluator for every scheme and model of both families: scores of (positive, its negatives) in,
typed figures out.

A loop (or a baseline) scores each positive of an evaluation set and its K negatives — row i of
``negatives`` belongs to positive i; slots the set left empty (:data:`~dgbench.tasks.negatives.MISSING`)
carry NaN — and :meth:`Evaluator.score` turns them into :class:`SplitFigures`:

* ranking (TGB / OGB): MRR and Hits@{1,3,10} of each positive among its own negatives, ties averaged
  (:mod:`dgbench.metrics`); Hits@k only for k <= K (with K negatives every rank is at most K + 1);
* classification, the 1:1 protocol of TGL, DyGLib and Poursafaei et al. (their AP/AUC tables): each
  positive against the *first* of its negatives (a uniform draw of the strategy), accuracy at logit 0;
* the same for positives with a new node and with seen nodes only, where both exist;
* counts: positives, those scored (with at least one negative), negatives used.

Positives without any negative of the strategy are left out of every figure and counted, never scored
against negatives of another strategy.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dgbench.metrics import (accuracy, average_precision, hits_at, mean_reciprocal_rank, roc_auc)
from dgbench.tasks.evalset import EvaluationSet

HITS_AT = (1, 3, 10)


@dataclass(frozen=True)
class RankFigures:
    """Figures of one group of positives (all, new-node or seen-node ones)."""

    ap: float
    auc: float
    accuracy: float
    mrr: float
    hits: dict[int, float]
    scored: int

    @classmethod
    def of(cls, positive: np.ndarray, negatives: np.ndarray) -> "RankFigures":
        first = negatives[:, 0] if negatives.shape[1] else np.full(len(positive), np.nan)
        scores = np.concatenate([positive, first])
        labels = np.r_[np.ones(len(positive)), np.zeros(len(first))]
        return cls(ap=average_precision(scores, labels), auc=roc_auc(scores, labels),
                   accuracy=accuracy(scores, labels), mrr=mean_reciprocal_rank(positive, negatives),
                   hits={k: hits_at(positive, negatives, k) for k in HITS_AT if k <= negatives.shape[1]},
                   scored=len(positive))


@dataclass(frozen=True)
class SplitFigures:
    """What one split of one evaluation set scored."""

    split: str
    overall: RankFigures
    positives: int
    negatives: int
    new_node: RankFigures | None = None
    seen_nodes: RankFigures | None = None
    extra: dict[str, float] = field(default_factory=dict)

    def as_metrics(self) -> dict[str, float]:
        """The record's flat metrics of this split (``final_metrics[split]``)."""
        out = _flat(self.overall, "")
        out.update({"positives": float(self.positives), "scored_positives": float(self.overall.scored),
                    "negatives": float(self.negatives)})
        for suffix, group in (("_new_node", self.new_node), ("_seen_nodes", self.seen_nodes)):
            if group is not None:
                out.update({k: v for k, v in _flat(group, suffix).items() if not k.startswith("hits")})
        out.update(self.extra)
        return out


def _flat(figures: RankFigures, suffix: str) -> dict[str, float]:
    out = {f"ap{suffix}": figures.ap, f"auc{suffix}": figures.auc, f"accuracy{suffix}": figures.accuracy,
           f"mrr{suffix}": figures.mrr}
    out.update({f"hits@{k}{suffix}": v for k, v in figures.hits.items()})
    return out


class Evaluator:
    """Scores the positives and negatives of one evaluation set, split by split."""

    def __init__(self, evaluation_set: EvaluationSet):
        self.set = evaluation_set

    def negatives(self, split: str) -> np.ndarray:
        return self.set.get(split, "negatives")

    def score(self, split: str, positive: np.ndarray, negative: np.ndarray) -> SplitFigures:
        """``positive`` (n,) and ``negative`` (n, K) scores of the set's split, in the set's order;
        NaN in ``negative`` where the set has no negative (it must be NaN exactly there)."""
        stored = self.negatives(split)
        positive = np.asarray(positive, dtype=np.float64).ravel()
        negative = np.asarray(negative, dtype=np.float64).reshape(stored.shape)
        missing = stored < 0
        if len(positive) != len(stored):
            raise ValueError(f"{split}: {len(positive)} positive scores for {len(stored)} positives")
        if (np.isnan(negative) != missing).any():
            raise ValueError(f"{split}: scores must be NaN exactly where the evaluation set has no negative")
        scored = ~missing.all(axis=1)
        new_node = self.set.get(split, "new_node").astype(bool)
        groups = {}
        for name, mask in (("new_node", scored & new_node), ("seen_nodes", scored & ~new_node)):
            groups[name] = RankFigures.of(positive[mask], negative[mask]) if mask.any() and (scored & ~mask).any() \
                else None
        return SplitFigures(split, RankFigures.of(positive[scored], negative[scored]), positives=len(positive),
                            negatives=int((~missing).sum()), **groups)


def pair_id(set_index: int, row: np.ndarray, column: np.ndarray, positives: int, k: int) -> np.ndarray:
    """Where a scored pair goes among a split's scores: set ``set_index``'s (positives, 1 + k) matrix,
    ``row`` a positive, ``column`` 0 for the positive itself and 1..k for its negatives."""
    return (np.int64(set_index) * positives + np.asarray(row, np.int64)) * (k + 1) + np.asarray(column, np.int64)


def split_name(split: str, index: int, evaluation: EvaluationSet) -> str:
    """The metrics key of a split: ``val``/``test`` for the run's first set, ``test:historical`` etc. after."""
    return split if index == 0 else f"{split}:{evaluation.spec.strategy}"


def score_pairs(sets: list[EvaluationSet], split: str, ids: np.ndarray, scores: np.ndarray) -> dict[str, SplitFigures]:
    """Figures of every set's ``split`` from scored pairs identified by :func:`pair_id` (gathered from
    every rank, any order). Every positive and every present negative must have been scored once."""
    ids, scores = np.asarray(ids, np.int64), np.asarray(scores, np.float64)
    out = {}
    for index, evaluation in enumerate(sets):
        negatives = evaluation.get(split, "negatives")
        n, k = negatives.shape
        matrix = np.full(n * (k + 1), np.nan)
        mine = (ids >= index * n * (k + 1)) & (ids < (index + 1) * n * (k + 1))
        matrix[ids[mine] - index * n * (k + 1)] = scores[mine]
        matrix = matrix.reshape(n, k + 1)
        expected = np.c_[np.ones(n, bool), negatives >= 0]
        if int(mine.sum()) != int(expected.sum()) or np.isnan(matrix[expected]).any():
            raise ValueError(f"{split}: {int(mine.sum())} pairs scored for {int(expected.sum())} in set "
                             f"{evaluation.spec.name}")
        out[split_name(split, index, evaluation)] = Evaluator(evaluation).score(split, matrix[:, 0], matrix[:, 1:])
    return out
