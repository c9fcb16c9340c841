"""Fitted cost models carry the hardware they were fitted on; elsewhere they are refused."""
from __future__ import annotations

import json

import pytest

from dgbench.costmodel import load_fitted, proxy_provenance, save_fitted
from dgbench.errors import DgbenchError


def test_round_trip_and_provenance(tmp_path):
    path = save_fitted(tmp_path / "m.json", "toy", {"w": [1.0, 2.0]}, {"mape": 0.05})
    model = load_fitted(path, "toy")
    assert model.payload == {"w": [1.0, 2.0]} and model.fit == {"mape": 0.05}
    assert model.provenance()["source"] == "fitted" and model.provenance()["hardware"]["cpu_count"]
    assert proxy_provenance("vertex-count", "g = |V|")["source"] == "proxy"


def test_refuses_other_kind_other_hardware_and_junk(tmp_path):
    path = save_fitted(tmp_path / "m.json", "toy", {}, {})
    with pytest.raises(DgbenchError, match="'toy' cost model, not 'other'"):
        load_fitted(path, "other")
    document = json.loads(path.read_text())
    document["hardware"]["cpu_count"] = 4096
    path.write_text(json.dumps(document))
    with pytest.raises(DgbenchError, match="refit it here"):
        load_fitted(path, "toy")
    assert load_fitted(path, "toy", allow_other_hardware=True).hardware["cpu_count"] == 4096
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(DgbenchError, match="not a dgbench cost-model file"):
        load_fitted(tmp_path / "junk.json", "toy")
    with pytest.raises(DgbenchError, match="no such cost-model file"):
        load_fitted(tmp_path / "absent.json", "toy")
