"""Per-vertex temporal modules (:class:`~dgbench.models.contract.SequenceModule`) shared by the zoo.

Each runs a block of every vertex's sequence and returns the carry the next block needs, so a scheme
may cut sequences anywhere (checkpoint blocks, ranks) and get the same outputs:

* :class:`MTransform`: TM-GCN's window mean (carry: the last w-1 inputs);
* :class:`GRUSequence`, :class:`LSTMSequence` (one or more layers), :class:`GateWiseGRUSequence`
  (PyTorch Geometric Temporal's T-GCN cell): recurrent, carry = the state after the last step;
* :class:`CausalSelfAttention`: DySAT's temporal self-attention over every earlier step (carry = all
  earlier inputs).

The recurrent modules take a :class:`~dgbench.models.contract.SequenceMask` (DGC §5.1.2 temporal
fusion, Eq. 4-5): without one they run the whole block in one fused ``nn.GRU``/``nn.LSTM`` call;
with one, step by step through the same parameters (``torch.gru_cell``/``torch.lstm_cell``), where
a reset replaces the carry by the initial carry and an absent instance leaves it unchanged. Two
sequences concatenated with a reset between them give, bit for bit, what each gives alone.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from dgbench.errors import DgbenchError
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


def _masks(mask: SequenceMask | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(present, reset) as bool tensors, or None where not given."""
    if mask is None:
        return None, None
    present = None if mask.present is None else mask.present.to(torch.bool)
    reset = None if mask.reset is None else mask.reset.to(torch.bool)
    return present, reset


def _unmasked(module: object, mask: SequenceMask | None) -> None:
    if mask is not None and (mask.present is not None or mask.reset is not None):
        raise NotImplementedError(f"{type(module).__name__} does not take presence or reset masks")


def _nothing_to_run(y: torch.Tensor) -> bool:
    return y.shape[0] == 0 or y.shape[1] == 0


def _empty_output(y: torch.Tensor, width: int) -> torch.Tensor:
    """No step or no row here: zeros, still connected to ``y`` so collectives' backward passes line up."""
    return y.new_zeros((*y.shape[:2], width)) + 0 * y.sum()


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


Step = Callable[[torch.Tensor, list[torch.Tensor]], list[torch.Tensor]]


def masked_recurrence(step: Step, y: torch.Tensor, carry: State, initial: State, present: torch.Tensor | None,
                      reset: torch.Tensor | None) -> tuple[torch.Tensor, State]:
    """Run ``step(x_t, rows) -> rows`` over the steps of ``y`` [steps, rows, F] under presence and
    reset masks [steps, rows] (DGC §5.1.2, Eq. 4-5; either may be None). Every carry tensor is
    [layers, rows, width]; ``step`` sees them as one flat list of [rows, width] tensors (carry
    component major, layer minor) and the output of a step is the top layer of the first component
    (the top ``h``) after it.

    Before step t, rows with ``reset[t]`` take the initial carry (M = 0 in Eq. 4: no state crosses a
    sequence boundary, for every gate and the LSTM cell). Rows absent at t keep their carry, so their
    output repeats the latest present output (the initial ``h``, zeros, before the first). Rows are
    selected with ``torch.where``, so a row's values are exactly those of running its sequence alone.
    """
    layers = [c.shape[0] for c in carry]
    state = [row for c in carry for row in c.unbind(0)]
    first = [row for c in initial for row in c.unbind(0)]
    top = layers[0] - 1
    outputs = []
    for t, x in enumerate(y.unbind(0)):
        if reset is not None:
            restart = reset[t][:, None]
            state = [torch.where(restart, a, b) for a, b in zip(first, state)]
        stepped = step(x, state)
        if present is not None:
            here = present[t][:, None]
            stepped = [torch.where(here, new, old) for new, old in zip(stepped, state)]
        state = stepped
        outputs.append(state[top])
    bounds = np.cumsum([0] + layers)
    return torch.stack(outputs), tuple(torch.stack(state[a:b]) for a, b in zip(bounds[:-1], bounds[1:]))


_TANH_BACKWARD = torch.ops.aten.tanh_backward.default  # the derivative kernels autograd itself calls
_SIGMOID_BACKWARD = torch.ops.aten.sigmoid_backward.default
_SIGMOID_BACKWARD_INTO = torch.ops.aten.sigmoid_backward.grad_input  # the same kernels, into a given tensor
_TANH_BACKWARD_INTO = torch.ops.aten.tanh_backward.grad_input


def _tanh_into(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """tanh(x) = 2σ(2x) - 1 into ``out``: ATen's float tanh took 5.8x its sigmoid's time on this CPU (250 against
    43 µs at [6, 16384]); the four passes here ~70 µs. Equal to tanh up to ~2e-7 absolute (float32)."""
    return torch.mul(x, 2, out=out).sigmoid_().mul_(2).sub_(1)


def _sigmoids_first(gates: torch.Tensor) -> torch.Tensor:
    """Rows [i, f, g, o] of LSTM weights (torch's order) as [i, f, o, g], and back (the swap is its own
    inverse): the three σ gates, then tanh's."""
    i, f, g, o = gates.chunk(4)
    return torch.cat([i, f, o, g])


class _LSTMRecurrence(torch.autograd.Function):
    """One LSTM layer over all steps as one autograd node (torch.nn.LSTM's cell): per step ``gates =
    [W_ih | W_hh | b_ih + b_hh] [x_t; h_{t-1}; 1]``; i, f, g, o = σ, σ, tanh, σ; ``c = f c + i g``;
    ``h = o tanh(c)``.

    At a few features per vertex the work per step is a handful of element-wise passes over [rows, 4F],
    so oneDNN's fused LSTM and autograd's per-op bookkeeping both cost more than the arithmetic; the
    backward here is the textbook BPTT over the saved gates (checked by gradcheck in float64).

    Inside, every per-step tensor is *feature-major*, [width, rows], and the gates are ordered [i, f, o, g],
    so each activation is one call over contiguous memory in full-width vector loops (in the [rows, 4F]
    layout a gate is a strided column slice that ATen walks 6 or 12 floats at a time: sigmoid and tanh
    6-16x slower at 16384 rows). tanh is 2σ(2z) - 1 (:func:`_tanh_into`; ATen's float tanh costs ~6 σ): g's
    weight rows are doubled, exactly, so one σ over the four gates' block serves them all.

    Every product is a short-and-wide one, [a few rows, K] @ [K, rows]: the step's input x_t, the previous
    h and a row of ones are stacked as one feature-major [in + F + 1, rows] column of ``inputs`` (x is
    transposed into it once), so the gates are one product with ``[W_ih | W_hh | b]`` (the bias rides along
    the ones), and the backward's weight gradient is one accumulated ``inputs_t ∂gates_tᵀ`` per step.
    Products with the long side as rows instead ([rows, 4F] @ [4F, in] for ∂x, [4F, rows] @ [rows, in] for
    ∂W_ih) ran 3-7x slower per flop in MKL. docs/performance.md ("WD-GCN: short-and-wide products") has the
    measurements."""

    @staticmethod
    def forward(ctx, x, w_ih, bias, h0, c0, w_hh):
        steps, rows, in_width = x.shape
        width = w_hh.shape[1]
        w_ih, w_hh, bias = _sigmoids_first(w_ih), _sigmoids_first(w_hh), _sigmoids_first(bias)
        weight = torch.cat([w_ih, w_hh, bias[:, None]], dim=1)  # against [x_t; h_{t-1}; 1]
        doubled = weight.clone()  # g's rows times 2 (exact): σ of every gate at once, then tanh(z) = 2σ(2z) - 1
        doubled[3 * width:] *= 2
        inputs = x.new_empty((steps, in_width + width + 1, rows))
        inputs[:, :in_width] = x.transpose(1, 2)
        inputs[:, in_width + width] = 1
        inputs[0, in_width:in_width + width] = h0.t()
        gates = x.new_empty((steps, 4 * width, rows))
        cells = x.new_empty((steps + 1, width, rows))
        squashed = x.new_empty((steps, width, rows))  # tanh(c_t)
        last = x.new_empty((width, rows))  # h of the last step (the others are the next step's inputs)
        cells[0] = c0.t()
        for t in range(steps):
            gate = torch.mm(doubled, inputs[t], out=gates[t]).sigmoid_()
            i, f, o, g = gate.chunk(4)
            g.mul_(2).sub_(1)  # tanh of g's pre-activation
            torch.mul(f, cells[t], out=cells[t + 1]).addcmul_(i, g)
            _tanh_into(cells[t + 1], squashed[t])
            torch.mul(o, squashed[t], out=inputs[t + 1, in_width:in_width + width] if t + 1 < steps else last)
        ctx.save_for_backward(weight, gates, cells, squashed, inputs)
        out = x.new_empty((steps, rows, width))
        out[:-1] = inputs[1:, in_width:in_width + width].transpose(1, 2)
        out[-1] = last.t()
        return out, cells[steps].t().contiguous()

    @staticmethod
    def backward(ctx, grad_out, grad_cell):
        """BPTT one step at a time through one [4F, rows] buffer of ∂gates: each step's products (∂x_t,
        ∂h_{t-1}, the weights' gradient) are taken while that step's ∂gates is in cache, so no [steps, 4F, rows]
        gradient is ever held. ∂h of every step (feature-major) is one buffer the recurrence adds into; once
        step t has read its ∂h, ∂x_t is written over it, and the buffer is transposed into the time layout
        once at the end: beyond the saved tensors the backward allocates that buffer and ∂x (the output's
        size each when in = F) and a few [4F, rows] and [F, rows] buffers, whatever the number of steps."""
        weight, gates, cells, squashed, inputs = ctx.saved_tensors
        steps, width, rows = cells.shape[0] - 1, cells.shape[1], cells.shape[2]
        in_width = inputs.shape[1] - width - 1
        # ∂h_t per step, feature-major, then ∂x_t in the same rows once step t is done with ∂h_t
        per_step = grad_out.new_empty((steps, max(in_width, width), rows))
        per_step[:, :width] = grad_out.transpose(1, 2)
        grad_weight_t = weight.new_zeros((weight.shape[1], weight.shape[0]))  # Σ_t inputs_t ∂gates_tᵀ
        into_inputs = weight[:, :in_width + width].t().contiguous()  # [∂x_t; ∂h_{t-1}] = this @ ∂gates_t
        grad_inputs = gates.new_empty((in_width + width, rows))
        step_grad = gates.new_empty(gates.shape[1:])  # ∂ of one step's gates before their activations
        d_i, d_f, d_o, d_g = step_grad.chunk(4)
        sigmoid_part = step_grad[:3 * width]
        grad_h0, grad_c = None, grad_cell.t()
        for t in reversed(range(steps)):
            dh = per_step[t, :width]
            i, f, o, g = gates[t].chunk(4)
            dc = torch.mul(dh, o)
            _TANH_BACKWARD_INTO(dc, squashed[t], grad_input=dc).add_(grad_c)
            torch.mul(dc, g, out=d_i)
            torch.mul(dc, cells[t], out=d_f)
            torch.mul(dh, squashed[t], out=d_o)
            torch.mul(dc, i, out=d_g)
            _SIGMOID_BACKWARD_INTO(sigmoid_part, gates[t][:3 * width], grad_input=sigmoid_part)
            _TANH_BACKWARD_INTO(d_g, g, grad_input=d_g)
            grad_c = dc.mul_(f)
            grad_weight_t.addmm_(inputs[t], step_grad.t())
            torch.mm(into_inputs, step_grad, out=grad_inputs)  # [∂x_t; W_hhᵀ ∂gates_t]
            if t:  # ∂h_{t-1} += W_hhᵀ ∂gates_t, where step t-1 reads it
                per_step[t - 1, :width].add_(grad_inputs[in_width:])
            else:
                grad_h0 = grad_inputs[in_width:].clone()
            per_step[t, :in_width] = grad_inputs[:in_width]  # ∂x_t, over the ∂h_t read above
        grad_x = per_step[:, :in_width].transpose(1, 2).contiguous()
        grad_weight = _sigmoids_first(grad_weight_t.t())
        return (grad_x, grad_weight[:, :in_width], grad_weight[:, in_width + width], grad_h0.t(), grad_c.t(),
                grad_weight[:, in_width:in_width + width])


class _GRURecurrence(torch.autograd.Function):
    """One GRU layer's recurrence (torch.nn.GRU's cell: r, z = σ(x_r + h_r), σ(x_z + h_z);
    n = tanh(x_n + r ⊙ h_n); h = n + z ⊙ (h - n), with ``x = W_ih x_t + b_ih`` for every step in one
    batched product and ``h = W_hh h + b_hh`` per step) as one autograd node, in the feature-major layout
    of :class:`_LSTMRecurrence` and for the same reason: every per-step tensor is [width, rows], so r and z
    are one contiguous block for one σ call, n another for tanh, and each element-wise op is a full-width
    vector loop (the [rows, 3F] layout's column slices measured 2x slower per step, fwd + bwd)."""

    @staticmethod
    def forward(ctx, x, w_ih, b_ih, h0, w_hh, b_hh):
        steps, rows, _ = x.shape
        width = w_hh.shape[1]
        # x W_ihᵀ + b_ih of every step at once; per step r, z and n (after their activations) replace it
        gates = torch.baddbmm(b_ih[None, :, None], w_ih.expand(steps, *w_ih.shape), x.transpose(1, 2))
        hidden_n = x.new_empty((steps, width, rows))  # W_hn h + b_hn, which r multiplies
        hidden = x.new_empty((steps + 1, width, rows))
        hidden[0] = h0.t()
        w_rz, w_n = w_hh[:2 * width], w_hh[2 * width:]
        b_rz, b_n = b_hh[:2 * width, None], b_hh[2 * width:, None]
        for t in range(steps):
            h, gate = hidden[t], gates[t]
            r, z = gate[:2 * width].add_(torch.addmm(b_rz, w_rz, h)).sigmoid_().chunk(2)
            torch.addmm(b_n, w_n, h, out=hidden_n[t])
            n = gate[2 * width:].addcmul_(r, hidden_n[t]).tanh_()
            torch.addcmul(n, z, h - n, out=hidden[t + 1])
        ctx.save_for_backward(x, w_ih, w_hh, gates, hidden_n, hidden)
        return hidden[1:].transpose(1, 2).contiguous()

    @staticmethod
    def backward(ctx, grad_out):
        """BPTT one step at a time through one [4F, rows] buffer (∂ of r, z, n before their activations, then
        ∂(W_hn h + b_hn)): each step's products are taken while it is in cache, so no [steps, 3F, rows]
        gradient is held (as :class:`_LSTMRecurrence`)."""
        x, w_ih, w_hh, gates, hidden_n, hidden = ctx.saved_tensors
        steps, width = x.shape[0], w_hh.shape[1]
        grad_hidden = grad_out.transpose(1, 2).contiguous()  # ∂h per step, feature-major; the recurrence adds in
        grad_x = x.new_empty(x.shape) if ctx.needs_input_grad[0] else None  # ∂x_t = ∂gates_tᵀ W_ih, time layout
        grad_w_ih, grad_w_hh = torch.zeros_like(w_ih), torch.zeros_like(w_hh)
        grad_biases = w_hh.new_zeros(4 * width)  # Σ_t of the buffer's rows: ∂b_ih, then ∂b_hn
        step_grad = gates.new_empty((4 * width, gates.shape[2]))
        d_r, d_z, d_n, d_hidden_n = step_grad.chunk(4)
        input_part, rz_part = step_grad[:3 * width], step_grad[:2 * width]
        into_rz, into_n = w_hh[:2 * width].t(), w_hh[2 * width:].t()
        grad_h0 = None
        for t in reversed(range(steps)):
            dh = grad_hidden[t]
            r, z, n = gates[t].chunk(3)
            through_z = dh * z  # ∂h_{t-1} along h = n + z (h_{t-1} - n)
            _TANH_BACKWARD_INTO(dh - through_z, n, grad_input=d_n)
            _SIGMOID_BACKWARD_INTO(torch.sub(hidden[t], n).mul_(dh), z, grad_input=d_z)
            torch.mul(d_n, r, out=d_hidden_n)
            _SIGMOID_BACKWARD_INTO(d_n * hidden_n[t], r, grad_input=d_r)
            previous = hidden[t].t()
            if grad_x is not None:
                torch.mm(input_part.t(), w_ih, out=grad_x[t])
            grad_w_ih.addmm_(input_part, x[t])
            grad_w_hh[:2 * width].addmm_(rz_part, previous)
            grad_w_hh[2 * width:].addmm_(d_hidden_n, previous)
            grad_biases.add_(step_grad.sum(1))
            into = grad_hidden[t - 1].add_(through_z) if t else through_z
            into.addmm_(into_rz, rz_part).addmm_(into_n, d_hidden_n)
            if not t:
                grad_h0 = into
        grad_b_ih = grad_biases[:3 * width].clone()  # its own storage: b_ih's and b_hh's .grad never alias
        grad_b_hh = torch.cat([grad_biases[:2 * width], grad_biases[3 * width:]])
        return grad_x, grad_w_ih, grad_b_ih, grad_h0.t(), grad_w_hh, grad_b_hh


class _GateWiseGRURecurrence(torch.autograd.Function):
    """The recurrence of :class:`GateWiseGRUSequence` (PGT's T-GCN cell) as one autograd node, feature-major
    as :class:`_LSTMRecurrence`: per step ``z, r = σ(U_zr + L_zr h)``, ``c = tanh(U_h + L_h (h ⊙ r))``,
    ``h ← c + z ⊙ (h - c)`` on [width, rows] tensors; the backward is the textbook BPTT over the saved gates.
    ``inputs`` [steps, rows, 3F] = [U_z | U_r | U_h], ``weight`` [3, F, F] = (L_z, L_r, L_h)."""

    @staticmethod
    def forward(ctx, inputs, h0, weight):
        steps, rows, three = inputs.shape
        width = three // 3
        gates = inputs.transpose(1, 2).contiguous()  # U per step, feature-major; then z, r and c in place
        hidden = inputs.new_empty((steps + 1, width, rows))
        reset_hidden = inputs.new_empty((steps, width, rows))  # h ⊙ r, which L_h multiplies
        hidden[0] = h0.t()
        both, candidate_weight = weight[:2].reshape(2 * width, width), weight[2]
        for t in range(steps):
            h, gate = hidden[t], gates[t]
            z, r = gate[:2 * width].addmm_(both, h).sigmoid_().chunk(2)
            torch.mul(h, r, out=reset_hidden[t])
            candidate = gate[2 * width:].addmm_(candidate_weight, reset_hidden[t]).tanh_()
            torch.lerp(candidate, h, z, out=hidden[t + 1])
        ctx.save_for_backward(weight, gates, hidden, reset_hidden)
        return hidden[1:].transpose(1, 2).contiguous()

    @staticmethod
    def backward(ctx, grad_out):
        weight, gates, hidden, reset_hidden = ctx.saved_tensors
        steps, width = gates.shape[0], weight.shape[1]
        both, candidate_weight = weight[:2].reshape(2 * width, width), weight[2]
        grad_hidden = grad_out.transpose(1, 2).contiguous()  # ∂h per step, feature-major; the recurrence adds in
        grad_gates = torch.empty_like(gates)  # ∂ of z, r, c before their activations (= ∂U, feature-major)
        grad_h0 = None
        for t in reversed(range(steps)):
            dh, h = grad_hidden[t], hidden[t]
            z, r, candidate = gates[t].chunk(3)
            d_z, d_r, d_c = grad_gates[t].chunk(3)
            through_z = dh * z  # ∂h_{t-1} along h = c + z (h_{t-1} - c)
            _TANH_BACKWARD_INTO(dh - through_z, candidate, grad_input=d_c)
            _SIGMOID_BACKWARD_INTO(torch.sub(h, candidate).mul_(dh), z, grad_input=d_z)
            grad_reset_hidden = candidate_weight.t() @ d_c  # ∂(h ⊙ r)
            _SIGMOID_BACKWARD_INTO(grad_reset_hidden * h, r, grad_input=d_r)
            into = grad_hidden[t - 1].add_(through_z) if t else through_z
            into.addcmul_(grad_reset_hidden, r).addmm_(both.t(), grad_gates[t][:2 * width])
            if not t:
                grad_h0 = into
        previous = hidden[:steps].transpose(1, 2)
        grad_both = torch.bmm(grad_gates[:, :2 * width], previous).sum(0).view(2, width, width)
        grad_candidate = torch.bmm(grad_gates[:, 2 * width:], reset_hidden.transpose(1, 2)).sum(0)
        return (grad_gates.transpose(1, 2).contiguous(), grad_h0.t(),
                torch.cat([grad_both, grad_candidate[None]]))


class GRUSequence(nn.Module):
    """A one-layer GRU over each vertex's sequence (T-GCN's temporal encoder, DGC §4.1/§6); the carry
    is h, [1, rows, width]."""

    dependency = Dependency.RECURRENT

    def __init__(self, in_width: int, out_width: int):
        super().__init__()
        self.in_width, self.out_width = in_width, out_width
        self.gru = nn.GRU(in_width, out_width)

    def initial_carry(self, rows: int) -> State:
        return (self.gru.weight_hh_l0.new_zeros((1, rows, self.out_width)),)

    def _step(self, x: torch.Tensor, state: list[torch.Tensor]) -> list[torch.Tensor]:
        g = self.gru
        return [torch.gru_cell(x, state[0], g.weight_ih_l0, g.weight_hh_l0, g.bias_ih_l0, g.bias_hh_l0)]

    def forward(self, y: torch.Tensor, carry: State, mask: SequenceMask | None = None) -> tuple[torch.Tensor, State]:
        if _nothing_to_run(y):
            return _empty_output(y, self.out_width), carry
        present, reset = _masks(mask)
        if present is None and reset is None:
            if y.device.type != "cpu":  # cuDNN's fused GRU
                z, h = self.gru(y, carry[0])
                return z, (h,)
            g = self.gru
            z = _GRURecurrence.apply(y, g.weight_ih_l0, g.bias_ih_l0, carry[0][0], g.weight_hh_l0, g.bias_hh_l0)
            return z, (z[-1][None],)
        return masked_recurrence(self._step, y, carry, self.initial_carry(y.shape[1]), present, reset)


_LSTM_PARAMETERS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


class LSTMSequence(nn.Module):
    """An LSTM of ``layers`` layers over each vertex's sequence (CD-GCN and WD-GCN: one layer;
    MPNN-LSTM: two); the carry is (h, c), [layers, rows, width] each."""

    dependency = Dependency.RECURRENT

    def __init__(self, in_width: int, out_width: int, layers: int = 1):
        super().__init__()
        self.in_width, self.out_width, self.layers = in_width, out_width, layers
        self.lstm = nn.LSTM(in_width, out_width, num_layers=layers)

    def initial_carry(self, rows: int) -> State:
        zeros = self.lstm.weight_hh_l0.new_zeros((self.layers, rows, self.out_width))
        return (zeros, zeros.clone())

    def _step(self, x: torch.Tensor, state: list[torch.Tensor]) -> list[torch.Tensor]:
        hs, cs = state[:self.layers], state[self.layers:]
        new_h, new_c = [], []
        for layer in range(self.layers):
            weights = [getattr(self.lstm, f"{name}_l{layer}") for name in _LSTM_PARAMETERS]
            x, c = torch.lstm_cell(x, (hs[layer], cs[layer]), *weights)
            new_h.append(x)
            new_c.append(c)
        return new_h + new_c

    def forward(self, y: torch.Tensor, carry: State, mask: SequenceMask | None = None) -> tuple[torch.Tensor, State]:
        if _nothing_to_run(y):  # nothing to run here; keep the graph connected for collectives
            return _empty_output(y, self.out_width), carry
        present, reset = _masks(mask)
        if present is None and reset is None:
            if y.device.type != "cpu":  # cuDNN's fused LSTM
                z, (h, c) = self.lstm(y, carry)
                return z, (h, c)
            return self._layer_by_layer(y, carry)
        return masked_recurrence(self._step, y, carry, self.initial_carry(y.shape[1]), present, reset)

    def _layer_by_layer(self, y: torch.Tensor, carry: State) -> tuple[torch.Tensor, State]:
        """Every step of layer 1, then of layer 2, ..."""
        hs, cs = [], []
        for layer in range(self.layers):
            w_ih, w_hh, b_ih, b_hh = (getattr(self.lstm, f"{name}_l{layer}") for name in _LSTM_PARAMETERS)
            y, c = _LSTMRecurrence.apply(y, w_ih, b_ih + b_hh, carry[0][layer], carry[1][layer], w_hh)
            hs.append(y[-1])
            cs.append(c)
        return y, (torch.stack(hs), torch.stack(cs))


class GateWiseGRUSequence(nn.Module):
    """The recurrence of PyTorch Geometric Temporal's ``TGCN`` cell (Zhao et al., T-GCN Eq. 3-6, in
    PGT's form), for inputs whose graph convolutions are already done:

    ``Z = σ(U_z + H L_zᵀ)``, ``R = σ(U_r + H L_rᵀ)``, ``H̃ = tanh(U_h + (H ⊙ R) L_hᵀ)``,
    ``H ← Z ⊙ H + (1 - Z) ⊙ H̃``, where ``U_g = conv_g(X) K_gᵀ + b_g`` is the input half of PGT's
    ``Linear(cat[conv_g(X), H])`` (so ``[K_g | L_g]`` is that linear's weight). The input is
    ``[U_z | U_r | U_h]`` (width 3·width), computed per snapshot before the layout change; the carry
    is H, [1, rows, width]. Unlike ``nn.GRU``, the reset gate multiplies H before its product (PGT).
    On the CPU without masks the block runs as one node (:class:`_GateWiseGRURecurrence`); with masks, or
    on a GPU, step by step through :func:`masked_recurrence`.
    """

    dependency = Dependency.RECURRENT

    def __init__(self, width: int):
        super().__init__()
        self.in_width, self.out_width = 3 * width, width
        bound = 1.0 / math.sqrt(2 * width)  # nn.Linear(2·width, width)'s default init, as in PGT
        self.hidden_weight = nn.Parameter(torch.empty(3, width, width).uniform_(-bound, bound))

    def initial_carry(self, rows: int) -> State:
        return (self.hidden_weight.new_zeros((1, rows, self.out_width)),)

    def forward(self, y: torch.Tensor, carry: State, mask: SequenceMask | None = None) -> tuple[torch.Tensor, State]:
        if _nothing_to_run(y):
            return _empty_output(y, self.out_width), carry
        present, reset = _masks(mask)
        if present is None and reset is None and y.device.type == "cpu":
            z = _GateWiseGRURecurrence.apply(y, carry[0][0], self.hidden_weight)
            return z, (z[-1][None],)
        width = self.out_width
        gates = self.hidden_weight.transpose(1, 2)  # [3, F_in, F_out]: H L_gᵀ = H @ gates[g]
        both = torch.cat([gates[0], gates[1]], dim=1)  # Z and R in one product per step
        candidate_weight = gates[2]

        def step(x: torch.Tensor, state: list[torch.Tensor]) -> list[torch.Tensor]:
            h = state[0]
            update, reset = torch.sigmoid(torch.addmm(x[:, :2 * width], h, both)).chunk(2, dim=1)
            candidate = torch.tanh(torch.addmm(x[:, 2 * width:], h * reset, candidate_weight))
            return [torch.lerp(candidate, h, update)]  # Z ⊙ H + (1 - Z) ⊙ H̃

        return masked_recurrence(step, y, carry, self.initial_carry(y.shape[1]), present, reset)


class CausalSelfAttention(nn.Module):
    """DySAT's temporal self-attention layer (Sankar et al., WSDM'20, §4.3; DGC §6: one layer of
    scaled dot-product attention [Vaswani et al.]) over every earlier step of each vertex.

    Per vertex, with learned position embeddings p_t added to the inputs (DySAT), e_t = y_t + p_t:
    ``a_t = softmax_{j ≤ t}(q_t · k_j / √d) v_j`` with ``q = e W_q``, ``k = e W_k``, ``v = e W_v``
    (no bias; heads split the width, concatenated), then DySAT's feed-forward with its skip,
    ``f = ReLU(a W_f + b_f) + a``, and its residual, ``out = f + e``. Choices: the scale is √d of a
    head (Vaswani; DySAT's code divides by √T); no dropout (deterministic, so every scheme follows
    ``single``); positions are the step's index in its sequence (time, not a count of present
    instances), from a learned table of ``max_steps`` rows initialised to zero (DySAT: xavier over
    [T, F]): in link prediction the validation and test steps come after every training step, so
    their rows never receive a gradient, and a random initial row would add noise to exactly the
    embeddings that are evaluated (measured on CollegeMsg: test AUC at chance with xavier rows).

    The carry is every earlier step: (inputs [k, rows, F], present [k, rows], the index where each
    row's sequence started [rows], the latest present output [rows, F]). Masks: a key is seen only
    if present and in the query's sequence (a reset starts a new one, positions from 0); an absent
    step's output repeats the latest present output (zeros before the first).
    """

    dependency = Dependency.CAUSAL

    def __init__(self, width: int, heads: int = 1, max_steps: int = 1024):
        super().__init__()
        if width % heads:
            raise DgbenchError(f"temporal attention: width {width} is not a multiple of --heads {heads}")
        self.in_width = self.out_width = width
        self.heads, self.max_steps = heads, max_steps
        self.positions = nn.Parameter(torch.zeros(max_steps, width))
        self.query, self.key, self.value = (nn.Parameter(nn.init.xavier_uniform_(torch.empty(width, width)))
                                            for _ in range(3))
        self.feedforward = nn.Linear(width, width)

    def initial_carry(self, rows: int) -> State:
        like = self.positions
        return (like.new_zeros((0, rows, self.in_width)), torch.zeros((0, rows), dtype=torch.bool, device=like.device),
                torch.zeros(rows, dtype=torch.int64, device=like.device), like.new_zeros((rows, self.out_width)))

    def forward(self, y: torch.Tensor, carry: State, mask: SequenceMask | None = None) -> tuple[torch.Tensor, State]:
        if _nothing_to_run(y):
            return _empty_output(y, self.out_width), carry
        history, seen, start, last = carry
        known, steps, rows = history.shape[0], y.shape[0], y.shape[1]
        if known + steps > self.max_steps:
            raise DgbenchError(f"DySAT's temporal attention has {self.max_steps} position embeddings "
                               f"(--max-steps); the sequence has {known + steps} steps")
        present, reset = _masks(mask)
        if present is None:
            present = torch.ones((steps, rows), dtype=torch.bool, device=y.device)
        full = torch.cat([history, y])
        visible = torch.cat([seen, present])  # [L, rows]
        at = torch.arange(known, known + steps, device=y.device)
        if reset is None:
            begins = start.expand(steps, rows)
        else:  # each query's sequence begins at its latest reset (or where the carry's began)
            marks = torch.where(reset, at[:, None], torch.full_like(reset, -1, dtype=torch.int64))
            begins = torch.maximum(start[None], torch.cummax(marks, dim=0).values)
        inputs = full + self._embeddings(known + steps, begins, start, at, plain=reset is None)
        queries, keys = inputs[known:], torch.arange(known + steps, device=y.device)
        allowed = keys[None, :] <= at[:, None]  # [steps, L]: causal
        if mask is not None:  # per row: present keys of the query's own sequence, and always itself
            allowed = (allowed[:, :, None] & visible[None] & (keys[None, :, None] >= begins[:, None, :])) \
                | (keys[None, :, None] == at[:, None, None])
            allowed = allowed.permute(2, 0, 1)[:, None]  # [rows, 1, steps, L]
        attended = self._attend(queries, inputs, allowed)
        out = torch.relu(self.feedforward(attended)) + attended + queries
        if mask is not None:
            out, last = _repeat_latest(out, present, reset, last)
        else:
            last = out[-1]
        return out, (full, visible, begins[-1].clone(), last)

    def _embeddings(self, length: int, begins: torch.Tensor, start: torch.Tensor, at: torch.Tensor,
                    plain: bool) -> torch.Tensor:
        """Position embeddings of the history and the block's steps, [L, 1 or rows, F]."""
        if plain and not bool(start.any()):
            return self.positions[:length, None]
        history = torch.arange(length - at.shape[0], device=at.device)[:, None] - start[None]
        index = torch.cat([history, at[:, None] - begins]).clamp(min=0)  # before a row's start: never seen
        return self.positions[index]

    def _attend(self, queries: torch.Tensor, inputs: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """Scaled dot-product attention, heads split along the width: [steps, rows, F].

        The projections run as one product over a vertex-major copy of the inputs ([rows, L, F],
        contiguous), so q, k and v are views SDPA reads without copies (2.4x faster than per-weight
        products on the time-major layout at 16384 rows x 32 steps)."""
        steps, rows, width = queries.shape
        length, heads = inputs.shape[0], self.heads
        vertex_major = inputs.transpose(0, 1).reshape(rows * length, width)
        projected = vertex_major @ torch.cat([self.query, self.key, self.value], dim=1)
        q, k, v = projected.view(rows, length, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q[:, :, length - steps:], k, v, attn_mask=allowed)
        return attended.permute(2, 0, 1, 3).reshape(steps, rows, width)  # [rows, heads, steps, d] -> time-major


def _repeat_latest(out: torch.Tensor, present: torch.Tensor, reset: torch.Tensor | None,
                   last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Absent steps take the latest present output of their sequence (zeros after a reset until one)."""
    rows = []
    for t in range(out.shape[0]):
        if reset is not None:
            last = torch.where(reset[t][:, None], torch.zeros_like(last), last)
        last = torch.where(present[t][:, None], out[t], last)
        rows.append(last)
    return torch.stack(rows), last
