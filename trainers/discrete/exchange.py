"""Row exchanges between the discrete schemes' layouts (ESDG §4.2's redistribution), run in rounds.

One all-to-all of a whole frame holds the send buffer, the receive buffer and the re-laid result at once. Here
every round gathers a slice of each peer's rows, exchanges it and writes what arrived straight into its place in
the result, so only one round's buffers live beside the source and the result, in the forward pass and in the
backward's reverse exchange alike. Only copies: the numbers are the same bit for bit (docs/discrete-schemes.md,
"Per-rank data").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from dgbench.dist import Comm

ROUND_BYTES = 4 * 2**20  # the largest rank's send or receive buffer per round ...
MAX_ROUNDS = 16  # ... unless that takes more rounds: then a sixteenth of its frame (one collective per round)


def rounds_for(largest_rows: int, width: int, element_size: int = 4) -> int:
    """Rounds so that no rank sends or receives more than ``ROUND_BYTES`` (or a ``MAX_ROUNDS``-th of its rows) per
    round; ``largest_rows``: the largest send or receive count of any rank (every rank passes the same, so all
    run the same rounds)."""
    return max(1, min(MAX_ROUNDS, -(-largest_rows * width * element_size // ROUND_BYTES)))


def _piece(count: int, rounds: int, round_: int) -> tuple[int, int]:
    """Round ``round_``'s [start, stop) of a peer's ``count`` rows (sender and receiver cut alike)."""
    size, longer = divmod(count, rounds)
    start = round_ * size + min(round_, longer)
    return start, start + size + (round_ < longer)


RowMap = Callable[[int, int, int], torch.Tensor]
"""(peer, start, stop) -> the rows of a layout that rows [start, stop) of that peer's segment are."""


def _round_rows(splits: list[int], rounds: int, round_: int, rows: RowMap | None,
                device: torch.device) -> tuple[torch.Tensor, list[int]]:
    """Rows of round ``round_`` of a buffer laid out peer after peer by ``splits`` (mapped by ``rows`` into the
    layout they come from or go to), and the per-peer counts."""
    parts, counts, offset = [], [], 0
    for peer, count in enumerate(splits):
        a, b = _piece(count, rounds, round_)
        parts.append(rows(peer, a, b) if rows is not None else
                     torch.arange(offset + a, offset + b, dtype=torch.int64, device=device))
        counts.append(b - a)
        offset += count
    return torch.cat(parts), counts


@dataclass(frozen=True)
class RowMove:
    """An all-to-all of rows: the rows sent to each peer (``send_splits``) are ``send_rows(peer, ...)`` of the
    source (consecutive rows when None); the rows arriving from each peer (``recv_splits``, source rank order)
    land at ``recv_rows(peer, ...)`` of the result (consecutive rows when None). The maps are computed per round,
    so no whole-frame index is held."""

    comm: Comm
    send_splits: list[int]
    recv_splits: list[int]
    send_rows: RowMap | None
    recv_rows: RowMap | None
    rounds: int
    tag: str

    def reverse(self) -> "RowMove":
        """The exchange that returns every row to where it came from (the backward pass's)."""
        return RowMove(self.comm, self.recv_splits, self.send_splits, self.recv_rows, self.send_rows, self.rounds,
                       self.tag)

    def run(self, source: torch.Tensor, tag: str) -> torch.Tensor:
        """The result [sum(recv_splits), width]; one round's buffers alive at a time."""
        if self.rounds == 1 and self.send_rows is None and self.recv_rows is None:
            return self.comm.all_to_all_single(source, self.send_splits, self.recv_splits, tag=tag)
        out = source.new_empty((sum(self.recv_splits), source.shape[1]))
        for round_ in range(self.rounds):
            sent, send_counts = _round_rows(self.send_splits, self.rounds, round_, self.send_rows, source.device)
            rows = source.index_select(0, sent)
            del sent
            recv_counts = [b - a for a, b in (_piece(count, self.rounds, round_) for count in self.recv_splits)]
            if round_ == 0:  # its arrival probe takes the ranks' skew; the later rounds start together
                received = self.comm.all_to_all_single(rows, send_counts, recv_counts, tag=tag)
            else:
                with self.comm.without_probes():
                    received = self.comm.all_to_all_single(rows, send_counts, recv_counts, tag=tag)
            del rows  # the send buffer goes before the round's place in the result is computed
            arriving, _ = _round_rows(self.recv_splits, self.rounds, round_, self.recv_rows, source.device)
            out.index_copy_(0, arriving, received)
        return out


class _Redistribute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, move: RowMove) -> torch.Tensor:  # type: ignore[override]
        ctx.move = move
        return move.run(x, f"{move.tag}:forward")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        back = ctx.move.reverse()
        return back.run(grad.contiguous(), f"{back.tag}:backward"), None


def redistribute(x: torch.Tensor, move: RowMove) -> torch.Tensor:
    """``move`` on the rows of ``x`` [rows, width]; the backward pass runs the reverse exchange on the gradient,
    also in rounds, writing each arriving slice straight into the gradient of ``x``."""
    return _Redistribute.apply(x, move)
