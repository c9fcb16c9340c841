"""The dry run: what one training epoch of a scheme moves at P ranks, counted without training.

Communication volume is a deterministic function of the store, the partition, the protocol and the
model's widths, so it can be counted for any P without the ranks. The dry run goes through the same
code the real run does, with a world that counts and moves nothing (:class:`CountingComm` in a
:class:`~dgbench.dist.DistContext` per rank):

* the run is resolved by :func:`trainers.experiment.resolve` (scheme, model, options, world rule);
  the partition step is the scheme's own :meth:`~trainers.contract.Scheme.partition` on the family's
  partition problem, exactly as rank 0 of a job runs it;
* **discrete**: rank 0's trainer is built by :func:`trainers.discrete.family.build_rank` (the scheme's
  placement, schedule and the model's parameters); one no-grad forward of its first block runs on the
  counting world (placements may learn their exchange widths on a first forward, and the collectives
  it calls give the calls per block); the per-tag elements of the epoch are the schedule's own
  :meth:`~trainers.discrete.schedule.Schedule.predicted_elements` (what the conformance suite checks
  against real runs); their (sender, receiver) shape and the per-rank work come from the placement's
  plan (:mod:`trainers.projection.plans`);
* **continuous**: rank r's node state and batch planner come from the scheme's
  :meth:`~trainers.contract.ContinuousScheme.node_state` and
  :meth:`~trainers.contract.ContinuousScheme.assign_events` (the hooks the trainer calls), every
  training batch is planned on every rank (its events, sampled neighbours, route to the owners and its
  write-back ids), and the collectives the node state issues for that plan are counted
  (:mod:`trainers.projection.plans`). The model is built once, for its widths (:class:`StateLayout`) and
  parameter count; it never runs.

Ranks are planned one at a time and only counts are kept (per tag: a P x P matrix of elements and the
per-rank elements of each unit of work), so memory stays that of one rank's plan plus the store.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dgbench.dist import DRY_RUN_BACKEND, Comm, DistContext
from dgbench.errors import DgbenchError
from dgbench.memory import peak_rss_bytes
from dgbench.tasks.options import without_evaluation_sets

SCHEMA, VERSION = "dgbench.dryrun", 1
INT_BYTES = 8  # ids and row counts travel as int64
ALL_TO_ALL, ALL_REDUCE, ALL_GATHER, POINT_TO_POINT = "all_to_all", "all_reduce", "all_gather", "p2p"
PLAN, UNIFORM, COLLECTIVE = "plan", "uniform (assumed)", "collective"
CONTROL_TAGS = ("counts",)  # row counts: no volume in dgbench.dist.Comm.totals, counted here all the same


class DryRunUnsupported(DgbenchError):
    """A code path asked the counting world for something only real ranks can answer."""


@dataclass
class CountingComm(Comm):
    """A :class:`~dgbench.dist.Comm` that counts what this rank would send and sends nothing.

    Collectives return zeros of the shape the real one would (received rows from the splits given),
    so code that only moves planned rows runs unchanged. What needs the other ranks' answers (the row
    counts of :meth:`exchange_counts`, an uneven gather) is refused: the dry run plans those from every
    rank's lists instead. ``peers[tag][q]`` counts elements sent to rank q."""

    peers: dict[str, np.ndarray] = field(default_factory=dict)

    def _add(self, tag: str, per_peer: np.ndarray, element_size: int, calls: int = 1) -> None:
        per_peer = np.asarray(per_peer, np.int64).copy()
        per_peer[self.rank] = 0
        if tag not in self.peers:
            self.peers[tag] = np.zeros(self.world_size, np.int64)
        self.peers[tag] += per_peer
        stats = self.stats[tag]
        stats.calls += calls
        stats.elements += int(per_peer.sum())
        stats.bytes += int(per_peer.sum()) * element_size

    def all_to_all_single(self, tensor: torch.Tensor, send_splits: Sequence[int], recv_splits: Sequence[int],
                          tag: str = "all_to_all") -> torch.Tensor:
        row = math.prod(tensor.shape[1:])
        self._add(tag, np.asarray([int(s) for s in send_splits], np.int64) * row, tensor.element_size())
        return tensor.new_zeros((sum(int(r) for r in recv_splits), *tensor.shape[1:]))

    def all_to_all_single_async(self, tensor: torch.Tensor, send_splits: Sequence[int], recv_splits: Sequence[int],
                                tag: str = "all_to_all") -> tuple[torch.Tensor, Callable[[], None]]:
        return self.all_to_all_single(tensor, send_splits, recv_splits, tag), lambda: None

    def all_reduce(self, tensor: torch.Tensor, tag: str = "all_reduce", op=None) -> torch.Tensor:
        stats = self.stats[tag]
        stats.calls += 1
        stats.elements += tensor.numel()
        stats.bytes += tensor.numel() * tensor.element_size()
        return tensor

    def all_reduce_async(self, tensor: torch.Tensor, tag: str = "all_reduce") -> Callable[[], None]:
        self.all_reduce(tensor, tag)
        return lambda: None

    def send_async(self, tensor: torch.Tensor, peer: int, tag: str = "send") -> Callable[[], None]:
        per_peer = np.zeros(self.world_size, np.int64)
        per_peer[peer] = tensor.numel()
        self._add(tag, per_peer, tensor.element_size())
        return lambda: None

    def recv(self, out: torch.Tensor, peer: int, tag: str = "send") -> torch.Tensor:
        return out.zero_()

    def exchange_counts(self, send_counts: Sequence[int], tag: str = "counts") -> list[int]:
        raise DryRunUnsupported(f"dry run: rank {self.rank} asked the other ranks for their row counts ({tag}); "
                                f"only their plans can answer that")

    def all_gather_uneven(self, tensor: torch.Tensor, tag: str = "all_gather") -> torch.Tensor:
        raise DryRunUnsupported(f"dry run: an uneven all-gather ({tag}) needs the other ranks' rows")

    def barrier(self) -> None:
        return None

    def axis(self, rank: int, size: int) -> "CountingComm":
        """A sub-group's counting comm (dgbench.dist.make_mesh in a dry run), counting into the same stats."""
        return CountingComm(rank, size, self.device, self.stats)


def dry_context(rank: int, world_size: int) -> DistContext:
    """Rank ``rank`` of a counting world of ``world_size`` ranks, computing on the CPU."""
    device = torch.device("cpu")
    return DistContext(rank, world_size, DRY_RUN_BACKEND, device, CountingComm(rank, world_size, device))


# --------------------------------------------------------------------------- results

@dataclass
class TagVolume:
    """Everything one collective tag moves in an epoch.

    ``pairs[s, q]``: elements rank s sends rank q over the epoch (all-to-all, all-gather, p2p; zero
    for an all-reduce). ``sent[u, s]`` / ``received[u, q]``: elements per rank in unit u of the epoch
    (the whole epoch for the discrete family, one batch for the continuous one), ``calls``: collective
    calls per unit (every rank takes part in each). For an all-reduce, ``sent`` is each rank's payload
    (what :class:`~dgbench.dist.Comm` counts)."""

    tag: str
    kind: str
    element_bytes: int
    pairs: np.ndarray
    sent: np.ndarray
    received: np.ndarray
    calls: np.ndarray
    pattern: str = PLAN

    @property
    def elements(self) -> int:
        return int(self.sent.sum())

    @property
    def bytes(self) -> int:
        return self.elements * self.element_bytes

    def summary(self) -> dict[str, Any]:
        sent = self.sent.sum(0) * self.element_bytes
        received = self.received.sum(0) * self.element_bytes
        nonzero = self.pairs[self.pairs > 0]
        return {"kind": self.kind, "element_bytes": self.element_bytes, "elements": self.elements,
                "bytes": self.bytes, "calls": int(self.calls.sum()), "pattern": self.pattern,
                "per_rank_sent_bytes": sent.tolist(), "per_rank_received_bytes": received.tolist(),
                "max_rank_sent_bytes": int(sent.max(initial=0)), "pairs_nonzero": int(nonzero.size),
                "max_pair_bytes": int(nonzero.max(initial=0)) * self.element_bytes}


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
        from dgbench.records import git_state
        work = {name: (values.sum(0) if values.ndim == 2 else values).tolist() for name, values in self.work.items()}
        return {"schema": SCHEMA, "version": VERSION, "family": self.family, "scheme": self.scheme,
                "model": self.model, "world_size": self.world_size, "store": self.store,
                "hyperparameters": self.hyperparameters, "code": git_state(), "unit": self.unit,
                "units": self.units, "parameters": self.parameters,
                "totals": {"bytes": self.total_bytes(), "bytes_with_control": self.total_bytes(control=True)},
                "tags": {tag: volume.summary() for tag, volume in sorted(self.tags.items())},
                "work_per_rank": work, "work_pattern": self.work_pattern, "notes": self.notes,
                "extra": self.extra, "seconds": self.seconds, "peak_rss_bytes": self.peak_rss_bytes}


class TagCounter:
    """Accumulates tags unit by unit: ``add(tag, unit, sender_vector_or_matrix)``."""

    def __init__(self, world_size: int, units: int):
        self.world, self.units = world_size, units
        self.tags: dict[str, TagVolume] = {}

    def _volume(self, tag: str, kind: str, element_bytes: int, pattern: str = PLAN) -> TagVolume:
        if tag not in self.tags:
            p, u = self.world, self.units
            self.tags[tag] = TagVolume(tag, kind, element_bytes, np.zeros((p, p), np.int64),
                                       np.zeros((u, p), np.int64), np.zeros((u, p), np.int64),
                                       np.zeros(u, np.int64), pattern)
        volume = self.tags[tag]
        if (volume.kind, volume.element_bytes) != (kind, element_bytes):
            raise DgbenchError(f"dry run: tag '{tag}' counted as {kind}/{element_bytes} B and "
                               f"{volume.kind}/{volume.element_bytes} B")
        return volume

    def move(self, tag: str, kind: str, element_bytes: int, unit: int, sender: int | None, receiver: int | None,
             elements: np.ndarray, calls: int = 0) -> None:
        """``elements[q]``: from ``sender`` to each q (receiver None), or from each q to ``receiver``."""
        volume = self._volume(tag, kind, element_bytes)
        elements = np.asarray(elements, np.int64).copy()
        if sender is not None:
            elements[sender] = 0
            volume.pairs[sender] += elements
            volume.sent[unit, sender] += elements.sum()
            volume.received[unit] += elements
        else:
            assert receiver is not None
            elements[receiver] = 0
            volume.pairs[:, receiver] += elements
            volume.sent[unit] += elements
            volume.received[unit, receiver] += elements.sum()
        volume.calls[unit] = max(volume.calls[unit], calls)

    def reduce(self, tag: str, element_bytes: int, unit: int, rank: int, elements: int, calls: int = 1) -> None:
        volume = self._volume(tag, ALL_REDUCE, element_bytes, COLLECTIVE)
        volume.sent[unit, rank] += elements
        volume.received[unit, rank] += elements
        volume.calls[unit] = max(volume.calls[unit], calls)

    def matrix(self, tag: str, kind: str, element_bytes: int, pairs: np.ndarray, calls: int, pattern: str) -> None:
        """A whole epoch's (sender, receiver) matrix at once (the discrete family's one unit)."""
        volume = self._volume(tag, kind, element_bytes, pattern)
        pairs = np.asarray(pairs, np.int64).copy()
        np.fill_diagonal(pairs, 0)
        volume.pairs += pairs
        volume.sent[0] += pairs.sum(1)
        volume.received[0] += pairs.sum(0)
        volume.calls[0] = max(volume.calls[0], calls)


# --------------------------------------------------------------------------- driver

def dry_run(config: Any, epoch: int | None = None, eq12_n: int | None = None, problem: Any = None) -> DryRun:
    """Count one training epoch of ``config`` (see :func:`_dry_run`), without the run's evaluation sets."""
    with without_evaluation_sets():  # a dry run scores nothing (dgbench/tasks/options.py)
        return _dry_run(config, epoch, eq12_n, problem)


def _dry_run(config: Any, epoch: int | None = None, eq12_n: int | None = None, problem: Any = None) -> DryRun:
    """Count one training epoch of ``config`` (a :class:`trainers.config.RunConfig`) at ``config.nproc``
    ranks. ``epoch``: which epoch's sampled pairs (discrete; default the run's last). ``eq12_n``: the
    micro-batch count a run chose by Eq. 12 at run time (Sven with ``--microbatches 0``). ``problem``: the
    family's partition problem of this same store, model and protocol, when the caller loaded it already
    (:func:`partition_problem`); loading the store dominates large dry runs."""
    from trainers.experiment import family_hooks, resolve
    started = time.perf_counter()
    run = resolve(config)
    world = int(config.nproc)
    hooks = family_hooks(run.family)
    problem = problem if problem is not None else _problem(run, hooks)
    loaded = time.perf_counter()
    partition = run.scheme.partition(problem, world, run.scheme_options)
    partitioned = time.perf_counter()
    if run.family == "discrete":
        from trainers.projection.plans import discrete_epoch
        result = discrete_epoch(run, problem, partition, world, config.epochs - 1 if epoch is None else epoch)
    else:
        from trainers.projection.plans import continuous_epoch
        result = continuous_epoch(run, problem, partition, world, eq12_n)
    result.seconds = {"load": loaded - started, "partition": partitioned - loaded,
                      "plan": time.perf_counter() - partitioned}
    result.peak_rss_bytes = peak_rss_bytes()
    return result


def partition_problem(config: Any) -> Any:
    """The family's partition problem of ``config`` (what :func:`dry_run` loads), to share between dry runs
    of the same store, model and protocol (schemes differ only in what they do with it)."""
    from trainers.experiment import family_hooks, resolve
    with without_evaluation_sets():
        run = resolve(config)
        return _problem(run, family_hooks(run.family))


def _problem(run: Any, hooks: Any) -> Any:
    """The partition problem a dry run plans on: the discrete family's data built step by step on demand
    (:mod:`trainers.projection.lazydata`: the plans need the partition, the sizes and rank 0's own steps, never
    every step's arrays at once), the continuous family's as the run loads it."""
    if run.family == "discrete":
        from trainers.projection.lazydata import lazy_partition_problem
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
    """A copy of ``config`` (a :class:`trainers.config.RunConfig`) at ``world`` ranks."""
    from trainers.config import RunConfig
    run = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
           if f.name not in ("scheme", "model", "dataset", "options", "extra")}
    run["nproc"] = world
    return RunConfig(config.scheme, config.model, config.dataset, options=dict(config.options),
                     extra=dict(config.extra), **run)
