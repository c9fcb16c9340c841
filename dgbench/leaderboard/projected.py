"""The board's *projected* section: scaling curves from ``dgbench project``, never mixed with measured rows.

Projection files (``dgbench project strong|weak -o FILE``, schema ``dgbench.projection``, marked
``"projected": true``) are filed by hand under the board's ``projected/`` folder; they are not
records, are not submitted, and no measured table reads them. This module turns them into one table
(a row per curve and world size) and one plot (speedup against P, the ideal line dashed), which
:mod:`dgbench.leaderboard.render` places in a section of their own, titled as projected.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dgbench.errors import DgbenchError
from dgbench.leaderboard.tables import Cell, Table, number, text

FOLDER = "projected"
TITLE = "Projected scaling (not measured)"
SUMMARY = ("Epoch time, speedup and efficiency *projected* by `dgbench project` from exact dry-run communication "
           "counts priced by a hardware profile (calibrated here, or from a spec sheet); no run was timed at these "
           "sizes. See docs/projection.md")
COLUMNS = ["Mode", "Scheme", "Model", "Profile", "Store", "P", "Epoch s", "Comm s", "Speedup", "Efficiency",
           "MB/epoch"]
NUMERIC = [False] * 5 + [True] * 6


def load_projections(board: str | Path) -> list[dict[str, Any]]:
    """Every projection file under the board's ``projected/`` folder (a file that is not one stops the
    rendering with its name)."""
    folder = Path(board) / FOLDER
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            document = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DgbenchError(f"{path}: not JSON ({exc})") from exc
        if not isinstance(document, dict) or document.get("schema") != "dgbench.projection" \
                or document.get("projected") is not True:
            raise DgbenchError(f"{path}: not a dgbench projection (schema dgbench.projection, projected: true)")
        out.append(document)
    return out


def _store(document: dict[str, Any]) -> str:
    stores = [p["dry_run"]["store"] for p in document["points"]]
    if document["mode"] == "weak":
        return f"weak family, N = {stores[0]['num_nodes']}·P"
    return f"{Path(stores[0]['path']).name} [{stores[0]['fingerprint'][:8]}]"


def projected_table(documents: list[dict[str, Any]]) -> Table:
    rows: list[list[Cell]] = []
    for document in documents:
        profile = f"{document['profile']['name']} ({document['profile']['source']})"
        for point in document["points"]:
            rows.append([text(document["mode"]), text(document["scheme"]), text(document["model"]), text(profile),
                         text(_store(document)), number(point["world_size"], 4), number(point["time_s"]),
                         number(point["communication_s"]), number(point["speedup"]), number(point["efficiency"]),
                         number(point["bytes"] / 1e6)])
    return Table("projected", "Projected epochs (dry-run counts x hardware profile)", COLUMNS, NUMERIC, rows,
                 "Every row is a projection, not a measurement: compute from the profile's rates, communication "
                 "from the alpha-beta costs of the exact dry-run bytes, added with nothing overlapped. Sven rows are "
                 "a pessimistic bound: each extra micro-batch Eq. 12 picks costs this CPU's calibrated "
                 "per-micro-batch seconds, unscaled to the device, and Sven's pipeline overlap (Sec. 3.3.2) is not "
                 "credited (docs/projection.md Sec. 5).")


def projected_plot(documents: list[dict[str, Any]]) -> bytes | None:
    """Speedup against P for every projected curve, strong and weak side by side (ideal dashed)."""
    if not documents:
        return None
    from matplotlib.ticker import ScalarFormatter
    from dgbench.leaderboard.plots import plt, png
    figure, axes = plt.subplots(1, 2, figsize=(13, 4))
    for ax, mode in zip(axes, ("strong", "weak")):
        curves = [d for d in documents if d["mode"] == mode]
        ax.set_title(f"PROJECTED {mode} scaling (not measured)")
        ax.set_ylabel("projected speedup")
        if not curves:
            ax.text(0.5, 0.5, f"no projected {mode}-scaling curve", ha="center", va="center", transform=ax.transAxes)
            continue
        worlds = sorted({p["world_size"] for d in curves for p in d["points"]})
        ax.plot(worlds, worlds, "k--", linewidth=1, label="ideal")
        for d in curves:
            ax.plot([p["world_size"] for p in d["points"]], [p["speedup"] for p in d["points"]], "o-",
                    label=f"{d['scheme']}/{d['model']} · {d['profile']['name']}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xticks(worlds, [str(w) for w in worlds])
        ax.minorticks_off()
        ax.set_xlabel("world size (ranks)")
        ax.grid(True, alpha=0.3)
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.legend(fontsize=7)
    return png(figure)
