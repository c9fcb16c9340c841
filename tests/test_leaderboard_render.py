"""Rendering (md / json / html), the figures behind each table, `dgbench compare`, and the repo's board."""
from __future__ import annotations

import base64
import json
import re
import shutil
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.leaderboard.board import default_board, load_board, submit
from dgbench.leaderboard.figures import run_figures
from dgbench.leaderboard.render import GENERATED_NOTE, render, render_markdown
from dgbench.leaderboard.tables import build_view
from dgbench.records import REPO_ROOT
from leaderboard_records import make_record, populate_board, write


@pytest.fixture(scope="module")
def populated(tmp_path_factory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("board")
    board = root / "board"
    board.mkdir()
    shutil.copy(REPO_ROOT / "leaderboards" / "official_stores.json", board)
    return board, populate_board(board, root / "staging")


def rendered_json(board: Path) -> dict:
    return json.loads(render(board, "json"))


def table(data: dict, table_id: str) -> list[dict]:
    return next(t for track in data["tables"].values() for t in track if t["id"] == table_id)["rows"]


def test_run_figures_use_the_median_timed_epoch():
    record = make_record(epochs=5, epoch_seconds=2.0)
    figures = run_figures(record)
    timed = record["epochs"][1:]  # the warm-up epoch (1.5x slower here) is left out
    assert figures.timed_epochs == 4
    assert figures.throughput == pytest.approx(statistics.median(e["throughput"] for e in timed))
    assert figures.time_s == statistics.median_low(e["time_s"] for e in timed)  # one epoch, not an average
    assert figures.time_s < record["epochs"][0]["time_s"]


def test_epoch_time_and_its_split_come_from_one_epoch_so_they_add_up():
    record = make_record(epochs=4)
    splits = [(0.02, 0.015, 0.0), (0.0, 0.03, 0.0051), (0.03, 0.0, 0.0051)]  # times 0.035, 0.0351, 0.0351
    for epoch, (transfer, compute, communication) in zip(record["epochs"][1:], splits):
        epoch.update(transfer_s=transfer, compute_s=compute, communication_s=communication,
                     time_s=transfer + compute + communication)
    figures = run_figures(record)
    phase_medians = sum(statistics.median(e[k] for e in record["epochs"][1:])
                        for k in ("transfer_s", "compute_s", "communication_s"))
    assert abs(phase_medians - figures.time_s) > 0.003  # phase-by-phase medians would not add up
    assert sum(figures.breakdown.values()) == pytest.approx(figures.time_s)
    assert figures.time_s == pytest.approx(0.0351) and figures.transfer_s == 0.0  # the earlier of the tied


def test_official_and_unofficial_rows_never_mix(populated):
    board, _ = populated
    data = rendered_json(board)
    official, unofficial = table(data, "throughput-official"), table(data, "throughput-unofficial")
    assert len(official) == 12 and len(unofficial) == 1
    assert all("[" not in row["Dataset"] for row in official)
    assert unofficial[0]["Dataset"] == "esdg-random [ffffffff]"
    at_four = sorted((row["Rank"], row["Throughput"]) for row in official
                     if row["Dataset"] == "esdg-random (defaults)" and row["World"] == 4)
    assert [rank for rank, _ in at_four] == [1, 2] and at_four[0][1] > at_four[1][1]


def test_strong_and_weak_scaling_speedups(populated):
    board, _ = populated
    series = {(s["mode"], s["scheme"]): s for s in rendered_json(board)["scaling"] if s["official"]}
    assert series[("strong", "snapshot")]["base"] == "P=1"
    strong = series[("strong", "snapshot")]["points"]
    assert [p["world_size"] for p in strong] == [1, 2, 4]
    # epoch time 2/p^0.8 with the work fixed: speedup p^0.8 (to the ranks' 1% skew)
    assert [round(p["speedup"], 2) for p in strong] == [1.0, round(2 ** 0.8, 2), round(4 ** 0.8, 2)]
    weak = series[("weak", "vertex")]["points"]
    assert [p["world_size"] for p in weak] == [1, 2, 4, 8]  # default store at p=1, the ladder above
    base = weak[0]["throughput"]
    assert weak[3]["speedup"] == pytest.approx(weak[3]["throughput"] / base)
    assert weak[3]["efficiency"] == pytest.approx(weak[3]["speedup"] / 8)
    assert [p["comm_bytes"] for p in weak] == [0, 4e6, 16e6, 64e6]


def test_a_scaling_series_never_mixes_setups(tmp_path):
    board = tmp_path / "board"
    board.mkdir()
    shutil.copy(REPO_ROOT / "leaderboards" / "official_stores.json", board)
    runs = [make_record(world_size=1, epoch_seconds=2.0), make_record(world_size=2, epoch_seconds=1.0),
            make_record(world_size=1, epoch_seconds=8.0, hidden=64)]  # a wider model: slower, not a base point
    for index, record in enumerate(runs):
        submit(write(record, tmp_path / f"{index}.json"), board)
    series = {s["setup"]["hidden"]: s for s in rendered_json(board)["scaling"]}
    assert [p["records"] for p in series[6]["points"]] == [1, 1]
    assert series[6]["points"][1]["speedup"] == pytest.approx(2.0, rel=0.02)
    assert [p["world_size"] for p in series[64]["points"]] == [1]
    setups = {row["Setup"] for row in table(rendered_json(board), "throughput-official")}
    assert len(setups) == 2 and all("hidden=" in s for s in setups)


def scaling_board(tmp_path: Path, runs: list[dict]) -> dict:
    board = tmp_path / "board"
    board.mkdir()
    shutil.copy(REPO_ROOT / "leaderboards" / "official_stores.json", board)
    for index, record in enumerate(runs):
        submit(write(record, tmp_path / f"{index}.json"), board)
    return rendered_json(board)


def test_a_scheme_without_a_p1_run_is_measured_against_the_single_scheme_at_p1(tmp_path):
    """A P=2 run slower than single P=1 must not show speedup 1 / efficiency 1 (issue 18)."""
    data = scaling_board(tmp_path, [make_record(scheme="single", world_size=1, epoch_seconds=1.0),
                                    make_record(scheme="snapshot", world_size=2, epoch_seconds=1.25),
                                    make_record(scheme="snapshot", world_size=4, epoch_seconds=0.5)])
    snapshot = next(s for s in data["scaling"] if s["scheme"] == "snapshot")
    assert snapshot["base"] == "single P=1" and snapshot["base_world"] == 1
    at_two, at_four = snapshot["points"]
    assert at_two["speedup"] == pytest.approx(0.8, rel=0.02) and at_two["efficiency"] == pytest.approx(0.4, rel=0.02)
    assert at_four["speedup"] == pytest.approx(2.0, rel=0.02) and at_four["efficiency"] == pytest.approx(0.5, rel=0.02)
    rows = [row for row in table(data, "scaling-official") if row["Scheme"] == "snapshot"]
    assert {row["Base"] for row in rows} == {"single P=1"}


def test_without_any_p1_run_the_base_is_named_as_the_smallest_world(tmp_path):
    data = scaling_board(tmp_path, [make_record(scheme="snapshot", world_size=2, epoch_seconds=1.0),
                                    make_record(scheme="snapshot", world_size=4, epoch_seconds=0.8),
                                    make_record(scheme="single", world_size=1, epoch_seconds=1.0, hidden=64)])
    snapshot = next(s for s in data["scaling"] if s["scheme"] == "snapshot")  # the single run has another setup
    assert snapshot["base"] == "P=2 (no P=1 run)"
    assert [p["efficiency"] for p in snapshot["points"]] == pytest.approx([1.0, 0.625], rel=0.02)


def test_setup_column_shows_what_differs_and_the_note_the_rest(tmp_path):
    data = scaling_board(tmp_path, [make_record(world_size=1), make_record(world_size=1, hidden=64, seed=1)])
    rows = table(data, "throughput-official")
    assert sorted(row["Setup"] for row in rows) == ["hidden=6", "hidden=64"]
    note = next(t for t in data["tables"]["throughput"] if t["id"] == "throughput-official")
    markdown = render(tmp_path / "board", "md")
    assert "every row that has them also has window=3" in markdown and note["rows"]


def repo_throughput_runs() -> list:
    """Every throughput row of the repo board, ranked or not (rows recorded before timing evidence are listed
    unranked until the board is re-seeded; their bars are drawn the same way)."""
    from dgbench.leaderboard.figures import run_figures
    return [(e, run_figures(e.record)) for e in load_board(default_board()) if e.track == "throughput"]


def test_bar_plots_label_every_run_and_split_the_families():
    from dgbench.leaderboard import plots
    runs = repo_throughput_runs()
    families = plots.by_family(runs)
    assert set(families) == {"discrete", "continuous"}  # edges/s and events/s never share an axis
    for members in families.values():
        varying = plots.varying_keys([plots.run_setup(e.record) for e, _ in members])
        labels = [plots.run_label(e, varying) for e, _ in members]
        assert len(set(labels)) == len(labels), "two bars share a label and would be drawn on top of each other"


def test_throughput_axes_are_in_millions_without_an_offset():
    from dgbench.leaderboard import plots
    runs = repo_throughput_runs()
    figure = plots.throughput_figure(runs)
    figure.canvas.draw()
    axes = {ax.get_xlabel().split(" (")[0]: ax for ax in figure.axes}
    assert set(axes) == {"M edges/s", "k events/s"}  # the repo board: millions of edges/s, thousands of events/s
    for ax in axes.values():
        assert ax.xaxis.get_offset_text().get_text() == "", "a '1e6'-style offset hides the axis' unit"
        assert max(float(t.get_text().replace("−", "-")) for t in ax.get_xticklabels() if t.get_text()) < 1000
    plots.plt.close(figure)


def test_accuracy_needs_three_seeds_and_reports_mean_and_std(populated):
    board, _ = populated
    data = rendered_json(board)
    ranked = table(data, "accuracy-official")
    assert len(ranked) == 1 and ranked[0]["Seeds"] == 3
    assert ranked[0]["Test AP"] == pytest.approx(0.82)
    markdown = render(board, "md")
    assert "0.8200 ± 0.0200" in markdown  # AP 0.80, 0.82, 0.84: sample std 0.02
    pending = table(data, "accuracy-pending-official")
    assert all(row["Seeds"] < 3 for row in pending) and any(row["Test AP"] == 0.9 for row in pending)


def test_markdown_has_every_track_and_marks_itself_generated(populated):
    board, _ = populated
    markdown = render(board, "md")
    assert GENERATED_NOTE in markdown
    for heading in ("## Throughput", "## Scaling", "## Accuracy", "### Throughput — unofficial"):
        assert heading in markdown
    header = next(line for line in markdown.splitlines() if line.startswith("| Dataset | Model | Scheme"))
    assert "Throughput" in header and "Comm MB/epoch" in header


def test_html_is_self_contained_with_decodable_plots(populated):
    board, _ = populated
    page = render(board, "html")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "the page must not load anything remote"
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 2  # throughput bars, tmgcn scaling curves (the epoch breakdown is HTML)
    assert page.count('<table class="bars"') == 1 and "`" not in page.split("<script>")[0]
    assert all(base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n") for data in images)
    assert page.count('class="sortable"') == len(re.findall(r"<table ", page)) - page.count('class="bars"') >= 5
    assert render(board, "html") == page  # same board, same bytes (no timestamps in PNGs)


def test_leaderboard_command_writes_and_updates(populated, tmp_path):
    board, _ = populated
    out = tmp_path / "lb.json"
    result = CliRunner().invoke(cli, ["leaderboard", "--board", str(board), "--format", "json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["counts"]["throughput"] == 13
    copy = tmp_path / "copy"
    shutil.copytree(board, copy)
    result = CliRunner().invoke(cli, ["leaderboard", "--board", str(copy), "--update"])
    assert result.exit_code == 0, result.output
    assert (copy / "README.md").read_text() == render(board, "md")
    assert (copy / "index.html").read_text().startswith("<!DOCTYPE html>")


def test_compare_shows_ratios_to_the_first_run(tmp_path):
    fast = write(make_record(world_size=2, epoch_seconds=1.0, test_ap=0.8), tmp_path / "fast.json")
    slow = write(make_record(world_size=2, epoch_seconds=2.0, test_ap=0.6), tmp_path / "slow.json")
    result = CliRunner().invoke(cli, ["compare", str(fast), str(slow), "--format", "json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)["groups"][0]["figures"]
    assert figures["edges/s"]["ratios"][1] == pytest.approx(0.5)
    assert figures["epoch s"]["ratios"][1] == pytest.approx(2.0)
    assert figures["test ap"]["ratios"][1] == pytest.approx(0.75)
    text = CliRunner().invoke(cli, ["compare", str(fast), str(slow)]).stdout
    assert re.search(r"edges/s\s+[\d.]+[kMG]?\s+[\d.]+[kMG]? \(×0\.500\)", text) and "differ" not in text
    other = write(make_record(world_size=4, epoch_seconds=1.0), tmp_path / "p4.json")
    assert "differ in world size" in CliRunner().invoke(cli, ["compare", str(fast), str(other)]).stdout
    single = CliRunner().invoke(cli, ["compare", str(fast)])
    assert single.exit_code == 1 and "at least two records" in single.stderr


def test_compare_refuses_a_malformed_record(tmp_path):
    good = write(make_record(), tmp_path / "good.json")
    bad = make_record()
    bad["world_size"] = 0
    result = CliRunner().invoke(cli, ["compare", str(good), str(write(bad, tmp_path / "bad.json"))])
    assert result.exit_code == 1 and "world_size" in result.stderr


def test_repo_readme_is_the_rendering_of_the_repo_board():
    board = default_board()
    from dgbench.leaderboard.projected import load_projections
    expected = render_markdown(build_view(load_board(board)), load_projections(board))
    assert (board / "README.md").read_text() == expected, "run `dgbench leaderboard --update`"
