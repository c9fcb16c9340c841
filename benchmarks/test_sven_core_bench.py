"""Benchmark of Sven's partitioners (range, interval, Re-FlexBiCut): partition time, and the max
per-rank communication (Eq. 5 balance cost) recorded in extra_info, on a generated power-law stream."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from trainers.continuous.sven_core import communication_matrix, interval_partition, range_partition, re_flexbicut

BATCH_SIZE = 200


@pytest.fixture(scope="module")
def power_law_stream(tmp_path_factory) -> tuple[np.ndarray, np.ndarray, int]:
    """Training split of a 500-user / 500-item, 20k-event Zipf(1.1) stream."""
    from dgbench.store import open_store
    from generators.stream import build
    store = open_store(build(out=tmp_path_factory.mktemp("sven") / "stream.zarr", users=500, items=500,
                             events=20000, zipf=1.1, seed=0))
    events = store.events(*store.split_ranges()["train"])
    return events["src"].astype(np.int64), events["dst"].astype(np.int64), store.num_nodes


@pytest.mark.parametrize("num_parts", [2, 4])
@pytest.mark.parametrize("partitioner", [range_partition, interval_partition, re_flexbicut,
                                         partial(re_flexbicut, vertex_imbalance=0.02, compute_imbalance=None)],
                         ids=["range", "interval", "re_flexbicut", "re_flexbicut_vertex_balanced"])
def test_partitioner(benchmark, power_law_stream, partitioner, num_parts):
    src, dst, num_nodes = power_law_stream
    owner = benchmark(partitioner, src, dst, num_nodes, num_parts)
    report = communication_matrix(src, dst, owner, num_parts, BATCH_SIZE)
    benchmark.extra_info.update(report.summary())
    benchmark.extra_info["compute_per_rank"] = report.compute.tolist()
    assert report.balance_cost > 0
