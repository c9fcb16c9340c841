"""The accuracy track's time-to-quality table (MLPerf's measure; dgbench/leaderboard/evaluation.py).

One row per dataset × model × scheme × hardware × world size × setup over the accuracy records of stores
whose registry entry names a ``quality_target``: how many seeds reached it, and the median training
seconds and epochs they took (runs that never reached it are counted, not timed). Baselines (records with
``extra.baseline``: edgebank, persistence) train nothing, so they have no time to quality and are left out
here; their accuracy rows show where the target stands.
"""
from __future__ import annotations

import json
import statistics
from collections import defaultdict

from dgbench.leaderboard.board import Entry
from dgbench.leaderboard.evaluation import time_to_quality
from dgbench.leaderboard.tables import SETUP_PENDING, Table, _fill_setups, dataset_label, number, text
from dgbench.leaderboard.tracks import learning_setup

COLUMNS = ["Dataset", "Target", "Model", "Scheme", "Hardware", "World", "Seeds", "Reached", "Seconds to target",
           "Epochs to target", "Setup"]


def is_baseline(record: dict) -> bool:
    """A baseline's record (it ran instead of a training loop; dgbench/tasks/baselines.py)."""
    return isinstance(record.get("extra"), dict) and "baseline" in record["extra"]


def _target_label(target: dict) -> str:
    return f"{target.get('split', 'val')} {target.get('metric', 'ap')} ≥ {target['value']}"


def time_to_quality_table(entries: list[Entry], section: str) -> Table:
    """Rows of accuracy ``entries`` (one section) on stores with a quality target."""
    groups: dict[tuple, dict[int, Entry]] = defaultdict(dict)
    for entry in sorted(entries, key=lambda e: e.record["started_at"]):
        target = (entry.official or {}).get("quality_target")
        record = entry.record
        if not target or is_baseline(record):
            continue
        key = (dataset_label(entry), json.dumps(target, sort_keys=True), record["model"], record["scheme"],
               record["hardware_class"], record["world_size"], json.dumps(learning_setup(record), sort_keys=True))
        groups[key].setdefault(record["hyperparameters"].get("seed", 0), entry)
    rows, setups = [], []
    for (dataset, target, model, scheme, hardware, world, setup), by_seed in sorted(groups.items()):
        reached = [r for r in (time_to_quality(e.record, json.loads(target)) for e in by_seed.values()) if r]
        rows.append([text(dataset), text(_target_label(json.loads(target))), text(model), text(scheme),
                     text(hardware), number(world), number(len(by_seed)), number(len(reached)),
                     number(statistics.median(s for s, _ in reached) if reached else None),
                     number(statistics.median(n for _, n in reached) if reached else None), SETUP_PENDING])
        setups.append(json.loads(setup))
    note = _fill_setups(rows, COLUMNS.index("Setup"), setups)
    return Table(f"time-to-quality-{section}", f"Time to quality — {section}", COLUMNS,
                 [c in (5, 6, 7, 8, 9) for c in range(len(COLUMNS))], rows,
                 note="Training seconds (evaluation left out) and epochs until the target first holds, median over "
                      "the seeds that reached it (MLPerf's time-to-train); targets are the registry's "
                      "quality_target. " + note)
