"""`dgbench compare`: runs side by side, grouped by comparable setup, each figure also as a ratio to the
group's first run.

For reviewing a change: run before and after, then compare. Runs are comparable when they trained the
same model on the same store (fingerprint) for the same task with the same hyper-parameters, apart from
the scheme, its own options, the world size and the seed (what a review varies). Each group is one
table, cut into column blocks that fit the terminal; a run with no comparable run is named under
"not compared". The figures are those of the board (docs/result-record.md, leaderboards/RULES.md).
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from dgbench.errors import DgbenchError
from dgbench.leaderboard.figures import RunFigures, run_figures
from dgbench.leaderboard.schema import RecordParseError, parse_record, validate_record
from dgbench.leaderboard.text import fitted_table, terminal_width
from dgbench.leaderboard.tracks import NON_LEARNING_KEYS
from dgbench.units import human, work_unit

IDENTITY: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("scheme / model", lambda r: f"{r['scheme']} / {r['model']}"),
    ("world size", lambda r: str(r["world_size"])),
    ("seed", lambda r: str(r["hyperparameters"].get("seed", "–"))),
    ("hardware", lambda r: r["hardware_class"]),
    ("code", lambda r: (r["code"].get("commit") or "unknown")[:12] + ("+dirty" if r["code"].get("dirty") else "")),
]
THROUGHPUT = "throughput"  # named per group: "edges/s" for snapshot stores, "events/s" for streams
QUANTITIES: list[tuple[str, Callable[[RunFigures], float | None]]] = [
    (THROUGHPUT, lambda f: f.throughput),
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
RATIO_NOTE = "(ratio = value / first run)"


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
    """{'groups': [one comparison per comparable setup], 'not_compared': [{'run', 'reason'}]}; a group is
    {'setup', 'runs', 'identity': {row: [values]}, 'figures': {row: {'values': [...], 'ratios': [...]}}}."""
    names = [str(p) for p in paths]
    records = [load_checked(p) for p in paths]
    groups, alone = [], []
    for setup, members in group_by_setup(records).items():
        if len(members) < 2:
            alone.append({"run": names[members[0]], "reason": "no other run of its setup"})
            continue
        groups.append(_group([names[i] for i in members], [records[i] for i in members], json.loads(setup)))
    return {"groups": groups, "not_compared": alone}


def group_by_setup(records: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Positions of ``records`` by comparable setup (as sorted JSON), in the order given. Within a store x
    model x task, only the hyper-parameters all its runs have are compared (a key only some have is a scheme's)."""
    buckets: dict[tuple, list[int]] = defaultdict(list)
    for index, record in enumerate(records):
        buckets[(record["dataset"]["fingerprint"], record["model"], record["task"])].append(index)
    groups: dict[str, list[int]] = defaultdict(list)
    for (fingerprint, model, task), members in buckets.items():
        shared = set.intersection(*(set(records[i]["hyperparameters"]) for i in members)) - NON_LEARNING_KEYS
        for index in members:
            record = records[index]
            setup = {"dataset": f"{record['dataset']['name']} [{fingerprint[:12]}]", "model": model, "task": task,
                     "family": record["family"],
                     "hyperparameters": {k: record["hyperparameters"][k] for k in sorted(shared)}}
            groups[json.dumps(setup, sort_keys=True)].append(index)
    return groups


def _group(names: list[str], records: list[dict[str, Any]], setup: dict[str, Any]) -> dict[str, Any]:
    figures = [run_figures(r) for r in records]
    result: dict[str, Any] = {"setup": setup, "runs": names,
                              "identity": {name: [get(r) for r in records] for name, get in IDENTITY},
                              "figures": {}}
    for name, get in QUANTITIES:
        values = [get(f) for f in figures]
        if all(v is None for v in values):
            continue
        base = values[0]
        row = f"{work_unit(setup['family'])}/s" if name == THROUGHPUT else name
        result["figures"][row] = {"values": values, "ratios": [None if v is None or not base else v / base
                                                               for v in values]}
    return result


def format_comparison(result: dict[str, Any], fmt: str, width: int | None = None) -> str:
    """Text (fitted to ``width``, default the terminal's), Markdown or JSON."""
    if fmt == "json":
        return json.dumps(result, indent=2) + "\n"
    width = width or terminal_width()
    parts = [_format_group(index, group, fmt, width) for index, group in enumerate(result["groups"], 1)]
    if not result["groups"]:
        parts.append("no two runs share a setup: nothing to compare\n")
    if result["not_compared"]:
        parts.append("not compared (no run of the same store, model, task and hyper-parameters):\n"
                     + "".join(f"  {item['run']}\n" for item in result["not_compared"]))
    return "\n".join(parts)


def _format_group(index: int, group: dict[str, Any], fmt: str, width: int) -> str:
    setup = group["setup"]
    title = f"group {index}: {setup['model']} on {setup['dataset']}, {setup['task']}, {len(group['runs'])} runs"
    labels = _labels(group)
    header = ["", *labels]
    shown_identity = {name: values for name, values in group["identity"].items()
                      if name != "scheme / model" and (name in ("world size",) or len(set(values)) > 1)}
    rows = [[name, *values] for name, values in shown_identity.items()]
    for name, figure in group["figures"].items():
        show = human if name.endswith("/s") else _number
        cells = [show(figure["values"][0]) if figure["values"][0] is not None else "–"]
        cells += [f"{show(v) if v is not None else '–'} ({_ratio(q)})"
                  for v, q in zip(figure["values"][1:], figure["ratios"][1:])]
        rows.append([name, *cells])
    runs = "".join(f"  {label} = {run}\n" for label, run in zip(labels, group["runs"]))
    if fmt == "md":
        table = "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                          + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"
        return f"{title}\n\n{table}\n{RATIO_NOTE}\n\n{runs}"
    differing = [name for name, values in group["identity"].items()
                 if name not in ("code", "seed") and len(set(values)) > 1]
    note = f"note: the runs differ in {', '.join(differing)}\n" if differing else ""
    return f"{title}\n{fitted_table(header, rows, width)}{RATIO_NOTE}\n{note}{runs}"


def _labels(group: dict[str, Any]) -> list[str]:
    """Short, unique column heads: scheme and world size, then the seed, then the position if need be."""
    identity = group["identity"]
    labels = [f"{s.split(' / ')[0]} P={w}" for s, w in zip(identity["scheme / model"], identity["world size"])]
    if len(set(labels)) < len(labels):
        labels = [f"{label} seed {seed}" for label, seed in zip(labels, identity["seed"])]
    if len(set(labels)) < len(labels):
        labels = [f"{label} #{i}" for i, label in enumerate(labels, 1)]
    return labels


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"×{value:.3f}"
