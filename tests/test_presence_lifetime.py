"""``--presence lifetime``: V_t = the vertices alive at t by the store's ``vertex_lifetime`` (DGC §2.1,
§7.3.1). Every scheme that honours ``--presence edges`` trains like ``single`` under it and moves the
bytes it predicts, at P = 1 and 2; the instances are Σ_t |V_t| of the lifetimes; a store without
lifetimes is refused."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.registry import SCHEMES, load_plugins
from dgbench.trainers.config import RunConfig
from dgbench.trainers.experiment import resolve, run_experiments

BASE = dict(epochs=2, hidden=6, seed=3, presence="lifetime")
load_plugins("dgbench.trainers")

pytestmark = pytest.mark.usefixtures("one_thread")


def schemes_at(world: int) -> list[tuple[str, dict]]:
    """Every discrete scheme allowed at ``world`` ranks under the whole-sequence protocol, plus pss's other
    layout. The group-protocol schemes (blad, blad-nm) are left out: they do not honour ``--presence`` at
    all (they train the same losses under all, edges and lifetime)."""
    out = []
    for scheme in sorted(SCHEMES.values(), key=lambda s: s.name):
        if scheme.family == "discrete" and scheme.name != "single" and not scheme.protocol_defaults \
                and scheme.world.problem(scheme.name, world) is None:
            out.append((scheme.name, {}))
    return out + [("pss", {"pss_layout": "interleaved"})]


@pytest.fixture(scope="module")
def lifetime_store(tmp_path_factory) -> Path:
    from dgbench.generators.nonuniform import build
    return build(out=tmp_path_factory.mktemp("lifetime") / "lifetime.zarr", snapshots=8, mean_edges=30,
                 std_edges=10.0, min_presence=0.3, presence="lifetime", instances_per_edge=2.5, seed=5)


def stored_instances(store_path: Path) -> int:
    """Σ_t |V_t| over the input steps (all snapshots but the last), straight from the stored lifetimes."""
    from dgbench.store import open_store
    store = open_store(store_path)
    first, last = np.asarray(store.read("vertex_lifetime")).T
    return sum(int(((first <= t) & (t <= last)).sum()) for t in range(store.num_snapshots - 1))


def losses(record: dict) -> list[float]:
    return [e["loss"] for e in record["epochs"]]


@pytest.fixture(scope="module")
def reference(lifetime_store) -> dict:
    [record] = run_experiments([RunConfig("single", "tgcn", lifetime_store, nproc=1,
                                          out=lifetime_store.parent / "runs", **BASE)])
    return record


@pytest.mark.parametrize("world", [1, 2])
def test_every_scheme_trains_like_single_on_lifetime_presence_and_moves_what_it_predicts(
        lifetime_store, reference, world):
    cases = schemes_at(world)
    assert {"pss", "pts", "dgc", "vertex", "snapshot"} <= {name for name, _ in cases}
    records = run_experiments([RunConfig(name, "tgcn", lifetime_store, nproc=world,
                                         out=lifetime_store.parent / "runs", **BASE, **options)
                               for name, options in cases])
    for (name, options), record in zip(cases, records):
        where = f"{name} {options} P={world}"
        assert record["hyperparameters"]["presence"] == "lifetime", where
        np.testing.assert_allclose(losses(record), losses(reference), rtol=1e-5, err_msg=where)
        for tag, elements in (record["extra"].get("predicted_comm_elements") or {}).items():
            measured = sum(r["comm_by_tag"].get(tag, {}).get("elements", 0) for r in record["epochs"][-1]["per_rank"])
            assert measured == elements, f"{where}: {tag}"
        partition = record["extra"].get("partition") or {}
        if "instances" in partition:  # pss and dgc record their instance graph
            assert partition["presence"] == "lifetime", where
            assert partition["instances"] == stored_instances(lifetime_store), where


def test_lifetime_presence_differs_from_edges_presence(lifetime_store, reference):
    """The lifetimes add the instances no edge touches (§7.3.1's ≈ 2.5 per edge), so the runs differ."""
    [edges] = run_experiments([RunConfig("single", "tgcn", lifetime_store, nproc=1,
                                         out=lifetime_store.parent / "runs", **{**BASE, "presence": "edges"})])
    assert not np.allclose(losses(edges), losses(reference), rtol=1e-7)


def test_lifetime_mask_is_the_stored_lifetimes_on_raw_inputs(lifetime_store):
    from dgbench.trainers.discrete.data import DiscreteData
    from dgbench.trainers.discrete.dgc.instance_placement import instance_graph
    from dgbench.trainers.discrete.presence import apply_presence, edge_presence
    data = DiscreteData(lifetime_store)
    apply_presence(data, "lifetime")
    first, last = np.asarray(data.store.read("vertex_lifetime")).T
    steps = np.arange(data.num_steps)[:, None]
    np.testing.assert_array_equal(data.present, (first <= steps) & (steps <= last))
    assert (data.present >= edge_presence(data)).all() and data.present.sum() > edge_presence(data).sum()
    graph = instance_graph(data)
    assert graph.presence == "lifetime" and graph.num_instances == stored_instances(lifetime_store)


def test_smoothed_inputs_keep_the_vertices_their_carried_edges_touch(lifetime_store):
    """A smoothed step carries earlier snapshots' edges, possibly of vertices no longer alive: those
    vertices are instances too (every edge the model aggregates joins instances)."""
    from dgbench.trainers.discrete.data import DiscreteData
    from dgbench.trainers.discrete.presence import alive_mask, apply_presence, edge_presence, stored_lifetimes
    data = DiscreteData(lifetime_store, smoothing="edge-life", smoothing_window=3)
    apply_presence(data, "lifetime")
    alive = alive_mask(stored_lifetimes(data.store), data.num_steps)
    touched = edge_presence(data)
    assert (touched & ~alive).any(), "the fixture should carry an edge past a vertex's lifetime"
    np.testing.assert_array_equal(data.present, alive | touched)


def test_a_store_without_lifetimes_is_refused_in_one_line(tmp_path):
    from dgbench.generators.nonuniform import build
    store = build(out=tmp_path / "edges.zarr", nodes=40, snapshots=6, mean_edges=30, std_edges=10.0, seed=5)
    with pytest.raises(DgbenchError, match="--presence lifetime: .* no vertex_lifetime array") as refused:
        resolve(RunConfig("pss", "tgcn", store, nproc=2, out=tmp_path / "runs", **BASE))
    assert "\n" not in str(refused.value)
