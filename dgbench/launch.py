"""Starting the ranks of a job: ``--nproc`` local processes, or this rank under an external torchrun.

:func:`launch` runs ``fn(ctx, *args)`` on ``nproc`` ranks (gloo on CPU, NCCL when CUDA is present),
or, when started by an external ``torchrun`` (RANK/WORLD_SIZE set), runs it on this rank only — so
the same program works single-node with ``--nproc`` and multi-node under torchrun.

A job always ends, and ends whole:

* a rank that fails or dies ends the job with one line naming it; a rank stopped (SIGSTOP) longer than
  the collective timeout does too, and every other rank is then terminated (SIGKILL after a short
  grace, which also ends stopped processes), so the launcher returns within the timeout plus seconds;
* SIGINT / SIGTERM to the launcher stop every rank and fail the job (no record is written). The ranks
  ignore SIGINT (a Ctrl-C reaches the whole process group; the launcher decides) and die with the
  launcher (Linux PR_SET_PDEATHSIG), so none is left training as an orphan. A signal that lands inside
  a finaliser (where Python would print "Exception ignored" and drop it) is raised again just after;
* ``nproc`` is bounded by what the machine can hold (memory for each rank's footprint, a few ranks per
  core, one GPU per NCCL rank) unless forced; more ranks than cores runs, with a warning.

Ranks are forked from a fork server (multiprocessing's ``forkserver``) that imported torch and the modules
named with :func:`preload_for_ranks` once (dgbench/fork_server.py), not started as fresh interpreters: a rank
then starts in a fraction of a second instead of seconds. The server is a clean interpreter (not a fork of the
launcher), is started by the first multi-rank launch, serves the launcher's later ones and exits with the
launcher. Each rank takes the launcher's environment as it is at the launch, as a spawned process would.
See docs/python-api.md.
"""
from __future__ import annotations

import ctypes
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

import multiprocessing.forkserver
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dgbench.dist import DEFAULT_TIMEOUT_S, Comm, DistContext, default_backend, init_distributed, shutdown
from dgbench.errors import DgbenchError

# Resident memory of one idle rank (python + torch + a gloo group): 231 MiB measured with torch 2.13
# on CPU; data and model come on top, so this is a floor, and the bound below is the most that can start.
RANK_FOOTPRINT_BYTES = 256 * 2**20
RANKS_PER_CORE = 8  # beyond this, ranks mostly wait for a core: refused unless forced
FORCE_ENV = "DGBENCH_FORCE_NPROC"  # "1": start the ranks asked for, whatever the machine
STOP_GRACE_S = 3.0  # SIGTERM first; SIGKILL for ranks still there (a stopped rank ignores SIGTERM)
PR_SET_PDEATHSIG = 1
FORK_SERVER_PRELOAD = ["dgbench.fork_server"]  # imported once by the server, for every rank it forks
START_METHOD = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
_STOPPING = threading.Event()  # set while ranks are being stopped


class JobInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the launcher."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent(launcher: int) -> None:
    """Linux: this process gets SIGKILL when the launcher dies, however it dies. Its parent is the launcher
    (spawn) or the fork server, which exits with the launcher (_close_the_fork_servers_alive_pipe)."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent or _process_state(launcher) in (None, "Z", "X"):  # died before prctl took effect
        os._exit(1)


def _close_the_fork_servers_alive_pipe() -> None:
    """A process forked by the fork server holds the server's "alive" pipe (for processes it would start
    itself through the server), and the server exits only once every holder closed it: a rank starts none and
    closes it, so that the launcher's death alone ends the server, and with it (PDEATHSIG) its ranks."""
    server = multiprocessing.forkserver._forkserver
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None and getattr(server, "_forkserver_pid", None) is None:  # not the launcher's own end
        os.close(alive)
        server._forkserver_alive_fd = None


def _take_the_launchers_environment(environ: dict[str, str]) -> None:
    """The launcher's environment as it was at the launch, as a spawned rank inherits it: the fork server's
    is the one it started with. What the imports of torch and the like added (and the launcher lacks) stays;
    what the server set for its own imports (dgbench/fork_server.py) goes."""
    server = sys.modules.get("dgbench.fork_server")
    if server is not None:
        for name in (set(server.INHERITED_ENVIRON) | server.SET_FOR_THE_IMPORTS) - set(environ):
            os.environ.pop(name, None)
    os.environ.update(environ)


_result_sent = False  # this rank's result (or error) is on the queue: nothing is left to release
_releasing = False  # the result is being flushed (the queue closed and its feeder thread joined)
_stop_asked: int | None = None  # the signal that asked this rank to stop while it was releasing


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    """SIGTERM in a rank: exit through Python (not the default action), so that multiprocessing releases
    what it holds instead of leaving it to be reported as leaked. Once the result is sent the launcher has it
    (it stops ranks after collecting every result, or after a failure): exit at once, since a SystemExit raised
    inside an exit-time finalizer would print an "Exception ignored" traceback after a successful run.

    While the result is being flushed the stop waits for the flush (the launcher often has the result then, and
    stops the ranks at once): a SystemExit inside the queue's close would leave its feeder thread without its
    end marker, and the exit would wait on that thread until the launcher's SIGKILL, STOP_GRACE_S later."""
    global _stop_asked
    if _result_sent:
        os._exit(128 + signum)
    if _releasing:
        _stop_asked = signum
        return
    sys.exit(128 + signum)


def _blosc_thread_lock() -> None:
    """Give numcodecs' Blosc a thread lock before it makes its default multiprocessing one. That lock only
    guards Blosc's global state among this process's threads, and its semaphore outlives a rank stopped
    after it reported (os._exit skips finalizers): the resource tracker then warns of a leaked semaphore."""
    try:
        import numcodecs.blosc as blosc
    except ImportError:
        return
    if hasattr(blosc, "_MUTEX_IS_INIT") and not blosc._MUTEX_IS_INIT:
        blosc._MUTEX, blosc._MUTEX_IS_INIT = threading.Lock(), True


def _rank_main(rank: int, nproc: int, port: int, backend: str, timeout_s: float, fn: Callable,
               args: tuple, results: Any, launcher: int, environ: dict[str, str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles Ctrl-C and stops every rank
    signal.signal(signal.SIGTERM, _exit_quietly)  # the launcher stopping this rank: exit, releasing the queue
    if sys.platform.startswith("linux"):
        _die_with_parent(launcher)
    _close_the_fork_servers_alive_pipe()
    _take_the_launchers_environment(environ)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // nproc))
    _blosc_thread_lock()
    try:
        ctx = init_distributed(backend, timeout_s)
        value = fn(ctx, *args)
        results.put((rank, "ok", value))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the job
        detail = str(exc) if isinstance(exc, DgbenchError) else traceback.format_exc(limit=6)
        results.put((rank, "error", detail))
    finally:
        global _result_sent, _releasing
        _releasing = True
        results.close()
        results.join_thread()  # flushed: the launcher can read it whatever happens to this process next
        _result_sent = True
        if _stop_asked is not None:
            os._exit(128 + _stop_asked)
        shutdown()


# --------------------------------------------------------------------------- how many ranks

def _available_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_nproc(nproc: int, backend: str, force: bool | None = None) -> str | None:
    """Refuse more ranks than the machine can hold (unless ``force``, default: ${FORCE_ENV}=1); returns a
    warning to print when the ranks outnumber the cores, else None."""
    if force is None:
        force = os.environ.get(FORCE_ENV) == "1"
    cores = _cores()
    limits = [(cores * RANKS_PER_CORE, f"{cores} cores x {RANKS_PER_CORE} ranks per core")]
    memory = _available_memory_bytes()
    if memory is not None:
        limits.append((max(1, memory // RANK_FOOTPRINT_BYTES), f"{memory / 2**30:.1f} GiB available / "
                                                               f"{RANK_FOOTPRINT_BYTES // 2**20} MiB per rank"))
    if backend == "nccl" and torch.cuda.is_available():
        limits.append((torch.cuda.device_count(), "one GPU per NCCL rank"))
    most, why = min(limits)
    if nproc > most and not force:
        raise DgbenchError(f"--nproc {nproc}: this machine holds at most {most} ranks ({why}); "
                           f"set {FORCE_ENV}=1 to start them anyway")
    if nproc > cores:
        return (f"warning: {nproc} ranks on {cores} cores: ranks share cores, so times measure the sharing "
                f"as much as the scheme")
    return None


# --------------------------------------------------------------------------- signals

def restore_default_signals() -> None:
    """Undo an inherited SIGINT/SIGTERM ignore: a script's background job (``dgbench run ... &``) starts
    with SIGINT ignored, and Python then never installs its handler, so a Ctrl-C before the job's own
    handler (or in a rank under an external torchrun) would be dropped. Only an ignore is undone."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, default)


def _in_finalizer(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


@contextmanager
def _signals_end_the_job() -> Iterator[list[int]]:
    """While the job runs, SIGINT/SIGTERM raise JobInterrupted in the main thread; the list collects
    the signals received (so a swallowed one is still seen when the job returns)."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if signum != signal.SIGALRM:
            received.append(signum)
        if not received or _STOPPING.is_set():  # ranks are being stopped: the job fails once they are
            return
        if _in_finalizer(frame):  # an exception raised here would be printed and dropped
            signal.setitimer(signal.ITIMER_REAL, 0.05)  # raise again just after
            return
        raise JobInterrupted(received[0])

    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)
    previous = {signum: signal.signal(signum, handler) for signum in watched}
    try:
        yield received
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, old in previous.items():
            signal.signal(signum, old)


def _interrupted(signum: int, nproc: int) -> DgbenchError:
    return DgbenchError(f"interrupted by {signal.Signals(signum).name}: stopped all {nproc} rank(s); "
                        f"no record was written")


# --------------------------------------------------------------------------- launching

def spawns_ranks(nproc: int) -> bool:
    """Whether :func:`launch` starts ``nproc`` ranks in fresh processes (not this one, not an external
    launcher's): then nothing the calling process built reaches the ranks but what ``args`` pickles."""
    return nproc > 1 and "WORLD_SIZE" not in os.environ


def launch(fn: Callable[..., Any], nproc: int = 1, args: Sequence[Any] = (), backend: str | None = None,
           timeout_s: float = DEFAULT_TIMEOUT_S, force_nproc: bool | None = None) -> list[Any]:
    """Run ``fn(ctx, *args)`` on every rank and return the per-rank results, rank order.

    Under an external launcher (WORLD_SIZE set) this process runs its own rank and the results are
    all-gathered, so every rank returns the same full list, as with ``nproc``. With nproc == 1 it runs
    in this process. Any rank failing raises DgbenchError naming the rank; so does SIGINT/SIGTERM,
    after every rank stopped. ``force_nproc`` lifts the bound on ``nproc`` (:func:`check_nproc`).
    """
    backend = backend or default_backend()
    if "WORLD_SIZE" in os.environ:
        return _run_this_rank(fn, args, backend, timeout_s)
    warning = check_nproc(nproc, backend, force_nproc)
    if warning:
        sys.stderr.write(warning + "\n")
    with _signals_end_the_job() as received:
        try:
            if nproc == 1:
                device = (torch.device("cuda", 0) if backend == "nccl" and torch.cuda.is_available()
                          else torch.device("cpu"))
                results = [fn(DistContext(0, 1, backend, device, Comm(0, 1, device)), *args)]
            else:
                results = _spawn(fn, nproc, tuple(args), backend, timeout_s)
        except JobInterrupted as exc:
            raise _interrupted(exc.signum, nproc) from None
        if received:  # raised where it was swallowed (an "Exception ignored in ..."): still no result
            raise _interrupted(received[0], nproc)
    return results


def _run_this_rank(fn: Callable[..., Any], args: Sequence[Any], backend: str, timeout_s: float) -> list[Any]:
    restore_default_signals()  # a rank of an external torchrun started from a script's background job
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


def preload_for_ranks(*modules: str) -> None:
    """Modules every rank of this process's launches imports: the fork server imports them once, when it
    starts (at the first multi-rank launch; a server already running is not changed). Only modules whose
    import starts no thread (dgbench/fork_server.py says why and which do)."""
    FORK_SERVER_PRELOAD.extend(m for m in modules if m not in FORK_SERVER_PRELOAD)


def _rank_context() -> Any:
    """The multiprocessing context ranks start from: the fork server where the platform has one."""
    mp_ctx = mp.get_context(START_METHOD)
    if START_METHOD == "forkserver":
        mp_ctx.set_forkserver_preload(FORK_SERVER_PRELOAD)  # used when the server starts (the first launch)
    return mp_ctx


def _spawn(fn: Callable[..., Any], nproc: int, args: tuple, backend: str, timeout_s: float) -> list[Any]:
    mp_ctx = _rank_context()
    results = mp_ctx.Queue()
    port = _free_port()
    environ = dict(os.environ)
    procs = [mp_ctx.Process(target=_rank_main, args=(r, nproc, port, backend, timeout_s, fn, args, results,
                                                     os.getpid(), environ))
             for r in range(nproc)]
    try:
        for p in procs:
            p.start()
        collected, failure = _collect(procs, results, timeout_s)
    finally:  # success, failure, or an interrupt: no rank outlives the launch
        _stop(procs)
    if failure is not None:
        raise DgbenchError(f"distributed run failed on rank {failure[0]}: {failure[1].strip().splitlines()[-1]}"
                           if failure[0] >= 0 else failure[1])
    return [collected[r] for r in range(nproc)]


def _collect(procs: list, results: Any, timeout_s: float) -> tuple[dict[int, Any], tuple[int, str] | None]:
    """Every rank's result, or the first failure. No deadline on the whole job (a long healthy run must
    finish): a hung collective fails its rank within timeout_s through the process group, that rank's
    report ends the job, and a rank that cannot report (dead, or stopped) is noticed here."""
    collected: dict[int, Any] = {}
    silent_since: dict[int, float] = {}
    stopped_since: dict[int, float] = {}
    while len(collected) < len(procs):
        try:
            rank, status, value = results.get(timeout=0.5)
        except queue.Empty:
            failure = _rank_gone(procs, collected, silent_since) or _rank_stopped(procs, stopped_since, timeout_s)
            if failure is not None:
                return collected, failure
            continue
        if status == "ok":
            collected[rank] = value
        else:
            return collected, _root_cause(procs, collected, (rank, value))
    return collected, None


def _stop(procs: list, grace_s: float = STOP_GRACE_S) -> None:
    """End every rank still running: SIGTERM, then SIGKILL after ``grace_s``; reap them all. A signal
    arriving meanwhile is only recorded (it must not cut this short), and fails the job afterwards."""
    _STOPPING.set()
    try:
        alive = [p for p in procs if p.pid is not None and p.is_alive()]
        for p in alive:
            p.terminate()
        until = time.monotonic() + grace_s
        for p in alive:
            p.join(timeout=max(0.0, until - time.monotonic()))
        for p in alive:
            if p.is_alive():
                p.kill()  # SIGKILL ends a stopped process too
        for p in procs:
            if p.pid is not None:
                p.join(timeout=10)
    finally:
        _STOPPING.clear()


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


def _rank_stopped(procs: list, stopped_since: dict[int, float], timeout_s: float) -> tuple[int, str] | None:
    """A rank stopped (SIGSTOP, SIGTSTP) longer than the collective timeout: its peers may be waiting
    where no collective times out (e.g. for rank 0's setup), so the launcher ends the job itself."""
    now = time.monotonic()
    for rank, proc in enumerate(procs):
        if proc.pid is None or _process_state(proc.pid) != "T":
            stopped_since.pop(rank, None)
            continue
        if now - stopped_since.setdefault(rank, now) > timeout_s:
            return rank, f"rank {rank} has been stopped (SIGSTOP) for more than the {timeout_s:g} s timeout"
    return None


def _process_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (R, S, T, Z...), None where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _root_cause(procs: list, collected: dict[int, Any], reported: tuple[int, str],
                wait_s: float = 2.0) -> tuple[int, str]:
    """A rank that crashed makes its peers report a broken connection: name the crashed one instead."""
    until = time.monotonic() + wait_s
    peer = reported[1].strip().splitlines()[-1] if reported[1].strip() else "an error"
    while True:
        crashed = [r for r, p in enumerate(procs) if r not in collected and r != reported[0]
                   and not p.is_alive() and p.exitcode not in (0, None)]
        if crashed:
            return crashed[0], (f"rank {crashed[0]} exited with code {procs[crashed[0]].exitcode} without "
                                f"reporting (rank {reported[0]} then saw: {peer[:200]})")
        stopped = [r for r, p in enumerate(procs) if r != reported[0] and p.pid is not None
                   and _process_state(p.pid) == "T"]
        if stopped:
            return stopped[0], (f"rank {stopped[0]} is stopped (SIGSTOP) and stalled the job "
                                f"(rank {reported[0]} then saw: {peer[:200]})")
        if time.monotonic() > until:
            return reported
        time.sleep(0.1)


restore_default_signals()  # when loaded, i.e. at the start of every command that launches a job
