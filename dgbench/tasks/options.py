"""The evaluation options both families' protocols declare (trainers/*/family.py ``TaskOptions``), and
how a run's options become its evaluation sets and the record's ``evaluation`` block."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dgbench.errors import DgbenchError
from dgbench.options import option
from dgbench.tasks import LINK_PREDICTION
from dgbench.tasks import negatives as ns
from dgbench.tasks.evalset import EvaluationSet

DEFAULT_EVAL_NEGATIVES = 9  # each positive ranked among 10 candidates: MRR, Hits@1/3 mean something


def negatives_option() -> Any:
    return option(ns.RANDOM, "Negative strategy of the evaluation set scored (Poursafaei et al. NeurIPS'22; "
                             "dgbench/tasks/negatives.py).", choices=ns.STRATEGIES)


def extra_negatives_option() -> Any:
    return option(None, "Comma list of further strategies scored in the same run, after the same training "
                        "(metrics 'test:historical', ...; the record cites every set).", record=False)


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


def evaluation_sets(store: Path, negatives: str, extra: str | None, k: int,
                    max_events: int | None = None) -> list[EvaluationSet]:
    """The run's evaluation sets (written beside the store on first use)."""
    from dgbench.tasks.link import link_prediction_set
    return [link_prediction_set(store, strategy, k, max_events=max_events) for strategy in strategies(negatives, extra)]


def evaluation_block(sets: list[EvaluationSet]) -> dict[str, Any]:
    """The record's ``evaluation`` block: the task and every set scored, the first one's fingerprint on top
    (what the official ranking compares)."""
    return {"task": LINK_PREDICTION, "fingerprint": sets[0].fingerprint,
            "sets": [{**s.spec.as_dict(), "name": s.spec.name, "fingerprint": s.fingerprint,
                      "splits": s.details.get("splits", {})} for s in sets]}
