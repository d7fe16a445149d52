"""Triton (GPU) Pallas kernels for CSR matrices: product, transposed product, SDDMM.

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

**Power-law rows.** The product is balanced over rows, not over entries: a row of length
`L` is processed by one program in `ceil(L / block_nnz)` sequential steps while the
others finish. The total work stays `O(nnz + m)`, but when one row holds most of the
entries its program is the critical path (about `L / block_nnz` steps on one SM), so the
kernel then runs at the speed of one SM, not of the chip. Typical power-law graphs
(longest row a few thousand entries among millions) stay bandwidth-bound; a matrix
dominated by one row is better served by its transpose (a column) or by the XLA path.

**Transposed product `A.T @ g`.** The transposed structure is computed in XLA
(`_csr_layout.transposed_structure`: a stable argsort of `indices`, `O(nnz log nnz)` per
call) and fed to the product kernel. A scatter kernel would need atomics, which on GPU are
non-deterministic and limited to float32 for this use; the sort is deterministic, correct
for repeated column indices and reuses the tested product kernel. Callers that multiply by
`A.T` often should store `A.T` as a CSR matrix once.

**SDDMM.** `out[p] = sum_c g[row(p), c] * x[indices[p], c]`. Row ids are computed in XLA
from `indptr` (`O(nnz + m)`), then the nonzeros are split into equal chunks of `block_nnz`
entries, one program per chunk, so power-law rows are perfectly balanced. The kernel
gathers both operand rows with masked `plgpu.load`s.

**Bytes per product** (`v`, `i`: bytes per value and per index). Product:
`nnz * (v + i) + (m + 1) * i + nnz * k * v` (gathered rows of `x`, at most `n * k * v` from
HBM when caches hold `x`) `+ m * k * v`. Transposed product: the same with `m` and `n`
swapped, plus the sort (about `nnz * (v + 3 * i)` read and written a few times).
SDDMM: `nnz * (v + 2 * i) + (m + 1) * i` plus the gathered rows of `g` and `x`.

**Batches** (`_primitive.py`, "Batches": values `(B, nnz)`, dense operands `(B, rows, k)` or
shared). A third grid axis takes blocks of `block_batch` batch members, and each program
handles its block at once: it loads a chunk's column indices (and row ids) once for the
whole block, and a shared operand's gathered rows too, so the structure and a shared
operand are read once per block of matrices, not once per matrix. One matrix is a batch of
one.

All kernels accumulate bfloat16 and float16 in float32 and cast the result back. The
same kernels run in Pallas interpret mode on a CPU (`platform="cpu"`).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from .._csr_layout import row_ids
from ._csr_common import check_dense, check_sddmm, check_structure, matmul_t_by_transposed_structure
from ._precision import accumulation_dtype

_PLATFORMS = ("cuda", "rocm", "cpu")


def supports(dtype, platform: str) -> bool:
    """Whether the Triton kernels take `dtype` on `platform`.

    - `"cuda"`, `"rocm"`: float16, bfloat16, float32, float64. Triton has no complex type.
    - `"cpu"` (interpret mode): every real floating dtype. Complex returns False: interpret
      mode cannot allocate a complex output (its uninitialized-value fill raises
      `NotImplementedError`).
    - any other platform: False.
    """
    dtype = jnp.dtype(dtype)
    if platform not in _PLATFORMS:
        return False
    return jnp.issubdtype(dtype, jnp.floating)


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Block sizes and Triton knobs of the CSR kernels.

    - `block_nnz`: entries per loop step (product) or per program (SDDMM); a power of 2.
    - `block_k`: columns of the dense operand per program (product) or per loop step
      (SDDMM); a power of 2.
    - `block_batch`: batch members per program (batched calls); a power of 2.
    - `num_warps`, `num_stages`: Triton's warps per program and software-pipelining stages
      (`None` leaves Triton's own defaults).

    `None` tile fields are filled by `get_default` for the platform, `k` and the batch.
    """

    block_nnz: int | None = None
    block_k: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    block_batch: int | None = None

    def __post_init__(self):
        for name in ("block_nnz", "block_k", "num_warps", "block_batch"):
            value = getattr(self, name)
            if value is not None and not _is_power_of_two(value):
                raise ValueError(f"{name}={value} must be a positive power of 2")
        if self.num_stages is not None and self.num_stages < 1:
            raise ValueError(f"num_stages={self.num_stages} must be at least 1")

    @classmethod
    def get_default(cls, *, platform: str, num_cols: int, batch: int = 1) -> "BlockSizes":
        """Defaults for a dense operand with `num_cols` columns on `platform`, and `batch`
        matrices.

        Small `k`: long chunks keep the loads wide; large `k` or a batch: the
        `(block_batch, block_nnz, block_k)` tile stays about 8192 values.
        """
        _check_platform(platform)
        block_k = min(pl.next_power_of_2(max(num_cols, 1)), 64)
        block_batch = min(pl.next_power_of_2(max(batch, 1)), 8)
        block_nnz = max(16, min(256, 8192 // (block_k * block_batch)))
        return cls(block_nnz=block_nnz, block_k=block_k, block_batch=block_batch)

    def filled(self, *, platform: str, num_cols: int, batch: int = 1) -> "BlockSizes":
        """These block sizes with `None` tiles taken from `get_default`."""
        default = self.get_default(platform=platform, num_cols=num_cols, batch=batch)
        return dataclasses.replace(
            self,
            block_nnz=self.block_nnz or default.block_nnz,
            block_k=self.block_k or default.block_k,
            block_batch=self.block_batch or default.block_batch,
        )


def _check_platform(platform: str) -> str:
    if platform not in _PLATFORMS:
        raise ValueError(f"{platform=} must be one of {_PLATFORMS}")
    return platform


def _compiler_params(block_sizes: BlockSizes):
    return plgpu.CompilerParams(num_warps=block_sizes.num_warps, num_stages=block_sizes.num_stages)


def _matmul_kernel(
    indptr_ref, indices_ref, data_ref, x_ref, out_ref,
    *, block_nnz, block_k, block_batch, k, batch, shared_x,
):  # fmt: skip
    """Row `program_id(0)`, columns block `program_id(1)`, batch block `program_id(2)`:
    `data` is `(batch, nnz)`, `x` `(n, k)` if `shared_x` else `(batch, n, k)`, `out`
    `(batch, m, k)`."""
    row = pl.program_id(0)
    # Loads read clamped indices (masked); stores take the unclamped ones, so that no two
    # lanes of a masked store share an address.
    out_cols = pl.program_id(1) * block_k + jnp.arange(block_k, dtype=jnp.int32)
    k_mask = out_cols < k
    k_cols = jnp.minimum(out_cols, k - 1)
    out_members = pl.program_id(2) * block_batch + jnp.arange(block_batch, dtype=jnp.int32)
    member_mask = out_members < batch
    members = jnp.minimum(out_members, batch - 1)
    start = indptr_ref[row]
    end = indptr_ref[row + 1]
    index_dtype = start.dtype
    acc_dtype = accumulation_dtype(out_ref.dtype)
    offsets = jnp.arange(block_nnz, dtype=index_dtype)
    last = jnp.maximum(end - 1, 0)

    def body(step, acc):
        positions = start + step.astype(index_dtype) * block_nnz + offsets
        mask = positions < end
        positions = jnp.minimum(positions, last)
        cols = plgpu.load(indices_ref.at[positions], mask=mask, other=0)
        vals = plgpu.load(
            data_ref.at[members[:, None], positions[None, :]],
            mask=member_mask[:, None] & mask[None, :],
            other=0,
        )
        if shared_x:
            x_rows = plgpu.load(
                x_ref.at[cols[:, None], k_cols[None, :]],
                mask=mask[:, None] & k_mask[None, :],
                other=0,
            )[None]
        else:
            x_rows = plgpu.load(
                x_ref.at[members[:, None, None], cols[None, :, None], k_cols[None, None, :]],
                mask=member_mask[:, None, None] & mask[None, :, None] & k_mask[None, None, :],
                other=0,
            )
        products = vals.astype(acc_dtype)[:, :, None] * x_rows.astype(acc_dtype)
        return acc + jnp.sum(products, axis=1)

    num_steps = ((end - start + block_nnz - 1) // block_nnz).astype(jnp.int32)
    zeros = jnp.zeros((block_batch, block_k), acc_dtype)
    acc = lax.fori_loop(0, num_steps, body, zeros)
    plgpu.store(
        out_ref.at[out_members[:, None], row, out_cols[None, :]],
        acc.astype(out_ref.dtype),
        mask=member_mask[:, None] & k_mask[None, :],
    )


def _sddmm_kernel(
    rows_ref, indices_ref, g_ref, x_ref, out_ref,
    *, block_nnz, block_k, block_batch, k, nnz, batch, batched,
):  # fmt: skip
    """Entries block `program_id(0)`, batch block `program_id(1)`: `g` and `x` are each
    `(rows, k)` (shared) or `(batch, rows, k)` per `batched`, `out` `(batch, nnz)`."""
    out_positions = pl.program_id(0) * block_nnz + jnp.arange(block_nnz, dtype=jnp.int32)
    mask = out_positions < nnz
    positions = jnp.minimum(out_positions, nnz - 1)
    out_members = pl.program_id(1) * block_batch + jnp.arange(block_batch, dtype=jnp.int32)
    member_mask = out_members < batch
    members = jnp.minimum(out_members, batch - 1)
    rows = plgpu.load(rows_ref.at[positions], mask=mask, other=0)
    cols = plgpu.load(indices_ref.at[positions], mask=mask, other=0)
    acc_dtype = accumulation_dtype(out_ref.dtype)

    def gathered(ref, is_batched, entries, k_cols, k_mask):
        if not is_batched:
            return plgpu.load(
                ref.at[entries[:, None], k_cols[None, :]],
                mask=mask[:, None] & k_mask[None, :],
                other=0,
            )[None]
        return plgpu.load(
            ref.at[members[:, None, None], entries[None, :, None], k_cols[None, None, :]],
            mask=member_mask[:, None, None] & mask[None, :, None] & k_mask[None, None, :],
            other=0,
        )

    def body(step, acc):
        k_cols = step * block_k + jnp.arange(block_k, dtype=jnp.int32)
        k_mask = k_cols < k
        k_cols = jnp.minimum(k_cols, k - 1)
        g_rows = gathered(g_ref, batched[0], rows, k_cols, k_mask).astype(acc_dtype)
        x_rows = gathered(x_ref, batched[1], cols, k_cols, k_mask).astype(acc_dtype)
        return acc + jnp.sum(g_rows * x_rows, axis=2)

    zeros = jnp.zeros((block_batch, block_nnz), acc_dtype)
    acc = lax.fori_loop(0, pl.cdiv(k, block_k), body, zeros)
    plgpu.store(
        out_ref.at[out_members[:, None], out_positions[None, :]],
        acc.astype(out_ref.dtype),
        mask=member_mask[:, None] & mask[None, :],
    )


def _resolve(platform, interpret, block_sizes, num_cols, batch=1):
    if platform is None:
        platform = "cpu" if interpret else "cuda"
    _check_platform(platform)
    return (block_sizes or BlockSizes()).filled(platform=platform, num_cols=num_cols, batch=batch)


def csr_matmul_triton(
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
    - `platform`: `"cuda"`, `"rocm"` or `"cpu"` (interpret mode); `None`: `"cpu"` when
      interpreting, else `"cuda"`.
    - `block_sizes`: `None` fields take `BlockSizes.get_default`.

    **Returns:** `(m, k)` array in `x`'s dtype (`(B, m, k)` for a batch).
    """
    m, n = shape
    check_structure(data, indices, indptr, shape)
    batch = data.shape[0] if data.ndim == 2 else None
    check_dense("x", x, n, data.dtype, batch)
    k = x.shape[-1]
    lead = data.shape[:-1]
    block_sizes = _resolve(platform, interpret, block_sizes, k, batch or 1)
    if m == 0 or k == 0 or data.shape[-1] == 0 or n == 0 or 0 in lead:
        return jnp.zeros((*lead, m, k), x.dtype)
    block_batch = block_sizes.block_batch if batch else 1
    kernel = functools.partial(
        _matmul_kernel,
        block_nnz=block_sizes.block_nnz,
        block_k=block_sizes.block_k,
        block_batch=block_batch,
        k=k,
        batch=batch or 1,
        shared_x=x.ndim == 2,
    )
    out = pl.pallas_call(
        kernel,
        grid=(m, pl.cdiv(k, block_sizes.block_k), pl.cdiv(batch or 1, block_batch)),
        out_shape=jax.ShapeDtypeStruct((batch or 1, m, k), x.dtype),
        compiler_params=_compiler_params(block_sizes),
        interpret=interpret,
        name="csr_matmul",
    )(indptr, indices, data.reshape(batch or 1, -1), x)
    return out if batch else out[0]


def csr_matmul_t_triton(
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

    **Arguments:** as `csr_matmul_triton`, with `g` the `(m, k)` operand.

    **Returns:** `(n, k)` array in `g`'s dtype (`(B, n, k)` for a batch).
    """
    return matmul_t_by_transposed_structure(
        csr_matmul_triton,
        data,
        g,
        indices,
        indptr,
        shape=shape,
        interpret=interpret,
        platform=platform,
        block_sizes=block_sizes,
    )


def csr_sddmm_triton(
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

    **Arguments:** `g`: `(m, k)`; `x`: `(n, k)`, same dtype; the rest as `csr_matmul_triton`.

    **Returns:** `(nnz,)` array in `g`'s dtype (`(B, nnz)` if `g` or `x` is a `(B, rows, k)`
    batch).
    """
    check_sddmm(g, x, indices, indptr, shape)
    nnz, k = indices.shape[0], g.shape[-1]
    batch = next((a.shape[0] for a in (g, x) if a.ndim == 3), None)
    lead = (batch,) if batch is not None else ()
    block_sizes = _resolve(platform, interpret, block_sizes, k, batch or 1)
    if nnz == 0 or k == 0 or 0 in lead:
        return jnp.zeros((*lead, nnz), g.dtype)
    block_nnz = block_sizes.block_nnz
    block_batch = block_sizes.block_batch if batch else 1
    kernel = functools.partial(
        _sddmm_kernel,
        block_nnz=block_nnz,
        block_k=block_sizes.block_k,
        block_batch=block_batch,
        k=k,
        nnz=nnz,
        batch=batch or 1,
        batched=(g.ndim == 3, x.ndim == 3),
    )
    out = pl.pallas_call(
        kernel,
        grid=(pl.cdiv(nnz, block_nnz), pl.cdiv(batch or 1, block_batch)),
        out_shape=jax.ShapeDtypeStruct((batch or 1, nnz), g.dtype),
        compiler_params=_compiler_params(block_sizes),
        interpret=interpret,
        name="csr_sddmm",
    )(row_ids(indptr, nnz), indices, g, x)
    return out if batch else out[0]
