"""Discrete-time (snapshot) trainers: importing registers the schemes (trainers/discrete/schemes/) and the
model zoo (dgbench.models) with the CLI."""
import dgbench.models  # noqa: F401  (registers the discrete-time models)
from trainers.discrete import schemes  # noqa: F401  (registers the schemes)
