"""Compatibility for code written before the one driver: use trainers.experiment."""
from trainers.experiment import run_experiment, run_experiments  # noqa: F401
