"""The dry run: what one training epoch of a scheme moves at P ranks, counted without training.

It goes through the same code the real run does, on a world that counts and moves nothing
(:class:`CountingComm`); ranks are planned one at a time and only counts are kept.
See docs/projection.md (section "1. The dry run").
"""
from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dgbench.counting import CONTROL_TAGS, TagVolume
from dgbench.memory import peak_rss_bytes
from dgbench.tasks.options import without_evaluation_sets

SCHEMA, VERSION = "dgbench.dryrun", 1


# --------------------------------------------------------------------------- results

@dataclass
class DryRun:
    """One scheme's epoch at ``world_size`` ranks, counted (see the module docstring)."""

    family: str
    scheme: str
    model: str
    world_size: int
    store: dict[str, Any]
    hyperparameters: dict[str, Any]
    unit: str  # "epoch" (discrete) or "batch" (continuous)
    units: int
    tags: dict[str, TagVolume]
    work: dict[str, np.ndarray]  # per rank (discrete: [P]) or per unit and rank (continuous: [U, P])
    work_pattern: str
    parameters: int
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    peak_rss_bytes: int = 0

    def bytes_by_tag(self) -> dict[str, int]:
        return {tag: volume.bytes for tag, volume in self.tags.items()}

    def elements_by_tag(self) -> dict[str, int]:
        return {tag: volume.elements for tag, volume in self.tags.items()}

    def total_bytes(self, control: bool = False) -> int:
        return sum(v.bytes for tag, v in self.tags.items() if control or tag not in CONTROL_TAGS)

    def as_json(self) -> dict[str, Any]:
        from dgbench.records import code_provenance
        work = {name: (values.sum(0) if values.ndim == 2 else values).tolist() for name, values in self.work.items()}
        return {"schema": SCHEMA, "version": VERSION, "family": self.family, "scheme": self.scheme,
                "model": self.model, "world_size": self.world_size, "store": self.store,
                "hyperparameters": self.hyperparameters, "code": code_provenance(), "unit": self.unit,
                "units": self.units, "parameters": self.parameters,
                "totals": {"bytes": self.total_bytes(), "bytes_with_control": self.total_bytes(control=True)},
                "tags": {tag: volume.summary() for tag, volume in sorted(self.tags.items())},
                "work_per_rank": work, "work_pattern": self.work_pattern, "notes": self.notes,
                "extra": self.extra, "seconds": self.seconds, "peak_rss_bytes": self.peak_rss_bytes}


# --------------------------------------------------------------------------- driver

def dry_run(config: Any, epoch: int | None = None, eq12_n: int | None = None, problem: Any = None,
            blad_plan: dict[str, Any] | None = None) -> DryRun:
    """Count one training epoch of ``config`` (see :func:`_dry_run`), without the run's evaluation sets."""
    with without_evaluation_sets():  # a dry run scores nothing (dgbench/tasks/options.py)
        return _dry_run(config, epoch, eq12_n, problem, blad_plan)


def _dry_run(config: Any, epoch: int | None = None, eq12_n: int | None = None, problem: Any = None,
             blad_plan: dict[str, Any] | None = None) -> DryRun:
    """Count one training epoch of ``config`` (a :class:`dgbench.trainers.config.RunConfig`) at ``config.nproc``
    ranks. ``epoch``: which epoch's sampled pairs (discrete; default the run's last). ``eq12_n``: the
    micro-batch count a run chose by Eq. 12 at run time (Sven with ``--microbatches 0``). ``blad_plan``: the
    plan a BLAD run made from its first epoch's profile (its record's ``extra.blad``). ``problem``: the
    family's partition problem of this same store, model and protocol, when the caller loaded it already
    (:func:`partition_problem`); loading the store dominates large dry runs."""
    from dgbench.trainers.experiment import family_hooks, resolve
    started = time.perf_counter()
    run = resolve(config)
    world = int(config.nproc)
    hooks = family_hooks(run.family)
    problem = problem if problem is not None else _problem(run, hooks)
    loaded = time.perf_counter()
    partition = run.scheme.partition(problem, world, run.scheme_options)
    partitioned = time.perf_counter()
    if run.family == "discrete":
        from dgbench.trainers.projection.plans import discrete_epoch
        result = discrete_epoch(run, problem, partition, world, config.epochs - 1 if epoch is None else epoch,
                                blad_plan)
    else:
        from dgbench.trainers.projection.plans import continuous_epoch
        result = continuous_epoch(run, problem, partition, world, eq12_n)
    result.seconds = {"load": loaded - started, "partition": partitioned - loaded,
                      "plan": time.perf_counter() - partitioned}
    result.peak_rss_bytes = peak_rss_bytes()
    return result


def partition_problem(config: Any) -> Any:
    """The family's partition problem of ``config`` (what :func:`dry_run` loads), to share between dry runs
    of the same store, model and protocol (schemes differ only in what they do with it)."""
    from dgbench.trainers.experiment import family_hooks, resolve
    with without_evaluation_sets():
        run = resolve(config)
        return _problem(run, family_hooks(run.family))


def _problem(run: Any, hooks: Any) -> Any:
    """The partition problem a dry run plans on: the discrete family's data built step by step on demand
    (:mod:`dgbench.trainers.projection.lazydata`: the plans need the partition, the sizes and rank 0's own steps, never
    every step's arrays at once), the continuous family's as the run loads it."""
    if run.family == "discrete":
        from dgbench.trainers.projection.lazydata import lazy_partition_problem
        return lazy_partition_problem(run)
    return hooks.partition_problem(run)


def store_entry(path: Any) -> dict[str, Any]:
    from dgbench.store import open_store
    store = open_store(path)
    return {"path": str(store.path), "fingerprint": store.fingerprint, "kind": store.kind,
            "num_nodes": int(store.num_nodes)}


def measured_by_tag(record: dict[str, Any], epoch: int = -1, field_name: str = "bytes") -> dict[str, int]:
    """What a real run's ranks sent per tag in one epoch (``per_rank`` of the record), summed."""
    out: dict[str, int] = defaultdict(int)
    for rank in record["epochs"][epoch]["per_rank"]:
        for tag, stats in rank["comm_by_tag"].items():
            out[tag] += int(stats[field_name])
    return dict(out)


def at_world(config: Any, world: int) -> Any:
    """A copy of ``config`` (a :class:`dgbench.trainers.config.RunConfig`) at ``world`` ranks."""
    from dgbench.trainers.config import RunConfig
    run = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
           if f.name not in ("scheme", "model", "dataset", "options", "extra")}
    run["nproc"] = world
    return RunConfig(config.scheme, config.model, config.dataset, options=dict(config.options),
                     extra=dict(config.extra), **run)
