"""`js.linalg.eigsh` against `scipy.sparse.linalg.eigsh` and dense `eigh`: eigenvalues for
LA, SA and LM over both formats and four dtypes, eigenvector residuals, jit, vmap, and
derivatives of eigenvalues and eigenvectors against finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from helpers import MATRICES, random_csr
from jax.test_util import check_grads

import jaxsparse as js

SQUARE_DIA = {case.name: case for case in MATRICES}["dia-unsorted-offsets"]

# Eigenvalue tolerance relative to ||A||_2, by dtype.
EIGEN_TOLERANCE = {
    np.dtype(jnp.float32): 1e-4,
    np.dtype(jnp.float64): 1e-10,
    np.dtype(jnp.complex64): 1e-4,
    np.dtype(jnp.complex128): 1e-10,
}


def hermitian(fmt, dtype, seed=0):
    """A Hermitian (real symmetric for real dtypes) matrix of `fmt` and its scipy twin:
    `S + S^H` of a registry matrix (DIA) or of a random square CSR matrix."""
    rng = np.random.default_rng(seed)
    if fmt == "dia":
        _, twin = SQUARE_DIA.make(rng, dtype)
    else:
        _, twin = random_csr(rng, (40, 40), density=0.15, dtype=dtype)
    twin = twin + twin.conj().T
    if fmt == "dia":
        return js.DIAMatrix.from_scipy(twin.todia()).astype(dtype), twin.tocsr()
    return js.CSRMatrix.from_scipy(twin.tocsr()).astype(dtype), twin.tocsr()


FAST = [
    ("dia", jnp.float64, "LA"),
    ("csr", jnp.complex128, "SA"),
    ("dia", jnp.complex64, "LM"),
    ("csr", jnp.float32, "LM"),
]
SWEEP = [
    pytest.param(fmt, dtype, which, marks=pytest.mark.slow)
    for fmt in ("dia", "csr")
    for dtype in (jnp.float32, jnp.float64, jnp.complex64, jnp.complex128)
    for which in ("LA", "SA", "LM")
    if (fmt, dtype, which) not in FAST
]


@pytest.mark.parametrize("fmt, dtype, which", [*FAST, *SWEEP])
def test_eigenpairs_match_scipy(fmt, dtype, which):
    A, twin = hermitian(fmt, dtype)
    k = 4
    w, v = js.linalg.eigsh(A, k, which=which)
    expected = scipy.sparse.linalg.eigsh(twin, k, which=which, tol=1e-12)[0]
    norm = np.max(np.abs(np.linalg.eigvalsh(twin.toarray())))
    assert w.dtype == jnp.finfo(dtype).dtype and v.dtype == dtype
    assert v.shape == (A.shape[0], k)
    tolerance = EIGEN_TOLERANCE[np.dtype(dtype)]
    np.testing.assert_allclose(np.asarray(w), np.sort(expected), atol=tolerance * norm)
    v = np.asarray(v).astype(np.complex128)
    residual = twin @ v - v * np.asarray(w)
    assert np.max(np.linalg.norm(residual, axis=0)) < 100 * np.sqrt(tolerance) * norm
    np.testing.assert_allclose(v.conj().T @ v, np.eye(k), atol=100 * np.sqrt(tolerance))


def test_invariant_start_vector_and_full_basis():
    """`v0` inside an invariant subspace makes Lanczos break down at once (it must continue
    from a fresh direction), and `ncv = n` spans the whole space."""
    n = 12
    diagonal = np.arange(1.0, n + 1)
    A = js.DIAMatrix(jnp.asarray(diagonal)[None, :], (0,), (n, n))
    w, v = js.linalg.eigsh(A, 3, which="LA", v0=jnp.eye(n)[0], ncv=n)
    np.testing.assert_allclose(np.asarray(w), diagonal[-3:], rtol=1e-12)
    np.testing.assert_allclose(np.abs(np.asarray(v)), np.eye(n)[:, -3:], atol=1e-10)


def test_jit_reuses_compilation_and_vmap_over_values():
    A, twin = hermitian("dia", jnp.float64)
    eig = jax.jit(lambda data: js.linalg.eigsh(A.with_data(data), 3, which="LA")[0])
    first = eig(A.data)
    second = eig(2 * A.data)
    assert eig._cache_size() == 1
    np.testing.assert_allclose(np.asarray(second), 2 * np.asarray(first), rtol=1e-10)
    batch = jnp.stack([A.data, -A.data])
    batched = jax.vmap(lambda data: js.linalg.eigsh(A.with_data(data), 3, which="LA")[0])(batch)
    dense = np.linalg.eigvalsh(twin.toarray())
    np.testing.assert_allclose(np.asarray(batched[0]), dense[-3:], atol=1e-9)
    np.testing.assert_allclose(np.asarray(batched[1]), np.sort(-dense[:3]), atol=1e-9)


def _hermitian_tridiagonal(params, n):
    """A Hermitian tridiagonal DIA matrix from real parameters: the diagonal, then the
    real and imaginary parts of the superdiagonal."""
    main = params[:n]
    upper = jax.lax.complex(params[n : 2 * n - 1], params[2 * n - 1 :])
    zero = jnp.zeros((1,), upper.dtype)
    data = jnp.stack(
        [
            jnp.concatenate([jnp.conj(upper), zero]),  # data[j] = A[j + 1, j]
            main.astype(upper.dtype),
            jnp.concatenate([zero, upper]),  # data[j] = A[j - 1, j]
        ]
    )
    return js.DIAMatrix(data, (-1, 0, 1), (n, n))


def _check_eigen_derivatives(seed: int, k: int, **options):
    """`check_grads` in both modes on the eigenvalues and on `|<probe, v_i>|^2` (which does
    not depend on the eigenvectors' phases) of a random Hermitian tridiagonal matrix."""
    n = 16
    rng = np.random.default_rng(seed)
    params = jnp.asarray(rng.standard_normal(3 * n - 2))
    probe = jnp.asarray(rng.standard_normal(n) + 1j * rng.standard_normal(n))

    def eigenvalues_and_overlaps(params):
        w, v = js.linalg.eigsh(_hermitian_tridiagonal(params, n), k, **options)
        return jnp.concatenate([w, jnp.abs(jnp.conj(probe) @ v) ** 2])

    check_grads(
        eigenvalues_and_overlaps,
        (params,),
        order=1,
        modes=("fwd", "rev"),
        eps=1e-6,
        atol=1e-5,
        rtol=1e-5,
    )


def test_eigenvalue_and_eigenvector_derivatives_match_finite_differences():
    _check_eigen_derivatives(3, 3, which="SA", ncv=10)


def test_eigenvalue_gradient_is_v_v_on_the_pattern():
    """The gradient with respect to stored values is `conj(v_i) v_j` at entry `(i, j)`."""
    A, twin = hermitian("csr", jnp.float64, seed=5)
    grad = jax.grad(lambda data: js.linalg.eigsh(A.with_data(data), 1, which="LA")[0][0])(A.data)
    _, v = np.linalg.eigh(twin.toarray())
    top = v[:, -1]
    rows = np.repeat(np.arange(A.shape[0]), np.diff(np.asarray(A.indptr)))
    expected = top[rows] * top[np.asarray(A.indices)]
    np.testing.assert_allclose(np.asarray(grad), expected, atol=1e-8)


def test_bad_arguments_raise():
    A, _ = hermitian("dia", jnp.float64)
    for sigma in (0.5j, True, jnp.ones(2), "0.5"):
        with pytest.raises(TypeError, match="`sigma`"):
            js.linalg.eigsh(A, 2, sigma=sigma)
    with pytest.raises(ValueError, match="`k`"):
        js.linalg.eigsh(A, A.shape[0])
    with pytest.raises(ValueError, match="`which`"):
        js.linalg.eigsh(A, 2, which="SM")
    with pytest.raises(ValueError, match="`ncv`"):
        js.linalg.eigsh(A, 4, ncv=4)
    with pytest.raises(ValueError, match="`v0`"):
        js.linalg.eigsh(A, 2, v0=jnp.ones(3))
    with pytest.raises(ValueError, match="square"):
        js.linalg.eigsh(js.DIAMatrix(jnp.ones((1, 4)), (0,), (3, 4)), 1)
    with pytest.raises(TypeError, match="jaxsparse matrix"):
        js.linalg.eigsh(np.eye(4), 1)
    n = A.shape[0]
    with pytest.raises(ValueError, match="`v0` must not be zero"):
        js.linalg.eigsh(A, 2, v0=jnp.zeros(n))
    with pytest.raises(ValueError, match="`v0` must be finite"):
        js.linalg.eigsh(A, 2, v0=jnp.ones(n).at[1].set(jnp.nan))
    # A non-finite shift used to run every cycle into "no convergence" (nan), or give a
    # wrong answer (inf: the inverse is zero).
    for sigma in (float("nan"), np.inf):
        with pytest.raises(ValueError, match="`sigma` must be finite"):
            js.linalg.eigsh(A, 2, sigma=sigma)
    # Under `jit` the checks fail at run time: on a GPU, when the result is waited for.
    traced = jax.jit(lambda v0: js.linalg.eigsh(A, 2, v0=v0, maxiter=2))
    with pytest.raises(Exception, match="`v0` must not be zero"):
        jax.block_until_ready(traced(jnp.zeros(n)))
    with pytest.raises(Exception, match="`v0` must be finite"):
        jax.block_until_ready(traced(jnp.ones(n).at[1].set(jnp.inf)))
    with pytest.raises(TypeError, match="`v0` is complex"):
        js.linalg.eigsh(A, 2, v0=jnp.ones(n, jnp.complex128))
    with pytest.raises(ValueError, match="`k`"):
        js.linalg.eigsh(A, True)


def test_numpy_integers_are_counts():
    """`k`, `ncv` and `maxiter` take numpy's integers too, as scipy's `eigsh` does."""
    A, twin = hermitian("dia", jnp.float64)
    w = js.linalg.eigsh(A, np.int64(2), ncv=np.int32(12), maxiter=np.int64(500))[0]
    expected = scipy.sparse.linalg.eigsh(twin, 2)[0]
    np.testing.assert_allclose(np.asarray(w), np.sort(expected), atol=1e-8)


def test_no_convergence_is_an_error():
    A, _ = hermitian("csr", jnp.float64)
    with pytest.raises(Exception, match="no convergence"):
        js.linalg.eigsh(A, 4, which="SA", ncv=10, maxiter=1, tol=1e-14)


def square_grid_laplacian(side: int):
    """The 5-point Laplacian on a `side x side` grid: its eigenvalues
    `l_i + l_j` are double for `i != j`."""
    second = scipy.sparse.diags_array(
        [-np.ones(side - 1), 2 * np.ones(side), -np.ones(side - 1)], offsets=[-1, 0, 1]
    )
    eye = scipy.sparse.eye_array(side)
    return (scipy.sparse.kron(second, eye) + scipy.sparse.kron(eye, second)).tocsr()


REPEATED_FAST = [("dia", jnp.float64, "LA"), ("csr", jnp.complex128, "SA")]
REPEATED_SWEEP = [
    pytest.param(fmt, dtype, which, marks=pytest.mark.slow)
    for fmt in ("dia", "csr")
    for dtype in (jnp.float64, jnp.complex128)
    for which in ("LA", "SA", "LM")
    if (fmt, dtype, which) not in REPEATED_FAST
]


@pytest.mark.parametrize("fmt, dtype, which", [*REPEATED_FAST, *REPEATED_SWEEP])
def test_every_copy_of_a_repeated_eigenvalue(fmt, dtype, which):
    """On a 20 x 20 grid with `tol=1e-8`, the first Lanczos run returns one copy of each
    double eigenvalue (its wanted pairs converge before rounding errors grow the second);
    the deflated rounds must find the copies, as ARPACK does."""
    twin = square_grid_laplacian(20).astype(dtype)
    A = js.DIAMatrix.from_scipy(twin.todia()) if fmt == "dia" else js.CSRMatrix.from_scipy(twin)
    w, v = jax.jit(lambda A: js.linalg.eigsh(A, 6, which=which, tol=1e-8))(A)
    expected = np.sort(scipy.sparse.linalg.eigsh(twin, 6, which=which)[0])
    assert len(np.unique(np.round(expected, 8))) < 6  # the wanted set has a double value
    np.testing.assert_allclose(np.asarray(w), expected, atol=1e-7)
    v = np.asarray(v)
    np.testing.assert_allclose(v.conj().T @ v, np.eye(6), atol=1e-7)
    assert np.max(np.linalg.norm(twin @ v - v * np.asarray(w), axis=0)) < 1e-6


@pytest.mark.parametrize(
    "fmt, which",
    [("dia", "LM"), ("csr", "SA")]
    + [pytest.param(*case, marks=pytest.mark.slow) for case in (("dia", "SA"), ("csr", "LM"))],
)
def test_shift_invert_matches_scipy_under_jit(fmt, which):
    """`sigma=`: the eigenvalues nearest `sigma` (`LM`), or below it (`SA` on
    `1 / (lambda - sigma)`), as scipy's shift-invert mode."""
    twin = square_grid_laplacian(12)
    A = js.DIAMatrix.from_scipy(twin.todia()) if fmt == "dia" else js.CSRMatrix.from_scipy(twin)
    sigma = 2.5
    w, v = jax.jit(lambda A: js.linalg.eigsh(A, 4, sigma=sigma, which=which))(A)
    expected = scipy.sparse.linalg.eigsh(twin.tocsc(), 4, sigma=sigma, which=which)[0]
    np.testing.assert_allclose(np.asarray(w), np.sort(expected), atol=1e-10)
    v = np.asarray(v)
    assert np.max(np.linalg.norm(twin @ v - v * np.asarray(w), axis=0)) < 1e-8


@pytest.mark.slow  # shift-invert's compile-once; test_jit_reuses_compilation covers the rest
def test_shifts_are_traced_values_so_a_sweep_compiles_once():
    """`sigma` is a value, not part of the compiled program: a sweep over shifts reuses one
    compilation, and shifts batch under `jit` and `vmap`."""
    twin = square_grid_laplacian(8)
    A = js.DIAMatrix.from_scipy(twin.todia())
    eager = js.linalg._eigsh._compiled_eigsh._cached  # the jitted function eager calls run
    sigmas = np.array([0.7, 2.9, 5.3])
    sizes = []
    for sigma in sigmas:
        w = js.linalg.eigsh(A, 2, sigma=float(sigma), return_eigenvectors=False)
        expected = scipy.sparse.linalg.eigsh(twin.tocsc(), 2, sigma=sigma)[0]
        np.testing.assert_allclose(np.asarray(w), np.sort(expected), atol=1e-10)
        sizes.append(eager._cache_size())
    assert sizes[0] == sizes[-1]
    # A shift on an exact eigenvalue (the same program): the factorization's nan is told
    # apart from no convergence, as scipy's "Factor is exactly singular".
    diagonal = jnp.zeros_like(A.data).at[A.offsets.index(0)].set(jnp.arange(1.0, 65.0))
    with pytest.raises(Exception, match="`A - sigma I` is singular"):
        js.linalg.eigsh(A.with_data(diagonal), 2, sigma=3.0, return_eigenvectors=False)
    assert eager._cache_size() == sizes[-1]
    nearest = jax.jit(jax.vmap(lambda sigma: js.linalg.eigsh(A, 2, sigma=sigma)[0]))
    batched = nearest(jnp.asarray(sigmas[:2]))
    expected = scipy.sparse.linalg.eigsh(twin.tocsc(), 2, sigma=sigmas[1])[0]
    np.testing.assert_allclose(np.asarray(batched[1]), np.sort(expected), atol=1e-10)


@pytest.mark.parametrize("sigma", [None, 0.3])
def test_convergence_is_judged_against_the_whole_spectrum(sigma):
    """Wanted eigenvalues far below `||A||` converge: the residual test's scale is the
    largest Ritz value, not the largest wanted one."""
    if sigma is None:  # nine eigenvalues in [1, 2] and one at 1e4; the smallest wanted
        basis, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((10, 10)))
        dense = (basis * np.r_[np.linspace(1, 2, 9), 1e4]) @ basis.T
    else:  # (A - 0.3 I)^{-1} has norm about 250; the wanted value is about -0.8
        dense = np.array([[0.1787, 0.0, 0.3796], [0.0, -1.0739, 0.0], [0.3796, 0.0, -0.8466]])
    dense = (dense + dense.T) / 2
    twin = scipy.sparse.csr_array(dense)
    w = js.linalg.eigsh(js.CSRMatrix.from_scipy(twin), 1, sigma=sigma, which="SA")[0]
    expected = scipy.sparse.linalg.eigsh(twin, 1, sigma=sigma, which="SA")[0]
    np.testing.assert_allclose(np.asarray(w), expected, atol=1e-10)


@pytest.mark.slow  # the derivative rules of the plain mode are tested in the fast suite
def test_shift_invert_derivatives_match_finite_differences():
    _check_eigen_derivatives(4, 2, sigma=0.1, ncv=8)
