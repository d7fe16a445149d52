"""`js.linalg.spsolve_triangular` against `scipy.sparse.linalg.spsolve_triangular`: both
triangles, unit diagonals, one and several right-hand sides, both formats; `jit`,
derivatives, a zero on the diagonal, and argument errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from jax.test_util import check_grads

import jaxsparse as js

N = 16


def system():
    """A diagonally dominant scipy matrix with entries on both sides of the diagonal (its
    other triangle is ignored), and right-hand sides."""
    rng = np.random.default_rng(3)
    twin = scipy.sparse.random_array((N, N), density=0.3, format="csr", rng=rng)
    twin = (twin + 4 * scipy.sparse.eye_array(N)).tocsr()
    return twin, rng.standard_normal(N), rng.standard_normal((N, 3))


@pytest.mark.parametrize("unit_diagonal", [False, True])
@pytest.mark.parametrize("lower", [True, False])
def test_solutions_match_scipys_on_the_triangle(lower, unit_diagonal):
    twin, b, B = system()
    triangle = (scipy.sparse.tril if lower else scipy.sparse.triu)(twin, format="csr")
    for matrix in (js.CSRMatrix.from_scipy(twin), js.DIAMatrix.from_scipy(twin.todia())):
        for rhs in (b, B):
            expected = scipy.sparse.linalg.spsolve_triangular(
                triangle, rhs, lower=lower, unit_diagonal=unit_diagonal
            )
            got = js.linalg.spsolve_triangular(
                matrix, rhs, lower=lower, unit_diagonal=unit_diagonal
            )
            np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_jit_derivatives_and_a_singular_triangle():
    twin, b, _ = system()
    matrix = js.CSRMatrix.from_scipy(twin)
    solve = jax.jit(lambda a, b: js.linalg.spsolve_triangular(a, b, lower=False))
    upper = scipy.sparse.triu(twin, format="csr")
    expected = scipy.sparse.linalg.spsolve_triangular(upper, b, lower=False)
    np.testing.assert_allclose(solve(matrix, b), expected, rtol=1e-10)

    def unit_lower(data, b):
        return js.linalg.spsolve_triangular(matrix.with_data(data), b, unit_diagonal=True)

    check_grads(unit_lower, (matrix.data, jnp.asarray(b)), order=1, modes=("fwd", "rev"))
    singular = js.CSRMatrix.fromdense(jnp.array([[0.0, 0.0], [1.0, 1.0]]))
    assert np.all(np.isnan(js.linalg.spsolve_triangular(singular, jnp.ones(2))))


def test_arguments_are_checked():
    twin, b, _ = system()
    matrix = js.CSRMatrix.from_scipy(twin)
    with pytest.raises(ValueError, match="square"):
        js.linalg.spsolve_triangular(js.eye(3, 4), jnp.ones(3))
    with pytest.raises(TypeError, match="`lower` must be True or False"):
        js.linalg.spsolve_triangular(matrix, b, lower="yes")
    with pytest.raises(TypeError, match="DIAMatrix or CSRMatrix"):
        js.linalg.spsolve_triangular(twin, b)
    with pytest.raises(TypeError, match="`unit_diagonal=True` adds the diagonal"):
        jax.jit(lambda a: js.linalg.spsolve_triangular(a, b, unit_diagonal=True))(matrix)
