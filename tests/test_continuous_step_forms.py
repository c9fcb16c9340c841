"""The TGN/JODIE/APAN training step's faster forms train like the plain ones: per-batch losses of a ``single``
epoch equal, to float32 rounding (rtol 1e-5), those of the plain forms (TGN's attention over the padded grid
always, the predictor called once per candidate, APAN's key and value products apart, per-parameter Adam),
under both protocols.
See docs/performance.md ("The TGN step")."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dgbench.dist import Comm, DistContext, PhaseTimer
from dgbench.models import temporal
from dgbench.models.temporal import BatchInputs, BatchOutputs, TemporalModel
from dgbench.trainers.config import RunConfig
from dgbench.trainers.continuous.family import build_trainer, partition_problem
from dgbench.trainers.continuous.loop import ContinuousTrainer
from dgbench.trainers.experiment import resolve


@pytest.fixture(scope="module")
def stream_store(tmp_path_factory) -> Path:
    from dgbench.generators.stream import build
    return build(out=tmp_path_factory.mktemp("step-forms") / "stream.zarr", users=80, items=60, events=1500,
                 edge_dim=3, seed=4)


def _plain_outputs(self: TemporalModel, inputs: BatchInputs, h: torch.Tensor, endpoint_view: torch.Tensor
                   ) -> BatchOutputs:
    """The predictor on each candidate block apart (the sources projected once per candidate)."""
    b = len(inputs.t)
    pos = self.predictor(h[:b], h[b:2 * b])
    neg = self.predictor(h[:b], h[2 * b:])
    new_rows, delivered = self.write_rows(inputs, endpoint_view)
    return BatchOutputs(pos, neg, new_rows, delivered)


def _plain_apan_mailbox(self, rows: torch.Tensor, hidden: torch.Tensor, query_t: torch.Tensor) -> torch.Tensor:
    """APAN's attention over the mailbox with a key product and a value product apart."""
    import math
    _, _, mails, mail_ts = self.layout.split(rows)
    roots, slots = mail_ts.shape
    valid = mail_ts >= 0
    encoded_dt = self.time_encoder((query_t[:, None] - mail_ts).reshape(-1)).view(roots, slots, -1)
    keys_in = torch.cat([mails, encoded_dt], dim=2)
    head_dim = self.memory_dim // self.heads
    q = self.query(hidden).view(roots, 1, self.heads, head_dim)
    keys = self.key(keys_in).view(roots, slots, self.heads, head_dim)
    values = self.value(keys_in).view(roots, slots, self.heads, head_dim)
    scores = ((q * keys).sum(-1) / math.sqrt(head_dim)).masked_fill(~valid[:, :, None], -1e9)
    weights = torch.softmax(scores, dim=1) * valid[:, :, None]
    return (weights[..., None] * values).sum(1).flatten(1)


def _epoch_losses(store: Path, model: str, protocol: str) -> list[float]:
    run = resolve(RunConfig("single", model, store, batch_size=100, memory_dim=8, neighbors=5, lr=0.01, seed=0,
                            protocol=protocol, extra={"prefetch": 0}))
    ctx = DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))
    problem = partition_problem(run)
    trainer: ContinuousTrainer = build_trainer(ctx, run, run.scheme.partition(problem, 1, run.scheme_options),
                                               problem)
    trainer.train_epoch(0, PhaseTimer())
    return trainer.losses


@pytest.mark.parametrize("protocol", ["tgl", "batch"])
@pytest.mark.parametrize("model", ["tgn", "jodie", "apan"])
def test_fast_step_forms_train_like_the_plain_ones(stream_store, monkeypatch, model, protocol):
    torch.manual_seed(0)
    fast = _epoch_losses(stream_store, model, protocol)
    with monkeypatch.context() as plain:
        plain.setattr(temporal, "FLAT_ATTENTION_DENSITY", 0.0)  # the grid form everywhere
        plain.setattr(TemporalModel, "_outputs", _plain_outputs)
        plain.setattr(temporal.APAN, "_attend_mailbox", _plain_apan_mailbox)
        original_adam = torch.optim.Adam
        plain.setattr(torch.optim, "Adam", lambda params, lr, fused=None: original_adam(params, lr=lr))
        reference = _epoch_losses(stream_store, model, protocol)
    assert len(fast) == len(reference) > 5
    np.testing.assert_allclose(fast, reference, rtol=1e-5)
    if model == "tgn":  # the real-slot form everywhere trains alike too
        with monkeypatch.context() as real_slots:
            real_slots.setattr(temporal, "FLAT_ATTENTION_DENSITY", 2.0)
            np.testing.assert_allclose(_epoch_losses(stream_store, model, protocol), reference, rtol=1e-5)


@pytest.mark.parametrize("unused_block", [False, True])
def test_gather_rows_is_indexing_with_its_gradients(unused_block):
    """gather_rows (one node over several blocks, index_add_ backward) gives each block's rows and, to every
    block that needs one, the gradient indexing gives (float64, repeated rows summed); a block whose rows
    take no part in the loss, or that needs no gradient, gets none."""
    rng = np.random.default_rng(3)
    index = torch.from_numpy(rng.integers(0, 7, 40))
    blocks = [torch.from_numpy(rng.normal(size=(7, width))).requires_grad_() for width in (5, 3)]
    constant = torch.from_numpy(rng.normal(size=(7, 2)))
    got = temporal.gather_rows(index, *blocks, constant)
    for rows, block in zip(got, [*blocks, constant]):
        assert torch.equal(rows, block[index])
    assert not got[2].requires_grad
    weights = [torch.from_numpy(rng.normal(size=rows.shape)) for rows in got[:2]]
    used = got[:1] if unused_block else got[:2]
    grads = torch.autograd.grad(sum((rows * w).sum() for rows, w in zip(used, weights)), blocks, allow_unused=True)
    want = torch.autograd.grad(sum((block[index] * w).sum() for block, w in zip(blocks[:len(used)], weights)),
                               blocks[:len(used)])
    torch.testing.assert_close(grads[0], want[0], rtol=1e-12, atol=1e-12)
    if unused_block:
        assert grads[1] is None
    else:
        torch.testing.assert_close(grads[1], want[1], rtol=1e-12, atol=1e-12)


def _tgn_losses_float64(store: Path, protocol: str = "tgl") -> list[float]:
    """Per-batch losses of a float64 ``single`` TGN epoch under ``protocol`` (the step's forms compared to 1e-12)."""
    run = resolve(RunConfig("single", "tgn", store, batch_size=100, memory_dim=8, neighbors=5, lr=0.01, seed=0,
                            protocol=protocol, extra={"prefetch": 0}))
    ctx = DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))
    problem = partition_problem(run)
    torch.manual_seed(0)
    trainer: ContinuousTrainer = build_trainer(ctx, run, run.scheme.partition(problem, 1, run.scheme_options),
                                               problem)
    trainer.model.double()
    trainer.dtype = torch.float64
    trainer.optimizer = torch.optim.Adam(trainer.model.parameters(), lr=0.01)
    trainer.state.table = trainer.state.table.double()
    trainer.train_epoch(0, PhaseTimer())
    return trainer.losses


@pytest.mark.parametrize("protocol", ["tgl", "batch"])
@pytest.mark.parametrize("density", [0.0, 2.0], ids=["grid", "real-slots"])
def test_tgn_reads_neighbour_views_from_the_pairs_as_from_the_positions(stream_store, monkeypatch, density, protocol):
    """TGN's training step reading its neighbours' views straight from the distinct (vertex, time) pairs
    (PairViews; the grid holds pair 0's view in its padding cells) trains as with the views gathered per
    position first: float64 losses equal to 1e-12, in both attention forms, under both protocols (under
    ``batch`` the pairs are the batch's distinct vertices)."""
    monkeypatch.setattr(temporal, "FLAT_ATTENTION_DENSITY", density)
    seen: list[type] = []
    attend = temporal.TGN._attend

    def recording_attend(self, inputs, query, neighbor_hidden):
        seen.append(type(neighbor_hidden))
        return attend(self, inputs, query, neighbor_hidden)

    monkeypatch.setattr(temporal.TGN, "_attend", recording_attend)
    paired = _tgn_losses_float64(stream_store, protocol)
    assert seen and set(seen) == {temporal.PairViews}
    seen.clear()
    monkeypatch.setattr(temporal.TGN, "reads_pair_views", False)
    gathered = _tgn_losses_float64(stream_store, protocol)
    assert seen and set(seen) == {torch.Tensor}
    assert len(paired) == len(gathered) > 5
    np.testing.assert_allclose(paired, gathered, rtol=1e-12, atol=0)


@pytest.mark.parametrize("protocol", ["tgl", "batch"])
def test_one_rank_steps_without_the_gradient_sum_exactly_as_with_it(stream_store, protocol):
    """One rank without staleness steps on its own gradients (no flat all-reduce vector copied back into them):
    the same losses and parameters, bit for bit, as through the gradient sum (which gives a parameter without
    a gradient zeros, so Adam still moves it by its momentum: under --protocol batch a batch without
    neighbours leaves the attention's parameters without one)."""
    trained = []
    for sums_gradients in (False, True):
        run = resolve(RunConfig("single", "tgn", stream_store, batch_size=100, memory_dim=8, neighbors=5, lr=0.01,
                                seed=0, protocol=protocol, extra={"prefetch": 0}))
        ctx = DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))
        problem = partition_problem(run)
        torch.manual_seed(0)
        trainer = build_trainer(ctx, run, run.scheme.partition(problem, 1, run.scheme_options), problem)
        assert trainer.sums_gradients is False
        trainer.sums_gradients = sums_gradients
        trainer.train_epoch(0, PhaseTimer())
        trained.append((trainer.losses, trainer.model.state_dict()))
    (alone, alone_state), (summed, summed_state) = trained
    assert len(alone) == len(summed) > 5 and alone == summed
    assert all(torch.equal(alone_state[name], summed_state[name]) for name in summed_state)
