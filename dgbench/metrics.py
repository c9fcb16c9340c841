"""The one metrics module: link-prediction scores (accuracy, AP, ROC-AUC) every scheme reports.

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
