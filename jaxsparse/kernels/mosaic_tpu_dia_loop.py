"""Mosaic TPU DIA kernels that loop over the diagonals: for more than `MAX_UNROLLED_DIAGONALS`.

The kernels of `mosaic_tpu_dia.py` unroll one slice per diagonal, so their programs (and
trace and compile times) grow with the number of diagonals, and each program's window of
the operand spans all offsets. These kernels read the offsets from an int32 array instead
(a constant the wrapper builds from the static offsets: the offsets stay static metadata of
the product, only the kernel reads them at run time), so one kernel body serves any number
of diagonals and any span. Same convention, arguments and results as `mosaic_tpu_dia.py`,
batch axis included; `mosaic_tpu_dia.py` calls them with resolved tiles.

The product and the transposed product are one computation on *row-aligned* diagonals,
`out[i] = sum_d aligned[d, i] * operand[i + shifts[d]]` (`aligned[d, i]` is the value the
diagonal gives output row `i`, zero on ignored slots; the wrapper builds it in XLA, as the
unrolled kernels transpose or shift `data`).

The diagonal is the innermost grid axis. The offsets are scalar-prefetched to SMEM and steer
the operand's element-indexed `BlockSpec`, so each grid step DMAs the rows one diagonal
reads (as the unrolled kernels' windows do) and adds one diagonal's contribution into a
float32 VMEM accumulator. The row-aligned values come in tiles of 128 diagonals (a
lane-dense block, fetched once per 128 steps); a step takes its diagonal's lane with a
dynamic lane rotation (`pltpu.roll`). The data gradient writes its diagonal's lane of a
`(block_rows, 128)` output tile the same way. Checked in interpret mode and by lowering;
not yet compiled or timed on a TPU.

**Cost.** One grid step per (tile, diagonal), each DMAing `block_rows` operand rows: the
operand is read once per diagonal, and each step pays a rotation of a `(block_rows, 128)`
tile.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import _pallas
from ._precision import accumulation_dtype

_LANES = 128  # diagonals per tile of row-aligned values


def rows_product(aligned, operand, *, shifts, out_rows, block_rows, block_cols, interpret, params):
    """`out[b, i, c] = sum_d aligned[b, d, i] * operand[b, i + shifts[d], c]`.

    **Arguments:**

    - `aligned`: `(ndiag, out_rows)` or `(B, ndiag, out_rows)` row-aligned values, zero
      where an operand row would fall outside the operand.
    - `operand`: `(in_rows, k)` or `(B, in_rows, k)`, same dtype (shared if 2-D).
    - `shifts`: static Python ints, one per diagonal.
    - `out_rows`, `block_rows`, `block_cols`: the tiles (powers of two; `block_cols` the
      columns per program).
    - `interpret`: run in Pallas interpret mode.
    - `params`: `(vmem_bytes, dimension_semantics) -> compiler parameters`.

    **Returns:** `(out_rows, k)`, or `(B, out_rows, k)` if either argument is batched.
    """
    batch = _batch_size(aligned, operand)
    in_rows, k = operand.shape[-2:]
    num_row_blocks, num_col_blocks = pl.cdiv(out_rows, block_rows), pl.cdiv(k, block_cols)
    grid = (num_row_blocks, num_col_blocks, *_lead(batch))
    out_shape = jax.ShapeDtypeStruct((*_lead(batch), out_rows, k), operand.dtype)
    shifts_array = jnp.asarray(np.asarray(shifts, np.int32))
    # The operand zero-padded so that every shifted window of `block_rows` rows is in
    # bounds; the values transposed to `(rows, diagonals)` and padded to whole tiles.
    pad_top = max(0, -min(shifts))
    pad_bottom = max(0, num_row_blocks * block_rows + max(shifts) - in_rows)
    operand = _pallas.pad_last_two(
        operand, (pad_top, pad_bottom), (0, num_col_blocks * block_cols - k)
    )
    num_tiles = pl.cdiv(len(shifts), _LANES)
    aligned = _pallas.pad_last_two(
        jnp.swapaxes(aligned, -1, -2),
        (0, num_row_blocks * block_rows - out_rows),
        (0, num_tiles * _LANES - len(shifts)),
    )
    batched_aligned, batched_operand = aligned.ndim == 3, operand.ndim == 3

    def aligned_map(i, j, *rest):
        *b, d, _ = rest
        return (*_pallas.batch_indices(batched_aligned, b), i, d // _LANES)

    def operand_map(i, j, *rest):
        *b, d, shifts_ref = rest
        return (
            *_pallas.batch_indices(batched_operand, b),
            i * block_rows + shifts_ref[d] + pad_top,
            j * block_cols,
        )

    def out_map(i, j, *rest):
        *b, _, _ = rest
        return (*b, i, j)

    window = (pl.Element(block_rows), pl.Element(block_cols))
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(*grid, len(shifts)),
        in_specs=[
            pl.BlockSpec((*_pallas.squeezed(batched_aligned), block_rows, _LANES), aligned_map),
            pl.BlockSpec((*_pallas.squeezed(batched_operand), *window), operand_map),
        ],
        out_specs=pl.BlockSpec(
            (*_pallas.squeezed(batch is not None), block_rows, block_cols), out_map
        ),
        scratch_shapes=[pltpu.VMEM((block_rows, block_cols), jnp.float32)],
    )
    vmem = 4 * block_rows * (_LANES + 3 * max(block_cols, _LANES))
    return pl.pallas_call(
        functools.partial(_rows_kernel, diagonal_axis=len(grid)),
        out_shape=out_shape,
        grid_spec=grid_spec,
        compiler_params=params(vmem, ("parallel",) * len(grid) + ("arbitrary",)),
        interpret=interpret,
        name="dia_matmul_loop",
    )(shifts_array, aligned, operand)


def _rows_kernel(shifts_ref, aligned_ref, operand_ref, out_ref, acc_ref, *, diagonal_axis):
    """Diagonal `program_id(diagonal_axis)`'s contribution to one output tile."""
    d = pl.program_id(diagonal_axis)

    @pl.when(d == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += _lane(aligned_ref[...].astype(jnp.float32), d) * operand_ref[...].astype(
        jnp.float32
    )

    @pl.when(d == pl.num_programs(diagonal_axis) - 1)
    def _():
        out_ref[...] = acc_ref[...].astype(out_ref.dtype)


def _lane(tile, d):
    """Column `d % 128` of a `(rows, 128)` tile, as `(rows, 1)`: a dynamic lane rotation
    brings it to lane 0 (Mosaic has no dynamic lane slice)."""
    return pltpu.roll(tile, (_LANES - d % _LANES) % _LANES, 1)[:, :1]


def sddmm_loop(g, x, *, offsets, shape, block_rows, interpret, params):
    """The data gradient `out[b, d, j] = sum_c g[b, j - offsets[d], c] * x[b, j, c]` on the
    slots inside the matrix, else 0.

    **Arguments:** `g` `(m, k)` or `(B, m, k)`, `x` `(n, k)` or `(B, n, k)` (shared if 2-D);
    `offsets`: static Python ints, each with a slot inside the matrix; `shape`: `(m, n)`;
    `block_rows`, `interpret` and `params` as for `rows_product`; each step reduces over all
    of `k` (in lanes of 128 beyond 128 columns).

    **Returns:** `(len(offsets), n)`, or `(B, len(offsets), n)` if either is batched.
    """
    m, n = shape
    batch = _batch_size(g, x)
    k = x.shape[-1]
    num_blocks = pl.cdiv(n, block_rows)
    offsets_array = jnp.asarray(np.asarray(offsets, np.int32))
    # `g` zero-padded so that every window of `block_rows` rows `j - off` is in bounds;
    # the gradient is written transposed, `(columns, diagonals)`, in tiles of 128 diagonals.
    pad_top = max(0, max(offsets))
    pad_bottom = max(0, num_blocks * block_rows - min(offsets) - m)
    cols = pl.cdiv(k, _LANES) * _LANES if k > _LANES else k
    g = _pallas.pad_last_two(g, (pad_top, pad_bottom), (0, cols - k))
    x = _pallas.pad_last_two(x, (0, num_blocks * block_rows - n), (0, cols - k))
    num_tiles = pl.cdiv(len(offsets), _LANES)
    batched_g, batched_x = g.ndim == 3, x.ndim == 3

    def g_map(j, *rest):
        *b, d, offsets_ref = rest
        return (*_pallas.batch_indices(batched_g, b), j * block_rows - offsets_ref[d] + pad_top, 0)

    def x_map(j, *rest):
        *b, _, _ = rest
        return (*_pallas.batch_indices(batched_x, b), j, 0)

    def out_map(j, *rest):
        *b, d, _ = rest
        return (*b, j, d // _LANES)

    grid = (num_blocks, *_lead(batch), len(offsets))
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=grid,
        in_specs=[
            pl.BlockSpec(
                (*_pallas.squeezed(batched_g), pl.Element(block_rows), pl.Element(cols)), g_map
            ),
            pl.BlockSpec((*_pallas.squeezed(batched_x), block_rows, cols), x_map),
        ],
        out_specs=pl.BlockSpec((*_pallas.squeezed(batch is not None), block_rows, _LANES), out_map),
    )
    vmem = 4 * block_rows * (4 * max(cols, _LANES) + _LANES)
    gradient_t = pl.pallas_call(
        functools.partial(
            _sddmm_kernel, num_rows=m, block_rows=block_rows, diagonal_axis=len(grid) - 1
        ),
        out_shape=jax.ShapeDtypeStruct(
            (*_lead(batch), num_blocks * block_rows, num_tiles * _LANES), x.dtype
        ),
        grid_spec=grid_spec,
        compiler_params=params(vmem, ("parallel",) * (len(grid) - 1) + ("arbitrary",)),
        interpret=interpret,
        name="dia_sddmm_loop",
    )(offsets_array, g, x)
    return jnp.swapaxes(gradient_t, -1, -2)[..., : len(offsets), :n]


def _sddmm_kernel(offsets_ref, g_ref, x_ref, out_ref, *, num_rows, block_rows, diagonal_axis):
    """Diagonal `program_id(diagonal_axis)`'s gradient on one block of columns, written into
    its lane of the output tile (every lane of a tile is written by its own step)."""
    d = pl.program_id(diagonal_axis)
    acc_dtype = accumulation_dtype(out_ref.dtype)
    column = pl.program_id(0) * block_rows + lax.broadcasted_iota(jnp.int32, (block_rows, 1), 0)
    row = column - offsets_ref[d]
    inside = (row >= 0) & (row < num_rows)
    products = g_ref[...].astype(acc_dtype) * x_ref[...].astype(acc_dtype)
    total = jnp.where(inside, jnp.sum(products, axis=1, keepdims=True), 0)
    lane = lax.broadcasted_iota(jnp.int32, out_ref.shape, 1)
    out_ref[...] = jnp.where(lane == d % _LANES, total.astype(out_ref.dtype), out_ref[...])


def _batch_size(*arrays) -> int | None:
    """The batch size of the 3-D arrays among `arrays`, or `None` if none is batched."""
    return next((a.shape[0] for a in arrays if a.ndim == 3), None)


def _lead(batch) -> tuple:
    return () if batch is None else (batch,)
