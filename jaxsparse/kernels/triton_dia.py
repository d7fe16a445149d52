"""Triton (GPU) Pallas kernels for DIA matrices: product, transposed product, data gradient.

**Convention (scipy's).** `A` is `(m, n)` with `data` `(ndiag, n)` and static Python int
`offsets`: `data[d, j] == A[j - offsets[d], j]`. Slots whose row `j - offsets[d]` falls
outside `[0, m)` are ignored: they never change a product and get a zero gradient.

**Design: masked loads from the arrays where they lie.** No block specs and no padded or
transposed copies: every kernel takes whole arrays and reads them with masked
`plgpu.load`s at computed rows, and writes its output tile with one masked `plgpu.store`.
Output row `i` of `A @ x` reads, for each diagonal `d`, the stored value `data[d, i + off]`
and the operand row `x[i + off]`, both at the same column `i + off`: a tile of
`block_rows` output rows reads one contiguous run of each diagonal (coalesced) and one
shifted run of `x`'s rows, which neighbouring diagonals share through L1/L2. The masks
(`0 <= i + off < n`, `i < m`) make ignored slots and the tile's overhang read nothing,
so any offsets, any span and any shape take the same code, with no halo copy.

- `A^T @ g`: output row `j` reads `data[d, j]` (stored where it is, not shifted) and
  `g[j - off]`; no transposed diagonals are formed.
- Data gradient: `out[d, j] = sum_c g[j - off, c] * x[j, c]`: a program owns `block_rows`
  stored columns `j`, loads its `x` rows once per chunk of `block_cols` columns, and for
  each diagonal the shifted `g` rows; it writes each diagonal's run of `out` in place
  (the `(ndiag, n)` layout of `data`, no transpose). Ignored slots are set to exactly 0.

Offsets are Python ints in the kernel's closure and unroll at trace time up to
`MAX_UNROLLED_DIAGONALS` diagonals inside the matrix. Beyond, the kernels loop over the
diagonals (`lax.fori_loop`) and read each offset from an int32 array operand (built from
the static offsets), so the kernel does not grow with the number of diagonals.

**Batches** (`_primitive.py`, "Batches"): values `(B, ndiag, n)`, dense operands
`(B, rows, k)` or shared `(rows, k)`; the batch is the last grid axis, so consecutive
programs read the same rows of a shared operand (from L2). bfloat16 and float16
accumulate in float32.

**Bytes per product** (`v` bytes per value, `R = block_rows`): the product reads each
stored diagonal once (`ndiag * n * v`), `x` about once from HBM (`n * k * v`; the other
diagonals' shifted reads hit the cache) and writes `m * k * v`: the ideal bytes, with no
wrapper copies. The transposed product is the same with `m` and `n` swapped. The data
gradient reads `x` once, `g` once from HBM, and writes `ndiag * n * v`.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from .._dia_layout import active_diagonals, unrolls_diagonals
from . import _pallas
from ._bounds_check import load, store
from ._dia_checks import check_product, check_sddmm
from ._precision import accumulation_dtype

_PLATFORMS = ("cuda", "rocm", _pallas.INTERPRET_PLATFORM)
# The most bytes of values in one product tile (block_rows x block_cols).
_MAX_TILE_BYTES = 32 * 1024


def supports(dtype, platform: str) -> bool:
    """Whether the Triton DIA kernels take `dtype` on `platform`: every real floating
    dtype on `"cuda"`, `"rocm"` and in interpret mode (`"cpu"`). Complex values have no
    Triton type (the caller splits them into real planes); integers are not DIA values."""
    return platform in _PLATFORMS and jnp.issubdtype(jnp.dtype(dtype), jnp.floating)


@dataclasses.dataclass(frozen=True)
class BlockSizes(_pallas.BlockSizes):
    """Tiles and Triton knobs of the Triton DIA kernels.

    **Arguments:**

    - `block_rows`: output rows (or stored columns, for the data gradient) per program; a
      power of two, at least 32.
    - `block_cols`: columns of the dense operand per program (or per reduction step, for
      the data gradient); a power of two.
    - `num_warps`, `num_stages`: Triton's warps per program and software-pipelining stages.

    `None` fields take `default_block_sizes`.
    """

    block_rows: int | None = _pallas.tile(minimum=32)
    block_cols: int | None = _pallas.tile()
    num_warps: int | None = _pallas.tile()
    num_stages: int | None = _pallas.tile(power_of_two=False)


def default_block_sizes(kernel: str, num_cols: int, itemsize: int = 4) -> BlockSizes:
    """The Triton DIA kernels' default tiles for a dense operand of `num_cols` columns.

    Picked from `benchmarks/gpu_tiles.py` on an H100 (its figures are on the documentation's
    performance page): the product takes 256 rows and 8 warps at `k = 1` and 128 rows at
    larger `k`; the data gradient 256 stored columns and 4 warps up to `k = 8`, and 32
    columns by chunks of 32 beyond. A product tile holds at most 32 KiB of values:
    float64 at `k >= 64` takes 64 rows (128 rows spill registers in `make gpu-compile`).

    **Arguments:**

    - `kernel`: `"matmul"` (the product and the transposed product) or `"sddmm"`.
    - `num_cols`: `k`.
    - `itemsize`: bytes per value.

    **Returns:** a `BlockSizes` with every field set.
    """
    cols = pl.next_power_of_2(max(num_cols, 1))
    if kernel == "matmul":
        block_cols = min(cols, 64)
        rows = 256 if cols == 1 else 128
        return BlockSizes(
            block_rows=max(32, min(rows, _MAX_TILE_BYTES // (block_cols * itemsize))),
            block_cols=block_cols,
            num_warps=8 if cols <= 8 else 4,
        )
    if cols <= 8:
        return BlockSizes(block_rows=256, block_cols=cols, num_warps=4)
    return BlockSizes(block_rows=32, block_cols=32, num_warps=8)


def _tiles(kernel, platform, interpret, block_sizes, num_cols, itemsize):
    """`(block_rows, block_cols, compiler_params)`: `block_sizes` with `None` fields taken
    from `default_block_sizes`."""
    _pallas.resolve_platform(platform, interpret, _PLATFORMS)
    default = default_block_sizes(kernel, num_cols, itemsize)
    block_sizes = block_sizes or default
    block_rows = block_sizes.block_rows or default.block_rows
    block_cols = min(block_sizes.block_cols or default.block_cols, pl.next_power_of_2(num_cols))
    params = plgpu.CompilerParams(
        num_warps=block_sizes.num_warps or default.num_warps, num_stages=block_sizes.num_stages
    )
    return block_rows, block_cols, params


def _diagonal_loop(offsets, shape, body, init):
    """Run `body(d, off, carry)` over the diagonals: unrolled over the active ones (static
    `off`), or, beyond `MAX_UNROLLED_DIAGONALS`, a loop reading `off` from the offsets ref
    (the kernel's first argument, passed here as `offsets` when looping)."""
    if isinstance(offsets, tuple):
        carry = init
        for d in active_diagonals(offsets, shape)[0]:
            carry = body(d, offsets[d], carry)
        return carry
    return lax.fori_loop(
        jnp.int32(0),
        jnp.int32(offsets.shape[0]),
        lambda d, carry: body(d, offsets[d], carry),
        init,
    )


def _operand_rows(ref, batch, rows, cols, mask):
    """`ref[(batch,) rows, cols]`, a `(len(rows), len(cols))` tile, zero where masked."""
    return load(ref, (*batch, rows[:, None], cols[None, :]), mask=mask, other=0)


def _rows_kernel(
    *refs, offsets, shape, transposed, num_cols, block_rows, block_cols, batched_operand
):
    """One `(block_rows, block_cols)` tile of `A @ x` (or `A^T @ g`) for batch member
    `program_id(2)`, summed over the diagonals."""
    *offsets_ref, data_ref, operand_ref, out_ref = refs
    offsets = offsets_ref[0] if offsets_ref else offsets
    m, n = shape
    out_rows, in_rows = (n, m) if transposed else (m, n)
    b = pl.program_id(2)
    rows = pl.program_id(0) * block_rows + jnp.arange(block_rows, dtype=jnp.int32)
    cols = pl.program_id(1) * block_cols + jnp.arange(block_cols, dtype=jnp.int32)
    row_ok, col_ok = rows < out_rows, cols < num_cols
    acc_dtype = accumulation_dtype(out_ref.dtype)

    def add_diagonal(d, off, acc):
        source = rows - off if transposed else rows + off
        stored = rows if transposed else source
        inside = row_ok & (source >= 0) & (source < in_rows)
        values = load(data_ref, (b, d, stored), mask=inside, other=0)
        batch = (b,) if batched_operand else ()
        block = _operand_rows(operand_ref, batch, source, cols, inside[:, None] & col_ok[None, :])
        return acc + values.astype(acc_dtype)[:, None] * block.astype(acc_dtype)

    zeros = jnp.zeros((block_rows, block_cols), acc_dtype)
    acc = _diagonal_loop(offsets, shape, add_diagonal, zeros)
    store(
        out_ref,
        (b, rows[:, None], cols[None, :]),
        acc.astype(out_ref.dtype),
        mask=row_ok[:, None] & col_ok[None, :],
    )


def _rows_product(data, operand, *, offsets, shape, transposed, interpret, platform, block_sizes):
    """`A @ x` (or `A^T @ g` if `transposed`) for the `dia_matmul_triton` family."""
    m, n = shape
    out_rows, in_rows = (n, m) if transposed else (m, n)
    check_product(data, operand, "g" if transposed else "x", offsets, shape, in_rows)
    lead = data.shape[:-2]
    k = operand.shape[-1]
    if k == 0 or out_rows == 0 or not active_diagonals(offsets, shape)[0] or 0 in lead:
        return jnp.zeros((*lead, out_rows, k), operand.dtype)
    block_rows, block_cols, params = _tiles(
        "matmul", platform, interpret, block_sizes, k, operand.dtype.itemsize
    )
    batch = lead[0] if lead else 1
    looped = not unrolls_diagonals(offsets, shape)
    kernel = functools.partial(
        _rows_kernel,
        offsets=None if looped else offsets,
        shape=shape,
        transposed=transposed,
        num_cols=k,
        block_rows=block_rows,
        block_cols=block_cols,
        batched_operand=operand.ndim == 3,
    )
    ndiag = len(offsets)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((batch, out_rows, k), operand.dtype),
        grid=(pl.cdiv(out_rows, block_rows), pl.cdiv(k, block_cols), batch),
        compiler_params=params,
        cost_estimate=pl.CostEstimate(
            flops=2 * ndiag * out_rows * k * batch,
            transcendentals=0,
            bytes_accessed=(ndiag * n + in_rows * k + out_rows * k) * operand.itemsize * batch,
        ),
        interpret=interpret,
        name="dia_matmul_t" if transposed else "dia_matmul",
    )(*_offsets_operand(offsets, looped), data.reshape(batch, ndiag, n), operand)
    return out if lead else out[0]


def _offsets_operand(offsets, looped: bool) -> tuple:
    """The int32 offsets array the looping kernels read, or nothing when they unroll."""
    return (jnp.asarray(np.asarray(offsets, np.int32)),) if looped else ()


def dia_matmul_triton(
    data,
    x,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """`Y = A @ x` for the DIA matrix `A = (data, offsets, shape)`.

    **Arguments:**

    - `data`: `(ndiag, n)` diagonals (scipy's layout), or `(B, ndiag, n)` for a batch.
    - `x`: `(n, k)` dense operand of `data`'s dtype; `(B, n, k)` with batched `data`.
    - `offsets`, `shape`: static offsets (distinct Python ints) and `(m, n)`.
    - `interpret`: run in Pallas interpret mode (any machine).
    - `platform`: `"cuda"`, `"rocm"` or `"cpu"` (interpret); `None`: `"cpu"` when
      interpreting, else `"cuda"`.
    - `block_sizes`: `BlockSizes` (rows and columns per program, Triton's `num_warps` and
      `num_stages`); `None` fields take `default_block_sizes`.

    **Returns:** `(m, k)` in `x.dtype`, or `(B, m, k)` for a batch.
    """
    return _rows_product(
        data,
        x,
        offsets=offsets,
        shape=shape,
        transposed=False,
        interpret=interpret,
        platform=platform,
        block_sizes=block_sizes,
    )


def dia_matmul_t_triton(
    data,
    g,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """`A^T @ g`, reading the diagonals where they are stored and shifting `g`.

    **Arguments:** as `dia_matmul_triton`, with `g` the `(m, k)` (or `(B, m, k)`) operand.

    **Returns:** `(n, k)` in `g.dtype`, or `(B, n, k)` for a batch.
    """
    return _rows_product(
        data,
        g,
        offsets=offsets,
        shape=shape,
        transposed=True,
        interpret=interpret,
        platform=platform,
        block_sizes=block_sizes,
    )


def _sddmm_kernel(*refs, offsets, shape, num_cols, block_rows, block_cols, batched):
    """Stored columns `[j0, j0 + block_rows)` of every diagonal of the data gradient, for
    batch member `program_id(1)`; the reduction over `k` runs in chunks of `block_cols`.
    Unrolled, each chunk of `x` is loaded once for all diagonals; looping over the
    diagonals, once per diagonal (from the cache)."""
    *offsets_ref, g_ref, x_ref, out_ref = refs
    m, n = shape
    b = pl.program_id(1)
    columns = pl.program_id(0) * block_rows + jnp.arange(block_rows, dtype=jnp.int32)
    column_ok = columns < n
    acc_dtype = accumulation_dtype(out_ref.dtype)
    g_batch, x_batch = ((b,) if is_batched else () for is_batched in batched)
    num_chunks = pl.cdiv(num_cols, block_cols)

    def inside(off):
        source = columns - off
        return source, column_ok & (source >= 0) & (source < m)

    def chunk_products(chunk, diagonals, totals):
        """`totals` plus each diagonal's products with one chunk of `k` columns."""
        cols = chunk * block_cols + jnp.arange(block_cols, dtype=jnp.int32)
        col_ok = cols < num_cols
        x_rows = _operand_rows(x_ref, x_batch, columns, cols, column_ok[:, None] & col_ok)
        x_rows = x_rows.astype(acc_dtype)
        sums = []
        for off, total in zip(diagonals, totals, strict=True):
            source, mask = inside(off)
            g_rows = _operand_rows(g_ref, g_batch, source, cols, mask[:, None] & col_ok)
            sums.append(total + jnp.sum(g_rows.astype(acc_dtype) * x_rows, axis=1))
        return tuple(sums)

    def reduce_over_k(diagonals):
        zeros = (jnp.zeros((block_rows,), acc_dtype),) * len(diagonals)
        body = functools.partial(chunk_products, diagonals=diagonals)
        if num_chunks == 1:
            return body(0, totals=zeros)
        return lax.fori_loop(
            jnp.int32(0), jnp.int32(num_chunks), lambda c, t: body(c, totals=t), zeros
        )

    def store_diagonal(d, off, total):
        # Exactly zero on ignored slots, even where `x` is not finite.
        gradient = jnp.where(inside(off)[1], total, 0).astype(out_ref.dtype)
        store(out_ref, (b, d, columns), gradient, mask=column_ok)

    if not offsets_ref:
        active = active_diagonals(offsets, shape)[0]
        active_offsets = tuple(offsets[d] for d in active)
        for d, off, total in zip(
            active, active_offsets, reduce_over_k(active_offsets), strict=True
        ):
            store_diagonal(d, off, total)
        # Diagonals outside the matrix get their zeros here, in the same pass.
        zeros = jnp.zeros((block_rows,), out_ref.dtype)
        for d in sorted(set(range(len(offsets))) - set(active)):
            store(out_ref, (b, d, columns), zeros, mask=column_ok)
        return

    def one_diagonal(d, carry):
        off = offsets_ref[0][d]
        (total,) = reduce_over_k((off,))
        store_diagonal(d, off, total)
        return carry

    lax.fori_loop(jnp.int32(0), jnp.int32(offsets_ref[0].shape[0]), one_diagonal, jnp.int32(0))


def dia_sddmm_triton(
    g,
    x,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """The gradient of `A @ x` in `data`: `out[d, j] = sum_c g[j - offsets[d], c] * x[j, c]`
    where `0 <= j - offsets[d] < m`, else 0.

    **Arguments:** `g`: `(m, k)` or `(B, m, k)`; `x`: `(n, k)` or `(B, n, k)`, same dtype
    (a 2-D one is shared by the batch); the rest as `dia_matmul_triton`, with `block_rows`
    the stored columns per program and `block_cols` the chunk of the reduction over `k`.

    **Returns:** `(len(offsets), n)` in `x.dtype` (`(B, len(offsets), n)` if either
    argument is batched), zero on ignored slots and on diagonals outside the matrix.
    """
    m, n = shape
    check_sddmm(g, x, offsets, shape)
    lead = g.shape[:-2] or x.shape[:-2]
    k = x.shape[-1]
    ndiag = len(offsets)
    batch = lead[0] if lead else 1
    if k == 0 or n == 0 or not active_diagonals(offsets, shape)[0] or 0 in lead:
        return jnp.zeros((*lead, ndiag, n), x.dtype)
    block_rows, block_cols, params = _tiles(
        "sddmm", platform, interpret, block_sizes, k, x.dtype.itemsize
    )
    looped = not unrolls_diagonals(offsets, shape)
    kernel = functools.partial(
        _sddmm_kernel,
        offsets=None if looped else offsets,
        shape=shape,
        num_cols=k,
        block_rows=block_rows,
        block_cols=block_cols,
        batched=(g.ndim == 3, x.ndim == 3),
    )
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((batch, ndiag, n), x.dtype),
        grid=(pl.cdiv(n, block_rows), batch),
        compiler_params=params,
        cost_estimate=pl.CostEstimate(
            flops=2 * ndiag * n * k * batch,
            transcendentals=0,
            bytes_accessed=(m * k + n * k + ndiag * n) * x.dtype.itemsize * batch,
        ),
        interpret=interpret,
        name="dia_sddmm",
    )(*_offsets_operand(offsets, looped), g, x)
    return out if lead else out[0]
