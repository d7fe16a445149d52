"""Mosaic TPU Pallas kernels for CSR matrices: product, transposed product, SDDMM.

`A` is `(m, n)` with `data` `(nnz,)`, `indices` `(nnz,)` (the column of each entry) and
`indptr` `(m + 1,)`; row `i` holds the entries `p` in `[indptr[i], indptr[i + 1])`.

**Product.** TPU has no vector gather from HBM, so one program per block of
`block_rows` rows walks the block's entries in chunks of `block_nnz`: the chunk's column
indices go to SMEM by DMA, one DMA per entry brings row `x[indices[p]]` into a VMEM buffer
`(block_nnz, k)`, and the chunk is reduced into the block's rows with one MXU product
`W @ buffer`, where `W[r, p] = data[p]` if entry `p` lies in row `r` of the block (a
segmented sum as a dense `(block_rows, block_nnz)` one-hot matrix, built from `indptr` in
SMEM). Index arrays stay in HBM and are copied in windows, so nothing scales SMEM with `m`
or `nnz` (scalar-prefetching 10**7 indices would not fit in SMEM). Index arrays are cast
to int32 for TPU. The per-entry DMAs (unrolled, `block_nnz` in flight, not yet overlapped
with the previous chunk's MXU work) make this kernel latency-bound for small `k`: it is a
correct Mosaic kernel, and its lowering is checked, but its speed is unmeasured.

**Power-law rows.** The product is balanced over row blocks, not over entries: a block
whose rows hold `L` entries takes `ceil(L / block_nnz)` sequential steps while the others
finish.

**Transposed product** `A.T @ g`: the product kernel on the transposed structure, built in
XLA by a stable sort (`_csr_layout.transposed_structure`), as for Triton: TPU has no
atomics for a scatter.

**SDDMM.** Row ids are computed in XLA from `indptr`, the nonzeros are split into equal
chunks of `block_nnz` entries, one program per chunk, and both operand rows of every entry
are DMA'd into VMEM.

**Batches** (`_primitive.py`, "Batches": values `(B, nnz)`, dense operands `(B, rows, k)` or
shared). Each program loops over the `B` members inside: a chunk's column indices and row
ids reach SMEM once, one DMA brings the chunk's values of all members, and a shared
operand's rows are gathered once; a batched operand's rows are gathered per member. The
accumulator is a `(B, block_rows, k)` float32 VMEM buffer. One matrix is a batch of one.

**Invalid structures give NaN, never an out-of-bounds DMA.** Every DMA position is clamped
inside its array (a column outside `[0, n)`, a window start or an entry count that an
invalid `indptr` claims), and a structure with any fault of `_csr_layout.structure_faults`
makes every element of a result NaN (checked in XLA on the indices as given, before their
int32 cast). The TPU interpreter (`pltpu.InterpretParams(out_of_bounds_reads="raise")`)
checks both in the tests.

bfloat16 accumulates in float32. Lowering needs an abstract TPU mesh on a machine without
a TPU (the DMA lowering asks the device kind).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .._csr_layout import row_ids
from . import _pallas
from ._csr_common import (
    check_dense,
    check_sddmm,
    check_structure,
    matmul_t_by_transposed_structure,
    nan_if_invalid,
)
from ._precision import accumulation_dtype

_PLATFORMS = ("tpu", _pallas.INTERPRET_PLATFORM)


def supports(dtype, platform: str) -> bool:
    """Whether the Mosaic TPU kernels take `dtype` on `platform`.

    float32 and bfloat16 on `"tpu"` and in interpret mode (`"cpu"`): TPU has no float64 or
    complex vector unit, and float16 is not a native TPU type.
    """
    if platform not in _PLATFORMS:
        return False
    return jnp.dtype(dtype) in (jnp.bfloat16, jnp.float32)


@dataclasses.dataclass(frozen=True)
class BlockSizes(_pallas.BlockSizes):
    """Block sizes of the Mosaic TPU CSR kernels.

    - `block_nnz`: entries per loop step (product) or per program (SDDMM); a power of 2,
      at least 8 (TPU sublanes).
    - `block_rows`: rows per program of the product; a power of 2, at least 8.

    `None` fields are filled by `get_default`. The kernels take all `k` columns at once.
    """

    block_nnz: int | None = _pallas.tile(minimum=8)
    block_rows: int | None = _pallas.tile(minimum=8)

    @classmethod
    def get_default(cls, *, platform: str, num_cols: int) -> "BlockSizes":
        """Defaults on `platform` (`"tpu"`, or `"cpu"` for interpret mode) for `num_cols`."""
        del num_cols
        _pallas.check_platform(platform, _PLATFORMS)
        return cls(block_nnz=128, block_rows=8)

    def filled(self, *, platform: str, num_cols: int) -> "BlockSizes":
        """These block sizes with `None` fields taken from `get_default`."""
        return self.filled_from(self.get_default(platform=platform, num_cols=num_cols))


def _resolve(platform, interpret, block_sizes, num_cols):
    platform = _pallas.resolve_platform(platform, interpret, _PLATFORMS)
    return (block_sizes or BlockSizes()).filled(platform=platform, num_cols=num_cols)


def _pad_to(array, length, value=0):
    if array.shape[-1] >= length:
        return array
    widths = [(0, 0)] * (array.ndim - 1) + [(0, length - array.shape[-1])]
    return jnp.pad(array, widths, constant_values=value)


# Index arrays are int32 and live in HBM (`pl.ANY`).


def _gather_rows(src_hbm, dst_vmem, positions_smem, sem, offset):
    """`dst_vmem[p] = src_hbm[positions_smem[p + offset]]` by one DMA per row.

    Rows whose `p + offset` falls past the window repeat its last position.
    """
    num_rows, last_row = dst_vmem.shape[0], np.int32(src_hbm.shape[0] - 1)
    # Unrolled: the row count is static and small, and the DMA issue loop has no carry.
    for p in range(num_rows):
        position = positions_smem[jnp.minimum(offset + np.int32(p), np.int32(num_rows - 1))]
        # An invalid structure's position is clamped: no DMA leaves `src_hbm` (the
        # wrappers make such a result NaN).
        position = jnp.clip(position, np.int32(0), last_row)
        pltpu.make_async_copy(src_hbm.at[pl.ds(position, 1)], dst_vmem.at[pl.ds(p, 1)], sem).start()
    # A wait on the whole buffer consumes the bytes of all `num_rows` row copies.
    pltpu.make_async_copy(dst_vmem, dst_vmem, sem).wait()


def _matmul_kernel(
    indptr_hbm, indices_hbm, data_hbm, x_hbm, out_ref,
    indptr_smem, cols_smem, data_vmem, x_vmem, acc_vmem, data_sem, x_sem,
    *, block_rows, block_nnz, num_rows, nnz, shared_x,
):  # fmt: skip
    # Windows are clamped inside the arrays (the wrapper pads them to at least one
    # window); `*_base` is the absolute position of a window's first element. Integer
    # constants are int32 so the kernel also lowers when x64 is enabled. `data_hbm` is
    # `(batch, nnz)`, `x_hbm` `(n, k)` if `shared_x` else `(batch, n, k)`.
    batch = data_vmem.shape[0]
    block_first_row = pl.program_id(0) * np.int32(block_rows)
    row_base = jnp.minimum(block_first_row, np.int32(num_rows - block_rows))
    pltpu.sync_copy(indptr_hbm.at[pl.ds(row_base, block_rows + 1)], indptr_smem)
    first_row = block_first_row - row_base
    starts = [indptr_smem[first_row + np.int32(r)] for r in range(block_rows + 1)]
    block_start, block_end = starts[0], starts[block_rows]
    row_ids = lax.broadcasted_iota(jnp.int32, (block_rows, block_nnz), 0)
    row_lo = jnp.zeros((block_rows, block_nnz), jnp.int32)
    row_hi = jnp.zeros((block_rows, block_nnz), jnp.int32)
    for r in range(block_rows):
        row_lo = jnp.where(row_ids == np.int32(r), starts[r], row_lo)
        row_hi = jnp.where(row_ids == np.int32(r), starts[r + 1], row_hi)
    acc_dtype = accumulation_dtype(out_ref.dtype)
    acc_vmem[...] = jnp.zeros_like(acc_vmem)

    def body(step, carry):
        chunk_start = block_start + step * np.int32(block_nnz)
        base = jnp.clip(chunk_start, np.int32(0), np.int32(nnz - block_nnz))
        pltpu.sync_copy(indices_hbm.at[pl.ds(base, block_nnz)], cols_smem)
        data_copy = pltpu.make_async_copy(
            data_hbm.at[:, pl.ds(base, block_nnz)], data_vmem, data_sem
        )
        data_copy.start()
        if shared_x:
            _gather_rows(x_hbm, x_vmem, cols_smem, x_sem, np.int32(0))
        data_copy.wait()
        position = base + lax.broadcasted_iota(jnp.int32, (block_rows, block_nnz), 1)
        in_row = (position >= row_lo) & (position < row_hi) & (position >= chunk_start)
        # Rows of the buffer outside the block may be any finite or non-finite values of x.
        position_col = base + lax.broadcasted_iota(jnp.int32, x_vmem.shape, 0)
        in_block = (position_col >= chunk_start) & (position_col < block_end)

        def member(b, carry):
            if not shared_x:
                _gather_rows(x_hbm.at[b], x_vmem, cols_smem, x_sem, np.int32(0))
            x_rows = jnp.where(in_block, x_vmem[...].astype(acc_dtype), 0)
            values = data_vmem[pl.ds(b, 1), :].astype(acc_dtype)
            weights = jnp.where(in_row, values, 0)
            acc_vmem[b] += jnp.dot(
                weights, x_rows, precision=lax.Precision.HIGHEST, preferred_element_type=acc_dtype
            )
            return carry

        return lax.fori_loop(np.int32(0), np.int32(batch), member, carry)

    # At most the steps of all entries, whatever an invalid `indptr` claims.
    entries = jnp.clip(block_end - block_start, np.int32(0), np.int32(nnz))
    num_steps = (entries + np.int32(block_nnz - 1)) // np.int32(block_nnz)
    lax.fori_loop(np.int32(0), num_steps, body, np.int32(0))
    out_ref[...] = acc_vmem[...].astype(out_ref.dtype)


def _sddmm_kernel(
    rows_hbm, indices_hbm, g_hbm, x_hbm, out_ref,
    rows_smem, cols_smem, g_vmem, x_vmem, g_sem, x_sem,
    *, block_nnz, nnz, batched,
):  # fmt: skip
    """`g_hbm` and `x_hbm` are each `(rows, k)` (shared) or `(batch, rows, k)` per
    `batched`; `out_ref` is the `(batch, block_nnz, 1)` block."""
    block_start = pl.program_id(0) * np.int32(block_nnz)
    base = jnp.minimum(block_start, np.int32(nnz - block_nnz))
    pltpu.sync_copy(rows_hbm.at[pl.ds(base, block_nnz)], rows_smem)
    pltpu.sync_copy(indices_hbm.at[pl.ds(base, block_nnz)], cols_smem)
    # The last window is clamped; `shift` puts entry `block start + p` in buffer row `p`.
    shift = block_start - base
    if not batched[0]:
        _gather_rows(g_hbm, g_vmem, rows_smem, g_sem, shift)
    if not batched[1]:
        _gather_rows(x_hbm, x_vmem, cols_smem, x_sem, shift)
    acc_dtype = accumulation_dtype(out_ref.dtype)

    def member(b, carry):
        if batched[0]:
            _gather_rows(g_hbm.at[b], g_vmem, rows_smem, g_sem, shift)
        if batched[1]:
            _gather_rows(x_hbm.at[b], x_vmem, cols_smem, x_sem, shift)
        products = g_vmem[...].astype(acc_dtype) * x_vmem[...].astype(acc_dtype)
        out_ref[b] = jnp.sum(products, axis=1, keepdims=True).astype(out_ref.dtype)
        return carry

    lax.fori_loop(np.int32(0), np.int32(out_ref.shape[0]), member, np.int32(0))


def csr_matmul_mosaic_tpu(
    data,
    x,
    indices,
    indptr,
    *,
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """`Y = A @ x` for the CSR matrix `A = (data, indices, indptr)`.

    **Arguments:**

    - `data`, `x`: the `(nnz,)` values and the dense `(n, k)` operand, one dtype; or a
      batch: `(B, nnz)` values and a `(B, n, k)` or shared `(n, k)` operand.
    - `indices`, `indptr`: the CSR structure (`(nnz,)`, `(m + 1,)`).
    - `shape`: `(m, n)`, static.
    - `interpret`: run the kernel in Pallas interpret mode (any machine).
    - `platform`: `"tpu"` or `"cpu"` (interpret mode); `None`: `"cpu"` when interpreting.
    - `block_sizes`: `None` fields take `BlockSizes.get_default`.

    **Returns:** `(m, k)` array in `x`'s dtype (`(B, m, k)` for a batch); NaN throughout
    for an invalid structure.
    """
    # Checked on the indices as given, before the kernel's int32 cast could wrap one.
    out = _matmul(data, x, indices, indptr, shape, interpret, platform, block_sizes)
    return nan_if_invalid(out, indices, indptr, shape[1])


def _matmul(data, x, indices, indptr, shape, interpret, platform, block_sizes):
    """`csr_matmul_mosaic_tpu` for a structure taken as valid (the kernel stays in bounds
    for any, but its answer means nothing for an invalid one)."""
    m, n = shape
    check_structure(data, indices, indptr, shape)
    batch = data.shape[0] if data.ndim == 2 else None
    check_dense("x", x, n, data.dtype, batch)
    k = x.shape[-1]
    lead = data.shape[:-1]
    block_sizes = _resolve(platform, interpret, block_sizes, k)
    if m == 0 or k == 0 or data.shape[-1] == 0 or n == 0 or 0 in lead:
        return jnp.zeros((*lead, m, k), x.dtype)
    block_rows, block_nnz = block_sizes.block_rows, block_sizes.block_nnz
    nnz = data.shape[-1]
    members = batch or 1
    # Only matrices smaller than one window are padded, so the copies stay tiny.
    indptr = _pad_to(indptr.astype(jnp.int32), block_rows + 1, value=nnz)
    indices = _pad_to(indices.astype(jnp.int32), block_nnz)
    data = _pad_to(data.reshape(members, nnz), block_nnz)
    kernel = functools.partial(
        _matmul_kernel,
        block_rows=block_rows,
        block_nnz=block_nnz,
        num_rows=indptr.shape[0] - 1,
        nnz=indices.shape[0],
        shared_x=x.ndim == 2,
    )
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    out = pl.pallas_call(
        kernel,
        grid=(pl.cdiv(m, block_rows),),
        in_specs=[any_spec] * 4,
        out_specs=pl.BlockSpec((members, block_rows, k), lambda b: (0, b, 0)),
        out_shape=jax.ShapeDtypeStruct((members, m, k), x.dtype),
        scratch_shapes=[
            pltpu.SMEM((block_rows + 1,), jnp.int32),
            pltpu.SMEM((block_nnz,), jnp.int32),
            pltpu.VMEM((members, block_nnz), data.dtype),
            pltpu.VMEM((block_nnz, k), x.dtype),
            pltpu.VMEM((members, block_rows, k), accumulation_dtype(x.dtype)),
            pltpu.SemaphoreType.DMA(()),
            pltpu.SemaphoreType.DMA(()),
        ],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=interpret,
        name="csr_matmul",
    )(indptr, indices, data, x)
    return out if batch else out[0]


def csr_matmul_t_mosaic_tpu(
    data,
    g,
    indices,
    indptr,
    *,
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """`Y = A.T @ g`: the product kernel on the transposed structure, built in XLA.

    **Arguments:** as `csr_matmul_mosaic_tpu`, with `g` the `(m, k)` operand.

    **Returns:** `(n, k)` array in `g`'s dtype (`(B, n, k)` for a batch).
    """

    # The product of a structure built from one that the helper checks.
    def matmul(data, g, indices, indptr, *, shape):
        return _matmul(data, g, indices, indptr, shape, interpret, platform, block_sizes)

    return matmul_t_by_transposed_structure(matmul, data, g, indices, indptr, shape=shape)


def csr_sddmm_mosaic_tpu(
    g,
    x,
    indices,
    indptr,
    *,
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """Sampled product `out[p] = sum_c g[row(p), c] * x[indices[p], c]`: the gradient of
    `A @ x` with respect to `data` (cotangent `g`).

    **Arguments:** `g`: `(m, k)`; `x`: `(n, k)`, same dtype; the rest as
    `csr_matmul_mosaic_tpu`.

    **Returns:** `(nnz,)` array in `g`'s dtype (`(B, nnz)` if `g` or `x` is a `(B, rows, k)`
    batch).
    """
    check_sddmm(g, x, indices, indptr, shape)
    given = (indices, indptr)  # before the int32 cast, which could wrap an invalid index
    nnz, k = indices.shape[0], g.shape[-1]
    batch = next((a.shape[0] for a in (g, x) if a.ndim == 3), None)
    lead = (batch,) if batch is not None else ()
    block_sizes = _resolve(platform, interpret, block_sizes, k)
    if nnz > 0 and 0 in shape:
        return jnp.full((*lead, nnz), jnp.nan, g.dtype)  # entries with no place
    if nnz == 0 or k == 0 or 0 in lead:
        return jnp.zeros((*lead, nnz), g.dtype)
    block_nnz = block_sizes.block_nnz
    members = batch or 1
    rows = _pad_to(row_ids(indptr, nnz).astype(jnp.int32), block_nnz)
    indices = _pad_to(indices.astype(jnp.int32), block_nnz)
    kernel = functools.partial(
        _sddmm_kernel, block_nnz=block_nnz, nnz=indices.shape[0], batched=(g.ndim == 3, x.ndim == 3)
    )
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    out = pl.pallas_call(
        kernel,
        grid=(pl.cdiv(nnz, block_nnz),),
        in_specs=[any_spec] * 4,
        out_specs=pl.BlockSpec((members, block_nnz, 1), lambda b: (0, b, 0)),
        out_shape=jax.ShapeDtypeStruct((members, nnz, 1), g.dtype),
        scratch_shapes=[
            pltpu.SMEM((block_nnz,), jnp.int32),
            pltpu.SMEM((block_nnz,), jnp.int32),
            pltpu.VMEM((block_nnz, k), g.dtype),
            pltpu.VMEM((block_nnz, k), x.dtype),
            pltpu.SemaphoreType.DMA(()),
            pltpu.SemaphoreType.DMA(()),
        ],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=interpret,
        name="csr_sddmm",
    )(rows, indices, g, x)
    return nan_if_invalid(out[..., 0] if batch else out[0, :, 0], *given, shape[1])
