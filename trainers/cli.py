"""`dgbench run`: train a model with a scheme on a store and write a result record.

The store's kind picks the family: snapshot stores go to the discrete-time schemes, edge-stream
stores to the continuous-time ones. Every option except --scheme/--model/--dataset is generated from
the options its owner declares (the run, a family protocol, a scheme or a model; dgbench.options):
``dgbench run --help`` lists who takes each one, and a run refuses an option none of its owners takes.
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from dgbench.errors import DgbenchError
from dgbench.leaderboard.tracks import WARMUP_EPOCHS
from dgbench.options import Options, click_options, specs
from dgbench.registry import MODELS, SCHEMES, load_plugins
from dgbench.units import rate
from dgbench.trainers.config import RunConfig, config_of, read_config_file, run_config_from


def run(config: RunConfig) -> tuple[dict, Path | None]:
    """Run one experiment; returns (record, path written).

    Under an external torchrun every rank gets the complete record; only rank 0 writes it
    (path None elsewhere), so a multi-node job leaves one record, not one per rank.
    """
    from dgbench.records import prepare_output, write_record
    from dgbench.trainers.experiment import resolve, run_experiment
    resolve(config)  # a run that would not run as asked fails before anything is written
    if int(os.environ.get("RANK", "0")) == 0:
        prepare_output(config.out)  # an unwritable or taken --out fails now, not after training (issue 19)
    record = run_experiment(config)
    if int(os.environ.get("RANK", "0")) != 0:
        return record, None
    return record, write_record(record, config.out)


ROLES = ("scheme", "run", "task", "model")  # the --help sections, in this order when --scheme is given


@dataclass(frozen=True)
class Owner:
    """Who declares a set of `run` options: its role (run / task / scheme / model), family and name."""

    role: str
    family: str | None
    name: str
    options: type[Options]

    @property
    def label(self) -> str:
        """How --help tags an option of this owner (a task's label is its family)."""
        return self.family if self.role == "task" and self.family else self.name


def _owners() -> list[Owner]:
    """Every declared option owner."""
    load_plugins("dgbench.trainers")
    from dgbench.trainers.continuous.family import TaskOptions as ContinuousTask
    from dgbench.trainers.discrete.family import TaskOptions as DiscreteTask
    from dgbench.trainers.seeds import SeedsOptions
    owners = [Owner("run", None, "run", RunConfig), Owner("run", None, "run", SeedsOptions),
              Owner("task", "discrete", "discrete-time protocol", DiscreteTask),
              Owner("task", "continuous", "continuous-time protocol", ContinuousTask)]
    owners += [Owner("scheme", scheme.family, scheme.name, scheme.Options)  # type: ignore[attr-defined]
               for scheme in SCHEMES.values()]
    owners += [Owner("model", model.family, model.name, model.options) for model in MODELS.values()]
    return owners


def _with_config_file(path: Path | None, given: dict[str, Any]) -> dict[str, Any]:
    """The config file's values under those given on the command line (a flag not given is False there)."""
    from_file = read_config_file(path) if path is not None else {}
    return {**from_file, **{k: v for k, v in given.items() if v is not None and v is not False}}


def _print_config(config: RunConfig, seeds: Any) -> None:
    """The resolved run as a config file: every option that applies, defaults included."""
    from dgbench.trainers.experiment import resolve
    values = config_of(config, resolve(config).hyperparameters())
    if seeds is not None:
        values.pop("seed", None)
        values["seeds"] = str(seeds)
    click.echo(json.dumps(values, indent=2, sort_keys=True))


def _summary(record: dict[str, Any], path: Path) -> str:
    """The closing line: where the record is, what ran, how fast (median timed epoch, as the board ranks it)
    and how well. Everything else is in the record; further figures join ``parts``."""
    timed = record["epochs"][WARMUP_EPOCHS:] or record["epochs"]
    throughput = statistics.median_low([e["throughput"] for e in timed]) if timed else 0.0
    epoch_s = statistics.median_low([e["time_s"] for e in timed]) if timed else 0.0
    test = record.get("final_metrics", {}).get("test", {})
    scores = [f"{name} {test[name]:.4f}" for name in ("ap", "auc") if test.get(name) is not None]
    parts = [f"{record['scheme']}/{record['model']} P={record['world_size']}"]
    if _trained(record):
        parts += [f"{epoch_s:.2f}s/epoch", rate(throughput, record["family"])]
    if scores:
        parts.append("test " + "  ".join(scores))
    contention = _contention_note(record)
    if contention:
        parts.append(contention)
    return f"wrote {path}: " + "  ".join(parts)


def _trained(record: dict[str, Any]) -> bool:
    """Whether any epoch processed work: a baseline's do not, so it has no speed to print or to contend."""
    return any(epoch.get("work") for epoch in record["epochs"])


def _contention_note(record: dict[str, Any]) -> str:
    """'CONTENDED' when the run's timing was contended (dgbench/timing.py), else nothing (the reason is the line
    before the summary: :func:`_contention_reason`)."""
    return "CONTENDED" if _contention_reason(record) else ""


def _contention_reason(record: dict[str, Any]) -> str | None:
    """The line that says why a contended run is not ranked on the throughput and scaling tracks (none for a
    baseline: it is ranked on accuracy only, whatever the host's load)."""
    timing = record.get("timing") or {}
    if not timing.get("contended") or not _trained(record):
        return None
    return f"contended: {timing['reasons'][0]}; not ranked on throughput/scaling (leaderboards/RULES.md)"


def _announce_tracks(config: RunConfig) -> None:
    """Before training: the one line saying which board tracks the run will fit (the rules submit applies)."""
    from dgbench.leaderboard.fit import fit_line
    from dgbench.trainers.experiment import resolve, trains
    click.echo(fit_line(config.epochs, config.seed, trains(resolve(config))), err=True)


def _run_command() -> "RunCommand":
    def callback(config_file: Path | None, print_config: bool, as_json: bool, **given: Any) -> None:
        """Train MODEL with SCHEME on DATASET and write a result record."""
        from dgbench.trainers.seeds import parse_seeds, run_seeds
        given = _with_config_file(config_file, given)
        seeds = given.pop("seeds", None)
        if seeds is not None and given.get("seed") is not None:
            raise DgbenchError("--seed and --seeds: give one (--seeds runs one record per seed)")
        config = run_config_from(given)
        if print_config:
            _print_config(config, seeds)
            return
        _announce_tracks(config)
        runs = run_seeds(config, parse_seeds(str(seeds))) if seeds is not None else [run(config)]
        for record, path in runs:
            if path is None:
                continue
            if as_json:
                click.echo(json.dumps(json.loads(path.read_text()), sort_keys=True))
            reason = _contention_reason(record)
            if reason:
                click.echo(reason, err=True)
            click.echo(_summary(record, path), err=as_json)

    owners = _owners()
    params: list[click.Parameter] = [
        click.Option(["--scheme"], help="Training scheme (see `dgbench list`); required unless in --config."),
        click.Option(["--model"], help="Model of the zoo (see `dgbench list`); required unless in --config."),
        click.Option(["--dataset"], type=click.Path(path_type=Path),
                     help="Store to train on; required unless in --config."),
        click.Option(["--config", "config_file"], type=click.Path(path_type=Path, dir_okay=False),
                     help="JSON (or YAML, with PyYAML) mapping of option names to values, e.g. "
                          "--print-config's; options given on the command line win."),
        click.Option(["--print-config"], is_flag=True,
                     help="Print the run's config (every option that applies) as JSON and exit without training."),
        click.Option(["--json", "as_json"], is_flag=True, help="Print each record (one JSON line) on stdout for "
                                                               "scripts; the summary line goes to stderr."),
        *click_options([(owner.label, owner.options) for owner in owners])]
    return RunCommand("run", callback=callback, params=params, owners=owners,
                      help="Train MODEL with SCHEME on DATASET and write a result record.")


class RunCommand(click.Command):
    """`dgbench run` with --help in sections by owner; the asked scheme's own options first."""

    def __init__(self, *args: Any, owners: list[Owner], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owners = owners
        self.scheme_asked: str | None = None

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Every option in full when a scheme is named; else the run's and the protocols' in full and, per
        scheme and model, only the names of its options (`--scheme NAME --help` shows them)."""
        for title, params in help_sections(self.get_params(ctx), self.owners, self.scheme_asked):
            if self.scheme_asked is None and title in (SCHEME_TITLE, MODEL_TITLE):
                rows = _options_by_owner(params, [o for o in self.owners if title.startswith(o.role.title())])
                title += " (each in full: dgbench run --scheme NAME --help)"
            else:
                rows = [record for record in (p.get_help_record(ctx) for p in params) if record]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


SCHEME_TITLE, MODEL_TITLE = "Scheme options", "Model options"


def _options_by_owner(params: list[click.Parameter], owners: list[Owner]) -> list[tuple[str, str]]:
    """(owner, its options' flags) for each owner with options among ``params``."""
    flags = {str(p.name): p.opts[0] for p in params}
    rows = []
    for owner in sorted(owners, key=lambda o: (o.family or "", o.name)):
        own = [flags[spec.name] for spec in specs(owner.options) if spec.name in flags]
        if own:
            rows.append((f"{owner.name} ({owner.family})", ", ".join(own)))
    return rows


def help_sections(params: list[click.Parameter], owners: list[Owner],
                  scheme: str | None) -> list[tuple[str, list[click.Parameter]]]:
    """(title, options) per owner role; with ``scheme``, only its family's owners and its options first."""
    families = {o.family for o in owners if o.role == "scheme" and o.name == scheme} if scheme else set()
    shown = [o for o in owners if not families or o.family is None or o.family in families]
    shown = [o for o in shown if not scheme or o.role != "scheme" or o.name == scheme]
    role_of: dict[str, str] = {}
    for role in (["scheme", "task", "model", "run"] if scheme else ["task", "scheme", "model", "run"]):
        for owner in shown:
            if owner.role == role:
                for spec in specs(owner.options):
                    role_of.setdefault(spec.name, role)
    titles = {"run": "Run options", "task": "Task options (the family's training protocol)",
              "scheme": f"Options of scheme {scheme}" if scheme else SCHEME_TITLE, "model": MODEL_TITLE}
    sections = []
    for role in ROLES if scheme else ("run", "task", "scheme", "model"):
        chosen = [p for p in params if role_of.get(str(p.name)) == role
                  or (role == "run" and p.name not in role_of and _is_run_level(p, owners))]
        sections.append((titles[role], chosen))
    if scheme and not families:
        sections.insert(0, (f"(no scheme named {scheme}: see `dgbench list`)", []))
    return sections


def _is_run_level(param: click.Parameter, owners: list[Owner]) -> bool:
    """--scheme, --model, --dataset, --json, --help: options no owner declares."""
    return all(param.name not in {spec.name for spec in specs(o.options)} for o in owners)


def _scheme_in(args: list[str]) -> str | None:
    """The --scheme value among raw arguments (for --help, which runs before the options are parsed)."""
    for index, arg in enumerate(args):
        if arg == "--scheme" and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith("--scheme="):
            return arg.split("=", 1)[1]
    return None


class _LazyRun(click.Command):
    """Builds the real command (which imports the trainers) only when `run` is used."""

    def __init__(self) -> None:
        super().__init__("run", help="Train MODEL with SCHEME on DATASET and write a result record.")
        self._real: RunCommand | None = None

    def real(self) -> RunCommand:
        if self._real is None:
            self._real = _run_command()
        return self._real

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return self.real().get_params(ctx)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        self.real().scheme_asked = _scheme_in(list(args))
        return self.real().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        return self.real().invoke(ctx)


run_command = _LazyRun()
