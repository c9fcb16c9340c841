"""Every test in benchmarks/ is a benchmark: CI's quick pass (scripts/bench_quick.sh) fails on a collected test
that is never timed, so a plain check belongs in tests/. This catches it in the default test run, from the source."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("test_*.py"))


def _untimed_tests(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [node.name for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
            and "benchmark" not in {arg.arg for arg in node.args.args}]


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda path: path.name)
def test_every_benchmark_file_times_each_of_its_tests(path):
    assert _untimed_tests(path) == [], f"{path.name}: tests without the benchmark fixture belong in tests/"


def test_an_untimed_test_in_a_benchmark_file_is_found(tmp_path):
    source = tmp_path / "test_example.py"
    source.write_text("def test_timed(benchmark):\n    pass\n\n\ndef test_plain():\n    pass\n")
    assert _untimed_tests(source) == ["test_plain"]
