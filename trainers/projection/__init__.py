"""Scaling past one machine (issue 17): exact dry-run communication counts, hardware profiles and an
epoch-time projection for P = 1 ... 1024.

* :mod:`dgbench.trainers.projection.dryrun` — the dry run: a scheme's own partition step and communication plan,
  on every rank of a world that counts without communicating
  (:class:`~dgbench.trainers.projection.dryrun.CountingComm`),
  giving the bytes per collective tag and kind, per (sender, receiver), and the per-rank work, per epoch;
* :mod:`dgbench.trainers.projection.hardware` — hardware profiles: links as alpha-beta per kind (intra-node,
  inter-node) and compute rates, calibrated on the machine at hand or taken from a spec sheet;
* :mod:`dgbench.trainers.projection.collectives` — the collective algorithms' cost formulas (cited);
* :mod:`dgbench.trainers.projection.projection` — epoch time, speedup and efficiency under strong and weak scaling;
* :mod:`dgbench.trainers.projection.cli` — ``dgbench project``.

See docs/projection.md.
"""
