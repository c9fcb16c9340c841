"""`dgbench verify RECORD`: re-run a record's command on the store it names and compare the results.

The board's trust model (leaderboards/RULES.md, "Trust"): a submitted record is a claim. Its seal and
schema checks only show it was not edited by accident, and the bounds of the schema only refuse what
no run can produce; anyone can write a well-formed record. A row is *reproduced* when ``dgbench
verify`` re-ran it here and the outcome agreed within the tolerances below; the board shows which rows
were. Verifying:

1. the store: the record's official store (built from the registry's command when it is a generated
   one, else ``--store``) is validated in full — every array re-hashed and the fingerprint recomputed
   from the content, so a store relabelled with another store's fingerprint is caught — and its
   fingerprint and sizes must be the record's;
2. the run: the record's ``dgbench run`` arguments are parsed by the run command itself (never a
   shell), the dataset, output and rank count replaced (``--nproc`` = the record's world size), and
   run in a fresh process;
3. the comparison (:func:`compare_runs`): identity (scheme, model, world size, store, hyper-parameters
   that change what is learned) equal; per-epoch work equal; per-epoch bytes sent within
   ``COMM_TOLERANCE``; final test metrics within ``METRIC_TOLERANCE`` (absolute); and, when the
   verifier's hardware class is the record's, the claimed edges/s (median timed epoch) at most
   ``THROUGHPUT_TOLERANCE`` above the reproduction's best timed epoch (a verifier busy with other work
   only makes the reproduction slower, so its best epoch is the fairest witness; on other hardware
   timing is reported as not checked). Timing needs an otherwise idle verifier of the same class.

With ``--board`` the outcome is filed as ``reproductions/<record content hash>.json`` (the reproduced
record inside), which the board reads, re-checks and shows.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from dgbench.errors import DgbenchError
from dgbench.files import scratch_dir, write_atomic
from dgbench.leaderboard.compare import load_checked
from dgbench.leaderboard.figures import run_figures, timed_epochs
from dgbench.leaderboard.fit import DEFAULT_EPOCHS
from dgbench.leaderboard.schema import RecordParseError, parse_record, validate_record
from dgbench.records import content_hash, git_state, utc_now

REPRODUCTION_SCHEMA = "dgbench.reproduction"
REPRODUCTIONS_DIR = "reproductions"
METRIC_TOLERANCE = 0.02  # absolute, on test AP / AUC / accuracy (float and thread-order noise)
COMM_TOLERANCE = 0.05  # relative, on each epoch's bytes sent (partitioners may break ties differently)
THROUGHPUT_TOLERANCE = 0.5  # the claimed edges/s may exceed the reproduction's by at most 50% (timing noise)
TEST_METRICS = ("ap", "auc", "accuracy")
REPLACED_OPTIONS = ("--dataset", "--out", "--nproc")
REPRODUCED, NOT_REPRODUCED = "reproduced", "not reproduced"
NOT_COMPARED = {"out", "dataset", "timeout_s", "nproc", "backend", "device"}
PATH_OPTIONS = {"cost_model"}  # options typed as text that name a file: refused like click.Path ones
TIME_MARGIN, START_UP_S = 10.0, 600.0  # a re-run may take 10x the record's own time, plus start-up
SCRATCH_PREFIX = ".dgbench-verify"


@dataclass(frozen=True)
class Check:
    """One comparison: what, the claimed and reproduced values, and whether they agree."""

    name: str
    claimed: Any
    reproduced: Any
    ok: bool

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: claimed {self.claimed!r}, reproduced {self.reproduced!r}"


# --------------------------------------------------------------------------- comparing

def compare_runs(claimed: dict[str, Any], reproduced: dict[str, Any]) -> tuple[list[Check], bool]:
    """Every check of a reproduction against the record, and whether timing was checked (same hardware)."""
    checks = [Check(key, claimed[key], reproduced[key], claimed[key] == reproduced[key])
              for key in ("family", "task", "scheme", "model", "world_size")]
    for key in ("fingerprint", "num_nodes", "num_edges", "num_snapshots"):
        mine, theirs = claimed["dataset"].get(key), reproduced["dataset"].get(key)
        checks.append(Check(f"dataset.{key}", mine, theirs, mine == theirs))
    mine, theirs = _compared_hyperparameters(claimed), _compared_hyperparameters(reproduced)
    # an option added after the claim was made is absent from it, and its re-run took the option's default
    theirs = {k: v for k, v in theirs.items() if k in mine}
    checks.append(Check("hyperparameters", mine, theirs, mine == theirs))
    epochs = len(claimed["epochs"])
    checks.append(Check("epochs", epochs, len(reproduced["epochs"]), epochs == len(reproduced["epochs"])))
    for index, (a, b) in enumerate(zip(claimed["epochs"], reproduced["epochs"])):
        checks.append(Check(f"epochs[{index}].work", a["work"], b["work"], a["work"] == b["work"]))
        near = abs(a["comm_bytes"] - b["comm_bytes"]) <= COMM_TOLERANCE * max(a["comm_bytes"], b["comm_bytes"])
        checks.append(Check(f"epochs[{index}].comm_bytes", a["comm_bytes"], b["comm_bytes"], near))
    test_claimed = claimed["final_metrics"].get("test") or {}
    test_reproduced = reproduced["final_metrics"].get("test") or {}
    for metric in TEST_METRICS:
        a, b = test_claimed.get(metric), test_reproduced.get(metric)
        if a is not None:
            checks.append(Check(f"final_metrics.test.{metric}", a, b,
                                b is not None and abs(a - b) <= METRIC_TOLERANCE))
    timed = claimed["hardware_class"] == reproduced["hardware_class"]
    if timed:  # the claim's median against the reproduction's best epoch: a busy verifier only errs low
        a = run_figures(claimed).throughput
        b = max(epoch["throughput"] for epoch in timed_epochs(reproduced))
        checks.append(Check("throughput (claimed median vs reproduced best timed epoch)", round(a, 3), round(b, 3),
                            a <= b * (1 + THROUGHPUT_TOLERANCE)))
    return checks, timed


def _compared_hyperparameters(record: dict[str, Any]) -> dict[str, Any]:
    """Every hyper-parameter but where the run read and wrote and how long it could wait (the seed counts)."""
    return {k: v for k, v in sorted(record["hyperparameters"].items()) if k not in NOT_COMPARED}


# --------------------------------------------------------------------------- the store

def cache_dir() -> Path:
    return Path(os.environ.get("DGBENCH_CACHE", Path.home() / ".cache" / "dgbench")) / "official"


def official_store(record: dict[str, Any], board: Path | None) -> Path:
    """The official generated store the record names, built once into the cache (datasets need --store)."""
    from dgbench.leaderboard.board import default_board, load_official_stores
    fingerprint = record["dataset"]["fingerprint"]
    entry = load_official_stores(board or default_board()).get(fingerprint)
    if entry is None:
        raise DgbenchError(f"store {fingerprint[:12]} is not in the official registry: pass --store PATH "
                           f"(a store with that fingerprint)")
    if entry.get("source") != "generator":
        raise DgbenchError(f"official store {entry['name']} is a dataset: prepare it with "
                           f"`{entry['command']}` and pass --store PATH")
    path = cache_dir() / f"{fingerprint[:16]}.zarr"
    if not path.exists():
        from dgbench.registry import PREPARERS, load_plugins
        load_plugins("dgbench.generators", "dgbench.loaders")
        generator = entry["command"].split()[2]  # "dgbench prepare NAME ..."
        click.echo(f"building {entry['label']} ({entry['command']}) into {path}", err=True)
        PREPARERS[generator].build(out=path, **entry.get("options", {}))
    return path


def check_store(path: Path, record: dict[str, Any]) -> None:
    """Full validation (content re-hashed, fingerprint recomputed), then the record's fingerprint and sizes."""
    from dgbench.store import open_store
    from dgbench.store.validate import validate_store
    problems = validate_store(path)
    if problems:
        raise DgbenchError(f"{path}: not a valid store ({problems[0]}): nothing was re-run")
    store = open_store(path)
    dataset = record["dataset"]
    if store.fingerprint != dataset["fingerprint"]:
        raise DgbenchError(f"{path}: fingerprint {store.fingerprint[:12]}…, the record names "
                           f"{dataset['fingerprint'][:12]}…")
    sizes = {"kind": store.kind, "num_nodes": store.num_nodes, "num_edges": store.num_edges}
    if store.kind == "snapshots":
        sizes["num_snapshots"] = store.num_snapshots
    for key, value in sizes.items():
        if dataset.get(key) != value:
            raise DgbenchError(f"{path}: {key} is {value}, the record says {dataset.get(key)!r}")


# --------------------------------------------------------------------------- re-running

def run_arguments(record: dict[str, Any], store: Path, out: Path) -> list[str]:
    """The record's `dgbench run` arguments with the dataset, output and rank count replaced, checked by
    the run command's own parser. Refused: a command that is not `dgbench run`, and any other option that
    takes a path (re-running a record must not write where the record says)."""
    command = record["command"]
    if "run" not in command:
        raise DgbenchError(f"the record's command {' '.join(command)[:120]!r} is not a `dgbench run`: "
                           f"it cannot be re-run")
    given = command[command.index("run") + 1:]
    kept: list[str] = []
    skip = False
    for token in given:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name in REPLACED_OPTIONS:
            skip = "=" not in token
            continue
        kept.append(token)
    arguments = [*kept, "--dataset", str(store), "--out", str(out), "--nproc", str(record["world_size"])]
    from dgbench.cli import lazy_command
    run_command = lazy_command("run")
    try:
        context = run_command.make_context("run", list(arguments), resilient_parsing=False)
    except click.exceptions.ClickException as exc:
        raise DgbenchError(f"the record's run arguments do not parse here ({exc.format_message()})") from exc
    for param in run_command.get_params(context):
        value = context.params.get(param.name)
        if (isinstance(param.type, click.Path) or param.name in PATH_OPTIONS) and param.name not in ("dataset", "out") \
                and value not in (param.default, None, ""):
            raise DgbenchError(f"the record's command sets --{param.name.replace('_', '-')}, which takes a path: "
                               f"not re-run")
    _check_claimed_work(record, context.params.get("epochs") or DEFAULT_EPOCHS)
    return arguments


def _check_claimed_work(record: dict[str, Any], runs: int) -> None:
    """The command must run the epochs the record claims: a record claiming 4 epochs whose command says
    100,000,000 would otherwise keep a verifier busy without end."""
    claimed = len(record.get("epochs") or [])
    if runs != claimed:
        raise DgbenchError(f"the record's command runs --epochs {runs}, but the record claims {claimed} epochs: "
                           f"not re-run")


def claimed_seconds(record: dict[str, Any]) -> float:
    """How long the record says its run took: start to end, or its epochs' seconds if longer."""
    import datetime
    epochs = sum(float(e.get("time_s") or 0.0) for e in record.get("epochs") or [])
    try:
        wall = (datetime.datetime.fromisoformat(record["ended_at"])
                - datetime.datetime.fromisoformat(record["started_at"])).total_seconds()
    except (KeyError, TypeError, ValueError):
        wall = 0.0
    return max(epochs, wall, 0.0)


def rerun_timeout(record: dict[str, Any], given_s: float | None) -> float:
    """``--timeout`` when given, else TIME_MARGIN times the record's claimed time plus START_UP_S."""
    return given_s if given_s is not None else TIME_MARGIN * claimed_seconds(record) + START_UP_S


def rerun(arguments: list[str], timeout_s: float) -> Path:
    out = Path(arguments[arguments.index("--out") + 1])
    command = [sys.executable, "-m", "dgbench", "--quiet", "run", *arguments]
    click.echo(f"re-running: dgbench run {' '.join(arguments)} (at most {timeout_s:,.0f} s)", err=True)
    from dgbench.launch import _die_with_parent
    parent = os.getpid()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              preexec_fn=lambda: _die_with_parent(parent))  # a killed verifier ends its re-run
    except subprocess.TimeoutExpired as exc:
        raise DgbenchError(f"the re-run did not finish within {timeout_s:g} s") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise DgbenchError(f"the re-run failed: {last[:300]}")
    return out


# --------------------------------------------------------------------------- filing and reading

def reproduction_document(record: dict[str, Any], reproduced: dict[str, Any], checks: list[Check], timed: bool,
                          store: Path) -> dict[str, Any]:
    return {"schema": REPRODUCTION_SCHEMA, "schema_version": 1, "record": content_hash(record),
            "verdict": REPRODUCED if all(c.ok for c in checks) else NOT_REPRODUCED, "timing_checked": timed,
            "tolerances": {"metric_abs": METRIC_TOLERANCE, "comm_rel": COMM_TOLERANCE,
                           "throughput_rel": THROUGHPUT_TOLERANCE},
            "checks": [asdict(c) for c in checks], "store": str(store), "verified_at": utc_now(),
            "verifier_code": git_state(), "reproduction": reproduced}


def reproduction_path(board: Path, digest: str) -> Path:
    return Path(board) / REPRODUCTIONS_DIR / f"{digest}.json"


def read_reproduction(board: Path, record: dict[str, Any], digest: str) -> dict[str, Any] | None:
    """The filed reproduction of a record, re-checked: its embedded reproduced record must pass the schema,
    and the verdict is that of comparing it again with this code's tolerances (a file stating another
    verdict, e.g. a hand-edited one, shows what its content gives). None when there is none."""
    path = reproduction_path(board, digest)
    if not path.exists():
        return None
    try:
        document = parse_record(path)
    except RecordParseError as exc:
        raise DgbenchError(f"{path}: {exc}") from exc
    if document.get("schema") != REPRODUCTION_SCHEMA or document.get("record") != digest:
        raise DgbenchError(f"{path}: not a reproduction of record {digest[:12]}")
    reproduced = document.get("reproduction")
    problems = validate_record(reproduced) if isinstance(reproduced, dict) else ["missing"]
    if problems:
        raise DgbenchError(f"{path}: the reproduced record is invalid ({problems[0]})")
    checks, timed = compare_runs(record, reproduced)  # the content decides, not the stated verdict
    failed = next((c.name for c in checks if not c.ok), None)
    return {"verdict": NOT_REPRODUCED if failed else REPRODUCED, "timing_checked": timed, "failed": failed,
            "stated": document.get("verdict"), "hardware_class": reproduced["hardware_class"],
            "verified_at": document.get("verified_at")}


def reproduced_label(reproduction: dict[str, Any] | None) -> str:
    """What the board's Reproduced column says about a row."""
    if reproduction is None:
        return "not yet"
    if reproduction["verdict"] != REPRODUCED:
        return f"no ({reproduction['failed']})"
    return "yes" if reproduction["timing_checked"] else "yes (untimed)"


# --------------------------------------------------------------------------- command

@contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """SIGTERM raises SystemExit while a re-run works, so the re-run is killed and the scratch removed
    (the default action would end the verifier on the spot, leaving both)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def verify(record_path: Path, store: Path | None = None, board: Path | None = None,
           timeout_s: float | None = None) -> dict[str, Any]:
    """Verify one record (steps in the module docstring); returns the reproduction document."""
    record = load_checked(record_path)
    store = Path(store) if store is not None else official_store(record, board)
    check_store(store, record)
    scratch = scratch_dir(tempfile.gettempdir(), SCRATCH_PREFIX)  # one a killed verifier left goes next time
    try:
        with _terminate_as_exit():
            arguments = run_arguments(record, store.resolve(), scratch / "reproduction.json")
            reproduced = load_checked(rerun(arguments, rerun_timeout(record, timeout_s)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    checks, timed = compare_runs(record, reproduced)
    document = reproduction_document(record, reproduced, checks, timed, store)
    if board is not None:
        write_atomic(reproduction_path(board, document["record"]), json.dumps(document, indent=2, sort_keys=True)
                     + "\n")
    return document


@click.command(name="verify")
@click.argument("records", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--store", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The store to re-run on (default: the official generated store, built once into the cache).")
@click.option("--board", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="File each outcome on this board (reproductions/), where the tables show it.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), default=None,
              help=f"Seconds a re-run may take (default: {TIME_MARGIN:g}x the record's own time + {START_UP_S:g} s).")
def verify_command(records: tuple[Path, ...], store: Path | None, board: Path | None, timeout_s: float | None) -> None:
    """Re-run each RECORD on its store and compare within the stated tolerances; exit 1 unless reproduced."""
    failed = 0
    for path in records:
        document = verify(path, store, board, timeout_s)
        for check in document["checks"]:
            click.echo(f"  {Check(**check).line()}")
        timing = "" if document["timing_checked"] else " (timing not checked: other hardware)"
        click.echo(f"{path}: {document['verdict']}{timing}")
        failed += document["verdict"] != REPRODUCED
    if failed:
        sys.exit(1)
