"""CSR structure work past 46341 x 46341 positions with JAX's default 32-bit types.

`row * n + col` overflows int32 from 46341 x 46341; the structure is found from int64 numpy
keys on the host and from two int32 sort keys under `jit`. conftest turns 64-bit types on,
so these tests turn them off for their own duration.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse

import jaxsparse as js

N = 50_000


@pytest.fixture(scope="module")
def big():
    """A 50000 x 50000 CSR matrix with a few entries per row (float32, int32 indices) and
    its scipy twin; its transpose differs from it."""
    rng = np.random.default_rng(3)
    twin = scipy.sparse.random(N, N, density=1 / N, format="csr", rng=rng, dtype=np.float32)
    twin = (twin + scipy.sparse.eye_array(N, dtype=np.float32, format="csr")).tocsr()
    with jax.enable_x64(False):
        return js.CSRMatrix.from_scipy(twin), twin


def assert_matches(result, expected):
    """Same entries as scipy's result; entries that cancel to zero may stay stored."""
    expected = scipy.sparse.csr_array(expected)
    assert result.dtype == jnp.float32
    assert result.indices.dtype == jnp.int32
    got = result.to_scipy().copy()
    for matrix in (got, expected):
        matrix.sum_duplicates()
        matrix.eliminate_zeros()
    assert got.nnz == expected.nnz
    assert abs(got - expected).max() <= 1e-5 * max(1.0, abs(expected).max())


def test_structure_work_without_x64(big):
    A, twin = big
    with jax.enable_x64(False):
        identity = js.eye(N, dtype=jnp.float32)
        assert_matches(A + A.T, twin + twin.T)
        assert_matches(A - A.T, twin - twin.T)
        assert_matches(identity + A, scipy.sparse.eye_array(N) + twin)
        assert_matches(A.multiply(A.T), twin.multiply(twin.T))
        assert_matches(A @ A.T, twin @ twin.T)
        coo = twin.tocoo()
        rows, cols = np.tile(coo.row, 2), np.tile(coo.col, 2)
        order = np.argsort(rows, kind="stable")
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=N))])
        repeated = js.CSRMatrix(
            np.tile(coo.data, 2)[order],
            cols[order].astype(np.int32),
            indptr.astype(np.int32),
            A.shape,
        )
        assert repeated.nnz == 2 * A.nnz
        assert_matches(repeated.sort_indices().sum_duplicates(), 2 * twin)


def test_structure_work_under_jit_without_x64(big):
    A, twin = big
    expected = twin + twin.T
    expected.sum_duplicates()
    with jax.enable_x64(False):
        total = jax.jit(lambda a, b: js.add(a, b, nnz=expected.nnz))(A, A.T)
        assert_matches(total, expected)
        product = jax.jit(lambda a, b: a.multiply(b))(A, A.T)
        assert_matches(product, twin.multiply(twin.T))
        assert float(jax.jit(lambda a: a.max())(A)) == pytest.approx(twin.max())
