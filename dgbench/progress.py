"""Progress bars for every step that can take more than a second; `--quiet` (or DGBENCH_QUIET=1 in the
environment) turns them all off."""
from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")

# tqdm's default lock holds a multiprocessing semaphore, made in every process that draws a bar; a rank
# that ends without running finalizers leaves it registered, and the resource tracker then warns of a
# leaked semaphore. Bars are drawn by one process at a time (rank 0), so a thread lock suffices.
tqdm.set_lock(threading.RLock())


def quiet_by_environment() -> bool:
    """DGBENCH_QUIET set to anything but empty or 0."""
    return os.environ.get("DGBENCH_QUIET", "") not in ("", "0")


_quiet = quiet_by_environment()


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    return _quiet


def bar(total: int, desc: str, unit: str, scale: bool = True) -> tqdm:
    """A manual tqdm bar on stderr (update / write / close), disabled when quiet."""
    return tqdm(total=total, desc=desc, unit=unit, disable=_quiet, leave=False, dynamic_ncols=True,
                unit_scale=scale)


def progress(iterable: Iterable[T] | None = None, *, total: int | None = None, desc: str = "",
             unit: str = "it", scale: bool = True) -> Iterator[T] | tqdm:
    """A tqdm bar on stderr, disabled when quiet; use as an iterable wrapper or a manual bar.
    ``scale``: show counts as 1.2k/3.4M (off for small counts such as epochs)."""
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=_quiet, leave=False,
                dynamic_ncols=True, unit_scale=scale)
