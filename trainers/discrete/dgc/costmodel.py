"""DGC's chunk workload model (§4.2, §6): two MLPs predict a chunk's structure- and time-encoder time.

Alg. 1 needs each chunk's workload g_a. §4.2: counting vertices and edges is not enough (chunks of
equal vertex count differ up to 8× in time, Fig. 7), so DGC learns it: one MLP for the structure
encoder and one for the time encoder (§6: input layer, three hidden layers of 256 units, ReLU after
each, one output; MAPE loss; Adam; 100 epochs), fitted on the execution times of random chunks
measured on the machine at hand. g_a = predicted structure time + predicted time-encoder time.

* :func:`chunk_shapes`: per chunk of a :class:`~dgbench.trainers.discrete.dgc.chunks.SuperGraph`: instances,
  spatial in-edges its instances aggregate, and sequences (distinct vertices).
* :func:`time_chunk`: forward + backward seconds of one chunk's encoders (the model's own modules:
  GCN/GAT aggregation of :mod:`dgbench.models.sparse`; GRU/LSTM/attention of
  :mod:`dgbench.models.sequence` over a temporally fused packing, §5.1.2), median of repeats.
* :func:`fit_chunk_cost_model`: time random chunks, fit both MLPs, save through
  :func:`dgbench.costmodel.save_fitted` (the hardware identity travels with it); the fit's Eq. 8
  error on held-out chunks is stored with it. ``dgbench costmodel fit dgc`` runs it.
* :func:`load_chunk_cost_model` (refused on other hardware) and :class:`FlopProxy`, the stated
  proxy a run falls back to without a fitted file (its record says which one ran).
* :func:`prediction_error`: Eq. 8, mean |predicted - measured| / measured.

Choices (the paper gives none of these): inputs are #vertices, #edges, feature width and layer
width (§6) plus two flagged extras, #temporal edges and mean sequence length (§4.2 names sequence
length as a factor but not as an input; ``extras=False`` gives the paper's four); inputs enter as
standardised log(1 + x); the output layer gives log-seconds and the prediction is its exponential
(positive, so MAPE has a gradient everywhere; a ReLU on the output can die at zero); a sample's label
is forward + backward time; CPU-scale defaults: 2,000 chunks (the paper: 50,000 on 8 V100s),
learning rate 1e-3, batch 256, 20 % held out for Eq. 8.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import click
import numpy as np
import torch
from torch import nn

from dgbench.costmodel import FittedModel, load_fitted, proxy_provenance, save_fitted
from dgbench.errors import DgbenchError
from dgbench.models.contract import SequenceMask
from dgbench.models.sequence import CausalSelfAttention, GRUSequence, LSTMSequence
from dgbench.models.sparse import SparseOperator, gcn_normalize, graph_attention, spmm
from dgbench.trainers.discrete.dgc.chunks import SuperGraph
from dgbench.trainers.discrete.dgc.fusion import pack_sequences

KIND = "dgc-chunk"
PAPER_FEATURES = ("vertices", "edges", "feature_width", "layer_width")
EXTRA_FEATURES = ("temporal_edges", "mean_sequence_length")
HIDDEN_UNITS, HIDDEN_LAYERS = 256, 3


@dataclass(frozen=True)
class EncoderSpec:
    """What a model runs per chunk: its structure encoder (``gcn`` | ``gat``, layers) and its time
    encoder (``gru`` | ``lstm`` | ``attention``, layers)."""

    structure: str
    structure_layers: int
    time: str
    time_layers: int

    def __post_init__(self) -> None:
        if self.structure not in ("gcn", "gat") or self.time not in ("gru", "lstm", "attention"):
            raise DgbenchError(f"unknown encoders {self.structure!r} / {self.time!r}")


# DGC §6 / §7.1: T-GCN = 2 GCN + 1 GRU (§4.1); DySAT = 1 GAT + 1 temporal attention; MPNN-LSTM = 2 GCN + 2 LSTM
MODEL_ENCODERS = {"tgcn": EncoderSpec("gcn", 2, "gru", 1), "dysat": EncoderSpec("gat", 1, "attention", 1),
                  "mpnn-lstm": EncoderSpec("gcn", 2, "lstm", 2), "wdgcn": EncoderSpec("gcn", 2, "lstm", 1),
                  "cdgcn": EncoderSpec("gcn", 2, "lstm", 2), "tmgcn": EncoderSpec("gcn", 2, "gru", 1)}


def encoders_of(model: str) -> EncoderSpec:
    if model not in MODEL_ENCODERS:
        raise DgbenchError(f"no DGC encoder description for model '{model}' (known: {', '.join(MODEL_ENCODERS)})")
    return MODEL_ENCODERS[model]


# --------------------------------------------------------------------------- chunk features

@dataclass(frozen=True)
class ChunkShapes:
    """Per chunk: instances, spatial in-edges aggregated, sequences (distinct vertices)."""

    vertices: np.ndarray
    edges: np.ndarray
    sequences: np.ndarray

    @property
    def temporal_edges(self) -> np.ndarray:
        return self.vertices - self.sequences

    def features(self, feature_width: int | np.ndarray, layer_width: int | np.ndarray,
                 extras: bool = True) -> np.ndarray:
        """Raw inputs [chunks, 4 or 6] in the order of PAPER_FEATURES (+ EXTRA_FEATURES)."""
        count = len(self.vertices)
        columns = [self.vertices, self.edges, np.broadcast_to(feature_width, (count,)),
                   np.broadcast_to(layer_width, (count,))]
        if extras:
            columns += [self.temporal_edges, self.vertices / np.maximum(self.sequences, 1)]
        return np.stack(columns, axis=1).astype(np.float64) if count else np.zeros((0, 6 if extras else 4))


def chunk_shapes(graph: SuperGraph, chunk_of: np.ndarray) -> ChunkShapes:
    chunk_of = np.asarray(chunk_of, dtype=np.int64)
    count = int(chunk_of.max()) + 1 if len(chunk_of) else 0
    vertices = np.bincount(chunk_of, minlength=count)
    edges = np.bincount(chunk_of[graph.spatial_dst], minlength=count)
    pairs = np.unique(chunk_of * np.int64(max(graph.num_vertices, 1)) + graph.vertex)
    sequences = np.bincount(pairs // max(graph.num_vertices, 1), minlength=count)
    return ChunkShapes(vertices, edges, sequences)


# --------------------------------------------------------------------------- timing one chunk

def _random_operator(vertices: int, edges: int, rng: np.random.Generator) -> SparseOperator:
    src, dst = rng.integers(0, vertices, edges), rng.integers(0, vertices, edges)
    return SparseOperator(gcn_normalize(src, dst, None, vertices).to_torch())


def _sequence_lengths(vertices: int, sequences: int, rng: np.random.Generator) -> np.ndarray:
    """A random composition of ``vertices`` instances into ``sequences`` sequences of ≥ 1 step."""
    sequences = max(1, min(sequences, vertices))
    return 1 + rng.multinomial(vertices - sequences, np.full(sequences, 1.0 / sequences))


def _median_seconds(run, repeats: int) -> float:
    run()  # warm-up (allocator, kernels)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def time_chunk(spec: EncoderSpec, vertices: int, edges: int, sequences: int, feature_width: int, layer_width: int,
               rng: np.random.Generator, repeats: int = 3) -> tuple[float, float]:
    """Forward + backward seconds of a random chunk's structure encoder and time encoder."""
    operator = _random_operator(vertices, edges, rng)
    widths = [feature_width] + [layer_width] * spec.structure_layers
    weights = [(torch.randn(a, b) / math.sqrt(a)).requires_grad_() for a, b in zip(widths[:-1], widths[1:])]
    scores = [torch.randn(b, 2).requires_grad_() for b in widths[1:]]
    x = torch.randn(vertices, feature_width)

    def structure() -> None:
        h = x.clone().requires_grad_(True)
        out = h
        for weight, score in zip(weights, scores):
            if spec.structure == "gcn":
                out = torch.relu(spmm(operator, out) @ weight)
            else:
                z = out @ weight
                both = z @ score
                out = torch.relu(graph_attention(operator, both[:, :1], both[:, 1:], z[:, None, :])[:, 0])
        out.sum().backward()

    lengths = _sequence_lengths(vertices, sequences, rng)
    packing = pack_sequences(lengths)
    mask = SequenceMask(present=torch.from_numpy(packing.present()), reset=torch.from_numpy(packing.reset()))
    if spec.time == "gru":
        module: nn.Module = GRUSequence(layer_width, layer_width)
    elif spec.time == "lstm":
        module = LSTMSequence(layer_width, layer_width, layers=spec.time_layers)
    else:
        module = CausalSelfAttention(layer_width, max_steps=max(1024, packing.length))
    y = torch.randn(vertices, layer_width)

    def temporal() -> None:
        inputs = y.clone().requires_grad_(True)
        out, _ = module(packing.pack(inputs), module.initial_carry(packing.rows), mask)
        out.sum().backward()

    return _median_seconds(structure, repeats), _median_seconds(temporal, repeats)


# --------------------------------------------------------------------------- the two MLPs

class WorkloadMLP(nn.Module):
    """§6: input layer, three hidden layers of 256 with ReLU after each, one output (log-seconds)."""

    def __init__(self, inputs: int):
        super().__init__()
        layers: list[nn.Module] = []
        width = inputs
        for _ in range(HIDDEN_LAYERS):
            layers += [nn.Linear(width, HIDDEN_UNITS), nn.ReLU()]
            width = HIDDEN_UNITS
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.net(x).squeeze(-1))


def mape(predicted: torch.Tensor, measured: torch.Tensor) -> torch.Tensor:
    """Mean absolute percentage error, the MLPs' training loss (§6)."""
    return ((predicted - measured).abs() / measured).mean()


def prediction_error(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Eq. 8: (1/n) Σ_a |predicted_a - measured_a| / measured_a."""
    predicted, measured = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    if not len(measured):
        return float("nan")
    return float(np.mean(np.abs(predicted - measured) / measured))


def _train(net: WorkloadMLP, x: torch.Tensor, y: torch.Tensor, epochs: int, lr: float, batch: int,
           generator: torch.Generator) -> list[float]:
    with torch.no_grad():
        net.net[-1].bias.fill_(float(torch.log(y).median()))  # start at the typical time, not at e^0 s
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=generator)
        total = 0.0
        for start in range(0, len(y), batch):
            index = order[start:start + batch]
            loss = mape(net(x[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(index)
        losses.append(total / len(y))
    return losses


def _state(net: nn.Module) -> dict[str, list]:
    return {name: tensor.tolist() for name, tensor in net.state_dict().items()}


def _net_from(state: dict[str, list], inputs: int) -> WorkloadMLP:
    net = WorkloadMLP(inputs)
    net.load_state_dict({name: torch.tensor(values, dtype=torch.float32) for name, values in state.items()})
    return net.eval()


class ChunkCostModel(Protocol):
    """Predicts (structure, time-encoder) workloads of chunks; says what it is for the record."""

    def predict(self, shapes: ChunkShapes, feature_width: int, layer_width: int) -> tuple[np.ndarray, np.ndarray]:
        ...

    def provenance(self) -> dict[str, Any]:
        ...


@dataclass
class FittedChunkCostModel:
    """The two fitted MLPs of a ``dgc-chunk`` cost-model file."""

    spec: EncoderSpec
    extras: bool
    mean: np.ndarray
    std: np.ndarray
    structure: WorkloadMLP
    time: WorkloadMLP
    file: FittedModel | None = None

    def inputs(self, raw: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(((np.log1p(raw) - self.mean) / self.std).astype(np.float32))

    @torch.no_grad()
    def predict(self, shapes: ChunkShapes, feature_width: int, layer_width: int) -> tuple[np.ndarray, np.ndarray]:
        x = self.inputs(shapes.features(feature_width, layer_width, self.extras))
        return self.structure(x).double().numpy(), self.time(x).double().numpy()

    def provenance(self) -> dict[str, Any]:
        out = self.file.provenance() if self.file else {"source": "fitted", "path": None}
        return {**out, "unit": "seconds", "encoders": asdict(self.spec), "extras": self.extras}

    def payload(self) -> dict[str, Any]:
        return {"encoders": asdict(self.spec), "extras": self.extras, "mean": self.mean.tolist(),
                "std": self.std.tolist(), "structure": _state(self.structure), "time": _state(self.time),
                "features": list(PAPER_FEATURES + (EXTRA_FEATURES if self.extras else ()))}


@dataclass(frozen=True)
class FlopProxy:
    """The stated proxy without a fitted file: forward floating-point operations of each encoder
    (structure: per layer (E + V)·w_in for the aggregation + V·w_in·w_out for the weights, attention
    scores doubling the aggregation; time: per layer V·gates·(w_in + w)·w for GRU (3 gates) and
    LSTM (4), V·(4w² + L̄·w) for attention with mean sequence length L̄)."""

    spec: EncoderSpec

    def predict(self, shapes: ChunkShapes, feature_width: int, layer_width: int) -> tuple[np.ndarray, np.ndarray]:
        v, e = shapes.vertices.astype(np.float64), shapes.edges.astype(np.float64)
        widths = [feature_width] + [layer_width] * self.spec.structure_layers
        per_edge = 2.0 if self.spec.structure == "gat" else 1.0
        structure = sum(per_edge * (e + v) * b + v * a * b for a, b in zip(widths[:-1], widths[1:]))
        w = float(layer_width)
        if self.spec.time == "attention":
            mean_length = v / np.maximum(shapes.sequences, 1)
            temporal = self.spec.time_layers * v * (4 * w * w + mean_length * w)
        else:
            gates = 3.0 if self.spec.time == "gru" else 4.0
            temporal = self.spec.time_layers * v * gates * 2 * w * w
        return np.asarray(structure, np.float64), np.asarray(temporal, np.float64)

    def provenance(self) -> dict[str, Any]:
        return {**proxy_provenance("flops", "g_a = forward FLOPs of the chunk's structure and time encoders "
                                            "(no fitted dgc-chunk model given)"),
                "unit": "flops", "encoders": asdict(self.spec)}


def load_chunk_cost_model(path: str | Path, spec: EncoderSpec | None = None, device: torch.device | None = None,
                          allow_other_hardware: bool = False) -> FittedChunkCostModel:
    """Read a ``dgc-chunk`` file (refused if fitted on other hardware, or for other encoders)."""
    fitted = load_fitted(path, KIND, device=device, allow_other_hardware=allow_other_hardware)
    payload = fitted.payload
    stored = EncoderSpec(**payload["encoders"])
    if spec is not None and stored != spec:
        raise DgbenchError(f"{path}: fitted for encoders {asdict(stored)}, this model runs {asdict(spec)}; "
                           f"fit one for it with 'dgbench costmodel fit dgc'")
    inputs = len(payload["mean"])
    return FittedChunkCostModel(stored, bool(payload["extras"]), np.asarray(payload["mean"]),
                                np.asarray(payload["std"]), _net_from(payload["structure"], inputs),
                                _net_from(payload["time"], inputs), fitted)


# --------------------------------------------------------------------------- fitting

@dataclass(frozen=True)
class Sampling:
    """Ranges the random chunks are drawn from (CPU scale)."""

    min_vertices: int = 8
    max_vertices: int = 4096
    min_degree: float = 0.5
    max_degree: float = 8.0
    max_sequence_length: int = 32
    feature_widths: tuple[int, ...] = (2, 8, 32)
    layer_widths: tuple[int, ...] = (8, 16, 32, 64)


def sample_chunks(samples: int, rng: np.random.Generator, sampling: Sampling = Sampling()) -> np.ndarray:
    """[samples, 5] integer rows (vertices, edges, sequences, feature width, layer width)."""
    vertices = np.exp(rng.uniform(np.log(sampling.min_vertices), np.log(sampling.max_vertices), samples)).astype(int)
    edges = np.maximum(1, (vertices * rng.uniform(sampling.min_degree, sampling.max_degree, samples)).astype(int))
    lengths = rng.integers(1, sampling.max_sequence_length + 1, samples)
    sequences = np.maximum(1, np.ceil(vertices / lengths)).astype(int)
    features = rng.choice(sampling.feature_widths, samples)
    layers = rng.choice(sampling.layer_widths, samples)
    return np.stack([vertices, edges, sequences, features, layers], axis=1)


def fit_chunk_cost_model(out: str | Path, spec: EncoderSpec, samples: int = 2000, device: torch.device | None = None,
                         seed: int = 0, epochs: int = 100, repeats: int = 3, extras: bool = True,
                         holdout: float = 0.2, lr: float = 1e-3, batch: int = 256,
                         sampling: Sampling = Sampling(), progress=None) -> Path:
    """Time ``samples`` random chunks here, fit both MLPs, save them (with this machine's identity)."""
    if samples < 10:
        raise DgbenchError(f"fitting needs at least 10 timed chunks, got {samples}")
    if (device or torch.device("cpu")).type != "cpu":
        raise DgbenchError("the DGC cost model times chunks on the CPU only in this version")
    rng = np.random.default_rng(seed)
    drawn = sample_chunks(samples, rng, sampling)
    started = time.perf_counter()
    times = np.zeros((samples, 2))
    for i, (v, e, s, f, w) in enumerate(drawn.tolist()):
        times[i] = time_chunk(spec, v, e, s, f, w, rng, repeats)
        if progress is not None:
            progress(i + 1, samples)
    timing_seconds = time.perf_counter() - started
    logs = np.log1p(ChunkShapes(drawn[:, 0], drawn[:, 1], drawn[:, 2]).features(drawn[:, 3], drawn[:, 4], extras))
    mean, std = logs.mean(axis=0), np.maximum(logs.std(axis=0), 1e-6)
    x = torch.from_numpy(((logs - mean) / std).astype(np.float32))
    held = max(1, int(round(holdout * samples)))
    train, test = np.arange(samples - held), np.arange(samples - held, samples)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    nets, curves, errors = {}, {}, {}
    for column, name in enumerate(("structure", "time")):
        y = torch.from_numpy(times[:, column].astype(np.float32))
        nets[name] = WorkloadMLP(x.shape[1])
        curves[name] = _train(nets[name], x[train], y[train], epochs, lr, batch, generator)
        with torch.no_grad():
            errors[name] = prediction_error(nets[name](x[test]).double().numpy(), times[test, column])
    model = FittedChunkCostModel(spec, extras, mean, std, nets["structure"].eval(), nets["time"].eval())
    with torch.no_grad():
        total = model.structure(x[test]).double().numpy() + model.time(x[test]).double().numpy()
    fit = {"samples": samples, "held_out": held, "eq8_error_structure": errors["structure"],
           "eq8_error_time": errors["time"], "eq8_error_total": prediction_error(total, times[test].sum(axis=1)),
           "final_train_mape": {k: v[-1] for k, v in curves.items()}, "epochs": epochs, "lr": lr, "batch": batch,
           "repeats": repeats, "seed": seed, "timing_seconds": timing_seconds, "sampling": asdict(sampling)}
    return save_fitted(out, KIND, model.payload(), fit, device)


@click.command(name="dgc")
@click.option("--out", "-o", type=click.Path(path_type=Path), default=Path("costmodels/dgc-chunk.json"),
              show_default=True, help="Where to write the fitted MLPs.")
@click.option("--model", "model_name", type=click.Choice(sorted(MODEL_ENCODERS)), default="tgcn", show_default=True,
              help="Whose encoders to time (T-GCN: 2 GCN + GRU; DySAT: GAT + attention; MPNN-LSTM: 2 GCN + 2 LSTM).")
@click.option("--samples", type=click.IntRange(10), default=2000, show_default=True, help="Random chunks to time.")
@click.option("--epochs", type=click.IntRange(1), default=100, show_default=True, help="MLP training epochs (§6).")
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True, help="Timed runs per chunk (median).")
@click.option("--paper-features", is_flag=True, help="Only #vertices, #edges and the widths (no extras).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True,
              help="torch intra-op threads while timing (match what each training process gets).")
def fit_dgc_command(out: Path, model_name: str, samples: int, epochs: int, repeats: int, paper_features: bool,
                    seed: int, threads: int) -> None:
    """Time random chunks here and fit DGC's two workload MLPs (§4.2, §6)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        path = fit_chunk_cost_model(out, encoders_of(model_name), samples=samples, seed=seed, epochs=epochs,
                                    repeats=repeats, extras=not paper_features)
    finally:
        torch.set_num_threads(before)
    fit = load_fitted(path, KIND).fit
    click.echo(f"wrote {path}: Eq. 8 error on {fit['held_out']} held-out chunks: structure "
               f"{fit['eq8_error_structure']:.3f}, time {fit['eq8_error_time']:.3f}, "
               f"total {fit['eq8_error_total']:.3f}")
