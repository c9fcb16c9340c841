"""`dgbench run`: train a model with a scheme on a store and write a result record.

The store's kind picks the family: snapshot stores go to the discrete-time schemes, edge-stream
stores to the continuous-time ones. Every option except --scheme/--model/--dataset is generated from
the options its owner declares (the run, a family protocol, a scheme or a model; dgbench.options):
``dgbench run --help`` lists who takes each one, and a run refuses an option none of its owners takes.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from dgbench.errors import DgbenchError
from dgbench.options import Options, click_options
from dgbench.registry import MODELS, SCHEMES, load_plugins
from trainers.config import RunConfig


def run(config: RunConfig) -> tuple[dict, Path | None]:
    """Run one experiment; returns (record, path written).

    Under an external torchrun every rank gets the complete record; only rank 0 writes it
    (path None elsewhere), so a multi-node job leaves one record, not one per rank.
    """
    from dgbench.records import prepare_output, write_record
    from trainers.experiment import resolve, run_experiment
    resolve(config)  # a run that would not run as asked fails before anything is written
    if int(os.environ.get("RANK", "0")) == 0:
        prepare_output(config.out)  # an unwritable or taken --out fails now, not after training (issue 19)
    record = run_experiment(config)
    if int(os.environ.get("RANK", "0")) != 0:
        return record, None
    return record, write_record(record, config.out)


def _owners() -> list[tuple[str, type[Options]]]:
    """Every declared option owner, labelled for --help."""
    load_plugins("trainers")
    from trainers.continuous.family import TaskOptions as ContinuousTask
    from trainers.discrete.family import TaskOptions as DiscreteTask
    from trainers.seeds import SeedsOptions
    owners: list[tuple[str, type[Options]]] = [("run", RunConfig), ("run", SeedsOptions), ("discrete", DiscreteTask),
                                               ("continuous", ContinuousTask)]
    owners += [(scheme.name, scheme.Options) for scheme in SCHEMES.values()]  # type: ignore[attr-defined]
    owners += [(model.name, model.options) for model in MODELS.values()]
    return owners


def _summary(record: dict[str, Any], path: Path) -> str:
    """The closing line: what ran, on which store, how fast and how well."""
    last = record["epochs"][-1] if record.get("epochs") else {}
    unit = "events/s" if record["family"] == "continuous" else "edges/s"
    test = record.get("final_metrics", {}).get("test", {})
    scores = "  ".join(f"test {k} {v:.4f}" for k, v in test.items() if k in ("ap", "auc"))
    return (f"wrote {path}: {record['scheme']}/{record['model']} P={record['world_size']} on "
            f"{record['dataset']['name']} ({record['dataset']['fingerprint'][:12]})  "
            f"{last.get('time_s', 0.0):.2f}s/epoch  {last.get('throughput', 0.0) / 1e6:.3f}M {unit}  {scores}"
            f"{_contention_note(record)}").rstrip()


def _contention_note(record: dict[str, Any]) -> str:
    """'  CONTENDED (reason)' when the run's timing was contended (dgbench/timing.py), else nothing."""
    timing = record.get("timing") or {}
    if not timing.get("contended"):
        return ""
    return f"  CONTENDED ({timing['reasons'][0]}; not ranked on throughput/scaling)"


def _run_command() -> click.Command:
    def callback(scheme: str, model: str, dataset: Path, **given: Any) -> None:
        """Train MODEL with SCHEME on DATASET and write a result record."""
        from trainers.seeds import parse_seeds, run_seeds
        seeds = given.pop("seeds", None)
        if seeds is not None and given.get("seed") is not None:
            raise DgbenchError("--seed and --seeds: give one (--seeds runs one record per seed)")
        config = RunConfig(scheme, model, dataset, **given)
        runs = run_seeds(config, parse_seeds(seeds)) if seeds is not None else [run(config)]
        for record, path in runs:
            if path is None:
                continue
            click.echo(_summary(record, path))
            final = record.get("final_metrics", {})
            click.echo(json.dumps({"scheme": record["scheme"], "model": record["model"],
                                   "world_size": record["world_size"], "seed": record["hyperparameters"].get("seed"),
                                   "fingerprint": record["dataset"]["fingerprint"][:16], **final}, sort_keys=True))

    params: list[click.Parameter] = [
        click.Option(["--scheme"], required=True, help="Training scheme (see `dgbench list`)."),
        click.Option(["--model"], required=True, help="Model of the zoo (see `dgbench list`)."),
        click.Option(["--dataset"], required=True, type=click.Path(path_type=Path), help="Store to train on."),
        *click_options(_owners())]
    return click.Command("run", callback=callback, params=params,
                         help="Train MODEL with SCHEME on DATASET and write a result record.")


class _LazyRun(click.Command):
    """Builds the real command (which imports the trainers) only when `run` is used."""

    def __init__(self) -> None:
        super().__init__("run", help="Train MODEL with SCHEME on DATASET and write a result record.")
        self._real: click.Command | None = None

    def real(self) -> click.Command:
        if self._real is None:
            self._real = _run_command()
        return self._real

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return self.real().get_params(ctx)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        return self.real().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        return self.real().invoke(ctx)


run_command = _LazyRun()
