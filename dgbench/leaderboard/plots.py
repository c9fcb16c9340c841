"""The board's plots as PNG bytes (matplotlib, Agg), for embedding in the self-contained HTML page.

Scaling curves per model follow ESDG Fig. 5 (strong) and Fig. 7 (weak); the epoch-time breakdown
stacks transfer / compute / communication like ESDG Fig. 4. PNGs carry no timestamp, so the same
board renders to the same bytes.
"""
from __future__ import annotations

import io
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from dgbench.leaderboard.board import Entry  # noqa: E402
from dgbench.leaderboard.figures import RunFigures  # noqa: E402
from dgbench.leaderboard.tables import ScalingSeries, dataset_label  # noqa: E402

PHASE_COLOURS = {"transfer": "#4e79a7", "compute": "#59a14f", "communication": "#e15759"}


def png(figure: plt.Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def run_label(entry: Entry) -> str:
    record = entry.record
    return (f"{record['scheme']}/{record['model']} · {dataset_label(entry)} · p={record['world_size']} · "
            f"{record['hardware_class']}")


def scaling_plots(series: list[ScalingSeries]) -> dict[str, bytes]:
    """model -> strong and weak speedup curves and communication volume (series of two or more worlds)."""
    by_model: dict[str, list[ScalingSeries]] = defaultdict(list)
    for item in series:
        if len(item.points) > 1:
            by_model[item.model].append(item)
    plots = {}
    for model, members in sorted(by_model.items()):
        figure, axes = plt.subplots(1, 3, figsize=(14, 3.8))
        for ax, mode in zip(axes, ("strong", "weak")):
            curves = [s for s in members if s.mode == mode]
            _speedup_axes(ax, curves, f"{model}: {mode} scaling", f"no {mode}-scaling series yet")
        _comm_axes(axes[2], members, f"{model}: communication per epoch")
        plots[model] = png(figure)
    return plots


def _world_axis(ax: plt.Axes, worlds: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(worlds, [str(w) for w in worlds])
    ax.minorticks_off()
    ax.set_xlabel("world size (ranks)")
    ax.grid(True, alpha=0.3)


def _speedup_axes(ax: plt.Axes, curves: list[ScalingSeries], title: str, empty: str) -> None:
    ax.set_title(title)
    ax.set_ylabel("speedup (edges/s vs smallest world)")
    if not curves:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
        return
    worlds = sorted({p.world_size for s in curves for p in s.points})
    ax.plot(worlds, [w / worlds[0] for w in worlds], "k--", linewidth=1, label="ideal")
    for s in curves:
        ax.plot([p.world_size for p in s.points], [p.speedup for p in s.points], "o-",
                label=s.label + ("" if s.official else " (unofficial)"))
    _world_axis(ax, worlds)
    ax.legend(fontsize=7)


def _comm_axes(ax: plt.Axes, curves: list[ScalingSeries], title: str) -> None:
    worlds = sorted({p.world_size for s in curves for p in s.points})
    for s in curves:
        ax.plot([p.world_size for p in s.points], [p.comm_bytes / 1e6 for p in s.points], "s-",
                label=f"{s.mode}: {s.label}")
    ax.set_title(title)
    ax.set_ylabel("MB per epoch (all ranks)")
    _world_axis(ax, worlds)
    ax.legend(fontsize=7)


def breakdown_plot(runs: list[tuple[Entry, RunFigures]]) -> bytes | None:
    """Median epoch time split into transfer / compute / communication, one bar per run."""
    if not runs:
        return None
    labels = [run_label(entry) for entry, _ in runs]
    figure, ax = plt.subplots(figsize=(10, 0.45 * len(runs) + 1.2))
    left = [0.0] * len(runs)
    for phase, colour in PHASE_COLOURS.items():
        widths = [figures.breakdown[phase] for _, figures in runs]
        ax.barh(labels, widths, left=left, color=colour, label=phase)
        left = [a + b for a, b in zip(left, widths)]
    ax.invert_yaxis()
    ax.set_xlabel("median epoch time (s)")
    ax.set_title("Epoch-time breakdown (official throughput runs)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return png(figure)


def throughput_plot(runs: list[tuple[Entry, RunFigures]]) -> bytes | None:
    if not runs:
        return None
    labels = [run_label(entry) for entry, _ in runs]
    figure, ax = plt.subplots(figsize=(10, 0.45 * len(runs) + 1.2))
    ax.barh(labels, [figures.throughput for _, figures in runs], color="#f28e2b")
    ax.invert_yaxis()
    ax.set_xlabel("edges/s (median timed epoch)")
    ax.set_title("Throughput (official runs)")
    return png(figure)
