"""`native_banded_lu.banded_solve`, the one-pass banded solve that `spsolve` runs for DIA
matrices, against scipy: `A`, `A^T` and `A^H`, narrow bands with compile-time widths and a
wider one, vectors and many columns, and systems large enough to be split over two threads
(diagonally dominant by rows or by columns) or solved in one pass (not dominant, needing
pivots, singular). The native and host paths agree."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from helpers import as_float64, dtype_id, random_values

import jaxsparse as js
from jaxsparse.kernels import native_banded_lu

# Above the native kernel's split threshold (2^14 rows).
SPLIT_ROWS = 20_000
TOLERANCES = {
    np.dtype(jnp.float32): 2e-4,
    np.dtype(jnp.complex64): 2e-4,
    np.dtype(jnp.float64): 1e-11,
    np.dtype(jnp.complex128): 1e-11,
}


def _dominant(data, offsets, by):
    """`data` with the main diagonal set to dominate its rows (`by="rows"`) or columns."""
    n = data.shape[1]
    matrix = scipy.sparse.dia_array((as_float64(data), offsets), shape=(n, n))
    magnitudes = abs(matrix).tocsr()
    sums = np.asarray(magnitudes.sum(axis=1 if by == "rows" else 0)).ravel()
    main = offsets.index(0)
    own = np.abs(as_float64(data[main]))
    data = data.copy()
    data[main] = (sums - own + 0.5 + np.abs(data[main].real)).astype(data.dtype)
    return data


def _oracle(data, offsets, b, op):
    n = data.shape[1]
    matrix = scipy.sparse.dia_array((as_float64(data), offsets), shape=(n, n))
    system = {"N": matrix, "T": matrix.T, "H": matrix.conj().T}[op]
    return scipy.sparse.linalg.spsolve(scipy.sparse.csc_array(system), as_float64(b)).reshape(
        b.shape
    )


def _check(data, offsets, b, op, *, host=False):
    x = jax.jit(
        lambda data, b: native_banded_lu.banded_solve(data, b, offsets=offsets, op=op, host=host)
    )(jnp.asarray(data), jnp.asarray(b))
    expected = _oracle(data, offsets, b, op)
    scale = float(np.max(np.abs(expected)))
    error = float(np.max(np.abs(as_float64(x) - expected))) / scale
    assert x.dtype == data.dtype
    assert error < TOLERANCES[np.dtype(data.dtype)], error


BANDS = {
    "tridiagonal": (-1, 0, 1),
    "pentadiagonal": (-2, -1, 0, 1, 2),
    "lower-bidiagonal": (-1, 0),
    "wider-unsymmetric": (-3, 0, 1, 2),
}


@pytest.mark.parametrize("op", ["N", "T", "H"])
@pytest.mark.parametrize("by", ["rows", "columns"])
@pytest.mark.parametrize("band", list(BANDS))
def test_split_solves_of_dominant_systems(band, by, op):
    rng = np.random.default_rng(11)
    offsets = BANDS[band]
    data = _dominant(random_values(rng, (len(offsets), SPLIT_ROWS), jnp.complex128), offsets, by)
    _check(data, offsets, random_values(rng, (SPLIT_ROWS, 1), jnp.complex128), op)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64, jnp.complex64], ids=dtype_id)
@pytest.mark.parametrize("columns", [1, 3])
def test_split_solves_in_every_dtype(dtype, columns):
    rng = np.random.default_rng(12)
    offsets = BANDS["pentadiagonal"]
    data = _dominant(random_values(rng, (5, SPLIT_ROWS), dtype), offsets, "rows")
    _check(data, offsets, random_values(rng, (SPLIT_ROWS, columns), dtype), "N")


@pytest.mark.parametrize("band", ["tridiagonal", "wider-unsymmetric"])
def test_systems_not_dominant_are_solved_in_one_pass(band):
    """Random diagonals (not dominant), and a zero main diagonal: every pivot from below."""
    rng = np.random.default_rng(13)
    offsets = BANDS[band]
    data = random_values(rng, (len(offsets), SPLIT_ROWS), jnp.float64).copy()
    data[offsets.index(0)] += 1.0
    b = random_values(rng, (SPLIT_ROWS, 2), jnp.float64)
    _check(data, offsets, b, "N")
    _check(data, offsets, b, "T")
    data[offsets.index(0)] = 0.0
    _check(data, offsets, b, "N")


def test_dominant_by_rows_in_one_half_and_columns_in_the_other():
    """Neither kind of dominance holds for the whole matrix: still the right answer."""
    rng = np.random.default_rng(14)
    offsets = BANDS["tridiagonal"]
    data = random_values(rng, (3, SPLIT_ROWS), jnp.float64).copy()
    rows = _dominant(data, offsets, "rows")
    columns = _dominant(data, offsets, "columns")
    half = SPLIT_ROWS // 2
    data[1, :half], data[1, half:] = rows[1, :half], columns[1, half:]
    _check(data, offsets, random_values(rng, (SPLIT_ROWS, 1), jnp.float64), "N")


@pytest.mark.parametrize("rows", [40, SPLIT_ROWS])
def test_singular_systems_give_nan(rows):
    rng = np.random.default_rng(15)
    offsets = BANDS["tridiagonal"]
    data = _dominant(random_values(rng, (3, rows), jnp.float64), offsets, "rows")
    data[:, rows // 3] = 0.0  # column rows // 3 of A is zero (and row rows // 3 - 1 partly)
    data[1, rows // 3] = 0.0
    data[0, rows // 3 + 1] = 0.0
    data[2, rows // 3 - 1] = 0.0
    dense_column = scipy.sparse.dia_array((data, offsets), shape=(rows, rows)).tocsc()
    assert dense_column[:, [rows // 3]].nnz == 0
    x = native_banded_lu.banded_solve(
        jnp.asarray(data), jnp.ones((rows, 1)), offsets=offsets, op="N"
    )
    assert np.all(np.isnan(x))


@pytest.mark.parametrize("op", ["N", "T", "H"])
@pytest.mark.parametrize("band", list(BANDS))
def test_native_and_host_paths_agree_on_small_systems(band, op):
    rng = np.random.default_rng(16)
    offsets = BANDS[band]
    data = random_values(rng, (len(offsets), 30), jnp.complex64).copy()
    data[offsets.index(0)] += 3.0
    b = random_values(rng, (30, 2), jnp.complex64)
    _check(data, offsets, b, op)
    _check(data, offsets, b, op, host=True)


def test_spsolve_of_a_large_band_with_its_gradient():
    """`spsolve` on the split path, and its gradient (the adjoint solve, also split) against
    a finite difference along a random direction."""
    rng = np.random.default_rng(17)
    offsets = BANDS["tridiagonal"]
    data = _dominant(random_values(rng, (3, SPLIT_ROWS), jnp.float64), offsets, "rows")
    b = random_values(rng, (SPLIT_ROWS,), jnp.float64)
    matrix = js.DIAMatrix(jnp.asarray(data), offsets, (SPLIT_ROWS, SPLIT_ROWS))
    weights = jnp.asarray(random_values(rng, (SPLIT_ROWS,), jnp.float64))

    def loss(values, b):
        return jnp.vdot(weights, js.linalg.spsolve(matrix.with_data(values), b))

    grad_values, grad_b = jax.jit(jax.grad(loss, argnums=(0, 1)))(matrix.data, b)
    direction = jnp.asarray(random_values(rng, data.shape, jnp.float64))
    step = 1e-6
    slope = (loss(matrix.data + step * direction, b) - loss(matrix.data - step * direction, b)) / (
        2 * step
    )
    np.testing.assert_allclose(jnp.vdot(grad_values, direction), slope, rtol=1e-6)
    np.testing.assert_allclose(grad_b, _oracle(data, offsets, np.asarray(weights), "T"), rtol=1e-9)
