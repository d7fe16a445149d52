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


def _structures(rng):
    """Pairs of CSR factors whose products take each branch of the native structure kernels:
    repeated and unsorted columns, empty rows, int64 indices, a product far wider than its
    pairs (each row's pairs sorted instead of a table over the columns), and over 10^5
    pairs (the rows cut into pieces, one for each of XLA's threads)."""
    yield (
        "repeats-unsorted",
        (
            random_csr(rng, (9, 7), density=0.4, repeat_columns=True, shuffle_columns=True)[0],
            random_csr(rng, (7, 8), density=0.4, repeat_columns=True, shuffle_columns=True)[0],
        ),
    )
    yield (
        "empty-rows",
        (
            random_csr(rng, (6, 5), row_lengths=[0, 3, 0, 0, 2, 5])[0],
            random_csr(rng, (5, 4), row_lengths=[2, 0, 1, 0, 3])[0],
        ),
    )
    yield (
        "int64",
        (
            random_csr(rng, (8, 6), density=0.5, index_dtype=np.int64)[0],
            random_csr(rng, (6, 9), density=0.5, index_dtype=np.int64)[0],
        ),
    )
    yield (
        "wide",
        (
            random_csr(rng, (5, 4), density=0.6, shuffle_columns=True)[0],
            random_csr(rng, (4, 2**20), row_lengths=[3, 0, 4, 2], repeat_columns=True)[0],
        ),
    )
    yield (
        "pieces",
        (
            random_csr(rng, (2000, 300), row_lengths=np.full(2000, 10), shuffle_columns=True)[0],
            random_csr(rng, (300, 500), row_lengths=np.full(300, 10))[0],
        ),
    )


NATIVE = pytest.mark.skipif(
    not js.kernels._native_library.AVAILABLE, reason="the native kernels are not built here"
)


@pytest.mark.on_cpu
@NATIVE
@pytest.mark.parametrize("padding", [0, 3])
def test_native_product_structure_matches_numpys_bit_for_bit(monkeypatch, padding):
    """On a CPU the pairs and slots of a product come from the native kernels
    (`native/csr_product.cc`), elsewhere from numpy: the same arrays, so the same matrix,
    eagerly and with the values traced under `jit`."""
    from jaxsparse.kernels import native_csr

    native_calls = []
    counts = native_csr.csr_product_counts_native
    monkeypatch.setattr(
        native_csr,
        "csr_product_counts_native",
        lambda *args, **kwargs: native_calls.append(1) or counts(*args, **kwargs),
    )
    for name, (a, b) in _structures(np.random.default_rng(11)):
        nnz = (a @ b).nnz + padding
        results = {}
        for backend in ("auto", "xla"):
            monkeypatch.setenv("JAXSPARSE_BACKEND", backend)
            traced = jax.jit(
                lambda d, a=a, b=b, nnz=nnz: js.matmul(a.with_data(d), b, nnz=nnz).data
            )
            results[backend] = (*jax.tree.leaves(js.matmul(a, b, nnz=nnz)), traced(a.data))
        assert len(native_calls) == 3, name  # `a @ b`, then both products under "auto"
        native_calls.clear()
        for got, want in zip(results["auto"], results["xla"], strict=True):
            assert got.dtype == want.dtype, name
            np.testing.assert_array_equal(got, want, err_msg=name)
        monkeypatch.delenv("JAXSPARSE_BACKEND")
        expected = (a.to_scipy() @ b.to_scipy()).toarray()
        got = js.matmul(a, b, nnz=nnz).todense()
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, err_msg=name)
        native_calls.clear()


def _native_structure(a_indices, a_indptr, b_indices, b_indptr, num_cols, index_dtype=np.int32):
    """Both native structure calls on the given index arrays, run to the end."""
    from jaxsparse.kernels import native_csr

    structure = (a_indices, a_indptr, b_indices, b_indptr)
    arrays = tuple(jnp.asarray(x, index_dtype) for x in structure)
    counts = native_csr.csr_product_counts_native(*arrays, num_cols=num_cols)
    nnz, pairs = (int(np.asarray(pointers)[-1]) for pointers in counts)
    return native_csr.csr_product_fill_native(
        *arrays, *counts, num_cols=num_cols, nnz=nnz, pairs=pairs
    )


@pytest.mark.on_cpu
@NATIVE
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_native_product_structure_gives_scipys_product(index_dtype):
    """The kernels called directly, in both index types: the columns of scipy's canonical
    product, and pairs and slots that sum its values."""
    rng = np.random.default_rng(12)
    a, a_twin = random_csr(rng, (30, 20), density=0.2, repeat_columns=True, shuffle_columns=True)
    b, b_twin = random_csr(rng, (20, 25), density=0.2, repeat_columns=True, shuffle_columns=True)
    structure = (a.indices, a.indptr, b.indices, b.indptr)
    indices, left, right, slots = map(np.asarray, _native_structure(*structure, 25, index_dtype))
    assert indices.dtype == slots.dtype == index_dtype
    expected = (a_twin @ b_twin).tocsr()
    expected.sum_duplicates()
    values = np.zeros(expected.nnz)
    np.add.at(values, slots, a_twin.data[left] * b_twin.data[right])
    np.testing.assert_array_equal(indices, expected.indices)
    np.testing.assert_allclose(values, expected.data, rtol=1e-12)


@pytest.mark.on_cpu
@NATIVE
@pytest.mark.parametrize(
    "change, message",
    [
        ("first-indptr", "the first indptr must be a non-decreasing sequence"),
        ("first-indptr-start", "the first indptr should start with 0, got 1"),
        ("second-indptr", "the second indptr should end with the number of entries"),
        ("first-column", r"a column index of the first matrix lies outside \[0, 3\)"),
        ("negative-column", r"a column index of the first matrix lies outside \[0, 3\)"),
        ("second-column", r"a column index of the second matrix lies outside \[0, 4\)"),
    ],
)
def test_invalid_structures_fail_the_native_product_kernels(change, message):
    """Both calls check the index values before they use them, and name the problem."""
    arrays = {
        "a_indices": [0, 2, 1, 1],
        "a_indptr": [0, 2, 4],
        "b_indices": [3, 0, 1, 2],
        "b_indptr": [0, 1, 3, 4],
    }
    key, position, value = {
        "first-indptr": ("a_indptr", 1, 5),
        "first-indptr-start": ("a_indptr", 0, 1),
        "second-indptr": ("b_indptr", 3, 3),
        "first-column": ("a_indices", 2, 3),
        "negative-column": ("a_indices", 1, -1),
        "second-column": ("b_indices", 0, 4),
    }[change]
    arrays[key][position] = value
    with pytest.raises(jax.errors.JaxRuntimeError, match=f"CSR product: {message}"):
        jax.block_until_ready(_native_structure(*arrays.values(), num_cols=4))


@pytest.mark.on_cpu
@NATIVE
def test_pairs_past_the_index_type_fail_the_native_product_count():
    """2^16 entries of one column of `A` times 2^15 of that row of `B`: 2^31 pairs, which
    int32 cannot count, are refused before any is listed."""
    a_indices, a_indptr = np.zeros(2**16, np.int32), np.array([0, 2**16], np.int32)
    b_indices, b_indptr = np.arange(2**15, dtype=np.int32), np.array([0, 2**15], np.int32)
    with pytest.raises(jax.errors.JaxRuntimeError, match="pairs of entries must fit .* int32"):
        _native_structure(a_indices, a_indptr, b_indices, b_indptr, num_cols=2**15)


@pytest.mark.on_cpu
@NATIVE
@pytest.mark.parametrize("num_cols", [2, 2**20], ids=["table", "sorted"])
def test_native_product_fill_checks_the_counts_it_is_given(num_cols):
    """Row pointers that do not count a row's columns or pairs fail the call before the row
    is written (the arrays' sizes agree with them, so only the rows can tell)."""
    from jaxsparse.kernels import native_csr

    a_indices, a_indptr = jnp.asarray([0, 1, 1], jnp.int32), jnp.asarray([0, 2, 3], jnp.int32)
    b_indices, b_indptr = jnp.asarray([0, 1, 1], jnp.int32), jnp.asarray([0, 2, 3], jnp.int32)
    arrays = (a_indices, a_indptr, b_indices, b_indptr)
    indptr, pair_indptr = native_csr.csr_product_counts_native(*arrays, num_cols=num_cols)
    np.testing.assert_array_equal(indptr, [0, 2, 3])
    np.testing.assert_array_equal(pair_indptr, [0, 3, 4])
    for wrong, message in (
        ((jnp.asarray([0, 1, 3], jnp.int32), pair_indptr), "count row 0's columns"),
        ((indptr, jnp.asarray([0, 2, 4], jnp.int32)), "count row 0's pairs"),
    ):
        with pytest.raises(jax.errors.JaxRuntimeError, match=message):
            fill = native_csr.csr_product_fill_native(
                *arrays, *wrong, num_cols=num_cols, nnz=3, pairs=4
            )
            jax.block_until_ready(fill)
