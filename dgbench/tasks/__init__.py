"""Tasks apart from schemes (as OGB and TGB split dataset, negative sampler and evaluator).

* :mod:`dgbench.tasks.link` — event link prediction (streams) and snapshot link prediction (snapshot
  stores): their splits and their evaluation sets;
* :mod:`dgbench.tasks.negatives` — the negative strategies random / historical / inductive;
* :mod:`dgbench.tasks.evalset` — evaluation sets as fingerprinted data beside the store;
* :mod:`dgbench.tasks.evaluator` — one evaluator for every scheme of both families, typed figures.

``dgbench tasks STORE`` writes a store's evaluation sets and prints their fingerprints; ``dgbench run``
writes a missing one on first use and cites the set it scored in the record's ``evaluation`` block.

Node classification (issue 16) is not a task here yet: only its metrics exist
(:func:`dgbench.metrics.node_classification_metrics`); no run trains or scores it.
"""
from __future__ import annotations

LINK_PREDICTION = "link-prediction"
