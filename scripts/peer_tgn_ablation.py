"""The PyG TGN peer's AP gap taken apart: the peer of ``benchmarks/_pyg_tgn_peer.py`` with one change at a time
toward TGN's paper (Rossi et al. 2020, §3.1) and dgbench's form, val / test AP per variant and seed
(docs/performance.md "Peers", "Where the peer's AP gap came from", the table and "Tried and not kept").
AP only, so a loaded host is fine. Needs the ``peers`` extra and the real data folder.

A variant is changes joined by '+', on PyG's example (``example`` alone is the peer as PyG builds it):

* ``fixed``: dgbench's fixed time frequencies (``fix_time_frequencies``, the ``fixed`` form);
* ``paperdt``: a neighbour's time feature φ(t - t_j) at the query time t, the batch's first event (the example:
  φ(last_update(j) - t_j));
* ``keep``: a vertex without a message keeps its memory (``keep_unmailed_memory``);
* ``loader``: the neighbour loader keeps each vertex's k most recent events (``insert_most_recent``);
  fixed+paperdt+keep+loader is the ``paper`` form;
* ``msgdt``: the message's time feature is dgbench's (query time - memory time) when the mail is consumed;
* ``snap``: the message holds both endpoints' memories as of the sending batch;
* ``tgl``: dgbench's (TGL's) attention layer in place of ``TransformerConv``;
* ``lr4``: the example's learning rate 10⁻⁴ (the benchmark's is 10⁻³); ``drop``: the example's dropout 0.1.

    PYTHONPATH=$PWD .venv/bin/python scripts/peer_tgn_ablation.py --dataset wikipedia --events 10000 --seeds 0,1,2 \\
        --variants example,fixed,fixed+paperdt,fixed+paperdt+keep,fixed+paperdt+keep+loader
"""
from __future__ import annotations

import math
import os
import types

import torch
import torch.nn.functional as F
from peer_tgn_forms import common_arguments, prepared_store, seeds  # scripts/ is the script's own folder

from dgbench.store import open_store
from dgbench.tasks.options import DEFAULT_EVAL_NEGATIVES, evaluation_sets
from dgbench.trainers.continuous.data import EventStream

CHANGES = ("fixed", "paperdt", "keep", "loader", "msgdt", "snap", "tgl", "lr4", "drop")
EXAMPLE_LR, EXAMPLE_DROPOUT = 1e-4, 0.1


def parse_variant(text: str) -> frozenset[str]:
    changes = frozenset(text.split("+")) - {"example"}
    unknown = changes - set(CHANGES)
    if unknown:
        raise SystemExit(f"unknown change(s) {sorted(unknown)} in {text!r}; known: example, {', '.join(CHANGES)}")
    return changes


class SnapshotMessage(torch.nn.Module):
    """The message [raw, φ] where raw already holds [s_i, s_j, e] as of the sending batch (``snap``)."""

    def __init__(self, raw_msg_dim: int, time_dim: int):
        super().__init__()
        self.out_channels = raw_msg_dim + time_dim

    def forward(self, z_src, z_dst, raw_msg, t_enc):
        return torch.cat([raw_msg, t_enc], dim=-1)


def ablated_memory_class():
    """TGNMemory with the ``msgdt`` and ``snap`` changes (built on first use: PyG is an optional peer)."""
    from torch_geometric.nn import TGNMemory  # noqa: PLC0415

    class AblatedMemory(TGNMemory):
        def __init__(self, *args, msgdt: bool, snap: bool, query_time, **kwargs):
            super().__init__(*args, **kwargs)
            self.msgdt, self.snap, self.query_time = msgdt, snap, query_time

        def _compute_msg(self, n_id, msg_store, msg_module):
            if not self.msgdt:
                return super()._compute_msg(n_id, msg_store, msg_module)
            src, dst, t, raw_msg = zip(*(msg_store[i] for i in n_id.tolist()))
            src, dst, t = torch.cat(src), torch.cat(dst), torch.cat(t)
            raw_msg = torch.cat([m for i, m in enumerate(raw_msg) if m.numel() > 0 or i == 0])  # as PyG's
            t_rel = self.query_time() - self.last_update[src]  # dgbench: query time - memory time
            msg = msg_module(self.memory[src], self.memory[dst], raw_msg, self.time_enc(t_rel.to(raw_msg.dtype)))
            return msg, t, src, dst

        def update_state(self, src, dst, t, raw_msg):
            if not self.snap:
                return super().update_state(src, dst, t, raw_msg)
            n_id = torch.cat([src, dst]).unique()
            if self.training:
                self._update_memory(n_id)
            memory_src, memory_dst = self.memory[src].detach(), self.memory[dst].detach()
            self._update_msg_store(src, dst, t, torch.cat([memory_src, memory_dst, raw_msg], 1), self.msg_s_store)
            self._update_msg_store(dst, src, t, torch.cat([memory_dst, memory_src, raw_msg], 1), self.msg_d_store)
            if not self.training:
                self._update_memory(n_id)

    return AblatedMemory


class TGLAttention(torch.nn.Module):
    """dgbench's (TGL's) attention layer on PyG's (neighbour, root) edges (``tgl``): q = W_q [h_i, φ(0)],
    k / v = W [h_j, e_j] with e_j = [φ(Δt), msg], out = LayerNorm(ReLU(W_o [agg, h_i]))."""

    def __init__(self, dim: int, edge_dim: int, time_enc: torch.nn.Module, heads: int = 2):
        super().__init__()
        self.heads, self.time_enc = heads, time_enc
        self.query = torch.nn.Linear(2 * dim, dim)
        self.key = torch.nn.Linear(dim + edge_dim, dim)
        self.value = torch.nn.Linear(dim + edge_dim, dim)
        self.out = torch.nn.Linear(2 * dim, dim)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        from torch_geometric.utils import softmax as segment_softmax  # noqa: PLC0415
        j, i = edge_index
        n, dim = x.shape
        width = dim // self.heads
        q = self.query(torch.cat([x, self.time_enc(x.new_zeros(n))], 1)).view(n, self.heads, width)
        neighbour = torch.cat([x[j], edge_attr], 1)
        k = self.key(neighbour).view(-1, self.heads, width)
        v = self.value(neighbour).view(-1, self.heads, width)
        weight = segment_softmax((q[i] * k).sum(-1) / math.sqrt(width), i, num_nodes=n)
        aggregated = x.new_zeros(n, self.heads, width).index_add(0, i, weight[..., None] * v).flatten(1)
        return self.norm(F.relu(self.out(torch.cat([aggregated, x], 1))))


def embed_at_query_time(model, n_id, edge_index, t, msg, query_t):
    """PeerTGN.embed with φ(t - t_j) at the query time t (``paperdt``)."""
    z, _ = model.memory(n_id)
    edge_attr = torch.cat([model.memory.time_enc((query_t - t).to(z.dtype)), msg], dim=-1)
    return model.conv(z, edge_index, edge_attr)


def ablated_run(stream: EventStream, memory_dim: int, lr: float, seed: int, changes: frozenset[str]):
    """A PeerRun (example or fixed form) with ``changes`` applied; tracks the query time ``msgdt`` needs."""
    from _pyg_tgn_peer import EXAMPLE, FIXED, PeerRun, fix_time_frequencies, insert_most_recent, \
        keep_unmailed_memory  # noqa: PLC0415 - benchmarks/ is on the path (peer_tgn_forms)

    class AblatedRun(PeerRun):
        """The query time t0 is the first event time of the batch whose mail the memory consumes: the current
        batch in training (``memory(n_id)`` and ``update_state`` both run before the next batch), the next one in
        evaluation (``update_state`` consumes the batch's own mail at once)."""

        def _observe(self, a: int, b: int) -> None:
            following = self.t[b] if b < len(self.t) else self.t[-1]
            if not self.model.training:
                self.t0 = following
            super()._observe(a, b)
            self.t0 = following

        def train_epoch(self):
            self.t0 = self.t[self.stream.ranges["train"][0]]
            return super().train_epoch()

        def evaluate(self, evaluation, split):
            self.t0 = self.t[self.stream.ranges[split][0]]
            return super().evaluate(evaluation, split)

    run = AblatedRun(stream, memory_dim, lr, seed, FIXED if "fixed" in changes else EXAMPLE)
    model = run.model
    if changes & {"msgdt", "snap"}:
        from torch_geometric.nn.models.tgn import IdentityMessage, LastAggregator  # noqa: PLC0415
        edge_dim = run.msg.shape[1]
        raw_dim = 2 * memory_dim + edge_dim if "snap" in changes else edge_dim
        message = (SnapshotMessage(raw_dim, memory_dim) if "snap" in changes
                   else IdentityMessage(edge_dim, memory_dim, memory_dim))
        torch.manual_seed(seed)  # the same draws as the memory PeerRun built
        model.memory = ablated_memory_class()(stream.num_nodes, raw_dim, memory_dim, memory_dim,
                                              message_module=message, aggregator_module=LastAggregator(),
                                              msgdt="msgdt" in changes, snap="snap" in changes,
                                              query_time=lambda: run.t0)
        if "fixed" in changes:
            fix_time_frequencies(model.memory.time_enc.lin, memory_dim)
    if "keep" in changes:
        model.memory._get_updated_memory = types.MethodType(keep_unmailed_memory, model.memory)
    if "loader" in changes:
        run.loader.insert = types.MethodType(insert_most_recent, run.loader)
    if "paperdt" in changes:
        model.embed = types.MethodType(embed_at_query_time, model)
    if "tgl" in changes:
        torch.manual_seed(seed + 1)
        model.conv = TGLAttention(memory_dim, memory_dim + run.msg.shape[1], model.memory.time_enc)
    if "drop" in changes:
        model.conv.dropout = EXAMPLE_DROPOUT
    run.optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # over the replaced modules too
    return run


def main() -> None:
    parser = common_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="example,fixed,fixed+paperdt,fixed+paperdt+keep,"
                                              "fixed+paperdt+keep+loader",
                        help="comma list of variants, each changes joined by '+'")
    args = parser.parse_args()
    os.environ.setdefault("DGBENCH_QUIET", "1")
    from test_peer_tgn import LR  # noqa: PLC0415 - the benchmark's learning rate
    events = args.events or None
    with prepared_store(args) as store:
        stream = EventStream.from_store(open_store(store), events)
        evaluation = evaluation_sets(store, "random", None, DEFAULT_EVAL_NEGATIVES, events)[0]
        for seed in seeds(args.seeds):
            for variant in args.variants.split(","):
                changes = parse_variant(variant)
                run = ablated_run(stream, args.memory, EXAMPLE_LR if "lr4" in changes else LR, seed, changes)
                val = []
                for _ in range(args.epochs):
                    run.train_epoch()
                    val.append(round(run.evaluate(evaluation, "val")["ap"], 4))
                test = run.evaluate(evaluation, "test")["ap"]
                print(f"{args.dataset} {args.events} seed {seed} {variant:26s} val {val} test {test:.4f}", flush=True)


if __name__ == "__main__":
    main()
