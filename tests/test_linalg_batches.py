"""`js.linalg` and batched matrices: each function works on one matrix, so a matrix with
batch axes (from `jax.vmap`) is refused with a ValueError naming the batch, never answered
for one member; inside `jax.vmap` each member is solved."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import jaxsparse as js

OPERATIONS = {
    "spsolve": lambda A, b: js.linalg.spsolve(A, b),
    "factorized": lambda A, b: js.linalg.factorized(A).solve(b),
    "eigsh": lambda A, b: js.linalg.eigsh(A, 1)[0],
    "expm_multiply": lambda A, b: js.linalg.expm_multiply(A, b, norm_bound=20.0),
    "spilu0": lambda A, b: js.linalg.spilu0(A) @ b,
    "jacobi": lambda A, b: js.linalg.jacobi(A) @ b,
}


# Each operation's answer from the dense matrix (ILU(0) of a tridiagonal matrix has no
# fill to drop: it is the LU factorization, so its preconditioner solves exactly).
DENSE = {
    "spsolve": np.linalg.solve,
    "factorized": np.linalg.solve,
    "eigsh": lambda D, b: np.max(np.linalg.eigvalsh(D), keepdims=True),
    "expm_multiply": lambda D, b: scipy.linalg.expm(D) @ b,
    "spilu0": np.linalg.solve,
    "jacobi": lambda D, b: b / np.diagonal(D),
}


def _tridiagonal(n=6):
    return js.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(n, n), dtype=jnp.float64)


# `eigsh` under vmap compiles a batched Lanczos run, 4 s a format: the CSR one, the same
# code, is `slow`, which CI runs.
@pytest.mark.parametrize(
    "name, fmt",
    [
        pytest.param(name, fmt, marks=[pytest.mark.slow] if (name, fmt) == ("eigsh", "csr") else [])
        for name in sorted(OPERATIONS)
        for fmt in ("dia", "csr")
    ],
)
def test_a_batched_matrix_is_refused_and_vmap_solves_each_member(name, fmt):
    A = _tridiagonal()
    A = A if fmt == "dia" else A.tocsr()
    scales = jnp.array([1.0, 2.0], jnp.float64)
    batched = jax.vmap(lambda c: c * A)(scales)
    b = jnp.ones(A.shape[0], jnp.float64)
    with pytest.raises(ValueError, match=r"batch=\(2,\)"):
        OPERATIONS[name](batched, b)
    members = jax.vmap(lambda c: OPERATIONS[name](c * A, b))(scales)
    dense = np.asarray(A.todense())
    for c, member in zip(scales, members, strict=True):
        np.testing.assert_allclose(member, DENSE[name](float(c) * dense, b), rtol=1e-10)


def test_a_factorization_made_under_vmap_solves_only_inside_vmap():
    A = _tridiagonal()
    scales = jnp.array([1.0, 2.0], jnp.float64)
    factorizations = jax.vmap(lambda c: js.linalg.factorized(c * A))(scales)
    b = jnp.ones(A.shape[0], jnp.float64)
    with pytest.raises(ValueError, match=r"`Factorization.solve` .*batch=\(2,\)"):
        factorizations.solve(b)
    members = jax.vmap(lambda factors: factors.solve(b))(factorizations)
    dense = np.asarray(A.todense())
    for c, member in zip(scales, members, strict=True):
        np.testing.assert_allclose(member, np.linalg.solve(float(c) * dense, b), rtol=1e-10)
