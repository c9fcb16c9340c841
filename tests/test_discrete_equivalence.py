"""ESDG §6.4 Fig. 6, scheme specifics: checkpoint transfer modes and memory, streamed snapshot blocks,
vertex partitioners and the scores volume. (Every scheme x model x world size against `single` and its
predicted volume: the registry-driven tests/test_conformance.py.)

Process start-up dominates on a small machine, so each world size is one launch training every
(scheme, model) pair at once (dgbench.trainers.experiment.run_experiments).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dgbench.dist import Comm, DistContext
from dgbench.models.discrete import cdgcn, evolvegcn_o, tmgcn
from dgbench.trainers.discrete.partition import available_methods, partition_vertices
from dgbench.generators.esdg_random import build
from dgbench.trainers.config import RunConfig
from dgbench.trainers.discrete.data import TRAIN, DiscreteData
from dgbench.trainers.experiment import run_experiments
from dgbench.trainers.discrete.placement import VertexPlacement, input_edges

MODELS = {"tmgcn": tmgcn, "evolvegcn-o": evolvegcn_o, "cdgcn": cdgcn}
NODES, SNAPSHOTS, HIDDEN, EPOCHS = 64, 9, 6, 3
STEPS = SNAPSHOTS - 1  # input timesteps


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return build(out=tmp_path_factory.mktemp("equiv") / "s.zarr", nodes=NODES, snapshots=SNAPSHOTS,
                 edge_factor=3.0, seed=11)


def config(store: Path, scheme: str, model: str, nproc: int = 1, **options) -> RunConfig:
    return RunConfig(scheme=scheme, model=model, dataset=store, nproc=nproc, epochs=EPOCHS, hidden=HIDDEN,
                     seed=7, out=store.parent / "runs", **options)


def losses(record: dict) -> list[float]:
    return [e["loss"] for e in record["epochs"]]


@pytest.fixture(scope="module")
def reference(store) -> dict[str, list[float]]:
    return {m: losses(r) for m, r in zip(MODELS, run_experiments([config(store, "single", m) for m in MODELS]))}


def tag_elements(record: dict, prefix: str) -> int:
    """Elements sent under tags starting with ``prefix`` in epoch 0, summed over ranks."""
    return sum(s["elements"] for rank in record["epochs"][0]["per_rank"]
               for tag, s in rank["comm_by_tag"].items() if tag.startswith(prefix))


def test_single_learns_and_reports_metrics(reference, store):
    for curve in reference.values():
        assert all(np.isfinite(curve)) and curve[-1] < curve[0]


def test_checkpoint_matches_single_for_base_and_gd(store, reference):
    configs = [config(store, "checkpoint", m, blocks=nb, transfer=mode)
               for m in MODELS for nb, mode in ((3, "base"), (STEPS, "gd"), (2, "gd"))]
    records = run_experiments(configs)  # nb=2: blocks of 4 steps, 3 of each sent as differences
    for c, record in zip(configs, records):
        np.testing.assert_allclose(losses(record), reference[c.model], rtol=1e-5, err_msg=f"{c.model} {c.options}")
        assert record["extra"]["transfer_mode"] == c.options["transfer"]
        assert record["extra"]["transfer_bytes_per_epoch"][c.options["transfer"]] > 0
        assert record["epochs"][0]["comm_bytes"] == 0
    # one block per step: gd sends nothing but differences after each block's (only) snapshot
    per_step = records[1]["extra"]["transfer_bytes_per_epoch"]
    assert per_step["gd"] == per_step["base"]
    assert records[2]["extra"]["transfer_bytes_per_epoch"]["gd"] != per_step["gd"]  # differences were sent
    by_epoch = records[0]["extra"]["transfer_bytes_by_epoch"]
    assert len(by_epoch) == EPOCHS and all(e == by_epoch[0] for e in by_epoch)  # same snapshots every epoch


def test_checkpointing_lowers_peak_activation_memory(store):
    for model in ("tmgcn", "cdgcn"):
        records = run_experiments([config(store, "checkpoint", model, blocks=nb) for nb in (1, 2, 4)])
        peaks = [r["extra"]["peak_saved_activation_bytes"] for r in records]
        assert peaks[0] > peaks[1] > peaks[2] and peaks[2] < 0.6 * peaks[0], (model, peaks)


def check_distributed(store: Path, reference: dict[str, list[float]], nproc: int) -> None:
    """Scheme specifics the registry-driven conformance suite (test_conformance.py) does not cover:
    checkpoint blocks that leave ranks without a step, streamed snapshot blocks moving every rank's
    steps, the best installed partitioner, and the scores volume counted from the pairs themselves."""
    configs = [config(store, "snapshot", m, nproc, blocks=4) for m in ("cdgcn", "evolvegcn-o")]
    configs += [config(store, "vertex", m, nproc) for m in MODELS]
    configs += [config(store, "snapshot", "tmgcn", nproc, blocks=2)]  # streamed: every rank moves its steps
    configs += [config(store, "vertex", "cdgcn", nproc, partition="range")]  # known owners: the scores volume
    records = run_experiments(configs)
    streamed, range_owned = records[-2], records[-1]
    check_score_volume(store, range_owned, nproc)
    one_rank = run_experiments([config(store, "checkpoint", "tmgcn", blocks=2)])[0]
    assert (streamed["extra"]["transfer_bytes_per_epoch"]["base"]
            == one_rank["extra"]["transfer_bytes_per_epoch"]["base"]), "the job's bytes are every rank's"
    for c, record in zip(configs, records):
        np.testing.assert_allclose(losses(record), reference[c.model], rtol=1e-5,
                                   err_msg=f"{c.scheme} {c.model} P={nproc} {c.options}")
    for c, record in zip(configs[2:2 + len(MODELS)], records[2:2 + len(MODELS)]):  # vertex, best partitioner
        assert record["extra"]["partition"]["connectivity"] == record["extra"]["connectivity_volume"]
        assert record["extra"]["partitioner"] == available_methods()[0]  # the best installed (auto)
        halo = record["extra"]["connectivity_volume"] * HIDDEN  # layer 1's Ã X is precomputed
        assert halo > 0
        assert tag_elements(record, "halo:forward") == halo == tag_elements(record, "halo:backward")
        assert tag_elements(record, "to_") == 0


def check_score_volume(store: Path, record: dict, nproc: int) -> None:
    """Vertex scoring moves one float per distinct (step, destination) a rank's pairs need from
    another rank: pairs live with their source's owner (computed here from the pairs themselves)."""
    data = DiscreteData(store, seed=7)
    owner = partition_vertices(input_edges(data), nproc, method="range")
    needed = 0
    for pairs in data.split_pairs(TRAIN, 0):
        for rank in range(nproc):
            mine = owner[pairs.src] == rank
            needed += len(np.unique(pairs.dst[mine & (owner[pairs.dst] != rank)]))
    assert needed > 0
    assert tag_elements(record, "scores:forward") == needed == tag_elements(record, "scores:backward")
    assert tag_elements(record, "scores:ids") == needed  # the ids asked for, one each


def test_snapshot_and_vertex_match_single_on_two_ranks(store, reference):
    check_distributed(store, reference, 2)


def test_snapshot_and_vertex_match_single_on_four_ranks(store, reference):
    check_distributed(store, reference, 4)


def test_connectivity_volume_counts_lambda_minus_one(store):
    """The halo lists move exactly Σ_t Σ_u (λ_t(u) - 1) rows (independent brute-force count)."""
    data = DiscreteData(store)
    owner = np.random.default_rng(0).integers(0, 3, NODES)
    ctx = DistContext(0, 3, "gloo", torch.device("cpu"), Comm(0, 3, torch.device("cpu")))
    placement = VertexPlacement(ctx, data, blocks=2, owner=owner, method="random")
    expected = 0
    for t in range(data.num_steps):
        snap = data.store.snapshot(t)
        parts = {u: {owner[u]} for u in range(NODES)}
        for u, v in zip(snap.src, snap.dst):
            parts[u].add(owner[v])
        expected += sum(len(p) - 1 for p in parts.values())
    assert placement.connectivity_volume() == expected
    try:
        from dgbench.trainers.discrete.partition import connectivity_volume
    except ImportError:
        return
    assert connectivity_volume([data.store.snapshot(t) for t in range(data.num_steps)], owner) == expected
