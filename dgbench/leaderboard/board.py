"""A board on disk: the official-store registry, and accepted records filed by track and content hash.

Layout (leaderboards/ in the repo)::

    official_stores.json             fingerprints of stores prepared by the official loaders
    tracks/<track>/<sha256>.json     one accepted record, named by the hash of its content
    reproductions/<sha256>.json      `dgbench verify`'s outcome for that record (the trust model: RULES.md)

Naming by content hash means two people submitting at once never write the same file unless they
submit the same record (then the second is a duplicate), and a git merge of two boards only adds
files, so it never conflicts. Whether a record is official is decided when the board is read, from
the registry, so a fingerprint registered later promotes the records already on the board.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgbench.errors import DgbenchError
from dgbench.leaderboard.schema import Problem, RecordParseError, parse_record, validate_record
from dgbench.leaderboard.tracks import TIMED_TRACKS, TRACKS, qualifying_tracks, timing_problems
from dgbench.records import REPO_ROOT, content_hash, dgbench_checkout

OFFICIAL_STORES = "official_stores.json"
REPRODUCED = "reproduced"  # a filed reproduction's verdict when it agreed (dgbench/leaderboard/verify.py)
TRACKS_DIR = "tracks"
# Dataset fields that must agree with the registry entry of the record's fingerprint.
REGISTERED_SHAPE = ("kind", "num_nodes", "num_edges", "num_snapshots")


BOARD_ENV = "DGBENCH_BOARD"


def default_board() -> Path:
    """The board when --board is not given: ``$DGBENCH_BOARD``, else the leaderboards/ of the dgbench
    repository dgbench runs from (its own checkout, or the checkout the current folder is in); never a
    folder of an installed package."""
    if os.environ.get(BOARD_ENV):
        return Path(os.environ[BOARD_ENV])
    for start in (REPO_ROOT, Path.cwd()):
        checkout = dgbench_checkout(start)
        if checkout is not None and (checkout / "leaderboards").is_dir():
            return checkout / "leaderboards"
    raise DgbenchError(f"no board: give --board DIR or set {BOARD_ENV} (dgbench is installed, not run from its "
                       f"repository, so it has no board of its own)")


class Rejected(DgbenchError):
    """A submission refused; ``problems`` holds one line each."""

    def __init__(self, source: str | Path, problems: list[Problem]):
        self.source, self.problems = str(source), problems
        super().__init__("\n".join(f"rejected {source}: {p}" for p in problems))


@dataclass(frozen=True)
class Entry:
    """One accepted record as it lies on a board."""

    track: str
    digest: str
    path: Path
    record: dict[str, Any]
    official: dict[str, Any] | None  # the registry entry of its store, None when unofficial
    reproduction: dict[str, Any] | None = None  # `dgbench verify`'s filed outcome (verify.read_reproduction)
    unofficial_reason: str | None = None  # why a record on a registered store is not ranked officially


@dataclass(frozen=True)
class Submission:
    digest: str
    paths: list[Path]
    official: dict[str, Any] | None
    skipped: dict[str, list[Problem]] = field(default_factory=dict)  # track -> why the record is not on it
    unofficial: dict[str, str] = field(default_factory=dict)  # track -> why it is filed but not ranked officially


# --------------------------------------------------------------------------- official stores

def load_official_stores(board: Path) -> dict[str, dict[str, Any]]:
    """fingerprint -> registry entry. A board without its own registry (a scratch board such as
    runs/demo-board) uses the repo's: which stores are official is the benchmark's rule, not the board's."""
    path = Path(board) / OFFICIAL_STORES
    if not path.exists():
        try:
            path = default_board() / OFFICIAL_STORES
        except DgbenchError:
            return {}  # an installed dgbench outside the repository: no registry to fall back to
    if not path.exists():
        return {}
    try:
        registry = json.loads(path.read_text())
        stores = registry["stores"]
        return {entry["fingerprint"]: entry for entry in stores}
    except (ValueError, KeyError, TypeError) as exc:
        raise DgbenchError(f"{path}: malformed official-store registry ({exc})") from exc


def official_problems(record: dict[str, Any], registered: dict[str, Any] | None) -> list[Problem]:
    """A record claiming an official fingerprint must describe that store as it was registered."""
    if registered is None:
        return []
    dataset = record["dataset"]
    return [Problem(f"dataset.{key}", f"is {dataset.get(key)!r} but official store {registered['name']} "
                                      f"({dataset['fingerprint'][:12]}) has {registered[key]!r}")
            for key in REGISTERED_SHAPE if key in registered and dataset.get(key) != registered[key]]


# --------------------------------------------------------------------------- submission

def code_problems(record: dict[str, Any]) -> list[Problem]:
    code = record["code"]
    if code.get("commit") is None:
        return [Problem("code.commit", "unknown code version (not run from a git checkout); "
                                       "--allow-dirty accepts it")]
    if code.get("dirty") is None:
        return [Problem("code.dirty", "unknown whether the working tree was clean; --allow-dirty accepts it")]
    if code["dirty"]:
        return [Problem("code.dirty", f"the run's working tree had uncommitted changes on top of "
                                      f"{code['commit'][:12]}; commit them, or --allow-dirty accepts it")]
    return []


def check_submission(record: dict[str, Any], board: Path, tracks: list[str] | None,
                     allow_dirty: bool) -> tuple[list[str], list[Problem]]:
    """The tracks ``record`` goes to, and every reason to refuse it (schema first: later checks need it)."""
    problems = validate_record(record)
    if problems:
        return [], problems
    if not allow_dirty:
        problems += code_problems(record)
    problems += official_problems(record, load_official_stores(board).get(record["dataset"]["fingerprint"]))
    by_track = qualifying_tracks(record)
    if tracks:
        chosen = list(dict.fromkeys(tracks))
        problems += [p for name in chosen for p in by_track[name]]
    else:
        chosen = [name for name, track_problems in by_track.items() if not track_problems]
        if not chosen:
            problems += [Problem(p.field, f"{p.reason} (so it fits no track)")
                         for track_problems in by_track.values() for p in track_problems]
    digest = content_hash(record)
    problems += [Problem("(record)", f"duplicate: already on the board as {path.relative_to(board)}")
                 for path in (track_dir(board, name) / f"{digest}.json" for name in TRACKS) if path.exists()]
    return chosen, _unique(problems)


def submit(source: str | Path, board: str | Path | None = None, *, tracks: list[str] | None = None,
           allow_dirty: bool = False) -> Submission:
    """Check ``source`` and file it under each chosen track; raises :class:`Rejected` with every reason."""
    board = Path(board) if board is not None else default_board()
    unknown = [t for t in tracks or [] if t not in TRACKS]
    if unknown:
        raise DgbenchError(f"unknown track {unknown[0]!r} (tracks: {', '.join(TRACKS)})")
    try:
        record = parse_record(source)
    except RecordParseError as exc:
        raise Rejected(source, [exc.problem]) from exc
    chosen, problems = check_submission(record, board, tracks, allow_dirty)
    if problems:
        raise Rejected(source, problems)
    digest = content_hash(record)
    paths: list[Path] = []
    try:
        for name in chosen:
            paths.append(_file_new(track_dir(board, name) / f"{digest}.json", record, source))
    except BaseException:
        for path in paths:  # all tracks or none: a half-filed record would block its own resubmission
            path.unlink(missing_ok=True)
        raise
    registered = load_official_stores(board).get(record["dataset"]["fingerprint"])
    return Submission(digest, paths, registered, skipped_tracks(record, chosen, tracks),
                      {track: reason for track in chosen if (reason := ranking_problem(track, record, registered))})


def ranking_problem(track: str, record: dict[str, Any], registered: dict[str, Any] | None,
                    reproduction: dict[str, Any] | None = None) -> str | None:
    """Why a record on a registered store is not ranked officially on ``track`` (None: it is): it failed
    `dgbench verify` (any track); an accuracy record must have scored one of the store's official
    evaluation sets (dgbench/leaderboard/evaluation.py); a throughput or scaling record's timing must be
    clean (tracks.timing_problems: evidence, no contention, enough timed epochs, a stable spread)."""
    from dgbench.leaderboard.evaluation import evaluation_problem
    from dgbench.leaderboard.fallbacks import fallback_partitioner_reason
    fallback = fallback_partitioner_reason(record)
    if fallback:
        return fallback
    if registered is None:
        return None
    if reproduction is not None and reproduction.get("verdict") != REPRODUCED:
        return f"failed verification ({reproduction.get('failed')})"
    if track == "accuracy":
        return evaluation_problem(record, registered)
    if track in TIMED_TRACKS:
        return "; ".join(timing_problems(record)) or None
    return None


def skipped_tracks(record: dict[str, Any], chosen: list[str], tracks: list[str] | None) -> dict[str, list[Problem]]:
    """Each track the record was not filed on, with the rule it misses (tracks the user did not name are
    not listed: leaving them out was the user's choice)."""
    considered = tracks or list(TRACKS)
    return {name: problems for name, problems in qualifying_tracks(record).items()
            if name in considered and name not in chosen and problems}


def track_dir(board: Path, track: str) -> Path:
    return Path(board) / TRACKS_DIR / track


def _file_new(path: Path, record: dict[str, Any], source: str | Path) -> Path:
    """Create ``path`` atomically, never replacing an existing file (a concurrent identical submission)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2, sort_keys=True, allow_nan=False)
            f.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the board is for everyone to read
        os.link(tmp, path)  # fails if the name exists: no overwrite, unlike rename
    except FileExistsError as exc:
        raise Rejected(source, [Problem("(record)", f"duplicate: {path.name} appeared while submitting")]) from exc
    finally:
        os.unlink(tmp)
    return path


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


# --------------------------------------------------------------------------- reading a board

def load_board(board: str | Path | None = None) -> list[Entry]:
    """Every record on the board, each re-checked: a file edited after submission stops the rendering."""
    board = Path(board) if board is not None else default_board()
    official = load_official_stores(board)
    entries = []
    root = board / TRACKS_DIR
    for path in sorted(root.glob("*/*.json")) if root.is_dir() else []:
        if path.name.startswith("."):
            continue
        track = path.parent.name
        if track not in TRACKS:
            raise DgbenchError(f"{path}: {track!r} is not a track ({', '.join(TRACKS)})")
        record = _read_filed(path)
        registered = official.get(record["dataset"]["fingerprint"])
        reproduction = read_reproduction(board, record, path.stem)
        reason = ranking_problem(track, record, registered, reproduction)
        entries.append(Entry(track, path.stem, path, record, None if reason else registered, reproduction, reason))
    return entries


def read_reproduction(board: Path, record: dict[str, Any], digest: str) -> dict[str, Any] | None:
    from dgbench.leaderboard.verify import read_reproduction as read  # verify imports this module
    return read(board, record, digest)


def _read_filed(path: Path) -> dict[str, Any]:
    try:
        record = parse_record(path)
    except RecordParseError as exc:
        raise DgbenchError(f"{path}: {exc}") from exc
    if content_hash(record) != path.stem:
        raise DgbenchError(f"{path}: content does not match its name (edited after submission)")
    problems = validate_record(record)
    if problems:
        raise DgbenchError(f"{path}: {problems[0]}")
    return record
