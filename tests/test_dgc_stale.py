"""DGC adaptive stale aggregation (§5.2): thresholds of Eq. 6-7 and the last-transmitted cache."""
from __future__ import annotations

import math

import pytest
import torch

from dgbench.dist import DistContext
from dgbench.errors import DgbenchError
from dgbench.launch import launch
from dgbench.trainers.discrete.dgc.stale import StaleExchange, StalePolicy


def test_policy_parsing():
    assert StalePolicy.parse("off").enabled is False
    assert StalePolicy.parse("adaptive").mode == "adaptive"
    assert StalePolicy.parse("0.5").factor == 0.5 and StalePolicy.parse("0.7D").factor == 0.7
    assert StalePolicy.parse("adaptive", formula="printed").describe() == {"mode": "adaptive", "factor": None,
                                                                           "formula": "printed"}
    for bad in ("sometimes", "-1", "nan"):
        with pytest.raises(DgbenchError, match="--stale"):
            StalePolicy.parse(bad)
    with pytest.raises(DgbenchError, match="--stale-formula"):
        StalePolicy.parse("adaptive", formula="guess")


def test_eq6_as_printed_falls_and_as_intended_rises():
    losses = [2.0, 2.0, 1.0, 0.5]  # l_1 .. l_4
    intent, printed = StalePolicy.parse("adaptive"), StalePolicy.parse("adaptive", formula="printed")
    assert intent.threshold_factor(1, losses) is None and printed.threshold_factor(1, losses) is None  # all sent
    assert intent.threshold_factor(2, losses) == printed.threshold_factor(2, losses) == 0.5  # norm(l_1) = 0
    # epoch 4 reads l_3 = 1.0: norm = (2 - 1) / 2 = 0.5
    assert intent.threshold_factor(4, losses) == pytest.approx(1 / (1 + math.exp(-0.5)))  # 0.622: larger θ
    assert printed.threshold_factor(4, losses) == pytest.approx(1 / (1 + math.exp(0.5)))  # 0.378: smaller θ
    assert intent.threshold_factor(5, losses) > intent.threshold_factor(4, losses)
    assert printed.threshold_factor(5, losses) < printed.threshold_factor(4, losses)
    assert StalePolicy.parse("0.3").threshold_factor(7, losses) == 0.3
    assert StalePolicy.parse("off").threshold_factor(7, losses) is None


def _two_ranks_drift(ctx: DistContext) -> list:
    """Each rank sends two one-wide rows to the other: A drifts 0.1 per epoch, B jumps 1.0 per epoch."""
    stale = StaleExchange(StalePolicy.parse("0.25"), ctx.comm)
    splits = [0, 2] if ctx.rank == 0 else [2, 0]
    seen = []
    for epoch in range(1, 5):
        stale.begin_epoch(epoch, [1.0] * epoch)
        send = torch.tensor([[0.1 * (epoch - 1)], [1.0 * (epoch - 1)]], requires_grad=True)
        received = stale.exchange("layer0", send * 1.0, splits, splits, tag="halo")
        received.sum().backward()
        seen.append((received.detach().view(-1).tolist(), send.grad.view(-1).tolist(), stale.end_epoch()))
    stale.training = False  # evaluation: fresh rows, plain exchange
    fresh = stale.exchange("layer0", torch.tensor([[9.0], [9.0]]), splits, splits, tag="halo")
    off = _off_is_plain(ctx)
    return [seen, fresh.view(-1).tolist(), ctx.comm.snapshot(), off]


def test_rows_are_sent_when_they_moved_from_the_last_transmitted_copy():
    results = launch(_two_ranks_drift, 2, timeout_s=60)
    assert [r[3] for r in results] == [[1.0], [0.0]]  # --stale off: a plain exchange, every row fresh
    for seen, evaluated, comm, _ in results:
        received = [s[0] for s in seen]
        # D = 1 (B's jump) from epoch 2, θ = 0.25: A (0.1, 0.2 from the copy sent in epoch 1) stays stale
        # until epoch 4, when it is 0.3 away from that copy; comparing with the previous epoch (0.1) never would
        assert [v for row in received for v in row] == pytest.approx([0.0, 0.0, 0.0, 1.0, 0.0, 2.0, 0.3, 3.0])
        assert [s[1] for s in seen] == [[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [1.0, 1.0]]  # no gradient for stale rows
        summaries = [s[2] for s in seen]
        assert [s["rows_sent"] for s in summaries] == [2, 1, 1, 2]
        assert [s["fraction_saved"] for s in summaries] == [0.0, 0.5, 0.5, 0.0]
        assert summaries[1]["thresholds"] == {"layer0": pytest.approx(0.25)}
        assert evaluated == [9.0, 9.0]
        assert comm["halo:forward"]["bytes"] == (2 + 1 + 1 + 2 + 2) * 4  # only fresh rows travel
        assert comm["stale:mask"]["bytes"] == 4 * 2
        assert comm["off:forward"]["calls"] == 1 and comm["stale:mask"]["calls"] == 4  # off sends no mask


def _off_is_plain(ctx: DistContext) -> list[float]:
    stale = StaleExchange(StalePolicy.parse("off"), ctx.comm)
    splits = [0, 1] if ctx.rank == 0 else [1, 0]
    stale.begin_epoch(2, [1.0, 1.0])
    return stale.exchange("k", torch.tensor([[float(ctx.rank)]]), splits, splits, tag="off").view(-1).tolist()
