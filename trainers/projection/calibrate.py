"""``dgbench project calibrate``: a hardware profile of the machine at hand, measured.

Compute rates (NNLS fits of ``single`` epochs to the dry run's work counts), Sven's per-micro-batch
cost, scheme overheads per collective call, memory bandwidth and the loopback link, on both clocks
(:func:`calibrate_clocks`, :func:`run_timed`); written through :func:`dgbench.costmodel.save_fitted`.
See docs/projection.md (section "2. Hardware profiles", the calibrated source).
"""
from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dgbench.dist import DistContext
from dgbench.trainers.projection.hardware import SCHEMA, VERSION, save_calibrated

DISCRETE_STORES = ((1024, 17, 3.0), (4096, 17, 3.0), (1024, 33, 12.0), (2048, 9, 24.0), (32768, 9, 3.0))
QUICK_DISCRETE_STORES = ((1024, 9, 3.0), (4096, 9, 3.0), (1024, 17, 12.0), (16384, 9, 3.0))
STREAM = dict(users=400, items=300, events=6000, edge_dim=8, seed=1)
CONTINUOUS_SETTINGS = ((200, 5), (600, 5), (600, 10), (1500, 10))  # (batch size, neighbours)
LINK_SIZES = (8, 1024, 16 * 1024, 256 * 1024, 2 * 2 ** 20, 8 * 2 ** 20)
EPOCHS = 6
WARMUP_EPOCHS = 2  # not timed: the second epoch still ran 14-37 % slow on several stores (allocator, caches)
THREADS_PER_RANK = 1  # intra-op threads of every calibration rank (module docstring)
WALL, PROCESS = "wall", "process"
CLOCKS = {WALL: time.perf_counter, PROCESS: time.process_time}


def nonnegative_fit(features: np.ndarray, target: np.ndarray,
                    relative_to: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """Least squares with non-negative coefficients, each point's error relative to its target (or to
    ``relative_to``) (the exact solution for a handful of columns: the best non-negative least-squares fit
    over supports)."""
    reference = target if relative_to is None else relative_to
    scale = 1.0 / np.maximum(reference, 1e-12)
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
    relative = (predicted - target) / reference
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


def _time_all_to_all(ctx: DistContext, sizes: tuple[int, ...], repeats: int) -> dict[str, list[float]]:
    """Per clock, the median seconds of an all-to-all sending ``size`` bytes to every other rank (rank-level
    function; both clocks read around the same calls)."""
    torch.set_num_threads(THREADS_PER_RANK)
    out: dict[str, list[float]] = {WALL: [], PROCESS: []}
    for size in sizes:
        per_peer = max(1, size // 4)
        tensor = torch.zeros(per_peer * ctx.world_size, 1)
        splits = [per_peer] * ctx.world_size
        ctx.comm.all_to_all_single(tensor, splits, splits, "warm-up")
        seconds: dict[str, list[float]] = {WALL: [], PROCESS: []}
        for _ in range(repeats):
            ctx.comm.barrier()
            wall, cpu = time.perf_counter(), time.process_time()
            ctx.comm.all_to_all_single(tensor, splits, splits, "timed")
            seconds[WALL].append(time.perf_counter() - wall)
            seconds[PROCESS].append(time.process_time() - cpu)
        for clock, values in seconds.items():
            out[clock].append(statistics.median(values))
    return out


def link_both(sizes: tuple[int, ...] = LINK_SIZES, repeats: int = 15) -> dict[str, dict[str, Any]]:
    """Per clock, alpha and bandwidth of an all-to-all between two local gloo ranks (one thread each, as the
    ranks of a 2-rank job here), fitted to alpha + n / bandwidth."""
    from dgbench.launch import launch
    per_rank = launch(_time_all_to_all, nproc=2, args=(sizes, repeats), backend="gloo")
    sent = np.array([max(1, s // 4) * 4 for s in sizes], np.float64)
    out = {}
    for clock in CLOCKS:
        seconds = np.maximum(per_rank[0][clock], per_rank[1][clock])
        (alpha, beta), _ = nonnegative_fit(np.stack([np.ones_like(sent), sent], 1), seconds)
        out[clock] = {"alpha_s": float(alpha), "bandwidth": float(1 / beta) if beta > 0 else float("inf"),
                      "points": [{"bytes": int(b), "seconds": float(t)} for b, t in zip(sent, seconds)]}
    return out


def median_epoch(record: dict[str, Any], clock: str, warmup: int = WARMUP_EPOCHS) -> float:
    """The median of a :func:`run_timed` record's epochs after ``warmup`` (the slowest rank's, on ``clock``)."""
    epochs = record["extra"]["clocks"][clock]["epochs"]
    if len(epochs) <= warmup:
        raise ValueError(f"{len(epochs)} epochs: none timed after {warmup} warm-up epochs")
    return statistics.median(epochs[warmup:])


class _BothClocks:
    """Stands in for ``time`` in trainers/epochs.py: every ``perf_counter()`` call (run_epochs makes two per
    epoch, its start and its end) reads the wall and the process clock together and returns ``clock``'s, so
    one run is timed on both clocks at once."""

    def __init__(self, clock: str):
        self.clock = clock
        self.stamps: list[tuple[float, float]] = []

    def perf_counter(self) -> float:
        wall, cpu = time.perf_counter(), time.process_time()
        self.stamps.append((wall, cpu))
        return wall if self.clock == WALL else cpu


def _clocked_train_runs(ctx: DistContext, runs: list[Any], quiet: bool, clock: str,
                        threads: int | None = None) -> list[dict[str, Any]]:
    """:func:`dgbench.trainers.experiment.train_runs` with its epochs (trainers/epochs.py) timed on ``clock``, at
    ``threads`` intra-op threads if given (else the rank's own count); each result also gets ``clocks``: this
    rank's epoch seconds on both clocks (``{"wall": [...], "process": [...]}``) and ``threads``, the intra-op
    threads it ran with."""
    import dgbench.trainers.epochs as epochs
    from dgbench.trainers.experiment import train_runs
    original, stamps, before = epochs.time, _BothClocks(clock), torch.get_num_threads()
    epochs.time = stamps  # type: ignore[assignment]
    torch.set_num_threads(threads or before)
    try:
        results = train_runs(ctx, runs, quiet)
        ran_with = torch.get_num_threads()
    finally:
        epochs.time = original
        torch.set_num_threads(before)
    at = 0
    for run, result in zip(runs, results):  # run_epochs reads the clock twice per epoch, runs one after another
        pairs = stamps.stamps[at:at + 2 * run.config.epochs]
        at += len(pairs)
        result["clocks"] = {name: [end[i] - start[i] for start, end in zip(pairs[::2], pairs[1::2])]
                            for i, name in enumerate((WALL, PROCESS))}
        result["threads"] = ran_with
    if at != len(stamps.stamps):
        raise RuntimeError(f"{len(stamps.stamps)} clock readings for {at // 2} epochs: trainers/epochs.py no longer "
                           f"reads the clock exactly twice per epoch")
    return results


def run_timed(configs: list[Any], clock: str = WALL, threads: int | None = None) -> list[dict[str, Any]]:
    """:func:`dgbench.trainers.experiment.run_experiments` with every rank's epochs timed on ``clock`` (the record's
    ``time_s``: the slowest rank's; on the process clock its CPU seconds, see the module docstring) and run at
    ``threads`` intra-op threads per rank if given (else launch's: cores // nproc for spawned ranks, this
    process's count at P = 1). Every record also gets ``extra.clocks``: per clock, the slowest rank's seconds
    of every epoch and each rank's (``{"wall": {"epochs": [...], "per_rank": [[...], ...]}, "process": ...}``:
    both clocks read around the same epochs), and ``extra.threads_per_rank``."""
    from dgbench import progress
    from dgbench.launch import launch
    from dgbench.records import utc_now
    from dgbench.trainers.experiment import family_hooks, resolve
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r}: choose one of {', '.join(CLOCKS)}")
    runs, started, head = [resolve(config) for config in configs], utc_now(), configs[0]
    if len({(c.nproc, c.backend, c.device, c.timeout_s) for c in configs}) > 1:
        raise ValueError("runs timed together need the same nproc, backend, device and timeout")
    per_rank = launch(_clocked_train_runs, nproc=head.nproc, args=(runs, progress.is_quiet(), clock, threads),
                      backend=head.resolved_backend(), timeout_s=head.timeout_s)
    records = []
    for i, run in enumerate(runs):
        results = [rank_results[i] for rank_results in per_rank]
        record = family_hooks(run.family).record(run, results, started)
        record["extra"]["clocks"] = {name: {"epochs": [max(e) for e in zip(*(r["clocks"][name] for r in results))],
                                            "per_rank": [r["clocks"][name] for r in results]} for name in CLOCKS}
        record["extra"]["threads_per_rank"] = [r["threads"] for r in results]
        records.append(record)
    return records


def _fit_family(configs: list[Any], keys: tuple[str, ...], work_of: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """Train every config once; per clock, fit each model's rates to (work counts, median epoch seconds)."""
    from dgbench.trainers.projection.dryrun import dry_run
    records = run_timed(configs, threads=THREADS_PER_RANK)
    works = [work_of(dry_run(config)) for config in configs]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for clock in CLOCKS:
        by_model: dict[str, list[tuple[list[float], float]]] = {}
        for config, work, record in zip(configs, works, records):
            by_model.setdefault(config.model, []).append((work, median_epoch(record, clock)))
        out[clock] = {}
        for model, rows in by_model.items():
            features = np.array([w for w, _ in rows], np.float64)
            seconds = np.array([t for _, t in rows], np.float64)
            coefficients, fit = nonnegative_fit(features, seconds)
            out[clock][model] = {**dict(zip(keys, coefficients.tolist())), "fit": {**fit, "seconds": seconds.tolist()}}
    return out


MICROBATCHES = (1, 8)


def _microbatch_overhead(models: list[str], events: Path, root: Path,
                         given: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per clock and model, the seconds one more Sven micro-batch adds to a batch (Alg. 2's n chunks: each
    chunk plans, packs and exchanges on its own), from two P = 2 ``sven`` runs of the calibration stream
    differing only in n: (T(n=8) - T(n=1)) / (7 · batches). ``single`` runs have no micro-batches to fit it from."""
    from dgbench.errors import DgbenchError
    from dgbench.trainers.projection.dryrun import dry_run
    from dgbench.trainers.config import RunConfig
    from dgbench.trainers.experiment import resolve
    out: dict[str, dict[str, float]] = {clock: {} for clock in CLOCKS}
    for model in models:
        configs = [RunConfig("sven", model, events, nproc=2, epochs=EPOCHS, seed=0, out=root / "runs", batch_size=600,
                             neighbors=5, microbatches=n, **given) for n in MICROBATCHES]
        try:
            resolve(configs[0])
        except DgbenchError:  # a model Sven does not train has no micro-batches to price
            continue
        records = [run_timed([config], threads=THREADS_PER_RANK)[0] for config in configs]
        batches = dry_run(configs[0]).units
        for clock in CLOCKS:
            seconds = [median_epoch(record, clock) for record in records]
            out[clock][model] = max(0.0, (seconds[1] - seconds[0]) / ((MICROBATCHES[1] - MICROBATCHES[0]) * batches))
    return out


def _discrete_work(dry: Any) -> list[float]:
    return [float(dry.work["edges"][0]), float(dry.work["cells"][0]), float(dry.work["steps"][0])]


def _continuous_work(dry: Any) -> list[float]:
    return [float(dry.work["events"].sum()), float(dry.work["computed"].sum()), float(dry.units)]


def _calibration_inputs(discrete_models: list[str], continuous_models: list[str], quick: bool, root: Path,
                        options: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per family, the calibration runs' inputs: the store and the options of each (discrete: ESDG's random
    snapshots of several shapes; continuous: one stream at several batch sizes and neighbour counts)."""
    from dgbench.generators.esdg_random import build as snapshots
    from dgbench.generators.stream import build as stream
    inputs: dict[str, list[dict[str, Any]]] = {}
    if discrete_models:
        inputs["discrete"] = [{"dataset": snapshots(out=root / f"s{n}-{t}-{f}.zarr", nodes=n, snapshots=t,
                                                    edge_factor=f, seed=3), **options.get("discrete", {})}
                              for n, t, f in (QUICK_DISCRETE_STORES if quick else DISCRETE_STORES)]
    if continuous_models:
        events = stream(out=root / "stream.zarr", **STREAM)
        given = {k: v for k, v in options.get("continuous", {}).items() if k not in ("batch_size", "neighbors")}
        inputs["continuous"] = [{"dataset": events, "batch_size": b, "neighbors": k, **given}
                                for b, k in (CONTINUOUS_SETTINGS[:3] if quick else CONTINUOUS_SETTINGS)]
    return inputs


def _measure_compute(models: dict[str, list[str]], inputs: dict[str, list[dict[str, Any]]],
                     root: Path) -> dict[str, dict[str, Any]]:
    """Per clock, per family and model, the fitted rates (at one intra-op thread: see the module docstring)."""
    from dgbench.trainers.config import RunConfig
    compute: dict[str, dict[str, Any]] = {clock: {} for clock in CLOCKS}
    if models.get("discrete"):
        configs = [RunConfig("single", m, nproc=1, epochs=EPOCHS, seed=0, out=root / "runs", **given)
                   for m in models["discrete"] for given in inputs["discrete"]]
        for clock, rates in _fit_family(configs, ("per_edge_s", "per_cell_s", "per_step_s"), _discrete_work).items():
            compute[clock]["discrete"] = rates
    if models.get("continuous"):
        configs = [RunConfig("single", m, nproc=1, epochs=EPOCHS, seed=0, out=root / "runs", **given)
                   for m in models["continuous"] for given in inputs["continuous"]]
        fitted = _fit_family(configs, ("per_event_s", "per_position_s", "per_batch_s"), _continuous_work)
        first = {k: v for k, v in inputs["continuous"][0].items() if k not in ("batch_size", "neighbors", "dataset")}
        overhead = _microbatch_overhead(models["continuous"], inputs["continuous"][0]["dataset"], root, first)
        for clock, rates in fitted.items():
            for model, seconds in overhead[clock].items():
                rates[model]["per_microbatch_s"] = seconds
            compute[clock]["continuous"] = rates
    return compute


OVERHEAD_SCHEMES = {"discrete": ("snapshot",), "continuous": ("sven",)}
OVERHEAD_WORLD = 2


def _scheme_overheads(documents: dict[str, dict[str, Any]], models: dict[str, list[str]],
                      schemes: dict[str, tuple[str, ...]], inputs: dict[str, list[dict[str, Any]]],
                      root: Path) -> dict[str, dict[str, Any]]:
    """Per clock, family, scheme and model: ``per_call_s``, what a rank of the scheme spends at P = 2 beyond what
    the ``single``-run rates and the measured link price (scheme-side work, gloo's CPU, waiting for its peer:
    dgbench.trainers.projection.projection), per collective call of the epoch: the non-negative least-squares fit of
    (measured − projected) epoch seconds over the calibration inputs, each point's error relative to its
    measured epoch. Sven runs at n = 1 here: its extra micro-batches are ``per_microbatch_s``'s.

    Per call only: a second term per exchanged byte was tried and its fit followed the noise of single P = 2
    runs (a 16384 × 9 store's rank measured 0.134 s of CPU in one calibration and 0.097 s in a quiet rerun,
    same bytes as the 8192 × 17 store whose excess was 0.01 s), not the bytes."""
    from dgbench.errors import DgbenchError
    from dgbench.trainers.projection.dryrun import dry_run
    from dgbench.trainers.projection.hardware import HardwareProfile
    from dgbench.trainers.projection.projection import exchange_counts, overhead_calls, project_epoch
    from dgbench.trainers.config import RunConfig
    from dgbench.trainers.experiment import resolve
    profiles = {clock: HardwareProfile(document) for clock, document in documents.items()}
    out: dict[str, dict[str, Any]] = {clock: {} for clock in documents}
    for family, names in schemes.items():
        for scheme, model in itertools.product(names, models.get(family, [])):
            configs = [RunConfig(scheme, model, nproc=OVERHEAD_WORLD, epochs=EPOCHS, seed=0, out=root / "runs",
                                 **given, **({"microbatches": 1} if scheme == "sven" else {}))
                       for given in inputs.get(family, [])]
            try:
                for config in configs:
                    resolve(config)
            except DgbenchError:  # a model the scheme does not train
                continue
            records = run_timed(configs, threads=THREADS_PER_RANK)
            dries = [dry_run(config) for config in configs]
            units = np.array([(overhead_calls(dry), exchange_counts(dry)[1]) for dry in dries], np.float64)
            for clock, profile in profiles.items():
                measured = np.array([median_epoch(record, clock) for record in records])
                projected = np.array([project_epoch(dry, profile)["time_s"] for dry in dries])
                coefficients, fit = nonnegative_fit(units[:, :1], measured - projected, relative_to=measured)
                out[clock].setdefault(family, {}).setdefault(scheme, {})[model] = {
                    "per_call_s": float(coefficients[0]), "world_size": OVERHEAD_WORLD,
                    "fit": {**fit, "measured_s": measured.round(5).tolist(),
                            "projected_without_s": projected.round(5).tolist(), "calls": units[:, 0].tolist(),
                            "busiest_rank_bytes": units[:, 1].tolist()}}
    return out


def calibrate_clocks(outs: dict[str, str | Path], discrete_models: list[str], continuous_models: list[str],
                     quick: bool = False, work_dir: str | Path | None = None,
                     options: dict[str, dict[str, Any]] | None = None,
                     overhead_schemes: dict[str, tuple[str, ...]] | None = None) -> dict[str, Path]:
    """Measure this machine once and write a profile per clock (``{"wall": PATH, "process": PATH}``, either or
    both), each fitted from the same runs and the same link measurement read on its clock (see the module
    docstring). ``options``: per family, the run options (widths: ``hidden``, ``memory_dim``, ...) the
    calibration runs use — the rates are fitted per model at those widths, so calibrate at the widths you
    will project (the profile records them, and a projection at other widths says so). ``overhead_schemes``:
    per family, the schemes whose P = 2 overhead is calibrated (default ``OVERHEAD_SCHEMES``; ``{}`` for none).
    Every profile records its conditions: threads per rank, epochs (warm-up and timed), load average before
    and after."""
    options = options or {}
    unknown = set(outs) - set(CLOCKS)
    if unknown:
        raise ValueError(f"clock {sorted(unknown)[0]!r}: choose one of {', '.join(CLOCKS)}")
    load_before = os.getloadavg()[0]
    models = {"discrete": discrete_models, "continuous": continuous_models}
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
        inputs = _calibration_inputs(discrete_models, continuous_models, quick, Path(scratch), options)
        compute = _measure_compute(models, inputs, Path(scratch))
        bandwidth = memory_bandwidth()
        links = link_both()
        cores = os.cpu_count() or 1
        documents = {clock: _profile_document(clock, compute[clock], bandwidth, links[clock], cores, options)
                     for clock in outs}
        schemes = OVERHEAD_SCHEMES if overhead_schemes is None else overhead_schemes
        overheads = _scheme_overheads(documents, models, schemes, inputs, Path(scratch))
    conditions = {"threads_per_rank": THREADS_PER_RANK, "warmup_epochs": WARMUP_EPOCHS,
                  "timed_epochs": EPOCHS - WARMUP_EPOCHS, "quick": quick, "cores": cores,
                  "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                  "clocks_measured_together": sorted(CLOCKS)}
    written = {}
    for clock, out in outs.items():
        document = {**documents[clock], "conditions": conditions, "scheme_overheads": overheads[clock]}
        fit = {family: {model: rates["fit"]["max_relative_error"] for model, rates in by_model.items()}
               for family, by_model in compute[clock].items()}
        written[clock] = save_calibrated(out, document, {"max_relative_error": fit, "clock": clock, **conditions})
    return written


def _profile_document(clock: str, compute: dict[str, Any], bandwidth: float, link: dict[str, Any], cores: int,
                      options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A calibrated profile on ``clock`` (before its scheme overheads and conditions are added)."""
    loopback = {"alpha_s": link["alpha_s"], "bandwidth": link["bandwidth"],
                "what": "gloo all-to-all between two local ranks (loopback)", "source": "measured",
                "points": link["points"]}
    return {"schema": SCHEMA, "version": VERSION, "name": "this-machine", "source": "calibrated", "clock": clock,
            "calibrated_with": {family: dict(options.get(family, {})) for family in compute},
            "description": f"this machine, one core per rank ({cores} cores), {clock} clock: compute fitted on "
                           f"single runs at {THREADS_PER_RANK} thread, link measured between two local ranks, "
                           f"scheme overheads from P = {OVERHEAD_WORLD} runs; no second node here, so the "
                           f"inter-node link is the same measured loopback link",
            "ranks_per_node": cores,
            "device": {"name": "cpu", "memory_bandwidth": bandwidth, "source": "measured copy"},
            "links": {"intra": loopback, "inter": {**loopback, "what": "assumed equal to the measured loopback "
                                                                       "link (no second node)"}},
            "compute": compute, "citations": []}


def calibrate(out: str | Path, discrete_models: list[str], continuous_models: list[str], quick: bool = False,
              work_dir: str | Path | None = None, clock: str = WALL,
              options: dict[str, dict[str, Any]] | None = None,
              overhead_schemes: dict[str, tuple[str, ...]] | None = None) -> Path:
    """Measure this machine and write its profile on ``clock`` to ``out`` (:func:`calibrate_clocks`)."""
    return calibrate_clocks({clock: out}, discrete_models, continuous_models, quick, work_dir, options,
                            overhead_schemes)[clock]
