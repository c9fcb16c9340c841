"""Memory-based continuous-time TGNNs (TGN, JODIE, APAN) over a packed node-memory-and-mailbox row.

Every vertex owns one state row (:class:`StateLayout`); per batch TGL's order. For the distributed
schemes (Sven §2.3, Alg. 1) :meth:`TemporalModel.node_view` reads one vertex's own row and a batch
writes back update rows.
See docs/continuous-training.md (section "Models and where they differ from TGL").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from dgbench.options import Options, option
from dgbench.registry import model_of, register_model


@dataclass(frozen=True)
class StateLayout:
    """Column layout of a vertex state row: [memory | memory_ts | mails (slots x mail_dim) | mail_ts]."""

    memory_dim: int
    state_dim: int  # memory_dim, or 2 * memory_dim when the updater keeps an LSTM cell
    mail_slots: int
    mail_dim: int

    @property
    def memory_ts_col(self) -> int:
        return self.state_dim

    @property
    def mails_start(self) -> int:
        return self.state_dim + 1

    @property
    def mail_ts_start(self) -> int:
        return self.mails_start + self.mail_slots * self.mail_dim

    @property
    def width(self) -> int:
        return self.mail_ts_start + self.mail_slots

    def empty_rows(self, count: int) -> torch.Tensor:
        """Rows of vertices never seen: zero memory, no mail (mail_ts = -1 marks an empty slot)."""
        rows = torch.zeros(count, self.width)
        rows[:, self.mail_ts_start:] = -1.0
        return rows

    def split(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(state, memory_ts, mails (R, S, D), mail_ts (R, S)) views of packed rows."""
        mails = rows[:, self.mails_start:self.mail_ts_start].reshape(-1, self.mail_slots, self.mail_dim)
        return rows[:, :self.state_dim], rows[:, self.memory_ts_col], mails, rows[:, self.mail_ts_start:]

    def pack(self, state: torch.Tensor, memory_ts: torch.Tensor, mails: torch.Tensor,
             mail_ts: torch.Tensor) -> torch.Tensor:
        return torch.cat([state, memory_ts[:, None], mails.flatten(1), mail_ts], dim=1)

    @property
    def update_width(self) -> int:
        """Width of an update row: [state | t | mail | mail t] (no mail columns without a mailbox)."""
        return self.state_dim + 1 + (self.mail_dim + 1 if self.mail_slots else 0)

    def update_rows(self, state: torch.Tensor, t: torch.Tensor, mail: torch.Tensor | None = None,
                    mail_t: torch.Tensor | None = None) -> torch.Tensor:
        parts = [state, t[:, None]]
        if self.mail_slots:
            parts += [mail, (t if mail_t is None else mail_t)[:, None]]
        return torch.cat(parts, dim=1)

    def merge(self, rows: torch.Tensor, updates: torch.Tensor, sets_memory: torch.Tensor) -> torch.Tensor:
        """Stored rows after one update each: memory and its time replaced where ``sets_memory`` (an
        endpoint's update; False: a mail delivered to a neighbour), the mail pushed into the mailbox
        (most recent first, the oldest dropped)."""
        keep = ~sets_memory[:, None]
        head = torch.where(keep, rows[:, :self.state_dim + 1], updates[:, :self.state_dim + 1])
        if not self.mail_slots:
            return torch.cat([head, rows[:, self.state_dim + 1:]], dim=1)
        if self.mail_slots == 1:  # the one slot is replaced: the update's [mail | mail t] is the row's tail
            return torch.cat([head, updates[:, self.state_dim + 1:]], dim=1)
        _, _, mails, mail_ts = self.split(rows)
        mail = updates[:, self.state_dim + 1:self.state_dim + 1 + self.mail_dim]
        mails = torch.cat([mail[:, None], mails[:, :-1]], dim=1)
        mail_ts = torch.cat([updates[:, -1:], mail_ts[:, :-1]], dim=1)
        return torch.cat([head, mails.flatten(1), mail_ts], dim=1)


class TimeEncoder(nn.Module):
    """cos(Δt w) with fixed frequencies w_i = 10^(-9 i / (dim - 1)) (TGN/TGL's initial values).

    The frequencies are not trained (GraphMixer, Cong et al. ICLR'23 §3.1), unlike TGL's TimeEncode: with
    second-valued Δt (LastFM: up to 10^7 s) one Adam step of size lr moves every w below lr to ±lr, so
    the slow frequencies vanish after the first batch and each later step shifts the phases w Δt by
    lr Δt (hundreds of radians): the time features turn into noise that changes every step.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("frequencies", 1.0 / 10 ** torch.linspace(0, 9, dim))

    def forward(self, delta: torch.Tensor) -> torch.Tensor:
        return torch.cos(delta.reshape(-1, 1).to(self.frequencies.dtype) * self.frequencies)

    def beside(self, features: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """[features, φ(delta)] built in place (no concatenation copy); neither side carries a gradient."""
        out = features.new_empty(len(delta), features.shape[1] + len(self.frequencies))
        out[:, :features.shape[1]] = features
        self.into(out[:, features.shape[1]:], delta)
        return out

    def into(self, out: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """φ(delta) written into ``out`` (len(delta), dim), a view of a wider buffer; no gradient."""
        torch.mul(delta.reshape(-1, 1).to(self.frequencies.dtype), self.frequencies, out=out)
        return out.cos_()


class GatherRows(torch.autograd.Function):
    """``apply(index, *blocks)``: rows ``index`` of each block (``index_select``), as many lookups as blocks
    in one autograd node. Its backward sums each block's row gradients into their source rows with
    ``index_add_``: on CPU ~1.5x faster than an embedding lookup's backward (which sorts the index per
    block) and than indexing's (an accumulating ``index_put``); docs/performance.md ("The TGN step")."""

    @staticmethod
    def forward(ctx, index: torch.Tensor, *blocks: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(index)
        ctx.shapes = [block.shape for block in blocks]
        rows = tuple(block.index_select(0, index) for block in blocks)
        ctx.mark_non_differentiable(*(out for out, needed in zip(rows, ctx.needs_input_grad[1:]) if not needed))
        return rows

    @staticmethod
    def backward(ctx, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        (index,) = ctx.saved_tensors
        return (None, *(grad.new_zeros(shape).index_add_(0, index, grad)
                        if grad is not None and needed else None
                        for grad, shape, needed in zip(grads, ctx.shapes, ctx.needs_input_grad[1:])))


def gather_rows(index: torch.Tensor, *blocks: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Rows ``index`` of every block (:class:`GatherRows`)."""
    return GatherRows.apply(index, *blocks)


@dataclass
class PairViews:
    """The views of a batch's positions, left ungathered: ``pairs`` (one row per distinct (vertex, query time)
    pair, carrying the gradient) and ``pair`` (each position's row among them), so the view of position i is
    ``pairs[pair[i]]``. TGN's attention grid reads its neighbours' views straight from the pairs, and its
    backward sums their gradients straight into the pairs (one move each way instead of two: a gather to the
    positions, then into the grid). docs/performance.md ("The TGN step")."""

    pairs: torch.Tensor
    pair: torch.Tensor

    def __len__(self) -> int:
        return len(self.pair)

    def split(self, first: int) -> tuple[PairViews, PairViews]:
        return PairViews(self.pairs, self.pair[:first]), PairViews(self.pairs, self.pair[first:])

    def part(self, start: int, stop: int) -> PairViews:
        """Positions ``start:stop`` (an attention block's roots or slots), still ungathered."""
        return PairViews(self.pairs, self.pair[start:stop])

    def rows(self, positions: torch.Tensor) -> torch.Tensor:
        """The views of ``positions`` (an index into the positions), gathered."""
        return gather_rows(self.pair.index_select(0, positions), self.pairs)[0]

    def gathered(self) -> torch.Tensor:
        """The positions' views as one tensor (``pairs[pair]``, gradients summed per pair)."""
        return gather_rows(self.pair, self.pairs)[0]


QUERY_BLOCK = 2048  # queries per block of the evaluation-time memory update (a block's gates stay in cache)
ROOT_BLOCK = 512  # roots per block of the evaluation-time attention (a block's neighbour grids stay in cache)
# TGN's attention runs over the real slots alone when they fill less than this share of the (roots, k) grid:
# per training step (forward + backward, Wikipedia, M = 100) the grid form costs ~2.0 us per grid cell and
# the real-slot form ~5.1 us per real slot: they break even at a fill of ~0.33-0.39 (M = 100 and 172;
# docs/performance.md, "The TGN step")
FLAT_ATTENTION_DENSITY = 0.4


class MemoryUpdater(nn.Module):
    """Updates memory with the most recent mail and the time since the last update (GRU / LSTM / RNN)."""

    def __init__(self, kind: str, memory_dim: int, mail_dim: int, time_dim: int):
        super().__init__()
        self.kind, self.memory_dim = kind, memory_dim
        cell = {"gru": nn.GRUCell, "lstm": nn.LSTMCell, "rnn": nn.RNNCell}[kind]
        self.time_encoder = TimeEncoder(time_dim)
        self.cell = cell(mail_dim + time_dim, memory_dim)

    @property
    def state_dim(self) -> int:
        return 2 * self.memory_dim if self.kind == "lstm" else self.memory_dim

    def forward(self, state: torch.Tensor, memory_ts: torch.Tensor, latest_mail: torch.Tensor,
                query_t: torch.Tensor, vertex: torch.Tensor | None = None,
                has_mail: torch.Tensor | None = None) -> torch.Tensor:
        """The cell's step at each query: ``state``/``memory_ts``/``latest_mail`` are rows of distinct
        vertices and ``vertex`` each query's row among them (None: one row per query); a vertex whose
        ``has_mail`` is False keeps its state (None: every vertex has mail). TGL only updates vertices that
        received messages, so the cell runs over the vertices with mail and their queries alone, and the
        others' queries copy the state (the same values the cell's result would be replaced by)."""
        if has_mail is None or bool(has_mail.all()):
            return self._step(state, memory_ts, latest_mail, query_t, vertex)
        if self.kind == "gru" and vertex is not None and not torch.is_grad_enabled():
            return self._gru_over_every_query(state, memory_ts, latest_mail, query_t, vertex, has_mail)
        mailed = has_mail.nonzero(as_tuple=True)[0]
        if vertex is None:
            kept, queries, row_of_query = state, mailed, None
        else:
            kept, queries = state[vertex], has_mail[vertex].nonzero(as_tuple=True)[0]
            row_of_query = (torch.cumsum(has_mail, 0) - 1)[vertex[queries]]  # its vertex's row among ``mailed``
        fresh = self._step(state[mailed], memory_ts[mailed], latest_mail[mailed], query_t[queries], row_of_query)
        return kept.index_put((queries,), fresh)

    def _gru_over_every_query(self, state: torch.Tensor, memory_ts: torch.Tensor, latest_mail: torch.Tensor,
                              query_t: torch.Tensor, vertex: torch.Tensor, has_mail: torch.Tensor) -> torch.Tensor:
        """Without a gradient (evaluation): the cell over every query, then the kept state copied over the
        queries of vertices without mail. Few vertices lack mail (~2 % of an evaluation batch's pairs on
        Wikipedia), so this costs less than selecting the mailed ones and scattering their results back; a
        mailed query's rows are the same, though not bit for bit (the products have more rows)."""
        fresh = self._gru_without_grad(state, memory_ts, latest_mail, query_t, vertex)
        unmailed = (~has_mail).index_select(0, vertex).nonzero(as_tuple=True)[0]
        return fresh.index_copy_(0, unmailed, state.index_select(0, vertex.index_select(0, unmailed)))

    def _step(self, state: torch.Tensor, memory_ts: torch.Tensor, latest_mail: torch.Tensor, query_t: torch.Tensor,
              vertex: torch.Tensor | None) -> torch.Tensor:
        """The cell's step at each query, every vertex having mail (arguments as :meth:`forward`'s).

        The cell's input is [mail, φ(query t - memory t)], so its input product splits into a mail part
        and a time part, W_ih x = W_mail mail + W_time φ: the mail part and the hidden product W_hh h
        depend on the vertex only and run once per distinct vertex (summed there where the gate equation
        only needs their sum), the time part once per query (a Wikipedia batch queries each vertex at
        ~3.7 distinct times: its recent neighbours' roots). What a query needs of its vertex is gathered
        in one row. The gates are the cell's own equations (torch.nn.GRUCell / RNNCell / LSTMCell, same
        parameters); the arithmetic is the same with or without grouping, so every placement computes the
        same views."""
        if self.kind == "gru" and vertex is not None and not torch.is_grad_enabled():
            return self._gru_without_grad(state, memory_ts, latest_mail, query_t, vertex)
        cell, mail_width, width = self.cell, latest_mail.shape[1], self.memory_dim
        # the input weight's mail and time columns by split (its backward is one concatenation; each slice's
        # fills a zero weight-sized tensor, and the two are then summed)
        mail_weight, time_weight = cell.weight_ih.split([mail_width, cell.weight_ih.shape[1] - mail_width], 1)
        mail_part = F.linear(latest_mail, mail_weight, cell.bias_ih)
        hidden_part = F.linear(leading_columns(state, width), cell.weight_hh, cell.bias_hh)
        # column blocks are taken with split (a slice's backward fills a zero tensor of the whole width, per
        # slice), and every block is gathered in one node (each block's gradient goes straight to the vertex's
        # row, summed with index_add_: gather_rows)
        if self.kind == "gru":  # r and z need mail + hidden; n needs them apart (n = tanh(n_in + r * n_h))
            mail_r, mail_z, mail_n = mail_part.split(width, 1)
            hidden_r, hidden_z, hidden_n = hidden_part.split(width, 1)
            gates = [mail_r + hidden_r, mail_z + hidden_z, mail_n, hidden_n]
        else:
            gates = [mail_part + hidden_part]
        if vertex is not None:
            *gates, state = gather_rows(vertex, *gates, state)
            memory_ts = memory_ts[vertex]
        encoded = self.time_encoder(query_t - memory_ts)
        if self.kind == "gru":  # a product per gate, not one split: a split's backward concatenates the (queries, 3M)
            # gradient, and r and z apart, as a chunk's backward concatenates their two (queries, M) gradients
            time_r, time_z, time_n = (F.linear(encoded, weight) for weight in time_weight.split(width))
        else:
            time_part = F.linear(encoded, time_weight)
        if self.kind == "rnn":
            fresh = torch.tanh(gates[0] + time_part)
        elif self.kind == "gru":
            reset, update = torch.sigmoid(gates[0] + time_r), torch.sigmoid(gates[1] + time_z)
            new = torch.tanh(gates[2] + time_n + reset * gates[3])
            fresh = (state - new) * update + new  # (1 - z) n + z h, as torch's gru_cell computes it
        else:
            i, f, g, o = (gates[0] + time_part).chunk(4, dim=1)
            cell_state = torch.sigmoid(f) * state[:, width:] + torch.sigmoid(i) * torch.tanh(g)
            fresh = torch.cat([torch.sigmoid(o) * torch.tanh(cell_state), cell_state], dim=1)
        return fresh

    def _gru_without_grad(self, state: torch.Tensor, memory_ts: torch.Tensor, latest_mail: torch.Tensor,
                          query_t: torch.Tensor, vertex: torch.Tensor) -> torch.Tensor:
        """:meth:`_step`'s GRU when no gradient is kept (evaluation), bit for bit: the same products and gate
        equations, but the per-query part runs over blocks of ``QUERY_BLOCK`` queries that stay in cache,
        in place (an evaluation batch updates ~3x more (vertex, time) pairs per root than a training one:
        negatives' neighbours repeat less). Each transcendental runs on a contiguous buffer of the same
        layout as in :meth:`_step` (vectorised and scalar tails of sigmoid/tanh round differently), and
        row blocks of a product give the rows of the whole product."""
        cell, mail_width, width = self.cell, latest_mail.shape[1], self.memory_dim
        mail_part = F.linear(latest_mail, cell.weight_ih[:, :mail_width], cell.bias_ih)
        hidden_part = F.linear(state[:, :width], cell.weight_hh, cell.bias_hh)
        mail_rz, mail_n = mail_part.split([2 * width, width], 1)
        hidden_rz, hidden_n = hidden_part.split([2 * width, width], 1)
        vertex_rz, vertex_n, vertex_hidden_n = mail_rz + hidden_rz, mail_n.contiguous(), hidden_n.contiguous()
        time_weight = cell.weight_ih[:, mail_width:]
        weight_rz, weight_n = time_weight[:2 * width], time_weight[2 * width:]
        hidden = state[:, :width]
        fresh = state.new_empty(len(vertex), width)
        for start in range(0, len(vertex), QUERY_BLOCK):
            rows = vertex[start:start + QUERY_BLOCK]
            encoded = self.time_encoder(query_t[start:start + QUERY_BLOCK] - memory_ts.index_select(0, rows))
            reset_update = vertex_rz.index_select(0, rows).add_(F.linear(encoded, weight_rz)).sigmoid_()
            reset, update = reset_update.chunk(2, dim=1)
            new = vertex_n.index_select(0, rows).add_(F.linear(encoded, weight_n))
            new = new.add_(reset * vertex_hidden_n.index_select(0, rows)).tanh_()
            torch.sub(hidden.index_select(0, rows), new, out=fresh[start:start + QUERY_BLOCK]).mul_(update).add_(new)
        return fresh


class EdgePredictor(nn.Module):
    """Logit of an edge from two embeddings: W_out relu(W_src h_u + W_dst h_v) (TGL)."""

    def __init__(self, dim: int):
        super().__init__()
        self.src, self.dst, self.out = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, 1)

    def forward(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.src(h_src) + self.dst(h_dst))).squeeze(-1)

    def score_blocks(self, sources: torch.Tensor, destinations: torch.Tensor, events: int) -> torch.Tensor:
        """(events, C) logits of C candidate pairs per event, each side projected once: ``destinations`` holds
        C blocks of ``events`` rows (candidate j's destinations), ``sources`` one block shared by every
        candidate (the event's source) or C blocks. The same equation as :meth:`forward` per pair; a shared
        source is projected once, not once per candidate."""
        per_event = max(events, 1)
        projected_src = self.src(sources).view(len(sources) // per_event, events, -1)
        projected_dst = self.dst(destinations).view(len(destinations) // per_event, events, -1)
        return self.out(F.relu(projected_src + projected_dst)).squeeze(-1).T


def split_views(views: torch.Tensor | PairViews, roots: int, uses_neighbors: bool
                ) -> tuple[torch.Tensor | PairViews, torch.Tensor | PairViews | None]:
    """(the first ``roots`` views, the rest or None where the model reads no neighbours or none are there) by
    ``split``: its backward is one concatenation, where each slice's backward fills a zero tensor of all the
    views and the two are then summed (on LastFM's slice, batch 600, ~18,500 views a step). :class:`PairViews`
    split into two :class:`PairViews` (nothing gathered)."""
    if len(views) <= roots:
        return views, None
    root_view, rest = views.split(roots) if isinstance(views, PairViews) else views.split([roots, len(views) - roots])
    return root_view, (rest if uses_neighbors else None)


def gathered(views: torch.Tensor | PairViews) -> torch.Tensor:
    """``views`` as one tensor (a :class:`PairViews` gathered to its positions)."""
    return views.gathered() if isinstance(views, PairViews) else views


def positions(views: torch.Tensor | PairViews, start: int, stop: int) -> torch.Tensor | PairViews:
    """Positions ``start:stop`` of ``views``, a :class:`PairViews` left ungathered."""
    return views.part(start, stop) if isinstance(views, PairViews) else views[start:stop]


def rows_at(views: torch.Tensor | PairViews, index: torch.Tensor) -> torch.Tensor:
    """The views of the positions ``index``, gathered (a :class:`PairViews` straight from its pairs)."""
    if isinstance(views, PairViews):
        return views.rows(index.to(views.pair.device))
    return views.index_select(0, index.to(views.device))


def new_rows_like(views: torch.Tensor | PairViews, count: int, width: int) -> torch.Tensor:
    """An empty (count, width) tensor of the views' dtype and device."""
    return (views.pairs if isinstance(views, PairViews) else views).new_empty(count, width)


def leading_columns(rows: torch.Tensor, width: int) -> torch.Tensor:
    """``rows[:, :width]``, but ``rows`` itself where it is that wide: a slice's backward fills a zero tensor of
    the whole input and copies into it, even when the slice is all of it (TGN's views are its memory alone)."""
    return rows if rows.shape[1] == width else rows[:, :width]


@dataclass
class BatchInputs:
    """What one rank's share of a batch gives the model; roots = [src, dst, negative dst] (3b rows).

    ``root_rows``/``neighbor_rows`` are the fetched state rows when the scheme holds them (None under
    DepComm, whose owners send views); neighbours are (3b, k) slots of which ``neighbor_mask`` marks the
    real ones (only real ones have rows, in row-major slot order). Models that deliver mails to
    neighbours get the mask without rows.
    """

    root_rows: torch.Tensor | None
    t: torch.Tensor  # (b,) event times
    edge_features: torch.Tensor  # (b, F)
    neighbor_rows: torch.Tensor | None = None
    neighbor_mask: torch.Tensor | None = None  # (3b, k) bool
    neighbor_dt: torch.Tensor | None = None  # (3b, k) query time minus neighbour event time
    neighbor_edge_features: torch.Tensor | None = None  # (3b, k, F)
    # --protocol batch (trainers/continuous/data.py): the roots are the distinct vertices (neighbour fields
    # are per distinct root), ``root_index`` (3b,) each event root's position among them, ``root_t`` the
    # time each is queried at, ``delivery_mask`` (2b, k) the real neighbour slots of each event endpoint
    root_index: torch.Tensor | None = None
    root_t: torch.Tensor | None = None
    delivery_mask: torch.Tensor | None = None


@dataclass
class BatchOutputs:
    pos_logits: torch.Tensor
    neg_logits: torch.Tensor
    new_rows: torch.Tensor  # (2b, update width) update rows of [src, dst], detached
    # update rows of the mails delivered to sampled neighbours (row-major over neighbor_mask[:2b])
    delivered_rows: torch.Tensor | None = None


class TemporalModel(nn.Module):
    """Shared memory + mailbox machinery; subclasses define :meth:`embed` (and may widen :meth:`node_view`)."""

    updater_kind = "gru"
    mail_slots = 1
    uses_neighbors = False  # the embedding reads sampled neighbours' views (they are fetched)
    delivers_to_neighbors = False  # new mails also go to the endpoints' sampled neighbours (APAN)
    # update rows come from the views alone, so they can be written back while the embedding runs
    # (Sven §3.3.2's second pipeline level); a model whose forward computes them otherwise leaves it False
    rows_before_embedding = False
    # why the model cannot train under --protocol batch (empty: it can; docs/continuous-training.md)
    batch_protocol_refusal = ""

    def __init__(self, memory_dim: int, edge_dim: int, time_dim: int | None = None, time_shift: float = 0.0,
                 time_scale: float = 1.0):
        super().__init__()
        self.memory_dim, self.edge_dim = memory_dim, edge_dim
        time_dim = time_dim or memory_dim
        mail_dim = 2 * memory_dim + edge_dim  # TGL message: [own memory, partner memory, edge features]
        self.updater = MemoryUpdater(self.updater_kind, memory_dim, mail_dim, time_dim)
        self.layout = StateLayout(memory_dim, self.updater.state_dim, self.mail_slots, mail_dim)
        self.predictor = EdgePredictor(memory_dim)
        self.time_shift, self.time_scale = float(time_shift), float(time_scale)

    def updated_state(self, rows: torch.Tensor, query_t: torch.Tensor, vertex: torch.Tensor | None = None
                      ) -> torch.Tensor:
        """Memory after consuming the most recent mail, at the query time (TGL: before embedding).
        ``vertex``: each query's row among ``rows`` (rows of distinct vertices; None: a row per query)."""
        state, memory_ts, mails, mail_ts = self.layout.split(rows)
        return self.updater(state, memory_ts, mails[:, 0], query_t, vertex, has_mail=mail_ts[:, 0] >= 0)

    @property
    def view_width(self) -> int:
        """Width of :meth:`node_view` (what a DepComm owner returns per position)."""
        return self.layout.state_dim

    def node_view(self, rows: torch.Tensor, query_t: torch.Tensor) -> torch.Tensor:
        """What the embedding needs of one vertex at ``query_t``, from its own N&M row only: the updated
        memory (its first ``state_dim`` columns) and any per-vertex extra a model appends."""
        return self.node_views(rows, None, query_t)

    def node_views(self, rows: torch.Tensor, vertex: torch.Tensor | None, query_t: torch.Tensor) -> torch.Tensor:
        """:meth:`node_view` of each query, given the rows of distinct vertices and each query's row among
        them (``vertex``; None: a row per query): the vertex-only parts of the update run once per vertex."""
        if type(self).node_view is not TemporalModel.node_view:  # a model with its own per-row view only
            return self.node_view(rows if vertex is None else rows[vertex], query_t)
        return self.updated_state(rows, query_t, vertex)

    def embed(self, inputs: BatchInputs, root_view: torch.Tensor, root_t: torch.Tensor,
              neighbor_view: torch.Tensor | PairViews | None) -> torch.Tensor:
        raise NotImplementedError

    reads_pair_views = False  # forward takes PairViews (its neighbours' views read straight from the pairs)

    def forward(self, inputs: BatchInputs, views: torch.Tensor | PairViews | None = None) -> BatchOutputs:
        """Scores and update rows. ``views``: :meth:`node_view` of the roots then the real neighbours
        (computed by the caller, or by the owners under DepComm), else computed here from the rows;
        :class:`PairViews` where the model ``reads_pair_views`` (then the roots' views are gathered here; under
        ``--protocol batch`` too, where the pairs are the distinct vertices)."""
        b = len(inputs.t)
        if isinstance(views, PairViews) and inputs.root_index is None:
            roots, neighbors = views.split(3 * b)
            root_view, root_t = roots.gathered(), inputs.t.repeat(3)
            h = self.embed(inputs, root_view, root_t, neighbors if self.uses_neighbors and len(neighbors) else None)
            return self._outputs(inputs, h, root_view[:2 * b])
        if inputs.root_index is not None:
            assert views is not None, "--protocol batch: the caller computes the distinct roots' views"
            h, endpoint_view = self.embed_roots(inputs, views)
            return self._outputs(inputs, h, endpoint_view)
        root_t = inputs.t.repeat(3)
        if views is None:
            rows, times = inputs.root_rows, root_t
            if self.uses_neighbors and inputs.neighbor_rows is not None:
                nbr_t = root_t[:, None].expand_as(inputs.neighbor_mask)[inputs.neighbor_mask]
                rows, times = torch.cat([rows, inputs.neighbor_rows]), torch.cat([times, nbr_t])
            views = self.node_view(rows, times)
        root_view, neighbor_view = split_views(views, 3 * b, self.uses_neighbors)
        h = self.embed(inputs, root_view, root_t, neighbor_view)
        return self._outputs(inputs, h, root_view[:2 * b])

    def _outputs(self, inputs: BatchInputs, h: torch.Tensor, endpoint_view: torch.Tensor) -> BatchOutputs:
        b = len(inputs.t)
        # [src | dst, negative dst] by split (its backward is one concatenation; a slice's fills a zero copy of
        # h per slice), the sources projected once for both candidates (EdgePredictor.score_blocks)
        sources, destinations = h.split([b, len(h) - b])
        pos, neg = self.predictor.score_blocks(sources, destinations, b).unbind(1)
        new_rows, delivered = self.write_rows(inputs, endpoint_view)
        return BatchOutputs(pos, neg, new_rows, delivered)

    def embed_roots(self, inputs: BatchInputs, views: torch.Tensor | PairViews) -> tuple[torch.Tensor, torch.Tensor]:
        """``--protocol batch``: (embedding of every event root, view of every event endpoint [src, dst]),
        computed once per distinct root vertex (``views``: the distinct roots' views, then the real neighbours';
        :class:`PairViews` where the model ``reads_pair_views``, in training and evaluation)."""
        assert inputs.root_index is not None and inputs.root_t is not None
        count = len(inputs.root_t)
        root_view, neighbor_view = split_views(views, count, self.uses_neighbors)
        h = self.embed(inputs, root_view, inputs.root_t, neighbor_view)
        endpoints = inputs.root_index[:2 * len(inputs.t)]
        endpoint_view = rows_at(root_view, endpoints)  # detached by write_rows: no backward
        # each event root's row among the distinct roots' (gather_rows: its backward sums with index_add_, no sort)
        return gather_rows(inputs.root_index, h)[0], endpoint_view

    def new_rows(self, inputs: BatchInputs, view: torch.Tensor) -> torch.Tensor:
        """Update rows of [src, dst]: updated memory at t and the new message [own memory, partner
        memory, edge features] (TGL's identity message), both at the event time."""
        return self.write_rows(inputs, view)[0]

    def write_rows(self, inputs: BatchInputs, view: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(update rows of [src, dst], update rows of the mails delivered to neighbours or None), detached."""
        b = len(inputs.t)
        view = view.detach()
        state = view[:, :self.layout.state_dim]
        hidden = state[:, :self.memory_dim]
        partner = torch.cat([hidden[b:], hidden[:b]])
        mail = torch.cat([hidden, partner, inputs.edge_features.repeat(2, 1)], dim=1)
        t = inputs.t.repeat(2)
        rows = self.layout.update_rows(state, t, mail)
        if not (self.delivers_to_neighbors and inputs.neighbor_mask is not None):
            return rows, None
        mask = inputs.neighbor_mask[:2 * b] if inputs.delivery_mask is None else inputs.delivery_mask
        sender = mask.nonzero(as_tuple=True)[0]  # row-major: each endpoint's mail once per real neighbour
        delivered = self.layout.update_rows(torch.zeros_like(state[sender]), t[sender], mail[sender])
        return rows, delivered


class TGN(TemporalModel):
    """TGN: GRU memory, one layer of temporal multi-head attention over k sampled neighbours."""

    updater_kind = "gru"
    uses_neighbors = True
    rows_before_embedding = True
    reads_pair_views = True

    def __init__(self, memory_dim: int, edge_dim: int, heads: int = 2, **kwargs):
        super().__init__(memory_dim, edge_dim, **kwargs)
        self.heads = heads
        self.time_encoder = TimeEncoder(memory_dim)
        self.query = nn.Linear(2 * memory_dim, memory_dim)
        self.key = nn.Linear(2 * memory_dim + edge_dim, memory_dim)
        self.value = nn.Linear(2 * memory_dim + edge_dim, memory_dim)
        self.out = nn.Linear(2 * memory_dim, memory_dim)
        self.norm = nn.LayerNorm(memory_dim)

    def embed(self, inputs, root_view, root_t, neighbor_view):
        """Attention of each root over its sampled neighbours. Without gradient (evaluation), over blocks of
        ``ROOT_BLOCK`` roots and their slots: every step is per root, so each root's embedding is the same to
        float rounding (a block's GEMMs may take another MKL kernel), and a block's (roots, k, width) grids
        stay in cache instead of a whole evaluation batch's (its K negatives make ~4x a training batch's roots).
        Views given as :class:`PairViews` (evaluation) are gathered per block straight from the distinct
        (vertex, time) pairs: the neighbours' into the block's grid, the roots' as the block's rows; no view is
        copied per position for the whole batch (~100,000 positions of an evaluation batch: a fresh ~40 MB
        tensor, whose page faults cost more than the copy; docs/performance.md)."""
        roots = len(root_view)
        if torch.is_grad_enabled() or neighbor_view is None or roots <= ROOT_BLOCK:
            return self._embed(inputs, gathered(root_view), neighbor_view)
        mask = inputs.neighbor_mask
        slot_end = torch.cumsum(mask.sum(1), 0).tolist()  # neighbour views are row-major over the real slots
        out = new_rows_like(root_view, roots, self.memory_dim)
        for start in range(0, roots, ROOT_BLOCK):
            stop = min(start + ROOT_BLOCK, roots)
            block = replace(inputs, neighbor_mask=mask[start:stop], neighbor_dt=inputs.neighbor_dt[start:stop],
                            neighbor_edge_features=inputs.neighbor_edge_features[start:stop])
            first_slot = slot_end[start - 1] if start else 0
            out[start:stop] = self._embed(block, gathered(positions(root_view, start, stop)),
                                          positions(neighbor_view, first_slot, slot_end[stop - 1]))
        return out

    def _embed(self, inputs: BatchInputs, root_view: torch.Tensor, neighbor_view: torch.Tensor | PairViews | None
               ) -> torch.Tensor:
        hidden = leading_columns(root_view, self.memory_dim)
        query = self._query(hidden)
        if neighbor_view is None:
            aggregated = torch.zeros_like(hidden)
        else:
            aggregated = self._attend(inputs, query, neighbor_view if isinstance(neighbor_view, PairViews)
                                      else leading_columns(neighbor_view, self.memory_dim))
        return self.norm(F.relu(self.out(torch.cat([aggregated, hidden], dim=1))))

    def _query(self, hidden: torch.Tensor) -> torch.Tensor:
        """TGL's query W_q [h, φ(0)] + b_q. φ(0) is one constant row (cos 0), so its product joins the bias:
        W_q,h h + (W_q,φ φ(0) + b_q), a GEMM over the memory's M columns instead of 2M (the same equation,
        summed in another order)."""
        width = self.memory_dim
        hidden_weight, time_weight = self.query.weight.split([width, self.query.weight.shape[1] - width], 1)
        bias = F.linear(hidden.new_ones(1, time_weight.shape[1]), time_weight, self.query.bias)[0]  # φ(0) = cos 0
        return F.linear(hidden, hidden_weight, bias)

    def _attend(self, inputs: BatchInputs, query: torch.Tensor, neighbor_hidden: torch.Tensor | PairViews
                ) -> torch.Tensor:
        """Multi-head attention of each root over its real neighbour slots, TGL's layer: per head, scores
        q·(W_k x_j + b_k) / sqrt(d) over the slots' inputs x_j = [h_j, e_j, φ(Δt_j)], softmax over the real
        slots, output Σ_j w_j (W_v x_j + b_v); a root without neighbours aggregates nothing.

        Two forms of the same equations, chosen by the share of real slots in the (roots, k) grid
        (``len(neighbor_hidden)``: one view per real slot): below ``FLAT_ATTENTION_DENSITY`` the keys and
        values of the real slots alone, in one product (:meth:`_attend_real_slots`), else the products moved
        to the root side over the padded grid (:meth:`_attend_grid`). docs/performance.md ("The TGN step")."""
        if len(neighbor_hidden) < FLAT_ATTENTION_DENSITY * inputs.neighbor_mask.numel():
            if isinstance(neighbor_hidden, PairViews):
                neighbor_hidden = leading_columns(neighbor_hidden.gathered(), self.memory_dim)
            return self._attend_real_slots(inputs, query, neighbor_hidden)
        return self._attend_grid(inputs, query, neighbor_hidden)

    def _attend_real_slots(self, inputs: BatchInputs, query: torch.Tensor, neighbor_hidden: torch.Tensor
                           ) -> torch.Tensor:
        """:meth:`_attend` over the real slots only, as TGL computes it: keys and values of every real slot
        in one (slots, 2M+E) by (2M+E, 2M) product ([W_k; W_v] stacked; the h_j columns and the gradient-free
        [e_j, φ(Δt_j)] columns as two GEMMs summed, so no gradient is formed for the latter), scores per
        slot, a softmax over each root's slots (on the small (roots, k, heads) score grid) and the weighted
        values summed per root. Its cost grows with the real slots, not with the grid: the form for sparse
        grids (under ``--protocol batch`` a Wikipedia batch fills ~20 % of its grid, under TGL's ~48 %)."""
        mask = inputs.neighbor_mask
        roots, k = mask.shape
        heads, head_dim, width = self.heads, self.memory_dim // self.heads, self.memory_dim
        root_of_slot, slot = mask.nonzero(as_tuple=True)  # row-major: the order of ``neighbor_hidden``
        rest = self.time_encoder.beside(inputs.neighbor_edge_features[root_of_slot, slot],
                                        inputs.neighbor_dt[root_of_slot, slot])  # [e_j, φ(Δt_j)], no gradient
        weight = torch.cat([self.key.weight, self.value.weight])
        bias = torch.cat([self.key.bias, self.value.bias])
        # split, not views of one (slots, 2, heads, d) tensor: a split's backward is one concatenation,
        # a select's fills a zero tensor of the whole width per part
        keys, values = torch.addmm(F.linear(rest, weight[:, width:], bias), neighbor_hidden,
                                   weight[:, :width].t()).split([width, width], 1)
        per_slot_query = query.index_select(0, root_of_slot).view(-1, heads, head_dim)
        scores = (per_slot_query * keys.view(-1, heads, head_dim)).sum(-1) / math.sqrt(head_dim)  # (slots, heads)
        grid = scores.new_full((roots, k, heads), -1e9).index_put((root_of_slot, slot), scores)
        weights = torch.softmax(grid, dim=1)[root_of_slot, slot]
        weighted = weights[:, :, None] * values.view(-1, heads, head_dim)
        return query.new_zeros(roots, heads, head_dim).index_add(0, root_of_slot, weighted).flatten(1)

    def _attend_grid(self, inputs: BatchInputs, query: torch.Tensor, neighbor_hidden: torch.Tensor | PairViews
                     ) -> torch.Tensor:
        """:meth:`_attend` with its products moved to the root side, over the padded (roots, k) grid.

        Both products are linear in x_j, so they are reassociated to the root side (the same equations,
        summed in another order): the scores are (W_kᵀ q)·x_j + q·b_k and the output W_v (Σ_j w_j x_j) +
        b_v Σ_j w_j. The (3b·k, 2M+E) by (2M+E, 2M) key/value products of every slot become two
        (3b, M) by (M, 2M+E) products per root, and per slot only dot products and weighted sums remain:
        one small batched product each over the slots' inputs x_j laid out as one (roots, k, 2M+E) grid
        (:class:`GridAttention`, whose backward is written out; on LastFM's slice a batch has 6.6 real
        slots per root, on Wikipedia 5.6)."""
        mask = inputs.neighbor_mask
        roots, k = mask.shape
        heads, head_dim = self.heads, self.memory_dim // self.heads
        grid, source, source_of_cell = self._slot_grid(inputs, neighbor_hidden)
        per_head = query.view(roots, heads, head_dim)
        key_of_input = torch.einsum("rhd,hdx->rhx", per_head, self.key.weight.view(heads, head_dim, -1))
        key_bias = (per_head * self.key.bias.view(heads, head_dim)).sum(-1)
        weights, weighted_input = GridAttention.apply(key_of_input, key_bias, source, grid, source_of_cell,
                                                      mask[:, None, :], math.sqrt(head_dim),
                                                      isinstance(neighbor_hidden, PairViews))
        value_weight = self.value.weight.view(heads, head_dim, -1)
        aggregated = (torch.einsum("rhx,hdx->rhd", weighted_input, value_weight)
                      + self.value.bias.view(heads, head_dim) * weights.sum(2, keepdim=True))
        return aggregated.flatten(1)

    def _slot_grid(self, inputs: BatchInputs, neighbor_hidden: torch.Tensor | PairViews
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(the slots' inputs x_j = [h_j, e_j, φ(Δt_j)] as one (roots, k, 2M+E) grid, built without a gradient;
        the tensor the h_j are rows of; which rows). For a tensor of the real slots' views: those views, and
        the flat grid cell of each (row-major as ``neighbor_hidden``; padding h_j zero). For
        :class:`PairViews`: the pairs' views, and each grid cell's pair, the h_j moved once from the pairs
        into the grid; a padding cell holds pair 0's view (its score is masked and its weight is 0, so it
        adds nothing forward, and its gradient row is zero)."""
        mask, features = inputs.neighbor_mask, inputs.neighbor_edge_features
        assert mask is not None and features is not None and inputs.neighbor_dt is not None
        roots, k = mask.shape
        width, edge_dim = self.memory_dim, features.shape[-1]
        real = mask.reshape(-1)
        grid = features.new_empty(roots * k, width + edge_dim + len(self.time_encoder.frequencies))
        hidden = grid[:, :width]
        if isinstance(neighbor_hidden, PairViews):
            source = leading_columns(neighbor_hidden.pairs, width)
            rows = torch.zeros(roots * k, dtype=torch.long, device=real.device).masked_scatter_(real,
                                                                                                neighbor_hidden.pair)
            torch.index_select(source.detach(), 0, rows, out=hidden)  # strided out: written in place, one pass
        else:
            source, rows = neighbor_hidden, real.nonzero(as_tuple=True)[0]
            # strided: zero the padding cells alone (a strided fill of all is ~1.4x slower)
            hidden.index_fill_(0, (~real).nonzero(as_tuple=True)[0], 0.0)
            hidden.index_copy_(0, rows, neighbor_hidden.detach())
        grid[:, width:width + edge_dim] = features.reshape(roots * k, edge_dim)
        self.time_encoder.into(grid[:, width + edge_dim:], inputs.neighbor_dt.reshape(-1))
        return grid.view(roots, k, -1), source, rows


class GridAttention(torch.autograd.Function):
    """Scores, softmax and weighted inputs of :meth:`TGN._attend_grid` over the (roots, k, X) grid of the slots'
    inputs x_j = [h_j, e_j, φ(Δt_j)], with its backward written out: only the h_j columns carry a gradient (to
    the real slots' views), and each gradient is one batched product over the grid (autograd's would take two
    products and a sum for the h_j gradient, and a scatter's backward to reach the slots).

    forward(key_of_input (R, H, X) = W_kᵀ q per head, key_bias (R, H) = q·b_k, source (S, M) the views the h_j
    are rows of (only its gradient is used; its values are in the grid), grid (R, k, X), rows: which rows of
    ``source`` the grid holds (:meth:`TGN._slot_grid`: the real slots' flat cells (S,) for real-slot views, or
    each cell's row (R k,) for pair views), real (R, 1, k) bool, scale = sqrt(d), row_per_cell: whether ``rows``
    is the latter) -> (weights (R, H, k):
    softmax over the real slots, zero elsewhere; Σ_j w_j x_j (R, H, X)).
    """

    @staticmethod
    def forward(ctx, key_of_input, key_bias, source, grid, rows, real, scale, row_per_cell):
        scores = torch.baddbmm(key_bias[:, :, None], key_of_input, grid.transpose(1, 2)).div_(scale)
        weights = torch.softmax(scores.masked_fill_(~real, -1e9), dim=2).mul_(real)
        ctx.save_for_backward(key_of_input, grid, rows, weights)
        ctx.scale, ctx.source_shape = scale, source.shape
        ctx.row_per_cell = row_per_cell
        return weights, torch.bmm(weights, grid)

    @staticmethod
    def backward(ctx, grad_weights, grad_weighted):
        key_of_input, grid, rows, weights = ctx.saved_tensors
        width = ctx.source_shape[1]
        # dL/dw_j = given + (dL/d Σ w x)·x_j; the softmax's backward on the real slots (w = 0 elsewhere)
        grad_w = torch.bmm(grad_weighted, grid.transpose(1, 2))
        if grad_weights is not None:
            grad_w = grad_w.add_(grad_weights)
        grad_scores = (grad_w - (grad_w * weights).sum(2, keepdim=True)).mul_(weights).div_(ctx.scale)
        grad_key_of_input = torch.bmm(grad_scores, grid) if ctx.needs_input_grad[0] else None
        grad_key_bias = grad_scores.sum(2) if ctx.needs_input_grad[1] else None
        grad_hidden = None
        if ctx.needs_input_grad[2]:  # dL/dh_j = Σ_h (dL/ds_hj (W_kᵀ q)_h + w_hj dL/d(Σ w x)_h): one product
            roots, heads, k = weights.shape
            per_slot = torch.cat([grad_scores, weights], dim=1).transpose(1, 2)  # (R, k, 2H)
            per_head = torch.cat([key_of_input[:, :, :width], grad_weighted[:, :, :width]], dim=1)  # (R, 2H, M)
            per_cell = torch.bmm(per_slot, per_head).view(roots * k, width)
            # pair views: every cell's gradient summed into its pair (a padding cell's is zero); real-slot views:
            # the real cells' rows
            grad_hidden = (per_cell.new_zeros(ctx.source_shape).index_add_(0, rows, per_cell) if ctx.row_per_cell
                           else per_cell.index_select(0, rows))
        return grad_key_of_input, grad_key_bias, grad_hidden, None, None, None, None, None


class JODIE(TemporalModel):
    """JODIE: RNN memory, embedding projected to the query time h = m * (1 + w Δt) (KDD'19 Eq. 3)."""

    updater_kind = "rnn"
    rows_before_embedding = True

    def __init__(self, memory_dim: int, edge_dim: int, **kwargs):
        super().__init__(memory_dim, edge_dim, **kwargs)
        self.time_projection = nn.Linear(1, memory_dim)
        nn.init.normal_(self.time_projection.weight, 0.0, 1.0 / math.sqrt(memory_dim))
        nn.init.zeros_(self.time_projection.bias)

    @property
    def view_width(self) -> int:
        return self.layout.state_dim + 1

    def node_views(self, rows: torch.Tensor, vertex: torch.Tensor | None, query_t: torch.Tensor) -> torch.Tensor:
        """[updated memory | time of the vertex's last update] (the projection's Δt needs the latter)."""
        _, memory_ts, _, mail_ts = self.layout.split(rows)
        last_update = torch.where(mail_ts[:, 0] >= 0, mail_ts[:, 0], memory_ts)
        if vertex is not None:
            last_update = last_update[vertex]
        return torch.cat([self.updated_state(rows, query_t, vertex), last_update[:, None]], dim=1)

    def embed(self, inputs, root_view, root_t, neighbor_view):
        last_update = root_view[:, -1]
        delta = ((root_t - last_update - self.time_shift) / self.time_scale)[:, None]  # standardised Δt
        return root_view[:, :self.memory_dim] * (1 + self.time_projection(delta))


MAIL_DELIVERY = ("neighbors", "endpoints")


class APAN(TemporalModel):
    """APAN: LSTM memory (Sven §5.1.2); the embedding attends from the memory over the mailbox
    (SIGMOD'21 §3.3). ``mail_delivery="neighbors"`` (default) also delivers every new mail to the
    endpoints' sampled temporal neighbours (APAN's asynchronous propagation; TGL ``deliver_to:
    neighbors``, most recent mail per vertex, an endpoint's own mail winning over delivered ones in
    the same batch); ``"endpoints"`` is the earlier variant that mails the two endpoints only."""

    updater_kind = "lstm"
    mail_slots = 10  # APAN/TGL mailbox size
    rows_before_embedding = True

    def __init__(self, memory_dim: int, edge_dim: int, heads: int = 2, mail_delivery: str = "neighbors",
                 mailbox_slots: int = 10, **kwargs):
        if mailbox_slots < 1:
            raise ValueError(f"mailbox_slots must be at least 1, not {mailbox_slots}")
        self.mail_slots = mailbox_slots  # read by TemporalModel.__init__ to lay out the state row
        super().__init__(memory_dim, edge_dim, **kwargs)
        if mail_delivery not in MAIL_DELIVERY:
            raise ValueError(f"mail_delivery must be one of {MAIL_DELIVERY}, not {mail_delivery!r}")
        self.delivers_to_neighbors = mail_delivery == "neighbors"
        self.heads = heads
        self.time_encoder = TimeEncoder(memory_dim)
        mail_dim = self.layout.mail_dim
        self.query = nn.Linear(memory_dim, memory_dim)
        self.key = nn.Linear(mail_dim + memory_dim, memory_dim)
        self.value = nn.Linear(mail_dim + memory_dim, memory_dim)
        self.out = nn.Linear(2 * memory_dim, memory_dim)
        self.norm = nn.LayerNorm(memory_dim)

    @property
    def view_width(self) -> int:
        return self.layout.state_dim + self.memory_dim

    def node_views(self, rows: torch.Tensor, vertex: torch.Tensor | None, query_t: torch.Tensor) -> torch.Tensor:
        """[updated (h, c) | attention of h over the vertex's own mailbox at ``query_t``]."""
        state = self.updated_state(rows, query_t, vertex)
        mailbox_rows = rows if vertex is None else rows[vertex]
        return torch.cat([state, self._attend_mailbox(mailbox_rows, state[:, :self.memory_dim], query_t)], dim=1)

    def embed(self, inputs, root_view, root_t, neighbor_view):
        hidden = root_view[:, :self.memory_dim]
        aggregated = root_view[:, self.layout.state_dim:]
        return self.norm(F.relu(self.out(torch.cat([aggregated, hidden], dim=1))))

    def _attend_mailbox(self, rows: torch.Tensor, hidden: torch.Tensor, query_t: torch.Tensor) -> torch.Tensor:
        _, _, mails, mail_ts = self.layout.split(rows)
        roots, slots = mail_ts.shape
        valid = mail_ts >= 0
        dt = (query_t[:, None] - mail_ts).reshape(-1)
        encoded_dt = self.time_encoder(dt).view(roots, slots, len(self.time_encoder.frequencies))  # roots may be 0
        keys_in = torch.cat([mails, encoded_dt], dim=2)
        head_dim = self.memory_dim // self.heads
        q = self.query(hidden).view(roots, 1, self.heads, head_dim)
        # keys and values in one product with [W_k; W_v] stacked (one GEMM and one weight gradient, not two)
        stacked = F.linear(keys_in, torch.cat([self.key.weight, self.value.weight]),
                           torch.cat([self.key.bias, self.value.bias]))
        keys, values = (part.view(roots, slots, self.heads, head_dim) for part in stacked.chunk(2, dim=-1))
        scores = ((q * keys).sum(-1) / math.sqrt(head_dim)).masked_fill(~valid[:, :, None], -1e9)
        weights = torch.softmax(scores, dim=1) * valid[:, :, None]  # an empty mailbox gives zeros
        return (weights[..., None] * values).sum(1).flatten(1)  # roots may be 0 (a rank's empty share)


@register_model("tgn", family="continuous", summary="TGN: GRU memory + temporal attention over sampled neighbours")
def tgn(memory_dim: int, edge_dim: int, time_shift: float = 0.0, time_scale: float = 1.0) -> TemporalModel:
    return TGN(memory_dim, edge_dim, time_shift=time_shift, time_scale=time_scale)


@register_model("jodie", family="continuous", summary="JODIE: RNN memory + time-projection embedding")
def jodie(memory_dim: int, edge_dim: int, time_shift: float = 0.0, time_scale: float = 1.0) -> TemporalModel:
    return JODIE(memory_dim, edge_dim, time_shift=time_shift, time_scale=time_scale)


@dataclass(frozen=True)
class APANOptions(Options):
    mail_delivery: str = option("neighbors", "Who receives a new mail: the endpoints and their sampled neighbours "
                                "(APAN's propagation), or the endpoints only (the earlier variant).",
                                choices=MAIL_DELIVERY)
    mailbox_slots: int = option(10, "Mails each vertex keeps (APAN/TGL: 10). 1 keeps only the most recent one: "
                                "the N&M Sven prices (memory + one message; TPDS Table 1, Alg. 1, Eq. 9).",
                                positive=True)


@register_model("apan", family="continuous", options=APANOptions,
                summary="APAN: LSTM memory + attention over a 10-slot mailbox, mails propagated to neighbours")
def apan(memory_dim: int, edge_dim: int, time_shift: float = 0.0, time_scale: float = 1.0,
         mail_delivery: str = "neighbors", mailbox_slots: int = 10) -> TemporalModel:
    return APAN(memory_dim, edge_dim, time_shift=time_shift, time_scale=time_scale, mail_delivery=mail_delivery,
                mailbox_slots=mailbox_slots)


def build_temporal_model(name: str, memory_dim: int, edge_dim: int, time_shift: float = 0.0,
                         time_scale: float = 1.0) -> TemporalModel:
    """A registered continuous-time model with the given memory width (even, for the two heads);
    JODIE standardises time differences with ``time_shift`` and ``time_scale``."""
    model = model_of("continuous", name).build(memory_dim=memory_dim, edge_dim=edge_dim, time_shift=time_shift,
                                               time_scale=time_scale)
    assert isinstance(model, TemporalModel)
    return model
