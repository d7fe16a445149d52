"""`js.lineax_operator`: lineax solves with jaxsparse operators, their gradients, and the
lineax example. Skipped where lineax (the optional `lineax` extra) is not installed."""

import pathlib
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import dtype_id, invertible_nonsymmetric, random_csr, random_values

import jaxsparse as js
from jaxsparse import _lineax

lineax = pytest.importorskip("lineax", reason="lineax is an optional extra (jaxsparse[lineax])")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))

import lineax_reaction_diffusion  # noqa: E402


def spd_csr(rng, n):
    """A random symmetric positive definite CSR matrix (`B^T B + n I`, sparse `B`)."""
    _, twin = random_csr(rng, (n, n), density=0.2, dtype=jnp.float64)
    spd = twin.T @ twin + n * np.eye(n)
    return js.CSRMatrix.fromdense(jnp.asarray(spd)), spd


def test_cg_solve_and_gradients_match_dense():
    rng = np.random.default_rng(0)
    matrix, dense = spd_csr(rng, 12)
    b = jnp.asarray(random_values(rng, (12,), jnp.float64))

    @jax.jit
    def solve(data, b):
        op = js.lineax_operator(matrix.with_data(data), symmetric=True, positive_semidefinite=True)
        assert lineax.is_symmetric(op) and lineax.is_positive_semidefinite(op)
        return lineax.linear_solve(op, b, lineax.CG(rtol=1e-12, atol=1e-12)).value

    np.testing.assert_allclose(solve(matrix.data, b), np.linalg.solve(dense, b), atol=1e-10)

    def loss(data, b):
        return jnp.sum(solve(data, b) ** 3)

    def dense_loss(data, b):
        return jnp.sum(jnp.linalg.solve(matrix.with_data(data).todense(), b) ** 3)

    for ours, expected in zip(
        jax.grad(loss, (0, 1))(matrix.data, b),
        jax.grad(dense_loss, (0, 1))(matrix.data, b),
        strict=True,
    ):
        np.testing.assert_allclose(ours, expected, atol=1e-9)


def test_operator_without_tags_is_a_plain_linear_map():
    rng = np.random.default_rng(1)
    matrix, twin = random_csr(rng, (5, 7), density=0.4, dtype=jnp.float32)
    op = js.lineax_operator(matrix)
    assert not lineax.is_symmetric(op)
    x = jnp.asarray(random_values(rng, (7,), jnp.float32))
    np.testing.assert_allclose(op.mv(x), twin @ np.asarray(x, np.float64), atol=1e-5)
    assert op.out_structure().shape == (5,)


@pytest.mark.parametrize("fmt", ["dia", "csr"])
@pytest.mark.parametrize(
    "solver",
    [
        lineax.LU(),
        lineax.GMRES(rtol=1e-13, atol=1e-13),
        lineax.BiCGStab(rtol=1e-13, atol=1e-13),
        js.linalg.LineaxSparseLU(),
    ],
    ids=lambda solver: type(solver).__name__,
)
def test_operators_passed_into_jit_compile_once_and_differentiate(solver, fmt):
    """The operator is a pytree: new values of one structure reuse the compiled solve and
    its gradient, which match dense math in the matrix's values and `b`."""
    rng = np.random.default_rng(3)
    matrix = invertible_nonsymmetric(rng, fmt, jnp.float64)
    traces = []

    def loss(operator_and_b):
        operator, b = operator_and_b
        return jnp.sum(lineax.linear_solve(operator, b, solver).value ** 3)

    @eqx.filter_jit
    def loss_and_grad(operator, b):
        traces.append(None)
        return eqx.filter_value_and_grad(loss)((operator, b))

    def dense_loss(data, b):
        return jnp.sum(jnp.linalg.solve(matrix.with_data(data).todense(), b) ** 3)

    for _ in range(2):
        data = matrix.data + 0.1 * jnp.asarray(random_values(rng, matrix.data.shape, jnp.float64))
        b = jnp.asarray(random_values(rng, (8,), jnp.float64))
        value, (grad_operator, grad_b) = loss_and_grad(
            js.lineax_operator(matrix.with_data(data)), b
        )
        expected_grads = jax.grad(dense_loss, (0, 1))(data, b)
        np.testing.assert_allclose(value, dense_loss(data, b), rtol=1e-10)
        np.testing.assert_allclose(grad_operator.matrix.data, expected_grads[0], atol=1e-9)
        np.testing.assert_allclose(grad_b, expected_grads[1], atol=1e-9)
    assert len(traces) == 1


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.complex128], ids=dtype_id)
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_operator_answers_every_lineax_operation(fmt, dtype):
    """Each operation lineax dispatches on an operator's type is registered, keeps the
    operator sparse, and agrees with the dense matrix."""
    matrix = invertible_nonsymmetric(np.random.default_rng(4), fmt, dtype)
    dense = matrix.todense()
    op = js.lineax_operator(matrix, positive_semidefinite=True)
    for operation in vars(lineax).values():
        if hasattr(operation, "registry") and lineax.FunctionLinearOperator in operation.registry:
            default = operation.dispatch(lineax.AbstractLinearOperator)
            for operator_type in (type(op), _lineax.PreconditionerOperator):
                assert operation.dispatch(operator_type) is not default, (operation, operator_type)
    # A semidefinite complex operator is Hermitian, not symmetric (lineax's rule).
    assert lineax.is_symmetric(op) is not jnp.iscomplexobj(dense)
    assert lineax.is_positive_semidefinite(op)
    for query in (
        lineax.is_diagonal,
        lineax.is_tridiagonal,
        lineax.is_lower_triangular,
        lineax.is_upper_triangular,
        lineax.is_negative_semidefinite,
        lineax.has_unit_diagonal,
    ):
        assert query(op) is False, query
    assert lineax.linearise(op) is op and lineax.materialise(op) is op
    assert "[8,8]" not in str(jax.make_jaxpr(lineax.diagonal)(op))
    np.testing.assert_array_equal(lineax.diagonal(op), jnp.diagonal(dense))
    for ours, k in zip(lineax.tridiagonal(op), (0, -1, 1), strict=True):
        np.testing.assert_array_equal(ours, jnp.diagonal(dense, k))
    np.testing.assert_array_equal(op.as_matrix(), dense)
    untagged = js.lineax_operator(matrix)
    for derived, expected in ((untagged.T, dense.T), (lineax.conj(untagged.T), dense.T.conj())):
        assert type(derived) is type(op)
        np.testing.assert_array_equal(derived.as_matrix(), expected)
        np.testing.assert_allclose(derived.mv(dense[0]), expected @ dense[0], rtol=1e-12)
        for ours, k in zip(lineax.tridiagonal(derived), (0, -1, 1), strict=True):
            np.testing.assert_array_equal(ours, jnp.diagonal(expected, k))
    # The transpose's products run on the transposed kernels; `A.T` (a sort) is not built.
    assert "sort" not in str(jax.make_jaxpr(lambda op, x: op.T.mv(x))(untagged, dense[0]))
    np.testing.assert_array_equal(untagged.T.T.as_matrix(), dense)
    symmetric = js.lineax_operator(matrix, symmetric=True)
    assert symmetric.T is symmetric and lineax.is_symmetric(symmetric)


def test_operator_takes_one_sparse_matrix():
    with pytest.raises(TypeError, match="DIAMatrix"):
        js.lineax_operator(jnp.eye(3))
    batch = js.DIAMatrix(jnp.ones((2, 1, 3)), (0,), (3, 3))
    with pytest.raises(ValueError, match="batch"):
        js.lineax_operator(batch)


def test_missing_lineax_is_a_clear_import_error(monkeypatch):
    monkeypatch.setattr(_lineax, "lineax", None)
    with pytest.raises(ImportError, match="pip install lineax"):
        js.lineax_operator(js.CSRMatrix.fromdense(jnp.eye(2)))


def test_example_solves_differentiates_and_learns():
    result = lineax_reaction_diffusion.main(n=32, steps=10)
    assert result["solve_error"] < 1e-10
    assert result["grad_error"] < 1e-8
    assert result["final_loss"] < 0.1 * result["initial_loss"]
