"""Pure `jax.numpy` implementations of every sparse kernel.

These are the XLA path (what runs on CPU) and the oracle the Pallas kernels are tested
against. They take plain arrays and static Python ints, never Equinox modules, and share
the Pallas kernels' signatures so the dispatcher can swap one for the other.

Conventions, shared with `kernels/dia.py` and `kernels/csr.py`:

- Dense operands are 2-D: `x` is `(n, k)`, a vector is passed as `(n, 1)`.
- All floating operands of one call have the same dtype (the caller promotes). Products of
  bfloat16/float16 accumulate in float32 and are cast back.
- DIA: `data[d, j] == A[j - offsets[d], j]`; slots whose row falls outside `[0, m)` are
  ignored and get a zero gradient.
- CSR: row `i` holds entries `indptr[i]:indptr[i + 1]`; column indices may be unsorted
  and repeated (repeats add up, as in scipy).

No routine materializes the dense matrix or loops in Python over rows: DIA loops over the
(static, few) diagonals, CSR works on all entries at once with gathers and segment sums.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def accumulation_dtype(dtype) -> np.dtype:
    """The dtype products are summed in: float32 for half precision, else `dtype` itself."""
    dtype = np.dtype(dtype)
    if dtype in (jnp.bfloat16, jnp.float16):
        return np.dtype(jnp.float32)
    return dtype


def dia_valid_rows(offset: int, shape: tuple[int, int]) -> tuple[int, int]:
    """Rows `i` in `[lo, hi)` whose diagonal slot `(i, i + offset)` lies in the matrix.

    Returns `(lo, hi)` with `hi <= lo` when the whole diagonal is outside.
    """
    m, n = shape
    return max(0, -offset), min(m, n - offset)


def dia_matmul(data, x, *, offsets: tuple[int, ...], shape: tuple[int, int]) -> jax.Array:
    """`A @ x` for a DIA matrix.

    **Arguments:**

    - `data`: `(len(offsets), n)` diagonals in scipy's DIA layout.
    - `x`: `(n, k)` dense operand, same dtype as `data`.
    - `offsets`, `shape`: static diagonal offsets and `(m, n)`.

    **Returns:** `(m, k)` array in `x.dtype`: `out[i] = sum_d data[d, i + offsets[d]] *
    x[i + offsets[d]]` over the slots inside the matrix.
    """
    return _sum_of_shifted_products(
        data, x, _diagonal_terms(offsets, shape, transposed=False), shape[0]
    )


def dia_matmul_transpose(data, g, *, offsets: tuple[int, ...], shape: tuple[int, int]) -> jax.Array:
    """`A^T @ g` for a DIA matrix `A` of shape `(m, n)`, without forming `A^T`'s diagonals.

    `out[j] = sum_d data[d, j] * g[j - offsets[d]]` over the slots inside the matrix: the
    diagonals are read where they are stored, only `g` is shifted.

    **Arguments:** `data` as in `dia_matmul`; `g` of shape `(m, k)`, same dtype.

    **Returns:** `(n, k)` array in `g.dtype`.
    """
    return _sum_of_shifted_products(
        data, g, _diagonal_terms(offsets, shape, transposed=True), shape[1]
    )


def _diagonal_terms(offsets, shape, *, transposed: bool) -> list[tuple[int, ...]]:
    """One `(d, out_start, out_stop, data_start, operand_start)` per diagonal with a slot in
    the matrix: output rows `out_start + t` (for `t < out_stop - out_start`) receive
    `data[d, data_start + t] * operand[operand_start + t]`."""
    terms = []
    for d, off in enumerate(offsets):
        lo, hi = dia_valid_rows(off, shape)
        if hi <= lo:
            continue
        if transposed:  # output row = stored column j, operand row = j - off
            terms.append((d, lo + off, hi + off, lo + off, lo))
        else:  # output row i, operand row = stored column i + off
            terms.append((d, lo, hi, lo + off, lo + off))
    return terms


def _sum_of_shifted_products(data, operand, terms, out_rows: int) -> jax.Array:
    """The sum of the `terms` (see `_diagonal_terms`), `(out_rows, k)` in `operand.dtype`.

    Each diagonal contributes one shifted elementwise product. For one column, XLA fuses
    the zero-padded terms into a single loop over the output (measured fastest: ~one pass
    at streaming bandwidth). For several columns the padding's per-element bounds checks
    cost more than the arithmetic, so the rows are split into the interior, where every
    diagonal is inside the matrix and each term is a plain slice, and the two boundary
    bands, concatenated.
    """
    acc = accumulation_dtype(operand.dtype)
    start = min(max((t[1] for t in terms), default=0), out_rows)
    stop = max(min((t[2] for t in terms), default=out_rows), start)
    bands = [(r0, r1) for r0, r1 in ((0, start), (start, stop), (stop, out_rows)) if r1 > r0]
    if operand.shape[1] == 1 or len(bands) <= 1:
        bands = [(0, out_rows)]
    parts = [_shifted_products_rows(data, operand, terms, r0, r1, acc) for r0, r1 in bands]
    out = parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0)
    return out.astype(operand.dtype)


def _shifted_products_rows(data, operand, terms, first: int, stop: int, acc) -> jax.Array:
    """Rows `[first, stop)` of `_sum_of_shifted_products`, in `acc`; terms padded only where
    a diagonal ends."""
    total = None
    for d, out_start, out_stop, data_start, operand_start in terms:
        lo, hi = max(out_start, first), min(out_stop, stop)
        if hi <= lo:
            continue
        skip = lo - out_start
        stored = data[d, data_start + skip : data_start + skip + hi - lo, None]
        rows = operand[operand_start + skip : operand_start + skip + hi - lo]
        term = stored.astype(acc) * rows.astype(acc)
        if lo > first or hi < stop:
            term = jnp.pad(term, ((lo - first, stop - hi), (0, 0)))
        total = term if total is None else total + term
    if total is None:
        return jnp.zeros((stop - first, operand.shape[1]), acc)
    return total


def dia_sddmm(g, x, *, offsets: tuple[int, ...], shape: tuple[int, int]) -> jax.Array:
    """Gradient of `A @ x` with respect to DIA `data`.

    `out[d, j] = sum_c g[j - offsets[d], c] * x[j, c]` where `0 <= j - offsets[d] < m`, else 0.

    **Arguments:**

    - `g`: `(m, k)` cotangent of the product.
    - `x`: `(n, k)` dense operand, same dtype as `g`.

    **Returns:** `(len(offsets), n)` array in `x.dtype`.
    """
    _, n = shape
    acc = accumulation_dtype(x.dtype)
    rows = []
    for off in offsets:
        lo, hi = dia_valid_rows(off, shape)
        if hi <= lo:
            rows.append(jnp.zeros((n,), acc))
            continue
        products = g[lo:hi].astype(acc) * x[lo + off : hi + off].astype(acc)
        rows.append(jnp.pad(jnp.sum(products, axis=1), (lo + off, n - hi - off)))
    if not rows:
        return jnp.zeros((0, n), x.dtype)
    return jnp.stack(rows).astype(x.dtype)


@functools.partial(jax.jit, static_argnums=1)
def csr_row_ids(indptr, nnz: int) -> jax.Array:
    """The row of every stored entry, `(nnz,)`, in `indptr`'s dtype; O(m + nnz).

    Jitted so that an eager call (`CSRMatrix.todense()` outside `jit`) compiles the scan
    once instead of dispatching its many small operations one by one.

    Marks each row start with a count and takes a running sum, so empty rows (repeated
    `indptr` values) are skipped correctly. The running sum is `lax.associative_scan`
    rather than `jnp.cumsum`: on CPU XLA lowers `cumsum` through a `reduce_window` that
    measured 1.4-1.6x slower at 10^7 entries (this prefix sum is most of a CSR product's
    time on CPU).
    """
    starts = indptr[1:-1]
    marks = jnp.zeros((nnz,), indptr.dtype).at[starts].add(1, mode="drop")
    if nnz == 0:
        return marks
    return lax.associative_scan(jnp.add, marks)


def csr_matmul(data, indices, indptr, x, *, shape: tuple[int, int]) -> jax.Array:
    """`A @ x` for a CSR matrix: `(m, k)` in `x.dtype`. `x` is `(n, k)`."""
    m, _ = shape
    acc = accumulation_dtype(x.dtype)
    rows = csr_row_ids(indptr, data.shape[0])
    products = data[:, None].astype(acc) * x[indices].astype(acc)
    out = jax.ops.segment_sum(products, rows, num_segments=m, indices_are_sorted=True)
    return out.astype(x.dtype)


def csr_matmul_transpose(data, indices, indptr, g, *, shape: tuple[int, int]) -> jax.Array:
    """`A^T @ g` for a CSR matrix: `(n, k)` in `g.dtype`. `g` is `(m, k)`."""
    _, n = shape
    acc = accumulation_dtype(g.dtype)
    rows = csr_row_ids(indptr, data.shape[0])
    products = data[:, None].astype(acc) * g[rows].astype(acc)
    return jax.ops.segment_sum(products, indices, num_segments=n).astype(g.dtype)


def csr_sddmm(indices, indptr, g, x, *, shape: tuple[int, int]) -> jax.Array:
    """Sampled product `out[p] = sum_c g[row(p), c] * x[indices[p], c]`, `(nnz,)`.

    The gradient of `A @ x` with respect to CSR `data`.
    """
    del shape
    acc = accumulation_dtype(x.dtype)
    rows = csr_row_ids(indptr, indices.shape[0])
    products = g[rows].astype(acc) * x[indices].astype(acc)
    return jnp.sum(products, axis=1).astype(x.dtype)
