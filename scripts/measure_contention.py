"""Quiet and loaded runs side by side: the figures the contention thresholds are chosen from.

    PYTHONPATH=. python scripts/measure_contention.py STORE [--burners 0,2] [--epochs 6]

For each number of CPU burners (busy-looping processes started beside the run), runs `single` at P = 1
with one thread and `snapshot` at P = 2, and prints each record's timing block (dgbench/timing.py):
CPU share, run-queue wait share, other tenants' share, load beyond the job, throughput CV and verdict.
Run it on the machine whose thresholds you set (leaderboards/RULES.md, "Clean timing"), under the
timing lock when the machine is shared, and write down the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = (("single", 1, 1), ("snapshot", 2, 1))  # (scheme, ranks, threads per rank)


def burn(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def run_case(store: str, scheme: str, nproc: int, threads: int, epochs: int, out: Path) -> dict:
    command = [sys.executable, "-m", "dgbench", "run", "--scheme", scheme, "--model", "tmgcn", "--dataset", store,
               "--nproc", str(nproc), "--threads", str(threads), "--epochs", str(epochs), "--out", str(out)]
    subprocess.run(command, check=True, capture_output=True, env={**os.environ, "DGBENCH_QUIET": "1"})
    newest = max(out.glob("*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(newest.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--burners", default="0,2", help="comma-separated burner counts, one round each")
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    print(f"load average before: {open('/proc/loadavg').read().strip()}")
    print(f"{'burners':>7} {'scheme':>8} {'P':>2} {'thr':>3} {'edges/s':>10} {'cv':>5} {'share':>5} {'active':>6} "
          f"{'delay':>5} {'others':>6} {'load+':>5}  verdict")
    with tempfile.TemporaryDirectory(prefix="dgbench-contention-") as tmp:
        for burners in (int(b) for b in args.burners.split(",")):
            for scheme, nproc, threads in CASES:
                stop_at = time.monotonic() + 3600
                procs = [multiprocessing.Process(target=burn, args=(stop_at,), daemon=True) for _ in range(burners)]
                for p in procs:
                    p.start()
                try:
                    record = run_case(args.store, scheme, nproc, threads, args.epochs, Path(tmp) / f"{burners}{scheme}")
                finally:
                    for p in procs:
                        p.terminate()
                        p.join()
                t = record["timing"]
                others = t["others_share"] if t["others_share"] is not None else float("nan")
                verdict = "contended: " + "; ".join(t["reasons"]) if t["contended"] else "clean"
                print(f"{burners:>7} {scheme:>8} {nproc:>2} {threads:>3} {t['throughput']['median']:>10.0f} "
                      f"{t['throughput']['cv']:>5.2f} {t['cpu_share']:>5.2f} {t['active_cpu_share']:>6.2f} "
                      f"{t['run_delay_share']:>5.2f} {others:>6.2f} {t['load_per_core']:>5.2f}  {verdict}")
    print(f"load average after: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
