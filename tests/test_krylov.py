"""`js.linalg.cg`, `bicgstab` and `gmres` against scipy's solvers and `spsolve`: both formats,
real and complex, preconditioners, `info`, `jit` and `vmap`, derivatives, argument errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from jax.test_util import check_grads

import jaxsparse as js

N = 24
METHODS = ["cg", "bicgstab", "gmres"]


def system(method: str, dtype=np.float64, n: int = N):
    """A scipy matrix the method converges on (Hermitian positive definite for `cg`,
    nonsymmetric and diagonally dominant otherwise), its DIA and CSR twins, and `b`."""
    rng = np.random.default_rng(7)
    values = rng.standard_normal((n, n))
    if np.issubdtype(dtype, np.complexfloating):
        values = values + 1j * rng.standard_normal((n, n))
    dense = np.where(np.abs(np.subtract.outer(range(n), range(n))) <= 2, values, 0)
    if method == "cg":
        dense = dense @ dense.conj().T
    dense = (dense + 8 * np.eye(n)).astype(dtype)
    twin = scipy.sparse.csr_array(dense)
    b = rng.standard_normal(n).astype(dtype)
    return twin, (js.CSRMatrix.from_scipy(twin), js.DIAMatrix.from_scipy(twin.todia())), b


def solver(method: str):
    return getattr(js.linalg, method)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("method", METHODS)
def test_solutions_match_spsolve_and_scipys_info(method, dtype):
    twin, matrices, b = system(method, dtype)
    expected = scipy.sparse.linalg.spsolve(twin.tocsc(), b)
    _, scipy_info = getattr(scipy.sparse.linalg, method)(twin, b, rtol=1e-10)
    for A in matrices:
        x, info = solver(method)(A, b, rtol=1e-10)
        assert x.dtype == dtype and x.shape == (N,)
        assert int(info) == scipy_info == 0
        np.testing.assert_allclose(x, expected, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_info_reports_too_few_iterations_as_scipy_does(method):
    twin, (A, _), b = system(method)
    options = {"restart": 2} if method == "gmres" else {}
    _, scipy_info = getattr(scipy.sparse.linalg, method)(twin, b, rtol=1e-12, maxiter=1, **options)
    x, info = solver(method)(A, b, rtol=1e-12, maxiter=1, **options)
    assert scipy_info > 0 and int(info) == 1
    assert np.linalg.norm(b - twin @ np.asarray(x)) > 1e-12 * np.linalg.norm(b)
    # A loose `atol` accepts the same iterate.
    _, loose = solver(method)(A, b, rtol=0.0, atol=1e3, maxiter=1, **options)
    assert int(loose) == 0


def test_singular_zero_and_empty_systems():
    """An inconsistent singular system ends within `maxiter` with a finite `x` (scipy:
    `info > 0`); a matrix with no entries gives -1 (its `x` is `nan`); `n = 0` solves
    nothing, as scipy's."""
    twin = scipy.sparse.diags_array(np.arange(10.0), format="csr")
    A = js.CSRMatrix.from_scipy(twin)
    _, scipy_info = scipy.sparse.linalg.gmres(twin, np.ones(10), maxiter=30)
    x, info = js.linalg.gmres(A, np.ones(10), maxiter=30)
    assert scipy_info > 0 and int(info) == 30 and np.all(np.isfinite(x))
    empty = js.CSRMatrix.from_scipy(scipy.sparse.csr_array((10, 10)))
    assert int(js.linalg.cg(empty, np.ones(10))[1]) == -1
    for method in METHODS:
        x, info = solver(method)(
            js.CSRMatrix.from_scipy(scipy.sparse.csr_array((0, 0))), np.ones(0)
        )
        assert x.shape == (0,) and int(info) == 0


def test_a_non_finite_residual_gives_info_minus_one():
    _, (A, _), b = system("cg")
    _, info = js.linalg.cg(A.with_data(A.data.at[0].set(np.nan)), b)
    assert int(info) == -1
    _, info = js.linalg.gmres(A, np.where(np.arange(N) == 3, np.inf, b))
    assert int(info) == -1


def test_preconditioners_of_every_kind_take_scipys_steps():
    """Every form of the Jacobi preconditioner gives the iterate scipy's CG gives with it
    after three steps (an ignored `M` would not), and converges."""
    twin, (A, _), b = system("cg")
    inverse_diagonal = scipy.sparse.diags_array(1 / twin.diagonal(), format="csr")
    expected, _ = scipy.sparse.linalg.cg(twin, b, rtol=1e-14, maxiter=3, M=inverse_diagonal)
    unpreconditioned, _ = scipy.sparse.linalg.cg(twin, b, rtol=1e-14, maxiter=3)
    assert np.linalg.norm(expected - unpreconditioned) > 1e-3 * np.linalg.norm(expected)
    kinds = [
        js.linalg.jacobi(A),
        js.CSRMatrix.from_scipy(inverse_diagonal),
        inverse_diagonal,
        inverse_diagonal.toarray(),
        lambda r: r / jnp.asarray(twin.diagonal()),
    ]
    for M in kinds:
        x, info = js.linalg.cg(A, b, rtol=1e-14, maxiter=3, M=M)
        assert int(info) == 3
        np.testing.assert_allclose(x, expected, rtol=1e-10, atol=1e-12)


def test_gmres_stops_on_the_true_residual_as_scipys():
    """Rows scaled over eight decades: Jacobi makes the preconditioned residual small long
    before the true one, where JAX's GMRES alone would stop."""
    n = 60
    rng = np.random.default_rng(0)
    band = np.abs(np.subtract.outer(range(n), range(n))) <= 3
    coupling = np.where(band & ~np.eye(n, dtype=bool), 0.15 * rng.standard_normal((n, n)), 0)
    twin = scipy.sparse.csr_array(
        np.diag(np.logspace(0, 8, n)[rng.permutation(n)]) @ (np.eye(n) + coupling)
    )
    b = rng.standard_normal(n)
    M = scipy.sparse.diags_array(1 / twin.diagonal(), format="csr")
    for rtol in (1e-3, 1e-8):
        _, scipy_info = scipy.sparse.linalg.gmres(twin, b, rtol=rtol, restart=5, M=M)
        x, info = js.linalg.gmres(js.CSRMatrix.from_scipy(twin), b, rtol=rtol, restart=5, M=M)
        assert int(info) == scipy_info == 0
        assert np.linalg.norm(b - twin @ np.asarray(x)) <= rtol * np.linalg.norm(b)


@pytest.mark.parametrize("method", ["bicgstab", "gmres"])
def test_spilu0_takes_fewer_iterations_than_none(method):
    """With ILU(0) of a banded matrix (exact: no fill) one iteration is enough."""
    twin, (_, D), b = system(method)
    options = {"restart": 4} if method == "gmres" else {}
    _, plain = solver(method)(D, b, rtol=1e-10, maxiter=1, **options)
    x, preconditioned = solver(method)(
        D, b, rtol=1e-10, maxiter=1, M=js.linalg.spilu0(D), **options
    )
    assert int(plain) == 1 and int(preconditioned) == 0
    np.testing.assert_allclose(x, scipy.sparse.linalg.spsolve(twin.tocsc(), b), rtol=1e-7)


@pytest.mark.parametrize("method", ["cg", "gmres"])  # BiCGSTAB's path is CG's
def test_columns_x0_jit_and_vmap(method):
    twin, (A, D), b = system(method)
    B = np.stack([b, 2 * b, -b], axis=1)
    expected = scipy.sparse.linalg.spsolve(twin.tocsc(), B)
    x, info = jax.jit(lambda A, B: solver(method)(A, B, rtol=1e-10))(A, B)
    assert x.shape == B.shape and info.shape == (3,) and not np.any(info)
    np.testing.assert_allclose(x, expected, rtol=1e-7, atol=1e-9)
    # A zero `b` gives a zero `x` from any start, as scipy's.
    x, info = solver(method)(A, np.zeros(N), x0=np.ones(N))
    assert not np.any(x) and int(info) == 0
    # A starting guess at the solution stops at once, and is kept.
    x, info = solver(method)(D, B, x0=expected, rtol=1e-10, maxiter=1)
    assert not np.any(info)
    np.testing.assert_allclose(x, expected, rtol=1e-9)
    # vmap over the stored values: each member is its own system.
    scales = jnp.asarray([1.0, 2.0])
    batched = jax.vmap(lambda s: solver(method)(A.with_data(s * A.data), b, rtol=1e-10)[0])(scales)
    np.testing.assert_allclose(batched, np.stack([expected[:, 0], expected[:, 0] / 2]), rtol=1e-7)


def test_dtypes_are_promoted_as_scipys():
    twin, (A, _), b = system("cg")
    x, _ = js.linalg.cg(A.astype(jnp.float32), b.astype(np.float32))
    assert x.dtype == jnp.float32
    x, _ = js.linalg.cg(A.astype(jnp.float32), b)  # a float64 `b` solves in float64
    assert x.dtype == jnp.float64
    x, _ = js.linalg.cg(A, b.astype(np.complex128))
    assert x.dtype == jnp.complex128
    x, _ = js.linalg.cg(A, np.arange(N), rtol=1e-10)  # an integer `b` takes `A`'s dtype
    assert x.dtype == jnp.float64
    np.testing.assert_allclose(
        x, scipy.sparse.linalg.spsolve(twin.tocsc(), np.arange(N)), rtol=1e-7
    )


@pytest.mark.parametrize("method", METHODS)
def test_derivatives_match_spsolves(method):
    """The implicit derivatives equal `spsolve`'s (exact) ones, with and without a
    preconditioner and a starting guess, and finite differences."""
    _, (A, D), b = system(method)
    start = np.linspace(-1, 1, N)

    def loss(solve, data, b):
        return jnp.sum(jnp.sin(solve(D.with_data(data), b)))

    want = jax.grad(lambda d, b: loss(js.linalg.spsolve, d, b), argnums=(0, 1))(D.data, b)
    for options in ({}, {"M": js.linalg.spilu0(D), "x0": start, "maxiter": 2}):

        def iterative(A, b, options=options):
            return solver(method)(A, b, rtol=1e-12, **options)[0]

        got = jax.grad(lambda d, b: loss(iterative, d, b), argnums=(0, 1))(D.data, b)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-9)
    if method == "cg":  # against finite differences once: the others equal spsolve's as well
        check_grads(lambda d: loss(iterative, d, b), (D.data,), order=1, modes=("fwd", "rev"))


# Second order differentiates the first-order rules checked above: `slow`, which CI runs.
@pytest.mark.slow
def test_second_derivatives_match_dense_solves():
    """Real CG's second derivative in `A`'s values: its transposed solve transposes each
    stored value apart (a symmetric shortcut would not)."""
    _, (_, D), b = system("cg", n=6)

    def loss(solve, data):
        return jnp.sum(jnp.sin(solve(D.with_data(data), b)) ** 2)

    got = jax.hessian(lambda d: loss(lambda A, b: js.linalg.cg(A, b, rtol=1e-13)[0], d))(D.data)
    want = jax.hessian(lambda d: loss(lambda A, b: jnp.linalg.solve(A.toarray(), b), d))(D.data)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-10)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda A, b: js.linalg.cg(A.toarray(), b), TypeError, "`A`"),
        (lambda A, b: js.linalg.cg(A[:, :-1], b), ValueError, "square"),
        (lambda A, b: js.linalg.cg(A, b[:-1]), ValueError, "`b`"),
        (lambda A, b: js.linalg.cg(A, b, x0=b[:-1]), ValueError, "`x0`"),
        (lambda A, b: js.linalg.cg(A, b, x0=np.stack([b, b], 1)), ValueError, "`x0`"),
        (lambda A, b: js.linalg.cg(A, b, x0=b + 1j), TypeError, "`x0`"),
        (lambda A, b: js.linalg.cg(A, b, rtol=-1.0), ValueError, "`rtol`"),
        (lambda A, b: js.linalg.cg(A, b, atol=np.nan), ValueError, "`atol`"),
        (lambda A, b: js.linalg.cg(A, b, rtol=1j), ValueError, "`rtol`"),
        (lambda A, b: js.linalg.bicgstab(A, b, maxiter=0), ValueError, "`maxiter`"),
        (lambda A, b: js.linalg.bicgstab(A, b, maxiter=2.5), ValueError, "`maxiter`"),
        (lambda A, b: js.linalg.gmres(A, b, restart=0), ValueError, "`restart`"),
        (lambda A, b: js.linalg.gmres(A, b, M=np.eye(3)), ValueError, "`M`"),
        (lambda A, b: js.linalg.gmres(A, b, M="ilu"), TypeError, "`M`"),
        (lambda A, b: js.linalg.gmres(A, b, M=lambda r: r[1:]), ValueError, "`M`"),
        (lambda A, b: js.linalg.cg(A, b, M=1j * np.eye(N)), TypeError, "`M`"),
        (
            lambda A, b: js.linalg.cg(A, b, M=scipy.sparse.linalg.aslinearoperator(np.eye(N))),
            TypeError,
            "`M`",
        ),
    ],
)
def test_bad_arguments_name_themselves(call, error, words):
    _, (A, _), b = system("cg")
    with pytest.raises(error, match=words):
        call(A, b)


def test_a_batched_matrix_is_refused():
    _, (A, _), b = system("cg")
    batch = js.CSRMatrix(jnp.stack([A.data, A.data]), A.indices, A.indptr, shape=A.shape)
    with pytest.raises(ValueError, match="vmap"):
        js.linalg.cg(batch, b)


def test_a_preconditioner_of_another_dtype_applies_in_its_own():
    twin, (A, D), b = system("gmres")
    x, info = js.linalg.gmres(A.astype(jnp.float32), b.astype(np.float32), M=js.linalg.jacobi(A))
    assert x.dtype == jnp.float32 and int(info) == 0
    complex_b = b * (1 + 2j)
    x, info = js.linalg.gmres(A, complex_b, rtol=1e-10, M=js.linalg.spilu0(D))
    assert int(info) == 0
    np.testing.assert_allclose(x, scipy.sparse.linalg.spsolve(twin.tocsc(), complex_b), rtol=1e-7)
