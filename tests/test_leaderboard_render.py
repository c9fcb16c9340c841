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
    assert figures.time_s == pytest.approx(statistics.median(e["time_s"] for e in timed))
    assert figures.time_s < record["epochs"][0]["time_s"]


def test_official_and_unofficial_rows_never_mix(populated):
    board, _ = populated
    data = rendered_json(board)
    official, unofficial = table(data, "throughput-official"), table(data, "throughput-unofficial")
    assert len(official) == 12 and len(unofficial) == 1
    assert all("[" not in row["Dataset"] for row in official)
    assert unofficial[0]["Dataset"] == "esdg-random [ffffffff]"
    at_four = sorted((row["Rank"], row["Edges/s"]) for row in official
                     if row["Dataset"] == "esdg-random (defaults)" and row["World"] == 4)
    assert [rank for rank, _ in at_four] == [1, 2] and at_four[0][1] > at_four[1][1]


def test_strong_and_weak_scaling_speedups(populated):
    board, _ = populated
    series = {(s["mode"], s["scheme"]): s for s in rendered_json(board)["scaling"] if s["official"]}
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


def test_bar_plots_label_every_run_and_split_the_families():
    from dgbench.leaderboard import plots
    runs = build_view(load_board(default_board())).throughput_runs
    families = plots.by_family(runs)
    assert set(families) == {"discrete", "continuous"}  # edges/s and events/s never share an axis
    for members in families.values():
        varying = plots.varying_keys([plots.run_setup(e.record) for e, _ in members])
        labels = [plots.run_label(e, varying) for e, _ in members]
        assert len(set(labels)) == len(labels), "two bars share a label and would be drawn on top of each other"


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
    assert "Edges/s" in header and "Comm MB/epoch" in header


def test_html_is_self_contained_with_decodable_plots(populated):
    board, _ = populated
    page = render(board, "html")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "the page must not load anything remote"
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 3  # throughput bars, epoch breakdown, tmgcn scaling curves
    assert all(base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n") for data in images)
    assert page.count('class="sortable"') == len(re.findall(r"<table ", page)) >= 5
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
    figures = json.loads(result.stdout)["figures"]
    assert figures["edges/s"]["ratios"][1] == pytest.approx(0.5)
    assert figures["epoch s"]["ratios"][1] == pytest.approx(2.0)
    assert figures["test ap"]["ratios"][1] == pytest.approx(0.75)
    text = CliRunner().invoke(cli, ["compare", str(fast), str(slow)]).stdout
    assert re.search(r"edges/s\s+[\d,.]+\s+[\d,.]+ \(×0\.500\)", text) and "differ" not in text
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
    expected = render_markdown(build_view(load_board(board)))
    assert (board / "README.md").read_text() == expected, "run `dgbench leaderboard --update`"
