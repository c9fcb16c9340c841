"""The model zoo. Importing registers each model with the CLI (one import line per model module)."""
from dgbench.models import attention, discrete, persistence, recurrent  # noqa: F401
