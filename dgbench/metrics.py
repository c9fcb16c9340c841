"""The one metrics module: every score dgbench reports, for both families and every task.

* link prediction as binary classification of (positive, negative) pairs: accuracy, AP, ROC-AUC;
* link prediction as ranking (TGB / OGB): the rank of each positive among its own negatives gives
  MRR and Hits@k. **Tie rule**: a positive tied with negatives takes the *average* of its optimistic
  and pessimistic ranks, rank = 1 + #(neg > pos) + ½·#(neg == pos) — OGB's ``eval_mrr`` and TGB's
  ``Evaluator.eval_rnk_metrics`` (torch branch) compute it so. Pessimistic ranks would punish a
  constant scorer (rank K+1 for everything), optimistic ones reward it (rank 1); the average gives
  it the rank a random order would have on average. Negatives marked missing (NaN) are not counted;
* node classification on imbalanced labels: ROC-AUC and F1 of the positive class.

Pure numpy so results do not depend on the training device; ties are handled like scikit-learn
(AP over distinct thresholds, AUC with average ranks), so numbers are comparable to TGL/TGB.
"""
from __future__ import annotations

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor


def _as_numpy(x: ArrayLike) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def average_precision(scores: ArrayLike, labels: ArrayLike) -> float:
    """Area under the precision-recall curve as a step sum over distinct score thresholds."""
    s, y = _as_numpy(scores).ravel(), _as_numpy(labels).ravel()
    positives = y.sum()
    if positives == 0:
        return float("nan")
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last_of_threshold = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]
    true_pos = np.cumsum(y)[last_of_threshold]
    predicted_pos = last_of_threshold + 1
    precision = true_pos / predicted_pos
    recall_gain = np.diff(np.r_[0.0, true_pos]) / positives
    return float(np.sum(precision * recall_gain))


def roc_auc(scores: ArrayLike, labels: ArrayLike) -> float:
    """ROC-AUC via the Mann-Whitney statistic with average ranks for ties."""
    s, y = _as_numpy(scores).ravel(), _as_numpy(labels).ravel().astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    boundaries = np.r_[0, np.flatnonzero(np.diff(sorted_s)) + 1, len(s)]
    for a, b in zip(boundaries[:-1], boundaries[1:]):
        ranks[order[a:b]] = (a + b + 1) / 2.0  # average 1-based rank of a tie group
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def accuracy(scores: ArrayLike, labels: ArrayLike, threshold: float = 0.0) -> float:
    """Fraction correct when a logit above ``threshold`` predicts an edge."""
    s, y = _as_numpy(scores).ravel(), _as_numpy(labels).ravel()
    return float(np.mean((s > threshold) == (y > 0.5))) if len(s) else float("nan")


def link_prediction_metrics(scores: ArrayLike, labels: ArrayLike) -> dict[str, float]:
    """Accuracy, AP and ROC-AUC of logits ``scores`` against 0/1 ``labels``."""
    return {"accuracy": accuracy(scores, labels), "ap": average_precision(scores, labels),
            "auc": roc_auc(scores, labels)}


def reciprocal_ranks(positive: ArrayLike, negatives: ArrayLike) -> np.ndarray:
    """Per positive, 1 / rank among its own negatives (a row of ``negatives``; NaN = no negative there),
    ties averaged: rank = 1 + #(neg > pos) + ½·#(neg == pos). A row with no negative gives NaN."""
    pos = _as_numpy(positive).ravel()
    ranks = ranks_among_negatives(pos, _negative_rows(pos, negatives))
    return np.where(np.isnan(ranks), np.nan, 1.0 / ranks)


def _negative_rows(pos: np.ndarray, negatives: ArrayLike) -> np.ndarray:
    """``negatives`` as one row per positive (no rows for a split without positives)."""
    return _as_numpy(negatives).reshape(len(pos), -1) if len(pos) else np.zeros((0, 1))


def ranks_among_negatives(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Averaged-tie ranks (see :func:`reciprocal_ranks`); NaN where a row has no negative."""
    present = ~np.isnan(neg)
    above = ((neg > pos[:, None]) & present).sum(axis=1)
    tied = ((neg == pos[:, None]) & present).sum(axis=1)
    ranks = 1.0 + above + 0.5 * tied
    return np.where(present.any(axis=1), ranks, np.nan)


def mean_reciprocal_rank(positive: ArrayLike, negatives: ArrayLike) -> float:
    """Mean of :func:`reciprocal_ranks` over the positives that have at least one negative."""
    rr = reciprocal_ranks(positive, negatives)
    rr = rr[~np.isnan(rr)]
    return float(rr.mean()) if len(rr) else float("nan")


def hits_at(positive: ArrayLike, negatives: ArrayLike, k: int) -> float:
    """Fraction of positives (with at least one negative) whose averaged-tie rank is at most ``k``."""
    pos = _as_numpy(positive).ravel()
    ranks = ranks_among_negatives(pos, _negative_rows(pos, negatives))
    ranks = ranks[~np.isnan(ranks)]
    return float((ranks <= k).mean()) if len(ranks) else float("nan")


def f1_score(scores: ArrayLike, labels: ArrayLike, threshold: float = 0.0) -> float:
    """F1 of the positive class when a logit above ``threshold`` predicts label 1 (NaN without positives
    in either the labels or the predictions, where precision or recall is undefined)."""
    s, y = _as_numpy(scores).ravel(), _as_numpy(labels).ravel() > 0.5
    predicted = s > threshold
    true_pos = int((predicted & y).sum())
    if not y.any() and not predicted.any():
        return float("nan")
    return float(2 * true_pos / (predicted.sum() + y.sum()))


def node_classification_metrics(scores: ArrayLike, labels: ArrayLike) -> dict[str, float]:
    """ROC-AUC, AP and F1 (positive class, logit > 0) of logits ``scores`` against 0/1 node ``labels``:
    threshold-free AUC/AP for the heavy imbalance of fraud / ban labels, F1 for the decision."""
    return {"auc": roc_auc(scores, labels), "ap": average_precision(scores, labels),
            "f1": f1_score(scores, labels), "accuracy": accuracy(scores, labels)}
