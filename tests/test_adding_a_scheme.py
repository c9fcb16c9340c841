"""docs/adding-a-scheme.md's worked scheme, taken from the page itself: one file registers it, and then
the CLI options, the generic refusal rule and training equal to `single` come with it."""
from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.registry import SCHEMES
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import resolve, run_experiments

DOC = Path(__file__).resolve().parents[1] / "docs" / "adding-a-scheme.md"


@pytest.fixture(scope="module")
def worked_scheme(tmp_path_factory):
    """The page's code block as a module importable here and in spawned ranks (PYTHONPATH)."""
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "doc_rangevertex.py").write_text(code)
    sys.path.insert(0, str(folder))
    patch = pytest.MonkeyPatch()
    patch.setenv("PYTHONPATH", str(folder), prepend=":")
    importlib.import_module("doc_rangevertex")
    yield "rangevertex"
    SCHEMES.pop("discrete:rangevertex", None)
    sys.modules.pop("doc_rangevertex", None)
    sys.path.remove(str(folder))
    patch.undo()


def test_the_worked_scheme_trains_like_single_and_refuses_foreign_options(worked_scheme, esdg_store):
    base = dict(epochs=2, seed=3, out=esdg_store.parent / "runs")
    with pytest.raises(DgbenchError, match="--transfer gd: not an option of .* scheme 'rangevertex'"):
        resolve(RunConfig(worked_scheme, "cdgcn", esdg_store, transfer="gd", **base))
    reference, = run_experiments([RunConfig("single", "cdgcn", esdg_store, **base)])
    ours, = run_experiments([RunConfig(worked_scheme, "cdgcn", esdg_store, nproc=2, blocks=2, **base)])
    np.testing.assert_allclose([e["loss"] for e in ours["epochs"]], [e["loss"] for e in reference["epochs"]],
                               rtol=1e-5)
    assert ours["hyperparameters"]["blocks"] == 2 and ours["extra"]["partitioner"] == "range"
    predicted = ours["extra"]["predicted_comm_elements"]
    sent = {tag: sum(r["comm_by_tag"].get(tag, {}).get("elements", 0) for r in ours["epochs"][-1]["per_rank"])
            for tag in predicted}
    assert predicted and sent == predicted


NEW_MECHANISM = "## A worked scheme with a new mechanism"


@pytest.fixture(scope="module")
def worked_package(tmp_path_factory):
    """The second worked scheme: the page's two files as a package importable here and in spawned ranks."""
    text = DOC.read_text()
    state, scheme = re.findall(r"```python\n(.*?)```", text[text.index(NEW_MECHANISM):], re.S)[:2]
    folder = tmp_path_factory.mktemp("plugin")
    package = folder / "doc_peerpush"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "state.py").write_text(state)
    (package / "scheme.py").write_text(scheme)
    sys.path.insert(0, str(folder))
    patch = pytest.MonkeyPatch()
    patch.setenv("PYTHONPATH", str(folder), prepend=":")
    importlib.import_module("doc_peerpush.scheme")
    yield "peerpush"
    SCHEMES.pop("continuous:peerpush", None)
    for name in ("doc_peerpush.scheme", "doc_peerpush.state", "doc_peerpush"):
        sys.modules.pop(name, None)
    sys.path.remove(str(folder))
    patch.undo()


def test_a_scheme_with_its_own_node_state_trains_counts_and_projects_from_its_package(worked_package, stream_store,
                                                                                       tmp_path):
    from dgbench.trainers.projection.dryrun import dry_run, measured_by_tag
    from dgbench.trainers.projection.hardware import load_profile
    from dgbench.trainers.projection.projection import project_epoch
    base = dict(epochs=1, batch_size=200, memory_dim=16, neighbors=5, seed=3, out=tmp_path / "runs",
                extra={"dtype": "float64", "prefetch": 2})
    reference, ours = run_experiments([RunConfig("single", "tgn", stream_store, **base)]) + \
        run_experiments([RunConfig(worked_package, "tgn", stream_store, nproc=2, **base)])
    np.testing.assert_allclose(ours["extra"]["batch_losses_last_epoch"], reference["extra"]["batch_losses_last_epoch"],
                               rtol=1e-9, atol=1e-12)
    predicted, measured = ours["extra"]["predicted_bytes"], ours["extra"]["measured_row_bytes"]
    assert predicted["aggregation"] > 0 and measured["aggregation"] == pytest.approx(predicted["aggregation"])
    config = RunConfig(worked_package, "tgn", stream_store, nproc=2, **base)
    dry = dry_run(config)  # elements: the dry run prices float32 rows, this run trained in float64
    counted = {tag: n for tag, n in dry.elements_by_tag().items() if n}
    assert counted == {tag: n for tag, n in measured_by_tag(ours, field_name="elements").items() if n}
    assert dry.tags["nm_aggregate"].kind == "p2p"
    wide = dry_run(RunConfig(worked_package, "tgn", stream_store, nproc=64, **base))
    profile = tmp_path / "profile.json"  # a calibrated machine's rates, priced on the paper's links
    profile.write_text(json.dumps({"schema": "dgbench.hardware", "version": 1, "name": "test", "source": "calibrated",
                                   "ranks_per_node": 8, "device": {"name": "cpu", "memory_bandwidth": 1e10},
                                   "links": {"intra": {"alpha_s": 1e-5, "bandwidth": 1e10},
                                             "inter": {"alpha_s": 1e-4, "bandwidth": 1e9}},
                                   "compute": {"continuous": {"tgn": {"per_event_s": 1e-5, "per_position_s": 1e-6,
                                                                      "per_batch_s": 1e-3}}}}))
    projected = project_epoch(wide, load_profile(profile))
    assert projected["communication_s"] > 0 and projected["time_s"] >= projected["communication_s"]
