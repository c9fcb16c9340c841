"""Discrete-time (snapshot) trainers: one loop (loop.py), ``single``, and one package per paper (esdg/, dgc/,
blad/). Importing registers the schemes and the model zoo (dgbench.models) with the CLI."""
import dgbench.models  # noqa: F401  (registers the discrete-time models)
from dgbench.trainers.discovery import import_paper_packages
from dgbench.trainers.discrete import single  # noqa: F401  (registers the reference scheme)

import_paper_packages(__name__, __path__)
