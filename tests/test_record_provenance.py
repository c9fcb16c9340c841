"""A record names the code its ranks started with (docs/result-record.md, "code"), not the checkout when written."""
from __future__ import annotations

from pathlib import Path

from dgbench.trainers import experiment
from dgbench.trainers.config import RunConfig


def test_a_commit_made_while_the_ranks_train_is_not_the_records_code(tmp_path: Path, monkeypatch) -> None:
    from dgbench import records
    from dgbench.generators.esdg_random import build
    store = build(out=tmp_path / "s.zarr", nodes=64, snapshots=8, edge_factor=4.0, seed=0)
    head = ["a" * 40]
    launch = experiment.launch

    def launch_then_commit(*args, **kwargs):
        try:
            return launch(*args, **kwargs)
        finally:
            head[0] = "b" * 40  # someone commits while the ranks train

    monkeypatch.setattr(experiment, "launch", launch_then_commit)
    monkeypatch.setattr(records, "code_provenance",
                        lambda: {"commit": head[0], "dirty": False, "version": "0", "source": "checkout"})
    record = experiment.run_experiment(RunConfig("single", "tmgcn", store, epochs=1, threads=1, hidden=8))
    assert record["code"]["commit"] == "a" * 40
