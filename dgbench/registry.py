"""Registries of what dgbench can prepare (generators, datasets, formats), train (schemes, models).

Plugins register themselves on import; :func:`load_plugins` imports the packages that hold them
(`generators`, `loaders`, `trainers`), so the CLI and `dgbench list` see one uniform catalogue.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

PLUGIN_PACKAGES = ("generators", "loaders", "trainers")


@dataclass
class Preparer:
    """Something `dgbench prepare NAME` can build a store from: a generator, a dataset or a format."""

    name: str
    kind: str  # "generator" | "dataset" | "format"
    summary: str
    produces: str  # "snapshots" | "stream" | "snapshots|stream"
    build: Callable[..., Path]  # build(out=Path, overwrite=bool, **options) -> Path of the store
    options: list[click.Option] = field(default_factory=list)


@dataclass
class Entry:
    """A named scheme or model: ``factory`` builds it; ``family`` is "discrete" or "continuous"."""

    name: str
    family: str
    summary: str
    factory: Callable[..., Any]


PREPARERS: dict[str, Preparer] = {}
SCHEMES: dict[str, Entry] = {}  # keyed "family:name"
MODELS: dict[str, Entry] = {}  # keyed "family:name"


def register_preparer(name: str, *, kind: str, summary: str, produces: str,
                      options: list[click.Option] | None = None) -> Callable:
    """Decorator: register ``build(out, overwrite, **options)`` as `dgbench prepare NAME`."""
    def wrap(build: Callable[..., Path]) -> Callable[..., Path]:
        if name in PREPARERS:
            raise ValueError(f"preparer '{name}' registered twice")
        PREPARERS[name] = Preparer(name, kind, summary, produces, build, list(options or []))
        return build
    return wrap


def _register(table: dict[str, Entry], what: str, name: str, family: str, summary: str) -> Callable:
    def wrap(factory):
        key = f"{family}:{name}"
        if key in table:
            raise ValueError(f"{what} '{name}' ({family}) registered twice")
        table[key] = Entry(name, family, summary, factory)
        return factory
    return wrap


def register_scheme(name: str, *, family: str, summary: str) -> Callable:
    """Decorator: register a distributed training scheme for one model family."""
    return _register(SCHEMES, "scheme", name, family, summary)


def register_model(name: str, *, family: str, summary: str) -> Callable:
    """Decorator: register a model of the zoo for one family."""
    return _register(MODELS, "model", name, family, summary)


def lookup(table: dict[str, Entry], name: str, family: str) -> Entry:
    entry = table.get(f"{family}:{name}")
    if entry is None:
        known = sorted(e.name for k, e in table.items() if k.startswith(f"{family}:"))
        what = "scheme" if table is SCHEMES else "model" if table is MODELS else "entry"
        raise KeyError(f"unknown {family}-time {what} '{name}' (known: {', '.join(known) or 'none'})")
    return entry


def load_plugins(*packages: str) -> None:
    """Import the plugin packages (default: all) so their registrations run; Python imports each once.

    `prepare` asks only for generators and loaders, so it does not pay for importing torch models."""
    for package in packages or PLUGIN_PACKAGES:
        importlib.import_module(package)
