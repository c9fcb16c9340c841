"""Starting the ranks of a job: ``--nproc`` local processes, or this rank under an external torchrun.

:func:`launch` runs ``fn(ctx, *args)`` on ``nproc`` ranks (gloo on CPU, NCCL when CUDA is present),
or, when started by an external ``torchrun`` (RANK/WORLD_SIZE set), runs it on this rank only — so
the same program works single-node with ``--nproc`` and multi-node under torchrun. A rank that fails
or dies ends the job with one line naming it.
"""
from __future__ import annotations

import os
import queue
import socket
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dgbench.dist import DEFAULT_TIMEOUT_S, Comm, DistContext, default_backend, init_distributed, shutdown
from dgbench.errors import DgbenchError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, nproc: int, port: int, backend: str, timeout_s: float, fn: Callable,
               args: tuple, results: Any) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // nproc))
    try:
        ctx = init_distributed(backend, timeout_s)
        value = fn(ctx, *args)
        results.put((rank, "ok", value))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the job
        detail = str(exc) if isinstance(exc, DgbenchError) else traceback.format_exc(limit=6)
        results.put((rank, "error", detail))
    finally:
        shutdown()


def launch(fn: Callable[..., Any], nproc: int = 1, args: Sequence[Any] = (), backend: str | None = None,
           timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Any]:
    """Run ``fn(ctx, *args)`` on every rank and return the per-rank results, rank order.

    Under an external launcher (WORLD_SIZE set) this process runs its own rank and the results are
    all-gathered, so every rank returns the same full list, as with ``nproc``. With nproc == 1 it runs
    in this process. Any rank failing raises DgbenchError naming the rank.
    """
    backend = backend or default_backend()
    if "WORLD_SIZE" in os.environ:
        ctx = init_distributed(backend, timeout_s)
        try:
            result = fn(ctx, *args)
            if ctx.world_size == 1:
                return [result]
            every: list[Any] = [None] * ctx.world_size
            dist.all_gather_object(every, result)
            return every
        finally:
            shutdown()
    if nproc == 1:
        device = torch.device("cuda", 0) if backend == "nccl" and torch.cuda.is_available() else torch.device("cpu")
        return [fn(DistContext(0, 1, backend, device, Comm(0, 1, device)), *args)]
    mp_ctx = mp.get_context("spawn")
    results = mp_ctx.Queue()
    port = _free_port()
    procs = [mp_ctx.Process(target=_rank_main, args=(r, nproc, port, backend, timeout_s, fn, tuple(args), results))
             for r in range(nproc)]
    for p in procs:
        p.start()
    collected: dict[int, Any] = {}
    failure: tuple[int, str] | None = None
    # No deadline on the whole job (a long healthy run must finish): a hung collective fails its rank
    # within timeout_s through the process group, and that rank's report ends the job.
    silent_since: dict[int, float] = {}
    while len(collected) < nproc and failure is None:
        try:
            rank, status, value = results.get(timeout=1.0)
        except queue.Empty:
            failure = _rank_gone(procs, collected, silent_since)
            continue
        if status == "ok":
            collected[rank] = value
        else:
            failure = _root_cause(procs, collected, (rank, value))
    for p in procs:
        if failure is not None and p.is_alive():
            p.terminate()
        p.join(timeout=30)
    if failure is not None:
        raise DgbenchError(f"distributed run failed on rank {failure[0]}: {failure[1].strip().splitlines()[-1]}"
                           if failure[0] >= 0 else failure[1])
    return [collected[r] for r in range(nproc)]


def _rank_gone(procs: list, collected: dict[int, Any], silent_since: dict[int, float],
               grace_s: float = 10.0) -> tuple[int, str] | None:
    """A rank that died without reporting: crashed (non-zero exit), or exited 0 and stayed silent past
    ``grace_s`` (its result, if any, would have reached the queue by then)."""
    for rank, proc in enumerate(procs):
        if rank in collected or proc.is_alive():
            continue
        if proc.exitcode != 0:
            return rank, f"rank {rank} exited with code {proc.exitcode} without reporting"
        if time.monotonic() - silent_since.setdefault(rank, time.monotonic()) > grace_s:
            return rank, f"rank {rank} exited without reporting a result"
    return None


def _root_cause(procs: list, collected: dict[int, Any], reported: tuple[int, str],
                wait_s: float = 2.0) -> tuple[int, str]:
    """A rank that crashed makes its peers report a broken connection: name the crashed one instead."""
    until = time.monotonic() + wait_s
    while True:
        crashed = [r for r, p in enumerate(procs) if r not in collected and r != reported[0]
                   and not p.is_alive() and p.exitcode not in (0, None)]
        if crashed:
            peer = reported[1].strip().splitlines()[-1] if reported[1].strip() else "an error"
            return crashed[0], (f"rank {crashed[0]} exited with code {procs[crashed[0]].exitcode} without "
                                f"reporting (rank {reported[0]} then saw: {peer[:200]})")
        if time.monotonic() > until:
            return reported
        time.sleep(0.1)
