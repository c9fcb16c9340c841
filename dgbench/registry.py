"""Registries of what dgbench can prepare (generators, datasets, formats), train (schemes, models).

Plugins register themselves on import; :func:`load_plugins` imports the packages that hold them
(`generators`, `loaders`, `trainers`), then the models and schemes of separately installed packages
(entry-point groups ``dgbench.models`` and ``dgbench.schemes``), so the CLI and `dgbench list` see one
uniform catalogue. Writing a plugin: docs/python-api.md.
"""
from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click

from dgbench.errors import DgbenchError
from dgbench.options import NoOptions, Options, build_options, option_names

if TYPE_CHECKING:  # `dgbench prepare` does not pay for importing torch
    import torch

F = TypeVar("F", bound=Callable[..., Any])

PLUGIN_PACKAGES = ("dgbench.generators", "dgbench.loaders", "dgbench.trainers")
# Entry-point groups of separately installed packages; each entry point names the module (or an object in
# it) whose import registers models (@register_model) or schemes (dgbench.trainers.contract.register_scheme).
ENTRY_POINT_GROUPS = ("dgbench.models", "dgbench.schemes")


@dataclass
class Preparer:
    """Something `dgbench prepare NAME` can build a store from: a generator, a dataset or a format."""

    name: str
    kind: str  # "generator" | "dataset" | "format"
    summary: str
    produces: str  # "snapshots" | "stream" | "snapshots|stream"
    build: Callable[..., Path]  # build(out=Path, overwrite=bool, **options) -> Path of the store
    options: list[click.Option] = field(default_factory=list)


class RegisteredScheme(Protocol):
    """What the registry needs of a scheme (the full contract is trainers/contract.py's ``Scheme``)."""

    @property
    def name(self) -> str: ...

    @property
    def family(self) -> str: ...

    @property
    def summary(self) -> str: ...


class ModelFactory(Protocol):
    """Builds a model of the zoo; ``options`` are the model's own (its :class:`ModelEntry.options`)."""

    def __call__(self, **arguments: Any) -> torch.nn.Module: ...


@dataclass
class ModelEntry:
    """A model of the zoo: ``factory`` builds it from the family's arguments and its own ``options``."""

    name: str
    family: str
    summary: str
    factory: ModelFactory
    options: type[Options] = NoOptions

    def build(self, options: Options | None = None, **arguments: Any) -> torch.nn.Module:
        """The model, with the family's arguments (widths, ...) and its own resolved options."""
        own = options if options is not None else build_options(self.options, {}, f"model '{self.name}'")
        return self.factory(**arguments, **{k: getattr(own, k) for k in option_names(self.options)})


PREPARERS: dict[str, Preparer] = {}
SCHEMES: dict[str, RegisteredScheme] = {}  # keyed "family:name"; dgbench.trainers.contract.register_scheme fills it
MODELS: dict[str, ModelEntry] = {}  # keyed "family:name"


def register_preparer(name: str, *, kind: str, summary: str, produces: str,
                      options: list[click.Option] | None = None) -> Callable:
    """Decorator: register ``build(out, overwrite, **options)`` as `dgbench prepare NAME`."""
    def wrap(build: Callable[..., Path]) -> Callable[..., Path]:
        if name in PREPARERS:
            raise ValueError(f"preparer '{name}' registered twice")
        PREPARERS[name] = Preparer(name, kind, summary, produces, build, list(options or []))
        return build
    return wrap


def register_model(name: str, *, family: str, summary: str,
                   options: type[Options] = NoOptions) -> Callable[[F], F]:
    """Decorator: register a model factory of one family, with the options the model owns."""
    def wrap(factory: F) -> F:
        key = f"{family}:{name}"
        if key in MODELS:
            raise ValueError(f"model '{name}' ({family}) registered twice")
        MODELS[key] = ModelEntry(name, family, summary, factory, options)
        return factory
    return wrap


def model_of(family: str, name: str) -> ModelEntry:
    entry = MODELS.get(f"{family}:{name}")
    if entry is None:
        known = sorted(e.name for e in MODELS.values() if e.family == family)
        raise DgbenchError(f"unknown {family}-time model '{name}' (known: {', '.join(known) or 'none'})")
    return entry


def load_plugins(*packages: str) -> None:
    """Import the plugin packages (default: all) so their registrations run; Python imports each once.
    Asking for ``trainers`` (or for all) also loads the installed packages' entry points.

    `prepare` asks only for generators and loaders, so it does not pay for importing torch models."""
    for package in packages or PLUGIN_PACKAGES:
        importlib.import_module(package)
    if not packages or "dgbench.trainers" in packages:
        load_entry_points()


_LOADED_ENTRY_POINTS: set[tuple[str, str]] = set()


def load_entry_points(groups: tuple[str, ...] = ENTRY_POINT_GROUPS) -> list[str]:
    """Load every entry point of ``groups`` not loaded yet (its import registers what it holds); the names
    of those loaded now. A plugin that fails to import is one error naming it and its package."""
    loaded = []
    for group in groups:
        for entry in importlib.metadata.entry_points(group=group):
            key = (group, entry.value)
            if key in _LOADED_ENTRY_POINTS:
                continue
            try:
                entry.load()
            except Exception as exc:  # noqa: BLE001 - any failure of a third-party import is reported as its own
                package = entry.dist.name if entry.dist is not None else "an installed package"
                raise DgbenchError(f"plugin '{entry.name}' ({group} = {entry.value}, from {package}) failed to "
                                   f"load: {type(exc).__name__}: {exc}") from exc
            _LOADED_ENTRY_POINTS.add(key)
            loaded.append(entry.name)
    return loaded
