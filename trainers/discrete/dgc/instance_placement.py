"""Instance placement: each rank computes a set of graph instances v_{i,t} (DGC §2.1) — DGC's chunks
(PGC, §4) or PSS's contiguous snapshot ranges (§2.2) — and exchanges what crosses its boundary.

The plans are :mod:`dgbench.trainers.discrete.dgc.instances`'s (a rank's grid of steps × the vertices it holds,
the spatial halo, recurrent carries in rounds, attention/window histories); the compute is
:mod:`dgbench.trainers.discrete.dgc.instance_exec`'s. Per block (one block: the whole sequence) a rank's view

* aggregates Ã x over its own cells: one all-to-all of halo rows (tag ``halo``) per structure-encoder
  exchange, then one sparse product per group of chunks (spatial fusion §5.1.1 groups them; unfused,
  chunk by chunk; PSS: one group);
* runs graph attention the same way (neighbours' source scores and values travel);
* runs a time encoder by its dependency: recurrent (GRU/LSTM) in rounds, the carry at the end of a
  run handed to the rank of the next run (tag ``carry``), runs temporally fused or padded (§5.1.2);
  causal attention after one exchange of every earlier instance held elsewhere (tag ``history``); a
  window module (M-transform) after one exchange of the w-1 previous instances (tag ``window``);
* scores a pair (u, v) of step t on the rank of u's latest instance at or before t, fetching v's half
  from the rank of v's (tags ``scores:ids``, ``scores``); without one, a zero embedding.

Every exchange may go through DGC's stale aggregation (§5.2, :class:`dgbench.trainers.discrete.dgc.stale.StaleExchange`)
while training. Collectives are chained (each send carries a zero-weighted term of the previous
exchange's result), so every rank runs their backward passes in the same order, whatever work it has.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dgbench.dist import DistContext, PhaseTimer, all_to_all_autograd
from dgbench.errors import DgbenchError
from dgbench.models.contract import Dependency, LayoutSequence, SequenceModule, State
from dgbench.models.sparse import graph_attention
from dgbench.trainers.discrete.dgc.chunks import PRESENCE_EDGES, PRESENCE_LIFETIME, SuperGraph, build_supergraph
from dgbench.trainers.discrete.dgc.fusion import fuse_chunks
from dgbench.trainers.discrete.dgc.instance_exec import (GroupOperator, aggregate_groups, group_operators,
                                                         run_attention, run_round)
from dgbench.trainers.discrete.dgc.instances import (Exchange, InstancePlan, build_instance_plans, latest_instances,
                                             window_exchange)
from dgbench.trainers.discrete.dgc.stale import StaleExchange, StalePolicy
from dgbench.trainers.discrete.comm_shape import CommShape, distinct_asks, score_patterns
from dgbench.trainers.discrete.data import DiscreteData, PairBatch
from dgbench.trainers.discrete.placement import CommProfile, Placement
from dgbench.trainers.discrete.presence import input_edges


def instance_graph(data: DiscreteData) -> SuperGraph:
    """The instance super-graph of the run's inputs (the edges the model aggregates, smoothed when the run
    smooths) under its ``--presence`` (DGC §2.1's V_t; ``lifetime`` gives V_t explicitly, the run's mask)."""
    presence = getattr(data, "presence", "all")
    alive = data.present if presence == PRESENCE_LIFETIME else None
    return build_supergraph(input_edges(data), presence=presence if alive is None else PRESENCE_EDGES,
                            num_vertices=data.num_nodes, alive=alive)


def check_presence(data: DiscreteData, ends_with_time_encoder: bool | None) -> None:
    """Under ``--presence edges`` or ``lifetime`` a pair is scored with its vertices' latest present
    instances, which is what ``single`` computes only when the model's output is a time encoder's (absent
    steps repeat it)."""
    presence = getattr(data, "presence", "all")
    if presence != "all" and ends_with_time_encoder is False:
        raise DgbenchError(f"--presence {presence}: this model's output is not a time encoder's, so an absent vertex "
                           "has no latest-instance embedding; run it with --presence all")


@dataclass(frozen=True)
class FusionSettings:
    """Chunk fusion switches (§5.1): spatial (groups of chunks run as one batch under a byte budget)
    and temporal (masked packing of runs)."""

    spatial: bool = True
    temporal: bool = True
    budget_bytes: float = 64 * 2 ** 20
    row_bytes: float = 4.0


@dataclass
class _Collectives:
    """One forward's exchanges, chained so that their backward passes run in one order on every rank."""

    placement: "InstancePlacement"
    token: torch.Tensor | None = None
    calls: int = 0

    def exchange(self, send: torch.Tensor, exchange: Exchange, tag: str) -> torch.Tensor:
        return self.move(send, exchange.send_splits, exchange.recv_splits, tag)

    def move(self, send: torch.Tensor, send_splits: list[int], recv_splits: list[int], tag: str,
             embeddings: bool = True) -> torch.Tensor:
        """``embeddings``: the rows are embeddings a receiver aggregates (stale aggregation may keep
        them); the pair scores are not."""
        if self.token is not None:
            send = send + 0 * self.token
        key = (tag, self.calls)
        self.calls += 1
        stale = self.placement.stale
        if stale is not None and embeddings:
            received = stale.exchange(key, send, send_splits, recv_splits, tag)
        else:
            received = all_to_all_autograd(send, self.placement.ctx.comm, send_splits, recv_splits, tag=tag)
        self.token = received.sum() if received.requires_grad else self.token
        return received


@dataclass
class InstanceView(LayoutSequence):
    """One forward of one rank (see the module docstring); cells are [steps, rows] of its grid."""

    placement: "InstancePlacement"
    collectives: _Collectives

    @property
    def plan(self) -> InstancePlan:
        return self.placement.plan

    @property
    def num_steps(self) -> int:
        return self.plan.steps

    @property
    def local_steps(self) -> slice:
        return slice(0, self.plan.steps)

    @property
    def vertex_rows(self) -> int:
        return self.plan.num_rows

    def _flat(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(self.plan.steps * self.plan.num_rows, x.shape[-1])

    def aggregate(self, x: torch.Tensor | None) -> torch.Tensor:
        if x is None:
            return self.placement.first_input
        flat = self._flat(x)
        self.placement.note_halo(flat.shape[1])
        send = flat.index_select(0, self.placement.spatial_send)
        table = torch.cat([flat, self.collectives.exchange(send, self.plan.spatial, "halo")])
        out = aggregate_groups(self.placement.groups, table, flat.shape[0])
        return out.view(*x.shape[:-1], x.shape[-1])

    def input_features(self) -> torch.Tensor:
        return self.placement.features

    def attend(self, dst_score: torch.Tensor, src_score: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        steps, rows, heads, width = values.shape
        cells = steps * rows
        flat = torch.cat([src_score.reshape(cells, heads), values.reshape(cells, heads * width)], 1)
        self.placement.note_halo(flat.shape[1])
        send = flat.index_select(0, self.placement.spatial_send)
        table = torch.cat([flat, self.collectives.exchange(send, self.plan.spatial, "halo")])
        dst = dst_score.reshape(cells, heads)
        outputs = []
        for g in self.placement.groups:
            columns = table.index_select(0, g.columns)
            outputs.append(graph_attention(g.operator, dst.index_select(0, g.cells), columns[:, :heads],
                                           columns[:, heads:].view(-1, heads, width)))
        out = values.new_zeros((cells, heads, width))
        if outputs:
            out = out.index_copy(0, torch.cat([g.cells for g in self.placement.groups]), torch.cat(outputs))
        else:
            out = out + 0 * table.sum()
        return out.view(steps, rows, heads, width)

    def to_vertex(self, y: torch.Tensor) -> torch.Tensor:
        raise DgbenchError("instance placements (pss, dgc) run time encoders through view.sequence only")

    def to_time(self, z: torch.Tensor) -> torch.Tensor:
        raise DgbenchError("instance placements (pss, dgc) run time encoders through view.sequence only")

    def sequence(self, module: SequenceModule, y: torch.Tensor, carry: State) -> tuple[torch.Tensor, State]:
        dependency = module.dependency
        self.placement.note_module(module, y.shape[-1])
        if dependency == Dependency.RECURRENT:
            return self._recurrent(module, y), carry
        if dependency == Dependency.CAUSAL:
            flat = self._flat(y)
            received = self.collectives.exchange(flat.index_select(0, self.placement.history_send), self.plan.history,
                                                 "history")
            return run_attention(module, y, self.plan, received, self.placement.present_grid), carry
        if dependency == Dependency.WINDOW:
            return self._window(module, y), carry
        return module(y, carry)[0], carry

    def _recurrent(self, module: SequenceModule, y: torch.Tensor) -> torch.Tensor:
        flat = self._flat(y)
        outputs, cells, received = [], [], None
        rounds = self.plan.rounds
        for k, round_ in enumerate(rounds):
            out, final = run_round(module, flat, round_, received, self.placement.fusion.temporal)
            outputs.append(out)
            cells.append(round_.cells)
            if k + 1 < len(rounds):  # every rank takes part, with or without runs in the round
                received = self.collectives.move(final + 0 * flat.sum(), round_.send_splits,
                                                 rounds[k + 1].recv_splits, "carry")
        index = torch.from_numpy(np.concatenate(cells)).to(flat.device)
        result = torch.cat(outputs)
        grid = flat.new_zeros((flat.shape[0], result.shape[1])).index_copy(0, index, result)
        if received is not None:
            grid = grid + 0 * received.sum()  # the last exchange's result stays in the graph on every rank
        return grid.view(*y.shape[:-1], result.shape[1])

    def _window(self, module: SequenceModule, y: torch.Tensor) -> torch.Tensor:
        if self.placement.present_grid is not None:
            raise DgbenchError(f"{type(module).__name__} takes no presence mask: run it with --presence all")
        exchange, cells = self.placement.window_plan(int(getattr(module, "window")) - 1)
        flat = self._flat(y)
        received = self.collectives.exchange(flat.index_select(0, exchange.send_cells_tensor), exchange.exchange,
                                             "window")
        own = torch.from_numpy(self.plan.own.reshape(-1, 1)).to(flat.device)
        full = torch.index_put(flat * own, (torch.from_numpy(cells).to(flat.device),), received)
        out, _ = module(full.view(y.shape), module.initial_carry(self.plan.num_rows))
        return out


@dataclass(frozen=True)
class _WindowPlan:
    exchange: Exchange
    send_cells_tensor: torch.Tensor


@dataclass
class _ModuleNote:
    """What one exchange of a forward moves per row (noted on the first forward, for the prediction)."""

    dependency: Dependency | None  # None: a spatial halo
    carry_width: int
    input_width: int
    window: int = 0


class InstancePlacement(Placement):
    """A rank's instances, views and pair scoring for an instance -> rank map (PGC, PSS)."""

    def __init__(self, ctx: DistContext, data: DiscreteData, graph: SuperGraph, part: np.ndarray,
                 chunk_of: np.ndarray | None = None, fusion: FusionSettings = FusionSettings(),
                 stale: StalePolicy = StalePolicy(), method: str = "instances", report: dict | None = None):
        super().__init__(ctx, data, blocks=1)
        if graph.num_snapshots != data.num_steps:
            raise DgbenchError(f"the instance graph has {graph.num_snapshots} steps, the data {data.num_steps}")
        self.graph, self.part, self.method, self.report = graph, np.asarray(part, np.int64), method, report or {}
        self.fusion = fusion
        self.plan = build_instance_plans(graph, self.part, ctx.world_size, data.adjacency, ranks=[ctx.rank])[0]
        self.vertex_rows = self.plan.num_rows
        self.latest = latest_instances(graph)
        device = ctx.device
        self.spatial_send = torch.from_numpy(self.plan.spatial.send_cells).to(device)
        self.history_send = torch.from_numpy(self.plan.history.send_cells).to(device)
        rows = self.plan.rows
        self.first_input = torch.from_numpy(np.ascontiguousarray(data.first_layer_input[:, rows])).to(device)
        self.features = torch.from_numpy(np.stack([f[rows] for f in data.degree_features])).to(device)
        self.present_grid = None if graph.presence == "all" else self._present(rows)
        self.groups, self.fusion_report = self._groups(chunk_of, device)
        self.stale = StaleExchange(stale, ctx.comm) if stale.enabled else None
        self.notes: list[_ModuleNote] = []
        self._calls = 0
        self._windows: dict[int, tuple[_WindowPlan, np.ndarray]] = {}

    # ------------------------------------------------------------------ layout
    def _present(self, rows: np.ndarray) -> np.ndarray:
        grid = np.zeros((self.graph.num_snapshots, len(rows)), bool)
        mine = np.isin(self.graph.vertex, rows)
        grid[self.graph.step[mine], np.searchsorted(rows, self.graph.vertex[mine])] = True
        return grid

    def _groups(self, chunk_of: np.ndarray | None, device: torch.device) -> tuple[list[GroupOperator], dict]:
        """Own cells per group: each chunk alone, or fused (§5.1.1); one group without chunks."""
        own = np.flatnonzero(self.plan.own.reshape(-1))
        if chunk_of is None:
            return group_operators(self.plan.operator, [own], device), {"groups": 1}
        chunks = np.asarray(chunk_of)[self.plan.own_instances]
        order = np.argsort(chunks, kind="stable")
        bounds = np.r_[0, np.flatnonzero(np.diff(chunks[order])) + 1, len(order)]
        per_chunk = [np.sort(own[order[a:b]]) for a, b in zip(bounds[:-1], bounds[1:])]
        loaded = [self._columns(cells) for cells in per_chunk]
        report: dict[str, Any] = {"chunks_here": len(per_chunk), "spatial_fusion": self.fusion.spatial}
        if self.fusion.spatial and len(per_chunk) > 1:
            fused = fuse_chunks(loaded, self.fusion.row_bytes, self.fusion.budget_bytes)
            cells = [np.sort(np.concatenate([per_chunk[c] for c in group])) for group in fused.groups]
            report.update(groups=len(fused.groups), loaded_rows_unfused=fused.rows_unfused,
                          loaded_rows=fused.rows_fused)
        else:
            cells = per_chunk
            rows = sum(len(c) for c in loaded)
            report.update(groups=len(cells), loaded_rows_unfused=rows, loaded_rows=rows)
        return group_operators(self.plan.operator, cells, device), report

    def _columns(self, cells: np.ndarray) -> np.ndarray:
        op = self.plan.operator
        rowptr, col = np.asarray(op.rowptr), np.asarray(op.col)
        lengths = rowptr[cells + 1] - rowptr[cells]
        picks = np.repeat(rowptr[cells] - np.r_[0, np.cumsum(lengths)[:-1]], lengths) + np.arange(lengths.sum())
        return np.unique(col[picks])

    def window_plan(self, reach: int) -> tuple[_WindowPlan, np.ndarray]:
        if reach not in self._windows:
            exchange, cells = window_exchange(self.graph, self.part, self.plan, reach)
            self._windows[reach] = (_WindowPlan(exchange, torch.from_numpy(exchange.send_cells).to(self.ctx.device)),
                                    cells)
        return self._windows[reach]

    def note_module(self, module: SequenceModule, input_width: int) -> None:
        """What a time encoder moves per row: its carry (recurrent) or its input (attention, window)."""
        width = sum(c.shape[0] * c.shape[2] for c in module.initial_carry(0)) \
            if module.dependency == Dependency.RECURRENT else 0
        self._note(_ModuleNote(module.dependency, width, input_width, int(getattr(module, "window", 0))))

    def note_halo(self, width: int) -> None:
        self._note(_ModuleNote(None, 0, width))

    def _note(self, note: _ModuleNote) -> None:
        if self._calls >= len(self.notes):
            self.notes.append(note)
        self._calls += 1

    def view(self, block: int, timer: PhaseTimer) -> InstanceView:
        self._calls = 0
        return InstanceView(self, _Collectives(self))

    # ------------------------------------------------------------------ pairs
    def _holders(self, step: int, vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Latest instance of each vertex at or before ``step`` (-1: none) and its rank (0 if none)."""
        instance = self.latest[step, vertices]
        return instance, np.where(instance >= 0, self.part[np.maximum(instance, 0)], 0)

    def owned(self, batch: PairBatch) -> PairBatch:
        _, rank = self._holders(batch.step, batch.src)
        return batch.select(rank == self.ctx.rank)

    def score_table(self, view: InstanceView, halves: torch.Tensor,
                    batches: list[PairBatch]) -> tuple[torch.Tensor, int]:
        """[T, N, 2] with (t, u, 0) and (t, v, 1) of this rank's pairs: own halves from its cells, the
        other halves asked from their holders (one float per distinct remote instance, and its id)."""
        comm, rank, device = self.ctx.comm, self.ctx.rank, self.ctx.device
        n, steps = self.data.num_nodes, self.plan.steps
        if self.ctx.world_size == 1 and self.graph.presence == "all":  # every (t, v) is its own cell, in order
            return halves.reshape(steps, n, 2), 0
        flat = halves.reshape(-1, 2)
        u_keys = _distinct_keys([(b.step, b.src) for b in batches], n)
        v_keys = _distinct_keys([(b.step, b.dst) for b in batches], n)
        u_instance = self.latest[u_keys // n, u_keys % n]
        v_instance = self.latest[v_keys // n, v_keys % n]
        v_rank = np.where(v_instance >= 0, self.part[np.maximum(v_instance, 0)], rank)
        remote = (v_instance >= 0) & (v_rank != rank)
        wanted, wanted_index = np.unique(v_instance[remote], return_inverse=True)
        holder = self.part[wanted]
        order = np.argsort(holder, kind="stable")  # asked grouped by the rank holding them
        want_splits = np.bincount(holder, minlength=self.ctx.world_size).tolist()
        asked_splits = comm.exchange_counts(want_splits)
        asked = comm.all_to_all_single(torch.from_numpy(wanted[order]).to(device).view(-1, 1), want_splits,
                                       asked_splits, tag="scores:ids").view(-1).cpu().numpy()
        served = flat[:, 1].index_select(0, torch.from_numpy(self._cells(asked)).to(device))
        arrived = view.collectives.move(served.view(-1, 1), asked_splits, want_splits, "scores",
                                        embeddings=False).view(-1)
        by_wanted = arrived.index_select(0, torch.from_numpy(np.argsort(order, kind="stable")).to(device))
        zero = flat.new_zeros(1)
        u_values = self._own_or_zero(flat[:, 0], u_instance, zero)
        v_values = self._own_or_zero(flat[:, 1], np.where(remote, -1, v_instance), zero)
        if remote.any():
            v_values = v_values.index_put((torch.from_numpy(np.flatnonzero(remote)).to(device),),
                                          by_wanted.index_select(0, torch.from_numpy(wanted_index).to(device)))
        where = torch.from_numpy(np.concatenate([u_keys * 2, v_keys * 2 + 1])).to(device)
        table = halves.new_zeros(steps * n * 2).index_put((where,), torch.cat([u_values, v_values]))
        return (table + 0 * arrived.sum()).view(steps, n, 2), 0

    def _cells(self, instances: np.ndarray) -> np.ndarray:
        rows = self.plan.rows
        return self.graph.step[instances] * len(rows) + np.searchsorted(rows, self.graph.vertex[instances])

    def _own_or_zero(self, column: torch.Tensor, instances: np.ndarray, zero: torch.Tensor) -> torch.Tensor:
        have = instances >= 0
        cells = np.where(have, self._cells(np.maximum(instances, 0)) if len(instances) else instances, 0)
        values = column.index_select(0, torch.from_numpy(cells.astype(np.int64)).to(column.device))
        return torch.where(torch.from_numpy(have).to(column.device), values, zero)

    # ------------------------------------------------------------------ volume
    def predicted_elements(self, profile: CommProfile, passes: list[int], pairs: list[PairBatch],
                           blocks: list[range] | None = None) -> dict[str, int] | None:
        """Elements all ranks send in a training epoch, from every rank's plan and the model's widths:
        halo rows × each exchange's width, carries × the carry width, histories × the input width,
        and the scores (one float and one id per distinct remote instance)."""
        if self.ctx.world_size == 1:
            return {}
        if passes != [1]:
            return None
        plans = build_instance_plans(self.graph, self.part, self.ctx.world_size, self.data.adjacency)
        out: dict[str, int] = {}

        def add(tag: str, elements: int) -> None:
            if elements:
                out[f"{tag}:forward"] = out.get(f"{tag}:forward", 0) + elements
                out[f"{tag}:backward"] = out.get(f"{tag}:backward", 0) + elements

        halo_rows = sum(p.spatial.rows_sent for p in plans)
        for note in self.notes:
            if note.dependency is None:
                add("halo", halo_rows * note.input_width)
            elif note.dependency == Dependency.RECURRENT:
                add("carry", note.carry_width * sum(sum(r.send_splits) for p in plans for r in p.rounds[:-1]))
            elif note.dependency == Dependency.CAUSAL:
                add("history", note.input_width * sum(p.history.rows_sent for p in plans))
            elif note.dependency == Dependency.WINDOW:
                rows = sum(window_exchange(self.graph, self.part, p, note.window - 1)[0].rows_sent for p in plans)
                add("window", note.input_width * rows)
        asked = []  # (asking rank, remote instance) of every pair, distinct over the epoch
        for batch in pairs:
            u_instance = self.latest[batch.step, batch.src]
            owner = np.where(u_instance >= 0, self.part[np.maximum(u_instance, 0)], 0)
            v_instance = self.latest[batch.step, batch.dst]
            v_rank = np.where(v_instance >= 0, self.part[np.maximum(v_instance, 0)], owner)
            crossing = (v_instance >= 0) & (v_rank != owner)
            asked.append(owner[crossing] * np.int64(self.graph.num_instances) + v_instance[crossing])
        remote = len(np.unique(np.concatenate(asked))) if asked else 0
        if remote:
            out.update({"scores:forward": remote, "scores:backward": remote, "scores:ids": remote})
        return out

    def comm_shape(self, trainer: Any, units: list[range], passes: list[int], pairs: list[PairBatch]
                   ) -> CommShape:
        """DGC §4-5 / PSS: every rank's instance plan — spatial halo, carries per round, attention history,
        window rows — and pair scores asked from the holder of v's latest instance (one forward per unit;
        otherwise the even default)."""
        if passes != [1]:
            return super().comm_shape(trainer, units, passes, pairs)
        world = self.ctx.world_size
        plans = build_instance_plans(self.graph, self.part, world, self.data.adjacency)
        patterns = {}
        for tag, m in self._exchange_matrices(plans).items():
            patterns[f"{tag}:forward"], patterns[f"{tag}:backward"] = m, m.T
        askers, keys = [], []
        part, latest = self.part, self.latest
        for batch in pairs:
            u_instance = latest[batch.step, batch.src]
            asker = np.where(u_instance >= 0, part[np.maximum(u_instance, 0)], 0)
            v_instance = latest[batch.step, batch.dst]
            holder = np.where(v_instance >= 0, part[np.maximum(v_instance, 0)], asker)
            crossing = (v_instance >= 0) & (holder != asker)
            askers.append(asker[crossing])
            keys.append(v_instance[crossing])
        asker = np.concatenate(askers) if askers else np.zeros(0, np.int64)
        key = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        scores, control = score_patterns(distinct_asks(asker, part[key], key, world), len(units), world)
        edges = np.array([p.operator.val.size for p in plans], np.float64)
        cells = np.array([p.own.sum() for p in plans], np.float64)
        steps = np.array([p.own.any(1).sum() for p in plans], np.float64)  # steps where the rank has instances
        return CommShape({**patterns, **scores}, control, edges, cells, steps)

    def _exchange_matrices(self, plans: list[InstancePlan]) -> dict[str, np.ndarray]:
        """[sender, receiver] rows per forward of each exchange the model's modules noted."""
        world = self.ctx.world_size

        def matrix(splits: list[list[int]]) -> np.ndarray:
            return np.array(splits, np.int64).reshape(world, world)

        forward: dict[str, np.ndarray] = {}
        for note in self.notes:
            if note.dependency is None:
                tag, m = "halo", matrix([p.spatial.send_splits for p in plans])
            elif note.dependency == Dependency.RECURRENT:
                tag = "carry"
                m = matrix([np.sum([r.send_splits for r in p.rounds[:-1]], axis=0).tolist() if len(p.rounds) > 1
                            else [0] * world for p in plans])
            elif note.dependency == Dependency.CAUSAL:
                tag, m = "history", matrix([p.history.send_splits for p in plans])
            elif note.dependency == Dependency.WINDOW:
                tag = "window"
                m = matrix([window_exchange(self.graph, self.part, p, note.window - 1)[0].send_splits
                            for p in plans])
            else:
                continue
            forward[tag] = forward.get(tag, 0) + m
        return forward

    def extra(self) -> dict[str, Any]:
        plan = self.plan
        out: dict[str, Any] = {"placement": self.method, "instances_here": int(plan.own.sum()),
                               "rows_here": plan.num_rows, "rounds": len(plan.rounds),
                               "fusion": {**self.fusion_report, "temporal": self.fusion.temporal},
                               "partition": self.report}
        if self.stale is not None:
            out["stale"] = {"policy": self.stale.policy.describe(), "epochs": self.stale.history}
        return out


def _distinct_keys(pairs: list[tuple[int, np.ndarray]], n: int) -> np.ndarray:
    if not pairs:
        return np.empty(0, np.int64)
    return np.unique(np.concatenate([step * np.int64(n) + vertices.astype(np.int64) for step, vertices in pairs]))
