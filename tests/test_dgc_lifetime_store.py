"""DGC's schemes on the §7.3.1 generator's lifetime + community stores: they still train like
``single`` and move the bytes they predict (the store variant changes the data, not the contract)."""
from __future__ import annotations

import numpy as np
import pytest

from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import run_experiments

BASE = dict(epochs=2, hidden=6, seed=3, presence="edges")
CASES = (("pss", {}), ("pss", {"pss_layout": "interleaved"}), ("pts", {}), ("dgc", {}))

pytestmark = pytest.mark.usefixtures("one_thread")


def test_schemes_on_a_lifetime_community_store_train_like_single(tmp_path):
    from dgbench.generators.nonuniform import build
    store = build(out=tmp_path / "lifetime.zarr", snapshots=8, mean_edges=40, std_edges=10.0, min_presence=0.3,
                  presence="lifetime", instances_per_edge=2.5, endpoints="communities", communities=4, mixing=0.1,
                  seed=5)
    [reference] = run_experiments([RunConfig("single", "tgcn", store, nproc=1, out=tmp_path / "runs", **BASE)])
    records = run_experiments([RunConfig(scheme, "tgcn", store, nproc=2, out=tmp_path / "runs", **BASE, **options)
                               for scheme, options in CASES])
    losses = [e["loss"] for e in reference["epochs"]]
    for (scheme, options), record in zip(CASES, records):
        where = f"{scheme} {options}"
        np.testing.assert_allclose([e["loss"] for e in record["epochs"]], losses, rtol=1e-5, err_msg=where)
        for tag, elements in (record["extra"].get("predicted_comm_elements") or {}).items():
            measured = sum(r["comm_by_tag"].get(tag, {}).get("elements", 0) for r in record["epochs"][-1]["per_rank"])
            assert measured == elements, f"{where}: {tag}"
        if scheme == "dgc":
            cut = record["extra"]["partition"]["predicted_bytes_per_epoch"]
            halo = sum(rank["comm_by_tag"].get("halo:forward", {}).get("bytes", 0)
                       for rank in record["epochs"][-1]["per_rank"])
            assert halo == cut["spatial"], where
