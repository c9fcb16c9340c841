"""A critical-path model of one training epoch, from the instance plans of PGC, PSS (both layouts),
PTS and PSS-TS (DGC §2.2, §4), priced on a hardware profile (DGC §7.1's 8 × V100: ``dgc-v100``).

epoch = 3 · (per-rank structure work, slowest rank + Σ over recurrent rounds of the slowest rank's
round) + sequential exchanges × latency + Σ over exchanges of the busiest sender's bytes / bandwidth.

* structure work of rank r, per structure layer: aggregation (nnz_r + cells_r)·w_in·4 bytes at the
  memory bandwidth (memory-bound) + dense cells_r·2·w_in·w_out FLOPs at the FP32 peak;
* recurrent round k (:mod:`~dgbench.trainers.discrete.dgc.instances`' runs of index k), rank r: its segments
  run side by side, so ``steps`` = the longest segment, each step a fixed ``step_overhead_s`` (kernel
  launches), plus cells·gates·2·(w_in + w)·w FLOPs; attention: one batch of cells·(4w² + L̄w);
* exchanges: one per structure aggregation of computed features (halo rows), one before each
  recurrent round k ≥ 1 (carries), one attention history, PSS-TS's two layout shuffles; the backward
  pass repeats each (gradients of the same rows). Bytes are rows · width · 4.
* forward + backward compute = 3 × forward (backward ≈ 2 × forward, the usual estimate); no overlap
  of compute and communication (§3 describes none); the gradient all-reduce is left out (the same for
  every scheme). docs/discrete-schemes.md ("Critical-path model") lists the choices.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dgbench.trainers.discrete.dgc.chunks import (REACH_ALL, SuperGraph, TrafficProfile, assign_chunks,
                                                  chunk_pair_bytes, cut_rows, default_max_chunk_size, label_propagation,
                                                  pss_parts, pts_parts)
from dgbench.trainers.discrete.dgc.costmodel import EncoderSpec, FlopProxy, chunk_shapes
from dgbench.trainers.discrete.dgc.instances import _runs

BACKWARD_FACTOR = 3.0  # forward + backward ≈ 3 forward passes of compute
BYTES_PER_ELEMENT = 4


@dataclass(frozen=True)
class DeviceRates:
    """What the model prices with: FP32 peak, memory bandwidth, a fixed cost per sequential time
    step, and the link between ranks (alpha-beta)."""

    flops: float
    memory_bandwidth: float
    step_overhead_s: float
    alpha_s: float
    bandwidth: float

    @classmethod
    def from_profile(cls, document: dict[str, Any], parts: int) -> "DeviceRates":
        """Rates of a hardware-profile document; the intra-node link while ``parts`` fit one node."""
        device, links = document["device"], document["links"]
        link = links["intra"] if parts <= int(document["ranks_per_node"]) else links["inter"]
        return cls(float(device["fp32_flops"]), float(device["memory_bandwidth"]), float(device["step_overhead_s"]),
                   float(link["alpha_s"]), float(link["bandwidth"]))


@dataclass(frozen=True)
class ModelShape:
    """The widths and encoders the model prices: T-GCN is ``ModelShape(2, 6, (6,), 2, "gru", 1, (6,))``."""

    feature_width: int
    width: int
    spatial_widths: tuple[int, ...]  # one per structure exchange (TrafficProfile.spatial_widths)
    structure_layers: int
    time: str  # "gru", "lstm" or "attention"
    time_layers: int
    temporal_widths: tuple[int, ...]

    @classmethod
    def of(cls, profile: TrafficProfile, spec: EncoderSpec, feature_width: int, width: int) -> "ModelShape":
        return cls(feature_width, width, profile.spatial_widths, spec.structure_layers, spec.time,
                   spec.time_layers, profile.temporal_widths)

    @property
    def recurrent(self) -> bool:
        return self.time in ("gru", "lstm")


@dataclass
class CriticalPath:
    """The model's terms for one scheme (seconds of one training epoch; bytes all ranks send)."""

    scheme: str
    parts: int
    structure_s: list[float]  # per rank, forward + backward
    round_s: list[float]  # per recurrent round: the slowest rank's, forward + backward
    exchanges: int  # sequential exchanges that move bytes (forward + backward)
    latency_s: float
    transfer_s: float
    bytes: int
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def recurrent_s(self) -> float:
        return float(sum(self.round_s))

    @property
    def epoch_s(self) -> float:
        return max(self.structure_s, default=0.0) + self.recurrent_s + self.latency_s + self.transfer_s

    def row(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "parts": self.parts, "epoch_s": self.epoch_s,
                "structure_s": max(self.structure_s, default=0.0), "recurrent_s": self.recurrent_s,
                "rounds": len(self.round_s), "exchanges": self.exchanges, "latency_s": self.latency_s,
                "transfer_s": self.transfer_s, "bytes": self.bytes}


# --------------------------------------------------------------------------- plan counts

def structure_counts(graph: SuperGraph, part: np.ndarray, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """Per rank: own cells (instances) and aggregated nonzeros (spatial edges into its instances)."""
    cells = np.bincount(part, minlength=parts)
    nnz = np.bincount(part[graph.spatial_dst], minlength=parts)
    return cells, nnz


def halo_rows(graph: SuperGraph, part: np.ndarray, parts: int) -> np.ndarray:
    """Per sending rank: distinct (instance, reading rank) pairs across ranks (the plans' halo rows)."""
    return cut_rows(graph, TrafficProfile((1,), (1,)), part, parts).spatial.sum(axis=1)


@dataclass(frozen=True)
class RoundWork:
    steps: np.ndarray  # [rounds, parts]: longest segment of the rank in the round
    cells: np.ndarray  # [rounds, parts]
    carries: np.ndarray  # [rounds, parts]: carries the rank sends before the round (0 for round 0)


def round_work(graph: SuperGraph, part: np.ndarray, parts: int) -> RoundWork:
    """The recurrent rounds of the plans: run k of a vertex's sequence (consecutive instances on one
    rank) runs in round k, after the carry of run k-1 arrives from its rank."""
    runs = _runs(graph, part)
    rounds = int(runs.index.max()) + 1 if len(runs.index) else 1
    steps = np.zeros((rounds, parts), np.int64)
    cells = np.zeros((rounds, parts), np.int64)
    carries = np.zeros((rounds, parts), np.int64)
    np.maximum.at(steps, (runs.index, runs.part), runs.length)
    np.add.at(cells, (runs.index, runs.part), runs.length)
    later = runs.index > 0
    np.add.at(carries, (runs.index[later], runs.part[np.flatnonzero(later) - 1]), 1)
    return RoundWork(steps, cells, carries)


def history_rows(graph: SuperGraph, part: np.ndarray, parts: int) -> np.ndarray:
    """Per sending rank: distinct (earlier instance, rank of a later instance of its vertex) pairs
    across ranks — what causal attention gathers."""
    return cut_rows(graph, TrafficProfile((1,), (1,), REACH_ALL), part, parts).temporal.sum(axis=1)


# --------------------------------------------------------------------------- pricing

def _structure_seconds(cells: np.ndarray, nnz: np.ndarray, shape: ModelShape, rates: DeviceRates) -> list[float]:
    widths = [shape.feature_width] + [shape.width] * shape.structure_layers
    seconds = np.zeros(len(cells))
    for w_in, w_out in zip(widths[:-1], widths[1:]):
        seconds += (nnz + cells) * w_in * BYTES_PER_ELEMENT / rates.memory_bandwidth
        seconds += cells * 2.0 * w_in * w_out / rates.flops
    return (BACKWARD_FACTOR * seconds).tolist()


def _cell_flops(shape: ModelShape, mean_length: float = 1.0) -> float:
    w = float(shape.width)
    if shape.time == "attention":
        return shape.time_layers * (4 * w * w + mean_length * w)
    gates = 3.0 if shape.time == "gru" else 4.0
    return shape.time_layers * gates * 2 * (w + w) * w


def _round_seconds(work: RoundWork, shape: ModelShape, rates: DeviceRates) -> list[float]:
    per_rank = shape.time_layers * work.steps * rates.step_overhead_s + work.cells * _cell_flops(shape) / rates.flops
    return (BACKWARD_FACTOR * per_rank.max(axis=1)).tolist()


@dataclass
class _Exchanges:
    """Sequential exchanges of the forward pass: the busiest sender's bytes of each, and the total."""

    busiest: list[int] = field(default_factory=list)
    total: int = 0

    def add(self, rows_per_rank: np.ndarray, width: int) -> None:
        sent = np.asarray(rows_per_rank, np.int64) * width * BYTES_PER_ELEMENT
        if sent.sum() > 0:
            self.busiest.append(int(sent.max()))
            self.total += int(sent.sum())

    def priced(self, rates: DeviceRates) -> tuple[int, float, float, int]:
        """(exchanges, latency s, transfer s, bytes), forward + backward (the backward repeats each)."""
        count = 2 * len(self.busiest)
        return count, count * rates.alpha_s, 2 * sum(self.busiest) / rates.bandwidth, 2 * self.total


def instance_critical_path(scheme: str, graph: SuperGraph, part: np.ndarray, parts: int, shape: ModelShape,
                           rates: DeviceRates) -> CriticalPath:
    """PGC, PSS or PTS, written as an instance -> rank map (what their plans run)."""
    part = np.asarray(part, np.int64)
    cells, nnz = structure_counts(graph, part, parts)
    exchanges = _Exchanges()
    halo = halo_rows(graph, part, parts)
    for width in shape.spatial_widths:
        exchanges.add(halo, width)
    if shape.recurrent:
        work = round_work(graph, part, parts)
        for k in range(1, work.carries.shape[0]):
            for width in shape.temporal_widths:
                exchanges.add(work.carries[k], width)
        rounds = _round_seconds(work, shape, rates)
    else:
        for width in shape.temporal_widths:
            exchanges.add(history_rows(graph, part, parts), width)
        mean_length = graph.num_instances / max(1, len(np.unique(graph.vertex)))
        per_rank = rates.step_overhead_s + cells * _cell_flops(shape, mean_length) / rates.flops
        rounds = [BACKWARD_FACTOR * float(per_rank.max())]
    count, latency, transfer, sent = exchanges.priced(rates)
    return CriticalPath(scheme, parts, _structure_seconds(cells, nnz, shape, rates), rounds, count, latency,
                        transfer, sent, {"halo_rows": halo.tolist(), "cells": cells.tolist()})


def pss_ts_critical_path(graph: SuperGraph, parts: int, shape: ModelShape, rates: DeviceRates) -> CriticalPath:
    """PSS-TS (§2.2, Fig. 2c): the structure encoder on contiguous snapshot ranges (no halo), the time
    encoder on whole sequences (no carries), the embeddings shuffled between the two layouts before
    the time encoder and back after it (rows: instances whose two ranks differ)."""
    snapshots, sequences = pss_parts(graph, parts), pts_parts(graph, parts)
    cells, nnz = structure_counts(graph, snapshots, parts)
    moved = snapshots != sequences
    exchanges = _Exchanges()
    exchanges.add(np.bincount(snapshots[moved], minlength=parts), shape.width)
    exchanges.add(np.bincount(sequences[moved], minlength=parts), shape.width)
    if shape.recurrent:
        rounds = _round_seconds(round_work(graph, sequences, parts), shape, rates)
    else:
        seq_cells = np.bincount(sequences, minlength=parts)
        mean_length = graph.num_instances / max(1, len(np.unique(graph.vertex)))
        rounds = [BACKWARD_FACTOR * float((rates.step_overhead_s + seq_cells * _cell_flops(shape, mean_length)
                                           / rates.flops).max())]
    count, latency, transfer, sent = exchanges.priced(rates)
    return CriticalPath("pss-ts", parts, _structure_seconds(cells, nnz, shape, rates), rounds, count, latency,
                        transfer, sent, {"shuffled_rows": int(moved.sum())})


def pgc_parts(graph: SuperGraph, profile: TrafficProfile, spec: EncoderSpec, parts: int, feature_width: int,
              width: int, seed: int = 0) -> np.ndarray:
    """PGC's instance map as the `dgc` scheme makes it with its defaults: label-propagation chunks
    (§4.1), FLOP-proxy workloads, Alg. 1 assignment (§4.2)."""
    chunks = label_propagation(graph, profile, default_max_chunk_size(graph.num_instances, parts), seed=seed)
    structure, temporal = FlopProxy(spec).predict(chunk_shapes(graph, chunks.chunk_of), feature_width, width)
    assignment = assign_chunks(structure + temporal, chunk_pair_bytes(graph, profile, chunks.chunk_of), parts)
    return assignment.rank_of_chunk[chunks.chunk_of]


def scheme_critical_paths(graph: SuperGraph, profile: TrafficProfile, spec: EncoderSpec, parts: int,
                          rates: DeviceRates, feature_width: int, width: int, seed: int = 0) -> dict[str, CriticalPath]:
    """The model for the paper's baselines (PSS both layouts, PTS, PSS-TS) and PGC at ``parts`` ranks."""
    shape = ModelShape.of(profile, spec, feature_width, width)
    maps = {"pss": pss_parts(graph, parts, "contiguous"), "pss-interleaved": pss_parts(graph, parts, "interleaved"),
            "pts": pts_parts(graph, parts)}
    out = {name: instance_critical_path(name, graph, part, parts, shape, rates) for name, part in maps.items()}
    out["pss-ts"] = pss_ts_critical_path(graph, parts, shape, rates)
    out["dgc"] = instance_critical_path("dgc", graph, pgc_parts(graph, profile, spec, parts, feature_width, width,
                                                                 seed), parts, shape, rates)
    return out
