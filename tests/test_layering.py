"""The core (the dgbench/ folder) never imports the trainers; only the public entry point does, lazily."""
from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "dgbench"
TRAINERS = "dgbench.trainers"
OLD_TOP_LEVEL = TRAINERS.split(".")[1]  # the folder's own name, importable before the namespace
ENTRY_POINTS = {"api.py"}  # dgbench.run(...) reaches the trainers the way `dgbench run` does: inside the call


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def test_no_core_module_imports_the_trainers():
    offending = [f"{path.relative_to(CORE.parent)}:{line}: {name}"
                 for path in sorted(CORE.rglob("*.py")) if path.relative_to(CORE).as_posix() not in ENTRY_POINTS
                 for line, name in _imported_modules(path)
                 if name.split(".")[0] == OLD_TOP_LEVEL or name == TRAINERS or name.startswith(TRAINERS + ".")]
    assert not offending, "the core imports the trainers:\n" + "\n".join(offending)


def test_the_entry_point_imports_the_trainers_only_inside_functions():
    tree = ast.parse((CORE / "api.py").read_text())
    top_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert not [n for n in top_level if OLD_TOP_LEVEL in ast.unparse(n)]
