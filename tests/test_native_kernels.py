"""The native CPU kernels (`kernels/native_*.py`, C++ in `kernels/native/`): against the
XLA reference and scipy over every value dtype, index dtype and registry matrix (empty,
non-square, one row, one column, unsorted and repeated columns, power-law rows); each
invalid CSR structure fails with its message under `jit`; runs are bitwise repeatable;
pieces of work that cut a long row add up; the `"xla"` backend holds no custom call; the
build for this CPU is the one loaded, and the baseline build computes the same."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import (
    CSR_MATRICES,
    DIA_MATRICES,
    as_float64,
    random_values,
    slow_unless,
    tolerance,
)

import jaxsparse as js
from jaxsparse.kernels import _native_library, native_csr, native_dia, xla_csr, xla_dia

# The XLA reference kernels, each compiled once per shape: called eagerly, their
# operations would compile one by one.
csr_matmul_xla = jax.jit(xla_csr.csr_matmul_xla, static_argnames="shape")
csr_matmul_t_xla = jax.jit(xla_csr.csr_matmul_t_xla, static_argnames="shape")
csr_sddmm_xla = jax.jit(xla_csr.csr_sddmm_xla, static_argnames="shape")
dia_matmul_xla = jax.jit(xla_dia.dia_matmul_xla, static_argnames=("offsets", "shape"))
dia_matmul_t_xla = jax.jit(xla_dia.dia_matmul_t_xla, static_argnames=("offsets", "shape"))
dia_sddmm_xla = jax.jit(xla_dia.dia_sddmm_xla, static_argnames=("offsets", "shape"))

pytestmark = [
    pytest.mark.on_cpu,
    pytest.mark.skipif(
        not _native_library.AVAILABLE,
        reason=f"native kernels not built: {_native_library.UNAVAILABLE_REASON}",
    ),
]
# Every value dtype with both index dtypes and both column paths (k = 1 is a kernel path
# of its own) across the combinations.
COMBINATIONS = [
    (jnp.float32, np.int32, 1),
    (jnp.float64, np.int64, 3),
    (jnp.complex64, np.int64, 1),
    (jnp.complex128, np.int32, 3),
    (jnp.float32, np.int64, 0),
]
COMBINATION_IDS = [f"{np.dtype(d).name}-{np.dtype(i).name}-k{k}" for d, i, k in COMBINATIONS]


def _close(got, want, dtype, k):
    """`got` against a float64 oracle `want`, in `got`'s dtype's tolerance."""
    assert got.dtype == jnp.dtype(dtype)
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(
        as_float64(got), want, atol=10 * tolerance(dtype) * scale * max(k, 1)
    )


# Every matrix with the first combination, and every combination on the matrices with the
# most kinds of rows, in the fast suite; the rest of each cross product is `slow`.
REPRESENTATIVE_CASES = ("csr-power-law", "csr-repeated-columns", "dia-tall-beyond-matrix")


def kernel_sweep(matrices, combinations):
    return [
        pytest.param(
            case,
            *combination,
            id=f"{case.name}-{combination_id}",
            marks=slow_unless(number == 0 or case.name in REPRESENTATIVE_CASES),
        )
        for case in matrices
        for number, (combination, combination_id) in enumerate(
            zip(combinations, COMBINATION_IDS, strict=True)
        )
    ]


@pytest.mark.parametrize(
    ("case", "dtype", "index_dtype", "k"), kernel_sweep(CSR_MATRICES, COMBINATIONS)
)
def test_csr_kernels_match_scipy(case, dtype, index_dtype, k):
    rng = np.random.default_rng(0)
    matrix, twin = case.make(rng, dtype, index_dtype)
    m, n = matrix.shape
    x, g = random_values(rng, (n, k), dtype), random_values(rng, (m, k), dtype)
    arrays = (matrix.indices, matrix.indptr)
    static = dict(shape=matrix.shape)
    x64, g64 = as_float64(x), as_float64(g)
    _close(native_csr.csr_matmul_native(matrix.data, x, *arrays, **static), twin @ x64, dtype, k)
    _close(
        native_csr.csr_matmul_t_native(matrix.data, g, *arrays, **static), twin.T @ g64, dtype, k
    )
    rows = np.repeat(np.arange(m), np.diff(twin.indptr))
    expected = np.sum(g64[rows] * x64[twin.indices], axis=1)
    _close(native_csr.csr_sddmm_native(g, x, *arrays, **static), expected, dtype, k)
    d_data, d_x = native_csr.csr_matmul_pullback_native(g, matrix.data, x, *arrays, **static)
    _close(d_data, expected, dtype, k)
    _close(d_x, twin.T @ g64, dtype, k)


@pytest.mark.parametrize(
    ("case", "dtype", "k"), kernel_sweep(DIA_MATRICES, [c[::2] for c in COMBINATIONS])
)
def test_dia_kernels_match_scipy(case, dtype, k):
    rng = np.random.default_rng(1)
    matrix, twin = case.make(rng, dtype)
    m, n = matrix.shape
    x, g = random_values(rng, (n, k), dtype), random_values(rng, (m, k), dtype)
    static = dict(offsets=matrix.offsets, shape=matrix.shape)
    x64, g64 = as_float64(x), as_float64(g)
    _close(native_dia.dia_matmul_native(matrix.data, x, **static), twin @ x64, dtype, k)
    _close(native_dia.dia_matmul_t_native(matrix.data, g, **static), twin.T @ g64, dtype, k)
    dense = twin.toarray()
    expected = np.zeros(matrix.data.shape, dense.dtype)
    for d, off in enumerate(matrix.offsets):
        for j in range(n):
            if 0 <= j - off < m:
                expected[d, j] = g64[j - off] @ x64[j]
    _close(native_dia.dia_sddmm_native(g, x, **static), expected, dtype, k)


# Column counts that reach every path of the kernels: DIA's groups of four diagonals at
# k = 1, blocks of 64 bytes of columns with each narrower remainder, DIA's row-by-row sums
# over groups of diagonals in blocks of rows (k <= 32, or more columns on more than 32
# diagonals) and its whole rows summed over every diagonal (k > 32 on at most 32).
_FEW_DIAGONALS = (-7, -3, -2, -1, 0, 1, 2, 5, 9)
_MANY_DIAGONALS = (*range(-20, -8, 2), *_FEW_DIAGONALS, 11, 15, 20)
_MORE_THAN_32_DIAGONALS = tuple(range(-20, 16))


@pytest.mark.parametrize(
    "offsets",
    [_FEW_DIAGONALS, _MANY_DIAGONALS, _MORE_THAN_32_DIAGONALS],
    ids=["9-diagonals", "18-diagonals", "36-diagonals"],
)
@pytest.mark.parametrize("k", [1, 2, 5, 8, 17, 32, 33, 70])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.complex128], ids=["float32", "complex128"])
def test_every_column_path(dtype, k, offsets):
    rng = np.random.default_rng(k)
    m, n = 40, 33
    diagonals = random_values(rng, (len(offsets), n), dtype)
    twin = scipy.sparse.dia_array((as_float64(diagonals), offsets), shape=(m, n))
    x, g = random_values(rng, (n, k), dtype), random_values(rng, (m, k), dtype)
    x64, g64 = as_float64(x), as_float64(g)
    static = dict(offsets=offsets, shape=(m, n))
    _close(native_dia.dia_matmul_native(diagonals, x, **static), twin @ x64, dtype, k)
    _close(native_dia.dia_matmul_t_native(diagonals, g, **static), twin.T @ g64, dtype, k)
    csr = scipy.sparse.random_array((m, n), density=0.3, format="csr", rng=rng)
    data = random_values(rng, (csr.nnz,), dtype)
    arrays = (jnp.asarray(csr.indices, jnp.int32), jnp.asarray(csr.indptr, jnp.int32))
    csr_twin = scipy.sparse.csr_array((as_float64(data), csr.indices, csr.indptr), shape=(m, n))
    product = native_csr.csr_matmul_native(data, x, *arrays, shape=(m, n))
    _close(product, csr_twin @ x64, dtype, k)
    _assert_pullback_is_its_two_kernels(g, data, x, *arrays, shape=(m, n))


def _assert_pullback_is_its_two_kernels(g, data, x, indices, indptr, *, shape):
    """The CSR gradient step's one call gives each gradient the bits of its own kernel
    for real values, and the same to within an ulp or so for complex ones (where GCC
    vectorizes a complex product it may fuse its multiply and subtract, and whether it
    does depends on the loop around it); returns that call's gradients."""
    arrays = (indices, indptr)
    fused = native_csr.csr_matmul_pullback_native(g, data, x, *arrays, shape=shape)
    separate = (
        native_csr.csr_sddmm_native(g, x, *arrays, shape=shape),
        native_csr.csr_matmul_t_native(data, g, *arrays, shape=shape),
    )
    for got, want in zip(fused, separate, strict=True):
        got, want = np.asarray(got), np.asarray(want)
        if np.iscomplexobj(got):
            scale = np.abs(want).max(initial=1.0)
            tolerance = 4 * np.finfo(got.dtype).eps * scale
            np.testing.assert_allclose(got, want, rtol=0, atol=tolerance)
        else:
            np.testing.assert_array_equal(got, want)
    return fused


@pytest.mark.parametrize("k", [1, 3, 16])
def test_gradient_step_in_one_pass_on_a_stencil(k):
    """A 5-point stencil's columns sit near those of the row before, so the CSR gradient
    step takes its one-pass path, cut into pieces by entries: against scipy, and bit for
    bit the two kernels on their own."""
    rng = np.random.default_rng(k)
    grid = scipy.sparse.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(150, 150))
    twin = scipy.sparse.csr_array(scipy.sparse.kronsum(grid, grid, format="csr"))
    twin.data = rng.standard_normal(twin.nnz)
    matrix = js.CSRMatrix.from_scipy(twin).astype(jnp.float32)
    m, n = matrix.shape
    x = jnp.asarray(rng.standard_normal((n, k)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
    arrays, static = (matrix.indices, matrix.indptr), dict(shape=matrix.shape)
    d_data, d_x = native_csr.csr_matmul_pullback_native(g, matrix.data, x, *arrays, **static)
    x64, g64 = np.asarray(x, np.float64), np.asarray(g, np.float64)
    rows = np.repeat(np.arange(m), np.diff(twin.indptr))
    expected = np.sum(g64[rows] * x64[twin.indices], axis=1)
    np.testing.assert_allclose(d_data, expected, rtol=1e-4, atol=1e-4 * k)
    np.testing.assert_allclose(d_x, twin.T @ g64, rtol=1e-4, atol=1e-4 * k)
    _assert_pullback_is_its_two_kernels(g, matrix.data, x, *arrays, **static)


def _banded(m, n, columns_of_row):
    """A float32 CSR matrix whose row i holds the columns `columns_of_row(i)` (an array
    of near columns, so the kernels treat it as banded), with random values."""
    rows = [np.asarray(columns_of_row(i)) for i in range(m)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int32)
    indices = np.concatenate(rows).astype(np.int32)
    values = np.random.default_rng(m).standard_normal(len(indices)).astype(np.float32)
    return scipy.sparse.csr_array((values, indices, indptr), shape=(m, n))


_ROWS = 30000
_GAP = 5000
# Structures whose pieces of rows (cut by entries) reach columns on both sides of the cut
# between the columns they own, leave columns no entry reaches, run backwards, or all end
# at one shared column.
_SPAN_LAYOUTS = {
    "gap": lambda: _banded(
        _ROWS,
        _ROWS + _GAP + 4,
        lambda i: np.arange(i, i + 3) + (_GAP if i >= _ROWS // 2 else 0),
    ),
    "backwards": lambda: _banded(
        _ROWS, _ROWS + 2, lambda i: np.arange(_ROWS - 1 - i, _ROWS + 2 - i)
    ),
    "shared-last-column": lambda: _banded(
        _ROWS, _ROWS + 3, lambda i: np.array([i, i + 1, i + 2, _ROWS + 2])
    ),
}


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("layout", list(_SPAN_LAYOUTS))
def test_transposed_products_over_every_span_layout(layout, k):
    """The transposed product and the gradient step on banded structures large enough to
    be cut into pieces, whose pieces write the columns they own and defer the others:
    against scipy (every column, reached or not), and the gradient step bit for bit its
    two kernels."""
    twin = _SPAN_LAYOUTS[layout]()
    m, n = twin.shape
    rng = np.random.default_rng(k)
    x = jnp.asarray(rng.standard_normal((n, k)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
    arrays = (jnp.asarray(twin.indices), jnp.asarray(twin.indptr))
    data = jnp.asarray(twin.data)
    x64, g64 = np.asarray(x, np.float64), np.asarray(g, np.float64)
    # The shared column sums 30000 float32 products.
    close = dict(rtol=2e-4, atol=1e-4)
    transposed = native_csr.csr_matmul_t_native(data, g, *arrays, shape=(m, n))
    np.testing.assert_allclose(transposed, twin.T @ g64, **close)
    d_data, d_x = _assert_pullback_is_its_two_kernels(g, data, x, *arrays, shape=(m, n))
    rows = np.repeat(np.arange(m), np.diff(twin.indptr))
    np.testing.assert_allclose(d_data, np.sum(g64[rows] * x64[twin.indices], axis=1), **close)
    np.testing.assert_allclose(d_x, twin.T @ g64, **close)


def _rows_of_lengths(lengths):
    """A float32 banded CSR matrix whose row i holds `lengths[i]` columns from i on."""
    m = len(lengths)
    return _banded(m, m + int(max(lengths)), lambda i: np.arange(i, i + lengths[i]))


# Rows of one length (the kernels' loops for rows of 1 to 6 entries, and longer rows),
# with and without a shorter row every 97 rows, in 30001 rows: two pieces of entries,
# whose cut falls inside a row.
_LENGTH_LAYOUTS = {
    f"{length}{'-broken' if broken else ''}": (length, broken)
    for length in (1, 2, 3, 4, 5, 6, 7, 9)
    for broken in (False, True)
}


@pytest.mark.parametrize("layout", list(_LENGTH_LAYOUTS))
def test_rows_of_one_length(layout):
    """The product and the gradient step at k = 1 on banded rows of one length, where the
    kernels sum rows of up to 6 entries without an inner loop, and on rows whose lengths
    change now and then: against scipy, and the gradient step bit for bit its two kernels."""
    length, broken = _LENGTH_LAYOUTS[layout]
    lengths = np.full(30001, length)
    if broken:
        lengths[::97] = max(length - 1, 0)
    twin = _rows_of_lengths(lengths)
    m, n = twin.shape
    rng = np.random.default_rng(length)
    x = jnp.asarray(rng.standard_normal((n, 1)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((m, 1)), jnp.float32)
    arrays = (jnp.asarray(twin.indices), jnp.asarray(twin.indptr))
    data = jnp.asarray(twin.data)
    x64, g64 = np.asarray(x, np.float64), np.asarray(g, np.float64)
    close = dict(rtol=1e-5, atol=1e-5)
    product = native_csr.csr_matmul_native(data, x, *arrays, shape=(m, n))
    np.testing.assert_allclose(product, twin @ x64, **close)
    d_data, d_x = _assert_pullback_is_its_two_kernels(g, data, x, *arrays, shape=(m, n))
    rows = np.repeat(np.arange(m), np.diff(twin.indptr))
    np.testing.assert_allclose(d_data, g64[rows, 0] * x64[twin.indices, 0], **close)
    np.testing.assert_allclose(d_x, twin.T @ g64, **close)


@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (0, 0)], ids=str)
def test_empty_shapes(shape):
    m, n = shape
    x, g = jnp.ones((n, 2), jnp.float32), jnp.ones((m, 2), jnp.float32)
    no_entries = (jnp.zeros(0, jnp.int32), jnp.zeros(m + 1, jnp.int32))
    data = jnp.zeros(0, jnp.float32)
    assert native_csr.csr_matmul_native(data, x, *no_entries, shape=shape).shape == (m, 2)
    transposed = native_csr.csr_matmul_t_native(data, g, *no_entries, shape=shape)
    np.testing.assert_array_equal(transposed, np.zeros((n, 2)))
    assert native_csr.csr_sddmm_native(g, x, *no_entries, shape=shape).shape == (0,)
    static = dict(offsets=(-1, 0, 1), shape=shape)
    diagonals = jnp.ones((3, n), jnp.float32)
    assert native_dia.dia_matmul_native(diagonals, x, **static).shape == (m, 2)
    np.testing.assert_array_equal(native_dia.dia_matmul_t_native(diagonals, g, **static), 0)
    np.testing.assert_array_equal(native_dia.dia_sddmm_native(g, x, **static), 0)


@pytest.mark.parametrize("batch", [0, 2])
@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (3, 3)], ids=str)
def test_empty_batches(shape, batch):
    """A batch of no members, and batches of empty matrices or of no entries (zero DIA
    values): the right shapes and values."""
    m, n = shape
    x, g = jnp.ones((batch, n, 2), jnp.float32), jnp.ones((batch, m, 2), jnp.float32)
    no_entries = (jnp.zeros(0, jnp.int32), jnp.zeros(m + 1, jnp.int32))
    data = jnp.zeros((batch, 0), jnp.float32)
    results = [
        (native_csr.csr_matmul_native(data, x, *no_entries, shape=shape), (batch, m, 2)),
        (native_csr.csr_matmul_t_native(data, g, *no_entries, shape=shape), (batch, n, 2)),
        (native_csr.csr_sddmm_native(g, x, *no_entries, shape=shape), (batch, 0)),
    ]
    static = dict(offsets=(-1, 0, 1), shape=shape)
    diagonals = jnp.zeros((batch, 3, n), jnp.float32)
    results += [
        (native_dia.dia_matmul_native(diagonals, x[0] if batch else x, **static), (batch, m, 2)),
        (native_dia.dia_matmul_t_native(diagonals, g, **static), (batch, n, 2)),
    ]
    for result, expected_shape in results:
        assert result.shape == expected_shape
        np.testing.assert_array_equal(result, 0)
    sampled = native_dia.dia_sddmm_native(g, x, **static)
    assert sampled.shape == (batch, 3, n)
    expected = jax.vmap(lambda g, x: dia_sddmm_xla(g, x, **static))(g, x)
    np.testing.assert_array_equal(sampled, expected)


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_native_equals_the_xla_reference(fmt):
    """The same products as the XLA path, for one matrix of each format."""
    rng = np.random.default_rng(2)
    case = DIA_MATRICES[3] if fmt == "dia" else CSR_MATRICES[3]
    matrix, _ = case.make(rng, jnp.float64)
    m, n = matrix.shape
    x, g = jnp.asarray(rng.standard_normal((n, 4))), jnp.asarray(rng.standard_normal((m, 4)))
    if fmt == "dia":
        static = dict(offsets=matrix.offsets, shape=matrix.shape)
        pairs = [
            (native_dia.dia_matmul_native, dia_matmul_xla, (matrix.data, x)),
            (native_dia.dia_matmul_t_native, dia_matmul_t_xla, (matrix.data, g)),
            (native_dia.dia_sddmm_native, dia_sddmm_xla, (g, x)),
        ]
    else:
        static = dict(shape=matrix.shape)
        arrays = (matrix.indices, matrix.indptr)
        pairs = [
            (native_csr.csr_matmul_native, csr_matmul_xla, (matrix.data, x, *arrays)),
            (native_csr.csr_matmul_t_native, csr_matmul_t_xla, (matrix.data, g, *arrays)),
            (native_csr.csr_sddmm_native, csr_sddmm_xla, (g, x, *arrays)),
        ]
    for native, reference, args in pairs:
        np.testing.assert_allclose(native(*args, **static), reference(*args, **static), atol=1e-12)


# (what is wrong, indices, indptr, message): a 3 x 3 matrix with 3 stored entries.
GOOD_INDICES, GOOD_INDPTR = [0, 2, 1], [0, 2, 2, 3]
BAD_STRUCTURES = [
    ("indptr-start", GOOD_INDICES, [1, 2, 2, 3], "should start with 0"),
    ("indptr-decreasing", GOOD_INDICES, [0, 2, 1, 3], "non-decreasing"),
    ("indptr-beyond-entries", GOOD_INDICES, [0, 2, 9, 3], "non-decreasing"),
    ("indptr-end", GOOD_INDICES, [0, 2, 2, 2], "should be nnz = 3"),
    ("column-too-large", [0, 99, 1], GOOD_INDPTR, r"column index out of range.*\[0, 3\)"),
    ("column-negative", [0, -5, 1], GOOD_INDPTR, "column index out of range"),
]


@pytest.mark.parametrize("member", ["matmul", "matmul_t", "sddmm", "pullback"])
@pytest.mark.parametrize(
    ("indices", "indptr", "message"),
    [case[1:] for case in BAD_STRUCTURES],
    ids=[case[0] for case in BAD_STRUCTURES],
)
def test_invalid_csr_structure_fails_under_jit_with_its_message(indices, indptr, message, member):
    """A structure built under `jit` (so never checked by the constructor) reaches the
    kernel, which fails the call rather than reading out of bounds or answering wrongly."""

    @jax.jit
    def run(data, x, indices, indptr):
        matrix = js.CSRMatrix(data, indices, indptr, (3, 3))
        if member == "matmul":
            return matrix @ x
        if member == "matmul_t":
            return x.T @ matrix
        if member == "sddmm":
            return jax.grad(lambda d: jnp.sum(matrix.with_data(d) @ x))(data)
        # The gradient step in the values and the operand: one fused call.
        d_data, d_x = jax.grad(lambda d, x: jnp.sum(matrix.with_data(d) @ x), argnums=(0, 1))(
            data, x
        )
        return jnp.concatenate([d_data, d_x.ravel()])

    arrays = (jnp.ones(3, jnp.float32), jnp.ones((3, 2), jnp.float32))
    good = run(*arrays, jnp.array(GOOD_INDICES, jnp.int32), jnp.array(GOOD_INDPTR, jnp.int32))
    assert bool(jnp.all(jnp.isfinite(good)))
    with pytest.raises(Exception, match=message):
        run(
            *arrays, jnp.array(indices, jnp.int32), jnp.array(indptr, jnp.int32)
        ).block_until_ready()


# Faults far from both ends of a structure: (where, as a fraction of the rows or entries,
# what is written there, the message).
_DEEP_FAULTS = {
    "indptr-decrease": (0.1, "indptr - 1", "non-decreasing"),
    "indptr-negative": (0.5, -(10**6), "non-decreasing"),
    "indptr-beyond-entries": (0.97, 10**9, "non-decreasing"),
    "column-negative": (0.3, -1, "column index out of range"),
    "column-too-large": (0.75, 10**6, "column index out of range"),
}


def _structure_with_a_deep_fault(layout, fault, m=200_000, per_row=3):
    """Indices and an index pointer of `m` rows of `per_row` entries (banded or scattered
    columns), broken at one row or entry far from both ends."""
    rng = np.random.default_rng(5)
    rows = np.repeat(np.arange(m), per_row)
    if layout == "banded":
        indices = np.clip(rows + np.tile(np.arange(per_row) - 1, m), 0, m - 1)
    else:
        indices = rng.integers(0, m, size=m * per_row)
    indptr = np.arange(0, m * per_row + 1, per_row)
    where, value, _ = _DEEP_FAULTS[fault]
    if fault.startswith("indptr"):
        row = int(m * where)
        indptr[row] = indptr[row - 1] - 1 if value == "indptr - 1" else value
    else:
        indices[int(m * per_row * where)] = value
    return jnp.asarray(indices, jnp.int32), jnp.asarray(indptr, jnp.int32)


# One index pointer fault and one column fault reach every member, layout and column path
# in the fast suite; the other faults are `slow`.
_FAST_FAULTS = ("indptr-decrease", "column-too-large")


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("member", ["matmul", "batched-matmul", "matmul_t", "sddmm", "pullback"])
@pytest.mark.parametrize(
    "fault",
    [pytest.param(f, marks=slow_unless(f in _FAST_FAULTS)) for f in _DEEP_FAULTS],
)
@pytest.mark.parametrize("layout", ["banded", "scattered"])
def test_a_fault_far_from_the_ends_fails(layout, fault, member, k):
    """The product checks the index pointer and the columns chunk by chunk as its pieces
    reach them, and the transposed products check a banded structure's columns against
    those each piece owns: a fault deep inside a structure cut into pieces over threads
    fails the call with its message, whichever piece meets it, and nothing is read out of
    bounds on the way (k = 2 on scattered columns also prefetches ahead of the checks)."""
    indices, indptr = _structure_with_a_deep_fault(layout, fault)
    m = indptr.shape[0] - 1
    data, x = jnp.ones(indices.shape[0], jnp.float32), jnp.ones((m, k), jnp.float32)

    @jax.jit  # the structure traced, so only the kernels can check it
    def run(data, x, indices, indptr):
        def product(data, x):
            return js.CSRMatrix(data, indices, indptr, (m, m)) @ x

        if member == "matmul":
            return product(data, x)
        if member == "batched-matmul":
            return jax.vmap(product, in_axes=(0, None))(jnp.stack([data, 2 * data]), x)
        if member == "matmul_t":
            return x.T @ js.CSRMatrix(data, indices, indptr, (m, m))
        if member == "sddmm":
            return jax.grad(lambda d: jnp.sum(product(d, x)))(data)
        return jnp.concatenate(
            [g.ravel() for g in jax.grad(lambda d, x: jnp.sum(product(d, x)), (0, 1))(data, x)]
        )

    with pytest.raises(Exception, match=_DEEP_FAULTS[fault][2]):
        jax.block_until_ready(run(data, x, indices, indptr))


@pytest.mark.parametrize("member", ["matmul", "sddmm"])
def test_entries_without_columns_fail(member):
    """A structure with an entry but no column at all (shape (3, 0)) has nothing to read:
    the call fails rather than read outside the operand. (`A^T @ g` has an empty result
    there, and XLA makes no call for it.)"""
    indices, indptr = jnp.array([0], jnp.int32), jnp.array([0, 1, 1, 1], jnp.int32)
    data, x, g = jnp.ones(1), jnp.ones((0, 2)), jnp.ones((3, 2))
    calls = {
        "matmul": lambda: native_csr.csr_matmul_native(data, x, indices, indptr, shape=(3, 0)),
        "sddmm": lambda: native_csr.csr_sddmm_native(g, x, indices, indptr, shape=(3, 0)),
    }
    with pytest.raises(Exception, match=r"column index out of range.*\[0, 0\)"):
        jax.block_until_ready(calls[member]())


def _power_law_with_one_long_row(rng, m, n, long_row_length):
    lengths = np.minimum(np.floor(rng.pareto(1.5, size=m)).astype(np.int64), 50)
    lengths[m // 3] = long_row_length
    columns = [rng.integers(0, n, size=length) for length in lengths]  # repeats allowed
    indices = np.concatenate(columns).astype(np.int32)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.standard_normal(len(indices)).astype(np.float32)
    return scipy.sparse.csr_array((values, indices, indptr), shape=(m, n))


def test_long_rows_split_over_threads_add_up_and_repeat_bit_for_bit():
    """Large enough that the work is cut into pieces by entries: one row of 200000 entries
    is shared by every piece, and two runs give identical bits."""
    rng = np.random.default_rng(3)
    twin = _power_law_with_one_long_row(rng, 20000, 5000, 200000)
    matrix = js.CSRMatrix.from_scipy(twin)
    x = jnp.asarray(rng.standard_normal((5000, 2)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((20000, 2)), jnp.float32)

    @jax.jit
    def step(data, x, g):
        out, pullback = jax.vjp(lambda d, x: matrix.with_data(d) @ x, data, x)
        return (out, *pullback(g))

    first = step(matrix.data, x, g)
    second = step(matrix.data, x, g)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The gradient step's one call (a `pullback`) against the two kernels on their own.
    pullback_bits = _assert_pullback_is_its_two_kernels(
        g, matrix.data, x, matrix.indices, matrix.indptr, shape=matrix.shape
    )
    for a, b in zip(first[1:], pullback_bits, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    x64, g64 = np.asarray(x, np.float64), np.asarray(g, np.float64)
    np.testing.assert_allclose(first[0], twin @ x64, rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(first[2], twin.T @ g64, rtol=1e-4, atol=1e-2)
    rows = np.repeat(np.arange(20000), np.diff(twin.indptr))
    expected = np.sum(g64[rows] * x64[twin.indices], axis=1)
    np.testing.assert_allclose(first[1], expected, rtol=1e-4, atol=1e-4)


def test_results_of_4_mib_and_more_are_right():
    """Every kernel asks for huge pages for a result of 4 MiB or more before writing it
    (`native/pages.h`): those results against scipy."""
    rng = np.random.default_rng(6)
    m = n = 1 << 16
    k = 20  # 5.2 MB operands and results
    twin = scipy.sparse.random_array((m, n), density=17 / n, format="csr", rng=rng)
    twin.data = rng.standard_normal(twin.nnz)  # 1.1 M entries: a 4.5 MB values' gradient
    matrix = js.CSRMatrix.from_scipy(twin).astype(jnp.float32)
    x = jnp.asarray(rng.standard_normal((n, k)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
    arrays, static = (matrix.indices, matrix.indptr), dict(shape=matrix.shape)
    x64, g64 = np.asarray(x, np.float64), np.asarray(g, np.float64)
    rows = np.repeat(np.arange(m), np.diff(twin.indptr))
    sampled = np.sum(g64[rows] * x64[twin.indices], axis=1)
    close = dict(rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(
        native_csr.csr_matmul_native(matrix.data, x, *arrays, **static), twin @ x64, **close
    )
    np.testing.assert_allclose(
        native_csr.csr_matmul_t_native(matrix.data, g, *arrays, **static), twin.T @ g64, **close
    )
    np.testing.assert_allclose(
        native_csr.csr_sddmm_native(g, x, *arrays, **static), sampled, **close
    )
    d_data, d_x = native_csr.csr_matmul_pullback_native(g, matrix.data, x, *arrays, **static)
    np.testing.assert_allclose(d_data, sampled, **close)
    np.testing.assert_allclose(d_x, twin.T @ g64, **close)

    offsets, rows_dia = (-1, 0, 1), 1 << 20  # 12 MB of diagonals and of their gradient
    diagonals = rng.standard_normal((3, rows_dia)).astype(np.float32)
    dia = scipy.sparse.dia_array((diagonals.astype(np.float64), offsets), shape=(rows_dia,) * 2)
    static = dict(offsets=offsets, shape=dia.shape)
    x = rng.standard_normal((rows_dia, 2)).astype(np.float32)  # 8 MB results
    np.testing.assert_allclose(
        native_dia.dia_matmul_native(diagonals, x, **static), dia @ x.astype(np.float64), **close
    )
    np.testing.assert_allclose(
        native_dia.dia_matmul_t_native(diagonals, x, **static),
        dia.T @ x.astype(np.float64),
        **close,
    )
    expected = np.zeros_like(diagonals, dtype=np.float64)
    for d, off in enumerate(offsets):
        j = np.arange(max(0, off), min(rows_dia, rows_dia + off))
        expected[d, j] = np.sum(x[j - off].astype(np.float64) * x[j], axis=1)
    np.testing.assert_allclose(native_dia.dia_sddmm_native(x, x, **static), expected, **close)


def _transparent_huge_pages_mode() -> str | None:
    """The bracketed mode of /sys/kernel/mm/transparent_hugepage/enabled, or None."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.index("[") + 1 : text.index("]")] if "[" in text else None


# Prints how many KiB of a fresh 64 MB product result (beyond glibc's largest mmap
# threshold, so a mapping of its own) are huge pages, looking at the mapping that holds
# the result's middle: the advice covers the whole pages inside the result, so its first
# page, shared with malloc's header, may stay apart.
HUGE_PAGES_CHECK = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np, scipy.sparse
    import jaxsparse as js
    from jaxsparse.kernels import native_csr

    m = n = 1 << 18
    twin = scipy.sparse.diags_array([1.0, 2.0, 1.0], offsets=[-1, 0, 1], shape=(m, n))
    matrix = js.CSRMatrix.from_scipy(twin.tocsr()).astype(jnp.float32)
    product = jax.jit(
        lambda a, x: native_csr.csr_matmul_native(a.data, x, a.indices, a.indptr, shape=a.shape)
    )
    out = product(matrix, jnp.ones((n, 64), jnp.float32)).block_until_ready()
    np.testing.assert_array_equal(np.asarray(out[1:-1]), 4.0)
    middle = out.unsafe_buffer_pointer() + out.nbytes // 2
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                start, end = (int(v, 16) for v in head.split("-"))
                inside = start <= middle < end
            elif inside and head == "AnonHugePages:":
                print("huge KiB", line.split()[1])
    """
)


def _huge_kib_of_a_fresh_result(advice: str | None) -> int:
    """HUGE_PAGES_CHECK's figure, in a fresh process with JAXSPARSE_MADVISE_HUGEPAGE set
    to `advice` (None: unset)."""
    environment = {k: v for k, v in os.environ.items() if k != "JAXSPARSE_MADVISE_HUGEPAGE"}
    if advice is not None:
        environment["JAXSPARSE_MADVISE_HUGEPAGE"] = advice
    return int(_run_in_a_fresh_process(HUGE_PAGES_CHECK, environment).split("huge KiB")[-1])


def _run_in_a_fresh_process(code: str, environment: dict) -> str:
    """The standard output of `code` run by this Python in a fresh process, which must
    succeed."""
    result = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.skipif(
    _transparent_huge_pages_mode() != "madvise",
    reason="needs Linux transparent huge pages in `madvise` mode (with `always` every "
    "large mapping gets them, advised or not)",
)
def test_a_large_fresh_result_is_faulted_in_as_huge_pages_unless_told_not_to():
    """The kernels advise huge pages for a fresh 64 MB result before the first write, as
    numpy does for its large arrays, unless JAXSPARSE_MADVISE_HUGEPAGE=0."""
    assert _huge_kib_of_a_fresh_result(None) >= 2048
    assert _huge_kib_of_a_fresh_result("0") == 0


def test_dia_with_many_diagonals_splits_rows_and_repeats_bit_for_bit():
    rng = np.random.default_rng(4)
    offsets = tuple(range(-60, 61, 4))
    shape = (30000, 29000)
    data = rng.standard_normal((len(offsets), shape[1])).astype(np.float32)
    twin = scipy.sparse.dia_array((data.astype(np.float64), np.asarray(offsets)), shape=shape)
    x = jnp.asarray(rng.standard_normal((shape[1], 1)), jnp.float32)
    product = jax.jit(lambda d, x: js.DIAMatrix(d, offsets, shape) @ x)
    first, second = product(data, x), product(data, x)
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))
    np.testing.assert_allclose(first, twin @ np.asarray(x, np.float64), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_xla_backend_lowers_without_any_custom_call(fmt):
    """`backend="xla"` is pure StableHLO for every product and gradient: it runs on any
    XLA runtime and exports with default checks. `"auto"` on a CPU calls the native
    kernels."""
    rng = np.random.default_rng(5)
    case = DIA_MATRICES[2] if fmt == "dia" else CSR_MATRICES[3]
    matrix, _ = case.make(rng, jnp.float32)
    m, n = matrix.shape

    def step(backend):
        def run(matrix, x, y):
            def loss(data, x, y):
                a = matrix.with_data(data)
                forward = js.matmul(a, x, backend=backend)
                left = js.matmul(y, a, backend=backend)
                return jnp.sum(forward**2) + jnp.sum(left**2)

            return loss(matrix.data, x, y), jax.grad(loss, argnums=(0, 1, 2))(matrix.data, x, y)

        return run

    args = (matrix, jnp.ones((n, 3), jnp.float32), jnp.ones((2, m), jnp.float32))
    xla_text = jax.jit(step("xla")).lower(*args).as_text()
    assert "stablehlo.custom_call" not in xla_text
    auto_text = jax.jit(step("auto")).lower(*args).as_text()
    assert "@jaxsparse_" in auto_text
    # The CSR gradient of `A @ x` in the values and `x` is one call.
    assert auto_text.count("@jaxsparse_csr_matmul_pullback") == (fmt == "csr")


def _batched_kernels(fmt, matrix):
    """The three native kernels of `fmt` with `matrix`'s structure bound."""
    if fmt == "dia":
        static = dict(offsets=matrix.offsets, shape=matrix.shape)
        kernels = (native_dia.dia_matmul_native, native_dia.dia_matmul_t_native)
        kernels += (native_dia.dia_sddmm_native,)
        return [lambda a, b, f=f: f(a, b, **static) for f in kernels]
    arrays, static = (matrix.indices, matrix.indptr), dict(shape=matrix.shape)
    kernels = (native_csr.csr_matmul_native, native_csr.csr_matmul_t_native)
    kernels += (native_csr.csr_sddmm_native,)
    return [lambda a, b, f=f: f(a, b, *arrays, **static) for f in kernels]


def _xla_sddmm(fmt, matrix):
    """The XLA reference's gradient in the values, `matrix`'s structure bound."""
    if fmt == "dia":
        return lambda g, x: dia_sddmm_xla(g, x, offsets=matrix.offsets, shape=matrix.shape)
    return lambda g, x: csr_sddmm_xla(g, x, matrix.indices, matrix.indptr, shape=matrix.shape)


@pytest.mark.parametrize("shared", [True, False], ids=["shared-operand", "batched-operand"])
@pytest.mark.parametrize(("dtype", "index_dtype", "k"), COMBINATIONS, ids=COMBINATION_IDS)
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_one_call_takes_a_batch_of_values(fmt, dtype, index_dtype, k, shared):
    """Values `(B, ...)` with a shared or batched operand in one kernel call: each member
    against scipy, on a matrix large enough (power-law rows, 4 members) that the entries
    are cut into pieces and walked in chunks shared by the members."""
    rng = np.random.default_rng(7)
    batch = 4
    if fmt == "dia":
        offsets, shape = (-700, -3, 0, 1, 40), (3000, 2900)
        data = random_values(rng, (len(offsets), shape[1]), dtype)
        matrix = js.DIAMatrix(data, offsets, shape)
    else:
        twin = _power_law_with_one_long_row(rng, 3000, 2900, 9000)
        matrix = js.CSRMatrix.from_scipy(twin).astype(dtype)
        matrix = js.CSRMatrix(
            matrix.data,
            matrix.indices.astype(index_dtype),
            matrix.indptr.astype(index_dtype),
            matrix.shape,
        )
    m, n = matrix.shape
    values = random_values(rng, (batch, *matrix.data.shape), dtype)
    xs = random_values(rng, (batch, n, k), dtype)
    gs = random_values(rng, (batch, m, k), dtype)
    # Shared: x and g of the products, and x of the sampled product (whose g is batched).
    x, g = (xs[0], gs[0]) if shared else (xs, gs)
    matmul, matmul_t, sddmm = _batched_kernels(fmt, matrix)
    y, yt, gradients = matmul(values, x), matmul_t(values, g), sddmm(gs, x)
    assert y.shape == (batch, m, k) and yt.shape == (batch, n, k)
    assert gradients.shape == (batch, *matrix.data.shape)
    for b in range(batch):
        member = matrix.with_data(jnp.asarray(as_float64(values[b]))).to_scipy()
        xb, gb = (as_float64(a if shared else a[b]) for a in (x, g))
        _close(y[b], member @ xb, dtype, k)
        _close(yt[b], member.T @ gb, dtype, k)
        expected = _xla_sddmm(fmt, matrix)(jnp.asarray(as_float64(gs[b])), jnp.asarray(xb))
        _close(gradients[b], np.asarray(expected), dtype, k)
    # The batch is bitwise repeatable too.
    np.testing.assert_array_equal(np.asarray(matmul(values, x)), np.asarray(y))
    np.testing.assert_array_equal(np.asarray(matmul_t(values, g)), np.asarray(yt))


@pytest.mark.parametrize("shared", [True, False], ids=["shared-operand", "batched-operand"])
def test_wide_dia_products_of_a_batch(shared):
    """DIA products with more than 32 columns walk each thread's rows of a member whole;
    with 3 members of 500 rows the two threads' pieces meet inside the second member.
    Each member against scipy, and bitwise repeatable."""
    rng = np.random.default_rng(3)
    batch, k, offsets, shape = 3, 40, (-7, -1, 0, 2, 30), (500, 480)
    m, n = shape
    values = random_values(rng, (batch, len(offsets), n), jnp.float32)
    xs = random_values(rng, (batch, n, k), jnp.float32)
    gs = random_values(rng, (batch, m, k), jnp.float32)
    x, g = (xs[0], gs[0]) if shared else (xs, gs)
    static = dict(offsets=offsets, shape=shape)
    y = native_dia.dia_matmul_native(values, x, **static)
    yt = native_dia.dia_matmul_t_native(values, g, **static)
    assert y.shape == (batch, m, k) and yt.shape == (batch, n, k)
    for b in range(batch):
        member = scipy.sparse.dia_array((as_float64(values[b]), offsets), shape=shape)
        xb, gb = (as_float64(a if shared else a[b]) for a in (x, g))
        _close(y[b], member @ xb, jnp.float32, k)
        _close(yt[b], member.T @ gb, jnp.float32, k)
    np.testing.assert_array_equal(np.asarray(native_dia.dia_matmul_native(values, x, **static)), y)


def _with_leading_slots(fmt, matrix, lead, rng):
    """`matrix` with `lead` slots put before all of its own: DIA, `lead` more rows and
    columns in front (its diagonals keep their offsets); CSR, one more row in front, of
    `lead` entries."""
    m, n = matrix.shape
    if fmt == "dia":
        front = random_values(rng, (len(matrix.offsets), lead), jnp.float32)
        data = jnp.concatenate([front, matrix.data], axis=1)
        return js.DIAMatrix(data, matrix.offsets, (m + lead, n + lead))
    twin = matrix.to_scipy()
    first = scipy.sparse.csr_array((np.ones(lead, np.float32), np.arange(lead), [0, lead]), (1, n))
    return js.CSRMatrix.from_scipy(scipy.sparse.vstack([first, twin], format="csr"))


# Leads of 1, 4 and 7 slots shift the same slots to three places in the groups of eight in
# the fast suite; the other leads are `slow`.
@pytest.mark.parametrize(
    "lead", [pytest.param(lead, marks=slow_unless(lead in (1, 4, 7))) for lead in range(1, 8)]
)
@pytest.mark.parametrize("k", [8, 16, 64])
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_values_gradient_bits_do_not_depend_on_how_slots_are_grouped(fmt, k, lead):
    """Where they can (float32, blocks of 8 or 16 columns, AVX), the kernels sum the values'
    gradients of eight slots (DIA) or entries (CSR, banded columns) side by side, and the
    last few one by one; each must keep the bits of its dot product summed alone. With
    `lead` more slots in front, the same slots fall in other groups or out of them: their
    gradients must not change by a bit, and must match the XLA reference."""
    rng = np.random.default_rng(100 * k + lead)
    if fmt == "dia":
        offsets, shape = (-9, -1, 0, 2, 5), (37, 35)
        data = random_values(rng, (len(offsets), shape[1]), jnp.float32)
        matrix = js.DIAMatrix(data, offsets, shape)
    else:
        # Banded rows of 1 to 7 entries, so groups of eight straddle rows in every way.
        matrix = js.CSRMatrix.from_scipy(_banded(23, 30, lambda i: i + np.arange(1 + i % 7)))
    longer = _with_leading_slots(fmt, matrix, lead, rng)
    (m, n), (longer_m, longer_n) = matrix.shape, longer.shape
    x = random_values(rng, (n, k), jnp.float32)
    g = random_values(rng, (m, k), jnp.float32)
    longer_x = jnp.concatenate([random_values(rng, (longer_n - n, k), jnp.float32), x])
    longer_g = jnp.concatenate([random_values(rng, (longer_m - m, k), jnp.float32), g])
    *_, sddmm = _batched_kernels(fmt, matrix)
    *_, longer_sddmm = _batched_kernels(fmt, longer)
    gradient = np.asarray(sddmm(g, x))
    expected = _xla_sddmm(fmt, matrix)(jnp.asarray(as_float64(g)), jnp.asarray(as_float64(x)))
    _close(gradient, np.asarray(expected), jnp.float32, k)
    if fmt == "dia":
        # Slots whose row lies in the matrix; the others get zero in `gradient` only.
        rows = np.arange(n)[None, :] - np.asarray(matrix.offsets)[:, None]
        inside = (rows >= 0) & (rows < m)
        shared = np.asarray(longer_sddmm(longer_g, longer_x))[:, lead:]
        np.testing.assert_array_equal(shared[inside], gradient[inside])
    else:
        np.testing.assert_array_equal(np.asarray(longer_sddmm(longer_g, longer_x))[lead:], gradient)


def _built(module: str) -> bool:
    return importlib.util.find_spec(f"jaxsparse.kernels.{module}") is not None


def test_the_build_for_this_cpu_is_loaded():
    """The AVX2 and FMA build runs wherever the CPU has both and it was built (x86-64)."""
    from jaxsparse.kernels import _native_cpu

    avx2_built = _built("_native_ffi_avx2")
    expected = "avx2+fma" if _native_cpu.has_avx2_fma() and avx2_built else "baseline"
    assert _native_library.INSTRUCTION_SET == expected


@pytest.mark.parametrize(
    "built, runs_avx2_fma, wanted, expected",
    [
        ({"baseline", "avx2+fma"}, True, None, "avx2+fma"),
        ({"baseline", "avx2+fma"}, False, None, "baseline"),
        ({"baseline", "avx2+fma"}, True, "baseline", "baseline"),
        ({"baseline"}, True, None, "baseline"),
        ({"avx2+fma"}, True, None, "avx2+fma"),
        ({"avx2+fma"}, False, None, "cannot run"),
        ({"avx2+fma"}, True, "baseline", "did not build"),
        (set(), True, None, "not built"),
    ],
)
def test_the_loader_picks_a_build_this_cpu_runs(built, runs_avx2_fma, wanted, expected):
    """Every case of installed builds (both, as `pip install`; one, as a host build),
    CPU and `JAXSPARSE_NATIVE_BUILD`: a build the CPU runs, or a reason naming why none."""
    instruction_set, found = _native_library.choose_build(built, runs_avx2_fma, wanted)
    if expected in _native_library.BUILDS:
        assert (instruction_set, found) == (expected, _native_library.BUILDS[expected])
    else:
        assert instruction_set is None and expected in found


BASELINE_CHECK = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np, scipy.sparse
    import jaxsparse as js
    from jaxsparse.kernels import _native_library
    assert _native_library.INSTRUCTION_SET == "baseline", _native_library.INSTRUCTION_SET
    rng = np.random.default_rng(0)
    twin = scipy.sparse.random_array((300, 200), density=0.05, format="csr", rng=rng)
    diagonals = scipy.sparse.dia_array(
        (rng.standard_normal((27, 200)), np.arange(-13, 14) * 3), shape=(300, 200)
    )
    for matrix, dense in ((js.CSRMatrix.from_scipy(twin), twin.toarray()),
                          (js.DIAMatrix.from_scipy(diagonals), diagonals.toarray())):
        for k in (1, 8, 64):
            x = jnp.asarray(rng.standard_normal((200, k)))
            g = jnp.asarray(rng.standard_normal((300, k)))
            out, pullback = jax.vjp(lambda a, x: a @ x, matrix, x)
            np.testing.assert_allclose(out, dense @ np.asarray(x), atol=1e-10)
            np.testing.assert_allclose(pullback(g)[1], dense.T @ np.asarray(g), atol=1e-10)
    print("baseline ok")
    """
)


@pytest.mark.skipif(
    not _built("_native_ffi"),
    reason="only the build for this CPU is installed (JAXSPARSE_NATIVE_VARIANTS=host, the "
    "Makefile's default): CI's newest-Python run builds both and checks this",
)
def test_the_baseline_build_computes_the_same():
    """The build for any CPU (chosen here by `JAXSPARSE_NATIVE_BUILD=baseline`, in a fresh
    process): products and gradients of both formats at k = 1, 8, 64 against scipy."""
    environment = {**os.environ, _native_library.BUILD_ENV_VAR: "baseline"}
    environment["JAX_ENABLE_X64"] = "1"
    assert "baseline ok" in _run_in_a_fresh_process(BASELINE_CHECK, environment)
