"""The scheme contract: what a distributed training scheme of either family is, in one place.

A scheme (where data and state live, how work is partitioned, what crosses ranks) is applied to an
unchanged model and loop. :class:`DiscreteScheme` and :class:`ContinuousScheme` add their family's
hooks; :func:`register_scheme` makes a class visible to the CLI and the conformance tests.
See docs/adding-a-scheme.md (section "The contract (both families)").
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.registry import SCHEMES
from dgbench.options import NoOptions, Options, OptionsT

if TYPE_CHECKING:  # the family modules import this one; annotations only
    from dgbench.dist import DistContext
    from dgbench.models.temporal import StateLayout
    from dgbench.trainers.continuous.data import StreamProblem
    from dgbench.trainers.continuous.traffic import BatchTraffic, CommVolume
    from dgbench.trainers.continuous.state import NodeState
    from dgbench.trainers.discrete.data import DiscreteData
    from dgbench.trainers.discrete.placement import Placement
    from dgbench.trainers.discrete.schedule import Schedule
    from dgbench.trainers.experiment import ResolvedRun

Family = Literal["discrete", "continuous"]
EventAssignment = Callable[[np.ndarray], np.ndarray]  # a batch's sources -> mask of this rank's events


@dataclass(frozen=True)
class DrySend:
    """One tag of a dry run's count (dgbench.trainers.projection): the collective kind ("all_to_all", "all_reduce",
    "all_gather", "p2p"), bytes per element, elements sent to each rank over the epoch, collective calls."""

    kind: str
    element_bytes: int
    to_rank: tuple[int, ...]
    calls: int


@dataclass(frozen=True)
class WorldRule:
    """Which world sizes a scheme runs on."""

    one_process: bool = False  # exactly one process (single, checkpoint)

    def problem(self, scheme: str, world_size: int) -> str | None:
        if self.one_process and world_size != 1:
            return (f"scheme '{scheme}' runs on one process (--nproc {world_size}); "
                    f"choose a distributed scheme of the same family to use more")
        return None


@dataclass
class Partition:
    """What a scheme's partition step produced: owner rank per vertex (or per unit the scheme
    partitions), how it was made, a report for the record, and any arrays the scheme needs."""

    owner: np.ndarray | None = None
    method: str = "none"
    report: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


NO_PARTITION = Partition()
ProblemT = TypeVar("ProblemT")  # the family's view of a run's data that its partition step reads


class Scheme(ABC, Generic[OptionsT, ProblemT]):
    """Base of every scheme. Subclasses set the class attributes and implement their family's hooks."""

    name: ClassVar[str]
    family: ClassVar[Family]
    summary: ClassVar[str]
    Options: ClassVar[type[Options]] = NoOptions
    world: ClassVar[WorldRule] = WorldRule()
    # option sets the registry-driven conformance suite runs besides the defaults (tests/test_conformance.py):
    # each must train exactly like its reference (see reference_options) and move the bytes it predicts
    conformance: ClassVar[tuple[dict[str, Any], ...]] = ()
    # the models this scheme trains (None: every model of its family); a run of another is refused
    models: ClassVar[tuple[str, ...] | None] = None
    # protocol options this scheme runs under unless the user gives them (BLAD trains snapshot groups:
    # {"group_length": 4}); recorded like any given option
    protocol_defaults: ClassVar[dict[str, Any]] = {}

    def validate(self, options: OptionsT, world_size: int) -> None:
        """Refuse (DgbenchError, one line) combinations of options that would not run as recorded."""

    def partition(self, problem: ProblemT, parts: int, options: OptionsT) -> Partition:
        """The partition step for ``parts`` ranks (rank 0 runs it once per job); default: none.
        ``problem`` is the family's view of the run's data and protocol (seed included)."""
        return NO_PARTITION

    def record_extras(self, options: OptionsT, partition: Partition) -> dict[str, Any]:
        """What this scheme adds to the record's ``extra`` beyond the family's own."""
        return {}

    def reference_options(self, options: dict[str, Any], world_size: int) -> dict[str, Any] | None:
        """What the conformance suite holds a run on ``world_size`` ranks with ``options`` to: None (default),
        `single`'s run of the same model; else the options of this scheme's own one-process run (a scheme
        whose numbers depend on its partition by design: tgcn's grid order)."""
        return None

    def check_world(self, world_size: int) -> None:
        problem = self.world.problem(self.name, world_size)
        if problem:
            raise DgbenchError(problem)


class DiscreteScheme(Scheme[OptionsT, "DiscreteData"]):
    """A scheme of the discrete-time (snapshot) family."""

    family: ClassVar[Family] = "discrete"
    honours_presence: ClassVar[bool] = True  # False: trains every vertex of every snapshot whatever --presence says
    trains_minibatches: ClassVar[bool] = False  # True: its placement runs BLAD §3.1's sampled seed batches

    def partition(self, problem: DiscreteData, parts: int, options: OptionsT) -> Partition:
        return NO_PARTITION

    @abstractmethod
    def placement(self, ctx: DistContext, data: DiscreteData, options: OptionsT, partition: Partition) -> Placement:
        """Where this rank's snapshots live and the views its blocks run through."""

    def schedule(self, options: OptionsT) -> Schedule | None:
        """The order and overlap of per-block work; None: the loop's default (blocks in order,
        gradient checkpointing over them when there are several, ESDG §3.1)."""
        return None


class ContinuousScheme(Scheme[OptionsT, "StreamProblem"]):
    """A scheme of the continuous-time (event stream, memory-based TGNN) family."""

    family: ClassVar[Family] = "continuous"
    # why the scheme cannot run --protocol batch (empty: it can; say so in the scheme's doc)
    batch_protocol_refusal: ClassVar[str] = ""

    def partition(self, problem: StreamProblem, parts: int, options: OptionsT) -> Partition:
        return NO_PARTITION

    def streamed_refusal(self, options: OptionsT) -> str:
        """Why the scheme cannot train a stream read chunk by chunk (a stream over --stream-budget), or ""
        where its partition and driver read no whole-stream arrays (docs/continuous-training.md)."""
        return "its partition or driver reads the whole stream"

    def assign_events(self, partition: Partition, rank: int, world_size: int) -> EventAssignment:
        """Which events of a batch this rank computes; default: all of them (one rank)."""
        return lambda src: np.ones(len(src), dtype=bool)

    @abstractmethod
    def node_state(self, ctx: DistContext, layout: StateLayout, partition: Partition, options: OptionsT) -> NodeState:
        """Where node memory and mailboxes live and how a batch reads and writes them."""

    def gradient_staleness(self, options: OptionsT) -> int:
        """0: gradients all-reduced before the step; 1: the previous step's sum is applied (Sven Eq. 13)."""
        return 0

    def microbatches(self, options: OptionsT) -> int:
        """Micro-batches a batch's state fetch is pipelined in; 0 = chosen after the first batch (Eq. 12)."""
        return 1

    def predicted_volume(self, traffic: BatchTraffic) -> CommVolume | None:
        """The N&M bytes one rank should move for one batch under this scheme's mechanics (the per-rank
        form of Sven Eq. 7-9; ``traffic`` counts the rank's ids and widths), or None: no model."""
        return None

    def train_rank(self, ctx: DistContext, run: ResolvedRun, partition: Partition, problem: StreamProblem
                   ) -> dict[str, Any] | None:
        """This rank's results in the family's shape (figures, counters, losses, ...) when the scheme drives
        training itself (tgcn's grid and swap schedule); None (default): the family's loop, through
        :meth:`node_state` and the hooks above."""
        return None

    def dry_run_sends(self, ctx: DistContext, run: ResolvedRun, partition: Partition, problem: StreamProblem
                      ) -> dict[str, DrySend] | None:
        """For a scheme with its own driver (:meth:`train_rank`): what rank ``ctx.rank`` sends in one training
        epoch, per tag, without training (``ctx`` is a dry run's counting world, dgbench.trainers.projection). None
        (default): the family's loop runs the scheme, and the dry run counts that loop's plans."""
        return None


def register_scheme(cls: type[Scheme]) -> type[Scheme]:
    """Class decorator: make ``cls`` (one instance) the scheme ``cls.name`` of ``cls.family``."""
    key = f"{cls.family}:{cls.name}"
    if key in SCHEMES:
        raise ValueError(f"scheme '{cls.name}' ({cls.family}) registered twice")
    SCHEMES[key] = cls()
    return cls


def scheme_of(family: Family, name: str) -> Scheme:
    scheme = SCHEMES.get(f"{family}:{name}")
    if not isinstance(scheme, Scheme):
        known = sorted(s.name for s in SCHEMES.values() if s.family == family)
        raise DgbenchError(f"unknown {family}-time scheme '{name}' (known: {', '.join(known) or 'none'})")
    return scheme
