"""DGC chunk fusion: spatial fusion's pair heuristic (§5.1.1) and temporal fusion's masked packing (§5.1.2)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgbench.errors import DgbenchError
from dgbench.models.contract import SequenceMask
from dgbench.models.sequence import CausalSelfAttention, GRUSequence, LSTMSequence
from dgbench.trainers.discrete.dgc.fusion import Packing, fuse_chunks, pack_sequences


pytestmark = pytest.mark.usefixtures("one_thread")


def test_first_fit_decreasing_by_hand():
    """Lengths [4, 2, 2, 3, 1] into rows of 4, longest first: s0 -> row 0 (full); s3 -> row 1 (3 used);
    s1 -> row 2; s2 -> row 2 at 2 (full); s4 -> row 1 at 3."""
    packing = pack_sequences(np.array([4, 2, 2, 3, 1]))
    assert (packing.length, packing.rows) == (4, 3)
    assert packing.row.tolist() == [0, 2, 2, 1, 1] and packing.offset.tolist() == [0, 0, 2, 0, 3]
    assert packing.reset().astype(int).tolist() == [[1, 1, 1], [0, 0, 0], [0, 0, 1], [0, 1, 0]]
    assert packing.present().all()  # no padding left at all
    values = torch.arange(12.0).view(12, 1)
    assert torch.equal(packing.unpack(packing.pack(values)), values)
    assert packing.pack(values)[:, 2, 0].tolist() == [4.0, 5.0, 6.0, 7.0]  # s1 then s2 in row 2


def test_exclusive_sequences_get_rows_of_their_own():
    packing = pack_sequences(np.array([1, 3, 1, 2]), exclusive=np.array([False, True, False, True]))
    assert packing.offset[[1, 3]].tolist() == [0, 0] and packing.row[[1, 3]].tolist() == [0, 1]
    # row 1 has room after s3 but is s3's alone: s0 and s2 share row 2
    assert packing.rows == 3 and packing.row[[0, 2]].tolist() == [2, 2] and packing.offset[[0, 2]].tolist() == [0, 1]
    everything = pack_sequences(np.array([1, 3, 1, 2]), exclusive=np.ones(4, bool))
    assert everything.rows == 4 and (everything.offset == 0).all()  # zero padding, Fig. 9(b)
    with pytest.raises(DgbenchError, match="does not fit"):
        pack_sequences(np.array([5]), capacity=4)


def padded(lengths: np.ndarray) -> Packing:
    """Fig. 9(b): every sequence in its own row, zero padding after it."""
    return Packing(int(lengths.max()), len(lengths), np.arange(len(lengths)), np.zeros(len(lengths), np.int64), lengths)


def run(module, packing: Packing, values: torch.Tensor) -> torch.Tensor:
    mask = SequenceMask(present=torch.from_numpy(packing.present()), reset=torch.from_numpy(packing.reset()))
    out, _ = module(packing.pack(values), module.initial_carry(packing.rows), mask)
    return packing.unpack(out)


@pytest.mark.parametrize("count", [23, 300])
@pytest.mark.parametrize("make", [lambda: GRUSequence(5, 7), lambda: LSTMSequence(5, 6, layers=2),
                                  lambda: GRUSequence(5, 64)], ids=["gru", "lstm", "wide-gru"])
def test_masked_temporal_fusion_equals_per_sequence_execution_bit_for_bit(count, make):
    torch.manual_seed(count)
    lengths = np.random.default_rng(count).integers(1, 9, size=count)
    values = torch.randn(int(lengths.sum()), 5, requires_grad=True)
    module = make()
    fused = pack_sequences(lengths)
    assert fused.rows < count  # something was actually concatenated
    out_fused, out_padded = run(module, fused, values), run(module, padded(lengths), values)
    assert torch.equal(out_fused, out_padded)
    weights = torch.randn_like(out_fused)
    grad_fused = torch.autograd.grad((out_fused * weights).sum(), values)[0]
    grad_padded = torch.autograd.grad((out_padded * weights).sum(), values)[0]
    # the backward's products reduce over 3-4·width with as many rows as the layout has, and the BLAS
    # kernel for a row count may differ in the last bit: gradients agree to float tolerance
    torch.testing.assert_close(grad_fused, grad_padded)
    unmasked, _ = module(fused.pack(values), module.initial_carry(fused.rows))  # without masks: wrong
    assert not torch.allclose(fused.unpack(unmasked), out_fused)


def test_masked_fusion_of_temporal_attention_matches_to_float_tolerance():
    torch.manual_seed(0)
    lengths = np.random.default_rng(0).integers(1, 7, size=40)
    values = torch.randn(int(lengths.sum()), 4)
    module = CausalSelfAttention(4)
    torch.testing.assert_close(run(module, pack_sequences(lengths), values), run(module, padded(lengths), values))


def test_spatial_fusion_by_hand():
    """A={0..3}, B={2,3,4}, C={10,11}, D={11..14}: A∩B = 2 rows fuse first, then C∩D = 1."""
    loaded = [np.array([0, 1, 2, 3]), np.array([2, 3, 4]), np.array([10, 11]), np.array([11, 12, 13, 14])]
    fusion = fuse_chunks(loaded, row_bytes=1.0, budget=7.0)
    assert fusion.groups == ((0, 1), (2, 3))
    assert (fusion.rows_unfused, fusion.rows_fused, fusion.rows_saved) == (13, 10, 3)
    assert fuse_chunks(loaded, row_bytes=1.0, budget=4.9).groups == ((0,), (1,), (2,), (3,))  # 5 rows do not fit
    assert fuse_chunks(loaded, row_bytes=2.0, budget=9.0).groups == ((0,), (1,), (2,), (3,))  # A, D close to 9


def test_spatial_fusion_takes_the_largest_redundancy_first():
    loaded = [np.array([0, 1]), np.array([1, 2]), np.array([1, 2, 3])]  # B∩C = 2 beats A∩B = A∩C = 1
    assert fuse_chunks(loaded, row_bytes=1.0, budget=3.5).groups == ((0,), (1, 2))  # A + BC: 4 rows > 3.5
    # at a budget of 3, C (3 rows) is already close to it (>= 90 %): only A and B fuse
    assert fuse_chunks(loaded, row_bytes=1.0, budget=3.0).groups == ((0, 1), (2,))
    assert fuse_chunks(loaded, row_bytes=1.0, budget=100.0).groups == ((0, 1, 2),)
    with pytest.raises(DgbenchError, match="positive"):
        fuse_chunks(loaded, row_bytes=0.0, budget=1.0)
