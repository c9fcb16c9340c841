"""DyGNN under `single` and `tgcn` (streaming T-GCN §6.2 Fig. 6 / Table 2, §6.4 with Alg. 7's pre-pass).

One run per benchmark trains, on the same store and protocol:
* ``single``: DyGNN in the family's loop (batch-parallel: a batch reads the state it started with);
* ``tgcn --live``: DyGNN one event after another on live state (the paper's single-device DyGNN);
* ``tgcn`` on one rank (one grid range: T-GCN on one device), and on two ranks with and without §4.3's
  pipeline, with each rank's training events, compute seconds and the overlap the pipeline achieved,
  and on two ranks with the paper-literal ``--id-order given`` (the default permutes the ids);
* on the real streams also ``tgcn --sparsify 0.5`` (the paper's pre-pass), for its accuracy and speed.

Events/s = training events / epoch seconds (with the pre-pass: the events kept). CPU, gloo, a shared
2-core machine in development: the numbers are noisy, and the paper's GPU claims (815.7K edges/s on
Twitter, 5.2x from 1 to 8 V100s) cannot be measured here. Quick mode: small sizes, one epoch.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import run_experiments

QUICK = bool(os.environ.get("DGBENCH_BENCH_QUICK"))
PROTOCOL = dict(batch_size=600, memory_dim=64)  # §6.1.3: hidden size 64; TGL's batch of 600
RUN = dict(lr=0.001, seed=0)
VARIANTS_ONE = {"single": ("single", {}), "dygnn-live": ("tgcn", {"live": True, "intervals": 1}),
                "tgcn-P1": ("tgcn", {})}
VARIANTS_TWO = {"tgcn-P2": ("tgcn", {}), "tgcn-P2-no-pipeline": ("tgcn", {"no_pipeline": True}),
                "tgcn-P2-given-ids": ("tgcn", {"id_order": "given"})}  # the paper-literal id ranges


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def summary(record: dict) -> dict:
    last = record["epochs"][-1]
    row = {"events_per_s": last["events_per_s"], "epoch_s": last["time_s"], "work": last["work"],
           "test_ap": record["final_metrics"]["test"]["ap"], "val_ap": record["final_metrics"]["val"]["ap"]}
    counters = record["extra"]["per_rank_counters"]
    if "tgcn_compute_s" in counters[0]:
        row.update(compute_s_per_rank=[c["tgcn_compute_s"] for c in counters],
                   events_per_rank=[c["events"] for c in counters],
                   load_overlap_per_rank=[c["tgcn_load_overlap"] for c in counters],
                   async_swap_bytes=sum(c["tgcn_async_swap_bytes"] for c in counters),
                   sync_swap_bytes=sum(c["tgcn_sync_swap_bytes"] for c in counters),
                   swap_exposed_s=max(sum(t.get("seconds", 0.0) for tag, t in r["comm_by_tag"].items()
                                          if tag.startswith("tgcn_swap")) for r in last["per_rank"]),
                   grad_allreduce_bytes=last["grad_allreduce_bytes"])
    return row


def dygnn_runs(store: Path, events: int | None, epochs: int, extra_one: dict | None = None) -> dict:
    base = dict(PROTOCOL, **({"max_events": events} if events else {}))
    one = {**VARIANTS_ONE, **(extra_one or {})}
    records = run_experiments([RunConfig(scheme, "dygnn", store, nproc=1, epochs=epochs, options=dict(opts, **base),
                                         **RUN) for scheme, opts in one.values()])
    records += run_experiments([RunConfig(scheme, "dygnn", store, nproc=2, epochs=epochs, options=dict(opts, **base),
                                          **RUN) for scheme, opts in VARIANTS_TWO.values()])
    return {name: summary(r) for name, r in zip([*one, *VARIANTS_TWO], records)}


def report(benchmark, title: str, rows: dict) -> None:
    for name, row in rows.items():
        benchmark.extra_info.update({f"{name}.{k}": v for k, v in row.items()})
    base = rows["single"]["events_per_s"]
    print(f"\n{title} ({'quick' if QUICK else 'full'}; shared 2-core CPU, gloo: noisy)")
    for name, row in rows.items():
        extra = ""
        if "compute_s_per_rank" in row:
            compute = [round(c, 2) for c in row["compute_s_per_rank"]]
            overlap = [round(o, 2) for o in row["load_overlap_per_rank"]]
            extra = (f"  events/rank {row['events_per_rank']}  compute/rank {compute}s  load overlap {overlap}  "
                     f"swap exposed {row['swap_exposed_s']:.3f}s "
                     f"async/sync swap bytes {row['async_swap_bytes']}/{row['sync_swap_bytes']}")
        print(f"  {name:22s} {row['events_per_s']:9.0f} events/s (x{row['events_per_s'] / base:5.2f} of single)  "
              f"epoch {row['epoch_s']:7.2f}s  events {row['work']:6d}  test AP {row['test_ap']:.4f}{extra}")


def test_dygnn_events_per_second_on_a_generated_stream(benchmark, tmp_path_factory):
    from dgbench.generators.stream import build
    store = build(out=tmp_path_factory.mktemp("tgcnbench") / "stream.zarr", users=300, items=200,
                  events=3_000 if QUICK else 30_000, edge_dim=4, seed=0)
    rows = benchmark.pedantic(dygnn_runs, args=(store, None, 1), rounds=1, iterations=1)
    report(benchmark, "DyGNN events/s, generated stream", rows)


@pytest.mark.realdata
@pytest.mark.parametrize("name", ["wikipedia", "lastfm"])
def test_dygnn_on_real_streams_with_and_without_the_prepass(benchmark, shared_data, tmp_path_factory, name):
    """The first DGBENCH_BENCH_EVENTS events (default 20,000; quick 3,000), DGBENCH_BENCH_EPOCHS epochs
    (default 3; quick 1); the store's 70/15/15 split."""
    from test_sis_bench import real_store  # the benchmarks folder is on sys.path under pytest
    store = real_store(shared_data, name, tmp_path_factory.getbasetemp())
    events = int(os.environ.get("DGBENCH_BENCH_EVENTS", "3000" if QUICK else "20000"))
    epochs = int(os.environ.get("DGBENCH_BENCH_EPOCHS", "1" if QUICK else "3"))
    prepass = {"tgcn-P1-sparsify-0.5": ("tgcn", {"sparsify": 0.5})}
    rows = benchmark.pedantic(dygnn_runs, args=(store, events, epochs, prepass), rounds=1, iterations=1)
    report(benchmark, f"DyGNN on {name}, {events} events, {epochs} epochs", rows)
