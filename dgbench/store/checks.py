"""The checks of a store's attributes that code relies on: types, sizes, names, the declared fingerprint,
offsets and split (docs/store-format.md, "Integrity")."""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from dgbench.store.format import (CHECKSUM_CHARS, EDGE_COLUMNS, FILE_DIGEST_CHARS, REQUIRED_ARRAYS, SNAPSHOTS,
                                  checksum_algorithm, combine_fingerprint, fingerprint_header)


HEX64 = re.compile(r"[0-9a-f]{64}")


ARRAY_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a plain folder name: no path can be built from it


FILE_KEY = re.compile(r"[a-z][a-z0-9_]{0,63}(/[A-Za-z0-9_.]{1,64}){1,8}")


NAME_ATTRIBUTES = ("dataset", "generator")  # provenance names that become dataset names in records


MAX_NAME_CHARS = 200


MAX_INTEGER = 2**63 - 1


def _short(value: Any, limit: int = 40) -> str:
    """A value for a one-line message: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _integer(attrs: dict[str, Any], key: str, low: int, problems: list[str]) -> int | None:
    value = attrs.get(key)
    if type(value) is not int or not low <= value <= MAX_INTEGER:
        problems.append(f"attribute '{key}' is {_short(value)}, expected an integer in {low}..2^63-1")
        return None
    return value


def _name_problem(key: str, value: Any) -> str | None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS or value in (".", "..") \
            or any(c in value for c in "/\\") or not value.isprintable():
        return (f"attribute 'provenance.{key}' is {_short(value)}, expected a printable name of at most "
                f"{MAX_NAME_CHARS} characters without '/' or '\\'")
    return None


def attribute_problems(attrs: dict[str, Any]) -> list[str]:
    """Problems with the root attributes code relies on (cheap: no array is read), e.g. a size that is
    not a positive integer, an unsafe array or dataset name, or a fingerprint the attributes do not give."""
    problems: list[str] = []
    kind = attrs["kind"]
    _integer(attrs, "num_nodes", 1, problems)
    edges = _integer(attrs, "num_edges", 0, problems)
    if type(attrs.get("directed")) is not bool:
        problems.append(f"attribute 'directed' is {_short(attrs.get('directed'))}, expected true or false")
    bipartite = attrs.get("bipartite")
    if bipartite is not None and not (isinstance(bipartite, dict)
                                      and all(type(v) is int and v >= 0 for v in bipartite.values())):
        problems.append(f"attribute 'bipartite' is {_short(bipartite)}, expected null or counts of vertices")
    problems += _provenance_problems(attrs.get("provenance", {}))
    problems += _declared_array_problems(kind, attrs.get("arrays"), edges)
    if kind == SNAPSHOTS:
        snapshots = _integer(attrs, "num_snapshots", 1, problems)
        offsets = (attrs.get("arrays") or {}).get("offsets")
        if snapshots is not None and isinstance(offsets, dict) and offsets.get("shape") != [snapshots + 1]:
            problems.append(f"array 'offsets': declared shape {_short(offsets.get('shape'))}, expected "
                            f"[T+1] = [{snapshots + 1}]")
    else:
        events = _integer(attrs, "num_events", 0, problems)
        if events is not None and edges is not None and events != edges:
            problems.append(f"attribute 'num_events' is {events} but 'num_edges' is {edges}")
        problems += _split_problems(attrs.get("split"), events)
    problems += _file_digest_problems(attrs.get("file_digests"))
    problems += _file_checksum_problems(attrs.get("file_checksums"), attrs.get("file_digests"),
                                        checksum_algorithm(attrs))
    problems += _vertex_count_problems(attrs, edges)
    problems += [f"attribute '{where}' is {value}, expected a finite number" for where, value in _non_finite(attrs)]
    fingerprint = attrs.get("fingerprint")
    if not isinstance(fingerprint, str) or not HEX64.fullmatch(fingerprint):
        problems.append(f"attribute 'fingerprint' is {_short(fingerprint)}, expected 64 lowercase hex digits")
    return problems


NODE_ARRAYS = ("node_features", "node_label", "node_ids")


FREE_VERTICES = 1 << 20  # vertices a store may declare beyond its edges' endpoints and node arrays' rows


def _vertex_count_problems(attrs: dict[str, Any], edges: int | None) -> list[str]:
    """num_nodes may not exceed what the arrays can hold: two endpoints per edge, the node arrays' rows,
    or FREE_VERTICES (isolated vertices), whichever is most; code allocates per-vertex arrays from it."""
    nodes, arrays = attrs.get("num_nodes"), attrs.get("arrays")
    if type(nodes) is not int or edges is None or not isinstance(arrays, dict):
        return []
    rows = [d for name in NODE_ARRAYS if isinstance(arrays.get(name), dict)
            for d in arrays[name].get("shape") or [] if type(d) is int]
    bound = max([2 * edges, FREE_VERTICES, *rows])
    if nodes > bound:
        return [f"attribute 'num_nodes' is {nodes:,}, more vertices than the store's arrays can hold "
                f"(at most {bound:,}: two per edge, the node arrays' rows, or {FREE_VERTICES:,})"]
    return []


def _non_finite(value: Any, where: str = "") -> Iterator[tuple[str, float]]:
    """Every NaN or infinite number in an attribute tree, with its dotted path."""
    if isinstance(value, float) and not np.isfinite(value):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _non_finite(item, f"{where}[{index}]")


def memory_problem(attrs: dict[str, Any]) -> str | None:
    """A store whose per-vertex arrays (8 bytes a vertex) alone exceed this machine's memory cannot run here."""
    need, have = int(attrs["num_nodes"]) * 8, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have:
        return (f"attribute 'num_nodes' is {attrs['num_nodes']:,}: one 8-byte value per vertex is "
                f"{need / 2**30:,.1f} GiB, more than this machine's {have / 2**30:,.1f} GiB of memory")
    return None


def declared_fingerprint_problem(attrs: dict[str, Any]) -> str | None:
    """The fingerprint recomputed from the attributes (the header and each array's recorded hash) must be
    the stored one: an edited size or a fingerprint copied from another store fails here, unread."""
    kind = attrs["kind"]
    recomputed = combine_fingerprint(kind, fingerprint_header(kind, attrs), attrs["arrays"])
    if recomputed != attrs["fingerprint"]:
        return (f"fingerprint: stored {attrs['fingerprint'][:12]}… but the store's attributes give "
                f"{recomputed[:12]}… (edited after it was written)")
    return None


def _provenance_problems(provenance: Any) -> list[str]:
    if not isinstance(provenance, dict):
        return [f"attribute 'provenance' is {_short(provenance)}, expected an object"]
    problems = [p for key in NAME_ATTRIBUTES if key in provenance and (p := _name_problem(key, provenance[key]))]
    transforms = provenance.get("transforms", [])
    if not isinstance(transforms, list) or not all(isinstance(t, (str, dict)) for t in transforms):
        problems.append(f"attribute 'provenance.transforms' is {_short(transforms)}, expected a list")
    return problems


def _declared_array_problems(kind: str, arrays: Any, edges: int | None) -> list[str]:
    if not isinstance(arrays, dict):
        return [f"attribute 'arrays' is {_short(arrays)}, expected an object"]
    problems = [f"array '{name}': required but not declared" for name in REQUIRED_ARRAYS[kind] if name not in arrays]
    for name, entry in arrays.items():
        if not ARRAY_NAME.fullmatch(name):
            problems.append(f"array name {_short(name)} is not a plain lowercase name")
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) \
                or not HEX64.fullmatch(entry["sha256"]) or not isinstance(entry.get("dtype"), str) \
                or not isinstance(entry.get("shape"), list) or not entry["shape"] \
                or not all(type(d) is int and 0 <= d <= MAX_INTEGER for d in entry["shape"]):
            problems.append(f"array '{name}': declared as {_short(entry)}, expected dtype, shape and sha256")
            continue
        try:
            np.dtype(entry["dtype"])
        except TypeError:
            problems.append(f"array '{name}': dtype {_short(entry['dtype'])} is not a numpy dtype")
        if name in EDGE_COLUMNS[kind] and edges is not None and entry["shape"][0] != edges:
            problems.append(f"array '{name}': declared with {entry['shape'][0]} rows, the store declares {edges} edges")
    return problems


def _split_problems(split: Any, events: int | None) -> list[str]:
    if not isinstance(split, dict) or type(split.get("train_end")) is not int or type(split.get("val_end")) is not int:
        return [f"attribute 'split' is {_short(split)}, expected train_end and val_end event indices"]
    if events is not None and not 0 <= split["train_end"] <= split["val_end"] <= events:
        return [f"attribute 'split': train_end {split['train_end']}, val_end {split['val_end']} do not fit "
                f"{events} events"]
    return []


def _file_digest_problems(digests: Any) -> list[str]:
    if digests is None:
        return []  # written before file digests existed: each array is hashed whole on its first read
    if not isinstance(digests, dict):
        return [f"attribute 'file_digests' is {_short(digests)}, expected an object"]
    for key, digest in digests.items():
        if not FILE_KEY.fullmatch(key) or ".." in key or not isinstance(digest, str) \
                or not re.fullmatch(f"[0-9a-f]{{{FILE_DIGEST_CHARS}}}", digest):
            return [f"attribute 'file_digests': entry {_short(key)}: {_short(digest)} is not a file key and digest"]
    return []


def _file_checksum_problems(checksums: Any, digests: Any, algorithm: Any) -> list[str]:
    if not isinstance(algorithm, str) or algorithm not in CHECKSUM_CHARS:
        return [f"attribute 'file_checksum_algorithm' is {_short(algorithm)}, expected one of "
                f"{', '.join(sorted(CHECKSUM_CHARS))}"]
    if checksums is None:
        return []  # written before file checksums existed: reads check file_digests (sha256) instead
    if not isinstance(checksums, dict) or not isinstance(digests, dict) or checksums.keys() != digests.keys():
        return [f"attribute 'file_checksums' is {_short(checksums)}, expected an object with the keys of "
                f"'file_digests'"]
    chars = CHECKSUM_CHARS[algorithm]
    for key, checksum in checksums.items():
        if not isinstance(checksum, str) or not re.fullmatch(f"[0-9a-f]{{{chars}}}", checksum):
            return [f"attribute 'file_checksums': entry {_short(key)}: {_short(checksum)} is not "
                    f"{chars} hex digits ({algorithm})"]
    return []


def offsets_problem(offsets: np.ndarray, num_snapshots: int, num_edges: int) -> str | None:
    """Why ``offsets`` cannot delimit ``num_snapshots`` snapshots of ``num_edges`` edges (None when it can)."""
    if offsets.ndim != 1 or len(offsets) != num_snapshots + 1:
        return f"array 'offsets': length {len(offsets)}, expected T+1 = {num_snapshots + 1}"
    if offsets[0] != 0:
        return f"array 'offsets': starts at {offsets[0]}, expected 0"
    drops = np.flatnonzero(np.diff(offsets) < 0)
    if len(drops):
        i = int(drops[0])
        return f"array 'offsets': decreasing at snapshot {i} ({offsets[i]} -> {offsets[i + 1]})"
    if offsets[-1] != num_edges:
        return f"array 'offsets': ends at {offsets[-1]}, the store declares {num_edges} edges"
    return None
