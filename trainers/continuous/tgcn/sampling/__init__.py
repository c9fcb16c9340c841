"""Samplers of the streaming T-GCN paper (Wang et al.; ../shared/papers/tgcn-streaming.txt §2.3-§3, §5).

SIS (Segment Its Search: a sum tree, Alg. 3) beside the baselines ITS (reject-and-redraw as §2.4 describes
it, and rebuild-the-CDF) and BRS (C-SAW's bipartite region search, Alg. 2), all behind one interface and
implemented twice with identical results: compiled C++ (sis_kernels.cpp, built at first use) and a
pure-Python reference (reference.py). Modules:

* :mod:`.samplers` — Sample(V, n) without replacement, node-wise / layer-wise Sample_batch (Alg. 4),
  frontier subgraph sampling (Alg. 5), each with element-touch counts;
* :mod:`.forest` — persistent per-vertex sum trees for the temporal ``sis`` strategy (append in amortised
  O(log d), sampling among the events strictly before a query time, optional time decay);
* :mod:`.sparsify` — the edge-sparsification pre-pass of Alg. 7 (sample a fraction of each neighbourhood
  before partitioning).
"""
from dgbench.trainers.continuous.tgcn.sampling.forest import TemporalSumForest
from dgbench.trainers.continuous.tgcn.sampling.samplers import (FrontierSample, MultilayerSample, StaticGraph,
                                                                WorSample, frontier_sample, initial_frontiers,
                                                                multilayer_sample, sample_without_replacement)

__all__ = ["FrontierSample", "MultilayerSample", "StaticGraph", "TemporalSumForest", "WorSample", "frontier_sample",
           "initial_frontiers", "multilayer_sample", "sample_without_replacement"]
