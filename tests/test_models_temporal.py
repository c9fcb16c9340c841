"""The continuous-time models stay trainable on second-valued time stamps (LastFM-like Δt of 10^3-10^7 s).

Regression for the chance-level APAN / unstable TGN on LastFM: a trainable time encoding lost its slow
frequencies to the first Adam step and re-randomised its phases w Δt at every later step.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dgbench.launch import launch
from dgbench.models import temporal
from dgbench.models.temporal import BatchInputs, build_temporal_model
from dgbench.registry import MODELS, model_of
from dgbench.store import EdgeStreamStoreWriter
from dgbench.generators.stream import draw_partners, zipf_weights
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import resolve, train_runs

SECONDS_PER_GAP = 86400.0  # daily events: Δt between a vertex's events spans 10^4-10^7 s (LastFM-like)


def _one_adam_step(model, delta_t: torch.Tensor) -> None:
    """A training step on a batch whose memory updates see the time differences ``delta_t``."""
    b = len(delta_t)
    rows = model.layout.empty_rows(3 * b)
    rows[:, model.layout.mail_ts_start] = 0.0  # one mail at t = 0 in every mailbox
    rows[:, model.layout.mails_start:model.layout.mail_ts_start] = torch.randn(3 * b, model.layout.mail_dim
                                                                                * model.layout.mail_slots)
    inputs = BatchInputs(rows, delta_t, torch.zeros(b, model.edge_dim))
    if model.uses_neighbors:
        inputs.neighbor_rows = rows[:0]
        inputs.neighbor_mask = torch.zeros(3 * b, 1, dtype=torch.bool)
        inputs.neighbor_dt = torch.zeros(3 * b, 1)
        inputs.neighbor_edge_features = torch.zeros(3 * b, 1, model.edge_dim)
    out = model(inputs)
    loss = torch.nn.functional.softplus(-out.pos_logits).sum() + torch.nn.functional.softplus(out.neg_logits).sum()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss.backward()
    optimizer.step()


# Models with a trainable time encoding (TGN §3.1, JODIE's projection, APAN's attention); DyGNN decays with
# Δt instead and EdgeBank is a baseline without parameters.
TIME_ENCODED = ("apan", "jodie", "tgn")


def _time_encoders(name: str) -> list[torch.nn.Module]:
    model = model_of("continuous", name).build(memory_dim=8, edge_dim=2, time_shift=0.0, time_scale=1.0)
    return [m for m in model.modules() if isinstance(m, temporal.TimeEncoder)] if isinstance(model, torch.nn.Module) \
        else []


def test_the_time_encoded_list_names_every_model_with_a_time_encoder():
    """So a new model with a trainable time encoding is covered by the test below."""
    registered = sorted(m.name for m in MODELS.values() if m.family == "continuous")
    assert set(TIME_ENCODED) <= set(registered)
    assert sorted(name for name in registered if _time_encoders(name)) == sorted(TIME_ENCODED)


@pytest.mark.parametrize("name", TIME_ENCODED)
def test_time_encoding_keeps_its_frequencies_through_training(name):
    torch.manual_seed(0)
    model = build_temporal_model(name, memory_dim=8, edge_dim=2)
    encoders = [m for m in model.modules() if isinstance(m, temporal.TimeEncoder)]
    assert encoders
    probe = torch.tensor([0.0, 60.0, 3600.0, 86400.0, 1e6, 1e7])
    before = [e(probe).detach().clone() for e in encoders]
    _one_adam_step(model, torch.tensor([1e3, 1e5, 1e6, 1e7]))
    for encoder, expected in zip(encoders, before):
        torch.testing.assert_close(encoder(probe), expected, rtol=0, atol=0)


def _repeat_stream(out: Path, users: int = 30, items: int = 60, events: int = 4000, seed: int = 0) -> Path:
    """Bipartite stream where a user mostly re-plays its last item, with hourly second-valued times."""
    rng = np.random.default_rng(seed)
    src = rng.choice(users, size=events, p=zipf_weights(users, 0.5, rng))
    dst = draw_partners(src, zipf_weights(items, 0.5, rng), 0.85, np.full(users, -1), rng) + users
    t = np.cumsum(rng.exponential(SECONDS_PER_GAP, size=events))
    features = np.zeros((events, 2), dtype=np.float32)  # LastFM's two all-zero features
    with EdgeStreamStoreWriter(out, num_nodes=users + items, directed=True, provenance={"test": "repeat"},
                               time_dtype=np.float64, edge_feature_dim=2,
                               bipartite={"num_users": users, "num_items": items}) as writer:
        writer.append_events(src, dst, t, edge_features=features)
        return writer.close()


def _train_all(ctx, dataset: Path) -> dict[str, float]:
    out = {}
    for model in ("apan", "tgn"):
        config = RunConfig(scheme="single", model=model, dataset=dataset, nproc=1, epochs=2, batch_size=200,
                           memory_dim=32, neighbors=5, lr=0.003, seed=0, extra={"prefetch": 0})
        out[model] = train_runs(ctx, [resolve(config)])[0]["figures"][-1]["metrics"]["test"]["ap"]
    return out


def test_models_learn_a_repeat_stream_with_day_scale_gaps(tmp_path):
    dataset = _repeat_stream(tmp_path / "repeat.zarr")
    ap = launch(_train_all, 1, (dataset,))[0]
    # with the trained time encoding (seed 0): APAN 0.51, TGN 0.65; fixed frequencies: 0.58, 0.71
    assert ap["apan"] > 0.55, ap
    assert ap["tgn"] > 0.68, ap
