"""The evaluation options both families' protocols declare (trainers/*/family.py ``TaskOptions``): the task
(``--task link-prediction|node-classification``), its negatives or its decoder, and how a run's options
become its evaluation sets and the record's ``task`` and ``evaluation`` block."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from dgbench.errors import DgbenchError
from dgbench.options import option
from dgbench.tasks import LINK_PREDICTION, NODE_CLASSIFICATION, TASKS
from dgbench.tasks import negatives as ns
from dgbench.tasks.evalset import EvaluationSet

DEFAULT_EVAL_NEGATIVES = 9  # each positive ranked among 10 candidates: MRR, Hits@1/3 mean something


def task_option() -> Any:
    return option(LINK_PREDICTION, "Scored in validation and test: links, or node labels "
                                   "(docs/tasks.md).", choices=TASKS)


def decoder_epochs_option() -> Any:
    return option(50, "Node classification: decoder epochs (best val AUC kept).",
                  positive=True)


def decoder_lr_option() -> Any:
    return option(1e-3, "Node classification: decoder Adam lr.", positive=True)


def record_task(task: str) -> str:
    """The record's ``task`` field of a ``--task`` value (``link_prediction``, ``node_classification``)."""
    return task.replace("-", "_")


def check_task(task: str, extra_negatives: str | None) -> None:
    """Options of the other task are refused, not silently ignored."""
    if task == NODE_CLASSIFICATION and extra_negatives:
        raise DgbenchError(f"--extra-negatives {extra_negatives}: negative sets are link prediction's; "
                           f"--task node-classification scores the store's labels")


def negatives_option() -> Any:
    return option(ns.RANDOM, "Evaluation negatives (Poursafaei et al. NeurIPS'22; dgbench/tasks/negatives.py).",
                  choices=ns.STRATEGIES)


def extra_negatives_option() -> Any:
    return option(None, "More strategies scored after training ('test:historical').",
                  record=False)


def eval_negatives_option() -> Any:
    return option(DEFAULT_EVAL_NEGATIVES, "Negatives per validation/test positive in the evaluation set.",
                  positive=True)


def strategies(negatives: str, extra: str | None) -> list[str]:
    """The run's strategies, its first one first; unknown or repeated ones refused."""
    chosen = [negatives] + [s.strip() for s in (extra or "").split(",") if s.strip()]
    for strategy in chosen:
        ns.check_strategy(strategy)
    if len(set(chosen)) != len(chosen):
        raise DgbenchError(f"--negatives {negatives} --extra-negatives {extra}: a strategy is named twice")
    return chosen


_SKIPPED = ContextVar("dgbench_evaluation_sets_skipped", default=False)


@contextlib.contextmanager
def without_evaluation_sets() -> Iterator[None]:
    """Within this block a run has no evaluation sets: :func:`evaluation_sets` neither builds nor reads them.
    For callers that train nothing and score nothing (``dgbench project``'s dry runs): building a snapshot
    store's sets holds every snapshot's edge keys (dgbench/tasks/link.py), O(N·T), ~26 GiB at ESDG's
    P = 128 weak-scaling size."""
    token = _SKIPPED.set(True)
    try:
        yield
    finally:
        _SKIPPED.reset(token)


def evaluation_sets(store: Path, negatives: str, extra: str | None, k: int,
                    max_events: int | None = None, task: str = LINK_PREDICTION) -> list[EvaluationSet]:
    """The run's evaluation sets (written beside the store on first use): its negative sets, or with
    ``task`` node classification the store's label set; none inside :func:`without_evaluation_sets`."""
    if _SKIPPED.get():
        return []
    from dgbench.tasks.link import link_prediction_set
    if task == NODE_CLASSIFICATION:
        from dgbench.tasks.node import label_set
        return [label_set(store, max_events)]
    return [link_prediction_set(store, strategy, k, max_events=max_events) for strategy in strategies(negatives, extra)]


def evaluation_block(sets: list[EvaluationSet]) -> dict[str, Any]:
    """The record's ``evaluation`` block: the task and every set scored, the first one's fingerprint on top
    (what the official ranking compares)."""
    task = NODE_CLASSIFICATION if sets[0].spec.task.startswith(NODE_CLASSIFICATION) else LINK_PREDICTION
    return {"task": task, "fingerprint": sets[0].fingerprint,
            "sets": [{**s.spec.as_dict(), "name": s.spec.name, "fingerprint": s.fingerprint,
                      "splits": s.details.get("splits", {})} for s in sets]}
