"""BLAD §6: Eq. 3's deployment reward, Alg. 1's topology manager (valid orders, pairs exchanged where
overlap grows) and Eq. 4 / Table 4's equivalence of the exchanged order on real tensors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgbench.errors import DgbenchError
from dgbench.models.sparse import SparseOperator, csr_from_coo, csr_tensor, gcn_normalize
from dgbench.trainers.discrete.blad.reorder import (Operator, Placed, check_order, default_schedule, deployment_reward,
                                            gcn_pair, manage_topology, model_topology, operators_for)

MODELS = ("wdgcn", "tgcn", "evolvegcn-o", "cdgcn")


def _durations(topology, rng, graph_scale: float = 1.0):
    """Random durations: aggregation ~ width (memory op), update/RNN ~ constant (compute ops)."""
    out = []
    for slot in topology:
        if slot.role == "aggregate":
            per_column = graph_scale * rng.uniform(0.5, 2.0)
            out.append((per_column * slot.width, per_column * slot.swapped_width))
        else:
            d = rng.uniform(0.5, 3.0)
            out.append((d, d))
    return out


def _placed(compute: bool, start: float, end: float) -> Placed:
    op = Operator(0, 0, "update" if compute else "aggregate", 0, compute, end - start, end - start, False, False)
    return Placed(op, start, end, False)


def test_deployment_reward_eq3_by_hand():
    p1 = [_placed(True, 0, 2), _placed(False, 2, 5)]
    p2 = [_placed(False, 0, 3), _placed(True, 3, 4)]  # idle from 4: overlaps nothing
    # [0,2) compute vs memory: 2; [2,3) memory vs memory: 0; [3,4) memory vs compute: 1; [4,5) idle: 0
    assert deployment_reward(p1, p2) == pytest.approx(3.0)
    assert deployment_reward(p2, p1) == pytest.approx(3.0)
    assert deployment_reward(p1, p2, 0.5, 3.5) == pytest.approx(2.0)


def test_alg1_exchanges_the_second_process_pair_as_in_fig10():
    """Equal widths (hidden -> hidden): exchanging changes no duration. Both start at 0; p1 goes first
    and keeps its order; p2's aggregation would overlap p1's aggregation, so p2 runs its update first."""
    topology = model_topology("wdgcn", 6, 6)
    ops = operators_for(topology, [(3.0, 3.0)] * len(topology))
    schedule = manage_topology(ops, ops)
    first_roles = [p.op.role for p in schedule.queues[0]]
    second_roles = [p.op.role for p in schedule.queues[1]]
    assert first_roles == ["aggregate", "update", "aggregate", "update", "lstm"]
    assert second_roles[:2] == ["update", "aggregate"] and second_roles[-1] == "lstm"
    assert schedule.reward() > default_schedule(ops, ops).reward() == 0.0


def test_an_exchanged_pair_runs_with_the_exchanged_durations():
    """Exchanging layer 1's pair (2 -> 6 wide) makes the aggregation run over XW (6 columns, 3x the
    time of the 2 columns of X); the clock advances by what actually runs."""
    topology = model_topology("wdgcn", 2, 6)
    ops = operators_for(topology, [(1.0 * s.width, 1.0 * s.swapped_width) if s.role == "aggregate" else (2.0, 2.0)
                                   for s in topology])
    schedule = manage_topology(ops, ops)
    assert (0, 0) in schedule.exchanged[1]
    second = schedule.queues[1]
    assert [(p.op.role, p.end - p.start) for p in second[:2]] == [("update", 2.0), ("aggregate", 6.0)]
    assert second[-1].end == pytest.approx(sum(p.op.duration for p in second))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("literal", [False, True])
def test_alg1_orders_are_valid_topological_orders(model, literal):
    rng = np.random.default_rng(3)
    topology = model_topology(model, 4, 6)
    exchanged_any = False
    for trial in range(20):
        first = operators_for(topology, _durations(topology, rng), snapshots=int(rng.integers(1, 5)))
        second = operators_for(topology, _durations(topology, rng, 2.0), snapshots=int(rng.integers(1, 5)))
        schedule = manage_topology(first, second, literal=literal)
        for process, ops in enumerate((first, second)):
            check_order(schedule.order(process), ops)
            queue = schedule.queues[process]
            assert all(a.end == pytest.approx(b.start) for a, b in zip(queue, queue[1:]))  # back to back
        exchanged_any |= bool(schedule.exchanged[0] or schedule.exchanged[1])
        if model == "cdgcn":
            assert not (schedule.exchanged[0] or schedule.exchanged[1])  # [ÃX, ÃXW] needs ÃX: never exchanged
    assert exchanged_any or model == "cdgcn"


def test_check_order_rejects_invalid_orders():
    topology = model_topology("tgcn", 4, 6)
    ops = operators_for(topology, [(1.0, 1.0)] * len(topology), snapshots=2)
    check_order(ops, ops)
    swapped_pair = [ops[1], ops[0], *ops[2:]]  # update before aggregation of one GCN layer: allowed
    check_order(swapped_pair, ops)
    with pytest.raises(DgbenchError, match="runs before unit"):
        check_order([ops[2], ops[3], ops[0], ops[1], *ops[4:]], ops)  # layer 2 before layer 1
    with pytest.raises(DgbenchError, match="interrupts unit"):
        check_order([ops[0], ops[2], ops[1], *ops[3:]], ops)  # a layer's pair split by the next layer
    with pytest.raises(DgbenchError, match="previous snapshot"):
        check_order([*ops[5:], *ops[:5]], ops)  # snapshot 2's GRU step before snapshot 1's
    with pytest.raises(DgbenchError, match="each once"):
        check_order(ops[:-1], ops)
    cd = operators_for(model_topology("cdgcn", 4, 6), [(1.0, 1.0)] * 6)
    with pytest.raises(DgbenchError, match="fixed order"):
        check_order([cd[1], cd[0], *cd[2:]], cd)


def _collegemsg_graph(shared_data) -> tuple[np.ndarray, np.ndarray, int]:
    raw = np.loadtxt(shared_data / "snap_CollegeMsg" / "CollegeMsg.txt", dtype=np.int64)
    ids, inverse = np.unique(raw[:, :2], return_inverse=True)
    inverse = inverse.reshape(-1, 2)
    return inverse[:, 0], inverse[:, 1], len(ids)


def _random_graph(vertices: int = 200, edges: int = 800):
    rng = np.random.default_rng(0)
    return rng.integers(0, vertices, edges), rng.integers(0, vertices, edges), vertices


def _table4_operators(src, dst, n):
    """Table 4's H for GCNConv (L_sym, our Ã), RGCNConv (D^-1 Â, row-normalised) and ChebConv
    (Σ θ_k T_k(L̃) with L̃ = -Ã, K = 3, built as one sparse matrix)."""
    gcn = gcn_normalize(src, dst, None, n)
    loops = np.arange(n)
    rows, cols = np.r_[dst, loops], np.r_[src, loops]
    degree = np.bincount(rows, minlength=n).astype(np.float64)
    rgcn = csr_from_coo(rows, cols, 1.0 / degree[rows], (n, n))
    dense_l = -csr_tensor(gcn.to_torch()).to_dense().double()
    t0, t1 = torch.eye(n, dtype=torch.float64), dense_l
    t2 = 2 * dense_l @ t1 - t0
    cheb = 0.5 * t0 + 0.3 * t1 + 0.2 * t2
    nz = cheb.nonzero().numpy()
    cheb_csr = csr_from_coo(nz[:, 0], nz[:, 1], cheb[nz[:, 0], nz[:, 1]].numpy(), (n, n))
    return {"GCNConv": gcn, "RGCNConv": rgcn, "ChebConv": cheb_csr}


def _assert_eq4(src, dst, n, cheb: bool):
    torch.manual_seed(0)
    operators = _table4_operators(src, dst, n) if cheb else {"GCNConv": gcn_normalize(src, dst, None, n)}
    for name, csr in operators.items():
        graph = SparseOperator(csr.to_torch())
        x = torch.randn(n, 16, requires_grad=True)
        weight = torch.randn(16, 8, requires_grad=True)
        bias = torch.randn(8)
        outputs, grads = [], []
        for aggregate_first in (True, False):
            out = torch.relu(gcn_pair(graph, x, weight, bias, aggregate_first))
            outputs.append(out)
            grads.append(torch.autograd.grad(out.square().sum(), (x, weight)))
        torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-5, msg=name)
        for a, b in zip(*grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=name)
        # not a vacuous pass: the last op is the update in one order and the aggregation in the other
        assert "Mm" in gcn_pair(graph, x, weight, None, True).grad_fn.name()
        assert "SpMM" in gcn_pair(graph, x, weight, None, False).grad_fn.name()


def test_eq4_both_orders_equal_on_generated_graph_table4_operators():
    _assert_eq4(*_random_graph(), cheb=True)


@pytest.mark.realdata
def test_eq4_both_orders_equal_on_real_collegemsg(shared_data):
    _assert_eq4(*_collegemsg_graph(shared_data), cheb=False)


class _Runner:
    """Runs a T-GCN-shaped process (two GCN layers, ReLU, GRU over its snapshots) op by op in
    whatever order a schedule gives, so a reordered queue is executed for real."""

    def __init__(self, graphs, x0, hidden=8):
        torch.manual_seed(1)
        self.graphs, self.x0 = graphs, x0
        widths = [x0.shape[1], hidden, hidden]
        self.weights = [torch.randn(a, b) * 0.3 for a, b in zip(widths, widths[1:])]
        self.biases = [torch.randn(b) * 0.1 for b in widths[1:]]
        self.gru = torch.nn.GRUCell(hidden, hidden)

    def run(self, order: list[Operator]) -> torch.Tensor:
        value = {s: self.x0 for s in range(len(self.graphs))}
        partial: dict[tuple[int, int], tuple[str, torch.Tensor]] = {}
        state = torch.zeros(self.x0.shape[0], self.gru.hidden_size)
        outputs = {}
        for op in order:
            s, layer = op.snapshot, op.unit
            if op.role == "gru":
                state = self.gru(value[s], state)
                outputs[s] = state
                continue
            key = (s, layer)
            if key not in partial:  # first op of the pair
                first = torch.sparse.mm(self.graphs[s], value[s]) if op.role == "aggregate" \
                    else value[s] @ self.weights[layer]
                partial[key] = (op.role, first)
            else:  # second op closes the pair: bias and activation after both (Eq. 4)
                role, first = partial.pop(key)
                done = first @ self.weights[layer] if op.role == "update" else torch.sparse.mm(self.graphs[s], first)
                value[s] = torch.relu(done + self.biases[layer])
        return torch.stack([outputs[s] for s in sorted(outputs)])


def test_reordered_queues_give_the_same_outputs_on_real_tensors():
    src, dst, n = _random_graph(400, 2400)
    rng = np.random.default_rng(5)
    graphs = []
    for _ in range(3):
        keep = rng.random(len(src)) < 0.7
        csr = gcn_normalize(src[keep], dst[keep], None, n).to_torch()
        graphs.append(csr_tensor(csr))
    x0 = torch.randn(n, 8)
    topology = model_topology("tgcn", 8, 8)
    first = operators_for(topology, _durations(topology, rng), snapshots=3)
    second = operators_for(topology, _durations(topology, rng, 3.0), snapshots=3)
    schedule = manage_topology(second, first)
    runner = _Runner(graphs, x0)
    exchanged = set()
    for process, ops in enumerate((second, first)):
        reordered = schedule.order(process)
        exchanged |= schedule.exchanged[process]
        torch.testing.assert_close(runner.run(reordered), runner.run(ops), rtol=1e-5, atol=1e-6)
    assert exchanged, "the instance must exchange at least one pair for the comparison to mean anything"
