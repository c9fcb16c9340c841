"""PyTorch Geometric's TGN as its ``examples/tgn.py`` wires it, in three forms (as built, with dgbench's fixed
time frequencies, and in TGN's paper form on PyG's own modules), trained and scored on dgbench's event stream,
negatives and evaluation sets. The peer of ``benchmarks/test_peer_tgn.py`` (its docstring lists what is equal
and what differs); its forms are checked in ``tests/test_pyg_tgn_peer.py``. Needs the ``peers`` extra."""
from __future__ import annotations

import time
import types

import numpy as np
import torch

from dgbench.tasks.evalset import EvaluationSet
from dgbench.tasks.evaluator import Evaluator
from dgbench.trainers.continuous.data import SPLIT_CODES, EventStream

BATCH, NEIGHBORS, HEADS, SEED = 600, 10, 2, 0


def _import_pyg_tgn():
    from torch_geometric.nn import TGNMemory, TransformerConv  # noqa: PLC0415 - optional peer
    from torch_geometric.nn.models.tgn import IdentityMessage, LastAggregator, LastNeighborLoader  # noqa: PLC0415
    return TGNMemory, TransformerConv, IdentityMessage, LastAggregator, LastNeighborLoader


# The peer's forms: as its example builds it; with dgbench's fixed time frequencies; and TGN's paper form on PyG's
# modules (fixed frequencies + the three departures below, each measured in docs/performance.md "Peers").
EXAMPLE, FIXED, PAPER = "example", "fixed", "paper"
PEER_FORMS = (EXAMPLE, FIXED, PAPER)


def fix_time_frequencies(linear: torch.nn.Linear, dim: int) -> None:
    """PyG's time encoder cos(Linear(1, M)(Δt)) with dgbench's frequencies w_i = 10^(-9 i / (M - 1)), bias 0, not
    trained (TimeEncoder in dgbench/models/temporal.py says why trained frequencies on second-valued Δt turn to
    noise). The same number of products; only the time features' learning is taken away."""
    with torch.no_grad():
        linear.weight.copy_((1.0 / 10 ** torch.linspace(0, 9, dim))[:, None])
        linear.bias.zero_()
    linear.weight.requires_grad_(False)
    linear.bias.requires_grad_(False)


def keep_unmailed_memory(memory, n_id: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """TGNMemory._get_updated_memory, but a vertex with no stored message keeps its memory and last update (TGN,
    Rossi et al. 2020, §3.1: memory is updated for the nodes of an event). PyG runs its GRU on a zero message for
    those (a never-seen vertex gets GRU(0, 0), not 0) and resets their last update to 0. Bound to one
    TGNMemory instance by :class:`PeerTGN` in the paper form."""
    updated, last_update = type(memory)._get_updated_memory(memory, n_id)
    mailed = torch.tensor([memory.msg_s_store[i][0].numel() + memory.msg_d_store[i][0].numel() > 0
                           for i in n_id.tolist()], dtype=torch.bool)
    return (torch.where(mailed[:, None], updated, memory.memory[n_id]),
            torch.where(mailed, last_update, memory.last_update[n_id]))


def insert_most_recent(loader, src: torch.Tensor, dst: torch.Tensor) -> None:
    """LastNeighborLoader.insert keeping each node's ``size`` most recent events. PyG's insert places a node's
    events of one batch at slot (position in the whole sorted batch) mod size, so a node with more than
    ``size`` events in the batch overwrites slots in an arbitrary order and may keep older events (on the
    first 10k Wikipedia events, batch 600, k = 10: 8 % of the (vertex, batch) pairs have > 10 events).
    Here each node's events are ordered by event id and its last ``size`` kept; then, as PyG, the ``size``
    largest ids of old and new. Bound to one loader by :class:`PeerRun` in the paper form."""
    neighbors, nodes = torch.cat([src, dst]), torch.cat([dst, src])
    e_id = torch.arange(loader.cur_e_id, loader.cur_e_id + src.numel()).repeat(2)
    loader.cur_e_id += src.numel()
    order = torch.argsort(nodes * (int(e_id.max()) + 1) + e_id)  # by node, then by event id
    nodes, neighbors, e_id = nodes[order], neighbors[order], e_id[order]
    n_id, counts = nodes.unique_consecutive(return_counts=True)
    group = torch.repeat_interleave(torch.arange(n_id.numel()), counts)
    position = torch.arange(nodes.numel()) - (torch.cumsum(counts, 0) - counts)[group]
    skipped = (counts - loader.size).clamp(min=0)[group]
    kept = position >= skipped
    rows, slots = group[kept], (position - skipped)[kept]
    new_e_id = e_id.new_full((n_id.numel(), loader.size), -1).index_put_((rows, slots), e_id[kept])
    new_neighbors = e_id.new_zeros((n_id.numel(), loader.size)).index_put_((rows, slots), neighbors[kept])
    all_e_id = torch.cat([loader.e_id[n_id], new_e_id], dim=-1)
    all_neighbors = torch.cat([loader.neighbors[n_id], new_neighbors], dim=-1)
    latest, which = all_e_id.topk(loader.size, dim=-1)
    loader.e_id[n_id] = latest
    loader.neighbors[n_id] = torch.gather(all_neighbors, 1, which)


class PeerTGN(torch.nn.Module):
    """PyG's TGN as its example wires it: TGNMemory (identity message, last aggregator, GRU), the
    example's GraphAttentionEmbedding (one TransformerConv, heads=2, edge attr [φ(rel t), msg]) and
    LinkPredictor (W_out relu(W_src z_u + W_dst z_v), the same form as dgbench's EdgePredictor).

    ``form``: :data:`PEER_FORMS`. Under :data:`PAPER` the time frequencies are fixed (``fix_time_frequencies``),
    a vertex without a stored message keeps its memory (``keep_unmailed_memory``) and a neighbour's time
    feature is φ(t - t_j) at the query time t (TGN §3.1's temporal graph attention; the example encodes
    last_update(j) - t_j)."""

    def __init__(self, num_nodes: int, msg_dim: int, memory_dim: int, heads: int = HEADS, dropout: float = 0.0,
                 form: str = EXAMPLE):
        super().__init__()
        if form not in PEER_FORMS:
            raise ValueError(f"unknown peer form {form!r}; one of {PEER_FORMS}")
        TGNMemory, TransformerConv, IdentityMessage, LastAggregator, _ = _import_pyg_tgn()
        self.memory = TGNMemory(num_nodes, msg_dim, memory_dim, memory_dim,
                                message_module=IdentityMessage(msg_dim, memory_dim, memory_dim),
                                aggregator_module=LastAggregator())
        self.conv = TransformerConv(memory_dim, memory_dim // heads, heads=heads, dropout=dropout,
                                    edge_dim=msg_dim + memory_dim)
        self.lin_src = torch.nn.Linear(memory_dim, memory_dim)
        self.lin_dst = torch.nn.Linear(memory_dim, memory_dim)
        self.lin_final = torch.nn.Linear(memory_dim, 1)
        self.form = form
        if form in (FIXED, PAPER):
            fix_time_frequencies(self.memory.time_enc.lin, memory_dim)
        if form == PAPER:
            self.memory._get_updated_memory = types.MethodType(keep_unmailed_memory, self.memory)

    def embed(self, n_id: torch.Tensor, edge_index: torch.Tensor, t: torch.Tensor, msg: torch.Tensor,
              query_t: torch.Tensor) -> torch.Tensor:
        """Embeddings of ``n_id`` (roots and their neighbours) over the loader's (neighbour, root) edges with
        times ``t`` and messages ``msg``; ``query_t``: the batch's first event time (the paper form's t)."""
        z, last_update = self.memory(n_id)
        rel_t = query_t - t if self.form == PAPER else last_update[edge_index[0]] - t
        edge_attr = torch.cat([self.memory.time_enc(rel_t.to(z.dtype)), msg], dim=-1)
        return self.conv(z, edge_index, edge_attr)

    def score(self, z_src: torch.Tensor, z_dst: torch.Tensor) -> torch.Tensor:
        return self.lin_final((self.lin_src(z_src) + self.lin_dst(z_dst)).relu()).squeeze(-1)


class PeerRun:
    """One PyG TGN training epoch and the evaluation passes, on dgbench's event stream and negatives."""

    def __init__(self, stream: EventStream, memory_dim: int, lr: float, seed: int, form: str = EXAMPLE):
        *_, LastNeighborLoader = _import_pyg_tgn()
        self.stream = stream
        features = stream.edge_features if stream.edge_dim else np.zeros((len(stream.src), 1), np.float32)
        self.src, self.dst = torch.from_numpy(stream.src), torch.from_numpy(stream.dst)
        self.t = torch.from_numpy(stream.t.astype(np.int64))  # TGNMemory keeps last_update as int64
        self.msg = torch.from_numpy(features)
        torch.manual_seed(seed)
        self.model = PeerTGN(stream.num_nodes, self.msg.shape[1], memory_dim, form=form)
        self.loader = LastNeighborLoader(stream.num_nodes, size=NEIGHBORS)
        if form == PAPER:
            self.loader.insert = types.MethodType(insert_most_recent, self.loader)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr, fused=True)  # as dgbench's loop
        self.assoc = torch.empty(stream.num_nodes, dtype=torch.long)
        self.seed = seed

    def _bounds(self, split: str) -> list[tuple[int, int]]:
        a, b = self.stream.ranges[split]
        return [(s, min(s + BATCH, b)) for s in range(a, b, BATCH)]

    def _embed_roots(self, roots: torch.Tensor, first: int) -> torch.Tensor:
        n_id, edge_index, e_id = self.loader(roots.unique())
        self.assoc[n_id] = torch.arange(n_id.numel())
        return self.model.embed(n_id, edge_index, self.t[e_id], self.msg[e_id], self.t[first])

    def _observe(self, a: int, b: int) -> None:
        self.model.memory.update_state(self.src[a:b], self.dst[a:b], self.t[a:b], self.msg[a:b])
        self.loader.insert(self.src[a:b], self.dst[a:b])

    def train_epoch(self) -> tuple[float, float, int]:
        """Wall and process CPU seconds of one training pass, and its events (memory and neighbour loader
        reset first)."""
        self.model.train()
        self.model.memory.reset_state()
        self.loader.reset_state()
        pool = self.stream.negative_pool
        criterion = torch.nn.functional.binary_cross_entropy_with_logits
        start, cpu_start = time.perf_counter(), time.process_time()
        for index, (a, b) in enumerate(self._bounds("train")):
            rng = np.random.default_rng([self.seed, SPLIT_CODES["train"], index])  # dgbench's negatives
            negative = torch.from_numpy(pool[rng.integers(0, len(pool), size=b - a)])
            self.optimizer.zero_grad()
            src, dst = self.src[a:b], self.dst[a:b]
            z = self._embed_roots(torch.cat([src, dst, negative]), a)
            pos = self.model.score(z[self.assoc[src]], z[self.assoc[dst]])
            neg = self.model.score(z[self.assoc[src]], z[self.assoc[negative]])
            loss = criterion(pos, torch.ones_like(pos)) + criterion(neg, torch.zeros_like(neg))
            self._observe(a, b)
            loss.backward()
            self.optimizer.step()
            self.model.memory.detach()
        a, b = self.stream.ranges["train"]
        return time.perf_counter() - start, time.process_time() - cpu_start, b - a

    @torch.no_grad()
    def evaluate(self, evaluation: EvaluationSet, split: str) -> dict[str, float]:
        """The split's positives and their K stored negatives scored batch by batch (memory carried on)."""
        self.model.eval()
        negatives, negative_src = evaluation.get(split, "negatives"), evaluation.get(split, "negative_src")
        first = self.stream.ranges[split][0]
        positive_scores, negative_scores = [], []
        for a, b in self._bounds(split):
            rows = slice(a - first, b - first)
            src, dst = self.src[a:b], self.dst[a:b]
            present = negatives[rows] >= 0
            neg_dst = torch.from_numpy(np.where(present, negatives[rows], dst.numpy()[:, None]))
            neg_src = torch.from_numpy(np.where(present, negative_src[rows], src.numpy()[:, None]))
            z = self._embed_roots(torch.cat([src, dst, neg_src.reshape(-1), neg_dst.reshape(-1)]), a)
            positive_scores.append(self.model.score(z[self.assoc[src]], z[self.assoc[dst]]).numpy())
            scored = self.model.score(z[self.assoc[neg_src.reshape(-1)]], z[self.assoc[neg_dst.reshape(-1)]])
            negative_scores.append(np.where(present, scored.reshape(present.shape).numpy(), np.nan))
            self._observe(a, b)
        figures = Evaluator(evaluation).score(split, np.concatenate(positive_scores), np.concatenate(negative_scores))
        return figures.as_metrics()
