"""The DIA products in pure `jax.numpy`: the portable XLA path and the test oracle.

`data[d, j] == A[j - offsets[d], j]`; slots whose row falls outside `[0, m)` are ignored
and get a zero gradient. Dense operands are 2-D (`(n, k)`; a vector is `(n, 1)`), all
floating operands of one call share a dtype, and bfloat16/float16 accumulate in float32.
Nothing materializes the dense matrix: up to `MAX_UNROLLED_DIAGONALS` diagonals inside the
matrix, each routine unrolls one operation per (static) diagonal; beyond, it loops over them
(`xla_dia_loop.py`), so the program does not grow with their number. Each routine also
takes the batch axis of `_primitive.py` ("Batches"): `data` `(B, len(offsets), n)`, dense
operands `(B, rows, k)` or shared, through `jax.vmap` (one batched program). The lowering
holds no custom call, so it runs on any XLA runtime and exports anywhere.
"""

import jax
import jax.numpy as jnp

from .._dia_layout import unrolls_diagonals, valid_rows
from ._batch import over_batch
from ._precision import accumulation_dtype
from .xla_dia_loop import dia_matmul_loop, dia_matmul_t_loop, dia_sddmm_loop


def dia_matmul_xla(data, x, *, offsets: tuple[int, ...], shape: tuple[int, int]) -> jax.Array:
    """`A @ x` for a DIA matrix.

    **Arguments:**

    - `data`: `(len(offsets), n)` diagonals in scipy's DIA layout.
    - `x`: `(n, k)` dense operand, same dtype as `data`.
    - `offsets`, `shape`: static diagonal offsets and `(m, n)`.

    **Returns:** `(m, k)` array in `x.dtype`: `out[i] = sum_d data[d, i + offsets[d]] *
    x[i + offsets[d]]` over the slots inside the matrix.
    """
    return over_batch(_matmul, (data, x), (2, 2), offsets=offsets, shape=shape)


def _matmul(data, x, *, offsets, shape):
    if not unrolls_diagonals(offsets, shape):
        return dia_matmul_loop(data, x, offsets=offsets, shape=shape)
    return _sum_of_shifted_products(
        data, x, _diagonal_terms(offsets, shape, transposed=False), shape[0]
    )


def dia_matmul_t_xla(data, g, *, offsets: tuple[int, ...], shape: tuple[int, int]) -> jax.Array:
    """`A^T @ g` for a DIA matrix `A` of shape `(m, n)`, without forming `A^T`'s diagonals.

    `out[j] = sum_d data[d, j] * g[j - offsets[d]]` over the slots inside the matrix: the
    diagonals are read where they are stored, only `g` is shifted.

    **Arguments:** `data` as in `dia_matmul_xla`; `g` of shape `(m, k)`, same dtype.

    **Returns:** `(n, k)` array in `g.dtype`.
    """
    return over_batch(_matmul_t, (data, g), (2, 2), offsets=offsets, shape=shape)


def _matmul_t(data, g, *, offsets, shape):
    if not unrolls_diagonals(offsets, shape):
        return dia_matmul_t_loop(data, g, offsets=offsets, shape=shape)
    return _sum_of_shifted_products(
        data, g, _diagonal_terms(offsets, shape, transposed=True), shape[1]
    )


def _diagonal_terms(offsets, shape, *, transposed: bool) -> list[tuple[int, ...]]:
    """One `(d, out_start, out_stop, data_start, operand_start)` per diagonal with a slot in
    the matrix: output rows `out_start + t` (for `t < out_stop - out_start`) receive
    `data[d, data_start + t] * operand[operand_start + t]`."""
    terms = []
    for d, off in enumerate(offsets):
        lo, hi = valid_rows(off, shape)
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
    the zero-padded terms into a single loop over the output: one pass at streaming
    bandwidth. For several columns the padding's per-element bounds checks
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


def dia_sddmm_xla(g, x, *, offsets: tuple[int, ...], shape: tuple[int, int]) -> jax.Array:
    """Gradient of `A @ x` with respect to DIA `data`.

    `out[d, j] = sum_c g[j - offsets[d], c] * x[j, c]` where `0 <= j - offsets[d] < m`, else 0.

    **Arguments:**

    - `g`: `(m, k)` cotangent of the product.
    - `x`: `(n, k)` dense operand, same dtype as `g`.

    **Returns:** `(len(offsets), n)` array in `x.dtype`.
    """
    return over_batch(_sddmm, (g, x), (2, 2), offsets=offsets, shape=shape)


def _sddmm(g, x, *, offsets, shape):
    if not unrolls_diagonals(offsets, shape):
        return dia_sddmm_loop(g, x, offsets=offsets, shape=shape)
    _, n = shape
    acc = accumulation_dtype(x.dtype)
    rows = []
    for off in offsets:
        lo, hi = valid_rows(off, shape)
        if hi <= lo:
            rows.append(jnp.zeros((n,), acc))
            continue
        products = g[lo:hi].astype(acc) * x[lo + off : hi + off].astype(acc)
        rows.append(jnp.pad(jnp.sum(products, axis=1), (lo + off, n - hi - off)))
    if not rows:
        return jnp.zeros((0, n), x.dtype)
    return jnp.stack(rows).astype(x.dtype)
