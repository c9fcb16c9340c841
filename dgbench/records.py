"""Result records: the versioned JSON every `dgbench run` writes and `dgbench submit` accepts.

Schema (version RECORD_SCHEMA_VERSION) is documented in docs/result-record.md. A record says
what ran (scheme, model, hyper-parameters, world size, backend), on what (dataset name and store
fingerprint), where (device, host, software versions, git commit and whether the tree was dirty),
and what came out (per-epoch figures, final metrics), so every number traces back to a command
and a store fingerprint.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch is imported only where a record is built: reading one stays light
    import torch

import dgbench
from dgbench.errors import DgbenchError
from dgbench.files import create_new

RECORD_SCHEMA = "dgbench.result"
RECORD_SCHEMA_VERSION = 1
REPO_ROOT = Path(__file__).resolve().parents[1]

def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def git_state(repo: Path = REPO_ROOT) -> dict[str, Any]:
    """Commit of the code that ran and whether the working tree had uncommitted changes."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain")  # untracked files count: an uncommitted module may have run
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def environment(device: torch.device) -> dict[str, Any]:
    """Host, device and software versions."""
    import torch
    env: dict[str, Any] = {"host": socket.gethostname(), "platform": platform.platform(),
                           "processor": platform.processor() or platform.machine(),
                           "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
                           "torch": torch.__version__, "numpy": np.__version__, "dgbench": dgbench.__version__,
                           "device": str(device), "device_name": "cpu"}
    if device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env


def hardware_class(env: dict[str, Any]) -> str:
    """A coarse label leaderboard rows are grouped by, e.g. 'cpu-2c' or 'NVIDIA H100 80GB HBM3'."""
    return env["device_name"] if env.get("device_name") not in (None, "cpu") else f"cpu-{env.get('cpu_count')}c"


def build_record(*, family: str, task: str, scheme: str, model: str, dataset: dict[str, Any],
                 hyperparameters: dict[str, Any], world_size: int, backend: str, device: torch.device,
                 epochs: list[dict[str, Any]], final_metrics: dict[str, Any], started_at: str,
                 ended_at: str | None = None, command: list[str] | None = None,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Assemble a record; ``dataset`` needs at least name, fingerprint, kind, num_nodes, num_edges."""
    env = environment(device)
    record = {"schema": RECORD_SCHEMA, "schema_version": RECORD_SCHEMA_VERSION,
              "family": family, "task": task, "scheme": scheme, "model": model, "dataset": dataset,
              "hyperparameters": hyperparameters, "world_size": int(world_size), "backend": backend,
              "environment": env, "hardware_class": hardware_class(env), "code": git_state(),
              "command": command if command is not None else sys.argv,
              "started_at": started_at, "ended_at": ended_at or utc_now(),
              "epochs": epochs, "final_metrics": final_metrics}
    if extra:
        record["extra"] = extra
    from dgbench.timing import timing_summary
    record["timing"] = timing_summary(epochs, int(world_size))
    return _plain(record)


def dataset_entry(store) -> dict[str, Any]:
    """The dataset block of a record, from an open store."""
    entry = {"name": store.provenance.get("dataset") or store.provenance.get("generator") or store.path.stem,
             "fingerprint": store.fingerprint, "kind": store.kind, "path": str(store.path),
             "num_nodes": store.num_nodes, "num_edges": store.num_edges,
             "transforms": store.provenance.get("transforms", [])}
    if store.kind == "snapshots":
        entry["num_snapshots"] = store.num_snapshots
    return entry


def _plain(value: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, paths to str, NaN kept as None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if np.isnan(value) else float(value)
    if isinstance(value, Path):
        return str(value)
    return value


def content_hash(record: dict[str, Any]) -> str:
    """sha256 of the record's canonical JSON: the name a leaderboard stores it under."""
    return hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_token(value: Any, limit: int = 64) -> str:
    """``value`` as a safe piece of a file name: letters, digits and ``.+_`` only (others become ``_``),
    no leading dot, at most ``limit`` characters. Store attributes and record fields never reach a path
    any other way, so a name such as ``/../../x`` cannot place a file outside its folder."""
    token = re.sub(r"[^A-Za-z0-9.+_]+", "_", str(value)).lstrip("._")[:limit]
    return token or "_"


def record_filename(record: dict[str, Any]) -> str:
    stamp = record["started_at"].replace(":", "").replace("-", "").split("+")[0]
    parts = [record["scheme"], record["model"], record["dataset"]["name"], f"p{record['world_size']}", stamp]
    return "-".join(file_token(part) for part in parts) + ".json"


def record_seal(record: dict[str, Any]) -> str:
    """The record's seal: a hash over everything but the seal itself. It is no signature (anyone can
    recompute it); it makes a hand edit of a written record detectable, so `dgbench submit` can refuse it."""
    return "sha256:" + content_hash({k: v for k, v in record.items() if k != "seal"})


def seal_record(record: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``record`` with its seal set (write_record does this; call it only to write by other means)."""
    return {**record, "seal": record_seal(record)}


def prepare_output(out: str | Path) -> Path:
    """Check, before a run starts, that its record can be written to ``out`` (a .json path or a folder,
    created here if missing): an existing .json file is refused (a result is never replaced) and so is
    a folder this process cannot create files in. Returns ``out``."""
    out = Path(out)
    folder = out.parent if out.suffix == ".json" else out
    if out.suffix == ".json" and os.path.lexists(out):
        raise DgbenchError(f"{out}: already exists; a result file is never replaced (choose another --out, "
                           f"or a folder to name the record in)")
    if folder.exists() and not folder.is_dir():
        raise DgbenchError(f"{folder}: is a file, not a folder for result records (--out)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".dgbench-write-check-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise DgbenchError(f"{folder}: cannot write the result record there ({exc.strerror or exc}); "
                           f"checked before training (--out)") from exc
    return out


def write_record(record: dict[str, Any], out: str | Path) -> Path:
    """Seal and write atomically to ``out`` (a .json path, or a directory to name the file in).

    An existing file is never replaced: when the name is taken (another run finished first, or two runs
    started in the same second), the record goes to ``NAME-2.json``, ``NAME-3.json``... and a note on
    stderr says which; the returned path is where it is."""
    record = seal_record(record)
    out = Path(out)
    path = out if out.suffix == ".json" else out / record_filename(record)
    if path.parent.resolve() != (out.parent if out.suffix == ".json" else out).resolve():
        raise DgbenchError(f"{path}: a record name may not leave its folder")  # file_token makes this unreachable
    written = create_new(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    if written != path:
        sys.stderr.write(f"note: {path} already exists (a result file is never replaced); wrote {written}\n")
    return written

