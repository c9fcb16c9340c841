"""The `dgbench` command line: prepare, info, validate, list, convert, and the lazily loaded rest.

Errors are one line on stderr and a non-zero exit; `--debug` shows the traceback instead.
Commands owned by other parts (run, submit, leaderboard, ...) live beside their code and are
imported only when used, so each part keeps one obvious place.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import click

from dgbench import progress
from dgbench.errors import DgbenchError

# name -> (module, attribute): commands defined beside the code they drive.
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "convert": ("dgbench.convert", "convert_command"),
    "transform": ("dgbench.loaders.smoothing", "transform_command"),
    "run": ("dgbench.trainers.cli", "run_command"),
    "submit": ("dgbench.leaderboard.cli", "submit_command"),
    "leaderboard": ("dgbench.leaderboard.cli", "leaderboard_command"),
    "compare": ("dgbench.leaderboard.cli", "compare_command"),
    "verify": ("dgbench.leaderboard.verify", "verify_command"),
    "costmodel": ("dgbench.trainers.costmodel_cli", "costmodel_command"),
    "project": ("dgbench.trainers.projection.cli", "project_command"),
    "tasks": ("dgbench.tasks.cli", "tasks_command"),
}


GLOBAL_FLAGS = ("--quiet", "--debug")


def lazy_command(name: str) -> click.Command:
    """The command ``name`` of :data:`LAZY_COMMANDS`, imported now (how the core reaches the plug-ins' commands)."""
    module, attribute = LAZY_COMMANDS[name]
    return getattr(importlib.import_module(module), attribute)


def hoist_global_flags(args: list[str]) -> list[str]:
    """``--quiet``/``--debug`` moved to the front, so they work after the subcommand too
    (``dgbench prepare stream ... --quiet``); anything after a literal ``--`` is left alone."""
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if a in GLOBAL_FLAGS]
    rest = [a for a in args[:end] if a not in GLOBAL_FLAGS]
    return flags + rest + args[end:]


class DgbenchGroup(click.Group):
    """Root group: lazy sub-commands, one-line errors, global flags accepted in either place."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_global_flags(list(args)))

    def list_commands(self, ctx: click.Context) -> list[str]:
        lazy = [name for name, (module, _) in LAZY_COMMANDS.items() if _module_exists(module)]
        return sorted(set(super().list_commands(ctx)) | set(lazy))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS and _module_exists(LAZY_COMMANDS[name][0]):
            return lazy_command(name)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click prints these itself (usage errors name the option)
        except Exception as exc:  # noqa: BLE001 - every failure is one line unless --debug
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {_one_line(exc)}", err=True)
            sys.exit(1)


MESSAGE_CHARS = 1000  # an error line longer than this is cut (a value echoed whole can be megabytes)


def _one_line(exc: Exception) -> str:
    """DgbenchError and OSError already say what and where; anything else is named as unexpected.
    Always one line, cut to MESSAGE_CHARS characters."""
    if isinstance(exc, DgbenchError):
        message = str(exc)
    elif isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        message = f"{where}{exc.strerror or exc}"
    else:
        message = f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for the traceback)"
    message = " ".join(message.splitlines())
    if len(message) > MESSAGE_CHARS:
        message = f"{message[:MESSAGE_CHARS]}... (message cut: {len(message):,} characters)"
    return message


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@click.group(cls=DgbenchGroup)
@click.option("--quiet", is_flag=True, help="No progress bars.")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="dgbench")
@click.pass_context
def cli(ctx: click.Context, quiet: bool, debug: bool) -> None:
    """dgbench: one harness for distributed dynamic-GNN training schemes."""
    ctx.obj = {"debug": debug}
    progress.set_quiet(quiet or progress.quiet_by_environment())


class PrepareGroup(click.Group):
    """`dgbench prepare NAME`: one sub-command per registered generator, dataset or format."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        from dgbench.registry import PREPARERS, load_plugins
        load_plugins("dgbench.generators", "dgbench.loaders")
        return sorted(PREPARERS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        from dgbench.registry import PREPARERS, load_plugins
        load_plugins("dgbench.generators", "dgbench.loaders")
        preparer = PREPARERS.get(name)
        return None if preparer is None else _prepare_command(preparer)


def _prepare_command(preparer) -> click.Command:
    def callback(out: Path | None, overwrite: bool, **options) -> None:
        target = out or Path("stores") / f"{preparer.name}.zarr"
        path = preparer.build(out=target, overwrite=overwrite, **options)
        from dgbench.store import open_store
        store = open_store(path)
        click.echo(f"wrote {path}  ({store.kind}, {store.num_nodes:,} vertices, {store.num_edges:,} edges, "
                   f"fingerprint {store.fingerprint[:16]})")

    params = [click.Option(["--out", "-o"], type=click.Path(path_type=Path), default=None,
                           help=f"Store directory to write (default stores/{preparer.name}.zarr)."),
              click.Option(["--overwrite"], is_flag=True, help="Replace an existing store."),
              *preparer.options]
    return click.Command(preparer.name, callback=callback, params=params,
                         help=f"{preparer.summary} [{preparer.kind}; writes a {preparer.produces} store]",
                         short_help=preparer.summary)


@cli.group(cls=PrepareGroup)
def prepare() -> None:
    """Build a store from a generator, a named dataset or a raw file of a known format."""


@cli.command()
@click.argument("store", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def info(store: Path, as_json: bool) -> None:
    """Print a human summary of STORE."""
    from dgbench.info import format_summary, summarize
    summary = summarize(store)
    click.echo(json.dumps(summary, indent=2) if as_json else format_summary(summary))


@cli.command()
@click.argument("store", type=click.Path(path_type=Path))
def validate(store: Path) -> None:
    """Check STORE's schema, offsets, ids, time order and fingerprint; exit 1 on any problem."""
    from dgbench.store.validate import validate_store
    problems = validate_store(store)
    if problems:
        for problem in problems:
            click.echo(f"invalid: {store}: {problem}", err=True)
        sys.exit(1)
    click.echo(f"valid: {store}")


@cli.command(name="list")
def list_command() -> None:
    """List datasets, generators, formats, schemes and models."""
    from dgbench.registry import MODELS, PREPARERS, SCHEMES, load_plugins
    load_plugins()
    for kind in ("generator", "dataset", "format"):
        rows = [p for p in PREPARERS.values() if p.kind == kind]
        if rows:
            click.echo(f"{kind}s:")
            for p in sorted(rows, key=lambda p: p.name):
                click.echo(f"  {p.name:<20} {p.produces:<17} {p.summary}")
    for title, table in (("schemes", SCHEMES), ("models", MODELS)):
        if table:
            click.echo(f"{title}:")
            for entry in sorted(table.values(), key=lambda e: (e.family, e.name)):
                click.echo(f"  {entry.name:<20} {entry.family:<17} {entry.summary}")


def main() -> None:
    cli(prog_name="dgbench")


if __name__ == "__main__":
    main()
