"""The DGC/BLAD model zoo (T-GCN, WD-GCN, MPNN-LSTM, DySAT) and its sequence modules, in one process:
block-wise runs hand over exactly what later steps need, gradients are right, masks behave as
DGC §5.1.2 asks, and the models are registered."""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode

from dgbench.cli import cli
from dgbench.errors import DgbenchError
from dgbench.models.attention import dysat
from dgbench.models.contract import LayoutSequence, SequenceMask
from dgbench.models.discrete import DynamicGNN
from dgbench.models.recurrent import add_bias, mpnn_lstm, tgcn, wdgcn
from dgbench.models.sequence import CausalSelfAttention, GateWiseGRUSequence, GRUSequence, LSTMSequence
from dgbench.models.sparse import SparseOperator, block_diagonal, gcn_normalize, graph_attention, spmm

N, T, IN = 9, 6, 2
FACTORIES = {
    "tgcn": lambda **k: tgcn(**k),
    "tgcn-pygt": lambda **k: tgcn(variant="pygt", **k),
    "wdgcn": lambda **k: wdgcn(**k),
    "wdgcn-1": lambda **k: wdgcn(gcn_layers=1, **k),
    "mpnn-lstm": lambda **k: mpnn_lstm(**k),
    "dysat": lambda **k: dysat(max_steps=16, **k),
    "dysat-2heads": lambda **k: dysat(heads=2, max_steps=16, **k),
}


@dataclass
class LocalView(LayoutSequence):
    """A one-process block view over random snapshots: the whole layer contract, nothing distributed."""

    features: torch.Tensor  # X⁰, [T, N, IN]
    ops: list
    block: range

    @property
    def num_steps(self) -> int:
        return len(self.block)

    local_steps = property(lambda self: slice(0, len(self.block)))
    vertex_rows = N

    def _operator(self) -> SparseOperator:
        parts = [self.ops[t] for t in self.block]
        op = SparseOperator(block_diagonal(parts))
        op.csr.val = op.csr.val.to(self.features.dtype)
        return op

    def aggregate(self, x):
        if x is None:
            x = self.input_features()
        return spmm(self._operator(), x.reshape(-1, x.shape[-1])).view(x.shape)

    def input_features(self):
        return self.features[self.block.start:self.block.stop]

    def attend(self, dst_score, src_score, values):
        steps, rows, heads, width = values.shape
        out = graph_attention(self._operator(), dst_score.reshape(-1, heads), src_score.reshape(-1, heads),
                              values.reshape(-1, heads, width))
        return out.view(values.shape)

    def to_vertex(self, y):
        return y

    def to_time(self, z):
        return z


def snapshots(seed: int = 0, dtype=torch.float32, steps: int = T, nodes: int = N) -> tuple[torch.Tensor, list]:
    rng = np.random.default_rng(seed)
    ops = []
    for _ in range(steps):
        src, dst = rng.integers(0, nodes, 3 * nodes), rng.integers(0, nodes, 3 * nodes)
        ops.append(gcn_normalize(src, dst, None, nodes).to_torch())
    features = torch.from_numpy(rng.integers(0, 5, (steps, nodes, IN))).to(dtype)
    return features, ops


def build(name: str, hidden: int = 4, dtype=torch.float32) -> DynamicGNN:
    torch.manual_seed(0)
    return FACTORIES[name](in_features=IN, hidden=hidden).to(dtype)


def run_blocks(model: DynamicGNN, features, ops, blocks: list[range]) -> torch.Tensor:
    state, parts = model.initial_state(features.shape[1]), []
    for block in blocks:
        halves, state = model.forward_block(LocalView(features, ops, block), state)
        parts.append(halves)
    return torch.cat(parts)


# --------------------------------------------------------------------------- models

@pytest.mark.parametrize("name", list(FACTORIES))
def test_blockwise_forward_with_handed_over_state_equals_one_block(name):
    """Checkpoint blocks (down to one step each) see every earlier step through the carry."""
    features, ops = snapshots()
    model = build(name)
    whole = run_blocks(model, features, ops, [range(T)])
    assert whole.shape == (T, N, 2)
    for blocks in ([range(0, 2), range(2, 5), range(5, T)], [range(t, t + 1) for t in range(T)]):
        torch.testing.assert_close(run_blocks(model, features, ops, blocks), whole, rtol=1e-5, atol=1e-6)
    whole.sum().backward()
    encoder = [p for n, p in model.named_parameters() if n != "scorer.bias" and "positions" not in n]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0 for p in encoder)


class _Method(torch.nn.Module):
    """Calls one method of a model under ``functional_call`` (which only calls ``forward``)."""

    def __init__(self, model: torch.nn.Module, method: str):
        super().__init__()
        self.model, self.method = model, method

    def forward(self, *args):
        return getattr(self.model, self.method)(*args)


@pytest.mark.parametrize("name", list(FACTORIES))
def test_gradients_match_finite_differences_in_float64(name):
    """gradcheck over every parameter and the input features, across a block boundary (the carry)."""
    features, ops = snapshots(1, torch.float64, steps=4, nodes=5)
    model = build(name, hidden=2, dtype=torch.float64)
    names = [f"model.{n}" for n, _ in model.named_parameters()]
    g = torch.Generator().manual_seed(2)  # random biases too: zero-initialised ones put ReLU on its kink
    params = tuple((0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype)).requires_grad_()
                   for p in model.parameters())
    weights = torch.randn(4, 5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    initial, forward_block = _Method(model, "initial_state"), _Method(model, "forward_block")

    def loss(x, *values):
        replaced = dict(zip(names, values))
        state, total = functional_call(initial, replaced, (5,)), 0
        for block in (range(0, 3), range(3, 4)):
            halves, state = functional_call(forward_block, replaced, (LocalView(x, ops, block), state))
            total = total + (halves * weights[block.start:block.stop]).sum()
        return total
    x = features.clone().requires_grad_()
    assert torch.autograd.gradcheck(loss, (x, *params), eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=True)


def test_dysat_output_at_t_reads_no_later_snapshot():
    features, ops = snapshots(2)
    model = build("dysat")
    before = run_blocks(model, features, ops, [range(T)])
    changed = features.clone()
    changed[4:] += 3
    after = run_blocks(model, changed, ops, [range(T)])
    torch.testing.assert_close(after[:4], before[:4])
    assert not torch.allclose(after[4:], before[4:])


def test_declared_widths_are_what_the_layers_move():
    """temporal_widths: moved to/from the vertex layout; spatial_widths: each neighbour exchange
    (the first layer's Ã X⁰ is precomputed; an attention exchange carries a score per head and values)."""
    names = ("tgcn", "tgcn-pygt", "wdgcn", "wdgcn-1", "mpnn-lstm", "dysat", "dysat-2heads")
    models = {name: build(name, hidden=4) for name in names}
    assert {n: m.feature_widths() for n, m in models.items()} == {
        "tgcn": [(0, 0), (4, 4)], "tgcn-pygt": [(0, 0), (12, 4)], "wdgcn": [(0, 0), (4, 4)], "wdgcn-1": [(4, 4)],
        "mpnn-lstm": [(0, 0), (8, 4)], "dysat": [(4, 4)], "dysat-2heads": [(4, 4)]}
    assert {n: m.spatial_widths() for n, m in models.items()} == {
        "tgcn": [(), (4,)], "tgcn-pygt": [(), (4,)], "wdgcn": [(), (4,)], "wdgcn-1": [()],
        "mpnn-lstm": [(), (4,)], "dysat": [(1 + 4,)], "dysat-2heads": [(2 + 4,)]}


def test_bad_model_options_are_one_line_errors():
    with pytest.raises(DgbenchError, match="variant 'x'"):
        tgcn(variant="x")
    with pytest.raises(DgbenchError, match="not a multiple of --heads 4"):
        dysat(hidden=6, heads=4)
    with pytest.raises(DgbenchError, match="gcn_layers 0"):
        wdgcn(gcn_layers=0)
    model = dysat(hidden=2, max_steps=3)
    features, ops = snapshots(steps=4)
    with pytest.raises(DgbenchError, match="3 position embeddings .* 4 steps"):
        run_blocks(model, features, ops, [range(4)])


def test_list_shows_the_zoo_and_a_wrong_model_is_one_line(esdg_store):
    runner = CliRunner()
    listed = runner.invoke(cli, ["list"])
    assert listed.exit_code == 0
    for name in ("tgcn", "dysat", "mpnn-lstm", "wdgcn"):
        assert name in listed.output
    wrong = runner.invoke(cli, ["run", "--scheme", "single", "--model", "tgcnn", "--dataset", str(esdg_store)])
    assert wrong.exit_code != 0
    message = wrong.output.strip().splitlines()
    assert len(message) == 1 and "tgcnn" in message[0] and "tgcn" in message[0], wrong.output


# --------------------------------------------------------------------------- graph attention

def test_graph_attention_is_a_softmax_over_in_neighbours_and_self():
    rng = np.random.default_rng(4)
    n, heads, width = 7, 2, 3
    src, dst = rng.integers(0, n, 15), rng.integers(0, n, 15)
    op = SparseOperator(gcn_normalize(src, dst, None, n).to_torch())
    op.csr.val = op.csr.val.double()
    g = torch.Generator().manual_seed(0)
    d, s, v = (torch.randn(n, heads, generator=g, dtype=torch.float64), torch.randn(n, heads, generator=g,
               dtype=torch.float64), torch.randn(n, heads, width, generator=g, dtype=torch.float64))
    out = graph_attention(op, d, s, v)
    neighbours = [set(src[dst == i].tolist()) | {i} for i in range(n)]
    for i in range(n):
        js = sorted(neighbours[i])
        logits = torch.nn.functional.leaky_relu(d[i][None] + s[js], 0.2)  # [|js|, H]
        alpha = torch.softmax(logits, dim=0)
        torch.testing.assert_close(out[i], (alpha[..., None] * v[js]).sum(0))
    inputs = tuple(t.clone().requires_grad_() for t in (d, s, v))
    assert torch.autograd.gradcheck(lambda *a: graph_attention(op, *a), inputs)


# --------------------------------------------------------------------------- sequence modules

def recurrent_modules(width_in: int = 3, width: int = 4) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {"gru": GRUSequence(width_in, width), "lstm": LSTMSequence(width_in, width),
            "lstm2": LSTMSequence(width_in, width, layers=2), "gatewise": GateWiseGRUSequence(width)}


def _inputs(module, steps: int, rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(steps, rows, module.in_width, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", ["gru", "lstm", "lstm2", "gatewise", "attention"])
def test_fused_sequences_with_a_reset_equal_each_sequence_alone_bit_for_bit(kind):
    """DGC §5.1.2 temporal fusion: (B1, B2) and (C1, C2, C3) concatenated, reset at C1 (M = 0)."""
    module = recurrent_modules()[kind] if kind != "attention" else CausalSelfAttention(4, heads=2, max_steps=8)
    rows = 5
    first, second = _inputs(module, 2, rows, 1), _inputs(module, 3, rows, 2)
    reset = torch.zeros(5, rows, dtype=torch.bool)
    reset[2] = True
    all_present = torch.ones(5, rows, dtype=torch.bool)
    fused, _ = module(torch.cat([first, second]), module.initial_carry(rows), SequenceMask(all_present, reset))
    a, _ = module(first, module.initial_carry(rows), SequenceMask(all_present[:2], reset[:2]))
    b, _ = module(second, module.initial_carry(rows), SequenceMask(all_present[2:], reset[2:]))
    if kind == "attention":  # one attention call over all five steps: the same arithmetic up to rounding
        torch.testing.assert_close(fused, torch.cat([a, b]), rtol=1e-6, atol=1e-6)
    else:
        assert torch.equal(fused, torch.cat([a, b]))


@pytest.mark.parametrize("kind", ["gru", "lstm", "lstm2", "gatewise", "attention"])
def test_absent_instances_keep_the_carry_and_repeat_the_latest_output(kind):
    module = recurrent_modules()[kind] if kind != "attention" else CausalSelfAttention(4, max_steps=8)
    rows, steps = 3, 6
    y = _inputs(module, steps, rows)
    present = torch.ones(steps, rows, dtype=torch.bool)
    present[[0, 2, 3], 1] = False  # row 1 exists at steps 1, 4, 5 only
    out, carry = module(y, module.initial_carry(rows), SequenceMask(present=present))
    assert torch.equal(out[0, 1], torch.zeros(module.out_width))  # before the first instance
    assert torch.equal(out[2, 1], out[1, 1]) and torch.equal(out[3, 1], out[1, 1])
    unseen = y.clone()
    unseen[~present] = 1e3  # what absent instances hold is never read
    out_unseen, carry_unseen = module(unseen, module.initial_carry(rows), SequenceMask(present=present))
    assert torch.equal(out_unseen, out)
    kept = present[:, 1].nonzero().view(-1)
    if kind != "attention":  # the recurrence only steps at present instances (attention's positions are time)
        compact, _ = module(y[kept, 1:2], module.initial_carry(1))
        torch.testing.assert_close(out[kept, 1], compact[:, 0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["gru", "lstm", "lstm2", "gatewise"])
def test_masked_step_path_agrees_with_the_fused_block_path(kind):
    module = recurrent_modules()[kind]
    rows = 4
    y = _inputs(module, 5, rows)
    fast, fast_carry = module(y, module.initial_carry(rows))
    ones = torch.ones(5, rows, dtype=torch.bool)
    stepped, step_carry = module(y, module.initial_carry(rows), SequenceMask(ones, ~ones))
    torch.testing.assert_close(stepped, fast, rtol=1e-5, atol=1e-6)
    for a, b in zip(step_carry, fast_carry):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_attention_carry_cut_anywhere_gives_the_same_outputs_under_masks():
    module = CausalSelfAttention(4, heads=2, max_steps=16)
    rows, steps = 4, 7
    y = _inputs(module, steps, rows, 5)
    g = torch.Generator().manual_seed(9)
    present = torch.rand(steps, rows, generator=g) > 0.3
    reset = torch.rand(steps, rows, generator=g) > 0.8
    whole, _ = module(y, module.initial_carry(rows), SequenceMask(present, reset))
    carry, parts = module.initial_carry(rows), []
    for a, b in ((0, 3), (3, 4), (4, 7)):
        out, carry = module(y[a:b], carry, SequenceMask(present[a:b], reset[a:b]))
        parts.append(out)
    torch.testing.assert_close(torch.cat(parts), whole, rtol=1e-5, atol=1e-6)


def test_empty_blocks_pass_the_carry_through():
    for module in [*recurrent_modules().values(), CausalSelfAttention(4)]:
        carry = module.initial_carry(3)
        out, after = module(torch.zeros(0, 3, module.in_width), carry)
        assert out.shape == (0, 3, module.out_width) and all(a is b for a, b in zip(after, carry))


@pytest.mark.parametrize("kind", ["gru", "lstm", "lstm2"])
def test_cpu_recurrences_equal_torch_rnn_modules_and_their_gradients(kind):
    """The one-node recurrences on the CPU compute what nn.GRU / nn.LSTM compute, gradients included."""
    module = recurrent_modules()[kind].double()
    rnn = module.gru if kind == "gru" else module.lstm
    y = torch.randn(5, 4, module.in_width, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    carry = tuple(torch.randn(c.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
                  for c in module.initial_carry(4))
    ours, our_carry = module(y, carry)
    theirs, their_carry = rnn(y, carry[0] if kind == "gru" else carry)
    torch.testing.assert_close(ours, theirs)
    for a, b in zip(our_carry, their_carry if kind != "gru" else (their_carry,)):
        torch.testing.assert_close(a, b)

    def run(x, *state):
        out, after = module(x, state)
        return out, *after
    inputs = (y.clone().requires_grad_(), *(c.clone().requires_grad_() for c in carry))
    assert torch.autograd.gradcheck(run, inputs)
    names = [n for n, _ in rnn.named_parameters()]
    weights = tuple(p.detach().clone().requires_grad_() for p in rnn.parameters())
    assert torch.autograd.gradcheck(
        lambda *w: functional_call(module, {f"{'gru' if kind == 'gru' else 'lstm'}.{n}": v
                                            for n, v in zip(names, w)}, (y, carry))[0], weights)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


class _HeapPeak(TorchDispatchMode):
    """The highest heap in use (glibc's ``mallinfo2``: malloc'd plus mmap'd bytes) after any op inside the
    block, above what was in use when it began: every tensor the ops allocate, whoever keeps it."""

    def __init__(self, libc: ctypes.CDLL):
        super().__init__()
        self.libc, self.peak = libc, 0
        self.base = self.in_use()

    def in_use(self) -> int:
        info = self.libc.mallinfo2()
        return info.uordblks + info.hblkhd

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, self.in_use() - self.base)
        return out


def _glibc() -> ctypes.CDLL:
    if not sys.platform.startswith("linux"):
        pytest.skip("counts the heap through glibc's mallinfo2")
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
    except (OSError, AttributeError):
        pytest.skip("glibc >= 2.33 (mallinfo2) is needed to count the heap")
    return libc


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_backward_holds_one_step_of_gate_gradients(kind):
    """The CPU LSTM and GRU nodes' backward allocates ∂h and ∂x (the output's size each) and buffers of one
    step ([4F, rows] of gate gradients, a few [F, rows]); they kept the gate gradients of every step until
    the weights' gradients were taken after the loop (7.1x the output's bytes at 32 steps, now 2.2x)."""
    libc = _glibc()
    steps, rows, width = 32, 4096, 6
    module = LSTMSequence(width, width) if kind == "lstm" else GRUSequence(width, width)

    def backward_peak() -> tuple[int, int]:
        y = torch.randn(steps, rows, width, requires_grad=True)
        out, _ = module(y, module.initial_carry(rows))
        grad = torch.randn_like(out)
        with _HeapPeak(libc) as heap:
            out.backward(grad)
        return heap.peak, out.nbytes
    backward_peak()  # the first backward also pays the engine's one-off allocations
    peak, output_bytes = backward_peak()
    one_step_of_gates = 4 * width * rows * 4
    assert peak <= 2 * output_bytes + 4 * one_step_of_gates, (peak, output_bytes)


def test_gatewise_recurrence_node_equals_its_step_by_step_cell_with_gradients():
    """PGT's T-GCN cell as one CPU node computes what the step-by-step cell computes (the masked path, every
    instance present), gradients of the inputs, the carry and L_z, L_r, L_h included; gradcheck in float64."""
    module = recurrent_modules()["gatewise"].double()
    rows, steps = 4, 5
    y = torch.randn(steps, rows, module.in_width, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    h0 = torch.randn(1, rows, module.out_width, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    everyone = SequenceMask(present=torch.ones(steps, rows, dtype=torch.bool))
    weights = torch.randn(steps, rows, module.out_width, dtype=torch.float64)

    def gradients(mask):
        inputs, carry = y.clone().requires_grad_(), h0.clone().requires_grad_()
        module.zero_grad()
        out, after = module(inputs, (carry,), *([mask] if mask is not None else []))
        ((out * weights).sum() + after[0].sum()).backward()
        return out.detach(), after[0].detach(), inputs.grad, carry.grad, module.hidden_weight.grad.clone()
    for fused, stepped in zip(gradients(None), gradients(everyone)):
        torch.testing.assert_close(fused, stepped)
    assert torch.autograd.gradcheck(lambda x, h, w: functional_call(module, {"hidden_weight": w}, (x, (h,)))[0],
                                    (y.clone().requires_grad_(), h0.clone().requires_grad_(),
                                     module.hidden_weight.detach().clone().requires_grad_()))


class _AddShapes(TorchDispatchMode):
    """The operand shapes of every aten add inside the block."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[tuple[int, ...], ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket is torch.ops.aten.add:
            self.shapes.append(tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("shape", [(8, 128, 6), (3, 7, 6), (5, 6)])
def test_bias_add_is_the_broadcast_add_in_wide_rows(shape):
    """GCN layers add their bias as [rows / k, k·F] + the bias repeated k times: the output is bit for bit the
    broadcast add, ∂b equal to rounding; rows in groups where the row count allows (none for 21 rows)."""
    out = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    bias = torch.randn(shape[-1], generator=torch.Generator().manual_seed(1), requires_grad=True)
    upstream = torch.randn(shape, generator=torch.Generator().manual_seed(2))
    with _AddShapes() as seen:
        added = add_bias(out, bias)
    assert torch.equal(added, out + bias)
    rows = out.numel() // shape[-1]
    expected_width = shape[-1] * (64 if rows % 64 == 0 else 1)
    assert seen.shapes[-1][0][-1] == expected_width
    (wide,) = torch.autograd.grad(added, bias, upstream)
    (broadcast,) = torch.autograd.grad(out + bias, bias, upstream)
    torch.testing.assert_close(wide, broadcast)
    transposed = out.transpose(0, -1)  # not contiguous: the plain broadcast add
    torch.testing.assert_close(add_bias(transposed, torch.zeros(transposed.shape[-1])), transposed)
