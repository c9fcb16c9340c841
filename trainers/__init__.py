"""Trainers: the distributed schemes. Importing registers each scheme and model with the CLI."""
from dgbench.trainers import continuous  # noqa: F401
from dgbench.trainers import discrete  # noqa: F401
