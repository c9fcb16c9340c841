"""DyGNN (T-GCN §2.2, Eq. 3-7): each interaction updates its endpoints immediately, so a batch processed in
waves equals the same events processed one at a time; time-aware forgetting; gradients reach every part."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgbench.models.dygnn import DyGNN, TimeAwareLSTM, wave_schedule
from dgbench.models.temporal import BatchInputs


def events(seed: int = 0, count: int = 60, vertices: int = 7):
    """Few vertices, so vertices repeat within a batch, as sources, destinations, negatives and self-loops."""
    rng = np.random.default_rng(seed)
    src, dst, neg = (rng.integers(0, vertices, count) for _ in range(3))
    t = np.sort(rng.integers(0, 50, count)).astype(np.float64)
    return src, dst, neg, t


def inputs_for(model, rows_of, src, dst, neg, t, with_ids=True):
    ids = np.concatenate([src, dst, neg])
    inputs = BatchInputs(torch.stack([rows_of[int(v)] for v in ids]), torch.tensor(t, dtype=torch.float64),
                         torch.zeros(len(t), 0, dtype=torch.float64))
    if with_ids:
        inputs.root_ids = torch.from_numpy(ids)
    return inputs


def write_back(rows_of, src, dst, new_rows):
    """The loop's priority write-back: per vertex the row of its latest occurrence (dst after src)."""
    b = len(src)
    for j in range(b):
        rows_of[int(src[j])] = new_rows[j]
        rows_of[int(dst[j])] = new_rows[b + j]


@pytest.fixture
def model():
    torch.manual_seed(0)
    return DyGNN(memory_dim=8, edge_dim=0, time_scale=3.0).double()


def test_a_batch_equals_its_events_one_at_a_time(model):
    src, dst, neg, t = events()
    empty = model.layout.empty_rows(7).double()
    one = {v: empty[v] for v in range(7)}
    pos_seq, neg_seq = [], []
    for j in range(len(t)):
        out = model(inputs_for(model, one, src[j:j + 1], dst[j:j + 1], neg[j:j + 1], t[j:j + 1]))
        pos_seq.append(out.pos_logits)
        neg_seq.append(out.neg_logits)
        write_back(one, src[j:j + 1], dst[j:j + 1], out.new_rows)
    batch = {v: empty[v] for v in range(7)}
    out = model(inputs_for(model, batch, src, dst, neg, t))
    write_back(batch, src, dst, out.new_rows)
    torch.testing.assert_close(out.pos_logits, torch.cat(pos_seq), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.neg_logits, torch.cat(neg_seq), rtol=1e-12, atol=1e-12)
    for v in range(7):
        torch.testing.assert_close(batch[v], one[v], rtol=1e-12, atol=1e-12)
    assert (out.new_rows[:, -1] >= 0).any() and (out.new_rows[:, -2] >= 0).any()  # t_s, t_g recorded


def test_without_vertex_ids_a_batch_is_the_batch_parallel_approximation(model):
    src, dst, neg, t = events()
    empty = model.layout.empty_rows(7).double()
    rows = {v: empty[v] for v in range(7)}
    sequential = model(inputs_for(model, rows, src, dst, neg, t))
    parallel = model(inputs_for(model, rows, src, dst, neg, t, with_ids=False))
    torch.testing.assert_close(sequential.pos_logits[:1], parallel.pos_logits[:1])  # the first event agrees
    assert not torch.allclose(sequential.pos_logits, parallel.pos_logits)  # later ones see earlier updates


def test_wave_schedule_orders_every_conflict():
    rng = np.random.default_rng(3)
    for _ in range(50):
        src, dst, neg = (rng.integers(0, 5, 30) for _ in range(3))
        waves = wave_schedule(src, dst, neg, 5)
        for j in range(30):
            for k in range(j + 1, 30):
                writes_j, writes_k = {src[j], dst[j]}, {src[k], dst[k]}
                reads_k, reads_j = writes_k | {neg[k]}, writes_j | {neg[j]}
                if writes_j & reads_k:
                    assert waves[k] > waves[j]  # k reads what j wrote: a later wave
                if reads_j & writes_k:
                    assert waves[k] >= waves[j]  # j reads before k writes (reads come first in a wave)


def test_time_aware_forgetting_and_gradients(model):
    lstm = TimeAwareLSTM(4).double()
    cell, hidden, e = (torch.randn(3, 4, dtype=torch.float64) for _ in range(3))
    recent, _ = lstm(cell, hidden, torch.zeros(3, dtype=torch.float64), e)
    old, _ = lstm(cell, hidden, torch.full((3,), 1e6, dtype=torch.float64), e)
    assert not torch.allclose(recent, old)  # Δt changes how much of the short-term cell survives
    src, dst, neg, t = events(seed=1)
    empty = model.layout.empty_rows(7).double()
    out = model(inputs_for(model, {v: empty[v] for v in range(7)}, src, dst, neg, t * 1e6))
    loss = torch.nn.functional.softplus(-out.pos_logits).sum() + torch.nn.functional.softplus(out.neg_logits).sum()
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    assert not out.new_rows.requires_grad
