"""The board's plots as PNG bytes (matplotlib, Agg), for embedding in the self-contained HTML page.

Scaling curves per model follow ESDG Fig. 5 (strong) and Fig. 7 (weak); throughput bars carry the timed
epochs' quartiles as whiskers (median ± spread); the epoch-time breakdown (busy / wait / transfer, or
ESDG Fig. 4's split for older records) is drawn as HTML bars by dgbench.leaderboard.render. Axes carry
their unit in the label (M edges/s, k events/s), never a "1e6" offset. PNGs carry no timestamp, so the
same board renders to the same bytes.
"""
from __future__ import annotations

import io
import json
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from dgbench.leaderboard.board import Entry  # noqa: E402
from dgbench.leaderboard.figures import RunFigures  # noqa: E402
from dgbench.leaderboard.tables import ScalingSeries, dataset_label  # noqa: E402
from dgbench.leaderboard.tracks import run_setup  # noqa: E402

FAMILY_UNITS = {"discrete": "edges/s", "continuous": "events/s"}
SCALES = ((1e9, "G"), (1e6, "M"), (1e3, "k"))


def unit_scale(largest: float) -> tuple[float, str]:
    """Divisor and prefix that keep an axis' numbers short: (1e6, "M") from a million up, and so on."""
    return next(((factor, prefix) for factor, prefix in SCALES if largest >= factor), (1.0, ""))


def plain_axis(ax: plt.Axes, axis: str) -> None:
    """Numbers as they are on ``axis``: no scientific notation, no offset printed in a corner."""
    ax.ticklabel_format(axis=axis, style="plain", useOffset=False)


def png(figure: plt.Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def run_label(entry: Entry, varying: list[str]) -> str:
    """One bar's label: unique per record (seed, the setup keys that differ on the plot, the record hash)."""
    record = entry.record
    setup = run_setup(record)
    extra = "".join(f" · {key}={setup.get(key, '–')}" for key in varying)
    return (f"{record['scheme']}/{record['model']} · {dataset_label(entry)} · p={record['world_size']} · "
            f"{record['hardware_class']}{extra} · seed={record['hyperparameters'].get('seed', '–')} · "
            f"#{entry.digest[:6]}")


def varying_keys(setups: list[dict]) -> list[str]:
    """The setup keys whose values differ among ``setups`` (what tells two otherwise alike runs apart)."""
    keys = sorted({key for setup in setups for key in setup})
    return [key for key in keys if len({json.dumps(setup.get(key)) for setup in setups}) > 1]


def by_family(runs: list[tuple[Entry, RunFigures]]) -> dict[str, list[tuple[Entry, RunFigures]]]:
    """Discrete (edges/s) and continuous (events/s) runs differ by orders of magnitude: one panel each."""
    families: dict[str, list[tuple[Entry, RunFigures]]] = defaultdict(list)
    for entry, figures in runs:
        families[entry.record["family"]].append((entry, figures))
    return dict(sorted(families.items(), key=lambda item: list(FAMILY_UNITS).index(item[0])))


BAR_INCHES = 0.42  # per bar: the bar and, above it, its label


def _bar_panels(runs: list[tuple[Entry, RunFigures]], title: str) -> tuple[plt.Figure, list]:
    """One horizontal-bar panel per family, each as tall as its number of bars."""
    families = by_family(runs)
    heights = [len(members) for members in families.values()]
    figure, axes = plt.subplots(len(families), 1, figsize=(11, BAR_INCHES * sum(heights) + 1.2 * len(families)),
                                gridspec_kw={"height_ratios": heights}, squeeze=False, layout="constrained")
    figure.suptitle(title)
    panels = []
    for ax, (family, members) in zip(axes[:, 0], families.items()):
        panels.append((ax, family, members, bar_labels([entry for entry, _ in members])))
    return figure, panels


def bar_labels(entries: list[Entry]) -> list[str]:
    """One short, unique label per bar: the setup keys are named only where runs otherwise alike differ
    in them (naming every key any run has made labels of hundreds of characters)."""
    alike: dict[str, list[int]] = defaultdict(list)
    for index, entry in enumerate(entries):
        alike[run_label(entry, [])].append(index)
    labels = [""] * len(entries)
    for members in alike.values():
        varying = varying_keys([run_setup(entries[i].record) for i in members]) if len(members) > 1 else []
        for i in members:
            labels[i] = run_label(entries[i], varying)
    return labels


def labelled_bars(ax: plt.Axes, labels: list[str], values: list[float],
                  whiskers: list[list[float]] | None = None) -> None:
    """Bars across the whole width, each with its label written just above it (not beside the axis,
    where long labels would take most of the figure's width) and its value at its end; ``whiskers``:
    [below, above] each bar's value (e.g. its quartiles)."""
    rows = range(len(values))
    ax.barh(rows, values, height=0.45, color="#f28e2b", xerr=whiskers,
            error_kw={"elinewidth": 0.8, "capsize": 2})
    ax.set_yticks([])
    for row, label, value in zip(rows, labels, values):
        ax.text(0, row - 0.28, label, fontsize=7, va="bottom", ha="left", clip_on=True)
        ax.text(value, row, f" {value:,.3g}", fontsize=7, va="center", ha="left")
    ax.set_ylim(len(values) - 0.5, -0.85)  # the first bar at the top, room for its label
    ax.set_xlim(0, max(values, default=0) * 1.08 or 1)


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
    units = " / ".join(sorted({FAMILY_UNITS.get(s.family, "edges/s") for s in curves})) or "throughput"
    ax.set_ylabel(f"speedup ({units} vs the base: P=1 where run)")
    if not curves:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
        return
    worlds = sorted({p.world_size for s in curves for p in s.points})
    base = min(s.base_world for s in curves)
    ax.plot(worlds, [w / base for w in worlds], "k--", linewidth=1, label="ideal")
    for s in curves:
        ax.plot([p.world_size for p in s.points], [p.speedup for p in s.points], "o-",
                label=s.label + ("" if s.official else " (unofficial)"))
    _world_axis(ax, worlds)
    plain_axis(ax, "y")
    ax.legend(fontsize=7)


def _comm_axes(ax: plt.Axes, curves: list[ScalingSeries], title: str) -> None:
    worlds = sorted({p.world_size for s in curves for p in s.points})
    for s in curves:
        ax.plot([p.world_size for p in s.points], [p.comm_bytes / 1e6 for p in s.points], "s-",
                label=f"{s.mode}: {s.label}")
    ax.set_title(title)
    ax.set_ylabel("MB per epoch (all ranks)")
    _world_axis(ax, worlds)
    plain_axis(ax, "y")
    ax.legend(fontsize=7)


def throughput_plot(runs: list[tuple[Entry, RunFigures]]) -> bytes | None:
    """Median timed-epoch throughput, one bar per run, one panel per family."""
    return png(throughput_figure(runs)) if runs else None


def throughput_figure(runs: list[tuple[Entry, RunFigures]]) -> plt.Figure:
    figure, panels = _bar_panels(runs, "Throughput (official runs)")
    for ax, family, members, labels in panels:
        factor, prefix = unit_scale(max(figures.throughput for _, figures in members))
        labelled_bars(ax, labels, [figures.throughput / factor for _, figures in members],
                      interquartile_whiskers(members, factor))
        plain_axis(ax, "x")
        ax.set_xlabel(f"{prefix} {FAMILY_UNITS[family]} (median timed epoch; whiskers: quartiles), "
                      f"{family} time".lstrip())
    return figure


def interquartile_whiskers(members: list[tuple[Entry, RunFigures]], factor: float) -> list[list[float]]:
    """Each bar's whiskers: from the timed epochs' first to their third quartile of edges/s (none without
    a spread)."""
    low, high = [], []
    for _, figures in members:
        spread = figures.spread
        low.append(max(0.0, figures.throughput - spread.q1) / factor if spread else 0.0)
        high.append(max(0.0, spread.q3 - figures.throughput) / factor if spread else 0.0)
    return [low, high]
