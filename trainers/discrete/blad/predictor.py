"""BLAD's operator-duration predictor (Fu et al., SC'23, §5.2.2), fitted on the machine at hand.

One linear regression per (operator, direction) over a profiled grid; Eq. 2's l(i, j), b(i, j)
are sums of these. Files go through :mod:`dgbench.costmodel` (kind ``blad-operators``).
See docs/blad.md (section "The predictor").
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import click
import numpy as np
import torch
from torch import nn

from dgbench.costmodel import FittedModel, load_fitted, save_fitted
from dgbench.errors import DgbenchError
from dgbench.models.sparse import SparseOperator, gcn_normalize, spmm

KIND = "blad-operators"
DIRECTIONS = ("forward", "backward")
FEATURE_SETS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], list[np.ndarray]]] = {
    "paper": lambda v, e, f: [np.ones_like(v), v, e, f],
    "products": lambda v, e, f: [np.ones_like(v), v, e, f, v * f, e * f],
}


@dataclass(frozen=True)
class Load:
    """One profiled input: a snapshot's vertices and edges, and the op's input feature width."""

    vertices: int
    edges: int
    width: int


def _random_graph(vertices: int, edges: int, rng: np.random.Generator) -> SparseOperator:
    src = rng.integers(0, vertices, edges)
    dst = rng.integers(0, vertices, edges)
    return SparseOperator(gcn_normalize(src, dst, None, vertices).to_torch())


def _operator_run(name: str, load: Load, hidden: int, graph: SparseOperator
                  ) -> tuple[Callable[[], torch.Tensor], list[torch.Tensor]]:
    """A forward closure for one op on one load, and the tensors its backward differentiates."""
    v, f = load.vertices, load.width
    if name == "aggregate":
        x = torch.randn(v, f, requires_grad=True)
        return (lambda: spmm(graph, x)), [x]
    if name == "update":
        x, w = torch.randn(v, f, requires_grad=True), torch.randn(f, hidden, requires_grad=True)
        return (lambda: x @ w), [x, w]
    if name in ("lstm", "gru"):
        cell = nn.LSTMCell(f, hidden) if name == "lstm" else nn.GRUCell(f, hidden)
        x, h = torch.randn(v, f, requires_grad=True), torch.randn(v, hidden, requires_grad=True)
        if name == "lstm":
            c = torch.randn(v, hidden)
            return (lambda: cell(x, (h, c))[0]), [x, h, *cell.parameters()]
        return (lambda: cell(x, h)), [x, h, *cell.parameters()]
    if name == "weight_lstm":  # EvolveGCN-O: W_t = LSTM(W_{t-1}); rows of the F × hidden weight are the batch
        cell = nn.LSTMCell(hidden, hidden)
        w, c = torch.randn(f, hidden, requires_grad=True), torch.randn(f, hidden)
        return (lambda: cell(w, (w, c))[0]), [w, *cell.parameters()]
    raise DgbenchError(f"unknown operator {name!r} (known: {', '.join(OPERATORS)})")


OPERATORS = ("aggregate", "update", "lstm", "gru", "weight_lstm")


def time_operator(name: str, load: Load, hidden: int, graph: SparseOperator, repeats: int = 5,
                  warmup: int = 1) -> tuple[float, float]:
    """Fastest forward and backward seconds of one op over ``repeats`` back-to-back runs (backward =
    autograd to its inputs and parameters)."""
    run, inputs = _operator_run(name, load, hidden, graph)
    return _fastest(run, inputs, repeats, warmup)


def _fastest(run: Callable[[], torch.Tensor], inputs: list[torch.Tensor], repeats: int,
             warmup: int) -> tuple[float, float]:
    forward, backward = [], []
    for attempt in range(warmup + repeats):
        start = time.perf_counter()
        out = run()
        middle = time.perf_counter()
        torch.autograd.grad(out, inputs, torch.ones_like(out))
        stop = time.perf_counter()
        if attempt >= warmup:
            forward.append(middle - start)
            backward.append(stop - middle)
    return min(forward), min(backward)


def profile_operators(loads: list[tuple[int, int]], widths: list[int], hidden: int, operators: list[str],
                      repeats: int = 5, seed: int = 0,
                      progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Time every operator on every (vertices, edges) load at every input width (§5.2.2's offline
    profiling). Returns one sample per (op, load, width): its V, E, F and forward/backward seconds.

    The grid is swept ``repeats`` times and each point keeps its fastest sweep: a burst of other
    work on a shared machine then spoils one sweep of a point, not all its repeats at once."""
    unknown = [op for op in operators if op not in OPERATORS]
    if unknown:
        raise DgbenchError(f"unknown operator(s) {unknown} (known: {', '.join(OPERATORS)})")
    if repeats < 1:
        raise DgbenchError(f"profiling needs at least one repeat, got {repeats}")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    points = []
    for vertices, edges in loads:
        if vertices < 1 or edges < 0:
            raise DgbenchError(f"profiling load ({vertices} vertices, {edges} edges) is not a graph")
        graph = _random_graph(vertices, edges, rng)
        points += [(op, Load(vertices, edges, width), _operator_run(op, Load(vertices, edges, width), hidden, graph))
                   for width in widths for op in operators]
    best = [(float("inf"), float("inf"))] * len(points)
    for sweep in range(repeats):
        for k, (_, _, (run, inputs)) in enumerate(points):
            fwd, bwd = _fastest(run, inputs, 1, warmup=1 if sweep == 0 else 0)
            best[k] = (min(best[k][0], fwd), min(best[k][1], bwd))
        if progress:
            progress(f"profiling sweep {sweep + 1}/{repeats} done")
    return [{"op": op, "vertices": load.vertices, "edges": load.edges, "width": load.width,
             "forward": fwd, "backward": bwd} for (op, load, _), (fwd, bwd) in zip(points, best)]


def _design(features: str, vertices, edges, width) -> np.ndarray:
    v, e, f = (np.asarray(a, np.float64) for a in (vertices, edges, width))
    v, e, f = np.broadcast_arrays(v, e, f)
    return np.stack(FEATURE_SETS[features](v, e, f), axis=-1)


def _least_squares(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Coefficients minimising Σ ((design · c - target) / target)² (relative error)."""
    weight = 1.0 / np.maximum(target, 1e-9)
    rows = design * weight[:, None]
    scale = np.abs(rows).max(axis=0)
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(rows / scale, target * weight, rcond=None)
    return coef / scale


def _quality(predicted: np.ndarray, actual: np.ndarray) -> dict[str, float]:
    residual = ((actual - predicted) ** 2).sum()
    spread = ((actual - actual.mean()) ** 2).sum()
    return {"r2": float(1 - residual / spread) if spread > 0 else 1.0,
            "mape": float(np.mean(np.abs(predicted - actual) / np.maximum(actual, 1e-12)))}


def _cross_validated_mape(design: np.ndarray, target: np.ndarray, folds: int = 5) -> float | None:
    n = len(target)
    if n < 2 * design.shape[1]:
        return None
    order = np.random.default_rng(0).permutation(n)
    errors = np.empty(n)
    for fold in np.array_split(order, min(folds, n)):
        keep = np.setdiff1d(order, fold)
        coef = _least_squares(design[keep], target[keep])
        errors[fold] = np.abs(np.maximum(design[fold] @ coef, 0) - target[fold]) / np.maximum(target[fold], 1e-12)
    return float(errors.mean())


@dataclass
class OperatorPredictor:
    """One linear regression per (operator, direction) over the chosen feature design."""

    features: str
    hidden: int
    coefficients: dict[str, dict[str, list[float]]]  # op -> direction -> coefficients
    profile: dict[str, Any] = field(default_factory=dict)

    def duration(self, op: str, direction: str, vertices, edges, width) -> np.ndarray:
        """Predicted seconds (vectorised over V, E, F arrays), never negative."""
        if op not in self.coefficients:
            raise DgbenchError(f"the predictor was not fitted for operator {op!r} "
                               f"(fitted: {', '.join(sorted(self.coefficients))}); refit with it")
        coef = np.asarray(self.coefficients[op][direction])
        return np.maximum(_design(self.features, vertices, edges, width) @ coef, 0.0)

    def snapshot_durations(self, operators: list[tuple[str, int]], vertices, edges) -> tuple[np.ndarray, np.ndarray]:
        """l and b of snapshots with the given V and E arrays: sums over ``operators`` = [(op, input width)]."""
        forward = sum(self.duration(op, "forward", vertices, edges, width) for op, width in operators)
        backward = sum(self.duration(op, "backward", vertices, edges, width) for op, width in operators)
        return np.asarray(forward, np.float64), np.asarray(backward, np.float64)

    def payload(self) -> dict[str, Any]:
        return {"features": self.features, "hidden": self.hidden, "coefficients": self.coefficients,
                "profile": self.profile}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> "OperatorPredictor":
        try:
            features, hidden, coefficients = payload["features"], int(payload["hidden"]), payload["coefficients"]
        except (KeyError, TypeError, ValueError) as exc:
            raise DgbenchError(f"BLAD predictor payload is missing {exc}") from exc
        if features not in FEATURE_SETS:
            raise DgbenchError(f"BLAD predictor: unknown feature design {features!r}")
        return cls(features, hidden, coefficients, payload.get("profile", {}))


def fit_predictor(samples: list[dict[str, Any]], hidden: int, features: str = "products"
                  ) -> tuple[OperatorPredictor, dict[str, Any]]:
    """Fit one regression per (op, direction); return the predictor and its fit quality for both
    feature designs (the chosen one and the other, for comparison)."""
    if features not in FEATURE_SETS:
        raise DgbenchError(f"unknown feature design {features!r} (choose {', '.join(FEATURE_SETS)})")
    if not samples:
        raise DgbenchError("no profiling samples to fit")
    coefficients: dict[str, dict[str, list[float]]] = {}
    quality: dict[str, Any] = {name: {} for name in FEATURE_SETS}
    for op in sorted({s["op"] for s in samples}):
        rows = [s for s in samples if s["op"] == op]
        v, e, f = (np.array([s[k] for s in rows], np.float64) for k in ("vertices", "edges", "width"))
        coefficients[op] = {}
        for name in FEATURE_SETS:
            design = _design(name, v, e, f)
            quality[name][op] = {}
            for direction in DIRECTIONS:
                target = np.array([s[direction] for s in rows])
                coef = _least_squares(design, target)
                stats = _quality(np.maximum(design @ coef, 0), target)
                stats["cv_mape"] = _cross_validated_mape(design, target)
                quality[name][op][direction] = stats
                if name == features:
                    coefficients[op][direction] = [float(c) for c in coef]
    fit = {"features": features, "samples": len(samples), "per_design": quality,
           "note": "timed on a shared machine: other processes' load is in the samples"}
    return OperatorPredictor(features, hidden, coefficients), fit


def save_predictor(path: str | Path, predictor: OperatorPredictor, fit: dict[str, Any]) -> Path:
    """Write the predictor beside this machine's hardware identity (dgbench.costmodel)."""
    return save_fitted(path, KIND, predictor.payload(), fit)


def load_predictor(path: str | Path, allow_other_hardware: bool = False) -> tuple[OperatorPredictor, FittedModel]:
    """Read a predictor; one fitted on other hardware is refused unless allowed."""
    fitted = load_fitted(path, KIND, allow_other_hardware=allow_other_hardware)
    return OperatorPredictor.from_payload(fitted.payload), fitted


def grid_loads(vertices: list[int], degrees: list[float]) -> list[tuple[int, int]]:
    """The (V, E = round(V · degree)) profiling grid."""
    return [(v, int(round(v * d))) for v in vertices for d in degrees]


def store_loads(store_path: str | Path, count: int) -> list[tuple[int, int]]:
    """Up to ``count`` (V, E_t) loads spread over a snapshot store's snapshots (full-graph rows: V = N)."""
    from dgbench.store import open_store
    store = open_store(store_path)
    if store.kind != "snapshots":
        raise DgbenchError(f"{store_path}: a {store.kind} store; BLAD profiles snapshot stores")
    edges = np.asarray(store.edges_per_snapshot())
    picks = np.unique(np.linspace(0, len(edges) - 1, min(count, len(edges))).round().astype(int))
    return [(int(store.num_nodes), int(edges[t])) for t in picks]


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers") from exc


def _float_list(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of numbers") from exc


@click.command(name="blad")
@click.option("--out", "-o", type=click.Path(path_type=Path), default=Path("costmodels/blad-operators.json"),
              show_default=True, help="Where to write the fitted predictor.")
@click.option("--vertices", default="1000,4000,16000", show_default=True, help="Grid: vertices per snapshot.")
@click.option("--degrees", default="2,8", show_default=True, help="Grid: average degree (E = V · degree).")
@click.option("--widths", default="2,6,16", show_default=True, help="Grid: operator input feature widths.")
@click.option("--hidden", type=int, default=6, show_default=True, help="Output width of update / RNN ops.")
@click.option("--operators", default=",".join(OPERATORS), show_default=True, help="Operators to profile.")
@click.option("--store", type=click.Path(path_type=Path), default=None,
              help="Also profile at this snapshot store's own (V, E_t) loads.")
@click.option("--store-loads", "store_count", type=int, default=6, show_default=True,
              help="How many of the store's snapshots.")
@click.option("--repeats", type=int, default=5, show_default=True, help="Timed runs per point (fastest kept).")
@click.option("--features", type=click.Choice(sorted(FEATURE_SETS)), default="products", show_default=True,
              help="Regression design: paper = (1, V, E, F); products adds V·F and E·F.")
@click.option("--threads", type=int, default=1, show_default=True,
              help="torch intra-op threads while profiling (match what each training process gets).")
def fit_blad_command(out: Path, vertices: str, degrees: str, widths: str, hidden: int, operators: str,
                     store: Path | None, store_count: int, repeats: int, features: str, threads: int) -> None:
    """Profile BLAD's operators here and fit one linear regression per operator (§5.2.2)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _fit_blad(out, vertices, degrees, widths, hidden, operators, store, store_count, repeats, features)
    finally:
        torch.set_num_threads(before)


def _fit_blad(out: Path, vertices: str, degrees: str, widths: str, hidden: int, operators: str,
              store: Path | None, store_count: int, repeats: int, features: str) -> None:
    loads = grid_loads(_int_list(vertices), _float_list(degrees))
    if store is not None:
        loads += store_loads(store, store_count)
    ops = [op.strip() for op in operators.split(",") if op.strip()]
    started = time.perf_counter()
    samples = profile_operators(loads, _int_list(widths), hidden, ops, repeats,
                                progress=lambda line: click.echo(line, err=True))
    predictor, fit = fit_predictor(samples, hidden, features)
    predictor.profile = {"loads": loads, "widths": _int_list(widths), "repeats": repeats, "operators": ops,
                         "threads": torch.get_num_threads(), "seconds": round(time.perf_counter() - started, 3),
                         "store": str(store) if store else None}
    fit["samples_table"] = samples
    path = save_predictor(out, predictor, fit)
    click.echo(f"wrote {path}: {len(samples)} samples, design {features}")
    for design in sorted(FEATURE_SETS, key=lambda name: name != features):
        click.echo(f"design {design}{' (saved)' if design == features else ''}: R², MAPE, cross-validated MAPE")
        for op in ops:
            line = "  ".join(f"{d} {q['r2']:.3f} {q['mape']:.1%} {_percent(q['cv_mape'])}"
                             for d, q in fit["per_design"][design][op].items())
            click.echo(f"  {op:<12} {line}")


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"
