"""The CPU paths (`kernels/cpu_dia.py`, `kernels/cpu_csr.py`) against scipy at the
boundaries of each of their tuning constants: the CSR kernel's 8-column padding and the
dtypes and empty shapes it hands to XLA; the unrolled column sums (`UNROLLED_COLUMNS`);
DIA passes beyond `_MAX_DIAGONALS_IN_ONE_LOOP` diagonals (not in half precision); the
data gradient's stacking up to `_MAX_DIAGONALS_STACKED` diagonals. Everything else about
the CPU paths is covered by the product tests, which run them under "auto"."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse

import jaxsparse as js
from jaxsparse.kernels import cpu_csr, cpu_dia
from jaxsparse.kernels._xla_cpu import UNROLLED_COLUMNS

FFI_PADDING = cpu_csr._FFI_COLUMN_MULTIPLE


def _csr_case(rng, m, n, kind):
    if kind == "all-empty":
        return np.zeros(0, np.float64), np.zeros(0, np.int64), np.zeros(m + 1, np.int64)
    lengths = rng.integers(0, 4, size=m)
    lengths[::3] = 0  # empty rows, including runs of them
    lengths[1::7] = 0
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = rng.integers(0, n, size=indptr[-1])
    if kind == "repeated":
        indices[1::2] = indices[::2][: indices[1::2].size]  # unsorted, with repeats
    return rng.standard_normal(indptr[-1]), indices, indptr


@pytest.mark.parametrize("kind", ["random", "repeated", "all-empty"])
@pytest.mark.parametrize("k", [1, FFI_PADDING, FFI_PADDING + 1])
@pytest.mark.parametrize(
    ("dtype", "index_dtype"),
    [(jnp.float32, np.int32), (jnp.complex64, np.int64), (jnp.bfloat16, np.int32)],
    ids=["float32-int32", "complex64-int64", "bfloat16-int32"],
)
def test_csr_matmul_matches_scipy(kind, k, dtype, index_dtype):
    rng = np.random.default_rng(0)
    m, n = 37, 23
    data, indices, indptr = _csr_case(rng, m, n, kind)
    x = rng.standard_normal((n, k))
    expected = scipy.sparse.csr_array((data, indices, indptr), shape=(m, n)) @ x
    out = jax.jit(lambda d, x, i, p: cpu_csr.csr_matmul_cpu(d, x, i, p, shape=(m, n)))(
        jnp.asarray(data, dtype),
        jnp.asarray(x, dtype),
        jnp.asarray(indices, index_dtype),
        jnp.asarray(indptr, index_dtype),
    )
    assert out.shape == (m, k) and out.dtype == dtype
    tol = 5e-2 if dtype == jnp.bfloat16 else 1e-5
    np.testing.assert_allclose(np.asarray(out, np.complex128), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("kind", ["random", "repeated", "all-empty"])
@pytest.mark.parametrize("k", (0, 1, UNROLLED_COLUMNS, UNROLLED_COLUMNS + 1))
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_csr_sddmm_matches_row_dot_products(kind, k, dtype):
    """The data gradient `out[p] = g[row(p)] . x[indices[p]]`, unrolled over the columns
    up to the limit and a reduction past it."""
    rng = np.random.default_rng(2)
    m, n = 37, 23
    _, indices, indptr = _csr_case(rng, m, n, kind)
    g, x = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    rows = np.repeat(np.arange(m), np.diff(indptr))
    expected = np.einsum("pk,pk->p", g[rows], x[indices])
    out = jax.jit(lambda g, x, i, p: cpu_csr.csr_sddmm_cpu(g, x, i, p, shape=(m, n)))(
        jnp.asarray(g, dtype),
        jnp.asarray(x, dtype),
        jnp.asarray(indices, np.int32),
        jnp.asarray(indptr, np.int32),
    )
    assert out.shape == indices.shape and out.dtype == dtype
    tol = 5e-2 if dtype == jnp.bfloat16 else 1e-5
    np.testing.assert_allclose(np.asarray(out, np.float64), expected, rtol=tol, atol=tol * k)


# Both sides of the one-loop and stacking limits (8 diagonals), with offsets far apart.
ONE_LOOP = (-40, -3, -1, 0, 1, 2, 5, 50)
PASSES = (-40, -3, -1, 0, 1, 2, 5, 50, 60)
assert len(ONE_LOOP) == cpu_dia._MAX_DIAGONALS_IN_ONE_LOOP == cpu_dia._MAX_DIAGONALS_STACKED


def _dia_matrix(data, offsets, shape):
    # scipy reads data[d, j] as A[j - offsets[d], j], as jaxsparse does.
    return scipy.sparse.dia_array((data, np.asarray(offsets)), shape=shape).toarray()


@pytest.mark.parametrize("offsets", [ONE_LOOP, PASSES], ids=["8-diagonals", "9-diagonals"])
@pytest.mark.parametrize("k", (0, 1, UNROLLED_COLUMNS, UNROLLED_COLUMNS + 1))
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_dia_products_and_sddmm_match_scipy(offsets, k, dtype):
    """`A @ x`, `A^T @ g` and the data gradient (zero-column operands included)."""
    rng = np.random.default_rng(1)
    shape = (70, 66)
    m, n = shape
    data = rng.standard_normal((len(offsets), n))
    dense = _dia_matrix(data, offsets, shape)
    x, g = rng.standard_normal((n, k)), rng.standard_normal((m, k))
    tol = 5e-2 if dtype == jnp.bfloat16 else 1e-5
    args = {"offsets": offsets, "shape": shape}
    y = jax.jit(lambda d, x: cpu_dia.dia_matmul_cpu(d, x, **args))(
        jnp.asarray(data, dtype), jnp.asarray(x, dtype)
    )
    assert y.dtype == dtype and y.shape == (m, k)
    np.testing.assert_allclose(np.asarray(y, np.float64), dense @ x, rtol=tol, atol=tol * k)
    yt = jax.jit(lambda d, g: cpu_dia.dia_matmul_t_cpu(d, g, **args))(
        jnp.asarray(data, dtype), jnp.asarray(g, dtype)
    )
    assert yt.dtype == dtype and yt.shape == (n, k)
    np.testing.assert_allclose(np.asarray(yt, np.float64), dense.T @ g, rtol=tol, atol=tol * k)
    grad = jax.jit(lambda g, x: cpu_dia.dia_sddmm_cpu(g, x, **args))(
        jnp.asarray(g, dtype), jnp.asarray(x, dtype)
    )
    expected = np.zeros_like(data)
    for d, off in enumerate(offsets):
        for j in range(n):
            i = j - off
            if 0 <= i < m:
                expected[d, j] = g[i] @ x[j]
    assert grad.dtype == dtype and grad.shape == data.shape
    np.testing.assert_allclose(
        np.asarray(grad, np.float64), expected, rtol=tol, atol=tol * max(k, 1)
    )


STENCIL_27 = tuple(
    dz * 400 + dy * 20 + dx for dz in (-1, 0, 1) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
)


@pytest.mark.parametrize(
    "offsets",
    [
        STENCIL_27,
        tuple(range(-13, 14)),
        tuple(range(0, 2000, 100)),
        (-40, -3, 0, 2, 5, 50, 60, 200),
    ],
)
def test_dia_passes_cover_every_diagonal_once_keeping_near_offsets_together(offsets):
    passes = cpu_dia._passes(offsets)
    assert [start for start, _ in passes] == [0] + [stop for _, stop in passes[:-1]]
    assert passes[-1][1] == len(offsets)
    assert all(0 < stop - start <= cpu_dia._DIAGONALS_PER_PASS for start, stop in passes)
    if offsets == STENCIL_27:  # nine groups of three near offsets, two groups a pass
        assert passes == [(0, 6), (6, 12), (12, 18), (18, 24), (24, 27)]


def test_dia_product_in_passes_matches_scipy_on_a_27_point_stencil():
    rng = np.random.default_rng(3)
    shape = (8000, 8000)
    data = rng.standard_normal((len(STENCIL_27), shape[1]))
    x = rng.standard_normal((shape[1], 1))
    expected = scipy.sparse.dia_array((data, np.asarray(STENCIL_27)), shape=shape) @ x
    args = {"offsets": STENCIL_27, "shape": shape}
    y = jax.jit(lambda d, x: cpu_dia.dia_matmul_cpu(d, x, **args))(
        jnp.asarray(data), jnp.asarray(x)
    )
    np.testing.assert_allclose(np.asarray(y, np.float64), expected, rtol=1e-4, atol=1e-4)
    g = rng.standard_normal((shape[0], 1))
    expected_t = scipy.sparse.dia_array((data, np.asarray(STENCIL_27)), shape=shape).T @ g
    yt = jax.jit(lambda d, g: cpu_dia.dia_matmul_t_cpu(d, g, **args))(
        jnp.asarray(data), jnp.asarray(g)
    )
    np.testing.assert_allclose(np.asarray(yt, np.float64), expected_t, rtol=1e-4, atol=1e-4)


def test_unchecked_bad_structure_under_jit_does_not_crash_the_native_kernel():
    """Out-of-range indices and indptr built under jit (so unchecked) reach the native CSR
    kernel guarded: a zero product rather than an out-of-bounds read, and a finite answer
    for row pointers that are inside `[0, nnz]` but out of order."""
    product = jax.jit(lambda d, i, p, x: js.CSRMatrix(d, i, p, (3, 3)) @ x)
    data = jnp.ones(3, jnp.float32)
    x = jnp.ones((3, 8), jnp.float32)
    bad_columns = jnp.array([0, 99, -5], jnp.int32)
    good_columns = jnp.array([0, 2, 1], jnp.int32)
    good_rows = jnp.array([0, 2, 2, 3], jnp.int32)
    bad_rows = jnp.array([0, 2, 9, 3], jnp.int32)
    unordered_rows = jnp.array([0, 2, 1, 3], jnp.int32)
    np.testing.assert_array_equal(product(data, bad_columns, good_rows, x), np.zeros((3, 8)))
    np.testing.assert_array_equal(product(data, good_columns, bad_rows, x), np.zeros((3, 8)))
    out = product(data, good_columns, unordered_rows, x)
    assert out.shape == (3, 8) and bool(jnp.all(jnp.isfinite(out)))
    np.testing.assert_array_equal(product(data, good_columns, good_rows, x)[:, 0], [2, 0, 1])
    with pytest.raises(Exception, match="non-decreasing"):
        jax.jit(lambda d, i, p: js.CSRMatrix(d, i, p, (3, 3)).check().data)(
            data, bad_columns, bad_rows
        ).block_until_ready()
