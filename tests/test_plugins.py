"""Models and schemes from a separately installed package (entry-point groups ``dgbench.models`` and
``dgbench.schemes``, docs/python-api.md): listed, trained under `single` and a distributed scheme, and
picked up by the registry-driven conformance suite, without editing dgbench.

The plugin is "installed" as pip would leave it: a package and its ``.dist-info`` (METADATA,
entry_points.txt) in a folder on the path. Everything runs in fresh processes, so the plugin never
enters this test process's registry.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dgbench.records import REPO_ROOT

PLUGIN_MODELS = '''
from dgbench.models.discrete import cdgcn
from dgbench.registry import register_model


@register_model("demo-gcn", family="discrete", summary="CD-GCN, from an installed plugin package")
def demo_gcn(in_features: int = 2, hidden: int = 6):
    return cdgcn(in_features=in_features, hidden=hidden)
'''

PLUGIN_SCHEMES = '''
from dgbench.trainers.contract import register_scheme
from dgbench.trainers.discrete.esdg.snapshot import Snapshot


@register_scheme
class DemoSnapshot(Snapshot):
    name = "demo-snapshot"
    summary = "snapshot partitioning, registered by an installed plugin package"
    conformance = ()
'''

ENTRY_POINTS = """
[dgbench.models]
demo-gcn = dgbench_demo_plugin.models

[dgbench.schemes]
demo-snapshot = dgbench_demo_plugin.schemes
"""


@pytest.fixture
def plugin_path(tmp_path: Path) -> Path:
    """A folder holding an installed plugin distribution, as site-packages would."""
    root = tmp_path / "site"
    package = root / "dgbench_demo_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(PLUGIN_MODELS)
    (package / "schemes.py").write_text(PLUGIN_SCHEMES)
    info = root / "dgbench_demo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dgbench-demo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def run_with(plugin: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(plugin)]), "DGBENCH_QUIET": "1"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_a_plugin_model_and_scheme_appear_in_dgbench_list(plugin_path: Path, tmp_path: Path) -> None:
    result = run_with(plugin_path, ["-m", "dgbench", "list"], tmp_path)
    assert result.returncode == 0, result.stderr
    listed = {tuple(line.split()[:2]) for line in result.stdout.splitlines() if line.startswith("  ")}
    assert ("demo-gcn", "discrete") in listed and ("demo-snapshot", "discrete") in listed
    assert ("snapshot", "discrete") in listed  # dgbench's own are still there


TRAIN_AND_COMPARE = textwrap.dedent('''
    import sys
    import numpy as np
    import dgbench
    from tests.conformance_matrix import trained_models

    store = dgbench.prepare("esdg-random", out="g.zarr", nodes=48, snapshots=8, edge_factor=3)
    common = dict(model="demo-gcn", dataset=store.path, epochs=2, hidden=6, seed=7, out="runs")
    single = dgbench.run(scheme="single", **common)
    for scheme in ("snapshot", "demo-snapshot"):
        spread = dgbench.run(scheme=scheme, nproc=2, **common)
        assert spread["world_size"] == 2 and spread["model"] == "demo-gcn"
        np.testing.assert_allclose([e["loss"] for e in spread["epochs"]], [e["loss"] for e in single["epochs"]],
                                   rtol=1e-5)
    assert "demo-gcn" in trained_models("discrete", "snapshot")
    assert "demo-gcn" in trained_models("discrete", "demo-snapshot")
    print("ok")
''')


def test_a_plugin_model_trains_under_single_and_a_distributed_scheme_as_conformance_asks(
        plugin_path: Path, tmp_path: Path) -> None:
    result = run_with(plugin_path, ["-c", TRAIN_AND_COMPARE], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_a_broken_plugin_is_one_error_naming_it(plugin_path: Path, tmp_path: Path) -> None:
    (plugin_path / "dgbench_demo_plugin" / "models.py").write_text("raise RuntimeError('half installed')\n")
    result = run_with(plugin_path, ["-m", "dgbench", "list"], tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == ("error: plugin 'demo-gcn' (dgbench.models = dgbench_demo_plugin.models, from "
                                     "dgbench-demo-plugin) failed to load: RuntimeError: half installed")
