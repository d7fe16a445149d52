"""`js.linalg.jacobi` and `js.linalg.spilu0`: ILU(0) factors against a dense elimination
restricted to the pattern, the preconditioners inside `jax.scipy.sparse.linalg` solvers and
lineax, gradients through a preconditioned solve, and the errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import random_csr, random_values
from jax.test_util import check_grads

import jaxsparse as js

# The native sweeps run on the CPU only: on a GPU machine they run in the CPU pass.
METHODS = [pytest.param("native", marks=pytest.mark.on_cpu), "levels"]


def dense_ilu0(dense: np.ndarray, pattern: np.ndarray):
    """ILU(0) by the textbook IKJ elimination, updates kept only where `pattern` is set."""
    a = dense.copy()
    n = len(a)
    for i in range(1, n):
        for k in range(i):
            if pattern[i, k]:
                a[i, k] /= a[k, k]
                for j in range(k + 1, n):
                    if pattern[i, j]:
                        a[i, j] -= a[i, k] * a[k, j]
    return np.tril(a, -1) + np.eye(n), np.triu(a)


def diagonally_dominant_csr(rng, n, dtype):
    matrix, twin = random_csr(rng, (n, n), density=0.15, dtype=dtype)
    twin = (twin + scipy.sparse.eye_array(n) * 6).tocsr()
    return js.CSRMatrix.from_scipy(twin).astype(dtype), twin


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "dtype",
    [
        pytest.param(jnp.float32, marks=pytest.mark.slow),  # the float64 path, in float32
        jnp.float64,
        pytest.param(jnp.complex64, marks=pytest.mark.slow),
        jnp.complex128,
    ],
)
def test_ilu0_factors_match_dense_reference_csr(dtype, method):
    rng = np.random.default_rng(0)
    A, twin = diagonally_dominant_csr(rng, 25, dtype)
    M = js.linalg.spilu0(A, method=method)
    dense = twin.toarray()
    lower, upper = dense_ilu0(dense, dense != 0)
    tolerance = 1e-4 if dtype in (jnp.float32, jnp.complex64) else 1e-12
    L, U = M.factors()
    np.testing.assert_allclose(np.asarray(L), lower, atol=tolerance)
    np.testing.assert_allclose(np.asarray(U), upper, atol=tolerance)
    R = random_values(rng, (25, 3), dtype)
    expected = np.linalg.solve(upper, np.linalg.solve(lower, R))
    np.testing.assert_allclose(np.asarray(M @ R), expected, atol=tolerance)
    np.testing.assert_allclose(np.asarray(M(R[:, 0])), expected[:, 0], atol=tolerance)


@pytest.mark.parametrize("method", METHODS)
def test_ilu0_of_dia_uses_whole_diagonals_and_runs_under_jit(method):
    """A DIA pattern is every slot of its diagonals inside the matrix (stored zeros too)."""
    rng = np.random.default_rng(1)
    n, offsets = 20, (-4, -1, 0, 1, 3)
    data = rng.standard_normal((len(offsets), n))
    data[offsets.index(0)] += 8
    A = js.DIAMatrix(jnp.asarray(data), offsets, (n, n))
    dense = np.asarray(A.todense())
    pattern = np.zeros((n, n), bool)
    for offset in offsets:
        pattern |= np.eye(n, k=offset, dtype=bool)
    lower, upper = dense_ilu0(dense, pattern)
    M = jax.jit(lambda A: js.linalg.spilu0(A, method=method))(A)
    L, U = M.factors()
    np.testing.assert_allclose(np.asarray(L), lower, atol=1e-12)
    np.testing.assert_allclose(np.asarray(U), upper, atol=1e-12)


def test_jacobi_divides_by_the_diagonal():
    rng = np.random.default_rng(2)
    A, twin = diagonally_dominant_csr(rng, 15, jnp.complex128)
    r = random_values(rng, (15,), jnp.complex128)
    np.testing.assert_allclose(np.asarray(js.linalg.jacobi(A) @ r), r / twin.diagonal(), rtol=1e-13)


def poisson_2d(side: int):
    """`D L D` for the 2-D Laplacian `L` and a random positive diagonal `D`: symmetric
    positive definite with variable coefficients."""
    second = scipy.sparse.diags_array(
        [-np.ones(side - 1), 2 * np.ones(side), -np.ones(side - 1)], offsets=[-1, 0, 1]
    )
    eye = scipy.sparse.eye_array(side)
    laplacian = scipy.sparse.kron(second, eye) + scipy.sparse.kron(eye, second)
    scale = scipy.sparse.diags_array(np.exp(np.random.default_rng(3).standard_normal(side**2)))
    twin = (scale @ laplacian @ scale).todia()
    return js.DIAMatrix.from_scipy(twin), twin.tocsr()


@pytest.mark.parametrize("method", METHODS)
def test_preconditioners_in_jax_scipy_solvers(method):
    """With the same iteration budget, ILU(0) reaches a far smaller residual than no
    preconditioner in CG, GMRES and BiCGSTAB."""
    A, twin = poisson_2d(12)
    b = jnp.ones(A.shape[0])
    M = js.linalg.spilu0(A, method=method)

    def residual(solver, preconditioner):
        x, _ = solver(lambda v: A @ v, b, M=preconditioner, tol=1e-14, maxiter=15)
        return np.linalg.norm(twin @ np.asarray(x) - 1) / np.linalg.norm(np.ones(A.shape[0]))

    linalg = jax.scipy.sparse.linalg
    for solver in (linalg.cg, linalg.bicgstab):
        assert residual(solver, M) < 1e-2 * residual(solver, None)
    assert residual(linalg.cg, js.linalg.jacobi(A)) < residual(linalg.cg, None)
    x, _ = linalg.gmres(lambda v: A @ v, b, M=M, tol=1e-12, restart=20, maxiter=5)
    np.testing.assert_allclose(twin @ np.asarray(x), np.ones(A.shape[0]), atol=1e-8)


def test_ilu0_levels_skip_stored_zeros_that_stay_zero():
    """A 2-D stencil stored as diagonals has zeros where its grid lines wrap. Eagerly, the
    level schedule does not wait on them (a level per grid diagonal, not a chain of all
    rows); under `jit` every stored entry counts. The factors are the same either way, and
    a stored zero that the elimination fills stays a dependency."""
    side = 6
    A, _ = poisson_2d(side)
    traced = jax.jit(lambda A: js.linalg.spilu0(A, method="levels"))(A)
    eager = js.linalg.spilu0(A, method="levels")
    assert traced.forward_levels.shape[0] == side * side
    assert eager.forward_levels.shape[0] == eager.backward_levels.shape[0] == 2 * side - 1
    for ours, theirs in zip(eager.factors(), traced.factors(), strict=True):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-14)
    # (2, 1) is a stored zero that the pivot (2, 0) fills through (0, 1), so row 2 must
    # wait for row 1, whose diagonal its pivot (2, 1) then divides by.
    dense = np.array([[10, 1, 0, 0], [2, 10, 1, 0], [3, 0, 10, 1], [0, 4, 5, 10]], float)
    twin = scipy.sparse.dia_array(dense)
    offsets = list(twin.offsets)
    assert sorted(offsets) == [-2, -1, 0, 1] and 0.0 in twin.data[offsets.index(-1)]
    M = js.linalg.spilu0(js.DIAMatrix.from_scipy(twin), method="levels")
    assert M.forward_levels.shape[0] == 4
    band = np.subtract.outer(np.arange(4), np.arange(4))
    lower, upper = dense_ilu0(dense, (band <= 2) & (band >= -1))
    L, U = M.factors()
    np.testing.assert_allclose(np.asarray(L), lower, atol=1e-14)
    np.testing.assert_allclose(np.asarray(U), upper, atol=1e-14)
    # (2, 1) stays zero, and row 1's diagonal is zero until its elimination: the entry must
    # not be divided by it early (0 / 0), as a schedule that only reorders rows would.
    dense = np.array([[1, 1, 0], [2, 0, 1], [0, 0, 3]], float)
    M = js.linalg.spilu0(js.DIAMatrix.from_scipy(scipy.sparse.dia_array(dense)), method="levels")
    band = np.subtract.outer(np.arange(3), np.arange(3))
    lower, upper = dense_ilu0(dense, np.abs(band) <= 1)
    L, U = M.factors()
    np.testing.assert_array_equal(np.asarray(L), lower)
    np.testing.assert_array_equal(np.asarray(U), upper)


def test_preconditioner_with_lineax():
    lineax = pytest.importorskip("lineax", reason="lineax is an optional extra")
    A, twin = poisson_2d(10)
    b = jnp.ones(A.shape[0])
    operator = js.lineax_operator(A, symmetric=True, positive_semidefinite=True)
    M = js.linalg.spilu0(A).lineax_operator(symmetric=True, positive_semidefinite=True)
    solution = lineax.linear_solve(
        operator, b, lineax.CG(rtol=1e-12, atol=1e-12), options={"preconditioner": M}
    )
    np.testing.assert_allclose(twin @ np.asarray(solution.value), np.ones(A.shape[0]), atol=1e-9)


@pytest.mark.parametrize(
    "method",
    [
        pytest.param("native", marks=pytest.mark.on_cpu),
        pytest.param("levels", marks=pytest.mark.slow),  # the same lineax wrapping
    ],
)
def test_lineax_preconditioners_passed_into_jit_compile_once(method):
    """`M.lineax_operator()` is a pytree: preconditioners of new values on one pattern,
    passed into `eqx.filter_jit`, reuse the compiled solve; the operator, its transpose
    and its conjugate are `M`, `M^T` and `conj(M)`."""
    lineax = pytest.importorskip("lineax", reason="lineax is an optional extra")
    import equinox as eqx

    A, twin = diagonally_dominant_csr(np.random.default_rng(8), 12, jnp.complex128)
    b = jnp.asarray(random_values(np.random.default_rng(9), (12,), jnp.complex128))
    traces = []

    @eqx.filter_jit
    def solve(operator, M, b):
        traces.append(None)
        options = {"preconditioner": M}
        return lineax.linear_solve(operator, b, lineax.GMRES(1e-12, 1e-12), options=options).value

    for scale in (1.0, 2.0):
        scaled = A * scale
        M = js.linalg.spilu0(scaled, method=method).lineax_operator()
        x = solve(js.lineax_operator(scaled), M, b)
        np.testing.assert_allclose(scale * (twin @ np.asarray(x)), b, atol=1e-9)
        L, U = (np.asarray(F) for F in js.linalg.spilu0(scaled, method=method).factors())
        dense = np.linalg.inv(L @ U)
        np.testing.assert_allclose(M.as_matrix(), dense, atol=1e-12)
        np.testing.assert_allclose(M.T.as_matrix(), dense.T, atol=1e-12)
        np.testing.assert_allclose(lineax.conj(M.T).mv(b), dense.T.conj() @ b, atol=1e-12)
    assert len(traces) == 1
    # Reverse mode solves with the transposed operator and preconditioner.
    operator = js.lineax_operator(scaled)
    gradient = jax.grad(lambda b: jnp.sum(jnp.abs(solve(operator, M, b)) ** 2))(b)
    doubled = jnp.asarray(2 * twin.toarray())
    expected = jax.grad(lambda b: jnp.sum(jnp.abs(jnp.linalg.solve(doubled, b)) ** 2))(b)
    np.testing.assert_allclose(gradient, expected, atol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_gradient_through_preconditioned_solve_ignores_the_preconditioner(method):
    """The preconditioner is a constant for autodiff: its own derivative is zero, and the
    gradient of a preconditioned CG solve equals the dense solve's."""
    A, twin = poisson_2d(6)
    b = jnp.asarray(np.random.default_rng(4).standard_normal(A.shape[0]))

    def applied(data):
        return js.linalg.spilu0(A.with_data(data), method=method) @ b

    assert not np.any(np.asarray(jax.jacfwd(applied)(A.data)))

    def loss(data, b):
        matrix = A.with_data(data)
        x, _ = jax.scipy.sparse.linalg.cg(
            lambda v: matrix @ v, b, M=js.linalg.spilu0(matrix, method=method), tol=1e-13
        )
        return jnp.sum(x**3)

    def dense_loss(data, b):
        return jnp.sum(jnp.linalg.solve(A.with_data(data).todense(), b) ** 3)

    grads = jax.grad(loss, argnums=(0, 1))(A.data, b)
    expected = jax.grad(dense_loss, argnums=(0, 1))(A.data, b)
    for got, want in zip(grads, expected, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-7, atol=1e-9)


@pytest.mark.on_cpu
def test_native_ilu0_is_linear_in_the_operand_and_matches_the_levels():
    """The native `M` is the level-scheduled one, and differentiates as the linear map it
    is in both modes (its transposed sweeps), also under `jax.vmap` over operands."""
    rng = np.random.default_rng(6)
    A, _ = diagonally_dominant_csr(rng, 30, jnp.complex128)
    native, levels = (js.linalg.spilu0(A, method=m) for m in ("native", "levels"))
    R = random_values(rng, (30, 4), jnp.complex128)
    np.testing.assert_allclose(np.asarray(native @ R), np.asarray(levels @ R), rtol=1e-12)
    batched = jax.vmap(native, in_axes=1, out_axes=1)(R)
    np.testing.assert_allclose(np.asarray(batched), np.asarray(levels @ R), rtol=1e-12)
    check_grads(native, (R[:, 0],), order=1, modes=("fwd", "rev"))
    _, pullback = jax.vjp(native, R)
    (transposed,) = pullback(R)
    L, U = (np.asarray(F) for F in levels.factors())
    expected = np.linalg.solve(L.T, np.linalg.solve(U.T, np.asarray(R)))
    np.testing.assert_allclose(np.asarray(transposed), expected, rtol=1e-10)


@pytest.mark.skipif(jax.default_backend() == "cpu", reason="needs an accelerator (gpu-check)")
def test_native_ilu0_of_a_matrix_on_an_accelerator_is_refused():
    A, _ = poisson_2d(4)
    with pytest.raises(ValueError, match="runs on the CPU"):
        js.linalg.spilu0(A, method="native")


@pytest.mark.on_cpu
def test_native_ilu0_checks_buffers_and_pattern():
    """The FFI targets reject a wrong dtype or length and a pattern whose diagonal
    positions do not hold the diagonal, with an error, never reading out of bounds."""
    from jaxsparse.kernels import native_ilu0

    cols = jnp.asarray([0, 1, 0, 1], jnp.int32)
    indptr = jnp.asarray([0, 2, 4], jnp.int32)
    values = jnp.asarray([4.0, 1.0, 1.0, 4.0])
    with pytest.raises(Exception, match="diagonal must be int32"):
        native_ilu0.factor(values, cols, indptr, jnp.asarray([0, 3], jnp.int64))
    with pytest.raises(Exception, match="values has 3 along axis 0"):
        native_ilu0.factor(values[:3], cols, indptr, jnp.asarray([0, 3], jnp.int32))
    with pytest.raises(Exception, match="invalid pattern"):
        native_ilu0.factor(values, cols, indptr, jnp.asarray([1, 3], jnp.int32))
    factors = native_ilu0.factor(values, cols, indptr, jnp.asarray([0, 3], jnp.int32))
    with pytest.raises(Exception, match="invalid pattern"):
        bad = jnp.asarray([0, 7, 0, 1], jnp.int32)
        native_ilu0.apply(factors, bad, indptr, jnp.asarray([0, 3], jnp.int32), jnp.ones((2, 1)))
    with pytest.raises(Exception, match="r must be float64"):
        diagonal = jnp.asarray([0, 3], jnp.int32)
        native_ilu0.apply(factors, cols, indptr, diagonal, jnp.ones((2, 1), jnp.float32))


def test_bad_input_raises():
    with pytest.raises(ValueError, match="diagonal"):
        js.linalg.spilu0(js.DIAMatrix(jnp.ones((2, 5)), (-1, 1), (5, 5)))
    with pytest.raises(ValueError, match="row 0 has none"):  # no offsets: no diagonal
        js.linalg.spilu0(js.DIAMatrix(jnp.zeros((0, 3)), (), (3, 3)))
    with pytest.raises(ValueError, match="square"):
        js.linalg.spilu0(js.DIAMatrix(jnp.ones((1, 5)), (0,), (4, 5)))
    with pytest.raises(ValueError, match="square"):
        js.linalg.jacobi(js.DIAMatrix(jnp.ones((1, 5)), (0,), (4, 5)))
    A, _ = diagonally_dominant_csr(np.random.default_rng(5), 6, jnp.float64)
    with pytest.raises(ValueError, match="concrete"):
        jax.jit(js.linalg.spilu0)(A)
    with pytest.raises(ValueError, match="shape"):
        js.linalg.spilu0(A) @ jnp.ones(5)
    with pytest.raises(TypeError, match="jaxsparse matrix"):
        js.linalg.jacobi(np.eye(3))
    with pytest.raises(ValueError, match="`method`"):
        js.linalg.spilu0(A, method="gpu")


@pytest.mark.parametrize("method", METHODS)
def test_preconditioners_of_an_empty_matrix_apply_to_empty_operands(method):
    for A in (
        js.CSRMatrix.from_scipy(scipy.sparse.csr_array((0, 0))),
        js.DIAMatrix(jnp.zeros((0, 0)), (), (0, 0)),
    ):
        for M in (js.linalg.spilu0(A, method=method), js.linalg.jacobi(A)):
            assert (M @ jnp.zeros(0)).shape == (0,)
            assert (M @ jnp.zeros((0, 3))).shape == (0, 3)
