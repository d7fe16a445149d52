"""The reverse-mode step of `spsolve` for DIA matrices: one native call that solves with
`A^T` and returns the values' cotangent (`native_banded_lu.banded_adjoint`), against the
same gradient through `factorized` (`custom_linear_solve`, an adjoint solve then the
product's transpose), on the split and one-pass paths, under `vmap`, and its host path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import dtype_id, ignored_slots, random_dia, random_values
from jax.test_util import check_grads

import jaxsparse as js
from jaxsparse.kernels import native_banded_lu

# Above the native kernel's split threshold (2^14 rows).
SPLIT_ROWS = 20_000


def _band(rng, n, offsets, dtype, dominant):
    """A DIA matrix with junk in its ignored slots: diagonally dominant by rows (solved
    split over two threads when large), or with a main diagonal of random sign (one pass)."""
    matrix, _ = random_dia(rng, (n, n), offsets, dtype)
    main = offsets.index(0)
    shift = 2.0 * len(offsets) if dominant else 1.5
    signs = np.ones(n) if dominant else np.where(rng.random(n) < 0.5, -1.0, 1.0)
    data = np.asarray(matrix.data).copy()
    data[main] = (shift * signs + data[main]).astype(data.dtype)
    return matrix.with_data(jnp.asarray(data))


def _loss(solve, weights):
    def loss(data, b):
        return jnp.real(jnp.sum(weights * solve(data, b)))

    return loss


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.complex128], ids=dtype_id)
@pytest.mark.parametrize("dominant", [True, False], ids=["split", "one-pass"])
def test_gradient_matches_the_factorized_route(dominant, dtype):
    rng = np.random.default_rng(40)
    offsets = (-2, 0, 1)
    matrix = _band(rng, SPLIT_ROWS, offsets, dtype, dominant)
    b = jnp.asarray(random_values(rng, (SPLIT_ROWS, 2), dtype))
    weights = jnp.asarray(random_values(rng, (SPLIT_ROWS, 2), dtype))

    def spsolve(data, b):
        return js.linalg.spsolve(matrix.with_data(data), b)

    def factored(data, b):
        return js.linalg.factorized(matrix.with_data(data)).solve(b)

    actual = jax.jit(jax.grad(_loss(spsolve, weights), argnums=(0, 1)))(matrix.data, b)
    expected = jax.jit(jax.grad(_loss(factored, weights), argnums=(0, 1)))(matrix.data, b)
    for a, e in zip(actual, expected, strict=True):
        scale = float(jnp.max(jnp.abs(e)))
        assert float(jnp.max(jnp.abs(a - e))) < 1e-10 * scale
    assert np.all(np.asarray(actual[0])[ignored_slots(offsets, matrix.shape)] == 0)


def test_gradient_step_is_one_native_adjoint_call():
    rng = np.random.default_rng(41)
    matrix = _band(rng, 50, (-1, 0, 1), jnp.float64, True)
    b = jnp.asarray(random_values(rng, (50,), jnp.float64))

    def loss(data, b):
        return jnp.sum(js.linalg.spsolve(matrix.with_data(data), b) ** 2)

    hlo = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(matrix.data, b).compile().as_text()
    assert hlo.count('custom_call_target="jaxsparse_dia_banded_adjoint"') == 1
    assert "jaxsparse_dia_sddmm" not in hlo


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.complex128], ids=dtype_id)
def test_check_grads_under_vmap(dtype):
    """Batches of right-hand sides over one matrix, and of matrices, both modes."""
    rng = np.random.default_rng(42)
    matrix = _band(rng, 12, (-1, 0, 2), dtype, False)
    b = jnp.asarray(random_values(rng, (3, 12), dtype))
    values = jnp.stack([matrix.data, 1.1 * matrix.data, 0.9 * matrix.data])

    def solve(data, b):
        return js.linalg.spsolve(matrix.with_data(data), b)

    check_grads(jax.vmap(solve, (None, 0)), (matrix.data, b), 1, ("fwd", "rev"), eps=1e-6)
    check_grads(jax.vmap(solve, (0, None)), (values, b[0]), 1, ("fwd", "rev"), eps=1e-6)
    check_grads(jax.vmap(solve), (values, b), 1, ("fwd", "rev"), eps=1e-6)


def test_singular_matrix_gives_nan_gradients():
    matrix = js.DIAMatrix(jnp.zeros((3, 8)), (-1, 0, 1), (8, 8))
    b = jnp.ones(8)
    grads = jax.grad(lambda d, b: jnp.sum(js.linalg.spsolve(matrix.with_data(d), b)), (0, 1))(
        matrix.data, b
    )
    assert np.all(np.isnan(np.asarray(grads[1])))
    inside = ~ignored_slots(matrix.offsets, matrix.shape)
    assert np.all(np.isnan(np.asarray(grads[0])[inside]))


@pytest.mark.parametrize("batched", [False, True])
def test_native_and_host_adjoints_agree(batched):
    rng = np.random.default_rng(43)
    offsets = (-2, 0, 3)
    matrix = _band(rng, 30, offsets, jnp.complex128, False)
    lead = (2,) if batched else ()
    data = jnp.broadcast_to(matrix.data, (*lead, *matrix.data.shape)) if batched else matrix.data
    x = jnp.asarray(random_values(rng, (*lead, 30, 2), jnp.complex128))
    g = jnp.asarray(random_values(rng, (*lead, 30, 2), jnp.complex128))
    native = jax.jit(lambda *a: native_banded_lu.banded_adjoint(*a, offsets=offsets))(data, x, g)
    host = jax.jit(lambda *a: native_banded_lu.banded_adjoint(*a, offsets=offsets, host=True))(
        data, x, g
    )
    for a, e in zip(native, host, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-11, atol=1e-12)
