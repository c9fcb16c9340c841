"""The DGC/BLAD zoo (T-GCN, DySAT, MPNN-LSTM, WD-GCN) under every ESDG scheme follows `single`'s
loss curve (ESDG §6.4 Fig. 6), and what `snapshot` and `vertex` move is each model's analytic volume
(docs/discrete-schemes.md, "Models").

Modelled on tests/test_discrete_equivalence.py: one launch per world size trains every
(scheme, model) pair (dgbench.trainers.experiment.run_experiments).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dgbench.models.attention import dysat
from dgbench.models.recurrent import mpnn_lstm, tgcn, wdgcn
from dgbench.generators.esdg_random import build
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import run_experiments

MODELS = {"tgcn": tgcn, "dysat": dysat, "mpnn-lstm": mpnn_lstm, "wdgcn": wdgcn}
# model options through the run's options (their CLI flags: --tgcn-variant, --gcn-layers)
VARIANTS = {"tgcn": {"variant": "pygt"}, "wdgcn": {"gcn_layers": 1}}
NODES, SNAPSHOTS, HIDDEN, EPOCHS = 64, 9, 6, 3
STEPS = SNAPSHOTS - 1  # input timesteps


pytestmark = pytest.mark.usefixtures("one_thread")


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


def built(model: str, **options) -> torch.nn.Module:
    return MODELS[model](in_features=2, hidden=HIDDEN, **options)


def key(c: RunConfig) -> tuple[str, tuple]:
    """(model, its own options) of a run: what its reference curve is keyed by."""
    own = {k: v for k, v in c.options.items() if k in VARIANTS.get(c.model, {})}
    return c.model, tuple(sorted(own.items()))


@pytest.fixture(scope="module")
def reference(store) -> dict[tuple[str, tuple], list[float]]:
    configs = [config(store, "single", m) for m in MODELS] + [config(store, "single", m, **o)
                                                             for m, o in VARIANTS.items()]
    return {key(c): losses(r) for c, r in zip(configs, run_experiments(configs))}


def test_single_learns(reference):
    for model, curve in reference.items():
        assert all(np.isfinite(curve)) and curve[-1] < curve[0], (model, curve)


def test_checkpoint_blocks_match_single(store, reference):
    """nb = 1, 2 and T (one step per block: DySAT's carry then holds every earlier step)."""
    configs = [config(store, "checkpoint", m, blocks=nb) for m in MODELS for nb in (1, 2, STEPS)]
    configs += [config(store, "checkpoint", m, blocks=STEPS, **o) for m, o in VARIANTS.items()]
    for c, record in zip(configs, run_experiments(configs)):
        np.testing.assert_allclose(losses(record), reference[key(c)], rtol=1e-5, err_msg=f"{key(c)} {c.options}")


def check_distributed(store: Path, reference: dict[tuple[str, tuple], list[float]], nproc: int,
                      variants: bool) -> None:
    configs = [config(store, scheme, m, nproc) for scheme in ("snapshot", "vertex") for m in MODELS]
    # snapshot with checkpoint blocks of 2 steps: at P = 4 half the ranks own no step of a block
    configs += [config(store, "snapshot", m, nproc, blocks=4) for m in ("dysat", "tgcn")]
    if variants:
        configs += [config(store, scheme, m, nproc, **o) for scheme in ("snapshot", "vertex")
                    for m, o in VARIANTS.items()]
    records = run_experiments(configs)
    for c, record in zip(configs, records):
        np.testing.assert_allclose(losses(record), reference[key(c)], rtol=1e-5,
                                   err_msg=f"{c.scheme} {key(c)} P={nproc} {c.options}")
        assert record["world_size"] == nproc
        parameters = sum(p.numel() for p in built(c.model, **dict(key(c)[1])).parameters())
        assert tag_elements(record, "gradients") == nproc * parameters
    share = STEPS * NODES * (nproc - 1)  # (step, vertex) rows a rank does not keep, over all ranks
    for c, record in zip(configs, records):
        if "blocks" in c.options:
            continue
        if c.scheme == "snapshot":  # re-distribution: the model's (to_vertex, to_time) widths per layer
            to_vertex, to_time = MOVED[key(c)]
            for direction, width in (("to_vertex", to_vertex), ("to_time", to_time)):
                expected = width * share // nproc
                assert tag_elements(record, f"{direction}:forward") == expected, (key(c), direction)
                assert tag_elements(record, f"{direction}:backward") == expected, (key(c), direction)
            assert built(c.model, **dict(key(c)[1])).feature_widths()[-1] == (to_vertex, to_time)
        else:  # vertex: halo rows (the partition's connectivity volume) times the model's exchange width
            rows = record["extra"]["connectivity_volume"]
            assert rows > 0
            halo = rows * HALO_WIDTH[key(c)]
            assert tag_elements(record, "halo:forward") == halo == tag_elements(record, "halo:backward"), key(c)
            assert tag_elements(record, "to_") == 0


# The analytic volumes of docs/discrete-schemes.md ("Models"), written out per model at hidden H = 6:
# snapshot moves T·N·(P-1)/P rows of these widths each way (forward and backward)...
MOVED = {("tgcn", ()): (HIDDEN, HIDDEN), ("tgcn", (("variant", "pygt"),)): (3 * HIDDEN, HIDDEN),
         ("dysat", ()): (HIDDEN, HIDDEN), ("mpnn-lstm", ()): (2 * HIDDEN, HIDDEN),
         ("wdgcn", ()): (HIDDEN, HIDDEN), ("wdgcn", (("gcn_layers", 1),)): (HIDDEN, HIDDEN)}
# ...and vertex moves each halo row once per run-time graph exchange: the GCN models aggregate once
# (layer 1's Ã X⁰ is precomputed; WD-GCN with one GCN layer never exchanges), DySAT's GAT brings
# each neighbour's score per head (1) and its values (H)
HALO_WIDTH = {("tgcn", ()): HIDDEN, ("tgcn", (("variant", "pygt"),)): HIDDEN, ("dysat", ()): HIDDEN + 1,
              ("mpnn-lstm", ()): HIDDEN, ("wdgcn", ()): HIDDEN, ("wdgcn", (("gcn_layers", 1),)): 0}


def test_snapshot_and_vertex_match_single_on_two_ranks(store, reference):
    check_distributed(store, reference, 2, variants=True)


@pytest.mark.slow  # ~40 s on two free cores; tests/test_conformance.py runs every model at P = 4 by default
def test_snapshot_and_vertex_match_single_on_four_ranks(store, reference):
    check_distributed(store, reference, 4, variants=False)
