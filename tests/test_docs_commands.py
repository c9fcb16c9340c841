"""Every path the docs cite can be followed by a reader who has only the repository: no path outside it bar a
short allow-list, and every ``scripts/``, ``benchmarks/`` or ``tests/`` file, ``file::test`` name and quoted
``test_...`` name they cite exists (docs/result-record.md "Reproducing a published figure")."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]

# Outside paths a reader has or makes: the shared public data and papers beside the repository, the kernel's files,
# GNU time, the timing lock the commands take (flock creates it), dgbench's own cache folder.
ALLOWED_OUTSIDE = ("../shared/data", "../shared/papers", "/proc/", "/usr/bin/time", "/tmp/dgbench-timing.lock",
                   "~/.cache/dgbench/")
# Repository-looking names that are another project's files: IBM/AMLSim's log converter (docs/loader-formats.md).
OTHER_PROJECTS = ("scripts/convert_logs.py",)

ABSOLUTE = re.compile(r"(?<![\w.:/~$)\]}>-])(/[A-Za-z_.][\w.+-]*(?:/[\w.*+-]+)+|~/[\w.*+/-]+)")
PARENT = re.compile(r"(?<![\w./])(\.\./[\w.*+/-]+)")
CITED_FILE = re.compile(r"(?<![\w./-])((?:scripts|benchmarks|tests)/[\w./-]*\w\.(?:py|sh|md|txt|json))"
                        r"(?:::\s*([A-Za-z_]\w*))?")
BARE_TEST = re.compile(r"(?<![\w.:/])::\s*(test_\w+)")  # `::test_b` after `file::test_a`: the same file
QUOTED_TEST = re.compile(r"`(test_\w+)")


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def outside_paths(text: str, folder: Path) -> list[tuple[int, str]]:
    """(line, path) of each path outside the repository the text cites and the allow-list does not hold."""
    found = [(m.start(), m.group(1)) for m in ABSOLUTE.finditer(text)]
    found += [(m.start(), m.group(1)) for m in PARENT.finditer(text)
              if not (folder / m.group(1)).resolve().is_relative_to(REPO)]
    return [(line_of(text, start), path) for start, path in sorted(found)
            if not path.startswith(ALLOWED_OUTSIDE)]


def defines(path: Path, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", path.read_text(), re.M) is not None


def missing_references(text: str, root: Path = REPO) -> list[tuple[int, str]]:
    """(line, reference) of each cited repository file that does not exist under ``root`` and of each
    ``file::name`` (or bare ``::name`` after one) that file does not define."""
    missing, last_file = [], None
    events = sorted([(m.start(), "file", m) for m in CITED_FILE.finditer(text)]
                    + [(m.start(), "bare", m) for m in BARE_TEST.finditer(text)], key=lambda event: event[0])
    for start, kind, match in events:
        if kind == "file":
            relative, name = match.group(1), match.group(2)
            if relative in OTHER_PROJECTS:
                continue
            last_file = root / relative
            if not last_file.is_file():
                missing.append((line_of(text, start), relative))
                continue
        else:
            name = match.group(1)
            if last_file is None or not last_file.is_file():
                continue
        if name and not defines(last_file, name):
            missing.append((line_of(text, start), f"{last_file.relative_to(root)}::{name}"))
    return missing


def missing_quoted_tests(text: str, root: Path = REPO) -> list[tuple[int, str]]:
    """(line, name) of each quoted ``test_...`` name no test or benchmark module under ``root`` defines."""
    sources = "\n".join(path.read_text() for folder in ("tests", "benchmarks")
                        for path in sorted((root / folder).glob("*.py")))
    return [(line_of(text, m.start()), m.group(1)) for m in QUOTED_TEST.finditer(text)
            if not re.search(rf"def {re.escape(m.group(1))}\b", sources)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(REPO)))
def test_no_doc_cites_a_path_outside_the_repository(doc):
    assert outside_paths(doc.read_text(), doc.parent) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(REPO)))
def test_every_script_benchmark_and_test_a_doc_cites_exists(doc):
    text = doc.read_text()
    assert missing_references(text) + missing_quoted_tests(text) == []


def test_the_checks_report_what_a_reader_could_not_follow(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "scripts" / "here.py").write_text("")
    (tmp_path / "tests" / "test_here.py").write_text("def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
    text = ("Run `/work/scratch/x/harness.py` then ~/bin/tool and\n"
            "`scripts/here.py`, `scripts/gone.py`, `benchmarks/test_gone.py -k x`,\n"
            "`tests/test_here.py::test_a` and `::test_b`, `tests/test_here.py::\n"
            "    test_c`, `::test_d` and `test_a`, `test_gone_too`;\n"
            "allowed: `flock /tmp/dgbench-timing.lock`, `/usr/bin/time -v`, `../shared/data/x.csv`,\n"
            "[the rules](../leaderboards/RULES.md), and IBM/AMLSim's `scripts/convert_logs.py`.\n")
    docs = REPO / "docs"
    assert outside_paths(text, docs) == [(1, "/work/scratch/x/harness.py"), (1, "~/bin/tool")]
    assert outside_paths("see ../../elsewhere/notes.md", docs) == [(1, "../../elsewhere/notes.md")]
    assert missing_references(text, tmp_path) == [(2, "scripts/gone.py"), (2, "benchmarks/test_gone.py"),
                                                 (3, "tests/test_here.py::test_c"),
                                                 (4, "tests/test_here.py::test_d")]
    assert missing_quoted_tests(text, tmp_path) == [(4, "test_gone_too")]
