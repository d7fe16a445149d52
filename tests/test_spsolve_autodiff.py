"""Derivatives of `js.linalg.spsolve` and factorized solves with respect to `b` and the
stored values: numerically (`check_grads`, both modes) and against dense `jnp` math."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import dtype_id, ignored_slots, random_csr, random_dia, random_values
from jax.test_util import check_grads

import jaxsparse as js
from jaxsparse.linalg import _banded_one_pass


def _system(fmt, rng, dtype):
    """A small well-conditioned square system of each kind: banded DIA (junk in the ignored
    slots), a DIA matrix factored densely, CSR with repeated columns."""
    if fmt == "csr":
        matrix, _ = random_csr(
            rng, (9, 9), density=0.3, dtype=dtype, shuffle_columns=True, repeat_columns=True
        )
        dense_shift = js.CSRMatrix.fromdense(4 * jnp.eye(9, dtype=dtype))
        return matrix + dense_shift
    offsets, n = {"dia": ((-2, 0, 1), 9), "dia-dense": ((-3, 0, 4), 6)}[fmt]
    matrix, _ = random_dia(rng, (n, n), offsets, dtype)
    return matrix.with_data(matrix.data.at[offsets.index(0)].add(jnp.asarray(4, dtype)))


FORMATS = ["dia", "dia-dense", "csr"]
DTYPES = [jnp.float64, jnp.complex128]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("fmt", FORMATS)
def test_check_grads_both_modes(fmt, dtype):
    rng = np.random.default_rng(10)
    matrix = _system(fmt, rng, dtype)
    b = jnp.asarray(random_values(rng, (matrix.shape[0], 2), dtype))

    def solve(data, b):
        return js.linalg.spsolve(matrix.with_data(data), b)

    check_grads(solve, (matrix.data, b), order=1, modes=("fwd", "rev"), eps=1e-6)


@pytest.mark.parametrize("trans", ["T", "H"])
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_check_grads_of_transposed_solves(fmt, trans):
    rng = np.random.default_rng(11)
    matrix = _system(fmt, rng, jnp.complex128)
    b = jnp.asarray(random_values(rng, (matrix.shape[0],), jnp.complex128))

    def solve(data, b):
        return jax.jit(lambda f, b: f.solve(b, trans))(
            js.linalg.factorized(matrix.with_data(data)), b
        )

    check_grads(solve, (matrix.data, b), order=1, modes=("fwd", "rev"), eps=1e-6)


@pytest.mark.parametrize(
    "fmt",
    ["dia", pytest.param("csr", marks=pytest.mark.slow)],  # the same rules as DIA
)
def test_second_order(fmt):
    rng = np.random.default_rng(12)
    matrix = _system(fmt, rng, jnp.float64)
    b = jnp.asarray(random_values(rng, (matrix.shape[0],), jnp.float64))

    def loss(data, b):
        return jnp.sum(js.linalg.spsolve(matrix.with_data(data), b) ** 2)

    check_grads(loss, (matrix.data, b), order=2, modes=("rev",), eps=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("fmt", FORMATS)
def test_gradients_match_dense_solve(fmt, dtype):
    """Reverse mode (grad) and forward mode (jvp) equal those of `jnp.linalg.solve` on the
    dense matrix, chained to the stored values by `todense`."""
    rng = np.random.default_rng(13)
    matrix = _system(fmt, rng, dtype)
    b = jnp.asarray(random_values(rng, (matrix.shape[0],), dtype))
    weights = jnp.asarray(random_values(rng, (matrix.shape[0],), dtype))

    def sparse_loss(data, b):
        return jnp.real(jnp.vdot(weights, js.linalg.spsolve(matrix.with_data(data), b)))

    def dense_loss(data, b):
        return jnp.real(jnp.vdot(weights, jnp.linalg.solve(matrix.with_data(data).todense(), b)))

    actual = jax.jit(jax.grad(sparse_loss, argnums=(0, 1)))(matrix.data, b)
    expected = jax.grad(dense_loss, argnums=(0, 1))(matrix.data, b)
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-9, atol=1e-11)
    if fmt == "dia":  # slots outside the matrix get a zero gradient
        assert np.all(np.asarray(actual[0])[ignored_slots(matrix.offsets, matrix.shape)] == 0)

    def sparse_solve(data, b):
        return js.linalg.spsolve(matrix.with_data(data), b)

    def dense_solve(data, b):
        return jnp.linalg.solve(matrix.with_data(data).todense(), b)

    tangents = (jnp.asarray(random_values(rng, matrix.data.shape, dtype)), weights)
    np.testing.assert_allclose(
        jax.jit(lambda p, t: jax.jvp(sparse_solve, p, t)[1])((matrix.data, b), tangents),
        jax.jvp(dense_solve, (matrix.data, b), tangents)[1],
        rtol=1e-9,
        atol=1e-11,
    )


def test_gradient_under_vmap_over_values():
    rng = np.random.default_rng(14)
    matrix = _system("dia", rng, jnp.float64)
    values = jnp.stack([matrix.data, 1.1 * matrix.data])
    b = jnp.asarray(random_values(rng, (matrix.shape[0],), jnp.float64))

    def loss(data):
        return jnp.sum(js.linalg.spsolve(matrix.with_data(data), b) ** 2)

    def dense_loss(data):
        return jnp.sum(jnp.linalg.solve(matrix.with_data(data).todense(), b) ** 2)

    np.testing.assert_allclose(
        jax.jit(jax.vmap(jax.grad(loss)))(values),
        jax.vmap(jax.grad(dense_loss))(values),
        rtol=1e-9,
        atol=1e-11,
    )


@pytest.mark.parametrize("kept_bytes", [_banded_one_pass.KEPT_BYTES, 0], ids=["kept", "values"])
def test_nested_derivatives_and_vmaps_match_dense_solve(kept_bytes, monkeypatch):
    """Derivatives of the DIA solve (from the kept factors, or from the values) under two and
    three levels of `vmap`: `jax.hessian` and `jacrev(jacrev)` (each a batch of batches),
    `vmap(vmap(grad))` over right-hand sides and over values and right-hand sides, and
    `vmap(hessian)`; against dense `jnp` math."""
    monkeypatch.setattr(_banded_one_pass, "KEPT_BYTES", kept_bytes)
    rng = np.random.default_rng(15)
    matrix = _system("dia", rng, jnp.float64)
    n = matrix.shape[0]
    b = jnp.asarray(random_values(rng, (n,), jnp.float64))
    bs = jnp.asarray(random_values(rng, (2, 3, n), jnp.float64))
    values = jnp.stack([matrix.data, 1.1 * matrix.data])

    def loss(solve):
        return lambda data, b: jnp.sum(solve(matrix.with_data(data), b) ** 2)

    def grad(loss):
        return jax.grad(loss, argnums=(0, 1))

    cases = {
        "hessian in the values": lambda loss: jax.hessian(loss)(matrix.data, b),
        "hessian in b": lambda loss: jax.hessian(loss, 1)(matrix.data, b),
        "jacrev(jacrev)": lambda loss: jax.jacrev(jax.jacrev(loss))(matrix.data, b),
        "vmap(vmap(grad)) over b": lambda loss: jax.vmap(
            jax.vmap(grad(loss), (None, 0)), (None, 0)
        )(matrix.data, bs),
        "vmap(vmap(grad)) over the values, then b": lambda loss: jax.vmap(
            jax.vmap(grad(loss), (None, 0)), (0, None)
        )(values, bs[0]),
        "vmap(hessian) over the values": lambda loss: jax.vmap(jax.hessian(loss), (0, None))(
            values, b
        ),
    }
    sparse, dense = loss(js.linalg.spsolve), loss(lambda A, b: jnp.linalg.solve(A.todense(), b))

    def every_case(loss):  # one compilation for all the cases
        return jax.jit(lambda: {name: case(loss) for name, case in cases.items()})()

    actual, expected = every_case(sparse), every_case(dense)
    for name in cases:
        for a, e in zip(
            jax.tree.leaves(actual[name]), jax.tree.leaves(expected[name]), strict=True
        ):
            np.testing.assert_allclose(a, e, rtol=1e-9, atol=1e-11, err_msg=name)
