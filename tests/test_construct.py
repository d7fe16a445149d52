"""The module-level constructors against scipy.sparse: values, result format, dtype and
shape, inside and outside `jit`, and gradients through the values."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import random_csr, random_dia, random_values, slow_unless
from jax.test_util import check_grads

import jaxsparse as js
from jaxsparse._construct import _redrawing_repeats

JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])


def maybe_jit(function, jit: bool):
    return jax.jit(function) if jit else function


def assert_matches_scipy(matrix, expected, cls, dtype):
    assert isinstance(matrix, cls)
    assert matrix.shape == expected.shape
    assert matrix.dtype == np.dtype(dtype)
    np.testing.assert_allclose(matrix.todense(), expected.toarray(), rtol=1e-6, atol=1e-6)


DIAGS_CASES = {
    "scipy-docstring": ([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0], [1.0, 2.0]], [0, -1, 2], None),
    "broadcast-scalars": ([1.0, -2.0, 1.0], [-1, 0, 1], (5, 5)),
    "one-offset-int": ([1.0, 2.0, 3.0], 1, None),
    "wide": ([[1.0, 2.0, 3.0], [4.0], [5.0, 6.0]], [0, 3, -1], (3, 6)),
    "tall-cut-to-length": ([np.arange(1.0, 9.0), [7.0]], [-2, 1], (5, 3)),
    "edge-offsets": ([[], [2.0], [3.0]], [4, 0, -3], (3, 4)),
    "integers": ([[1, 2, 3], [4, 5]], [0, 1], None),
}


@pytest.mark.parametrize("case", DIAGS_CASES.values(), ids=DIAGS_CASES.keys())
@JIT
def test_diags_matches_scipy(case, jit):
    diagonals, offsets, shape = case
    expected = scipy.sparse.diags_array(diagonals, offsets=offsets, shape=shape, dtype=np.float64)
    arrays = [np.asarray(d) for d in diagonals] if isinstance(offsets, list) else diagonals
    matrix = maybe_jit(lambda d: js.diags(d, offsets, shape), jit)(arrays)
    assert_matches_scipy(matrix, expected, js.DIAMatrix, np.float64)
    assert matrix.offsets == tuple(np.atleast_1d(offsets))
    assert matrix.nnz == expected.nnz


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.complex64])
def test_diags_dtype(dtype):
    given = js.diags([[1.0, 2.0], [3.0]], [0, 1], dtype=dtype)
    assert given.dtype == np.dtype(dtype)
    assert js.diags([jnp.ones(3, dtype)], [0]).dtype == np.dtype(dtype)


def test_boolean_eye_and_diags_as_scipy():
    """`dtype=bool` and boolean diagonals give boolean matrices, as in scipy."""
    flags = np.array([True, False, True])
    expected = scipy.sparse.diags_array([flags, flags[:2]], offsets=[0, 1], dtype=bool).toarray()
    numbers = [flags.astype(np.float64), flags[:2].astype(np.float64)]
    for matrix in (js.diags([flags, flags[:2]], [0, 1]), js.diags(numbers, [0, 1], dtype=bool)):
        assert matrix.dtype == jnp.bool_
        np.testing.assert_array_equal(matrix.todense(), expected)
    identity = js.eye(3, 4, k=1, dtype=bool)
    assert identity.dtype == jnp.bool_
    expected = scipy.sparse.eye_array(3, 4, k=1, dtype=bool).toarray()
    np.testing.assert_array_equal(identity.todense(), expected)


def test_diags_gradient_through_the_diagonals():
    rng = np.random.default_rng(0)
    main, lower = random_values(rng, (5,), np.float64), random_values(rng, (4,), np.float64)
    x = random_values(rng, (5, 2), np.float64)

    def product(main, lower):
        return js.diags([main, lower], [0, -1]) @ x

    def dense(main, lower):
        return (jnp.diag(main) + jnp.diag(lower, -1)) @ x

    np.testing.assert_allclose(product(main, lower), dense(main, lower), atol=1e-12)
    cotangent = random_values(rng, (5, 2), np.float64)
    sparse_grads = jax.vjp(product, main, lower)[1](cotangent)
    dense_grads = jax.vjp(dense, main, lower)[1](cotangent)
    for actual, expected in zip(sparse_grads, dense_grads, strict=True):
        np.testing.assert_allclose(actual, expected, atol=1e-12)
    check_grads(jax.jit(product), (main, lower), order=1, modes=("fwd", "rev"))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(diagonals=[[1.0], [2.0]], offsets=0), ValueError, "one offset per diagonal"),
        (dict(diagonals=[[1.0], [2.0]], offsets=[0]), ValueError, "must match"),
        (dict(diagonals=[[1.0, 2.0]], offsets=[0], shape=(3, 3)), ValueError, "has 3 entries"),
        (dict(diagonals=[[1.0]], offsets=[4], shape=(3, 3)), ValueError, "lies outside"),
        (dict(diagonals=[], offsets=[]), ValueError, "`shape` is needed"),
        (dict(diagonals=[[1.0]], offsets=[0, 0]), ValueError, "duplicate"),
        (dict(diagonals=[[1.0]], offsets=[0], dtype=np.int32), TypeError, "floating or complex"),
        (dict(diagonals=[np.ones((2, 2))], offsets=[0], shape=(2, 2)), ValueError, "1-D"),
    ],
)
def test_diags_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        js.diags(**kwargs)


@pytest.mark.parametrize("m, n, k", [(4, None, 0), (3, 5, 2), (5, 3, -2), (4, 4, 4), (4, 6, -4)])
@JIT
def test_eye_matches_scipy(m, n, k, jit):
    expected = scipy.sparse.eye_array(m, n, k=k)
    matrix = maybe_jit(lambda: js.eye(m, n, k), jit)()
    assert_matches_scipy(matrix, expected, js.DIAMatrix, np.float64)
    assert matrix.offsets == (k,) and matrix.nnz == expected.nnz


@pytest.mark.parametrize("dtype", [None, jnp.float32, jnp.complex128])
def test_identity_and_dtypes(dtype):
    matrix = js.identity(4, dtype=dtype)
    assert_matches_scipy(matrix, scipy.sparse.identity(4), js.DIAMatrix, dtype or np.float64)
    with pytest.raises(ValueError, match="`k` = 5 lies outside"):
        js.eye(3, 4, k=5)
    with pytest.raises(TypeError, match="floating or complex"):
        js.eye(3, dtype=np.int64)


# Pairs of factors: (shape, DIA offsets) each; ignored DIA slots hold junk.
KRON_FACTORS = {
    "square": (((4, 4), (-1, 0, 1)), ((3, 3), (0, 2, -1))),
    "wide-A-beyond": (((3, 5), (1, -2, 0, 7)), ((4, 4), (-1, 3))),
    "wide-B": (((3, 3), (-1, 0, 1)), ((2, 3), (0, 1))),
    "tall-B": (((4, 2), (0, -1, -3)), ((3, 2), (-1, 0, 1))),
}


def make_factor(rng, fmt, shape, offsets, dtype=np.float64):
    if fmt == "dia":
        return random_dia(rng, shape, offsets, dtype)
    return random_csr(rng, shape, density=0.5, dtype=dtype, shuffle_columns=True)


# Fast: the square factors under `jit` in every pairing of formats, and eagerly for one
# format each; the rectangular factors (the same code with other offsets) run in
# `make test-slow`.
KRON_CASES = [
    pytest.param(
        factors,
        formats,
        jit,
        id=f"{name}-{formats}-{'jit' if jit else 'eager'}",
        marks=slow_unless(name == "square"),
    )
    for name, factors in KRON_FACTORS.items()
    for formats in ("dia-dia", "csr-csr", "csr-dia")
    for jit in (True, False)
    if jit or (name == "square" and formats in ("dia-dia", "csr-csr"))
]


@pytest.mark.parametrize("factors, formats, jit", KRON_CASES)
def test_kron_matches_scipy(factors, formats, jit):
    rng = np.random.default_rng(1)
    (A, SA), (B, SB) = (
        make_factor(rng, fmt, *factor)
        for fmt, factor in zip(formats.split("-"), factors, strict=True)
    )
    expected = scipy.sparse.kron(SA, SB)
    product = maybe_jit(js.kron, jit)(A, B)
    cls = js.DIAMatrix if formats == "dia-dia" else js.CSRMatrix
    assert_matches_scipy(product, expected, cls, np.float64)
    x = random_values(rng, (product.shape[1], 2), np.float64)
    np.testing.assert_allclose(product @ x, expected @ x, atol=1e-12)
    if formats == "csr-csr":
        assert product.nnz == SA.nnz * SB.nnz  # scipy's kron may count a BSR's block zeros
    if cls is js.CSRMatrix:
        product.check()


def test_kron_square_factors_keep_few_static_offsets():
    T = js.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(4, 4))
    assert js.kron(T, js.eye(3)).offsets == (-3, 0, 3)
    assert js.kron(js.eye(4), T).offsets == (-1, 0, 1)
    assert js.kron(T, T).offsets == (-5, -4, -3, -1, 0, 1, 3, 4, 5)


@pytest.mark.parametrize("dtypes", [(jnp.float32, jnp.float32), (jnp.complex64, jnp.complex64)])
def test_kron_dtype(dtypes):
    rng = np.random.default_rng(2)
    A, SA = random_dia(rng, (3, 3), (0, 1), dtypes[0])
    B, SB = random_csr(rng, (2, 4), dtype=dtypes[1])
    for product in (js.kron(A, A), js.kron(A, B)):
        assert product.dtype == np.dtype(dtypes[0])
    np.testing.assert_allclose(
        js.kron(A, B).todense(), scipy.sparse.kron(SA, SB).toarray(), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    "formats, factors",
    [
        ("dia-dia", KRON_FACTORS["square"]),
        ("dia-dia", KRON_FACTORS["wide-B"]),
        ("csr-csr", KRON_FACTORS["square"]),
    ],
    ids=["dia-dia-square", "dia-dia-wide-B", "csr-csr-square"],
)
def test_kron_gradients_in_both_factors(formats, factors):
    rng = np.random.default_rng(3)
    (A, _), (B, _) = (
        make_factor(rng, fmt, *factor)
        for fmt, factor in zip(formats.split("-"), factors, strict=True)
    )
    x = random_values(rng, (A.shape[1] * B.shape[1], 2), np.float64)

    def sparse_loss(a, b):
        return jnp.sum(jnp.sin(js.kron(A.with_data(a), B.with_data(b)) @ x))

    def dense_loss(a, b):
        product = jnp.kron(A.with_data(a).todense(), B.with_data(b).todense())
        return jnp.sum(jnp.sin(product @ x))

    actual = jax.jit(jax.grad(sparse_loss, argnums=(0, 1)))(A.data, B.data)
    expected = jax.jit(jax.grad(dense_loss, argnums=(0, 1)))(A.data, B.data)
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-12)
    check_grads(jax.jit(sparse_loss), (A.data, B.data), order=1, modes=("fwd", "rev"))


def test_poisson_3d_built_under_jit_matches_scipy():
    N = 5

    @functools.partial(jax.jit, static_argnums=0)
    def poisson_3d(N):
        T = js.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(N, N))
        I = js.eye(N)  # noqa: E741
        return js.kron(js.kron(T, I), I) + js.kron(js.kron(I, T), I) + js.kron(js.kron(I, I), T)

    T = scipy.sparse.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    I = scipy.sparse.eye_array(N)  # noqa: E741
    kron = scipy.sparse.kron
    expected = kron(kron(T, I), I) + kron(kron(I, T), I) + kron(kron(I, I), T)
    A = poisson_3d(N)
    assert_matches_scipy(A, expected, js.DIAMatrix, np.float64)
    assert A.offsets == (-(N**2), -N, -1, 0, 1, N, N**2)
    x = np.random.default_rng(4).standard_normal(N**3)
    np.testing.assert_allclose(A @ x, expected @ x, atol=1e-12)


def test_kron_of_new_values_reuses_the_compiled_function():
    T = js.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(4, 4))
    I = js.eye(4)  # noqa: E741

    @jax.jit
    def anisotropic(c):
        return c[0] * js.kron(T, I) + c[1] * js.kron(I, T)

    first, second = anisotropic(jnp.array([1.0, 2.0])), anisotropic(jnp.array([3.0, 0.5]))
    assert anisotropic._cache_size() == 1
    S_T, S_I = T.to_scipy(), scipy.sparse.eye_array(4)
    for matrix, (a, b) in ((first, (1.0, 2.0)), (second, (3.0, 0.5))):
        expected = a * scipy.sparse.kron(S_T, S_I) + b * scipy.sparse.kron(S_I, S_T)
        np.testing.assert_allclose(matrix.todense(), expected.toarray(), atol=1e-12)


def test_csr_results_of_known_structures_stay_known_under_jit():
    """`kron`, `hstack`, `vstack` and `block_diag` of structures known on the host keep
    concrete index arrays inside `jit` (the values traced), so host-side operations on
    the results (slicing, sparse `+`) need no `nnz` there, and gradients reach the values."""
    rng = np.random.default_rng(12)
    csr, twin = random_csr(rng, (4, 3), density=0.5, dtype=jnp.float64)
    dia, dia_twin = random_dia(rng, (3, 3), (-1, 0, 2), jnp.float64)

    def results(values):
        C = csr.with_data(values)
        stacked = js.hstack([C, C @ C.T])
        assert not isinstance(stacked.indices, jax.core.Tracer)
        return (
            js.kron(C, dia)[1:5],
            stacked[1:3] + stacked[2:4],
            js.vstack([C, dia])[::2],
            js.block_diag([dia, C])[3:],
        )

    gram = twin @ twin.T
    expected = (
        scipy.sparse.kron(twin, dia_twin).tocsr()[1:5],
        scipy.sparse.hstack([twin, gram]).tocsr()[1:3]
        + scipy.sparse.hstack([twin, gram]).tocsr()[2:4],
        scipy.sparse.vstack([twin, dia_twin]).tocsr()[::2],
        scipy.sparse.block_diag([dia_twin, twin]).tocsr()[3:],
    )
    for result, want in zip(jax.jit(results)(csr.data), expected, strict=True):
        np.testing.assert_allclose(result.todense(), want.toarray(), atol=1e-12)
    check_grads(jax.jit(lambda v: results(v)[0].data), (csr.data,), order=1, modes=("rev",))


BLOCKS = [((3, 3), (-1, 0, 1)), ((2, 4), (0, 1, 3)), ((4, 2), (-2, 0, 5)), ((1, 1), (0,))]


@pytest.mark.parametrize("formats", ["dia", "mixed"])
@JIT
def test_block_diag_matches_scipy(formats, jit):
    rng = np.random.default_rng(5)
    pairs = [
        make_factor(rng, "csr" if formats == "mixed" and t % 2 else "dia", *block)
        for t, block in enumerate(BLOCKS)
    ]
    blocks, twins = zip(*pairs, strict=True)
    matrix = maybe_jit(js.block_diag, jit)(list(blocks))
    cls = js.DIAMatrix if formats == "dia" else js.CSRMatrix
    assert_matches_scipy(matrix, scipy.sparse.block_diag(twins), cls, np.float64)
    if cls is js.CSRMatrix:
        matrix.check()


def test_block_diag_gradient():
    rng = np.random.default_rng(6)
    blocks = [random_dia(rng, shape, offsets, np.float64)[0] for shape, offsets in BLOCKS]
    x = random_values(rng, (sum(b.shape[1] for b in blocks), 3), np.float64)

    def product(*data):
        return js.block_diag([b.with_data(d) for b, d in zip(blocks, data, strict=True)]) @ x

    check_grads(jax.jit(product), tuple(b.data for b in blocks), order=1, modes=("fwd", "rev"))


STACKED = [((4, 3), "dia", (0, 1, -5)), ((4, 5), "csr", None), ((4, 2), "dia", (-1, 1))]


@pytest.mark.parametrize("direction", ["vstack", "hstack"])
@JIT
def test_vstack_hstack_match_scipy(direction, jit):
    rng = np.random.default_rng(7)
    pairs = []
    for shape, fmt, offsets in STACKED:
        shape = shape[::-1] if direction == "vstack" else shape
        pairs.append(make_factor(rng, fmt, shape, offsets))
    blocks, twins = zip(*pairs, strict=True)
    stack, scipy_stack = {
        "vstack": (js.vstack, scipy.sparse.vstack),
        "hstack": (js.hstack, scipy.sparse.hstack),
    }[direction]
    matrix = maybe_jit(stack, jit)(list(blocks))
    assert_matches_scipy(matrix, scipy_stack(twins), js.CSRMatrix, np.float64)
    assert matrix.nnz == sum(block.nnz for block in blocks)
    matrix.check()


@pytest.mark.parametrize("direction", ["vstack", "hstack"])
def test_stack_gradient(direction):
    rng = np.random.default_rng(8)
    shape = (5, 4)
    a, _ = random_csr(rng, shape, density=0.5, dtype=np.float64, shuffle_columns=True)
    b, _ = random_dia(rng, shape, (0, 2, -1), np.float64)
    stack = {"vstack": js.vstack, "hstack": js.hstack}[direction]
    x = random_values(rng, (stack([a, b]).shape[1], 2), np.float64)
    check_grads(
        jax.jit(lambda p, q: stack([a.with_data(p), b.with_data(q)]) @ x),
        (a.data, b.data),
        order=1,
        modes=("fwd", "rev"),
    )


def test_construct_errors():
    A = js.eye(3)
    with pytest.raises(TypeError, match="`B` must be a jaxsparse matrix"):
        js.kron(A, np.eye(2))
    with pytest.raises(ValueError, match="at least one matrix"):
        js.block_diag([])
    with pytest.raises(TypeError, match="sequence of matrices"):
        js.vstack(A)
    with pytest.raises(TypeError, match=r"`blocks\[1\]` must be a jaxsparse matrix"):
        js.hstack([A, np.eye(3)])
    with pytest.raises(ValueError, match=r"`blocks\[1\]` has 4 columns"):
        js.vstack([A, js.eye(2, 4)])
    with pytest.raises(ValueError, match=r"`blocks\[1\]` has 2 rows"):
        js.hstack([A, js.eye(2, 4)])


def test_csr_results_past_int32_need_x64():
    indices, indptr = np.array([49_999], np.int32), np.array([0, 1], np.int32)
    one = js.CSRMatrix(np.ones(1, np.float32), indices, indptr, (1, 50_000))
    expected = scipy.sparse.kron(one.to_scipy(), one.to_scipy(), format="csr")
    np.testing.assert_array_equal(js.kron(one, one).indices, expected.indices)
    # Two blocks of 2^30 + 1 columns: their last entries land past int32 side by side.
    half = 2**30
    wide = js.CSRMatrix(np.ones(1, np.float32), np.array([half], np.int32), indptr, (1, half + 1))
    with jax.enable_x64(False):
        for build in (
            lambda: js.kron(one, one),
            lambda: js.hstack([wide, wide]),
            lambda: js.block_diag([wide, wide]),
        ):
            with pytest.raises(ValueError, match="needs 64-bit indices"):
                build()


@pytest.mark.parametrize("dtype", [None, jnp.bfloat16, jnp.complex64])
def test_random_matches_scipy_counts(dtype):
    m, n, density = 30, 20, 0.15
    key = jax.random.key(0)
    matrix = js.random(m, n, density, dtype=dtype, key=key)
    expected = scipy.sparse.random(m, n, density, rng=0)
    assert isinstance(matrix, js.CSRMatrix)
    assert matrix.shape == (m, n) and matrix.dtype == np.dtype(dtype or np.float64)
    assert matrix.nnz == expected.nnz == round(density * m * n)
    assert matrix.to_scipy().has_canonical_format  # distinct positions, sorted columns
    values = np.asarray(matrix.data.astype(jnp.complex128))
    assert np.all((0 <= values.real) & (values.real < 1) & (0 <= values.imag) & (values.imag < 1))
    assert np.any(values.imag) == (dtype == jnp.complex64)
    dia = js.random(m, n, density, format="dia", dtype=dtype, key=key)
    assert isinstance(dia, js.DIAMatrix) and dia.dtype == matrix.dtype
    np.testing.assert_array_equal(dia.todense(), matrix.todense())  # same key, same matrix


def test_random_csr_under_jit():
    draw = jax.jit(lambda key: js.random(40, 30, 0.1, key=key))
    matrix = draw(jax.random.key(1))
    other = draw(jax.random.key(2))
    assert matrix.nnz == other.nnz == 120
    assert not np.array_equal(matrix.todense(), other.todense())
    host = matrix.to_scipy()
    assert host.has_canonical_format  # columns sorted, no repeats
    matrix.check()
    with pytest.raises(TypeError, match='`format="csr"` under `jit`'):
        jax.jit(lambda key: js.random(4, 4, 0.5, format="dia", key=key))(jax.random.key(0))


def test_random_large_and_sparse():
    matrix = js.random(10**5, 10**5, 1e-6, key=jax.random.key(3))
    host = matrix.to_scipy()
    assert matrix.nnz == 10**4 and host.has_canonical_format


def test_redrawing_repeats_is_uniform_and_distinct():
    total, count, draws = 12, 5, 3000
    keys = jax.random.split(jax.random.key(4), draws)
    samples = np.asarray(
        jax.vmap(lambda key: _redrawing_repeats(key, total, count, np.int32))(keys)
    )
    assert np.all(np.diff(samples, axis=1) > 0) and samples.min() >= 0 and samples.max() < total
    frequency = np.bincount(samples.ravel(), minlength=total) / draws
    np.testing.assert_allclose(frequency, count / total, atol=0.05)  # ~6 standard deviations


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(density=1.5), ValueError, r"`density` must lie in \[0, 1\]"),
        (dict(density="dense"), TypeError, "`density` must be a Python number"),
        (dict(format="coo"), ValueError, '`format` must be "csr" or "dia"'),
        (dict(dtype=np.int32), TypeError, "floating or complex"),
    ],
)
def test_random_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        js.random(4, 4, **{"key": jax.random.key(0), **kwargs})


@pytest.mark.parametrize("shape", [(3, 3), (2, 3), (3, 2)])
def test_kron_of_boolean_dia_matches_numpy(shape):
    """Square factors take the broadcast product; others place blocks one column of the
    first factor at a time, which booleans (no add) once failed."""
    values = np.array([[1.0, -2.0, 0.0], [0.0, 3.0, 4.0], [5.0, 0.0, -1.0]], np.float32)
    values = values[: shape[0], : shape[1]]
    booleans = js.DIAMatrix.fromdense(jnp.asarray(values)) > 0
    result = js.kron(booleans, booleans)
    assert result.dtype == np.bool_
    np.testing.assert_array_equal(result.todense(), np.kron(values > 0, values > 0))


def test_format_and_dtype_arguments_convert_as_scipys():
    """scipy's `format=` on every constructor and `dtype=` on the stacking ones, positional
    where scipy's are (`diags(d, offsets, shape, format, dtype)`)."""
    rng = np.random.default_rng(21)
    csr, csr_twin = random_csr(rng, (4, 3), density=0.5, dtype=jnp.float32)
    dia, dia_twin = random_dia(rng, (4, 3), (-1, 0, 2), jnp.float32, junk_in_ignored_slots=False)
    sp = scipy.sparse
    cases = [
        (
            js.diags([1.0, 2.0], [0, 1], (3, 3), "csr", jnp.float32),
            sp.diags([1.0, 2.0], [0, 1], (3, 3)),
        ),
        (
            js.diags_array([1.0], offsets=[1], shape=(3, 4), format="csr", dtype=jnp.float32),
            sp.eye(3, 4, 1),
        ),
        (js.eye(3, 4, -1, jnp.float32, "csr"), sp.eye(3, 4, -1)),
        (js.eye_array(3, k=1, dtype=jnp.float32, format="csr"), sp.eye(3, 3, 1)),
        (js.identity(3, jnp.float32, "csr"), sp.identity(3)),
        (js.kron(dia, dia, "csr"), sp.kron(dia_twin, dia_twin)),
        (js.kron(csr, dia, format="dia"), sp.kron(csr_twin, dia_twin)),
        (js.block_diag([dia, dia], "csr"), sp.block_diag([dia_twin, dia_twin])),
        (js.vstack([csr, dia], "dia"), sp.vstack([csr_twin, dia_twin])),
        (js.hstack([csr.T, dia.T], format="dia"), sp.hstack([csr_twin.T, dia_twin.T])),
        (js.bmat([[csr, None], [None, dia]], "dia"), sp.bmat([[csr_twin, None], [None, dia_twin]])),
        (js.tril(dia, 0, "csr"), sp.tril(dia_twin)),
        (js.triu(csr, format="dia"), sp.triu(csr_twin)),
    ]
    for got, expected in cases:
        kind = js.CSRMatrix if got.format == "csr" else js.DIAMatrix
        assert_matches_scipy(got, expected, kind, jnp.float32)
    for stacked in (
        js.vstack([csr, dia], dtype=jnp.complex64),
        js.hstack([csr, dia.T.T], None, jnp.complex64),
        js.bmat([[csr], [dia]], dtype=jnp.complex64),
        js.block_diag([csr, dia], dtype=jnp.complex64),
    ):
        assert stacked.dtype == jnp.complex64
    assert [m.format for m in (cases[2][0], cases[6][0], cases[8][0])] == ["csr", "dia", "dia"]
    assert isinstance(jax.jit(lambda: js.eye(4, format="csr"))(), js.CSRMatrix)
    with pytest.raises(ValueError, match="`format` must be 'dia' or 'csr', got 'coo'"):
        js.eye(3, format="coo")
    with pytest.raises(ValueError, match="`format` must be 'dia' or 'csr', got 'csc'"):
        js.vstack([csr], format="csc")
