"""`dgbench compare`: two or more runs side by side, each figure also as a ratio to the first run.

For reviewing a change: run before and after, then compare. Identity rows (dataset fingerprint,
hardware, world size) come first so that comparing unlike runs is visible at a glance.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from dgbench.errors import DgbenchError
from dgbench.leaderboard.figures import RunFigures, run_figures
from dgbench.leaderboard.schema import RecordParseError, parse_record, validate_record

IDENTITY: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("scheme / model", lambda r: f"{r['scheme']} / {r['model']}"),
    ("dataset", lambda r: f"{r['dataset']['name']} [{r['dataset']['fingerprint'][:12]}]"),
    ("hardware", lambda r: r["hardware_class"]),
    ("world size", lambda r: str(r["world_size"])),
    ("code", lambda r: (r["code"].get("commit") or "unknown")[:12] + ("+dirty" if r["code"].get("dirty") else "")),
]
QUANTITIES: list[tuple[str, Callable[[RunFigures], float | None]]] = [
    ("edges/s", lambda f: f.throughput),
    ("epoch s", lambda f: f.time_s),
    ("transfer s", lambda f: f.transfer_s),
    ("compute s", lambda f: f.compute_s),
    ("communication s", lambda f: f.communication_s),
    ("comm MB/epoch", lambda f: f.comm_bytes / 1e6),
    ("peak memory MB", lambda f: f.peak_memory_bytes / 1e6),
    ("test ap", lambda f: f.test_metrics.get("ap")),
    ("test auc", lambda f: f.test_metrics.get("auc")),
    ("test accuracy", lambda f: f.test_metrics.get("accuracy")),
]


def load_checked(path: str | Path) -> dict[str, Any]:
    """A record that parses and passes the schema (compare refuses what submit would refuse as malformed)."""
    try:
        record = parse_record(path)
    except RecordParseError as exc:
        raise DgbenchError(f"{path}: {exc}") from exc
    problems = validate_record(record)
    if problems:
        raise DgbenchError(f"{path}: {problems[0]}")
    return record


def comparison(paths: list[str | Path]) -> dict[str, Any]:
    """{'runs': names, 'identity': {row: [values]}, 'figures': {row: {'values': [...], 'ratios': [...]}}}."""
    records = [load_checked(p) for p in paths]
    figures = [run_figures(r) for r in records]
    result: dict[str, Any] = {"runs": [str(p) for p in paths],
                              "identity": {name: [get(r) for r in records] for name, get in IDENTITY},
                              "figures": {}}
    for name, get in QUANTITIES:
        values = [get(f) for f in figures]
        if all(v is None for v in values):
            continue
        base = values[0]
        ratios = [None if v is None or not base else v / base for v in values]
        result["figures"][name] = {"values": values, "ratios": ratios}
    return result


def format_comparison(result: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result, indent=2) + "\n"
    runs = result["runs"]
    header = ["", *(Path(r).name for r in runs)]
    rows = [[name, *values] for name, values in result["identity"].items()]
    for name, figure in result["figures"].items():
        cells = [_number(figure["values"][0])]
        cells += [f"{_number(v)} ({_ratio(q)})" for v, q in zip(figure["values"][1:], figure["ratios"][1:])]
        rows.append([name, *cells])
    if fmt == "md":
        return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                         + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    differing = [name for name, values in result["identity"].items() if name != "code" and len(set(values)) > 1]
    warning = f"note: the runs differ in {', '.join(differing)}: the ratios compare unlike runs\n" if differing else ""
    return ("\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows])
            + "\n(ratio = value / first run)\n" + warning)


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"×{value:.3f}"
