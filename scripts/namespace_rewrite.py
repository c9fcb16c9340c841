#!/usr/bin/env python3
"""Rewrite every reference to the top-level packages ``loaders``, ``generators`` and ``trainers`` to the one
``dgbench`` namespace (``dgbench.loaders``, ...): imports, dotted module names in strings and prose
(lazy command tables, ``mock.patch`` targets, logger names, ``python -m``), and the plugin package names.
The folders stay where they are; pyproject's package-dir mapping installs them under ``dgbench/``, and
``dgbench/__init__.py`` finds them in a checkout (docs/packaging.md).

Idempotent: a name already under ``dgbench.`` is never rewritten again, so run it after every merge:

    python scripts/namespace_rewrite.py [--check] [ROOT]

``--check`` rewrites nothing and exits 1 listing the files that still need it. Files: the git-tracked
.py, .sh, .md, .toml, .cfg, .txt files and Makefiles, except leaderboards/ (records are data: their
provenance keeps the module names they were made with), ``setup.py`` (it maps the folders), docs/packaging.md
(it names the old spellings) and this script.
"""
from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

PACKAGES = ("loaders", "generators", "trainers")
NAMESPACE = "dgbench"
LINE_LIMIT = 120  # ruff's line-length (pyproject.toml): Python lines the rewrite lengthens past it are wrapped
SUFFIXES = {".py", ".sh", ".md", ".toml", ".cfg", ".txt"}
SKIPPED_DIRS = ("leaderboards/",)
SKIPPED_FILES = ("setup.py", "scripts/namespace_rewrite.py", "docs/packaging.md")

_P = "|".join(PACKAGES)
# file extensions after a package-like word are paths or file names, not modules ("loaders.md")
_NOT_A_FILE = r"(?!(?:py|md|json|sh|toml|txt|csv|cpp|html)\b)"
RULES: list[tuple[re.Pattern[str], str]] = [
    # from trainers.x import y / from trainers import y
    (re.compile(rf"(?<![\w.])from(\s+)({_P})(?=\.|\s+import\b)"), rf"from\1{NAMESPACE}.\2"),
    # import trainers.x [as y] / import trainers
    (re.compile(rf"(?<![\w.])import(\s+)({_P})\b(?![-/])"), rf"import\1{NAMESPACE}.\2"),
    # dotted module names anywhere else: "trainers.cli", trainers.contract.register_scheme, -m loaders.x
    (re.compile(rf"(?<![\w./-])({_P})\.(?=[a-z_]){_NOT_A_FILE}"), rf"{NAMESPACE}.\1."),
]
# a package named by itself in a Python string: load_plugins("trainers"), PLUGIN_PACKAGES
PYTHON_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"""(["'])({_P})\1"""), rf"\1{NAMESPACE}.\2\1"),
]


def tracked_files(root: Path) -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    chosen = []
    for name in out.splitlines():
        if name.startswith(SKIPPED_DIRS) or name in SKIPPED_FILES:
            continue
        path = root / name
        if path.is_file() and (path.suffix in SUFFIXES or path.name == "Makefile" or name.startswith(".ci/")):
            chosen.append(path)
    return chosen


def rewrite_text(text: str, python: bool) -> str:
    """``text`` with every rule applied (Python string rules only for ``python`` files)."""
    for pattern, replacement in RULES + (PYTHON_RULES if python else []):
        text = pattern.sub(replacement, text)
    return text


def _wrapped_import(node: ast.ImportFrom, lines: list[str]) -> list[str]:
    """``from M import a, b`` re-emitted in parentheses, names wrapped under the first, comments kept at the end."""
    indent = lines[node.lineno - 1][:len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip())]
    comments = [m.group(0) for line in lines[node.lineno - 1:node.end_lineno] if (m := re.search(r"#.*$", line))]
    names = [alias.name + (f" as {alias.asname}" if alias.asname else "") for alias in node.names]
    head = f"{indent}from {'.' * node.level}{node.module or ''} import ("
    out, current, fresh = [], head, True
    for i, name in enumerate(names):
        piece = name + (")" if i == len(names) - 1 else ",")
        if not fresh and len(current) + 1 + len(piece) > LINE_LIMIT:
            out.append(current)
            current, fresh = " " * len(head), True
        current += piece if fresh else " " + piece
        fresh = False
    out.append(current + ("  " + " ".join(comments) if comments else ""))
    return out


def _wrapped_prose(line: str, comment: bool) -> list[str]:
    """A too-long comment or docstring line split at the last space that fits; a comment goes on as a comment
    (a trailing one on lines of its own above the code). Left whole where no space fits."""
    indent = line[:len(line) - len(line.lstrip())]
    if len(line) <= LINE_LIMIT:
        return [line]
    start = line.index("#") if comment else len(indent)
    cut = line.rfind(" ", start + 2, LINE_LIMIT)
    if cut < 0:
        return [line]
    rest = line[cut + 1:].lstrip()
    if comment:
        if line[:start].strip():  # a trailing comment: the code keeps the line, the comment moves above it
            return [*_wrapped_prose(indent + line[start:], True), line[:start].rstrip()]
        return [line[:cut].rstrip(), f"{indent}# {rest}"]
    return [line[:cut].rstrip(), f"{indent}{rest}"]


def wrap_long_lines(new: str, old: str) -> str:
    """Wrap the Python lines the rewrite made longer than LINE_LIMIT: import statements in parentheses,
    comments and docstring lines at a space. Lines that were already too long, and other code, are left."""
    lines = new.splitlines()
    before = {line.strip() for line in old.splitlines() if len(line) > LINE_LIMIT}
    long = {i + 1 for i, line in enumerate(lines) if len(line) > LINE_LIMIT and line.strip() not in before}
    if not long:
        return new
    try:
        tree = ast.parse(new)
    except SyntaxError:
        return new
    replacements: dict[int, tuple[int, list[str]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.end_lineno is not None \
                and long & set(range(node.lineno, node.end_lineno + 1)):
            replacements[node.lineno] = (node.end_lineno, _wrapped_import(node, lines))
    docstrings = {n for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                  and isinstance(node.value.value, str) and node.end_lineno is not None
                  for n in range(node.lineno, node.end_lineno + 1)}
    comments = {token.start[0] for token in _tokens(new) if token.type == tokenize.COMMENT}
    for number in sorted(long):
        if any(start <= number <= end for start, (end, _) in replacements.items()):
            continue
        if number in comments or number in docstrings:
            replacements[number] = (number, _wrapped_prose(lines[number - 1], number in comments))
    out, number = [], 1
    while number <= len(lines):
        end, wrapped = replacements.get(number, (number, [lines[number - 1]]))
        out.extend(wrapped)
        number = end + 1
    return "\n".join(out) + ("\n" if new.endswith("\n") else "")


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--check", action="store_true", help="list files that need rewriting; change nothing")
    args = parser.parse_args(argv)
    changed = []
    for path in tracked_files(args.root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = rewrite_text(text, python=path.suffix == ".py")
        if path.suffix == ".py" and new != text:
            new = wrap_long_lines(new, text)
        if new != text:
            changed.append(path.relative_to(args.root))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    verb = "need rewriting" if args.check else "rewritten"
    print(f"{len(changed)} files {verb}" + "".join(f"\n  {name}" for name in changed))
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
