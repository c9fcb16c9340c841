"""A stream read chunk by chunk from its store, and the bounded ``recent`` rings, against the in-memory
stream and the T-CSR sampler: equal arrays, equal samples, equal batch plans."""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from dgbench.errors import DgbenchError
from dgbench.store import EdgeStreamStore, open_store
from dgbench.trainers.continuous.data import (BATCH, TGL, BatchPlanner, EventStream, StreamProblem, gap_statistics,
                                              neighbor_sampler)
from dgbench.trainers.continuous.ring import RecentRing
from dgbench.trainers.continuous.sampler import TemporalSampler
from dgbench.trainers.continuous.streamed import streamed_gap_statistics
from dgbench.trainers.continuous.sven.formulas import minmax_greedy, minmax_greedy_blocks
from dgbench.trainers.continuous.sven.partition import partition_nodes, training_blocks
from tests.node_label_sets import event_label_arrays

pytestmark = pytest.mark.usefixtures("one_thread")  # in-process runs beside the other xdist worker


def _open(path: Path) -> EdgeStreamStore:
    store = open_store(path)
    assert isinstance(store, EdgeStreamStore)
    return store


@pytest.mark.parametrize("max_events", [None, 1500])
def test_streamed_columns_equal_the_loaded_ones(stream_store: Path, max_events: int | None) -> None:
    store = _open(stream_store)
    loaded = EventStream.from_store(store, max_events)
    streamed = EventStream.streamed(store, max_events, rows_per_read=97)  # reads that cross chunk blocks
    assert streamed.is_streamed and not loaded.is_streamed
    assert streamed.ranges == loaded.ranges and streamed.num_events == loaded.num_events
    np.testing.assert_array_equal(streamed.negative_pool, loaded.negative_pool)
    for name in ("src", "dst", "t", "edge_features"):
        whole, lazy = getattr(loaded, name), getattr(streamed, name)
        assert lazy.dtype == whole.dtype and lazy.shape == whole.shape
        np.testing.assert_array_equal(lazy[0:len(whole)], whole)
        np.testing.assert_array_equal(lazy[90:310], whole[90:310])
        picks = np.random.default_rng(0).integers(0, len(whole), size=(7, 5))
        np.testing.assert_array_equal(lazy[picks], whole[picks])
    assert streamed.reads is not None and streamed.reads.bytes_read > 0


def test_streamed_gap_statistics_match_the_sampler(stream_store: Path) -> None:
    store = _open(stream_store)
    loaded = gap_statistics(EventStream.from_store(store))
    streamed = EventStream.streamed(store, rows_per_read=113)
    np.testing.assert_allclose(gap_statistics(streamed), loaded, rtol=1e-12)
    blocks = streamed_gap_statistics(streamed.src, streamed.dst, streamed.t, streamed.num_nodes, block_events=89)
    np.testing.assert_allclose(blocks, loaded, rtol=1e-12)  # a vertex's gaps that span two blocks


def _tied_stream(events: int = 3000, nodes: int = 25, edge_dim: int = 3, seed: int = 4) -> EventStream:
    """Integer times (many ties, also across batch boundaries) and self-loops."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, nodes, events), rng.integers(0, nodes, events)
    t = np.sort(rng.integers(0, events // 6, events)).astype(np.float64)
    features = rng.normal(size=(events, edge_dim)).astype(np.float32)
    cut = [int(events * 0.7), int(events * 0.85)]
    ranges = {"train": (0, cut[0]), "val": (cut[0], cut[1]), "test": (cut[1], events)}
    return EventStream(src, dst, t, features, nodes, ranges, np.unique(dst))


@pytest.mark.parametrize("batch", [1, 7, 200])
def test_rings_sample_what_the_tcsr_samples(batch: int) -> None:
    stream = _tied_stream()
    k = 4
    tcsr = TemporalSampler(stream.src, stream.dst, stream.t, stream.num_nodes)
    ring = RecentRing(stream, k)
    rng = np.random.default_rng(1)
    # in order, a restart (a new epoch) and a skip ahead (the rings fold the events between)
    windows = [(a, min(a + batch, 900)) for a in range(0, 900, batch)]
    windows += [(0, batch), (2000, 2000 + batch)]
    for start, stop in windows:
        nodes = np.concatenate([stream.src[start:stop], stream.dst[start:stop], rng.integers(0, 25, stop - start)])
        times = np.tile(stream.t[start:stop], 3)
        want = tcsr.sample(nodes, times, k, "recent")
        got = ring.sample_window(start, stop, nodes, times, k)
        for name in ("nodes", "events", "times", "mask"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
        expected_features = np.where(want.mask[..., None], stream.edge_features[np.where(want.mask, want.events, 0)],
                                     0)
        np.testing.assert_array_equal(got.edge_features, expected_features)
    assert ring.nbytes < 25 * k * 64  # the state is per vertex, not per event


def _plans(stream: EventStream, sampler: object, protocol: str) -> list:
    planner = BatchPlanner(stream, sampler, 5, "recent", 3, lambda src: np.ones(len(src), dtype=bool),
                           lambda ids: None, protocol=protocol)
    out = []
    for split in ("train", "val", "train"):  # val continues training's history; train again restarts
        out += [planner.plan(split, i, a, b) for i, (a, b) in enumerate(planner.batch_bounds(split, 150))]
    return out


@pytest.mark.parametrize("protocol", [TGL, BATCH])
def test_streamed_plans_equal_the_in_memory_plans(stream_store: Path, protocol: str) -> None:
    store = _open(stream_store)
    loaded, streamed = EventStream.from_store(store), EventStream.streamed(store, rows_per_read=131)
    want = _plans(loaded, neighbor_sampler(loaded, "recent", 5), protocol)
    got = _plans(streamed, neighbor_sampler(streamed, "recent", 5), protocol)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        for f in fields(a):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if f.name == "neighbors":
                for name in ("nodes", "events", "times", "mask"):
                    np.testing.assert_array_equal(getattr(x, name), getattr(y, name))
                read = loaded.edge_features[np.where(y.mask, y.events, 0)]
                np.testing.assert_array_equal(x.edge_features, np.where(y.mask[..., None], read, 0))
            elif isinstance(y, np.ndarray):
                np.testing.assert_array_equal(x, y, err_msg=f.name)
            else:
                assert x == y, f.name


def test_streamed_stream_refuses_whole_history_samplers(stream_store: Path) -> None:
    streamed = EventStream.streamed(_open(stream_store))
    for strategy in ("uniform", "sis"):
        with pytest.raises(DgbenchError, match="--sampler recent"):
            neighbor_sampler(streamed, strategy, 5)


def _run(store: Path, out: Path, scheme: str = "single", nproc: int = 1, epochs: int = 2, model: str = "tgn",
         **options: object) -> dict:
    from dgbench.trainers.config import RunConfig
    from dgbench.trainers.experiment import run_experiments
    config = RunConfig(scheme, model, store, nproc=nproc, out=out, extra={"dtype": "float64"}, epochs=epochs,
                       batch_size=200, memory_dim=16, neighbors=5, seed=3, **options)
    return run_experiments([config])[0]


def test_a_streamed_run_trains_like_the_in_memory_run(stream_store: Path, tmp_path: Path) -> None:
    loaded = _run(stream_store, tmp_path / "a")
    streamed = _run(stream_store, tmp_path / "b", stream_budget=0.0)
    assert loaded["extra"]["stream_source"]["source"] == "memory"
    source = streamed["extra"]["stream_source"]
    assert source["source"] == "streamed" and source["bytes_read"] > 0 and source["sampler_state_bytes"] > 0
    # the same batches, samples and features; only the time-encoding shift and scale are summed in another
    # order (a one-pass gap statistic), so the losses agree to rounding
    np.testing.assert_allclose([e["loss"] for e in streamed["epochs"]], [e["loss"] for e in loaded["epochs"]],
                               rtol=1e-9)
    assert streamed["final_metrics"]["test"]["ap"] == pytest.approx(loaded["final_metrics"]["test"]["ap"], abs=1e-9)


def test_edgebank_scores_a_streamed_stream_as_the_loaded_one(stream_store: Path, tmp_path: Path) -> None:
    loaded = _run(stream_store, tmp_path / "a", model="edgebank", epochs=1)
    streamed = _run(stream_store, tmp_path / "b", model="edgebank", epochs=1, stream_budget=0.0)
    assert streamed["extra"]["stream_source"]["source"] == "streamed"
    assert streamed["final_metrics"] == loaded["final_metrics"]


def test_max_batches_bounds_every_pass(stream_store: Path, tmp_path: Path) -> None:
    record = _run(stream_store, tmp_path, stream_budget=0.0, max_batches=2)
    assert record["extra"]["stream_source"]["max_batches"] == 2
    assert [e["work"] for e in record["epochs"]] == [400, 400] and "evaluation" not in record


def test_a_streamed_run_refuses_what_reads_the_whole_stream(stream_store: Path, tmp_path: Path) -> None:
    with pytest.raises(DgbenchError, match="--sampler recent"):
        _run(stream_store, tmp_path, stream_budget=0.0, sampler="uniform")


@pytest.mark.parametrize("scheme,options", [("depcache", {}), ("depcomm", {"partition": "range"}),
                                            ("sven", {"partition": "reflexbicut", "protocol": "batch"})])
def test_the_distributed_schemes_train_a_streamed_stream_like_the_loaded_one(stream_store: Path, tmp_path: Path,
                                                                               scheme: str, options: dict) -> None:
    """Two ranks, each reading its own stream chunk by chunk; the pre-sampling pass (Sven's Re-FlexBiCut
    graph) plans with the bounded rings: the same partition, losses and metrics as the loaded stream."""
    loaded = _run(stream_store, tmp_path / "a", scheme, nproc=2, epochs=1, **options)
    streamed = _run(stream_store, tmp_path / "b", scheme, nproc=2, epochs=1, stream_budget=0.0, **options)
    source = streamed["extra"]["stream_source"]
    assert source["source"] == "streamed" and len(source["bytes_read_per_rank"]) == 2
    assert all(b > 0 for b in source["bytes_read_per_rank"])
    assert loaded["extra"]["stream_source"]["source"] == "memory"
    assert "bytes_read_per_rank" not in loaded["extra"]["stream_source"]
    for key in ("paper_eta", "paper_volume_bytes", "balance", "per_rank_counters"):  # the pre-sampled partition
        assert streamed["extra"][key] == loaded["extra"][key], key
    np.testing.assert_allclose([e["loss"] for e in streamed["epochs"]], [e["loss"] for e in loaded["epochs"]],
                               rtol=1e-9)
    assert streamed["final_metrics"]["test"]["ap"] == pytest.approx(loaded["final_metrics"]["test"]["ap"], abs=1e-9)


def test_minmax_greedy_in_blocks_gives_the_one_block_owners() -> None:
    stream = _tied_stream(events=3000, nodes=40)
    src, dst = stream.src, stream.dst
    whole = minmax_greedy(src, dst, stream.num_nodes, 3, batch_size=7)
    blocks = [(src[a:a + 7 * 11], dst[a:a + 7 * 11]) for a in range(0, len(src), 7 * 11)]  # a pair across blocks
    np.testing.assert_array_equal(minmax_greedy_blocks(blocks, stream.num_nodes, 3, batch_size=7), whole)
    with pytest.raises(DgbenchError, match="inside a batch"):
        minmax_greedy_blocks([(src[:5], dst[:5]), (src[5:9], dst[5:9])], stream.num_nodes, 3, batch_size=7)


def test_minmax_greedy_partitions_a_streamed_stream_as_the_loaded_one(stream_store: Path) -> None:
    store = _open(stream_store)
    loaded, streamed = EventStream.from_store(store), EventStream.streamed(store, rows_per_read=131)
    blocks = list(training_blocks(streamed, 200, block_batches=2))
    assert len(blocks) > 2  # read block by block, not at once
    for parts in (2, 3):
        want = partition_nodes(StreamProblem(loaded, 200, 3, neighbors=0), parts, "minmax-greedy", 64)
        got = partition_nodes(StreamProblem(streamed, 200, 3, neighbors=0), parts, "minmax-greedy", 64)
        np.testing.assert_array_equal(got.owner, want.owner)
        owners = minmax_greedy_blocks(blocks, streamed.num_nodes, parts, batch_size=200)
        np.testing.assert_array_equal(owners, want.owner)


def test_sven_minmax_greedy_trains_a_streamed_stream_like_the_loaded_one(stream_store: Path, tmp_path: Path) -> None:
    loaded = _run(stream_store, tmp_path / "a", "sven", nproc=2, epochs=1, partition="minmax-greedy")
    streamed = _run(stream_store, tmp_path / "b", "sven", nproc=2, epochs=1, stream_budget=0.0,
                    partition="minmax-greedy")
    assert streamed["extra"]["stream_source"]["source"] == "streamed"
    assert streamed["extra"]["balance"] == loaded["extra"]["balance"]
    np.testing.assert_allclose([e["loss"] for e in streamed["epochs"]], [e["loss"] for e in loaded["epochs"]],
                               rtol=1e-9)


@pytest.mark.parametrize("nproc,options", [(1, {"grid_ranks": 2, "intervals": 3, "no_pipeline": True}),
                                           (2, {"intervals": 2})])
def test_tgcn_trains_a_streamed_stream_like_the_loaded_one(stream_store: Path, tmp_path: Path, nproc: int,
                                                           options: dict) -> None:
    """The grid cut one interval at a time from the store: the same grids (event counts per step), losses
    and metrics; only the time-encoding statistics are summed in another order."""
    loaded = _run(stream_store, tmp_path / "a", "tgcn", nproc=nproc, epochs=1, model="dygnn", **options)
    streamed = _run(stream_store, tmp_path / "b", "tgcn", nproc=nproc, epochs=1, model="dygnn", stream_budget=0.0,
                    **options)
    assert streamed["extra"]["stream_source"]["source"] == "streamed"
    assert [e["work"] for e in streamed["epochs"]] == [e["work"] for e in loaded["epochs"]]
    np.testing.assert_allclose([e["loss"] for e in streamed["epochs"]], [e["loss"] for e in loaded["epochs"]],
                               rtol=1e-9)
    assert streamed["final_metrics"]["test"]["ap"] == pytest.approx(loaded["final_metrics"]["test"]["ap"], abs=1e-9)


def test_a_streamed_stream_refuses_tgcn_sparsification(stream_store: Path, tmp_path: Path) -> None:
    with pytest.raises(DgbenchError, match="--scheme tgcn: .*--sparsify 0.5 \\(Alg. 7, §5\\).*every training event"):
        _run(stream_store, tmp_path, "tgcn", nproc=1, stream_budget=0.0, model="dygnn", grid_ranks=2, sparsify=0.5)


def test_the_label_set_read_in_blocks_equals_the_whole_read(tmp_path: Path) -> None:
    from dgbench.tasks.node import _stream_labels
    from tests.test_tasks_node import planted_stream
    store_path = planted_stream(tmp_path / "s.zarr")
    store = _open(store_path)
    whole, _ = _stream_labels(store, store_path, None, read_events=store.num_events)
    blocks, _ = _stream_labels(store, store_path, 1000, read_events=97)
    prefix, _ = _stream_labels(store, store_path, 1000, read_events=1000)
    assert len(whole["train_node"]) > 97
    for name, values in prefix.items():
        np.testing.assert_array_equal(blocks[name], values, err_msg=name)
        assert blocks[name].dtype == values.dtype
    np.testing.assert_array_equal(whole["train_label"][:len(blocks["train_label"])], blocks["train_label"])


def test_column_moments_in_blocks_are_numpys_bits() -> None:
    from dgbench.tasks.node import _column_moments
    rng = np.random.default_rng(2)
    values = rng.normal(3, 2, (10007, 13)) * rng.lognormal(0, 3, (10007, 1))
    mean, std = _column_moments(values, 1000)
    np.testing.assert_array_equal(mean, values.mean(axis=0))
    np.testing.assert_array_equal(std, values.std(axis=0))


def test_spilled_embeddings_decode_to_the_in_memory_figures(tmp_path: Path) -> None:
    """Gathered batches in any order written to disk and decoded block by block: the in-memory figures."""
    from dgbench.tasks.evalset import EvaluationSet, EvaluationSpec
    from dgbench.tasks.node import SOURCE_STATE, DecoderOptions, NodeClassification
    rng = np.random.default_rng(0)
    arrays, labels = event_label_arrays(rng, (1500, 400, 400), 0.2)
    start = len(labels)
    rows = np.column_stack([np.arange(start), rng.normal(0, 1, (start, 5)) + labels[:, None]])
    batches = [rows[a:a + 300] for a in rng.permutation(np.arange(0, start, 300))]
    spec = EvaluationSpec("node-classification", SOURCE_STATE, 0)

    def task(spill: Path | None) -> NodeClassification:
        made = NodeClassification(EvaluationSet(spec, "s", "f", arrays, Path("labels")), 1, DecoderOptions(epochs=3),
                                  spill_dir=spill)
        made.spill_rows = 128  # several blocks per split
        return made
    want = task(None).figures_from(iter(batches))
    got = task(tmp_path).figures_from(iter(batches))
    assert got == want and want["test"]["auc"] > 0.6
    assert list(tmp_path.iterdir()) == []  # the disk-backed array is deleted
    with pytest.raises(ValueError, match="no embedding"):
        task(tmp_path).figures_from(iter(batches[1:]))


def test_node_classification_on_a_streamed_stream_equals_the_in_memory_run(tmp_path: Path) -> None:
    from tests.test_tasks_node import planted_stream
    store = planted_stream(tmp_path / "s.zarr")
    loaded = _run(store, tmp_path / "a", model="jodie", epochs=1, task="node-classification")
    streamed = _run(store, tmp_path / "b", model="jodie", epochs=1, task="node-classification", stream_budget=0.0)
    assert streamed["extra"]["stream_source"]["source"] == "streamed"
    assert streamed["evaluation"]["fingerprint"] == loaded["evaluation"]["fingerprint"]
    for split in ("val", "test"):  # only the time-encoding statistics are summed in another order
        for name, value in loaded["final_metrics"][split].items():
            assert streamed["final_metrics"][split][name] == pytest.approx(value, rel=1e-6, abs=1e-9), (split, name)
