"""The board as people read it outside a browser and in its plots: `leaderboard --format text` fits the
terminal, and the throughput plot gives its width to the bars, not to their labels."""
from __future__ import annotations

from dgbench.leaderboard.board import default_board, load_board
from dgbench.leaderboard.tables import build_view
from dgbench.leaderboard.text import fitted_table, render_text


def test_the_board_as_text_fits_the_terminal_and_names_stream_rates_in_events():
    board = default_board()
    text = render_text(build_view(load_board(board)), board, width=100)
    assert max(len(line) for line in text.splitlines()[:-1]) <= 100  # the last line names the full pages
    throughput = text.split("Throughput — ", 1)[1].split("Scaling — ")[0]
    assert "k events/s" in throughput and "M edges/s" in throughput
    assert "|" not in text  # no Markdown


def test_a_table_too_wide_is_cut_into_blocks_that_repeat_the_row_names():
    header = ["name", "a" * 30, "b" * 30, "c" * 30]
    text = fitted_table(header, [["row", "1", "2", "3"]], width=70)
    assert max(len(line) for line in text.splitlines()) <= 70
    blocks = text.split("\n\n")
    assert len(blocks) == 2 and all(block.startswith("name") and "\nrow" in block for block in blocks)


def test_the_throughput_plot_gives_most_of_its_width_to_the_bars():
    from dgbench.leaderboard import plots
    from dgbench.leaderboard.figures import run_figures
    runs = [(e, run_figures(e.record)) for e in load_board(default_board()) if e.track == "throughput"]  # ranked or not
    figure = plots.throughput_figure(runs)
    figure.canvas.draw()
    for ax in figure.axes:
        assert ax.get_position().width > 0.8, "the labels squeeze the bars"
    labels = plots.bar_labels([entry for entry, _ in runs])
    assert len(set(labels)) == len(labels) and max(map(len, labels)) <= 100
    plots.plt.close(figure)
