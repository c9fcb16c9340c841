"""Epoch time, speedup and efficiency at P ranks: a dry run's counts priced by a hardware profile.

Epoch model (both families run their steps one after another, ESDG §6.5: "Our current implementation
executes the four steps sequentially"):

* **compute** — the slowest rank's work at the profile's rates. Discrete: per rank
  ``per_edge_s · edges + per_cell_s · cells + per_step_s · steps`` (edges of the normalised Ã it
  aggregates, vertex-steps it computes and timesteps it runs, in forward-equivalents of the epoch).
  Continuous: per batch ``per_batch_s + max_r(per_event_s · events_r + per_position_s · positions_r)``
  (positions: the views a rank computes — its own dispatch list, or under DepComm what the owners
  compute for everyone), summed over the epoch's batches; plus, for Sven, ``per_microbatch_s`` per
  extra micro-batch of each batch (n − 1, Alg. 2; calibrated on Sven's own runs, zero if not).
* **communication** — every tag's collectives priced by :mod:`dgbench.trainers.projection.collectives` from the
  per-rank bytes of each call and the share of them crossing nodes (from the (sender, receiver)
  matrix, ranks placed node by node).
* **scheme overhead** (a profile calibrated on this machine only, P > 1): what a rank of the scheme spent
  at P = 2 beyond the first two terms — scheme-side work no ``single`` run has (packing and unpacking
  exchanged rows, every rank drawing the epoch's pairs, per-batch routing and write-backs) and, on the wall
  clock, waiting for its peer at each collective — as ``per_call_s`` per collective call of the epoch, fitted
  by ``dgbench project calibrate`` from P = 2 runs on its own stores (:mod:`dgbench.trainers.projection.calibrate`).
  Spec-sheet profiles have none: the term is this machine's CPU and gloo, not a GPU's.
* ``time_s`` = compute + scheme overhead + communication (nothing overlapped); ``time_overlap_bound_s`` =
  max(compute + overhead, communication), what a perfect overlap (Sven's §3.3.2 pipeline, ESDG §6.5's
  proposal) could reach at best. Host-to-device transfers are not modelled (resident snapshots).

Scaling (ESDG §6.3): strong — one store, speedup T(P_0)·P_0 / T(P) against the smallest P run
(P_0 = 1 normally); weak — the store grows with P (ESDG §6.1: N = 2^14 · P, T = 256, f = 3), speedup
= throughput(P) / throughput(P_0) · P_0 with throughput = edges (events) per second of an epoch.
Efficiency = speedup / P.
"""
from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dgbench.counting import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, TagVolume
from dgbench.trainers.projection import collectives
from dgbench.trainers.projection.dryrun import DryRun
from dgbench.trainers.projection.hardware import HardwareProfile

SCHEMA, VERSION = "dgbench.projection", 1
DISPATCH_TAG = "nm_dispatch"


def compute_seconds(dry: DryRun, rates: dict[str, float]) -> dict[str, float]:
    """The slowest rank's compute of one epoch, and the mean rank's (their ratio is the imbalance)."""
    if dry.family == "discrete":
        per_rank = (rates["per_edge_s"] * dry.work["edges"] + rates["per_cell_s"] * dry.work["cells"]
                    + rates["per_step_s"] * dry.work["steps"])
        return {"compute_s": float(per_rank.max()), "mean_rank_compute_s": float(per_rank.mean())}
    per_rank = rates["per_event_s"] * dry.work["events"] + rates["per_position_s"] * dry.work["computed"]
    batches = dry.units * rates["per_batch_s"]
    return {"compute_s": float(per_rank.max(1).sum() + batches), "mean_rank_compute_s": float(per_rank.mean(1).sum()
                                                                                                + batches)}


def eq12_microbatches(dry: DryRun, network: collectives.Network) -> int | None:
    """Sven's n (Eq. 12) as the trainer would choose it on this network: eta(bs) = A + B/bs from the dry
    run's first batch, S = bandwidth x latency / dispatch bytes per event (``granularity`` of
    trainers/continuous/sven/formulas.py)."""
    eq12 = dry.extra.get("eq12")
    if not eq12 or not eq12.get("dispatch_bytes_per_event") or dry.extra.get("microbatches_given"):
        return None  # (a dry run of a measured run counted with the n that run chose: priced as counted)
    from dgbench.trainers.continuous.sven.formulas import granularity
    world = dry.world_size
    multi = network.nodes(world) > 1
    link = network.inter if multi else network.intra
    latency = collectives.all_to_all(np.full(world, 8.0), np.full(world, 8.0), np.zeros(world), np.zeros(world),
                                     network)  # one row-count exchange, as the trainer times it
    speed = link.bandwidth * latency / eq12["dispatch_bytes_per_event"]
    return granularity(eq12["A"], eq12["B"], int(dry.extra["batch_size"]), speed)


def unit_calls(volume: Any, unit: int, override: int | None = None) -> int:
    """Collective calls of one tag in one unit of the epoch as priced: ``override`` (Sven's Eq. 12 n for its
    dispatch) or the counted calls, and one call for bytes counted without a call."""
    calls = int(volume.calls[unit] if override is None else override)
    return 1 if calls == 0 and volume.sent[unit].any() else calls


def exchange_counts(dry: DryRun, calls_override: dict[str, int] | None = None) -> tuple[int, float]:
    """Collective calls of one epoch (every rank takes part in each), and the bytes the busiest rank sends
    plus receives: the units a scheme overhead is priced per (module docstring)."""
    calls, per_rank = 0, np.zeros(dry.world_size)
    for tag, volume in dry.tags.items():
        override = (calls_override or {}).get(tag)
        calls += sum(unit_calls(volume, unit, override) for unit in range(volume.sent.shape[0]))
        per_rank += (volume.sent.sum(0) + volume.received.sum(0)) * volume.element_bytes
    return calls, float(per_rank.max(initial=0.0))


def overhead_calls(dry: DryRun) -> int:
    """The collective calls a scheme overhead is priced per: the epoch's, with Sven's dispatch at one call per
    batch whatever its n — the overhead is calibrated at n = 1, and each extra chunk's whole cost is
    ``per_microbatch_s``'s."""
    return exchange_counts(dry, {DISPATCH_TAG: 1} if DISPATCH_TAG in dry.tags else None)[0]


def scheme_overhead_seconds(dry: DryRun, profile: HardwareProfile) -> float:
    """The scheme overhead of one epoch on ``profile`` (zero without one for this scheme and model, at P = 1,
    and on every spec-sheet profile: see the module docstring)."""
    overhead = profile.scheme_overhead(dry.family, dry.scheme, dry.model)
    if overhead is None or dry.world_size == 1:
        return 0.0
    return overhead["per_call_s"] * overhead_calls(dry)


def communication_seconds(dry: DryRun, network: collectives.Network,
                          calls_override: dict[str, int] | None = None) -> dict[str, float]:
    """Seconds per tag of one epoch (see :mod:`dgbench.trainers.projection.collectives`)."""
    out: dict[str, float] = {}
    world = dry.world_size
    for tag, volume in dry.tags.items():
        size = volume.element_bytes
        out_inter, in_inter = collectives.inter_fractions(volume.pairs, network)
        seconds = 0.0
        for unit in range(volume.sent.shape[0]):
            calls = unit_calls(volume, unit, (calls_override or {}).get(tag))
            if calls == 0:
                continue
            sent, received = volume.sent[unit] * size / calls, volume.received[unit] * size / calls
            if volume.kind == ALL_REDUCE:
                one = collectives.all_reduce(float(sent.max()), world, network)
            elif volume.kind == ALL_GATHER:
                one = collectives.all_gather(sent / max(world - 1, 1), network)
            elif volume.kind == ALL_TO_ALL:
                one = collectives.all_to_all(sent, received, out_inter, in_inter, network)
            else:  # point to point between the two processes of a device (BLAD): inside a node
                one = collectives.point_to_point(float(sent.max()), True, network)
            seconds += calls * one
        out[tag] = seconds
    return out


def width_notes(dry: DryRun, calibrated: HardwareProfile) -> list[str]:
    """A note for every option the profile's rates were calibrated at that this run sets otherwise: the rates
    are per model at the calibration's widths (trainers/projection/calibrate.py)."""
    given = calibrated.document.get("calibrated_with", {}).get(dry.family, {})
    return [f"rates calibrated at {name} = {value!r}, projected at {dry.hyperparameters.get(name)!r}"
            for name, value in sorted(given.items())
            if name in dry.hyperparameters and dry.hyperparameters[name] != value]


def project_epoch(dry: DryRun, profile: HardwareProfile, basis: HardwareProfile | None = None,
                  scale_overheads: bool = False) -> dict[str, Any]:
    """One epoch of ``dry`` on ``profile``'s hardware (``scale_overheads``: see HardwareProfile.rates)."""
    rates, how = profile.rates(dry.family, dry.model, basis, scale_overheads)
    network = profile.network
    compute = compute_seconds(dry, rates)
    override, notes = {}, []
    n = eq12_microbatches(dry, network) if dry.family == "continuous" else None
    if n is not None and DISPATCH_TAG in dry.tags:
        override[DISPATCH_TAG] = n
        notes.append(f"Sven's micro-batches n = {n} from Eq. 12 on this profile's link")
    notes += width_notes(dry, basis if basis is not None and not profile.document.get("compute") else profile)
    by_tag = communication_seconds(dry, network, override)
    communication = float(sum(by_tag.values()))
    if DISPATCH_TAG in dry.tags and rates.get("per_microbatch_s"):  # Sven's n chunks per batch (Alg. 2)
        chunks = n if n is not None else int(dry.extra.get("microbatches_counted", 1))
        extra = rates["per_microbatch_s"] * max(chunks - 1, 0) * dry.units
        compute = {key: value + extra for key, value in compute.items()}
    overhead = scheme_overhead_seconds(dry, profile)
    if overhead:
        notes.append(f"scheme overhead of {dry.scheme}/{dry.model} calibrated at P = 2 on this machine")
    work = float(dry.work["edges"].sum() if dry.family == "discrete" else dry.work["events"].sum())
    if dry.family == "discrete":  # throughput counts each input edge once per epoch (ESDG §6.3)
        work = float(dry.extra.get("edges_total", work))
    return {"world_size": dry.world_size, "time_s": compute["compute_s"] + overhead + communication,
            "time_overlap_bound_s": max(compute["compute_s"] + overhead, communication), **compute,
            "scheme_overhead_s": overhead, "communication_s": communication, "communication_by_tag_s": by_tag,
            "bytes": dry.total_bytes(), "bytes_by_tag": dry.bytes_by_tag(), "work": work,
            "max_rank_sent_bytes": int(max((v.sent.sum(0) * v.element_bytes).max(initial=0)
                                           for v in dry.tags.values()) if dry.tags else 0),
            "rates": rates, "rates_source": how, "microbatches": n, "notes": notes + dry.notes,
            "dry_run": {"store": dry.store, "seconds": dry.seconds, "peak_rss_bytes": dry.peak_rss_bytes,
                        "work_pattern": dry.work_pattern}}


KEPT_SUFFIX = ".npz"  # counts as plain arrays and a JSON header: nothing in a kept dry run can execute


def save_dry_run(result: DryRun, path: Path) -> None:
    """Keep a dry run's counts (``path``: a ``.npz`` of plain arrays and a JSON header, no pickle)."""
    header = {"family": result.family, "scheme": result.scheme, "model": result.model,
              "world_size": result.world_size, "store": result.store, "hyperparameters": result.hyperparameters,
              "unit": result.unit, "units": result.units, "work_pattern": result.work_pattern,
              "parameters": result.parameters, "notes": result.notes, "extra": result.extra,
              "seconds": result.seconds, "peak_rss_bytes": result.peak_rss_bytes,
              "work": sorted(result.work),
              "tags": {tag: {"kind": v.kind, "element_bytes": v.element_bytes, "pattern": v.pattern}
                       for tag, v in result.tags.items()}}
    arrays = {"header": np.frombuffer(json.dumps(header).encode(), np.uint8)}
    arrays.update({f"work/{name}": values for name, values in result.work.items()})
    for index, (tag, volume) in enumerate(result.tags.items()):
        for part in ("pairs", "sent", "received", "calls"):
            arrays[f"tag{index}/{part}"] = getattr(volume, part)
    with open(path, "wb") as out:
        np.savez(out, **arrays)


def load_dry_run(path: str | Path) -> DryRun:
    """A dry run kept by ``--keep-dryruns`` (its counts), to price again on another profile. Only the
    ``.npz`` format is read, never a pickle; anything else raises ``ValueError`` naming the problem."""
    if Path(path).suffix != KEPT_SUFFIX:
        raise ValueError(f"expected a {KEPT_SUFFIX} file kept by --keep-dryruns (pickles are never loaded)")
    with np.load(path, allow_pickle=False) as kept:
        try:
            header = json.loads(kept["header"].tobytes())
            tags = {tag: TagVolume(tag, meta["kind"], int(meta["element_bytes"]),
                                   *(kept[f"tag{index}/{part}"] for part in ("pairs", "sent", "received", "calls")),
                                   meta["pattern"])
                    for index, (tag, meta) in enumerate(header.pop("tags").items())}
            work = {name: kept[f"work/{name}"] for name in header.pop("work")}
            return DryRun(tags=tags, work=work, **header)
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"missing or malformed field {exc}") from exc


def scaling(points: list[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """Speedup and efficiency of each point against the smallest world (see the module docstring)."""
    points = sorted(points, key=lambda p: p["world_size"])
    base = points[0]
    for point in points:
        p, p0 = point["world_size"], base["world_size"]
        if mode == "strong":
            speedup = base["time_s"] * p0 / point["time_s"]
        else:
            speedup = (point["work"] / point["time_s"]) / (base["work"] / base["time_s"]) * p0
        point["throughput"] = point["work"] / point["time_s"]
        point["speedup"] = speedup
        point["efficiency"] = speedup / p
    return points


def projection_document(mode: str, head: DryRun, profile: HardwareProfile, points: list[dict[str, Any]],
                        command: str, notes: Iterable[str] = ()) -> dict[str, Any]:
    """The record-like JSON of one projected curve (never a measured record: ``projected`` is true)."""
    from dgbench.records import code_provenance
    return {"schema": SCHEMA, "version": VERSION, "projected": True, "mode": mode, "family": head.family,
            "scheme": head.scheme, "model": head.model, "hyperparameters": head.hyperparameters,
            "profile": profile.describe(), "command": command, "code": code_provenance(),
            "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "points": scaling(points, mode), "notes": sorted(set(notes))}


def project_curves(mode: str, configs: dict[tuple[str, str], dict[int, Any]], profile: HardwareProfile,
                   basis: HardwareProfile | None, command: str, keep: Path | None = None,
                   scale_overheads: bool = False) -> list[dict[str, Any]]:
    """Dry-run every (scheme, model) curve at every world of ``configs`` ((scheme, model) -> world ->
    RunConfig) and project each point. Per world, a model's store is loaded once and shared by the
    schemes; ``keep``: a folder for the dry runs' JSON."""
    import json
    from dgbench.trainers.projection.dryrun import dry_run, partition_problem
    points: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in configs}
    heads: dict[tuple[str, str], DryRun] = {}
    notes: dict[tuple[str, str], list[str]] = {key: [] for key in configs}
    worlds = sorted({w for by_world in configs.values() for w in by_world})
    for world in worlds:
        for model in sorted({m for _, m in configs}):
            keys = [key for key in configs if key[1] == model and world in configs[key]]
            problem = partition_problem(configs[keys[0]][world]) if keys else None
            for key in keys:
                result = dry_run(configs[key][world], problem=problem)
                heads.setdefault(key, result)
                point = project_epoch(result, profile, basis, scale_overheads)
                notes[key] += point.pop("notes")
                points[key].append(point)
                if keep is not None:  # the summary, and the counts themselves to price again (load_dry_run)
                    keep.mkdir(parents=True, exist_ok=True)
                    stem = keep / f"dryrun-{mode}-{key[0]}-{model}-P{world}"
                    stem.with_suffix(".json").write_text(json.dumps(result.as_json(), indent=1))
                    save_dry_run(result, stem.with_suffix(KEPT_SUFFIX))
                del result
            del problem
    return [projection_document(mode, heads[key], profile, points[key], command, notes[key]) for key in configs]


def price_curves(mode: str, paths: list[Path], profile: HardwareProfile, basis: HardwareProfile | None, command: str,
                 scale_overheads: bool = False) -> list[dict[str, Any]]:
    """Kept dry runs (:func:`load_dry_run`) priced on ``profile``: one curve per (scheme, model), its points
    the dry runs' worlds (one dry run per world and curve)."""
    from dgbench.errors import DgbenchError
    curves: dict[tuple[str, str], dict[int, tuple[DryRun, dict[str, Any]]]] = {}
    for path in paths:
        try:
            dry = load_dry_run(path)
        except (ValueError, OSError, EOFError) as exc:
            raise DgbenchError(f"{path}: not a dry run kept by --keep-dryruns ({exc})") from exc
        curve = curves.setdefault((dry.scheme, dry.model), {})
        if dry.world_size in curve:
            raise DgbenchError(f"{path}: a second dry run of {dry.scheme}/{dry.model} at P = {dry.world_size}")
        curve[dry.world_size] = dry, project_epoch(dry, profile, basis, scale_overheads)
    documents = []
    for key, by_world in curves.items():
        points = [point for _, (_, point) in sorted(by_world.items())]
        notes = [note for point in points for note in point.pop("notes")]
        head = by_world[min(by_world)][0]
        documents.append(projection_document(mode, head, profile, points, command, notes))
    return documents
