"""``--protocol tgl|batch`` (docs/continuous-training.md, section "Protocols"): where the two differ (a vertex
twice in a batch: tgl queries it at each event time, batch once at the batch's start), the batch plan's
neighbours are PyG's LastNeighborLoader's (earlier batches only), the batch memory view is the GRU step
computed by hand, and the schemes/models that cannot run it say why. Equal losses of every scheme under
``batch`` to ``single`` under ``batch``: the registry-driven conformance suite."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dgbench.dist import Comm, DistContext
from dgbench.errors import DgbenchError
from dgbench.models.temporal import build_temporal_model
from dgbench.options import NoOptions
from dgbench.registry import load_plugins
from dgbench.trainers.config import RunConfig
from dgbench.trainers.continuous.data import BATCH, TGL, BatchPlanner, EventStream, vertex_uniforms
from dgbench.trainers.continuous.loop import ContinuousTrainer, LoopOptions
from dgbench.trainers.continuous.sampler import TemporalSampler
from dgbench.trainers.continuous.single import Single
from dgbench.trainers.contract import Partition
from dgbench.trainers.experiment import resolve

load_plugins("dgbench.trainers")

# (src, dst, t): batch 0 = events 0-1, batch 1 = events 2-3 (batch size 2); vertex 0 is the source of both
# events of batch 1, so tgl queries it at t = 3 and t = 4, batch once at t = 3
HAND = [(0, 5, 1.0), (1, 5, 2.0), (0, 6, 3.0), (0, 5, 4.0)]


def _stream(events: list[tuple[int, int, float]], num_nodes: int = 8, edge_dim: int = 2) -> EventStream:
    src, dst, t = (np.array(column) for column in zip(*events))
    features = np.random.default_rng(0).normal(size=(len(events), edge_dim)).astype(np.float32)
    n = len(events)
    return EventStream(src.astype(np.int64), dst.astype(np.int64), t.astype(np.float64), features, num_nodes,
                       {"train": (0, n), "val": (n, n), "test": (n, n)}, np.unique(dst.astype(np.int64)))


def _ctx() -> DistContext:
    return DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))


def _trainer(stream: EventStream, protocol: str, model_name: str = "tgn") -> ContinuousTrainer:
    torch.manual_seed(0)
    model = build_temporal_model(model_name, memory_dim=4, edge_dim=stream.edge_dim).double()
    partition = Partition(np.zeros(stream.num_nodes, dtype=np.int64), "range")
    options = LoopOptions(batch_size=2, neighbors=3, sampler="recent", lr=1e-3, seed=1, prefetch=0,
                          protocol=protocol)
    return ContinuousTrainer(_ctx(), stream, model, Single(), NoOptions(), partition, options)


def _planner(stream: EventStream, protocol: str, neighbors: int = 3) -> BatchPlanner:
    sampler = TemporalSampler(stream.src, stream.dst, stream.t, stream.num_nodes)
    return BatchPlanner(stream, sampler, neighbors, "recent", 1, lambda src: np.ones(len(src), dtype=bool),
                        lambda ids: None, protocol=protocol)


def test_batch_queries_each_vertex_once_at_the_batch_start_and_samples_earlier_batches_only():
    stream = _stream(HAND)
    tgl, batch = (_planner(stream, p).plan("train", 1, 2, 4) for p in (TGL, BATCH))
    # tgl: a root per event endpoint and negative, at its own event time; vertex 0 at t = 3 and t = 4
    assert len(tgl.needed_ids[:len(tgl.roots)]) == 6
    assert sorted(tgl.query_times[:len(tgl.roots)][tgl.roots == 0]) == [3.0, 4.0]
    # ... and its query at t = 4 sees event 2 (0-6 at t = 3), an event of the same batch
    at_four = np.flatnonzero((tgl.roots == 0) & (tgl.query_times[:len(tgl.roots)] == 4.0))[0]
    assert 2 in tgl.neighbors.events[at_four][tgl.neighbors.mask[at_four]]
    # batch: the distinct roots once, every query at the batch's first event time
    roots = batch.needed_ids[:batch.query_roots]
    np.testing.assert_array_equal(roots, np.unique(batch.roots))
    np.testing.assert_array_equal(roots[batch.root_index], batch.roots)
    assert (batch.query_times == 3.0).all() and (batch.root_times == 3.0).all()
    real = batch.neighbors.events[batch.neighbors.mask]
    assert len(real) and (real < 2).all()  # neighbours are events of batch 0 only
    vertex_zero = np.flatnonzero(roots == 0)[0]
    assert set(batch.neighbors.events[vertex_zero][batch.neighbors.mask[vertex_zero]]) == {0}


def test_batch_neighbours_are_pygs_last_neighbor_loader():
    """With distinct times, the batch plan's ``recent`` neighbours of every distinct root are the events
    PyG's LastNeighborLoader holds for it after inserting the earlier batches (torch_geometric.nn.models.tgn).
    The stream gives no vertex more than k events in one batch: beyond that, the loader's insert writes
    several events to one slot (``dense_id`` modulo its size) and may keep an older one (PyG's behaviour)."""
    tgn = pytest.importorskip("torch_geometric.nn.models.tgn")
    rng = np.random.default_rng(4)
    n, events, k, size = 60, 240, 5, 20
    src = rng.integers(0, n // 2, events)
    dst = rng.integers(n // 2, n, events)
    for start in range(0, events, size):  # the precondition above
        assert np.bincount(np.r_[src[start:start + size], dst[start:start + size]]).max() <= k
    stream = _stream([(int(s), int(d), float(i)) for i, (s, d) in enumerate(zip(src, dst))], num_nodes=n)
    planner = _planner(stream, BATCH, neighbors=k)
    loader = tgn.LastNeighborLoader(n, size=k)
    for index, (start, stop) in enumerate(planner.batch_bounds("train", size)):
        plan = planner.plan("train", index, start, stop)
        roots = plan.needed_ids[:plan.query_roots]
        held = loader.e_id[torch.from_numpy(roots)].numpy()
        for row, vertex in enumerate(roots):
            ours = set(plan.neighbors.events[row][plan.neighbors.mask[row]].tolist())
            assert ours == set(held[row][held[row] >= 0].tolist()), (index, vertex)
        loader.insert(torch.from_numpy(stream.src[start:stop]), torch.from_numpy(stream.dst[start:stop]))


@pytest.fixture
def float64():
    """Tables and parameters in float64, as the family's train_rank sets them for exactness runs."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_the_protocols_embed_a_repeated_vertex_differently(float64):
    """After batch 0 both protocols hold the same rows (no vertex had mail yet). In batch 1 tgl updates
    vertex 0's memory twice, at t = 3 and t = 4 (different views and embeddings), batch once at t = 3: the
    GRU step on its mail with Δt = 3 - 1, computed here by hand, and one embedding shared by both events."""
    stream = _stream(HAND)
    by_protocol = {p: _trainer(stream, p) for p in (TGL, BATCH)}
    embedded: dict[str, list[int]] = {TGL: [], BATCH: []}
    views: dict[str, torch.Tensor] = {}
    after_first: dict[str, torch.Tensor] = {}
    for protocol, trainer in by_protocol.items():
        trainer.model.eval()
        plans = [trainer.planner.plan("train", i, a, b) for i, (a, b) in enumerate(
            trainer.planner.batch_bounds("train", 2))]
        with torch.no_grad():
            trainer._step(plans[0], train=False, timer=None)
        after_first[protocol] = trainer.state.table.clone()
        embed = trainer.model.embed

        def counting(inputs, root_view, root_t, neighbor_view, protocol=protocol, embed=embed):
            embedded[protocol].append(len(root_view))
            return embed(inputs, root_view, root_t, neighbor_view)

        trainer.model.embed = counting  # type: ignore[method-assign]
        with torch.no_grad():
            views[protocol] = trainer._views(plans[1])[0]
        trainer._step(plans[1], train=False, timer=None)
    plan_tgl = by_protocol[TGL].planner.plan("train", 1, 2, 4)
    plan_batch = by_protocol[BATCH].planner.plan("train", 1, 2, 4)
    assert embedded[TGL] == [6] and embedded[BATCH] == [len(np.unique(plan_batch.roots))] and embedded[BATCH][0] < 6

    torch.testing.assert_close(after_first[BATCH], after_first[TGL], rtol=0, atol=0)
    model, table = by_protocol[TGL].model, after_first[TGL]
    layout = model.layout
    updater = model.updater

    def by_hand(dt: float) -> torch.Tensor:  # torch's own GRUCell on [mail, φ(Δt)] from vertex 0's stored row
        row = table[0]
        assert row[layout.memory_ts_col] == 1.0 and row[layout.mail_ts_start] == 1.0
        mail = row[layout.mails_start:layout.mails_start + layout.mail_dim]
        x = torch.cat([mail, updater.time_encoder(torch.tensor([dt], dtype=torch.float64))[0]])
        cell = torch.nn.GRUCell(len(x), model.memory_dim).double()
        cell.load_state_dict(updater.cell.state_dict())
        return cell(x[None], row[None, :model.memory_dim])[0]

    with torch.no_grad():
        tgl_zero = views[TGL][np.flatnonzero(plan_tgl.needed_ids[:6] == 0)]
        batch_zero = views[BATCH][np.flatnonzero(plan_batch.needed_ids[:plan_batch.query_roots] == 0)]
        torch.testing.assert_close(tgl_zero[0], by_hand(2.0))
        torch.testing.assert_close(tgl_zero[1], by_hand(3.0))
        assert not torch.allclose(tgl_zero[0], tgl_zero[1])  # two memories of vertex 0 in one batch
        assert len(batch_zero) == 1
        torch.testing.assert_close(batch_zero[0], by_hand(2.0))


def test_vertex_uniforms_do_not_depend_on_the_other_vertices_queried():
    every = vertex_uniforms((3, 0, 7), np.arange(50), 4)
    some = vertex_uniforms((3, 0, 7), np.array([41, 2, 41]), 4)
    np.testing.assert_array_equal(some, every[[41, 2, 41]])
    assert ((every >= 0) & (every < 1)).all()
    assert not np.array_equal(every, vertex_uniforms((3, 0, 8), np.arange(50), 4))  # another batch, other draws


@pytest.fixture(scope="module")
def event_store(tmp_path_factory) -> Path:
    from dgbench.generators.stream import build
    return build(out=tmp_path_factory.mktemp("protocol") / "stream.zarr", users=20, items=20, events=300,
                 edge_dim=2, seed=5)


@pytest.mark.parametrize("scheme, model, named", [("tgcn", "dygnn", "scheme 'tgcn'"),
                                                   ("single", "dygnn", "model 'dygnn'")])
def test_what_cannot_run_the_batch_protocol_says_why(event_store, scheme, model, named):
    with pytest.raises(DgbenchError, match=f"--protocol batch: {named} cannot run it: .+"):
        resolve(RunConfig(scheme, model, event_store, epochs=1, batch_size=50, memory_dim=4, protocol=BATCH))
    resolve(RunConfig(scheme, model, event_store, epochs=1, batch_size=50, memory_dim=4))  # tgl (default) runs
