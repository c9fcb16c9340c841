"""`dgc`: DGC's partitioning by graph chunks (PGC, Chen et al., DGC §4-§5, Fig. 2d).

Partition step (rank 0, once per job; DGC §4):

1. the super-graph of instances v_{i,t} (``--presence`` decides V_t) with spatial edges and virtual
   temporal edges, each weighing the bytes the run's model would move if it were cut
   (:func:`~dgbench.trainers.discrete.dgc.model_traffic.model_traffic`);
2. chunks by label propagation (§4.1, Eq. 1-2) under ``--chunk-size`` (0: ⌈Σ_t|V_t| / (8P)⌉), with
   ``--chunk-levels`` coarsening levels (1: the paper's single pass);
3. each chunk's workload from the two MLPs of §4.2 (``--cost-model FILE`` fitted by ``dgbench costmodel
   fit dgc``; without one, the FLOP proxy, recorded as such), and Alg. 1 / Eq. 3 assigns chunks to
   ranks.

Run time (DGC §5): :class:`~dgbench.trainers.discrete.dgc.instance_placement.InstancePlacement` — spatial and
temporal halos per chunk cut, chunk fusion (``--fusion``: spatial groups under
``--fusion-budget-mb``, masked temporal packing, both, or off) and adaptive stale aggregation
(``--stale off|adaptive|FACTOR``, ``--stale-formula intent|printed``; off by default, so a run
follows ``single``'s trajectory exactly, DGC §7.6).

The record keeps the chunking (count, sizes, iterations), the cost model used and, when fitted, its
Eq. 8 error on chunks of the run's own shapes timed on rank 0, the predicted load per rank and λ,
the seconds chunk generation and assignment took, the bytes the cut predicts, and the stale
aggregation's per-epoch savings.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dgbench.dist import DistContext
from dgbench.errors import DgbenchError
from dgbench.options import Options, option
from dgbench.trainers.discrete.dgc.chunks import (DEFAULT_MAX_ITERATIONS, DEFAULT_MAX_LEVELS, DEFAULT_SLACK,
                                                  TrafficProfile, assign_chunks, chunk_pair_bytes, cut_rows,
                                                  default_max_chunk_size, label_propagation, predicted_bytes)
from dgbench.trainers.discrete.dgc.costmodel import (EncoderSpec, FlopProxy, chunk_shapes, load_chunk_cost_model,
                                             prediction_error, time_chunk)
from dgbench.trainers.discrete.dgc.model_traffic import ModelTraffic, model_traffic
from dgbench.trainers.discrete.dgc.stale import FORMULAS, INTENT, StalePolicy
from dgbench.trainers.contract import DiscreteScheme, Partition, register_scheme
from dgbench.trainers.discrete.data import DiscreteData
from dgbench.trainers.discrete.dgc.instance_placement import (FusionSettings, InstancePlacement, check_presence,
                                                              instance_graph)
from dgbench.trainers.discrete.placement import Placement
from dgbench.trainers.discrete.schedule import Schedule
from dgbench.trainers.discrete.dgc.stale_schedule import StaleSchedule

FUSION_CHOICES = ("both", "spatial", "temporal", "off")
COST_CHECK_CHUNKS = 64  # chunks of the run's shapes timed for Eq. 8 when a fitted model is given


@dataclass(frozen=True)
class DGCOptions(Options):
    chunk_size: int = option(0, "Maximum instances per chunk (DGC §4.1; 0: ceil(Σ|V_t| / (8P))).", minimum=0)
    chunk_levels: int = option(DEFAULT_MAX_LEVELS, "Label-propagation coarsening levels (1: DGC §4.1's single "
                                                   "pass).", positive=True)
    lpa_iterations: int = option(DEFAULT_MAX_ITERATIONS, "Label-propagation iterations per level (cap).",
                                 positive=True)
    cost_model: str = option("", "Fitted dgc-chunk cost model (dgbench costmodel fit dgc); empty: the FLOP proxy.")
    assign_slack: float = option(DEFAULT_SLACK, "Alg. 1: avoid a rank whose load would exceed ḡ·(1 + slack).",
                                 minimum=0.0)
    fusion: str = option("both", "Chunk fusion (DGC §5.1): spatial, temporal, both or off.", choices=FUSION_CHOICES)
    fusion_budget_mb: float = option(64.0, "Spatial fusion: memory a fused chunk group may load (MiB).",
                                     positive=True)
    stale: str = option("off", "Stale aggregation (DGC §5.2): off, adaptive, or a factor of D (static θ = "
                               "FACTOR·D, e.g. 0.5).")
    stale_formula: str = option(INTENT, "Eq. 6 as the text intends (θ grows as the loss falls) or as printed.",
                                choices=FORMULAS)


def traffic_of(problem: DiscreteData) -> ModelTraffic | None:
    """The run's model's traffic profile (the family attaches a model builder to its problem)."""
    build = getattr(problem, "build_model", None)
    return model_traffic(build(), problem.in_features) if build is not None else None


@register_scheme
class DGC(DiscreteScheme[DGCOptions]):
    name = "dgc"
    summary = "DGC's PGC: label-propagation chunks of instances, Alg. 1 assignment, chunk fusion, stale aggregation"
    Options = DGCOptions
    conformance = ({"fusion": "off"}, {"chunk_levels": 1, "chunk_size": 7})

    def validate(self, options: DGCOptions, world_size: int) -> None:
        StalePolicy.parse(options.stale, options.stale_formula)

    def partition(self, problem: DiscreteData, parts: int, options: DGCOptions) -> Partition:
        started = time.perf_counter()
        graph = instance_graph(problem)
        traffic = traffic_of(problem)
        check_presence(problem, traffic.ends_with_time_encoder if traffic else None)
        hidden = int(getattr(problem, "hidden", 6))
        profile = traffic.profile if traffic else TrafficProfile((hidden,), (hidden,))
        built = time.perf_counter()
        cap = options.chunk_size or default_max_chunk_size(graph.num_instances, parts)
        chunks = label_propagation(graph, profile, cap, seed=problem.seed, max_iterations=options.lpa_iterations,
                                   max_levels=options.chunk_levels)
        generated = time.perf_counter()
        pairs = chunk_pair_bytes(graph, profile, chunks.chunk_of)
        shapes = chunk_shapes(graph, chunks.chunk_of)
        spec = _encoders(traffic)
        cost = load_chunk_cost_model(options.cost_model, spec) if options.cost_model else FlopProxy(spec)
        structure, temporal = cost.predict(shapes, problem.in_features, hidden)
        workload = structure + temporal
        assignment = assign_chunks(workload, pairs, parts, options.assign_slack)
        assigned = time.perf_counter()
        part = assignment.rank_of_chunk[chunks.chunk_of]
        report: dict[str, Any] = {
            "method": "dgc", "presence": graph.presence, "instances": graph.num_instances,
            "profile": asdict(profile), "chunking": chunks.report(), "cost_model": cost.provenance(),
            "predicted_load": assignment.load.tolist(), "predicted_lambda": assignment.imbalance,
            "seconds": {"graph": built - started, "chunk_generation": generated - built,
                        "chunk_assignment": assigned - generated},
            "predicted_bytes_per_epoch": predicted_bytes(cut_rows(graph, profile, part, parts), profile)}
        if options.cost_model:
            report["cost_model_error"] = _eq8_check(spec, shapes, structure + temporal, problem.in_features, hidden,
                                                    problem.seed)
        return Partition(None, "dgc", report, {"part": part, "chunk": chunks.chunk_of})

    def placement(self, ctx: DistContext, data: DiscreteData, options: DGCOptions, partition: Partition) -> Placement:
        fusion = FusionSettings(spatial=options.fusion in ("both", "spatial"),
                                temporal=options.fusion in ("both", "temporal"),
                                budget_bytes=options.fusion_budget_mb * 2 ** 20,
                                row_bytes=4.0 * max(1, sum(partition.report["profile"]["spatial_widths"])))
        return InstancePlacement(ctx, data, instance_graph(data), partition.arrays["part"],
                                 chunk_of=partition.arrays["chunk"], fusion=fusion,
                                 stale=StalePolicy.parse(options.stale, options.stale_formula), method="dgc",
                                 report=partition.report)

    def schedule(self, options: DGCOptions) -> Schedule | None:
        """Stale aggregation needs the epoch and the previous epoch's loss (Eq. 6-7)."""
        return StaleSchedule() if StalePolicy.parse(options.stale, options.stale_formula).enabled else None

    def record_extras(self, options: DGCOptions, partition: Partition) -> dict[str, Any]:
        return {"dgc": {"stale": StalePolicy.parse(options.stale, options.stale_formula).describe(),
                        "fusion": options.fusion}}


def _encoders(traffic: ModelTraffic | None) -> EncoderSpec:
    if traffic is None or traffic.time == "none":
        return EncoderSpec("gcn", 2, "gru", 1)
    return EncoderSpec(traffic.structure, max(1, traffic.structure_layers), traffic.time, traffic.time_layers)


def _eq8_check(spec: EncoderSpec, shapes: Any, predicted: np.ndarray, feature_width: int, layer_width: int,
               seed: int) -> dict[str, Any]:
    """Eq. 8 over up to COST_CHECK_CHUNKS chunks of the run's shapes, each timed here (median of 3)."""
    rng = np.random.default_rng(seed)
    count = len(predicted)
    if not count:
        raise DgbenchError("no chunks to check the cost model on")
    picked = rng.choice(count, size=min(count, COST_CHECK_CHUNKS), replace=False)
    measured = np.array([sum(time_chunk(spec, int(shapes.vertices[a]), int(shapes.edges[a]) or 1,
                                        int(shapes.sequences[a]), feature_width, layer_width, rng))
                         for a in picked])
    return {"eq8_error": prediction_error(predicted[picked], measured), "chunks": int(len(picked)),
            "how": "chunks of the run's (vertices, edges, sequences) timed on rank 0 before training"}
