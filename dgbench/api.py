"""The public Python API (re-exported by ``dgbench``): prepare and open stores, run a scheme, score
predictions against a store's evaluation set, read a board. Documented in docs/python-api.md.

Each function goes through the same code as its command: :func:`prepare` through the registered
preparer and its declared options (`dgbench prepare`), :func:`run` through ``RunConfig`` and the
trainers' ``resolve`` (`dgbench run`), so a run refused on the command line is refused here with the
same message, and the record is the one the command writes.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dgbench.errors import DgbenchError

if TYPE_CHECKING:  # importing dgbench stays light: pandas and the trainers are imported when used
    import pandas

    from dgbench.store import EdgeStreamStore, SnapshotStore


def prepare(name: str, out: str | Path | None = None, *, overwrite: bool = False,
            **options: Any) -> SnapshotStore | EdgeStreamStore:
    """Build a store with generator, dataset or format ``name`` (`dgbench list`), as `dgbench prepare
    NAME --out OUT ...` does; options by their Python names (``nodes=256``, ``edge_factor=3``). Returns
    the open store; ``out`` defaults to ``stores/NAME.zarr``."""
    import click

    from dgbench.registry import PREPARERS, load_plugins
    from dgbench.store import open_store
    load_plugins("dgbench.generators", "dgbench.loaders")
    preparer = PREPARERS.get(name)
    if preparer is None:
        raise DgbenchError(f"nothing to prepare called '{name}' (known: {', '.join(sorted(PREPARERS))})")
    known = {option.name: option for option in preparer.options if option.name}
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise DgbenchError(f"prepare '{name}' takes no option {', '.join(unknown)} "
                           f"(it takes: {', '.join(sorted(known)) or 'none'})")
    context = click.Context(click.Command(name, params=list(known.values())))
    values = {}
    for option_name, option in known.items():
        given = options.get(option_name, option.get_default(context))
        try:  # the command line's conversion and checks (types, ranges, choices, required)
            values[option_name] = option.process_value(context, given)
        except click.UsageError as exc:
            raise DgbenchError(f"prepare '{name}': {exc.format_message()}") from exc
    target = Path(out) if out is not None else Path("stores") / f"{name}.zarr"
    return open_store(preparer.build(out=target, overwrite=overwrite, **values))


class Record(dict):
    """A result record (docs/result-record.md) as the dict written to disk, with where it was written
    (``path``; None on ranks other than 0 under torchrun)."""

    def __init__(self, record: dict[str, Any], path: Path | None = None):
        super().__init__(record)
        self.path = path

    @property
    def metrics(self) -> dict[str, dict[str, float]]:
        """Final metrics by split (``val``, ``test``, ...)."""
        return self.get("final_metrics", {})

    def config(self) -> dict[str, Any]:
        """A run config that re-runs this record (``dgbench.run(**record.config())``, or saved as JSON for
        `dgbench run --config`): scheme, model, store, ranks, backend and every option that applied."""
        from dgbench.trainers.config import config_of_record
        return config_of_record(self)

    def __repr__(self) -> str:
        test = self.metrics.get("test", {})
        scores = ", ".join(f"{k}={test[k]:.4f}" for k in ("ap", "mrr") if test.get(k) is not None)
        return (f"Record({self.get('scheme')}/{self.get('model')} P={self.get('world_size')} on "
                f"{self.get('dataset', {}).get('name')}{', ' + scores if scores else ''}, path={self.path})")


def run(scheme: str, model: str, dataset: str | Path, **options: Any) -> Record:
    """Train ``model`` with ``scheme`` on the store ``dataset`` and write its record, as `dgbench run`
    does: options by their Python names (``epochs=2``, ``nproc=2``, ``out="runs"``; `dgbench run --help`
    lists them and who takes each), the same refusals, the same record."""
    from dgbench.trainers.cli import run as run_config
    from dgbench.trainers.config import RunConfig
    record, path = run_config(RunConfig(scheme, model, dataset, **options))
    return Record(record, path)


class Evaluator:
    """TGB / OGB-style scoring of one split of a store's fingerprinted link-prediction evaluation set.

    ``edges()`` gives the pairs to score: each positive (``src``, ``dst``, at ``t`` for streams or after
    input ``step`` for snapshot stores) and its K negatives (``negative_src``, ``negative_dst``; -1 where
    the set has none). ``eval({"y_pred_pos": (n,), "y_pred_neg": (n, K)})`` ranks each positive among its
    own negatives with ties averaged, as TGB's and OGB's evaluators do, and returns ``mrr`` and
    ``hits@k`` (k <= K), the 1:1 ``ap``/``auc``/``accuracy`` and counts: the keys and values a record's
    ``final_metrics[split]`` has for the same scores. Scores in empty slots are ignored.
    ``negatives="tgb"`` scores the TGB negative set imported beside the store (`dgbench prepare tgbl-*`,
    :func:`dgbench.import_tgb_negatives`); ``eval_negatives`` does not apply to it.
    """

    def __init__(self, store: str | Path, *, split: str = "test", negatives: str = "random",
                 eval_negatives: int = 9, max_events: int | None = None):
        from dgbench.tasks.link import EVAL_SPLITS, link_prediction_set
        if split not in EVAL_SPLITS:
            raise DgbenchError(f"split {split!r}: evaluation sets have {', '.join(EVAL_SPLITS)}")
        self.split = split
        if negatives == "tgb":  # TGB's own negatives, imported beside the store (loaders/tgb.py)
            from dgbench.loaders.tgb import tgb_set_of
            self.set = tgb_set_of(store)
        else:
            self.set = link_prediction_set(store, negatives, eval_negatives, max_events=max_events)

    @property
    def fingerprint(self) -> str:
        """The evaluation set's fingerprint (what a record's ``evaluation`` block cites)."""
        return self.set.fingerprint

    def edges(self) -> dict[str, np.ndarray]:
        """The split's positives and their negatives, row i of the negatives belonging to positive i."""
        when = "t" if f"{self.split}_t" in self.set.arrays else "steps"
        return {"src": self.set.get(self.split, "src"), "dst": self.set.get(self.split, "dst"),
                ("t" if when == "t" else "step"): self.set.get(self.split, when),
                "negative_src": self.set.get(self.split, "negative_src"),
                "negative_dst": self.set.get(self.split, "negatives"),
                "new_node": self.set.get(self.split, "new_node").astype(bool)}

    def eval(self, input_dict: dict[str, Any]) -> dict[str, float]:
        """Figures of ``y_pred_pos`` (n,) and ``y_pred_neg`` (n, K) scores (numpy arrays or torch tensors)
        of every positive of the split in :meth:`edges` order; ``eval_metric`` (optional, e.g.
        ``["mrr"]``) keeps only those figures."""
        from dgbench.tasks.evaluator import Evaluator as SetEvaluator
        missing = [key for key in ("y_pred_pos", "y_pred_neg") if key not in input_dict]
        if missing:
            raise DgbenchError(f"eval: input_dict lacks {', '.join(missing)}")
        stored = self.set.get(self.split, "negatives")
        positive = _as_array(input_dict["y_pred_pos"]).ravel()
        negative = _as_array(input_dict["y_pred_neg"])
        if negative.shape != stored.shape:
            raise DgbenchError(f"eval: y_pred_neg has shape {negative.shape}; the {self.split} split has "
                               f"{stored.shape[0]} positives with {stored.shape[1]} negatives each")
        negative = np.where(stored < 0, np.nan, negative)
        if np.isnan(negative[stored >= 0]).any() or np.isnan(positive).any():
            raise DgbenchError("eval: a score is NaN where the evaluation set has a pair to score")
        figures = SetEvaluator(self.set).score(self.split, positive, negative).as_metrics()
        wanted = input_dict.get("eval_metric")
        if wanted is None:
            return figures
        unknown = [name for name in wanted if name not in figures]
        if unknown:
            raise DgbenchError(f"eval: no metric {', '.join(unknown)} (there are: {', '.join(figures)})")
        return {name: figures[name] for name in wanted}


def _as_array(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor, on any device
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.float64)


def board_rows(path: str | Path | None = None) -> list[dict[str, Any]]:
    """One flat row per record on the board (default: :func:`dgbench.leaderboard.board.default_board`):
    track, whether it ranks officially, what ran where, throughput of its last epoch, test figures."""
    from dgbench.leaderboard.board import load_board
    rows = []
    for entry in load_board(path):
        record = entry.record
        last = record["epochs"][-1] if record.get("epochs") else {}
        row = {"track": entry.track, "official": entry.official is not None, "digest": entry.digest,
               "family": record["family"], "task": record.get("task"), "scheme": record["scheme"],
               "model": record["model"], "dataset": record["dataset"]["name"],
               "fingerprint": record["dataset"]["fingerprint"], "world_size": record["world_size"],
               "hardware_class": record.get("hardware_class"), "epoch_time_s": last.get("time_s"),
               "throughput": last.get("throughput"), "started_at": record.get("started_at")}
        row.update({f"test_{k}": v for k, v in record.get("final_metrics", {}).get("test", {}).items()})
        rows.append(row)
    return rows


def board(path: str | Path | None = None) -> pandas.DataFrame:
    """The board as a pandas DataFrame, one row per record (:func:`board_rows`); needs pandas."""
    try:
        import pandas
    except ImportError as exc:
        raise ImportError("dgbench.board needs pandas (pip install pandas); dgbench.board_rows gives the "
                          "same rows as dicts") from exc
    return pandas.DataFrame(board_rows(path))
