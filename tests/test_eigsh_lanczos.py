"""The thick-restart Lanczos core of `eigsh`: the basis stays orthonormal with one
Gram-Schmidt pass per step (a second only when the first cancels), and `bar` ends a run
whose wanted value cannot beat it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsparse.linalg._eigsh_lanczos import (
    _Basis,
    _extend,
    start_vector,
    thick_restart_lanczos,
    wanted_key,
)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.complex128])
def test_basis_stays_orthonormal_over_the_whole_space(dtype):
    """`ncv = n` steps on a matrix with clustered extremes, where Lanczos without full
    reorthogonalization loses orthogonality within a few dozen steps: the basis must stay
    orthonormal to working precision and the projected matrix equal `V^H A V`."""
    n = 80
    rng = np.random.default_rng(0)
    values = np.concatenate([np.linspace(0, 1, n - 4), [10, 10 + 1e-9, 20, 20 + 1e-6]])
    Q, _ = np.linalg.qr(
        rng.standard_normal((n, n))
        + (1j if dtype == jnp.complex128 else 0) * rng.standard_normal((n, n))
    )
    A = jnp.asarray((Q * values) @ Q.conj().T, dtype)
    v0 = start_vector(None, n, dtype)
    vectors = jnp.zeros((n + 1, n), dtype).at[0].set(v0)
    basis = _extend(
        lambda v: A @ v,
        _Basis(vectors, jnp.zeros((n, n), dtype)),
        0,
        n,
        jax.random.key(0),
        lambda v: v,
    )
    V = np.asarray(basis.vectors[:n])
    np.testing.assert_allclose(V @ V.conj().T, np.eye(n), atol=1e-12)
    projected = V.conj() @ np.asarray(A) @ V.T
    np.testing.assert_allclose(np.asarray(basis.projected), projected, atol=1e-11)


def test_bar_ends_a_run_whose_value_cannot_be_wanted():
    """Eigenvalues `1 .. 400`, largest wanted: with `bar` above every eigenvalue the run
    stops, reporting convergence, while the Ritz pair is still far from converged (its
    residual bounds it below `bar`); without `bar` it converges to 400."""
    n = 400
    diagonal = jnp.arange(1.0, n + 1)

    def run(bar):
        return thick_restart_lanczos(
            lambda v: (diagonal * v.T).T,
            start_vector(None, n, jnp.float64),
            k=1,
            ncv=12,
            which="LA",
            tol=1e-12,
            maxiter=10_000,
            bar=bar,
        )

    bar = wanted_key(jnp.float64(n + 50), "LA")
    early = run(bar)
    value, vector = early.values[0], early.vectors[:, 0]
    residual = float(jnp.linalg.norm(diagonal * vector - value * vector))
    assert bool(early.converged)
    assert residual > 1e-6  # stopped long before `tol`
    assert float(wanted_key(value, "LA")) - residual > float(bar)
    full = run(None)
    assert bool(full.converged)
    np.testing.assert_allclose(float(full.values[0]), n, rtol=1e-12)
