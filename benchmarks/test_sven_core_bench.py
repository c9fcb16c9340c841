"""Benchmark of Sven's partitioners (range, HPDC interval, Re-FlexBiCut = Alg. 3, minmax-greedy): partition
time, and the Eq. 5 balance cost on the trainer-vertex graph recorded in extra_info, on a generated
power-law stream (events split evenly per batch, as every scheme trains)."""
from __future__ import annotations

import numpy as np
import pytest

from dgbench.trainers.continuous.sven.formulas import (balance_report, interval_partition, minmax_greedy,
                                                       range_partition, re_flexbicut, trainer_vertex_graph)

BATCH_SIZE = 200


@pytest.fixture(scope="module")
def power_law_stream(tmp_path_factory) -> tuple[np.ndarray, np.ndarray, int]:
    """Training split of a 500-user / 500-item, 20k-event Zipf(1.1) stream."""
    from dgbench.store import open_store
    from dgbench.generators.stream import build
    store = open_store(build(out=tmp_path_factory.mktemp("sven") / "stream.zarr", users=500, items=500,
                             events=20000, zipf=1.1, seed=0))
    events = store.events(*store.split_ranges()["train"])
    return events["src"].astype(np.int64), events["dst"].astype(np.int64), store.num_nodes


PARTITIONERS = {
    "range": lambda src, dst, n, p, graph: range_partition(n, p),
    "interval": lambda src, dst, n, p, graph: interval_partition(n, p, 64),
    "reflexbicut": lambda src, dst, n, p, graph: re_flexbicut(graph),
    "minmax-greedy": lambda src, dst, n, p, graph: minmax_greedy(src, dst, n, p, batch_size=BATCH_SIZE),
}


@pytest.mark.parametrize("num_parts", [2, 4])
@pytest.mark.parametrize("name", list(PARTITIONERS))
def test_partitioner(benchmark, power_law_stream, name, num_parts):
    src, dst, num_nodes = power_law_stream
    graph = trainer_vertex_graph(src, dst, num_nodes, num_parts, BATCH_SIZE)
    owner = benchmark(PARTITIONERS[name], src, dst, num_nodes, num_parts, graph)
    report = balance_report(graph, owner)
    benchmark.extra_info.update(report.summary())
    benchmark.extra_info["vertices_per_rank"] = np.bincount(owner, minlength=num_parts).tolist()
    assert report.balance_cost > 0
