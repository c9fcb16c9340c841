"""`dgbench tasks STORE`: write a store's evaluation sets (link prediction's negative sets, or with
``--task node-classification`` its label set) beside it and print their fingerprints."""
from __future__ import annotations

from pathlib import Path

import click

from dgbench.store import SNAPSHOTS, read_attrs
from dgbench.tasks import LINK_PREDICTION, NODE_CLASSIFICATION, TASKS
from dgbench.tasks import negatives as ns

DEFAULT_NEGATIVES = 9  # per positive: each positive is ranked among 10 candidates (MRR, Hits@1/3)


@click.command("tasks")
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--negatives", "strategies", default=None,
              help="Comma list of negative strategies (default: every one the store allows: random, historical, "
                   "and inductive on streams).")
@click.option("--eval-negatives", type=click.IntRange(1), default=DEFAULT_NEGATIVES, show_default=True,
              help="Negatives per positive.")
@click.option("--max-events", type=click.IntRange(1), default=None,
              help="Streams: the set of a run on the first N events (dgbench run --max-events).")
@click.option("--task", type=click.Choice(TASKS), default=LINK_PREDICTION, show_default=True,
              help="link-prediction: the negative sets; node-classification: the store's label set.")
def tasks_command(store: Path, strategies: str | None, eval_negatives: int, max_events: int | None,
                  task: str) -> None:
    """Write STORE's evaluation sets (STORE.tasks/) and print their fingerprints."""
    from dgbench.tasks.link import link_prediction_set
    if task == NODE_CLASSIFICATION:
        from dgbench.tasks.node import label_set
        labels = label_set(store, max_events)
        summary = "  ".join(f"{split}: {c['instances']:,} labelled, {c['positives']:,} positive"
                            for split, c in labels.details.get("splits", {}).items())
        click.echo(f"{labels.path}  fingerprint {labels.fingerprint[:16]}  {summary}")
        return
    snapshots = read_attrs(store).get("kind") == SNAPSHOTS
    chosen = [s.strip() for s in strategies.split(",")] if strategies else \
        [s for s in ns.STRATEGIES if not (snapshots and s == ns.INDUCTIVE)]
    for strategy in chosen:
        evaluation = link_prediction_set(store, ns.check_strategy(strategy), eval_negatives, max_events=max_events)
        counts = evaluation.details.get("splits", {})
        summary = "  ".join(f"{split}: {c['positives']:,} positives, {c['negatives']:,} negatives"
                            for split, c in counts.items())  # the set's details count positives without any
        click.echo(f"{evaluation.path}  fingerprint {evaluation.fingerprint[:16]}  {summary}")
