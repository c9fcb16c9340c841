"""`dgbench run --seeds 0,1,2`: one run, and one record, per seed — what the accuracy track ranks (mean ±
sample std over at least three seeds, leaderboards/RULES.md).

The seeds run in one launch (starting ranks dominates small runs), each exactly as ``--seed S`` would:
the record of seed S is the record ``dgbench run ... --seed S`` writes, and names its own seed. Every
seed scores the same evaluation sets (they do not depend on the run's seed; dgbench/tasks/evalset.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dgbench.errors import DgbenchError
from dgbench.options import Options, option
from dgbench.trainers.config import RunConfig


@dataclass(frozen=True)
class SeedsOptions(Options):
    """The run command's several-seeds option (not a hyper-parameter: each record names its own seed)."""

    seeds: str | None = option(None, "Comma list of seeds: one run and one record per seed, in one launch (the "
                                     "accuracy track ranks mean ± std over >= 3 seeds); --out must be a folder.",
                               record=False)


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> [0, 1, 2]; one line naming the problem otherwise."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise DgbenchError(f"--seeds {text}: a comma list of integers, e.g. 0,1,2") from exc
    if not seeds:
        raise DgbenchError(f"--seeds {text!r}: name at least one seed")
    if len(set(seeds)) != len(seeds):
        raise DgbenchError(f"--seeds {text}: a seed is named twice (one record per seed)")
    return seeds


def run_seeds(config: RunConfig, seeds: list[int]) -> list[tuple[dict[str, Any], Path | None]]:
    """Each seed's record and where it was written (None on ranks other than 0 under torchrun)."""
    from dgbench.records import prepare_output, write_record
    from dgbench.trainers.experiment import resolve, run_experiments
    if Path(config.out).suffix == ".json":
        raise DgbenchError(f"--seeds writes one record per seed: give --out a folder, not {config.out}")
    configs = [config.with_options() for _ in seeds]
    for seeded, seed in zip(configs, seeds):
        seeded.seed = seed
        resolve(seeded)  # every seed would run as asked, before any trains
    main = int(os.environ.get("RANK", "0")) == 0
    if main:
        prepare_output(config.out)
    records = run_experiments(configs)
    return [(record, write_record(record, Path(config.out) / seeded_filename(record)) if main else None)
            for record in records]


def seeded_filename(record: dict[str, Any]) -> str:
    """The record's usual file name with its seed before the extension (runs of one launch share a start)."""
    from dgbench.records import record_filename
    return record_filename(record).removesuffix(".json") + f"-seed{record['hyperparameters']['seed']}.json"
