"""The native FFI targets check every buffer they reinterpret (`native/buffer_checks.h`).

An FFI target is global: any program can call `jaxsparse_csr_matmul` through
`jax.ffi.ffi_call` with buffers of any type and shape. Each call below hands a target one
mismatched buffer and must get an error naming that argument, not a crash or a read out
of bounds; a matching call gets scipy's answer, so the errors come from the mismatch alone.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg

import jaxsparse  # noqa: F401  (registers the native FFI targets)
from jaxsparse.kernels import _native_library

pytestmark = [
    pytest.mark.on_cpu,
    pytest.mark.skipif(
        not _native_library.AVAILABLE,
        reason=f"native kernels not built: {_native_library.UNAVAILABLE_REASON}",
    ),
]

M, N, K = 4, 5, 2
MATRIX = scipy.sparse.random(M, N, density=0.5, format="csr", dtype=np.float32, random_state=0)
DATA = jnp.asarray(MATRIX.data)
INDICES = jnp.asarray(MATRIX.indices, jnp.int32)
INDPTR = jnp.asarray(MATRIX.indptr, jnp.int32)
NNZ = MATRIX.nnz
OTHER = scipy.sparse.random(M, N, density=0.5, format="csr", dtype=np.float32, random_state=1)
OTHER_STRUCTURE = (jnp.asarray(OTHER.indices, jnp.int32), jnp.asarray(OTHER.indptr, jnp.int32))
SUM_NNZ = (MATRIX + OTHER).nnz
RIGHT = OTHER.T.tocsr()  # N x M: MATRIX @ RIGHT is M x M
RIGHT_STRUCTURE = (jnp.asarray(RIGHT.indices, jnp.int32), jnp.asarray(RIGHT.indptr, jnp.int32))
PRODUCT_NNZ = (MATRIX @ RIGHT).nnz
PAIRS = int(np.diff(RIGHT.indptr)[MATRIX.indices].sum())
OFFSETS = np.array([-1, 0, 1], np.int64)
DIA_DATA = jnp.ones((3, N), jnp.float32)


def _kept():
    """The factors a one-pass solve of DIA_DATA + 2 I keeps (native_banded_kept): u, lower,
    pivots, status."""
    return jax.ffi.ffi_call(
        "jaxsparse_dia_banded_solve_keeping",
        (
            jax.ShapeDtypeStruct((N, K), jnp.float32),
            jax.ShapeDtypeStruct((N, 2), jnp.float32),
            jax.ShapeDtypeStruct((N, 2), jnp.float32),
            jax.ShapeDtypeStruct((N,), jnp.int32),
            jax.ShapeDtypeStruct((), jnp.int32),
        ),
    )(DIA_DATA.at[1].add(2.0), jnp.ones((N, K), jnp.float32), offsets=OFFSETS)[1:]


def _tridiagonal_kept():
    """The inverse pivots and status a tridiagonal solve of DIA_DATA + 2 I keeps."""
    return jax.ffi.ffi_call(
        "jaxsparse_dia_tridiagonal_solve_keeping",
        (
            jax.ShapeDtypeStruct((N, K), jnp.float32),
            jax.ShapeDtypeStruct((N,), jnp.float32),
            jax.ShapeDtypeStruct((), jnp.int32),
        ),
    )(DIA_DATA.at[1].add(2.0), jnp.ones((N, K), jnp.float32), offsets=OFFSETS)[1:]


# On the CPU: a GPU machine's suite imports this module (then deselects it), and the
# target is registered for the CPU alone.
with jax.default_device(jax.devices("cpu")[0]):
    KEPT = tuple(_kept()) if _native_library.AVAILABLE else (None,) * 4
    PIVOTS = tuple(_tridiagonal_kept()) if _native_library.AVAILABLE else (None,) * 2


def dense(*shape, dtype=jnp.float32):
    return jnp.asarray(np.arange(np.prod(shape)).reshape(shape), dtype)


def call(target, out, *args, **attributes):
    """The target called directly, with the given result shapes."""
    return jax.ffi.ffi_call(target, out)(*args, **attributes)


def result(*shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


def test_matching_buffers_give_scipys_product():
    x = dense(N, K)
    y = call("jaxsparse_csr_matmul", result(M, K), DATA, x, INDICES, INDPTR)
    np.testing.assert_allclose(y, MATRIX @ np.asarray(x), rtol=1e-6)
    structure = tuple(result(size, dtype=jnp.int32) for size in (NNZ, NNZ, N + 1))
    order, indices_t, indptr_t = call("jaxsparse_csr_transpose", structure, INDICES, INDPTR)
    transposed = MATRIX.T.tocsr()
    np.testing.assert_array_equal(MATRIX.data[np.asarray(order)], transposed.data)
    np.testing.assert_array_equal(indices_t, transposed.indices)
    np.testing.assert_array_equal(indptr_t, transposed.indptr)
    sizes = (SUM_NNZ, SUM_NNZ, SUM_NNZ, M + 1)
    structure = tuple(result(size, dtype=jnp.int32) for size in sizes)
    union = call("jaxsparse_csr_union", structure, INDICES, INDPTR, *OTHER_STRUCTURE, num_cols=N)
    a_source, b_source, indices, indptr = map(np.asarray, union)
    summed = (MATRIX + OTHER).tocsr()
    values = np.append(MATRIX.data, 0)[a_source] + np.append(OTHER.data, 0)[b_source]
    np.testing.assert_array_equal(indptr, summed.indptr)
    np.testing.assert_array_equal(indices, summed.indices)
    np.testing.assert_allclose(values, summed.data, rtol=1e-6)
    listed = (MATRIX + OTHER).tocoo()  # then the sum's entries listed twice, repeats
    rows = jnp.asarray(np.tile(listed.row, 2), jnp.int32)
    cols = jnp.asarray(np.tile(listed.col, 2), jnp.int32)
    structure = tuple(result(size, dtype=jnp.int32) for size in (2 * SUM_NNZ, SUM_NNZ, M + 1))
    slots, indices, indptr = map(
        np.asarray, call("jaxsparse_csr_positions", structure, rows, cols, num_cols=N)
    )
    values = np.zeros(SUM_NNZ, np.float32)
    np.add.at(values, slots, np.tile(listed.data, 2))
    np.testing.assert_array_equal(indptr, summed.indptr)
    np.testing.assert_array_equal(indices, summed.indices)
    np.testing.assert_allclose(values, 2 * summed.data, rtol=1e-6)
    counts = call(
        "jaxsparse_csr_product_counts",
        (result(M + 1, dtype=jnp.int32),) * 2,
        INDICES,
        INDPTR,
        *RIGHT_STRUCTURE,
        num_cols=M,
    )
    structure = (result(PRODUCT_NNZ, dtype=jnp.int32), *[result(PAIRS, dtype=jnp.int32)] * 3)
    fill = call(
        "jaxsparse_csr_product_fill",
        structure,
        INDICES,
        INDPTR,
        *RIGHT_STRUCTURE,
        *counts,
        num_cols=M,
    )
    indices, left, right, slots = map(np.asarray, fill)
    product = (MATRIX @ RIGHT).tocsr()
    product.sort_indices()
    values = np.zeros(PRODUCT_NNZ, np.float32)
    np.add.at(values, slots, MATRIX.data[left] * RIGHT.data[right])
    np.testing.assert_array_equal(counts[0], product.indptr)
    np.testing.assert_array_equal(indices, product.indices)
    np.testing.assert_allclose(values, product.data, rtol=1e-6)
    banded = scipy.sparse.dia_array((np.asarray(DIA_DATA.at[1].add(2.0)), OFFSETS), (N, N))
    assert int(PIVOTS[1]) == 1  # dominant: the inverse pivots were kept
    x = dense(N, K)
    attributes = {"offsets": OFFSETS, "op": np.int64(1)}
    y = call(
        "jaxsparse_dia_tridiagonal_kept_solve",
        result(N, K),
        DIA_DATA.at[1].add(2.0),
        *PIVOTS,
        x,
        **attributes,
    )
    expected = scipy.sparse.linalg.spsolve(banded.T.tocsc(), np.asarray(x, np.float64))
    np.testing.assert_allclose(y, expected, rtol=1e-5)


MISMATCHES = {
    "x of another type": (
        "jaxsparse_csr_matmul",
        result(M, K),
        (DATA, dense(N, K, dtype=jnp.float64), INDICES, INDPTR),
        {},
        "x must be float32, got float64",
    ),
    "indptr of another index type": (
        "jaxsparse_csr_matmul",
        result(M, K),
        (DATA, dense(N, K), INDICES, INDPTR.astype(jnp.int64)),
        {},
        "indptr must be int32, got int64",
    ),
    "float indices": (
        "jaxsparse_csr_matmul",
        result(M, K),
        (DATA, dense(N, K), INDICES.astype(jnp.float32), INDPTR),
        {},
        "indices must be int32 or int64, got float32",
    ),
    "x of rank 1": (
        "jaxsparse_csr_matmul",
        result(M, K),
        (DATA, dense(N), INDICES, INDPTR),
        {},
        r"x must have 2 axes \(3 with a batch axis\), got 1",
    ),
    "a result of the wrong rows": (
        "jaxsparse_csr_matmul",
        result(M + 1, K),
        (DATA, dense(N, K), INDICES, INDPTR),
        {},
        "the result has 5 along axis 0, expected 4",
    ),
    "a result of another type": (
        "jaxsparse_csr_matmul",
        result(M, K, dtype=jnp.float64),
        (DATA, dense(N, K), INDICES, INDPTR),
        {},
        "the result must be float32, got float64",
    ),
    "values shorter than the indices": (
        "jaxsparse_csr_matmul_t",
        result(N, K),
        (DATA[:-1], dense(M, K), INDICES, INDPTR),
        {},
        f"data has {NNZ - 1} along axis 0, expected {NNZ}",
    ),
    "a cotangent of the wrong rows": (
        "jaxsparse_csr_sddmm",
        result(NNZ),
        (dense(M + 2, K), dense(N, K), INDICES, INDPTR),
        {},
        "g has 6 along axis 0, expected 4",
    ),
    "batches that differ": (
        "jaxsparse_csr_sddmm",
        result(3, NNZ),
        (dense(2, M, K), dense(N, K), INDICES, INDPTR),
        {},
        "g has a batch of 2, the result of 3",
    ),
    "a batched input with an unbatched result": (
        "jaxsparse_csr_matmul",
        result(M, K),
        (jnp.stack([DATA, DATA]), dense(N, K), INDICES, INDPTR),
        {},
        "data has a batch axis and the result has none",
    ),
    "a batch in the gradient step": (
        "jaxsparse_csr_matmul_pullback",
        (result(NNZ), result(N, K)),
        (dense(M, K), jnp.stack([DATA, DATA]), dense(N, K), INDICES, INDPTR),
        {},
        "data must have 1 axis, got 2",
    ),
    "a gradient of the wrong columns": (
        "jaxsparse_csr_matmul_pullback",
        (result(NNZ), result(N, K + 1)),
        (dense(M, K), DATA, dense(N, K), INDICES, INDPTR),
        {},
        "the operand's gradient has 3 along axis 1, expected 2",
    ),
    "a transposed structure from float indices": (
        "jaxsparse_csr_transpose",
        (result(NNZ), result(NNZ), result(N + 1)),
        (INDICES.astype(jnp.float32), INDPTR),
        {},
        "indices must be int32 or int64, got float32",
    ),
    "a transposed index pointer of another index type": (
        "jaxsparse_csr_transpose",
        (
            result(NNZ, dtype=jnp.int32),
            result(NNZ, dtype=jnp.int32),
            result(N + 1, dtype=jnp.int64),
        ),
        (INDICES, INDPTR),
        {},
        "the transposed indptr must be int32, got int64",
    ),
    "an order shorter than the indices": (
        "jaxsparse_csr_transpose",
        (
            result(NNZ - 1, dtype=jnp.int32),
            result(NNZ, dtype=jnp.int32),
            result(N + 1, dtype=jnp.int32),
        ),
        (INDICES, INDPTR),
        {},
        f"the order has {NNZ - 1} along axis 0, expected {NNZ}",
    ),
    "a batched transpose of one structure": (
        "jaxsparse_csr_transpose",
        tuple(result(2, size, dtype=jnp.int32) for size in (NNZ, NNZ, N + 1)),
        (INDICES, INDPTR),
        {},
        "the order must have the batch axis of indices",
    ),
    "an empty transposed index pointer": (
        "jaxsparse_csr_transpose",
        (result(NNZ, dtype=jnp.int32), result(NNZ, dtype=jnp.int32), result(0, dtype=jnp.int32)),
        (INDICES, INDPTR),
        {},
        "must hold at least 1 value",
    ),
    "a sum's structure from float indices": (
        "jaxsparse_csr_union",
        tuple(result(size) for size in (SUM_NNZ, SUM_NNZ, SUM_NNZ, M + 1)),
        (INDICES.astype(jnp.float32), INDPTR, *OTHER_STRUCTURE),
        {"num_cols": N},
        "indices must be int32 or int64, got float32",
    ),
    "sources fewer than the sum's entries": (
        "jaxsparse_csr_union",
        tuple(result(size, dtype=jnp.int32) for size in (SUM_NNZ, SUM_NNZ - 1, SUM_NNZ, M + 1)),
        (INDICES, INDPTR, *OTHER_STRUCTURE),
        {"num_cols": N},
        f"the second sources has {SUM_NNZ - 1} along axis 0, expected {SUM_NNZ}",
    ),
    "a second index pointer of other rows": (
        "jaxsparse_csr_union",
        tuple(result(size, dtype=jnp.int32) for size in (SUM_NNZ, SUM_NNZ, SUM_NNZ, M + 1)),
        (INDICES, INDPTR, OTHER_STRUCTURE[0], jnp.append(OTHER_STRUCTURE[1], 0)),
        {"num_cols": N},
        f"the second indptr has {M + 2} along axis 0, expected {M + 1}",
    ),
    "a batched sum of one pair": (
        "jaxsparse_csr_union",
        tuple(result(2, size, dtype=jnp.int32) for size in (SUM_NNZ, SUM_NNZ, SUM_NNZ, M + 1)),
        (INDICES, INDPTR, *OTHER_STRUCTURE),
        {"num_cols": N},
        "the first sources must have the batch axis of the first indices",
    ),
    "positions from float rows": (
        "jaxsparse_csr_positions",
        tuple(result(size, dtype=jnp.int32) for size in (NNZ, NNZ, M + 1)),
        (INDPTR[:NNZ].astype(jnp.float32), INDICES),
        {"num_cols": N},
        "rows must be int32 or int64, got float32",
    ),
    "positions with fewer columns than rows": (
        "jaxsparse_csr_positions",
        tuple(result(size, dtype=jnp.int32) for size in (NNZ, NNZ, M + 1)),
        (jnp.zeros(NNZ, jnp.int32), INDICES[:-1]),
        {"num_cols": N},
        f"cols has {NNZ - 1} along axis 0, expected {NNZ}",
    ),
    "slots fewer than the listed positions": (
        "jaxsparse_csr_positions",
        tuple(result(size, dtype=jnp.int32) for size in (NNZ - 1, NNZ, M + 1)),
        (jnp.zeros(NNZ, jnp.int32), INDICES),
        {"num_cols": N},
        f"the slots has {NNZ - 1} along axis 0, expected {NNZ}",
    ),
    "positions of a matrix without rows": (
        "jaxsparse_csr_positions",
        tuple(result(size, dtype=jnp.int32) for size in (NNZ, NNZ, 1)),
        (jnp.zeros(NNZ, jnp.int32), INDICES),
        {"num_cols": N},
        "the indptr must hold m \\+ 1 >= 2 values",
    ),
    "positions of a matrix without columns": (
        "jaxsparse_csr_positions",
        tuple(result(size, dtype=jnp.int32) for size in (NNZ, NNZ, M + 1)),
        (jnp.zeros(NNZ, jnp.int32), INDICES),
        {"num_cols": 0},
        "num_cols must be positive",
    ),
    "batched slots for one list": (
        "jaxsparse_csr_positions",
        (
            result(2, NNZ, dtype=jnp.int32),
            result(NNZ, dtype=jnp.int32),
            result(M + 1, dtype=jnp.int32),
        ),
        (jnp.zeros(NNZ, jnp.int32), INDICES),
        {"num_cols": N},
        "the slots must have the batch axis of rows",
    ),
    "a product's structure of two index types": (
        "jaxsparse_csr_product_counts",
        (result(M + 1, dtype=jnp.int32),) * 2,
        (INDICES, INDPTR, RIGHT_STRUCTURE[0], RIGHT_STRUCTURE[1].astype(jnp.int64)),
        {"num_cols": M},
        "the second indptr must be int32, got int64",
    ),
    "a batched product of one pair": (
        "jaxsparse_csr_product_counts",
        (result(M + 1, dtype=jnp.int32),) * 2,
        (INDICES[None], INDPTR[None], RIGHT_STRUCTURE[0][None], RIGHT_STRUCTURE[1][None]),
        {"num_cols": M},
        "takes one pair of matrices",
    ),
    "a product's row pointers of other rows": (
        "jaxsparse_csr_product_counts",
        (result(M + 2, dtype=jnp.int32), result(M + 1, dtype=jnp.int32)),
        (INDICES, INDPTR, *RIGHT_STRUCTURE),
        {"num_cols": M},
        f"the product's indptr has {M + 2} along axis 0, expected {M + 1}",
    ),
    "fewer left entries than slots": (
        "jaxsparse_csr_product_fill",
        (
            result(PRODUCT_NNZ, dtype=jnp.int32),
            result(PAIRS - 1, dtype=jnp.int32),
            result(PAIRS, dtype=jnp.int32),
            result(PAIRS, dtype=jnp.int32),
        ),
        (INDICES, INDPTR, *RIGHT_STRUCTURE, INDPTR, INDPTR),
        {"num_cols": M},
        f"the left entries has {PAIRS - 1} along axis 0, expected {PAIRS}",
    ),
    "scalar slots": (
        "jaxsparse_csr_product_fill",
        (
            result(PRODUCT_NNZ, dtype=jnp.int32),
            *[result(PAIRS, dtype=jnp.int32)] * 2,
            result(dtype=jnp.int32),
        ),
        (INDICES, INDPTR, *RIGHT_STRUCTURE, INDPTR, INDPTR),
        {"num_cols": M},
        "the slots must have 1 axis, got 0",
    ),
    "a DIA operand of the wrong rows": (
        "jaxsparse_dia_matmul",
        result(N, K),
        (DIA_DATA, dense(N + 3, K)),
        {"offsets": OFFSETS},
        "x has 8 along axis 0, expected 5",
    ),
    "a DIA cotangent of another type": (
        "jaxsparse_dia_matmul_t",
        result(N, K),
        (DIA_DATA, dense(N, K, dtype=jnp.complex64)),
        {"offsets": OFFSETS},
        "g must be float32, got complex64",
    ),
    "integer DIA values": (
        "jaxsparse_dia_matmul",
        result(N, K, dtype=jnp.int32),
        (DIA_DATA.astype(jnp.int32), dense(N, K, dtype=jnp.int32)),
        {"offsets": OFFSETS},
        "data must be float32, float64, complex64 or complex128",
    ),
    "a banded adjoint's cotangent of another type": (
        "jaxsparse_dia_banded_factored_adjoint",
        (result(N, K), result(3, N)),
        (*KEPT, dense(N, K), dense(N, K, dtype=jnp.complex64)),
        {"offsets": OFFSETS},
        "the right-hand sides \\(b, or the adjoint's g\\) and the result must be",
    ),
    "a banded adjoint's values cotangent of the wrong width": (
        "jaxsparse_dia_banded_factored_adjoint",
        (result(N, K), result(3, N + 1)),
        (*KEPT, dense(N, K), dense(N, K)),
        {"offsets": OFFSETS},
        "x has 5 along axis 0, expected 6 \\(the result's columns, n\\)",
    ),
    "kept factors of the wrong bandwidth": (
        "jaxsparse_dia_banded_factored_solve",
        result(N, K),
        (dense(N, 3), *KEPT[1:], dense(N, K)),
        {"offsets": OFFSETS, "op": np.int64(1)},
        "u must be \\(..., n, kl \\+ ku\\)",
    ),
    "a kept pivot past its block": (
        "jaxsparse_dia_banded_factored_solve",
        result(N, K),
        (*KEPT[:2], jnp.asarray([0, 0, 0, 0, 1], jnp.int32), KEPT[3], dense(N, K)),
        {"offsets": OFFSETS, "op": np.int64(1)},
        "a pivot or the split does not fit the matrix",
    ),
    "an unknown kept status": (
        "jaxsparse_dia_banded_factored_solve",
        result(N, K),
        (*KEPT[:3], jnp.asarray(7, jnp.int32), dense(N, K)),
        {"offsets": OFFSETS, "op": np.int64(0)},
        "status must be 0, 1 or 2",
    ),
    "kept int64 pivots": (
        "jaxsparse_dia_banded_factored_solve",
        result(N, K),
        (*KEPT[:2], KEPT[2].astype(jnp.int64), KEPT[3], dense(N, K)),
        {"offsets": OFFSETS, "op": np.int64(0)},
        "pivots and status int32",
    ),
    "tridiagonal inverse pivots of another type": (
        "jaxsparse_dia_tridiagonal_kept_solve",
        result(N, K),
        (DIA_DATA, PIVOTS[0].astype(jnp.float64), PIVOTS[1], dense(N, K)),
        {"offsets": OFFSETS, "op": np.int64(1)},
        "the inverse pivots must be the values' dtype, the status int32",
    ),
    "tridiagonal inverse pivots of the wrong length": (
        "jaxsparse_dia_tridiagonal_kept_adjoint",
        (result(N, K), result(3, N)),
        (DIA_DATA, jnp.ones(N + 1, jnp.float32), PIVOTS[1], dense(N, K), dense(N, K)),
        {"offsets": OFFSETS},
        "the inverse pivots must be \\(..., n\\)",
    ),
    "a tridiagonal status per member of an unbatched call": (
        "jaxsparse_dia_tridiagonal_kept_solve",
        result(N, K),
        (DIA_DATA, PIVOTS[0], jnp.ones(2, jnp.int32), dense(N, K)),
        {"offsets": OFFSETS, "op": np.int64(0)},
        "the status \\(...\\), one per member",
    ),
    "a band too wide for the tridiagonal solve": (
        "jaxsparse_dia_tridiagonal_solve_keeping",
        (result(N, K), result(N), result(dtype=jnp.int32)),
        (DIA_DATA, dense(N, K)),
        {"offsets": np.array([-2, 0, 1], np.int64)},
        "offsets must lie in \\[-1, 1\\]",
    ),
    "a tridiagonal offset twice": (
        "jaxsparse_dia_tridiagonal_solve_keeping",
        (result(N, K), result(N), result(dtype=jnp.int32)),
        (DIA_DATA, dense(N, K)),
        {"offsets": np.array([0, 0, 1], np.int64)},
        "repeated offsets",
    ),
    "a DIA result of the wrong width": (
        "jaxsparse_dia_sddmm",
        result(3, N + 1),
        (dense(N, K), dense(N, K)),
        {"offsets": OFFSETS},
        "x has 5 along axis 0, expected 6",
    ),
}


@pytest.mark.parametrize("case", MISMATCHES, ids=list(MISMATCHES))
def test_mismatched_buffers_get_an_error_naming_the_argument(case):
    target, out, args, attributes, message = MISMATCHES[case]
    with pytest.raises(jax.errors.JaxRuntimeError, match=message):
        jax.block_until_ready(call(target, out, *args, **attributes))
