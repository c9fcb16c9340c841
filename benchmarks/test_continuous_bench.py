"""Continuous-time schemes: iteration time per scheme at P = 1, 2, 4, communication bytes of sven vs
depcomm / depcache, and (slow, real data) AP of TGN / JODIE / APAN on Wikipedia and LastFM.

All schemes of one world size train in one launch (spawning ranks dominates small runs); the
per-scheme figures go into ``extra_info``. Quick mode (``--benchmark-disable``) runs each once.
Real data: DGBENCH_BENCH_EVENTS events of each stream (default 20,000), DGBENCH_BENCH_EPOCHS epochs (1).
Sven Table 4 (LastFM AP, batch 1200, best-validation model): DGBENCH_TABLE4_EVENTS events of the LastFM
slice (default 40,000; 0 = the whole file), DGBENCH_TABLE4_EPOCHS epochs (default 3; the paper: 100),
DGBENCH_LASTFM_CSV a full JODIE lastfm.csv where a user has one.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from dgbench.dist import DistContext
from dgbench.launch import launch
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import resolve, run_experiment, train_runs

SCHEMES_AT = {1: ("single",), 2: ("depcache", "depcomm", "sven"), 4: ("depcache", "depcomm", "sven")}
SMALL = dict(epochs=1, batch_size=300, memory_dim=32, neighbors=10, lr=0.001, seed=0)


def schemes_on_ranks(ctx: DistContext, dataset: Path, model: str, schemes: tuple[str, ...],
                     options: dict | None = None, max_events: int | None = None) -> dict:
    """Train ``model`` once per scheme on this rank; per scheme: seconds/iteration split and bytes.
    A scheme "sven@range" is sven with that vertex partition (its default is Re-FlexBiCut)."""
    out = {}
    for spec in schemes:
        scheme, _, partition = spec.partition("@")
        config = RunConfig(scheme=scheme, model=model, dataset=dataset, nproc=ctx.world_size, max_events=max_events,
                           **{**SMALL, **(options or {}), **({"partition": partition} if partition else {})})
        result = train_runs(ctx, [resolve(config)])[0]
        method = result["partition"].method if result["partition"] is not None else config.options.get("partition")
        f = result["figures"][-1]
        iterations = max(f["iterations"], 1)
        out[spec] = {"iteration_s": f["time_s"] / iterations, "partition": method,
                       "nm_communication_s": (f.get("nm_dispatch_s", 0) + f.get("nm_aggregate_s", 0)) / iterations,
                       "grad_allreduce_s": f.get("grad_allreduce_s", 0) / iterations,
                       "nm_bytes": f.get("nm_dispatch_bytes", 0) + f.get("nm_aggregate_bytes", 0),
                       "nm_row_bytes": f.get("nm_dispatch_row_bytes", 0) + f.get("nm_aggregate_row_bytes", 0),
                       "nm_gradient_bytes": f.get("nm_gradient_bytes", 0),
                       "eta1": result["counters"]["eta1"], "eta2": result["counters"]["eta2"],
                       "test_ap": f["metrics"]["test"]["ap"]}
    return out


@pytest.fixture(scope="module")
def bench_stream(tmp_path_factory) -> Path:
    from dgbench.generators.stream import build
    return build(out=tmp_path_factory.mktemp("cbench") / "stream.zarr", users=300, items=200, events=1500,
                 edge_dim=8, seed=0)


def _merge(per_rank: list[dict]) -> dict:
    """Slowest rank's time per scheme, bytes summed over ranks, eta the mean over ranks that fetched
    remote rows (a rank that owns no event's source has eta 0 by definition, not by deduplication)."""
    merged = {}
    for scheme in per_rank[0]:
        rows = [r[scheme] for r in per_rank]
        slowest = max(rows, key=lambda r: r["iteration_s"])
        merged[scheme] = {**slowest, "nm_bytes": sum(r["nm_bytes"] for r in rows),
                          "nm_row_bytes": sum(r["nm_row_bytes"] for r in rows)}
        for eta in ("eta1", "eta2"):
            active = [r[eta] for r in rows if r[eta] > 0]
            merged[scheme][eta] = sum(active) / len(active) if active else 0.0
    return merged


@pytest.mark.parametrize("model", ["tgn"])
@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_iteration_time_and_bytes_per_scheme(benchmark, bench_stream, nproc, model):
    per_rank = benchmark.pedantic(launch, args=(schemes_on_ranks, nproc, (bench_stream, model, SCHEMES_AT[nproc])),
                                  rounds=1, iterations=1)
    merged = _merge(per_rank)
    benchmark.extra_info.update({f"{scheme}.{k}": v for scheme, row in merged.items() for k, v in row.items()})
    if nproc > 1:
        benchmark.extra_info["depcomm_over_sven_bytes"] = merged["depcomm"]["nm_bytes"] / merged["sven"]["nm_bytes"]
        benchmark.extra_info["depcache_over_sven_bytes"] = merged["depcache"]["nm_bytes"] / merged["sven"]["nm_bytes"]
        assert merged["sven"]["nm_bytes"] < merged["depcomm"]["nm_bytes"]


REAL_STREAMS = {"wikipedia": ("jodie_wikipedia_tgn/wikipedia.csv", ["--shared-ids"]),
                "lastfm": ("jodie_lastfm/lastfm.csv", ["--drop-partial-last-line"])}


def real_store(shared_data: Path, name: str, out_dir: Path, raw: Path | None = None) -> Path:
    """Build (once) the stream store of a real JODIE file with `dgbench prepare file --format jodie`."""
    from click.testing import CliRunner

    from dgbench.cli import cli
    relative, flags = REAL_STREAMS[name]
    out = out_dir / f"{name}{'-full' if raw else ''}.zarr"
    if not out.exists():
        result = CliRunner().invoke(cli, ["--quiet", "prepare", "file", "--format", "jodie", "--raw",
                                          str(raw or shared_data / relative), "-o", str(out), *flags])
        assert result.exit_code == 0, result.output
    return out


def real_data_ap(store: Path, model: str, events: int, epochs: int = 1, memory_dim: int = 100) -> dict:
    """AP/AUC after ``epochs`` of ``single`` on the first ``events`` events (TGL defaults: batch 600, k=10)."""
    config = RunConfig(scheme="single", model=model, dataset=store, epochs=epochs, batch_size=600, neighbors=10,
                       memory_dim=memory_dim, lr=0.001, seed=0)
    record = run_experiment(config.with_options(max_events=events))
    return {"test_ap": record["final_metrics"]["test"]["ap"], "test_auc": record["final_metrics"]["test"]["auc"],
            "val_ap": record["final_metrics"]["val"]["ap"], "events": record["extra"]["events_used"],
            "epochs": epochs, "epoch_s": record["epochs"][0]["time_s"],
            "events_per_s": record["epochs"][0]["events_per_s"],
            "val_ap_per_epoch": [e["metrics"]["val"]["ap"] for e in record["epochs"]]}


@pytest.mark.slow
@pytest.mark.realdata
@pytest.mark.parametrize("model", ["tgn", "jodie", "apan"])
@pytest.mark.parametrize("name", ["wikipedia", "lastfm"])
def test_real_stream_ap(benchmark, shared_data, tmp_path_factory, name, model):
    store = real_store(shared_data, name, tmp_path_factory.getbasetemp())
    events = int(os.environ.get("DGBENCH_BENCH_EVENTS", "20000"))
    epochs = int(os.environ.get("DGBENCH_BENCH_EPOCHS", "1"))
    result = benchmark.pedantic(real_data_ap, args=(store, model, events, epochs), rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    # 20k events, 1 epoch: 0.59-0.90; a trained time encoding left LastFM at 0.52-0.54 (chance 0.5)
    assert 0.56 < result["test_ap"] <= 1.0


@pytest.mark.slow
@pytest.mark.realdata
@pytest.mark.parametrize("nproc", [2, 4])
def test_real_stream_bytes_per_scheme(benchmark, shared_data, tmp_path_factory, nproc):
    """N&M bytes of every distributed scheme on the first DGBENCH_BENCH_EVENTS Wikipedia events (TGN,
    TGL batch 600, memory 100); sven twice, so deduplication (sven@range vs depcomm, same owners) and
    partitioning (sven vs sven@range) show separately."""
    store = real_store(shared_data, "wikipedia", tmp_path_factory.getbasetemp())
    quick_default = "5000" if os.environ.get("DGBENCH_BENCH_QUICK") else "20000"  # CI's pass: once, small
    events = int(os.environ.get("DGBENCH_BENCH_EVENTS", quick_default))
    schemes = ("depcache", "depcomm", "sven@range", "sven")
    options = {"batch_size": 600, "memory_dim": 100}
    per_rank = benchmark.pedantic(launch, args=(schemes_on_ranks, nproc, (store, "tgn", schemes, options, events)),
                                  kwargs={"timeout_s": 1800}, rounds=1, iterations=1)
    merged = _merge(per_rank)
    benchmark.extra_info.update({f"{scheme}.{k}": v for scheme, row in merged.items() for k, v in row.items()})
    for scheme in ("depcache", "depcomm", "sven@range"):
        benchmark.extra_info[f"{scheme}_over_sven_bytes"] = merged[scheme]["nm_bytes"] / merged["sven"]["nm_bytes"]
    print(f"\nwikipedia {events} events, P={nproc}: " + ", ".join(
        f"{scheme} {row['nm_bytes'] / 1e6:.1f} MB {row['iteration_s'] * 1e3:.1f} ms/it eta1 {row['eta1']:.3f}"
        for scheme, row in merged.items()))
    assert merged["sven@range"]["nm_bytes"] < merged["depcomm"]["nm_bytes"]  # dedup alone, same owners


# Sven TPDS Table 4: LastFM test AP of the best-validation model (100 epochs, batch 1200, 4 GPUs)
TABLE4 = {"apan": {"tgl": 0.8019, "sven": 0.8093}, "jodie": {"tgl": 0.7769, "sven": 0.7812},
          "tgn": {"tgl": 0.8842, "sven": 0.8837}}


@pytest.mark.slow
@pytest.mark.realdata
@pytest.mark.parametrize("model", ["apan", "jodie", "tgn"])
def test_table4_lastfm_best_validation_ap(benchmark, shared_data, tmp_path_factory, model):
    """Table 4's setup on LastFM: batch 1200, TGL's widths (memory 100, 10 recent neighbours), the test AP
    of the epoch with the best validation AP, sven on 2 ranks beside single (the paper's TGL row)."""
    full = os.environ.get("DGBENCH_LASTFM_CSV")
    store = real_store(shared_data, "lastfm", tmp_path_factory.getbasetemp(), Path(full) if full else None)
    events = int(os.environ.get("DGBENCH_TABLE4_EVENTS", "40000")) or None
    epochs = int(os.environ.get("DGBENCH_TABLE4_EPOCHS", "3"))
    # one negative per positive: TGL's AP (the paper's Table 4 follows TGL); dgbench's default ranks 9 negatives
    base = dict(model=model, dataset=store, epochs=epochs, batch_size=1200, neighbors=10, memory_dim=100, lr=0.001,
                seed=0, max_events=events, eval_negatives=1, out=tmp_path_factory.mktemp(f"table4-{model}"))

    def train() -> dict:
        single = run_experiment(RunConfig(scheme="single", **base))
        sven = run_experiment(RunConfig(scheme="sven", nproc=2, **base))
        return {name: {"best_validation": r["extra"]["best_validation"], "events": r["extra"]["events_used"],
                       "epoch_s": [e["time_s"] for e in r["epochs"]]}
                for name, r in (("single", single), ("sven", sven))}

    result = benchmark.pedantic(train, rounds=1, iterations=1)
    benchmark.extra_info.update({"paper_table4": TABLE4[model], **result})
    print(f"\nTable 4 {model}: ours single {result['single']['best_validation']['test']['ap']:.4f} "
          f"sven {result['sven']['best_validation']['test']['ap']:.4f} (epoch "
          f"{result['sven']['best_validation']['epoch']}) on {result['sven']['events']} events, {epochs} epochs; "
          f"paper TGL {TABLE4[model]['tgl']:.4f} Sven {TABLE4[model]['sven']:.4f} (100 epochs, 1.29M events)")
    for name in ("single", "sven"):
        assert 0.5 < result[name]["best_validation"]["test"]["ap"] <= 1.0
