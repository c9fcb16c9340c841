"""The result record as types: each block a dataclass whose fields carry their JSON kind, bounds and meaning.

docs/result-record.md describes the record; its field tables are generated from these types
(``python -m dgbench.record_types --doc-table``, or ``--write-doc`` to refresh the page). Every type has
``from_json`` / ``to_json`` (a round trip gives back the same JSON, unknown keys included: readers keep
fields they do not know) and its checks beside its fields; dgbench/leaderboard/schema.py validates a
record by reading it into a :class:`Record`.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, TypeVar

from dgbench.records import hardware_class, record_seal

FAMILIES = {"discrete": "snapshots", "continuous": "stream"}  # family -> store kind it trains on
# Metrics bounded to [0, 1] wherever they appear (accuracy, AP, AUC and their usual companions).
BOUNDED_METRICS = {"accuracy", "ap", "auc", "f1", "precision", "recall", "mrr", "balanced_accuracy"}
RELATIVE_TOLERANCE = 1e-6
MAX_SAFE_INTEGER = 2**53  # larger integers are not exact where JSON numbers are doubles
# Physical bounds on what one rank can do, each about ten times today's fastest hardware, so only a
# forged figure exceeds them: an edge is at least a 4-byte source and destination read once, and
# 1e12 edges/s would read 8 TB/s (H200 memory: 4.8 TB/s); 1e13 B/s sent is over five times NVLink 5.
MAX_EDGES_PER_S_PER_RANK = 1e12
MAX_COMM_BYTES_PER_S_PER_RANK = 1e13
HEX64 = re.compile(r"[0-9a-f]{64}")
HEX40 = re.compile(r"[0-9a-f]{40}")


class _Absent:
    """The value of a field the JSON object does not have (``to_json`` leaves it out)."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class Problem:
    """One reason a record is refused: the field (dotted path) and why."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


# --------------------------------------------------------------------------- field specifications

@dataclass(frozen=True)
class Spec:
    """What one field holds: its JSON kind, whether it may be missing or null, bounds, a check of its
    value (returning the reason it is wrong), and its meaning for the docs. ``checked=False``: described,
    not enforced (as the schema has always treated it)."""

    kind: str  # text, integer, number, bool, object, list, metrics, part, parts, extra, any
    meaning: str
    optional: bool = False
    nullable: bool = False
    low: float | None = None
    low_open: bool = False
    high: float | None = None
    checked: bool = True
    part: Any = None  # the RecordPart type of a "part" / "parts" field
    key: str | None = None  # the JSON key when it is no Python name (``lambda``)
    check: Callable[[Any], str | None] | None = None
    type_text: str | None = None  # the docs' type column when the generated one says too little
    non_empty: bool = True  # a text field: refuse a blank string before its ``check``


def _field(kind: str, meaning: str, **spec: Any) -> Any:
    return field(default=ABSENT, metadata={"spec": Spec(kind, meaning, **spec)})


def text(meaning: str, **spec: Any) -> Any:
    return _field("text", meaning, **spec)


def integer(meaning: str, **spec: Any) -> Any:
    return _field("integer", meaning, **spec)


def number(meaning: str, **spec: Any) -> Any:
    return _field("number", meaning, **spec)


def flag(meaning: str, **spec: Any) -> Any:
    return _field("bool", meaning, **spec)


def mapping(meaning: str, **spec: Any) -> Any:
    return _field("object", meaning, **spec)


def listing(meaning: str, **spec: Any) -> Any:
    return _field("list", meaning, **spec)


def metrics(meaning: str, **spec: Any) -> Any:
    return _field("metrics", meaning, **spec)


def part(kind: type, meaning: str, **spec: Any) -> Any:
    return _field("part", meaning, part=kind, **spec)


def parts(kind: type, meaning: str, **spec: Any) -> Any:
    return _field("parts", meaning, part=kind, **spec)


def anything(meaning: str, **spec: Any) -> Any:
    return _field("any", meaning, checked=False, **spec)


def others() -> Any:
    """The keys a block has that its type does not know: kept, and written back as they were."""
    return field(default_factory=dict, compare=True)


# --------------------------------------------------------------------------- reading with checks

class Reader:
    """Collects problems while reading one record (``quiet``: reads without keeping them)."""

    def __init__(self, quiet: bool = False):
        self.problems: list[Problem] = []
        self.quiet = quiet

    def fail(self, path: str, reason: str) -> None:
        if not self.quiet:
            self.problems.append(Problem(path, reason))

    def value(self, data: dict[str, Any], key: str, where: str, spec: Spec) -> Any:
        """``data[key]`` read as ``spec`` says; None (and a problem) when it is not what the spec allows."""
        path = _join(where, key)
        raw = data[key]
        if not spec.checked:
            return _read_unchecked(raw, path, spec)
        if raw is None and spec.nullable:
            return None
        kinds = _JSON_KINDS[spec.kind]
        if not _is_kind(raw, kinds):
            self.fail(path, f"is {_describe(raw)}, expected {' or '.join(_kind_name(k) for k in kinds)}"
                            + (" or null" if spec.nullable else ""))
            return None
        if spec.kind == "text" and spec.non_empty and not raw.strip():
            self.fail(path, "is empty")
            return None
        if spec.kind in ("integer", "number") and not self._in_bounds(raw, path, spec):
            return None
        if spec.kind == "metrics":
            self._metrics(raw, path)
        if spec.check is not None and (reason := spec.check(raw)) is not None:
            self.fail(path, reason)
            return None
        if spec.kind == "part":
            return spec.part.read(raw, path, self)
        if spec.kind == "parts":
            return [self._element(spec.part, item, f"{path}[{index}]") for index, item in enumerate(raw)]
        return raw

    def _element(self, kind: type[RecordPart], item: Any, path: str) -> Any:
        if not isinstance(item, dict):
            self.fail(path, f"is {_describe(item)}, expected an object")
            return item
        return kind.read(item, path, self)

    def _in_bounds(self, value: int | float, path: str, spec: Spec) -> bool:
        if isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
            self.fail(path, f"is an integer of {value.bit_length()} bits, beyond 2^53 (not exact in JSON)")
            return False
        if not math.isfinite(value):
            self.fail(path, f"is {value}, expected a finite number")
            return False
        low = spec.low
        if low is not None and (value <= low if spec.low_open else value < low):
            self.fail(path, f"is {value}, must be {'>' if spec.low_open else '>='} {low}")
            return False
        if spec.high is not None and value > spec.high:
            self.fail(path, f"is {value}, must be <= {spec.high}")
            return False
        return True

    def _metrics(self, block: dict[str, Any], path: str) -> None:
        """``{split: {metric: number|null}}``; bounded metrics must lie in [0, 1]."""
        for split, scores in block.items():
            if not isinstance(scores, dict):
                self.fail(f"{path}.{split}", f"is {_describe(scores)}, expected an object of metrics")
                continue
            for name, score in scores.items():
                bounded = name.lower() in BOUNDED_METRICS
                self.value(scores, name, f"{path}.{split}",
                           Spec("number", "", nullable=True, low=0 if bounded else None, high=1 if bounded else None))


def _read_unchecked(raw: Any, path: str, spec: Spec) -> Any:
    """A field the schema does not check: typed when it has its documented shape, else kept as it is."""
    quiet = Reader(quiet=True)
    if spec.kind == "part" and isinstance(raw, dict):
        return spec.part.read(raw, path, quiet)
    if spec.kind == "parts" and isinstance(raw, list):
        return [spec.part.read(item, path, quiet) if isinstance(item, dict) else item for item in raw]
    return raw


_JSON_KINDS: dict[str, tuple[type, ...]] = {
    "text": (str,), "integer": (int,), "number": (int, float), "bool": (bool,), "object": (dict,),
    "list": (list,), "metrics": (dict,), "part": (dict,), "parts": (list,), "extra": (dict,)}


def _is_kind(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # JSON true/false are not numbers
        return bool in kinds
    return isinstance(value, kinds)


def _kind_name(kind: type) -> str:
    return {str: "a string", int: "an integer", float: "a number", dict: "an object", list: "a list",
            bool: "true/false"}[kind]


def _describe(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INTEGER:
        return f"an integer of {value.bit_length()} bits"
    return "null" if value is None else f"{json.dumps(value)[:40]} ({type(value).__name__})"


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-9)


def _as_float(value: Any) -> float | None:
    """``value`` as a float when it is a JSON number a float can hold (10**400 is not); else None."""
    if not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


Part = TypeVar("Part", bound="RecordPart")


class RecordPart:
    """A block of the record: dataclass fields with a :class:`Spec` each, plus ``others`` (unknown keys)."""

    others: dict[str, Any]
    DOC_TITLE: ClassVar[str] = ""

    @classmethod
    def specs(cls) -> list[tuple[str, str, Spec]]:
        """(attribute, JSON key, spec) of every documented field, in reading order."""
        return [(f.name, f.metadata["spec"].key or f.name, f.metadata["spec"])
                for f in dataclasses.fields(cls) if "spec" in f.metadata]  # type: ignore[arg-type]

    @classmethod
    def read(cls: type[Part], data: dict[str, Any], where: str, reader: Reader) -> Part:
        values: dict[str, Any] = {}
        for name, key, spec in cls.specs():
            if key not in data:
                if not spec.optional and spec.checked:
                    reader.fail(_join(where, key), "missing")
                continue
            if spec.kind == "extra":
                spec = dataclasses.replace(spec, kind="part", part=extra_type(values.get("family")))
            values[name] = reader.value(data, key, where, spec)
        known = {key for _, key, _ in cls.specs()}
        make: Any = cls  # a dataclass: its fields and ``others`` are its keyword arguments
        made = make(**values, others={k: v for k, v in data.items() if k not in known})
        made.check(reader, where, data)
        return made

    @classmethod
    def from_json(cls: type[Part], data: dict[str, Any]) -> Part:
        """The typed block of ``data`` (whatever its problems: :func:`problems_of` lists them)."""
        return cls.read(data, "", Reader(quiet=True))

    def check(self, reader: Reader, where: str, data: dict[str, Any]) -> None:
        """Checks across this block's fields (beyond each field's own); ``data``: the block as read."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, key, _ in self.specs():
            value = getattr(self, name)
            if value is not ABSENT:
                out[key] = _json_value(value)
        out.update(self.others)
        return out


def _json_value(value: Any) -> Any:
    if isinstance(value, RecordPart):
        return value.to_json()
    if isinstance(value, list):
        return [_json_value(item) for item in value]
    return value


# --------------------------------------------------------------------------- timing evidence

@dataclass(frozen=True)
class TimingEvidence(RecordPart):
    DOC_TITLE: ClassVar[str] = "epochs[i].per_rank[r].evidence"

    wall_s: float = number("wall seconds of the sample window (the epoch's training)", low=0)
    cpu_s: float = number("this process's CPU seconds in it, all threads (`time.process_time`)", low=0)
    run_delay_s: float = number("seconds the training thread was runnable but waiting for a CPU "
                                "(`/proc/thread-self/schedstat`)", low=0)
    host_busy_s: float = number("CPU seconds the whole host was busy (user, nice, system, irq, softirq, steal) "
                                "in the window (`/proc/stat`, 10 ms ticks), all CPUs", low=0)
    host_steal_s: float = number("CPU seconds stolen by the hypervisor in the window, all CPUs", low=0)
    threads: int = integer("intra-op threads of the rank (`torch.get_num_threads`, set by `--threads`, "
                           "default cores / ranks)", low=1)
    cores: int = integer("CPUs the process may run on", low=1)
    load_1m: float = number("the host's 1-minute load average at the window's end (`/proc/loadavg`)", low=0)
    others: dict[str, Any] = others()


TIME_SPLIT = ("busy_s", "wait_s", "collective_transfer_s")  # optional; when present they add up to time_s


@dataclass(frozen=True)
class RankFigures(RecordPart):
    DOC_TITLE: ClassVar[str] = "epochs[i].per_rank[r]"

    time_s: float = number("wall time of this rank's epoch", low=0, low_open=True)
    busy_s: float = number("the rank's own work, host-to-device moves included: `time_s − communication_s`; "
                           "`busy_s`, `wait_s` and `collective_transfer_s` come together or not at all", low=0,
                           optional=True)
    wait_s: float = number("seconds waiting at arrival probes for the last rank (see *Busy, wait and transfer*)",
                           low=0, optional=True)
    collective_transfer_s: float = number("seconds of counted collectives after their arrival probe; busy + wait + "
                                          "collective transfer add up to `time_s`", low=0, optional=True)
    evidence: TimingEvidence | None = part(TimingEvidence, "the epoch's timing evidence (*Timing evidence*)",
                                           optional=True)
    comm_bytes: int = integer("bytes this rank sent to other ranks", low=0)
    comm_elements: int = integer("the same as tensor elements", low=0)
    transfer_s: float = number("host-to-device moves", checked=False)
    compute_s: float = number("`max(0, time_s − transfer_s − communication_s)`", checked=False)
    communication_s: float = number("time inside counted collectives", checked=False)
    comm_by_tag: dict[str, Any] = mapping("`{tag: counts}` per collective, each with `calls`, `bytes`, `elements`, "
                                          "`seconds`, `cpu_seconds`, `wait_seconds`, `transfer_seconds`, `probes`, "
                                          "`probe_floor_seconds`", checked=False)
    peak_rss_bytes: int = integer("the rank's largest resident set", checked=False)
    probes: int = integer("arrival probes in the epoch", checked=False, optional=True)
    probe_floor_s: float = number("its fastest probe: what one costs", checked=False, optional=True)
    others: dict[str, Any] = others()

    def check(self, reader: Reader, where: str, data: dict[str, Any]) -> None:
        if not any(key in data for key in TIME_SPLIT):
            return
        for key in TIME_SPLIT:
            if key not in data:
                reader.fail(_join(where, key), "missing")
        split = [self.busy_s, self.wait_s, self.collective_transfer_s]
        if _is_number(self.time_s) and all(_is_number(s) for s in split) and not _close(sum(split), self.time_s):
            reader.fail(_join(where, "busy_s"), f"busy + wait + collective transfer = {sum(split)} "
                                                f"but time_s is {self.time_s}")


# --------------------------------------------------------------------------- epochs

EPOCH_SECONDS = ("transfer_s", "compute_s", "communication_s")
RANK_COUNTS = ("comm_bytes", "comm_elements")


@dataclass(frozen=True)
class EpochFigures(RecordPart):
    DOC_TITLE: ClassVar[str] = "epochs[i]"

    epoch: int = integer("equals its index `i` (no gaps, in order)", low=0)
    loss: float | None = number("training loss (rank 0; all ranks agree)", nullable=True)
    time_s: float = number("wall time of the epoch's training on the slowest rank (evaluation excluded)",
                           low=0, low_open=True)
    transfer_s: float = number("host-to-device moves on that rank (`PhaseTimer` phase `transfer`)", low=0,
                               type_text="number ≥ 0, ≤ `time_s`")
    compute_s: float = number("`max(0, time_s − transfer_s − communication_s)`", low=0,
                              type_text="number ≥ 0, ≤ `time_s`")
    communication_s: float = number("time inside counted collectives on that rank", low=0,
                                    type_text="number ≥ 0, ≤ `time_s`")
    comm_bytes: int = integer("bytes sent to other ranks in the epoch, summed over ranks (self excluded; a world "
                              "of one sends 0); equals the ranks' sum", low=0)
    comm_elements: int = integer("the same as tensor elements; equals the ranks' sum", low=0)
    peak_rss_bytes: int = integer("largest host resident set over ranks", low=0)
    cuda_max_allocated_bytes: int = integer("largest device memory over ranks (GPU runs)", low=0, optional=True)
    work: int = integer("edges processed, summed over all (smoothed) snapshots (discrete, ESDG §6.3) or events "
                        "(continuous)", low=0)
    throughput: float = number("`work / time_s` (edges/s or events/s); checked to 1e-6 relative", low=0)
    metrics: dict[str, Any] = metrics("`{split: {metric: number or null}}` evaluated after the epoch")
    per_rank: list[RankFigures] = parts(RankFigures, "`world_size` entries, one per rank (below); `time_s` of the "
                                                     "epoch must be their maximum", type_text="list of objects")
    busy_s: float = number("the slowest rank's busy seconds (see *Busy, wait and transfer*)", checked=False,
                           optional=True)
    wait_s: float = number("the slowest rank's wait seconds", checked=False, optional=True)
    collective_transfer_s: float = number("the slowest rank's collective transfer seconds", checked=False,
                                          optional=True)
    balance_lambda: float | None = number("DGC §2.2.2's load balance: max / min of the ranks' `busy_s` (null when "
                                          "a rank was never busy)", key="lambda", nullable=True, checked=False,
                                          optional=True)
    critical_path_s: float = number("the longest `busy_s + collective_transfer_s` of any rank: the epoch without "
                                    "waiting", checked=False, optional=True)
    others: dict[str, Any] = others()

    def check(self, reader: Reader, where: str, data: dict[str, Any]) -> None:
        for key in EPOCH_SECONDS:
            part_s = getattr(self, key)
            if _is_number(part_s) and _is_number(self.time_s) and part_s > self.time_s \
                    and not _close(part_s, self.time_s):
                reader.fail(_join(where, key), f"{part_s} s is longer than the epoch's time_s {self.time_s} s")
        if all(_is_number(v) for v in (self.work, self.throughput, self.time_s)) \
                and not _close(self.throughput, self.work / self.time_s):
            reader.fail(_join(where, "throughput"), f"is {self.throughput:.6g} but work / time_s = "
                                                    f"{self.work / self.time_s:.6g}")
        self._check_ranks(reader, where, data)

    def _check_ranks(self, reader: Reader, where: str, data: dict[str, Any]) -> None:
        """The epoch's time is its slowest rank's and its counts the ranks' sums. The epoch's own figures are
        compared as written (a malformed one is also reported by its field's check)."""
        ranks = self.per_rank if isinstance(self.per_rank, list) else []
        figures = [r for r in ranks if isinstance(r, RankFigures) and _is_number(r.time_s)
                   and all(type(getattr(r, key)) is int for key in RANK_COUNTS)]
        if not figures or len(figures) != len(ranks):
            return
        slowest = max(r.time_s for r in figures)
        time_s = _as_float(data.get("time_s"))
        if time_s is not None and not _close(time_s, slowest):
            reader.fail(_join(where, "time_s"), f"is {data['time_s']} but the slowest rank took {slowest}")
        for key in RANK_COUNTS:
            total = sum(getattr(r, key) for r in figures)
            if isinstance(data.get(key), int) and data[key] != total:
                reader.fail(_join(where, key), f"is {data[key]} but the ranks' {key} sum to {total}")

    def check_in_run(self, reader: Reader, where: str, world_size: int | None, most_work: int | None) -> None:
        """Figures a run cannot have produced: more work than the store holds, more edges per second or more
        bytes sent per second than any hardware does (MAX_*_PER_RANK), more elements than bytes sent."""
        if isinstance(self.per_rank, list) and world_size is not None and len(self.per_rank) != world_size:
            reader.fail(_join(where, "per_rank"), f"has {len(self.per_rank)} ranks but world_size is {world_size}")
        work, throughput, time_s = self.work, self.throughput, self.time_s
        if _is_number(work) and most_work is not None and work > most_work:
            reader.fail(_join(where, "work"), f"is {work}, above the {most_work} edges an epoch can process (each "
                                              f"store edge (event) once, times the smoothing window and group length)")
        if _is_number(throughput) and world_size is not None and throughput > world_size * MAX_EDGES_PER_S_PER_RANK:
            reader.fail(_join(where, "throughput"), f"is {throughput:.6g} edges/s, above the physical bound of "
                                                    f"{MAX_EDGES_PER_S_PER_RANK:.0e} per rank x {world_size} ranks")
        comm_bytes, comm_elements = self.comm_bytes, self.comm_elements
        most_sent = world_size * MAX_COMM_BYTES_PER_S_PER_RANK * time_s \
            if _is_number(time_s) and world_size is not None else None
        if _is_number(comm_bytes) and most_sent is not None and comm_bytes > most_sent:
            reader.fail(_join(where, "comm_bytes"), f"is {comm_bytes} bytes in {time_s} s, above the physical bound "
                                                    f"of {MAX_COMM_BYTES_PER_S_PER_RANK:.0e} B/s per rank x "
                                                    f"{world_size} ranks")
        if _is_number(comm_bytes) and _is_number(comm_elements) and comm_elements > comm_bytes:
            reader.fail(_join(where, "comm_elements"), f"is {comm_elements}, more than the {comm_bytes} bytes sent "
                                                       f"(an element is at least one byte)")


# --------------------------------------------------------------------------- where it ran, on what

def _hex64(value: str) -> str | None:
    return None if HEX64.fullmatch(value) else f"{value[:20]!r} is not a 64-digit lowercase hex sha256"


def _store_kind(value: str) -> str | None:
    return None if value in FAMILIES.values() else f"is {value!r}, expected one of {sorted(FAMILIES.values())}"


@dataclass(frozen=True)
class Dataset(RecordPart):
    DOC_TITLE: ClassVar[str] = "dataset"

    name: str = text("dataset or generator name (`esdg-random`, `stream`, `jodie-wikipedia`, ...)")
    fingerprint: str = text("the store's content fingerprint (`dgbench info STORE`); official stores are listed in "
                            "`leaderboards/official_stores.json`", check=_hex64, type_text="string, 64 lowercase hex")
    kind: str = text("`\"snapshots\"` (family discrete) or `\"stream\"` (family continuous); must match the family",
                     check=_store_kind)
    num_nodes: int = integer("vertices", low=1)
    num_edges: int = integer("edges of all snapshots (snapshot store) or events (stream)", low=1)
    num_snapshots: int = integer("snapshots; required when `kind` is `\"snapshots\"`", low=1, optional=True)
    path: str = text("where the store was read from (informational)", checked=False)
    transforms: list[Any] = listing("transforms applied when the store was made (e.g. smoothing), from its "
                                    "provenance", optional=True, type_text="list of strings or objects")
    others: dict[str, Any] = others()

    def check(self, reader: Reader, where: str, data: dict[str, Any]) -> None:
        if self.kind == "snapshots" and "num_snapshots" not in data:
            reader.fail(_join(where, "num_snapshots"), "missing")
        if isinstance(self.transforms, list) and not all(isinstance(t, (str, dict)) for t in self.transforms):
            reader.fail(_join(where, "transforms"), "must be a list of strings or objects")


@dataclass(frozen=True)
class Environment(RecordPart):
    DOC_TITLE: ClassVar[str] = "environment"

    host: str = text("host name")
    python: str = text("Python version")
    torch: str = text("torch version")
    dgbench: str = text("dgbench version")
    device: str = text("torch device of rank 0 (`cpu`, `cuda:0`)")
    device_name: str = text("`cpu`, or the CUDA device name")
    cpu_count: int | None = integer("logical CPUs", low=1, nullable=True)
    platform: str = text("OS description", checked=False)
    processor: str = text("CPU description", checked=False)
    numpy: str = text("numpy version", checked=False)
    cuda: str = text("CUDA version, GPU runs only", checked=False, optional=True)
    others: dict[str, Any] = others()


@dataclass(frozen=True)
class System(RecordPart):
    DOC_TITLE: ClassVar[str] = "system"

    nodes: int = integer("hosts the ranks ran on: `world_size / LOCAL_WORLD_SIZE` under torchrun, 1 under dgbench's "
                         "own launcher", low=1)
    ranks_per_node: int = integer("ranks on each host", low=1)
    accelerators_per_node: int = integer("CUDA devices a host has (0 for CPU runs)", low=0)
    cpu_cores: int | None = integer("logical CPUs", low=1, optional=True, nullable=True)
    cpus_usable: int | None = integer("CPUs this process may use", low=1, optional=True, nullable=True)
    memory_bytes: int | None = integer("physical memory", low=1, optional=True, nullable=True)
    launcher: str | None = text("`torchrun` or `dgbench`", optional=True, nullable=True)
    accelerator: str | None = text("the CUDA device name, GPU runs only", optional=True, nullable=True)
    cpu_model: str | None = text("CPU model (`/proc/cpuinfo`)", optional=True, nullable=True)
    cuda: str | None = text("CUDA runtime version, GPU runs only, where present", optional=True, nullable=True)
    cudnn: str | None = text("cuDNN version, GPU runs only, where present", optional=True, nullable=True)
    nccl: str | None = text("NCCL version, GPU runs only, where present", optional=True, nullable=True)
    driver: str | None = text("NVIDIA driver version, GPU runs only, where present", optional=True, nullable=True)
    description: dict[str, Any] = mapping("the JSON object of `dgbench run --system-desc FILE` as given: what dgbench "
                                          "cannot see, e.g. `{\"interconnect\": \"InfiniBand NDR 400 Gb/s\"}`",
                                          optional=True)
    others: dict[str, Any] = others()


def _commit(value: str) -> str | None:
    return None if HEX40.fullmatch(value) else f"{value[:20]!r} is not a 40-digit git commit"


@dataclass(frozen=True)
class Code(RecordPart):
    DOC_TITLE: ClassVar[str] = "code"

    commit: str | None = text("40-hex git commit, or `null` when unknown", nullable=True, check=_commit,
                              non_empty=False, type_text="string, 40 hex")
    dirty: bool | None = flag("`true` if the working tree had uncommitted changes to tracked files, `null` when "
                              "unknown", nullable=True)
    version: str = text("dgbench's version (since the system block)", checked=False, optional=True)
    source: str | None = text("`checkout` when dgbench ran from its own git checkout (commit and dirty from git), else "
                              "where the installed distribution came from (PEP 610 `direct_url.json`: its URL, with "
                              "the VCS commit it was built from when there is one; `index` for a package index). A git "
                              "project dgbench merely runs inside is never cited", checked=False, optional=True)
    others: dict[str, Any] = others()


@dataclass(frozen=True)
class Evaluation(RecordPart):
    DOC_TITLE: ClassVar[str] = "evaluation"

    task: str = text("`\"link-prediction\"` or `\"node-classification\"` (`--task`; the record's top-level `task` "
                     "says the same as `link_prediction` / `node_classification`)", checked=False)
    fingerprint: str = text("the first set's fingerprint: the set `final_metrics.val`/`test` scored, the one the "
                            "accuracy track compares with the registry's `evaluation_sets`", checked=False,
                            type_text="string, 64 hex")
    sets: list[Any] = listing("every set scored, in order: `name` (`link-prediction-<strategy>-k<K>`), "
                              "`fingerprint`, `task`, `strategy`, `negatives` (K), `seed` and per split its counts "
                              "(positives, negatives, those without any, new-node positives). Metrics of the second "
                              "and later sets are `final_metrics[\"test:<strategy>\"]` etc.", checked=False,
                              type_text="list of objects")
    others: dict[str, Any] = others()


@dataclass(frozen=True)
class TimingSummary(RecordPart):
    DOC_TITLE: ClassVar[str] = "timing"

    threads_per_rank: int | None = integer("intra-op threads of a rank (as in the evidence)", checked=False)
    cores: int = integer("CPUs the process may run on", checked=False)
    warnings: list[str] = listing("`P × threads > cores` when ranks share cores", checked=False)
    warmup_epochs: int = integer("1", checked=False)
    timed_epochs: int = integer("the epochs after the warm-up", checked=False)
    throughput: dict[str, float] = mapping("spread of the timed epochs' throughput: `median`, `q1`, `q3`, `iqr`, "
                                           "`min`, `max`, `cv` (sample std / mean), `count`", checked=False)
    time_s: dict[str, float] = mapping("the same spread of their `time_s`", checked=False)
    contended: bool | None = flag("`true` with one reason per bound broken, `false`, or `null` (no evidence); bounds "
                                  "and measurements: [leaderboards/RULES.md](../leaderboards/RULES.md), "
                                  "\"Clean timing\"", checked=False, type_text="true/false or null")
    reasons: list[str] = listing("why `contended` is what it is", checked=False)
    cpu_share: float = number("lowest rank's CPU s / (wall s × threads)", checked=False, optional=True)
    active_cpu_share: float = number("the same with the seconds inside collectives left out of the wall (at most 1): "
                                     "a 1-thread rank below the bound was denied its core", checked=False,
                                     optional=True)
    run_delay_share: float = number("highest rank's `run_delay_s` / wall s", checked=False, optional=True)
    others_share: float | None = number("(host busy − every rank's CPU) / (wall × cores): what other tenants and "
                                        "steal took; null when the timed epochs together last under 1 s (too few "
                                        "10 ms ticks to tell)", checked=False, optional=True, nullable=True)
    steal_share: float = number("steal / capacity", checked=False, optional=True)
    load_per_core: float = number("the highest load average less this job's threads, per core (shown, not judged: "
                                  "it averages the past minute)", checked=False, optional=True)
    others: dict[str, Any] = others()


# --------------------------------------------------------------------------- family extras

@dataclass(frozen=True)
class ModelSelection(RecordPart):
    """``extra.model_selection``: which state the final metrics are of under ``--eval-every N > 1``."""

    DOC_TITLE: ClassVar[str] = "extra.model_selection"

    eval_every: int = integer("N", checked=False)
    criterion: str = text("`\"val ap\"`: the split and metric the kept state was chosen by", checked=False)
    best_epoch: int = integer("0-based index into `epochs` of the kept state (the earliest among ties)",
                              checked=False)
    validated: list[dict[str, Any]] = listing("`{\"epoch\": i, \"ap\": val AP or null}` for every epoch validation "
                                              "was scored on; the full validation figures are `epochs[i].metrics`",
                                              checked=False, type_text="list of objects")
    test: str = text("`\"scored once, on the best-validation state\"`", checked=False)
    others: dict[str, Any] = others()


@dataclass(frozen=True)
class Extra(RecordPart):
    """``extra`` of a family without a registered type: an object, every key kept as it is."""

    DOC_TITLE: ClassVar[str] = "extra"

    parameters: int = integer("the model's parameter count (0 for baselines)", checked=False, optional=True)
    baseline: dict[str, Any] = mapping("a baseline model's settings (`dgbench/tasks/baselines.py`)", checked=False,
                                       optional=True)
    model_selection: ModelSelection = part(ModelSelection, "the kept state under `--eval-every N > 1` (below)",
                                           checked=False, optional=True)
    others: dict[str, Any] = others()


@dataclass(frozen=True)
class DiscreteExtra(Extra):
    """``extra`` of the discrete family (trainers/discrete/family.py); schemes add keys of their own."""

    DOC_TITLE: ClassVar[str] = "extra (discrete)"

    input_steps: int = integer("input steps: snapshots − 1", checked=False, optional=True)
    peak_saved_activation_bytes: int = integer("largest saved activations over ranks (gradient checkpointing)",
                                               checked=False, optional=True)
    predicted_comm_elements: dict[str, int] = mapping("the scheme's predicted elements of the last training epoch, "
                                                      "all ranks, by collective tag", checked=False, optional=True)
    lambda_by_epoch: list[float | None] = listing("DGC §2.2.2's λ per epoch (as `epochs[i].lambda`)", checked=False,
                                                  optional=True)
    smoothing: dict[str, Any] = mapping("the input smoothing that applied: `applied`, `window`, `chosen_by`, "
                                        "`targets`, `features_smoothed` (ESDG Table 1)", checked=False, optional=True)
    training_pairs: str = text("`fixed (ESDG §6.4)` or `redrawn every epoch`", checked=False, optional=True)
    rank_data: list[dict[str, Any]] = listing("per rank: `store_bytes_read` (bytes of the snapshot arrays it read), "
                                              "`input_steps_held` (the input steps whose Ã_t it built), "
                                              "`rss_before_data_bytes` (its resident set before it read any "
                                              "data: its own floor), `peak_rss_bytes` after training and "
                                              "evaluation", checked=False,
                                              optional=True)
    minibatches: dict[str, Any] = mapping("BLAD §3.1's seed batches (`--seed-batch`): `seed_batch`, `fanouts`, "
                                          "`batches_last_epoch`, `sampled_vertices_per_snapshot` (mean, min, max, "
                                          "max over min within a batch), `evaluation`", checked=False, optional=True)
    transfer_mode: str = text("base vs graph-difference transfer", checked=False, optional=True)
    transfer_bytes_by_epoch: list[dict[str, int]] = listing("bytes moved per epoch and transfer mode, all ranks",
                                                            checked=False, optional=True)
    transfer_bytes_per_epoch: dict[str, int] = mapping("the last epoch's of the above", checked=False, optional=True)
    time_ranges: list[Any] = listing("each rank's snapshot range (partition)", checked=False, optional=True)
    vertex_ranges: list[Any] = listing("each rank's vertex range (partition)", checked=False, optional=True)
    others: dict[str, Any] = others()


@dataclass(frozen=True)
class ContinuousExtra(Extra):
    """``extra`` of the continuous family (trainers/continuous/family.py); schemes add keys of their own."""

    DOC_TITLE: ClassVar[str] = "extra (continuous)"

    eta1: float = number("Sven's redundancy ratio η₁ (Eq. 1, paper form)", checked=False, optional=True)
    eta2: float = number("Sven's redundancy ratio η₂ (Eq. 1, paper form)", checked=False, optional=True)
    eta_per_rank_remote: dict[str, list[float]] = mapping("per rank, the remote η₁ and η₂", checked=False,
                                                          optional=True)
    events_per_rank: list[int] = listing("events each rank trained on", checked=False, optional=True)
    per_rank_counters: list[dict[str, Any]] = listing("each rank's counters (events, batches, η, predicted bytes)",
                                                      checked=False, optional=True)
    predicted_bytes: dict[str, float] = mapping("Eq. 7-9 per rank, summed: `dispatch`, `aggregation`",
                                                checked=False, optional=True)
    measured_row_bytes: dict[str, float] = mapping("the counted bytes beside them: `dispatch`, `aggregation`, "
                                                   "`view_gradients`", checked=False, optional=True)
    paper_eta: dict[str, Any] = mapping("Eq. 1 exactly as printed, on the pre-sampled training batches",
                                        checked=False, optional=True)
    paper_volume_bytes: dict[str, Any] = mapping("Eq. 7-9 exactly as printed, per scheme", checked=False,
                                                 optional=True)
    partition: Any = anything("the partition method", optional=True)
    balance: dict[str, Any] = mapping("the Eq. 5 balance cost and what each rank sent last epoch", checked=False,
                                      optional=True)
    best_validation: dict[str, Any] = mapping("the epoch of the best validation score and its scores",
                                              checked=False, optional=True)
    microbatches: Any = anything("the micro-batch count (or its Eq. 12 profile)", optional=True)
    state_row_width: int = integer("width of a memory-state row", checked=False, optional=True)
    events_used: int = integer("events of the stream used", checked=False, optional=True)
    batch_losses_last_epoch: list[float] = listing("rank 0's batch losses in the last epoch", checked=False,
                                                   optional=True)
    others: dict[str, Any] = others()


EXTRA_TYPES: dict[str, type[Extra]] = {"discrete": DiscreteExtra, "continuous": ContinuousExtra}


def extra_type(family: Any) -> type[Extra]:
    """The typed ``extra`` a family contributes (:class:`Extra` for one without its own)."""
    return EXTRA_TYPES.get(family, Extra) if isinstance(family, str) else Extra


# --------------------------------------------------------------------------- the record

def _family(value: str) -> str | None:
    return None if value in FAMILIES else f"is {value!r}, expected one of {sorted(FAMILIES)}"


def _strings(value: list[Any]) -> str | None:
    return None if all(isinstance(item, str) for item in value) else "must be a list of strings"


def _iso_time(value: str) -> str | None:
    try:
        stamp = datetime.datetime.fromisoformat(value)
    except ValueError:
        return f"{value!r} is not an ISO 8601 time"
    return None if stamp.tzinfo is not None else f"{value!r} has no time zone"


def _non_empty_epochs(value: list[Any]) -> str | None:
    return None if value else "is empty: a record needs at least one epoch"


@dataclass(frozen=True)
class Record(RecordPart):
    """One run's result record (schema version 1)."""

    DOC_TITLE: ClassVar[str] = "Top level"

    schema: str = text("always `\"dgbench.result\"` (`validate_record` refuses another before reading the rest)")
    schema_version: int = integer("`1` for this page; other versions are refused by a dgbench that does not read "
                                  "them")
    family: str = text("`\"discrete\"` (snapshot models, ESDG schemes) or `\"continuous\"` (memory-based TGNNs)",
                       check=_family)
    task: str = text("what was learned, e.g. `\"link_prediction\"`, `\"node_classification\"`")
    scheme: str = text("training scheme (`dgbench list`): `single`, `snapshot`, `vertex`, `checkpoint`, `depcomm`, "
                       "`sven`, ...")
    model: str = text("model of the zoo: `tmgcn`, `cdgcn`, `evolvegcn-o`, `tgn`, `jodie`, `apan`, ...")
    backend: str = text("`torch.distributed` backend: `\"gloo\"` or `\"nccl\"`")
    hardware_class: str = text("the coarse hardware label rows are grouped by, the hardware of one node: for GPUs the "
                               "device name and how many a node has (`NVIDIA H100 80GB HBM3 x8`; records without "
                               "`system`: the name alone), else `cpu-<cores>c`; must equal what `environment` and "
                               "`system` imply")
    world_size: int = integer("number of ranks (processes) that trained", low=1)
    hyperparameters: dict[str, Any] = mapping(
        "exactly the options that applied (dgbench/options.py): the run's (`epochs`, `seed`, `lr`), the family "
        "protocol's (`hidden`, `theta`; `batch_size`, `neighbors`, `sampler`, `memory_dim`, `max_events`), the "
        "scheme's (e.g. `blocks`, `transfer`, `partition`, `microbatches`) and the model's (e.g. `window`), defaults "
        "included, none that the run's owners do not take; `seed` (integer) is required by the accuracy track")
    extra: Extra = _field("extra", "family- and scheme-specific figures (below): `DiscreteExtra` or `ContinuousExtra` "
                                   "by `family`", optional=True, type_text="object")
    command: list[str] = listing("the command line that produced the record", check=_strings,
                                 type_text="list of strings")
    started_at: str = text("ISO 8601 time with a zone (UTC) the run started", check=_iso_time)
    ended_at: str = text("ISO 8601 time with a zone (UTC) it ended, ≥ `started_at`", check=_iso_time)
    dataset: Dataset = part(Dataset, "the store trained on (below)")
    environment: Environment = part(Environment, "host, device and software versions (below)")
    system: System = part(System, "the system the run ran on, MLPerf-style: nodes, ranks and accelerators per node, "
                                  "CPU, versions (below); absent in records written before it existed", optional=True)
    code: Code = part(Code, "which dgbench ran (below)")
    epochs: list[EpochFigures] = parts(EpochFigures, "one entry per epoch, in order (below)", check=_non_empty_epochs,
                                       type_text="list of objects, non-empty")
    final_metrics: dict[str, Any] = metrics("`{split: {metric: number or null}}` after training, at least `test` and "
                                            "usually `val`")
    seal: str = text("`\"sha256:\"` + the SHA-256 of the record's canonical JSON without `seal` (see *Seal*)")
    evaluation: Evaluation = part(Evaluation, "the evaluation sets the run scored (below); written by every run since "
                                              "dgbench scores fixed sets", optional=True, checked=False)
    timing: TimingSummary = part(TimingSummary, "how clean the timing was: threads, spreads, the `contended` verdict "
                                                "(see *Timing evidence*); readers recompute it from the epochs' "
                                                "evidence rather than trust it", optional=True, checked=False)
    others: dict[str, Any] = others()

    def check(self, reader: Reader, where: str, data: dict[str, Any]) -> None:
        if isinstance(self.started_at, str) and isinstance(self.ended_at, str) and \
                datetime.datetime.fromisoformat(self.ended_at) < datetime.datetime.fromisoformat(self.started_at):
            reader.fail("ended_at", "is before started_at")
        kind = self.dataset.kind if isinstance(self.dataset, Dataset) else None
        if isinstance(kind, str) and isinstance(self.family, str) and FAMILIES[self.family] != kind:
            reader.fail("dataset.kind", f"a {self.family}-time run trains on a {FAMILIES[self.family]} store, "
                                        f"not {kind!r}")
        self._check_hardware_class(reader, data)
        world_size = self.world_size if isinstance(self.world_size, int) else None
        most = most_work(data)
        for index, epoch in enumerate(self.epochs if isinstance(self.epochs, list) else []):
            if not isinstance(epoch, EpochFigures):
                continue
            if isinstance(epoch.epoch, int) and epoch.epoch != index:
                reader.fail(f"epochs[{index}].epoch", f"is {epoch.epoch}, expected {index} (epochs in order, none "
                                                      f"missing)")
            epoch.check_in_run(reader, f"epochs[{index}]", world_size, most)
        if isinstance(self.seal, str) and self.seal != record_seal(data):
            reader.fail("seal", "does not match the record's content (the record was edited after it was written)")

    @staticmethod
    def _check_hardware_class(reader: Reader, data: dict[str, Any]) -> None:
        env, claimed = data.get("environment"), data.get("hardware_class")
        if not isinstance(env, dict) or not isinstance(claimed, str) or not isinstance(env.get("device_name"), str):
            return
        system = data.get("system") if isinstance(data.get("system"), dict) else None
        implied = hardware_class(env, system)
        if claimed != implied:
            reader.fail("hardware_class", f"is {claimed!r} but the environment says {implied!r}")


def _dataset_edges(record: dict[str, Any]) -> int | None:
    """The store's edge (event) count when the record states a valid one."""
    dataset = record.get("dataset")
    edges = dataset.get("num_edges") if isinstance(dataset, dict) else None
    return edges if type(edges) is int and 0 < edges <= MAX_SAFE_INTEGER else None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def most_work(record: dict[str, Any]) -> int | None:
    """The most work one epoch can count: each store edge once, times how often the record's protocol
    legitimately counts it again -- a smoothing window (an edge lives in up to ``window`` smoothed inputs,
    ESDG Table 1) and the group protocol (a snapshot is in up to ``group_length`` groups, BLAD Eq. 1)."""
    edges = _dataset_edges(record)
    if edges is None:
        return None
    extra = _object(record.get("extra"))
    smoothing = _object(extra.get("smoothing"))
    hyper = _object(record.get("hyperparameters"))
    times = 1
    window = smoothing.get("window")
    if smoothing.get("applied") not in (None, "raw", "none") and type(window) is int and window > 1:
        times *= window
    group = hyper.get("group_length")
    if type(group) is int and group > 1:
        times *= group
    return edges * times


def read_record(data: dict[str, Any]) -> tuple[Record, list[Problem]]:
    """``data`` as a typed :class:`Record` and every problem the schema finds in it (none: it is valid)."""
    reader = Reader()
    return Record.read(data, "", reader), reader.problems


def problems_of(data: dict[str, Any]) -> list[Problem]:
    """Every schema-v1 problem of ``data`` (empty when it is valid)."""
    return read_record(data)[1]


# --------------------------------------------------------------------------- the docs' field tables

DOC_PATH = Path(__file__).resolve().parents[1] / "docs" / "result-record.md"
DOC_TYPES: dict[str, type[RecordPart]] = {kind.__name__: kind for kind in (
    Record, Dataset, Evaluation, Environment, System, Code, EpochFigures, RankFigures, TimingEvidence,
    TimingSummary, Extra, DiscreteExtra, ContinuousExtra, ModelSelection)}
GENERATED = re.compile(r"(<!-- table: (\w+) -->\n).*?(<!-- end table -->)", re.S)


def type_text(spec: Spec) -> str:
    """The docs' type column of a field: its JSON kind, bounds, and whether it may be null or missing."""
    base = spec.type_text or {
        "text": "string, non-empty" if spec.checked else "string", "integer": "integer", "number": "number",
        "bool": "true/false", "object": "object", "list": "list", "metrics": "object", "part": "object",
        "parts": "list of objects", "extra": "object", "any": "any"}[spec.kind]
    if spec.low is not None and spec.type_text is None:
        base += f" {'>' if spec.low_open else '≥'} {spec.low:g}"
    if spec.high is not None and spec.type_text is None:
        base += f", ≤ {spec.high:g}"
    return base + (" or null" if spec.nullable else "") + (", optional" if spec.optional else "")


def doc_table(kind: type[RecordPart]) -> str:
    """The markdown field table of ``kind``, one row per field in reading order (a subtype's own fields only)."""
    base = kind.__mro__[1]
    inherited = {f.name for f in dataclasses.fields(base)} if dataclasses.is_dataclass(base) else set()
    rows = ["| field | type | checked | meaning |", "|---|---|---|---|"]
    for name, key, spec in kind.specs():
        if name in inherited:
            continue
        rows.append(f"| `{key}` | {type_text(spec)} | {'yes' if spec.checked else 'no'} | {spec.meaning} |")
    return "\n".join(rows) + "\n"


def render_doc(text_of_doc: str) -> str:
    """``text_of_doc`` with every ``<!-- table: Type -->`` block regenerated from its type."""
    def table(found: re.Match[str]) -> str:
        return found.group(1) + doc_table(DOC_TYPES[found.group(2)]) + found.group(3)
    return GENERATED.sub(table, text_of_doc)


def main(argv: list[str]) -> int:
    """``--doc-table TYPE``: print one table; ``--write-doc``: regenerate docs/result-record.md's tables;
    ``--check-doc``: exit 1 when the page and the types disagree."""
    if len(argv) == 2 and argv[0] == "--doc-table" and argv[1] in DOC_TYPES:
        sys.stdout.write(doc_table(DOC_TYPES[argv[1]]))
        return 0
    if argv in (["--write-doc"], ["--check-doc"]):
        current = DOC_PATH.read_text(encoding="utf-8")
        rendered = render_doc(current)
        if argv == ["--write-doc"]:
            DOC_PATH.write_text(rendered, encoding="utf-8")
            return 0
        if rendered != current:
            sys.stderr.write(f"{DOC_PATH}: its field tables differ from dgbench/record_types.py "
                             f"(python -m dgbench.record_types --write-doc)\n")
        return 0 if rendered == current else 1
    sys.stderr.write(f"usage: python -m dgbench.record_types --doc-table {{{','.join(DOC_TYPES)}}} | --write-doc "
                     f"| --check-doc\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
