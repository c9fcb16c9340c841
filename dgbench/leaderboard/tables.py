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
from dgbench.leaderboard.verify import reproduced_label
from dgbench.units import human, rate, work_unit

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
    base: str = ""  # what speedups are measured against (Base column; see _base)
    base_world: int = 1
    family: str = "discrete"  # whose work unit its rates are in: edges/s (snapshots) or events/s (streams)

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


def _units(families: set[str]) -> str:
    """The rate units a table's rows are in, for its note: 'edges/s', 'events/s', or both named by family."""
    if len(families) == 1:
        return f"{work_unit(next(iter(families)))}/s"
    return f"({work_unit('discrete')}/s for snapshot stores, {work_unit('continuous')}/s for streams)"


def rate_cell(per_second: float, family: str) -> Cell:
    """A throughput in its family's unit with a k / M prefix (events/s for streams); sorts by the number."""
    return Cell(rate(per_second, family), float(per_second))


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
        from dgbench.leaderboard.quality import time_to_quality_table  # it builds on this module's cells
        built = {"throughput": throughput_table(runs, section), "scaling": scaling_table(series, section),
                 **accuracy_tables(link_prediction(pick("accuracy")), section),
                 **node_classification_tables(node_classification(pick("accuracy")), section),
                 "time-to-quality": time_to_quality_table(link_prediction(pick("accuracy")), section)}
        for track, table in built.items():
            if table.rows or (official and track in TRACKS):
                tables.setdefault(track, []).append(table)
    counts = {track: len(by_track[track]) for track in TRACKS}
    return BoardView(tables, scaling, throughput_runs, counts)


def _throughput_order(item: tuple[Entry, RunFigures]) -> tuple:
    """Group (dataset, model, hardware, world), then reproduced rows before rows not yet verified (RULES.md,
    "Trust": an unverified claim never ranks above a reproduced row), then edges/s."""
    entry, figures = item
    record = entry.record
    return (dataset_label(entry), record["model"], record["hardware_class"], record["world_size"],
            not _reproduced(entry), -figures.throughput)


def _reproduced(entry: Entry) -> bool:
    return entry.reproduction is not None and reproduced_label(entry.reproduction).startswith("yes")


def _title(track: str, section: str) -> str:
    if section == "official":
        return f"{TRACKS[track].title} — {section}"
    why = "store not in the registry, or not ranked: see Not ranked" if track == "throughput" else \
        "store not in the registry, or not ranked officially"
    return f"{TRACKS[track].title} — {section} ({why})"


THROUGHPUT_COLUMNS = ["Dataset", "Model", "Scheme", "Hardware", "World", "Threads", "Throughput", "CV", "Rank",
                      "Epoch s", "Busy s", "Wait s", "Transfer s", "λ", "Comm MB/epoch", "Peak MB",
                      "Setup", "Code", "Record", "Reproduced", "Not ranked"]
TEXT_COLUMNS = {"Dataset", "Model", "Scheme", "Hardware", "Setup", "Code", "Record", "Reproduced", "Not ranked"}


def median_spread(figures: RunFigures, family: str) -> Cell:
    """Median throughput ± half the interquartile range of the timed epochs, in the family's unit (sorted by
    the median)."""
    if figures.spread is None or figures.spread.count < 2:
        return rate_cell(figures.throughput, family)
    return Cell(f"{rate(figures.throughput, family)} ± {human(figures.spread.iqr / 2)}", figures.throughput)


def percent(value: float | None) -> Cell:
    return Cell("–", float("-inf")) if value is None else Cell(f"{100 * value:.1f}%", float(value))


def throughput_table(runs: list[tuple[Entry, RunFigures]], section: str) -> Table:
    """``runs`` sorted by _throughput_order; Rank counts within dataset x model x hardware x world size, and
    only rows with no reason not to rank (``Entry.unofficial_reason``: contended, unstable, too few timed
    epochs, failed verification) get one."""
    rows, setups = [], []
    ranks: dict[tuple, int] = defaultdict(int)
    for entry, figures in runs:
        record = entry.record
        group = _throughput_order((entry, figures))[:4]
        ranked = entry.unofficial_reason is None
        if ranked:
            ranks[group] += 1
        rows.append([text(dataset_label(entry)), text(record["model"]), text(record["scheme"]),
                     text(record["hardware_class"]), number(record["world_size"]),
                     number((record.get("timing") or {}).get("threads_per_rank")),
                     median_spread(figures, record["family"]), percent(figures.spread.cv if figures.spread else None),
                     number(ranks[group] if ranked else None), number(figures.time_s), number(figures.busy_s),
                     number(figures.wait_s), number(figures.collective_transfer_s), number(figures.balance),
                     number(figures.comm_bytes / MB), number(figures.peak_memory_bytes / MB),
                     SETUP_PENDING, text(code_label(record)), text(entry.digest[:12]),
                     text(reproduced_label(entry.reproduction)), text(entry.unofficial_reason or "")])
        setups.append(run_setup(record))
    note = _fill_setups(rows, THROUGHPUT_COLUMNS.index("Setup"), setups)
    return Table(f"throughput-{section}", _title("throughput", section), THROUGHPUT_COLUMNS,
                 [c not in TEXT_COLUMNS for c in THROUGHPUT_COLUMNS], rows,
                 note=f"Throughput: the median timed epoch's {_units({e.record['family'] for e, _ in runs})}, "
                      "± half the interquartile range of the timed epochs; CV: "
                      "their coefficient of variation. Epoch s and its split (busy + wait for the last rank at "
                      "collectives + collective transfer, the slowest rank's) are the median timed epoch's; λ: "
                      "max / min busy seconds over ranks. Reproduced: re-run by `dgbench verify` (RULES.md, "
                      "Trust); reproduced rows rank before rows not yet verified. Not ranked: why a row on a "
                      "registered store is listed here (RULES.md, Clean timing). " + note)


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
    for (name, family, model, scheme, hardware, setup), members in sorted(groups.items()):
        by_store: dict[str, list[Entry]] = defaultdict(list)
        for entry in members:
            by_store[entry.record["dataset"]["fingerprint"]].append(entry)
        weak = _weak_points(members) if len(by_store) > 1 else {}
        in_weak = {e.record["dataset"]["fingerprint"] for point in weak.values() for e in point}
        for fingerprint, store_entries in by_store.items():
            strong = _by_world(store_entries)
            if len(strong) > 1 or fingerprint not in in_weak:  # a lone point already on a weak curve adds nothing
                base = _base(strong, _single_p1(entries, store_entries[0], json.loads(setup)))
                series.append(_series("strong", official, dataset_label(store_entries[0]), model, scheme,
                                      hardware, setup, strong, base, family))
        if weak:
            series.append(_series("weak", official, name, model, scheme, hardware, setup, weak, _base(weak, []),
                                  family))
    return series


def _single_p1(entries: list[Entry], like: Entry, setup: dict[str, Any]) -> list[Entry]:
    """P = 1 runs of the `single` scheme on ``like``'s store, model and hardware whose setup agrees with
    ``setup`` on every key both carry (options only one scheme has do not keep them apart)."""
    record = like.record

    def agrees(entry: Entry) -> bool:
        other = run_setup(entry.record)
        return all(other[key] == setup[key] for key in other.keys() & setup.keys())

    return [e for e in entries if e.record["scheme"] == "single" and e.record["world_size"] == 1
            and e.record["dataset"]["fingerprint"] == record["dataset"]["fingerprint"]
            and e.record["model"] == record["model"] and e.record["hardware_class"] == record["hardware_class"]
            and agrees(e)]


def _base(by_world: dict[int, list[Entry]], single_p1: list[Entry]) -> tuple[str, int, float]:
    """(label, world, throughput) speedups are measured against: the series' own P = 1 point; else the
    `single` scheme's P = 1 run of the same store, model, hardware and setup; else the smallest world
    that ran, said so (its own speedup is then 1 by definition, not a claim that it scales)."""
    if 1 in by_world:
        return "P=1", 1, _median_throughput(by_world[1])
    if single_p1:
        return "single P=1", 1, _median_throughput(single_p1)
    smallest = min(by_world)
    return f"P={smallest} (no P=1 run)", smallest, _median_throughput(by_world[smallest])


def _median_throughput(entries: list[Entry]) -> float:
    return statistics.median(run_figures(e.record).throughput for e in entries)


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
            by_world: dict[int, list[Entry]], base: tuple[str, int, float], family: str) -> ScalingSeries:
    label, base_world, base_throughput = base
    series = ScalingSeries(mode, official, dataset, model, scheme, hardware, setup, base=label,
                           base_world=base_world, family=family)
    for world in sorted(by_world):
        throughput = _median_throughput(by_world[world])
        speedup = throughput / base_throughput if base_throughput > 0 else 0.0
        comm = statistics.median(run_figures(e.record).comm_bytes for e in by_world[world])
        series.points.append(ScalingPoint(world, throughput, speedup, speedup / (world / base_world), comm,
                                          len(by_world[world])))
    return series


SCALING_COLUMNS = ["Mode", "Dataset", "Model", "Scheme", "Hardware", "World", "Throughput", "Speedup", "Efficiency",
                   "Base", "Comm MB/epoch", "Records", "Setup"]


def scaling_table(series: list[ScalingSeries], section: str) -> Table:
    """One row per point; its throughput cell carries the series' unit (edges/s or events/s)."""
    rows = [[text(s.mode), text(s.dataset), text(s.model), text(s.scheme), text(s.hardware), number(p.world_size),
             rate_cell(p.throughput, s.family), number(p.speedup), number(p.efficiency), text(s.base),
             number(p.comm_bytes / MB), number(p.records), SETUP_PENDING] for s in series for p in s.points]
    setups = _fill_setups(rows, SCALING_COLUMNS.index("Setup"), [json.loads(s.setup) for s in series for _ in s.points])
    return Table(f"scaling-{section}", _title("scaling", section), SCALING_COLUMNS,
                 [5 <= c <= 8 or 10 <= c <= 11 for c in range(len(SCALING_COLUMNS))], rows,
                 note=f"Throughput: the median timed epoch's {_units({s.family for s in series})}. Speedup: "
                      "throughput over the base's. Base: the series' own P=1 point; else the "
                      "single scheme's P=1 run of the same store, model, hardware and setup; else the smallest "
                      "world that ran (named so). Efficiency: speedup / (world / base world). " + setups)


# --------------------------------------------------------------------------- accuracy

ACCURACY_COLUMNS = ["Dataset", "Task", "Model", "Scheme", "World", "Seeds", "Test AP", "Test AUC",
                    "Test accuracy", "Test MRR", "Setup"]
ACCURACY_FIGURES = (*ACCURACY_METRICS, "mrr")  # MRR: rank among the evaluation set's negatives (dgbench/tasks)


NODE_CLASSIFICATION_TASK = "node_classification"  # a record's task field (dgbench/tasks/node.py)
NODE_COLUMNS = ["Dataset", "Task", "Model", "Scheme", "World", "Seeds", "Test AUC", "Test AP", "Test F1",
                "Test accuracy", "Setup"]
NODE_FIGURES = ("auc", "ap", "f1", "accuracy")


def link_prediction(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e.record["task"] != NODE_CLASSIFICATION_TASK]


def node_classification(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e.record["task"] == NODE_CLASSIFICATION_TASK]


def node_classification_tables(entries: list[Entry], section: str) -> dict[str, Table]:
    """Node-classification rows in tables of their own (never ranked against link prediction): AUC first."""
    return accuracy_tables(entries, section, table_key="node-classification", columns=NODE_COLUMNS,
                           figures=NODE_FIGURES, name="Node classification")


def accuracy_tables(entries: list[Entry], section: str, table_key: str = "accuracy",
                    columns: list[str] = ACCURACY_COLUMNS, figures: tuple[str, ...] = ACCURACY_FIGURES,
                    name: str = "Accuracy") -> dict[str, Table]:
    """Ranked rows (enough seeds) and rows still waiting for seeds, for one section (link prediction's
    columns unless ``columns``/``figures`` say otherwise)."""
    groups: dict[tuple, dict[int, Entry]] = defaultdict(dict)
    for entry in sorted(entries, key=lambda e: e.record["started_at"]):
        record = entry.record
        setup = json.dumps(learning_setup(record), sort_keys=True)
        key = (dataset_label(entry), record["task"], record["model"], record["scheme"], record["world_size"], setup)
        groups[key].setdefault(record["hyperparameters"]["seed"], entry)  # one run per seed counts
    ranked, pending = [], []
    for (dataset, task, model, scheme, world, setup), by_seed in groups.items():
        row = [text(dataset), text(task), text(model), text(scheme), number(world), number(len(by_seed))]
        for metric in figures:
            values = [e.record["final_metrics"]["test"].get(metric) for e in by_seed.values()]
            row.append(_mean_std_cell([v for v in values if v is not None]))
        row.append(Cell(setup, setup))  # the setup as JSON until _fill_setups words it
        (ranked if len(by_seed) >= MIN_SEEDS else pending).append(row)
    notes = []
    for rows in (ranked, pending):
        rows.sort(key=lambda row: (row[0].sort, row[1].sort, row[2].sort, row[4].sort, -row[6].sort, row[3].sort))
        setup_column = columns.index("Setup")
        notes.append(_fill_setups(rows, setup_column, [json.loads(row[setup_column].text) for row in rows]))
    numeric = [c in (4, 5, 6, 7, 8, 9) for c in range(len(columns))]
    reasons = sorted({e.unofficial_reason for e in entries if e.unofficial_reason})
    if reasons:  # records of registered stores listed here: why each is not ranked officially
        notes = ["Not ranked officially: " + "; ".join(reasons) + ". " + note for note in notes]
    title = _title("accuracy", section) if table_key == "accuracy" else f"{name} — {section}"
    return {table_key: Table(f"{table_key}-{section}", title, columns, numeric, ranked,
                             note=f"Mean ± sample std over one run per seed; a row needs {MIN_SEEDS} seeds. "
                                  + notes[0]),
            f"{table_key}-pending": Table(f"{table_key}-pending-{section}",
                                          f"{name} — {section}, not yet ranked (fewer than {MIN_SEEDS} seeds)",
                                          columns, numeric, pending, note=notes[1])}


def _mean_std_cell(values: list[float]) -> Cell:
    if not values:
        return Cell("–", float("-inf"))
    mean, std = mean_std(values)
    return Cell(f"{mean:.4f} ± {std:.4f}" if len(values) > 1 else f"{mean:.4f}", mean)


def setup_label(setup: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setup.items())


SETUP_PENDING = Cell("", "")  # replaced by _fill_setups once every row of the table is known
SAME_SETUP = "see note"


def collapsed_setups(setups: list[dict[str, Any]]) -> tuple[list[str], str]:
    """Each row's setup as only the options whose values differ between rows, and the options every
    row that has them shares, said once (so the Setup column stays narrow: a table fits 1,400 px)."""
    values: dict[str, set[str]] = defaultdict(set)
    for setup in setups:
        for key, value in setup.items():
            values[key].add(json.dumps(value, sort_keys=True))
    shared = {key: json.loads(next(iter(found))) for key, found in sorted(values.items()) if len(found) == 1}
    labels = [setup_label({k: v for k, v in setup.items() if k not in shared}) or SAME_SETUP for setup in setups]
    return labels, setup_label(shared)


def _fill_setups(rows: list[list[Cell]], column: int, setups: list[dict[str, Any]]) -> str:
    """Put the collapsed setups into ``column`` of ``rows``; returns the table note's sentence on them."""
    labels, shared = collapsed_setups(setups)
    for row, label in zip(rows, labels):
        row[column] = text(label)
    if not rows:
        return ""
    return (f"Setup: the options that differ between rows; every row that has them also has {shared}."
            if shared else "Setup: every option of the run that changes its speed.")
