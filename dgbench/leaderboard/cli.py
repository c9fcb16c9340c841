"""`dgbench submit`, `dgbench leaderboard` and `dgbench compare` (wired in dgbench/cli.py LAZY_COMMANDS)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from dgbench.leaderboard.board import Rejected, default_board, submit
from dgbench.leaderboard.fit import BASELINE_LINE, entry_rule, is_baseline_only
from dgbench.leaderboard.tracks import TRACKS

BOARD_OPTION = click.option("--board", type=click.Path(file_okay=False, path_type=Path), default=None,
                            help="Board directory (default: $DGBENCH_BOARD, else the dgbench repository's "
                                 "leaderboards/).")


def _entry_rules() -> str:
    return "\b\nEntry rules (leaderboards/RULES.md):\n" + "\n".join(f"  {t}: {entry_rule(t)}" for t in TRACKS)


@click.command(name="submit", epilog=_entry_rules())
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@BOARD_OPTION
@click.option("--track", "tracks", multiple=True, type=click.Choice(list(TRACKS)),
              help="Track(s) to enter (repeatable; default: every track the record qualifies for).")
@click.option("--allow-dirty", is_flag=True, help="Accept records from a dirty or unknown code version.")
def submit_command(results: tuple[Path, ...], board: Path | None, tracks: tuple[str, ...], allow_dirty: bool) -> None:
    """Check each RESULT record and file it on the board (as tracks/TRACK/SHA256.json); one line per
    reason when refused (exit 1). A record enters a track by its entry rule (leaderboards/RULES.md)."""
    board = board or default_board()
    refused = 0
    for result in results:
        try:
            submission = submit(result, board, tracks=list(tracks) or None, allow_dirty=allow_dirty)
        except Rejected as exc:
            refused += 1
            click.echo(str(exc), err=True)
            continue
        status = (f"official: {submission.official.get('label', submission.official['name'])}"
                  if submission.official else "unofficial: store not in the registry")
        for path in submission.paths:
            track = path.parent.name
            shown = f"unofficial: {submission.unofficial[track]}" if track in submission.unofficial else status
            click.echo(f"accepted {result} -> {path.parent.parent.name}/{track}/{submission.digest[:12]}…  ({shown})")
        if is_baseline_only(submission.skipped):
            click.echo(f"{BASELINE_LINE}: {result}")
            continue
        for track, problems in submission.skipped.items():
            click.echo(f"not entered on {track}: {result}: {'; '.join(str(p) for p in problems)}")
    if refused:
        sys.exit(1)


@click.command(name="leaderboard")
@BOARD_OPTION
@click.option("--format", "fmt", type=click.Choice(["md", "html", "json", "text"]), default="md", show_default=True,
              help="text: the key columns fitted to the terminal.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File to write (default: standard output).")
@click.option("--update", is_flag=True, help="Regenerate the board's README.md and index.html instead.")
def leaderboard_command(board: Path | None, fmt: str, out: Path | None, update: bool) -> None:
    """Render the board as Markdown tables, JSON, plain text, or a self-contained HTML page with plots."""
    from dgbench.files import write_atomic
    from dgbench.leaderboard.render import render, update_board
    if update:
        for path in update_board(board):
            click.echo(f"wrote {path}")
        return
    if fmt == "text":
        from dgbench.leaderboard.board import load_board
        from dgbench.leaderboard.tables import build_view
        from dgbench.leaderboard.text import render_text
        content = render_text(build_view(load_board(board)), board or default_board())
    else:
        content = render(board, fmt)
    if out is None:
        click.echo(content, nl=False)
    else:
        click.echo(f"wrote {write_atomic(out, content)}")


@click.command(name="compare")
@click.argument("records", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "md", "json"]), default="text", show_default=True)
def compare_command(records: tuple[Path, ...], fmt: str) -> None:
    """Show two or more RECORDS side by side, grouped by comparable setup (same store, model, task and
    hyper-parameters but the scheme's, world size and seed), with each figure's ratio to its group's first
    run; the table fits the terminal and the runs left out are named."""
    from dgbench.errors import DgbenchError
    from dgbench.leaderboard.compare import comparison, format_comparison
    if len(records) < 2:
        raise DgbenchError("compare needs at least two records")
    click.echo(format_comparison(comparison(list(records)), fmt), nl=False)
