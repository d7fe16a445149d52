"""The derivatives of `spsolve` for DIA matrices: the forward pass keeps its factors
(`native_banded_kept.solve_keeping`; a tridiagonal band its inverse pivots alone) and the
reverse step is one native call that sweeps with them for `A^T` and returns the values'
cotangent (`kept_adjoint`); or, for narrow bands whose factors are large
(`keeps_factors`), the same from the values (`native_banded_lu.banded_adjoint`). Both
routes are checked against scipy and against the same gradient through `factorized`
(`custom_linear_solve`, an adjoint solve then the product's transpose), on the split and
one-pass paths, under `vmap`, and against the host path."""

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse.linalg
from helpers import dtype_id, ignored_slots, random_dia, random_values
from jax.test_util import check_grads

import jaxsparse as js
from jaxsparse.kernels import native_banded_kept
from jaxsparse.linalg import _banded_one_pass

# Above the native kernel's split threshold (2^14 rows).
SPLIT_ROWS = 20_000


def _band(rng, n, offsets, dtype, dominant):
    """A DIA matrix with junk in its ignored slots: diagonally dominant by rows, each main
    entry at least twice the rest of its row, plus 1 (the native check's margin for complex
    values; solved split over two threads when large), or with a main diagonal of random
    sign (one pass)."""
    matrix, _ = random_dia(rng, (n, n), offsets, dtype)
    main = offsets.index(0)
    data = np.asarray(matrix.data).copy()
    if dominant:
        off_diagonal = np.abs(matrix.to_scipy()).sum(axis=1) - np.abs(data[main])
        data[main] = (data[main] / np.abs(data[main]) * (2 * off_diagonal + 1)).astype(data.dtype)
    else:
        signs = np.where(rng.random(n) < 0.5, -1.0, 1.0)
        data[main] = (1.5 * signs + data[main]).astype(data.dtype)
    return matrix.with_data(jnp.asarray(data))


@pytest.fixture(params=["kept", "values"])
def route(request, monkeypatch):
    """Derivatives from the kept factors, or (no factor small enough to keep) the values."""
    if request.param == "values":
        monkeypatch.setattr(_banded_one_pass, "KEPT_BYTES", 0)
    return request.param


def test_which_bands_keep_their_factors():
    keeps = _banded_one_pass.keeps_factors
    penta = (-2, -1, 0, 1, 2)
    assert keeps(penta, 100_000, 1, np.float64)  # 7.6 MB with the solution
    assert not keeps(penta, 1_000_000, 1, np.float64)  # 76 MB: factored again
    assert not keeps(penta, 400_000, 8, np.float64)  # many right-hand sides
    assert keeps(penta, 400_000, 1, np.float32)  # 16 MB
    assert keeps((-100, -1, 0, 1, 100), 1_000_000, 1, np.float64)  # a wide band: always
    for tridiagonal in ((-1, 0, 1), (-1, 0), (0, 1), (0,)):  # the inverse pivots: always
        assert keeps(tridiagonal, 1_000_000, 8, np.float64)


def _loss(solve, weights):
    def loss(data, b):
        return jnp.real(jnp.sum(weights * solve(data, b)))

    return loss


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.complex128], ids=dtype_id)
@pytest.mark.parametrize("dominant", [True, False], ids=["split", "one-pass"])
def test_gradient_matches_the_factorized_route(dominant, dtype, route):
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


@pytest.mark.on_cpu  # the native kernels
@pytest.mark.parametrize("offsets", [(-1, 0, 2), (-1, 0, 1)])
def test_gradient_step_is_one_solve_and_one_adjoint_call(offsets, route):
    """A tridiagonal band keeps its inverse pivots at any size, the others by their size."""
    rng = np.random.default_rng(41)
    matrix = _band(rng, 50, offsets, jnp.float64, True)
    b = jnp.asarray(random_values(rng, (50,), jnp.float64))

    def loss(data, b):
        return jnp.sum(js.linalg.spsolve(matrix.with_data(data), b) ** 2)

    hlo = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(matrix.data, b).compile().as_text()
    solve, adjoint = {
        "kept": ("jaxsparse_dia_banded_solve_keeping", "jaxsparse_dia_banded_factored_adjoint"),
        "values": ("jaxsparse_dia_banded_solve", "jaxsparse_dia_banded_adjoint"),
        "tridiagonal": (
            "jaxsparse_dia_tridiagonal_solve_keeping",
            "jaxsparse_dia_tridiagonal_kept_adjoint",
        ),
    }["tridiagonal" if offsets == (-1, 0, 1) else route]
    targets = [
        line.split('custom_call_target="')[1].split('"')[0]
        for line in hlo.splitlines()
        if 'custom_call_target="' in line
    ]
    assert sorted(targets) == sorted([solve, adjoint])


@pytest.mark.on_cpu  # the native kernels
def test_tridiagonal_gradient_step_writes_lambda_over_its_cotangent():
    """The adjoint's `lambda` takes the buffer of its cotangent `g`: a gradient step's
    temporaries are `x` and the inverse pivots, two vectors, not three (a third would make
    single calls fault in fresh pages at 10^6 rows)."""
    rng = np.random.default_rng(49)
    n = 5000
    matrix = _band(rng, n, (-1, 0, 1), jnp.float64, True)
    b = jnp.asarray(random_values(rng, (n,), jnp.float64))

    def loss(data, b):
        return jnp.sum(js.linalg.spsolve(matrix.with_data(data), b) ** 2)

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(matrix.data, b).compile()
    vector = n * 8
    assert 2 * vector <= compiled.memory_analysis().temp_size_in_bytes < 2.5 * vector


# Bandwidths of every kind past tridiagonal: wider below than above, one-sided each way, and
# a gap between the diagonals.
KEPT_OFFSETS = [(-1, 0, 2), (-3, 0, 1), (0, 2), (-2, 0), (-2, 0, 5)]


@pytest.mark.on_cpu  # the native kernels
@pytest.mark.parametrize(
    "offsets, dtype",
    [*((offsets, jnp.float64) for offsets in KEPT_OFFSETS), ((-1, 0, 2), jnp.complex128)],
    ids=lambda value: dtype_id(value) if isinstance(value, type) else str(value),
)
@pytest.mark.parametrize("dominant", [True, False], ids=["split", "one-pass"])
@pytest.mark.parametrize("columns", [1, 3])
def test_kept_solves_match_scipy(offsets, dtype, dominant, columns):
    """Solves with `A` and `A^T` from the kept factors, on the split's two blocks (odd size:
    blocks of unequal rows; one pass on a single core) and on one pass, against scipy's."""
    rng = np.random.default_rng(44)
    n = SPLIT_ROWS + 1
    matrix = _band(rng, n, offsets, dtype, dominant)
    b = jnp.asarray(random_values(rng, (n, columns), dtype))
    g = jnp.asarray(random_values(rng, (n, columns), dtype))
    x, kept = native_banded_kept.solve_keeping(matrix.data, b, offsets=offsets)
    # The split needs two of XLA's intra-op threads, one per usable core.
    splits = dominant and len(os.sched_getaffinity(0)) >= 2
    assert int(kept.status) == (2 if splits else 1)
    S = matrix.to_scipy().tocsc()
    solve = functools.partial(native_banded_kept.kept_solve, matrix.data, kept, offsets=offsets)
    for op, system, rhs in (("N", S, g), ("T", S.T.tocsc(), g)):
        expected = scipy.sparse.linalg.spsolve(system, np.asarray(rhs)).reshape(n, columns)
        scale = np.max(np.abs(expected))  # random one-pass matrices are ill-conditioned
        np.testing.assert_allclose(solve(rhs, op=op), expected, rtol=0, atol=1e-9 * scale)
    adjoint, _ = native_banded_kept.kept_adjoint(matrix.data, kept, x, g, offsets=offsets)
    np.testing.assert_array_equal(adjoint, solve(g, op="T"))


@pytest.mark.on_cpu  # the native kernels
@pytest.mark.parametrize("offsets", [(-1, 0, 1), (-1, 0), (0, 1), (0,)], ids=str)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.complex128], ids=dtype_id)
@pytest.mark.parametrize("dominant", [True, False], ids=["dominant", "pivoting"])
@pytest.mark.parametrize("columns", [1, 3])
def test_tridiagonal_kept_solves_match_scipy(offsets, dtype, dominant, columns):
    """A tridiagonal band keeps its inverse pivots where it is diagonally dominant (status 1),
    and otherwise solves with pivoting and keeps none (status 0: the derivatives' solves
    factor again from the values); solves with `A` and `A^T` agree with scipy's either way,
    and the adjoint's `lambda` (written over `g`'s buffer) is the solve with `A^T`."""
    rng = np.random.default_rng(47)
    n = 301
    matrix = _band(rng, n, offsets, dtype, dominant)
    b = jnp.asarray(random_values(rng, (n, columns), dtype))
    g = jnp.asarray(random_values(rng, (n, columns), dtype))
    x, kept = native_banded_kept.solve_keeping(matrix.data, b, offsets=offsets)
    assert isinstance(kept, native_banded_kept.TridiagonalKept)
    if dominant or offsets == (0,):
        assert int(kept.status) == 1
    elif offsets == (-1, 0, 1):  # random signs on the diagonal: pivoting
        assert int(kept.status) == 0
    S = matrix.to_scipy().astype(np.complex128).tocsc()
    tolerance = 1e-4 if dtype == jnp.float32 else 1e-10
    solve = functools.partial(native_banded_kept.kept_solve, matrix.data, kept, offsets=offsets)
    for op, system, rhs, got in (("N", S, b, x), ("N", S, g, None), ("T", S.T.tocsc(), g, None)):
        got = solve(rhs, op=op) if got is None else got
        expected = scipy.sparse.linalg.spsolve(system, np.asarray(rhs)).reshape(n, columns)
        scale = np.max(np.abs(expected))
        np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance * scale)
    adjoint = jax.jit(native_banded_kept.kept_adjoint, static_argnames="offsets")
    lam, _ = adjoint(matrix.data, kept, x, g, offsets=offsets)
    np.testing.assert_array_equal(lam, solve(g, op="T"))


@pytest.mark.on_cpu  # the native kernels
def test_tridiagonal_adjoint_from_the_values_keeps_g_apart_from_lambda():
    """Where no pivots were kept, the adjoint solves from the values with `lambda` in `g`'s
    buffer; the split over two threads stops at a row that is not dominant and starts over
    from `g`, so `g` must survive what the first attempt wrote (the kernel copies it)."""
    rng = np.random.default_rng(48)
    n = SPLIT_ROWS + 1
    matrix = _band(rng, n, (-1, 0, 1), jnp.float64, True)
    data = matrix.data.at[1, n // 4].set(0.1)  # one row past dominance, in the first block
    x, kept = native_banded_kept.solve_keeping(data, jnp.ones((n, 1)), offsets=(-1, 0, 1))
    assert int(kept.status) == 0
    g = jnp.asarray(random_values(rng, (n, 1), jnp.float64))
    lam, _ = jax.jit(native_banded_kept.kept_adjoint, static_argnames="offsets")(
        data, kept, x, g, offsets=(-1, 0, 1)
    )
    S = matrix.with_data(data).to_scipy().T.tocsc()
    expected = scipy.sparse.linalg.spsolve(S, np.asarray(g)).reshape(n, 1)
    np.testing.assert_allclose(lam, expected, rtol=0, atol=1e-10 * np.max(np.abs(expected)))


# A general band in complex128 and a tridiagonal one in float64; the other two pairings
# take the same sweeps: `slow`.
@pytest.mark.parametrize(
    ("dtype", "offsets"),
    [
        pytest.param(jnp.float64, (-1, 0, 2), id="float64-offsets0", marks=pytest.mark.slow),
        pytest.param(jnp.float64, (-1, 0, 1), id="float64-offsets1"),
        pytest.param(jnp.complex128, (-1, 0, 2), id="complex128-offsets0"),
        pytest.param(jnp.complex128, (-1, 0, 1), id="complex128-offsets1", marks=pytest.mark.slow),
    ],
)
def test_check_grads_under_vmap(offsets, dtype, route):
    """Batches of right-hand sides over one matrix, and of matrices, both modes."""
    rng = np.random.default_rng(42)
    matrix = _band(rng, 12, offsets, dtype, offsets == (-1, 0, 1))
    b = jnp.asarray(random_values(rng, (3, 12), dtype))
    values = jnp.stack([matrix.data, 1.1 * matrix.data, 0.9 * matrix.data])

    def solve(data, b):
        return js.linalg.spsolve(matrix.with_data(data), b)

    check_grads(jax.vmap(solve, (None, 0)), (matrix.data, b), 1, ("fwd", "rev"), eps=1e-6)
    check_grads(jax.vmap(solve, (0, None)), (values, b[0]), 1, ("fwd", "rev"), eps=1e-6)
    check_grads(jax.vmap(solve), (values, b), 1, ("fwd", "rev"), eps=1e-6)


def test_singular_matrix_gives_nan_gradients(route):
    matrix = js.DIAMatrix(jnp.zeros((3, 8)), (-1, 0, 1), (8, 8))
    b = jnp.ones(8)
    grads = jax.grad(lambda d, b: jnp.sum(js.linalg.spsolve(matrix.with_data(d), b)), (0, 1))(
        matrix.data, b
    )
    assert np.all(np.isnan(np.asarray(grads[1])))
    inside = ~ignored_slots(matrix.offsets, matrix.shape)
    assert np.all(np.isnan(np.asarray(grads[0])[inside]))


@pytest.mark.on_cpu  # the native kernels
@pytest.mark.parametrize("batched", [False, True])
def test_native_and_host_adjoints_agree(batched):
    rng = np.random.default_rng(43)
    offsets = (-2, 0, 3)
    matrix = _band(rng, 30, offsets, jnp.complex128, False)
    lead = (2,) if batched else ()
    data = jnp.broadcast_to(matrix.data, (*lead, *matrix.data.shape)) if batched else matrix.data
    b = jnp.asarray(random_values(rng, (*lead, 30, 2), jnp.complex128))
    g = jnp.asarray(random_values(rng, (*lead, 30, 2), jnp.complex128))
    keeping = jax.vmap if batched else lambda f: f
    x, kept = keeping(lambda d, b: native_banded_kept.solve_keeping(d, b, offsets=offsets))(data, b)

    def adjoint(host):
        return jax.jit(lambda *a: native_banded_kept.kept_adjoint(*a, offsets=offsets, host=host))(
            data, kept, x, g
        )

    for a, e in zip(adjoint(False), adjoint(True), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-11, atol=1e-12)
    for op in ("N", "T"):
        native, host = (
            native_banded_kept.kept_solve(data, kept, g, offsets=offsets, op=op, host=host)
            for host in (False, True)
        )
        np.testing.assert_allclose(native, host, rtol=1e-11, atol=1e-12)


@pytest.mark.on_cpu  # the native kernels
def test_gradients_over_right_hand_sides_share_one_factorization(route):
    """`vmap` of the gradient over right-hand sides is one multi-column solve (one set of
    factors), and matches the gradients taken one right-hand side at a time."""
    rng = np.random.default_rng(45)
    offsets = (-1, 0, 2)
    matrix = _band(rng, 40, offsets, jnp.float64, False)
    bs = jnp.asarray(random_values(rng, (4, 40), jnp.float64))

    def grad(data, b):
        loss = _loss(lambda d, b: js.linalg.spsolve(matrix.with_data(d), b), b)
        return jax.grad(loss, argnums=(0, 1))(data, b)

    batched = jax.jit(jax.vmap(grad, (None, 0)))
    hlo = batched.lower(matrix.data, bs).compile().as_text()
    solve = "solve_keeping" if route == "kept" else "solve"
    target = f'custom_call_target="jaxsparse_dia_banded_{solve}"'
    solves = [line for line in hlo.splitlines() if target in line]
    assert len(solves) == 1 and "f64[40,4]" in solves[0]  # x: the 4 right-hand sides
    for i, (dvalues, db) in enumerate(zip(*batched(matrix.data, bs), strict=True)):
        expected = grad(matrix.data, bs[i])
        np.testing.assert_allclose(dvalues, expected[0], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(db, expected[1], rtol=1e-12, atol=1e-13)


def test_host_solve_keeps_zeros_that_its_derivatives_never_read():
    """Off the CPU the solve runs on the host and keeps nothing: its factors are zeros, and
    the host's derivative solves factor again from the values."""
    rng = np.random.default_rng(46)
    offsets = (-2, 0, 1)
    matrix = _band(rng, 30, offsets, jnp.float64, False)
    b = jnp.asarray(random_values(rng, (30, 2), jnp.float64))
    x, kept = native_banded_kept.solve_keeping(matrix.data, b, offsets=offsets, host=True)
    S = matrix.to_scipy().tocsc()
    np.testing.assert_allclose(x, scipy.sparse.linalg.spsolve(S, np.asarray(b)), rtol=1e-10)
    assert all(not np.any(np.asarray(value)) for value in kept)
    adjoint = native_banded_kept.kept_solve(
        matrix.data, kept, b, offsets=offsets, op="T", host=True
    )
    expected = scipy.sparse.linalg.spsolve(S.T.tocsc(), np.asarray(b))
    np.testing.assert_allclose(adjoint, expected, rtol=1e-10)
