"""The sparse kernel: CSR building, GCN normalisation, block stacking, and spmm with a cached Aᵀ."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dgbench.models.sparse import (SparseOperator, block_diagonal, csr_from_coo, csr_transpose, gcn_normalize,
                                   spmm)


def dense(a) -> np.ndarray:
    a = a if isinstance(a.rowptr, np.ndarray) else type(a)(a.rowptr.numpy(), a.col.numpy(), a.val.numpy(), a.shape)
    out = np.zeros(a.shape)
    rows = np.repeat(np.arange(a.shape[0]), np.diff(a.rowptr))
    np.add.at(out, (rows, a.col), a.val)
    return out


def random_csr(rows: int, cols: int, nnz: int, seed: int):
    rng = np.random.default_rng(seed)
    return csr_from_coo(rng.integers(0, rows, nnz), rng.integers(0, cols, nnz), rng.random(nnz), (rows, cols))


def test_csr_from_coo_sums_duplicates_and_sorts_columns():
    a = csr_from_coo(np.array([1, 0, 1, 1]), np.array([2, 1, 0, 2]), np.array([1.0, 2.0, 3.0, 4.0]), (3, 3))
    assert a.rowptr.tolist() == [0, 1, 3, 3]
    assert a.col.tolist() == [1, 0, 2]
    assert a.val.tolist() == [2.0, 3.0, 5.0]


def test_gcn_normalize_matches_dense_formula():
    rng = np.random.default_rng(0)
    n = 7
    src, dst = rng.integers(0, n, 20), rng.integers(0, n, 20)
    weight = rng.random(20).astype(np.float32)
    adjacency = np.zeros((n, n))
    np.add.at(adjacency, (dst, src), weight)
    adjacency += np.eye(n)
    d = adjacency.sum(axis=1)
    expected = adjacency / np.sqrt(d)[:, None] / np.sqrt(d)[None, :]
    np.testing.assert_allclose(dense(gcn_normalize(src, dst, weight, n)), expected, rtol=1e-6)


def test_transpose_and_block_diagonal():
    a, b = random_csr(5, 4, 12, 1).to_torch(), random_csr(3, 6, 9, 2).to_torch()
    np.testing.assert_array_equal(dense(csr_transpose(a)), dense(a).T)
    stacked = dense(block_diagonal([a, b]))
    expected = np.zeros((8, 10))
    expected[:5, :4], expected[5:, 4:] = dense(a), dense(b)
    np.testing.assert_array_equal(stacked, expected)


@pytest.mark.parametrize("shape", [(40, 40), (30, 50)])
def test_spmm_forward_and_backward_match_dense(shape):
    a = random_csr(*shape, 200, 3).to_torch()
    op = SparseOperator(a)
    x = torch.randn(shape[1], 6, dtype=torch.float32, requires_grad=True)
    weights = torch.randn(shape[0], 6)
    (spmm(op, x) * weights).sum().backward()
    matrix = torch.tensor(dense(a), dtype=torch.float32)
    x_ref = x.detach().clone().requires_grad_()
    (matrix @ x_ref * weights).sum().backward()
    torch.testing.assert_close(spmm(op, x.detach()), matrix @ x.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-5)


def test_transpose_is_built_once_and_reused():
    op = SparseOperator(random_csr(20, 20, 60, 4).to_torch())
    spmm(op, torch.randn(20, 3, requires_grad=True)).sum().backward()
    first = op._backward
    assert first is not None
    spmm(op, torch.randn(20, 3, requires_grad=True)).sum().backward()
    assert op._backward is first


def test_spmm_of_empty_matrix_keeps_the_graph():
    op = SparseOperator(csr_from_coo(np.empty(0), np.empty(0), np.empty(0), (3, 4)).to_torch())
    x = torch.randn(4, 2, requires_grad=True)
    out = spmm(op, x)
    out.sum().backward()
    assert out.shape == (3, 2) and torch.equal(x.grad, torch.zeros(4, 2))


def test_an_operator_holds_its_indices_once_as_the_kernels_int32():
    op = SparseOperator(random_csr(30, 30, 90, 5).to_torch())
    assert op.csr.col.dtype == op.csr.rowptr.dtype == torch.int32
    matrix = op.matrix()
    assert matrix.col_indices().data_ptr() == op.csr.col.data_ptr()  # the tensor shares the held arrays
    assert matrix.crow_indices().data_ptr() == op.csr.rowptr.data_ptr()
    assert matrix.values().data_ptr() == op.csr.val.data_ptr()


def symmetric_csr(n: int, nnz: int, seed: int):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, nnz), rng.integers(0, n, nnz)
    return gcn_normalize(np.r_[src, dst], np.r_[dst, src], None, n).to_torch()


@pytest.mark.parametrize("symmetric", [True, False])
def test_a_symmetric_operator_is_its_own_transpose_and_the_gradient_is_unchanged(symmetric):
    a = symmetric_csr(40, 70, 6) if symmetric else random_csr(40, 40, 120, 6).to_torch()
    op = SparseOperator(a)
    x = torch.randn(40, 5, requires_grad=True)
    weights = torch.randn(40, 5)
    (spmm(op, x) * weights).sum().backward()
    assert (op.transposed() is op.matrix()) == symmetric
    explicit = csr_transpose(a)  # the backward's product with Aᵀ built separately, as before
    expected = torch.sparse_csr_tensor(explicit.rowptr, explicit.col, explicit.val, explicit.shape,
                                       check_invariants=False) @ weights
    assert torch.equal(x.grad, expected)


def test_block_diagonal_of_compact_operators_has_int64_indices():
    parts = [SparseOperator(random_csr(rows, cols, nnz, seed).to_torch()).csr
             for rows, cols, nnz, seed in ((5, 4, 12, 7), (3, 6, 9, 8))]
    stacked = block_diagonal(parts)
    assert stacked.col.dtype == stacked.rowptr.dtype == torch.int64
    expected = np.zeros((8, 10))
    expected[:5, :4], expected[5:, 4:] = dense(parts[0]), dense(parts[1])
    np.testing.assert_array_equal(dense(stacked), expected)
