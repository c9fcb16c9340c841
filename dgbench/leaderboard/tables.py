"""The board as tables and scaling series: one model every output format (md, html, json) renders.

Official and unofficial records never share a table: each track gets an official table and, when
there are any, an unofficial one (stores whose fingerprint is not in the registry).
"""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from dgbench.leaderboard.board import Entry
from dgbench.leaderboard.figures import RunFigures, mean_std, run_figures
from dgbench.leaderboard.tracks import ACCURACY_METRICS, MIN_SEEDS, TRACKS, learning_setup, run_setup

MB = 1e6


@dataclass(frozen=True)
class Cell:
    text: str
    sort: float | str  # what a sortable table orders by


@dataclass
class Table:
    id: str
    title: str
    columns: list[str]
    numeric: list[bool]
    rows: list[list[Cell]]
    note: str = ""


@dataclass
class ScalingPoint:
    world_size: int
    throughput: float
    speedup: float
    efficiency: float
    comm_bytes: float
    records: int


@dataclass
class ScalingSeries:
    mode: str  # "strong" or "weak"
    official: bool
    dataset: str
    model: str
    scheme: str
    hardware: str
    setup: str  # run_setup as sorted JSON: a series never mixes runs of different setups
    points: list[ScalingPoint] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.scheme} · {self.dataset} · {self.hardware}"


@dataclass
class BoardView:
    """Everything rendered, per track."""

    tables: dict[str, list[Table]]
    scaling: list[ScalingSeries]
    throughput_runs: list[tuple[Entry, RunFigures]]  # official throughput rows, for the bar plots
    counts: dict[str, int]


def text(value: str) -> Cell:
    return Cell(value, value)


def number(value: float | None, digits: int = 3) -> Cell:
    if value is None:
        return Cell("–", float("-inf"))
    return Cell(f"{value:,.{digits}g}" if abs(value) < 10 ** digits else f"{value:,.0f}", float(value))


def dataset_label(entry: Entry) -> str:
    if entry.official is not None:
        return entry.official.get("label", entry.official["name"])
    dataset = entry.record["dataset"]
    return f"{dataset['name']} [{dataset['fingerprint'][:8]}]"


def code_label(record: dict[str, Any]) -> str:
    code = record["code"]
    commit = (code.get("commit") or "unknown")[:8]
    return commit + ("+dirty" if code.get("dirty") or code.get("dirty") is None else "")


def build_view(entries: list[Entry]) -> BoardView:
    by_track: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        by_track[entry.track].append(entry)
    tables: dict[str, list[Table]] = {}
    scaling: list[ScalingSeries] = []
    throughput_runs = []
    for official, section in ((True, "official"), (False, "unofficial")):
        def pick(track: str) -> list[Entry]:
            return [e for e in by_track[track] if (e.official is not None) == official]
        runs = sorted(((e, run_figures(e.record)) for e in pick("throughput")), key=_throughput_order)
        if official:
            throughput_runs = runs
        series = scaling_series(pick("scaling"), official)
        scaling += series
        built = {"throughput": throughput_table(runs, section), "scaling": scaling_table(series, section),
                 **accuracy_tables(pick("accuracy"), section)}
        for track, table in built.items():
            if table.rows or (official and track in TRACKS):
                tables.setdefault(track, []).append(table)
    counts = {track: len(by_track[track]) for track in TRACKS}
    return BoardView(tables, scaling, throughput_runs, counts)


def _throughput_order(item: tuple[Entry, RunFigures]) -> tuple:
    entry, figures = item
    record = entry.record
    return (dataset_label(entry), record["model"], record["hardware_class"], record["world_size"], -figures.throughput)


def _title(track: str, section: str) -> str:
    return f"{TRACKS[track].title} — {section}" + ("" if section == "official" else " (store not in the registry)")


THROUGHPUT_COLUMNS = ["Dataset", "Model", "Scheme", "Hardware", "World", "Edges/s", "Rank", "Epoch s", "Transfer s",
                      "Compute s", "Comm s", "Comm MB/epoch", "Peak MB", "Timed epochs", "Setup", "Code", "Record"]


def throughput_table(runs: list[tuple[Entry, RunFigures]], section: str) -> Table:
    """``runs`` sorted by _throughput_order; Rank counts within dataset x model x hardware x world size."""
    rows = []
    ranks: dict[tuple, int] = defaultdict(int)
    for entry, figures in runs:
        record = entry.record
        group = _throughput_order((entry, figures))[:-1]
        ranks[group] += 1
        rows.append([text(dataset_label(entry)), text(record["model"]), text(record["scheme"]),
                     text(record["hardware_class"]), number(record["world_size"]), number(figures.throughput),
                     number(ranks[group]), number(figures.time_s), number(figures.transfer_s), number(figures.compute_s),
                     number(figures.communication_s), number(figures.comm_bytes / MB),
                     number(figures.peak_memory_bytes / MB), number(figures.timed_epochs),
                     text(setup_label(run_setup(record))), text(code_label(record)), text(entry.digest[:12])])
    return Table(f"throughput-{section}", _title("throughput", section), THROUGHPUT_COLUMNS,
                 [c not in (0, 1, 2, 3, 14, 15, 16) for c in range(len(THROUGHPUT_COLUMNS))], rows)


# --------------------------------------------------------------------------- scaling

def scaling_series(entries: list[Entry], official: bool) -> list[ScalingSeries]:
    """Strong series: one store across world sizes. Weak series: one dataset name whose store grows
    with the world, keeping edges per rank near the smallest world's (ESDG §6.1 weak scaling)."""
    groups: dict[tuple, list[Entry]] = defaultdict(list)
    for entry in entries:
        record = entry.record
        groups[(record["dataset"]["name"], record["family"], record["model"], record["scheme"],
                record["hardware_class"], json.dumps(run_setup(record), sort_keys=True))].append(entry)
    series = []
    for (name, _, model, scheme, hardware, setup), members in sorted(groups.items()):
        by_store: dict[str, list[Entry]] = defaultdict(list)
        for entry in members:
            by_store[entry.record["dataset"]["fingerprint"]].append(entry)
        weak = _weak_points(members) if len(by_store) > 1 else {}
        in_weak = {e.record["dataset"]["fingerprint"] for point in weak.values() for e in point}
        for fingerprint, store_entries in by_store.items():
            strong = _by_world(store_entries)
            if len(strong) > 1 or fingerprint not in in_weak:  # a lone point already on a weak curve adds nothing
                series.append(_series("strong", official, dataset_label(store_entries[0]), model, scheme,
                                      hardware, setup, strong))
        if weak:
            series.append(_series("weak", official, name, model, scheme, hardware, setup, weak))
    return series


def _by_world(entries: list[Entry]) -> dict[int, list[Entry]]:
    points: dict[int, list[Entry]] = defaultdict(list)
    for entry in entries:
        points[entry.record["world_size"]].append(entry)
    return points


def _weak_points(entries: list[Entry]) -> dict[int, list[Entry]]:
    def edges_per_rank(entry: Entry) -> float:
        return entry.record["dataset"]["num_edges"] / entry.record["world_size"]

    by_world = _by_world(entries)
    base_world = min(by_world)
    target = min(edges_per_rank(e) for e in by_world[base_world])
    points = {}
    for world, members in by_world.items():
        best = min(members, key=lambda e: abs(edges_per_rank(e) - target))
        if abs(edges_per_rank(best) - target) <= 0.25 * target:
            fingerprint = best.record["dataset"]["fingerprint"]
            points[world] = [e for e in members if e.record["dataset"]["fingerprint"] == fingerprint]
    fingerprints = {members[0].record["dataset"]["fingerprint"] for members in points.values()}
    return points if len(fingerprints) > 1 else {}


def _series(mode: str, official: bool, dataset: str, model: str, scheme: str, hardware: str, setup: str,
            by_world: dict[int, list[Entry]]) -> ScalingSeries:
    series = ScalingSeries(mode, official, dataset, model, scheme, hardware, setup)
    base_world = min(by_world)
    medians = {world: statistics.median(run_figures(e.record).throughput for e in members)
               for world, members in by_world.items()}
    for world in sorted(by_world):
        speedup = medians[world] / medians[base_world] if medians[base_world] > 0 else 0.0
        comm = statistics.median(run_figures(e.record).comm_bytes for e in by_world[world])
        series.points.append(ScalingPoint(world, medians[world], speedup, speedup / (world / base_world), comm,
                                          len(by_world[world])))
    return series


SCALING_COLUMNS = ["Mode", "Dataset", "Model", "Scheme", "Hardware", "World", "Edges/s", "Speedup", "Efficiency",
                   "Comm MB/epoch", "Records", "Setup"]


def scaling_table(series: list[ScalingSeries], section: str) -> Table:
    rows = [[text(s.mode), text(s.dataset), text(s.model), text(s.scheme), text(s.hardware), number(p.world_size),
             number(p.throughput), number(p.speedup), number(p.efficiency), number(p.comm_bytes / MB),
             number(p.records), text(setup_label(json.loads(s.setup)))] for s in series for p in s.points]
    return Table(f"scaling-{section}", _title("scaling", section), SCALING_COLUMNS,
                 [5 <= c <= 10 for c in range(len(SCALING_COLUMNS))], rows,
                 note="Speedup: edges/s over the smallest world that ran in the series; efficiency: speedup / "
                      "(world / smallest world).")


# --------------------------------------------------------------------------- accuracy

ACCURACY_COLUMNS = ["Dataset", "Task", "Model", "Scheme", "World", "Seeds", "Test AP", "Test AUC",
                    "Test accuracy", "Setup"]


def accuracy_tables(entries: list[Entry], section: str) -> dict[str, Table]:
    """Ranked rows (enough seeds) and rows still waiting for seeds, for one section."""
    groups: dict[tuple, dict[int, Entry]] = defaultdict(dict)
    for entry in sorted(entries, key=lambda e: e.record["started_at"]):
        record = entry.record
        setup = json.dumps(learning_setup(record), sort_keys=True)
        key = (dataset_label(entry), record["task"], record["model"], record["scheme"], record["world_size"], setup)
        groups[key].setdefault(record["hyperparameters"]["seed"], entry)  # one run per seed counts
    ranked, pending = [], []
    for (dataset, task, model, scheme, world, setup), by_seed in groups.items():
        row = [text(dataset), text(task), text(model), text(scheme), number(world), number(len(by_seed))]
        for metric in ACCURACY_METRICS:
            values = [e.record["final_metrics"]["test"].get(metric) for e in by_seed.values()]
            row.append(_mean_std_cell([v for v in values if v is not None]))
        row.append(text(setup_label(json.loads(setup))))
        (ranked if len(by_seed) >= MIN_SEEDS else pending).append(row)
    for rows in (ranked, pending):
        rows.sort(key=lambda row: (row[0].sort, row[1].sort, row[2].sort, row[4].sort, -row[6].sort, row[3].sort))
    columns, numeric = ACCURACY_COLUMNS, [c in (4, 5, 6, 7, 8) for c in range(len(ACCURACY_COLUMNS))]
    return {"accuracy": Table(f"accuracy-{section}", _title("accuracy", section), columns, numeric, ranked,
                              note=f"Mean ± sample std over one run per seed; a row needs {MIN_SEEDS} seeds."),
            "accuracy-pending": Table(f"accuracy-pending-{section}",
                                      f"Accuracy — {section}, not yet ranked (fewer than {MIN_SEEDS} seeds)",
                                      columns, numeric, pending)}


def _mean_std_cell(values: list[float]) -> Cell:
    if not values:
        return Cell("–", float("-inf"))
    mean, std = mean_std(values)
    return Cell(f"{mean:.4f} ± {std:.4f}" if len(values) > 1 else f"{mean:.4f}", mean)


def setup_label(setup: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setup.items())
