"""MRR, Hits@k (averaged-tie rule), F1 and the node-classification metrics against hand-computed cases."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dgbench.metrics import (f1_score, hits_at, mean_reciprocal_rank, node_classification_metrics,
                             reciprocal_ranks, roc_auc)

NAN = float("nan")


def test_mrr_hand_computed_with_averaged_ties():
    positive = np.array([0.9, 0.5, 0.2, 0.7])
    negatives = np.array([
        [0.1, 0.2, 0.3],   # above all three: rank 1
        [0.6, 0.5, 0.1],   # one above, one tied: rank 1 + 1 + 0.5 = 2.5
        [0.3, 0.4, 0.5],   # below all: rank 4
        [0.7, 0.7, 0.7],   # tied with all three: rank 1 + 1.5 = 2.5
    ])
    expected = [1.0, 1 / 2.5, 1 / 4, 1 / 2.5]
    np.testing.assert_allclose(reciprocal_ranks(positive, negatives), expected)
    assert mean_reciprocal_rank(positive, negatives) == pytest.approx(sum(expected) / 4)
    assert hits_at(positive, negatives, 1) == pytest.approx(1 / 4)
    assert hits_at(positive, negatives, 3) == pytest.approx(3 / 4)  # 1, 2.5, 2.5 <= 3; 4 is not


def test_a_constant_scorer_gets_the_middle_rank_not_the_best_or_worst():
    positive, negatives = np.zeros(5), np.zeros((5, 9))
    assert mean_reciprocal_rank(positive, negatives) == pytest.approx(1 / 5.5)  # rank 1 + 9/2


def test_missing_negatives_are_not_counted_and_rows_without_any_are_left_out():
    positive = np.array([0.5, 0.5, 0.5])
    negatives = np.array([[0.9, NAN, NAN], [0.1, 0.2, NAN], [NAN, NAN, NAN]])
    rr = reciprocal_ranks(positive, negatives)
    assert rr[0] == pytest.approx(0.5) and rr[1] == pytest.approx(1.0) and math.isnan(rr[2])
    assert mean_reciprocal_rank(positive, negatives) == pytest.approx(0.75)
    assert hits_at(positive, negatives, 1) == pytest.approx(0.5)
    assert math.isnan(mean_reciprocal_rank(np.array([1.0]), np.array([[NAN]])))


def test_f1_hand_computed():
    scores = np.array([2.0, -1.0, 0.5, 3.0, -2.0])  # predicted positive: 0, 2, 3
    labels = np.array([1, 1, 0, 1, 0])              # true positive: 0, 1, 3
    # TP = 2 (0, 3), FP = 1 (2), FN = 1 (1): F1 = 2·2 / (3 + 3)
    assert f1_score(scores, labels) == pytest.approx(4 / 6)
    assert f1_score(np.array([1.0, 2.0]), np.array([0, 0])) == 0.0
    assert math.isnan(f1_score(np.array([-1.0]), np.array([0])))


def test_node_classification_metrics_on_an_imbalanced_case():
    scores = np.array([0.9, -0.5, -0.2, -0.1, -0.3, 0.2])
    labels = np.array([1, 0, 0, 1, 0, 0])
    metrics = node_classification_metrics(scores, labels)
    # AUC: positives rank above 4 + 3 of the 4 negatives' pairs: (4 + 3) / 8
    assert metrics["auc"] == pytest.approx(7 / 8) == roc_auc(scores, labels)
    assert metrics["f1"] == pytest.approx(2 * 1 / (2 + 2))  # predicted {0, 5}, true {0, 3}
    assert set(metrics) == {"auc", "ap", "f1", "accuracy"}


def test_a_split_without_positives_has_no_reciprocal_rank():
    import numpy as np

    from dgbench.metrics import hits_at, mean_reciprocal_rank
    assert np.isnan(mean_reciprocal_rank(np.zeros(0), np.zeros(0))) and np.isnan(hits_at(np.zeros(0), np.zeros(0), 1))
