"""RunConfig: every knob `dgbench run` takes, shared by the discrete- and continuous-time families.

A family reads the fields that apply to it; the record keeps the relevant ones as hyper-parameters.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from dgbench.errors import DgbenchError


@dataclass
class RunConfig:
    scheme: str
    model: str
    dataset: Path
    nproc: int = 1
    epochs: int = 3
    seed: int = 0
    lr: float = 0.01
    hidden: int = 6  # ESDG §6.4 default hidden size
    backend: str | None = None  # gloo on CPU, nccl when CUDA is present
    device: str | None = None  # "cpu" or "cuda"; default follows the backend
    out: Path = Path("runs")
    timeout_s: float = 300.0
    # discrete time (ESDG)
    blocks: int = 1  # nb: gradient-checkpoint blocks of timesteps (§3.1)
    transfer: str = "base"  # "base" or "gd" (graph differences, §3.2)
    window: int = 3  # TM-GCN M-transform window w
    theta: float = 0.1  # fraction of edges used as positives per timestep (§6.4)
    partitioner: str = "auto"  # vertex scheme: hypergraph partitioner or fallback
    # continuous time (TGL / Sven)
    batch_size: int = 600
    neighbors: int = 10
    sampler: str = "recent"  # "recent" or "uniform"
    memory_dim: int = 100
    partition: str = "reflexbicut"  # sven: "range", "interval" or "reflexbicut"
    microbatches: int = 0  # sven pipelining granularity n; 0 = chosen by Eq. 12
    async_allreduce: bool = False  # sven Eq. 13 (staleness one step)
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved_backend(self) -> str | None:
        """``--device cpu`` means gloo even where CUDA is present; ``--device cuda`` needs CUDA.
        None leaves the choice to dgbench.dist (NCCL with CUDA, else gloo)."""
        if self.device == "cuda" and not torch.cuda.is_available():
            raise DgbenchError("--device cuda: no CUDA device is available here")
        if self.backend is None and self.device == "cpu":
            return "gloo"
        return self.backend

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in values.items()}
