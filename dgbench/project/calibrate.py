"""``dgbench project calibrate``: a hardware profile of the machine at hand, measured.

* **compute**: ``single`` runs of every chosen model on a few generated stores of different shapes
  (ESDG's random snapshots, §6.1; an edge stream of users and items), one core per rank (a rank of a
  job here gets cpu_count / nproc threads, so one thread is what P = cpu_count ranks see), timed
  over their epochs after the first; each model's rates are the non-negative least-squares fit of
  those epoch times to the dry run's work counts of the same runs (relative errors weighted
  equally), and the fit's residuals are kept in the profile;
* **Sven's micro-batches**: per continuous model, the seconds one more of Sven's n chunks per batch adds
  (Alg. 2), from two P = 2 ``sven`` runs differing only in n (``per_microbatch_s``);
* **memory bandwidth**: a timed copy of a large tensor (read + write bytes over the median time);
* **link**: an all-to-all between two local ranks (gloo), timed over message sizes and fitted to
  alpha + n / bandwidth. This machine has no second node, so the inter-node link is the same
  measured loopback link, and the profile says so.

The profile is written through :func:`dgbench.costmodel.save_fitted`, with this machine's identity.
"""
from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dgbench.dist import DistContext
from dgbench.project.hardware import SCHEMA, VERSION, save_calibrated

DISCRETE_STORES = ((1024, 17, 3.0), (4096, 17, 3.0), (1024, 33, 12.0), (2048, 9, 24.0), (32768, 9, 3.0))
QUICK_DISCRETE_STORES = ((1024, 9, 3.0), (4096, 9, 3.0), (1024, 17, 12.0), (16384, 9, 3.0))
STREAM = dict(users=400, items=300, events=6000, edge_dim=8, seed=1)
CONTINUOUS_SETTINGS = ((200, 5), (600, 5), (600, 10), (1500, 10))  # (batch size, neighbours)
LINK_SIZES = (8, 1024, 16 * 1024, 256 * 1024, 2 * 2 ** 20, 8 * 2 ** 20)
EPOCHS = 3
WALL, PROCESS = "wall", "process"
CLOCKS = {WALL: time.perf_counter, PROCESS: time.process_time}


def nonnegative_fit(features: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """Least squares with non-negative coefficients, each point's error relative to its target (the
    exact solution for a handful of columns: the best non-negative least-squares fit over supports)."""
    scale = 1.0 / np.maximum(target, 1e-12)
    x, y = features * scale[:, None], target * scale
    best, best_error = np.zeros(features.shape[1]), float("inf")
    for support in itertools.product((False, True), repeat=features.shape[1]):
        columns = np.flatnonzero(support)
        if not len(columns):
            continue
        coefficients, *_ = np.linalg.lstsq(x[:, columns], y, rcond=None)
        if (coefficients < 0).any():
            continue
        error = float(((x[:, columns] @ coefficients - y) ** 2).sum())
        if error < best_error:
            best, best_error = np.zeros(features.shape[1]), error
            best[columns] = coefficients
    predicted = features @ best
    relative = (predicted - target) / target
    return best, {"points": len(target), "max_relative_error": float(np.abs(relative).max()),
                  "mean_relative_error": float(np.abs(relative).mean()),
                  "relative_errors": relative.round(4).tolist()}


def memory_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second of a large copy (read + write)."""
    source = torch.ones(megabytes * 2 ** 20 // 4)
    target = torch.empty_like(source)
    target.copy_(source)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        target.copy_(source)
        seconds.append(time.perf_counter() - start)
    return 2 * source.numel() * 4 / statistics.median(seconds)


def _time_all_to_all(ctx: DistContext, sizes: tuple[int, ...], repeats: int, clock: str = WALL) -> list[float]:
    """Median seconds of an all-to-all sending ``size`` bytes to every other rank (rank-level function)."""
    now = CLOCKS[clock]
    out = []
    for size in sizes:
        per_peer = max(1, size // 4)
        tensor = torch.zeros(per_peer * ctx.world_size, 1)
        splits = [per_peer] * ctx.world_size
        ctx.comm.all_to_all_single(tensor, splits, splits, "warm-up")
        seconds = []
        for _ in range(repeats):
            ctx.comm.barrier()
            start = now()
            ctx.comm.all_to_all_single(tensor, splits, splits, "timed")
            seconds.append(now() - start)
        out.append(statistics.median(seconds))
    return out


def link(sizes: tuple[int, ...] = LINK_SIZES, repeats: int = 15, clock: str = WALL) -> dict[str, Any]:
    """alpha and bandwidth of an all-to-all between two local gloo ranks."""
    from dgbench.launch import launch
    per_rank = launch(_time_all_to_all, nproc=2, args=(sizes, repeats, clock), backend="gloo")
    seconds = np.maximum(per_rank[0], per_rank[1])
    sent = np.array([max(1, s // 4) * 4 for s in sizes], np.float64)
    (alpha, beta), _ = nonnegative_fit(np.stack([np.ones_like(sent), sent], 1), seconds)
    return {"alpha_s": float(alpha), "bandwidth": float(1 / beta) if beta > 0 else float("inf"),
            "points": [{"bytes": int(b), "seconds": float(t)} for b, t in zip(sent, seconds)]}


def _median_epoch(record: dict[str, Any]) -> float:
    return statistics.median(e["time_s"] for e in record["epochs"][1:])


def _clocked_train_runs(ctx: DistContext, runs: list[Any], quiet: bool, clock: str) -> list[dict[str, Any]]:
    """:func:`trainers.experiment.train_runs` with its epochs (trainers/epochs.py) timed on ``clock``."""
    import trainers.epochs as epochs
    from trainers.experiment import train_runs
    original = epochs.time
    epochs.time = types.SimpleNamespace(perf_counter=CLOCKS[clock])  # type: ignore[assignment]
    try:
        return train_runs(ctx, runs, quiet)
    finally:
        epochs.time = original


def run_timed(configs: list[Any], clock: str = WALL) -> list[dict[str, Any]]:
    """:func:`trainers.experiment.run_experiments` with every rank's epochs timed on ``clock`` (the record's
    ``time_s``: the slowest rank's; on the process clock its CPU seconds, see the module docstring)."""
    from dgbench import progress
    from dgbench.launch import launch
    from dgbench.records import utc_now
    from trainers.experiment import family_hooks, resolve, run_experiments
    if clock == WALL:
        return run_experiments(configs)
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r}: choose one of {', '.join(CLOCKS)}")
    runs, started, head = [resolve(config) for config in configs], utc_now(), configs[0]
    if len({(c.nproc, c.backend, c.device, c.timeout_s) for c in configs}) > 1:
        raise ValueError("runs timed together need the same nproc, backend, device and timeout")
    per_rank = launch(_clocked_train_runs, nproc=head.nproc, args=(runs, progress.is_quiet(), clock),
                      backend=head.resolved_backend(), timeout_s=head.timeout_s)
    return [family_hooks(run.family).record(run, [results[i] for results in per_rank], started)
            for i, run in enumerate(runs)]


def _fit_family(configs: list[Any], keys: tuple[str, ...], work_of: Any,
                clock: str = WALL) -> dict[str, dict[str, Any]]:
    """Train every config, fit each model's rates to (work counts, median epoch seconds on ``clock``)."""
    from dgbench.project.dryrun import dry_run
    records = run_timed(configs, clock)
    by_model: dict[str, list[tuple[list[float], float]]] = {}
    for config, record in zip(configs, records):
        by_model.setdefault(config.model, []).append((work_of(dry_run(config)), _median_epoch(record)))
    out = {}
    for model, rows in by_model.items():
        features = np.array([w for w, _ in rows], np.float64)
        seconds = np.array([t for _, t in rows], np.float64)
        coefficients, fit = nonnegative_fit(features, seconds)
        out[model] = {**dict(zip(keys, coefficients.tolist())), "fit": {**fit, "seconds": seconds.tolist()}}
    return out


MICROBATCHES = (1, 8)


def _microbatch_overhead(models: list[str], events: Path, root: Path, clock: str,
                         given: dict[str, Any]) -> dict[str, float]:
    """Per model, the seconds one more Sven micro-batch adds to a batch (Alg. 2's n chunks: each chunk plans,
    packs and exchanges on its own), from two P = 2 ``sven`` runs of the calibration stream differing only
    in n: (T(n=8) - T(n=1)) / (7 · batches). ``single`` runs have no micro-batches to fit it from."""
    from dgbench.errors import DgbenchError
    from dgbench.project.dryrun import dry_run
    from trainers.config import RunConfig
    from trainers.experiment import resolve
    out = {}
    for model in models:
        configs = [RunConfig("sven", model, events, nproc=2, epochs=EPOCHS, seed=0, out=root / "runs", batch_size=600,
                             neighbors=5, microbatches=n, **given) for n in MICROBATCHES]
        try:
            resolve(configs[0])
        except DgbenchError:  # a model Sven does not train has no micro-batches to price
            continue
        seconds = [_median_epoch(record) for record in (run_timed([config], clock)[0] for config in configs)]
        batches = dry_run(configs[0]).units
        out[model] = max(0.0, (seconds[1] - seconds[0]) / ((MICROBATCHES[1] - MICROBATCHES[0]) * batches))
    return out


def _discrete_work(dry: Any) -> list[float]:
    return [float(dry.work["edges"][0]), float(dry.work["cells"][0]), float(dry.work["steps"][0])]


def _continuous_work(dry: Any) -> list[float]:
    return [float(dry.work["events"].sum()), float(dry.work["computed"].sum()), float(dry.units)]


def calibrate(out: str | Path, discrete_models: list[str], continuous_models: list[str], quick: bool = False,
              work_dir: str | Path | None = None, clock: str = WALL,
              options: dict[str, dict[str, Any]] | None = None) -> Path:
    """Measure this machine and write its profile to ``out`` (see the module docstring). ``options``: per
    family, the run options (widths: ``hidden``, ``memory_dim``, ...) the calibration runs use — the rates
    are fitted per model at those widths, so calibrate at the widths you will project (the profile
    records them, and a projection at other widths says so)."""
    options = options or {}
    from generators.esdg_random import build as snapshots
    from generators.stream import build as stream
    from trainers.config import RunConfig
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
            root = Path(scratch)
            compute: dict[str, Any] = {}
            if discrete_models:
                stores = [snapshots(out=root / f"s{n}-{t}-{f}.zarr", nodes=n, snapshots=t, edge_factor=f, seed=3)
                          for n, t, f in (QUICK_DISCRETE_STORES if quick else DISCRETE_STORES)]
                configs = [RunConfig("single", m, s, nproc=1, epochs=EPOCHS, seed=0, out=root / "runs",
                                     **options.get("discrete", {})) for m in discrete_models for s in stores]
                compute["discrete"] = _fit_family(configs, ("per_edge_s", "per_cell_s", "per_step_s"),
                                                  _discrete_work, clock)
            if continuous_models:
                events = stream(out=root / "stream.zarr", **STREAM)
                settings = CONTINUOUS_SETTINGS[:3] if quick else CONTINUOUS_SETTINGS
                given = {k: v for k, v in options.get("continuous", {}).items() if k not in ("batch_size", "neighbors")}
                configs = [RunConfig("single", m, events, nproc=1, epochs=EPOCHS, seed=0, out=root / "runs",
                                     batch_size=b, neighbors=k, **given)
                           for m in continuous_models for b, k in settings]
                compute["continuous"] = _fit_family(configs, ("per_event_s", "per_position_s", "per_batch_s"),
                                                    _continuous_work, clock)
                for model, seconds in _microbatch_overhead(continuous_models, events, root, clock, given).items():
                    compute["continuous"][model]["per_microbatch_s"] = seconds
    finally:
        torch.set_num_threads(before)
    bandwidth = memory_bandwidth()
    measured = link(clock=clock)
    loopback = {"alpha_s": measured["alpha_s"], "bandwidth": measured["bandwidth"],
                "what": "gloo all-to-all between two local ranks (loopback)", "source": "measured",
                "points": measured["points"]}
    cores = os.cpu_count() or 1
    document = {"schema": SCHEMA, "version": VERSION, "name": "this-machine", "source": "calibrated",
                "clock": clock, "calibrated_with": {family: dict(options.get(family, {})) for family in compute},
                "description": f"this machine, one core per rank ({cores} cores), {clock} clock: compute fitted on "
                               f"single runs, "
                               f"link measured between two local ranks; no second node here, so the inter-node "
                               f"link is the same measured loopback link",
                "ranks_per_node": cores,
                "device": {"name": "cpu", "memory_bandwidth": bandwidth, "source": "measured copy"},
                "links": {"intra": loopback, "inter": {**loopback, "what": "assumed equal to the measured "
                                                                           "loopback link (no second node)"}},
                "compute": compute, "citations": []}
    fit = {family: {model: rates["fit"]["max_relative_error"] for model, rates in models.items()}
           for family, models in compute.items()}
    return save_calibrated(out, document, {"max_relative_error": fit, "threads_per_rank": 1, "clock": clock})
