"""Where Sven's Eq. 12 picks more than one micro-batch: n = floor((A bs + B) / S) evaluated at the paper's
settings (batch sizes 400-2400 of §5.3-5.6, LastFM, a 56 Gbps InfiniBand link) with A, B and the
dispatch bytes per event measured here (docs/continuous-training.md, "Where Eq. 12 picks n > 1")."""
from __future__ import annotations

import pytest

from dgbench.trainers.continuous.sven.formulas import granularity

INFINIBAND_BYTES_PER_S = 56e9 / 8  # §5.1: 56 Gbps HDR InfiniBand
COLLECTIVE_LATENCY_S = 30e-6  # an assumed fixed cost of one NCCL all-to-all (the paper gives none)
# (A, B, dispatch bytes per event) measured on the first 30,000 LastFM events at P = 2 (record "microbatches")
MEASURED = {"tgn": (0.9491, -13.86, 534.0), "apan": (0.9220, -134.07, 1619.7)}
THIS_MACHINE_S = 14549.0  # events per collective's fixed cost measured with gloo here (TGN, bs 1200)


def paper_link_speed(bytes_per_event: float) -> float:
    return INFINIBAND_BYTES_PER_S * COLLECTIVE_LATENCY_S / bytes_per_event


@pytest.mark.parametrize(("model", "expected"), [
    ("tgn", {400: 1, 800: 1, 1200: 2, 2000: 4, 2400: 5}),
    ("apan", {400: 1, 800: 4, 1200: 7, 2000: 13, 2400: 16}),
])
def test_on_the_papers_link_eq12_picks_several_micro_batches_from_the_default_batch_size(model, expected):
    a, b, bytes_per_event = MEASURED[model]
    speed = paper_link_speed(bytes_per_event)
    assert {bs: granularity(a, b, bs, speed) for bs in expected} == expected


def test_on_this_machines_link_eq12_needs_a_batch_of_about_thirty_thousand_events():
    a, b, _ = MEASURED["tgn"]
    assert granularity(a, b, 1200, THIS_MACHINE_S) == 1 and granularity(a, b, 30000, THIS_MACHINE_S) == 1
    assert granularity(a, b, 31000, THIS_MACHINE_S) == 2  # A bs + B >= 2 S
