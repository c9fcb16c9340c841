"""The wheel a clean clone builds (`pip wheel --no-deps .`): it holds the package data the code reads
(hardware profiles, the sampler's C++ source) and the license; installed outside the repository,
dgbench reads that data through importlib.resources, compiles its kernels, cites its own version
(never the commit of the git project it runs in) and has no board unless one is named.

The build uses this environment's setuptools (no build isolation): nothing is downloaded.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import dgbench
from dgbench.records import REPO_ROOT


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    return [name for name in out.splitlines() if (REPO_ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a clean clone: the tracked files copied to a scratch folder and built there."""
    clone = tmp_path_factory.mktemp("clone")
    for name in tracked_files():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, clone / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(out), str(clone)], check=True, capture_output=True, text=True, timeout=600)
    (built,) = out.glob("dgbench-*.whl")
    return built


MAPPED_FOLDERS = ("loaders/", "generators/", "trainers/")  # installed as dgbench.loaders, ... (setup.py)


def in_wheel(name: str) -> str:
    """Where a tracked file of a package lands in the wheel: the mapped folders go under dgbench/."""
    return f"dgbench/{name}" if name.startswith(MAPPED_FOLDERS) else name


def package_data() -> list[str]:
    """The tracked files the code reads at run time: profiles/*.json and *.cpp inside packages."""
    return [name for name in tracked_files()
            if (re.search(r"/profiles/[^/]+\.json$", name) or name.endswith(".cpp"))
            and name.startswith(("dgbench/", *MAPPED_FOLDERS))]


def test_the_wheel_holds_the_package_data_and_the_license(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = package_data()
    assert "trainers/continuous/tgcn/sampling/sis_kernels.cpp" in expected
    assert any("/profiles/" in name for name in expected)
    assert not [name for name in expected if in_wheel(name) not in names]
    info = f"dgbench-{dgbench.__version__}.dist-info"
    assert f"{info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert "License-Expression: MIT" in metadata


def test_the_wheel_installs_one_namespace(wheel: Path) -> None:
    """Only dgbench (and its dist-info) at the top of site-packages; every package's modules under dgbench/."""
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"dgbench", f"dgbench-{dgbench.__version__}.dist-info"}
    modules = [name for name in tracked_files() if name.startswith(MAPPED_FOLDERS) and name.endswith(".py")]
    assert modules and not [name for name in modules if in_wheel(name) not in names]


def test_license_and_citation_name_the_same_project_and_version() -> None:
    assert "MIT License" in (REPO_ROOT / "LICENSE").read_text()
    assert "Copyright (c) 2026 dgbench contributors" in (REPO_ROOT / "LICENSE").read_text()
    citation = (REPO_ROOT / "CITATION.cff").read_text()
    assert f"version: {dgbench.__version__}\n" in citation and "license: MIT\n" in citation
    assert f'version = "{dgbench.__version__}"' in (REPO_ROOT / "pyproject.toml").read_text()


INSTALLED_CHECKS = """
import json, os
import dgbench
from dgbench.records import code_provenance
from dgbench.trainers.projection.hardware import builtin_profiles, load_profile
from dgbench.leaderboard.board import default_board
from dgbench.errors import DgbenchError
from dgbench.trainers.continuous.tgcn.sampling import native
assert dgbench.__file__.startswith(os.environ["TARGET"]), dgbench.__file__
out = {"code": code_provenance(), "profiles": builtin_profiles()}
out["profile"] = load_profile(out["profiles"][0]).describe()["name"]
out["kernels"] = native.library() is not None
try:
    out["board"] = str(default_board())
except DgbenchError as exc:
    out["board_error"] = str(exc)
os.environ["DGBENCH_BOARD"] = "my-board"
out["board_from_env"] = str(default_board())
print(json.dumps(out))
"""


def test_installed_outside_the_repository_it_reads_its_data_and_cites_itself(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, text=True, timeout=600)
    project = tmp_path / "someone-elses-project"  # a user's own git project, with a commit
    project.mkdir()
    git = ["git", "-c", "user.name=u", "-c", "user.email=u@example.org"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    (project / "notes.txt").write_text("mine\n")
    subprocess.run([*git, "add", "."], cwd=project, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "mine"], cwd=project, check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DGBENCH_BOARD")}
    env.update(PYTHONPATH=str(target), TARGET=str(target), DGBENCH_SIS_BACKEND="native",
               DGBENCH_KERNEL_CACHE=str(tmp_path / "kernels"))
    result = subprocess.run([sys.executable, "-c", INSTALLED_CHECKS], cwd=project, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.splitlines()[-1])
    code = out["code"]
    assert code["commit"] is None and code["dirty"] is None  # not the user's project's commit
    assert code["version"] == dgbench.__version__ and code["source"].startswith("file://")
    assert code["source"].endswith(wheel.name)
    assert out["profiles"] and out["profile"]
    assert out["kernels"] is True  # compiled from the installed sis_kernels.cpp
    assert "board" not in out and "give --board DIR or set DGBENCH_BOARD" in out["board_error"]
    assert out["board_from_env"] == "my-board"


def test_from_its_own_checkout_dgbench_cites_the_checkouts_commit_and_board() -> None:
    from dgbench.leaderboard.board import default_board
    from dgbench.records import code_provenance
    code = code_provenance()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    assert (code["commit"], code["source"]) == (head, "checkout")
    assert default_board() == REPO_ROOT / "leaderboards"


def test_a_checkout_imports_one_namespace(tmp_path: Path) -> None:
    """Run from the checkout in a folder with its own ``trainers`` package (which fails if imported), dgbench
    loads every plugin under ``dgbench.`` and nothing under the folders' own names; the rewrite has nothing
    left to do (a branch merged with the old imports fails here: run scripts/namespace_rewrite.py)."""
    check = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "namespace_rewrite.py"), "--check"],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout
    user_package = tmp_path / "trainers/__init__.py"  # a path: the rewrite leaves it alone
    user_package.parent.mkdir()
    user_package.write_text("raise ImportError('a user folder, not dgbench')\n")
    code = ("import json, sys; from dgbench.registry import SCHEMES, load_plugins; load_plugins(); "
            "print(json.dumps([sorted({m.split('.')[0] for m in sys.modules}), len(SCHEMES)]))")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    tops, schemes = json.loads(result.stdout.splitlines()[-1])
    assert not [top for top in tops if f"{top}/" in MAPPED_FOLDERS]
    assert schemes >= 10
