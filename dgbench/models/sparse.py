"""The sparse kernel of the discrete-time models: CSR operators and ``Ã @ X`` with a cached ``Ãᵀ``.

A GCN aggregation multiplies a constant sparse matrix by a dense one. PyTorch's CSR ``A @ X`` is
fast in the forward pass, but autograd through it is an order of magnitude slower than the
forward; scatter / ``index_add_`` paths are slower still. :func:`spmm` is an autograd function
whose backward is another CSR product with ``Aᵀ``, built once per operator and cached, so the
backward runs at forward speed. Only ``X`` receives a gradient (``Ã`` is data, not a parameter).

Also here: building CSR arrays from (row, col, value) triples, the GCN normalisation
``Ã = D^-1/2 (A + I) D^-1/2`` (Kipf & Welling; ESDG §5) and block-diagonal stacking of several
snapshots' matrices, so one kernel call aggregates a whole block of timesteps.

And the dense products beside them, [rows, K] @ [K, N] with a few output columns (a GCN layer's update at
hidden 6, the link scorer's two halves): :func:`narrow_product` runs them as block-diagonal products over
groups of rows (docs/discrete-schemes.md, "The DGC / BLAD zoo").
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional as F


@dataclass
class CsrArrays:
    """A CSR matrix as three arrays (numpy on the host or torch on a device) plus its shape."""

    rowptr: np.ndarray | torch.Tensor  # int64, rows + 1
    col: np.ndarray | torch.Tensor  # int32 on the host, int64 on the device
    val: np.ndarray | torch.Tensor  # float32
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(len(self.col))

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) if isinstance(a, np.ndarray) else a.numel() * a.element_size()
                   for a in (self.rowptr, self.col, self.val))

    def to_torch(self, device: torch.device | str = "cpu") -> "CsrArrays":
        def move(a, dtype):
            t = torch.as_tensor(a) if isinstance(a, np.ndarray) else a
            return t.to(device=device, dtype=dtype)
        return CsrArrays(move(self.rowptr, torch.int64), move(self.col, torch.int64),
                         move(self.val, torch.float32), self.shape)


def csr_from_coo(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, shape: tuple[int, int],
                 sorted_rows: bool = False) -> CsrArrays:
    """CSR of (row, col, val) triples; duplicates are summed, columns sorted within each row."""
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    vals = np.asarray(vals, np.float64)
    keys = rows * shape[1] + cols
    if not (sorted_rows and (len(keys) < 2 or np.all(keys[1:] > keys[:-1]))):
        order = np.argsort(keys, kind="stable")
        keys, vals = keys[order], vals[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.empty(0, np.int64)
        keys, vals = keys[starts], np.add.reduceat(vals, starts) if len(starts) else vals
    row_of = keys // shape[1]
    rowptr = np.zeros(shape[0] + 1, np.int64)
    np.cumsum(np.bincount(row_of, minlength=shape[0]), out=rowptr[1:])
    return CsrArrays(rowptr, (keys % shape[1]).astype(np.int32), vals.astype(np.float32), shape)


def gcn_normalize(src: np.ndarray, dst: np.ndarray, weight: np.ndarray | None, num_nodes: int) -> CsrArrays:
    """Ã = D^-1/2 (A + I) D^-1/2 with A[dst, src] = summed edge weight, D its row sums (ESDG §5).

    Row v of Ã aggregates into v from its in-neighbours, so ``(Ã X)[v]`` mixes the sources of
    edges pointing at v. Computed in float64 and stored as float32, identically on every rank.
    """
    loops = np.arange(num_nodes, dtype=np.int64)
    w = np.ones(len(src)) if weight is None else np.asarray(weight, np.float64)
    a = csr_from_coo(np.r_[np.asarray(dst, np.int64), loops], np.r_[np.asarray(src, np.int64), loops],
                     np.r_[w, np.ones(num_nodes)], (num_nodes, num_nodes))
    rows = np.repeat(np.arange(num_nodes), np.diff(a.rowptr))
    degree = np.bincount(rows, weights=a.val.astype(np.float64), minlength=num_nodes)
    inv_sqrt = 1.0 / np.sqrt(np.maximum(degree, 1e-12))
    a.val = (a.val.astype(np.float64) * inv_sqrt[rows] * inv_sqrt[a.col]).astype(np.float32)
    return a


def block_diagonal(parts: list[CsrArrays], col_offsets: list[int] | None = None,
                   num_cols: int | None = None) -> CsrArrays:
    """Stack torch CSR parts as diagonal blocks (rows one after another, columns shifted).

    ``col_offsets`` overrides where each part's columns start (default: one after another), which
    lets halo columns of several parts point into one shared tail of the input.
    """
    row_starts = np.cumsum([0] + [p.shape[0] for p in parts])
    if col_offsets is None:
        col_offsets = list(np.cumsum([0] + [p.shape[1] for p in parts])[:-1])
        num_cols = int(sum(p.shape[1] for p in parts))
    nnz_starts = np.cumsum([0] + [p.nnz for p in parts])
    # int64 whatever the parts hold (a compact operator's int32): the stacked offsets may not fit 32 bits
    rowptr = torch.cat([p.rowptr[:-1].long() + int(nnz_starts[i]) for i, p in enumerate(parts)]
                       + [parts[-1].rowptr.new_tensor([int(nnz_starts[-1])], dtype=torch.int64)])
    col = torch.cat([p.col.long() + int(off) for p, off in zip(parts, col_offsets)])
    val = torch.cat([p.val for p in parts])
    return CsrArrays(rowptr, col, val, (int(row_starts[-1]), int(num_cols)))


def csr_transpose(a: CsrArrays) -> CsrArrays:
    """Aᵀ in CSR, with torch ops on A's device (a stable sort by column keeps rows sorted), its index arrays
    of A's index type (int32 ones stay int32: the sort's order is the only int64 array on the way)."""
    rows = torch.repeat_interleave(torch.arange(a.shape[0], device=a.col.device, dtype=a.col.dtype),
                                   a.rowptr.diff())
    order = torch.argsort(a.col, stable=True)
    rowptr = torch.zeros(a.shape[1] + 1, dtype=a.rowptr.dtype, device=a.col.device)
    rowptr[1:] = torch.cumsum(torch.bincount(a.col, minlength=a.shape[1]), 0)
    return CsrArrays(rowptr, rows[order], a.val[order], (a.shape[1], a.shape[0]))


def kernel_index_arrays(a: CsrArrays) -> CsrArrays:
    """``a`` with the index type the CPU kernel takes (int32 row pointers and columns, when they fit; see
    :func:`csr_tensor`), the values shared; unchanged elsewhere (a GPU's kernels take int64)."""
    if isinstance(a.col, np.ndarray) or a.col.device.type != "cpu" or max(a.nnz, *a.shape) >= 2 ** 31:
        return a
    return CsrArrays(a.rowptr.to(torch.int32), a.col.to(torch.int32), a.val, a.shape)


def same_csr(a: CsrArrays, b: CsrArrays) -> bool:
    """Whether two CSR matrices are equal bit for bit (shape, pattern and values)."""
    return a.shape == b.shape and all(x.dtype == y.dtype and torch.equal(x, y)
                                      for x, y in ((a.rowptr, b.rowptr), (a.col, b.col), (a.val, b.val)))


def csr_tensor(a: CsrArrays, kernel_indices: bool = False) -> torch.Tensor:
    """``a`` as a torch CSR tensor. ``kernel_indices``: on the CPU, int32 row pointers and columns (when they
    fit), the index type MKL's sparse product takes: with int64 ones every product first copies both index
    arrays into int32 (25 % of the product at 131k rows x 6 columns); the product is the same, bit for bit."""
    rowptr, col = a.rowptr, a.col
    if kernel_indices and col.device.type == "cpu" and max(a.nnz, *a.shape) < 2 ** 31:
        rowptr, col = rowptr.to(torch.int32), col.to(torch.int32)
    with warnings.catch_warnings():  # "CSR support is in beta": said once per process is noise enough
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(rowptr, col, a.val, a.shape, check_invariants=False)


@dataclass
class SparseOperator:
    """A constant sparse matrix to multiply by: its CSR tensor and, once needed, that of its transpose.

    Each index array is held once (docs/discrete-schemes.md, "Per-rank data"): on the CPU ``csr`` is
    converted to the kernel's int32 indices on construction and the CSR tensor shares them and the values.
    Aᵀ is built on the first backward pass, and is A's own tensor when A
    equals its transpose bit for bit (a symmetric snapshot), so a symmetric Ã_t is held once, not twice.
    Graph attention, which sorts and segments on int64 indices, keeps int64 copies of its own when asked.
    """

    csr: CsrArrays
    _forward: torch.Tensor | None = field(default=None, repr=False)
    _backward: torch.Tensor | None = field(default=None, repr=False)
    _rows: torch.Tensor | None = field(default=None, repr=False)
    _indices64: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)
    _transpose_order: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.csr = kernel_index_arrays(self.csr)

    @property
    def shape(self) -> tuple[int, int]:
        return self.csr.shape

    def matrix(self) -> torch.Tensor:
        if self._forward is None:
            self._forward = csr_tensor(self.csr, kernel_indices=True)
        return self._forward

    def indices64(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(rowptr, col) as int64, for the attention's sorts and segment sums: the held arrays when they are
        int64 already, else copies made once (only a model that attends pays for them)."""
        if self.csr.col.dtype == torch.int64:
            return self.csr.rowptr, self.csr.col
        if self._indices64 is None:
            self._indices64 = (self.csr.rowptr.long(), self.csr.col.long())
        return self._indices64

    def row_index(self) -> torch.Tensor:
        """The row of every stored entry (CSR order), built once."""
        if self._rows is None:
            self._rows = torch.repeat_interleave(torch.arange(self.shape[0], device=self.csr.col.device),
                                                 self.indices64()[0].diff())
        return self._rows

    def transposed(self) -> torch.Tensor:
        """Aᵀ as CSR, built on first use and cached for every later backward pass; A's own tensor when A is
        symmetric (then the backward's product is the same, bit for bit, with nothing more held)."""
        if self._backward is None:
            transpose = csr_transpose(self.csr)
            self._backward = self.matrix() if same_csr(transpose, self.csr) else \
                csr_tensor(transpose, kernel_indices=True)
        return self._backward

    def release_derived(self) -> None:
        """Drop what was built from ``csr`` on use (Aᵀ, the int64 indices, row and transpose orders): rebuilt the
        same, bit for bit, when asked for again. For operators kept between uses whose derived arrays need not
        stay (a streamed view on a CPU device, which a GPU run would rebuild per use anyway)."""
        self._backward = self._rows = self._indices64 = self._transpose_order = None

    def transpose_order(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Aᵀ's pattern as (rowptr, col, order): entry i of Aᵀ in CSR order is entry ``order[i]`` of A
        (for products with other values on A's pattern, such as attention weights), built once."""
        if self._transpose_order is None:
            col = self.indices64()[1]
            order = torch.argsort(col, stable=True)
            rowptr = torch.zeros(self.shape[1] + 1, dtype=torch.int64, device=col.device)
            torch.cumsum(torch.bincount(col, minlength=self.shape[1]), 0, out=rowptr[1:])
            self._transpose_order = (rowptr, self.row_index()[order], order)
        return self._transpose_order


def _csr_times(matrix: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``matrix @ x``. On the CPU written into a fresh tensor with beta = 0: the same MKL product,
    bit for bit, without ``@``'s zero-filled, copied intermediate (3x faster at 131k x 6)."""
    if x.device.type != "cpu" or x.dim() != 2:
        return matrix @ x
    out = x.new_empty((matrix.shape[0], x.shape[1]))
    return torch.addmm(out, matrix, x, beta=0, out=out)


class _CachedTransposeSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, op: SparseOperator) -> torch.Tensor:
        ctx.op = op
        return _csr_times(op.matrix(), x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _csr_times(ctx.op.transposed(), grad.contiguous()), None


def spmm(op: SparseOperator, x: torch.Tensor) -> torch.Tensor:
    """``A @ x`` for a constant sparse ``A``; the gradient w.r.t. ``x`` is ``Aᵀ @ grad`` (cached ``Aᵀ``)."""
    if x.shape[0] != op.shape[1]:
        raise ValueError(f"spmm: operator is {op.shape}, input has {x.shape[0]} rows")
    if op.csr.nnz == 0 or x.shape[0] == 0:
        return x.new_zeros((op.shape[0], *x.shape[1:])) + 0 * x.sum()
    return _CachedTransposeSpMM.apply(x.contiguous(), op)


def _pattern_times(rowptr: torch.Tensor, col: torch.Tensor, entries: torch.Tensor, shape: tuple[int, int],
                   x: torch.Tensor) -> torch.Tensor:
    """``M @ x`` for the CSR matrix M with the given pattern and ``entries`` as its values."""
    if not len(col) or x.shape[0] == 0:
        return x.new_zeros((shape[0], x.shape[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        matrix = torch.sparse_csr_tensor(rowptr, col, entries, shape, check_invariants=False)
    return _csr_times(matrix, x.contiguous())


def _sampled_products(op: SparseOperator, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``<left[i], right[j]>`` for every stored (i, j) of ``op``, in CSR order (SDDMM): sampled_addmm
    is ~1.5x faster than gathering both rows of every entry."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pattern = torch.sparse_csr_tensor(*op.indices64(), left.new_zeros(op.csr.nnz), op.shape,
                                          check_invariants=False)
        return torch.sparse.sampled_addmm(pattern, left.contiguous(), right.contiguous().t(), beta=0).values()


def _row_sums(values: torch.Tensor, rowptr: torch.Tensor) -> torch.Tensor:
    """Per CSR row, the sum of its entries' ``values`` [nnz, H] -> [rows, H]."""
    return torch.segment_reduce(values, "sum", offsets=rowptr, axis=0)


class _GraphAttention(torch.autograd.Function):
    """GAT's per-row softmax and weighted sum as one autograd node on CSR kernels.

    Autograd through gathers and ``index_add`` costs a scatter per gather in the backward; here the
    sums are CSR products with the attention weights as values (Σ_j α_ij v_j in the forward, αᵀ in
    the backward, on the transpose's cached order) and the per-row reductions are segment sums, so
    only the [nnz, H] scores and the SDDMM ``<∂out_i, v_j>`` of the backward touch every entry."""

    @staticmethod
    def forward(ctx, dst_score, src_score, values, op: SparseOperator, negative_slope: float):
        (rowptr, cols), rows = op.indices64(), op.row_index()
        pre = dst_score.index_select(0, rows) + src_score.index_select(0, cols)  # [nnz, H]
        logits = F.leaky_relu(pre, negative_slope)
        peak = torch.segment_reduce(logits, "max", offsets=rowptr, axis=0)
        weights = torch.exp(logits - peak.index_select(0, rows))  # shifted by a per-row constant: cancels
        alpha = weights / _row_sums(weights, rowptr).index_select(0, rows)
        out = torch.stack([_pattern_times(rowptr, cols, alpha[:, h].contiguous(), op.shape, values[:, h])
                           for h in range(values.shape[1])], dim=1)
        ctx.op, ctx.negative_slope = op, negative_slope
        ctx.save_for_backward(alpha, pre, values)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        alpha, pre, values = ctx.saved_tensors
        op = ctx.op
        rowptr, rows = op.indices64()[0], op.row_index()
        t_rowptr, t_col, order = op.transpose_order()
        grad_out = grad_out.contiguous()
        grad_values = torch.stack([_pattern_times(t_rowptr, t_col, alpha[:, h].index_select(0, order),
                                                  (op.shape[1], op.shape[0]), grad_out[:, h])
                                   for h in range(values.shape[1])], dim=1)
        grad_alpha = torch.stack([_sampled_products(op, grad_out[:, h], values[:, h])
                                  for h in range(values.shape[1])], dim=1)  # <∂out_i, v_j> on the pattern
        weighted = alpha * grad_alpha
        grad_logits = weighted - alpha * _row_sums(weighted, rowptr).index_select(0, rows)  # softmax
        grad_pre = torch.where(pre > 0, grad_logits, grad_logits * ctx.negative_slope)  # LeakyReLU
        grad_dst = _row_sums(grad_pre, rowptr)
        grad_src = _row_sums(grad_pre.index_select(0, order), t_rowptr)
        return grad_dst, grad_src, grad_values, None, None


def graph_attention(op: SparseOperator, dst_score: torch.Tensor, src_score: torch.Tensor, values: torch.Tensor,
                    negative_slope: float = 0.2) -> torch.Tensor:
    """GAT aggregation over the sparsity pattern of ``op`` (Veličković et al. ICLR'18, Eq. 1-4).

    Row i attends over the columns j stored in row i (its in-neighbours and itself, Ã's pattern):
    ``α_ij = softmax_j LeakyReLU(dst_score[i] + src_score[j])`` per head, where GAT's
    ``aᵀ[W h_i ‖ W h_j]`` is split into the two per-vertex scores, and ``out_i = Σ_j α_ij values[j]``.
    Shapes: ``dst_score`` [rows, H], ``src_score`` [cols, H], ``values`` [cols, H, F] -> [rows, H, F].
    Ã's values are not used: only which entries exist. A row without entries gets zeros.
    """
    if op.shape[1] != src_score.shape[0] or op.shape[0] != dst_score.shape[0]:
        raise ValueError(f"graph_attention: operator is {op.shape}, scores have {dst_score.shape[0]} rows "
                         f"and {src_score.shape[0]} columns")
    if op.csr.nnz == 0:
        return values.new_zeros((op.shape[0], *values.shape[1:])) + 0 * (values.sum() + dst_score.sum()
                                                                         + src_score.sum())
    return _GraphAttention.apply(dst_score, src_score, values, op, negative_slope)


_WIDE_COLUMNS = 12  # output columns from which MKL's dense product runs at its usual speed per flop


def _row_group(columns: int) -> int:
    """Rows of ``x`` one row of the grouped product holds: the smallest power of two that makes the output
    at least ``_WIDE_COLUMNS`` wide; 1 (the plain product) for one column (a matrix-vector product) or
    wide outputs."""
    group = 1
    while 1 < columns * group < _WIDE_COLUMNS:
        group *= 2
    return group


def _grouped_times(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight`` for a contiguous [rows, K] ``x``: g rows at a time as [rows / g, g·K] against the
    block-diagonal [g·K, g·N] of g copies of ``weight`` (the rows that do not fill a group, plainly).

    With N = 2 or 6 output columns MKL's product of a long [rows, K] runs at 2-5 GFLOP/s on this CPU (a
    path for narrow outputs); the grouped product, g times the flops, took a quarter to a half of its time
    at 131k rows (K, N = 6, 6; 2, 6; 6, 2). Each output element is the same K products summed, the zeros
    of the other blocks adding nothing, but the kernel's order of summation differs: equal to rounding."""
    rows, (inner, columns) = x.shape[0], weight.shape
    group = _row_group(columns)
    whole = rows - rows % group
    if group == 1 or whole == 0:
        return x @ weight
    out = x.new_empty((rows, columns))
    blocks = torch.block_diag(*[weight] * group)
    torch.mm(x[:whole].view(whole // group, group * inner), blocks,
             out=out[:whole].view(whole // group, group * columns))
    if whole < rows:
        torch.mm(x[whole:], weight, out=out[whole:])
    return out


def _grouped_transpose_times(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``xᵀ grad`` for contiguous [rows, K] ``x`` and [rows, N] ``grad`` (a narrow product's ∂weight): the same
    row groups as :func:`_grouped_times`, [g·K, g·N] = x_gᵀ grad_g, of which the g diagonal [K, N] blocks are
    summed (0.35-0.6x the plain product's time at 131k rows). Equal to rounding (other partial sums)."""
    rows, inner, columns = x.shape[0], x.shape[1], grad.shape[1]
    group = _row_group(columns)
    whole = rows - rows % group
    if group == 1 or whole == 0:
        return x.t() @ grad
    blocks = x[:whole].view(whole // group, group * inner).t() @ grad[:whole].view(whole // group, group * columns)
    out = blocks.view(group, inner, group, columns).diagonal(dim1=0, dim2=2).sum(-1)
    return out.addmm_(x[whole:].t(), grad[whole:]) if whole < rows else out


class _NarrowProduct(torch.autograd.Function):
    """``x @ weight`` with every product of the long side grouped (:func:`_grouped_times`): the forward,
    ∂x = ∂out weightᵀ and ∂weight = xᵀ ∂out."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return _grouped_times(x, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = _grouped_times(grad, weight.t()) if ctx.needs_input_grad[0] else None
        grad_weight = _grouped_transpose_times(x, grad) if ctx.needs_input_grad[1] else None
        return grad_x, grad_weight


def narrow_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight`` for ``x`` [..., K] and ``weight`` [K, N], through :func:`_grouped_times` on the CPU
    when the output is narrow (1 < N < 12, either side narrow in the backward); ``x @ weight`` otherwise."""
    inner, columns = weight.shape
    if x.device.type != "cpu" or (_row_group(columns) == 1 and _row_group(inner) == 1):
        return x @ weight
    flat = _NarrowProduct.apply(x.reshape(-1, inner).contiguous(), weight)
    return flat.view(*x.shape[:-1], columns)
