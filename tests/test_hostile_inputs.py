"""Hostile inputs: crafted files and environments must be refused with one line, never executed, hung
on, or allowed to lose a finished run (docs/ for each format; leaderboards/RULES.md for what is checked)."""
from __future__ import annotations

import os
import hashlib
import json
import pickle
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from dgbench.cli import cli as main
from dgbench.leaderboard.board import submit
from dgbench.leaderboard.render import render
from leaderboard_records import make_record, reseal, unofficial_dataset, write

REPO = Path(__file__).resolve().parents[1]
MARK = "dgbench-test-marker"


class _Planted:
    """Unpickling this writes a marker file: proof a crafted pickle ran code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, MARK))


# --------------------------------------------------------------------------- code execution

def test_price_never_unpickles_a_crafted_file(tmp_path):
    marker, crafted = tmp_path / "ran", tmp_path / "dry.pkl"
    crafted.write_bytes(pickle.dumps(_Planted(marker)))
    result = CliRunner().invoke(main, ["project", "price", str(crafted), "--mode", "strong", "--profile", "esdg-aimos"])
    assert not marker.exists(), "a crafted pickle ran code"
    assert result.exit_code == 1
    assert str(crafted) in result.output and len(result.output.strip().splitlines()) == 1


# --------------------------------------------------------------------------- board integrity

HOSTILE_TEXT = ("evil\n# Injected heading\r\n<img src=x onerror=alert(1)> [click](javascript:alert(1)) "
                "![pixel](https://evil.example/p.png) | cell `code")


def test_board_markdown_escapes_every_record_string(tmp_path):
    board = tmp_path / "board"
    board.mkdir()
    for seed in (0, 1, 2):
        record = make_record(dataset={**unofficial_dataset(), "name": HOSTILE_TEXT}, seed=seed)
        record["hyperparameters"]["cost_model"] = HOSTILE_TEXT if seed else "plain"
        submit(write(reseal(record), tmp_path / f"hostile{seed}.json"), board)
    markdown = render(board, "md")
    assert "evil" in markdown  # the rows are there ...
    assert not any(line.startswith("# Injected") for line in markdown.splitlines())  # ... but inject nothing
    assert "<img" not in markdown and "onerror" in markdown  # shown as text, never as HTML
    hostile = [line for line in markdown.splitlines() if "javascript:" in line or "evil.example" in line]
    assert hostile and not any(re.search(r"(?<!\\)[\[\]`]", line) for line in hostile)  # no link, image or code
    tables = [block.splitlines() for block in markdown.split("\n\n") if block.startswith("| ")]
    assert any("evil" in line for table in tables for line in table)
    for table in tables:  # every row has its header's cells: no record string broke out of its cell
        assert {line.replace("\\|", "").count("|") for line in table} == {table[0].count("|")}


# --------------------------------------------------------------------------- hangs and exhaustion

PYTHON = sys.executable
GUARD_S = 60  # a hang shows up as a timeout, not as a test run that never ends


def _limited_memory() -> None:
    """A child that reads without bound dies of MemoryError instead of exhausting the shared machine."""
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def _dgbench(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    command = [PYTHON, "-c", code, *args] if code else [PYTHON, "-m", "dgbench", *args]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=GUARD_S, preexec_fn=_limited_memory,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {GUARD_S} s: {args}")


READ_EVERY_EVENT = "import sys; from dgbench.store import open_store; open_store(sys.argv[1]).events()"


def _replace_chunk(store: Path, make: str) -> Path:
    chunk = store / "src" / "c" / "0"
    chunk.unlink()
    if make == "fifo":
        os.mkfifo(chunk)
    else:
        chunk.symlink_to("/dev/zero")
    return chunk


@pytest.mark.parametrize("make", ["fifo", "dev-zero"])
def test_validate_names_a_chunk_that_is_not_a_regular_file(stream_store, make):
    _replace_chunk(stream_store, make)
    result = _dgbench("validate", str(stream_store))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "src/c/0" in result.stdout + result.stderr and "not a regular file" in result.stdout + result.stderr


@pytest.mark.parametrize("make", ["fifo", "dev-zero"])
def test_reading_a_store_refuses_a_chunk_that_is_not_a_regular_file(stream_store, make):
    _replace_chunk(stream_store, make)
    result = _dgbench(str(stream_store), code=READ_EVERY_EVENT)
    assert result.returncode != 0 and "MemoryError" not in result.stderr
    assert "src/c/0" in result.stderr and "not a regular file" in result.stderr


def test_reading_a_store_is_bounded_by_the_chunk_size_it_declares(stream_store):
    chunk = stream_store / "src" / "c" / "0"
    with open(chunk, "ab") as grown:  # 4 GiB, sparse: a read without a bound runs out of memory
        grown.truncate(4 << 30)
    result = _dgbench(str(stream_store), code=READ_EVERY_EVENT)
    assert result.returncode != 0 and "MemoryError" not in result.stderr
    assert "src/c/0" in result.stderr and "larger than" in result.stderr


# --------------------------------------------------------------------------- silent wrong results

def _tiny_stream(path: Path) -> Path:
    from dgbench.store import EdgeStreamStoreWriter
    with EdgeStreamStoreWriter(path, num_nodes=10, directed=True, provenance={"source": "test"}) as writer:
        writer.append_events(np.arange(7), np.arange(7)[::-1] + 1, np.array([1000, 1099, 1100, 1300, 1350, 1399, 1400]))
        return writer.close()


def _one_line_error(result, *words: str) -> None:
    assert result.exit_code != 0 and not isinstance(result.exception, AssertionError), result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert all(word in lines[0] for word in words), (words, lines[0])


@pytest.mark.parametrize("origin", ["nan", "inf", "-inf", "-1e300"])
def test_convert_refuses_an_origin_that_is_not_finite_or_in_range(tmp_path, origin):
    stream = _tiny_stream(tmp_path / "tiny.zarr")
    result = CliRunner().invoke(main, ["convert", str(stream), "-o", str(tmp_path / "cut.zarr"), "--window", "60",
                                       f"--origin={origin}"])
    _one_line_error(result, "--origin")
    assert not (tmp_path / "cut.zarr").exists()


def _snapshot_store(path: Path, cut: dict, times: list[float], num_nodes: int = 10) -> Path:
    from dgbench.store import SnapshotStoreWriter
    with SnapshotStoreWriter(path, num_nodes=num_nodes, directed=True, cut=cut, provenance={"source": "test"},
                             time_dtype=np.float64) as writer:
        count = len(times)
        writer.append_snapshot(np.arange(count) % 10, (np.arange(count) + 1) % 10, time=np.array(times, np.float64),
                               start=cut.get("origin", 0.0))
        return writer.close()


@pytest.mark.parametrize("origin", [float("nan"), float("inf"), -1e300])
def test_validate_refuses_a_cut_whose_origin_is_not_finite_or_does_not_fit(tmp_path, origin):
    from dgbench.store.validate import validate_store
    cut = {"method": "time-window", "window_seconds": 60.0, "origin": origin}
    store = _snapshot_store(tmp_path / "s.zarr", cut, [1000.0, 1010.0, 1020.0])
    problems = validate_store(store)
    assert problems and "origin" in problems[0], problems


def test_validate_accepts_a_cut_that_fits(tmp_path):
    from dgbench.store.validate import validate_store
    cut = {"method": "time-window", "window_seconds": 60.0, "origin": 990.0}
    assert validate_store(_snapshot_store(tmp_path / "s.zarr", cut, [1000.0, 1010.0, 1020.0])) == []


def _declare_nodes(store: Path, num_nodes: int) -> None:
    """Edit num_nodes and reseal the fingerprint, as a forger would."""
    from dgbench.store import combine_fingerprint, fingerprint_header
    meta = store / "zarr.json"
    document = json.loads(meta.read_text())
    attrs = document["attributes"]
    attrs["num_nodes"] = num_nodes
    attrs["fingerprint"] = combine_fingerprint(attrs["kind"], fingerprint_header(attrs["kind"], attrs), attrs["arrays"])
    meta.write_text(json.dumps(document))


@pytest.mark.parametrize("exponent", [31, 62])
def test_a_store_declaring_more_vertices_than_its_arrays_hold_is_refused(esdg_store, exponent):
    from dgbench.errors import StoreError
    from dgbench.store import open_store
    from dgbench.store.validate import validate_store
    _declare_nodes(esdg_store, 2 ** exponent)
    problems = validate_store(esdg_store)
    assert problems and "num_nodes" in problems[0] and not any("not sorted" in p for p in problems), problems
    with pytest.raises(StoreError, match="num_nodes"):  # what `run` opens: refused before it allocates anything
        open_store(esdg_store)


BLAD_PAYLOAD = {"features": "paper", "hidden": 6, "profile": {},
                "coefficients": {"gcn": {"forward": [1e-4, 1e-7, 1e-8, 1e-6], "backward": [2e-4, 2e-7, 2e-8, 2e-6]}}}
MALFORMED_COST_MODELS = [  # (field changed, its new value, words the one-line refusal must hold)
    ("hardware", "a laptop", ["hardware", "object"]),
    ("fit", [1, 2], ["fit", "object"]),
    ("payload", 5, ["payload", "object"]),
    ("payload.features", "cubic", ["payload.features", "paper"]),
    ("payload.hidden", "six", ["payload.hidden", "integer"]),
    ("payload.coefficients", [], ["payload.coefficients", "object"]),
    ("payload.coefficients.gcn.forward", [1e-4, 1e-7], ["payload.coefficients.gcn.forward", "4"]),
    ("payload.coefficients.gcn.backward", {"a": 1}, ["payload.coefficients.gcn.backward", "list"]),
    ("payload.coefficients.gcn.forward", [1e-4, "fast", 1e-8, 1e-6], ["payload.coefficients.gcn.forward[1]"]),
    ("payload.coefficients.gcn.forward", [-1e300, 1e-7, 1e-8, 1e-6], ["payload.coefficients.gcn.forward[0]"]),
    ("payload.coefficients.gcn.forward", [float("nan"), 1e-7, 1e-8, 1e-6], ["payload.coefficients.gcn.forward[0]",
                                                                           "finite"]),
    ("payload.coefficients.gcn.backward", [-1e-3, -1e-6, -1e-7, -1e-5], ["payload.coefficients.gcn.backward",
                                                                         "negative"]),
]


def _set_field(document: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        document = document[key]
    document[last] = value


@pytest.mark.parametrize("field, value, words", MALFORMED_COST_MODELS, ids=[f"{f}={v!r}"[:60]
                                                                           for f, v, _ in MALFORMED_COST_MODELS])
def test_a_malformed_cost_model_is_refused_naming_field_and_rule(tmp_path, field, value, words):
    from dgbench.costmodel import load_fitted, save_fitted
    from dgbench.errors import DgbenchError
    path = save_fitted(tmp_path / "blad.json", "blad-operators", json.loads(json.dumps(BLAD_PAYLOAD)), {"mape": 0.1})
    assert load_fitted(path, "blad-operators").payload == BLAD_PAYLOAD  # the untouched file loads
    document = json.loads(path.read_text())
    _set_field(document, field, value)
    path.write_text(json.dumps(document))
    with pytest.raises(DgbenchError) as refused:
        load_fitted(path, "blad-operators")
    message = str(refused.value)
    assert "\n" not in message and str(path) in message and all(word in message for word in words), message
    shown = CliRunner().invoke(main, ["costmodel", "show", str(path)])
    if field.split(".")[0] in ("hardware", "fit"):
        _one_line_error(shown, field)


def _forge_set(path: Path, array: str | None = None, values=None, **manifest_fields) -> None:
    """Change one array and/or manifest fields of an evaluation set and reseal its hashes, as a forger would."""
    from dgbench.tasks.evalset import MANIFEST, _array_entry, _fingerprint
    manifest = json.loads((path / MANIFEST).read_text())
    if array is not None:
        np.save(path / f"{array}.npy", values, allow_pickle=False)
        manifest["arrays"][array] = _array_entry(values)
    manifest.update(manifest_fields)
    manifest["fingerprint"] = _fingerprint(manifest)
    (path / MANIFEST).write_text(json.dumps(manifest))


FORGED_SETS = {  # what is forged -> words the refusal names
    "id at N": (lambda a: ("test_dst", np.where(np.arange(len(a["test_dst"])) == 0, 90, a["test_dst"])),
                ["test_dst", "0..89"]),
    "negative id": (lambda a: ("test_src", np.where(np.arange(len(a["test_src"])) == 0, -5, a["test_src"])),
                    ["test_src", "0..89"]),
    "negative beyond none": (lambda a: ("val_negatives", np.full_like(a["val_negatives"], -7)),
                             ["val_negatives", "-1"]),
    "short array": (lambda a: ("test_negatives", a["test_negatives"][:-3]), ["test_negatives", "rows"]),
    "float ids": (lambda a: ("test_src", a["test_src"].astype(np.float64)), ["test_src", "integer"]),
    "path in a name": (lambda a: ("../escape", a["test_src"]), ["../escape"]),
}


@pytest.mark.parametrize("forgery", list(FORGED_SETS))
def test_a_forged_evaluation_set_is_refused_naming_array_and_rule(stream_store, forgery):
    from dgbench.errors import DgbenchError
    from dgbench.tasks.link import link_prediction_set
    evaluation = link_prediction_set(stream_store, "random", 2)
    forge, words = FORGED_SETS[forgery]
    name, values = forge(evaluation.arrays)
    if name.startswith(".."):
        (evaluation.path.parent / "escape.npy").parent.mkdir(exist_ok=True)
    _forge_set(evaluation.path, name, values)
    with pytest.raises(DgbenchError) as refused:
        link_prediction_set(stream_store, "random", 2)
    message = str(refused.value)
    assert "\n" not in message and all(word in message for word in words), message


@pytest.mark.parametrize("field, value", [("negatives", "2"), ("seed", 1.5), ("negatives", -1), ("task", 7)])
def test_an_evaluation_manifest_with_a_mistyped_field_is_refused_naming_it(stream_store, field, value):
    from dgbench.errors import DgbenchError
    from dgbench.tasks.evalset import read_set
    evaluation = link_prediction_set_of(stream_store)
    _forge_set(evaluation.path, **{field: value})
    with pytest.raises(DgbenchError, match=f"field '{field}'"):
        read_set(evaluation.path)


def link_prediction_set_of(store: Path):
    from dgbench.tasks.link import link_prediction_set
    return link_prediction_set(store, "random", 2)


@pytest.mark.parametrize("flag, value, rule", [("--hidden", "100000000", "<= 4096"), ("--seed", "-1", ">= 0"),
                                               ("--seed", str(10 ** 23), "<= 4294967295")])
def test_run_refuses_an_out_of_range_width_or_seed_naming_it(esdg_store, tmp_path, flag, value, rule):
    result = _dgbench("run", "--dataset", str(esdg_store), "--scheme", "single", "--model", "tmgcn", "--epochs", "1",
                      "--out", str(tmp_path / "runs"), flag, value)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and lines, result.stderr
    assert flag in lines[-1] and rule in lines[-1] and "unexpected" not in result.stderr, result.stderr


# --------------------------------------------------------------------------- nothing lost

def _full_disk_under(folder: Path, monkeypatch) -> None:
    """Writes under ``folder`` fail as on a full disk (ENOSPC); elsewhere they go through."""
    import errno

    import dgbench.records as records
    real = records.create_new

    def create_new(path, content, *args, **kwargs):
        if Path(path).resolve().is_relative_to(folder.resolve()):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, content, *args, **kwargs)
    monkeypatch.setattr(records, "create_new", create_new)


def test_a_record_that_cannot_be_written_for_a_full_disk_is_kept_elsewhere_and_named(tmp_path, monkeypatch, capsys):
    from dgbench.records import record_seal, write_record
    out, cache = tmp_path / "runs", tmp_path / "cache"
    out.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    _full_disk_under(out, monkeypatch)
    record = make_record()
    kept = write_record(record, out)
    assert kept.is_relative_to(cache) and not list(out.iterdir())
    written = json.loads(kept.read_text())
    assert written["final_metrics"] == record["final_metrics"] and written["seal"] == record_seal(written)
    note = capsys.readouterr().err.strip().splitlines()
    assert len(note) == 1 and str(out) in note[0] and str(kept) in note[0] and "No space left" in note[0]


def test_a_record_no_folder_can_hold_is_kept_in_the_log(tmp_path, monkeypatch, capsys):
    from dgbench.errors import DgbenchError
    from dgbench.records import write_record
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    _full_disk_under(tmp_path, monkeypatch)
    record = make_record()
    with pytest.raises(DgbenchError, match="stderr") as refused:
        write_record(record, tmp_path / "runs")
    assert "\n" not in str(refused.value)
    logged = [line for line in capsys.readouterr().err.splitlines() if line.startswith("record: ")]
    assert len(logged) == 1
    assert json.loads(logged[0].removeprefix("record: "))["final_metrics"] == record["final_metrics"]


# --------------------------------------------------------------------------- what crosses the ranks' store

class _PlantedStore:
    """The job's key-value store after another local user wrote a crafted pickle under every key."""

    def __init__(self, marker: Path):
        self.value = pickle.dumps(_Planted(marker))

    def wait(self, keys, timeout) -> None:
        pass

    def get(self, key: str) -> bytes:
        return self.value


def _follower(monkeypatch, marker: Path):
    import torch
    import torch.distributed as torch_dist

    from dgbench.dist import DistContext
    monkeypatch.setattr(torch_dist.distributed_c10d, "_get_default_store", lambda: _PlantedStore(marker))
    return DistContext(rank=1, world_size=2, backend="gloo", device=torch.device("cpu"), comm=None)


def test_a_rank_never_unpickles_what_it_reads_from_the_job_store(tmp_path, monkeypatch):
    from dgbench.trainers.experiment import _partition_once
    marker = tmp_path / "ran"
    ctx = _follower(monkeypatch, marker)
    with pytest.raises(Exception) as refused:
        _partition_once(ctx, SimpleNamespace(scheme=SimpleNamespace(name="vertex")), None, 0)
    assert not marker.exists(), "a crafted pickle from the store ran code"
    assert "job store" in str(refused.value)


def test_the_plain_encoding_carries_a_partition_exactly():
    from dgbench.dist import decode_plain, encode_plain
    value = {"owner": np.arange(5, dtype=np.int64), "method": "metis", "none": None,
             "report": {"cut": np.int64(7), "balance": 1.25, "parts": [np.arange(2, dtype=np.int32), (1, "a")]},
             "arrays": {"part": np.ones((2, 3), np.float32)}}
    back = decode_plain(encode_plain(value))
    assert back["method"] == "metis" and back["none"] is None and back["report"]["cut"] == 7
    assert back["report"]["balance"] == 1.25 and back["report"]["parts"][1] == [1, "a"]
    for got, want in ((back["owner"], value["owner"]), (back["arrays"]["part"], value["arrays"]["part"]),
                      (back["report"]["parts"][0], value["report"]["parts"][0])):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    with pytest.raises(TypeError, match="object"):
        encode_plain({"x": np.array([object()])})


# --------------------------------------------------------------------------- signals

STARTING_UP = """
import sys, time
import dgbench.trainers.experiment  # what `dgbench run` loads first, before opening the store and starting ranks
open(sys.argv[1], "w").close()
time.sleep(60)  # start-up work (loading a store, building an evaluation set)
"""


def test_ctrl_c_during_start_up_stops_a_job_started_in_the_background(tmp_path):
    """A script's background job (`dgbench run ... &`) starts with SIGINT ignored; Ctrl-C must still stop it."""
    ready = tmp_path / "ready"
    job = subprocess.Popen([PYTHON, "-c", STARTING_UP, str(ready)], env={**os.environ, "PYTHONPATH": str(REPO)},
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + GUARD_S
        while not ready.exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), "the job did not start"
        job.send_signal(signal.SIGINT)
        code = job.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("SIGINT during start-up was ignored")
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert code != 0


# --------------------------------------------------------------------------- verify

def _claim(command_tail: list[str], epochs: int = 4, epoch_seconds: float = 2.0) -> dict:
    record = make_record(scheme="single", epochs=epochs, epoch_seconds=epoch_seconds)
    record["command"] = ["dgbench", "run", "--scheme", "single", "--model", "tmgcn", *command_tail]
    return reseal(record)


@pytest.mark.parametrize("tail, words", [(["--epochs", "100000000"], ["--epochs", "100000000", "4"]),
                                         (["--cost-model", "/etc/passwd"], ["--cost-model", "path"])])
def test_verify_refuses_a_command_doing_more_than_claimed_or_naming_a_path(tmp_path, esdg_store, tail, words):
    from dgbench.errors import DgbenchError
    from dgbench.leaderboard.verify import run_arguments
    with pytest.raises(DgbenchError) as refused:
        run_arguments(_claim(tail), esdg_store, tmp_path / "x.json")
    assert all(word in str(refused.value) for word in words), str(refused.value)


def test_verify_bounds_a_rerun_by_the_claimed_time_and_removes_its_scratch(tmp_path, esdg_store, monkeypatch):
    import dgbench.leaderboard.verify as verify_module
    from dgbench.errors import DgbenchError
    seen, real = {}, subprocess.run

    def run(command, **kwargs):
        if "--out" not in command:  # git, asked what code verified
            return real(command, **kwargs)
        seen["out"], seen["timeout"] = Path(command[command.index("--out") + 1]), kwargs.get("timeout")
        raise subprocess.TimeoutExpired(command, kwargs.get("timeout"))
    monkeypatch.setattr(verify_module, "check_store", lambda store, record: None)
    monkeypatch.setattr(verify_module.subprocess, "run", run)
    record = write(_claim([], epochs=4, epoch_seconds=2.0), tmp_path / "claim.json")
    with pytest.raises(DgbenchError, match="did not finish"):
        verify_module.verify(record, store=esdg_store)
    assert seen["timeout"] is not None and seen["timeout"] <= 3600, seen  # 4 epochs of 2 s claimed
    assert not seen["out"].parent.exists()


KILLED_DURING_VERIFY = """
import os, signal, subprocess, sys
from pathlib import Path
import dgbench.leaderboard.verify as verify_module

real = subprocess.run

def run(command, **kwargs):
    if "--out" not in command:  # git, asked what code verified
        return real(command, **kwargs)
    Path(sys.argv[3]).write_text(command[command.index("--out") + 1])
    os.kill(os.getpid(), signal.SIGTERM)  # the verifier is stopped while the re-run works
    raise AssertionError("SIGTERM did not stop the verifier")

verify_module.check_store = lambda store, record: None
verify_module.subprocess.run = run
verify_module.verify(Path(sys.argv[1]), store=Path(sys.argv[2]))
"""


def test_verify_stopped_by_sigterm_leaves_no_scratch_folder(tmp_path, esdg_store):
    record = write(_claim([]), tmp_path / "claim.json")
    noted = tmp_path / "out-path"
    result = _dgbench(str(record), str(esdg_store), str(noted), code=KILLED_DURING_VERIFY)
    assert result.returncode != 0 and noted.exists(), result.stderr
    assert not Path(noted.read_text()).parent.exists()


# --------------------------------------------------------------------------- the sampler's kernel cache

PLANTED_LIBRARY = """
#include <cstdio>
__attribute__((constructor)) static void planted() { FILE* f = std::fopen("%s", "w"); if (f) std::fclose(f); }
"""
needs_compiler = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build a library")


def _kernel_target(folder: Path) -> Path:
    """Where the sampler looks for its built kernels (named by the source and compiler flags' digest)."""
    from dgbench.trainers.continuous.tgcn.sampling import native
    digest = hashlib.sha256(native.SOURCE.read_bytes() + " ".join(["g++", *native.FLAGS]).encode()).hexdigest()[:16]
    return folder / f"sis_kernels-{digest}.so"


def _plant_library(target: Path, marker: Path) -> None:
    source = target.with_name("planted.cpp")
    source.write_text(PLANTED_LIBRARY % marker)
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(target), str(source)], check=True)


@pytest.fixture
def fresh_kernels(monkeypatch):
    from dgbench.trainers.continuous.tgcn.sampling import native
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv("CXX", "g++")
    monkeypatch.setenv("DGBENCH_SIS_BACKEND", "auto")
    return native


@needs_compiler
@pytest.mark.parametrize("mode", [0o777, 0o700])
def test_the_sampler_never_loads_a_library_it_did_not_build(tmp_path, monkeypatch, fresh_kernels, mode):
    """0o777: a cache folder others can write; 0o700: this user's folder, but a library that is not the
    one built there (no record of its hash)."""
    cache, marker = tmp_path / "cache", tmp_path / "ran"
    cache.mkdir()
    _plant_library(_kernel_target(cache), marker)
    cache.chmod(mode)
    monkeypatch.setenv("DGBENCH_KERNEL_CACHE", str(cache))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh_kernels.library()
    assert not marker.exists(), "a planted library ran code in the sampler's process"


@needs_compiler
def test_a_library_without_the_kernels_falls_back_to_python_with_a_warning(tmp_path, monkeypatch, fresh_kernels):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    target, empty = _kernel_target(cache), tmp_path / "empty.cpp"
    empty.write_text('extern "C" int unrelated() { return 0; }\n')
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(target), str(empty)], check=True)
    fresh_kernels.record_library_hash(target)  # as if this user's own cache held a library of another version
    monkeypatch.setenv("DGBENCH_KERNEL_CACHE", str(cache))
    with pytest.warns(UserWarning, match="Python"):
        assert fresh_kernels.library() is None


def test_the_kernel_cache_fallback_is_private_and_unpredictable(tmp_path, monkeypatch, fresh_kernels):
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: home))
    monkeypatch.delenv("DGBENCH_KERNEL_CACHE", raising=False)
    folder = fresh_kernels._cache_dir()
    assert folder != Path(tempfile.gettempdir()) / "dgbench-kernels"
    status = folder.lstat()
    assert status.st_uid == os.getuid() and stat.S_IMODE(status.st_mode) == 0o700
