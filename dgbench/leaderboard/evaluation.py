"""The accuracy track's evaluation-set rule, and its time-to-quality view.

**Evaluation sets.** An official store's registry entry lists the fingerprints of its official evaluation
sets (``evaluation_sets``: name -> fingerprint, written by ``python -m dgbench.leaderboard.official``). An
accuracy record on that store ranks officially only if the set it scored first (its ``evaluation`` block,
whose metrics are ``final_metrics.test``) is one of them, fingerprint for fingerprint. Otherwise the
record is listed with the unofficial rows, and :func:`evaluation_problem` says why in one line: a
different set is a different benchmark (TGB issue #62's MRR 0.73 against 0.31). Throughput and scaling
rows do not depend on the evaluation set and are not affected.

**Time to quality** (MLPerf's measure): seconds of training (the epochs' ``time_s``, evaluation left out)
until the validation figure first reaches the store's ``quality_target`` (registry), so a scheme cannot
buy edges/s with stale updates or huge batches unseen.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dgbench.store import SNAPSHOTS, read_attrs
from dgbench.tasks import negatives as ns
from dgbench.tasks.options import DEFAULT_EVAL_NEGATIVES


def official_strategies(kind: str) -> tuple[str, ...]:
    """The negative strategies whose sets are official on a store of ``kind`` (inductive: streams only)."""
    return tuple(s for s in ns.STRATEGIES if not (kind == SNAPSHOTS and s == ns.INDUCTIVE))


def official_evaluation_sets(store: Path, negatives: int = DEFAULT_EVAL_NEGATIVES) -> dict[str, str]:
    """name -> fingerprint of the store's official link-prediction sets and, where its labels make the task,
    its node-classification label set (each written beside the store if missing)."""
    from dgbench.tasks.link import link_prediction_set
    kind = str(read_attrs(store)["kind"])
    sets = [link_prediction_set(store, strategy, negatives) for strategy in official_strategies(kind)]
    labels = _official_label_set(store)
    return {s.spec.name: s.fingerprint for s in sets + ([labels] if labels is not None else [])}


def _official_label_set(store: Path):  # noqa: ANN202 (EvaluationSet; imported lazily like the link sets)
    """The store's node-classification label set, when its labels make the task (None otherwise: no labels,
    or one class only, as the LastFM slice)."""
    from dgbench.errors import DgbenchError
    from dgbench.tasks.node import label_set
    try:
        return label_set(store)
    except DgbenchError:
        return None


def evaluation_problem(record: dict[str, Any], registered: dict[str, Any] | None) -> str | None:
    """Why an accuracy record on a registered store does not rank officially (None: it does, or the
    registry lists no sets for the store)."""
    if registered is None or not registered.get("evaluation_sets"):
        return None
    official = registered["evaluation_sets"]
    label = registered.get("label", registered.get("name", "the store"))
    block = record.get("evaluation")
    sets = block.get("sets") if isinstance(block, dict) else None
    if not sets or not isinstance(sets, list) or not isinstance(sets[0], dict):
        return (f"cites no evaluation set (validation/test pairs drawn at run time); official accuracy rows on "
                f"{label} score its registered sets ({', '.join(sorted(official))})")
    name, fingerprint = str(sets[0].get("name")), str(sets[0].get("fingerprint"))
    if name not in official:
        return f"evaluation set {name} is not an official set of {label} ({', '.join(sorted(official))})"
    if fingerprint != official[name]:
        return (f"evaluation set {name} has fingerprint {fingerprint[:12]}, the official one of {label} is "
                f"{official[name][:12]}")
    return None


def time_to_quality(record: dict[str, Any], target: dict[str, Any]) -> tuple[float, int] | None:
    """(training seconds, epochs) until ``metrics[split][metric] >= value`` first holds; None if never."""
    split, metric, value = target.get("split", "val"), target.get("metric", "ap"), float(target["value"])
    seconds = 0.0
    for count, epoch in enumerate(record.get("epochs", []), start=1):
        seconds += float(epoch.get("time_s", 0.0))
        reached = (epoch.get("metrics") or {}).get(split, {}).get(metric)
        if isinstance(reached, (int, float)) and reached >= value:
            return seconds, count
    return None
