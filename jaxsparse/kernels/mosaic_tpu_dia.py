"""Mosaic TPU Pallas kernels for DIA matrices (the window kernels), and their interpret mode.

The product, the transposed product (the product kernel on `A^T`'s diagonals) and the
data gradient.

**Convention (scipy's).** A DIA matrix of shape `(m, n)` stores `data` of shape `(ndiag, n)`
and static Python int `offsets`, with `data[k, j] == A[j - offsets[k], j]`: column `j` of
`data` is column `j` of the matrix. Slots with `j - offsets[k]` outside `[0, m)` are ignored:
they never change a product (whatever they hold) and get a zero gradient. Offsets are
distinct, in any order, and may reach beyond the matrix (`off <= -m` or `off >= n`); such a
diagonal is dropped at trace time.

**Design.** Offsets are Python ints captured by the kernel body (`functools.partial`), never
operands of `pallas_call`, so `for k, off in enumerate(offsets)` unrolls at trace time and every
slice is static. The grid tiles the output rows (and the columns of `x` for the product). Each
program gets one *window* of the operand that is read at shifted rows: the rows
`[r0 + min(offsets), r0 + block_rows + max(offsets))` around its rows `[r0, r0 + block_rows)`,
through an element-indexed `BlockSpec` (`pl.Element`), one DMA per window. Inside the window
each diagonal reads a static slice. The wrapper zero-pads the shifted operands so that every
window is in bounds, which also makes the ignored slots harmless: an ignored slot is either
multiplied by a padded zero or lands in an output row that is never stored. `data` is passed
transposed, `(n, ndiag)`, so a diagonal's values arrive as a `(block_rows, 1)` column that
broadcasts against `x`'s rows without an in-kernel transpose. bfloat16 accumulates in float32.

**Many diagonals.** This unrolling makes the kernel, and its trace and compile times, grow
with the number of diagonals, and its window with their span: beyond
`MAX_UNROLLED_DIAGONALS` diagonals inside the matrix, the wrappers call the looping kernels
of `mosaic_tpu_dia_loop.py` instead.

**Batches** (`_primitive.py`, "Batches"): `data` `(B, ndiag, n)` with a `(B, rows, k)` or
shared `(rows, k)` operand. The batch is the innermost grid axis (squeezed block
dimensions), so consecutive programs read the same window of a shared operand (its DMA is
skipped when the block does not change).

**Interpret mode** (`platform="cpu"`) runs the same kernels, tiles and dtypes as the TPU.

**Cost per product** (`v` bytes per value; `span = max(offsets) - min(offsets)`):

- `dia_matmul`, `Y = A @ X` with `X: (n, k)`: `2 * ndiag * m * k` flops; ideal bytes
  `ndiag*n*v + n*k*v + m*k*v`. The wrapper's pad (and transpose of `data`) adds one read and
  one write of `data` and `x`. Each window is a DMA of `block_rows + span` rows, so `x` and
  `data` are read `(block_rows + span) / block_rows` times.
- `dia_sddmm`, `dA[k, j] = sum_c G[j - offsets[k], c] * X[j, c]`: `2 * ndiag * n * k` flops;
  ideal bytes `m*k*v + n*k*v + ndiag*n*v`, plus the pad of `G` and the transpose of the
  `(n, ndiag)` result; `G` is read `(block_rows + span) / block_rows` times.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .._dia_layout import active_diagonals, negate_offsets, transpose_data, unrolls_diagonals
from . import _pallas, mosaic_tpu_dia_loop
from ._dia_checks import check_product, check_sddmm
from ._precision import accumulation_dtype

_PLATFORMS = ("tpu", _pallas.INTERPRET_PLATFORM)
# Rows in multiples of 32: TPU sublane tiles of every dtype up to int8 packing.
_MIN_BLOCK_ROWS = 32
_WINDOW_ALIGN = 32
# Scoped VMEM that Mosaic gets by default on the smallest TPU generations.
_TPU_DEFAULT_VMEM_BYTES = 16 * 2**20


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclasses.dataclass(frozen=True)
class BlockSizes(_pallas.BlockSizes):
    """Tile sizes of the DIA window kernels.

    **Arguments:**

    - `block_rows`: rows of the output each program computes (`dia_matmul`), or columns of
      `data` each program computes (`dia_sddmm`). A power of two, at least 32.
    - `block_cols`: columns of `x` each program handles (`dia_matmul`), or the chunk of the
      reduction over `x`'s columns each loop step handles (`dia_sddmm`). A power of two; a
      `k` larger than `block_cols` needs a multiple of 128.

    `None` fields are filled by `get_default` for `k`.
    """

    block_rows: int | None = _pallas.tile(minimum=_MIN_BLOCK_ROWS)
    block_cols: int | None = _pallas.tile()

    @classmethod
    def get_default(cls, *, platform: str, num_cols: int) -> "BlockSizes":
        """Default tiles for a dense operand with `num_cols` columns: large row blocks, so
        the halo of a window is a small fraction of it, and up to 512 columns in VMEM.

        **Arguments:**

        - `platform`: `"tpu"` or `"cpu"` (interpret mode, the same tiles).
        - `num_cols`: `k`, the number of columns of `x`.

        **Returns:**

        A `BlockSizes` with both fields set.
        """
        _pallas.check_platform(platform, _PLATFORMS)
        return cls(block_rows=2048 if num_cols <= 128 else 512, block_cols=512)


def supports(dtype, platform: str) -> bool:
    """Whether the DIA window kernels take `dtype` on `platform`: float32 and bfloat16 on
    `"tpu"` and in interpret mode (`"cpu"`), where the caller routes the others to the XLA
    path. Mosaic TPU has no 64-bit floating-point vectors and no float16 vectors (bfloat16
    is its half type), and no complex type; integers are not DIA values here. Nothing on
    other platforms: GPUs run `triton_dia.py` and `mosaic_gpu_dia.py`.
    """
    return platform in _PLATFORMS and jnp.dtype(dtype) in (jnp.float32, jnp.bfloat16)


def _tiles(block_sizes: BlockSizes | None, m: int, k: int) -> tuple[int, int]:
    """Rows per program and columns per program (or per reduction step) for these sizes."""
    default = BlockSizes.get_default(platform="tpu", num_cols=k)
    block_sizes = (block_sizes or default).filled_from(default)
    block_rows, block_cols = block_sizes.block_rows, block_sizes.block_cols
    rows = min(block_rows, max(_MIN_BLOCK_ROWS, pl.next_power_of_2(m)))
    # Mosaic blocks span the full `k` or a multiple of 128 lanes.
    if k <= block_cols:
        return rows, k
    if block_cols % 128:
        raise ValueError(f"{block_cols=} must be a multiple of 128 on TPU when {k=} exceeds it")
    return rows, block_cols


def _compiler_params(vmem_bytes: int, dimension_semantics):
    # Double-buffered blocks plus headroom; only raised above Mosaic's default when needed.
    limit = max(_TPU_DEFAULT_VMEM_BYTES, 2 * vmem_bytes + 4 * 2**20)
    return pltpu.CompilerParams(dimension_semantics=dimension_semantics, vmem_limit_bytes=limit)


def _vmem_block_bytes(rows: int, cols: int, dtype) -> int:
    return _round_up(rows, _WINDOW_ALIGN) * _round_up(cols, 128) * jnp.dtype(dtype).itemsize


def _dia_matmul_kernel(
    data_ref, x_ref, out_ref, *, offsets: tuple[int, ...], window_start: int, block_rows: int
):
    """One `(block_rows, block_cols)` tile of `Y = A @ X`.

    `data_ref` is the `(window, ndiag)` window of the transposed `data` and `x_ref` the
    `(window, block_cols)` window of `x`, both starting at matrix column
    `r0 + window_start` for output rows `[r0, r0 + block_rows)`. Row `i` of the tile needs
    column `i + off` of diagonal `k`, which sits at window row `i + off - window_start`.
    """
    acc_dtype = accumulation_dtype(out_ref.dtype)
    acc = jnp.zeros(out_ref.shape, acc_dtype)
    for k, off in enumerate(offsets):
        rows = pl.ds(off - window_start, block_rows)
        diagonal = data_ref[rows, pl.ds(k, 1)].astype(acc_dtype)
        acc += diagonal * x_ref[rows, :].astype(acc_dtype)
    out_ref[...] = acc.astype(out_ref.dtype)


def dia_matmul_mosaic_tpu(
    data: jax.Array,
    x: jax.Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """`Y = A @ x` for the DIA matrix `A = (data, offsets, shape)`.

    **Arguments:**

    - `data`: `(ndiag, n)` diagonal values, `data[k, j] == A[j - offsets[k], j]`; or
      `(B, ndiag, n)`, a batch of matrices with one structure (a batch grid axis).
    - `x`: `(n, k)` dense operand, same dtype as `data`; or `(B, n, k)` with batched `data`.
    - `offsets`: static Python ints, one per row of `data`, distinct, any order.
    - `shape`: static `(m, n)`.
    - `interpret`: run the kernel in Pallas interpret mode (any platform, slow).
    - `platform`: `"tpu"` or `"cpu"` (interpret mode); `None`: `"cpu"` when interpreting,
      else `"tpu"` (`kernels/_pallas.py`).
    - `block_sizes`: tiles; `None` fields take `BlockSizes.get_default`.

    **Returns:**

    `(m, k)` array of `x.dtype`, or `(B, m, k)` for a batch. Beyond `MAX_UNROLLED_DIAGONALS`
    diagonals inside the matrix, the kernel loops over them (`mosaic_tpu_dia_loop.py`).
    """
    m, n = shape
    lead = check_product(data, x, "x", offsets, shape, n)
    k = x.shape[-1]
    active_index, active_offsets = active_diagonals(offsets, shape)
    if k == 0 or not active_index or 0 in lead:
        return jnp.zeros((*lead, m, k), x.dtype)

    _pallas.resolve_platform(platform, interpret, _PLATFORMS)
    block_rows, block_cols = _tiles(block_sizes, m, k)
    active = data[..., np.asarray(active_index), :]
    if not unrolls_diagonals(offsets, shape):
        aligned = _each(transpose_data, active, offsets=active_offsets, shape=shape)
        return mosaic_tpu_dia_loop.rows_product(
            aligned,
            x,
            shifts=active_offsets,
            out_rows=m,
            block_rows=block_rows,
            block_cols=block_cols,
            interpret=interpret,
            params=_compiler_params,
        )
    window_start, window_end = min(active_offsets), max(active_offsets)
    window = _round_up(block_rows + window_end - window_start, _WINDOW_ALIGN)
    num_row_blocks = pl.cdiv(m, block_rows)
    num_col_blocks = pl.cdiv(k, block_cols)
    # Padded row p holds matrix column p - pad_top; the last window ends at padded row
    # (num_row_blocks - 1) * block_rows + window_start + pad_top + window.
    pad_top = max(0, -window_start)
    pad_bottom = max(0, (num_row_blocks - 1) * block_rows + window_start + window - n)
    cols = num_col_blocks * block_cols
    x_padded = _pallas.pad_last_two(x, (pad_top, pad_bottom), (0, cols - k))
    data_padded = _pallas.pad_last_two(jnp.swapaxes(active, -1, -2), (pad_top, pad_bottom), (0, 0))
    ndiag = len(active_offsets)
    batched_x = x.ndim == 3

    def window_map(i, j, *b):
        return (
            *_pallas.batch_indices(batched_x, b),
            i * block_rows + window_start + pad_top,
            j * block_cols,
        )

    def data_window_map(i, j, *b):
        return (*b, i * block_rows + window_start + pad_top, 0)

    kernel = functools.partial(
        _dia_matmul_kernel,
        offsets=active_offsets,
        window_start=window_start,
        block_rows=block_rows,
    )
    itemsize = x.dtype.itemsize
    vmem_bytes = (
        _vmem_block_bytes(window, ndiag, x.dtype)
        + _vmem_block_bytes(window, block_cols, x.dtype)
        + _vmem_block_bytes(block_rows, block_cols, x.dtype)
    )
    # The batch is the innermost grid axis: consecutive programs read the same window of a
    # shared `x` (from L2 on GPU; on TPU its DMA is skipped when the block does not change).
    grid = (num_row_blocks, num_col_blocks, *lead)
    members = lead[0] if lead else 1
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((*lead, m, k), x.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec(
                (*_pallas.squeezed(lead), pl.Element(window), pl.Element(ndiag)), data_window_map
            ),
            pl.BlockSpec(
                (
                    *_pallas.squeezed(lead if batched_x else ()),
                    pl.Element(window),
                    pl.Element(block_cols),
                ),
                window_map,
            ),
        ],
        out_specs=pl.BlockSpec(
            (*_pallas.squeezed(lead), block_rows, block_cols), lambda i, j, *b: (*b, i, j)
        ),
        compiler_params=_compiler_params(vmem_bytes, ("parallel",) * len(grid)),
        cost_estimate=pl.CostEstimate(
            flops=2 * ndiag * m * k * members,
            transcendentals=0,
            bytes_accessed=(ndiag * n + n * k + m * k) * itemsize * members,
        ),
        interpret=interpret,
        name="dia_matmul",
    )(data_padded, x_padded)


def dia_matmul_t_mosaic_tpu(
    data: jax.Array,
    g: jax.Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """`A^T @ g`: the product kernel run on `A^T`'s diagonals (offsets negated, each
    diagonal shifted by `transpose_data`, one extra read and write of `data`). Beyond
    `MAX_UNROLLED_DIAGONALS` diagonals, the looped kernel reads `data` where it is stored
    (masked to the slots inside the matrix) and shifts `g` instead.

    **Arguments:** as `dia_matmul_mosaic_tpu`, with `g` the `(m, k)` (or `(B, m, k)`) operand.

    **Returns:** `(n, k)` (or `(B, n, k)`) array of `g.dtype`.
    """
    m, n = shape
    lead = check_product(data, g, "g", offsets, shape, m)
    if g.shape[-1] == 0 or 0 in lead:
        return jnp.zeros((*lead, n, g.shape[-1]), g.dtype)
    if unrolls_diagonals(offsets, shape):
        return dia_matmul_mosaic_tpu(
            _each(transpose_data, data, offsets=offsets, shape=shape),
            g,
            offsets=negate_offsets(offsets),
            shape=(n, m),
            interpret=interpret,
            platform=platform,
            block_sizes=block_sizes,
        )
    active_index, active_offsets = active_diagonals(offsets, shape)
    _pallas.resolve_platform(platform, interpret, _PLATFORMS)
    block_rows, block_cols = _tiles(block_sizes, n, g.shape[-1])
    # Slot (d, j) is inside the matrix where its row j - offsets[d] is; index arrays built
    # in the program, not as a len(offsets) x n constant.
    rows = lax.iota(jnp.int32, n) - jnp.asarray(np.asarray(active_offsets, np.int32))[:, None]
    aligned = jnp.where((rows >= 0) & (rows < m), data[..., np.asarray(active_index), :], 0)
    return mosaic_tpu_dia_loop.rows_product(
        aligned,
        g,
        shifts=negate_offsets(active_offsets),
        out_rows=n,
        block_rows=block_rows,
        block_cols=block_cols,
        interpret=interpret,
        params=_compiler_params,
    )


def _dia_sddmm_kernel(
    g_ref,
    x_ref,
    out_ref,
    *,
    offsets: tuple[int, ...],
    window_end: int,
    num_rows: int,
    block_rows: int,
    block_cols: int,
):
    """Rows `[j0, j0 + block_rows)` of the transposed data gradient, `(block_rows, ndiag)`.

    `g_ref` is the `(window, cols)` window of `G` starting at row `j0 - window_end`; column
    `j` of diagonal `k` needs row `j - off` of `G`, at window row `j - j0 + window_end - off`.
    `x_ref` is the `(block_rows, cols)` block of `x`. The reduction over `cols` runs in chunks
    of `block_cols`. Slots whose row `j - off` is outside `[0, num_rows)` are set to zero, so
    they get no gradient even where `x` is not finite.
    """
    acc_dtype = accumulation_dtype(out_ref.dtype)
    num_chunks = x_ref.shape[1] // block_cols

    def accumulate(chunk, sums):
        cols = pl.ds(pl.multiple_of(chunk * block_cols, block_cols), block_cols)
        x_chunk = x_ref[:, cols].astype(acc_dtype)
        return tuple(
            total
            + jnp.sum(
                g_ref[pl.ds(window_end - off, block_rows), cols].astype(acc_dtype) * x_chunk,
                axis=1,
                keepdims=True,
            )
            for total, off in zip(sums, offsets, strict=True)
        )

    zeros = jnp.zeros((block_rows, 1), acc_dtype)
    # int32 bounds keep the loop index int32 under jax_enable_x64, as Mosaic requires.
    sums = jax.lax.fori_loop(
        jnp.int32(0), jnp.int32(num_chunks), accumulate, (zeros,) * len(offsets)
    )
    column = pl.program_id(0) * block_rows + jax.lax.broadcasted_iota(jnp.int32, (block_rows, 1), 0)
    for k, (off, total) in enumerate(zip(offsets, sums, strict=True)):
        row = column - off
        valid = (row >= 0) & (row < num_rows)
        out_ref[:, pl.ds(k, 1)] = jnp.where(valid, total, 0).astype(out_ref.dtype)


def dia_sddmm_mosaic_tpu(
    g: jax.Array,
    x: jax.Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """The gradient of `A @ x` with respect to `data`: the product sampled on the diagonals.

    `out[k, j] = sum_c g[j - offsets[k], c] * x[j, c]` where `0 <= j - offsets[k] < m`, else 0.
    A Pallas kernel rather than an XLA formulation: it reads `x` once and `g` once per
    window, where the jnp version (one shifted slice of `g` per diagonal, each multiplied by
    `x` and reduced) leaves it to XLA's sibling fusion whether `x` is read once or `ndiag`
    times. Beyond `MAX_UNROLLED_DIAGONALS` diagonals, the kernel loops over them
    (`mosaic_tpu_dia_loop.py`).

    **Arguments:**

    - `g`: `(m, k)` cotangent of the product, or `(B, m, k)` for a batch.
    - `x`: `(n, k)` dense operand, same dtype as `g`, or `(B, n, k)`; a 2-D one is shared.
    - `offsets`: static Python ints, distinct, any order.
    - `shape`: static `(m, n)`.
    - `interpret`, `platform`, `block_sizes`: as for `dia_matmul_mosaic_tpu`; here
      `block_rows` tiles the columns `j` and `block_cols` is the chunk of the reduction over `c`.

    **Returns:**

    `(len(offsets), n)` array of `x.dtype` (`(B, len(offsets), n)` if either argument is
    batched), zero on ignored slots and on diagonals outside the matrix.
    """
    m, n = shape
    check_sddmm(g, x, offsets, shape)
    lead = g.shape[:-2] or x.shape[:-2]
    k = x.shape[-1]
    active_index, active_offsets = active_diagonals(offsets, shape)
    if k == 0 or not active_index or 0 in lead:
        return jnp.zeros((*lead, len(offsets), n), x.dtype)

    _pallas.resolve_platform(platform, interpret, _PLATFORMS)
    block_rows, _ = _tiles(block_sizes, n, k)
    if unrolls_diagonals(offsets, shape):
        gradient = _sddmm_unrolled(g, x, active_offsets, shape, block_sizes, interpret)
    else:
        gradient = mosaic_tpu_dia_loop.sddmm_loop(
            g,
            x,
            offsets=active_offsets,
            shape=shape,
            block_rows=block_rows,
            interpret=interpret,
            params=_compiler_params,
        )
    if len(active_index) == len(offsets):
        return gradient
    full = jnp.zeros((*lead, len(offsets), n), x.dtype)
    return full.at[..., np.asarray(active_index), :].set(gradient)


def _sddmm_unrolled(g, x, offsets, shape, block_sizes, interpret):
    """`dia_sddmm_mosaic_tpu` for active `offsets` with one unrolled kernel:
    `(*batch, ndiag, n)`."""
    m, n = shape
    k = x.shape[-1]
    lead = g.shape[:-2] or x.shape[:-2]
    block_rows, block_cols = _tiles(block_sizes, n, k)
    window_start, window_end = min(offsets), max(offsets)
    window = _round_up(block_rows + window_end - window_start, _WINDOW_ALIGN)
    num_blocks = pl.cdiv(n, block_rows)
    cols = _round_up(k, block_cols)
    # Padded row p of g holds matrix row p - pad_top; the window of block b starts at matrix
    # row b * block_rows - window_end.
    pad_top = max(0, window_end)
    pad_bottom = max(0, (num_blocks - 1) * block_rows - window_end + window - m)
    g_padded = _pallas.pad_last_two(g, (pad_top, pad_bottom), (0, cols - k))
    x_padded = _pallas.pad_last_two(x, (0, 0), (0, cols - k))
    ndiag = len(offsets)
    batched_g, batched_x = g.ndim == 3, x.ndim == 3

    kernel = functools.partial(
        _dia_sddmm_kernel,
        offsets=offsets,
        window_end=window_end,
        num_rows=m,
        block_rows=block_rows,
        block_cols=block_cols,
    )
    vmem_bytes = (
        _vmem_block_bytes(window, cols, x.dtype)
        + _vmem_block_bytes(block_rows, cols, x.dtype)
        + _vmem_block_bytes(block_rows, ndiag, x.dtype)
    )
    members = lead[0] if lead else 1
    grid = (num_blocks, *lead)
    gradient_t = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((*lead, n, ndiag), x.dtype),
        grid=grid,
        in_specs=[
            pl.BlockSpec(
                (*_pallas.squeezed(g.shape[:-2]), pl.Element(window), pl.Element(cols)),
                lambda blk, *b: (
                    *_pallas.batch_indices(batched_g, b),
                    blk * block_rows - window_end + pad_top,
                    0,
                ),
            ),
            pl.BlockSpec(
                (*_pallas.squeezed(x.shape[:-2]), block_rows, cols),
                lambda blk, *b: (*_pallas.batch_indices(batched_x, b), blk, 0),
            ),
        ],
        out_specs=pl.BlockSpec(
            (*_pallas.squeezed(lead), block_rows, ndiag), lambda blk, *b: (*b, blk, 0)
        ),
        compiler_params=_compiler_params(vmem_bytes, ("parallel",) * len(grid)),
        cost_estimate=pl.CostEstimate(
            flops=2 * ndiag * n * k * members,
            transcendentals=0,
            bytes_accessed=(m * k + n * k + ndiag * n) * x.dtype.itemsize * members,
        ),
        interpret=interpret,
        name="dia_sddmm",
    )(g_padded, x_padded)
    return jnp.swapaxes(gradient_t, -1, -2)


def _each(function, data, **params):
    """`function(data, **params)` for one matrix's values, or each of a batch's."""
    if data.ndim == 3:
        return jax.vmap(functools.partial(function, **params))(data)
    return function(data, **params)
