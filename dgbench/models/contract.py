"""The layer contract of the discrete-time model zoo: what a layer may ask of a scheme, and what it owes.

A discrete-time model is a stack of *dynamic layers* (a graph operator on every snapshot followed by
a temporal module over each vertex's sequence) and an edge scorer. A layer never knows how the work
is distributed: for one block of timesteps the scheme lends it a :class:`BlockView` that

* aggregates ``Ã_t x_t`` over the block's local steps (locally, or with a halo exchange),
* runs a per-vertex temporal module over whole sequences (:meth:`BlockView.sequence`), moving the
  features between the time layout of the graph operator and whatever layout the scheme's temporal
  part needs (identity on one rank; ESDG §4.2's all-to-all under snapshot partitioning; a carry
  handed rank to rank under DGC's PSS; per-chunk temporal halos under DGC's PGC),
* or, for a layer that wants the layouts itself, :meth:`BlockView.to_vertex` / :meth:`BlockView.to_time`.

The hand-over *state* between blocks (π_b of ESDG §3.1) is what :meth:`DynamicLayer.run_block` takes
and returns; for a per-vertex temporal module its per-vertex part is the module's *carry*: whatever
the next steps of the same vertices need (the RNN state; the last w-1 inputs of a window; every
earlier step for causal attention). Schemes that cut a sequence between ranks move exactly the carry.

PyG's ``MessagePassing`` is the model: one small contract that many layers are written against.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

import torch

from dgbench.models.sparse import narrow_product

State = tuple[torch.Tensor, ...]


class Dependency(Enum):
    """How far back a temporal module reads along a vertex's sequence (what its carry must hold)."""

    NONE = "none"  # step-wise: no carry (e.g. a per-step MLP)
    RECURRENT = "recurrent"  # the previous step's state (GRU, LSTM, RNN)
    WINDOW = "window"  # the last w-1 inputs (TM-GCN's M-transform)
    CAUSAL = "causal"  # every earlier step (DySAT's temporal self-attention)


@dataclass
class SequenceMask:
    """Optional per-position masks over a [steps, rows] layout, for schemes that do not run every
    (step, vertex) instance (DGC §5.1.2's temporal fusion, and stores with vertex presence).

    ``present[t, r]`` False: the instance does not exist; the carry passes unchanged and the output
    repeats row r's latest present output (zeros before the first).
    ``reset[t, r]`` True: a new sequence starts at (t, r); the carry is replaced by the initial carry
    before the step (DGC Eq. 4-5: M = 0 where two concatenated sequences meet).
    """

    present: torch.Tensor | None = None
    reset: torch.Tensor | None = None


@runtime_checkable
class SequenceModule(Protocol):
    """A temporal module over each vertex's sequence, run block by block.

    ``forward(y, carry)`` maps inputs [steps, rows, in_width] and the carry of the same rows to
    outputs [steps, rows, out_width] and the carry after the last step. Running a sequence in one
    call or cut into consecutive pieces (carry handed over) gives the same outputs.
    """

    dependency: Dependency
    in_width: int
    out_width: int

    def initial_carry(self, rows: int) -> State:
        """The carry of ``rows`` vertices before their first step."""
        ...

    def __call__(self, y: torch.Tensor, carry: State, mask: SequenceMask | None = None
                 ) -> tuple[torch.Tensor, State]:
        ...


class BlockView(Protocol):
    """What a scheme lends a layer for one block of timesteps."""

    @property
    def num_steps(self) -> int:
        """Timesteps in the block."""
        ...

    @property
    def local_steps(self) -> slice:
        """The block's timesteps whose snapshot (graph operator) part runs on this rank."""
        ...

    @property
    def vertex_rows(self) -> int:
        """Vertices this rank holds in the vertex-partitioned layout (rows of the carry)."""
        ...

    def aggregate(self, x: torch.Tensor | None) -> torch.Tensor:
        """Ã_t x_t for the local steps, [local steps, rows, F]; ``None`` = the precomputed Ã X⁰."""
        ...

    def input_features(self) -> torch.Tensor:
        """The raw input features X⁰ of the local steps, [local steps, rows, in] (for layers, such as
        graph attention, that cannot start from the precomputed Ã X⁰)."""
        ...

    def attend(self, dst_score: torch.Tensor, src_score: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Graph attention over each local snapshot's in-neighbours and self (GAT): per row i,
        ``Σ_j softmax_j LeakyReLU(dst_score_i + src_score_j) · values_j``. Shapes [local steps, rows, H]
        for the scores and [local steps, rows, H, F] for the values; the view brings the neighbours'
        ``src_score`` and ``values`` (a halo exchange where they live elsewhere)."""
        ...

    def convolve(self, x: torch.Tensor | None, weight: torch.Tensor, bias: torch.Tensor | None = None
                 ) -> torch.Tensor:
        """A GCN layer's pair, Ã x W (+ b), [local steps, rows, out]; ``weight`` [in, out] or per local
        step [local steps, in, out]. The default aggregates first; a scheme may run Ã (x W) instead
        (BLAD §6, Eq. 4: equal up to rounding), so a layer whose aggregation and update commute calls
        this rather than :meth:`aggregate` and a product."""
        ...

    def to_vertex(self, y: torch.Tensor) -> torch.Tensor:
        """[local steps, rows, F] -> [num_steps, vertex_rows, F]."""
        ...

    def to_time(self, z: torch.Tensor) -> torch.Tensor:
        """[num_steps, vertex_rows, F] -> [local steps, rows, F]."""
        ...

    def sequence(self, module: SequenceModule, y: torch.Tensor, carry: State) -> tuple[torch.Tensor, State]:
        """Run ``module`` over every vertex's steps of the block: ``y`` and the result in the time
        layout [local steps, rows, F], ``carry`` in the vertex layout (``vertex_rows`` rows)."""
        ...


class LayoutSequence:
    """The default :meth:`BlockView.sequence`: to the vertex layout, the module, back to time.

    Views inherit it; a scheme whose temporal part is not a layout change overrides ``sequence``.
    """

    def to_vertex(self, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def to_time(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def convolve(self, x: torch.Tensor | None, weight: torch.Tensor, bias: torch.Tensor | None = None
                 ) -> torch.Tensor:
        """The default :meth:`BlockView.convolve`: (Ã x) W (+ b), as one product over every local step."""
        ax = self.aggregate(x)  # type: ignore[attr-defined]  # every view defines aggregate
        if weight.dim() == 3:
            out = torch.bmm(ax, weight)
            return out if bias is None else out + bias
        flat = ax.reshape(-1, ax.shape[-1])
        out = narrow_product(flat, weight) if bias is None else torch.addmm(bias, flat, weight)
        return out.view(*ax.shape[:-1], weight.shape[-1])

    def sequence_mask(self) -> SequenceMask | None:
        """Which (step, row) instances of the vertex layout exist; None: all of them (the default)."""
        return None

    def sequence(self, module: SequenceModule, y: torch.Tensor, carry: State) -> tuple[torch.Tensor, State]:
        mask = self.sequence_mask()
        z, carry = module(self.to_vertex(y), carry) if mask is None else module(self.to_vertex(y), carry, mask)
        return self.to_time(z), carry


@runtime_checkable
class DynamicLayer(Protocol):
    """One dynamic layer: a graph operator per snapshot, then (optionally) a temporal module."""

    temporal_widths: tuple[int, int]  # feature widths moved to and from the vertex layout (0: none)

    def spatial_widths(self, first: bool) -> tuple[int, ...]:
        """The width of each neighbour exchange the layer makes per block: the input width of an
        ``aggregate(x)`` (none for ``aggregate(None)``, the precomputed first layer), ``H + H·F`` of an
        ``attend``. Schemes predict their halo volume from it; ``first``: the model's first layer."""
        ...

    def initial_state(self, vertex_rows: int) -> State:
        """The hand-over state before the first block (π_0)."""
        ...

    def run_block(self, x: torch.Tensor | None, state: State, view: BlockView) -> tuple[torch.Tensor, State]:
        """Outputs of the block's local steps [local steps, rows, out] and the state after it."""
        ...
