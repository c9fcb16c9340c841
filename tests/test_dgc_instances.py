"""Instance placement plans (DGC's PGC and PSS): every rank simulated in one process reproduces the
single-process aggregation and time encoders, and the rows that cross equal the chunk cut's count."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgbench.models.contract import SequenceMask
from dgbench.models.sequence import CausalSelfAttention, GRUSequence, LSTMSequence
from dgbench.models.sparse import csr_tensor, gcn_normalize
from dgbench.trainers.discrete.dgc.chunks import (TrafficProfile, assign_chunks, build_supergraph, chunk_pair_bytes,
                                                  cut_rows, label_propagation, pss_parts)
from dgbench.trainers.discrete.dgc.instance_exec import aggregate_groups, group_operators, run_attention, run_round
from dgbench.trainers.discrete.dgc.instances import build_instance_plans, latest_instances

PARTS = 3


def problem(presence: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    nodes, steps = 30, 6
    snaps = [(rng.integers(0, nodes, 40), rng.integers(0, nodes, 40)) for _ in range(steps)]
    graph = build_supergraph(snaps, presence=presence, num_vertices=nodes)
    adjacency = [gcn_normalize(s, d, None, nodes) for s, d in snaps]
    return graph, adjacency


def placements(graph):
    profile = TrafficProfile((4,), (4,))
    chunks = label_propagation(graph, profile, max_chunk_size=12, seed=2)
    assignment = assign_chunks(chunks.sizes.astype(float), chunk_pair_bytes(graph, profile, chunks.chunk_of), PARTS)
    rng = np.random.default_rng(5)
    return {"chunks": assignment.rank_of_chunk[chunks.chunk_of], "pss": pss_parts(graph, PARTS),
            "random": rng.integers(0, PARTS, graph.num_instances)}


def grid_values(plan, graph, dense: torch.Tensor) -> torch.Tensor:
    """The rank's flat grid with every cell of one of its rows set from the all-vertex tensor."""
    steps = np.repeat(np.arange(graph.num_snapshots), len(plan.rows))
    vertices = np.tile(plan.rows, graph.num_snapshots)
    return dense[steps, vertices]


def sent_values(plans, sender, receiver, cells_values, exchange_of):
    ex = exchange_of(plans[sender])
    bounds = np.r_[0, np.cumsum(ex.send_splits)]
    return cells_values[sender][torch.from_numpy(ex.send_cells[bounds[receiver]:bounds[receiver + 1]])]


def simulate_exchange(plans, values, exchange_of):
    """What each rank receives: senders in rank order, each sender's rows for it in send order."""
    return [torch.cat([sent_values(plans, q, p, values, exchange_of) for q in range(len(plans))])
            for p in range(len(plans))]


@pytest.mark.parametrize("presence", ["edges", "all"])
def test_spatial_halo_and_local_operator_reproduce_the_aggregation(presence):
    graph, adjacency = problem(presence)
    x = torch.randn(graph.num_snapshots, graph.num_vertices, 3)
    reference = torch.stack([csr_tensor(a.to_torch()) @ x[t] for t, a in enumerate(adjacency)])
    for name, part in placements(graph).items():
        plans = build_instance_plans(graph, part, PARTS, adjacency)
        grids = [grid_values(p, graph, x) for p in plans]
        halos = simulate_exchange(plans, grids, lambda plan: plan.spatial)
        for plan, grid, halo in zip(plans, grids, halos):
            arriving = plan.spatial.recv_instances
            torch.testing.assert_close(halo, x[graph.step[arriving], graph.vertex[arriving]])
            own = np.flatnonzero(plan.own.reshape(-1))
            groups = group_operators(plan.operator, [own[: len(own) // 2], own[len(own) // 2:]], torch.device("cpu"))
            out = aggregate_groups(groups, torch.cat([grid, halo]), grid.shape[0])
            expected = grid_values(plan, graph, reference)
            torch.testing.assert_close(out[own], expected[own], msg=f"{name} rank {plan.rank}")
        rows = sum(p.spatial.rows_sent for p in plans)
        assert rows == cut_rows(graph, TrafficProfile((1,), (1,)), part, PARTS).spatial.sum()


def dense_present(graph) -> torch.Tensor:
    present = torch.zeros(graph.num_snapshots, graph.num_vertices, dtype=torch.bool)
    present[graph.step, graph.vertex] = True
    return present


@pytest.mark.parametrize("presence", ["edges", "all"])
@pytest.mark.parametrize("make", [lambda: GRUSequence(3, 4), lambda: LSTMSequence(3, 4, layers=2)], ids=["gru", "lstm"])
def test_recurrent_rounds_hand_the_carry_on(presence, make):
    torch.manual_seed(0)
    graph, adjacency = problem(presence, seed=1)
    module = make()
    y = torch.randn(graph.num_snapshots, graph.num_vertices, 3)
    reference, _ = module(y, module.initial_carry(graph.num_vertices), SequenceMask(present=dense_present(graph)))
    for name, part in placements(graph).items():
        plans = build_instance_plans(graph, part, PARTS, adjacency)
        results = {}
        for fuse in (True, False):
            grids = [grid_values(p, graph, y) for p in plans]
            outputs = [torch.zeros(g.shape[0], 4) for g in grids]
            arriving = [None] * PARTS
            for k in range(len(plans[0].rounds)):
                finals = []
                for p, plan in enumerate(plans):
                    out, final = run_round(module, grids[p], plan.rounds[k], arriving[p], fuse)
                    outputs[p][torch.from_numpy(plan.rounds[k].cells)] = out.detach()
                    finals.append(final)
                arriving = [torch.cat([finals[q][_slice(plans[q].rounds[k].send_splits, p)] for q in range(PARTS)])
                            for p in range(PARTS)]
            results[fuse] = outputs
            for plan, out in zip(plans, outputs):
                own = np.flatnonzero(plan.own.reshape(-1))
                torch.testing.assert_close(out[own], grid_values(plan, graph, reference.detach())[own],
                                           msg=f"{name} rank {plan.rank}")
        assert all(torch.equal(a, b) for a, b in zip(results[True], results[False]))  # fusion: bit for bit
        carries = sum(sum(r.send_splits) for plan in plans for r in plan.rounds)
        assert carries == cut_rows(graph, TrafficProfile((1,), (1,)), part, PARTS).temporal.sum()
        if name == "pss":
            assert len(plans[0].rounds) <= PARTS  # the state handed rank to rank


def _slice(splits, index):
    bounds = np.r_[0, np.cumsum(splits)]
    return slice(int(bounds[index]), int(bounds[index + 1]))


@pytest.mark.parametrize("presence", ["edges", "all"])
def test_attention_reads_the_history_it_needs(presence):
    torch.manual_seed(0)
    graph, adjacency = problem(presence, seed=2)
    module = CausalSelfAttention(4)
    y = torch.randn(graph.num_snapshots, graph.num_vertices, 4)
    present = dense_present(graph)
    reference, _ = module(y, module.initial_carry(graph.num_vertices), SequenceMask(present=present))
    for name, part in placements(graph).items():
        plans = build_instance_plans(graph, part, PARTS, adjacency)
        grids = [grid_values(p, graph, y) for p in plans]
        history = simulate_exchange(plans, grids, lambda plan: plan.history)
        for plan, grid, received in zip(plans, grids, history):
            own_only = grid * torch.from_numpy(plan.own.reshape(-1, 1))  # what the rank computed itself
            out = run_attention(module, own_only.view(graph.num_snapshots, -1, 4), plan, received).reshape(-1, 4)
            own = np.flatnonzero(plan.own.reshape(-1))
            torch.testing.assert_close(out[own], grid_values(plan, graph, reference.detach())[own],
                                       msg=f"{name} rank {plan.rank}")
        rows = sum(p.history.rows_sent for p in plans)
        assert rows == cut_rows(graph, TrafficProfile((1,), (1,), temporal_reach="all"), part, PARTS).temporal.sum()


def test_latest_instances_by_hand():
    graph = build_supergraph([(np.array([0]), np.array([1])), (np.array([2]), np.array([1])),
                              (np.array([0]), np.array([2]))], num_vertices=3)
    # instances: t0: 0->(0) 1->(1); t1: 1->(2) 2->(3); t2: 0->(4) 2->(5)
    assert latest_instances(graph).tolist() == [[0, 1, -1], [0, 2, 3], [4, 2, 5]]
