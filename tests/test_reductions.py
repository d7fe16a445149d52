"""Reductions (`diagonal`, `trace`, `sum`, `max`, `min`, `js.linalg.norm`) and indexing
(`A[i]`, `A[:, j]`, `A[i, j]`, slices) against scipy.sparse, in and out of `jit`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from helpers import MATRICES, assert_close, cases, random_csr, random_dia, random_values
from jax.test_util import check_grads

import jaxsparse as js
from jaxsparse._coordinates import may_repeat

REDUCTION_CASES = [
    case
    for case in MATRICES
    if case.name
    in (
        "dia-unsorted-offsets",
        "dia-wide-beyond-matrix",
        "dia-all-outside",
        "dia-one-column",
        "csr-tall",
        "csr-empty-rows",
        "csr-dense-row",
        "csr-repeated-columns",
    )
]


def reductions(matrix):
    """Every reduction of one matrix, as a dict (one jitted program per case)."""
    m, n = matrix.shape
    result = {f"diagonal({k})": matrix.diagonal(k) for k in (0, 1, -2, n - 1, -(m - 1), n + 3)}
    result |= {
        "trace": matrix.trace(),
        "trace(1)": matrix.trace(1),
        "sum": matrix.sum(),
        "sum(0)": matrix.sum(axis=0),
        "sum(1)": matrix.sum(axis=1),
        "sum(-1)": matrix.sum(axis=-1),
    }
    for axis in (None, 0, 1):
        result[f"count_nonzero({axis})"] = matrix.count_nonzero(axis=axis)
    if not jnp.issubdtype(matrix.dtype, jnp.complexfloating):
        for axis in (None, 0, 1):
            result[f"max({axis})"] = matrix.max(axis=axis)
            result[f"min({axis})"] = matrix.min(axis=axis)
    for ord in ("fro", 1, -1, np.inf, -np.inf):
        result[f"norm({ord})"] = js.linalg.norm(matrix, ord)
        result[f"norm({ord}, (1, 0))"] = js.linalg.norm(matrix, ord, axis=(1, 0))
    return result | vector_reductions(matrix)


def vector_reductions(matrix):
    """Vector norms along each axis, `max`/`min` of the stored entries, and sums and means
    in a dtype given."""
    result = {
        f"norm({ord}, {axis})": js.linalg.norm(matrix, ord, axis)
        for ord in (None, 1, np.inf, -np.inf, 0, 3, -1)
        for axis in (0, -1)
    }
    if not jnp.issubdtype(matrix.dtype, jnp.complexfloating):
        for axis in (None, 0, 1):
            result[f"max({axis}, explicit)"] = matrix.max(axis=axis, explicit=True)
            result[f"min({axis}, explicit)"] = matrix.min(axis=axis, explicit=True)
    return result | {
        "sum(dtype=complex128)": matrix.sum(dtype=jnp.complex128),
        "sum(1, dtype=complex128)": matrix.sum(axis=1, dtype=jnp.complex128),
        "mean(0, dtype=complex128)": matrix.mean(axis=0, dtype=jnp.complex128),
    }


def expected_vector_reductions(csr):
    result = {
        f"norm({ord}, {axis})": scipy.sparse.linalg.norm(csr, ord, axis)
        for ord in (None, 1, np.inf, -np.inf, 0, 3, -1)
        for axis in (0, -1)
    }
    if not np.iscomplexobj(csr.data):
        for axis in (None, 0, 1):
            result[f"max({axis}, explicit)"] = _dense(csr.max(axis=axis, explicit=True))
            result[f"min({axis}, explicit)"] = _dense(csr.min(axis=axis, explicit=True))
    return result | {
        "sum(dtype=complex128)": csr.sum(dtype=np.complex128),
        "sum(1, dtype=complex128)": csr.sum(axis=1, dtype=np.complex128),
        "mean(0, dtype=complex128)": csr.mean(axis=0, dtype=np.complex128),
    }


def expected_reductions(twin):
    m, n = twin.shape
    # A canonical copy: scipy sums repeats in place, in arrays a shallow copy shares.
    csr = scipy.sparse.csr_array(twin, copy=True)
    csr.sum_duplicates()
    twin = csr
    result = {f"diagonal({k})": twin.diagonal(k) for k in (0, 1, -2, n - 1, -(m - 1), n + 3)}
    result |= {
        "trace": twin.trace(),
        "trace(1)": twin.trace(1),
        "sum": twin.sum(),
        "sum(0)": np.asarray(twin.sum(axis=0)).ravel(),
        "sum(1)": np.asarray(twin.sum(axis=1)).ravel(),
        "sum(-1)": np.asarray(twin.sum(axis=1)).ravel(),
    }
    for axis in (None, 0, 1):
        result[f"count_nonzero({axis})"] = twin.count_nonzero(axis=axis)
    if not np.iscomplexobj(twin.data):
        for axis in (None, 0, 1):
            maximum, minimum = csr.max(axis=axis), csr.min(axis=axis)
            result[f"max({axis})"] = _dense(maximum)
            result[f"min({axis})"] = _dense(minimum)
    for ord in ("fro", 1, -1, np.inf, -np.inf):
        result[f"norm({ord})"] = scipy.sparse.linalg.norm(csr, ord)
        result[f"norm({ord}, (1, 0))"] = scipy.sparse.linalg.norm(csr, ord, axis=(1, 0))
    return result | expected_vector_reductions(csr)


def _dense(value):
    return value.toarray().ravel() if scipy.sparse.issparse(value) else np.asarray(value)


# complex64 on every DIA case and on the CSR case that repeats positions: complex values
# take the same structure paths as real ones, and each CSR case compiles for seconds. The
# tall and dense-row CSR layouts take the paths of the empty-rows and repeats cases, and
# the repeats case in float64 those of its complex64 twin: `slow`.
SLOW_REDUCTION_CASES = ("csr-tall", "csr-dense-row", "csr-repeated-columns")


@pytest.mark.parametrize(
    "case, dtype",
    [
        pytest.param(
            case,
            jnp.float64,
            id=f"{case.name}-float64",
            marks=[pytest.mark.slow] if case.name in SLOW_REDUCTION_CASES else [],
        )
        for case in REDUCTION_CASES
    ]
    + [
        pytest.param(case, jnp.complex64, id=f"{case.name}-complex64")
        for case in REDUCTION_CASES
        if case.name.startswith("dia") or case.name == "csr-repeated-columns"
    ],
)
def test_reductions_match_scipy(case, dtype):
    rng = np.random.default_rng(0)
    matrix, twin = case.make(rng, dtype)
    got = jax.jit(reductions)(matrix)
    expected = expected_reductions(twin)
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert got[name].shape == np.shape(value), name
        assert_close(got[name], value, dtype)
    assert got["sum"].dtype == jnp.dtype(dtype)
    assert got["norm(fro)"].dtype == jnp.real(matrix.data).dtype


@pytest.mark.parametrize("case", cases(REDUCTION_CASES))
def test_eager_diagonals_match_scipy(case):
    """Eagerly a canonical CSR structure has each row searched for its diagonal entry, and
    a repeating one its entries summed: both give scipy's diagonals, as DIA does."""
    matrix, twin = case.make(np.random.default_rng(1), jnp.float64)
    m, n = matrix.shape
    csr = scipy.sparse.csr_array(twin, copy=True)
    csr.sum_duplicates()
    matrices = [matrix]
    if isinstance(matrix, js.CSRMatrix):  # the cases' CSR columns do not rise within rows
        matrices.append(js.CSRMatrix.from_scipy(csr))
        assert may_repeat(matrices[-1]) is False
    for each in matrices:
        for k in (0, 1, -2, n - 1, -(m - 1), n + 3):
            np.testing.assert_allclose(each.diagonal(k), csr.diagonal(k), rtol=1e-12, err_msg=k)
        np.testing.assert_allclose(each.trace(), csr.trace(), rtol=1e-12)


def test_eager_reductions_of_an_invalid_known_structure_are_nan():
    """A structure put in without the constructor's checks (`eqx.tree_at`), columns
    rising but outside the matrix: the host finds it invalid (`may_repeat` is None), so
    eager reductions read its values as NaN, as under `jit`, rather than as checked."""
    matrix = js.CSRMatrix.from_scipy(scipy.sparse.eye_array(4, format="csr"))
    assert may_repeat(matrix) is False
    invalid = eqx.tree_at(lambda m: m.indices, matrix, jnp.asarray([0, 4, 2, 6], jnp.int32))
    assert may_repeat(invalid) is None
    for name, value in {
        "diagonal": invalid.diagonal(),
        "max": invalid.max(),
        "sum": invalid.sum(),
        "mean": invalid.mean(),
        "norm": js.linalg.norm(invalid),
    }.items():
        assert np.isnan(np.asarray(value)).any(), name


def test_max_min_on_stored_entries_unless_positions_repeat():
    """One jitted program for two structures of one shape and size: its run-time check sends
    the canonical one past the sort that sums repeats; eager calls decide on the host."""
    shape, data = (4, 5), np.array([-1.0, 4.0, -2.0, -3.0, -5.0, -6.0, -7.0, 2.0])
    indptr = np.array([0, 0, 3, 8, 8])  # empty first and last rows, a full row
    canonical = np.array([0, 2, 4, 0, 1, 2, 3, 4])
    repeating = np.array([4, 0, 4, 3, 1, 2, 0, 4])  # unsorted, column 4 twice in each row
    reduce = jax.jit(_max_min_and_counts)
    for indices in (canonical, repeating):
        twin = scipy.sparse.csr_array((data, indices, indptr), shape=shape)
        summed = scipy.sparse.csr_array(twin, copy=True)
        summed.sum_duplicates()
        expected = {
            f"{name}({axis})": _dense(getattr(summed, name)(axis=axis))
            for name in ("max", "min")
            for axis in (None, 0, 1)
        }
        expected |= {
            "count": summed.count_nonzero(),
            "norm(1)": scipy.sparse.linalg.norm(summed, 1),
        }
        matrix = js.CSRMatrix(jnp.asarray(data), indices, indptr, shape)
        for got in (reduce(matrix), _max_min_and_counts(matrix)):
            for name, value in expected.items():
                np.testing.assert_allclose(got[name], value, rtol=1e-12, err_msg=name)
    program = jax.jit(lambda: _max_min_and_counts(matrix)).lower().as_text()
    assert "stablehlo.sort" in program
    matrix = js.CSRMatrix(jnp.asarray(data), canonical, indptr, shape)
    program = jax.jit(lambda: _max_min_and_counts(matrix)).lower().as_text()
    assert "stablehlo.sort" not in program


def _max_min_and_counts(matrix):
    result = {
        f"{name}({axis})": getattr(matrix, name)(axis=axis)
        for name in ("max", "min")
        for axis in (None, 0, 1)
    }
    return result | {"count": matrix.count_nonzero(), "norm(1)": js.linalg.norm(matrix, 1)}


def test_max_min_errors():
    with pytest.raises(TypeError, match="complex"):
        js.DIAMatrix(jnp.ones((1, 3), jnp.complex64), (0,), (3, 3)).max()
    with pytest.raises(ValueError, match="empty axis"):
        js.CSRMatrix.fromdense(jnp.zeros((0, 3))).min()
    with pytest.raises(ValueError, match="empty axis"):
        js.CSRMatrix.fromdense(jnp.zeros((0, 3))).max(axis=0)
    with pytest.raises(TypeError, match="jaxsparse matrix"):
        js.linalg.norm(np.eye(3))
    for ord in (-2, "nuc"):  # scipy supports neither
        with pytest.raises(ValueError, match="`ord` must be"):
            js.linalg.norm(js.CSRMatrix.fromdense(jnp.eye(2)), ord)
    # The extreme line sum of no lines: ValueError, as scipy.
    for shape, ords in (((5, 0), (1, -1)), ((0, 5), (np.inf, -np.inf))):
        for ord in ords:
            with pytest.raises(ValueError):
                scipy.sparse.linalg.norm(scipy.sparse.csr_array(shape), ord)
            with pytest.raises(ValueError, match="an empty axis"):
                js.linalg.norm(js.DIAMatrix.fromdense(jnp.zeros(shape)), ord)
    assert js.linalg.norm(js.CSRMatrix.fromdense(jnp.zeros((5, 0))), np.inf) == 0.0
    with pytest.raises(ValueError, match="`axis` must be"):
        js.CSRMatrix.fromdense(jnp.eye(2)).sum(axis=2)


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_frobenius_curvature_at_stored_complex_zeros_matches_dense(fmt):
    """The Hessian of `norm(A)**2` in the values is 2 everywhere, stored zeros included
    (the derivative of complex `abs` is 0 at 0, so a norm built on it loses it there)."""
    values = jnp.array([1 + 1j, 0j, 2 - 1j])
    if fmt == "csr":
        matrix = js.CSRMatrix(values, jnp.array([0, 1, 1]), jnp.array([0, 2, 3, 3]), (3, 3))
    else:
        matrix = js.DIAMatrix(values[None, :], (0,), (3, 3))

    def squared(data):
        return js.linalg.norm(matrix.with_data(data)) ** 2

    def squared_dense(data):
        return jnp.linalg.norm(matrix.with_data(data).todense()) ** 2

    tangent = jnp.ones_like(matrix.data)
    hvp = jax.jvp(jax.grad(squared), (matrix.data,), (tangent,))[1]
    expected = jax.jvp(jax.grad(squared_dense), (matrix.data,), (tangent,))[1]
    np.testing.assert_allclose(hvp, expected, atol=1e-6)
    assert np.all(np.asarray(expected) != 0)


@pytest.mark.parametrize("fmt", ["dia", "csr"])
@pytest.mark.parametrize("shape", [(0, 3), (3, 0)])
def test_max_min_along_a_full_axis_of_an_empty_matrix(fmt, shape):
    """As scipy: one result per row (or column), none here, when only the other axis is
    empty."""
    twin = scipy.sparse.csr_array(shape, dtype=np.float32)
    matrix = js.CSRMatrix.from_scipy(twin)
    matrix = matrix.todia() if fmt == "dia" else matrix
    axis = 1 if shape[0] == 0 else 0
    for name in ("max", "min"):
        expected = getattr(twin, name)(axis=axis)
        got = getattr(matrix, name)(axis=axis)
        assert got.shape == expected.shape == (0,)
        assert got.dtype == jnp.float32


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_half_and_boolean_values_reduce(fmt):
    """`mean` of bfloat16 values and `js.linalg.norm` of booleans, against numpy."""
    dense = np.array([[1.0, 2.0, 0.0], [0.0, 3.0, 4.0]], np.float32)
    matrix = js.CSRMatrix.fromdense(jnp.asarray(dense, jnp.bfloat16))
    matrix = matrix.todia() if fmt == "dia" else matrix
    mean = matrix.mean()
    assert mean.dtype == jnp.bfloat16
    np.testing.assert_allclose(float(mean), dense.mean(), rtol=1e-2)
    np.testing.assert_allclose(matrix.mean(axis=0).astype(np.float32), dense.mean(0), rtol=1e-2)
    flags = js.CSRMatrix.fromdense(jnp.asarray(dense > 1))
    np.testing.assert_allclose(js.linalg.norm(flags), np.sqrt(3.0), rtol=1e-6)
    np.testing.assert_allclose(js.linalg.norm(flags, 1), 2.0)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_half_precision_sums_accumulate_in_float32(fmt, dtype):
    """Sums along an axis, means and norms of half values add up in float32 as `jnp.sum`
    (in half, 4096 ones would sum to 2048 in float16, 256 in bfloat16)."""
    dense = jnp.ones((2, 4096), dtype)
    matrix = js.CSRMatrix.fromdense(dense)
    matrix = matrix.todia() if fmt == "dia" else matrix
    row_sums = jax.jit(lambda matrix: matrix.sum(axis=1))(matrix)
    assert row_sums.dtype == dtype
    np.testing.assert_array_equal(row_sums, jnp.sum(dense, axis=1))
    np.testing.assert_array_equal(matrix.sum(axis=1), jnp.sum(dense, axis=1))
    np.testing.assert_array_equal(matrix.mean(axis=1), jnp.mean(dense, axis=1))
    np.testing.assert_array_equal(js.linalg.norm(matrix, jnp.inf), jnp.sum(dense, axis=1)[0])
    identity = js.eye(300, dtype=dtype)  # 90000 positions: more than float16 can count
    np.testing.assert_array_equal(identity.mean(), jnp.mean(jnp.eye(300, dtype=dtype)))


def test_count_nonzero_in_the_default_integer_as_scipy():
    rng = np.random.default_rng(4)
    matrix, twin = random_csr(rng, (6, 5), density=0.5, dtype=jnp.float32, repeat_columns=True)
    count = matrix.count_nonzero()
    assert count.dtype == jnp.asarray(twin.count_nonzero()).dtype
    assert int(count) == twin.count_nonzero()


def test_repeated_half_entries_add_up_in_float32():
    """4096 repeats of one float16 entry sum to 4096 (2048 when added in float16) wherever
    repeats are summed: `todense`, `sum_duplicates`, `todia`, `diagonal`, `max`."""
    data = jnp.ones((4096,), jnp.float16)
    matrix = js.CSRMatrix(data, np.zeros(4096, np.int32), np.array([0, 4096], np.int32), (1, 1))
    expected = jnp.sum(data)
    np.testing.assert_array_equal(matrix.todense(), expected.reshape(1, 1))
    np.testing.assert_array_equal(matrix.sum_duplicates().data, expected.reshape(1))
    np.testing.assert_array_equal(matrix.todia().data, expected.reshape(1, 1))
    np.testing.assert_array_equal(matrix.diagonal(), expected.reshape(1))
    np.testing.assert_array_equal(matrix.max(), expected)


def differentiable_matrix(fmt, rng, density: float):
    """A float64 (6, 5) DIA matrix, or a CSR one with repeated positions."""
    if fmt == "dia":
        matrix, _ = random_dia(rng, (6, 5), (-1, 0, 2), jnp.float64, junk_in_ignored_slots=False)
    else:
        matrix, _ = random_csr(rng, (6, 5), density=density, dtype=jnp.float64, repeat_columns=True)
    return matrix


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_reduction_gradients(fmt):
    rng = np.random.default_rng(1)
    matrix = differentiable_matrix(fmt, rng, density=0.5)
    weights = random_values(rng, (5,), jnp.float64)

    @jax.jit
    def loss(data):
        a = matrix.with_data(data)
        return (
            jnp.sum(a.sum(axis=0) * weights)
            + a.trace(1)
            + js.linalg.norm(a, "fro")
            + jnp.sum(a.diagonal(-1) ** 2)
        )

    check_grads(loss, (matrix.data,), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)


INDEXING_CASES = [REDUCTION_CASES[0], REDUCTION_CASES[1], REDUCTION_CASES[5], REDUCTION_CASES[7]]


@pytest.mark.parametrize("case", cases(INDEXING_CASES))
def test_indexing_matches_scipy(case):
    rng = np.random.default_rng(2)
    matrix, twin = case.make(rng, jnp.float64)
    dense = twin.toarray()
    m, n = case.shape

    @jax.jit
    def access(matrix, i, j):
        return matrix[i], matrix[i, :], matrix[:, j], matrix[i, j], matrix[-1, -1]

    row, same_row, column, entry, corner = access(matrix, 2, n - 2)
    np.testing.assert_allclose(row, dense[2], atol=1e-12)
    np.testing.assert_allclose(same_row, dense[2], atol=1e-12)
    np.testing.assert_allclose(column, dense[:, n - 2], atol=1e-12)
    np.testing.assert_allclose(entry, dense[2, n - 2], atol=1e-12)
    np.testing.assert_allclose(corner, dense[-1, -1], atol=1e-12)
    for key in [
        slice(1, m - 1),
        slice(3, None),
        (slice(None), slice(2, n - 1)),
        (slice(1, 4), slice(1, None)),
        slice(5, 2),
    ]:
        part = matrix[key]
        assert part.format == matrix.format
        np.testing.assert_allclose(part.to_scipy().toarray(), dense[key], atol=1e-12)
        if matrix.format == "dia":
            traced = jax.jit(lambda a, key=key: a[key])(matrix)
            np.testing.assert_allclose(traced.to_scipy().toarray(), dense[key], atol=1e-12)
    with pytest.raises(IndexError, match="out of range"):
        matrix[m]
    np.testing.assert_allclose(matrix[::2].todense(), dense[::2], atol=1e-12)


def test_rows_and_entries_read_only_their_row():
    """`A[i]` and `A[i, j]` loop over row `i`'s entries (several steps for a row longer than
    one step's read), whatever the row holds: repeats, unsorted columns, nothing; gradients
    reach `data` in both modes."""
    from jaxsparse._indexing import ROW_CHUNK

    rng = np.random.default_rng(6)
    lengths = [3, 0, 2 * ROW_CHUNK + 5, 4, 0]
    repeating = random_csr(
        rng, (5, 3 * ROW_CHUNK), row_lengths=lengths, dtype=jnp.float64, repeat_columns=True
    )
    shuffled = random_csr(
        rng, (5, 3 * ROW_CHUNK), row_lengths=lengths, dtype=jnp.float64, shuffle_columns=True
    )
    access = jax.jit(lambda a, i, j: (a[i], a[i, j]))
    for matrix, twin in (repeating, shuffled):
        dense = twin.toarray()
        for i in range(5):
            columns = twin.indices[twin.indptr[i] : twin.indptr[i + 1]]
            for j in [*columns[:2], *columns[-2:], 7]:
                for row, entry in (access(matrix, i, j), (matrix[i], matrix[i, int(j)])):
                    np.testing.assert_allclose(row, dense[i], atol=1e-12)
                    np.testing.assert_allclose(entry, dense[i, j], atol=1e-12)
    matrix, twin = repeating
    i, j = 2, int(twin.indices[twin.indptr[2] + 1])
    check_grads(lambda d: (matrix.with_data(d)[i], matrix.with_data(d)[i, j]), (matrix.data,), 2)
    assert "stablehlo.while" in jax.jit(lambda a: a[i]).lower(matrix).as_text()


def test_columns_selected_through_a_column_map(monkeypatch):
    """`A[:, cols]` sends each entry to its places in `cols` (repeats and all) without
    transposing the matrix; the result matches scipy's."""
    rng = np.random.default_rng(7)
    matrix, twin = random_csr(
        rng, (6, 8), density=0.5, dtype=jnp.float64, shuffle_columns=True, repeat_columns=True
    )
    monkeypatch.setattr(type(matrix), "T", property(lambda _: pytest.fail("transposed")))
    for cols in ([5, 0, 5, 7, 2], [3], [], np.arange(8)[::-3]):
        picked, expected = matrix[:, cols], scipy.sparse.csr_array(twin[:, cols])
        expected.sum_duplicates()
        np.testing.assert_allclose(picked.todense(), expected.toarray(), atol=1e-12)
        np.testing.assert_array_equal(picked.sum_duplicates().indices, expected.indices)
        assert picked.shape == (6, len(cols)) and picked.nnz >= expected.nnz


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_boolean_rows_entries_and_diagonals_match_numpy(fmt):
    values = np.array([[1.0, -2.0, 0.0], [0.0, 3.0, 4.0], [5.0, 0.0, -1.0]], np.float32)
    matrix = (js.CSRMatrix if fmt == "csr" else js.DIAMatrix).fromdense(jnp.asarray(values))
    booleans, dense = matrix > 0, values > 0
    np.testing.assert_array_equal(booleans[1], dense[1])
    np.testing.assert_array_equal(booleans[:, 2], dense[:, 2])
    assert booleans[1, 2] == dense[1, 2] and booleans[0, 1] == dense[0, 1]
    np.testing.assert_array_equal(booleans.diagonal(), dense.diagonal())
    np.testing.assert_array_equal(booleans.diagonal(1), dense.diagonal(1))
    assert booleans.trace() == dense.trace()


def test_csr_slices_under_jit_raise_unless_statically_empty():
    matrix, twin = random_csr(np.random.default_rng(3), (6, 5), dtype=jnp.float32)
    with pytest.raises(TypeError, match="slice outside `jit`"):
        jax.jit(lambda a: a[1:3])(matrix)
    # No rows or no columns: nothing to count, as DIA slices.
    empty = jax.jit(lambda a: (a[1:1], a[:, 2:2]))(matrix)
    for got, expected in zip(empty, (twin[1:1], twin[:, 2:2]), strict=True):
        assert got.shape == expected.shape and got.nnz == 0


# The DIA case checks the same derivative and batching rules in the quick suite; CSR's
# case is `slow`, which CI runs.
@pytest.mark.parametrize("fmt", ["dia", pytest.param("csr", marks=pytest.mark.slow)])
def test_vector_norms_differentiate_and_batch(fmt):
    matrix = differentiable_matrix(fmt, np.random.default_rng(8), density=0.6)
    matrix = matrix.with_data(matrix.data + jnp.sign(matrix.data))  # no total near 0
    for ord, axis in ((None, 1), (3, 0), (np.inf, 1), (-np.inf, 0)):

        def norms(data, ord=ord, axis=axis):
            return js.linalg.norm(matrix.with_data(data), ord, axis)

        if ord not in (np.inf, -np.inf):  # a max or min of magnitudes has kinks
            check_grads(norms, (matrix.data,), order=2, modes=("fwd", "rev"))
        stacked = jnp.stack([matrix.data, 2 * matrix.data])
        batched = jax.vmap(norms)(stacked)
        np.testing.assert_allclose(batched[1], 2 * norms(matrix.data), rtol=1e-12)


def test_vector_norm_sum_and_max_arguments_are_checked():
    matrix = js.CSRMatrix.fromdense(jnp.eye(3))
    for ord, axis, message in (
        ("fro", 0, "vector norms must be None or a number"),
        (None, (0, 0), "one axis twice"),
        (None, 2, "`axis` must be None, 0, 1"),
        (None, (0, 1, 0), "`axis` must be None, 0, 1"),
        (-2, None, "`ord` must be None, 'fro'"),
    ):
        with pytest.raises(ValueError, match=message):
            js.linalg.norm(matrix, ord, axis)
    with pytest.raises(TypeError, match=r"sum\(dtype=int32\)` of float"):
        matrix.sum(dtype=jnp.int32)
    with pytest.raises(TypeError, match=r"mean\(dtype=int32\)`"):
        (matrix > 0).mean(dtype=jnp.int32)
    with pytest.raises(TypeError, match="`explicit` must be True or False"):
        matrix.max(explicit=None)
    with pytest.raises(TypeError, match="would drop their imaginary parts"):
        matrix.astype(jnp.complex64).sum(dtype=jnp.float32)
    with pytest.raises(ValueError, match="`ord`=inf picks the largest"):
        js.linalg.norm(js.CSRMatrix.fromdense(jnp.zeros((0, 3))), np.inf, 0)
    counts = (matrix > 0).sum(axis=0, dtype=jnp.int8)
    assert counts.dtype == jnp.int8
    np.testing.assert_array_equal(counts, [1, 1, 1])
    assert matrix.sum(dtype=jnp.float32).dtype == jnp.float32


def test_spectral_norm_is_the_largest_singular_value():
    """`norm(A, 2)` against numpy's, tall and wide (Lanczos on the smaller Gram matrix),
    one column, no rows, repeated CSR positions, complex values; its gradient is
    `Re(u^H dA v)` in both modes, and it maps over a batch."""
    rng = np.random.default_rng(9)
    tall, tall_twin = random_csr(rng, (40, 25), density=0.2, dtype=jnp.float64, repeat_columns=True)
    wide, wide_twin = random_dia(rng, (12, 30), (-3, 0, 4, 9), jnp.complex128)
    column = js.CSRMatrix.fromdense(jnp.asarray(rng.standard_normal((6, 1))))
    empty = js.CSRMatrix.fromdense(jnp.zeros((0, 4)))
    for matrix, dense in (
        (tall, tall_twin.toarray()),
        (wide, wide_twin.toarray()),
        (column, np.asarray(column.todense())),
        (empty, np.zeros((0, 4))),
    ):
        expected = np.linalg.norm(dense, 2) if dense.size else 0.0
        np.testing.assert_allclose(js.linalg.norm(matrix, 2), expected, rtol=1e-12)
    check_grads(lambda d: js.linalg.norm(tall.with_data(d), 2), (tall.data,), 1, ("fwd", "rev"))
    # The transpose's norm is the same; entries whose squares leave float32's range.
    np.testing.assert_allclose(js.linalg.norm(tall, 2, axis=(1, 0)), js.linalg.norm(tall, 2))
    extremes = rng.standard_normal((8, 8))
    for scale in (1e20, 1e-25):
        matrix = js.CSRMatrix.fromdense(jnp.asarray(extremes * scale, jnp.float32))
        expected = np.linalg.norm(np.asarray(matrix.todense(), np.float64), 2)
        np.testing.assert_allclose(js.linalg.norm(matrix, 2), expected, rtol=1e-5)
    batched = jax.vmap(lambda d: js.linalg.norm(wide.with_data(d), 2))(
        jnp.stack([wide.data, 3 * wide.data])
    )
    np.testing.assert_allclose(batched, np.array([1, 3]) * np.linalg.norm(wide_twin.toarray(), 2))
