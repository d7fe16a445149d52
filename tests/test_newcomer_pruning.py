"""Dropping all-zero diagonals: `DIAMatrix.eliminate_zeros()`, and Pauli-term Hamiltonians
built from raising and lowering operators, which have none to drop."""

import functools

import jax.numpy as jnp
import numpy as np
from helpers import assert_close

import jaxsparse as js

X = np.array([[0.0, 1.0], [1.0, 0.0]], np.complex128)
Y = np.array([[0.0, -1.0j], [1.0j, 0.0]], np.complex128)
RAISE = np.array([[0.0, 1.0], [0.0, 0.0]], np.complex128)  # sigma+ = (X + iY) / 2


def chain_term(site_matrices: dict, sites: int):
    """The Kronecker product over `sites` of the given 2 x 2 matrices (identity elsewhere),
    as a jaxsparse DIA matrix and as a dense numpy array."""
    factors = [site_matrices.get(i, np.eye(2, dtype=np.complex128)) for i in range(sites)]
    sparse = functools.reduce(js.kron, [js.DIAMatrix.fromdense(jnp.asarray(f)) for f in factors])
    return sparse, functools.reduce(np.kron, factors)


def test_xx_plus_yy_prunes_to_the_hopping_diagonals():
    sites = 4
    total, dense = None, 0
    for i in range(sites - 1):
        for pauli in (X, Y):
            term, term_dense = chain_term({i: pauli, i + 1: pauli}, sites)
            total = term if total is None else total + term
            dense = dense + term_dense
    pruned = total.eliminate_zeros()
    assert_close(pruned.todense(), dense, jnp.complex128)
    nonzero_offsets = sorted({int(j - i) for i, j in zip(*np.nonzero(dense), strict=True)})
    assert list(pruned.offsets) == nonzero_offsets
    assert len(total.offsets) > len(pruned.offsets)  # XX and YY cancel on some diagonals

    # The same Hamiltonian from sigma+ sigma- + sigma- sigma+ (XX + YY = 2 (s+ s- + s- s+))
    # stores only nonzero diagonals to begin with.
    hopping = None
    for i in range(sites - 1):
        for first, second in ((RAISE, RAISE.T), (RAISE.T, RAISE)):
            term, _ = chain_term({i: first, i + 1: second}, sites)
            hopping = term if hopping is None else hopping + term
    hopping = 2.0 * hopping
    assert_close(hopping.todense(), dense, jnp.complex128)
    assert hopping.offsets == hopping.eliminate_zeros().offsets


def test_finite_difference_product_prunes_to_three_diagonals():
    n = 8
    d1 = js.diags([-jnp.ones(n - 1), jnp.ones(n - 1)], [0, 1], shape=(n - 1, n))
    dx = js.kron(js.eye(n), d1)
    weights = jnp.linspace(1.0, 2.0, dx.shape[0])
    operator = dx.T @ js.diags(weights) @ dx
    assert len(operator.offsets) == 2 * n + 1
    pruned = operator.eliminate_zeros()
    assert pruned.offsets == (-1, 0, 1)
    dense_dx = np.asarray(dx.todense())
    expected = dense_dx.T @ np.diag(np.asarray(weights)) @ dense_dx
    assert_close(pruned.todense(), expected, jnp.float64)
    x = jnp.arange(float(n * n))
    assert_close(pruned @ x, operator @ x, jnp.float64, scale=float(np.abs(expected @ x).max()))
