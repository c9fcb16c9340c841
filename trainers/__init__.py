"""Trainers: the distributed schemes. Importing registers each scheme and model with the CLI."""
from trainers import continuous  # noqa: F401
from trainers import discrete  # noqa: F401
