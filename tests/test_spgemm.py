"""Sparse @ sparse against scipy.sparse: DIA @ DIA (static offsets, jit, gradients in both
operands), CSR and mixed products on the host and under `jit` with a static `nnz`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    DIA_MATRICES,
    MATRICES,
    assert_close,
    cases,
    dtype_id,
    random_csr,
    random_dia,
    random_values,
)
from jax.test_util import check_grads

import jaxsparse as js

RIGHT_OFFSETS = (0, -1, 2, 5)


def right_factor(rng, fmt, rows, dtype, cols=11):
    if fmt == "dia":
        return random_dia(rng, (rows, cols), RIGHT_OFFSETS, dtype)
    return random_csr(rng, (rows, cols), density=0.3, dtype=dtype, repeat_columns=True)


@pytest.mark.parametrize("case", cases(DIA_MATRICES))
def test_dia_times_dia_matches_scipy(case):
    rng = np.random.default_rng(0)
    a, a_twin = case.make(rng, jnp.float64)
    b, b_twin = right_factor(rng, "dia", case.shape[1], jnp.float64)
    product = jax.jit(lambda a, b: a @ b)(a, b)
    assert isinstance(product, js.DIAMatrix) and product.shape == (case.shape[0], 11)
    m, k = product.shape
    sums = {x + y for x in a.offsets for y in b.offsets}
    assert set(product.offsets) <= sums
    assert all(-m < off < k for off in product.offsets)
    assert_close(product.to_scipy().toarray(), (a_twin @ b_twin).toarray(), jnp.float64)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.complex64], ids=dtype_id)
def test_dia_times_dia_dtypes_and_cache(dtype):
    rng = np.random.default_rng(1)
    a, a_twin = random_dia(rng, (9, 8), (-1, 0, 1), dtype)
    b, b_twin = random_dia(rng, (8, 9), (0, 3), dtype)
    times = jax.jit(lambda a, b: a @ b)
    product = times(a, b)
    assert product.offsets == (-1, 0, 1, 2, 3, 4) and product.dtype == jnp.dtype(dtype)
    assert_close(product.to_scipy().toarray(), (a_twin @ b_twin).toarray(), dtype)
    again = times(a.with_data(2 * a.data), b)
    assert_close(again.to_scipy().toarray(), 2 * (a_twin @ b_twin).toarray(), dtype)
    assert times._cache_size() == 1


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_half_precision_products_add_up_in_float32(fmt):
    """Sparse @ sparse in float16 sums its products in float32 and rounds once: small
    integers, whose products and float32 sums are exact, against the float32 dense product
    rounded to float16 (sums in float16 round at every term past 2048)."""
    rng = np.random.default_rng(3)
    band = np.abs(np.subtract.outer(np.arange(24), np.arange(24))) <= 8
    dense = jnp.asarray(np.where(band, rng.integers(1, 32, (24, 24)), 0), jnp.float16)
    matrix = js.DIAMatrix.fromdense(dense) if fmt == "dia" else js.CSRMatrix.fromdense(dense)
    product = matrix @ matrix
    assert product.dtype == jnp.float16
    wide = dense.astype(jnp.float32)
    np.testing.assert_array_equal(product.todense(), (wide @ wide).astype(jnp.float16))


def test_boolean_product_under_jit_stays_boolean():
    """A boolean CSR product with traced indices, as `jnp`'s boolean matmul (`or` of `and`s)."""
    flags = jnp.asarray(np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0]], bool))
    matrix = js.CSRMatrix.fromdense(flags)
    product = jax.jit(lambda a, b: js.matmul(a, b, nnz=9))(matrix, matrix)
    assert product.dtype == jnp.bool_
    np.testing.assert_array_equal(product.todense(), flags @ flags)


def test_dia_times_dia_gradients_in_both_factors():
    rng = np.random.default_rng(2)
    a, _ = random_dia(rng, (7, 6), (-2, 0, 1, 6), jnp.float64)
    b, _ = random_dia(rng, (6, 5), (0, -1, 3), jnp.float64)
    weights = random_values(rng, (7, 5), jnp.float64)

    def loss(a_data, b_data):
        return jnp.sum((a.with_data(a_data) @ b.with_data(b_data)).todense() * weights)

    def dense_loss(a_data, b_data):
        return jnp.sum(a.with_data(a_data).todense() @ b.with_data(b_data).todense() * weights)

    check_grads(jax.jit(loss), (a.data, b.data), order=1, modes=("fwd", "rev"), atol=1e-6)
    for ours, dense in zip(
        jax.grad(loss, (0, 1))(a.data, b.data),
        jax.grad(dense_loss, (0, 1))(a.data, b.data),
        strict=True,
    ):
        np.testing.assert_allclose(ours, dense, atol=1e-12)


PRODUCT_CASES = [
    case
    for case in MATRICES
    if case.name
    in ("dia-tall-beyond-matrix", "csr-uniform", "csr-empty-rows", "csr-repeated-columns")
]


@pytest.mark.parametrize("right", ["dia", "csr"])
@pytest.mark.parametrize("case", cases(PRODUCT_CASES))
def test_products_with_csr_match_scipy(case, right):
    rng = np.random.default_rng(3)
    a, a_twin = case.make(rng, jnp.float64)
    b, b_twin = right_factor(rng, right, case.shape[1], jnp.float64)
    if a.format == right == "dia":
        b = b.tocsr()
    product = a @ b
    expected = (a_twin @ b_twin).tocsr()
    assert isinstance(product, js.CSRMatrix) and product.shape == expected.shape
    assert product.to_scipy().has_canonical_format
    assert product.nnz == expected.nnz
    assert_close(product.to_scipy().toarray(), expected.toarray(), jnp.float64)
    traced = jax.jit(lambda a, b: js.matmul(a, b, nnz=product.nnz))(a, b)
    np.testing.assert_array_equal(traced.indices, product.indices)
    np.testing.assert_array_equal(traced.indptr, product.indptr)
    assert_close(traced.to_scipy().toarray(), expected.toarray(), jnp.float64)


def test_csr_product_under_jit_needs_nnz_and_checks_it():
    rng = np.random.default_rng(4)
    a, _ = random_csr(rng, (6, 7), density=0.4, dtype=jnp.float32)
    b, _ = random_csr(rng, (7, 5), density=0.4, dtype=jnp.float32)
    product = a @ b
    with pytest.raises(TypeError, match="Pass a static `nnz`"):
        jax.jit(lambda a, b: a @ b)(a, b)
    # Statically empty products (no rows, no columns, a factor with no entries) need none.
    empty = js.CSRMatrix((7, 5)).astype(jnp.float32)
    for left, right in ((a[:0], b), (a, b[:, :0]), (a, empty)):
        got = jax.jit(lambda x, y: x @ y)(left, right)
        assert got.shape == (left.shape[0], right.shape[1]) and got.nnz == 0
    with pytest.raises(ValueError, match=f"`nnz`={product.nnz - 1} is smaller"):
        js.matmul(a, b, nnz=product.nnz - 1)
    with pytest.raises(Exception, match="is smaller than the number of entries"):
        jax.jit(lambda a, b: js.matmul(a, b, nnz=product.nnz - 1).data)(a, b).block_until_ready()
    # XLA drops a run-time check on a result with no entries: `nnz`=0 is refused up front.
    with pytest.raises(ValueError, match="`nnz`=0 under `jax.jit`"):
        jax.jit(lambda a, b: js.matmul(a, b, nnz=0).todense())(a, b)
    padded = jax.jit(lambda a, b: js.matmul(a, b, nnz=product.nnz + 2))(a, b)
    assert padded.nnz == product.nnz + 2
    np.testing.assert_allclose(padded.to_scipy().toarray(), product.to_scipy().toarray(), atol=1e-6)


@pytest.mark.parametrize("traced", [False, True], ids=["host-structure", "static-nnz"])
def test_csr_product_gradients_in_both_factors(traced):
    rng = np.random.default_rng(5)
    a, _ = random_csr(rng, (6, 5), density=0.5, dtype=jnp.float64, repeat_columns=True)
    b, _ = random_dia(rng, (5, 4), (-1, 0, 2), jnp.float64)
    nnz = (a @ b).nnz
    weights = random_values(rng, (6, 4), jnp.float64)

    def loss(a_data, b_data, a=a, b=b):
        product = js.matmul(a.with_data(a_data), b.with_data(b_data), nnz=nnz)
        return jnp.sum(product.todense() * weights)

    def dense_loss(a_data, b_data):
        return jnp.sum(a.with_data(a_data).todense() @ b.with_data(b_data).todense() * weights)

    if traced:
        # The matrices are arguments of `jit`, so their index arrays are traced.
        def grads(a, b):
            return jax.grad(loss, (0, 1))(a.data, b.data, a, b)

        ours = jax.jit(grads)(a, b)
    else:
        check_grads(jax.jit(loss), (a.data, b.data), order=1, modes=("fwd", "rev"), atol=1e-6)
        ours = jax.grad(loss, (0, 1))(a.data, b.data)
    for got, want in zip(ours, jax.grad(dense_loss, (0, 1))(a.data, b.data), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-12)
