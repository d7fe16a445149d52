"""`A[rows, cols]` with every kind of key on each axis (int, slice, list, boolean mask,
index array, `np.ix_`) against numpy's indexing of the dense matrix, and scipy's result
format; dense results under `jit` with traced index arrays, and their gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import random_csr, random_dia
from jax.test_util import check_grads

import jaxsparse as js

SHAPE = (6, 7)
MASK = np.array([True, False, True, True, False, True])

# (key, whether scipy's sparse array gives a sparse matrix there)
KEYS = [
    ((slice(1, 4), [0, 2, 2]), True),
    (([5, 0, 5], slice(1, 6)), True),
    (([1, 1, 4], [0, 6, 6]), False),
    ((2, slice(1, 4)), False),
    ((2, slice(None, None, -2)), False),
    ((slice(1, 5), 3), False),
    ((1, [6, 0, 3]), False),
    (([0, 5, 3], 4), False),
    ((np.array([[1], [2]]), 3), False),
    ((2, np.array([[1, 2], [3, 4]])), False),
    ((MASK,), True),
    ((MASK, slice(2, 5)), True),
    ((slice(None), np.array([True, False] * 3 + [True])), True),
    ((slice(None, None, -1), slice(1, 5)), True),
    ((slice(0, 6, 2), slice(0, 7, 3)), True),
    ((np.array([[0], [4]]), [1, 3, 1]), True),
    (np.ix_([4, 0], [6, 1, 1]), True),
    (([], slice(None)), True),
    ((slice(None), []), True),
    (([4], [0, 1, 2]), False),
    ((-1, [-1, -7]), False),
    ((), True),
]


def matrices(rng):
    """A CSR matrix with repeated positions and unsorted columns, and a DIA matrix, with
    their dense twins."""
    csr, csr_twin = random_csr(
        rng, SHAPE, density=0.5, dtype=jnp.float64, repeat_columns=True, shuffle_columns=True
    )
    dia, dia_twin = random_dia(rng, SHAPE, (-2, 0, 1, 3), jnp.float64)
    return [(csr, csr_twin.toarray()), (dia, dia_twin.toarray())]


@pytest.mark.parametrize(("key", "sparse"), KEYS)
def test_keys_match_numpy_and_scipys_result_format(key, sparse):
    rng = np.random.default_rng(11)
    for matrix, dense in matrices(rng):
        got = matrix[key]
        expected = dense[key]
        if sparse:
            assert isinstance(got, js.SparseMatrix)
            got = got.todense()
        else:
            assert isinstance(got, jax.Array)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=1e-12)
    # Sparse where scipy's is 2-D and sparse; dense where scipy's is 1-D (no 1-D format
    # here) or numpy's is 2-D beside a single row or column.
    scipy_result = scipy.sparse.csr_array(dense)[key]
    assert (not sparse or scipy.sparse.issparse(scipy_result)) and scipy_result.ndim == got.ndim


def test_traced_index_arrays_give_dense_results_under_jit_clamped_like_jnp():
    rng = np.random.default_rng(12)
    rows, cols = jnp.array([0, 5, -1, 9]), jnp.array([6, -2, 0, 3])

    @jax.jit
    def read(matrix, rows, cols):
        return matrix[rows, cols], matrix[2, cols], matrix[rows, 1], matrix[2, cols[None]]

    for matrix, dense in matrices(rng):
        clamped_rows, clamped_cols = np.array([0, 5, 5, 5]), np.array([6, 5, 0, 3])
        expected = (
            dense[clamped_rows, clamped_cols],
            dense[2, clamped_cols],
            dense[clamped_rows, 1],
            dense[2, clamped_cols[None]],
        )
        for got, want in zip(read(matrix, rows, cols), expected, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-12)


def test_narrow_traced_keys_are_widened_before_any_arithmetic():
    """int8 and uint8 keys on an axis of 300: `i + size` and the DIA offsets would wrap in
    the key's own dtype."""
    rng = np.random.default_rng(16)
    dense = np.diag(np.arange(1.0, 301.0)) + np.diag(rng.standard_normal(200), -100)
    for matrix in (js.CSRMatrix.fromdense(dense), js.DIAMatrix.fromdense(jnp.asarray(dense))):
        read = jax.jit(lambda a, i, j, cols: (a[i, j], a[i], a[i, cols]))
        for i, j in ((np.int8(-1), np.int8(-1)), (np.uint8(200), np.uint8(100)), (np.int8(100), 0)):
            cols = jnp.array([-1, 5, 127], jnp.int8)
            entry, row, picked = read(matrix, jnp.asarray(i), jnp.asarray(j), cols)
            np.testing.assert_allclose(entry, dense[i, j])
            np.testing.assert_allclose(row, dense[i])
            np.testing.assert_allclose(picked, dense[i, [-1, 5, 127]])


def test_a_boolean_mask_of_entries_picks_them_row_major():
    for matrix, dense in matrices(np.random.default_rng(17)):
        mask = dense > 0.3
        np.testing.assert_allclose(matrix[mask], dense[mask])
        with pytest.raises(IndexError, match=r"mask of entries must have shape \(6, 7\)"):
            matrix[np.ones((2, 2), bool)]


def test_entries_at_pairs_are_differentiable_in_the_values():
    rng = np.random.default_rng(13)
    rows, cols = np.array([0, 3, 3, 5]), np.array([1, 2, 6, 0])
    for matrix, _ in matrices(rng):

        def picked(data, matrix=matrix):
            return matrix.with_data(data)[rows, cols]

        check_grads(picked, (matrix.data,), order=2, modes=("fwd", "rev"))


def test_selections_that_change_the_number_of_entries_refuse_traced_keys():
    matrix, _ = matrices(np.random.default_rng(14))[0]
    with pytest.raises(TypeError, match="selecting a list of rows"):
        jax.jit(lambda a, rows: a[rows, 1:3])(matrix, jnp.array([0, 2]))
    with pytest.raises(TypeError, match="selecting a list of rows"):
        jax.jit(lambda a, rows: a[rows[:, None], [0, 1]])(matrix, jnp.array([0, 2]))
    with pytest.raises(TypeError, match="boolean mask of rows"):
        jax.jit(lambda a, mask: a[mask, 1])(matrix, jnp.asarray(MASK))


@pytest.mark.parametrize(
    ("key", "error", "message"),
    [
        (None, IndexError, "no `None`"),
        ((1, None), IndexError, "no `None`"),
        (1.5, IndexError, "row index must be an integer"),
        ((1, True), IndexError, "column index must be an integer"),
        (np.array([True, False]), IndexError, r"mask of rows must have shape \(6,\)"),
        ((0, 7), IndexError, "column index 7 is out of range"),
        (([0, 6], 1), IndexError, "row index out of range"),
        (np.zeros((2, 2, 2), int), IndexError, "at most 2 dimensions"),
        (([0, 1], [0, 1, 2]), IndexError, "do not broadcast together"),
        ((0, 1, 2), IndexError, "at most two indices"),
        (np.array([[0, 1], [2, 3]]), IndexError, "beside a slice it must be 1-D"),
        ((np.array([[0], [2]]), slice(1, 3)), IndexError, "beside a slice it must be 1-D"),
        (np.array([2**40], np.uint64), IndexError, r"out of range for size 6: \[1099511627776\]"),
        (np.zeros(0), IndexError, "must be an integer"),
    ],
)
def test_bad_keys_raise_naming_the_axis(key, error, message):
    for matrix, _ in matrices(np.random.default_rng(15)):
        with pytest.raises(error, match=message):
            matrix[key]
