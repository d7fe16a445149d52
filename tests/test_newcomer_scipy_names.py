"""COO construction and the scipy names a newcomer tries first, against scipy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import assert_close
from jax.test_util import check_grads

import jaxsparse as js

ROW = np.array([0, 2, 2, 0, 1, 2, 0])
COL = np.array([0, 0, 1, 0, 3, 1, 2])
DATA = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0])
SHAPE = (3, 4)
TWIN = scipy.sparse.coo_array((DATA, (ROW, COL)), shape=SHAPE).tocsr()


def test_coo_construction_sums_repeats():
    matrix = js.CSRMatrix((DATA, (ROW, COL)), shape=SHAPE)
    assert matrix.nnz == 5  # distinct positions, the explicit zero kept
    assert_close(matrix.todense(), TWIN.toarray(), jnp.float64)
    same = js.CSRMatrix.from_coo(DATA, ROW, COL, SHAPE)
    np.testing.assert_array_equal(same.indptr, matrix.indptr)
    three = js.CSRMatrix((matrix.data, matrix.indices, matrix.indptr), shape=SHAPE)
    assert_close(three.todense(), TWIN.toarray(), jnp.float64)
    with pytest.raises(ValueError, match="`col` out of range"):
        js.CSRMatrix.from_coo(DATA, ROW, COL + 2, SHAPE)
    with pytest.raises(TypeError, match="shape"):
        js.CSRMatrix((DATA, (ROW, COL)))
    # scipy's `csr_array((m, n))` and `dia_array((m, n))`: an empty matrix of that shape.
    pairs = ((js.CSRMatrix, scipy.sparse.csr_array), (js.DIAMatrix, scipy.sparse.dia_array))
    for build, twin in pairs:
        empty = build(SHAPE)
        assert empty.shape == twin(SHAPE).shape and empty.nnz == 0
        np.testing.assert_array_equal(empty.todense(), twin(SHAPE).toarray())
        with pytest.raises(ValueError, match="differs"):
            build(SHAPE, shape=(4, 3))


def test_coo_construction_under_jit_with_gradient():
    build = jax.jit(lambda d, r, c: js.CSRMatrix.from_coo(d, r, c, SHAPE, nnz=6))
    matrix = build(jnp.asarray(DATA), jnp.asarray(ROW), jnp.asarray(COL))
    assert matrix.nnz == 6  # one padding entry, an explicit zero
    assert_close(matrix.todense(), TWIN.toarray(), jnp.float64)
    x = jnp.arange(1.0, 5.0)

    def loss(values):
        return jnp.sum(build(values, jnp.asarray(ROW), jnp.asarray(COL)) @ x)

    expected = x[COL]  # d/d data[p] of sum(A @ x) is x[col[p]]
    assert_close(jax.grad(loss)(jnp.asarray(DATA)), expected, jnp.float64)
    too_few = jax.jit(lambda d, r, c: js.CSRMatrix.from_coo(d, r, c, SHAPE, nnz=3))
    with pytest.raises(Exception, match="smaller than"):
        jax.block_until_ready(too_few(jnp.asarray(DATA), jnp.asarray(ROW), jnp.asarray(COL)).data)
    none = jax.jit(lambda d, r, c: js.CSRMatrix.from_coo(d, r, c, SHAPE, nnz=0).todense())
    with pytest.raises(ValueError, match="`nnz`=0 is smaller"):
        none(jnp.asarray(DATA), jnp.asarray(ROW), jnp.asarray(COL))


def test_tocoo_round_trip():
    matrix = js.CSRMatrix.from_scipy(TWIN)
    data, row, col = matrix.tocoo()
    again = scipy.sparse.coo_array((np.asarray(data), (np.asarray(row), np.asarray(col))), SHAPE)
    np.testing.assert_array_equal(again.toarray(), TWIN.toarray())


@pytest.fixture(scope="module", params=["dia", "csr"])
def matrix(request):
    twin = scipy.sparse.csr_array(TWIN)
    if request.param == "dia":
        return js.DIAMatrix.from_scipy(twin), twin
    return js.CSRMatrix.from_scipy(twin), twin


def test_scipy_methods(matrix):
    A, twin = matrix
    dense = twin.toarray()
    copied = A.copy()
    assert copied.data is not A.data
    assert_close(copied.todense(), dense, jnp.float64)
    assert int(A.count_nonzero()) == twin.count_nonzero()
    rows, cols = A.nonzero()
    expected_rows, expected_cols = np.nonzero(dense)
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_array_equal(cols, expected_cols)
    assert_close(A.mean(), twin.mean(), jnp.float64)
    assert_close(A.mean(axis=0), twin.mean(axis=0), jnp.float64)
    assert_close(A.mean(axis=1), twin.mean(axis=1), jnp.float64)
    assert_close(A.power(2).todense(), twin.power(2).toarray(), jnp.float64)
    for k in (-1, 0, 1):
        assert_close(js.tril(A, k).todense(), scipy.sparse.tril(twin, k).toarray(), jnp.float64)
        assert_close(js.triu(A, k).todense(), scipy.sparse.triu(twin, k).toarray(), jnp.float64)
    assert js.issparse(A) and not js.issparse(dense)
    for key in ([2, 0], [1, 1, 0], slice(None, None, 2), slice(None, None, -1)):
        assert_close(A[key].todense(), twin[key].toarray(), jnp.float64)
    assert_close(A[:, [3, 0]].todense(), twin[:, [3, 0]].toarray(), jnp.float64)
    assert_close(A[:, ::2].todense(), twin[:, ::2].toarray(), jnp.float64)
    with pytest.raises(IndexError, match="out of range"):
        A[[0, 5]]


def test_setdiag_and_eliminate_zeros_on_dia():
    twin = scipy.sparse.dia_array(TWIN.toarray())
    A = js.DIAMatrix.from_scipy(twin)
    for values, k in ((7.0, 0), (np.array([8.0, 9.0]), 1), (np.array([1.0, 2.0, 3.0]), -2)):
        expected = twin.tolil()
        expected.setdiag(values, k)
        result = A.setdiag(jnp.asarray(values), k)
        assert_close(result.todense(), expected.toarray(), jnp.float64)
    zero_diagonal = js.diags([jnp.zeros(3), jnp.ones(4), jnp.zeros(3)], [-1, 0, 2], shape=(4, 4))
    pruned = zero_diagonal.eliminate_zeros()
    assert pruned.offsets == (0,)
    assert_close(pruned.todense(), zero_diagonal.todense(), jnp.float32)
    # Offset -3 of a 4 x 4 matrix has one slot inside, in column 0; column 3 is ignored.
    junk = js.DIAMatrix(jnp.array([[0, 0, 0, 5.0]]), (-3,), (4, 4))
    assert junk.eliminate_zeros().offsets == ()
    kept = js.DIAMatrix(jnp.array([[5.0, 0, 0, 0]]), (-3,), (4, 4))
    assert kept.eliminate_zeros().offsets == (-3,)


def test_setdiag_on_csr_matches_scipy():
    """Positions not stored are added, every copy of a repeated one is replaced (`TWIN`'s
    row 0 stores column 0 twice); values may be traced with the structure closed over, and
    the derivatives reach the kept values and the new ones."""
    order = np.argsort(ROW, kind="stable")  # the entries by row, repeats kept
    indptr = np.concatenate([[0], np.cumsum(np.bincount(ROW, minlength=SHAPE[0]))])
    A = js.CSRMatrix(DATA[order], COL[order], indptr, SHAPE)
    for values, k in ((7.0, 0), (np.array([8.0, 9.0]), 1), (np.arange(5.0), -1), (2.0, 3)):
        expected = TWIN.copy()
        expected.setdiag(values, k)
        result = A.setdiag(jnp.asarray(values), k)
        assert isinstance(result, js.CSRMatrix)
        assert_close(result.todense(), expected.toarray(), jnp.float64)

    def set_first(data, values):
        return A.with_data(data).setdiag(values, 1).todense()

    check_grads(set_first, (A.data, jnp.array([8.0, 9.0])), 1, ("fwd", "rev"))
    with pytest.raises(TypeError, match="index arrays are traced"):
        jax.jit(lambda a: a.setdiag(1.0))(A)
    with pytest.raises(ValueError, match="`k` exceeds array dimensions"):
        A.setdiag(1.0, 4)
    with pytest.raises(TypeError, match="imaginary parts"):
        A.setdiag(1j)
    for k in ([0, 1], [], 1.5, True):
        with pytest.raises(TypeError, match="`k` must be an int"):
            A.setdiag(1.0, k)


def test_setdiag_keeps_the_matrix_dtype():
    """Values are cast to the matrix's dtype, as scipy's `setdiag` and `.at[].set` do;
    complex values into a real matrix are refused rather than losing their imaginary part."""
    dense = jnp.eye(3, dtype=jnp.float16)
    values = np.array([1.5, 2.5, 3.5])  # float64
    result = js.DIAMatrix.fromdense(dense).setdiag(values, 1)
    assert result.dtype == jnp.float16
    expected = dense.at[[0, 1], [1, 2]].set(values[:2].astype(np.float16))
    np.testing.assert_array_equal(result.todense(), expected)
    with pytest.raises(TypeError, match="imaginary parts"):
        js.eye(3).setdiag(1j)


def test_bmat_aliases_and_npz(tmp_path):
    A = js.CSRMatrix.from_scipy(TWIN)
    B = js.eye(3)
    result = js.bmat([[A, None], [None, B]])
    expected = scipy.sparse.bmat([[TWIN, None], [None, scipy.sparse.eye(3)]])
    assert_close(result.todense(), expected.toarray(), jnp.float64)
    with pytest.raises(ValueError, match="block column 0"):
        js.bmat([[A, None], [B, None]])
    # A block row or column of None only is empty, as scipy's.
    for grid, twins in (([[A, None], [A, None]], [[TWIN, None], [TWIN, None]]), ([[None]],) * 2):
        result, expected = js.bmat(grid), scipy.sparse.bmat(twins)
        assert result.shape == expected.shape
        np.testing.assert_array_equal(result.todense(), expected.toarray())
    assert_close(
        js.diags_array([1.0, 2.0], offsets=[0, 1], shape=(3, 3)).todense(),
        scipy.sparse.diags_array([1.0, 2.0], offsets=[0, 1], shape=(3, 3)).toarray(),
        jnp.float64,
    )
    assert_close(
        js.eye_array(3, 4, k=1).todense(), scipy.sparse.eye_array(3, 4, k=1).toarray(), jnp.float64
    )
    for saved in (A, js.DIAMatrix.from_scipy(TWIN)):
        path = tmp_path / f"{saved.format}.npz"
        js.save_npz(path, saved)
        loaded = js.load_npz(path)
        assert loaded.format == saved.format
        assert_close(loaded.todense(), TWIN.toarray(), jnp.float64)
        assert_close(scipy.sparse.load_npz(path).toarray(), TWIN.toarray(), jnp.float64)
