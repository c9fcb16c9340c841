"""Result records: the versioned JSON every `dgbench run` writes and `dgbench submit` accepts.

Schema (version RECORD_SCHEMA_VERSION) is documented in docs/result-record.md. A record says
what ran (scheme, model, hyper-parameters, world size, backend), on what (dataset name and store
fingerprint), where (device, host, software versions, the system's nodes, ranks and accelerators per
node, git commit and whether the tree was dirty), and what came out (per-epoch figures, final
metrics), so every number traces back to a command and a store fingerprint.
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

    from dgbench.record_types import Extra

import dgbench
from dgbench.errors import DgbenchError
from dgbench.files import create_new

RECORD_SCHEMA = "dgbench.result"
RECORD_SCHEMA_VERSION = 1
REPO_ROOT = Path(__file__).resolve().parents[1]

def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def dgbench_checkout(folder: Path = REPO_ROOT) -> Path | None:
    """``folder`` or the nearest folder above it that is a git checkout of dgbench itself (its own .git and
    this project's pyproject.toml); None otherwise, e.g. dgbench installed in a venv inside another project."""
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if (candidate / ".git").exists() and pyproject.is_file():
            try:
                named = re.search(r'^name\s*=\s*"dgbench"\s*$', pyproject.read_text(), re.M) is not None
            except OSError:
                named = False
            return candidate if named else None
        if (candidate / ".git").exists():
            return None  # the nearest checkout is another project's
    return None


def code_provenance() -> dict[str, Any]:
    """Which dgbench ran. From a checkout of dgbench: its commit and whether the tree was dirty. Installed:
    the distribution's version and, from its PEP 610 direct_url.json, the VCS commit it was built from (or
    the URL it was installed from); never the commit of a git project dgbench merely runs inside."""
    if dgbench_checkout() == REPO_ROOT:
        return {**git_state(REPO_ROOT), "version": dgbench.__version__, "source": "checkout"}
    return installed_provenance()


def installed_provenance() -> dict[str, Any]:
    import importlib.metadata
    out: dict[str, Any] = {"commit": None, "dirty": None, "version": dgbench.__version__, "source": None}
    try:
        dist = importlib.metadata.distribution("dgbench")
    except importlib.metadata.PackageNotFoundError:
        return out
    if Path(str(dist.locate_file("dgbench"))).resolve() != Path(dgbench.__file__).resolve().parent:
        return out  # the metadata found is another copy's, not the code that runs
    out["version"] = dist.version
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        direct = None
    if not isinstance(direct, dict):
        out["source"] = "index"  # no direct_url.json: installed from a package index
        return out
    out["source"] = direct.get("url")
    commit = (direct.get("vcs_info") or {}).get("commit_id")
    if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit):
        out.update(commit=commit, dirty=False)  # built from that commit as pip checked it out
    return out


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


def hardware_class(env: dict[str, Any], system: dict[str, Any] | None = None) -> str:
    """A coarse label leaderboard rows are grouped by: the hardware of one node, e.g. 'cpu-2c', or for GPU
    runs the device and how many a node has, 'NVIDIA H100 80GB HBM3 x8' (so 1 node x 8 GPUs and 8 nodes x
    1 GPU are different classes, and a scaling series over nodes of one shape stays one class). Records
    without a ``system`` block (written before it existed) are labelled by the device alone, as then."""
    if env.get("device_name") in (None, "cpu"):
        return f"cpu-{env.get('cpu_count')}c"
    per_node = (system or {}).get("accelerators_per_node")
    return env["device_name"] if per_node is None else f"{env['device_name']} x{per_node}"


def system_description(world_size: int, device: torch.device, description: dict[str, Any] | None = None
                       ) -> dict[str, Any]:
    """The MLPerf-style system a run ran on (docs/result-record.md, ``system``): nodes, ranks and
    accelerators per node, CPU model and cores, memory, CUDA / cuDNN / NCCL / driver versions where
    present, and the user's ``--system-desc`` (interconnect, ...) as given."""
    import torch
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))  # torchrun sets it; our launcher: one node
    system: dict[str, Any] = {"nodes": max(1, world_size // max(1, per_node)), "ranks_per_node": per_node,
                              "launcher": "torchrun" if "LOCAL_WORLD_SIZE" in os.environ else "dgbench",
                              "accelerators_per_node": 0, "accelerator": None,
                              "cpu_model": _cpu_model(), "cpu_cores": os.cpu_count(),
                              "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                              "memory_bytes": _memory_bytes()}
    if device.type == "cuda":
        system.update(accelerators_per_node=torch.cuda.device_count(), accelerator=torch.cuda.get_device_name(device),
                      cuda=torch.version.cuda, cudnn=_version_text(torch.backends.cudnn.version()),
                      nccl=_nccl_version(), driver=_nvidia_driver_version())
    if description:
        system["description"] = description
    return system


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _version_text(version: Any) -> str | None:
    if version is None:
        return None
    return ".".join(str(part) for part in version) if isinstance(version, tuple) else str(version)


def _nccl_version() -> str | None:
    import torch
    try:
        return _version_text(torch.cuda.nccl.version())
    except (AttributeError, RuntimeError):
        return None


def _nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver's version: /proc/driver/nvidia/version, else nvidia-smi; None when neither."""
    try:
        found = re.search(r"Kernel Module\s+(\S+)", Path("/proc/driver/nvidia/version").read_text())
        if found:
            return found.group(1)
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.split()
        return out[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def read_system_description(path: str | Path | None) -> dict[str, Any] | None:
    """``--system-desc FILE``: a JSON object describing what dgbench cannot see (interconnect, rack, ...)."""
    if path is None:
        return None
    try:
        description = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise DgbenchError(f"{path}: not a readable JSON system description (--system-desc): {exc}") from exc
    if not isinstance(description, dict):
        raise DgbenchError(f"{path}: a system description is a JSON object, e.g. "
                           f'{{"interconnect": "InfiniBand NDR 400 Gb/s"}} (--system-desc)')
    return description


def build_record(*, family: str, task: str, scheme: str, model: str, dataset: dict[str, Any],
                 hyperparameters: dict[str, Any], world_size: int, backend: str, device: torch.device,
                 epochs: list[dict[str, Any]], final_metrics: dict[str, Any], started_at: str,
                 ended_at: str | None = None, command: list[str] | None = None,
                 extra: Extra | dict[str, Any] | None = None,
                 evaluation: dict[str, Any] | None = None) -> dict[str, Any]:
    """Assemble a record as a typed :class:`~dgbench.record_types.Record` and return its JSON; ``dataset``
    needs at least name, fingerprint, kind, num_nodes, num_edges; ``extra`` is the family's typed extra (a
    plain object is read as the family's type)."""
    from dgbench import record_types as types
    from dgbench.timing import timing_summary
    env = environment(device)
    system = system_description(world_size, device)
    epochs = _plain(epochs)
    extra_json = _plain(extra.to_json() if isinstance(extra, types.Extra) else extra)
    record = types.Record(
        schema=RECORD_SCHEMA, schema_version=RECORD_SCHEMA_VERSION, family=family, task=task, scheme=scheme,
        model=model, backend=backend, hardware_class=hardware_class(env, system), world_size=int(world_size),
        hyperparameters=_plain(hyperparameters),
        extra=types.extra_type(family).from_json(extra_json) if extra_json else types.ABSENT,
        command=_plain(command if command is not None else sys.argv), started_at=started_at,
        ended_at=ended_at or utc_now(), dataset=types.Dataset.from_json(_plain(dataset)),
        environment=types.Environment.from_json(_plain(env)), system=types.System.from_json(_plain(system)),
        code=types.Code.from_json(_plain(code_provenance())),
        epochs=[types.EpochFigures.from_json(epoch) for epoch in epochs], final_metrics=_plain(final_metrics),
        evaluation=types.Evaluation.from_json(_plain(evaluation)) if evaluation is not None else types.ABSENT,
        timing=types.TimingSummary.from_json(_plain(timing_summary(epochs, int(world_size)))))
    return record.to_json()


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
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    try:
        written = create_new(path, text)
    except OSError as exc:
        return _keep_elsewhere(record, text, path, exc)
    if written != path:
        sys.stderr.write(f"note: {path} already exists (a result file is never replaced); wrote {written}\n")
    return written


def fallback_folders() -> list[Path]:
    """Where a record goes when its --out cannot take it: the user's cache, then the temporary folder."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    temporary = Path(tempfile.gettempdir()) / f"dgbench-unsaved-records-{os.getuid()}"
    return [cache / "dgbench" / "unsaved-records", temporary]


def _keep_elsewhere(record: dict[str, Any], text: str, path: Path, failure: OSError) -> Path:
    """A finished run's record that ``path`` could not take (disk full, quota, read-only): written to the
    first fallback folder that takes it, else printed on stderr as one line, so its figures are never
    lost; one line says where it is."""
    reason = failure.strerror or str(failure)
    for folder in fallback_folders():
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            if folder.is_symlink() or folder.stat().st_uid != os.getuid():
                continue  # a folder another user made first (the temporary one is shared): never write there
            kept = create_new(folder / path.name, text)
        except OSError:
            continue
        sys.stderr.write(f"warning: cannot write the record to {path} ({reason}); kept it at {kept} "
                         f"(move it there once space is free)\n")
        return kept
    sys.stderr.write("record: " + json.dumps(record, sort_keys=True) + "\n")
    raise DgbenchError(f"{path}: cannot write the record ({reason}), nor in "
                       f"{', '.join(map(str, fallback_folders()))}; it is on stderr above, on the line "
                       f"starting 'record: '")

