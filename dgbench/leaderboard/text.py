"""The board and comparisons as plain text for a terminal: tables cut into column blocks that fit.

`dgbench leaderboard --format text` (what `make demo` prints) shows each table's key columns; the
board's README.md and index.html keep every column (leaderboards/RULES.md describes them).
"""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tables imports verify, which imports compare, which imports this module
    from dgbench.leaderboard.tables import BoardView, Table

# Columns a terminal reader can do without: the pages and `--format md` keep them.
LEFT_OUT_COLUMNS = ("Setup", "Code", "Record", "Reproduced", "Transfer s", "Compute s", "Comm s", "Timed epochs")


def terminal_width(default: int = 120) -> int:
    return shutil.get_terminal_size((default, 24)).columns


def fitted_table(header: list[str], rows: list[list[str]], width: int) -> str:
    """Left-aligned columns in blocks no wider than ``width``; each block repeats the first column. A cell
    too long for any block (a reason why a row is not ranked) is cut with '…': the pages hold it whole."""
    limit = max(8, width // 2 - 2)
    table = [[cell if len(cell) <= limit else cell[:limit - 1] + "…" for cell in row] for row in [header, *rows]]
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    blocks: list[list[int]] = []
    current: list[int] = []
    used = widths[0]
    for column in range(1, len(header)):
        if current and used + 2 + widths[column] > width:
            blocks.append(current)
            current, used = [], widths[0]
        current.append(column)
        used += 2 + widths[column]
    blocks.append(current)
    lines = []
    for index, block in enumerate(blocks):
        if index:
            lines.append("")
        lines += ["  ".join(row[c].ljust(widths[c]) for c in [0, *block]).rstrip() for row in table]
    return "\n".join(lines) + "\n"


def render_text(view: BoardView, board: Path, width: int | None = None) -> str:
    """Every non-empty table's key columns, fitted to ``width`` (default: the terminal's)."""
    from dgbench.leaderboard.render import _tables_in_order
    width = width or terminal_width()
    parts = ["records on the board: " + ", ".join(f"{track} {n}" for track, n in view.counts.items())]
    for _, tables in _tables_in_order(view):
        parts += [_table_text(table, width) for table in tables if table.rows]
    parts.append(f"every column: {board}/README.md and {board}/index.html (`dgbench leaderboard --update`)")
    return "\n\n".join(parts) + "\n"


def _table_text(table: Table, width: int) -> str:
    kept = [i for i, column in enumerate(table.columns) if column not in LEFT_OUT_COLUMNS]
    rows = [[row[i].text for i in kept] for row in table.rows]
    title = textwrap.shorten(table.title, width)
    return f"{title}\n{fitted_table([table.columns[i] for i in kept], rows, width)}".rstrip()
