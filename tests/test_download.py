"""Downloads (resume, restart, checksum, offline message) against a local server; safe unpacking."""
from __future__ import annotations

import bz2
import gzip
import hashlib
import http.server
import io
import socket
import stat
import tarfile
import threading
import urllib.error
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.errors import DgbenchError
from dgbench.loaders.archives import UnsafeArchive, unpack
from dgbench.loaders.download import RemoteFile, fetch

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class Server(http.server.ThreadingHTTPServer):
    """Serves PAYLOAD at /data; honours Range unless told not to; can cut the first response short."""

    honour_range = True
    cut_first_after: int | None = None
    requests: list[str | None]


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        server: Server = self.server  # type: ignore[assignment]
        requested = self.headers.get("Range")
        server.requests.append(requested)
        if self.path != "/data":
            self.send_error(404)
            return
        start = int(requested.split("=")[1].rstrip("-")) if requested and server.honour_range else 0
        body = PAYLOAD[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if server.cut_first_after is not None:
            cut, server.cut_first_after = server.cut_first_after, None
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[Server]:
    httpd = Server(("127.0.0.1", 0), Handler)
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url(server: Server, path: str = "/data") -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def test_download_verifies_checksum_and_places_file(server: Server, tmp_path: Path) -> None:
    target = fetch(RemoteFile(url(server), "data.bin", SHA), tmp_path)
    assert target.read_bytes() == PAYLOAD and not (tmp_path / "data.bin.part").exists()
    fetch(RemoteFile(url(server), "data.bin", SHA), tmp_path)  # already there and valid: no request
    assert len(server.requests) == 1


def test_download_resumes_a_partial_file(server: Server, tmp_path: Path) -> None:
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD[:300_000])
    target = fetch(RemoteFile(url(server), "data.bin", SHA), tmp_path)
    assert target.read_bytes() == PAYLOAD and server.requests == ["bytes=300000-"]


def test_download_restarts_when_server_ignores_range(server: Server, tmp_path: Path) -> None:
    server.honour_range = False
    (tmp_path / "data.bin.part").write_bytes(b"stale bytes from another file")
    target = fetch(RemoteFile(url(server), "data.bin", SHA), tmp_path)
    assert target.read_bytes() == PAYLOAD


def test_dropped_connection_is_retried_with_resume(server: Server, tmp_path: Path) -> None:
    server.cut_first_after = 200_000
    target = fetch(RemoteFile(url(server), "data.bin", SHA), tmp_path, retry_wait_s=0)
    assert target.read_bytes() == PAYLOAD
    assert server.requests[0] is None and server.requests[-1].startswith("bytes=")


def test_checksum_mismatch_deletes_the_download(server: Server, tmp_path: Path) -> None:
    with pytest.raises(DgbenchError, match="expected 0000"):
        fetch(RemoteFile(url(server), "data.bin", "0" * 64), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_unpublished_checksum_is_pinned_by_the_first_download(server: Server, tmp_path: Path) -> None:
    target = fetch(RemoteFile(url(server), "data.bin"), tmp_path)  # no sha256 published for it
    assert (tmp_path / "data.bin.sha256").read_text().strip() == SHA
    assert fetch(RemoteFile(url(server), "data.bin"), tmp_path) == target and len(server.requests) == 1
    target.write_bytes(PAYLOAD[:-1] + b"!")  # the cache is damaged or swapped later
    with pytest.raises(DgbenchError, match="pinned when it was downloaded; delete it"):
        fetch(RemoteFile(url(server), "data.bin"), tmp_path)
    target.unlink()
    (tmp_path / "data.bin.sha256").unlink()
    assert fetch(RemoteFile(url(server), "data.bin"), tmp_path).read_bytes() == PAYLOAD


def test_file_url_works(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(PAYLOAD)
    target = fetch(RemoteFile(source.as_uri(), "copy.bin", SHA), tmp_path / "cache")
    assert target.read_bytes() == PAYLOAD


def test_unreachable_says_where_to_get_it_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    remote = RemoteFile(f"http://127.0.0.1:{port}/x.zip", "x.zip", page="https://example.org/x")
    with pytest.raises(DgbenchError) as caught:
        fetch(remote, tmp_path, retry_wait_s=0)
    message = str(caught.value)
    assert "\n" not in message and "https://example.org/x" in message and "--raw PATH" in message


def test_named_dataset_offline_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args, **kwargs):
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr("dgbench.loaders.download.urllib.request.urlopen", offline)
    result = CliRunner().invoke(cli, ["--quiet", "prepare", "lastfm", "--cache-dir", str(tmp_path / "cache"),
                                      "--out", str(tmp_path / "l.zarr")])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "snap.stanford.edu/jodie" in result.output and "--raw" in result.output


# --------------------------------------------------------------------------- safe unpacking

def make_zip(path: Path, members: dict[str, bytes], symlink: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            bundle.writestr(info, "/etc/passwd")
    return path


def make_tar(path: Path, members: dict[str, bytes], link: str | None = None) -> Path:
    with tarfile.open(path, "w:gz") as bundle:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            bundle.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            bundle.addfile(info)
    return path


def test_good_archives_unpack(tmp_path: Path) -> None:
    members = {"d/a.edges": b"1 2 3\n", "readme.txt": b"hello"}
    for archive in (make_zip(tmp_path / "g.zip", members), make_tar(tmp_path / "g.tar.gz", members)):
        out = unpack(archive, tmp_path / f"out-{archive.name}")
        assert (out / "d" / "a.edges").read_bytes() == b"1 2 3\n"
    (tmp_path / "x.edges.gz").write_bytes(gzip.compress(b"1 2 3\n"))
    (tmp_path / "y.edges.bz2").write_bytes(bz2.compress(b"4 5 6\n"))
    assert (unpack(tmp_path / "x.edges.gz", tmp_path / "gz") / "x.edges").read_bytes() == b"1 2 3\n"
    assert (unpack(tmp_path / "y.edges.bz2", tmp_path / "bz") / "y.edges").read_bytes() == b"4 5 6\n"


@pytest.mark.parametrize("maker, members, link, reason", [
    (make_zip, {"../evil.txt": b"x"}, None, "outside the unpack folder"),
    (make_zip, {"/abs/evil.txt": b"x"}, None, "outside the unpack folder"),
    (make_zip, {"ok.txt": b"x"}, "link", "symbolic link"),
    (make_tar, {"a/../../evil.txt": b"x"}, None, "outside the unpack folder"),
    (make_tar, {"ok.txt": b"x"}, "link", "link or device"),
])
def test_unsafe_archives_are_refused(tmp_path: Path, maker, members, link, reason) -> None:
    archive = maker(tmp_path / ("bad.zip" if maker is make_zip else "bad.tar.gz"), members, link)
    with pytest.raises(UnsafeArchive, match=reason):
        unpack(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "evil.txt").exists()


def test_zip_bomb_is_refused(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "bomb.zip", {"zeros.edges": bytes(8 << 20)})  # 8 MiB of zeros -> ~8 KiB
    with pytest.raises(UnsafeArchive, match="zip bomb"):
        unpack(archive, tmp_path / "out", max_bytes=1 << 20)
    with pytest.raises(UnsafeArchive, match="zip bomb"):
        unpack(archive, tmp_path / "out2", max_ratio=10, max_bytes=1 << 20)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out2").exists()


def test_gzip_bomb_is_stopped_while_writing(tmp_path: Path) -> None:
    (tmp_path / "bomb.edges.gz").write_bytes(gzip.compress(bytes(4 << 20)))
    with pytest.raises(UnsafeArchive, match="expands beyond"):
        unpack(tmp_path / "bomb.edges.gz", tmp_path / "out", max_bytes=1 << 20)
    assert not (tmp_path / "out").exists()


def test_prepare_with_unsafe_archive_leaves_nothing(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "g.zip", {"../g.edges": b"1 2 3\n"})
    result = CliRunner().invoke(cli, ["--quiet", "prepare", "file", "--format", "network-repository", "--raw",
                                      str(archive), "--out", str(tmp_path / "o" / "g.zarr")])
    assert result.exit_code == 1 and "refused" in result.output
    assert not (tmp_path / "g.edges").exists()
    assert not (tmp_path / "o").exists() or list((tmp_path / "o").iterdir()) == []
