"""Mosaic GPU kernels (`plgpu.kernel`) for DIA matrices: Hopper and newer.

The product, the transposed product and the data gradient, with the arguments and results
of the portable Pallas family (`pallas_dia.py`), batch axis included (`_primitive.py`,
"Batches").

**Convention (scipy's).** `data[d, j] == A[j - offsets[d], j]`; slots with `j - offsets[d]`
outside `[0, m)` are ignored: they never change a product and get a zero gradient.

**Layout.** Each kernel works on *rows of columns*: the dense operands are passed
transposed, `(k, rows)`, so that one column of `x` is a contiguous row, just as one
diagonal of `data` is. Every value a program touches is then a 1-D slice of `R` contiguous
elements (`R = block_rows`, a multiple of the 128 threads of a warpgroup) in Mosaic GPU's
strided warpgroup layout with one element per thread per step: consecutive threads read
consecutive addresses (coalesced), at any shift, with no alignment to assume. Nothing needs
a broadcast or a shared-memory transpose. For `k == 1` the transposes are reshapes.

**Design.** One program per block of `R` output rows (and per batch member), a grid of
`(row blocks, batch)`. Offsets are Python ints captured by the kernel body, never operands,
so the loop over diagonals unrolls at trace time and every shift is a static constant
added to the program's row start. A program loads, for each diagonal, the `R` values it
needs straight from global memory at the shifted row (`pl.ds(row0 + shift, R)`), and the
`R` operand values at their shifted row, and accumulates in registers (float32 for
bfloat16/float16, `_precision.py`); each column of the result is stored straight to global
memory. The operand's shifted rows overlap between diagonals and neighbouring programs:
they are served by L1/L2, so DRAM sees each byte about once. (A TMA copy of a window with
its halo into shared memory was the alternative; TMA boxes hold at most 256 elements per
dimension, and a window spans all offsets, `R + max(offsets) - min(offsets)` rows: for a
5-point stencil on a 1024^2 grid that is over 2048 rows per column of `x`, so shared memory
would cap `k` at a few columns. Per-diagonal loads have no such limit.)

The wrappers zero-pad the shifted arrays in XLA so that every load is in bounds. The
product needs no mask: a stored value whose row is outside the matrix only reaches an
output row past `m`, which is cut off, and padded values meet padded zeros. The
transposed product and the data gradient select zero (`jnp.where`, not a multiplication,
so non-finite values in ignored slots do not leak) where the slot's row is outside
`[0, m)`.

**Many diagonals.** Beyond `MAX_UNROLLED_DIAGONALS` diagonals inside the matrix the
diagonals are split into chunks of at most that many, one unrolled kernel per chunk (the
offsets stay static): the products sum the chunks' float32 (or float64) results in XLA,
the gradient concatenates its chunks' rows. Each chunk reads the operand again.

**Interpret mode.** `interpret=True` runs the kernels in Mosaic GPU's interpreter on the
host (`plgpu.InterpretGPUParams(detect_races=True)`: shared-memory races are reported),
whatever the platform.

**Versions.** Written against the `plgpu` API that JAX 0.11.2 and 0.12 share
(`plgpu.kernel` with `grid`/`grid_names`, `plgpu.load` with a layout,
`plgpu.InterpretGPUParams`). Where `jax.experimental.pallas.mosaic_gpu` does not import
(JAX 0.10 without its dependencies), `supports` is False everywhere and the package
imports as usual.

**Cost per product** (`v` bytes per value, `B` batch members, `ndiag` active diagonals):

- kernel reads and writes, `A @ X` (`X: (n, k)`): `ndiag*n*v + n*k*v + m*k*v`, and
  `2*ndiag*m*k` flops; `A^T @ G` the same with `m` and `n` swapped; the gradient
  `m*k*v + n*k*v + ndiag*n*v`, `2*ndiag*n*k` flops.
- around the kernel, in XLA: the zero pads of `data` and the operand (a read and a write of
  each), and for `k > 1` the transposes of the operand and of the result (fused with the
  pads: a read and a write of each). So about twice the ideal bytes in all.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

from .._dia_layout import MAX_UNROLLED_DIAGONALS, active_diagonals, valid_rows
from ._precision import accumulation_dtype

try:
    from jax.experimental.pallas import mosaic_gpu as plgpu
except ImportError:  # JAX 0.10 without Mosaic GPU's dependencies (absl)
    plgpu = None

_WARPGROUP = 128  # threads of one Mosaic GPU program
# Columns of the operand handled by unrolled code; more run in a `fori_loop`.
_UNROLLED_COLUMNS = 8
_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16, jnp.float64)


def supports(dtype, platform: str) -> bool:
    """Whether the Mosaic GPU DIA kernels take `dtype` on `platform`.

    They take float32, float64, bfloat16 and float16 on `"cuda"` and in interpret mode
    (`"cpu"`); nothing on `"rocm"` or `"tpu"` (Mosaic GPU is NVIDIA's), nothing for integer
    or complex dtypes (complex values run on real planes elsewhere), and nothing where
    Mosaic GPU does not import.

    **Arguments:**

    - `dtype`: the common dtype of the product's floating operands.
    - `platform`: `"cuda"`, `"rocm"`, `"tpu"` or `"cpu"` (interpret mode).

    **Returns:** `True` if the kernels accept `dtype` there.
    """
    if plgpu is None or platform not in ("cuda", "cpu"):
        return False
    return jnp.dtype(dtype) in tuple(jnp.dtype(t) for t in _DTYPES)


def _block_rows(rows: int, accumulators: int) -> int:
    """Rows per program: 512 (four per thread), fewer when many accumulators are live or
    the whole output is smaller."""
    per_thread = 4 if accumulators <= 8 else 2
    needed = -(-max(rows, 1) // _WARPGROUP)
    return _WARPGROUP * min(per_thread, needed)


def _strided(block_rows: int):
    return plgpu.Layout.WG_STRIDED((block_rows,), vec_size=1)


def _columns_loop(num_cols: int, body) -> None:
    """`body(c)` for every column `c`: unrolled for a few columns, else a `fori_loop`."""
    if num_cols <= _UNROLLED_COLUMNS:
        for c in range(num_cols):
            body(c)
        return

    def step(c, carry):
        body(c)
        return carry

    lax.fori_loop(jnp.int32(0), jnp.int32(num_cols), step, jnp.int32(0))


def _member(ref, batched: bool, b):
    """The ref of batch member `b` (member 0 of a shared, unbatched-at-source array)."""
    return ref.at[b] if batched else ref.at[0]


def _rows_kernel(
    values_ref,
    operand_ref,
    out_ref,
    *,
    value_shifts: tuple[int, ...],
    operand_shifts: tuple[int, ...],
    row_ranges: tuple[tuple[int, int], ...] | None,
    batched: tuple[bool, bool],
    block_rows: int,
):
    """One block of `out[c, r] = sum_d values[d, r + value_shifts[d]] *
    operand[c, r + operand_shifts[d]]` (shifts already include the pads), for rows
    `[r0, r0 + block_rows)`. With `row_ranges`, diagonal `d` contributes only to rows in
    `[lo_d, hi_d)` (a select, so ignored values never reach the sum)."""
    r0 = lax.axis_index("rows") * block_rows
    b = lax.axis_index("batch")
    values = _member(values_ref, batched[0], b)
    operand = _member(operand_ref, batched[1], b)
    out = out_ref.at[b]
    layout = _strided(block_rows)
    acc_dtype = accumulation_dtype(out_ref.dtype)
    rows = None
    if row_ranges is not None:
        rows = r0 + plgpu.broadcasted_iota(jnp.int32, (block_rows,), 0, layout=layout)

    def column(c):
        acc = None
        for d, (value_shift, operand_shift) in enumerate(
            zip(value_shifts, operand_shifts, strict=True)
        ):
            stored = plgpu.load(values.at[d, pl.ds(r0 + value_shift, block_rows)], layout=layout)
            stored = stored.astype(acc_dtype)
            if rows is not None:
                lo, hi = row_ranges[d]
                stored = jnp.where((rows >= lo) & (rows < hi), stored, jnp.zeros_like(stored))
            shifted = plgpu.load(
                operand.at[c, pl.ds(r0 + operand_shift, block_rows)], layout=layout
            )
            term = stored * shifted.astype(acc_dtype)
            acc = term if acc is None else acc + term
        out[c, pl.ds(r0, block_rows)] = acc.astype(out_ref.dtype)

    _columns_loop(operand_ref.shape[1], column)


def _sddmm_kernel(
    g_ref,
    x_ref,
    out_ref,
    *,
    g_shifts: tuple[int, ...],
    row_ranges: tuple[tuple[int, int], ...],
    batched: tuple[bool, bool],
    block_rows: int,
):
    """One block of `out[d, j] = sum_c g[c, j + g_shifts[d]] * x[c, j]` for stored columns
    `[j0, j0 + block_rows)`, zero where `j` is outside `row_ranges[d]` (the columns whose
    row `j - offsets[d]` lies in the matrix)."""
    j0 = lax.axis_index("rows") * block_rows
    b = lax.axis_index("batch")
    g = _member(g_ref, batched[0], b)
    x = _member(x_ref, batched[1], b)
    out = out_ref.at[b]
    layout = _strided(block_rows)
    acc_dtype = accumulation_dtype(out_ref.dtype)
    num_cols = x_ref.shape[1]

    def column(c, sums):
        own = plgpu.load(x.at[c, pl.ds(j0, block_rows)], layout=layout).astype(acc_dtype)
        return tuple(
            total
            + plgpu.load(g.at[c, pl.ds(j0 + shift, block_rows)], layout=layout).astype(acc_dtype)
            * own
            for total, shift in zip(sums, g_shifts, strict=True)
        )

    zeros = plgpu.layout_cast(jnp.zeros((block_rows,), acc_dtype), layout)
    sums = (zeros,) * len(g_shifts)
    if num_cols <= _UNROLLED_COLUMNS:
        for c in range(num_cols):
            sums = column(c, sums)
    else:
        sums = lax.fori_loop(jnp.int32(0), jnp.int32(num_cols), column, sums)
    columns = j0 + plgpu.broadcasted_iota(jnp.int32, (block_rows,), 0, layout=layout)
    for d, ((lo, hi), total) in enumerate(zip(row_ranges, sums, strict=True)):
        inside = (columns >= lo) & (columns < hi)
        out[d, pl.ds(j0, block_rows)] = jnp.where(inside, total, jnp.zeros_like(total)).astype(
            out_ref.dtype
        )


def _call(kernel, out_shape, num_blocks: int, batch: int, interpret: bool, name: str, *args):
    """Launch `kernel` on a `(num_blocks, batch)` grid of one warpgroup each."""
    return plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct(*out_shape),
        grid=(num_blocks, batch),
        grid_names=("rows", "batch"),
        interpret=plgpu.InterpretGPUParams(detect_races=True) if interpret else None,
        kernel_name=name,
    )(*args)


def _as_batch(array, rank: int):
    """`(B, ...)` with `B = 1` for an unbatched array; and whether it was batched."""
    return (array, True) if array.ndim == rank + 1 else (array[None], False)


def _rows_major(operand):
    """`(B, rows, k) -> (B, k, rows)`: columns of the operand as contiguous rows."""
    return jnp.swapaxes(operand, -1, -2)


def _pad_last(array, before: int, after: int):
    return jnp.pad(array, ((0, 0),) * (array.ndim - 1) + ((before, after),))


def _chunks(index: tuple[int, ...], offsets: tuple[int, ...]):
    """`(positions, offsets)` of the active diagonals in chunks of at most
    `MAX_UNROLLED_DIAGONALS`."""
    step = MAX_UNROLLED_DIAGONALS
    return [(index[s : s + step], offsets[s : s + step]) for s in range(0, len(index), step)]


def _rows_product(
    values, operand, *, value_shifts, operand_shifts, row_ranges, out_rows, dtype, interpret, name
):
    """`out[b, r, c] = sum_d values[b, d, r + value_shifts[d]] * operand[b, r +
    operand_shifts[d], c]` for `r < out_rows` (rows outside the arrays read zero), in
    `dtype`: the shared body of the product and the transposed product.

    `values` is `(Bv, ndiag, length)`, `operand` `(Bo, rows, k)` with `Bv, Bo` in `{1, B}`.
    """
    batch = max(values.shape[0], operand.shape[0])
    k = operand.shape[-1]
    block_rows = _block_rows(out_rows, 1)
    num_blocks = -(-out_rows // block_rows)
    span = num_blocks * block_rows
    value_pad = max(0, -min(value_shifts))
    operand_pad = max(0, -min(operand_shifts))
    # Program r0 reads rows [r0 + shift, r0 + shift + block_rows) of the unpadded arrays.
    values_padded = _pad_last(
        values, value_pad, max(0, span + max(value_shifts) - values.shape[-1])
    )
    operand_rows = _rows_major(operand)
    operand_padded = _pad_last(
        operand_rows, operand_pad, max(0, span + max(operand_shifts) - operand_rows.shape[-1])
    )
    kernel = functools.partial(
        _rows_kernel,
        value_shifts=tuple(s + value_pad for s in value_shifts),
        operand_shifts=tuple(s + operand_pad for s in operand_shifts),
        row_ranges=row_ranges,
        batched=(values.shape[0] == batch, operand.shape[0] == batch),
        block_rows=block_rows,
    )
    out = _call(
        kernel,
        ((batch, k, span), dtype),
        num_blocks,
        batch,
        interpret,
        name,
        values_padded,
        operand_padded,
    )
    return jnp.swapaxes(out[..., :out_rows], -1, -2)


def _product(data, operand, *, offsets, shape, transposed: bool, interpret: bool):
    """`A @ operand` (or `A^T @ operand`), batch axis included: see the public wrappers."""
    m, n = shape
    out_rows = n if transposed else m
    lead = data.shape[:-2]
    k = operand.shape[-1]
    index, active = active_diagonals(offsets, shape)
    if k == 0 or out_rows == 0 or not index or 0 in lead:
        return jnp.zeros((*lead, out_rows, k), operand.dtype)
    values, _ = _as_batch(data, 2)
    operand_batch, _ = _as_batch(operand, 2)
    chunks = _chunks(index, active)
    # Chunks' partial sums are added in the accumulation dtype.
    out_dtype = operand.dtype if len(chunks) == 1 else accumulation_dtype(operand.dtype)
    total = None
    for positions, chunk_offsets in chunks:
        chunk_values = values[:, np.asarray(positions), :]
        if transposed:
            part = _rows_product(
                chunk_values,
                operand_batch,
                value_shifts=(0,) * len(chunk_offsets),
                operand_shifts=tuple(-off for off in chunk_offsets),
                row_ranges=tuple(
                    (lo + off, hi + off)
                    for off, (lo, hi) in ((off, valid_rows(off, shape)) for off in chunk_offsets)
                ),
                out_rows=out_rows,
                dtype=out_dtype,
                interpret=interpret,
                name="dia_matmul_t_mosaic_gpu",
            )
        else:
            part = _rows_product(
                chunk_values,
                operand_batch,
                value_shifts=chunk_offsets,
                operand_shifts=chunk_offsets,
                row_ranges=None,
                out_rows=out_rows,
                dtype=out_dtype,
                interpret=interpret,
                name="dia_matmul_mosaic_gpu",
            )
        total = part if total is None else total + part
    total = total.astype(operand.dtype)
    return total if lead else total[0]


def _check_product(data, operand, name: str, offsets, shape, operand_rows: int) -> None:
    n = shape[1]
    if data.ndim not in (2, 3) or data.shape[-2:] != (len(offsets), n):
        raise ValueError(
            f"`data` has shape {data.shape}; expected (len(offsets), n) or "
            f"(B, len(offsets), n) for {shape=}"
        )
    if operand.ndim not in (2, 3) or operand.shape[-2] != operand_rows:
        raise ValueError(f"`{name}` has shape {operand.shape}; expected ({operand_rows}, k)")
    if operand.ndim == 3 and (data.ndim != 3 or operand.shape[0] != data.shape[0]):
        raise ValueError(f"a batched `{name}` ({operand.shape}) needs `data` of its batch size")
    if data.dtype != operand.dtype:
        raise TypeError(f"`data` ({data.dtype}) and `{name}` ({operand.dtype}) must share a dtype")


def dia_matmul_mosaic_gpu(
    data: jax.Array,
    x: jax.Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
) -> jax.Array:
    """`A @ x` for the DIA matrix `A = (data, offsets, shape)`, a Mosaic GPU kernel.

    **Arguments:**

    - `data`: `(ndiag, n)` diagonals, `data[d, j] == A[j - offsets[d], j]`; or
      `(B, ndiag, n)`, a batch of matrices with one structure.
    - `x`: `(n, k)` dense operand, same dtype as `data`; or `(B, n, k)` with batched `data`.
    - `offsets`: static Python ints, distinct, any order.
    - `shape`: static `(m, n)`.
    - `interpret`: run in Mosaic GPU's interpreter on the host, with race detection.
    - `platform`: accepted for the kernel-family contract; Mosaic GPU lowers for `"cuda"`
      only, whatever it says.

    **Returns:** `(m, k)` array of `x.dtype`, or `(B, m, k)` for a batch.
    """
    del platform
    _check_product(data, x, "x", offsets, shape, shape[1])
    return _product(data, x, offsets=offsets, shape=shape, transposed=False, interpret=interpret)


def dia_matmul_t_mosaic_gpu(
    data: jax.Array,
    g: jax.Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
) -> jax.Array:
    """`A^T @ g`, reading `data` where it is stored and shifting `g` (no transposed
    diagonals are formed): `out[j] = sum_d data[d, j] * g[j - offsets[d]]` over the slots
    inside the matrix.

    **Arguments:** as `dia_matmul_mosaic_gpu`, with `g` the `(m, k)` (or `(B, m, k)`)
    operand.

    **Returns:** `(n, k)` array of `g.dtype`, or `(B, n, k)` for a batch.
    """
    del platform
    _check_product(data, g, "g", offsets, shape, shape[0])
    return _product(data, g, offsets=offsets, shape=shape, transposed=True, interpret=interpret)


def dia_sddmm_mosaic_gpu(
    g: jax.Array,
    x: jax.Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
) -> jax.Array:
    """The gradient of `A @ x` in `data`: `out[d, j] = sum_c g[j - offsets[d], c] * x[j, c]`
    where `0 <= j - offsets[d] < m`, else exactly 0.

    **Arguments:**

    - `g`: `(m, k)` cotangent of the product, or `(B, m, k)`.
    - `x`: `(n, k)` dense operand, same dtype, or `(B, n, k)`; a 2-D argument is shared by
      the batch.
    - `offsets`, `shape`, `interpret`, `platform`: as `dia_matmul_mosaic_gpu`.

    **Returns:** `(len(offsets), n)` array of `x.dtype`, `(B, len(offsets), n)` if either
    argument is batched; zero on ignored slots and on diagonals outside the matrix.
    """
    del platform
    m, n = shape
    if g.ndim not in (2, 3) or g.shape[-2] != m:
        raise ValueError(f"`g` has shape {g.shape}; expected ({m}, k) or (B, {m}, k)")
    if x.ndim not in (2, 3) or x.shape[-2:] != (n, g.shape[-1]):
        raise ValueError(f"`x` has shape {x.shape}; expected ({n}, {g.shape[-1]}) or (B, ...)")
    if g.ndim == x.ndim == 3 and g.shape[0] != x.shape[0]:
        raise ValueError(f"`g` ({g.shape}) and `x` ({x.shape}) must have one batch size")
    if g.dtype != x.dtype:
        raise TypeError(f"`g` ({g.dtype}) and `x` ({x.dtype}) must share a dtype")
    lead = g.shape[:-2] or x.shape[:-2]
    index, active = active_diagonals(offsets, shape)
    if x.shape[-1] == 0 or n == 0 or not index or 0 in lead:
        return jnp.zeros((*lead, len(offsets), n), x.dtype)
    g_batch, batched_g = _as_batch(g, 2)
    x_batch, batched_x = _as_batch(x, 2)
    batch = max(g_batch.shape[0], x_batch.shape[0])
    parts = [
        _sddmm_chunk(g_batch, x_batch, chunk_offsets, shape, batch, interpret)
        for _, chunk_offsets in _chunks(index, active)
    ]
    gradient = parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=1)
    if len(index) != len(offsets):
        full = jnp.zeros((batch, len(offsets), n), x.dtype)
        gradient = full.at[:, np.asarray(index), :].set(gradient)
    return gradient if lead else gradient[0]


def _sddmm_chunk(g, x, offsets, shape, batch: int, interpret: bool):
    """`dia_sddmm_mosaic_gpu` for up to `MAX_UNROLLED_DIAGONALS` active `offsets`, on
    `(Bg, m, k)` and `(Bx, n, k)` operands: `(batch, len(offsets), n)`."""
    m, n = shape
    block_rows = _block_rows(n, len(offsets))
    num_blocks = -(-n // block_rows)
    span = num_blocks * block_rows
    # Program j0 reads rows [j0 - off, j0 - off + block_rows) of g and [j0, j0 + block_rows)
    # of x.
    g_pad = max(0, max(offsets))
    g_rows = _pad_last(_rows_major(g), g_pad, max(0, span - min(offsets) - m))
    x_rows = _pad_last(_rows_major(x), 0, span - n)
    kernel = functools.partial(
        _sddmm_kernel,
        g_shifts=tuple(g_pad - off for off in offsets),
        row_ranges=tuple(
            (lo + off, hi + off)
            for off, (lo, hi) in ((off, valid_rows(off, shape)) for off in offsets)
        ),
        batched=(g.shape[0] == batch, x.shape[0] == batch),
        block_rows=block_rows,
    )
    out = _call(
        kernel,
        ((batch, len(offsets), span), x.dtype),
        num_blocks,
        batch,
        interpret,
        "dia_sddmm_mosaic_gpu",
        g_rows,
        x_rows,
    )
    return out[..., :n]
