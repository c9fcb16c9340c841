"""The result-record schema, versioned: strict parsing and field-by-field checks.

Every problem found is a :class:`Problem` naming the field (a dotted path such as
``epochs[2].time_s``) and why, so a rejection is one line per problem. The schema itself is
documented in docs/result-record.md; this module is its executable form. Parsing is plain JSON
with NaN/Infinity and duplicate keys refused: nothing in a record is ever executed.
"""
from __future__ import annotations

import datetime
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dgbench.records import RECORD_SCHEMA, hardware_class, record_seal

MAX_RECORD_BYTES = 16 * 1024 * 1024
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


@dataclass(frozen=True)
class Problem:
    """One reason a record is refused: the field (dotted path) and why."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class RecordParseError(Exception):
    """The file is not a record at all (unreadable, not JSON, not an object)."""

    def __init__(self, problem: Problem):
        super().__init__(str(problem))
        self.problem = problem


def parse_record(path: str | Path) -> dict[str, Any]:
    """Read ``path`` as strict JSON (no NaN/Infinity, no repeated keys, an object at the top)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_RECORD_BYTES:
            raise RecordParseError(Problem("(file)", f"{size} bytes is larger than the {MAX_RECORD_BYTES} "
                                                     f"a record may be"))
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordParseError(Problem("(file)", f"cannot be read ({exc})")) from exc
    return parse_record_text(text)


def parse_record_text(text: str) -> dict[str, Any]:
    def no_constants(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    def finite_float(literal: str) -> float:
        # json turns an overflowing literal such as 1e400 into inf without calling parse_constant;
        # filed back out, that inf would be written as the non-JSON constant Infinity.
        value = float(literal)
        if not math.isfinite(value):
            raise ValueError(f"number {literal[:40]} is not a finite double")
        return value

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"key {repeated[0]!r} appears twice in one object")
        return dict(pairs)

    try:
        value = json.loads(text, parse_constant=no_constants, parse_float=finite_float,
                           object_pairs_hook=unique_keys)
    except (ValueError, RecursionError) as exc:
        raise RecordParseError(Problem("(file)", f"not valid JSON ({exc})")) from exc
    if not isinstance(value, dict):
        raise RecordParseError(Problem("(file)", f"the top level is a JSON {type(value).__name__}, not an object"))
    return value


def validate_record(record: dict[str, Any]) -> list[Problem]:
    """Every schema problem of ``record`` (empty when it is valid)."""
    if record.get("schema") != RECORD_SCHEMA:
        return [Problem("schema", f"is {record.get('schema')!r}, expected {RECORD_SCHEMA!r}")]
    version = record.get("schema_version")
    if type(version) is not int:
        return [Problem("schema_version", f"is {version!r}, expected an integer")]
    if version not in VALIDATORS:
        return [Problem("schema_version", f"unknown version {version} (this dgbench reads {sorted(VALIDATORS)})")]
    return VALIDATORS[version](record)


# --------------------------------------------------------------------------- field checks

class Checker:
    """Collects problems while walking one record."""

    def __init__(self, record: dict[str, Any]):
        self.record = record
        self.problems: list[Problem] = []

    def fail(self, field: str, reason: str) -> None:
        self.problems.append(Problem(field, reason))

    def get(self, parent: dict[str, Any], key: str, where: str, kinds: tuple[type, ...], *,
            optional: bool = False, nullable: bool = False) -> Any:
        """``parent[key]`` when it has one of ``kinds``; else records the problem and returns None."""
        field = f"{where}.{key}" if where else key
        if key not in parent:
            if not optional:
                self.fail(field, "missing")
            return None
        value = parent[key]
        if value is None and nullable:
            return None
        if not _is_kind(value, kinds):
            self.fail(field, f"is {_describe(value)}, expected {' or '.join(_kind_name(k) for k in kinds)}"
                             + (" or null" if nullable else ""))
            return None
        return value

    def text(self, parent: dict, key: str, where: str = "", **kw) -> str | None:
        value = self.get(parent, key, where, (str,), **kw)
        if value is not None and not value.strip():
            self.fail(_join(where, key), "is empty")
            return None
        return value

    def number(self, parent: dict, key: str, where: str = "", *, low: float | None = None,
               high: float | None = None, low_open: bool = False, integer: bool = False, **kw) -> float | None:
        value = self.get(parent, key, where, (int,) if integer else (int, float), **kw)
        if value is None:
            return None
        field = _join(where, key)
        if isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
            self.fail(field, f"is an integer of {value.bit_length()} bits, beyond 2^53 (not exact in JSON)")
            return None
        if not math.isfinite(value):
            self.fail(field, f"is {value}, expected a finite number")
            return None
        if low is not None and (value <= low if low_open else value < low):
            self.fail(field, f"is {value}, must be {'>' if low_open else '>='} {low}")
            return None
        if high is not None and value > high:
            self.fail(field, f"is {value}, must be <= {high}")
            return None
        return value

    def mapping(self, parent: dict, key: str, where: str = "", **kw) -> dict | None:
        return self.get(parent, key, where, (dict,), **kw)


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


# --------------------------------------------------------------------------- version 1

def validate_v1(record: dict[str, Any]) -> list[Problem]:
    check = Checker(record)
    family = check.text(record, "family")
    if family is not None and family not in FAMILIES:
        check.fail("family", f"is {family!r}, expected one of {sorted(FAMILIES)}")
        family = None
    for key in ("task", "scheme", "model", "backend", "hardware_class"):
        check.text(record, key)
    world_size = check.number(record, "world_size", low=1, integer=True)
    check.mapping(record, "hyperparameters")
    check.mapping(record, "extra", optional=True)
    _check_command(check)
    _check_times(check)
    _check_dataset(check, family)
    _check_environment(check)
    _check_system(check)
    _check_code(check)
    _check_epochs(check, world_size, _most_work(check.record))
    _check_metrics_block(check, record, "final_metrics", "")
    _check_seal(check)
    return check.problems


def _check_command(check: Checker) -> None:
    command = check.get(check.record, "command", "", (list,))
    if command is not None and not all(isinstance(part, str) for part in command):
        check.fail("command", "must be a list of strings")


def _check_times(check: Checker) -> None:
    stamps = {}
    for key in ("started_at", "ended_at"):
        value = check.text(check.record, key)
        if value is None:
            continue
        try:
            stamp = datetime.datetime.fromisoformat(value)
        except ValueError:
            check.fail(key, f"{value!r} is not an ISO 8601 time")
            continue
        if stamp.tzinfo is None:
            check.fail(key, f"{value!r} has no time zone")
            continue
        stamps[key] = stamp
    if len(stamps) == 2 and stamps["ended_at"] < stamps["started_at"]:
        check.fail("ended_at", "is before started_at")


def _check_dataset(check: Checker, family: str | None) -> None:
    dataset = check.mapping(check.record, "dataset")
    if dataset is None:
        return
    check.text(dataset, "name", "dataset")
    fingerprint = check.text(dataset, "fingerprint", "dataset")
    if fingerprint is not None and not HEX64.fullmatch(fingerprint):
        check.fail("dataset.fingerprint", f"{fingerprint[:20]!r} is not a 64-digit lowercase hex sha256")
    kind = check.text(dataset, "kind", "dataset")
    if kind is not None and kind not in FAMILIES.values():
        check.fail("dataset.kind", f"is {kind!r}, expected one of {sorted(FAMILIES.values())}")
    elif kind is not None and family is not None and FAMILIES[family] != kind:
        check.fail("dataset.kind", f"a {family}-time run trains on a {FAMILIES[family]} store, not {kind!r}")
    check.number(dataset, "num_nodes", "dataset", low=1, integer=True)
    check.number(dataset, "num_edges", "dataset", low=1, integer=True)
    if kind == "snapshots":
        check.number(dataset, "num_snapshots", "dataset", low=1, integer=True)
    transforms = check.get(dataset, "transforms", "dataset", (list,), optional=True)
    if transforms is not None and not all(isinstance(t, (str, dict)) for t in transforms):
        check.fail("dataset.transforms", "must be a list of strings or objects")


def _check_environment(check: Checker) -> None:
    env = check.mapping(check.record, "environment")
    if env is None:
        return
    for key in ("host", "python", "torch", "dgbench", "device", "device_name"):
        check.text(env, key, "environment")
    check.number(env, "cpu_count", "environment", low=1, integer=True, nullable=True)
    claimed = check.record.get("hardware_class")
    system = check.record.get("system") if isinstance(check.record.get("system"), dict) else None
    implied = hardware_class(env, system)
    if isinstance(claimed, str) and isinstance(env.get("device_name"), str) and claimed != implied:
        check.fail("hardware_class", f"is {claimed!r} but the environment says {implied!r}")


def _check_system(check: Checker) -> None:
    """The system block (optional: records written before it existed have none)."""
    system = check.mapping(check.record, "system", optional=True)
    if system is None:
        return
    check.number(system, "nodes", "system", low=1, integer=True)
    check.number(system, "ranks_per_node", "system", low=1, integer=True)
    check.number(system, "accelerators_per_node", "system", low=0, integer=True)
    for key in ("cpu_cores", "cpus_usable", "memory_bytes"):
        check.number(system, key, "system", low=1, integer=True, optional=True, nullable=True)
    for key in ("launcher", "accelerator", "cpu_model", "cuda", "cudnn", "nccl", "driver"):
        check.text(system, key, "system", optional=True, nullable=True)
    check.mapping(system, "description", "system", optional=True)


def _check_code(check: Checker) -> None:
    code = check.mapping(check.record, "code")
    if code is None:
        return
    commit = check.get(code, "commit", "code", (str,), nullable=True)
    if commit is not None and not HEX40.fullmatch(commit):
        check.fail("code.commit", f"{commit[:20]!r} is not a 40-digit git commit")
    check.get(code, "dirty", "code", (bool,), nullable=True)


EPOCH_SECONDS = ("transfer_s", "compute_s", "communication_s")
RANK_COUNTS = ("comm_bytes", "comm_elements")


def _dataset_edges(record: dict[str, Any]) -> int | None:
    """The store's edge (event) count when the record states a valid one."""
    dataset = record.get("dataset")
    edges = dataset.get("num_edges") if isinstance(dataset, dict) else None
    return edges if type(edges) is int and 0 < edges <= MAX_SAFE_INTEGER else None


def _most_work(record: dict[str, Any]) -> int | None:
    """The most work one epoch can count: each store edge once, times how often the record's protocol
    legitimately counts it again -- a smoothing window (an edge lives in up to ``window`` smoothed inputs,
    ESDG Table 1) and the group protocol (a snapshot is in up to ``group_length`` groups, BLAD Eq. 1)."""
    edges = _dataset_edges(record)
    if edges is None:
        return None
    extra = record.get("extra") if isinstance(record.get("extra"), dict) else {}
    smoothing = extra.get("smoothing") if isinstance(extra.get("smoothing"), dict) else {}
    hyper = record.get("hyperparameters") if isinstance(record.get("hyperparameters"), dict) else {}
    times = 1
    window = smoothing.get("window")
    if smoothing.get("applied") not in (None, "raw", "none") and type(window) is int and window > 1:
        times *= window
    group = hyper.get("group_length")
    if type(group) is int and group > 1:
        times *= group
    return edges * times


def _check_epochs(check: Checker, world_size: int | None, num_edges: int | None) -> None:
    epochs = check.get(check.record, "epochs", "", (list,))
    if epochs is None:
        return
    if not epochs:
        check.fail("epochs", "is empty: a record needs at least one epoch")
    for index, entry in enumerate(epochs):
        where = f"epochs[{index}]"
        if not isinstance(entry, dict):
            check.fail(where, f"is {_describe(entry)}, expected an object")
            continue
        number = check.number(entry, "epoch", where, low=0, integer=True)
        if number is not None and number != index:
            check.fail(f"{where}.epoch", f"is {number}, expected {index} (epochs in order, none missing)")
        check.number(entry, "loss", where, nullable=True)
        _check_epoch_figures(check, entry, where, world_size, num_edges)
        _check_metrics_block(check, entry, "metrics", where)
        _check_per_rank(check, entry, where, world_size)


def _check_epoch_figures(check: Checker, entry: dict, where: str, world_size: int | None,
                         num_edges: int | None) -> None:
    time_s = check.number(entry, "time_s", where, low=0, low_open=True)
    for key in EPOCH_SECONDS:
        part = check.number(entry, key, where, low=0)
        if part is not None and time_s is not None and part > time_s and not _close(part, time_s):
            check.fail(f"{where}.{key}", f"{part} s is longer than the epoch's time_s {time_s} s")
    comm_bytes, comm_elements = (check.number(entry, key, where, low=0, integer=True) for key in RANK_COUNTS)
    check.number(entry, "peak_rss_bytes", where, low=0, integer=True)
    check.number(entry, "cuda_max_allocated_bytes", where, low=0, integer=True, optional=True)
    work = check.number(entry, "work", where, low=0, integer=True)
    throughput = check.number(entry, "throughput", where, low=0)
    if None not in (work, throughput, time_s) and not _close(throughput, work / time_s):
        check.fail(f"{where}.throughput", f"is {throughput:.6g} but work / time_s = {work / time_s:.6g}")
    _check_physical_bounds(check, where, world_size, num_edges, time_s, work, throughput, comm_bytes,
                           comm_elements)


def _check_physical_bounds(check: Checker, where: str, world_size: int | None, num_edges: int | None,
                           time_s: float | None, work: int | None, throughput: float | None,
                           comm_bytes: int | None, comm_elements: int | None) -> None:
    """Figures a run cannot have produced: more work than the store holds, more edges per second or more
    bytes sent per second than any hardware does (MAX_*_PER_RANK), more elements than bytes sent."""
    if work is not None and num_edges is not None and work > num_edges:
        check.fail(f"{where}.work", f"is {work}, above the {num_edges} edges an epoch can process (each store edge "
                                    f"(event) once, times the smoothing window and group length)")
    if throughput is not None and world_size is not None and throughput > world_size * MAX_EDGES_PER_S_PER_RANK:
        check.fail(f"{where}.throughput", f"is {throughput:.6g} edges/s, above the physical bound of "
                                          f"{MAX_EDGES_PER_S_PER_RANK:.0e} per rank x {world_size} ranks")
    most_sent = None if None in (time_s, world_size) else world_size * MAX_COMM_BYTES_PER_S_PER_RANK * time_s
    if comm_bytes is not None and most_sent is not None and comm_bytes > most_sent:
        check.fail(f"{where}.comm_bytes", f"is {comm_bytes} bytes in {time_s} s, above the physical bound of "
                                          f"{MAX_COMM_BYTES_PER_S_PER_RANK:.0e} B/s per rank x {world_size} ranks")
    if None not in (comm_bytes, comm_elements) and comm_elements > comm_bytes:
        check.fail(f"{where}.comm_elements", f"is {comm_elements}, more than the {comm_bytes} bytes sent "
                                             f"(an element is at least one byte)")


def _check_per_rank(check: Checker, entry: dict, where: str, world_size: int | None) -> None:
    ranks = check.get(entry, "per_rank", where, (list,))
    if ranks is None:
        return
    if world_size is not None and len(ranks) != world_size:
        check.fail(f"{where}.per_rank", f"has {len(ranks)} ranks but world_size is {world_size}")
    figures = []
    for rank, figure in enumerate(ranks):
        rank_where = f"{where}.per_rank[{rank}]"
        if not isinstance(figure, dict):
            check.fail(rank_where, f"is {_describe(figure)}, expected an object")
            continue
        time_s = check.number(figure, "time_s", rank_where, low=0, low_open=True)
        _check_time_split(check, figure, rank_where, time_s)
        _check_evidence(check, figure, rank_where)
        counts = [check.number(figure, key, rank_where, low=0, integer=True) for key in RANK_COUNTS]
        if time_s is not None and None not in counts:
            figures.append((time_s, *counts))
    if not figures or len(figures) != len(ranks):
        return
    time_s = entry.get("time_s")
    if isinstance(time_s, (int, float)) and not _close(time_s, max(f[0] for f in figures)):
        check.fail(f"{where}.time_s", f"is {time_s} but the slowest rank took {max(f[0] for f in figures)}")
    for column, key in enumerate(RANK_COUNTS, start=1):
        total = sum(f[column] for f in figures)
        if isinstance(entry.get(key), int) and entry[key] != total:
            check.fail(f"{where}.{key}", f"is {entry[key]} but the ranks' {key} sum to {total}")


TIME_SPLIT = ("busy_s", "wait_s", "collective_transfer_s")  # optional; when present they add up to time_s
EVIDENCE_SECONDS = ("wall_s", "cpu_s", "run_delay_s", "host_busy_s", "host_steal_s")


def _check_time_split(check: Checker, figure: dict, where: str, time_s: float | None) -> None:
    if not any(key in figure for key in TIME_SPLIT):
        return
    parts = [check.number(figure, key, where, low=0) for key in TIME_SPLIT]
    if time_s is not None and None not in parts and not _close(sum(parts), time_s):  # type: ignore[arg-type]
        check.fail(f"{where}.busy_s", f"busy + wait + collective transfer = {sum(parts)} but time_s is {time_s}")  # type: ignore[arg-type]


def _check_evidence(check: Checker, figure: dict, where: str) -> None:
    """The timing evidence the contention verdict is recomputed from (dgbench/timing.py)."""
    evidence = check.get(figure, "evidence", where, (dict,), optional=True)
    if evidence is None:
        return
    where = f"{where}.evidence"
    for key in EVIDENCE_SECONDS:
        check.number(evidence, key, where, low=0)
    check.number(evidence, "threads", where, low=1, integer=True)
    check.number(evidence, "cores", where, low=1, integer=True)
    check.number(evidence, "load_1m", where, low=0)


def _check_metrics_block(check: Checker, parent: dict, key: str, where: str) -> None:
    """``{split: {metric: number|null}}``; bounded metrics must lie in [0, 1]."""
    block = check.mapping(parent, key, where)
    if block is None:
        return
    base = _join(where, key)
    for split, metrics in block.items():
        if not isinstance(metrics, dict):
            check.fail(f"{base}.{split}", f"is {_describe(metrics)}, expected an object of metrics")
            continue
        for name in metrics:
            bounded = name.lower() in BOUNDED_METRICS
            check.number(metrics, name, f"{base}.{split}", nullable=True,
                         low=0 if bounded else None, high=1 if bounded else None)


def _check_seal(check: Checker) -> None:
    seal = check.text(check.record, "seal")
    if seal is not None and seal != record_seal(check.record):
        check.fail("seal", "does not match the record's content (the record was edited after it was written)")


VALIDATORS: dict[int, Callable[[dict[str, Any]], list[Problem]]] = {1: validate_v1}
