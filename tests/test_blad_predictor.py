"""BLAD §5.2.2's per-operator linear-regression predictor: fitting, profiling on this machine, the
file with its hardware, and `dgbench costmodel fit blad`."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.errors import DgbenchError
from dgbench.trainers.discrete.blad.predictor import (OPERATORS, OperatorPredictor, fit_predictor, grid_loads,
                                                      load_predictor, profile_operators, save_predictor)
from dgbench.trainers.discrete.blad.reorder import model_topology, predicted_operators


def _synthetic_samples(rng) -> list[dict]:
    """Durations from a known law with product terms (spmm ~ E·F, update ~ V·F) plus 2% noise."""
    samples = []
    for v in (500, 1000, 4000, 9000):
        for degree in (2, 5, 11):
            for f in (2, 6, 16):
                e = v * degree
                law = {"aggregate": 3e-6 + 2e-9 * e * f + 1e-9 * v * f, "update": 2e-6 + 4e-9 * v * f}
                for op, seconds in law.items():
                    noise = rng.uniform(0.98, 1.02, 2)
                    samples.append({"op": op, "vertices": v, "edges": e, "width": f,
                                    "forward": seconds * noise[0], "backward": 2 * seconds * noise[1]})
    return samples


def test_fit_recovers_a_known_law_and_reports_both_designs():
    samples = _synthetic_samples(np.random.default_rng(0))
    predictor, fit = fit_predictor(samples, hidden=6)
    products, paper = fit["per_design"]["products"], fit["per_design"]["paper"]
    for op in ("aggregate", "update"):
        for direction in ("forward", "backward"):
            assert products[op][direction]["r2"] > 0.99 and products[op][direction]["mape"] < 0.03
            assert products[op][direction]["cv_mape"] < 0.05
            # (1, V, E, F) cannot express E·F: the paper's literal design fits worse
            assert paper[op][direction]["mape"] > 3 * products[op][direction]["mape"]
    got = predictor.duration("aggregate", "forward", 20000, 200000, 8)
    assert got == pytest.approx(3e-6 + 2e-9 * 200000 * 8 + 1e-9 * 20000 * 8, rel=0.05)  # extrapolates
    forward, backward = predictor.snapshot_durations([("aggregate", 6), ("update", 6)], np.array([1000, 2000]),
                                                     np.array([5000, 9000]))
    assert forward.shape == (2,) and np.all(backward == pytest.approx(2 * forward, rel=0.05))
    with pytest.raises(DgbenchError, match="not fitted for operator 'gru'"):
        predictor.duration("gru", "forward", 1, 1, 1)


def test_profiling_this_machine_round_trips_through_the_costmodel_file(tmp_path):
    loads = grid_loads([200, 800], [2, 6])
    samples = profile_operators(loads, [2, 6], hidden=4, operators=list(OPERATORS), repeats=2)
    assert len(samples) == len(loads) * 2 * len(OPERATORS)
    assert all(s["forward"] > 0 and s["backward"] > 0 for s in samples)
    predictor, fit = fit_predictor(samples, hidden=4)
    path = save_predictor(tmp_path / "blad.json", predictor, fit)
    again, fitted = load_predictor(path)
    assert fitted.provenance()["hardware"]["cpu_count"] and fitted.kind == "blad-operators"
    for op in OPERATORS:
        assert again.duration(op, "backward", 500, 2000, 4) == pytest.approx(
            predictor.duration(op, "backward", 500, 2000, 4))
    operators = predicted_operators(model_topology("evolvegcn-o", 2, 4), again, [300, 600], [900, 3000])
    assert len(operators) == 2 * 6 and all(o.duration >= 0 for o in operators)
    document = json.loads(path.read_text())
    document["hardware"]["device_name"] = "some other accelerator"
    path.write_text(json.dumps(document))
    with pytest.raises(DgbenchError, match="refit it here"):
        load_predictor(path)


def test_bad_payload_and_unknown_operator_are_one_line_errors():
    with pytest.raises(DgbenchError, match="missing"):
        OperatorPredictor.from_payload({"hidden": 4})
    with pytest.raises(DgbenchError, match="unknown operator"):
        profile_operators([(10, 10)], [2], 4, ["conv3d"])


def test_costmodel_fit_blad_command(tmp_path):
    out = tmp_path / "blad.json"
    runner = CliRunner()
    result = runner.invoke(cli, ["--quiet", "costmodel", "fit", "blad", "--out", str(out), "--vertices", "200,600",
                                 "--degrees", "2,5", "--widths", "2,4", "--hidden", "4", "--operators",
                                 "aggregate,update,gru", "--repeats", "2"])
    assert result.exit_code == 0, result.output
    assert "design products (saved)" in result.output and "gru" in result.output
    predictor, fitted = load_predictor(out)
    assert sorted(predictor.coefficients) == ["aggregate", "gru", "update"] and predictor.hidden == 4
    assert fitted.fit["samples"] == 4 * 2 * 3 and predictor.profile["threads"] == 1
    shown = runner.invoke(cli, ["costmodel", "show", str(out)])
    assert shown.exit_code == 0 and "kind blad-operators" in shown.output
    missing = runner.invoke(cli, ["costmodel", "show", str(tmp_path / "absent.json")])
    assert missing.exit_code == 1 and "no such cost-model file" in missing.output
