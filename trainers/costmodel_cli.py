"""`dgbench costmodel`: fit a cost model on the machine at hand, and show one fitted earlier.

Each kind of fitted model (BLAD's per-operator regressions, DGC's chunk-time MLPs, ...) defines its
own ``fit`` sub-command beside its code; this module only gathers them under one group, lazily, so
that `dgbench costmodel fit blad` imports nothing of DGC and the other way round. To add a kind, add
one line to :data:`FIT_KINDS`. Files are written and read through :mod:`dgbench.costmodel`, which
stores the hardware identity beside the fit and refuses a file fitted elsewhere.
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import click

# kind -> (module, attribute): the click command that profiles this machine and writes the file
FIT_KINDS: dict[str, tuple[str, str]] = {
    "blad": ("dgbench.trainers.discrete.blad.predictor", "fit_blad_command"),
    "dgc": ("dgbench.trainers.discrete.dgc.costmodel", "fit_dgc_command"),
}


class FitGroup(click.Group):
    """`dgbench costmodel fit KIND`: one lazily imported sub-command per kind of cost model."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(FIT_KINDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in FIT_KINDS:
            module, attribute = FIT_KINDS[name]
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, name)


def _read_document(path: Path) -> dict:
    """The file's JSON, whatever its kind or hardware (showing a file is not using it)."""
    from dgbench.costmodel import document_problem, read_document
    from dgbench.errors import DgbenchError
    document = read_document(path)
    problem = document_problem(document)
    if problem:
        raise DgbenchError(f"{path}: {problem}")
    return document


@click.group(name="costmodel")
def costmodel_command() -> None:
    """Fit cost models of this machine's speed (per kind), or show a fitted one."""


@costmodel_command.group(name="fit", cls=FitGroup)
def fit_group() -> None:
    """Profile this machine and write a fitted cost model (with its hardware identity)."""


@costmodel_command.command(name="show")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the whole file as JSON (payload included).")
def show_command(path: Path, as_json: bool) -> None:
    """Print PATH's kind, the hardware it was fitted on and how well it fits."""
    document = _read_document(path)
    if as_json:
        click.echo(json.dumps(document, indent=1))
        return
    hardware = document["hardware"]
    click.echo(f"{path}: kind {document['kind']}, fitted {document.get('fitted_at')} on "
               f"{hardware.get('device_name')} ({hardware.get('processor')}, {hardware.get('cpu_count')} cores, "
               f"torch {hardware.get('torch')}, {hardware.get('threads')} threads)")
    click.echo(json.dumps(document.get("fit", {}), indent=1))
