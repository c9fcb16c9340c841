"""Discrete-time (snapshot) trainers: the ESDG schemes single, checkpoint, snapshot and vertex.

Importing registers the schemes and the model zoo (dgbench.models) with the CLI.
"""
import dgbench.models  # noqa: F401  (registers tmgcn, evolvegcn-o, cdgcn)
from trainers.discrete import placement  # noqa: F401  (registers the schemes)
