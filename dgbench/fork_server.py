"""What the launcher's fork server imports once, so that each rank starts as a fork of a warm process instead
of a fresh interpreter importing torch (a few seconds a rank). See dgbench/launch.py and docs/running.md.

Only modules whose import starts no thread belong here: a fork copies the forking thread alone, so a lock held
by another thread would stay held in every rank. torch and torch._dynamo start none (numpy's OpenBLAS starts
its pool on import but stops it before each fork, through its own fork handler). The trainers import the
loaders, and with them pyarrow, whose allocator starts a background thread on import: each rank imports those.
"""
from __future__ import annotations

import os

INHERITED_ENVIRON = dict(os.environ)  # before the imports below add to it (the launcher's, when it started us)

import torch  # noqa: E402,F401
import torch._dynamo  # noqa: E402,F401 - building the first optimiser imports it (~1.5 s a rank)
