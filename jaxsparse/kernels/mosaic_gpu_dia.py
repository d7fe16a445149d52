"""Mosaic GPU kernels (`plgpu.kernel`) for DIA matrices: Hopper and newer.

The product, the transposed product and the data gradient, with the arguments and results
of the other DIA kernel families (`triton_dia.py`), batch axis included (`_primitive.py`,
"Batches").

**Convention (scipy's).** `data[d, j] == A[j - offsets[d], j]`; slots with `j - offsets[d]`
outside `[0, m)` are ignored: they never change a product and get a zero gradient.

**Layouts.** Two kernels compute the products, chosen by the operand's row width:

- *Row-major tiles* (`_tile_kernel`), with JAX >= 0.12 (0.11.2 cannot lower GMEM loads
  in the WGMMA layout: "Only optimized transfers to SMEM supported"), where a row of the
  operand is a whole number of 128-byte lines (`k` a multiple of 32 in float32, of 16 in
  float64) or a whole fraction of one, 32 or 64 bytes (`k` 8 or 16 in float32, 8 in
  float64), up to `MAX_UNROLLED_DIAGONALS` diagonals inside the matrix; not half
  precision, see below (`_tile_columns`). A program computes a `(128, c)` tile of the
  result in Mosaic GPU's WGMMA register layout, `c` columns a line's worth or all `k`,
  so the tile's rows are whole lines or one contiguous block, and each shifted operand
  window is coalesced at any shift; a diagonal's 128 values come in the matching row
  layout and are broadcast along the columns. The operand and the result keep their own
  layout. The data gradient reads the same tiles (`_sddmm_tile_kernel`), summed along
  their columns into one row-layout accumulator a diagonal.
- *Rows of columns* (`_rows_kernel`, `_sddmm_kernel`) otherwise: the dense operands are
  passed transposed, `(k, rows)`, so that one column of `x` is a contiguous row, just as
  one diagonal of `data` is. Every value a program touches is a 1-D slice of `R`
  contiguous elements (`R = block_rows`, a multiple of the 128 threads of a warpgroup)
  in Mosaic GPU's strided layout with one element per thread per step: consecutive
  threads read consecutive addresses (coalesced), at any shift, with no alignment to
  assume. For `k == 1` the transposes are reshapes. (Half precision cannot use the
  tiles: a diagonal's values in the row layout are one 2-byte element per thread, and
  Mosaic GPU's GMEM loads take at least 4 bytes per thread.)

**Design.** One program per block of `R` output rows (and per tile of columns, and per
batch member), a grid of `(row blocks, [column tiles,] batch)`. Offsets are Python ints
captured by the kernel body, never operands, so the loop over diagonals unrolls at trace
time and every shift is a static constant added to the program's row start. A program
loads, for each diagonal, the values it needs straight from global memory at the shifted
row (`pl.ds(row0 + shift, R)`), and the operand's values at their shifted rows, and
accumulates in registers (float32 for bfloat16/float16, `_precision.py`); the result is
stored straight to global memory. No shared memory, no barriers. The operand's shifted
rows overlap between diagonals and neighbouring programs: they are served by L1/L2, so
DRAM sees each byte about once. (A TMA copy of a window with its halo into shared memory
was the alternative; TMA boxes hold at most 256 elements per dimension, and a window spans
all offsets, `R + max(offsets) - min(offsets)` rows: for a 5-point stencil on a 1024^2
grid that is over 2048 rows per column of `x`, so shared memory would cap `k` at a few
columns. Per-diagonal loads have no such limit.)

**The ends.** No load may leave its array, and the arrays are not padded: the programs
are split into regions by their block index (`pl.when`). Interior programs read the
arrays themselves; the few programs at the top and the bottom whose shifted rows would
leave an array read small zero-padded windows of it (about `R + span` rows each, built in
XLA) instead. The product needs no mask: a stored value whose row is outside the matrix
only reaches an output row past `m`, which is cut off, and values outside `data` meet
zeros. The transposed product and the data gradient select zero (`jnp.where`, not a
multiplication, so non-finite values in ignored slots do not leak) where the slot's row
is outside `[0, m)`.

**Many diagonals.** Beyond `MAX_UNROLLED_DIAGONALS` diagonals inside the matrix the
kernels loop over them (`lax.fori_loop`) and read each diagonal's position, shifts and
offset from a small int32 table (an operand built from the static offsets, as
`mosaic_tpu_dia_loop.py` does), so that programs do not grow with the diagonals. Loops over
the columns of the operand run the same way beyond two columns.

**Interpret mode.** `interpret=True` runs the kernels in Mosaic GPU's interpreter on the
host (`plgpu.InterpretGPUParams(detect_races=True)`: races are reported), whatever the
platform. The interpreter runs through ordered host callbacks, which a primitive's
lowering rule cannot hold (`mlir.lower_fun` raises `KeyError: OrderedIOEffect`), so the
`"interpret"` backend of the products keeps running the portable Pallas kernels; call
these functions directly to interpret them.

**Versions.** Written against the `plgpu` API that JAX 0.11.2 and 0.12 share
(`plgpu.kernel` with `grid`, `grid_names` and `kernel_name`, `plgpu.load` with the
`WG_STRIDED` and `WGMMA` layouts, `plgpu.broadcasted_iota`, `plgpu.InterpretGPUParams`),
and checked with both (interpret mode, lowering and export). Where
`jax.experimental.pallas.mosaic_gpu` does not import (JAX 0.10 without its dependency
absl), `supports` is False everywhere and the package imports as usual.

**Cost per product** (`v` bytes per value, `ndiag` active diagonals, per batch member):

- `A @ X` (`X: (n, k)`): the kernel reads `ndiag*n*v + n*k*v` and writes `m*k*v`;
  `2*ndiag*m*k` flops. `A^T @ G`: `ndiag*n*v + m*k*v` read, `n*k*v` written. The gradient
  in `data`: `m*k*v + n*k*v` read, `ndiag*n*v` written, `2*ndiag*n*k` flops. Shifted
  re-reads hit L1/L2.
- Around the kernel, in XLA: the end windows (a few `R + span` rows); on the rows
  kernels with `k > 1`, the transposes of the operands and of the result (a read and a
  write of each: about three times the ideal bytes at large `k`); when the output rows
  are not a multiple of `R`, a slice of the result. For `k == 1`, and for the row-major
  tiles, with `R` dividing the rows, the kernel's bytes are all there is.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

from .._dia_layout import MAX_UNROLLED_DIAGONALS, active_diagonals
from ._dia_checks import check_product, check_sddmm
from ._precision import accumulation_dtype
from .xla_dia import dia_sddmm_xla

try:
    from jax.experimental.pallas import mosaic_gpu as plgpu
except ImportError:  # JAX 0.10 without Mosaic GPU's dependencies (absl)
    plgpu = None

_WARPGROUP = 128  # threads of one Mosaic GPU program
# Columns of the operand handled by unrolled code; more run in a `fori_loop` (unrolled,
# 8 columns of a 5-point stencil took 4 s to lower instead of 0.3 s: every region of
# programs repeats the body).
_UNROLLED_COLUMNS = 2
_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16, jnp.float64)
# Row-major tiles of the products and the data gradient: rows per program (a multiple of
# 64, WGMMA's layout), bytes of a tile row at most (one line), and its columns at least
# (the layout's width).
_TILE_ROWS = 128
_TILE_BYTES = 128
_MIN_TILE_COLUMNS = 8
# Past this many accumulators live in a program (one a diagonal in the data gradient),
# programs take half the rows, so their registers stay within a thread's 255.
_MANY_ACCUMULATORS = 8
# JAX 0.11.2's Mosaic GPU cannot lower GMEM loads in the WGMMA layout ("Only optimized
# transfers to SMEM supported"); 0.12 can.
_TILES_FROM_GMEM = jax.__version_info__ >= (0, 12)


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
    per_thread = 4 if accumulators <= _MANY_ACCUMULATORS else 2
    needed = -(-max(rows, 1) // _WARPGROUP)
    return _WARPGROUP * min(per_thread, needed)


def _strided(block_rows: int):
    return plgpu.Layout.WG_STRIDED((block_rows,), vec_size=1)


def _zeros(block_rows: int, dtype):
    return plgpu.layout_cast(jnp.zeros((block_rows,), dtype), _strided(block_rows))


def _loop(count: int, body, carry, *, unroll: bool):
    """`carry = body(i, carry)` for `i < count`: unrolled Python ints, or a `fori_loop`."""
    if unroll:
        for i in range(count):
            carry = body(i, carry)
        return carry
    return lax.fori_loop(jnp.int32(0), jnp.int32(count), body, carry)


def _member(ref, batched: bool, b):
    """The ref of batch member `b` (member 0 of an array shared by the batch)."""
    return ref.at[b] if batched else ref.at[0]


@dataclasses.dataclass(frozen=True)
class _Region:
    """Programs `[first, stop)`, which read one source of the kernel's two arrays: the
    arrays themselves (the interior, `bases == (0, 0)`), or small zero-padded windows of
    them around the ends; `bases[a]` is added to every row index into array `a`."""

    first: int
    stop: int
    bases: tuple[int, int]


def _window(array, start: int, stop: int, axis: int):
    """Rows `[start, stop)` along `axis` of `array`, zero outside it."""
    axis %= array.ndim
    length = array.shape[axis]
    if start >= length or stop <= 0:
        shape = list(array.shape)
        shape[axis] = stop - start
        return jnp.zeros(shape, array.dtype)
    lo, hi = max(start, 0), min(stop, length)
    widths = [(0, 0)] * array.ndim
    widths[axis] = (lo - start, stop - hi)
    return jnp.pad(lax.slice_in_dim(array, lo, hi, axis=axis), widths)


def _sources(arrays, shifts, axes, block_rows: int, num_blocks: int):
    """The regions of programs and the arrays each reads (see `_Region`).

    Program `p` reads rows `[p * block_rows + shift, ... + block_rows)` along `axes[a]` of
    array `a` for each of its `shifts[a]`. Interior programs read inside both arrays; the
    few programs at the ends, which would read outside, read windows of the arrays padded
    with zeros instead, so no program reads out of bounds and no full padded copy is made.

    **Returns:** `(regions, sources)`: the `_Region`s, and two arrays per region.
    """
    head = min(num_blocks, max(-(-max(0, -min(s)) // block_rows) for s in shifts))
    inside = [
        max(0, (a.shape[axis] - block_rows - max(s)) // block_rows + 1)
        for a, s, axis in zip(arrays, shifts, axes, strict=True)
    ]
    tail = max(head, min(num_blocks, *inside))
    regions, sources = [], []
    for first, stop in ((0, head), (head, tail), (tail, num_blocks)):
        if stop <= first:
            continue
        if (first, stop) == (head, tail):
            regions.append(_Region(first, stop, (0, 0)))
            sources.extend(arrays)
            continue
        starts = [first * block_rows + min(s) for s in shifts]
        regions.append(_Region(first, stop, (-starts[0], -starts[1])))
        sources.extend(
            _window(a, start, stop * block_rows + max(s), axis)
            for a, s, start, axis in zip(arrays, shifts, starts, axes, strict=True)
        )
    return tuple(regions), sources


def _split_refs(refs, diagonals, regions):
    """`(table, sources, out)` of a kernel's refs: the `(4, ndiag)` int32 table of
    diagonals comes first in looped kernels (`diagonals is None`), then two refs per
    region, then the output."""
    table, refs = (None, refs) if diagonals is not None else (refs[0], refs[1:])
    sources = [refs[2 * i : 2 * i + 2] for i in range(len(regions))]
    return table, sources, refs[-1]


def _by_region(regions, sources, body) -> None:
    """`body(source, bases)` in the programs of each region."""
    block = lax.axis_index("rows")
    for region, source in zip(regions, sources, strict=True):
        run = functools.partial(body, source, region.bases)
        if len(regions) == 1:
            run()
        else:
            pl.when((block >= region.first) & (block < region.stop))(run)


def _diagonal(table, diagonals, d):
    """`(position, value shift, operand shift, offset)` of diagonal `d`: static ints when
    unrolled, scalars read from the table when looped."""
    if diagonals is not None:
        return diagonals[d]
    return table[0, d], table[1, d], table[2, d], table[3, d]


def _rows_kernel(
    *refs,
    diagonals: tuple[tuple[int, int, int, int], ...] | None,
    regions: tuple[_Region, ...],
    num_diagonals: int,
    masked_rows: int | None,
    batched: tuple[bool, bool],
    block_rows: int,
):
    """Rows `[r0, r0 + block_rows)` of `out[c, r] = sum_d values[position_d, r +
    value_shift_d] * operand[c, r + operand_shift_d]`. With `masked_rows = m`, diagonal
    `d` contributes only where `0 <= r - offset_d < m` (a select, so ignored values never
    reach the sum). `diagonals` holds static `(position, value shift, operand shift,
    offset)` per diagonal (unrolled), or is `None` and a table ref comes first (looped)."""
    table, sources, out_ref = _split_refs(refs, diagonals, regions)
    r0 = lax.axis_index("rows") * block_rows
    b = lax.axis_index("batch")
    out = out_ref.at[b]
    layout = _strided(block_rows)
    acc_dtype = accumulation_dtype(out_ref.dtype)
    rows = r0 + plgpu.broadcasted_iota(jnp.int32, (block_rows,), 0, layout=layout)
    num_cols = out_ref.shape[1]

    def block(source, bases):
        values = _member(source[0], batched[0], b)
        operand = _member(source[1], batched[1], b)

        def column(c, carry):
            def add_diagonal(d, acc):
                position, value_shift, operand_shift, offset = _diagonal(table, diagonals, d)
                window = pl.ds(r0 + value_shift + bases[0], block_rows)
                stored = plgpu.load(values.at[position, window], layout=layout)
                stored = stored.astype(acc_dtype)
                if masked_rows is not None:
                    inside = (rows - offset >= 0) & (rows - offset < masked_rows)
                    stored = jnp.where(inside, stored, jnp.zeros_like(stored))
                window = pl.ds(r0 + operand_shift + bases[1], block_rows)
                shifted = plgpu.load(operand.at[c, window], layout=layout)
                return acc + stored * shifted.astype(acc_dtype)

            acc = _loop(
                num_diagonals,
                add_diagonal,
                _zeros(block_rows, acc_dtype),
                unroll=diagonals is not None,
            )
            out[c, pl.ds(r0, block_rows)] = acc.astype(out_ref.dtype)
            return carry

        _loop(num_cols, column, jnp.int32(0), unroll=num_cols <= _UNROLLED_COLUMNS)

    _by_region(regions, sources, block)


def _tile_kernel(
    *refs,
    diagonals: tuple[tuple[int, int, int, int], ...],
    regions: tuple[_Region, ...],
    masked_rows: int | None,
    batched: tuple[bool, bool],
    block_rows: int,
    block_cols: int,
):
    """The `(block_rows, block_cols)` tile at `(r0, c0)` of `out[r, c] = sum_d
    values[position_d, r + value_shift_d] * operand[r + operand_shift_d, c]`, on an operand
    in its own row-major layout (no transposes), for static `diagonals` (as
    `_rows_kernel`). The tile is in Mosaic GPU's WGMMA register layout; its rows are
    whole 128-byte lines, or whole operand rows of 32 or 64 bytes (one contiguous block),
    so each shifted operand window is coalesced at any shift (`_tile_columns`). A
    diagonal's `block_rows` values come in the matching row layout and are broadcast
    along the columns."""
    _, sources, out_ref = _split_refs(refs, diagonals, regions)
    r0 = lax.axis_index("rows") * block_rows
    c0 = lax.axis_index("cols") * block_cols
    b = lax.axis_index("batch")
    out = out_ref.at[b]
    tile_layout = plgpu.Layout.WGMMA
    row_layout = plgpu.Layout.WGMMA.reduce(1)
    acc_dtype = accumulation_dtype(out_ref.dtype)
    rows = r0 + plgpu.broadcasted_iota(jnp.int32, (block_rows,), 0, layout=row_layout)
    tile_shape = (block_rows, block_cols)

    def block(source, bases):
        values = _member(source[0], batched[0], b)
        operand = _member(source[1], batched[1], b)
        acc = plgpu.layout_cast(jnp.zeros(tile_shape, acc_dtype), tile_layout)
        for position, value_shift, operand_shift, offset in diagonals:
            window = pl.ds(r0 + value_shift + bases[0], block_rows)
            stored = plgpu.load(values.at[position, window], layout=row_layout)
            stored = stored.astype(acc_dtype)
            if masked_rows is not None:
                inside = (rows - offset >= 0) & (rows - offset < masked_rows)
                stored = jnp.where(inside, stored, jnp.zeros_like(stored))
            window = pl.ds(r0 + operand_shift + bases[1], block_rows)
            tile = plgpu.load(operand.at[window, pl.ds(c0, block_cols)], layout=tile_layout)
            acc = acc + lax.broadcast_in_dim(stored, tile_shape, (0,)) * tile.astype(acc_dtype)
        out[pl.ds(r0, block_rows), pl.ds(c0, block_cols)] = acc.astype(out_ref.dtype)

    _by_region(regions, sources, block)


def _store_gradient(out, d, j0, columns, offset: int, num_rows: int, total) -> None:
    """Stores diagonal `d`'s gradient `total` at stored columns `columns` (from `j0`),
    exactly zero where the slot's row `column - offset` is outside `[0, num_rows)` (a
    select, so nothing non-finite from an ignored slot is kept)."""
    inside = (columns - offset >= 0) & (columns - offset < num_rows)
    total = jnp.where(inside, total, jnp.zeros_like(total))
    out[d, pl.ds(j0, total.shape[0])] = total.astype(out.dtype)


def _sddmm_kernel(
    *refs,
    diagonals: tuple[tuple[int, int, int, int], ...] | None,
    regions: tuple[_Region, ...],
    num_diagonals: int,
    num_rows: int,
    batched: tuple[bool, bool],
    block_rows: int,
):
    """Stored columns `[j0, j0 + block_rows)` of `out[d, j] = sum_c g[c, j + g_shift_d] *
    x[c, j]`, zero where the slot's row `j - offset_d` is outside `[0, num_rows)`.
    `diagonals` holds static `(d, g shift, 0, offset)` per diagonal, or is `None` and a
    table ref comes first. Unrolled, the loop over columns is outside and every diagonal
    keeps an accumulator, so each column of `x` is loaded once; looped, each diagonal runs
    its own loop over the columns."""
    table, sources, out_ref = _split_refs(refs, diagonals, regions)
    j0 = lax.axis_index("rows") * block_rows
    b = lax.axis_index("batch")
    out = out_ref.at[b]
    layout = _strided(block_rows)
    acc_dtype = accumulation_dtype(out_ref.dtype)
    num_cols = sources[0][1].shape[1]
    unroll_cols = num_cols <= _UNROLLED_COLUMNS
    columns = j0 + plgpu.broadcasted_iota(jnp.int32, (block_rows,), 0, layout=layout)

    def block(source, bases):
        g = _member(source[0], batched[0], b)
        x = _member(source[1], batched[1], b)

        def load(ref, c, start):
            window = pl.ds(start, block_rows)
            return plgpu.load(ref.at[c, window], layout=layout).astype(acc_dtype)

        if diagonals is not None:

            def column(c, sums):
                own = load(x, c, j0 + bases[1])
                return tuple(
                    total + load(g, c, j0 + g_shift + bases[0]) * own
                    for total, (_, g_shift, _, _) in zip(sums, diagonals, strict=True)
                )

            zeros = (_zeros(block_rows, acc_dtype),) * num_diagonals
            sums = _loop(num_cols, column, zeros, unroll=unroll_cols)
            for d, (total, (_, _, _, offset)) in enumerate(zip(sums, diagonals, strict=True)):
                _store_gradient(out, d, j0, columns, offset, num_rows, total)
            return

        def diagonal(d, carry):
            _, g_shift, _, offset = _diagonal(table, None, d)

            def column(c, total):
                return total + load(g, c, j0 + g_shift + bases[0]) * load(x, c, j0 + bases[1])

            zeros = _zeros(block_rows, acc_dtype)
            total = _loop(num_cols, column, zeros, unroll=unroll_cols)
            _store_gradient(out, d, j0, columns, offset, num_rows, total)
            return carry

        lax.fori_loop(jnp.int32(0), jnp.int32(num_diagonals), diagonal, jnp.int32(0))

    _by_region(regions, sources, block)


def _sddmm_tile_kernel(
    *refs,
    diagonals: tuple[tuple[int, int, int, int], ...],
    regions: tuple[_Region, ...],
    num_rows: int,
    batched: tuple[bool, bool],
    block_rows: int,
    block_cols: int,
):
    """Stored columns `[j0, j0 + block_rows)` of the data gradient (as `_sddmm_kernel`),
    from `g` and `x` in their own row-major layout: each column tile of `x`'s rows (WGMMA
    register layout) is loaded once and multiplied by the shifted tile of `g` of every
    diagonal, summed along the tile's columns into one accumulator a diagonal (the row
    layout). Static `diagonals` of `(d, g shift, 0, offset)`."""
    _, sources, out_ref = _split_refs(refs, diagonals, regions)
    j0 = lax.axis_index("rows") * block_rows
    b = lax.axis_index("batch")
    out = out_ref.at[b]
    tile_layout = plgpu.Layout.WGMMA
    row_layout = plgpu.Layout.WGMMA.reduce(1)
    acc_dtype = accumulation_dtype(out_ref.dtype)
    columns = j0 + plgpu.broadcasted_iota(jnp.int32, (block_rows,), 0, layout=row_layout)
    num_tiles = sources[0][1].shape[-1] // block_cols

    def block(source, bases):
        g = _member(source[0], batched[0], b)
        x = _member(source[1], batched[1], b)

        def load(ref, start, tile):
            window = (pl.ds(start, block_rows), pl.ds(tile * block_cols, block_cols))
            return plgpu.load(ref.at[window], layout=tile_layout).astype(acc_dtype)

        def column_tile(tile, sums):
            own = load(x, j0 + bases[1], tile)
            return tuple(
                total + jnp.sum(load(g, j0 + g_shift + bases[0], tile) * own, axis=1)
                for total, (_, g_shift, _, _) in zip(sums, diagonals, strict=True)
            )

        zeros = plgpu.layout_cast(jnp.zeros((block_rows,), acc_dtype), row_layout)
        sums = _loop(
            num_tiles,
            column_tile,
            (zeros,) * len(diagonals),
            unroll=num_tiles <= _UNROLLED_COLUMNS,
        )
        for d, (total, (_, _, _, offset)) in enumerate(zip(sums, diagonals, strict=True)):
            _store_gradient(out, d, j0, columns, offset, num_rows, total)

    _by_region(regions, sources, block)


def _launch(
    kernel, diagonals, arrays, shifts, out_shape, grid, interpret, name, *, axes, block_rows
):
    """Launch `kernel` over `arrays` (each read at the rows `shifts` gives along its axis
    in `axes`, see `_sources`) on `grid`, named `(rows, [cols,] batch)`, of one warpgroup
    per program: unrolled over the static `diagonals` up to `MAX_UNROLLED_DIAGONALS`, else
    looped over an int32 table of them (the offsets stay static metadata of the product;
    only the looped kernel reads them at run time, as `mosaic_tpu_dia_loop.py` does)."""
    regions, sources = _sources(arrays, shifts, axes, block_rows, grid[0])
    unrolled = len(diagonals) <= MAX_UNROLLED_DIAGONALS
    if not unrolled:
        sources = [jnp.asarray(np.asarray(diagonals, np.int32).T), *sources]
    kernel = functools.partial(
        kernel, diagonals=tuple(diagonals) if unrolled else None, regions=regions
    )
    return plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct(*out_shape),
        grid=grid,
        grid_names=("rows", "cols", "batch") if len(grid) == 3 else ("rows", "batch"),
        interpret=plgpu.InterpretGPUParams(detect_races=True) if interpret else None,
        kernel_name=name,
    )(*sources)


def _as_batch(array, rank: int):
    """`(B, ...)`, with `B = 1` for an array of `rank` (shared by the batch)."""
    return array if array.ndim == rank + 1 else array[None]


def _rows_major(operand):
    """`(B, rows, k) -> (B, k, rows)`: columns of the operand as contiguous rows."""
    return jnp.swapaxes(operand, -1, -2)


def _pad_last(array, before: int, after: int):
    return jnp.pad(array, ((0, 0),) * (array.ndim - 1) + ((before, after),))


def _tile_rows(rows: int, accumulators: int) -> int:
    """Rows per program on row-major tiles: 128, or 64 where the output has at most 64
    rows or more than `_MANY_ACCUMULATORS` accumulators are live (the data gradient keeps
    one a diagonal), as `_block_rows` halves its rows."""
    half = rows <= _TILE_ROWS // 2 or accumulators > _MANY_ACCUMULATORS
    return _TILE_ROWS // 2 if half else _TILE_ROWS


def _tile_columns(k: int, itemsize: int, diagonals: int) -> int | None:
    """Columns per row-major tile for an operand of `k` columns of `itemsize` bytes and
    `diagonals` active diagonals, or `None` (the rows kernel then runs, as it does past
    `MAX_UNROLLED_DIAGONALS`: the tiles unroll over the diagonals). Mosaic GPU's GMEM
    loads in the WGMMA layout must read whole 128-byte lines: a tile is one line of each
    row where the rows are whole lines, else all of a row where a row is a whole
    fraction of a line (at least `_MIN_TILE_COLUMNS`, the layout's width), so the tile's
    rows are one contiguous block. Half precision stays on the rows kernel: a diagonal's
    values in the row layout are one 2-byte element per thread, and Mosaic GPU's GMEM
    loads take at least 4 bytes."""
    if not _TILES_FROM_GMEM or itemsize < 4 or diagonals > MAX_UNROLLED_DIAGONALS:
        return None
    line = _TILE_BYTES // itemsize
    if k % line == 0:
        return line
    if k >= _MIN_TILE_COLUMNS and line % k == 0:
        return k
    return None


def _product(data, operand, *, offsets, shape, transposed: bool, interpret: bool):
    """`A @ operand`, or `A^T @ operand` if `transposed`; batch axis included (see the
    public wrappers)."""
    m, n = shape
    out_rows = n if transposed else m
    lead = data.shape[:-2]
    k = operand.shape[-1]
    index, active = active_diagonals(offsets, shape)
    if k == 0 or out_rows == 0 or not index or 0 in lead:
        return jnp.zeros((*lead, out_rows, k), operand.dtype)
    values, operand = _as_batch(data, 2), _as_batch(operand, 2)
    batch = values.shape[0]
    # Output row r reads A @ x: data and x at column r + offset; A^T @ g: data at r, g at
    # row r - offset.
    value_shifts = (0,) * len(active) if transposed else active
    operand_shifts = tuple(-off for off in active) if transposed else active
    name = "dia_matmul_t_mosaic_gpu" if transposed else "dia_matmul_mosaic_gpu"
    params = dict(
        # A @ x needs no mask: a value whose row is outside the matrix only reaches an
        # output row past m (cut off), and values outside `data` meet zeros.
        masked_rows=m if transposed else None,
        batched=(True, operand.shape[0] == batch),
    )
    diagonals = list(zip(index, value_shifts, operand_shifts, active, strict=True))
    tile_cols = _tile_columns(k, operand.dtype.itemsize, len(active))
    if tile_cols:
        block_rows = _tile_rows(out_rows, 1)
        span = -(-out_rows // block_rows) * block_rows
        out = _launch(
            functools.partial(_tile_kernel, block_rows=block_rows, block_cols=tile_cols, **params),
            diagonals,
            (values, operand),
            (value_shifts, operand_shifts),
            ((batch, span, k), operand.dtype),
            (span // block_rows, k // tile_cols, batch),
            interpret,
            name,
            axes=(-1, -2),
            block_rows=block_rows,
        )
        out = out[:, :out_rows]
    else:
        block_rows = _block_rows(out_rows, 1)
        span = -(-out_rows // block_rows) * block_rows
        out = _launch(
            functools.partial(
                _rows_kernel, num_diagonals=len(active), block_rows=block_rows, **params
            ),
            diagonals,
            (values, _rows_major(operand)),
            (value_shifts, operand_shifts),
            ((batch, k, span), operand.dtype),
            (span // block_rows, batch),
            interpret,
            name,
            axes=(-1, -1),
            block_rows=block_rows,
        )
        out = jnp.swapaxes(out[..., :out_rows], -1, -2)
    return out if lead else out[0]


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
    check_product(data, x, "x", offsets, shape, shape[1])
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
    check_product(data, g, "g", offsets, shape, shape[0])
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
    check_sddmm(g, x, offsets, shape)
    lead = g.shape[:-2] or x.shape[:-2]
    index, active = active_diagonals(offsets, shape)
    if x.shape[-1] == 0 or n == 0 or not index or 0 in lead:
        return jnp.zeros((*lead, len(offsets), n), x.dtype)
    given = (g, x)
    g, x = _as_batch(g, 2), _as_batch(x, 2)
    batch = max(g.shape[0], x.shape[0])
    params = dict(num_rows=m, batched=(g.shape[0] == batch, x.shape[0] == batch))
    tile_cols = _tile_columns(x.shape[-1], x.dtype.itemsize, len(active))
    if tile_cols:
        block_rows = _tile_rows(n, len(active))
        kernel = functools.partial(_sddmm_tile_kernel, block_cols=tile_cols, **params)
        operands, axes = (g, x), (-2, -2)
    else:
        block_rows = _block_rows(n, len(active))
        kernel = functools.partial(_sddmm_kernel, num_diagonals=len(active), **params)
        operands, axes = (_rows_major(g), _rows_major(x)), (-1, -1)
    # The kernel writes whole blocks of columns. Past the last whole block, a result of `n`
    # columns takes the rest from the XLA kernel, written into it in place; below one
    # block, the kernel writes a padded result that is cut (a copy, small at that size).
    blocks = n // block_rows or 1
    columns = n if n >= block_rows else block_rows
    # Stored column j reads g at row j - offset and x at row j.
    gradient = _launch(
        functools.partial(kernel, block_rows=block_rows),
        [(d, -off, 0, off) for d, off in enumerate(active)],
        operands,
        (tuple(-off for off in active), (0,)),
        ((batch, len(active), columns), x.dtype),
        (blocks, batch),
        interpret,
        "dia_sddmm_mosaic_gpu",
        axes=axes,
        block_rows=block_rows,
    )
    if columns != n:
        gradient = gradient[..., :n]
    done = blocks * block_rows
    if done < n:  # stored columns done.. of A are columns 0.. of a matrix offset by -done
        g_given, x_given = given
        rest = dia_sddmm_xla(
            g_given,
            x_given[..., done:, :],
            offsets=tuple(off - done for off in active),
            shape=(m, n - done),
        )
        gradient = lax.dynamic_update_slice(gradient, _as_batch(rest, 2), (0, 0, done))
    if len(index) != len(offsets):
        full = jnp.zeros((batch, len(offsets), n), x.dtype)
        gradient = full.at[:, np.asarray(index), :].set(gradient)
    return gradient if lead else gradient[0]
