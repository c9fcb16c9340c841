"""DGC's chunk workload MLPs (§4.2, §6): architecture, fitting, saving with the hardware, Eq. 8, the proxy."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.errors import DgbenchError
from dgbench.trainers.discrete.dgc.chunks import build_supergraph
from dgbench.trainers.discrete.dgc.costmodel import (MODEL_ENCODERS, ChunkShapes, EncoderSpec, FlopProxy, Sampling,
                                                     WorkloadMLP, _train, chunk_shapes, fit_chunk_cost_model,
                                                     load_chunk_cost_model, prediction_error)


pytestmark = pytest.mark.usefixtures("one_thread")


def test_mlp_is_three_hidden_layers_of_256_with_relu():
    net = WorkloadMLP(6)
    linear = [m for m in net.net if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linear] == [(6, 256), (256, 256), (256, 256), (256, 1)]
    assert sum(isinstance(m, torch.nn.ReLU) for m in net.net) == 3
    assert (net(torch.randn(5, 6)) > 0).all()  # a time: positive


def test_eq8_error():
    assert prediction_error(np.array([1.1, 1.8, 3.0]), np.array([1.0, 2.0, 3.0])) == pytest.approx((0.1 + 0.1) / 3)


def test_mape_training_learns_a_workload_law():
    """Without timing noise: y = 1 ms · (1 + V/100) · (1 + E/V) is learnt to a few percent."""
    rng = np.random.default_rng(0)
    v, degree = rng.uniform(10, 2000, 256), rng.uniform(0.5, 8, 256)
    y = torch.tensor(1e-3 * (1 + v / 100) * (1 + degree), dtype=torch.float32)
    raw = np.log1p(np.stack([v, v * degree], axis=1))
    x = torch.from_numpy(((raw - raw.mean(0)) / raw.std(0)).astype(np.float32))
    net = WorkloadMLP(2)
    losses = _train(net, x, y, epochs=20, lr=1e-3, batch=64, generator=torch.Generator().manual_seed(0))
    assert losses[-1] < 0.05 < losses[0]


def test_chunk_shapes_by_hand():
    # snapshot 0: 0->1, 1->0, 2->1; snapshot 1: 0->3
    graph = build_supergraph([(np.array([0, 1, 2]), np.array([1, 0, 1])), (np.array([0]), np.array([3]))],
                             num_vertices=4)  # instances (0,0) (1,0) (2,0) (0,1) (3,1)
    shapes = chunk_shapes(graph, np.array([0, 0, 1, 0, 1]))
    assert shapes.vertices.tolist() == [3, 2]
    assert shapes.edges.tolist() == [3, 1]  # in-edges of (0,0), (1,0) (chunk 0: 1 + 2), of (3,1) (chunk 1)
    assert shapes.sequences.tolist() == [2, 2] and shapes.temporal_edges.tolist() == [1, 0]


def test_flop_proxy_by_hand():
    shapes = ChunkShapes(np.array([10]), np.array([30]), np.array([5]))
    structure, temporal = FlopProxy(EncoderSpec("gcn", 2, "gru", 1)).predict(shapes, feature_width=2, layer_width=4)
    assert structure.tolist() == [(30 + 10) * 4 + 10 * 2 * 4 + (30 + 10) * 4 + 10 * 4 * 4]
    assert temporal.tolist() == [10 * 3 * 2 * 4 * 4]
    assert FlopProxy(MODEL_ENCODERS["tgcn"]).provenance()["source"] == "proxy"


def test_fit_save_load_and_refusals(tmp_path):
    spec = MODEL_ENCODERS["tgcn"]
    small = Sampling(max_vertices=128, max_sequence_length=8)
    path = fit_chunk_cost_model(tmp_path / "dgc.json", spec, samples=16, epochs=3, repeats=1, seed=1, sampling=small)
    model = load_chunk_cost_model(path, spec)
    fit = json.loads(path.read_text())["fit"]
    assert fit["held_out"] == 3 and all(np.isfinite(fit[k]) for k in ("eq8_error_structure", "eq8_error_time"))
    shapes = ChunkShapes(np.array([50, 500]), np.array([100, 2000]), np.array([10, 40]))
    structure, temporal = model.predict(shapes, 2, 16)
    assert (structure > 0).all() and (temporal > 0).all()
    assert model.provenance()["source"] == "fitted" and model.provenance()["unit"] == "seconds"
    with pytest.raises(DgbenchError, match="fitted for encoders"):
        load_chunk_cost_model(path, MODEL_ENCODERS["dysat"])
    document = json.loads(path.read_text())
    document["hardware"]["cpu_count"] = 4096
    path.write_text(json.dumps(document))
    with pytest.raises(DgbenchError, match="refit it here"):
        load_chunk_cost_model(path, spec)


def test_fit_command(tmp_path):
    out = tmp_path / "m.json"
    result = CliRunner().invoke(cli, ["costmodel", "fit", "dgc", "--model", "dysat", "--samples", "12", "--epochs",
                                      "2", "--repeats", "1", "--paper-features", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "Eq. 8 error" in result.output
    model = load_chunk_cost_model(out, MODEL_ENCODERS["dysat"])
    assert model.extras is False and len(model.mean) == 4
