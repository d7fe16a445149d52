"""`js.linalg.minres` against scipy's `minres`, `spsolve` and dense numpy: indefinite and
complex Hermitian systems, `shift`, preconditioners, breakdowns, `info`, `jit` and `vmap`,
derivatives, argument errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from jax.test_util import check_grads

import jaxsparse as js

N = 24


def saddle(dtype=np.float64, n: int = N):
    """A Hermitian indefinite band with a zero diagonal (offsets -3, -1, 1, 3: even rows
    couple only to odd ones, so its spectrum is symmetric about 0, as a saddle-point
    system's), its CSR and DIA twins, and a `b` on the even rows only, so `b^H A b == 0`:
    CG's first step divides by zero."""
    rng = np.random.default_rng(7)
    values = rng.standard_normal((n, n))
    if np.issubdtype(dtype, np.complexfloating):
        values = values + 1j * rng.standard_normal((n, n))
    upper = np.where(np.isin(np.subtract.outer(range(n), range(n)), (-1, -3)), values, 0)
    twin = scipy.sparse.csr_array((upper + upper.conj().T).astype(dtype))
    b = np.where(np.arange(n) % 2 == 0, rng.standard_normal(n), 0).astype(dtype)
    return twin, (js.CSRMatrix.from_scipy(twin), js.DIAMatrix.from_scipy(twin.todia())), b


def spsolve(twin, b, shift=0.0):
    shifted = twin - shift * scipy.sparse.eye_array(twin.shape[0], dtype=twin.dtype)
    return scipy.sparse.linalg.spsolve(shifted.tocsc(), b)


def relative_residual(twin, b, x, shift=0.0):
    x = np.asarray(x)
    return np.linalg.norm(b - twin @ x + shift * x) / np.linalg.norm(b)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_indefinite_solutions_match_spsolve_where_cg_breaks_down(dtype):
    """Both formats, with and without a shift (a value: one compiled solve serves both).
    scipy's MINRES takes only real symmetric matrices (its inner products do not
    conjugate), so the complex case is checked against `spsolve` alone."""
    twin, matrices, b = saddle(dtype)
    assert np.linalg.eigvalsh(twin.toarray())[0] < 0
    assert int(js.linalg.cg(matrices[0], b, rtol=1e-10)[1]) != 0
    for shift in (0.0, 0.7):
        expected = spsolve(twin, b, shift)
        for A in matrices:
            x, info = js.linalg.minres(A, b, rtol=1e-10, shift=shift)
            assert x.dtype == dtype and x.shape == (N,) and int(info) == 0
            assert relative_residual(twin, b, x, shift) <= 1e-10
            np.testing.assert_allclose(x, expected, rtol=1e-7, atol=1e-9)
        if dtype == np.float64:
            assert scipy.sparse.linalg.minres(twin, b, rtol=1e-10, shift=shift)[1] == 0


def test_iterates_are_scipys_step_by_step():
    """Five steps, then three preconditioned by Jacobi (of a shifted, positive definite
    operator) in each of its forms, give scipy's iterates and its `info`."""
    twin, (A, D), b = saddle()
    expected, scipy_info = scipy.sparse.linalg.minres(twin, b, rtol=1e-14, maxiter=5)
    x, info = js.linalg.minres(A, b, rtol=1e-14, maxiter=5)
    assert int(info) == scipy_info == 5
    np.testing.assert_allclose(x, expected, rtol=1e-10, atol=1e-12)
    # A positive definite `A` with a diagonal over two decades: Jacobi is a Hermitian
    # positive definite `M`, and an ignored one would take other steps.
    diagonal = 5 + np.logspace(0, 2, N)
    spd = twin + scipy.sparse.diags_array(diagonal, format="csr")
    shift = -1.0
    inverse = scipy.sparse.diags_array(1 / (diagonal - shift), format="csr")
    expected, _ = scipy.sparse.linalg.minres(spd, b, rtol=1e-14, maxiter=5, shift=shift, M=inverse)
    plain, _ = scipy.sparse.linalg.minres(spd, b, rtol=1e-14, maxiter=5, shift=shift)
    assert np.linalg.norm(expected - plain) > 1e-3 * np.linalg.norm(expected)
    S = js.CSRMatrix.from_scipy(spd)
    jacobi = js.linalg.jacobi(js.CSRMatrix.from_scipy(spd - shift * scipy.sparse.eye_array(N)))
    for M in (jacobi, lambda r: r / jnp.asarray(diagonal - shift)):
        x, info = js.linalg.minres(S, b, rtol=1e-14, maxiter=5, shift=shift, M=M)
        assert int(info) == 5
        np.testing.assert_allclose(x, expected, rtol=1e-10, atol=1e-12)


def test_breakdowns_end_cleanly():
    """A Krylov space that ends (a zero `beta`: the next step would divide by it) stops at
    its exact solution, even with `rtol == 0`; a singular consistent system converges (to
    the minimum-norm solution, as scipy's); an inconsistent one ends with a finite `x` and
    `info == maxiter` (scipy says 0 at its least-squares stop); a `b` in the null space
    gives a zero `x`; an indefinite `M` gives -1 (scipy raises); `n = 0` solves nothing."""
    n = 10
    singular = scipy.sparse.diags_array(np.arange(float(n)), format="csr")
    S = js.CSRMatrix.from_scipy(singular)
    b = np.linspace(1.0, 2.0, n)
    twice = js.CSRMatrix.from_scipy(scipy.sparse.diags_array(np.full(n, 2.0), format="csr"))
    x, _ = js.linalg.minres(twice, b, rtol=0.0)
    np.testing.assert_allclose(x, b / 2, rtol=1e-15)
    consistent = np.where(np.arange(n) == 0, 0.0, b)
    x, info = js.linalg.minres(S, consistent, rtol=1e-12)
    assert int(info) == scipy.sparse.linalg.minres(singular, consistent, rtol=1e-12)[1] == 0
    np.testing.assert_allclose(x, np.linalg.pinv(singular.toarray()) @ consistent, atol=1e-11)
    x, info = js.linalg.minres(S, b, maxiter=30)
    scipy_x, scipy_info = scipy.sparse.linalg.minres(singular, b, maxiter=30)
    assert int(info) == 30 and np.all(np.isfinite(x))
    assert scipy_info == 0 and relative_residual(singular, b, scipy_x) > 0.1
    x, info = js.linalg.minres(S, np.eye(n)[0], maxiter=30)
    assert not np.any(x) and int(info) == 30
    assert int(js.linalg.minres(S, consistent, M=-np.eye(n))[1]) == -1
    with pytest.raises(ValueError, match="indefinite preconditioner"):
        scipy.sparse.linalg.minres(singular, consistent, M=-np.eye(n))
    empty = js.CSRMatrix.from_scipy(scipy.sparse.csr_array((0, 0)))
    x, info = js.linalg.minres(empty, np.ones(0))
    assert x.shape == (0,) and int(info) == 0


def test_columns_x0_jit_and_vmap():
    twin, (A, D), b = saddle()
    B = np.stack([b, 2 * b, -b], axis=1)
    expected = spsolve(twin, B)
    solve = jax.jit(lambda A, B, shift: js.linalg.minres(A, B, rtol=1e-10, shift=shift))
    x, info = solve(A, B, 0.0)
    assert x.shape == B.shape and info.shape == (3,) and not np.any(info)
    np.testing.assert_allclose(x, expected, rtol=1e-7, atol=1e-9)
    # A traced shift compiles nothing more.
    x, info = solve(A, B, 0.7)
    assert solve._cache_size() == 1 and not np.any(info)
    np.testing.assert_allclose(x, spsolve(twin, B, 0.7), rtol=1e-7, atol=1e-9)
    # A zero `b` gives a zero `x` from any start, as scipy's.
    x, info = js.linalg.minres(A, np.zeros(N), x0=np.ones(N))
    assert not np.any(x) and int(info) == 0
    # A starting guess at the solution stops at once, and is kept.
    x, info = js.linalg.minres(D, B, x0=expected, rtol=1e-10, maxiter=1)
    assert not np.any(info)
    np.testing.assert_allclose(x, expected, rtol=1e-9)
    # vmap over the stored values, the shift and `b`: each member is its own system.
    scales, shifts = jnp.asarray([1.0, 2.0]), jnp.asarray([0.0, 1.4])
    batched = jax.vmap(
        lambda scale, shift, b: js.linalg.minres(
            A.with_data(scale * A.data), b, rtol=1e-10, shift=shift
        )[0]
    )(scales, shifts, B[:, :2].T)
    np.testing.assert_allclose(batched, [expected[:, 0], spsolve(twin, b, 0.7)], rtol=1e-7)


def test_complex_derivatives_match_dense_solves():
    """Reverse and forward derivatives in `A`'s values, `b` and `shift` of a complex
    Hermitian solve equal those of a dense solve of the same operator (the cotangent solve
    is MINRES with `conj(A)`, Hermitian too)."""
    _, (_, D), b = saddle(np.complex128)

    def loss(solve, data, b, shift):
        x = solve(D.with_data(data), b, shift)
        return jnp.sum(jnp.abs(jnp.sin(x)) ** 2)

    def iterative(A, b, shift):
        return js.linalg.minres(A, b, rtol=1e-13, shift=shift)[0]

    def dense(A, b, shift):
        return jnp.linalg.solve(A.toarray() - shift * jnp.eye(N, dtype=A.dtype), b)

    arguments = (D.data, jnp.asarray(b), jnp.asarray(0.7))
    got = jax.jit(jax.grad(lambda *a: loss(iterative, *a), argnums=(0, 1, 2)))(*arguments)
    want = jax.grad(lambda *a: loss(dense, *a), argnums=(0, 1, 2))(*arguments)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-9)
    tangents = jax.tree.map(lambda a: jnp.ones_like(a) / 3, arguments)
    got = jax.jit(jax.jvp, static_argnums=0)(
        lambda *a: iterative(D.with_data(a[0]), *a[1:]), arguments, tangents
    )[1]
    want = jax.jvp(lambda *a: dense(D.with_data(a[0]), *a[1:]), arguments, tangents)[1]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


def test_derivatives_match_finite_differences():
    """`check_grads` in `A`'s values, `b` and `shift`, of orders 1 and 2 in both modes, on
    a small indefinite system (each derivative solve is one more MINRES)."""
    _, (A, _), b = saddle(n=6)

    def loss(data, b, shift):
        x = js.linalg.minres(A.with_data(data), b, rtol=1e-14, shift=shift)[0]
        return jnp.sum(jnp.sin(x))

    check_grads(jax.jit(loss), (A.data, b, 0.7), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda A, b: js.linalg.minres(A.toarray(), b), TypeError, "`A`"),
        (lambda A, b: js.linalg.minres(A[:, :-1], b), ValueError, "square"),
        (lambda A, b: js.linalg.minres(A, b[:-1]), ValueError, "`b`"),
        (lambda A, b: js.linalg.minres(A, b, x0=b[:-1]), ValueError, "`x0`"),
        (lambda A, b: js.linalg.minres(A, b, rtol=-1.0), ValueError, "`rtol`"),
        (lambda A, b: js.linalg.minres(A, b, rtol=np.nan), ValueError, "`rtol`"),
        (lambda A, b: js.linalg.minres(A, b, maxiter=0), ValueError, "`maxiter`"),
        (lambda A, b: js.linalg.minres(A, b, maxiter=2.5), ValueError, "`maxiter`"),
        (lambda A, b: js.linalg.minres(A, b, shift=1j), ValueError, "`shift`"),
        (lambda A, b: js.linalg.minres(A, b, shift=np.inf), ValueError, "`shift`"),
        (lambda A, b: js.linalg.minres(A, b, shift=np.ones(2)), ValueError, "`shift`"),
        (lambda A, b: js.linalg.minres(A, b, M=np.eye(3)), ValueError, "`M`"),
        (lambda A, b: js.linalg.minres(A, b, atol=1e-8), TypeError, "atol"),
    ],
)
def test_bad_arguments_name_themselves(call, error, words):
    _, (A, _), b = saddle()
    with pytest.raises(error, match=words):
        call(A, b)


def test_inconsistent_singular_system_stops_at_a_least_squares_point():
    """A rotated rank-deficient `A` and a generic `b`: scipy's least-squares stop ends the
    iterations at a residual as small as `lstsq`'s, with `x` of its size (the step past it
    would divide by a vanishing gamma), and `info == maxiter` from the true residual."""
    n = 12
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    H = (Q * np.where(np.arange(n) < 3, 0.0, np.linspace(-3, 3, n))) @ Q.T
    H = (H + H.T) / 2
    b = rng.standard_normal(n)
    least_squares = np.linalg.lstsq(H, b, rcond=1e-10)[0]
    x, info = js.linalg.minres(js.CSRMatrix.from_scipy(scipy.sparse.csr_array(H)), b)
    assert int(info) == 5 * n
    residual = np.linalg.norm(b - H @ np.asarray(x))
    assert residual <= (1 + 1e-6) * np.linalg.norm(b - H @ least_squares)
    assert np.linalg.norm(x) <= 2 * np.linalg.norm(least_squares)


def test_float32_restarts_on_the_true_residual():
    """In float32 the updated residual stalls above the true one's test: MINRES restarts
    from `x` on the true residual until that one passes."""
    rng = np.random.default_rng(0)
    n = 40
    diagonal, upper = rng.standard_normal(n), rng.standard_normal(n - 1)
    twin = scipy.sparse.diags_array(
        [upper, diagonal, upper], offsets=[-1, 0, 1], format="csr"
    ).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    x, info = js.linalg.minres(js.CSRMatrix.from_scipy(twin), b, rtol=1e-5)
    assert x.dtype == np.float32 and int(info) == 0
    assert (
        relative_residual(twin.astype(np.float64), b.astype(np.float64), x.astype(np.float64))
        <= 1e-5
    )
