"""Checksummed, resumable downloads of registered raw files (urllib; no extra dependency).

A download goes to ``NAME.part`` beside its target; an interrupted one resumes with an HTTP
Range request (a server that ignores Range restarts it cleanly), is retried a few times, and is
renamed into place only after its sha256 matches the registered one (when one is registered).
Where none is published, the first download's sha256 is pinned in ``NAME.sha256`` and a cached file
is checked against it before every reuse, so a damaged or swapped cache is caught. Without network the
error says in one line where to get the file, where in the cache to put it, and how to pass it (--raw).
"""
from __future__ import annotations

import hashlib
import http.client
import os
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from dgbench.errors import DgbenchError
from dgbench.files import write_atomic
from dgbench.progress import progress

READ_BLOCK = 1 << 20
ATTEMPTS = 3
TIMEOUT_S = 60


@dataclass(frozen=True)
class RemoteFile:
    """A registered raw file: where to get it, what to save it as, its sha256 if published/known."""

    url: str
    filename: str
    sha256: str | None = None
    page: str = ""  # a human page that explains the data set (shown when the download fails)


def default_cache_dir() -> Path:
    """Where downloaded raw files are kept: $DGBENCH_CACHE, else ~/.cache/dgbench/raw."""
    return Path(os.environ.get("DGBENCH_CACHE", Path.home() / ".cache" / "dgbench" / "raw"))


def file_sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(READ_BLOCK):
            hasher.update(block)
    return hasher.hexdigest()


def fetch(remote: RemoteFile, folder: Path, *, attempts: int = ATTEMPTS, retry_wait_s: float = 1.0) -> Path:
    """Return ``folder/remote.filename``, downloading (or resuming) it first when needed."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / remote.filename
    pin = target.with_name(target.name + ".sha256")
    if target.is_file():
        expected = remote.sha256 or (pin.read_text().strip() if pin.is_file() else None)
        digest = file_sha256(target)
        if expected is None:
            write_atomic(pin, digest + "\n")
            return target
        if digest == expected:
            return target
        if remote.sha256 is None:  # pinned by our own first download: the cache changed since
            raise DgbenchError(f"{target}: sha256 {digest} differs from {expected}, pinned when it was "
                               f"downloaded; delete it (and {pin.name}) to download it afresh")
    part = target.with_name(target.name + ".part")
    last_error: Exception | None = None
    for attempt in range(attempts):
        try:
            _download(remote.url, part)
            break
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            last_error = exc
            if _is_offline(exc) or attempt == attempts - 1:
                raise _unreachable(remote, exc, target) from exc
            time.sleep(retry_wait_s)
    else:  # pragma: no cover - the loop either breaks or raises
        raise _unreachable(remote, last_error, target)
    digest = file_sha256(part)
    if remote.sha256 is not None and digest != remote.sha256:
        part.unlink()
        raise DgbenchError(f"{remote.url}: downloaded file has sha256 {digest}, expected {remote.sha256}; "
                           f"it was deleted - run the command again to download it afresh")
    os.replace(part, target)
    if remote.sha256 is None:
        write_atomic(pin, digest + "\n")
    return target


def _download(url: str, part: Path) -> None:
    """Download ``url`` into ``part``, continuing a partial file when the server honours Range."""
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # nothing left to fetch: the partial file is already complete
            return
        raise
    with response:
        resumed = have and getattr(response, "status", 200) == 206
        mode = "ab" if resumed else "wb"
        length = response.headers.get("Content-Length")
        total = (int(length) + (have if resumed else 0)) if length else None
        name = part.name.removesuffix(".part")
        with open(part, mode) as out, progress(total=total, desc=f"download {name}", unit="B") as bar:
            bar.update(have if resumed else 0)
            while block := response.read(READ_BLOCK):
                out.write(block)
                bar.update(len(block))
        if total is not None and part.stat().st_size < total:
            raise OSError(f"connection closed after {part.stat().st_size:,} of {total:,} bytes")


def _is_offline(exc: Exception) -> bool:
    """Errors that retrying will not fix: no DNS, connection refused, a 4xx answer."""
    if isinstance(exc, urllib.error.HTTPError):
        return 400 <= exc.code < 500
    return isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, (socket.gaierror, ConnectionRefusedError))


def _unreachable(remote: RemoteFile, exc: Exception | None, target: Path) -> DgbenchError:
    """One line: what could not be downloaded, where to get it, and where to put it (or --raw)."""
    where = remote.page or remote.url
    reason = getattr(exc, "reason", exc)
    return DgbenchError(f"cannot download {remote.url} ({reason}); get {remote.filename} from {where} and put it "
                        f"at {target} (checked against its sha256), or pass it with --raw PATH (the file or its "
                        f"archive)")
