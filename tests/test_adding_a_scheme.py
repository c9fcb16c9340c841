"""docs/adding-a-scheme.md's worked scheme, taken from the page itself: one file registers it, and then
the CLI options, the generic refusal rule and training equal to `single` come with it."""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.registry import SCHEMES
from trainers.config import RunConfig
from trainers.experiment import resolve, run_experiments

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
