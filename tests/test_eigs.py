"""`js.linalg.eigs` against dense `numpy.linalg.eig` and `scipy.sparse.linalg.eigs`: every
`which`, both formats, real and complex matrices, shift-invert with real and complex
shifts, jit, vmap, errors, and derivatives of eigenvalues and eigenvectors against finite
differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from helpers import random_csr
from jax.test_util import check_grads

import jaxsparse as js

KEYS = {
    "LM": lambda w: -np.abs(w),
    "SM": np.abs,
    "LR": lambda w: -w.real,
    "SR": lambda w: w.real,
    "LI": lambda w: -w.imag,
    "SI": lambda w: w.imag,
}


def general(fmt, dtype, n=48, seed=0):
    """A non-normal matrix of `fmt` with well separated extreme eigenvalues (a random
    sparse part on a spread diagonal) and its scipy twin."""
    rng = np.random.default_rng(seed)
    if fmt == "dia":
        offsets = (-3, -1, 0, 1, 2)
        values = [rng.standard_normal(n - abs(o)) for o in offsets]
        if jnp.issubdtype(dtype, jnp.complexfloating):
            values = [v + 1j * rng.standard_normal(v.shape) for v in values]
        values[2] = values[2] + np.linspace(1, 6, n)
        twin = scipy.sparse.diags(values, offsets).tocsr()
        return js.DIAMatrix.from_scipy(twin.todia()).astype(dtype), twin
    _, random = random_csr(rng, (n, n), density=0.1, dtype=dtype)
    twin = (random + scipy.sparse.diags(np.linspace(1, 6, n))).tocsr()
    return js.CSRMatrix.from_scipy(twin).astype(dtype), twin


def wanted(twin, k, which):
    """The `k` most wanted eigenvalues from dense `eig` (whose conjugate pairs are exact), a
    pair of equal keys positive imaginary part first."""
    dense = np.linalg.eigvals(twin.toarray())
    return dense[np.lexsort((-dense.imag, KEYS[which](dense)))][:k]


def assert_same_values(got, expected, atol):
    """The same multiset of complex values (sorting would order near-equal real parts by
    their rounding)."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape
    distance = np.abs(got[:, None] - expected[None, :])
    assert np.all(distance.min(axis=0) <= atol) and np.all(distance.min(axis=1) <= atol), got


def assert_eigenpairs(twin, w, v, expected, tolerance):
    """Each expected eigenvalue is a computed one, each vector a unit eigenvector whose
    largest entry is real and positive."""
    norm = np.max(np.abs(np.linalg.eigvals(twin.toarray())))
    w, v = np.asarray(w).astype(np.complex128), np.asarray(v).astype(np.complex128)
    for value in expected:
        assert np.min(np.abs(w - value)) <= tolerance * norm, (value, w)
    residual = twin @ v - v * w
    assert np.max(np.linalg.norm(residual, axis=0)) <= 100 * tolerance * norm
    np.testing.assert_allclose(np.linalg.norm(v, axis=0), 1, rtol=1e-5)
    largest = v[np.argmax(np.abs(v), axis=0), np.arange(v.shape[1])]
    np.testing.assert_allclose(largest.imag, 0, atol=1e-6)
    assert np.all(largest.real > 0)


CASES = [
    ("csr", jnp.float64, "LM"),
    ("dia", jnp.complex128, "LI"),
    ("csr", jnp.float32, "SR"),
    ("dia", jnp.float64, "SI"),
]
SWEEP = [
    pytest.param(fmt, dtype, which, marks=pytest.mark.slow)
    for fmt in ("dia", "csr")
    for dtype in (jnp.float32, jnp.float64, jnp.complex64, jnp.complex128)
    for which in KEYS
    if (fmt, dtype, which) not in CASES
]


@pytest.mark.parametrize("fmt, dtype, which", [*CASES, *SWEEP])
def test_eigenpairs_match_dense_eig(fmt, dtype, which):
    A, twin = general(fmt, dtype)
    k = 4
    w, v = js.linalg.eigs(A, k, which=which)
    complex_dtype = np.result_type(dtype, np.complex64)
    assert w.dtype == complex_dtype and v.dtype == complex_dtype
    assert w.shape == (k,) and v.shape == (A.shape[0], k)
    tolerance = 1e-4 if np.finfo(dtype).bits <= 32 else 1e-10
    expected = wanted(twin, k, which)
    assert_eigenpairs(twin, w, v, expected, tolerance)
    # In `which`'s order, as far as the keys differ by more than rounding.
    keys = KEYS[which](np.asarray(w).astype(np.complex128))
    assert np.all(np.diff(keys) >= -tolerance * np.max(np.abs(expected)))


def test_matches_scipy_and_a_real_eigenvalue_has_a_real_eigenvector():
    A, twin = general("csr", jnp.float64, seed=1)
    w, v = js.linalg.eigs(A, 3)
    expected = scipy.sparse.linalg.eigs(twin, 3, tol=1e-12)[0]
    assert_same_values(w, expected, 1e-9)
    real = np.abs(np.asarray(w).imag) < 1e-12
    assert real.any()
    np.testing.assert_allclose(np.asarray(v)[:, real].imag, 0, atol=1e-12)
    only_values = js.linalg.eigs(A, 3, return_eigenvectors=False)
    np.testing.assert_allclose(np.asarray(only_values), np.asarray(w), atol=1e-12)
    # A small basis and a complex `v0` give the same values.
    v0 = jnp.ones(A.shape[0], jnp.complex128)
    for options in (dict(ncv=6), dict(v0=v0)):
        other = js.linalg.eigs(A, 3, return_eigenvectors=False, **options)
        assert_same_values(other, expected, 1e-9)


@pytest.mark.parametrize("fmt, sigma", [("csr", 2.0), ("dia", 3.0 + 0.4j)])
def test_shift_invert_finds_the_eigenvalues_nearest_sigma(fmt, sigma):
    A, twin = general(fmt, jnp.float64)
    w, v = js.linalg.eigs(A, 3, sigma=sigma)
    dense = np.linalg.eigvals(twin.toarray())
    expected = dense[np.argsort(np.abs(dense - sigma))][:3]
    assert_eigenpairs(twin, w, v, expected, 1e-10)
    if np.iscomplexobj(sigma):  # scipy's ARPACK mixes in eigenvalues nearest conj(sigma)
        return
    reference = scipy.sparse.linalg.eigs(twin, 3, sigma=sigma, return_eigenvectors=False)
    assert_same_values(w, reference, 1e-9)


def test_jit_reuses_compilation_over_shifts_and_values_and_vmap_batches():
    A, twin = general("dia", jnp.float64)
    nearest = jax.jit(lambda data, sigma: js.linalg.eigs(A.with_data(data), 2, sigma=sigma)[0])
    first = nearest(A.data, 1.5)
    second = nearest(2 * A.data, 3.0)
    assert nearest._cache_size() == 1
    dense = np.linalg.eigvals(twin.toarray())
    for got, values, sigma in ((first, dense, 1.5), (second, 2 * dense, 3.0)):
        expected = values[np.argsort(np.abs(values - sigma))][:2]
        assert_same_values(got, expected, 1e-9)
    batched = jax.vmap(
        lambda data: js.linalg.eigs(A.with_data(data), 2, return_eigenvectors=False)
    )(jnp.stack([A.data, -A.data]))
    assert_same_values(batched[1], wanted(-twin, 2, "LM"), 1e-9)


def test_complex_matrix_with_a_complex_start_vector():
    A, twin = general("csr", jnp.complex128, seed=2)
    v0 = jnp.asarray(np.random.default_rng(3).standard_normal(A.shape[0]) * (1 + 2j))
    w, v = js.linalg.eigs(A, 3, which="LR", v0=v0)
    assert_eigenpairs(twin, w, v, wanted(twin, 3, "LR"), 1e-10)


def _derivative_check(fmt, which, sigma):
    """`check_grads` in both modes on the eigenvalues and the eigenvectors (their gauge:
    unit norm, largest entry real and positive) of a random non-normal matrix."""
    A, _ = general(fmt, jnp.float64, n=24, seed=4)
    rng = np.random.default_rng(5)
    probe = jnp.asarray(
        rng.standard_normal((A.shape[0], 2)) + 1j * rng.standard_normal((A.shape[0], 2))
    )

    def pairs(data):
        w, v = js.linalg.eigs(A.with_data(data), 2, which=which, sigma=sigma, ncv=12)
        return jnp.concatenate([w, jnp.sum(v * probe, axis=0)])

    check_grads(pairs, (A.data,), order=1, modes=("fwd", "rev"), eps=1e-6, atol=1e-5, rtol=1e-5)


# Plain mode's tangents are also checked by the tests below (against exact derivatives):
# the quick suite keeps shift-invert's, the rest are `slow`, which CI runs.
@pytest.mark.parametrize(
    "fmt, which, sigma",
    [
        pytest.param("csr", "LM", None, marks=pytest.mark.slow),
        ("dia", "LM", 2.0 + 0.3j),
        pytest.param("dia", "LI", None, marks=pytest.mark.slow),
    ],
)
def test_derivatives_match_finite_differences(fmt, which, sigma):
    _derivative_check(fmt, which, sigma)


# Reverse mode is also checked by the unmatched-eigenvalue test below: `slow`, which CI
# runs.
@pytest.mark.slow
def test_eigenvalue_gradient_is_the_left_and_right_vectors_on_the_pattern():
    """The gradient of a simple eigenvalue with respect to the stored values is
    `conj(u_i) v_j / (u^H v)` at entry `(i, j)`, with `u` and `v` from dense `eig`."""
    A, twin = general("csr", jnp.float64, seed=6)
    grad = jax.grad(lambda data: js.linalg.eigs(A.with_data(data), 1, which="LR")[0][0].real)(
        A.data
    )
    dense = twin.toarray()
    values, right = np.linalg.eig(dense)
    top = np.argmax(values.real)
    left_values, left = np.linalg.eig(dense.conj().T)
    u = left[:, np.argmin(np.abs(left_values.conj() - values[top]))]
    v = right[:, top]
    rows = np.repeat(np.arange(A.shape[0]), np.diff(np.asarray(A.indptr)))
    expected = (u[rows].conj() * v[np.asarray(A.indices)] / (u.conj() @ v)).real
    np.testing.assert_allclose(np.asarray(grad), expected, atol=1e-8)


def test_bad_arguments_raise():
    A, _ = general("dia", jnp.float64)
    n = A.shape[0]
    for sigma in (True, jnp.ones(2), "0.5"):
        with pytest.raises(TypeError, match="`sigma`"):
            js.linalg.eigs(A, 2, sigma=sigma)
    for sigma in (float("nan"), complex(np.inf, 0)):
        with pytest.raises(ValueError, match="`sigma` must be finite"):
            js.linalg.eigs(A, 2, sigma=sigma)
    for k in (0, n - 1, 2.0, True):
        with pytest.raises(ValueError, match="`k`"):
            js.linalg.eigs(A, k)
    with pytest.raises(ValueError, match="`which`"):
        js.linalg.eigs(A, 2, which="LA")
    with pytest.raises(ValueError, match="`ncv`"):
        js.linalg.eigs(A, 4, ncv=5)
    with pytest.raises(ValueError, match="`maxiter`"):
        js.linalg.eigs(A, 2, maxiter=0)
    for tol in (-1.0, np.inf):
        with pytest.raises(ValueError, match="`tol` must be finite and >= 0"):
            js.linalg.eigs(A, 2, tol=tol)
    for tol in ("1e-3", None, 1j, jnp.ones(2), np.bool_(True)):
        with pytest.raises(TypeError, match="`tol` must be a real number"):
            js.linalg.eigs(A, 2, tol=tol)
    for name in ("M", "Minv", "OPinv", "OPpart"):
        with pytest.raises(ValueError, match=f"`{name}` is not supported"):
            js.linalg.eigs(A, 2, **{name: A})
    with pytest.raises(ValueError, match="`v0` must have shape"):
        js.linalg.eigs(A, 2, v0=jnp.ones(3))
    with pytest.raises(ValueError, match="`v0` must not be zero"):
        js.linalg.eigs(A, 2, v0=jnp.zeros(n))
    with pytest.raises(ValueError, match="`v0` must be finite"):
        js.linalg.eigs(A, 2, v0=jnp.ones(n).at[1].set(jnp.nan))
    with pytest.raises(ValueError, match="square"):
        js.linalg.eigs(js.DIAMatrix(jnp.ones((1, 4)), (0,), (3, 4)), 1)
    with pytest.raises(TypeError, match="jaxsparse matrix"):
        js.linalg.eigs(np.eye(4), 1)
    # Under `jit` the checks fail at run time.
    traced = jax.jit(lambda v0: js.linalg.eigs(A, 2, v0=v0, maxiter=2))
    with pytest.raises(Exception, match="`v0` must not be zero"):
        jax.block_until_ready(traced(jnp.zeros(n)))
    with pytest.raises(Exception, match="no convergence"):
        js.linalg.eigs(A, 4, which="SM", ncv=8, maxiter=1, tol=1e-14)
    with pytest.raises(Exception, match="not finite"):
        js.linalg.eigs(A.with_data(A.data.at[2, 3].set(jnp.inf)), 2)


def test_an_unmatched_eigenvalue_poisons_only_its_own_derivatives():
    """Four eigenvalues of equal magnitude (`5 i^j`): `k = 2` takes one of them, and the
    iteration on `A^H` may take another, so that one has no left eigenvector and `nan`
    derivatives. The simple eigenvalue 10 keeps its gradient (`conj(u) v` on the
    pattern: 1 at `(0, 0)`) in reverse mode, where a zero cotangent met `nan`."""
    n = 30
    dense = np.diag(np.concatenate([[10.0, 0, 0, 0, 0], np.linspace(0, 1, n - 5)]))
    for i in range(4):
        dense[1 + i, 1 + (i + 1) % 4] = 5.0
    dense[0, 7] = 0.3
    A = js.CSRMatrix.from_scipy(scipy.sparse.csr_array(dense))

    def values(data):
        return js.linalg.eigs(A.with_data(data), 2, return_eigenvectors=False)

    np.testing.assert_allclose(np.abs(values(A.data)), [10, 5], rtol=1e-10)
    tangent = jax.jvp(values, (A.data,), (jnp.ones_like(A.data),))[1]
    np.testing.assert_allclose(tangent[0], 1, rtol=1e-10)
    grad = jax.grad(lambda data: values(data)[0].real)(A.data)
    expected = np.zeros(A.data.shape)
    expected[0] = 1.0  # the (0, 0) entry; u = e_0 and v = e_0 there
    np.testing.assert_allclose(np.asarray(grad), expected, atol=1e-10)


def test_a_split_conjugate_pair_gives_its_positive_imaginary_part_under_perturbations():
    """The most wanted values of a real matrix are a complex conjugate pair: `k = 1`
    returns the member with positive imaginary part, for small and large bases, real and
    complex start vectors, and under small perturbations of `A` (where rounding alone
    would choose), so finite differences see a smooth function."""
    A, twin = general("dia", jnp.float64, n=24)
    A = A.tocsr()
    top = wanted(twin, 1, "LM")[0]
    assert top.imag > 0.1
    tangent = jnp.asarray(np.random.default_rng(7).standard_normal(A.data.shape))
    for options in (dict(ncv=4), dict(ncv=12, v0=jnp.ones(A.shape[0], jnp.complex128))):
        for eps in (0.0, 1e-6, -1e-6):
            data = A.data + eps * tangent
            w = js.linalg.eigs(A.with_data(data), 1, return_eigenvectors=False, **options)
            np.testing.assert_allclose(np.asarray(w), [top], atol=1e-4)


def test_a_repeated_eigenvalue_has_nan_derivatives_and_a_simple_one_keeps_its_own():
    """Eigenvalues 10 (simple) and 5 (twice, semisimple): the pair's tangents are `nan`
    (its eigenvalues are not differentiable), 10's exact (`d lambda = dA_00`)."""
    n = 30
    dense = np.diag(np.concatenate([[10.0, 5.0, 5.0], np.linspace(0, 1, n - 3)]))
    dense[5, 6], dense[7, 9] = 0.01, 0.02
    A = js.CSRMatrix.from_scipy(scipy.sparse.csr_array(dense))

    def values(data):
        return js.linalg.eigs(A.with_data(data), 3, return_eigenvectors=False)

    np.testing.assert_allclose(np.asarray(values(A.data)), [10, 5, 5], atol=1e-12)
    direction = jnp.zeros_like(A.data).at[0].set(1.0).at[1].set(2.0)  # dA_00 and dA_11
    tangent = np.asarray(jax.jvp(values, (A.data,), (direction,))[1])
    np.testing.assert_allclose(tangent[0], 1.0, atol=1e-10)
    assert np.all(np.isnan(tangent[1:])), tangent


def test_second_derivatives_raise_a_clear_error():
    A, _ = general("csr", jnp.float64, n=24)

    def rightmost(data):
        return js.linalg.eigs(A.with_data(data), 1, which="LR")[0][0].real

    for second in (jax.hessian(rightmost), jax.jacrev(jax.grad(rightmost))):
        with pytest.raises(NotImplementedError, match="only first derivatives"):
            second(A.data)


def test_converges_where_the_eigenvectors_of_the_projection_are_ill_conditioned():
    """A strongly non-normal matrix (eigenvalues 1 to 2 on the diagonal, an upper part
    100 times larger): the restarts stay unitary, so the iteration converges to pairs
    with residuals within `tol * ||A||`, where orthonormalized eigenvectors drifted."""
    n = 300
    upper = scipy.sparse.triu(scipy.sparse.random(n, n, density=3 / n, random_state=0), 1)
    twin = (scipy.sparse.diags(np.linspace(1, 2, n)) + 100.0 * upper).tocsr()
    A = js.CSRMatrix.from_scipy(twin)
    norm = np.linalg.norm(twin.toarray(), 2)
    w, v = js.linalg.eigs(A, 6, which="SM", ncv=20)
    residual = twin @ np.asarray(v) - np.asarray(v) * np.asarray(w)
    assert np.max(np.linalg.norm(residual, axis=0)) <= 1e-13 * norm


def test_values_of_a_complex_matrix_or_a_shifted_real_one_keep_their_own_order():
    """Conjugate pairs belong to real operators only: a complex matrix's `5 - 1j` stays
    ahead of `4.99 + 1j` (single precision, whose tolerance is coarse). Shift-invert with a
    real `sigma` orders by `1 / (lambda - sigma)`, yet a pair of `A`'s eigenvalues still
    comes positive imaginary part first."""
    diagonal = np.array([5 - 1j, 4.99 + 1j, *np.linspace(0, 3, 38)])
    A = js.CSRMatrix.from_scipy(scipy.sparse.diags(diagonal).tocsr()).astype(jnp.complex64)
    for which in ("LR", "LM"):
        w = js.linalg.eigs(A, 1, which=which, return_eigenvectors=False)
        np.testing.assert_allclose(np.asarray(w), [5 - 1j], atol=1e-5)
    n = 100
    random = scipy.sparse.random(n, n, density=0.05, random_state=1)
    twin = (random + scipy.sparse.diags(np.linspace(1, 3, n))).tocsr()
    w = np.asarray(js.linalg.eigs(js.CSRMatrix.from_scipy(twin), 5, sigma=2.0)[0])
    dense = np.linalg.eigvals(twin.toarray())
    expected = dense[np.lexsort((-dense.imag, np.abs(dense - 2.0)))][:5]
    np.testing.assert_allclose(w, expected, atol=1e-9)
    assert np.sum(np.abs(w.imag) > 0.01) == 4  # two pairs, each positive imaginary part first


def test_close_but_distinct_eigenvalues_keep_their_derivatives():
    """Eigenvalues 400, 399 and 398 in single precision (gaps of 0.25%, far above what its
    tolerance resolves) are simple: each moves by 1 when the diagonal does."""
    n = 400
    random = scipy.sparse.random(n, n, density=0.01, random_state=0) * 0.01
    twin = (scipy.sparse.diags(np.arange(1.0, n + 1)) + random).tocsr()
    A = js.CSRMatrix.from_scipy(twin).astype(jnp.float32)
    rows = np.repeat(np.arange(n), np.diff(twin.indptr))
    diagonal = jnp.asarray(rows == twin.indices, jnp.float32)
    _, tangent = jax.jvp(
        lambda data: js.linalg.eigs(A.with_data(data), 3, return_eigenvectors=False),
        (A.data,),
        (diagonal,),
    )
    np.testing.assert_allclose(np.asarray(tangent), 1, atol=1e-3)
