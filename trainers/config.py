"""RunConfig: one `dgbench run` as given — what to train, the run-level knobs, and every other option
by name (``options``), which the run's family, scheme and model take (see :mod:`dgbench.options`).

The run-level knobs are declared once here (their defaults are the CLI's); the others are declared
by their owners. ``RunConfig("snapshot", "tmgcn", store, nproc=2, blocks=4)`` puts ``blocks`` in
``options``; :func:`dgbench.trainers.experiment.resolve` checks that the run's owners take every given option.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dgbench.errors import DgbenchError
from dgbench.leaderboard.fit import DEFAULT_EPOCHS, epochs_help
from dgbench.options import Options, option


MAX_SEED = 2**32 - 1  # every generator a run seeds takes it
MAX_HIDDEN = 4096  # widths beyond this do not fit in memory for any store a run can train on here


@dataclass(init=False)
class RunConfig(Options):
    """What to train and how; ``options`` holds the family/scheme/model options given (by name)."""

    scheme: str
    model: str
    dataset: Path
    nproc: int = option(1, "Ranks to start (ignored under torchrun).", positive=True, record=False)
    epochs: int = option(DEFAULT_EPOCHS, epochs_help(), positive=True)
    eval_every: int = option(1, "Validate every N epochs and after the last; N > 1 scores test once, on the "
                                "best-validation state (docs/tasks.md).", positive=True)
    seed: int = option(0, "Seed of parameters, pairs and negatives (a 32-bit unsigned integer).", minimum=0,
                       upper=MAX_SEED)
    lr: float = option(0.01, "Adam learning rate.", positive=True)
    backend: str | None = option(None, "Default: nccl with CUDA, else gloo.", choices=("gloo", "nccl"), record=False)
    device: str | None = option(None, "Where to compute; default follows the backend.", choices=("cpu", "cuda"),
                                record=False)
    out: Path = option(Path("runs"), "Directory (or .json path) for the result record.", record=False)
    threads: int = option(0, "Intra-op threads per rank (recorded); 0 = the host's cores / ranks, at least 1.",
                          minimum=0)
    timeout_s: float = option(300.0, "Collective timeout in seconds: a dead rank fails the job instead of "
                                     "hanging it.", flag="--timeout", positive=True, record=False)
    system_desc: Path | None = option(None, "JSON file describing the system beyond what dgbench detects "
                                            "(interconnect, ...), recorded as the record's system.description.",
                                      record=False)
    options: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # test and benchmark plumbing (dtype, prefetch)

    def __init__(self, scheme: str, model: str, dataset: str | Path, *, options: dict[str, Any] | None = None,
                 extra: dict[str, Any] | None = None, **given: Any):
        self.scheme, self.model, self.dataset = scheme, model, Path(dataset)
        run_fields = {f.name for f in dataclasses.fields(self)} - {"scheme", "model", "dataset", "options", "extra"}
        for f in dataclasses.fields(self):
            if f.name in run_fields:
                value = given.pop(f.name, None)  # None: not given (the CLI passes every option)
                setattr(self, f.name, f.default if value is None else value)
        self.options = {**(options or {}), **{k: v for k, v in given.items() if v is not None}}
        self.extra = dict(extra or {})
        self.out = Path(self.out)
        hidden = self.options.get("hidden")
        if isinstance(hidden, int) and hidden > MAX_HIDDEN:  # the width is the family's option; its bound is here
            raise DgbenchError(f"--hidden {hidden}: must be <= {MAX_HIDDEN} (wider models do not fit in memory)")

    def resolved_backend(self) -> str | None:
        """``--device cpu`` means gloo even where CUDA is present; ``--device cuda`` needs CUDA.
        None leaves the choice to dgbench.dist (NCCL with CUDA, else gloo)."""
        if self.device == "cuda" and not torch.cuda.is_available():
            raise DgbenchError("--device cuda: no CUDA device is available here")
        if self.backend is None and self.device == "cpu":
            return "gloo"
        return self.backend

    def with_options(self, **changes: Any) -> "RunConfig":
        """A copy with some options replaced (None removes one)."""
        options = {k: v for k, v in {**self.options, **changes}.items() if v is not None}
        run = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("scheme", "model", "dataset", "options", "extra")}
        return RunConfig(self.scheme, self.model, self.dataset, options=options, extra=self.extra, **run)

    def as_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in values.items()}


# --------------------------------------------------------------------------- config files (--config, --print-config)

RUN_TARGETS = ("scheme", "model", "dataset")


def read_config_file(path: str | Path) -> dict[str, Any]:
    """`dgbench run --config FILE`: one mapping of option names (Python spelling, ``edge_factor``) to values,
    with ``scheme``, ``model`` and ``dataset``; JSON, or YAML (``.yaml``/``.yml``) where PyYAML is installed."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise DgbenchError(f"{path}: cannot read the run config ({exc.strerror or exc})") from exc
    try:
        if path.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError as exc:
                raise DgbenchError(f"{path}: a YAML config needs PyYAML (pip install pyyaml); "
                                   f"or write it as JSON") from exc
            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's parse errors
        raise DgbenchError(f"{path}: not a readable run config ({exc})") from exc
    if not isinstance(values, dict) or not all(isinstance(key, str) for key in values):
        raise DgbenchError(f"{path}: a run config is one mapping of option names to values")
    return {key.replace("-", "_"): value for key, value in values.items()}


def config_of(config: RunConfig, hyperparameters: dict[str, Any]) -> dict[str, Any]:
    """What --print-config prints: a config that re-runs ``config`` exactly, every option that applies
    spelled out (``hyperparameters``: the resolved ones, defaults included) and the run-level settings given."""
    settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                if f.name not in (*RUN_TARGETS, "options", "extra") and f.name not in hyperparameters}
    out = {"scheme": config.scheme, "model": config.model, "dataset": str(config.dataset), **hyperparameters}
    out.update({k: (str(v) if isinstance(v, Path) else v) for k, v in settings.items() if v is not None})
    return out


def config_of_record(record: dict[str, Any]) -> dict[str, Any]:
    """A config that re-runs what ``record`` ran: its scheme, model, store path, ranks, backend and every
    hyper-parameter that applied (its options)."""
    return {"scheme": record["scheme"], "model": record["model"], "dataset": record["dataset"]["path"],
            "nproc": record["world_size"], "backend": record["backend"], **record["hyperparameters"]}


def run_config_from(values: dict[str, Any]) -> RunConfig:
    """A RunConfig of a config mapping (a file's, or :func:`config_of_record`'s)."""
    missing = [key for key in RUN_TARGETS if values.get(key) is None]
    if missing:
        flags = ", ".join(f"--{key}" for key in missing)
        raise DgbenchError(f"the run names no {', '.join(missing)}: give {flags} (or {', '.join(missing)} "
                           f"in --config)")
    rest = {key: value for key, value in values.items() if key not in RUN_TARGETS}
    return RunConfig(values["scheme"], values["model"], values["dataset"], **rest)
