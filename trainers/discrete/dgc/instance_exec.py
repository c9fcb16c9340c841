"""Running one rank's share of an instance placement (:mod:`dgbench.trainers.discrete.dgc.instances`) in torch.

The collectives are the caller's (a scheme passes counted all-to-alls; tests simulate every rank in
one process), so these functions only compute:

* :func:`run_round`: one round of a recurrent time encoder over this rank's runs, temporally fused
  (§5.1.2: runs that start and end here are packed first-fit decreasing behind a reset mask; a run
  that starts from a received carry or hands its carry on has a row of its own) or padded (every
  run in its own row, Fig. 9(b)). Same outputs either way (bit for bit for GRU/LSTM).
* :func:`run_attention`: causal temporal attention over the rank's grid, its own instances' inputs
  plus the earlier instances received into their cells; outputs are valid on own cells.
* :func:`aggregate_groups`: Ã x over own cells, one sparse product per group of chunks (spatial
  fusion, §5.1.1: a fused group loads a row its chunks share once; unfused, once per chunk).
* :func:`flatten_carry` / :func:`unflatten_carry`: a module's carry [layers, rows, width] per tensor
  as one [rows, Σ layers·width] block to send.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dgbench.models.contract import SequenceMask, SequenceModule, State
from dgbench.models.sparse import CsrArrays, SparseOperator, spmm
from dgbench.trainers.discrete.dgc.fusion import pack_sequences
from dgbench.trainers.discrete.dgc.instances import InstancePlan, Round


def flatten_carry(carry: State, rows: torch.Tensor | None = None) -> torch.Tensor:
    """[rows, Σ layers·width] of the carry tensors (optionally only ``rows``)."""
    parts = [(c if rows is None else c.index_select(1, rows)).permute(1, 0, 2) for c in carry]
    return torch.cat([p.reshape(p.shape[0], p.shape[1] * p.shape[2]) for p in parts], dim=1)


def unflatten_carry(flat: torch.Tensor, like: State) -> State:
    """The inverse of :func:`flatten_carry` for carries shaped like ``like`` (any row count)."""
    out, start = [], 0
    for c in like:
        layers, _, width = c.shape
        block = flat[:, start:start + layers * width].reshape(flat.shape[0], layers, width).permute(1, 0, 2)
        out.append(block.contiguous())
        start += layers * width
    return tuple(out)


def run_round(module: SequenceModule, inputs: torch.Tensor, round_: Round, received: torch.Tensor | None,
              fuse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs of this round's runs ([Σ lengths, out], runs after each other) and the flattened final
    carries of the runs that continue elsewhere, in ``round_.send_order``. ``inputs`` is the rank's
    flat grid [T·R, in]; ``received`` the flattened carries arriving (``round_.recv_order``)."""
    lengths = round_.lengths
    like = module.initial_carry(0)
    if not len(lengths):
        width = sum(c.shape[0] * c.shape[2] for c in like)
        return inputs.new_zeros((0, module.out_width)), inputs.new_zeros((0, width))
    exclusive = round_.received | round_.continues if fuse else np.ones(len(lengths), bool)
    packing = pack_sequences(lengths, exclusive)
    index = torch.from_numpy(round_.cells).to(inputs.device)
    packed = packing.pack(inputs.index_select(0, index))
    carry = module.initial_carry(packing.rows)
    reset = packing.reset()
    if received is not None and received.shape[0]:
        rows = torch.from_numpy(packing.row[round_.recv_order]).to(inputs.device)
        arriving = unflatten_carry(received, like)
        carry = tuple(c.index_copy(1, rows, a.to(c.dtype)) for c, a in zip(carry, arriving))
        reset[0, packing.row[round_.recv_order]] = False  # these rows start from the received carry
    device = inputs.device
    mask = SequenceMask(present=torch.from_numpy(packing.present()).to(device),
                        reset=torch.from_numpy(reset).to(device))
    out, final = module(packed, carry, mask)
    sending = torch.from_numpy(packing.row[round_.send_order]).to(device)
    return packing.unpack(out), flatten_carry(final, sending)


def run_attention(module: SequenceModule, grid: torch.Tensor, plan: InstancePlan, history: torch.Tensor,
                  present: np.ndarray | None = None) -> torch.Tensor:
    """Causal attention on the rank's grid [T, R, F]: own cells from ``grid``, the earlier instances
    received (``history``, arrival order) in their cells; the output is valid on own cells.
    ``present`` [T, R]: instances that exist (default: own and received cells)."""
    steps, rows, width = grid.shape
    flat = grid.reshape(steps * rows, width)
    cells = torch.from_numpy(plan.history_cells).to(grid.device)
    full = torch.index_put(flat, (cells,), history.to(flat.dtype)) if len(plan.history_cells) else flat
    visible = plan.own.copy()
    visible.reshape(-1)[plan.history_cells] = True
    if present is not None:
        visible &= present
    mask = SequenceMask(present=torch.from_numpy(visible).to(grid.device))
    out, _ = module(full.view(steps, rows, width), module.initial_carry(rows), mask)
    return out


@dataclass(frozen=True)
class GroupOperator:
    """Ã over one group's own cells: ``cells`` (rows of the result), ``columns`` it loads from the
    rank's [own cells | halo rows] table, and the product over them."""

    cells: torch.Tensor
    columns: torch.Tensor
    operator: SparseOperator

    @property
    def loaded_rows(self) -> int:
        return int(self.columns.numel())


def group_operators(operator: CsrArrays, groups: list[np.ndarray], device: torch.device) -> list[GroupOperator]:
    """Split the rank's operator into one per group of own cells (each group: ascending cells)."""
    rowptr, col, val = (np.asarray(a) for a in (operator.rowptr, operator.col, operator.val))
    out = []
    for cells in groups:
        cells = np.asarray(cells, np.int64)
        lengths = rowptr[cells + 1] - rowptr[cells]
        picks = np.repeat(rowptr[cells] - np.r_[0, np.cumsum(lengths)[:-1]], lengths) + np.arange(lengths.sum())
        columns, local = np.unique(col[picks], return_inverse=True)
        csr = CsrArrays(np.r_[0, np.cumsum(lengths)].astype(np.int64), local.astype(np.int64),
                        val[picks].astype(np.float32), (len(cells), len(columns)))
        out.append(GroupOperator(torch.from_numpy(cells).to(device), torch.from_numpy(columns).to(device),
                                 SparseOperator(csr.to_torch(device))))
    return out


def aggregate_groups(groups: list[GroupOperator], table: torch.Tensor, num_cells: int) -> torch.Tensor:
    """[num_cells, F]: Ã x on every group's cells (zeros elsewhere); ``table`` = [own cells | halo rows]."""
    out = table.new_zeros((num_cells, table.shape[1]))
    if not groups:
        return out + 0 * table.sum()
    results = [spmm(group.operator, table.index_select(0, group.columns)) for group in groups]
    return out.index_copy(0, torch.cat([group.cells for group in groups]), torch.cat(results))
