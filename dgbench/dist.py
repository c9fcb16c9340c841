"""torch.distributed plumbing shared by every scheme: start ranks, count what collectives move.

* :func:`init_distributed` joins the process group torchrun-style environment variables describe
  (:mod:`dgbench.launch` starts the ranks).
* :class:`Comm` wraps the collectives dgbench uses and counts bytes and elements actually sent to
  other ranks (self-sends excluded) and the seconds spent, per tag. Collectives with uneven sizes go
  only through ``all_to_all_single`` (list-form ``all_to_all``/``all_gather`` fail on gloo).
* :func:`all_to_all_autograd` is an all-to-all whose backward is the reverse all-to-all.
* :class:`PhaseTimer` splits wall time into transfer / compute / communication.

Waiting apart from transfer: in a job of several ranks every blocking counted collective is preceded
by an *arrival probe* (a barrier of the same group), so its seconds split into ``wait_seconds`` (until
the last rank arrived: load imbalance, a slower peer) and the transfer after it. The probe's own
latency is counted too (``probe_floor_seconds``: its fastest call, a bound on what one probe costs).
``DGBENCH_ARRIVAL_PROBE=0`` turns it off (then every second counts as transfer); ``Comm.without_probes()``
for a block of code (Sven's timing of one collective's fixed cost). Deferred waits
(``*_async``) are not probed: a barrier at their start would undo the overlap they exist for.
docs/result-record.md ("Busy, wait and transfer") describes the figures.
"""
from __future__ import annotations

import datetime
import io
import itertools
import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from dgbench.errors import DgbenchError
from dgbench.memory import peak_rss_bytes

DEFAULT_TIMEOUT_S = 300.0
SETUP_TIMEOUT_S = 24 * 3600.0  # how long ranks wait for rank 0's one-off setup work (e.g. partitioning)
DRY_RUN_BACKEND = "dry-run"  # dgbench.trainers.projection's dry runs: a world that counts collectives and moves nothing
ARRIVAL_PROBE_ENV = "DGBENCH_ARRIVAL_PROBE"  # "0": no barrier in front of counted collectives
EXTRA_WORK_ENV = "DGBENCH_TEST_EXTRA_WORK"  # tests only: "RANK:SECONDS", that rank sleeps before each collective


def arrival_probe_enabled() -> bool:
    return os.environ.get(ARRIVAL_PROBE_ENV, "1") != "0"


def _test_extra_work(rank: int) -> float:
    """Seconds of made-up work rank ``rank`` does before each probed collective (tests of the wait split)."""
    value = os.environ.get(EXTRA_WORK_ENV)
    if not value:
        return 0.0
    who, _, seconds = value.partition(":")
    return float(seconds) if who.strip() == str(rank) else 0.0


@dataclass
class DistContext:
    """Who this process is in the job, and where it computes."""

    rank: int
    world_size: int
    backend: str
    device: torch.device
    comm: "Comm"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def _device_for(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_distributed(backend: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> DistContext:
    """Join the process group described by torchrun-style environment variables.

    Without RANK/WORLD_SIZE this is a world of one with no process group (collectives are local).
    The timeout makes a dead rank fail the job with an error instead of hanging it.
    """
    backend = backend or default_backend()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    device = _device_for(backend, local_rank) if (backend == "nccl" and torch.cuda.is_available()) \
        else torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return DistContext(rank, world_size, backend, device, Comm(rank, world_size, device))


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


_FROM_MAIN_CALLS = itertools.count()


def from_main(ctx: DistContext, key: str, compute: Callable[[], bytes],
              timeout_s: float = SETUP_TIMEOUT_S) -> bytes:
    """Rank 0 runs ``compute`` once and every rank gets its bytes.

    The bytes go through the process group's key-value store, not a collective: a setup step such as a
    hypergraph partitioning can outlast the collective timeout, and a rank waiting inside a collective
    would fail the job. If rank 0 fails instead, its launcher (``launch`` or torchrun) ends the job.
    """
    if ctx.world_size == 1:
        return compute()
    store = dist.distributed_c10d._get_default_store()
    # every rank makes the same calls in the same order, so a call number keeps runs apart
    name = f"dgbench/from_main/{next(_FROM_MAIN_CALLS)}/{key}"
    if ctx.is_main:
        value = compute()
        store.set(name, value)  # type: ignore[arg-type]  # torch's stub says str; bytes are stored as is
        return value
    store.wait([name], datetime.timedelta(seconds=timeout_s))
    return store.get(name)


def share_from_main(ctx: DistContext, key: str, compute: Callable[[], Any],
                    timeout_s: float = SETUP_TIMEOUT_S) -> Any:
    """:func:`from_main` for a value of plain data (dicts, lists, strings, numbers, numpy arrays), sent
    in :func:`encode_plain`'s format: the job's key-value store is open to every local user, so nothing
    read from it may execute (never a pickle). Every rank, rank 0 included, gets the decoded value."""
    data = from_main(ctx, key, lambda: encode_plain(compute()), timeout_s)
    try:
        return decode_plain(data)
    except (ValueError, KeyError, OSError) as exc:
        raise DgbenchError(f"rank {ctx.rank}: '{key}' read from the job store is not plain data ({exc}); "
                           f"another process may have written the job's store") from exc


_ARRAY, _HEADER = "__array__", "__header__"


def encode_plain(value: Any) -> bytes:
    """Plain data as bytes that cannot execute when read: an .npz (no object arrays) of the arrays and a
    JSON header of the rest. Tuples come back as lists, numpy scalars as Python numbers."""
    arrays: dict[str, np.ndarray] = {}

    def plain(item: Any) -> Any:
        if isinstance(item, np.ndarray):
            if item.dtype.hasobject:
                raise TypeError(f"an object array ({item.dtype}) cannot cross the job store")
            arrays[f"a{len(arrays)}"] = item
            return {_ARRAY: f"a{len(arrays) - 1}"}
        if isinstance(item, np.generic):
            return item.item()
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                raise TypeError("only string keys cross the job store")
            return {k: plain(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [plain(v) for v in item]
        if item is None or isinstance(item, (str, bool, int, float)):
            return item
        raise TypeError(f"a {type(item).__name__} cannot cross the job store (plain data only)")

    header = json.dumps(plain(value)).encode()
    buffer = io.BytesIO()
    np.savez(buffer, **{_HEADER: np.frombuffer(header, np.uint8)}, **arrays)
    return buffer.getvalue()


def decode_plain(data: bytes) -> Any:
    """The value :func:`encode_plain` wrote; ValueError for anything else (a pickle is never loaded)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as stored:
        arrays = {name: stored[name] for name in stored.files}

    def restore(item: Any) -> Any:
        if isinstance(item, dict):
            if set(item) == {_ARRAY}:
                return arrays[item[_ARRAY]]
            return {k: restore(v) for k, v in item.items()}
        if isinstance(item, list):
            return [restore(v) for v in item]
        return item

    return restore(json.loads(arrays.pop(_HEADER).tobytes()))


@dataclass
class CommStats:
    """Totals for one tag: calls, bytes and elements sent to other ranks, seconds spent (wall clock), and
    the process CPU seconds spent in those calls (all threads: gloo's copies and socket work; a rank blocked
    on a slower peer spends wall seconds but little CPU). ``wait_seconds`` is the part of ``seconds`` spent
    in the arrival probe (waiting for the last rank); the rest is transfer."""

    calls: int = 0
    bytes: int = 0
    elements: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    wait_seconds: float = 0.0
    probes: int = 0
    probe_floor_seconds: float = 0.0  # the fastest probe seen under this tag (0 when none)

    @property
    def transfer_seconds(self) -> float:
        return max(0.0, self.seconds - self.wait_seconds)

    def as_dict(self) -> dict[str, float]:
        return {"calls": self.calls, "bytes": self.bytes, "elements": self.elements, "seconds": self.seconds,
                "cpu_seconds": self.cpu_seconds, "wait_seconds": self.wait_seconds,
                "transfer_seconds": self.transfer_seconds, "probes": self.probes,
                "probe_floor_seconds": self.probe_floor_seconds}


@dataclass
class Comm:
    """Counted collectives over a process group (default: the whole job). In a world of one they are
    local copies and count nothing. ``rank`` and ``world_size`` are this process's in the group; the
    comms of a :class:`Mesh`'s axes share the job comm's ``stats``, so every byte is counted once."""

    rank: int
    world_size: int
    device: torch.device
    stats: dict[str, CommStats] = field(default_factory=lambda: defaultdict(CommStats))
    group: Any = None  # a torch ProcessGroup; None = the default (whole job)
    probing: bool = True  # arrival probes in front of blocking collectives (off inside without_probes)

    def _sync(self) -> None:
        # The current stream only: a device-wide sync would also wait for collectives in flight on
        # NCCL's streams, and a deferred wait() timed after it would report ~0 exposed seconds.
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()

    @contextmanager
    def _timed(self, tag: str, elements: int, element_size: int, probe: bool = True) -> Iterator[None]:
        self._sync()
        extra = _test_extra_work(self.rank) if probe and self.world_size > 1 else 0.0
        if extra:
            time.sleep(extra)
        start, cpu = time.perf_counter(), time.process_time()
        waited = self._arrival_probe() if probe else None
        yield
        self._sync()
        self._count(tag, elements, element_size, time.perf_counter() - start, time.process_time() - cpu, waited)

    @contextmanager
    def without_probes(self) -> Iterator[None]:
        """Collectives without the arrival probe, e.g. to time one collective's own fixed cost."""
        before, self.probing = self.probing, False
        try:
            yield
        finally:
            self.probing = before

    def _arrival_probe(self) -> float | None:
        """Block until every rank of the group arrived; the seconds waited (None when not probed)."""
        if self.world_size == 1 or not self.probing or not arrival_probe_enabled() or not dist.is_initialized():
            return None
        start = time.perf_counter()
        dist.barrier(group=self.group)
        return time.perf_counter() - start

    def _count(self, tag: str, elements: int, element_size: int, seconds: float, cpu_seconds: float = 0.0,
               waited: float | None = None) -> None:
        s = self.stats[tag]
        s.calls += 1
        s.elements += int(elements)
        s.bytes += int(elements) * element_size
        s.seconds += seconds
        s.cpu_seconds += cpu_seconds
        if waited is not None:
            s.wait_seconds += waited
            s.probe_floor_seconds = waited if s.probes == 0 else min(s.probe_floor_seconds, waited)
            s.probes += 1

    def all_to_all_single(self, tensor: torch.Tensor, send_splits: Sequence[int], recv_splits: Sequence[int],
                          tag: str = "all_to_all") -> torch.Tensor:
        """Send rows ``send_splits[q]`` to rank q; returns the received rows, source-rank order.

        Counted: rows sent to other ranks times the row width (the self part stays local).
        """
        send_splits, recv_splits = [int(x) for x in send_splits], [int(x) for x in recv_splits]
        row = math.prod(tensor.shape[1:])
        remote_rows = sum(send_splits) - send_splits[self.rank]
        out = tensor.new_empty((sum(recv_splits), *tensor.shape[1:]))
        with self._timed(tag, remote_rows * row, tensor.element_size()):
            if self.world_size == 1:
                out.copy_(tensor)
            else:
                dist.all_to_all_single(out, tensor.contiguous(), recv_splits, send_splits, group=self.group)
        return out

    def all_reduce(self, tensor: torch.Tensor, tag: str = "all_reduce", op=None) -> torch.Tensor:
        """In-place sum (default) across ranks. Counted as the payload each rank contributes."""
        with self._timed(tag, tensor.numel() if self.world_size > 1 else 0, tensor.element_size()):
            if self.world_size > 1:
                dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM, group=self.group)
        return tensor

    def all_gather_uneven(self, tensor: torch.Tensor, tag: str = "all_gather") -> torch.Tensor:
        """Every rank's rows (any count per rank) on every rank, concatenated in rank order.

        One count exchange and one all-to-all (gloo has no uneven all-gather); counted as the rows
        sent to the other ranks."""
        if self.world_size == 1:
            return tensor
        rows = tensor.shape[0]
        counts = self.exchange_counts([rows] * self.world_size)
        return self.all_to_all_single(tensor.repeat(self.world_size, *([1] * (tensor.dim() - 1))),
                                      [rows] * self.world_size, counts, tag=tag)

    def _deferred(self, tag: str, elements: int, element_size: int, work: Any) -> Callable[[], None]:
        """A wait() that blocks on ``work`` and counts only the seconds spent blocked (exposed time)."""
        def wait() -> None:
            self._sync()
            start, cpu = time.perf_counter(), time.process_time()
            if work is not None:
                work.wait()
            self._sync()
            self._count(tag, elements, element_size, time.perf_counter() - start, time.process_time() - cpu)
        return wait

    def all_to_all_single_async(self, tensor: torch.Tensor, send_splits: Sequence[int],
                                recv_splits: Sequence[int], tag: str = "all_to_all"
                                ) -> tuple[torch.Tensor, Callable[[], None]]:
        """Start an all-to-all; returns (output, wait). ``output`` is valid once ``wait()`` returned.
        Counted like :meth:`all_to_all_single`; its seconds are only those ``wait`` blocked."""
        send_splits, recv_splits = [int(x) for x in send_splits], [int(x) for x in recv_splits]
        row = math.prod(tensor.shape[1:])
        remote_rows = sum(send_splits) - send_splits[self.rank]
        out = tensor.new_empty((sum(recv_splits), *tensor.shape[1:]))
        work = None
        if self.world_size == 1:
            out.copy_(tensor)
        else:
            work = dist.all_to_all_single(out, tensor.contiguous(), recv_splits, send_splits, async_op=True,
                                           group=self.group)
        return out, self._deferred(tag, remote_rows * row, tensor.element_size(), work)

    def all_reduce_async(self, tensor: torch.Tensor, tag: str = "all_reduce") -> Callable[[], None]:
        """Start an in-place sum across ranks; ``tensor`` holds the sum once the returned wait() returned."""
        work = dist.all_reduce(tensor, async_op=True, group=self.group) if self.world_size > 1 else None
        return self._deferred(tag, tensor.numel() if self.world_size > 1 else 0, tensor.element_size(), work)

    def send_async(self, tensor: torch.Tensor, peer: int, tag: str = "send") -> Callable[[], None]:
        """Start sending ``tensor`` to rank ``peer`` of this group (point to point); the returned
        wait() blocks until the buffer may be reused. Counted like the collectives: elements sent to
        another rank (BLAD's hand-over between the two processes of a device, §5.2.1)."""
        if peer == self.rank or self.world_size == 1:
            raise ValueError(f"send to rank {peer} from rank {self.rank} of a group of {self.world_size}")
        payload = tensor.contiguous()
        work = dist.isend(payload, group=self.group, group_dst=peer) if self.group is not None \
            else dist.isend(payload, dst=peer)
        return self._deferred(tag, payload.numel(), payload.element_size(), work)

    def recv(self, out: torch.Tensor, peer: int, tag: str = "send") -> torch.Tensor:
        """Receive into ``out`` from rank ``peer`` of this group (blocking). Not counted: the sender
        counts what it sends; the seconds spent waiting are counted under ``tag:wait``."""
        if peer == self.rank or self.world_size == 1:
            raise ValueError(f"receive from rank {peer} at rank {self.rank} of a group of {self.world_size}")
        with self._timed(f"{tag}:wait", 0, out.element_size(), probe=False):  # point to point: no group barrier
            if self.group is not None:
                dist.recv(out, group=self.group, group_src=peer)
            else:
                dist.recv(out, src=peer)
        return out

    def exchange_counts(self, send_counts: Sequence[int], tag: str = "counts") -> list[int]:
        """Tell every rank how many rows it will receive from us (an all-to-all of one int each)."""
        counts = torch.tensor([int(c) for c in send_counts], dtype=torch.int64, device=self.device)
        if self.world_size == 1:
            return counts.tolist()
        received = self.all_to_all_single(counts.view(-1, 1), [1] * self.world_size, [1] * self.world_size, tag)
        return received.view(-1).tolist()

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier(group=self.group)

    def totals(self, control: Sequence[str] = ("counts",)) -> CommStats:
        """Every tag's seconds (time blocked in a collective is communication time, and the small
        row-count exchanges are where a rank waits for slower ones); calls, bytes and elements leave
        out the ``control`` tags, so volumes compare with the schemes' formulas."""
        total = CommStats()
        for tag, s in self.stats.items():
            total.seconds += s.seconds
            total.wait_seconds += s.wait_seconds
            total.probes += s.probes
            if s.probes:  # the fastest probe of any tag: what one probe costs when nobody waits
                floor = s.probe_floor_seconds
                total.probe_floor_seconds = floor if total.probe_floor_seconds == 0 else min(total.probe_floor_seconds,
                                                                                              floor)
            if tag in control:
                continue
            total.calls += s.calls
            total.bytes += s.bytes
            total.elements += s.elements
        return total

    def snapshot(self) -> dict[str, dict[str, float]]:
        return {tag: s.as_dict() for tag, s in self.stats.items()}

    def reset(self) -> None:
        self.stats.clear()

    def axis(self, rank: int, size: int) -> "Comm":
        """This comm's kind over a sub-group of ``size`` ranks in a dry run's counting world (no process
        group is made there), counting into the same stats (dgbench.trainers.projection)."""
        return Comm(rank, size, self.device, self.stats)


@dataclass
class Mesh:
    """The job's ranks arranged on named axes (row-major: the last axis varies fastest), each axis a
    process group with its own counted :class:`Comm` (DGC and BLAD partition along more than one
    axis, e.g. time x vertex, or device x process-per-device). Built on torch's ``DeviceMesh``."""

    shape: dict[str, int]
    coordinate: dict[str, int]  # this rank's index along each axis
    comms: dict[str, Comm]

    def comm(self, axis: str) -> Comm:
        return self.comms[axis]


def make_mesh(ctx: DistContext, **shape: int) -> Mesh:
    """A mesh of ``shape`` (product = world size) over the job; every rank must call it, in the same order."""
    sizes = list(shape.values())
    if math.prod(sizes) != ctx.world_size:
        raise ValueError(f"mesh {shape} has {math.prod(sizes)} ranks, the job {ctx.world_size}")
    coordinate, rest = {}, ctx.rank
    for name, size in reversed(shape.items()):
        coordinate[name] = rest % size
        rest //= size
    coordinate = {name: coordinate[name] for name in shape}
    if ctx.world_size == 1:
        return Mesh(dict(shape), coordinate, {name: ctx.comm for name in shape})
    # dgbench.trainers.projection's counting world: axes count too, no groups are made
    if ctx.backend == DRY_RUN_BACKEND:
        return Mesh(dict(shape), coordinate,
                    {name: ctx.comm.axis(coordinate[name], size) for name, size in shape.items()})
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh(ctx.device.type, tuple(sizes), mesh_dim_names=tuple(shape))
    comms = {name: Comm(coordinate[name], size, ctx.device, ctx.comm.stats, mesh.get_group(name))
             for name, size in shape.items()}
    return Mesh(dict(shape), coordinate, comms)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm: Comm, send_splits, recv_splits, tag):
        ctx.comm, ctx.send_splits, ctx.recv_splits, ctx.tag = comm, send_splits, recv_splits, tag
        return comm.all_to_all_single(x, send_splits, recv_splits, tag=f"{tag}:forward")

    @staticmethod
    def backward(ctx, grad):
        back = ctx.comm.all_to_all_single(grad.contiguous(), ctx.recv_splits, ctx.send_splits,
                                          tag=f"{ctx.tag}:backward")
        return back, None, None, None, None


def all_to_all_autograd(x: torch.Tensor, comm: Comm, send_splits: Sequence[int], recv_splits: Sequence[int],
                        tag: str = "redistribute") -> torch.Tensor:
    """All-to-all in the forward pass and the reverse all-to-all of gradients in the backward pass."""
    return _AllToAll.apply(x, comm, list(send_splits), list(recv_splits), tag)


class PhaseTimer:
    """Accumulates wall time per phase (transfer / compute / communication); CUDA-synchronised."""

    def __init__(self, device: torch.device | None = None):
        self.device = device
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.device is not None and self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.seconds[name] += time.perf_counter() - start

    def reset(self) -> None:
        self.seconds.clear()


def peak_memory(device: torch.device | None = None) -> dict[str, int]:
    """Peak resident set size of this process (bytes) and, on GPU, CUDA max allocated."""
    out = {"peak_rss_bytes": peak_rss_bytes()}
    if device is not None and device.type == "cuda":
        out["cuda_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
    return out
