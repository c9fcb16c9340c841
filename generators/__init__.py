"""Synthetic dynamic graphs with the knobs the papers use; each is deterministic given its seed.

Importing this package registers every generator with `dgbench prepare`.
"""
from dgbench.generators import (communities, esdg_random, nonuniform, static_to_dynamic, stream)  # noqa: F401  (registration)
