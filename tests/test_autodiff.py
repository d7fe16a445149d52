"""Autodiff through the products: grad, jvp, jacobians, vmap and higher orders.

Every rule is checked on the native CPU kernels (`"auto"` on this CPU), on the XLA path and
on the Pallas kernels in interpret mode, against dense `jnp` math and numerical
differences (`jax.test_util.check_grads`). A gradient in the values and the operand
together is one `pullback` (one fused kernel call on the native path).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import random_csr, random_dia, random_values, slow_unless, small_matrix
from jax.test_util import check_grads

import jaxsparse as js

BACKENDS = ["auto", "xla", "interpret"]
FORMATS = ["dia", "csr"]


def make_matrix(fmt, rng, shape=None, dtype=jnp.float64):
    """The registry's small autodiff matrix, or one of another `shape`."""
    if shape is None:
        return small_matrix(fmt, rng, dtype)
    if fmt == "dia":
        return random_dia(rng, shape, (-2, 0, 1, 6), dtype)[0]
    return random_csr(rng, shape, density=0.4, dtype=dtype, shuffle_columns=True)[0]


def rebuild(matrix, data):
    """The same structure with new values (a traced `data` keeps the structure static)."""
    return matrix.with_data(data)


def dense_of(matrix, data):
    return rebuild(matrix, data).todense()


# Interpret mode (each kernel emulated) runs in `make test-slow`: the fast suite checks its
# first-order gradients (`test_vjp_matches_dense_math`, `test_jacobians_are_the_matrix`),
# and second order goes through the same transpose rules on every backend.
@pytest.mark.parametrize(
    ("fmt", "backend", "side"),
    [
        pytest.param(
            fmt,
            backend,
            side,
            id=f"{side}-{fmt}-{backend}",
            marks=slow_unless(backend != "interpret"),
        )
        for side in ("A@X", "A@x", "X@A")
        for fmt in FORMATS
        for backend in BACKENDS
    ],
)
def test_check_grads_orders_1_and_2(fmt, backend, side):
    rng = np.random.default_rng(0)
    matrix = make_matrix(fmt, rng)
    m, n = matrix.shape
    operand_shape = {"A@X": (n, 3), "A@x": (n,), "X@A": (2, m)}[side]
    operand = jnp.asarray(random_values(rng, operand_shape, jnp.float64))

    def f(data, dense):
        a = rebuild(matrix, data)
        if side == "X@A":
            return js.matmul(dense, a, backend=backend)
        return js.matmul(a, dense, backend=backend)

    check_grads(f, (matrix.data, operand), order=2, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_vjp_matches_dense_math(fmt, backend):
    """`jax.vjp` in the values and the operand against dense math, pulled back through one
    `pullback` primitive (no separate sampled and transposed products), whose transpose
    (`jax.linear_transpose`) gives the JVP back."""
    rng = np.random.default_rng(1)
    matrix = make_matrix(fmt, rng, shape=(9, 6))
    x = jnp.asarray(random_values(rng, (6, 4), jnp.float64))
    cotangent = jnp.asarray(random_values(rng, (9, 4), jnp.float64))

    def sparse(data, x):
        return js.matmul(rebuild(matrix, data), x, backend=backend)

    def dense(data, x):
        return dense_of(matrix, data) @ x

    out, vjp = jax.vjp(sparse, matrix.data, x)
    expected_out, expected_vjp = jax.vjp(dense, matrix.data, x)
    np.testing.assert_allclose(out, expected_out, atol=1e-12)
    for got, want in zip(vjp(cotangent), expected_vjp(cotangent), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-12)
    names = [eqn.primitive.name for eqn in jax.make_jaxpr(vjp)(cotangent).eqns]
    assert names.count(f"jaxsparse_{fmt}_pullback") == 1
    assert not {f"jaxsparse_{fmt}_sddmm", f"jaxsparse_{fmt}_matmul_t"} & set(names)
    tangents = (jnp.asarray(random_values(rng, matrix.data.shape, jnp.float64)), x[::-1])
    (transposed,) = jax.linear_transpose(vjp, cotangent)(tangents)
    np.testing.assert_allclose(transposed, jax.jvp(sparse, (matrix.data, x), tangents)[1])


@pytest.mark.parametrize("fmt", FORMATS)
def test_bfloat16_gradients_close_to_float32(fmt):
    rng = np.random.default_rng(2)
    matrix = make_matrix(fmt, rng, shape=(16, 12), dtype=jnp.float32)
    x = jnp.asarray(random_values(rng, (12, 3), jnp.float32))

    def loss(data, x):
        return jnp.sum(jnp.sin(rebuild(matrix, data) @ x).astype(jnp.float32))

    grads32 = jax.grad(loss, argnums=(0, 1))(matrix.data, x)
    grads16 = jax.grad(loss, argnums=(0, 1))(
        matrix.data.astype(jnp.bfloat16), x.astype(jnp.bfloat16)
    )
    for g32, g16 in zip(grads32, grads16, strict=True):
        assert g16.dtype == jnp.bfloat16
        np.testing.assert_allclose(g16.astype(jnp.float32), g32, atol=0.1, rtol=0.05)


def test_dia_ignored_slots_get_zero_gradient():
    rng = np.random.default_rng(3)
    matrix, _ = random_dia(rng, (4, 6), (-5, -1, 0, 3, 9), jnp.float64)
    x = jnp.asarray(random_values(rng, (6, 2), jnp.float64))
    grad = jax.grad(lambda d: jnp.sum((rebuild(matrix, d) @ x) ** 2))(matrix.data)
    rows = np.arange(6)[None, :] - np.array(matrix.offsets)[:, None]
    ignored = (rows < 0) | (rows >= 4)
    assert ignored.any() and (~ignored).any()
    np.testing.assert_array_equal(np.asarray(grad)[ignored], 0.0)
    assert np.all(np.asarray(grad)[~ignored] != 0.0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_complex_gradients_match_dense(fmt):
    rng = np.random.default_rng(4)
    matrix = make_matrix(fmt, rng, dtype=jnp.complex128)
    x = jnp.asarray(random_values(rng, (5, 2), jnp.complex128))

    def loss(data, x, product):
        return jnp.sum(jnp.abs(product(data, x)) ** 2)

    sparse = lambda d, x: rebuild(matrix, d) @ x  # noqa: E731
    dense = lambda d, x: dense_of(matrix, d) @ x  # noqa: E731
    got = jax.grad(loss, argnums=(0, 1))(matrix.data, x, sparse)
    want = jax.grad(loss, argnums=(0, 1))(matrix.data, x, dense)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_jacobians_are_the_matrix(fmt, backend):
    rng = np.random.default_rng(5)
    matrix = make_matrix(fmt, rng)
    x = jnp.asarray(random_values(rng, (5,), jnp.float64))
    f = lambda x: js.matmul(matrix, x, backend=backend)  # noqa: E731
    np.testing.assert_allclose(jax.jacfwd(f)(x), matrix.todense(), atol=1e-12)
    np.testing.assert_allclose(jax.jacrev(f)(x), matrix.todense(), atol=1e-12)
    g = lambda d: js.matmul(rebuild(matrix, d), x, backend=backend)  # noqa: E731
    h = lambda d: dense_of(matrix, d) @ x  # noqa: E731
    np.testing.assert_allclose(jax.jacfwd(g)(matrix.data), jax.jacfwd(h)(matrix.data), atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_vmap_over_operand_and_over_values(fmt, backend):
    rng = np.random.default_rng(6)
    matrix = make_matrix(fmt, rng)
    operands = jnp.asarray(random_values(rng, (3, 5, 2), jnp.float64))
    values = jnp.stack([matrix.data, 2 * matrix.data, -matrix.data])

    def product(data, x):
        return js.matmul(rebuild(matrix, data), x, backend=backend)

    dense = matrix.todense()
    by_operand = jax.vmap(product, in_axes=(None, 0))(matrix.data, operands)
    np.testing.assert_allclose(by_operand, jnp.einsum("ij,bjk->bik", dense, operands), atol=1e-12)
    by_values = jax.vmap(product, in_axes=(0, None))(values, operands[0])
    scales = jnp.array([1.0, 2.0, -1.0])[:, None, None]
    np.testing.assert_allclose(by_values, scales * (dense @ operands[0]), atol=1e-12)
    both = jax.vmap(product)(values, operands)
    np.testing.assert_allclose(
        both, scales * jnp.einsum("ij,bjk->bik", dense, operands), atol=1e-12
    )
    # Per-example gradients: vmap of grad, batched over operand and values together.
    per_example = jax.vmap(jax.grad(lambda d, x: jnp.sum(product(d, x) ** 2)))(values, operands)
    dense_per_example = jax.vmap(jax.grad(lambda d, x: jnp.sum((dense_of(matrix, d) @ x) ** 2)))(
        values, operands
    )
    np.testing.assert_allclose(per_example, dense_per_example, atol=1e-10)
    # ... and in the values and the operand together (the batched `pullback`).
    both_grads = jax.vmap(jax.grad(lambda d, x: jnp.sum(product(d, x) ** 2), argnums=(0, 1)))
    dense_both = jax.vmap(
        jax.grad(lambda d, x: jnp.sum((dense_of(matrix, d) @ x) ** 2), argnums=(0, 1))
    )
    for got, want in zip(both_grads(values, operands), dense_both(values, operands), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-10)


@pytest.mark.parametrize("fmt", FORMATS)
def test_gradient_never_builds_a_dense_matrix(fmt):
    rng = np.random.default_rng(7)
    matrix = make_matrix(fmt, rng, shape=(31, 37))
    x = jnp.ones((37, 3))

    def loss(data, x):
        return jnp.sum(rebuild(matrix, data) @ x)

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(matrix.data, x)
    shapes = {tuple(v.aval.shape) for eqn in jaxpr.eqns for v in eqn.outvars}
    assert (31, 37) not in shapes and (37, 31) not in shapes
    assert any(eqn.primitive.name.startswith("jaxsparse_") for eqn in jaxpr.eqns)


@pytest.mark.parametrize("fmt", FORMATS)
def test_structure_gets_no_gradient(fmt):
    rng = np.random.default_rng(8)
    matrix = make_matrix(fmt, rng)
    x = jnp.ones((5, 2))
    expected = jax.grad(lambda d: jnp.sum(dense_of(matrix, d) @ x))(matrix.data)
    filtered = eqx.filter_grad(lambda a: jnp.sum(a @ x))(matrix)
    assert type(filtered) is type(matrix)
    np.testing.assert_allclose(filtered.data, expected, atol=1e-12)
    with_ints = jax.grad(lambda a: jnp.sum(a @ x), allow_int=True)(matrix)
    np.testing.assert_allclose(with_ints.data, expected, atol=1e-12)
    if fmt == "csr":
        assert filtered.indices is None and filtered.indptr is None
        assert with_ints.indices.dtype == jax.dtypes.float0


def test_dia_todense_and_fromdense_transpose():
    """`jax.linear_transpose` through the scatters of `todense` and `fromdense`: each is
    the other's transpose, slots outside the matrix dropping out."""
    rng = np.random.default_rng(13)
    offsets, (m, n) = (-1, 0, 2, 7), (4, 5)
    data = jnp.asarray(random_values(rng, (len(offsets), n), jnp.float64))
    dense = jnp.asarray(random_values(rng, (m, n), jnp.float64))

    def to_dense(values):
        return js.DIAMatrix(values, offsets, (m, n)).todense()

    def from_dense(matrix):
        return js.DIAMatrix.fromdense(matrix, offsets=offsets).data

    (data_t,) = jax.linear_transpose(to_dense, data)(dense)
    (dense_t,) = jax.linear_transpose(from_dense, dense)(data)
    rows = np.arange(n)[None, :] - np.asarray(offsets)[:, None]
    inside = (rows >= 0) & (rows < m)
    expected = np.where(inside, np.asarray(dense)[np.clip(rows, 0, m - 1), np.arange(n)], 0)
    np.testing.assert_allclose(data_t, expected, atol=1e-12)
    twin = scipy.sparse.dia_array((np.asarray(data), np.asarray(offsets)), shape=(m, n))
    np.testing.assert_allclose(dense_t, twin.toarray(), atol=1e-12)
