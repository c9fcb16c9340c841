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
