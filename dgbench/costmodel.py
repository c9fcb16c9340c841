"""Fitted cost models on disk: what was fitted, on which hardware, and how well.

DGC §4.2 (two MLPs predicting a chunk's structure- and time-encoder time), BLAD §5.2.2 (one linear
regression per operator) and the scaling projection all fit a model of *this machine's* speed by
timing work on it. Such a model is only valid on the hardware it was fitted on, so every file
carries that hardware's identity; loading it elsewhere is refused unless the caller accepts a
mismatch, and a run records which model (or which stated proxy) it used.

File format: one JSON object ``{"schema": "dgbench.costmodel", "version": 1, "kind": ..., "hardware":
{...}, "fitted_at": ..., "fit": {...metrics of the fit...}, "payload": {...model parameters...}}``,
written atomically. The payload is the kind's own (lists of floats; no pickles).
"""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dgbench.errors import DgbenchError

SCHEMA, VERSION = "dgbench.costmodel", 1


def hardware_identity(device: torch.device | None = None) -> dict[str, Any]:
    """What a timing depends on: processor, core count, device name and the torch build."""
    device = device or torch.device("cpu")
    ident: dict[str, Any] = {"processor": platform.processor() or platform.machine(), "machine": platform.machine(),
                             "cpu_count": os.cpu_count(), "torch": torch.__version__,
                             "threads": torch.get_num_threads(), "device": device.type, "device_name": "cpu"}
    if device.type == "cuda":
        ident["device_name"] = torch.cuda.get_device_name(device)
    return ident


def same_hardware(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal on everything but the torch version and thread count (which a run may change)."""
    keys = ("processor", "machine", "cpu_count", "device", "device_name")
    return all(a.get(k) == b.get(k) for k in keys)


@dataclass
class FittedModel:
    """A cost model read back from disk."""

    kind: str
    hardware: dict[str, Any]
    fit: dict[str, Any]
    payload: dict[str, Any]
    path: Path

    def provenance(self) -> dict[str, Any]:
        """What a result record cites: the file, its kind, hardware and fit quality."""
        return {"source": "fitted", "path": str(self.path), "kind": self.kind, "hardware": self.hardware,
                "fit": self.fit}


def save_fitted(path: str | Path, kind: str, payload: dict[str, Any], fit: dict[str, Any],
                device: torch.device | None = None) -> Path:
    """Write a fitted model beside the hardware identity it was fitted on (atomic replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"schema": SCHEMA, "version": VERSION, "kind": kind, "hardware": hardware_identity(device),
                "fitted_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "fit": fit, "payload": payload}
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.write_text(json.dumps(document, indent=1, allow_nan=False))
    os.replace(scratch, path)
    return path


def read_document(path: Path) -> dict[str, Any]:
    """The JSON object of a dgbench cost-model file, whatever its kind or hardware; one line otherwise."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise DgbenchError(f"{path}: no such cost-model file") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DgbenchError(f"{path}: not a dgbench cost-model file ({exc})") from exc
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise DgbenchError(f"{path}: not a dgbench cost-model file (schema {document.get('schema')!r})"
                           if isinstance(document, dict) else f"{path}: not a dgbench cost-model file")
    return document


def load_fitted(path: str | Path, kind: str, device: torch.device | None = None,
                allow_other_hardware: bool = False) -> FittedModel:
    """Read a fitted model of ``kind``; a model fitted on other hardware is refused unless allowed."""
    path = Path(path)
    document = read_document(path)
    if document.get("version") != VERSION:
        raise DgbenchError(f"{path}: cost-model version {document.get('version')!r}, this dgbench reads {VERSION}")
    if document.get("kind") != kind:
        raise DgbenchError(f"{path}: a '{document.get('kind')}' cost model, not '{kind}'")
    problem = document_problem(document)
    if problem:
        raise DgbenchError(f"{path}: {problem}; refit it")
    here = hardware_identity(device)
    if not allow_other_hardware and not same_hardware(document["hardware"], here):
        raise DgbenchError(f"{path}: fitted on {document['hardware'].get('device_name')} "
                           f"({document['hardware'].get('processor')}, {document['hardware'].get('cpu_count')} cores), "
                           f"not this machine ({here['device_name']}, {here['processor']}, {here['cpu_count']} cores); "
                           f"refit it here")
    return FittedModel(kind, document["hardware"], document.get("fit", {}), document["payload"], path)


# --------------------------------------------------------------------------- checking a file before use

MAGNITUDE_LIMIT = 1e18  # no fitted quantity (seconds, rates, bytes/s, weights) is larger in size
BLAD_FEATURES = {"paper": 4, "products": 6}  # design columns per feature set (schedule/predictor.py)
BLAD_SECONDS_PER_UNIT = 60.0  # a coefficient prices one vertex, edge or feature: never a minute of it
BLAD_CHECK_LOADS = ((100, 400), (1_000, 8_000))  # (V, E): ordinary snapshots, for a file without profile
NEGATIVE_SLACK_S = 1e-3


def document_problem(document: dict[str, Any]) -> str | None:
    """Why a cost-model document cannot be used (None when it can): one field and the rule it broke.
    Every file: hardware, fit and payload are objects and every number is finite and below
    MAGNITUDE_LIMIT; per kind, the payload's own rules (:data:`PAYLOAD_RULES`)."""
    for name in ("hardware", "fit", "payload"):
        if not isinstance(document.get(name), dict):
            return f"field '{name}' is {_short(document.get(name))}, expected an object"
    for name in ("fit", "payload"):
        problem = _number_problem(document[name], name)
        if problem:
            return problem
    rule = PAYLOAD_RULES.get(document.get("kind"))
    return rule(document["payload"]) if rule else None


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _number_problem(value: Any, where: str) -> str | None:
    """The first number under ``value`` that is not finite or beyond MAGNITUDE_LIMIT, named by its path."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"field '{where}' is {value}, expected a finite number"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > MAGNITUDE_LIMIT:
        return f"field '{where}' is {value:.3g}, outside ±{MAGNITUDE_LIMIT:.0e}"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        problem = _number_problem(item, f"{where}[{key}]" if isinstance(value, list) else f"{where}.{key}")
        if problem:
            return problem
    return None


def _blad_payload_problem(payload: dict[str, Any]) -> str | None:
    """BLAD's per-operator regressions (dgbench/schedule/predictor.py): a known feature design, an integer
    width, per operator and direction that design's number of coefficients, each within physical bounds,
    and durations that are not negative on ordinary snapshots."""
    features, hidden, coefficients = payload.get("features"), payload.get("hidden"), payload.get("coefficients")
    if features not in BLAD_FEATURES:
        return f"field 'payload.features' is {_short(features)}, expected one of {', '.join(BLAD_FEATURES)}"
    if type(hidden) is not int or not 1 <= hidden <= 1 << 20:
        return f"field 'payload.hidden' is {_short(hidden)}, expected an integer in 1..2^20"
    if not isinstance(coefficients, dict) or not coefficients:
        return f"field 'payload.coefficients' is {_short(coefficients)}, expected an object of operators"
    count = BLAD_FEATURES[features]
    for op, by_direction in coefficients.items():
        for direction in ("forward", "backward"):
            where = f"payload.coefficients.{op}.{direction}"
            values = by_direction.get(direction) if isinstance(by_direction, dict) else None
            if not isinstance(values, list) or len(values) != count:
                return f"field '{where}' is {_short(values)}, expected a list of {count} numbers ({features} design)"
            for index, value in enumerate(values):
                if type(value) not in (int, float) or not abs(value) <= BLAD_SECONDS_PER_UNIT:
                    return (f"field '{where}[{index}]' is {_short(value)}, expected a number of seconds per unit "
                            f"within ±{BLAD_SECONDS_PER_UNIT:g}")
            problem = _negative_duration_problem(where, features, values, payload.get("profile"), hidden)
            if problem:
                return problem
    return None


def _negative_duration_problem(where: str, features: str, coefficients: list[float], profile: Any,
                               hidden: int) -> str | None:
    """A fit must not predict negative durations (beyond NEGATIVE_SLACK_S) on the loads and widths it was
    profiled on; a file without its profile must at least predict a positive duration on an ordinary
    snapshot (a noisy fit may dip below zero away from where it was fitted, and is clamped there)."""
    try:
        points = [(float(v), float(e), float(w)) for v, e in profile["loads"][:10_000] for w in profile["widths"][:100]]
    except (KeyError, TypeError, ValueError):
        points = []
    predicted = [(_blad_seconds(features, coefficients, *point), point) for point in points]
    worst = min(predicted, default=None)
    if worst is not None and worst[0] < -NEGATIVE_SLACK_S:
        (seconds, (vertices, edges, width)) = worst
        return (f"field '{where}' predicts a negative duration ({seconds:.3g} s at V = {vertices:g}, E = {edges:g}, "
                f"F = {width:g}, a load it was profiled on): not a fitted duration model")
    if not points and all(_blad_seconds(features, coefficients, v, e, w) < -NEGATIVE_SLACK_S
                          for v, e in BLAD_CHECK_LOADS for w in (1, hidden)):
        return f"field '{where}' predicts only negative durations: not a fitted duration model"
    return None


def _blad_seconds(features: str, coefficients: list[float], vertices: float, edges: float, width: float) -> float:
    columns = [1.0, vertices, edges, width] + ([vertices * width, edges * width] if features == "products" else [])
    return float(sum(c * x for c, x in zip(coefficients, columns)))


PAYLOAD_RULES = {"blad-operators": _blad_payload_problem}


def proxy_provenance(name: str, description: str) -> dict[str, Any]:
    """What a record cites when no fitted model was given and a stated proxy ran instead."""
    return {"source": "proxy", "proxy": name, "description": description}
