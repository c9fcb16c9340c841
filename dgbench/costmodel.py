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


def load_fitted(path: str | Path, kind: str, device: torch.device | None = None,
                allow_other_hardware: bool = False) -> FittedModel:
    """Read a fitted model of ``kind``; a model fitted on other hardware is refused unless allowed."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise DgbenchError(f"{path}: no such cost-model file") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DgbenchError(f"{path}: not a dgbench cost-model file ({exc})") from exc
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise DgbenchError(f"{path}: not a dgbench cost-model file (schema {document.get('schema')!r})"
                           if isinstance(document, dict) else f"{path}: not a dgbench cost-model file")
    if document.get("version") != VERSION:
        raise DgbenchError(f"{path}: cost-model version {document.get('version')!r}, this dgbench reads {VERSION}")
    if document.get("kind") != kind:
        raise DgbenchError(f"{path}: a '{document.get('kind')}' cost model, not '{kind}'")
    here = hardware_identity(device)
    if not allow_other_hardware and not same_hardware(document["hardware"], here):
        raise DgbenchError(f"{path}: fitted on {document['hardware'].get('device_name')} "
                           f"({document['hardware'].get('processor')}, {document['hardware'].get('cpu_count')} cores), "
                           f"not this machine ({here['device_name']}, {here['processor']}, {here['cpu_count']} cores); "
                           f"refit it here")
    return FittedModel(kind, document["hardware"], document.get("fit", {}), document["payload"], path)


def proxy_provenance(name: str, description: str) -> dict[str, Any]:
    """What a record cites when no fitted model was given and a stated proxy ran instead."""
    return {"source": "proxy", "proxy": name, "description": description}
