"""Per-vertex temporal modules (:class:`~dgbench.models.contract.SequenceModule`) shared by the zoo.

Each runs a block of every vertex's sequence and returns the carry the next block needs, so a scheme
may cut sequences anywhere (checkpoint blocks, ranks) and get the same outputs.
"""
from __future__ import annotations

import torch
from torch import nn

from dgbench.models.contract import Dependency, SequenceMask, State


def m_transform(y: torch.Tensor, history: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """TM-GCN's M-product along time: each step becomes the mean of the last ``window`` steps
    (fewer at the start), M_tk = 1/min(w, t+1) (Malik et al., TM-GCN; ESDG §5.1).

    ``history`` holds the up to w-1 steps before the block; the sum runs over the same elements in
    the same order however the timesteps are blocked, so results are bit-identical across blocks.
    """
    sequence = torch.cat([history, y], dim=0)
    known, steps = history.shape[0], y.shape[0]
    total = torch.zeros_like(y)
    for shift in range(window):
        first = known - shift
        if first + steps <= 0:
            break
        lo = max(0, first)
        total[lo - first:] = total[lo - first:] + sequence[lo:first + steps]
    available = torch.arange(known, known + steps, device=y.device) + 1  # positions 1.. in the sequence
    counts = torch.clamp(available, max=window).to(y.dtype)
    return total / counts.view(-1, *([1] * (y.dim() - 1))), sequence[-(window - 1):] if window > 1 \
        else sequence[:0]


def _unmasked(module: object, mask: SequenceMask | None) -> None:
    if mask is not None and (mask.present is not None or mask.reset is not None):
        raise NotImplementedError(f"{type(module).__name__} does not take presence or reset masks")


class MTransform(nn.Module):
    """The parameter-less M-transform as a sequence module; the carry is the last w-1 inputs."""

    dependency = Dependency.WINDOW

    def __init__(self, width: int, window: int):
        super().__init__()
        self.in_width = self.out_width = width
        self.window = window

    def initial_carry(self, rows: int) -> State:
        return (torch.zeros(0, rows, self.in_width),)

    def forward(self, y: torch.Tensor, carry: State, mask: SequenceMask | None = None) -> tuple[torch.Tensor, State]:
        _unmasked(self, mask)
        z, history = m_transform(y, carry[0], self.window)
        return z, (history,)


class LSTMSequence(nn.Module):
    """A one-layer LSTM over each vertex's sequence; the carry is (h, c), [1, rows, width] each."""

    dependency = Dependency.RECURRENT

    def __init__(self, in_width: int, out_width: int):
        super().__init__()
        self.in_width, self.out_width = in_width, out_width
        self.lstm = nn.LSTM(in_width, out_width)

    def initial_carry(self, rows: int) -> State:
        zeros = self.lstm.weight_hh_l0.new_zeros((1, rows, self.out_width))
        return (zeros, zeros.clone())

    def forward(self, y: torch.Tensor, carry: State, mask: SequenceMask | None = None) -> tuple[torch.Tensor, State]:
        _unmasked(self, mask)
        if y.shape[0] == 0 or y.shape[1] == 0:  # nothing to run here; keep the graph connected for collectives
            return y.new_zeros((*y.shape[:2], self.out_width)) + 0 * y.sum(), carry
        z, (h, c) = self.lstm(y, carry)
        return z, (h, c)
