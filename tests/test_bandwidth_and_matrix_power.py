"""`js.linalg.spbandwidth`, `is_sptriangular` and `matrix_power` against scipy's, for both
formats; `matrix_power` under `jit` and its derivatives."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from helpers import random_csr
from jax.test_util import check_grads

import jaxsparse as js


def structures():
    """scipy matrices: general, lower and upper triangular, diagonal, empty, and a DIA
    matrix storing an all-zero diagonal (which counts, as in scipy)."""
    S = scipy.sparse.random_array((12, 12), density=0.2, format="csr", rng=1)
    zero_diagonal = scipy.sparse.dia_array((np.array([[1.0] * 5, [0.0] * 5]), [0, 3]), (5, 5))
    return [
        S,
        scipy.sparse.tril(S, -1, format="csr"),
        scipy.sparse.triu(S, 2, format="csr"),
        scipy.sparse.eye_array(4, format="csr"),
        scipy.sparse.csr_array((3, 3)),
        zero_diagonal,
    ]


@pytest.mark.parametrize("index", range(6))
def test_bandwidth_and_triangularity_match_scipy(index):
    twin = structures()[index]
    matrices = [js.DIAMatrix.from_scipy(twin.todia())]
    if twin.format != "dia":  # scipy's CSR conversion would drop the zero diagonal
        matrices.append(js.CSRMatrix.from_scipy(twin.tocsr()))
        expected = scipy.sparse.linalg.spbandwidth(twin) if twin.nnz else (0, 0)
    else:
        expected = scipy.sparse.linalg.spbandwidth(twin)
    lower, upper = scipy.sparse.linalg.is_sptriangular(twin) if twin.nnz else (True, True)
    for matrix in matrices:
        assert js.linalg.spbandwidth(matrix) == expected
        assert js.linalg.is_sptriangular(matrix) == (bool(lower), bool(upper))


def test_bandwidth_of_a_traced_csr_structure_is_a_type_error():
    matrix, _ = random_csr(np.random.default_rng(0), (5, 5), dtype=jnp.float32)
    with pytest.raises(TypeError, match="traced"):
        jax.jit(js.linalg.spbandwidth)(matrix)


@pytest.mark.parametrize("power", [0, 1, 2, 5])
def test_matrix_power_matches_scipy(power):
    twin = scipy.sparse.random_array((9, 9), density=0.3, format="csr", rng=2)
    band = scipy.sparse.diags_array([1.0, -2.0, 0.5], offsets=[-1, 0, 2], shape=(9, 9))
    for matrix, source in (
        (js.CSRMatrix.from_scipy(twin), twin),
        (js.DIAMatrix.from_scipy(band.todia()), band),
    ):
        result = js.linalg.matrix_power(matrix, power)
        assert result.format == matrix.format
        expected = scipy.sparse.linalg.matrix_power(source.tocsr(), power)
        np.testing.assert_allclose(result.todense(), expected.toarray(), rtol=1e-12)


def test_matrix_power_of_dia_runs_under_jit_and_differentiates():
    band = js.diags([0.5, -2.0, 1.0], [-1, 0, 1], (6, 6), dtype=jnp.float64)

    def cubed(data):
        return js.linalg.matrix_power(band.with_data(data), 3).todense()

    np.testing.assert_allclose(jax.jit(cubed)(band.data), np.linalg.matrix_power(band.todense(), 3))
    check_grads(cubed, (band.data,), order=1, modes=("fwd", "rev"))


def test_matrix_power_arguments_are_checked():
    with pytest.raises(ValueError, match="square"):
        js.linalg.matrix_power(js.eye(2, 3), 2)
    for power in (-1, 1.5, True):
        with pytest.raises(ValueError, match="int >= 0"):
            js.linalg.matrix_power(js.eye(3), power)
    with pytest.raises(TypeError, match="jaxsparse matrix"):
        js.linalg.matrix_power(np.eye(3), 2)
