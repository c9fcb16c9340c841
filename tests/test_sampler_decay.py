"""--sampler-decay (T-GCN §3.2's time-decay weights of the sis sampler) reaches the sampler of a run."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import run_experiments


@pytest.fixture(scope="module")
def stream(tmp_path_factory) -> Path:
    from dgbench.generators.stream import build
    return build(out=tmp_path_factory.mktemp("decay") / "s.zarr", users=30, items=30, events=600, edge_dim=2,
                 seed=1)


def test_decay_changes_what_sis_samples_and_is_recorded(stream):
    base = dict(epochs=1, batch_size=100, memory_dim=8, neighbors=4, sampler="sis", seed=0)
    configs = [RunConfig("single", "tgn", stream, out=stream.parent / "runs", **base, sampler_decay=decay)
               for decay in (0.0, 0.0, 5.0)]
    uniform, again, decayed = run_experiments(configs)
    assert decayed["hyperparameters"]["sampler_decay"] == 5.0
    assert uniform["epochs"][0]["loss"] == again["epochs"][0]["loss"]  # seeded: a difference is the decay's
    assert decayed["epochs"][0]["loss"] != uniform["epochs"][0]["loss"]


def test_decay_without_sis_is_one_line(stream, tmp_path):
    result = CliRunner().invoke(cli, ["run", "--scheme", "single", "--model", "tgn", "--dataset", str(stream),
                                      "--sampler-decay", "0.5", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "--sampler-decay 0.5: time-decay weights are the sis sampler's (--sampler sis), not recent's" in \
        result.output.strip().splitlines()[-1]
