"""N&M bookkeeping without processes: dedup routes restore every position, last write wins, update rows
merge into the holder's mailbox, APAN's deliveries, plans and the even compute split."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgbench.dist import Comm, DistContext
from dgbench.store import open_store
from dgbench.models.temporal import APAN, BatchInputs, build_temporal_model
from dgbench.trainers.continuous.data import BatchPlanner, EventStream, Prefetcher
from dgbench.trainers.continuous.sven.depcomm import DepComm
from dgbench.trainers.contract import Partition, scheme_of
from dgbench.trainers.continuous.state import ResidentState, last_wins
from dgbench.trainers.continuous.sven.state import PartitionedState
from dgbench.trainers.continuous.sven.formulas import even_share


def _ctx(rank: int = 0, world: int = 1) -> DistContext:
    return DistContext(rank, world, "gloo", torch.device("cpu"), Comm(rank, world, torch.device("cpu")))


def _layout():
    return build_temporal_model("apan", memory_dim=4, edge_dim=2).layout


@pytest.mark.parametrize("deduplicate", [True, False])
def test_route_restores_every_position_exactly(deduplicate):
    rng = np.random.default_rng(0)
    owner = rng.integers(0, 3, 50)
    layout = _layout()
    state = PartitionedState(_ctx(1, 3), layout, owner, deduplicate_ids=deduplicate)
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
    state = PartitionedState(_ctx(1, 2), layout, owner, deduplicate_ids=True)
    np.testing.assert_array_equal(state.local_index, [0, -1, 1, 2, -1])
    assert len(state.table) == 3


def test_last_wins_keeps_the_highest_priority_write():
    ids = np.array([5, 3, 5, 7, 3])
    priority = np.array([0, 4, 9, 1, 2])
    unique, winner = last_wins(ids, priority)
    np.testing.assert_array_equal(unique, [3, 5, 7])
    np.testing.assert_array_equal(winner, [1, 2, 3])


def test_resident_state_merges_the_winning_update():
    layout = _layout()
    state = ResidentState(_ctx(), layout, np.zeros(10, dtype=np.int64))
    updates = torch.arange(3 * layout.update_width, dtype=torch.float32).view(3, -1)
    state.write(np.array([2, 4, 2]), updates, np.array([0, 1, 5]))
    got = state.fetch(state.route(np.array([4, 2, 0])))
    for row, update in ((got[0], updates[1]), (got[1], updates[2])):
        memory, memory_ts, mails, mail_ts = layout.split(row[None])
        torch.testing.assert_close(memory[0], update[:layout.state_dim])
        torch.testing.assert_close(memory_ts[0], update[layout.state_dim])
        torch.testing.assert_close(mails[0, 0], update[layout.state_dim + 1:-1])
        torch.testing.assert_close(mail_ts[0, 0], update[-1])
        assert torch.all(mail_ts[0, 1:] == -1)
    torch.testing.assert_close(got[2], layout.empty_rows(1)[0])


def test_update_rows_push_the_message_into_the_holders_mailbox():
    model = build_temporal_model("apan", memory_dim=4, edge_dim=2)
    layout = model.layout
    b = 2
    rows = layout.empty_rows(3 * b)
    out = model(BatchInputs(rows, torch.tensor([3.0, 4.0]), torch.ones(b, 2)))
    stored = layout.merge(rows[:2 * b], out.new_rows, torch.ones(2 * b, dtype=torch.bool))
    state, memory_ts, mails, mail_ts = layout.split(stored)
    torch.testing.assert_close(memory_ts, torch.tensor([3.0, 4.0, 3.0, 4.0]))
    torch.testing.assert_close(mail_ts[:, 0], memory_ts)
    assert torch.all(mail_ts[:, 1:] == -1)  # older slots still empty
    # message of src = [src memory, dst memory, edge features]; of dst = [dst, src, features]
    torch.testing.assert_close(mails[0, 0, :4], state[0, :4])
    torch.testing.assert_close(mails[0, 0, 4:8], state[2, :4])
    torch.testing.assert_close(mails[2, 0, 4:8], state[0, :4])
    again = model(BatchInputs(torch.cat([stored, rows[:b]]), torch.tensor([5.0, 6.0]), torch.ones(b, 2)))
    stored2 = layout.merge(stored, again.new_rows, torch.ones(2 * b, dtype=torch.bool))
    _, _, mails2, mail_ts2 = layout.split(stored2)
    torch.testing.assert_close(mails2[:, 1], mails[:, 0])  # the previous message moved one slot down
    torch.testing.assert_close(mail_ts2[:, 1], mail_ts[:, 0])
    # a mail delivered to a neighbour leaves its memory alone and only enters its mailbox
    delivered = layout.merge(stored, again.new_rows, torch.zeros(2 * b, dtype=torch.bool))
    d_state, d_ts, d_mails, _ = layout.split(delivered)
    torch.testing.assert_close(d_state, state)
    torch.testing.assert_close(d_ts, memory_ts)
    torch.testing.assert_close(d_mails[:, 0], mails2[:, 0])


def test_apan_mails_the_sampled_neighbours_of_both_endpoints():
    """APAN's propagation: one delivered mail per real neighbour slot of src and dst (row-major), the
    endpoint's own mail; the endpoints-only variant delivers nothing."""
    torch.manual_seed(0)
    b = 2
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0], [0, 1, 0]], dtype=torch.bool)
    for delivery, expected in (("neighbors", 2 + 0 + 1 + 3), ("endpoints", None)):
        model = APAN(4, 2, mail_delivery=delivery)
        inputs = BatchInputs(model.layout.empty_rows(3 * b), torch.tensor([3.0, 4.0]), torch.ones(b, 2),
                             neighbor_mask=mask)
        out = model(inputs)
        if expected is None:
            assert out.delivered_rows is None
            continue
        assert len(out.delivered_rows) == expected
        senders = [0, 0, 2, 3, 3, 3]  # rows of mask[:2b] with a real slot, row-major
        torch.testing.assert_close(out.delivered_rows[:, model.layout.state_dim + 1:],
                                   out.new_rows[senders, model.layout.state_dim + 1:])


def test_every_scheme_splits_each_batch_evenly():
    owner = np.zeros(10, dtype=np.int64)  # every source owned by rank 0 (a bipartite store's users)
    src = np.zeros(9, dtype=np.int64)
    for scheme in ("depcache", "depcomm", "sven"):
        shares = [scheme_of("continuous", scheme).assign_events(Partition(owner), r, 3)(src) for r in range(3)]
        assert [int(s.sum()) for s in shares] == [3, 3, 3], scheme
        assert np.array_equal(np.flatnonzero(shares[1]), even_share(9, 1, 3))


def test_plans_do_not_depend_on_the_rank_count(stream_store):
    """Negatives and sampled neighbours of an event are the same whichever rank computes it."""
    from dgbench.trainers.continuous.sampler import TemporalSampler
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
    from dgbench.trainers.config import RunConfig
    from dgbench.trainers.continuous.family import build_trainer, partition_problem
    from dgbench.trainers.experiment import resolve
    run = resolve(RunConfig(scheme="single", model="tgn", dataset=stream_store, memory_dim=16, batch_size=200,
                            neighbors=5))
    problem = partition_problem(run)
    trainer = build_trainer(_ctx(), run, run.scheme.partition(problem, 1, run.scheme_options), problem)
    trainer.train_epoch(0, PhaseTimer(torch.device("cpu")))
    evaluation = trainer.evaluation[0]  # the run's fixed evaluation set, as every run scores it

    def score(split: str) -> dict[str, float]:
        with torch.no_grad():  # as evaluate() runs it
            return trainer._evaluate_set(evaluation, split).as_metrics()

    trained = trainer.state.table.clone()
    carried = trainer.evaluate()
    trainer.state.table = trained.clone()
    assert score("test") != carried["test"]  # validation's writes reached test
    trainer.state.table = trained.clone()
    assert score("val") == carried["val"]  # evaluation itself is deterministic
    trainer.state.reset()
    assert score("val") != carried["val"]  # training's memory reached validation
    trainer.state.reset()
    assert score("test") != carried["test"]  # and no reset came between val and test
