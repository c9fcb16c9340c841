"""dist.launch: a long healthy job finishes, and a rank that fails ends the job with an error naming it."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import dgbench.launch as launch_module
import dgbench.trainers.experiment  # noqa: F401 - names the modules its ranks import for the fork server
from dgbench.dist import DistContext, from_main
from dgbench.launch import launch
from dgbench.errors import DgbenchError


def _slow_but_healthy(ctx: DistContext, seconds: float) -> int:
    dist.barrier()
    time.sleep(seconds)  # longer than 4 x the collective timeout, with no collective pending
    dist.barrier()
    return ctx.rank


def _rank_one_crashes(ctx: DistContext) -> int:
    if ctx.rank == 1:
        os._exit(3)  # dies without reporting, as a segfault or an OOM kill would
    dist.barrier()
    return ctx.rank


def _rank_one_raises(ctx: DistContext) -> int:
    if ctx.rank == 1:
        raise DgbenchError("store shard 1 is unreadable")
    dist.barrier()
    return ctx.rank


def test_a_job_longer_than_the_collective_timeout_finishes():
    assert launch(_slow_but_healthy, 2, (6.0,), timeout_s=1.5) == [0, 1]


def test_a_crashed_rank_ends_the_job_with_its_exit_code():
    started = time.monotonic()
    with pytest.raises(DgbenchError, match="rank 1 exited with code 3"):
        launch(_rank_one_crashes, 2, timeout_s=5)
    assert time.monotonic() - started < 60


def test_a_failing_rank_is_named_with_its_error():
    with pytest.raises(DgbenchError, match="failed on rank 1: store shard 1 is unreadable"):
        launch(_rank_one_raises, 2, timeout_s=5)


def _slow_setup_on_main(ctx: DistContext, seconds: float) -> bytes:
    def partition() -> bytes:
        time.sleep(seconds)  # a one-off setup step longer than the collective timeout
        return b"owners\n\x00\x01"
    shared = from_main(ctx, "test-setup", partition)
    dist.barrier()
    return shared


def test_rank_zero_setup_may_outlast_the_collective_timeout():
    assert launch(_slow_setup_on_main, 2, (5.0,), timeout_s=1.5) == [b"owners\n\x00\x01"] * 2


def _two_setups(ctx: DistContext) -> list[bytes]:
    return [from_main(ctx, "owners", lambda: b"first"), from_main(ctx, "owners", lambda: b"second")]


def test_each_setup_call_gets_its_own_value():
    # two runs in one launch (run_experiments) partition two stores: the second must not read the first's
    assert launch(_two_setups, 2) == [[b"first", b"second"]] * 2


def test_control_exchanges_count_as_time_but_not_volume():
    from dgbench.dist import Comm
    comm = Comm(0, 2, torch.device("cpu"))
    comm._count("counts", elements=1, element_size=8, seconds=0.25)  # a rank waiting for a slower one
    comm._count("dispatch", elements=100, element_size=4, seconds=0.05)
    total = comm.totals()
    assert total.seconds == pytest.approx(0.30)
    assert (total.bytes, total.elements, total.calls) == (400, 100, 1)


def _environment_and_server(ctx: DistContext, name: str) -> dict:
    parent = Path(f"/proc/{os.getppid()}")
    return {"value": os.environ.get(name), "forked_from_the_server": "dgbench.fork_server" in sys.modules,
            "server_threads": len(list((parent / "task").iterdir())) if parent.is_dir() else None,
            "server_imported_pyarrow": parent.is_dir() and "libarrow" in (parent / "maps").read_text()}


def test_each_launch_gives_its_ranks_the_launchers_environment_of_that_moment(monkeypatch):
    # the fork server keeps the environment it started with; ranks take the launcher's, as spawned ones do
    name = "DGBENCH_TEST_LAUNCH_ENV"
    for value in ("first", "second", None):
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)
        assert [rank["value"] for rank in launch(_environment_and_server, 2, (name,))] == [value] * 2


@pytest.mark.skipif(launch_module.START_METHOD != "forkserver" or not sys.platform.startswith("linux"),
                    reason="ranks fork from a server where multiprocessing has one (Linux /proc read here)")
def test_ranks_fork_from_a_warm_server_that_runs_no_other_thread(monkeypatch):
    # a fork copies the forking thread alone: a thread of the server holding a lock would leave it held. The
    # trainers (imported above) name their modules for the server, pyarrow's among them, whose allocator would
    # start a thread unless the server's own setting (not the ranks') turns it off
    arrow_jemalloc_conf = "JE_ARROW_MALLOC_CONF"  # set by dgbench/fork_server.py (importing it here would set it)
    monkeypatch.delenv(arrow_jemalloc_conf, raising=False)
    for rank in launch(_environment_and_server, 2, (arrow_jemalloc_conf,)):
        assert rank["forked_from_the_server"] and rank["server_imported_pyarrow"]
        assert rank["server_threads"] == 1 and rank["value"] is None


def _rank(ctx: DistContext) -> int:
    return ctx.rank


def test_ranks_stopped_after_reporting_exit_when_asked_not_after_the_kill(monkeypatch):
    # the launcher stops the ranks as soon as it has every result, often while a rank still flushes its own: a
    # SystemExit raised there left the queue's feeder thread waiting, and the rank's exit on it until SIGKILL
    exit_codes: list[int | None] = []
    stop = launch_module._stop

    def stop_and_record(procs: list, *args: Any) -> None:
        stop(procs, *args)
        exit_codes.extend(p.exitcode for p in procs)

    monkeypatch.setattr(launch_module, "_stop", stop_and_record)
    for _ in range(12):  # one launch in four was killed before
        assert launch(_rank, 2) == [0, 1]
    assert -signal.SIGKILL not in exit_codes, exit_codes
