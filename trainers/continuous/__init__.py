"""Continuous-time (memory-based TGNN) trainers: one loop (loop.py), ``single``, and one package per paper
(sven/: Sven and its baselines DepCache and DepComm; tgcn/: streaming T-GCN). Importing registers the schemes
and the models (dgbench.models.temporal, edgebank, dygnn) with the CLI."""
import dgbench.models.dygnn  # noqa: F401  (registers dygnn)
import dgbench.models.edgebank  # noqa: F401  (registers the edgebank baseline)
import dgbench.models.temporal  # noqa: F401  (registers tgn, jodie, apan)
from dgbench.trainers.continuous import single  # noqa: F401  (registers the reference scheme)
from dgbench.trainers.discovery import import_paper_packages

import_paper_packages(__name__, __path__)
