"""What the launcher's fork server imports first, so that each rank starts as a fork of a warm process instead
of a fresh interpreter importing torch (seconds a rank); the modules a caller named with
``dgbench.launch.preload_for_ranks`` (the trainers name theirs) follow it. See docs/python-api.md.

A fork copies the forking thread alone, so a lock another thread held would stay held in every rank: the
server must hold no other thread when it forks. numpy's OpenBLAS starts its pool on import but stops it before
each fork (its own fork handler); pyarrow's jemalloc would start a background thread on import, which its
MALLOC_CONF turns off here (pyarrow allocates through mimalloc unless told otherwise, so ranks lose nothing).
tests/test_launch.py checks that the server holds one thread.
"""
from __future__ import annotations

import os

INHERITED_ENVIRON = dict(os.environ)  # before the imports below add to it (the launcher's, when it started us)
ARROW_JEMALLOC_CONF = "JE_ARROW_MALLOC_CONF"  # read once, when pyarrow's jemalloc starts (on import)
SET_FOR_THE_IMPORTS = {ARROW_JEMALLOC_CONF} - set(INHERITED_ENVIRON)  # the ranks drop these again
os.environ.setdefault(ARROW_JEMALLOC_CONF, "background_thread:false")

import torch  # noqa: E402,F401
import torch._dynamo  # noqa: E402,F401 - building the first optimiser imports it (~1.5 s a rank)
