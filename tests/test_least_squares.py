"""`js.linalg.lsqr` and `lsmr` against scipy's solvers and dense least squares: both formats,
real and complex, `damp`, `x0`, `istop` and `itn`, `jit` and `vmap`, derivatives against
finite differences and the dense normal equations, argument errors.

Most tests solve the same 30 x 12 system, so they share compiled programs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from jax.test_util import check_grads

import jaxsparse as js

M, N = 30, 12
METHODS = ["lsqr", "lsmr"]
TIGHT = {"atol": 1e-12, "btol": 1e-12}
# scipy's result tuples after `x, istop, itn`: the norms each solver estimates.
NORMS = {
    "lsqr": ("r1norm", "r2norm", "anorm", "acond", "arnorm", "xnorm"),
    "lsmr": ("normr", "normar", "norma", "conda", "normx"),
}
# Norms of the gradient `A^H r`, zero at a solution up to rounding.
GRADIENT_NORMS = ("arnorm", "normar")


def system(dtype=np.float64, shape=(M, N)):
    """A sparse full-rank scipy matrix, its CSR and DIA twins, and a `b` outside its range."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        values = values + 1j * rng.standard_normal(shape)
    dense = (np.where(rng.random(shape) < 0.3, values, 0) + 3 * np.eye(*shape)).astype(dtype)
    twin = scipy.sparse.csr_array(dense)
    b = rng.standard_normal(shape[0]).astype(dtype)
    return twin, (js.CSRMatrix.from_scipy(twin), js.DIAMatrix.from_scipy(twin.todia())), b


def solver(method: str):
    return getattr(js.linalg, method)


def regularized(dense, b, damp=0.0, x0=None):
    """The minimizer of `||A x - b||^2 + damp^2 ||x - x0||^2`, densely."""
    x0 = np.zeros(dense.shape[1]) if x0 is None else x0
    gram = dense.conj().T @ dense + damp**2 * np.eye(dense.shape[1])
    return np.linalg.solve(gram, dense.conj().T @ b + damp**2 * x0)


def assert_matches_scipy(method, got, expected, rtol=1e-9):
    """`x`, `istop`, `itn` and the norms of two result tuples agree."""
    assert got[0].shape == expected[0].shape
    np.testing.assert_allclose(got[0], expected[0], rtol=rtol, atol=rtol)
    assert (int(got[1]), int(got[2])) == (expected[1], expected[2])
    # `||A^H r||` next to `||A|| ||r||` (both tuples hold `||r||` at 3, `||A||` at 5).
    scale = float(got[5]) * max(float(got[3]), 1)
    for name, value, want in zip(NORMS[method], got[3:], expected[3:], strict=False):
        assert value.dtype == np.finfo(got[0].dtype).dtype
        slack = rtol * scale if name in GRADIENT_NORMS else rtol
        np.testing.assert_allclose(value, want, rtol=rtol, atol=slack, err_msg=name)


@pytest.mark.parametrize("fmt", [0, 1], ids=["csr", "dia"])
@pytest.mark.parametrize("method", METHODS)
def test_solutions_istop_and_itn_match_scipys(method, fmt):
    """Undamped, damped and with a small `conlim` (istop 3), each as scipy's, and `x` as
    dense least squares."""
    twin, matrices, b = system()
    A = matrices[fmt]
    dense = twin.toarray()
    for options in (TIGHT, {"damp": 0.5, **TIGHT}, {"conlim": np.inf, **TIGHT}, {"conlim": 2.0}):
        expected = getattr(scipy.sparse.linalg, method)(twin, b, **options)
        got = solver(method)(A, b, **options)
        assert_matches_scipy(method, got, expected)
    assert int(got[1]) == 3
    for damp in (0.0, 0.5):
        x = solver(method)(A, b, damp=damp, **TIGHT)[0]
        np.testing.assert_allclose(x, regularized(dense, b, damp), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        x, np.linalg.lstsq(np.vstack([dense, 0.5 * np.eye(N)]), np.r_[b, np.zeros(N)])[0]
    )


@pytest.mark.parametrize("method", METHODS)
def test_a_start_is_corrected_as_scipys(method):
    """With `x0`, `damp` regularizes the correction `x - x0`, as scipy's. A zero `b` gives
    `x = 0` and scipy's results without `x0`, and the minimizer with it (scipy's LSMR
    returns 0 there, its LSQR stops after a step)."""
    twin, (A, _), b = system()
    x0 = np.linspace(-1, 1, N)
    for damp in (0.0, 0.5):
        expected = getattr(scipy.sparse.linalg, method)(twin, b, damp=damp, x0=x0, **TIGHT)
        got = solver(method)(A, b, damp=damp, x0=x0, **TIGHT)
        assert_matches_scipy(method, got, expected)
        np.testing.assert_allclose(got[0], regularized(twin.toarray(), b, damp, x0), rtol=1e-10)
    zero = np.zeros(M)
    got = solver(method)(A, zero)
    assert_matches_scipy(method, got, getattr(scipy.sparse.linalg, method)(twin, zero))
    assert not np.any(got[0]) and int(got[1]) == int(got[2]) == 0
    x = solver(method)(A, zero, damp=0.5, x0=x0, **TIGHT)[0]
    np.testing.assert_allclose(x, regularized(twin.toarray(), zero, 0.5, x0), rtol=1e-10)


@pytest.mark.parametrize("method", METHODS)
def test_complex_systems_match_scipys(method):
    twin, (A, _), b = system(np.complex128)
    b = b * (1 - 2j)
    for options in (TIGHT, {"damp": 0.5, **TIGHT}):
        got = solver(method)(A, b, **options)
        assert got[0].dtype == np.complex128
        assert_matches_scipy(method, got, getattr(scipy.sparse.linalg, method)(twin, b, **options))
    np.testing.assert_allclose(got[0], regularized(twin.toarray(), b, 0.5), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_underdetermined_systems_give_the_minimum_norm_solution(method):
    twin, (A, _), _ = system()
    wide = twin.T.tocsr()
    b = np.random.default_rng(0).standard_normal(N)
    got = solver(method)(A.T, b, **TIGHT)
    assert_matches_scipy(method, got, getattr(scipy.sparse.linalg, method)(wide, b, **TIGHT))
    assert int(got[1]) == 1  # a compatible system
    np.testing.assert_allclose(got[0], np.linalg.pinv(wide.toarray()) @ b, rtol=1e-10)


@pytest.mark.parametrize("method", METHODS)
def test_the_iteration_limit_as_scipys(method):
    twin, (_, D), b = system()
    limit = {"lsqr": "iter_lim", "lsmr": "maxiter"}[method]
    expected = getattr(scipy.sparse.linalg, method)(twin, b, **{limit: 3}, **TIGHT)
    got = solver(method)(D, b, **{limit: 3}, **TIGHT)
    assert_matches_scipy(method, got, expected)
    assert int(got[1]) == 7 and int(got[2]) == 3


def test_lsqr_variance_estimate_matches_scipys_and_the_dense_inverse():
    twin, (A, _), b = system()
    expected = scipy.sparse.linalg.lsqr(twin, b, damp=0.5, calc_var=True, **TIGHT)
    got = js.linalg.lsqr(A, b, damp=0.5, calc_var=True, **TIGHT)
    assert_matches_scipy("lsqr", got, expected)
    np.testing.assert_allclose(got[-1], expected[-1], rtol=1e-9)
    dense = twin.toarray()
    inverse = np.linalg.inv(dense.T @ dense + 0.25 * np.eye(N))
    np.testing.assert_allclose(got[-1], np.diag(inverse), rtol=1e-8)
    assert not np.any(js.linalg.lsqr(A, b, 0.5, **TIGHT)[-1])  # without `calc_var`


@pytest.mark.parametrize("shape", [(0, 3), (3, 0)])
@pytest.mark.parametrize("method", METHODS)
def test_empty_systems_as_scipys(method, shape):
    twin = scipy.sparse.csr_array(shape)
    b = np.ones(shape[0])
    got = solver(method)(js.CSRMatrix.from_scipy(twin), b)
    assert_matches_scipy(method, got, getattr(scipy.sparse.linalg, method)(twin, b))


def test_dtypes_are_promoted_as_scipys():
    twin, (A, _), b = system()
    x, istop, _, *norms = js.linalg.lsqr(A.astype(jnp.float32), b.astype(np.float32))
    assert x.dtype == jnp.float32 and all(norm.dtype == jnp.float32 for norm in norms)
    assert int(istop) in (1, 2)
    np.testing.assert_allclose(x, regularized(twin.toarray(), b), rtol=2e-4, atol=2e-5)
    x = js.linalg.lsqr(A.astype(jnp.float32), b)[0]  # a float64 `b` solves in float64
    assert x.dtype == jnp.float64
    x = js.linalg.lsmr(A, b.astype(np.complex128))[0]
    assert x.dtype == jnp.complex128
    assert js.linalg.lsqr(A, b[:, None])[0].shape == (N,)  # a column, squeezed as scipy's
    x = js.linalg.lsqr(A, np.arange(M), **TIGHT)[0]  # an integer `b` takes `A`'s dtype
    assert x.dtype == jnp.float64
    np.testing.assert_allclose(x, regularized(twin.toarray(), np.arange(M)), rtol=1e-10)


@pytest.mark.parametrize("method, fmt", [("lsqr", 0), ("lsmr", 1)], ids=["lsqr-csr", "lsmr-dia"])
def test_jit_with_traced_scalars_and_vmap(method, fmt):
    """`damp` and the tolerances are values of the compiled solve; `vmap` over `A.data`
    and `b` solves each member."""
    twin, matrices, b = system()
    A = matrices[fmt]

    @jax.jit
    def batch(scales, B, damp, atol):
        def one(scale, b):
            return solver(method)(A.with_data(scale * A.data), b, damp, atol, 1e-12)[:3]

        return jax.vmap(one)(scales, B)

    scales = jnp.asarray([1.0, 2.0])
    B = np.stack([b, -3 * b])
    for damp in (0.0, 0.5, -0.5):  # a traced negative `damp` acts as `|damp|`
        x, istop, itn = batch(scales, B, damp, 1e-12)
        for i, (scale, b_i) in enumerate(zip(scales, B, strict=True)):
            expected = getattr(scipy.sparse.linalg, method)(
                float(scale) * twin, b_i, damp=abs(damp), **TIGHT
            )
            np.testing.assert_allclose(x[i], expected[0], rtol=1e-9, atol=1e-12)
            assert (int(istop[i]), int(itn[i])) == expected[1:3]
    assert batch._cache_size() == 1


def loss(method, data, b, damp, x0, matrix):
    solution = solver(method)(matrix.with_data(data), b, damp, **TIGHT, x0=x0)[0]
    return jnp.sum(jnp.abs(jnp.sin(solution)) ** 2)


def dense_loss(data, b, damp, x0, matrix):
    """`loss` through the dense normal equations."""
    dense = matrix.with_data(data).toarray()
    shift = jnp.asarray(damp).astype(dense.dtype) ** 2
    rhs = dense.conj().T @ b + (0 if x0 is None else shift * x0)
    solution = jnp.linalg.solve(
        dense.conj().T @ dense + shift * jnp.eye(dense.shape[1], dtype=dense.dtype), rhs
    )
    return jnp.sum(jnp.abs(jnp.sin(solution)) ** 2)


def test_lsqr_derivatives_match_finite_differences():
    """At a negative traced `damp` too, where the solve uses `|damp|`."""
    _, (A, _), b = system()
    function = jax.jit(lambda data, b, damp: loss("lsqr", data, b, damp, None, A))
    check_grads(function, (A.data, b, 0.3), order=1, modes=("fwd", "rev"))
    check_grads(function, (A.data, b, -0.3), order=1, modes=("rev",))


@pytest.mark.parametrize("method, wide", [("lsqr", True), ("lsmr", False)])
def test_minimum_norm_derivatives_without_full_column_rank(method, wide):
    """With `damp = 0`, `x = x0 + pinv(A) (b - A x0)` moves by `pinv(A)` in `b` and by
    `I - pinv(A) A` in `x0`, for an underdetermined `A` and a rank-deficient tall one;
    reverse mode transposes forward mode, in `A`'s values too."""
    twin, (A, _), _ = system()
    rng = np.random.default_rng(1)
    if wide:
        matrix, dense = A.T, twin.T.toarray()
    else:
        dense = rng.standard_normal((M, 5)) @ rng.standard_normal((5, N))
        matrix = js.CSRMatrix.fromdense(dense)
    (m, n), pinv = dense.shape, np.linalg.pinv(dense)

    def solution(b, x0, data):
        return solver(method)(matrix.with_data(data), b, x0=x0, **TIGHT)[0]

    arguments = (rng.standard_normal(m), rng.standard_normal(n), matrix.data)
    forward, reverse = (
        jax.jit(jacobian(solution, (0, 1, 2)))(*arguments) for jacobian in (jax.jacfwd, jax.jacrev)
    )
    for got in (forward, reverse):
        np.testing.assert_allclose(got[0], pinv, rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(got[1], np.eye(n) - pinv @ dense, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(reverse[2], forward[2], rtol=1e-8, atol=1e-9)


@pytest.mark.slow
def test_second_derivatives_match_finite_differences():
    _, (A, _), b = system()
    check_grads(
        jax.jit(lambda data, damp: loss("lsqr", data, b, damp, None, A)),
        (A.data, 0.3),
        order=2,
        modes=("fwd", "rev"),
    )


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda A, b: js.linalg.lsqr(A.toarray(), b), TypeError, "`A`"),
        (lambda A, b: js.linalg.lsmr(A.to_scipy(), b), TypeError, "`A`"),
        (lambda A, b: js.linalg.lsqr(A, b[:-1]), ValueError, "`b`"),
        (lambda A, b: js.linalg.lsmr(A, np.stack([b, b], 1)), ValueError, "`b`"),
        (lambda A, b: js.linalg.lsqr(A, b, damp=-1.0), ValueError, "`damp`"),
        (lambda A, b: js.linalg.lsmr(A, b, atol=-1e-6), ValueError, "`atol`"),
        (lambda A, b: js.linalg.lsqr(A, b, btol=np.nan), ValueError, "`btol`"),
        (lambda A, b: js.linalg.lsmr(A, b, conlim=1j), ValueError, "`conlim`"),
        (lambda A, b: js.linalg.lsqr(A, b, conlim=np.nan), ValueError, "`conlim` must be >= 0"),
        (lambda A, b: js.linalg.lsmr(A, b, conlim=-np.inf), ValueError, "`conlim` must be >= 0"),
        (lambda A, b: js.linalg.lsmr(A, b, conlim=True), ValueError, "`conlim`"),
        (lambda A, b: js.linalg.lsqr(A, b, iter_lim=-1), ValueError, "`iter_lim`"),
        (lambda A, b: js.linalg.lsqr(A, b, iter_lim=2.5), ValueError, "`iter_lim`"),
        (lambda A, b: js.linalg.lsmr(A, b, maxiter=True), ValueError, "`maxiter`"),
        (lambda A, b: js.linalg.lsqr(A, b, calc_var=1), ValueError, "`calc_var`"),
        (lambda A, b: js.linalg.lsqr(A, b, x0=b), ValueError, "`x0`"),
        (lambda A, b: js.linalg.lsmr(A, b, x0=np.ones(N) * 1j), TypeError, "`x0`"),
    ],
)
def test_bad_arguments_name_themselves(call, error, words):
    _, (A, _), b = system()
    with pytest.raises(error, match=words):
        call(A, b)


def test_a_batched_matrix_is_refused():
    _, (A, _), b = system()
    batch = js.CSRMatrix(jnp.stack([A.data, A.data]), A.indices, A.indptr, shape=A.shape)
    with pytest.raises(ValueError, match="vmap"):
        js.linalg.lsqr(batch, b)
