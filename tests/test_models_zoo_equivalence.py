"""The DGC/BLAD zoo (T-GCN, DySAT, MPNN-LSTM, WD-GCN) under every ESDG scheme follows `single`'s
loss curve (ESDG §6.4 Fig. 6), and what `snapshot` and `vertex` move is each model's analytic volume
(docs/discrete-schemes.md, "Models").

Modelled on tests/test_discrete_equivalence.py: one launch per world size trains every
(scheme, model) pair (trainers.discrete.experiment.run_experiments).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dgbench.models.attention import dysat
from dgbench.models.recurrent import mpnn_lstm, tgcn, wdgcn
from generators.esdg_random import build
from trainers.config import RunConfig
from trainers.discrete.experiment import run_experiments

MODELS = {"tgcn": tgcn, "dysat": dysat, "mpnn-lstm": mpnn_lstm, "wdgcn": wdgcn}
NODES, SNAPSHOTS, HIDDEN, EPOCHS = 64, 9, 6, 3
STEPS = SNAPSHOTS - 1  # input timesteps


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return build(out=tmp_path_factory.mktemp("zoo") / "s.zarr", nodes=NODES, snapshots=SNAPSHOTS,
                 edge_factor=3.0, seed=11)


def config(store: Path, scheme: str, model: str, nproc: int = 1, **options) -> RunConfig:
    return RunConfig(scheme=scheme, model=model, dataset=store, nproc=nproc, epochs=EPOCHS, hidden=HIDDEN,
                     seed=7, out=store.parent / "runs", **options)


def losses(record: dict) -> list[float]:
    return [e["loss"] for e in record["epochs"]]


def tag_elements(record: dict, prefix: str) -> int:
    """Elements sent under tags starting with ``prefix`` in epoch 0, summed over ranks."""
    return sum(s["elements"] for rank in record["epochs"][0]["per_rank"]
               for tag, s in rank["comm_by_tag"].items() if tag.startswith(prefix))


def built(model: str) -> torch.nn.Module:
    return MODELS[model](in_features=2, hidden=HIDDEN)


@pytest.fixture(scope="module")
def reference(store) -> dict[str, list[float]]:
    records = run_experiments([config(store, "single", m) for m in MODELS])
    return {m: losses(r) for m, r in zip(MODELS, records)}


def test_single_learns(reference):
    for model, curve in reference.items():
        assert all(np.isfinite(curve)) and curve[-1] < curve[0], (model, curve)


def test_checkpoint_blocks_match_single(store, reference):
    """nb = 1, 2 and T (one step per block: DySAT's carry then holds every earlier step)."""
    configs = [config(store, "checkpoint", m, blocks=nb) for m in MODELS for nb in (1, 2, STEPS)]
    for c, record in zip(configs, run_experiments(configs)):
        np.testing.assert_allclose(losses(record), reference[c.model], rtol=1e-5, err_msg=f"{c.model} nb={c.blocks}")


def check_distributed(store: Path, reference: dict[str, list[float]], nproc: int) -> None:
    configs = [config(store, scheme, m, nproc) for scheme in ("snapshot", "vertex") for m in MODELS]
    # snapshot with checkpoint blocks of 2 steps: at P = 4 half the ranks own no step of a block
    configs += [config(store, "snapshot", m, nproc, blocks=4) for m in ("dysat", "tgcn")]
    records = run_experiments(configs)
    for c, record in zip(configs, records):
        np.testing.assert_allclose(losses(record), reference[c.model], rtol=1e-5,
                                   err_msg=f"{c.scheme} {c.model} P={nproc} nb={c.blocks}")
        assert record["world_size"] == nproc
        assert tag_elements(record, "gradients") == nproc * sum(p.numel() for p in built(c.model).parameters())
    share = STEPS * NODES * (nproc - 1)  # (step, vertex) rows a rank does not keep, over all ranks
    for c, record in zip(configs[:len(MODELS)], records):  # snapshot, one block
        widths = built(c.model).feature_widths()
        for direction, column in (("to_vertex", 0), ("to_time", 1)):
            expected = sum(w[column] for w in widths) * share // nproc
            assert tag_elements(record, f"{direction}:forward") == expected, (c.model, direction)
            assert tag_elements(record, f"{direction}:backward") == expected, (c.model, direction)
    for c, record in zip(configs[len(MODELS):2 * len(MODELS)], records[len(MODELS):]):  # vertex
        rows = record["extra"]["connectivity_volume"]
        assert rows > 0
        # GCN models aggregate once at run time (layer 1's Ã X is precomputed): hidden columns; DySAT's
        # GAT brings each halo neighbour's score per head (1) and its values (hidden)
        halo = rows * (HIDDEN + 1 if c.model == "dysat" else HIDDEN)
        assert tag_elements(record, "halo:forward") == halo == tag_elements(record, "halo:backward"), c.model
        assert tag_elements(record, "to_") == 0


def test_snapshot_and_vertex_match_single_on_two_ranks(store, reference):
    check_distributed(store, reference, 2)


def test_snapshot_and_vertex_match_single_on_four_ranks(store, reference):
    check_distributed(store, reference, 4)
