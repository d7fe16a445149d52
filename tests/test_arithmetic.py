"""Elementwise arithmetic (`+`, `-`, `*`, `multiply`, `/`, `**`, `abs`, `conj`, `.H`, `.real`,
`.imag`) against scipy.sparse, in and out of `jit`, with gradients."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import (
    MATRICES,
    as_float64,
    assert_close,
    cases,
    dtype_id,
    random_csr,
    random_dia,
    random_values,
    small_matrix,
)
from jax.test_util import check_grads

import jaxsparse as js

# Each case compiles its own programs; these cover every kind of DIA slot (unsorted offsets,
# diagonals beyond the matrix, none inside) and of CSR row (empty, repeated columns, wide).
ARITHMETIC_CASES = [
    case
    for case in MATRICES
    if case.name
    in (
        "dia-unsorted-offsets",
        "dia-tall-beyond-matrix",
        "dia-all-outside",
        "csr-wide",
        "csr-empty-rows",
        "csr-repeated-columns",
    )
]
# Every dtype is covered by the products' tests; these have each kind of value (single,
# half precision, complex).
FEW_DTYPES = (jnp.float32, jnp.bfloat16, jnp.complex128)


def partner(rng, fmt, shape, dtype):
    """A second matrix of `shape` to combine with a case's matrix, and its scipy twin."""
    if fmt == "dia":
        return random_dia(rng, shape, (0, 1, -2, 3), dtype)
    return random_csr(rng, shape, density=0.3, dtype=dtype, shuffle_columns=True)


def expected_format(a, b):
    return "dia" if a.format == b.format == "dia" else "csr"


def assert_canonical_csr(matrix):
    """Rows hold sorted, distinct columns (what a structure union produces)."""
    twin = matrix.to_scipy()
    assert twin.has_canonical_format


@pytest.mark.parametrize("other", ["dia", "csr"])
@pytest.mark.parametrize("case", cases(ARITHMETIC_CASES))
def test_sum_difference_and_product_match_scipy(case, other):
    rng = np.random.default_rng(1)
    a, a_twin = case.make(rng, jnp.float64)
    b, b_twin = partner(rng, other, case.shape, jnp.float64)
    for result, expected in ((a + b, a_twin + b_twin), (a - b, a_twin - b_twin)):
        assert result.format == expected_format(a, b)
        assert result.shape == case.shape and result.dtype == jnp.float64
        assert_close(result.to_scipy().toarray(), expected.toarray(), jnp.float64)
        if result.format == "csr":
            assert_canonical_csr(result)
            assert result.nnz == expected.tocsr().nnz
    # `*` keeps the intersection.
    result = a * b
    expected = a_twin.multiply(b_twin)
    assert result.format == expected_format(a, b)
    assert_close(result.to_scipy().toarray(), expected.toarray(), jnp.float64)
    if result.format == "csr":
        assert result.sum_duplicates().nnz == np.count_nonzero(expected.toarray())


def test_abs_and_powers_of_repeated_csr_entries_take_their_totals():
    """As scipy (its `_deduped_data`): `abs(A)` and `A ** p` of a position stored twice are
    those of the position's total, eagerly and with the structure traced under `jit`, and
    their gradients reach every repeat."""
    data, indices, indptr = np.array([1.0, -3.0, 2.0, 0.5, 0.5]), [0, 0, 1, 1, 1], [0, 2, 5]
    twin = scipy.sparse.csr_array((data, indices, indptr), shape=(2, 2))
    a = js.CSRMatrix(jnp.asarray(data), jnp.asarray(indices), jnp.asarray(indptr), (2, 2))
    for function, expected in ((abs, abs(twin)), (lambda m: m**-1, twin.power(-1))):
        np.testing.assert_allclose(function(a).todense(), expected.toarray())
        traced = jax.jit(lambda m, function=function: function(m).todense())(a)
        np.testing.assert_allclose(traced, expected.toarray())

    def weighted(values):
        return jnp.sum(abs(a.with_data(values)) ** 3 @ jnp.array([1.0, 2.0]))

    check_grads(weighted, (a.data,), order=1, modes=("rev",))


@pytest.mark.parametrize("exponent", [0.5, -1.0])
def test_dia_power_keeps_the_slots_outside_the_matrix_zero(exponent):
    """Powers below 1 have an infinite derivative at 0, the value of the slots outside the
    matrix: their values and gradients stay 0, as the ufunc methods' do."""
    a = js.diags([jnp.array([1.0, 2.0, 3.0]), jnp.array([4.0, 5.0])], [0, 1])
    outside = np.zeros(a.data.shape, bool)
    outside[1, 0] = True  # column 0 of diagonal 1
    dense = np.asarray(a.todense())
    stored = dense != 0
    powered = a**exponent
    assert powered.data[1, 0] == 0
    np.testing.assert_allclose(
        powered.todense(), np.where(stored, np.where(stored, dense, 1) ** exponent, 0), rtol=1e-6
    )

    def total(data):
        return jnp.sum((a.with_data(data) ** exponent) @ jnp.ones(3))

    gradient = jax.grad(total)(a.data)
    expected = np.where(outside, 0.0, exponent * np.asarray(a.data) ** (exponent - 1))
    np.testing.assert_allclose(gradient, expected, rtol=1e-6)


def test_sums_with_a_dia_matrix_of_no_diagonals_are_the_other_term():
    """A DIA matrix that stores no diagonal (`fromdense` of zeros, values that cancel and
    `eliminate_zeros`) adds and subtracts as zero, eagerly and under `jit`."""
    empty = js.DIAMatrix.fromdense(np.zeros((3, 4)))
    assert empty.offsets == ()
    other = js.DIAMatrix(np.arange(8.0).reshape(2, 4), (0, 1), (3, 4))
    dense = np.asarray(other.todense())
    for result, expected in (
        (empty + other, dense),
        (other - empty, dense),
        (empty - other, -dense),
        (jax.jit(js.add)(empty, other), dense),
    ):
        np.testing.assert_array_equal(result.todense(), expected)


@pytest.mark.parametrize("dtype", FEW_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("fmts", [("dia", "dia"), ("csr", "dia"), ("csr", "csr")])
def test_sum_under_jit_with_static_nnz(fmts, dtype):
    rng = np.random.default_rng(2)
    a, a_twin = partner(rng, fmts[0], (9, 7), dtype)
    b, b_twin = partner(rng, fmts[1], (9, 7), dtype)
    eager = a + b
    nnz = eager.nnz if eager.format == "csr" else None
    traced = jax.jit(lambda a, b: js.add(a, b, nnz=nnz))(a, b)
    assert traced.format == eager.format and traced.dtype == jnp.dtype(dtype)
    assert_close(traced.to_scipy().toarray(), (a_twin + b_twin).toarray(), dtype)
    if eager.format == "csr":
        np.testing.assert_array_equal(traced.indices, eager.indices)
        np.testing.assert_array_equal(traced.indptr, eager.indptr)


def test_sum_under_jit_needs_nnz_unless_structure_is_shared():
    rng = np.random.default_rng(3)
    a, a_twin = random_csr(rng, (6, 5), dtype=jnp.float32)
    b, b_twin = random_csr(rng, (6, 5), dtype=jnp.float32)
    with pytest.raises(TypeError, match="Pass a static `nnz`"):
        jax.jit(lambda a, b: a + b)(a, b)
    with pytest.raises(TypeError, match="Pass a static `nnz`"):
        jax.jit(lambda a, d: a - d)(a, js.DIAMatrix(np.ones((1, 5), np.float32), 0, (6, 5)))
    # Structures known on the host (closed over, not arguments) need no `nnz` either.
    closed_over = jax.jit(lambda a_values: a.with_data(a_values) + b)(2 * a.data)
    assert_close(closed_over.to_scipy().toarray(), (2 * a_twin + b_twin).toarray(), jnp.float32)
    shared = jax.jit(lambda a, values: a + a.with_data(values))(a, 2 * a.data)
    assert shared.nnz == a.nnz
    assert_close(shared.to_scipy().toarray(), 3 * a_twin.toarray(), jnp.float32)


def test_sum_with_too_small_nnz_raises():
    rng = np.random.default_rng(4)
    a, _ = random_csr(rng, (6, 5), density=0.5, dtype=jnp.float32)
    b, _ = random_csr(rng, (6, 5), density=0.5, dtype=jnp.float32)
    needed = (a + b).nnz
    with pytest.raises(ValueError, match=f"`nnz`={needed - 1} is smaller"):
        js.add(a, b, nnz=needed - 1)
    with pytest.raises(Exception, match="is smaller than the number of entries"):
        jax.jit(lambda a, b: js.add(a, b, nnz=needed - 1).data)(a, b).block_until_ready()
    for operation in (js.add, js.subtract):  # no run-time check survives on an empty result
        with pytest.raises(ValueError, match="`nnz`=0 is smaller"):
            jax.jit(lambda a, b, f=operation: f(a, b, nnz=0).todense())(a, b)
    padded = jax.jit(lambda a, b: js.add(a, b, nnz=needed + 3))(a, b)
    assert padded.nnz == needed + 3
    np.testing.assert_allclose(padded.to_scipy().toarray(), (a + b).to_scipy().toarray())


def test_traced_sum_merges_canonical_rows_as_the_sort_does():
    """Two structures with rising columns merge row by row under `jit` into the same
    matrix, bit for bit, as the sort of their entries; unsorted rows take the sort."""
    from jaxsparse._coordinates import csr_from_entries, entries
    from jaxsparse._csr_sum import add_traced

    rng = np.random.default_rng(11)
    lengths = np.array([0, 3, 5, 0, 2, 5, 1])  # empty rows, full rows: shared columns
    a, a_twin = random_csr(rng, (7, 5), row_lengths=lengths, dtype=jnp.float64)
    b, b_twin = random_csr(rng, (7, 5), row_lengths=lengths[::-1], dtype=jnp.float64)
    found = (a_twin + b_twin).nnz
    merge, add = (
        jax.jit(add_traced, static_argnames="nnz"),
        jax.jit(js.add, static_argnames="nnz"),
    )
    for nnz in (found, found + 2):
        (a_rows, a_cols, _), (b_rows, b_cols, _) = entries(a), entries(b)
        expected = csr_from_entries(
            np.concatenate([a_rows, b_rows]),
            np.concatenate([a_cols, b_cols]),
            jnp.concatenate([a.data, b.data]),
            a.shape,
            nnz,
        )
        for got in (merge(a, b, a.data, b.data, nnz=nnz), add(a, b, nnz=nnz)):
            for name in ("data", "indices", "indptr"):
                np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), name)
                assert getattr(got, name).dtype == getattr(expected, name).dtype
    shuffled, twin = random_csr(rng, (7, 5), row_lengths=lengths, shuffle_columns=True)
    shuffled = shuffled.astype(jnp.float64)
    result = jax.jit(lambda a, b: js.subtract(a, b, nnz=(a_twin - twin).nnz))(a, shuffled)
    np.testing.assert_allclose(result.todense(), (a_twin - twin).toarray(), atol=1e-6)


def test_multiply_searches_the_rows_of_an_operand_without_repeats():
    """Entries of `b` found by a search within each row where its columns rise, else after
    summing its repeats; a known canonical structure compiles no sort at all."""
    rng = np.random.default_rng(12)
    a, a_twin = random_csr(rng, (6, 7), density=0.6, dtype=jnp.float64)
    multiply = jax.jit(lambda a, b: a.multiply(b))
    for layout in ({}, {"shuffle_columns": True}, {"repeat_columns": True}):
        b, b_twin = random_csr(rng, (6, 7), density=0.6, dtype=jnp.float64, **layout)
        expected = a_twin.multiply(b_twin).toarray()
        for result in (a.multiply(b), multiply(a, b)):
            np.testing.assert_allclose(result.todense(), expected, atol=1e-12)
    b, _ = random_csr(rng, (6, 7), density=0.6, dtype=jnp.float64)
    assert "stablehlo.sort" not in jax.jit(lambda: a.multiply(b)).lower().as_text()


@pytest.mark.parametrize("case", cases([ARITHMETIC_CASES[0], ARITHMETIC_CASES[3]]))
def test_sum_with_dense_is_dense(case):
    rng = np.random.default_rng(5)
    a, twin = case.make(rng, jnp.float64)
    dense = random_values(rng, case.shape, jnp.float64)
    for result, expected in [
        (a + dense, twin.toarray() + dense),
        (dense + a, dense + twin.toarray()),
        (a - jnp.asarray(dense), twin.toarray() - dense),
        (jnp.asarray(dense) - a, dense - twin.toarray()),
    ]:
        assert isinstance(result, jax.Array)
        np.testing.assert_allclose(result, expected, atol=1e-12)
    assert (a + 0) is a
    with pytest.raises(TypeError, match="nonzero scalar"):
        a + 1.0
    with pytest.raises(ValueError, match="inconsistent shapes"):
        a + partner(rng, "csr", (case.shape[0] + 1, case.shape[1]), jnp.float64)[0]


def test_sparse_times_sparse_under_jit_keeps_the_csr_structure():
    rng = np.random.default_rng(7)
    a, a_twin = random_csr(rng, (8, 6), density=0.5, dtype=jnp.complex64, repeat_columns=True)
    b, b_twin = random_csr(rng, (8, 6), density=0.5, dtype=jnp.complex64, repeat_columns=True)
    d, d_twin = random_dia(rng, (8, 6), (-1, 0, 2), jnp.complex64)
    for other, twin in ((b, b_twin), (d, d_twin)):
        traced = jax.jit(lambda a, o: a.multiply(o))(a, other)
        assert traced.format == "csr" and traced.nnz == a.nnz
        np.testing.assert_array_equal(traced.indices, a.indices)
        assert_close(traced.to_scipy().toarray(), a_twin.multiply(twin).toarray(), jnp.complex64)


@pytest.mark.parametrize("dtype", FEW_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_times_dense_keeps_sparsity(fmt, dtype):
    """A full factor, a scalar, and vectors that scale columns (`(n,)`, `(1, n)`) or rows."""
    rng = np.random.default_rng(8)
    shape = (7, 5)
    a, twin = partner(rng, fmt, shape, dtype)
    times = jax.jit(lambda a, f: a.multiply(f))
    for factor_shape in [(), shape, (5,), (1, 5), (7, 1)]:
        factor = random_values(rng, factor_shape, dtype)
        for result in (a * factor, factor * a, times(a, factor)):
            assert result.format == fmt and result.nnz == a.nnz
            assert result.dtype == jnp.dtype(dtype)
            assert_close(result.to_scipy().toarray(), twin.toarray() * as_float64(factor), dtype)


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_python_bools_are_scalars(fmt):
    """`True` and `False` act as the numbers 1 and 0, as `np.bool_` does (scipy's too)."""
    a, twin = partner(np.random.default_rng(11), fmt, (7, 5), jnp.float64)
    dense = twin.toarray()
    # A bool with float values promotes as in `jnp`: not under the tests' strict promotion.
    with jax.numpy_dtype_promotion("standard"):
        checks = [(a * True, dense), (True * a, dense), (a * False, 0 * dense), (a**True, dense)]
        checks += [(a + False, dense), (a - False, dense)]
        for result, expected in checks:
            assert result.format == fmt and result.nnz == a.nnz and result.dtype == a.dtype
            assert_close(result.todense(), expected, jnp.float64)
        with pytest.raises(TypeError, match="nonzero scalar"):
            a + True


FLAGS = np.array([[1, 0, 1, 0], [0, 1, 0, 0], [1, 1, 0, 1]], bool)
OTHER_FLAGS = np.array([[0, 0, 1, 1], [1, 0, 0, 0], [0, 1, 0, 0]], bool)


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_boolean_arithmetic_follows_numpy(fmt):
    """Booleans add by `or` (sparse or dense operands, in and out of `jit`) and multiply by
    `and`; subtracting two booleans is a TypeError, as in numpy, and so is any result with
    integer values (times an integer, an integer power), which no sparse matrix stores."""
    make = js.DIAMatrix.fromdense if fmt == "dia" else js.CSRMatrix.fromdense
    flags, other = jnp.asarray(FLAGS), jnp.asarray(OTHER_FLAGS)
    a, b = make(flags), make(other)
    sums = [a + b, a + js.CSRMatrix.fromdense(other), a + other, other + a]
    sums.append(jax.jit(lambda a, b: js.add(a, b, nnz=9))(a, b))
    for result in sums:
        assert result.dtype == jnp.bool_
        dense = result.todense() if isinstance(result, js.SparseMatrix) else result
        np.testing.assert_array_equal(dense, flags + other)
    products = [(a.multiply(other), flags * other), (a.multiply(b), flags * other)]
    for product, expected in products + [(a * True, flags * True)]:
        assert product.dtype == jnp.bool_
        np.testing.assert_array_equal(product.todense(), expected)
    for difference in (lambda: a - b, lambda: a - other, lambda: other - a):
        with pytest.raises(TypeError, match="two boolean operands"):
            difference()
    with jax.numpy_dtype_promotion("standard"):
        for integers in (lambda: a * 2, lambda: 2 * a, lambda: a * np.int64(2), lambda: a**2):
            with pytest.raises(TypeError, match="not integers.*astype"):
                integers()
    with pytest.raises(TypeError, match="not integers"):
        a.astype(jnp.int32)


@pytest.mark.parametrize("dtype", FEW_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", cases([ARITHMETIC_CASES[1], ARITHMETIC_CASES[4]]))
def test_unary_operations_match_scipy(case, dtype):
    rng = np.random.default_rng(9)
    a, twin = case.make(rng, dtype)
    checks = [
        (-a, -twin),
        (abs(a), abs(twin)),
        (a**2, twin.power(2)),
        (a / 4, twin / 4),
        (a.conj(), twin.conj()),
        (a.H, twin.conj().T),
        (a.real, twin.real),
        (a.imag, twin.imag),
    ]
    for result, expected in checks:
        assert result.format == a.format
        assert_close(result.to_scipy().toarray(), expected.toarray(), dtype)
    assert a.real.dtype == jnp.real(a.data).dtype and a.imag.dtype == a.real.dtype
    with pytest.raises(ValueError, match="zero power"):
        a**0
    with pytest.raises(TypeError, match="only scalars"):
        a / np.ones(case.shape[1])


@pytest.mark.parametrize("fmts", [("dia", "dia"), ("csr", "dia"), ("csr", "csr")])
def test_gradients(fmts):
    rng = np.random.default_rng(10)
    a = small_matrix(fmts[0], rng)
    b = small_matrix(fmts[1], rng)
    weights = random_values(rng, a.shape, jnp.float64)

    @jax.jit
    def loss(a_data, b_data):
        a_new, b_new = a.with_data(a_data), b.with_data(b_data)
        scaled = (a_new * jnp.asarray(weights[:, :1])) * 2.0 - b_new / 3.0
        results = (a_new + b_new, a_new - b_new, a_new * b_new, scaled)
        return sum(jnp.sum(result.todense() * weights) for result in results)

    check_grads(loss, (a.data, b.data), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)
    if fmts == ("csr", "csr"):
        nnz = (a + b).nnz

        def traced_loss(a, b):
            return jnp.sum(js.add(a, b, nnz=nnz).todense() * weights)

        eager = jax.grad(traced_loss, argnums=(0, 1), allow_int=True)(a, b)
        traced = eqx.filter_jit(eqx.filter_grad(lambda ab: traced_loss(*ab)))((a, b))
        np.testing.assert_allclose(traced[0].data, eager[0].data, atol=1e-12)
        np.testing.assert_allclose(traced[1].data, eager[1].data, atol=1e-12)
