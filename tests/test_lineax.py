"""`js.lineax_operator`: lineax solves with jaxsparse operators, their gradients, and the
lineax example. Skipped where lineax (the optional `lineax` extra) is not installed."""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_csr, random_values

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


def test_missing_lineax_is_a_clear_import_error(monkeypatch):
    monkeypatch.setattr(_lineax, "lineax", None)
    with pytest.raises(ImportError, match="pip install lineax"):
        js.lineax_operator(js.CSRMatrix.fromdense(jnp.eye(2)))


def test_example_solves_differentiates_and_learns():
    result = lineax_reaction_diffusion.main(n=32, steps=10)
    assert result["solve_error"] < 1e-10
    assert result["grad_error"] < 1e-8
    assert result["final_loss"] < 0.1 * result["initial_loss"]
