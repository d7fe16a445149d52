"""DIAMatrix and CSRMatrix: construction, conversions and properties, against scipy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import (
    MANY_DIAGONALS,
    VALUE_DTYPES,
    as_float64,
    random_csr,
    random_dia,
    random_values,
)
from jax.test_util import check_grads

import jaxsparse as js

SHAPES = [(1, 1), (5, 5), (8, 3), (3, 8), (0, 4), (4, 0)]
SCIPY_FORMATS = ["coo", "csr", "csc", "dia", "lil", "bsr", "dok"]


def scipy_random(shape, density=0.4, seed=0, fmt="coo"):
    m, n = shape
    return scipy.sparse.random_array((m, n), density=density, rng=seed, format=fmt)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fmt", SCIPY_FORMATS)
@pytest.mark.parametrize("cls", [js.DIAMatrix, js.CSRMatrix], ids=["dia", "csr"])
def test_from_scipy_any_format_round_trips(cls, fmt, shape):
    source = scipy_random(shape, fmt=fmt)
    matrix = cls.from_scipy(source)
    assert matrix.shape == shape and matrix.ndim == 2
    np.testing.assert_array_equal(matrix.todense(), source.toarray())
    np.testing.assert_array_equal(matrix.toarray(), source.toarray())
    back = matrix.to_scipy()
    assert back.format == ("dia" if cls is js.DIAMatrix else "csr")
    np.testing.assert_array_equal(back.toarray(), source.toarray())


def test_from_scipy_accepts_matrix_classes_and_integers():
    dense = np.diag(np.full(5, -2)) + np.diag(np.ones(4, np.int64), 1)
    legacy = scipy.sparse.csr_matrix(dense.astype(np.int64))
    for cls in (js.DIAMatrix, js.CSRMatrix):
        matrix = cls.from_scipy(legacy)
        assert jnp.issubdtype(matrix.dtype, jnp.floating)
        np.testing.assert_array_equal(matrix.todense(), legacy.toarray())
    # float32 (the default without 64-bit types) holds integers exactly up to 2^24.
    large = scipy.sparse.csr_array(np.array([[2**24 + 1]], np.int64))
    with jax.enable_x64(False), pytest.warns(UserWarning, match="rounded"):
        rounded = js.CSRMatrix.from_scipy(large)
    assert rounded.todense()[0, 0] == np.float32(2**24 + 1)


@pytest.mark.parametrize("cls", [js.DIAMatrix, js.CSRMatrix])
def test_boolean_scipy_and_coordinates_stay_boolean(cls, tmp_path):
    """Boolean values keep their dtype through `from_scipy`, `load_npz` and `from_coo`, as
    through `fromdense` and `to_scipy`."""
    flags = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0]], bool)
    matrix = cls.from_scipy(scipy.sparse.csr_array(flags))
    js.save_npz(tmp_path / "flags.npz", matrix)
    row, col = np.nonzero(flags)
    coo = js.CSRMatrix.from_coo(jnp.ones(row.shape, bool), row, col, flags.shape)
    for result in (
        matrix,
        cls.from_scipy(matrix.to_scipy()),
        js.load_npz(tmp_path / "flags.npz"),
        coo,
    ):
        assert result.dtype == jnp.bool_
        np.testing.assert_array_equal(result.todense(), flags)


def test_dia_nnz_matches_scipy():
    rng = np.random.default_rng(0)
    for shape, offsets in [((5, 5), (-1, 0, 1)), ((4, 9), (-6, 0, 3, 11)), ((9, 4), (2, -8))]:
        matrix, twin = random_dia(rng, shape, offsets)
        assert matrix.nnz == twin.nnz


def test_csr_nnz_and_repr():
    rng = np.random.default_rng(1)
    matrix, twin = random_csr(rng, (6, 9), density=0.3)
    assert matrix.nnz == twin.nnz
    text = repr(matrix)
    assert "CSRMatrix" in text and "(6, 9)" in text and "float32" in text
    assert f"nnz={twin.nnz}" in text and "int32" in text
    dia, _ = random_dia(rng, (4, 4), (0, 2), jnp.bfloat16)
    text = repr(dia)
    assert "DIAMatrix" in text and "(4, 4)" in text and "bfloat16" in text and "(0, 2)" in text


@pytest.mark.parametrize("dtype", VALUE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_dtypes_and_astype(dtype):
    rng = np.random.default_rng(2)
    dia, dia_twin = random_dia(rng, (6, 7), (-1, 0, 2), dtype)
    csr, csr_twin = random_csr(rng, (6, 7), dtype=dtype)
    for matrix, twin in ((dia, dia_twin), (csr, csr_twin)):
        assert matrix.dtype == dtype
        np.testing.assert_allclose(as_float64(matrix.todense()), twin.toarray(), rtol=0, atol=0)
        target = jnp.complex128 if jnp.issubdtype(dtype, jnp.complexfloating) else jnp.float64
        wide = matrix.astype(target)
        assert wide.dtype == target and type(wide) is type(matrix)
        np.testing.assert_array_equal(wide.todense(), twin.toarray())
        assert matrix.to_scipy().dtype != np.dtype("V2")


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize(
    ("shape", "offsets"),
    [((6, 4), (-2, 0, 3)), ((3, 7), (-5, 1, 6)), ((5, 5), (0,)), ((44, 40), MANY_DIAGONALS)],
    ids=str,
)
def test_dia_transpose_is_dia(shape, offsets, jit):
    transpose = jax.jit(lambda a: a.T) if jit else (lambda a: a.transpose())
    matrix, twin = random_dia(np.random.default_rng(3), shape, offsets)
    result = transpose(matrix)
    assert isinstance(result, js.DIAMatrix)
    assert result.offsets == tuple(-o for o in offsets) and result.shape == shape[::-1]
    np.testing.assert_array_equal(result.todense(), twin.toarray().T.astype(np.float32))


@pytest.mark.parametrize(
    ("shape", "offsets"), [((6, 4), (-2, 0, 3)), ((44, 40), MANY_DIAGONALS)], ids=["3", "many"]
)
def test_dia_products_with_a_traced_transpose_shift_no_diagonals(shape, offsets):
    """Under `jit`, `A.T @ x` and `x @ A.T` are `A`'s transposed products: the compiled
    program holds nothing of `transpose_data` unless a matrix rebuilt from `A.T` (new
    values) needs its diagonals; each product is scipy's."""
    rng = np.random.default_rng(5)
    matrix, twin = random_dia(rng, shape, offsets, jnp.float64)
    x, X = rng.standard_normal(shape[0]), rng.standard_normal((shape[0], 3))
    y, Y = rng.standard_normal(shape[1]), rng.standard_normal((2, shape[1]))

    def products(a, x, X, y, Y):
        return a.T @ x, a.T @ X, y @ a.T, Y @ a.T, a.T.T @ y

    def rebuilt_product(a, x):
        return a.T.with_data(2 * a.T.data) @ x

    program = jax.jit(products).lower(matrix, x, X, y, Y).compile().as_text()
    assert "transpose_data" not in program
    rebuilt = jax.jit(rebuilt_product).lower(matrix, x).compile().as_text()
    assert "transpose_data" in rebuilt
    dense = twin.toarray()
    expected = (dense.T @ x, dense.T @ X, y @ dense.T, Y @ dense.T, dense @ y)
    for got, want in zip(jax.jit(products)(matrix, x, X, y, Y), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jax.jit(rebuilt_product)(matrix, x), 2 * dense.T @ x, rtol=1e-12)
    transposed_product = jax.jit(lambda d, x: matrix.with_data(d).T @ x)
    check_grads(transposed_product, (matrix.data, jnp.asarray(x)), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("shape", [(6, 4), (3, 7), (5, 0)], ids=str)
def test_csr_transpose_is_csr(shape, jit):
    transpose = jax.jit(lambda a: a.T) if jit else (lambda a: a.transpose())
    matrix, twin = random_csr(np.random.default_rng(3), shape, density=0.5, shuffle_columns=True)
    result = transpose(matrix)
    assert isinstance(result, js.CSRMatrix) and result.shape == shape[::-1]
    assert result.indices.dtype == matrix.indices.dtype
    np.testing.assert_array_equal(result.todense(), twin.toarray().T.astype(np.float32))
    np.testing.assert_array_equal(result.T.todense(), matrix.todense())


def test_dia_fromdense_found_and_given_offsets():
    rng = np.random.default_rng(4)
    _, twin = random_dia(rng, (6, 8), (-2, 1, 3), jnp.float64, junk_in_ignored_slots=False)
    dense = twin.toarray()
    found = js.DIAMatrix.fromdense(dense)
    assert found.offsets == (-2, 1, 3)
    np.testing.assert_array_equal(found.todense(), dense)
    given = jax.jit(js.DIAMatrix.fromdense, static_argnums=1)(dense, (-2, 0, 1, 3))
    assert given.offsets == (-2, 0, 1, 3)
    np.testing.assert_array_equal(given.todense(), dense)
    dropped = js.DIAMatrix.fromdense(dense, offsets=(1,))
    np.testing.assert_array_equal(dropped.todense(), np.triu(np.tril(dense, 1), 1))


def test_csr_fromdense_host_and_static_nnz_under_jit():
    rng = np.random.default_rng(5)
    _, twin = random_csr(rng, (7, 5), density=0.4, dtype=jnp.float64)
    dense = twin.toarray()
    host = js.CSRMatrix.fromdense(dense)
    assert host.nnz == twin.nnz
    np.testing.assert_array_equal(host.indptr, twin.indptr)
    np.testing.assert_array_equal(host.indices, twin.indices)
    padded = jax.jit(lambda d: js.CSRMatrix.fromdense(d, nnz=twin.nnz + 3))(dense)
    assert padded.nnz == twin.nnz + 3
    np.testing.assert_array_equal(padded.todense(), dense)
    padded.check()
    x = random_values(rng, (5, 2), jnp.float64)
    np.testing.assert_allclose(padded @ x, dense @ x, atol=1e-12)


def test_empty_shape_with_entries_is_a_value_error():
    values, positions = np.zeros(0, np.float32), np.zeros(0, np.int32)
    empty = js.CSRMatrix.fromdense(np.ones((0, 3), np.float32))
    factor = js.CSRMatrix.fromdense(np.ones((3, 2), np.float32))
    for build in (
        lambda: js.CSRMatrix.from_coo(values, positions, positions, (3, 0), nnz=2),
        lambda: jax.jit(lambda v, r, c: js.CSRMatrix.from_coo(v, r, c, (3, 0), nnz=2))(
            values, positions, positions
        ),
        lambda: jax.jit(lambda a, b: js.matmul(a, b, nnz=2))(empty, factor),
    ):
        with pytest.raises(ValueError, match="`nnz` must be 0 for an empty matrix"):
            build()
    assert js.matmul(empty, factor).shape == (0, 2)


def test_dia_tocsr_under_jit_matches_scipy():
    rng = np.random.default_rng(6)
    matrix, twin = random_dia(rng, (7, 5), (3, -1, 0, -9), jnp.float64)
    csr = jax.jit(lambda a: a.tocsr())(matrix)
    expected = scipy.sparse.csr_array(twin)
    assert isinstance(csr, js.CSRMatrix) and csr.nnz == matrix.nnz
    np.testing.assert_array_equal(csr.todense(), twin.toarray())
    assert np.all(np.diff(np.asarray(csr.indptr)) >= 0)
    expected.sort_indices()
    for row in range(7):
        lo, hi = int(csr.indptr[row]), int(csr.indptr[row + 1])
        assert list(csr.indices[lo:hi]) == sorted(csr.indices[lo:hi].tolist())
    back = csr.todia()
    np.testing.assert_array_equal(back.todense(), twin.toarray())


def test_structure_known_on_the_host_stays_known_under_jit():
    """Results built on the host from a known structure (transposes, slices, selections,
    DIA conversions) keep concrete index arrays inside `jit`, so host-side operations on
    them need no `nnz` there."""
    rng = np.random.default_rng(11)
    csr, csr_twin = random_csr(rng, (6, 6), density=0.4, dtype=jnp.float64, repeat_columns=True)
    dia, dia_twin = random_dia(rng, (6, 6), (-1, 0, 2), jnp.float64)

    def results(csr_values, dia_values):
        C, A = csr.with_data(csr_values), dia.with_data(dia_values)
        assert not isinstance(C.T.indices, jax.core.Tracer)
        return C[1:3], C + C.T, C[:, [0, 5]], C @ C.T, A[::2], A[:, [0, 5, 5]]

    expected = (
        csr_twin[1:3],
        csr_twin + csr_twin.T,
        csr_twin[:, [0, 5]],
        csr_twin @ csr_twin.T,
        dia_twin.tocsr()[::2],
        dia_twin.tocsr()[:, [0, 5, 5]],
    )
    for result, twin in zip(jax.jit(results)(csr.data, dia.data), expected, strict=True):
        np.testing.assert_allclose(result.todense(), twin.toarray(), atol=1e-12)
    weights = rng.standard_normal((6, 6))

    def loss(values):
        symmetric = csr.with_data(values) + csr.with_data(values).T
        return jnp.sum(weights * symmetric.todense())

    grad = jax.jit(jax.grad(loss))(csr.data)
    rows = np.repeat(np.arange(6), np.diff(csr_twin.indptr))
    np.testing.assert_allclose(grad, (weights + weights.T)[rows, csr_twin.indices], atol=1e-12)


def test_scalar_arithmetic_and_dia_addition():
    rng = np.random.default_rng(7)
    a, a_twin = random_dia(rng, (5, 6), (-1, 0, 2), jnp.float64)
    b, b_twin = random_dia(rng, (5, 6), (0, 1), jnp.float64)
    np.testing.assert_allclose((2.0 * a).todense(), 2.0 * a_twin.toarray())
    np.testing.assert_allclose((a * 3).todense(), 3 * a_twin.toarray())
    np.testing.assert_allclose((a / 4).todense(), a_twin.toarray() / 4)
    np.testing.assert_allclose((-a).todense(), -a_twin.toarray())
    total = a + b
    assert total.offsets == (-1, 0, 1, 2)
    np.testing.assert_allclose(total.todense(), (a_twin + b_twin).toarray())
    np.testing.assert_allclose((a - b).todense(), (a_twin - b_twin).toarray())
    c, c_twin = random_csr(rng, (5, 6), dtype=jnp.float64)
    np.testing.assert_allclose((0.5 * c).todense(), 0.5 * c_twin.toarray())


def test_check_under_jit_reports_bad_structure():
    rng = np.random.default_rng(8)
    matrix, _ = random_csr(rng, (4, 4), density=0.5)
    checked = jax.jit(lambda a: a.check())(matrix)
    np.testing.assert_array_equal(checked.indices, matrix.indices)
    # Build a matrix whose indices are out of range, bypassing the constructor's host checks
    # (as values computed under jit would).
    bad = js.CSRMatrix.__new__(js.CSRMatrix)
    for name, value in [
        ("data", matrix.data),
        ("indices", matrix.indices.at[0].set(7)),
        ("indptr", matrix.indptr),
        ("shape", matrix.shape),
    ]:
        object.__setattr__(bad, name, value)
    with pytest.raises(Exception, match="out of range"):
        jax.jit(lambda a: a.check().indices)(bad).block_until_ready()
    assert js.DIAMatrix(np.ones((1, 3)), (0,), (3, 3)).check().shape == (3, 3)


def test_leaves_and_static_fields():
    rng = np.random.default_rng(9)
    dia, _ = random_dia(rng, (4, 4), (0, 1))
    csr, _ = random_csr(rng, (4, 4))
    assert len(jax.tree.leaves(dia)) == 1
    assert [leaf.shape for leaf in jax.tree.leaves(csr)] == [(csr.nnz,), (csr.nnz,), (5,)]
    assert isinstance(dia.offsets, tuple) and all(type(o) is int for o in dia.offsets)
