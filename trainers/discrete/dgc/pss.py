"""`pss`: DGC's partitioning by spatial snapshots (PSS, DGC §2.2, Fig. 2a; [4, 12]).

Each rank computes whole snapshots — "the same number of snapshots" per GPU (§2.2.2): contiguous
ranges by default, or snapshot t on rank t mod P with ``--pss-layout interleaved`` (the paper says
neither; docs/discrete-schemes.md) — so the structure encoder never crosses ranks, and the time encoder
does where a vertex's sequence crosses a range boundary: a GRU/LSTM hands its state rank to rank in
order (tag ``carry``; the ranks run one after another, the pipeline §2.2.3 describes), causal
attention gathers every earlier snapshot's instances held elsewhere (``history``), a window module
the w-1 previous ones (``window``). Instances follow the run's ``--presence``. The layout is
:class:`~dgbench.trainers.discrete.dgc.instance_placement.InstancePlacement`'s with PSS's instance map; runs
are padded, not fused (the PyGT baseline).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from dgbench.dist import DistContext
from dgbench.options import Options, option
from dgbench.trainers.discrete.dgc.chunks import PSS_LAYOUTS, pss_parts
from dgbench.trainers.discrete.dgc.model_traffic import model_traffic
from dgbench.trainers.contract import DiscreteScheme, Partition, register_scheme
from dgbench.trainers.discrete.data import DiscreteData
from dgbench.trainers.discrete.dgc.instance_placement import (FusionSettings, InstancePlacement, check_presence,
                                                              instance_graph)
from dgbench.trainers.discrete.placement import Placement


@dataclass(frozen=True)
class PSSOptions(Options):
    pss_layout: str = option("contiguous", "Which snapshots a rank computes: equal contiguous ranges, or snapshot "
                                           "t on rank t mod P (the paper says neither).", choices=PSS_LAYOUTS)


@register_scheme
class PSS(DiscreteScheme[PSSOptions]):
    name = "pss"
    summary = "DGC's PSS: equal snapshot counts per rank, sequences' state handed rank to rank (§2.2)"
    Options = PSSOptions
    conformance = ({"pss_layout": "interleaved"},)

    def partition(self, problem: DiscreteData, parts: int, options: PSSOptions) -> Partition:
        started = time.perf_counter()
        build = getattr(problem, "build_model", None)
        check_presence(problem, model_traffic(build(), problem.in_features).ends_with_time_encoder if build else None)
        graph = instance_graph(problem)
        part = pss_parts(graph, parts, options.pss_layout)
        report = {"method": "pss", "layout": options.pss_layout, "instances": graph.num_instances,
                  "presence": graph.presence,
                  "seconds": time.perf_counter() - started}
        return Partition(None, "pss", report, {"part": part})

    def placement(self, ctx: DistContext, data: DiscreteData, options: PSSOptions, partition: Partition) -> Placement:
        return InstancePlacement(ctx, data, instance_graph(data), partition.arrays["part"],
                                 fusion=FusionSettings(spatial=False, temporal=False), method="pss",
                                 report=partition.report)

