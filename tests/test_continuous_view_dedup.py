"""The memory update runs once per distinct (vertex, query time) pair of a batch: the views
and the parameters' gradients equal those of updating every position, and fewer rows are updated."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgbench.dist import Comm, DistContext
from dgbench.models.temporal import build_temporal_model
from dgbench.trainers.continuous.state import ResidentState, distinct_queries
from dgbench.trainers.continuous.sven.state import PartitionedState


def _ctx() -> DistContext:
    return DistContext(0, 1, "gloo", torch.device("cpu"), Comm(0, 1, torch.device("cpu")))


def test_distinct_queries_pairs_vertex_and_time():
    ids = np.array([3, 1, 3, 3, 1, 2, 3])
    times = np.array([5.0, 5.0, 5.0, 7.0, 5.0, 5.0, 5.0])
    first, pair = distinct_queries(ids, times)
    np.testing.assert_array_equal(np.sort(first), [0, 1, 3, 5])  # (3,5) (1,5) (3,7) (2,5), first positions
    np.testing.assert_array_equal(ids[first][pair], ids)
    np.testing.assert_array_equal(times[first][pair], times)
    first, pair = distinct_queries(np.zeros(0, np.int64), np.zeros(0))  # a rank with nothing to update
    assert len(first) == len(pair) == 0


@pytest.mark.parametrize("placement", ["resident", "partitioned", "partitioned-no-dedup", "partitioned-3-chunks"])
@pytest.mark.parametrize("model_name", ["tgn", "jodie", "apan"])
def test_views_once_per_pair_equal_every_position(placement, model_name):
    torch.manual_seed(0)
    model = build_temporal_model(model_name, memory_dim=6, edge_dim=3).double()
    layout = model.layout
    owner = np.zeros(12, dtype=np.int64)
    state = {"resident": lambda: ResidentState(_ctx(), layout, owner),
             "partitioned": lambda: PartitionedState(_ctx(), layout, owner),
             "partitioned-no-dedup": lambda: PartitionedState(_ctx(), layout, owner, deduplicate_ids=False),
             "partitioned-3-chunks": lambda: PartitionedState(_ctx(), layout, owner, chunks=3)}[placement]()
    rng = np.random.default_rng(1)
    table = torch.from_numpy(rng.normal(size=(12, layout.width)))
    table[:, layout.mail_ts_start:] = torch.from_numpy(rng.integers(-1, 3, size=(12, layout.mail_slots))).double()
    table[:, layout.memory_ts_col] = 0.0
    state.table = table
    ids = rng.integers(0, 12, 300)  # many repeats of a vertex, at two query times
    query_t = torch.from_numpy(rng.integers(4, 6, 300).astype(np.float64))
    calls, vertex_rows = [], []

    def counting_view(rows: torch.Tensor, vertex: torch.Tensor | None, times: torch.Tensor) -> torch.Tensor:
        calls.append(len(times))
        vertex_rows.append(len(rows))
        return model.node_views(rows, vertex, times)

    views, rows = state.views(state.route(ids), query_t, counting_view)
    expected = model.node_view(table[torch.from_numpy(ids)], query_t)
    if placement == "resident":  # a local table: only the distinct vertices' rows are read, none returned
        assert rows is None
    else:
        torch.testing.assert_close(rows, table[torch.from_numpy(ids)], rtol=0, atol=0)
    torch.testing.assert_close(views, expected, rtol=1e-12, atol=1e-12)
    assert sum(calls) == len(np.unique(np.stack([ids, query_t.numpy()]), axis=1).T) < len(ids)
    if placement != "partitioned-3-chunks":  # one chunk: each vertex's row reaches the view function once
        assert sum(vertex_rows) == len(np.unique(ids)) < sum(calls)

    assert_same_parameter_gradients(model, views, expected, rng)


@pytest.mark.parametrize("model_name", ["tgn", "jodie", "apan"])
def test_one_query_time_per_vertex_passes_rows_without_a_gather(model_name):
    """Where every vertex is queried at one time (--protocol batch), the view function gets the pairs' rows
    with no per-pair index (vertex None) when a gradient is kept, and the views and gradients equal those of
    every position; without a gradient the per-pair index stays (evaluation's blocked GRU path)."""
    torch.manual_seed(0)
    model = build_temporal_model(model_name, memory_dim=6, edge_dim=3).double()
    layout = model.layout
    state = ResidentState(_ctx(), layout, np.zeros(12, dtype=np.int64))
    rng = np.random.default_rng(2)
    table = torch.from_numpy(rng.normal(size=(12, layout.width)))
    table[:, layout.mail_ts_start:] = torch.from_numpy(rng.integers(-1, 3, size=(12, layout.mail_slots))).double()
    table[:, layout.memory_ts_col] = 0.0
    state.table = table
    ids = rng.integers(0, 12, 80)
    query_t = torch.from_numpy(np.full(80, 5.0))
    received = []

    def recording_view(rows: torch.Tensor, vertex: torch.Tensor | None, times: torch.Tensor) -> torch.Tensor:
        received.append(vertex)
        return model.node_views(rows, vertex, times)

    views, _ = state.views(state.route(ids), query_t, recording_view)
    assert received == [None]
    expected = model.node_view(table[torch.from_numpy(ids)], query_t)
    torch.testing.assert_close(views, expected, rtol=1e-12, atol=1e-12)
    assert_same_parameter_gradients(model, views, expected, rng)
    with torch.no_grad():
        state.views(state.route(ids), query_t, recording_view)
    assert received[-1] is not None


@pytest.mark.parametrize("kind", ["gru", "rnn", "lstm"])
@pytest.mark.parametrize("grouped", [False, True])
def test_memory_updater_is_the_torch_cell(kind, grouped):
    """The updater's split product (mail and hidden parts per vertex, time part per query) computes torch's
    own GRUCell / RNNCell / LSTMCell on [mail, φ(Δt)] with the same parameters, values and gradients."""
    from dgbench.models.temporal import MemoryUpdater

    torch.manual_seed(0)
    updater = MemoryUpdater(kind, memory_dim=5, mail_dim=7, time_dim=4).double()
    rng = np.random.default_rng(2)
    vertices = 6
    state = torch.from_numpy(rng.normal(size=(vertices, updater.state_dim)))
    memory_ts = torch.from_numpy(rng.uniform(0, 3, vertices))
    mail = torch.from_numpy(rng.normal(size=(vertices, 7)))
    vertex = torch.from_numpy(rng.integers(0, vertices, 20)) if grouped else torch.arange(vertices)
    query_t = torch.from_numpy(rng.uniform(3, 9, len(vertex)))
    has_mail = torch.from_numpy(rng.random(vertices) < 0.7)
    got = updater(state, memory_ts, mail, query_t, vertex if grouped else None, has_mail)
    inputs = torch.cat([mail[vertex], updater.time_encoder(query_t - memory_ts[vertex])], dim=1)
    hidden = state[vertex, :5]
    if kind == "lstm":
        want = torch.cat(updater.cell(inputs, (hidden, state[vertex, 5:])), dim=1)
    else:
        want = updater.cell(inputs, hidden)
    want = torch.where(has_mail[vertex][:, None], want, state[vertex])  # no mail: the vertex keeps its state
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    weights = torch.from_numpy(rng.normal(size=got.shape))
    params = list(updater.cell.parameters())
    grads = torch.autograd.grad((got * weights).sum(), params)
    for g, w in zip(grads, torch.autograd.grad((want * weights).sum(), params)):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def _dense_tgn_attention(model, inputs, query: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """TGL's attention as written: keys and values of every slot of the (roots, k) grid (padding zero),
    scores masked to -1e9, softmax over k, weights times the mask, weighted sum of the values."""
    import math

    mask = inputs.neighbor_mask
    roots, k = mask.shape
    heads, head_dim = model.heads, model.memory_dim // model.heads
    keys_in = torch.cat([hidden, inputs.neighbor_edge_features[mask], model.time_encoder(inputs.neighbor_dt[mask])], 1)
    real = mask.nonzero(as_tuple=True)
    keys = hidden.new_zeros(roots, k, model.memory_dim).index_put(real, model.key(keys_in))
    values = hidden.new_zeros(roots, k, model.memory_dim).index_put(real, model.value(keys_in))
    scores = (query.view(roots, 1, heads, head_dim) * keys.view(roots, k, heads, head_dim)).sum(-1) / math.sqrt(
        head_dim)
    weights = torch.softmax(scores.masked_fill(~mask[:, :, None], -1e9), dim=1) * mask[:, :, None]
    return (weights[..., None] * values.view(roots, k, heads, head_dim)).sum(1).flatten(1)


@pytest.mark.parametrize("form", ["_attend_grid", "_attend_real_slots"])
@pytest.mark.parametrize("edge_dim", [3, 0])
def test_tgn_attention_forms_equal_the_dense_grid(edge_dim, form):
    """Both forms of TGN's attention, its key/value products moved to the root side ((W_kᵀ q)·x_j,
    W_v Σ w_j x_j) over the padded grid, and keys and values of the real slots alone in one stacked product,
    equal TGL's dense (roots, k) form with keys and values per slot: embeddings and the gradients of the query,
    the neighbours' views and every parameter, float64, with a root that has no neighbour at all and
    (edge_dim 0) a stream without edge features (Wikipedia's)."""
    from dgbench.models.temporal import BatchInputs

    torch.manual_seed(0)
    model = build_temporal_model("tgn", memory_dim=6, edge_dim=edge_dim).double()
    for parameter in model.parameters():  # not the initial zeros: every bias takes part
        torch.nn.init.normal_(parameter)
    rng = np.random.default_rng(5)
    roots, k = 9, 4
    mask = torch.from_numpy(rng.random((roots, k)) < 0.6)
    mask[0] = False
    mask[1] = True
    inputs = BatchInputs(None, torch.zeros(3), torch.zeros(3, edge_dim), neighbor_mask=mask,
                         neighbor_dt=torch.from_numpy(rng.uniform(0, 4, (roots, k))),
                         neighbor_edge_features=torch.from_numpy(rng.normal(size=(roots, k, edge_dim))))
    query = torch.from_numpy(rng.normal(size=(roots, 6))).requires_grad_()
    hidden = torch.from_numpy(rng.normal(size=(int(mask.sum()), 6))).requires_grad_()
    got = getattr(model, form)(inputs, query, hidden)
    want = _dense_tgn_attention(model, inputs, query, hidden)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert got[0].abs().max() == 0
    _assert_same_gradients(got, want, [query, hidden, *model.parameters()],
                           torch.from_numpy(rng.normal(size=got.shape)), atol=1e-10)


@pytest.mark.parametrize("density", [0.15, 0.9])
def test_tgn_attention_takes_the_real_slot_form_on_sparse_grids(monkeypatch, density):
    """The real-slot form runs where real slots fill less than FLAT_ATTENTION_DENSITY of the grid (the batch
    protocol's sparse grids), the grid form elsewhere; both give the embedding the other gives."""
    from dgbench.models import temporal
    from dgbench.models.temporal import BatchInputs

    torch.manual_seed(1)
    model = build_temporal_model("tgn", memory_dim=6, edge_dim=2).double()
    roots, k = 40, 10
    mask = torch.rand(roots, k) < density
    inputs = BatchInputs(None, torch.zeros(3), torch.zeros(3, 2), neighbor_mask=mask,
                         neighbor_dt=torch.rand(roots, k, dtype=torch.float64) * 5,
                         neighbor_edge_features=torch.randn(roots, k, 2, dtype=torch.float64))
    query = torch.randn(roots, 6, dtype=torch.float64)
    hidden = torch.randn(int(mask.sum()), 6, dtype=torch.float64)
    sparse = int(mask.sum()) < temporal.FLAT_ATTENTION_DENSITY * mask.numel()
    assert sparse == (density < 0.5)
    taken = []
    for form in ("_attend_grid", "_attend_real_slots"):
        original = getattr(temporal.TGN, form)
        monkeypatch.setattr(temporal.TGN, form, lambda self, *a, _f=original, _n=form: taken.append(_n) or _f(self, *a))
    got = model._attend(inputs, query, hidden)
    assert taken == ["_attend_real_slots" if sparse else "_attend_grid"]
    other = temporal.TGN._attend_grid if sparse else temporal.TGN._attend_real_slots
    torch.testing.assert_close(got, other(model, inputs, query, hidden), rtol=1e-12, atol=1e-12)


def _assert_same_gradients(got: torch.Tensor, want: torch.Tensor, wrt: list[torch.Tensor], weights: torch.Tensor,
                           atol: float) -> None:
    """The gradients of Σ weights·got and Σ weights·want with respect to ``wrt`` agree (float64; None alike)."""
    grads = torch.autograd.grad((got * weights).sum(), wrt, allow_unused=True)
    reference = torch.autograd.grad((want * weights).sum(), wrt, allow_unused=True)
    for got_grad, want_grad in zip(grads, reference):
        assert (got_grad is None) == (want_grad is None)
        if got_grad is not None:
            torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=atol)


def test_tgn_query_time_encoding_folded_equals_the_concatenated_input():
    """TGN's query with φ(0)'s product folded into the bias (W_q,h h + (W_q,φ φ(0) + b_q)) equals TGL's
    W_q [h, φ(0)] + b_q on the concatenated input: values and the gradients of h and every parameter, float64."""
    torch.manual_seed(0)
    model = build_temporal_model("tgn", memory_dim=6, edge_dim=3).double()
    for parameter in model.parameters():  # not the initial zeros: every bias takes part
        torch.nn.init.normal_(parameter)
    hidden = torch.from_numpy(np.random.default_rng(6).normal(size=(7, 6))).requires_grad_()
    got = model._query(hidden)
    want = model.query(torch.cat([hidden, model.time_encoder(hidden.new_zeros(len(hidden)))], dim=1))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    _assert_same_gradients(got, want, [hidden, *model.parameters()],
                           torch.from_numpy(np.random.default_rng(7).normal(size=got.shape)), atol=1e-12)


def assert_same_parameter_gradients(model, views: torch.Tensor, expected: torch.Tensor,
                                    rng: np.random.Generator) -> None:
    """The model's parameter gradients of a random weighting of ``views`` equal those of ``expected``."""
    weights = torch.from_numpy(rng.normal(size=views.shape))
    grads = torch.autograd.grad((views * weights).sum(), list(model.parameters()), allow_unused=True)
    reference = torch.autograd.grad((expected * weights).sum(), list(model.parameters()), allow_unused=True)
    for got, want in zip(grads, reference):
        assert (got is None) == (want is None)
        if got is not None:
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
