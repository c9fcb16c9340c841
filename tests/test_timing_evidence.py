"""Timing evidence in records: contended runs are told apart and refused a rank, spreads rank the median,
waiting for a slower rank is not counted as transfer (docs/result-record.md, leaderboards/RULES.md)."""
from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from dgbench.leaderboard.board import load_board, submit
from dgbench.leaderboard.tables import build_view
from dgbench.records import seal_record
from dgbench.timing import MAX_CV, MAX_RUN_DELAY_SHARE, MIN_CPU_SHARE, Spread, cores, host_load, timing_summary
from tests.leaderboard_records import make_record, official_dataset, write
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import run_experiment

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def timing_store(tmp_path: Path) -> Path:
    """A store whose epochs last tens of milliseconds at one thread: long enough for the scheduler's
    figures to mean something, short enough for a test."""
    from dgbench.generators.esdg_random import build
    return build(out=tmp_path / "timing.zarr", nodes=512, snapshots=16, edge_factor=8.0, seed=1)


def _burn(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def _run_single(store: Path, out: Path) -> dict:
    return run_experiment(RunConfig("single", "tmgcn", store, epochs=6, threads=1, hidden=16, out=out))


def _with_record_board(tmp_path: Path, record: dict, name: str) -> None:
    record = dict(record)
    record["code"] = {"commit": "0" * 40, "dirty": False}  # the test tree is usually dirty
    submit(write(seal_record({k: v for k, v in record.items() if k != "seal"}), tmp_path / f"{name}.json"),
           tmp_path / "board", tracks=["throughput"])


def _contended_copy(record: dict) -> dict:
    """``record`` as if every timed epoch's rank had got 40% of its core (the rest waiting for a CPU)."""
    record = {**record, "epochs": [dict(e) for e in record["epochs"]]}
    for epoch in record["epochs"]:
        epoch["per_rank"] = [{**r, "evidence": {**r["evidence"], "cpu_s": 0.4 * r["evidence"]["wall_s"],
                                                 "run_delay_s": 0.6 * r["evidence"]["wall_s"]}}
                             for r in epoch["per_rank"]]
    return record


# --------------------------------------------------------------------------- the mechanism, deterministic

def test_a_record_whose_ranks_were_denied_their_cores_is_flagged_contended():
    quiet = make_record(epochs=6)
    contended = _contended_copy(quiet)
    assert timing_summary(quiet["epochs"], 1)["contended"] is False
    summary = timing_summary(contended["epochs"], 1)
    assert summary["contended"] is True
    assert any("CPU share" in reason for reason in summary["reasons"])
    assert any("waited for a CPU" in reason for reason in summary["reasons"])


def test_a_contended_record_is_filed_but_not_ranked_even_when_its_timing_block_says_clean(tmp_path):
    quiet = make_record(epochs=6, scheme="single")
    contended = _contended_copy(make_record(epochs=6, scheme="snapshot", epoch_seconds=0.5))
    contended["timing"] = quiet["timing"]  # a hand-edited verdict: the board recomputes it from the evidence
    _with_record_board(tmp_path, quiet, "quiet")
    _with_record_board(tmp_path, contended, "contended")
    entries = {e.record["scheme"]: e for e in load_board(tmp_path / "board")}
    assert entries["single"].official is not None and entries["single"].unofficial_reason is None
    assert entries["snapshot"].official is None and "contended" in entries["snapshot"].unofficial_reason
    view = build_view(list(entries.values()))
    official = next(t for t in view.tables["throughput"] if t.id == "throughput-official")
    unofficial = next(t for t in view.tables["throughput"] if t.id == "throughput-unofficial")
    assert [row[2].text for row in official.rows] == ["single"]
    (row,) = unofficial.rows
    column = {name: i for i, name in enumerate(unofficial.columns)}
    assert row[column["Rank"]].text == "–" and "contended" in row[column["Not ranked"]].text


def test_a_record_without_evidence_or_with_too_few_timed_epochs_does_not_rank(tmp_path):
    old = make_record(epochs=6, scheme="single")
    for epoch in old["epochs"]:
        for rank in epoch["per_rank"]:
            del rank["evidence"]
    short = make_record(epochs=4, scheme="snapshot")
    _with_record_board(tmp_path, old, "old")
    _with_record_board(tmp_path, short, "short")
    reasons = {e.record["scheme"]: e.unofficial_reason for e in load_board(tmp_path / "board")}
    assert "no timing evidence" in reasons["single"]
    assert "3 timed epochs" in reasons["snapshot"]


def test_an_unstable_row_is_marked_and_not_ranked(tmp_path):
    record = make_record(epochs=6)
    for index, epoch in enumerate(record["epochs"][1:], start=1):  # alternate fast and slow epochs: CV ~ 40%
        factor = 0.6 if index % 2 else 1.4
        for rank in epoch["per_rank"]:
            for key in ("time_s", "busy_s", "wait_s", "collective_transfer_s", "transfer_s", "compute_s",
                        "communication_s"):
                rank[key] *= factor
            rank["evidence"] = {**rank["evidence"], "wall_s": rank["time_s"], "cpu_s": 0.97 * rank["time_s"]}
        for key in ("time_s", "busy_s", "wait_s", "collective_transfer_s", "transfer_s", "compute_s",
                    "communication_s", "critical_path_s"):
            epoch[key] *= factor
        epoch["throughput"] = epoch["work"] / epoch["time_s"]
    _with_record_board(tmp_path, record, "unstable")
    (entry,) = load_board(tmp_path / "board")
    assert entry.official is None and "unstable" in entry.unofficial_reason
    assert f"bound {MAX_CV:.0%}" in entry.unofficial_reason


def test_spread_gives_median_quartiles_and_coefficient_of_variation():
    spread = Spread.of([10.0, 12.0, 11.0, 9.0, 13.0])
    assert spread.median == 11.0 and spread.minimum == 9.0 and spread.maximum == 13.0
    assert spread.q1 == 10.0 and spread.q3 == 12.0 and spread.iqr == 2.0
    assert spread.cv == pytest.approx(1.5811 / 11.0, rel=1e-3)


def test_more_ranks_times_threads_than_cores_is_a_warning_in_the_record():
    record = make_record(epochs=6, world_size=2)
    for epoch in record["epochs"]:
        for rank in epoch["per_rank"]:
            rank["evidence"]["threads"] = 2  # 2 ranks x 2 threads on the fixture's 2 cores
    summary = timing_summary(record["epochs"], 2)
    assert summary["threads_per_rank"] == 2 and any("2 ranks x 2 threads > 2 cores" in w for w in summary["warnings"])


# --------------------------------------------------------------------------- real runs

def test_a_run_beside_cpu_burners_is_flagged_contended_and_refused_on_the_throughput_track(timing_store, tmp_path):
    burners = 2 * cores()  # the run's one thread gets about 1/(2 + 1/cores) of a core: far below the bounds
    stop_at = time.monotonic() + 600
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_burn, args=(stop_at,), daemon=True) for _ in range(burners)]
    for proc in procs:
        proc.start()
    try:
        time.sleep(0.2)  # every burner running before the first epoch
        record = _run_single(timing_store, tmp_path / "runs")
    finally:
        for proc in procs:
            proc.terminate()
            proc.join()
    timing = record["timing"]
    assert timing["threads_per_rank"] == 1
    assert timing["contended"] is True, f"a run beside {burners} burners was not flagged: {timing}"
    assert timing["cpu_share"] < MIN_CPU_SHARE or timing["run_delay_share"] > MAX_RUN_DELAY_SHARE
    record["dataset"] = official_dataset()  # file it as an official-store row: contention alone keeps it unranked
    record["epochs"] = [{**e, "work": min(e["work"], record["dataset"]["num_edges"])} for e in record["epochs"]]
    for epoch in record["epochs"]:
        epoch["throughput"] = epoch["work"] / epoch["time_s"]
    _with_record_board(tmp_path, record, "contended")
    (entry,) = load_board(tmp_path / "board")
    assert entry.official is None and entry.unofficial_reason.startswith("contended")


def test_a_quiet_one_thread_run_is_not_flagged(timing_store, tmp_path):
    busy, _ = host_load(1.0)
    if busy > 0.25:
        pytest.skip(f"the host is {busy:.0%} busy with other work: a quiet run cannot be measured now")
    record = _run_single(timing_store, tmp_path / "runs")
    timing = record["timing"]
    if timing["contended"]:
        after, _ = host_load(1.0)  # the run's epochs are short: a tenant starting meanwhile shows here too
        if (timing["others_share"] or 0) > 0.25 or after > 0.25:
            pytest.skip(f"other tenants took the host during the run ({after:.0%} busy after): {timing['reasons']}")
    assert timing["contended"] is False, timing["reasons"]
    assert timing["cpu_share"] >= MIN_CPU_SHARE


def test_a_rank_waiting_for_a_slower_one_counts_wait_not_transfer(esdg_store, monkeypatch):
    extra = 0.1  # large beside what a loaded 2-core host's scheduler adds to a collective
    monkeypatch.setenv("DGBENCH_TEST_EXTRA_WORK", f"1:{extra}")  # rank 1 works 100 ms more before each collective
    record = run_experiment(RunConfig("snapshot", "tmgcn", esdg_store, epochs=2, nproc=2, threads=1))
    for epoch in record["epochs"]:
        waiting, slow = epoch["per_rank"]
        delayed = extra * waiting["probes"]
        assert waiting["probes"] > 0 and waiting["probes"] == slow["probes"]
        assert waiting["wait_s"] >= 0.8 * delayed, (waiting["wait_s"], delayed)
        assert waiting["collective_transfer_s"] < 0.5 * delayed, "the slower rank's extra work was counted as transfer"
        assert slow["busy_s"] > waiting["busy_s"]  # the extra work is the slow rank's busy time
        for rank in (waiting, slow):
            assert rank["busy_s"] + rank["wait_s"] + rank["collective_transfer_s"] == pytest.approx(rank["time_s"])
        assert epoch["critical_path_s"] == pytest.approx(max(r["busy_s"] + r["collective_transfer_s"]
                                                             for r in epoch["per_rank"]))
        assert epoch["lambda"] == pytest.approx(slow["busy_s"] / waiting["busy_s"])


def test_threads_option_sets_and_records_the_intra_op_threads(esdg_store):
    record = run_experiment(RunConfig("single", "tmgcn", esdg_store, epochs=2, threads=1))
    assert record["timing"]["threads_per_rank"] == 1
    assert all(r["evidence"]["threads"] == 1 for e in record["epochs"] for r in e["per_rank"])
    assert record["hyperparameters"]["threads"] == 1


def test_single_and_snapshot_at_one_rank_do_the_same_work_and_the_board_ranks_their_median(esdg_store, tmp_path):
    """The mechanism behind "same work, same board median" (the timing itself is benchmarks/
    test_scheme_parity_bench.py): equal work and losses per epoch, and the board's figure is the median of
    the timed epochs the record's spread describes."""
    from dgbench.leaderboard.figures import run_figures
    records = {scheme: run_experiment(RunConfig(scheme, "tmgcn", esdg_store, epochs=6, threads=1, out=tmp_path))
               for scheme in ("single", "snapshot")}
    single, snapshot = records["single"], records["snapshot"]
    assert [e["work"] for e in single["epochs"]] == [e["work"] for e in snapshot["epochs"]]
    assert [e["loss"] for e in single["epochs"]] == pytest.approx([e["loss"] for e in snapshot["epochs"]], abs=1e-6)
    for record in records.values():
        assert record["timing"]["timed_epochs"] == 5
        assert run_figures(record).throughput == pytest.approx(record["timing"]["throughput"]["median"])


def test_a_contended_run_says_so_in_its_summary_and_why_on_the_line_before(tmp_path):
    from dgbench.trainers.cli import _contention_reason, _summary
    record = _contended_copy(make_record(epochs=6, scheme="snapshot", epoch_seconds=0.5))
    record["timing"] = timing_summary(record["epochs"], 1)
    assert _summary(record, tmp_path / "r.json").endswith("CONTENDED")
    assert "not ranked on throughput/scaling" in _contention_reason(record)
    quiet = make_record(epochs=6, scheme="snapshot", epoch_seconds=0.5)
    quiet["timing"] = timing_summary(quiet["epochs"], 1)
    assert "CONTENDED" not in _summary(quiet, tmp_path / "q.json") and _contention_reason(quiet) is None


def test_a_baseline_prints_no_speed_and_no_contention_whatever_the_load(tmp_path):
    """A baseline's epochs process nothing: it ranks on accuracy only, so its closing line has no s/epoch, no
    rate and no CONTENDED, even when its (empty) epochs were timed on a busy host."""
    from dgbench.trainers.cli import _contention_reason, _summary
    record = _contended_copy(make_record(epochs=6, scheme="single", model="persistence", epoch_seconds=0.5))
    for epoch in record["epochs"]:
        epoch["work"] = 0
    record["timing"] = timing_summary(record["epochs"], 1)
    assert record["timing"]["contended"] is True
    line = _summary(record, tmp_path / "b.json")
    assert "CONTENDED" not in line and "s/epoch" not in line and "edges/s" not in line and "test ap" in line
    assert _contention_reason(record) is None
