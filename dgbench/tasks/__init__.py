"""Tasks apart from schemes (as OGB and TGB split dataset, negative sampler and evaluator).

* :mod:`dgbench.tasks.link` — event link prediction (streams) and snapshot link prediction (snapshot
  stores): their splits and their evaluation sets;
* :mod:`dgbench.tasks.negatives` — the negative strategies random / historical / inductive;
* :mod:`dgbench.tasks.evalset` — evaluation sets as fingerprinted data beside the store;
* :mod:`dgbench.tasks.evaluator` — one evaluator for every scheme of both families, typed figures;
* :mod:`dgbench.tasks.node` — node classification (``--task node-classification``): fingerprinted label
  sets with a time-respecting split and the MLP decoder trained on a link-prediction model's frozen
  embeddings (TGN / DyGLib protocol).

``dgbench tasks STORE`` writes a store's evaluation sets and prints their fingerprints; ``dgbench run``
writes a missing one on first use and cites the set it scored in the record's ``evaluation`` block.

A record's ``task`` says which task ran (``link_prediction`` or ``node_classification``) and its
``evaluation`` block cites the set (negatives or labels) it scored.
"""
from __future__ import annotations

LINK_PREDICTION = "link-prediction"
NODE_CLASSIFICATION = "node-classification"
TASKS = (LINK_PREDICTION, NODE_CLASSIFICATION)
