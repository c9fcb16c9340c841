"""Evaluation sets as data: written once beside a store, fingerprinted, read back verified.

An evaluation set holds, for every validation and test positive of a task, the negatives it is ranked
against (OGB and TGB ship theirs as files for the same reason: TGB issue #62, an MRR of 0.73 against
0.31 reproduced because the negatives had changed). Once written, no code change can alter it: runs
read the arrays from disk, and a record cites the set's fingerprint, so two records with one
fingerprint scored exactly the same pairs.

Layout, beside the store ``X.zarr``::

    X.zarr.tasks/<name>/manifest.json     spec, store fingerprint, arrays (dtype, shape, sha256), fingerprint
    X.zarr.tasks/<name>/<array>.npy       plain .npy arrays (read with allow_pickle=False)

``<name>`` is ``<task>-<strategy>-k<K>`` (``-s<seed>`` when the set's seed is not 0); a node-classification
label set (:mod:`dgbench.tasks.node`) has no negatives and is named ``<task>-<labels>``. The fingerprint is
the sha256 of the canonical JSON of the manifest without it: schema, task, strategy, K, seed, the store's
fingerprint and every array's dtype, shape and content hash. Reading checks the store fingerprint, every
array's hash and the fingerprint; any difference is one line naming the file. A set is created in a
hidden folder and renamed into place in one step that never replaces (two runs creating the same set
at once: the second reads the first's).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dgbench.errors import DgbenchError
from dgbench.files import scratch_dir
from dgbench.memory import return_freed_memory
from dgbench.store import ARRAY_NAME, array_digest_update, read_attrs, rename_no_replace

SCHEMA = "dgbench.evaluation-set"
VERSION = 1
MANIFEST = "manifest.json"
SUFFIX = ".tasks"


@dataclass(frozen=True)
class EvaluationSpec:
    """What identifies an evaluation set besides its store: task, negative strategy, K and seed."""

    task: str
    strategy: str
    negatives: int
    seed: int = 0

    @property
    def name(self) -> str:
        negatives = f"-k{self.negatives}" if self.negatives else ""  # label sets have none
        return f"{self.task}-{self.strategy}{negatives}" + (f"-s{self.seed}" if self.seed else "")

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "strategy": self.strategy, "negatives": self.negatives, "seed": self.seed}


@dataclass
class EvaluationSet:
    """A loaded (verified) evaluation set: arrays by name, e.g. ``test_src``, ``test_negatives``."""

    spec: EvaluationSpec
    store_fingerprint: str
    fingerprint: str
    arrays: dict[str, np.ndarray]
    path: Path
    details: dict[str, Any] = field(default_factory=dict)

    def get(self, split: str, name: str) -> np.ndarray:
        key = f"{split}_{name}"
        if key not in self.arrays:
            raise DgbenchError(f"{self.path}: the evaluation set has no array {key!r}")
        return self.arrays[key]

    def without_arrays(self) -> EvaluationSet:
        """The set as a record cites it (spec, fingerprints, path, details), its arrays left out: what a
        launcher keeps while ranks that read the set themselves train (docs/discrete-schemes.md)."""
        return replace(self, arrays={})

    def citation(self) -> dict[str, Any]:
        """What a record says about the set it scored."""
        return {**self.spec.as_dict(), "fingerprint": self.fingerprint, "path": str(self.path),
                "store_fingerprint": self.store_fingerprint, **self.details}


def tasks_dir(store_path: str | Path) -> Path:
    store_path = Path(store_path)
    return store_path.parent / f"{store_path.name}{SUFFIX}"


def set_path(store_path: str | Path, spec: EvaluationSpec) -> Path:
    return tasks_dir(store_path) / spec.name


def _array_entry(values: np.ndarray) -> dict[str, Any]:
    hasher = hashlib.sha256()
    if values.size:  # an empty split (a target snapshot without edges) hashes no bytes
        array_digest_update(hasher, values)
    return {"dtype": values.dtype.newbyteorder("<").str if values.dtype.byteorder == ">" else values.dtype.str,
            "shape": list(values.shape), "sha256": hasher.hexdigest()}


def _fingerprint(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k not in ("fingerprint", "details")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def manifest_of(spec: EvaluationSpec, store_fingerprint: str, arrays: dict[str, np.ndarray],
                details: dict[str, Any]) -> dict[str, Any]:
    manifest = {"schema": SCHEMA, "version": VERSION, **spec.as_dict(), "store_fingerprint": store_fingerprint,
                "arrays": {name: _array_entry(values) for name, values in sorted(arrays.items())}}
    manifest["fingerprint"] = _fingerprint(manifest)
    manifest["details"] = details  # counts and definitions, for people; not part of the identity
    return manifest


def write_set(store_path: str | Path, spec: EvaluationSpec, store_fingerprint: str, arrays: dict[str, np.ndarray],
              details: dict[str, Any]) -> Path:
    """Write a new set beside the store; FileExistsError when one is already there."""
    final = set_path(store_path, spec)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = scratch_dir(final.parent, f".{final.name}.tmp")
    try:
        for name, values in arrays.items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(values), allow_pickle=False)
        manifest = manifest_of(spec, store_fingerprint, arrays, details)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        rename_no_replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def read_set(path: str | Path, store_fingerprint: str | None = None, num_nodes: int | None = None) -> EvaluationSet:
    """Load and verify a set: manifest fields, store fingerprint, every array's hash, the fingerprint, and
    (:func:`_content_problem`) the arrays' types, lengths and, given ``num_nodes``, vertex ids."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise DgbenchError(f"{path / MANIFEST}: not a readable evaluation-set manifest ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA or manifest.get("version") != VERSION:
        raise DgbenchError(f"{path / MANIFEST}: not a {SCHEMA} v{VERSION} manifest")
    problem = _manifest_problem(manifest)
    if problem:
        raise DgbenchError(f"{path / MANIFEST}: {problem}")
    if store_fingerprint is not None and manifest.get("store_fingerprint") != store_fingerprint:
        made_for = str(manifest.get("store_fingerprint"))[:12]
        raise DgbenchError(f"{path}: the evaluation set was made for store {made_for}, "
                           f"not this store ({store_fingerprint[:12]}); remove it to make one for this store")
    arrays = {}
    for name, entry in sorted(manifest.get("arrays", {}).items()):
        file = path / f"{name}.npy"
        try:
            values = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DgbenchError(f"{file}: unreadable evaluation-set array ({exc})") from exc
        if _array_entry(values) != entry:
            raise DgbenchError(f"{file}: differs from the hash its manifest records (the set was changed on disk)")
        arrays[name] = values
    if _fingerprint(manifest) != manifest.get("fingerprint"):
        raise DgbenchError(f"{path / MANIFEST}: its fingerprint does not match its content")
    problem = _content_problem(arrays, num_nodes)
    if problem:
        raise DgbenchError(f"{path}: {problem}")
    spec = EvaluationSpec(manifest["task"], manifest["strategy"], int(manifest["negatives"]), int(manifest["seed"]))
    return EvaluationSet(spec, manifest["store_fingerprint"], manifest["fingerprint"], arrays, path,
                         manifest.get("details", {}))


VERTEX_ARRAYS = ("src", "dst", "node", "negative_src", "negatives")  # <split>_<these> hold vertex ids
NONE = -1  # a negative slot left empty (fewer candidates than K): the only id below 0


def _manifest_problem(manifest: dict[str, Any]) -> str | None:
    """The first manifest field of the wrong type (one line: field and rule), or None."""
    for name in ("task", "strategy", "store_fingerprint"):
        if not isinstance(manifest.get(name), str):
            return f"field '{name}' is {manifest.get(name)!r:.40}, expected a string"
    for name in ("negatives", "seed"):
        value = manifest.get(name)
        if type(value) is not int or value < 0:
            return f"field '{name}' is {value!r:.40}, expected a non-negative integer"
    arrays = manifest.get("arrays")
    if not isinstance(arrays, dict):
        return f"field 'arrays' is {arrays!r:.40}, expected an object"
    for name in arrays:
        if not ARRAY_NAME.fullmatch(name):
            return f"array name {name!r:.60} is not a plain lowercase name (no paths)"
    return None


def _content_problem(arrays: dict[str, np.ndarray], num_nodes: int | None) -> str | None:
    """The first array that cannot be what a set holds: vertex ids that are not integers or (given
    ``num_nodes``) outside 0..N-1 (-1 only for an empty negative slot), or a split whose arrays differ
    in length (every array of a split has one row per positive)."""
    rows: dict[str, tuple[str, int]] = {}
    for name, values in sorted(arrays.items()):
        if values.ndim == 0:
            return f"array '{name}' is a scalar, expected one row per positive"
        split, _, what = name.partition("_")
        first = rows.setdefault(split, (name, len(values)))
        if len(values) != first[1]:
            return f"array '{name}' has {len(values):,} rows but '{first[0]}' has {first[1]:,}: one row per positive"
        if what not in VERTEX_ARRAYS:
            continue
        if values.dtype.kind not in "iu":
            return f"array '{name}' is {values.dtype}, expected integer vertex ids"
        low = NONE if what in ("negative_src", "negatives") else 0
        if num_nodes is not None and values.size and (values.min() < low or values.max() >= num_nodes):
            bad = values[(values < low) | (values >= num_nodes)].flat[0]
            allowed = f"0..{num_nodes - 1}" + (" or -1 (no negative)" if low == NONE else "")
            return f"array '{name}' holds vertex id {int(bad)}, outside {allowed}"
    return None


def ensure_set(store_path: str | Path, spec: EvaluationSpec, store_fingerprint: str,
               build: Callable[[], tuple[dict[str, np.ndarray], dict[str, Any]]]) -> EvaluationSet:
    """The set of ``spec`` beside the store: read when it exists (whatever the sampler code is now),
    else built with ``build() -> (arrays, details)``, written, and read back."""
    path = set_path(store_path, spec)
    if not path.exists():
        _build_and_write(store_path, spec, store_fingerprint, build)
        return_freed_memory()  # what building freed (every snapshot's edge keys) would stay resident otherwise
    return read_set(path, store_fingerprint, num_nodes=int(read_attrs(store_path)["num_nodes"]))


def _build_and_write(store_path: str | Path, spec: EvaluationSpec, store_fingerprint: str,
                     build: Callable[[], tuple[dict[str, np.ndarray], dict[str, Any]]]) -> None:
    """Build the set and write it (or leave the one another run wrote first); the built arrays are freed
    on return: the caller reads the set back from disk, verified."""
    arrays, details = build()
    try:
        write_set(store_path, spec, store_fingerprint, arrays, details)
    except FileExistsError:
        pass  # another run wrote it first: read theirs
    except OSError as exc:
        raise DgbenchError(f"{set_path(store_path, spec)}: cannot write the evaluation set beside the store "
                           f"({exc.strerror or exc}); make it where the store is writable with "
                           f"`dgbench tasks {store_path}`") from exc
