"""dgbench: Zarr stores of dynamic graphs, distributed training schemes, and leaderboards.

The public API (docs/python-api.md): ``prepare`` and ``open_store`` a store, ``run`` a scheme on it
(a :class:`Record`), score predictions with ``Evaluator``, read a board with ``board``; the store
classes for writing one. Names are imported on first use, so ``import dgbench`` stays light (no torch,
no zarr).
"""
from __future__ import annotations

import importlib
import os
from typing import Any

__version__ = "0.1.0"

# dgbench.loaders, dgbench.generators and dgbench.trainers are the repository's top-level folders of those
# names (docs/packaging.md): the wheel installs them under dgbench/ (pyproject's package-dir mapping, setup.py);
# run from a checkout (PYTHONPATH=REPO, or an editable install), they are found beside this folder.
# (Paths, not package names, so scripts/namespace_rewrite.py leaves these lines as they are.)
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHECKOUT_MARKERS = ("loaders/__init__.py", "trainers/__init__.py")
if not os.path.isdir(os.path.join(_REPOSITORY, "dgbench/trainers/")) and all(
        os.path.isfile(os.path.join(_REPOSITORY, marker)) for marker in _CHECKOUT_MARKERS):
    __path__.append(_REPOSITORY)  # noqa: F821 - a package's __path__ is set before its __init__ runs

_EXPORTS = {
    "prepare": "dgbench.api", "run": "dgbench.api", "Record": "dgbench.api", "Evaluator": "dgbench.api",
    "board": "dgbench.api", "board_rows": "dgbench.api",
    "open_store": "dgbench.store", "EdgeStreamStore": "dgbench.store", "EdgeStreamStoreWriter": "dgbench.store",
    "Snapshot": "dgbench.store", "SnapshotStore": "dgbench.store", "SnapshotStoreWriter": "dgbench.store",
    "DgbenchError": "dgbench.errors",
    "from_temporal_data": "dgbench.store.pyg", "import_tgb_negatives": "dgbench.loaders.tgb",
}
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dgbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
