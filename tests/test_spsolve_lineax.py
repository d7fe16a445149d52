"""`js.linalg.LineaxSparseLU`: lineax's `linear_solve` on `js.lineax_operator(A)` with the
sparse factorization, against dense `jnp` math, values and derivatives in both modes."""

import jax
import jax.numpy as jnp
import lineax
import numpy as np
import pytest
from helpers import dtype_id, invertible_nonsymmetric, random_values

import jaxsparse as js


def _solve_cases():
    """Every format, dtype and transposition; the fast suite takes the half in which each
    pair of them meets once, the rest is `slow`."""
    for fmt in ("dia", "csr"):
        for dtype in (jnp.float64, jnp.complex128):
            for transposed in (False, True):
                other_half = (fmt == "csr") ^ (dtype == jnp.complex128) ^ transposed
                yield pytest.param(
                    fmt,
                    dtype,
                    transposed,
                    id=f"{fmt}-{dtype_id(dtype)}-{'A.T' if transposed else 'A'}",
                    marks=[pytest.mark.slow] if other_half else [],
                )


@pytest.mark.parametrize(("fmt", "dtype", "transposed"), list(_solve_cases()))
def test_linear_solve_and_derivatives_match_dense(fmt, dtype, transposed):
    """Solves with the operator of `A`, and of `A.T` (its `.T`: the plain transpose, not
    `A^H`, as in lineax), from one factorization, and their derivatives in both modes."""
    rng = np.random.default_rng(20)
    matrix = invertible_nonsymmetric(rng, fmt, dtype)
    b = jnp.asarray(random_values(rng, (8,), dtype))
    solver = js.linalg.LineaxSparseLU()

    def sparse(data, b):
        operator = js.lineax_operator(matrix.with_data(data))
        return lineax.linear_solve(operator.T if transposed else operator, b, solver).value

    def dense(data, b):
        full = matrix.with_data(data).todense()
        return jnp.linalg.solve(full.T if transposed else full, b)

    args = (matrix.data, b)
    np.testing.assert_allclose(jax.jit(sparse)(*args), dense(*args), rtol=1e-12)
    tangents = (jnp.asarray(random_values(rng, matrix.data.shape, dtype)), b)
    np.testing.assert_allclose(
        jax.jvp(sparse, args, tangents)[1], jax.jvp(dense, args, tangents)[1], rtol=1e-10
    )

    def loss(solve):
        return lambda data, b: jnp.sum(jnp.abs(solve(data, b)) ** 2)

    for actual, expected in zip(
        jax.grad(loss(sparse), argnums=(0, 1))(*args),
        jax.grad(loss(dense), argnums=(0, 1))(*args),
        strict=True,
    ):
        np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-12)


def test_other_operators_are_a_clear_error():
    operator = lineax.MatrixLinearOperator(jnp.eye(3))
    with pytest.raises(TypeError, match="js.lineax_operator"):
        js.linalg.LineaxSparseLU().init(operator, {})
