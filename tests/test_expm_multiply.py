"""`js.linalg.expm_multiply` against `scipy.sparse.linalg.expm_multiply`: several times and
norms (one needing many steps), both formats, four dtypes, vector and matrix `B`, a grid
of times; derivatives in `A`'s values, `B` and `t`; jit and vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg
from helpers import ignored_slots, random_values
from jax.test_util import check_grads

import jaxsparse as js
from jaxsparse.linalg._expm_multiply import taylor_degree_and_steps

TOLERANCE = {
    np.dtype(jnp.float32): 1e-5,
    np.dtype(jnp.float64): 1e-12,
    np.dtype(jnp.complex64): 1e-5,
    np.dtype(jnp.complex128): 1e-12,
}


def generator(fmt, dtype, n=30, seed=0):
    """A pentadiagonal matrix (a Hermitian `H` times `-i` for complex dtypes, so that
    `exp(t A)` stays bounded) and its scipy twin."""
    rng = np.random.default_rng(seed)
    bands = [rng.standard_normal(n - abs(o)) for o in (-2, -1, 0, 1, 2)]
    twin = scipy.sparse.diags_array(bands, offsets=[-2, -1, 0, 1, 2])
    if jnp.issubdtype(dtype, jnp.complexfloating):
        twin = twin + 1j * scipy.sparse.diags_array(bands[::-1], offsets=[-2, -1, 0, 1, 2])
        twin = -1j * (twin + twin.conj().T) / 2
    matrix = (
        js.DIAMatrix.from_scipy(twin.todia())
        if fmt == "dia"
        else js.CSRMatrix.from_scipy(twin.tocsr())
    )
    return matrix.astype(dtype), twin.tocsr()


@pytest.mark.parametrize(
    "fmt, dtype",
    [("dia", jnp.float64), ("csr", jnp.complex128), ("dia", jnp.complex64), ("csr", jnp.float32)],
)
@pytest.mark.parametrize("t", [0.05, 1.0, 12.0])
def test_matches_scipy(fmt, dtype, t):
    A, twin = generator(fmt, dtype)
    B = random_values(np.random.default_rng(1), (A.shape[0], 2), dtype)
    out = js.linalg.expm_multiply(A, B if t != 1.0 else B[:, 0], t)
    expected = scipy.sparse.linalg.expm_multiply(t * twin, B if t != 1.0 else B[:, 0])
    assert out.dtype == dtype and out.shape == expected.shape
    scale = np.max(np.abs(expected))
    np.testing.assert_allclose(
        np.asarray(out), expected, atol=TOLERANCE[np.dtype(dtype)] * scale * 10
    )


def test_large_norm_takes_many_steps_and_matches_scipy():
    A, twin = generator("dia", jnp.float64, seed=2)
    t = 40.0
    norm = t * scipy.sparse.linalg.norm(
        twin - twin.diagonal().mean() * scipy.sparse.eye_array(30), 1
    )
    degree, steps = taylor_degree_and_steps(norm)
    assert steps >= 10
    B = jnp.ones((30,))
    shrink = -(A @ A)  # negative semidefinite: exp(t A) decays instead of overflowing
    out = js.linalg.expm_multiply(shrink, B, 0.5)
    expected = scipy.sparse.linalg.expm_multiply(-0.5 * (twin @ twin), np.ones(30))
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-11 * np.max(np.abs(expected)))
    out = js.linalg.expm_multiply(A, B, t)
    expected = scipy.sparse.linalg.expm_multiply(t * twin, np.ones(30))
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-10 * np.max(np.abs(expected)))
    assert degree * steps > 100


@pytest.mark.parametrize(
    "dtype, size, scale",
    [
        (jnp.float32, 50.0, 1.0),
        (jnp.float32, 1.0, 1e-25),
        (jnp.float64, 400.0, 1.0),
        (jnp.float64, 1.0, 1e-170),
    ],
)
def test_huge_and_tiny_magnitudes_match_scipy(dtype, size, scale):
    """Terms whose squares overflow or underflow must not end the Taylor sum early."""
    twin = scipy.sparse.diags_array(
        [[0.1, 0.2], [size, -size, 0.5 * size], [0.3, 0.1]], offsets=[-1, 0, 1]
    )
    A = js.DIAMatrix.from_scipy(twin.todia()).astype(dtype)
    B = np.full((3, 2), scale)
    expected = scipy.sparse.linalg.expm_multiply(twin.tocsr(), B)
    for operand, reference in [(B[:, 0], expected[:, 0]), (B, expected)]:
        out = js.linalg.expm_multiply(A, jnp.asarray(operand, dtype))
        np.testing.assert_allclose(
            np.asarray(out, np.float64),
            reference,
            atol=TOLERANCE[np.dtype(dtype)] * 10 * np.max(np.abs(reference)),
        )


def test_gradient_of_tiny_magnitudes_matches_scipy_frechet_derivative():
    offsets = (-1, 0, 1)
    data = jnp.array([[0.3, 0.2, 0.0], [1.0, -1.0, 0.5], [0.0, 0.4, 0.1]])
    A = js.DIAMatrix(data, offsets=offsets, shape=(3, 3))
    b = jnp.full(3, 1e-170)
    gradient = jax.jit(
        jax.grad(
            lambda data: (
                jnp.sum(js.linalg.expm_multiply(A.with_data(data), b, norm_bound=4.0)) * 1e170
            )
        )
    )(data)
    # d sum(expm(A) @ b) / dA = L(A^T, ones b^T), L the Frechet derivative of expm.
    dense_gradient = scipy.linalg.expm_frechet(np.asarray(A.todense()).T, np.ones((3, 3)))[1]
    # data[k, j] is A[j - offsets[k], j]; rows -1 and 3 (outside) read the zero padding.
    padded = np.pad(dense_gradient, ((1, 1), (0, 0)))
    columns = np.arange(3)
    expected = np.stack([padded[columns - o + 1, columns] for o in offsets])
    np.testing.assert_allclose(np.asarray(gradient), expected, rtol=1e-10)


def test_grid_of_times_matches_scipy():
    A, twin = generator("csr", jnp.complex128)
    B = random_values(np.random.default_rng(3), (30,), jnp.complex128)
    out = js.linalg.expm_multiply(A, B, start=0.5, stop=2.0, num=4)
    expected = scipy.sparse.linalg.expm_multiply(twin, B, start=0.5, stop=2.0, num=4, endpoint=True)
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-11)
    out = js.linalg.expm_multiply(A, B, start=0.0, stop=1.0, num=3, endpoint=False)
    expected = scipy.sparse.linalg.expm_multiply(
        twin, B, start=0.0, stop=1.0, num=3, endpoint=False
    )
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-11)


def test_derivatives_in_values_operand_and_time():
    A, _ = generator("dia", jnp.complex128, n=12)
    B = jnp.asarray(random_values(np.random.default_rng(4), (12, 2), jnp.complex128))
    bound = 2 * 1.5 * float(js.linalg.norm(A, 1))

    def f(data, B, t):
        return js.linalg.expm_multiply(A.with_data(data), B, t, norm_bound=bound)

    check_grads(f, (A.data, B, 1.5), order=1, modes=("fwd", "rev"), eps=1e-6, atol=1e-6, rtol=1e-6)


@pytest.mark.slow
def test_second_derivatives_in_values():
    A, _ = generator("csr", jnp.float64, n=12)
    B = jnp.asarray(random_values(np.random.default_rng(6), (12, 2), jnp.float64))
    bound = 2 * 0.7 * float(js.linalg.norm(A, 1))
    check_grads(
        lambda data: js.linalg.expm_multiply(A.with_data(data), B, 0.7, norm_bound=bound),
        (A.data,),
        order=2,
        modes=("rev",),
        eps=1e-5,
        atol=1e-5,
        rtol=1e-5,
    )


def test_jit_and_vmap_over_values_and_operands():
    A, twin = generator("dia", jnp.float64)
    B = jnp.asarray(random_values(np.random.default_rng(5), (3, 30), jnp.float64))
    expected = np.stack([scipy.sparse.linalg.expm_multiply(twin, np.asarray(b)) for b in B])
    over_B = jax.vmap(lambda b: js.linalg.expm_multiply(A, b))(B)
    np.testing.assert_allclose(np.asarray(over_B), expected, rtol=1e-11, atol=1e-12)
    bound = 2 * float(js.linalg.norm(A, 1))
    evolve = jax.jit(
        lambda data, b: js.linalg.expm_multiply(A.with_data(data), b, norm_bound=bound)
    )
    over_values = jax.vmap(evolve, in_axes=(0, None))(jnp.stack([A.data, A.data]), B[0])
    np.testing.assert_allclose(np.asarray(over_values), np.stack([expected[0]] * 2), rtol=1e-11)


def _exact_bound(twin, t):
    n = twin.shape[0]
    shift = twin.diagonal().sum() / n * scipy.sparse.eye_array(n)
    return abs(t) * scipy.sparse.linalg.norm(twin - shift, 1)


def test_a_norm_bound_below_the_norm_gives_nan():
    A, twin = generator("dia", jnp.float64, n=12)
    b = np.ones(12)
    exact = _exact_bound(twin, 0.8)
    evolve = jax.jit(
        lambda data, t, bound: js.linalg.expm_multiply(A.with_data(data), b, t, norm_bound=bound),
        static_argnums=2,
    )
    expected = scipy.sparse.linalg.expm_multiply(0.8 * twin, b)
    np.testing.assert_allclose(np.asarray(evolve(A.data, 0.8, exact)), expected, rtol=1e-11)
    assert np.all(np.isnan(evolve(A.data, 0.8, 0.9 * exact)))
    # A traced `t` far past the bound (or not finite) neither overflows nor loops longer.
    for t in (1e30, np.inf, np.nan):
        assert np.all(np.isnan(evolve(A.data, t, exact)))
    gradient = jax.grad(lambda data: jnp.sum(evolve(data, 0.8, 0.9 * exact)))(A.data)
    assert np.all(np.isnan(gradient[~ignored_slots(A.offsets, A.shape)]))


def test_the_bound_check_keeps_expm_multiply_exportable():
    """The check needs no host callback: a jitted `expm_multiply` with `norm_bound` exports."""
    A, twin = generator("dia", jnp.float64, n=8)
    bound = 2 * float(js.linalg.norm(A, 1))
    evolve = jax.jit(
        lambda data, b: js.linalg.expm_multiply(A.with_data(data), b, norm_bound=bound)
    )
    exported = jax.export.export(evolve)(A.data, jnp.ones(8))
    expected = scipy.sparse.linalg.expm_multiply(twin, np.ones(8))
    np.testing.assert_allclose(np.asarray(exported.call(A.data, jnp.ones(8))), expected, rtol=1e-11)


def test_the_bound_check_sums_repeats_and_shifts_missing_diagonal_entries():
    """A CSR matrix storing (0, 1) twice and no (0, 0) or (2, 2): the exact bound passes."""
    C = js.CSRMatrix(
        jnp.array([2.0, -1.0, 3.0, 1.0, -2.0]),
        jnp.array([1, 1, 1, 0, 3], jnp.int32),
        jnp.array([0, 2, 3, 4, 5], jnp.int32),
        shape=(4, 4),
    )
    twin = C.to_scipy().tocsr()
    exact = _exact_bound(twin, 1.0)
    out = jax.jit(
        lambda data: js.linalg.expm_multiply(C.with_data(data), jnp.ones(4), norm_bound=exact)
    )(C.data)
    expected = scipy.sparse.linalg.expm_multiply(twin, np.ones(4))
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-11)


def test_bad_arguments_raise():
    A, _ = generator("dia", jnp.float64)
    with pytest.raises(ValueError, match="norm_bound"):
        jax.jit(lambda data: js.linalg.expm_multiply(A.with_data(data), jnp.ones(30)))(A.data)
    with pytest.raises(ValueError, match="`B`"):
        js.linalg.expm_multiply(A, jnp.ones(29))
    with pytest.raises(ValueError, match="`t`"):
        js.linalg.expm_multiply(A, jnp.ones(30), 1j)
    with pytest.raises(ValueError, match="`num`"):
        js.linalg.expm_multiply(A, jnp.ones(30), start=0.0, stop=1.0, num=0)
    with pytest.raises(ValueError, match="norm bound"):
        js.linalg.expm_multiply(A, jnp.ones(30), norm_bound=float("nan"))
    with pytest.raises(ValueError, match="either `t` or a grid"):
        js.linalg.expm_multiply(A, jnp.ones(30), 5.0, start=0.0, stop=1.0, num=2)
    with pytest.raises(ValueError, match="`stop`"):
        js.linalg.expm_multiply(A, jnp.ones(30), start=0.0, stop=1j, num=3)
    with pytest.raises(ValueError, match="not finite"):
        js.linalg.expm_multiply(A.with_data(A.data.at[0, 3].set(jnp.nan)), jnp.ones(30))
    with pytest.raises(TypeError, match="`norm_bound` must be a real number"):
        js.linalg.expm_multiply(A, jnp.ones(30), norm_bound="4")
    # So many Taylor steps would overflow the step count (1e30) or in effect hang (1e9).
    for t in (1e9, 1e30):
        with pytest.raises(ValueError, match="`t` is too large"):
            js.linalg.expm_multiply(A, jnp.ones(30), t)
        with pytest.raises(ValueError, match="`norm_bound` is too large"):
            js.linalg.expm_multiply(A, jnp.ones(30), norm_bound=t)


def test_an_empty_matrix_evolves_nothing():
    empty = js.DIAMatrix(jnp.zeros((1, 0)), (0,), (0, 0))
    assert js.linalg.expm_multiply(empty, jnp.zeros(0)).shape == (0,)
    grid = js.linalg.expm_multiply(empty, jnp.zeros((0, 2)), start=0.0, stop=1.0, num=3)
    assert grid.shape == (3, 0, 2)
