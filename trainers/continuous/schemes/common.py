"""Pieces several continuous-time schemes share: owner-based event assignment and range owners."""
from __future__ import annotations

import numpy as np

from trainers.continuous import sven_core
from trainers.continuous.data import EventStream
from trainers.contract import EventAssignment, Partition


def training_events(stream: EventStream) -> tuple[np.ndarray, np.ndarray]:
    a, b = stream.ranges["train"]
    return stream.src[a:b], stream.dst[a:b]


def range_owners(stream: EventStream, parts: int) -> Partition:
    """Contiguous id ranges (the owners depcomm partitions N&M by, and the bookkeeping of the others)."""
    src, dst = training_events(stream)
    return Partition(sven_core.range_partition(src, dst, stream.num_nodes, parts), "range")


def by_source_owner(partition: Partition, rank: int) -> EventAssignment:
    """Events run on the rank owning their source (DepComm / Sven's vertex-level data parallelism)."""
    owner = partition.owner
    assert owner is not None
    return lambda src: owner[src] == rank
