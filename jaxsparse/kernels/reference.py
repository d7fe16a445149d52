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

    **Returns:** `(m, k)` array in `x.dtype`.

    Each diagonal contributes one shifted elementwise product. For one column, XLA fuses
    the zero-padded terms into a single loop over the output (measured fastest: ~one pass
    at streaming bandwidth). For several columns the padding's per-element bounds checks
    cost more than the arithmetic, so the rows are split into the interior, where every
    diagonal is inside the matrix and each term is a plain slice, and the two boundary
    bands, concatenated.
    """
    m, _ = shape
    acc = accumulation_dtype(x.dtype)
    if x.shape[1] == 1:
        return _dia_rows(data, x, offsets, shape, 0, m, acc).astype(x.dtype)
    inside = [r for r in (dia_valid_rows(off, shape) for off in offsets) if r[1] > r[0]]
    start = min(max((lo for lo, _ in inside), default=0), m)
    stop = max(min((hi for _, hi in inside), default=m), start)
    bands = [(r0, r1) for r0, r1 in ((0, start), (start, stop), (stop, m)) if r1 > r0]
    if len(bands) <= 1:
        return _dia_rows(data, x, offsets, shape, 0, m, acc).astype(x.dtype)
    parts = [_dia_rows(data, x, offsets, shape, r0, r1, acc) for r0, r1 in bands]
    return jnp.concatenate(parts, axis=0).astype(x.dtype)


def _dia_rows(data, x, offsets, shape, first: int, stop: int, acc) -> jax.Array:
    """Rows `[first, stop)` of `A @ x`, in `acc`; terms padded only where a diagonal ends."""
    total = None
    for d, off in enumerate(offsets):
        lo, hi = dia_valid_rows(off, shape)
        lo, hi = max(lo, first), min(hi, stop)
        if hi <= lo:
            continue
        term = data[d, lo + off : hi + off, None].astype(acc) * x[lo + off : hi + off].astype(acc)
        if lo > first or hi < stop:
            term = jnp.pad(term, ((lo - first, stop - hi), (0, 0)))
        total = term if total is None else total + term
    if total is None:
        return jnp.zeros((stop - first, x.shape[1]), acc)
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
