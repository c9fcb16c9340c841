"""Pieces the continuous-time schemes share: the even split of every batch's events, the N&M
partitioners (so DepComm and Sven can be compared under the same one) and the pre-sampling pass that
builds Sven's trainer-vertex graph (Eq. 5) and evaluates Eq. 1 and Eq. 7-9 in the paper's form on
exactly the batches training will run.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from collections.abc import Iterator
from typing import Any

import numpy as np

from dgbench.trainers.continuous.sven import formulas
from dgbench.trainers.continuous.traffic import CommVolume, redundancy
from dgbench.trainers.continuous.data import BatchPlan, BatchPlanner, EventStream, StreamProblem, neighbor_sampler
from dgbench.trainers.contract import EventAssignment, Partition

# vertex partitioners of N&M: range, HPDC's interval, Alg. 3, and our earlier heuristic under its own name
PARTITIONERS = ("range", "interval", "reflexbicut", "minmax-greedy")
INTERVAL_HELP = "Vertex ids per interval of the 'interval' partition (HPDC §3.1.2's constant granularity)."


BLOCK_BATCHES = 1024  # batches per block of the minmax-greedy pass over a streamed stream


def training_blocks(stream: EventStream, batch_size: int, block_batches: int = BLOCK_BATCHES
                    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The training events as (src, dst) blocks of ``block_batches`` whole batches (one block for a stream
    in memory; a streamed stream is read block by block from its store)."""
    a, b = stream.ranges["train"]
    if not stream.is_streamed:
        yield stream.src[a:b], stream.dst[a:b]
        return
    size = max(1, batch_size) * max(1, block_batches)
    for low in range(a, b, size):
        high = min(b, low + size)
        yield stream.src[low:high], stream.dst[low:high]


def range_owners(stream: EventStream, parts: int) -> Partition:
    """Contiguous id ranges (single's bookkeeping; depcache's Eq. 1 / Eq. 5 bookkeeping)."""
    return Partition(formulas.range_partition(stream.num_nodes, parts), "range")


def even_split(world_size: int, rank: int) -> EventAssignment:
    """Every batch's events split evenly (contiguous shares differing by at most one): the data-parallel
    compute placement of every scheme (Sven §2.3, §4.2); only where N&M lives differs between schemes."""
    return lambda src: np.isin(np.arange(len(src)), formulas.even_share(len(src), rank, world_size))


@dataclass
class PreSample:
    """One pass over the training batches as training will plan them (same seeds, sampler, split)."""

    graph: formulas.TrainerVertexGraph
    paper_volume: dict[str, CommVolume]  # Eq. 7-9 as printed, summed over the epoch's batches
    eta1: float  # Eq. 1, mean over batches of the whole mini-batch's dispatch list
    eta2: float  # and of its aggregation list
    n1: int  # dispatch positions over the epoch (sampled nodes)
    n2: int  # aggregation positions over the epoch (original nodes, plus APAN's mailed neighbours)


def pre_sample(problem: StreamProblem, parts: int) -> PreSample:
    """Plan every training batch once (negatives and sampled neighbours exactly as training draws them),
    split each batch's events evenly over ``parts`` trainers, and count per (trainer, vertex) the rows
    moved (Alg. 2 within each batch) and per batch Eq. 1's N and eta."""
    stream = problem.stream
    sampled = problem.neighbors > 0 and (problem.fetch_neighbors or problem.deliver_to_neighbors)
    sampler = neighbor_sampler(stream, problem.sampler, problem.neighbors, problem.sampler_decay,
                               keep_features=False) if sampled else None
    planner = BatchPlanner(stream, sampler, problem.neighbors, problem.sampler, problem.seed,
                           lambda src: np.ones(len(src), dtype=bool), lambda ids: None,
                           fetch_neighbors=problem.fetch_neighbors, deliver_to_neighbors=problem.deliver_to_neighbors,
                           protocol=problem.protocol)
    n = stream.num_nodes
    keys: list[np.ndarray] = []
    volume = {scheme: CommVolume(0.0, 0.0) for scheme in formulas.SCHEMES}
    etas1, etas2, n1, n2 = [], [], 0, 0
    for index, (start, stop) in enumerate(planner.batch_bounds("train", problem.batch_size)):
        plan = planner.plan("train", index, start, stop)
        written = np.concatenate([plan.src, plan.dst] + ([plan.deliveries] if plan.deliveries is not None else []))
        written_event = np.concatenate([np.arange(plan.size), np.arange(plan.size)]
                                       + ([plan.delivery_priority // 2] if plan.deliveries is not None else []))
        for trainer in range(parts):
            share = formulas.even_share(plan.size, trainer, parts)
            if not len(share):
                continue
            lo, hi = share[0], share[-1] + 1
            fetched = _share_needed(planner, plan, (start, stop), trainer, parts)
            wrote = written[(written_event >= lo) & (written_event < hi)]
            keys += [trainer * n + np.unique(fetched), trainer * n + np.unique(wrote)]
        eta1, eta2 = redundancy(plan.needed_ids), redundancy(written)
        etas1.append(eta1)
        etas2.append(eta2)
        n1, n2 = n1 + len(plan.needed_ids), n2 + len(written)
        for scheme in formulas.SCHEMES:
            volume[scheme] = volume[scheme] + formulas.paper_volume(
                scheme, len(plan.needed_ids), len(written), eta1, eta2, problem.memory_dim, stream.edge_dim, parts,
                problem.bytes_per_value)
    graph = formulas.TrainerVertexGraph.from_keys(keys, parts, n)
    return PreSample(graph, volume, float(np.mean(etas1)) if etas1 else 0.0,
                     float(np.mean(etas2)) if etas2 else 0.0, n1, n2)


def _share_needed(planner: BatchPlanner, plan: BatchPlan, bounds: tuple[int, int], trainer: int, parts: int
                  ) -> np.ndarray:
    """The ids trainer ``trainer`` of ``parts`` fetches for its even share of the batch ``plan`` (events
    ``bounds``). Under ``--protocol batch`` a trainer's roots are the distinct vertices of its own share
    (and their neighbours), so its share is planned as it will be in training."""
    if plan.root_index is None:
        share = formulas.even_share(plan.size, trainer, parts)
        lo, hi = share[0], share[-1] + 1
        return plan.needed_ids[(plan.event_of_needed >= lo) & (plan.event_of_needed < hi)]
    own = dataclasses.replace(planner, assign=even_split(parts, trainer))
    return own.plan(plan.split, plan.index, *bounds).needed_ids


def partition_nodes(problem: StreamProblem, parts: int, method: str, interval: int) -> Partition:
    """Owners of N&M under ``method`` for ``parts`` trainers, with the pre-sampled Eq. 5 balance report
    and the paper-form Eq. 1 / Eq. 7-9 in ``report``."""
    stream = problem.stream
    sample = pre_sample(problem, parts) if parts > 1 else None
    if method == "reflexbicut" and sample is not None:
        owner = formulas.re_flexbicut(sample.graph)
    elif method == "minmax-greedy":
        owner = formulas.minmax_greedy_blocks(training_blocks(stream, problem.batch_size), stream.num_nodes, parts,
                                              batch_size=problem.batch_size)
    elif method == "interval":
        owner = formulas.interval_partition(stream.num_nodes, parts, interval)
    else:
        owner = formulas.range_partition(stream.num_nodes, parts)
    return Partition(owner, method, report=presample_report(sample, owner))


def presample_report(sample: PreSample | None, owner: np.ndarray) -> dict[str, Any]:
    """What the record keeps of the pre-sampling: Eq. 5 / Eq. 2 under ``owner`` and the paper forms."""
    if sample is None:
        return {}
    return {"balance": formulas.balance_report(sample.graph, owner).as_record(),
            "paper_eta": {"eta1": sample.eta1, "eta2": sample.eta2, "n1": sample.n1, "n2": sample.n2},
            "paper_volume_bytes": {scheme: {"dispatch": v.dispatch_bytes, "aggregation": v.aggregation_bytes,
                                            "total": v.total_bytes}
                                   for scheme, v in sample.paper_volume.items()}}
