"""``dgbench project``: dry runs, calibration and scaling projections (see docs/projection.md).

    dgbench project dryrun STORE --scheme S --model M --nproc P [--set NAME=VALUE ...] [-o DRY.json]
    dgbench project calibrate -o PROFILE.json [--discrete-models ...] [--continuous-models ...] [--quick]
                              [--clock wall|process] [--discrete-set NAME=VALUE ...] [--continuous-set ...]
    dgbench project strong STORE --scheme S --model M --worlds 1,2,4,... --profile NAME|FILE [-o OUT.json]
    dgbench project weak --scheme S --model M --worlds 1,2,4,... --profile NAME|FILE --stores DIR [-o OUT.json]
    dgbench project price DRY.npz [DRY.npz ...] --mode strong|weak --profile NAME|FILE [-o OUT.json]
    dgbench project profiles

A projection's JSON is record-like (command, store fingerprints, code commit, profile) and marked
``"projected": true``; ``dgbench leaderboard --update`` shows the files under the board's
``projected/`` folder in their own section, never among measured rows.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import click

from dgbench.errors import DgbenchError

ESDG_NODES_PER_RANK, ESDG_STEPS, ESDG_EDGE_FACTOR = 2 ** 14, 256, 3.0  # ESDG §6.1's weak-scaling family


def _command() -> str:
    """The command as typed, rebuilt from the parsed parameters (what a reader re-runs)."""
    ctx = click.get_current_context()
    words = ["dgbench", "project", ctx.info_name or ""]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if value is None or value == param.default or value == () or value is False:
            continue
        if isinstance(param, click.Argument):  # nargs=-1 (price's dry runs): every path, not the tuple's repr
            words += [str(item) for item in value] if isinstance(value, (tuple, list)) else [str(value)]
            continue
        flag = max(param.opts, key=len)
        for item in value if isinstance(value, tuple) else (value,):
            words += [flag] if item is True else [flag, str(item)]
    return shlex.join(words)


def _value(text: str) -> Any:
    """An option value as the run CLI would type it: int, float, true/false, else the string."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _settings(pairs: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise DgbenchError(f"--set {pair}: expected NAME=VALUE (an option of the run's protocol, scheme or model)")
        name, value = pair.split("=", 1)
        out[name.strip().replace("-", "_")] = _value(value.strip())
    return out


def _worlds(text: str) -> list[int]:
    try:
        worlds = sorted({int(w) for w in text.split(",") if w.strip()})
    except ValueError as exc:
        raise DgbenchError(f"--worlds {text}: expected comma-separated rank counts, e.g. 1,2,4,8") from exc
    if not worlds or worlds[0] < 1 or worlds[-1] > 1024:
        raise DgbenchError(f"--worlds {text}: rank counts must lie in 1..1024")
    return worlds


def _config(store: Path, scheme: str, model: str, world: int, epochs: int, seed: int, settings: dict[str, Any]) -> Any:
    from dgbench.trainers.config import RunConfig
    return RunConfig(scheme, model, store, nproc=world, epochs=epochs, seed=seed, **settings)


def _write(document: dict[str, Any], out: Path | None) -> None:
    text = json.dumps(document, indent=1, allow_nan=False)
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    click.echo(f"wrote {out}", err=True)


@click.group("project")
def project_command() -> None:
    """Dry-run communication counts and epoch-time projections for P = 1 ... 1024 (docs/projection.md)."""


SCHEME = click.option("--scheme", required=True, help="A registered scheme (dgbench list); strong / weak: a list.")
MODEL = click.option("--model", required=True, help="A registered model of the store's family; strong / weak: a list.")
SETTINGS = click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
                        help="An option of the run's protocol, scheme or model (e.g. --set blocks=2).")
EPOCHS = click.option("--epochs", type=click.IntRange(1), default=1, show_default=True,
                      help="Epochs of the run described (the dry run counts its last one).")
SEED = click.option("--seed", type=int, default=0, show_default=True)
PROFILE = click.option("--profile", required=True, help="A built-in profile (dgbench project profiles) or a file.")
BASIS = click.option("--compute-from", "basis", type=click.Path(exists=True, path_type=Path), default=None,
                     help="A calibrated profile whose rates a spec-sheet profile scales (roofline).")
OUT = click.option("-o", "--out", type=click.Path(path_type=Path), default=None,
                   help="Write the JSON here (several curves: a folder, one file per curve).")
OVERHEADS = click.option("--scale-overheads", is_flag=True,
                         help="With --compute-from: scale the per-step / per-batch overheads by the bandwidth ratio "
                              "too (an ideal device; default: the calibrated machine's, a pessimistic bound).")
KEEP = click.option("--keep-dryruns", type=click.Path(path_type=Path), default=None,
                    help="Also write each world's full dry run (JSON) into this folder.")


@project_command.command("dryrun")
@click.argument("store", type=click.Path(exists=True, path_type=Path))
@SCHEME
@MODEL
@click.option("--nproc", type=click.IntRange(1, 1024), required=True, help="Ranks P to count for.")
@SETTINGS
@EPOCHS
@SEED
@click.option("--eq12-n", type=click.IntRange(1), default=None,
              help="Sven with --microbatches 0: the n its run chose by Eq. 12 (counted n = 1 otherwise).")
@OUT
@click.option("--matrices", type=click.Path(path_type=Path), default=None,
              help="Write every tag's (sender, receiver) element matrix to this .npz.")
def dryrun_command(store: Path, scheme: str, model: str, nproc: int, settings: tuple[str, ...], epochs: int,
                   seed: int, eq12_n: int | None, out: Path | None, matrices: Path | None) -> None:
    """Count one training epoch at P ranks without training: bytes per tag, per rank, per pair."""
    import numpy as np
    from dgbench.trainers.projection.dryrun import dry_run
    result = dry_run(_config(store, scheme, model, nproc, epochs, seed, _settings(settings)), eq12_n=eq12_n)
    document = {**result.as_json(), "command": _command()}
    click.echo(f"{result.family} {result.scheme}/{result.model} at P = {nproc}: {result.total_bytes():,} bytes per "
               f"epoch ({result.units} {result.unit}{'es' if result.unit == 'batch' and result.units != 1 else ''}; "
               f"peak RSS {result.peak_rss_bytes / 2 ** 30:.2f} GiB)")
    for tag, volume in sorted(result.tags.items()):
        click.echo(f"  {tag:<24} {volume.kind:<10} {volume.bytes:>16,} B  {int(volume.calls.sum()):>7} calls  "
                   f"{volume.pattern}")
    for note in result.notes:
        click.echo(f"  note: {note}")
    _write(document, out)
    if matrices is not None:
        np.savez_compressed(matrices, **{tag.replace(":", "__"): v.pairs for tag, v in result.tags.items()})
        click.echo(f"wrote {matrices}", err=True)


@project_command.command("calibrate")
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Profile file to write.")
@click.option("--discrete-models", default="cdgcn,tmgcn,evolvegcn-o", show_default=True,
              help="Comma-separated discrete models to time ('' for none).")
@click.option("--continuous-models", default="tgn,apan,jodie", show_default=True,
              help="Comma-separated continuous models to time ('' for none).")
@click.option("--quick", is_flag=True, help="Fewer, smaller calibration runs (less accurate).")
@click.option("--clock", type=click.Choice(["wall", "process"]), default="wall", show_default=True,
              help="Time epochs and collectives on the wall clock, or in each rank's process CPU seconds (steadier "
                   "on a shared machine; blind to waiting; docs/projection.md).")
@click.option("--discrete-set", multiple=True, metavar="NAME=VALUE",
              help="An option of the discrete calibration runs (widths: --discrete-set hidden=6); rates are per width.")
@click.option("--continuous-set", multiple=True, metavar="NAME=VALUE",
              help="An option of the continuous calibration runs (e.g. --continuous-set memory_dim=100).")
@click.option("--overhead-schemes", default="snapshot,sven", show_default=True,
              help="Comma-separated schemes whose P = 2 overhead is calibrated on this machine ('' for none; "
                   "docs/projection.md §2).")
def calibrate_command(out: Path, discrete_models: str, continuous_models: str, quick: bool, clock: str,
                      discrete_set: tuple[str, ...], continuous_set: tuple[str, ...], overhead_schemes: str) -> None:
    """Measure this machine: compute rates per model, memory bandwidth, link alpha-beta, schemes' P = 2 overhead."""
    from dgbench.trainers.projection.calibrate import calibrate
    path = calibrate(out, [m for m in discrete_models.split(",") if m], [m for m in continuous_models.split(",") if m],
                     quick=quick, clock=clock,
                     options={"discrete": _settings(discrete_set), "continuous": _settings(continuous_set)},
                     overhead_schemes=_schemes_by_family(overhead_schemes))
    click.echo(f"wrote {path}")


def _schemes_by_family(names: str) -> dict[str, tuple[str, ...]]:
    """Registered schemes by family, from a comma-separated list (an unknown name is a one-line error)."""
    from dgbench.registry import SCHEMES, load_plugins
    load_plugins("dgbench.trainers")
    out: dict[str, tuple[str, ...]] = {}
    for name in (n.strip() for n in names.split(",") if n.strip()):
        families = sorted(s.family for s in SCHEMES.values() if s.name == name)
        if not families:
            known = ", ".join(sorted({s.name for s in SCHEMES.values()}))
            raise click.BadParameter(f"no scheme {name!r} (known: {known})", param_hint="--overhead-schemes")
        for family in families:
            out[family] = (*out.get(family, ()), name)
    return out


def _projection(mode: str, schemes: str, models: str, make: Any, worlds: list[int], profile: str, basis: Path | None,
                out: Path | None, keep: Path | None, scale_overheads: bool) -> None:
    """Project every (scheme, model) curve; one file for one curve, else a folder of them."""
    from dgbench.trainers.projection.hardware import load_profile
    from dgbench.trainers.projection.projection import project_curves
    pairs = [(s, m) for m in models.split(",") if m for s in schemes.split(",") if s]
    configs = {pair: {w: make(*pair, w) for w in worlds} for pair in pairs}
    documents = project_curves(mode, configs, load_profile(profile), load_profile(basis) if basis else None,
                               _command(), keep=keep, scale_overheads=scale_overheads)
    _report(mode, documents, out)


def _report(mode: str, documents: list[dict[str, Any]], out: Path | None) -> None:
    """Print each curve's table and write it (one curve: the file ``out``; several: one file each in it)."""
    for document in documents:
        click.echo(f"{mode} scaling of {document['scheme']}/{document['model']} on {document['profile']['name']} "
                   f"({document['profile']['source']}):")
        click.echo(f"  {'P':>5} {'epoch s':>11} {'compute s':>11} {'comm s':>11} {'speedup':>9} {'efficiency':>10}")
        for p in document["points"]:
            click.echo(f"  {p['world_size']:>5} {p['time_s']:>11.4g} {p['compute_s']:>11.4g} "
                       f"{p['communication_s']:>11.4g} {p['speedup']:>9.3g} {p['efficiency']:>10.3g}")
        if out is not None and len(documents) > 1:
            name = f"{mode}-{document['scheme']}-{document['model']}-{document['profile']['name']}.json"
            _write(document, out / name)
    if out is not None and len(documents) == 1:
        _write(documents[0], out)


@project_command.command("strong")
@click.argument("store", type=click.Path(exists=True, path_type=Path))
@SCHEME
@MODEL
@click.option("--worlds", default="1,2,4,8,16,32,64,128", show_default=True, help="Rank counts to project.")
@PROFILE
@BASIS
@SETTINGS
@EPOCHS
@SEED
@OUT
@KEEP
@OVERHEADS
def strong_command(store: Path, scheme: str, model: str, worlds: str, profile: str, basis: Path | None,
                   settings: tuple[str, ...], epochs: int, seed: int, out: Path | None,
                   keep_dryruns: Path | None, scale_overheads: bool) -> None:
    """Strong scaling: one store, P = each of --worlds (--scheme / --model may list several)."""
    given = _settings(settings)
    _projection("strong", scheme, model, lambda s, m, w: _config(store, s, m, w, epochs, seed, given), _worlds(worlds),
                profile, basis, out, keep_dryruns, scale_overheads)


def weak_store(folder: Path, world: int, nodes_per_rank: int, steps: int, edge_factor: float, seed: int) -> Path:
    """ESDG §6.1's weak-scaling store for P = ``world``: N = nodes_per_rank · P vertices, ``steps`` input
    steps (one more snapshot is the last target), m = N · f uniform pairs per snapshot; made once."""
    from dgbench.store import open_store
    from dgbench.generators.esdg_random import build
    nodes = nodes_per_rank * world
    path = folder / f"esdg-weak-N{nodes}-T{steps}-f{edge_factor:g}-s{seed}.zarr"
    if path.exists():
        open_store(path)
        return path
    return build(out=path, nodes=nodes, snapshots=steps + 1, edge_factor=edge_factor, seed=seed)


@project_command.command("weak")
@SCHEME
@MODEL
@click.option("--worlds", default="1,2,4,8,16", show_default=True, help="Rank counts to project.")
@PROFILE
@BASIS
@click.option("--stores", type=click.Path(path_type=Path), required=True,
              help="Folder for the generated weak-scaling stores (made once, reused).")
@click.option("--nodes-per-rank", type=click.IntRange(1), default=ESDG_NODES_PER_RANK, show_default=True,
              help="N / P (ESDG §6.1: 2^14).")
@click.option("--steps", type=click.IntRange(3), default=ESDG_STEPS, show_default=True, help="T (ESDG: 256).")
@click.option("--edge-factor", type=click.FloatRange(min=0, min_open=True), default=ESDG_EDGE_FACTOR,
              show_default=True, help="f, edges per vertex per snapshot (ESDG: 3).")
@SETTINGS
@EPOCHS
@SEED
@OUT
@KEEP
@OVERHEADS
def weak_command(scheme: str, model: str, worlds: str, profile: str, basis: Path | None, stores: Path,
                 nodes_per_rank: int, steps: int, edge_factor: float, settings: tuple[str, ...], epochs: int,
                 seed: int, out: Path | None, keep_dryruns: Path | None, scale_overheads: bool) -> None:
    """Weak scaling over ESDG §6.1's family: N = 2^14 · P, T = 256, f = 3 (knobs to change them;
    --scheme / --model may list several)."""
    given = _settings(settings)
    chosen = _worlds(worlds)
    stores_of = {w: weak_store(stores, w, nodes_per_rank, steps, edge_factor, seed) for w in chosen}
    _projection("weak", scheme, model, lambda s, m, w: _config(stores_of[w], s, m, w, epochs, seed, given), chosen,
                profile, basis, out, keep_dryruns, scale_overheads)


@project_command.command("price")
@click.argument("dryruns", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--mode", type=click.Choice(["strong", "weak"]), required=True,
              help="How the points scale: one store (strong) or a store per world (weak).")
@PROFILE
@BASIS
@OUT
@OVERHEADS
def price_command(dryruns: tuple[Path, ...], mode: str, profile: str, basis: Path | None, out: Path | None,
                  scale_overheads: bool) -> None:
    """Price dry runs kept by --keep-dryruns (their .npz files) on a profile, without counting again: one
    curve per (scheme, model), its points the worlds given."""
    from dgbench.trainers.projection.hardware import load_profile
    from dgbench.trainers.projection.projection import price_curves
    documents = price_curves(mode, list(dryruns), load_profile(profile), load_profile(basis) if basis else None,
                             _command(), scale_overheads=scale_overheads)
    _report(mode, documents, out)


@project_command.command("profiles")
def profiles_command() -> None:
    """List the built-in spec-sheet profiles."""
    from dgbench.trainers.projection.hardware import builtin_profiles, load_profile
    for name in builtin_profiles():
        click.echo(f"{name}: {load_profile(name).document['description']}")
