"""The result-record schema, versioned: strict parsing, and the version's validator.

Every problem found is a :class:`Problem` naming the field (a dotted path such as
``epochs[2].time_s``) and why, so a rejection is one line per problem. The schema itself is
documented in docs/result-record.md and typed, with its checks, in dgbench/record_types.py. Parsing is plain JSON
with NaN/Infinity and duplicate keys refused: nothing in a record is ever executed.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from dgbench.record_types import (  # noqa: F401  (the bounds and Problem, read here by the board and tests)
    MAX_COMM_BYTES_PER_S_PER_RANK, MAX_EDGES_PER_S_PER_RANK, Problem, problems_of)
from dgbench.records import RECORD_SCHEMA

MAX_RECORD_BYTES = 16 * 1024 * 1024


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


def validate_v1(record: dict[str, Any]) -> list[Problem]:
    """Version 1: the record read into its types (dgbench/record_types.py), each field checked as it is read."""
    return problems_of(record)


VALIDATORS: dict[int, Callable[[dict[str, Any]], list[Problem]]] = {1: validate_v1}
