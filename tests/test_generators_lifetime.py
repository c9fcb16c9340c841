"""`nonuniform`'s DGC §7.3.1 knobs: lifetime presence, the instance/edge ratio, planted communities."""
from __future__ import annotations

import numpy as np
import pytest

from dgbench.store import open_store
from dgbench.store.validate import validate_store
from dgbench.generators import nonuniform
from dgbench.generators.nonuniform import PAPER_INSTANCES_PER_EDGE, lifetime_presence


def _store(tmp_path, name="g", **options):
    base = dict(snapshots=16, mean_edges=300, std_edges=60.0, min_presence=0.2, presence="lifetime", seed=2)
    return open_store(nonuniform.build(out=tmp_path / f"{name}.zarr", **{**base, **options}))


@pytest.mark.parametrize("min_presence", [1.0, 0.6, 0.2])
def test_instances_per_edge_matches_the_paper_ratio(tmp_path, min_presence):
    store = _store(tmp_path, instances_per_edge=PAPER_INSTANCES_PER_EDGE, min_presence=min_presence)
    ratio = lifetime_presence(store).sum() / store.edges_per_snapshot().sum()
    assert abs(ratio - PAPER_INSTANCES_PER_EDGE) / PAPER_INSTANCES_PER_EDGE < 0.05
    assert store.provenance["params"]["instances_per_edge"] == PAPER_INSTANCES_PER_EDGE
    assert store.provenance["params"]["nodes"] == store.num_nodes
    assert validate_store(store.path) == []


def test_lifetime_presence_defines_v_t(tmp_path):
    store = _store(tmp_path, instances_per_edge=2.5)
    alive = lifetime_presence(store)
    for snap in store.snapshots():
        assert alive[snap.index, snap.src].all() and alive[snap.index, snap.dst].all()
    sizes = alive.sum(axis=1)
    assert sizes.min() < sizes.max()  # V_t varies
    first, last = store.read("vertex_lifetime").T
    lengths = last - first + 1
    assert lengths.min() < lengths.max() <= store.num_snapshots
    assert store.provenance["params"]["presence"] == "lifetime"


@pytest.mark.parametrize("mixing", [0.0, 0.3])
def test_community_endpoints_have_the_asked_intra_share(tmp_path, mixing):
    store = _store(tmp_path, f"mix{mixing}", nodes=600, endpoints="communities", communities=8, mixing=mixing)
    community = store.read("vertex_community")
    src, dst = store.read("src").astype(np.int64), store.read("dst").astype(np.int64)
    inside = float((community[src] == community[dst]).mean())
    assert abs(inside - (1 - mixing)) < 0.03
    assert store.provenance["params"]["mixing"] == mixing
    uniform = _store(tmp_path, "uniform", nodes=600)
    assert not uniform.has("vertex_community")


def test_cli_lists_the_new_options():
    from click.testing import CliRunner

    from dgbench.cli import cli
    result = CliRunner().invoke(cli, ["prepare", "nonuniform", "--help"])
    assert result.exit_code == 0
    for flag in ("--presence", "--instances-per-edge", "--endpoints", "--communities", "--mixing"):
        assert flag in result.output


def test_defaults_write_the_registered_store(tmp_path):
    """Without the new options the store is the older one, bit for bit (its official fingerprint)."""
    import json
    from pathlib import Path
    registry = json.loads((Path(__file__).parents[1] / "leaderboards" / "official_stores.json").read_text())
    entries = registry["stores"] if isinstance(registry, dict) else registry
    official = next(e for e in entries if e["label"] == "nonuniform (defaults)")
    store = open_store(nonuniform.build(out=tmp_path / "defaults.zarr"))
    assert store.fingerprint == official["fingerprint"] and not store.has("vertex_lifetime")


def test_ratio_needs_lifetime_presence(tmp_path):
    from dgbench.errors import DgbenchError
    with pytest.raises(DgbenchError, match="--presence lifetime"):
        nonuniform.build(out=tmp_path / "x.zarr", snapshots=4, mean_edges=20, instances_per_edge=2.5)
