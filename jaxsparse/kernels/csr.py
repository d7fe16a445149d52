"""Pallas kernels for CSR matrices: the product, the transposed product and the SDDMM.

`A` is `(m, n)` with `data` `(nnz,)`, `indices` `(nnz,)` (the column of each entry) and
`indptr` `(m + 1,)`; row `i` holds the entries `p` in `[indptr[i], indptr[i + 1])`.

**Product `A @ x`, GPU (Triton).** One program per (row, block of `block_k` columns of `x`).
It loops over its row's entries in chunks of `block_nnz` (`lax.fori_loop` whose trip count
`ceil(row_length / block_nnz)` comes from `indptr`), gathers `x[indices[chunk], k-block]`
with one masked `plgpu.load` and accumulates the chunk's weighted sum. Total work is
`sum_i ceil(len_i / block_nnz) + m` chunk steps, i.e. proportional to `nnz + m`, never to
`m * longest_row`. This is the "CSR-vector" scheme (Bell and Garland 2009) rather than a
merge-path split because it needs no atomics, no fix-up pass and no per-entry row ids (the
row id would add `nnz * i` bytes to a memory-bound kernel); empty rows cost one program
that loads two `indptr` values and writes zeros.

**Product, TPU (Mosaic).** TPU has no vector gather from HBM, so one program per block of
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

**Power-law rows.** Both products are balanced over rows, not over entries: a row (GPU) or
row block (TPU) of length `L` is processed by one program in `ceil(L / block_nnz)`
sequential steps while the others finish. The total work stays `O(nnz + m)`, but when one
row holds most of the entries its program is the critical path (about `L / block_nnz`
steps on one SM or core), so the kernel then runs at the speed of one core, not of the
chip. Typical power-law graphs (longest row a few thousand entries among millions) stay
bandwidth-bound; a matrix dominated by one row is better served by its transpose (a
column) or by the XLA path.

**Transposed product `A.T @ g`.** The transposed structure is computed in XLA inside
`csr_matmul_transpose` (a stable argsort of `indices`, `O(nnz log nnz)` per call) and fed to
the product kernel. A scatter kernel would need atomics, which TPU lacks and which on GPU
are non-deterministic and limited to float32 for this use; the sort is deterministic,
correct for repeated column indices and reuses the tested product kernel. Callers that
multiply by `A.T` often should store `A.T` as a CSR matrix once.

**SDDMM.** `out[p] = sum_c g[row(p), c] * x[indices[p], c]`. Row ids are computed in XLA
from `indptr` (`O(nnz + m)`), then the nonzeros are split into equal chunks of `block_nnz`
entries, one program per chunk, so power-law rows are perfectly balanced. The GPU kernel
gathers both operand rows with masked `plgpu.load`s; the TPU kernel DMAs them into VMEM.

**Bytes per product** (`v`, `i`: bytes per value and per index). Product:
`nnz * (v + i) + (m + 1) * i + nnz * k * v` (gathered rows of `x`, at most `n * k * v` from
HBM when caches hold `x`) `+ m * k * v`. Transposed product: the same with `m` and `n`
swapped, plus the sort (about `nnz * (v + 3 * i)` read and written a few times).
SDDMM: `nnz * (v + 2 * i) + (m + 1) * i` plus the gathered rows of `g` and `x`.

All kernels accumulate bfloat16 and float16 in float32 and cast the result back.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu

from .reference import accumulation_dtype, csr_row_ids

_GPU_PLATFORMS = ("cuda", "rocm")


def pallas_supports(dtype, platform: str) -> bool:
    """Whether the Pallas kernels take `dtype` on `platform`.

    - `"cpu"` (interpret mode): every real floating dtype. Complex returns False: interpret
      mode cannot allocate a complex output (its uninitialized-value fill raises
      `NotImplementedError`), and the kernels it interprets are the Triton ones anyway.
    - `"cuda"`, `"rocm"` (Triton): float16, bfloat16, float32, float64. Triton has no
      complex type, so complex returns False.
    - `"tpu"` (Mosaic): float32 and bfloat16. TPU has no float64 or complex vector unit,
      and float16 is not a native TPU type (neither is checked by our lowering tests), so
      those return False.
    - any other platform: False.

    **Arguments:**

    - `dtype`: dtype of `data` and of the dense operand.
    - `platform`: `"cuda"`, `"rocm"`, `"tpu"` or `"cpu"`.

    **Returns:** `True` if the kernels accept `dtype` there; `False` routes the caller to XLA.
    """
    dtype = jnp.dtype(dtype)
    if platform == "cpu":
        return jnp.issubdtype(dtype, jnp.floating)
    if platform in _GPU_PLATFORMS:
        return dtype in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64)
    if platform == "tpu":
        return dtype in (jnp.bfloat16, jnp.float32)
    return False


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Block sizes of the CSR kernels.

    - `block_nnz`: entries per loop step (product) or per program (SDDMM); a power of 2,
      at least 8 (TPU sublanes).
    - `block_k`: columns of the dense operand per program (GPU only; a power of 2). The TPU
      kernels take all `k` columns at once.
    - `block_rows`: rows per program of the TPU product (a multiple of 8); GPU uses one row.
    """

    block_nnz: int
    block_k: int
    block_rows: int

    def __post_init__(self):
        for name in ("block_nnz", "block_k", "block_rows"):
            value = getattr(self, name)
            if value <= 0 or value & (value - 1):
                raise ValueError(f"{name}={value} must be a positive power of 2")
        if self.block_rows < 8:
            raise ValueError(f"{self.block_rows=} must be at least 8 (TPU sublanes)")
        if self.block_nnz < 8:
            raise ValueError(f"{self.block_nnz=} must be at least 8 (TPU sublanes)")

    @classmethod
    def get_default(cls, k: int, platform: str) -> "BlockSizes":
        """Defaults for a dense operand with `k` columns on `platform`."""
        block_k = min(pl.next_power_of_2(k), 64)
        if platform == "tpu":
            return cls(block_nnz=128, block_k=block_k, block_rows=8)
        # Small k: long chunks keep the loads wide; large k: keep the (nnz, k) tile ~8K.
        return cls(block_nnz=max(16, min(256, 8192 // block_k)), block_k=block_k, block_rows=8)


# ----------------------------------------------------------------------------------------
# GPU (Triton) kernel bodies.


def _matmul_kernel_gpu(indptr_ref, indices_ref, data_ref, x_ref, out_ref, *, block_nnz, block_k, k):
    row = pl.program_id(0)
    k_start = pl.program_id(1) * block_k
    k_slice = pl.ds(k_start, block_k)
    k_cols = k_start + jnp.arange(block_k, dtype=jnp.int32)
    k_mask = k_cols < k
    start = indptr_ref[row]
    end = indptr_ref[row + 1]
    index_dtype = start.dtype
    acc_dtype = accumulation_dtype(out_ref.dtype)
    offsets = jnp.arange(block_nnz, dtype=index_dtype)

    def body(step, acc):
        chunk_start = start + step.astype(index_dtype) * block_nnz
        mask = chunk_start + offsets < end
        chunk = pl.ds(chunk_start, block_nnz)
        cols = plgpu.load(indices_ref.at[chunk], mask=mask, other=0)
        vals = plgpu.load(data_ref.at[chunk], mask=mask, other=0)
        x_rows = plgpu.load(
            x_ref.at[cols[:, None], k_cols[None, :]], mask=mask[:, None] & k_mask[None, :], other=0
        )
        return acc + jnp.sum(vals.astype(acc_dtype)[:, None] * x_rows.astype(acc_dtype), axis=0)

    num_steps = ((end - start + block_nnz - 1) // block_nnz).astype(jnp.int32)
    acc = lax.fori_loop(0, num_steps, body, jnp.zeros((block_k,), acc_dtype))
    plgpu.store(out_ref.at[row, k_slice], acc.astype(out_ref.dtype), mask=k_mask)


def _sddmm_kernel_gpu(rows_ref, indices_ref, g_ref, x_ref, out_ref, *, block_nnz, block_k, k, nnz):
    chunk_start = pl.program_id(0) * block_nnz
    chunk = pl.ds(chunk_start, block_nnz)
    mask = chunk_start + jnp.arange(block_nnz, dtype=jnp.int32) < nnz
    rows = plgpu.load(rows_ref.at[chunk], mask=mask, other=0)
    cols = plgpu.load(indices_ref.at[chunk], mask=mask, other=0)
    acc_dtype = accumulation_dtype(out_ref.dtype)

    def body(step, acc):
        k_cols = (step * block_k + jnp.arange(block_k, dtype=jnp.int32))[None, :]
        mask_2d = mask[:, None] & (k_cols < k)
        g_rows = plgpu.load(g_ref.at[rows[:, None], k_cols], mask=mask_2d, other=0)
        x_rows = plgpu.load(x_ref.at[cols[:, None], k_cols], mask=mask_2d, other=0)
        return acc + jnp.sum(g_rows.astype(acc_dtype) * x_rows.astype(acc_dtype), axis=1)

    acc = lax.fori_loop(0, pl.cdiv(k, block_k), body, jnp.zeros((block_nnz,), acc_dtype))
    plgpu.store(out_ref.at[chunk], acc.astype(out_ref.dtype), mask=mask)


# ----------------------------------------------------------------------------------------
# TPU (Mosaic) kernel bodies. Index arrays are int32 and live in HBM (`pl.ANY`).


def _gather_rows_tpu(src_hbm, dst_vmem, positions_smem, sem, offset):
    """`dst_vmem[p] = src_hbm[positions_smem[p + offset]]` by one DMA per row.

    Rows whose `p + offset` falls past the window repeat its last position.
    """
    num_rows = dst_vmem.shape[0]
    # Unrolled: the row count is static and small, and the DMA issue loop has no carry.
    for p in range(num_rows):
        position = positions_smem[jnp.minimum(offset + np.int32(p), np.int32(num_rows - 1))]
        pltpu.make_async_copy(src_hbm.at[pl.ds(position, 1)], dst_vmem.at[pl.ds(p, 1)], sem).start()
    # A wait on the whole buffer consumes the bytes of all `num_rows` row copies.
    pltpu.make_async_copy(dst_vmem, dst_vmem, sem).wait()


def _matmul_kernel_tpu(
    indptr_hbm, indices_hbm, data_hbm, x_hbm, out_ref,
    indptr_smem, cols_smem, data_vmem, x_vmem, data_sem, x_sem,
    *, block_rows, block_nnz, num_rows, nnz,
):  # fmt: skip
    # Windows are clamped inside the arrays (the wrapper pads them to at least one
    # window); `*_base` is the absolute position of a window's first element. Integer
    # constants are int32 so the kernel also lowers when x64 is enabled.
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

    def body(step, acc):
        chunk_start = block_start + step * np.int32(block_nnz)
        base = jnp.minimum(chunk_start, np.int32(nnz - block_nnz))
        pltpu.sync_copy(indices_hbm.at[pl.ds(base, block_nnz)], cols_smem)
        data_copy = pltpu.make_async_copy(
            data_hbm.at[:, pl.ds(base, block_nnz)], data_vmem, data_sem
        )
        data_copy.start()
        _gather_rows_tpu(x_hbm, x_vmem, cols_smem, x_sem, np.int32(0))
        data_copy.wait()
        position = base + lax.broadcasted_iota(jnp.int32, (block_rows, block_nnz), 1)
        in_row = (position >= row_lo) & (position < row_hi) & (position >= chunk_start)
        weights = jnp.where(in_row, data_vmem[...].astype(acc_dtype), 0)
        # Rows of the buffer outside the block may be any finite or non-finite values of x.
        position_col = base + lax.broadcasted_iota(jnp.int32, x_vmem.shape, 0)
        in_block = (position_col >= chunk_start) & (position_col < block_end)
        x_rows = jnp.where(in_block, x_vmem[...].astype(acc_dtype), 0)
        return acc + jnp.dot(
            weights, x_rows, precision=lax.Precision.HIGHEST, preferred_element_type=acc_dtype
        )

    num_steps = (block_end - block_start + np.int32(block_nnz - 1)) // np.int32(block_nnz)
    acc = lax.fori_loop(np.int32(0), num_steps, body, jnp.zeros(out_ref.shape, acc_dtype))
    out_ref[...] = acc.astype(out_ref.dtype)


def _sddmm_kernel_tpu(
    rows_hbm, indices_hbm, g_hbm, x_hbm, out_ref,
    rows_smem, cols_smem, g_vmem, x_vmem, g_sem, x_sem,
    *, block_nnz, nnz,
):  # fmt: skip
    block_start = pl.program_id(0) * np.int32(block_nnz)
    base = jnp.minimum(block_start, np.int32(nnz - block_nnz))
    pltpu.sync_copy(rows_hbm.at[pl.ds(base, block_nnz)], rows_smem)
    pltpu.sync_copy(indices_hbm.at[pl.ds(base, block_nnz)], cols_smem)
    # The last window is clamped; `shift` puts entry `block start + p` in buffer row `p`.
    shift = block_start - base
    _gather_rows_tpu(g_hbm, g_vmem, rows_smem, g_sem, shift)
    _gather_rows_tpu(x_hbm, x_vmem, cols_smem, x_sem, shift)
    acc_dtype = accumulation_dtype(out_ref.dtype)
    products = g_vmem[...].astype(acc_dtype) * x_vmem[...].astype(acc_dtype)
    out_ref[...] = jnp.sum(products, axis=1, keepdims=True).astype(out_ref.dtype)


# ----------------------------------------------------------------------------------------
# Wrappers.


def _resolve_platform(platform: str | None) -> str:
    """The kernel variant to build: `"tpu"`, or a GPU platform for the Triton-style kernels.

    `"cpu"` (interpret mode on a CPU) and `None` off TPU run the Triton-style kernels.
    """
    if platform is None:
        platform = "tpu" if jax.default_backend() == "tpu" else "cuda"
    if platform == "cpu":
        return "cuda"
    if platform not in (*_GPU_PLATFORMS, "tpu"):
        raise ValueError(f"{platform=} must be one of 'cuda', 'rocm', 'tpu', 'cpu' or None")
    return platform


def _check_structure(data, indices, indptr, shape):
    m, _ = shape
    if indices.ndim != 1 or indptr.ndim != 1:
        raise ValueError(f"{indices.shape=} and {indptr.shape=} must be 1-D")
    if data is not None and data.shape != indices.shape:
        raise ValueError(f"{data.shape=} must equal {indices.shape=}")
    if indptr.shape != (m + 1,):
        raise ValueError(f"{indptr.shape=} must be (m + 1,) for {shape=}")
    if indices.dtype != indptr.dtype or indices.dtype not in (jnp.int32, jnp.int64):
        raise ValueError(f"{indices.dtype=} and {indptr.dtype=} must be the same int32/int64")


def _check_dense(name, array, rows, dtype):
    if array.ndim != 2 or array.shape[0] != rows:
        raise ValueError(f"{name}.shape={array.shape} must be ({rows}, k)")
    if array.dtype != dtype:
        raise ValueError(f"{name}.dtype={array.dtype} must equal {dtype=}")


def _pad_to(array, length, value=0):
    if array.shape[-1] >= length:
        return array
    widths = [(0, 0)] * (array.ndim - 1) + [(0, length - array.shape[-1])]
    return jnp.pad(array, widths, constant_values=value)


def _matmul_gpu(data, indices, indptr, x, m, block_sizes, interpret):
    k = x.shape[1]
    kernel = functools.partial(
        _matmul_kernel_gpu, block_nnz=block_sizes.block_nnz, block_k=block_sizes.block_k, k=k
    )
    return pl.pallas_call(
        kernel,
        grid=(m, pl.cdiv(k, block_sizes.block_k)),
        out_shape=jax.ShapeDtypeStruct((m, k), x.dtype),
        interpret=interpret,
        name="csr_matmul",
    )(indptr, indices, data, x)


def _matmul_tpu(data, indices, indptr, x, m, block_sizes, interpret):
    k = x.shape[1]
    block_rows, block_nnz = block_sizes.block_rows, block_sizes.block_nnz
    nnz = data.shape[0]
    # Only matrices smaller than one window are padded, so the copies stay tiny.
    indptr = _pad_to(indptr.astype(jnp.int32), block_rows + 1, value=nnz)
    indices = _pad_to(indices.astype(jnp.int32), block_nnz)
    data = _pad_to(data, block_nnz)[None, :]
    kernel = functools.partial(
        _matmul_kernel_tpu,
        block_rows=block_rows,
        block_nnz=block_nnz,
        num_rows=indptr.shape[0] - 1,
        nnz=indices.shape[0],
    )
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(
        kernel,
        grid=(pl.cdiv(m, block_rows),),
        in_specs=[any_spec] * 4,
        out_specs=pl.BlockSpec((block_rows, k), lambda b: (b, 0)),
        out_shape=jax.ShapeDtypeStruct((m, k), x.dtype),
        scratch_shapes=[
            pltpu.SMEM((block_rows + 1,), jnp.int32),
            pltpu.SMEM((block_nnz,), jnp.int32),
            pltpu.VMEM((1, block_nnz), data.dtype),
            pltpu.VMEM((block_nnz, k), x.dtype),
            pltpu.SemaphoreType.DMA(()),
            pltpu.SemaphoreType.DMA(()),
        ],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=interpret,
        name="csr_matmul",
    )(indptr, indices, data, x)


def csr_matmul(
    data,
    indices,
    indptr,
    x,
    *,
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """`Y = A @ x` for the CSR matrix `A = (data, indices, indptr)`.

    **Arguments:**

    - `data`, `indices`, `indptr`: the CSR arrays of `A` (`(nnz,)`, `(nnz,)`, `(m + 1,)`).
    - `x`: dense `(n, k)` operand, same dtype as `data`.
    - `shape`: `(m, n)`, static.
    - `interpret`: run the kernel in Pallas interpret mode (any machine).
    - `platform`: which kernel to trace: `"cuda"`/`"rocm"` (Triton) or `"tpu"` (Mosaic).
      `None` picks TPU on a TPU backend, else the Triton kernel.
    - `block_sizes`: `None` for `BlockSizes.get_default(k, platform)`.

    **Returns:** `(m, k)` array in `x`'s dtype.
    """
    m, n = shape
    _check_structure(data, indices, indptr, shape)
    _check_dense("x", x, n, data.dtype)
    platform = _resolve_platform(platform)
    k = x.shape[1]
    if m == 0 or k == 0:
        return jnp.zeros((m, k), x.dtype)
    if data.shape[0] == 0 or n == 0:
        return jnp.zeros((m, k), x.dtype)
    if block_sizes is None:
        block_sizes = BlockSizes.get_default(k, platform)
    if platform == "tpu":
        return _matmul_tpu(data, indices, indptr, x, m, block_sizes, interpret)
    return _matmul_gpu(data, indices, indptr, x, m, block_sizes, interpret)


def csr_matmul_transpose(
    data,
    indices,
    indptr,
    g,
    *,
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """`Y = A.T @ g`: the gradient of `A @ x` with respect to `x`.

    Builds the CSR structure of `A.T` in XLA (stable argsort of `indices`, so entries of a
    column keep their row order) and runs `csr_matmul` on it.

    **Arguments:** as `csr_matmul`, with `g` the `(m, k)` cotangent.

    **Returns:** `(n, k)` array in `g`'s dtype.
    """
    m, n = shape
    _check_structure(data, indices, indptr, shape)
    _check_dense("g", g, m, data.dtype)
    nnz = indices.shape[0]
    order = jnp.argsort(indices, stable=True)
    transposed_indices = csr_row_ids(indptr, nnz)[order]
    counts = jnp.zeros((n,), indptr.dtype).at[indices].add(1, mode="drop")
    transposed_indptr = jnp.concatenate(
        [jnp.zeros((1,), indptr.dtype), jnp.cumsum(counts, dtype=indptr.dtype)]
    )
    return csr_matmul(
        data[order],
        transposed_indices,
        transposed_indptr,
        g,
        shape=(n, m),
        interpret=interpret,
        platform=platform,
        block_sizes=block_sizes,
    )


def _sddmm_gpu(rows, indices, g, x, block_sizes, interpret):
    nnz, k = indices.shape[0], g.shape[1]
    block_nnz = block_sizes.block_nnz
    kernel = functools.partial(
        _sddmm_kernel_gpu, block_nnz=block_nnz, block_k=block_sizes.block_k, k=k, nnz=nnz
    )
    return pl.pallas_call(
        kernel,
        grid=(pl.cdiv(nnz, block_nnz),),
        out_shape=jax.ShapeDtypeStruct((nnz,), g.dtype),
        interpret=interpret,
        name="csr_sddmm",
    )(rows, indices, g, x)


def _sddmm_tpu(rows, indices, g, x, block_sizes, interpret):
    nnz, k = indices.shape[0], g.shape[1]
    block_nnz = block_sizes.block_nnz
    rows = _pad_to(rows.astype(jnp.int32), block_nnz)
    indices = _pad_to(indices.astype(jnp.int32), block_nnz)
    kernel = functools.partial(_sddmm_kernel_tpu, block_nnz=block_nnz, nnz=indices.shape[0])
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    out = pl.pallas_call(
        kernel,
        grid=(pl.cdiv(nnz, block_nnz),),
        in_specs=[any_spec] * 4,
        out_specs=pl.BlockSpec((block_nnz, 1), lambda b: (b, 0)),
        out_shape=jax.ShapeDtypeStruct((nnz, 1), g.dtype),
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
    return out[:, 0]


def csr_sddmm(
    indices,
    indptr,
    g,
    x,
    *,
    shape: tuple[int, int],
    interpret: bool = False,
    platform: str | None = None,
    block_sizes: BlockSizes | None = None,
) -> jax.Array:
    """Sampled product `out[p] = sum_c g[row(p), c] * x[indices[p], c]`.

    This is the gradient of `A @ x` with respect to `data` (cotangent `g`).

    **Arguments:**

    - `indices`, `indptr`: the CSR structure of `A` (`(nnz,)`, `(m + 1,)`).
    - `g`: `(m, k)`; `x`: `(n, k)`, same dtype.
    - `shape`, `interpret`, `platform`, `block_sizes`: as `csr_matmul`.

    **Returns:** `(nnz,)` array in `g`'s dtype.
    """
    m, n = shape
    _check_structure(None, indices, indptr, shape)
    _check_dense("g", g, m, g.dtype)
    _check_dense("x", x, n, g.dtype)
    if g.shape[1] != x.shape[1]:
        raise ValueError(f"{g.shape=} and {x.shape=} must have the same number of columns")
    platform = _resolve_platform(platform)
    nnz, k = indices.shape[0], g.shape[1]
    if nnz == 0 or k == 0:
        return jnp.zeros((nnz,), g.dtype)
    if block_sizes is None:
        block_sizes = BlockSizes.get_default(k, platform)
    rows = csr_row_ids(indptr, nnz)
    if platform == "tpu":
        return _sddmm_tpu(rows, indices, g, x, block_sizes, interpret)
    return _sddmm_gpu(rows, indices, g, x, block_sizes, interpret)
