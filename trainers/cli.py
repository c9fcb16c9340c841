"""`dgbench run`: train a model with a scheme on a store and write a result record.

The store's kind picks the family: snapshot stores go to the discrete-time trainers (ESDG schemes),
edge-stream stores to the continuous-time trainers (memory-based TGNNs).
"""
from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import click

from dgbench.errors import DgbenchError
from dgbench.store import SNAPSHOTS, read_attrs
from trainers.config import RunConfig

FAMILY_OF_KIND = {SNAPSHOTS: "discrete", "stream": "continuous"}
EXPERIMENT_MODULE = {"discrete": "trainers.discrete.experiment", "continuous": "trainers.continuous.experiment"}


def run(config: RunConfig) -> tuple[dict, Path | None]:
    """Run one experiment; returns (record, path written).

    Under an external torchrun every rank gets the complete record; only rank 0 writes it
    (path None elsewhere), so a multi-node job leaves one record, not one per rank.
    """
    from dgbench.records import prepare_output, write_record
    if int(os.environ.get("RANK", "0")) == 0:
        prepare_output(config.out)  # an unwritable or taken --out fails now, not after training (issue 19)
    family = FAMILY_OF_KIND[read_attrs(config.dataset)["kind"]]
    try:
        experiment = importlib.import_module(EXPERIMENT_MODULE[family])
    except ModuleNotFoundError as exc:
        raise DgbenchError(f"the {family}-time trainers are not available ({exc})") from exc
    record = experiment.run_experiment(config)
    if int(os.environ.get("RANK", "0")) != 0:
        return record, None
    return record, write_record(record, config.out)


@click.command(name="run")
@click.option("--scheme", required=True, help="Training scheme (see `dgbench list`).")
@click.option("--model", required=True, help="Model of the zoo (see `dgbench list`).")
@click.option("--dataset", required=True, type=click.Path(path_type=Path), help="Store to train on.")
@click.option("--nproc", type=click.IntRange(1), default=1, show_default=True, help="Ranks to start (ignored under torchrun).")
@click.option("--epochs", type=click.IntRange(1), default=3, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--lr", type=float, default=0.01, show_default=True)
@click.option("--hidden", type=click.IntRange(1), default=6, show_default=True, help="Hidden width.")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default=None, help="Default: nccl with CUDA, else gloo.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None)
@click.option("--out", type=click.Path(path_type=Path), default=Path("runs"), show_default=True,
              help="Directory (or .json path) for the result record.")
@click.option("--timeout", "timeout_s", type=float, default=300.0, show_default=True,
              help="Collective timeout in seconds: a dead rank fails the job instead of hanging it.")
@click.option("--blocks", "--nb", type=click.IntRange(1), default=1, show_default=True,
              help="[discrete] gradient-checkpoint blocks of timesteps.")
@click.option("--transfer", type=click.Choice(["base", "gd"]), default="base", show_default=True,
              help="[discrete] move snapshots whole or as graph differences.")
@click.option("--window", type=click.IntRange(1), default=3, show_default=True, help="[discrete] TM-GCN window w.")
@click.option("--theta", type=click.FloatRange(0, 1, min_open=True), default=0.1, show_default=True,
              help="[discrete] fraction of edges used as positives per timestep.")
@click.option("--partitioner", default="auto", show_default=True, help="[discrete vertex] partitioner.")
@click.option("--batch-size", type=click.IntRange(1), default=600, show_default=True, help="[continuous] events per batch.")
@click.option("--neighbors", type=click.IntRange(1), default=10, show_default=True, help="[continuous] sampled neighbours.")
@click.option("--sampler", type=click.Choice(["recent", "uniform"]), default="recent", show_default=True)
@click.option("--memory-dim", type=click.IntRange(1), default=100, show_default=True)
@click.option("--partition", type=click.Choice(["range", "interval", "reflexbicut"]), default="reflexbicut",
              show_default=True, help="[continuous sven] vertex partitioning.")
@click.option("--microbatches", type=click.IntRange(0), default=0, show_default=True,
              help="[continuous sven] pipelining granularity (0 = from Eq. 12).")
@click.option("--async-allreduce", is_flag=True, help="[continuous sven] staleness-1 gradient all-reduce.")
def run_command(**options) -> None:
    """Train MODEL with SCHEME on DATASET and write a result record."""
    config = RunConfig(**options)
    record, path = run(config)
    if path is None:
        return
    final = record.get("final_metrics", {})
    click.echo(f"wrote {path}")
    click.echo(json.dumps({"scheme": record["scheme"], "model": record["model"], "world_size": record["world_size"],
                           "fingerprint": record["dataset"]["fingerprint"][:16], **final}, sort_keys=True))
