"""Options owned by the part of a run they configure, written once, turned into the CLI and the record.

Every knob of `dgbench run` belongs to one *owner*: the run itself (epochs, seed, ...), a family's
training protocol (the discrete task's θ, the continuous batch size, ...), a scheme (checkpoint
blocks, Sven's partition, ...) or a model (TM-GCN's window). An owner declares its knobs as a frozen
dataclass whose fields are made with :func:`option`; the field's default is the knob's only default.
From these declarations:

* the `dgbench run` CLI options are generated (:func:`click_options`), one per option name, with the
  owners that take it in the help text;
* a run's options are resolved (:func:`resolve_options`): every given option must be taken by the
  run's family, scheme or model, else it is refused by one generic rule with a one-line message
  naming who does take it — so a record never claims a setup that did not run;
* the record's hyper-parameters are exactly the resolved options of the run's owners
  (:func:`as_hyperparameters`).

An option name may be taken by several owners with different defaults or choices (``--blocks`` of
checkpoint and snapshot; ``--partition`` of vertex and sven): the CLI option then has no default of
its own and each owner applies its own default and checks its own choices.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import click

from dgbench.errors import DgbenchError

OPTION = "dgbench_option"


@dataclass(frozen=True)
class OptionSpec:
    """What the CLI and the resolver know about one option field."""

    name: str  # field name, also the keyword in RunConfig.options
    help: str
    flag: str  # the CLI spelling, e.g. "--blocks"
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] | None = None
    minimum: float | None = None  # inclusive lower bound of a number
    positive: bool = False  # strictly > 0 (floats) or >= 1 (ints)
    upper: float | None = None  # inclusive upper bound of a number
    is_flag: bool = False
    record: bool = True  # recorded among the hyper-parameters (False: run plumbing such as --out)


def option(default: Any, help: str, *, flag: str | None = None, aliases: Sequence[str] = (),
           choices: Sequence[str] | None = None, minimum: float | None = None, positive: bool = False,
           upper: float | None = None, record: bool = True) -> Any:
    """A dataclass field declaring one option (its default, help and checks)."""
    meta = {"help": help, "flag": flag, "aliases": tuple(aliases), "choices": tuple(choices) if choices else None,
            "minimum": minimum, "positive": positive, "upper": upper, "record": record}
    if isinstance(default, (list, dict, set)):
        raise TypeError("option defaults must be immutable")
    return field(default=default, metadata={OPTION: meta})


class Options:
    """Base of every options dataclass (frozen). ``owner`` names who takes them, for messages."""

    owner: ClassVar[str] = "run"


OptionsT = TypeVar("OptionsT", bound=Options)


@dataclass(frozen=True)
class NoOptions(Options):
    """For an owner that takes no option."""


_SPECS: dict[type, tuple[OptionSpec, ...]] = {}


def specs(options_type: type[Options]) -> tuple[OptionSpec, ...]:
    """The declared options of an options dataclass, in declaration order (built once per class: a run resolves
    its owners' options thousands of times, and resolving the type hints each time cost a sixth of a short run)."""
    if options_type not in _SPECS:
        _SPECS[options_type] = _declared_specs(options_type)
    return _SPECS[options_type]


def _declared_specs(options_type: type[Options]) -> tuple[OptionSpec, ...]:
    hints = typing.get_type_hints(options_type)
    out = []
    for f in dataclasses.fields(options_type):  # type: ignore[arg-type]
        meta = f.metadata.get(OPTION)
        if meta is None:
            continue
        out.append(OptionSpec(name=f.name, help=meta["help"], flag=meta["flag"] or "--" + f.name.replace("_", "-"),
                              aliases=meta["aliases"], choices=meta["choices"], minimum=meta["minimum"],
                              positive=meta["positive"], upper=meta["upper"],
                              is_flag=_base_type(hints[f.name]) is bool,
                              record=meta["record"]))
    return tuple(out)


def _base_type(hint: Any) -> type:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0]
    return hint if isinstance(hint, type) else str


def defaults(options_type: type[Options]) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(options_type)}  # type: ignore[arg-type]


def check_value(owner: str, spec: OptionSpec, value: Any) -> None:
    """One-line refusal of a value outside the option's choices or bounds."""
    if value is None:
        return
    if spec.choices is not None and value not in spec.choices:
        raise DgbenchError(f"{spec.flag} {value}: {owner} takes one of {', '.join(spec.choices)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise DgbenchError(f"{spec.flag} {value}: must be a finite number")
    low_ok = spec.minimum is None or value >= spec.minimum
    positive_ok = not spec.positive or (value >= 1 if isinstance(value, int) else value > 0)
    high_ok = spec.upper is None or value <= spec.upper
    if not (low_ok and positive_ok and high_ok):
        bounds = [f">= {spec.minimum}"] if spec.minimum is not None else []
        bounds += ([">= 1" if isinstance(value, int) else "> 0"] if spec.positive else [])
        bounds += [f"<= {spec.upper}"] if spec.upper is not None else []
        raise DgbenchError(f"{spec.flag} {value}: must be {' and '.join(bounds)}")


def build_options(options_type: type[OptionsT], given: dict[str, Any], owner: str) -> OptionsT:
    """The owner's options: its defaults overridden by the given values it takes, checked."""
    values = {}
    for spec in specs(options_type):
        if spec.name in given and given[spec.name] is not None:
            values[spec.name] = given[spec.name]
        check_value(owner, spec, values.get(spec.name, defaults(options_type)[spec.name]))
    return options_type(**values)


def refuse_foreign(given: dict[str, Any], owners: Iterable[type[Options]], run_owner_names: str,
                   takers: Callable[[str], list[str]]) -> None:
    """The one rule of both families: an option no owner of this run takes is refused, naming who takes it."""
    taken = {spec.name for owner in owners for spec in specs(owner)}
    for name, value in given.items():
        if value is None or name in taken:
            continue
        flag = "--" + name.replace("_", "-")
        who = takers(name)
        elsewhere = f" (taken by {', '.join(who)})" if who else ""
        raise DgbenchError(f"{flag} {value}: not an option of {run_owner_names}{elsewhere}; "
                           f"the record would claim a setup that did not run")


def as_hyperparameters(*options: Options) -> dict[str, Any]:
    """The resolved options of a run's owners, by name, as the record's hyper-parameters."""
    out: dict[str, Any] = {}
    for owned in options:
        for spec in specs(type(owned)):
            value = getattr(owned, spec.name)
            if spec.record and value is not None:
                out[spec.name] = str(value) if isinstance(value, Path) else value
    return out


# --------------------------------------------------------------------------- CLI generation

@dataclass
class _Merged:
    """One CLI option built from every owner declaring the same name."""

    spec: OptionSpec
    kind: type
    owners: list[tuple[str, Any]]  # (owner label, default)
    choices: list[str]


def click_options(owners: Iterable[tuple[str, type[Options]]]) -> list[click.Option]:
    """The `dgbench run` options of every owner, one click option per name; --help shows who takes
    it and each owner's default. Choices and bounds are checked per owner when the run is resolved."""
    merged: dict[str, _Merged] = {}
    for label, options_type in owners:
        hints = typing.get_type_hints(options_type)
        for spec in specs(options_type):
            kind = _base_type(hints[spec.name])
            entry = merged.setdefault(spec.name, _Merged(spec, kind, [], []))
            entry.owners.append((label, defaults(options_type)[spec.name]))
            entry.choices += [c for c in (spec.choices or ()) if c not in entry.choices]
            aliases = tuple(dict.fromkeys(entry.spec.aliases + spec.aliases))
            entry.spec = dataclasses.replace(entry.spec, aliases=aliases)
    return [_click_option(entry) for entry in merged.values()]


def _click_option(entry: _Merged) -> click.Option:
    """No click default: only what the user gives reaches the resolver (defaults live in the owners)."""
    spec, labels = entry.spec, sorted({label for label, _ in entry.owners})
    where = "" if labels == ["run"] else f"[{', '.join(labels)}] "
    defaults_seen = {repr(d): d for _, d in entry.owners if d is not None and d is not False}
    if len(defaults_seen) == 1:
        suffix = f" (default: {next(iter(defaults_seen.values()))})"
    elif defaults_seen:
        suffix = " (default: " + "; ".join(f"{label} {d}" for label, d in entry.owners if d is not None) + ")"
    else:
        suffix = ""
    declarations = [spec.flag, *spec.aliases, spec.name]
    if spec.is_flag:
        return click.Option(declarations, is_flag=True, default=None, help=where + spec.help)
    param_type: Any = click.Choice(entry.choices) if entry.choices else \
        {int: click.INT, float: click.FLOAT, Path: click.Path(path_type=Path)}.get(entry.kind, click.STRING)
    return click.Option(declarations, type=param_type, default=None, help=where + spec.help + suffix)


def option_names(options_type: type[Options]) -> list[str]:
    return [spec.name for spec in specs(options_type)]
