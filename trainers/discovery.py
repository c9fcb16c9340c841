"""Scheme discovery: a family package registers ``single`` and every scheme of its paper packages.

A paper package (``trainers/<family>/<paper>/``) holds that paper's schemes, placements, partitioners,
schedules and formulas; importing each of its modules runs their ``register_scheme`` decorators, so
adding a scheme is adding a module (or a package) there. See docs/adding-a-scheme.md.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable


def import_paper_packages(family: str, path: Iterable[str]) -> None:
    """Import every module directly inside each subpackage of ``family`` (nested packages, such as a
    paper's partitioners, are imported by the modules that use them)."""
    for package in sorted(m.name for m in pkgutil.iter_modules(list(path)) if m.ispkg):
        paper = importlib.import_module(f"{family}.{package}")
        for module in sorted(m.name for m in pkgutil.iter_modules(paper.__path__) if not m.ispkg):
            importlib.import_module(f"{paper.__name__}.{module}")
