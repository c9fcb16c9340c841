"""Per-rank loading of the discrete family (trainers/projection/lazydata.py's RankDiscreteData): a rank
builds only the input steps its placement reads, with the same numbers as the whole data, so a
`snapshot` rank holds its own steps, a `vertex` rank only a few recent ones, and both train like
`single`. Memory goals: the printed tables of benchmarks/test_scale_bench.py."""
from __future__ import annotations

import gc
import platform
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

from dgbench.store import open_store
from dgbench.loaders.smoothing import EDGE_LIFE, M_PRODUCT
from dgbench.generators.esdg_random import build
from dgbench.trainers.config import RunConfig
from dgbench.trainers.discrete.data import TRAIN, DiscreteData
from dgbench.trainers.experiment import run_experiments
from dgbench.trainers.projection.lazydata import KEEP_STEPS, RankDiscreteData
from dgbench.dist import Comm, DistContext, PhaseTimer
from dgbench.models.discrete import cdgcn
from dgbench.trainers.discrete.data import PairBatch
from dgbench.trainers.discrete.loop import DiscreteTrainer
from dgbench.trainers.discrete.placement import TimePlacement
from dgbench.trainers.discrete.schedule import BlockSchedule
from dgbench.trainers.discrete.transfer import SnapshotMover

SNAPSHOTS = 9
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return build(out=tmp_path_factory.mktemp("rank") / "s.zarr", nodes=48, snapshots=SNAPSHOTS, edge_factor=3.0,
                 seed=5)


def snapshot_bytes(store: Path, steps: list[int]) -> int:
    opened = open_store(store)
    return sum(a.nbytes for t in steps for a in (lambda s: (s.src, s.dst, s.weight))(opened.snapshot(t))
               if a is not None)


def test_rank_data_builds_the_steps_asked_for_with_the_whole_data_numbers(store):
    whole, rank = DiscreteData(store, seed=3), RankDiscreteData(store, seed=3)
    assert rank.steps_held() == [] and rank.store_bytes_read == 0
    for t in (2, 3, 4):
        a, b = whole.adjacency[t], rank.adjacency[t]
        assert np.array_equal(a.rowptr, b.rowptr) and np.array_equal(a.col, b.col) and np.array_equal(a.val, b.val)
        assert np.array_equal(whole.degree_features[t], rank.degree_features[t])
    assert np.array_equal(whole.first_layer_input[2:5], rank.first_layer_input[2:5])
    assert rank.steps_held() == [2, 3, 4]
    assert rank.store_bytes_read == snapshot_bytes(store, [2, 3, 4]), "each step read once"
    for x, y in zip(whole.split_pairs(TRAIN, 1), rank.split_pairs(TRAIN, 1)):
        assert np.array_equal(x.src, y.src) and np.array_equal(x.dst, y.dst) and np.array_equal(x.label, y.label)
    assert rank.steps_held() == [2, 3, 4], "sampling pairs reads the targets, builds no input step"
    assert whole.steps_held() == list(range(SNAPSHOTS - 1))


def test_a_resident_time_placement_takes_over_the_steps_it_copied(store):
    cpu = torch.device("cpu")
    rank = RankDiscreteData(store, seed=3)
    placement = TimePlacement(DistContext(0, 1, "gloo", cpu, Comm(0, 1, cpu)), rank, blocks=2, streamed=False)
    assert rank.adjacency.held() == [] and rank.first_layer_input.steps.held() == [], "no second copy of a step"
    assert rank.degree_features.held() == [], "X⁰ is not kept beside the views' Ã X⁰"
    assert rank.steps_held() == list(range(SNAPSHOTS - 1)), "the handed-over steps still count as built"
    whole = DiscreteData(store, seed=3)
    view = placement.view(1, PhaseTimer(cpu))
    a, b = view.local
    assert np.array_equal(view.first_input.numpy(), whole.first_layer_input[a:b])
    assert np.array_equal(view.input_features().numpy(), np.stack(whole.degree_features[a:b])), \
        "a model reading X⁰ gets it rebuilt from the store"
    again = rank.adjacency[a]  # asked for again: rebuilt from the store, the same numbers
    assert np.array_equal(again.col, whole.adjacency[a].col) and np.array_equal(again.val, whole.adjacency[a].val)


@pytest.mark.parametrize("transfer", ["base", "gd"])
def test_a_streamed_view_kept_on_the_cpu_holds_its_steps_alone_and_counts_every_use(store, transfer):
    cpu = torch.device("cpu")
    rank, whole = RankDiscreteData(store, seed=3), DiscreteData(store, seed=3)
    placement = TimePlacement(DistContext(0, 1, "gloo", cpu, Comm(0, 1, cpu)), rank, blocks=2, streamed=True,
                              transfer=transfer)
    reference = TimePlacement(DistContext(0, 1, "gloo", cpu, Comm(0, 1, cpu)), whole, blocks=2, streamed=True,
                              transfer=transfer)
    for use in range(2):  # the first use builds the views, the second only counts the moves again
        for block in range(2):
            view, kept = placement.view(block, PhaseTimer(cpu)), reference.view(block, PhaseTimer(cpu))
            assert torch.equal(view.first_input, kept.first_input)
            assert rank.adjacency.held() == [] and rank.first_layer_input.steps.held() == [], "one copy: the view's"
            assert placement.mover._host == {}, "no payloads kept for moves that never come"
        assert placement.transfer_bytes() == reference.transfer_bytes(), f"use {use}"
    fresh = SnapshotMover(whole.adjacency, cpu, transfer)  # what two uses of both blocks move, counted afresh
    frames = sum(whole.first_layer_input[a:b].nbytes for a, b in (r for block in placement.blocks
                                                                   for r in placement.local_ranges(block)))
    expected = {mode: 2 * (sum(fresh.bytes_of(range(a, b))[mode] for block in placement.blocks
                               for a, b in placement.local_ranges(block)) + frames) for mode in fresh.bytes_by_mode}
    assert placement.transfer_bytes() == expected
    read = rank.store_bytes_read
    placement.view(0, PhaseTimer(cpu))
    assert rank.store_bytes_read == read, "a later use reads nothing"


def test_a_rank_keeps_only_its_own_training_pairs_through_the_pass(store):
    cpu = torch.device("cpu")
    rank = RankDiscreteData(store, seed=3)
    placement = TimePlacement(DistContext(0, 1, "gloo", cpu, Comm(0, 1, cpu)), rank, blocks=1, streamed=False)
    placement.rank, placement.ctx = 1, DistContext(1, 2, "gloo", cpu, Comm(1, 2, cpu))  # rank 1 of 2: late steps
    own = [range(*placement.local_ranges(block)[1]) for block in placement.blocks]
    seen: list[list[PairBatch]] = []
    targets: list[dict] = []

    class Recording(BlockSchedule):  # the pairs alive while the pass would run
        def forward_backward(self, trainer, batches, total_pairs, timer):
            seen.append([b for b in gc.get_objects() if type(b) is PairBatch and len(b.src)])
            targets.append(dict(rank._targets))
            return 0.0

    trainer = DiscreteTrainer(placement.ctx, rank, placement, cdgcn(), lr=0.01, schedule=Recording())
    trainer.gradients.synchronise = lambda: None
    trainer.ctx.comm.all_reduce = lambda tensor, tag=None: tensor
    trainer.train_epoch(0, PhaseTimer(cpu))
    held = seen[-1]
    assert held and all(any(b.step in steps for steps in own) for b in held), "another rank's pairs stayed alive"
    assert targets == [{}], "every training step's target keys stayed through the pass"
    again = rank.split_pairs(TRAIN, 0)  # drawn again after the release: the same pairs
    assert all(np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)
               for a, b in zip(again, DiscreteData(store, seed=3).split_pairs(TRAIN, 0)))


@pytest.mark.parametrize("smoothing", [EDGE_LIFE, M_PRODUCT])
def test_smoothed_steps_built_from_their_window_equal_the_whole_smoothed_data(store, smoothing):
    whole = DiscreteData(store, seed=3, smoothing=smoothing, smoothing_window=3)
    rank = RankDiscreteData(store, seed=3, smoothing=smoothing, smoothing_window=3)
    for t in (5, 6, 1):  # a window inside the sequence, its next step, and one cut at step 0
        a, b = whole.adjacency[t], rank.adjacency[t]
        assert np.array_equal(a.rowptr, b.rowptr) and np.array_equal(a.col, b.col) and np.array_equal(a.val, b.val)
        assert np.array_equal(whole.degree_features[t], rank.degree_features[t])
        assert np.array_equal(whole.first_layer_input[t], rank.first_layer_input[t])
    assert rank.steps_held() == [1, 5, 6]
    assert rank.store_bytes_read == snapshot_bytes(store, [3, 4, 5, 6, 0, 1]), "each raw step of a window read once"
    assert np.array_equal(whole.edges_per_step, rank.edges_per_step) and whole.work() == rank.work()
    assert np.array_equal(whole.nonzeros_per_step(), rank.nonzeros_per_step())
    assert (rank.edges_per_step[2:] > rank.raw_edges_per_step[2:]).all(), "the windows add earlier edges"


def _run(store: Path, scheme: str, nproc: int) -> dict:
    return run_experiments([RunConfig(scheme, "cdgcn", store, nproc=nproc, epochs=2, seed=7, hidden=6,
                                      out=store.parent / "runs")])[0]


@pytest.fixture(scope="module")
def single(store) -> dict:
    return _run(store, "single", 1)


def test_a_snapshot_rank_holds_only_its_steps_and_trains_like_single(store, single):
    snapshot = _run(store, "snapshot", 2)
    np.testing.assert_allclose([e["loss"] for e in snapshot["epochs"]], [e["loss"] for e in single["epochs"]],
                               rtol=1e-5)
    # every rank reads every training target for each pair draw (validation and test: the evaluation sets): one per
    # epoch, the targets released through the pass, and one more for the record's volume prediction
    targets = list(range(1, SNAPSHOTS - 2)) * (len(snapshot["epochs"]) + 1)
    (one,) = single["extra"]["rank_data"]
    assert one["input_steps_held"] == list(range(SNAPSHOTS - 1))
    # a single rank keeps its targets (its own share) and reads each input and target step once per run
    assert one["store_bytes_read"] == snapshot_bytes(store, list(range(1, SNAPSHOTS - 2))) \
        + snapshot_bytes(store, list(range(SNAPSHOTS - 1)))
    ranks = snapshot["extra"]["rank_data"]
    assert len(ranks) == 2
    for rank, figures in enumerate(ranks):
        a, b = snapshot["extra"]["time_ranges"][0][rank]
        assert figures["input_steps_held"] == list(range(a, b)), f"rank {rank}"
        assert figures["store_bytes_read"] == snapshot_bytes(store, targets) + snapshot_bytes(store, list(range(a, b)))
        assert 0 < figures["rss_before_data_bytes"] < figures["peak_rss_bytes"], "its floor, before any data"


def test_a_vertex_rank_keeps_no_more_than_a_few_steps_and_trains_like_single(store, single):
    vertex = _run(store, "vertex", 2)
    np.testing.assert_allclose([e["loss"] for e in vertex["epochs"]], [e["loss"] for e in single["epochs"]],
                               rtol=1e-5)
    for rank, figures in enumerate(vertex["extra"]["rank_data"]):
        assert len(figures["input_steps_held"]) <= KEEP_STEPS < SNAPSHOTS - 1, f"rank {rank}"


@pytest.mark.parametrize("short_counts", [False, True])
def test_the_split_targets_are_every_steps_keys_shifted_by_step_in_one_array(store, short_counts):
    data = DiscreteData(store, seed=3)
    steps = data.steps_of(TRAIN)
    square = np.int64(data.num_nodes) ** 2
    expected = np.concatenate([i * square + data.target_keys[t + 1] for i, t in enumerate(steps)])
    if short_counts:  # a store whose edge counts undercount the distinct keys: the array grows
        data.store.edges_per_snapshot = lambda: np.ones(SNAPSHOTS, np.int64)
    keys, sizes = data._concatenated_target_keys(steps)
    assert np.array_equal(keys, expected)
    assert sizes.tolist() == [len(data.target_keys[t + 1]) for t in steps]


def checkpointed_epoch(store: Path, blocks: int, state_every: int) -> tuple[float, list[torch.Tensor], int, list[int]]:
    """One checkpointed epoch of one process: its loss, gradients, the peak bytes of hand-over states alive at
    once, and the forward passes each block ran."""
    from dgbench.trainers.discrete import schedule as schedules
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    data = DiscreteData(store, seed=3)
    placement = TimePlacement(DistContext(0, 1, "gloo", cpu, Comm(0, 1, cpu)), data, blocks=blocks, streamed=True)
    trainer = DiscreteTrainer(placement.ctx, data, placement, cdgcn(), lr=0.01,
                              schedule=BlockSchedule(state_every))
    alive: list = []
    peak, passes = [0], [0] * blocks
    detached, block_loss = schedules._detached, trainer.block_loss

    def measure() -> None:
        peak[0] = max(peak[0], sum(t.numel() * t.element_size() for t in (ref() for ref in alive) if t is not None))

    def recording_detached(state):
        kept = detached(state)
        alive.extend(weakref.ref(t) for layer in kept for t in layer)
        measure()
        return kept

    def counting_block_loss(block, *args, **kwargs):
        passes[block] += 1
        measure()
        return block_loss(block, *args, **kwargs)

    trainer.block_loss = counting_block_loss
    schedules._detached = recording_detached
    try:
        trainer.optimizer.step = lambda: None  # the gradients of the epoch, not the step after it
        loss, _ = trainer.train_epoch(0, PhaseTimer(cpu))
    finally:
        schedules._detached = detached
    transposes = sum(view.operator._backward is not None for view in placement._ranges.values() if view.operator)
    return loss, [p.grad.clone() for p in trainer.model.parameters()], peak[0], passes, transposes


def test_thinned_hand_over_states_hold_fewer_and_train_bit_for_bit(store):
    blocks = SNAPSHOTS - 1  # one step per block
    loss, grads, every_state, passes, _ = checkpointed_epoch(store, blocks, 1)
    thin_loss, thin_grads, thinned, thin_passes, _ = checkpointed_epoch(store, blocks, 3)
    assert thin_loss == loss and all(torch.equal(a, b) for a, b in zip(grads, thin_grads)), "bit for bit"
    one_state = every_state // (blocks - 1)
    assert every_state == (blocks - 1) * one_state > 0, "every block's state held at the end of the first sweep"
    assert thinned <= 4 * one_state, "⌈8/3⌉ + 3 - 1 states at most, π_0 (the initial state) not counted"
    assert passes == BlockSchedule(1).forward_passes(blocks)
    assert thin_passes == BlockSchedule(3).forward_passes(blocks) == [3, 3, 2, 3, 3, 2, 2, 1]


def test_a_streamed_cpu_view_keeps_its_transpose_only_while_its_block_runs(store):
    blocks = SNAPSHOTS - 1
    *_, transposes = checkpointed_epoch(store, blocks, 1)
    assert transposes == 1, "the last block's Aᵀ only (its backward ran last), not one per block"


# ---- Flickr-sized store: what a rank holds between and inside blocks (docs/discrete-schemes.md, "Flickr-sized")

def test_every_checkpointed_block_returns_its_freed_heap_to_the_system(store, monkeypatch):
    from dgbench import memory
    from dgbench.trainers.discrete import schedule as schedules
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert memory._malloc_trim() is not None, "glibc has malloc_trim: the rank must call it"
    returned = [0]
    monkeypatch.setattr(schedules, "return_freed_memory", lambda: returned.__setitem__(0, returned[0] + 1))
    blocks = SNAPSHOTS - 1
    _, _, _, passes, _ = checkpointed_epoch(store, blocks, 3)
    assert returned[0] == sum(passes) > blocks, "once after every block run: both sweeps and the recomputations"


def _saved_bytes_and_grads(layer_output, ax: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor):
    """Bytes autograd keeps for ``layer_output(ax, weight)`` beyond its inputs, its output and gradients."""
    inputs = {ax.untyped_storage().data_ptr(), weight.untyped_storage().data_ptr()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in inputs:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer_output(ax, weight)
    out.backward(grad)
    return sum(kept.values()), out, ax.grad, weight.grad


def test_cdgcn_keeps_a_sign_mask_of_its_rectified_concatenation_not_the_floats():
    from dgbench.models.discrete import _RectifiedSkipConcatenation
    torch.manual_seed(1)
    steps, rows, fin, fout = 2, 500, 6, 6
    ax, weight, grad = torch.randn(steps, rows, fin), torch.randn(fin, fout), torch.randn(steps, rows, fin + fout)
    grad[..., :fin][ax.abs() < 0.3] = 0  # exact zeros in the gradient as well

    def autograd_form(a, w):
        return torch.relu(torch.cat([a, a @ w], dim=-1))

    def leaves():
        return ax.clone().requires_grad_(), weight.clone().requires_grad_()

    plain, plain_out, plain_ax, plain_w = _saved_bytes_and_grads(autograd_form, *leaves(), grad)
    fused, fused_out, fused_ax, fused_w = _saved_bytes_and_grads(_RectifiedSkipConcatenation.apply, *leaves(), grad)
    assert torch.equal(plain_out, fused_out) and torch.equal(plain_ax, fused_ax) and torch.equal(plain_w, fused_w)
    cells = steps * rows * (fin + fout)
    assert plain >= 4 * cells, "ReLU's backward keeps its float output"
    assert fused == cells, "one byte per output element: the sign mask"

# --------------------------------------------------------------------------- redistributions in rounds

def _redistributions(ctx: DistContext, round_bytes: int) -> dict:
    """``to_vertex`` then ``to_time`` of a random [T_local, N, F] frame through a :class:`TimeView`, rounds sized by
    ``round_bytes``, and through the one-exchange autograd path they replaced: results, gradients and the rows
    each all-to-all held (sent + received)."""
    from types import SimpleNamespace

    from dgbench.dist import all_to_all_autograd
    from dgbench.trainers.discrete import exchange
    from dgbench.trainers.discrete.placement import TimeView, split_range
    exchange.ROUND_BYTES = round_bytes
    nodes, steps, width, world = 50, 7, 3, ctx.world_size
    stub = SimpleNamespace(ctx=ctx, rank=ctx.rank, vertex_ranges=split_range(0, nodes, world),
                           data=SimpleNamespace(num_nodes=nodes))
    stub.vertex_rows = len(range(*stub.vertex_ranges[ctx.rank]))
    stub.local_ranges = lambda block: split_range(block.start, block.stop, world)
    local = [b - a for a, b in split_range(0, steps, world)]
    view = TimeView(stub, range(steps), split_range(0, steps, world)[ctx.rank], None, torch.zeros(0))
    held: list[int] = []
    plain = ctx.comm.all_to_all_single

    def recording(tensor, send_splits, recv_splits, tag="all_to_all"):
        held.append(tensor.shape[0] + sum(recv_splits))
        return plain(tensor, send_splits, recv_splits, tag=tag)

    torch.manual_seed(ctx.rank)
    frame = torch.randn(local[ctx.rank], nodes, width)
    weights = torch.randn(local[ctx.rank], nodes, width)
    y = frame.clone().requires_grad_()
    ctx.comm.all_to_all_single = recording  # type: ignore[method-assign]
    vertex_major = view.to_vertex(y)
    back = view.to_time(vertex_major * 2)
    (back * weights).sum().backward()
    ctx.comm.all_to_all_single = plain  # type: ignore[method-assign]
    # the replaced path: one gathered send buffer, one exchange each way, split and concatenated
    reference = frame.clone().requires_grad_()
    send = [local[ctx.rank] * (b - a) for a, b in stub.vertex_ranges]
    recv = [count * stub.vertex_rows for count in local]
    order = np.concatenate([(np.arange(local[ctx.rank])[:, None] * nodes + np.arange(a, b)).reshape(-1)
                            for a, b in stub.vertex_ranges])
    gathered = reference.reshape(-1, width).index_select(0, torch.from_numpy(order))
    expected = all_to_all_autograd(gathered, ctx.comm, send, recv, tag="reference").view(steps, -1, width)
    arrived = all_to_all_autograd((expected * 2).reshape(-1, width), ctx.comm, recv, send, tag="reference")
    expected_back = torch.cat([part.view(local[ctx.rank], b - a, width) for part, (a, b)
                               in zip(torch.split(arrived, send), stub.vertex_ranges)], dim=1)
    (expected_back * weights).sum().backward()
    return {"equal": [torch.equal(vertex_major, expected), torch.equal(back, expected_back),
                      torch.equal(y.grad, reference.grad)],
            "held": held, "frame_rows": max(max(local) * nodes, steps * max(b - a for a, b in stub.vertex_ranges)),
            "elements": {tag: s.elements for tag, s in ctx.comm.stats.items()}}


@pytest.mark.parametrize("world", [2, 3])
def test_a_redistribution_in_rounds_holds_one_rounds_rows_and_moves_them_bit_for_bit(world):
    from dgbench.launch import launch
    round_bytes = 3 * 4 * 40  # 40 rows of 3 floats: several rounds of the test's 50-vertex frames
    for rank in launch(_redistributions, world, args=(round_bytes,), timeout_s=120):
        assert rank["equal"] == [True, True, True]
        rounds = -(-rank["frame_rows"] // 40)
        assert len(rank["held"]) == 4 * rounds  # two redistributions, forward and backward, each in rounds
        # one round's send and receive rows at a time, not a whole frame's (each peer's share rounds up by 1)
        assert max(rank["held"]) <= 2 * (rank["frame_rows"] // rounds + world)
        assert max(rank["held"]) < rank["frame_rows"]
        for direction in ("forward", "backward"):  # the same rows counted as one exchange each way moves
            moved = rank["elements"][f"to_vertex:{direction}"] + rank["elements"][f"to_time:{direction}"]
            assert moved == rank["elements"][f"reference:{direction}"] > 0


def test_the_main_ranks_partition_keeps_a_few_steps_and_gives_the_whole_datas_owners(store):
    from dgbench.trainers.discrete.placement import partition_owner
    rank = RankDiscreteData(store, seed=3)
    made = partition_owner(rank, 2, "range", 3)
    assert len(rank.steps_held()) <= KEEP_STEPS < SNAPSHOTS - 1, "every step built for the partition stayed"
    assert np.array_equal(made.owner, partition_owner(DiscreteData(store, seed=3), 2, "range", 3).owner)


# --------------------------------------------------------------------------- a vertex rank's partition and placement

def _tracked_edges(edges, alive: list[int]):
    """:class:`StreamedEdges` over ``edges`` recording, at each build, how many arrays built before are alive."""
    from dgbench.trainers.discrete.partition import StreamedEdges
    built: list[weakref.ref] = []

    def edges_of(t: int) -> tuple[np.ndarray, np.ndarray]:
        alive.append(sum(ref() is not None for ref in built))
        pair = edges.src[t].copy(), edges.dst[t].copy()
        built.extend(weakref.ref(a) for a in pair)
        return pair
    return StreamedEdges(edges.num_vertices, edges.num_snapshots, edges_of)


@pytest.mark.parametrize("method", ["range", "metis", "hypergraph"])
def test_a_partition_of_streamed_steps_equals_the_whole_edges_one_and_holds_one_step_at_a_time(store, method,
                                                                                                monkeypatch):
    from dgbench.trainers.discrete.partition import available_methods, partition_vertices_detailed, partitioners
    from dgbench.trainers.discrete.placement import input_edges
    if method not in available_methods():
        pytest.skip(f"{method} is not installed")
    edges = input_edges(DiscreteData(store, seed=3))
    whole = partition_vertices_detailed(edges, 3, method, seed=3)
    if method == "range":  # its connectivity is counted step by step: no hypergraph is built
        monkeypatch.setattr(partitioners, "column_net_hypergraph", None)
    alive: list[int] = []
    streamed = partition_vertices_detailed(_tracked_edges(edges, alive), 3, method, seed=3)
    assert np.array_equal(streamed.owner, whole.owner) and streamed.method == whole.method == method
    assert streamed.connectivity == whole.connectivity > 0 and streamed.imbalance == whole.imbalance
    if method == "metis":  # METIS takes the whole graph: every step built once, then held
        assert len(alive) == edges.num_snapshots
    else:  # two passes (the weights, then the nets or the volume), one step held at a time
        assert len(alive) == 2 * edges.num_snapshots
        assert max(alive) <= 2, "a step's (src, dst) outlived the next step's build"


def test_a_vertex_placement_releases_the_whole_steps_its_rank_data_kept_and_holds_the_same_rows(store):
    from dgbench.trainers.discrete.placement import VertexPlacement, partition_owner
    cpu = torch.device("cpu")
    rank, whole = RankDiscreteData(store, seed=3), DiscreteData(store, seed=3)
    owner = partition_owner(rank, 2, "range", 3).owner
    assert rank.adjacency.held(), "the partition's last steps are kept until the placement has its rows"
    built = VertexPlacement(DistContext(1, 2, "gloo", cpu, Comm(1, 2, cpu)), rank, blocks=2, owner=owner,
                            method="range")
    assert rank.adjacency.held() == rank.degree_features.held() == rank.first_layer_input.steps.held() == []
    reference = VertexPlacement(DistContext(1, 2, "gloo", cpu, Comm(1, 2, cpu)), whole, blocks=2, owner=owner,
                                method="range")
    for mine, theirs in zip(built.halos, reference.halos):
        assert torch.equal(mine.first_input, theirs.first_input) and torch.equal(mine.features, theirs.features)
        assert torch.equal(mine.send_index, theirs.send_index)
        a, b = mine.operator.csr, theirs.operator.csr
        assert a.shape == b.shape and all(torch.equal(x, y) for x, y in ((a.rowptr, b.rowptr), (a.col, b.col),
                                                                          (a.val, b.val)))


def _scores_both_ways(ctx: DistContext, store: Path) -> dict:
    """One block's training logits of a vertex rank through :meth:`VertexPlacement.score` and through the
    evaluation's [steps, N, 2] table, with the halves' gradients and the element counts of every float tensor the
    forward and backward made."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from dgbench.trainers.discrete.partition import range_partition
    from dgbench.trainers.discrete.placement import VertexPlacement, pair_logits

    class Made(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.numels: set[int] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tensor in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                    self.numels.add(tensor.numel())
            return out

    data = DiscreteData(store, seed=3)
    owner = range_partition(np.ones(data.num_nodes), ctx.world_size)
    placement = VertexPlacement(ctx, data, blocks=2, owner=owner, method="range")
    view = placement.view(1, PhaseTimer(ctx.device))
    batches = [placement.owned(b) for b in data.split_pairs(TRAIN, 0) if b.step in view.block]
    torch.manual_seed(ctx.rank)
    start = torch.randn(len(view.block), placement.vertex_rows, 2)
    weights, bias = torch.randn(sum(len(b.src) for b in batches)), torch.tensor(0.25)
    out = {}
    for name, score in (("rows", lambda h: placement.score(view, h, batches, bias)),
                        ("table", lambda h: pair_logits(*placement.score_table(view, h, batches), batches, bias))):
        halves = start.clone().requires_grad_()
        with Made() as made:
            logits = score(halves)
            (logits * weights).sum().backward()
        out[name] = (logits.detach().numpy(), halves.grad.numpy(), sorted(made.numels))  # plain data back
    return {"out": out, "whole": len(view.block) * data.num_nodes * 2, "pairs": len(weights)}


def test_a_vertex_ranks_training_scores_equal_the_tables_bit_for_bit_without_a_whole_vertex_table(store):
    from dgbench.launch import launch
    for rank in launch(_scores_both_ways, 3, args=(store,), timeout_s=120):
        (rows, rows_grad, rows_made), (table, table_grad, table_made) = rank["out"]["rows"], rank["out"]["table"]
        assert np.array_equal(rows, table) and np.array_equal(rows_grad, table_grad) and len(rows) == rank["pairs"] > 0
        assert rank["whole"] not in (rank["pairs"], 2 * rank["pairs"]), "the check below would be ambiguous"
        assert rank["whole"] in table_made, "the evaluation's table and its gradient: every vertex of the block"
        assert rank["whole"] not in rows_made, "training made a tensor of every vertex of the block"
