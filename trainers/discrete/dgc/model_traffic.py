"""What crosses a cut of the instance super-graph for one model: its :class:`TrafficProfile`.

DGC §4.1 weighs an edge by the traffic it would cause if cut, "obtained through profiling". Here the
model is run once through a recording view (one vertex, one step): every aggregation of computed
features (``view.aggregate(x)`` with x given; the precomputed Ã X⁰ moves nothing) is one spatial
exchange of x's width; a graph attention (``view.attend``) moves each neighbour's source score and
values (heads + heads·width); a time encoder (``view.sequence``) moves its carry per recurrent
module (GRU: h; LSTM: h and c of every layer) or, for causal attention, each earlier instance's input.
A window module (TM-GCN's M-transform) reads the last w-1 inputs; for the label-propagation weights
that is (w-1)·width on the edge to the previous instance (the exact rows are the placement's).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dgbench.errors import DgbenchError
from dgbench.models.contract import Dependency, LayoutSequence, SequenceModule, State
from dgbench.trainers.discrete.dgc.chunks import REACH_ALL, REACH_PREVIOUS, TrafficProfile


@dataclass
class _RecordingView(LayoutSequence):
    in_features: int
    spatial: list[int] = field(default_factory=list)
    temporal: list[tuple[Dependency, int]] = field(default_factory=list)
    structure_ops: list[str] = field(default_factory=list)  # "gcn" per aggregation, "gat" per attention
    time_modules: list[SequenceModule] = field(default_factory=list)
    last_op: str = ""

    num_steps = 1
    local_steps = slice(0, 1)
    vertex_rows = 1

    def aggregate(self, x: torch.Tensor | None) -> torch.Tensor:
        self.last_op = "aggregate"
        self.structure_ops.append("gcn")
        if x is None:
            return torch.zeros(1, 1, self.in_features)
        self.spatial.append(x.shape[-1])
        return x

    def input_features(self) -> torch.Tensor:
        return torch.zeros(1, 1, self.in_features)

    def attend(self, dst_score: torch.Tensor, src_score: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        self.last_op = "attend"
        self.structure_ops.append("gat")
        self.spatial.append(src_score.shape[-1] + values.shape[-2] * values.shape[-1])
        return values

    def to_vertex(self, y: torch.Tensor) -> torch.Tensor:
        return y

    def to_time(self, z: torch.Tensor) -> torch.Tensor:
        return z

    def sequence(self, module: SequenceModule, y: torch.Tensor, carry: State) -> tuple[torch.Tensor, State]:
        self.last_op = "sequence"
        self.time_modules.append(module)
        if module.dependency == Dependency.RECURRENT:
            width = sum(c.shape[0] * c.shape[2] for c in module.initial_carry(1))
        elif module.dependency == Dependency.CAUSAL:
            width = y.shape[-1]
        elif module.dependency == Dependency.WINDOW:  # the last w-1 inputs; weighed as one edge back (LPA only)
            width = (getattr(module, "window", 1) - 1) * y.shape[-1]
        else:
            width = 0  # step-wise: nothing crosses time
        self.temporal.append((module.dependency, width))
        return module(y, carry)


@dataclass(frozen=True)
class ModelTraffic:
    profile: TrafficProfile
    ends_with_time_encoder: bool  # the embedding scored is a time encoder's (absent steps repeat the latest)
    structure: str  # "gcn" or "gat": what the structure encoder runs
    structure_layers: int  # graph operations per block (the precomputed Ã X⁰ included)
    time: str  # "gru", "lstm", "attention" or "none"
    time_layers: int  # recurrent layers (LSTM layers; 1 otherwise)


@torch.no_grad()
def model_traffic(model: torch.nn.Module, in_features: int) -> ModelTraffic:
    """The model's :class:`TrafficProfile` (bytes per cut edge) by running it once on a recording view."""
    view = _RecordingView(in_features)
    model.forward_block(view, model.initial_state(1))
    kinds = {dependency for dependency, _ in view.temporal}
    if len(kinds) > 1:
        raise DgbenchError("a model mixing recurrent and causal-attention time encoders is not supported here")
    reach = REACH_ALL if Dependency.CAUSAL in kinds else REACH_PREVIOUS
    profile = TrafficProfile(tuple(view.spatial), tuple(w for _, w in view.temporal), reach)
    names = [type(m).__name__ for m in view.time_modules]
    time = "attention" if Dependency.CAUSAL in kinds else "lstm" if any("LSTM" in n for n in names) \
        else "gru" if view.time_modules else "none"
    layers = max([int(getattr(m, "layers", 1)) for m in view.time_modules], default=1)
    return ModelTraffic(profile, view.last_op == "sequence", "gat" if "gat" in view.structure_ops else "gcn",
                        len(view.structure_ops), time, layers)
