"""dgbench project against this machine: projected vs measured epoch time at P = 1 and 2, and the dry
run's peak memory on ESDG's weak-scaling family (issue 17).

1. **Projection error**, on each clock (``wall``, ``process``: dgbench/project/calibrate.py). A profile is
   calibrated in the same benchmark run, just before the measured runs it is compared with (a quick
   calibration of the benchmark's models at the cases' widths, ``dgbench project calibrate --quick
   --clock C --discrete-set ... --continuous-set ...``, on its own generated stores: never on the runs
   it projects); ``DGBENCH_PROJECTION_PROFILE`` gives one instead
   (its clock is used). It prices the dry runs of ``single`` (P = 1) and ``snapshot`` / ``sven`` (P = 2);
   the real runs' median timed epoch (epochs after the first, the slowest rank's, on the same clock) is
   the measurement. Relative errors and the load average around each step go into ``extra_info``;
   nothing is asserted about them (the machine is shared: other sessions compete for its two cores; a
   rank of a 2-rank job gets one core, as the calibration's one thread). On the wall clock the load
   stretches calibration and measurement alike only if it stays the same between them; the process
   clock counts each rank's CPU seconds, which the load barely changes, and no waiting. The benchmark
   times the projection.
2. **Dry-run memory.** ``dgbench project dryrun`` of ``snapshot`` on the weak-scaling store of
   ``DGBENCH_BENCH_WEAK_P`` ranks (N = 2^14 · P, T = 256, f = 3; default P = 2), in a fresh process,
   its peak RSS (VmHWM) against 24 GiB. The full-scale check (hours and tens of GB of disk here):

       DGBENCH_BENCH_WEAK_P=128 .venv/bin/pytest benchmarks/test_projection_bench.py -k memory --benchmark-disable -s
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _probe import LIMIT_BYTES, PROBE  # benchmarks/_probe.py (pytest puts benchmarks/ on the path)

from dgbench.project.calibrate import CLOCKS, calibrate, run_timed
from dgbench.project.dryrun import dry_run
from dgbench.project.hardware import load_profile
from dgbench.project.projection import project_epoch
from trainers.config import RunConfig

CASES = {"discrete": ("snapshot", "cdgcn", dict(hidden=6)),
         "continuous": ("sven", "tgn", dict(batch_size=300, memory_dim=32, neighbors=10))}
EPOCHS = 4
WEAK_P = int(os.environ.get("DGBENCH_BENCH_WEAK_P", 2))


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    from generators.esdg_random import build
    from generators.stream import build as stream
    root = tmp_path_factory.mktemp("projection-bench")
    return {"discrete": build(out=root / "snapshots.zarr", nodes=8192, snapshots=17, edge_factor=3.0, seed=1),
            "continuous": stream(out=root / "stream.zarr", users=300, items=200, events=4000, edge_dim=8, seed=1)}


GIVEN_PROFILE = os.environ.get("DGBENCH_PROJECTION_PROFILE")


def _given_clock() -> str:
    return json.loads(Path(GIVEN_PROFILE).read_text()).get("payload", {}).get("clock", "wall") \
        if GIVEN_PROFILE and Path(GIVEN_PROFILE).exists() else "wall"


def _median_epoch(record: dict) -> float:
    return statistics.median(e["time_s"] for e in record["epochs"][1:])


@pytest.mark.parametrize("clock", sorted(CLOCKS))
def test_projected_epoch_time_at_one_and_two_ranks(benchmark, stores, clock, tmp_path):
    if GIVEN_PROFILE and clock != _given_clock():
        pytest.skip(f"DGBENCH_PROJECTION_PROFILE is on the {_given_clock()} clock")
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # P = 1 runs in this process: one core, as a rank of a 2-rank job here
    load = {"before_calibration": os.getloadavg()[0]}
    try:
        profile = load_profile(GIVEN_PROFILE) if GIVEN_PROFILE else load_profile(
            calibrate(tmp_path / f"this-machine-{clock}.json", [CASES["discrete"][1]], [CASES["continuous"][1]],
                      quick=True, clock=clock, options={family: case[2] for family, case in CASES.items()}))
        report, last = {}, None
        for family, (scheme, model, options) in CASES.items():
            for world, name in ((1, "single"), (2, scheme)):
                config = RunConfig(name, model, stores[family], nproc=world, epochs=EPOCHS, seed=0,
                                   out=stores[family].parent / "runs", **options)
                load[f"{family}:P{world}"] = os.getloadavg()[0]
                record = run_timed([config], clock)[0]
                chosen = (record["extra"].get("microbatches") or {}).get("n") if family == "continuous" else None
                dry = dry_run(config, eq12_n=chosen)  # Sven's n as its run chose it (Eq. 12 on the measured link)
                projected = project_epoch(dry, profile)
                measured = _median_epoch(record)
                report[f"{family}:{name}/{model}:P{world}"] = {"notes": projected["notes"], "eq12_n": chosen,
                    "measured_s": measured, "projected_s": projected["time_s"],
                    "relative_error": (projected["time_s"] - measured) / measured,
                    "projected_compute_s": projected["compute_s"],
                    "projected_communication_s": projected["communication_s"],
                    "measured_communication_s": statistics.median(e["communication_s"]
                                                                  for e in record["epochs"][1:]),
                    "measured_rank_s": [statistics.median(e["per_rank"][r]["time_s"] for e in record["epochs"][1:])
                                        for r in range(world)]}
                last = dry
    finally:
        torch.set_num_threads(before)
    load["after"] = os.getloadavg()[0]
    benchmark.extra_info.update(clock=clock, cases=report, profile=profile.describe(), load_average_1min=load,
                                note="shared 2-core machine: timings noisy, errors reported, not asserted")
    print(json.dumps({"clock": clock, "load": load, "cases": report}, indent=1))
    benchmark(project_epoch, last, profile)


def test_dry_run_memory_on_the_weak_scaling_store(benchmark, tmp_path_factory):
    from dgbench.project.cli import weak_store
    store = weak_store(tmp_path_factory.mktemp("weak"), WEAK_P, 2 ** 14, 256, 3.0, 0)

    def probe() -> dict:
        result = subprocess.run([sys.executable, "-c", PROBE, "--quiet", "project", "dryrun", str(store), "--scheme",
                                 "snapshot", "--model", "cdgcn", "--nproc", str(WEAK_P)],
                                capture_output=True, text=True, check=True)
        return json.loads(result.stdout.strip().splitlines()[-1])

    measured = benchmark.pedantic(probe, rounds=1, iterations=1)
    benchmark.extra_info.update(world=WEAK_P, nodes=2 ** 14 * WEAK_P, steps=256, **measured,
                                limit_bytes=LIMIT_BYTES, fits=measured["peak_rss_bytes"] < LIMIT_BYTES)
    print(json.dumps(benchmark.extra_info, indent=1))
    assert measured["peak_rss_bytes"] < LIMIT_BYTES
