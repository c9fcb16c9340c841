"""RunConfig: one `dgbench run` as given — what to train, the run-level knobs, and every other option
by name (``options``), which the run's family, scheme and model take (see :mod:`dgbench.options`).

The run-level knobs are declared once here (their defaults are the CLI's); the others are declared
by their owners. ``RunConfig("snapshot", "tmgcn", store, nproc=2, blocks=4)`` puts ``blocks`` in
``options``; :func:`trainers.experiment.resolve` checks that the run's owners take every given option.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dgbench.errors import DgbenchError
from dgbench.options import Options, option


@dataclass(init=False)
class RunConfig(Options):
    """What to train and how; ``options`` holds the family/scheme/model options given (by name)."""

    scheme: str
    model: str
    dataset: Path
    nproc: int = option(1, "Ranks to start (ignored under torchrun).", positive=True, record=False)
    epochs: int = option(4, "Training epochs (the throughput and scaling tracks accept 4 and rank runs of 6: "
                            "1 warm-up + 5 timed).", positive=True)
    seed: int = option(0, "Seed of parameters, pairs and negatives.")
    lr: float = option(0.01, "Adam learning rate.", positive=True)
    backend: str | None = option(None, "Default: nccl with CUDA, else gloo.", choices=("gloo", "nccl"), record=False)
    device: str | None = option(None, "Where to compute; default follows the backend.", choices=("cpu", "cuda"),
                                record=False)
    out: Path = option(Path("runs"), "Directory (or .json path) for the result record.", record=False)
    threads: int = option(0, "Intra-op threads per rank; 0 = the host's cores / ranks, at least 1 (the launcher's "
                             "default; recorded in the record's timing block).", minimum=0)
    timeout_s: float = option(300.0, "Collective timeout in seconds: a dead rank fails the job instead of "
                                     "hanging it.", flag="--timeout", positive=True, record=False)
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
