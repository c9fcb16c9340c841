"""N&M bookkeeping without processes: dedup routes restore every position, last write wins, rows pack."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgbench.dist import Comm, DistContext
from dgbench.store import open_store
from dgbench.models.temporal import BatchInputs, build_temporal_model
from trainers.continuous.data import BatchPlanner, EventStream, Prefetcher
from trainers.continuous.schemes.depcomm import DepComm
from trainers.contract import Partition
from trainers.continuous.state import PartitionedState, ResidentState, last_wins


def _ctx(rank: int = 0, world: int = 1) -> DistContext:
    return DistContext(rank, world, "gloo", torch.device("cpu"), Comm(rank, world, torch.device("cpu")))


def _layout():
    return build_temporal_model("apan", memory_dim=4, edge_dim=2).layout


@pytest.mark.parametrize("deduplicate", [True, False])
def test_route_restores_every_position_exactly(deduplicate):
    rng = np.random.default_rng(0)
    owner = rng.integers(0, 3, 50)
    layout = _layout()
    state = PartitionedState(_ctx(1, 3), layout.width, layout.empty_rows, owner, deduplicate_ids=deduplicate)
    ids = rng.integers(0, 50, 400)
    route = state.route(ids)
    np.testing.assert_array_equal(route.request_ids[route.inverse], ids)  # Alg. 2 restore
    owners = owner[route.request_ids]
    assert np.all(np.diff(owners) >= 0)  # grouped by owner for the all-to-all
    np.testing.assert_array_equal(route.send_counts, np.bincount(owners, minlength=3))
    assert len(route.request_ids) == (len(np.unique(ids)) if deduplicate else len(ids))


def test_global_to_local_map_numbers_owned_vertices():
    owner = np.array([1, 0, 1, 1, 0])
    layout = _layout()
    state = PartitionedState(_ctx(1, 2), layout.width, layout.empty_rows, owner, deduplicate_ids=True)
    np.testing.assert_array_equal(state.local_index, [0, -1, 1, 2, -1])
    assert len(state.table) == 3


def test_last_wins_keeps_the_highest_priority_write():
    ids = np.array([5, 3, 5, 7, 3])
    priority = np.array([0, 4, 9, 1, 2])
    unique, winner = last_wins(ids, priority)
    np.testing.assert_array_equal(unique, [3, 5, 7])
    np.testing.assert_array_equal(winner, [1, 2, 3])


def test_resident_state_write_then_fetch():
    layout = _layout()
    state = ResidentState(_ctx(), layout.width, layout.empty_rows, np.zeros(10, dtype=np.int64))
    rows = torch.arange(3 * layout.width, dtype=torch.float32).view(3, -1)
    state.write(np.array([2, 4, 2]), rows, np.array([0, 1, 5]))
    got = state.fetch(state.route(np.array([4, 2, 0])))
    torch.testing.assert_close(got[0], rows[1])
    torch.testing.assert_close(got[1], rows[2])
    torch.testing.assert_close(got[2], layout.empty_rows(1)[0])


def test_new_rows_push_the_message_into_the_mailbox():
    model = build_temporal_model("apan", memory_dim=4, edge_dim=2)
    layout = model.layout
    b = 2
    rows = layout.empty_rows(3 * b)
    inputs = BatchInputs(rows, torch.tensor([3.0, 4.0]), torch.ones(b, 2))
    out = model(inputs)
    state, memory_ts, mails, mail_ts = layout.split(out.new_rows)
    torch.testing.assert_close(memory_ts, torch.tensor([3.0, 4.0, 3.0, 4.0]))
    torch.testing.assert_close(mail_ts[:, 0], memory_ts)
    assert torch.all(mail_ts[:, 1:] == -1)  # older slots still empty
    # message of src = [src memory, dst memory, edge features]; of dst = [dst, src, features]
    torch.testing.assert_close(mails[0, 0, :4], state[0, :4])
    torch.testing.assert_close(mails[0, 0, 4:8], state[2, :4])
    torch.testing.assert_close(mails[2, 0, 4:8], state[0, :4])
    again = model(BatchInputs(torch.cat([out.new_rows, rows[:b]]), torch.tensor([5.0, 6.0]), torch.ones(b, 2)))
    _, _, mails2, mail_ts2 = layout.split(again.new_rows)
    torch.testing.assert_close(mails2[:, 1], mails[:, 0])  # the previous message moved one slot down
    torch.testing.assert_close(mail_ts2[:, 1], mail_ts[:, 0])


def test_plans_do_not_depend_on_the_rank_count(stream_store):
    """Negatives and sampled neighbours of an event are the same whichever rank computes it."""
    from trainers.continuous.sampler import TemporalSampler
    stream = EventStream.from_store(open_store(stream_store))
    sampler = TemporalSampler(stream.src, stream.dst, stream.t, stream.num_nodes)
    owner = np.arange(stream.num_nodes) % 2

    def plans(rank, world):
        planner = BatchPlanner(stream, sampler, 4, "uniform", 9, DepComm().assign_events(Partition(owner), rank, world),
                               lambda ids: None)
        return list(Prefetcher(planner, "train", 250))

    whole = plans(0, 1)
    halves = [plans(0, 2), plans(1, 2)]
    for i, full in enumerate(whole):
        for part in (halves[0][i], halves[1][i]):
            where = part.positions
            np.testing.assert_array_equal(part.negatives, full.negatives[where])
            rows = np.concatenate([where, full.size + where, 2 * full.size + where])
            np.testing.assert_array_equal(part.neighbors.nodes, full.neighbors.nodes[rows])
        assert len(halves[0][i].positions) + len(halves[1][i].positions) == full.size


def test_memory_is_carried_from_training_through_validation_into_test(stream_store):
    """TGL's protocol: no reset between splits, so validation sees trained memory and test sees the
    memory validation events wrote; evaluating a split from any other state scores differently."""
    from dgbench.dist import PhaseTimer
    from trainers.config import RunConfig
    from trainers.continuous.family import build_trainer, partition_problem
    from trainers.experiment import resolve
    run = resolve(RunConfig(scheme="single", model="tgn", dataset=stream_store, memory_dim=16, batch_size=200,
                            neighbors=5))
    problem = partition_problem(run)
    trainer = build_trainer(_ctx(), run, run.scheme.partition(problem, 1, run.scheme_options), problem)
    trainer.train_epoch(0, PhaseTimer(torch.device("cpu")))
    trained = trainer.state.table.clone()
    carried = trainer.evaluate()
    trainer.state.table = trained.clone()
    assert trainer._evaluate_split("test") != carried["test"]  # validation's writes reached test
    trainer.state.table = trained.clone()
    assert trainer._evaluate_split("val") == carried["val"]  # evaluation itself is deterministic
    trainer.state.reset()
    assert trainer._evaluate_split("val") != carried["val"]  # training's memory reached validation
    trainer.state.reset()
    assert trainer._evaluate_split("test") != carried["test"]  # and no reset came between val and test
