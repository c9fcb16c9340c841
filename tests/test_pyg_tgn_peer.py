"""The PyG TGN peer's three forms (benchmarks/_pyg_tgn_peer.py): each builds and trains, and the paper form
departs from PyG's example exactly where TGN's paper does (docs/performance.md "Peers"). Skips without the
``peers`` extra (``make peers``)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dgbench.trainers.continuous.data import EventStream

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the peer lives beside its benchmark
from _pyg_tgn_peer import EXAMPLE, NEIGHBORS, PAPER, PEER_FORMS, SEED, PeerRun, _import_pyg_tgn  # noqa: E402

LR = 0.001


def _need_pyg() -> None:
    try:
        _import_pyg_tgn()
    except ImportError as exc:
        pytest.skip(f"PyTorch Geometric is not installed (`make peers` installs it): {exc}")


def _toy_stream(events: int = 1800, users: int = 12, items: int = 30, seed: int = 0) -> EventStream:
    """A bipartite stream (users, then items, then two vertices without events) of ``events`` events at increasing
    integer times, split 4:1:1; with 12 users a user has ~50 events per batch of 600, more than the loader's k."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, users, events)
    dst = rng.integers(users, users + items, events)
    t = np.cumsum(rng.integers(1, 50, events)).astype(np.float64)
    train, val = events * 4 // 6, events * 5 // 6
    return EventStream(src, dst, t, np.zeros((events, 0), np.float32), users + items + 2,
                       {"train": (0, train), "val": (train, val), "test": (val, events)}, np.unique(dst))


@pytest.mark.parametrize("form", PEER_FORMS)
def test_peer_form_builds_and_trains(form):
    _need_pyg()
    run = PeerRun(_toy_stream(3600), 16, LR, SEED, form)
    frequencies = run.model.memory.time_enc.lin.weight.detach().clone()
    before = {name: p.detach().clone() for name, p in run.model.named_parameters() if p.requires_grad}
    *_, trained = run.train_epoch()
    assert trained == 2400
    assert all(not torch.equal(before[name], p) for name, p in run.model.named_parameters() if p.requires_grad)
    time_weight = run.model.memory.time_enc.lin.weight
    if form == EXAMPLE:  # the example trains its frequencies
        assert time_weight.requires_grad and not torch.equal(time_weight, frequencies)
    else:  # dgbench's fixed frequencies, untouched by training
        assert not time_weight.requires_grad
        assert torch.equal(time_weight.detach()[:, 0], 1.0 / 10 ** torch.linspace(0, 9, 16))


@pytest.mark.parametrize("form", PEER_FORMS)
def test_only_the_paper_form_keeps_an_unmailed_vertex_memory(form):
    """A vertex with no message keeps its memory (zero before its first event) in the paper form; PyG's
    TGNMemory runs its GRU on a zero message (GRU(0, 0) is not 0)."""
    _need_pyg()
    run = PeerRun(_toy_stream(), 16, LR, SEED, form)
    run.model.train()
    run.model.memory.reset_state()
    run._observe(0, 600)  # mail for the first batch's vertices
    unseen = torch.tensor([run.stream.num_nodes - 2, run.stream.num_nodes - 1])  # vertices without events
    memory, last_update = run.model.memory(unseen)
    kept = bool((memory == 0).all())
    assert kept == (form == PAPER)
    assert bool((last_update == 0).all())


@pytest.mark.parametrize("form", PEER_FORMS)
def test_neighbour_time_feature_of_each_form(form):
    """The paper form encodes t_query - t_j for neighbour j (TGN §3.1), the example last_update(j) - t_j."""
    _need_pyg()
    run = PeerRun(_toy_stream(), 16, LR, SEED, form)
    run.model.eval()
    run.model.memory.reset_state()
    run.loader.reset_state()
    run._observe(0, 600)
    seen: list[torch.Tensor] = []
    hook = run.model.memory.time_enc.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    roots = torch.cat([run.src[600:1200], run.dst[600:1200]])
    n_id, edge_index, e_id = run.loader(roots.unique())
    _, last_update = run.model.memory(n_id)
    run._embed_roots(roots, 600)
    hook.remove()
    expected = run.t[600] - run.t[e_id] if form == PAPER else last_update[edge_index[0]] - run.t[e_id]
    assert torch.equal(seen[-1], expected.float())
    assert not torch.equal(run.t[600] - run.t[e_id], last_update[edge_index[0]] - run.t[e_id])


def test_paper_form_loader_keeps_each_vertex_most_recent_events():
    _need_pyg()
    stream = _toy_stream()
    runs = {form: PeerRun(stream, 16, LR, SEED, form) for form in (EXAMPLE, PAPER)}
    for run in runs.values():
        for a in range(0, 1800, 600):
            run.loader.insert(run.src[a:a + 600], run.dst[a:a + 600])
    for vertex in range(stream.num_nodes):
        touching = np.nonzero((stream.src == vertex) | (stream.dst == vertex))[0]
        kept = runs[PAPER].loader.e_id[vertex]
        assert sorted(kept[kept >= 0].tolist()) == touching[-NEIGHBORS:].tolist()
    differs = [v for v in range(stream.num_nodes)
               if not torch.equal(runs[EXAMPLE].loader.e_id[v].sort().values, runs[PAPER].loader.e_id[v].sort().values)]
    assert differs  # PyG's insert keeps other events for vertices with more than k events in a batch


