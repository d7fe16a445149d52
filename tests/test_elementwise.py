"""scipy's elementwise methods (`sin`, `sqrt`, ... `maximum`, `minimum`, `argmax`, `argmin`,
`nanmax`, `nanmin`) against scipy.sparse and dense numpy, in and out of `jit`."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import (
    MATRICES,
    assert_close,
    cases,
    dtype_id,
    ignored_slots,
    random_csr,
    random_dia,
    random_values,
)

import jaxsparse as js
from jaxsparse._elementwise import ZERO_PRESERVING_UFUNCS

UFUNC_CASES = [
    case for case in MATRICES if case.name in ("dia-tall-beyond-matrix", "csr-repeated-columns")
]


def ufuncs(matrix):
    """Every zero-preserving ufunc method the dtype takes, as a dict of matrices."""
    complex_values = jnp.issubdtype(matrix.dtype, jnp.complexfloating)
    return {
        name: getattr(matrix, name)()
        for name, takes_complex in ZERO_PRESERVING_UFUNCS.items()
        if takes_complex or not complex_values
    }


# float32 takes the code of float64 with a looser tolerance: `slow`, which CI runs.
@pytest.mark.parametrize(
    "dtype",
    [pytest.param(jnp.float32, marks=pytest.mark.slow), jnp.float64, jnp.complex128],
    ids=dtype_id,
)
@pytest.mark.parametrize("case", cases(UFUNC_CASES))
def test_zero_preserving_ufuncs_match_scipy(case, dtype):
    rng = np.random.default_rng(3)
    matrix, twin = case.make(rng, dtype)
    assert set(ZERO_PRESERVING_UFUNCS) <= set(dir(scipy.sparse.csr_array))
    for results in (ufuncs(matrix), jax.jit(ufuncs)(matrix)):
        for name, result in results.items():
            with np.errstate(all="ignore"):
                expected = getattr(scipy.sparse.csr_array(twin, copy=True), name)()
            assert result.format == matrix.format and result.dtype == matrix.dtype, name
            assert_close(result.todense(), expected.toarray(), dtype)
            if matrix.format == "dia":
                # The junk in the slots outside the matrix does not reach the result.
                assert not np.any(
                    np.asarray(result.data)[ignored_slots(matrix.offsets, case.shape)]
                )
    if jnp.issubdtype(dtype, jnp.complexfloating):
        for name in ("floor", "ceil", "trunc", "deg2rad", "rad2deg"):
            with pytest.raises(TypeError, match=f"`{name}` is not defined for complex"):
                getattr(matrix, name)()


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_ufunc_gradients_match_dense(fmt):
    """Gradients in the stored values equal those of `jnp.f` of the dense matrix, and the
    DIA slots outside the matrix (negative junk, whose `sqrt` has no derivative) get 0."""
    rng = np.random.default_rng(4)
    if fmt == "dia":
        matrix, _ = random_dia(rng, (7, 5), (-2, 0, 1, 6), jnp.float64)
        outside = ignored_slots(matrix.offsets, matrix.shape)
        data = jnp.where(outside, -1.0, jnp.abs(matrix.data) + 0.1)
    else:
        matrix, _ = random_csr(rng, (7, 5), density=0.4, dtype=jnp.float64, repeat_columns=True)
        data = jnp.abs(matrix.data) + 0.1
    weights = jnp.asarray(random_values(rng, matrix.shape, jnp.float64))
    names = ("sin", "tanh", "expm1", "sqrt", "arcsinh")

    def sparse_loss(values):
        new = matrix.with_data(values)
        return sum(jnp.sum(weights * getattr(new, name)().todense()) for name in names)

    def dense_loss(values):
        dense = matrix.with_data(values).todense()
        return sum(jnp.sum(weights * getattr(jnp, name)(dense)) for name in names)

    expected = jax.grad(dense_loss)(data)
    for grad in (jax.grad(sparse_loss)(data), jax.jit(jax.grad(sparse_loss))(data)):
        np.testing.assert_allclose(grad, expected, rtol=1e-12, atol=1e-12)
    if fmt == "dia":
        assert not np.any(np.asarray(expected)[outside])


def test_elementwise_methods_map_over_a_batch():
    rng = np.random.default_rng(5)
    matrix, twin = random_dia(rng, (6, 6), (-1, 0, 2), jnp.float64)
    batch = matrix.with_data(jnp.stack([matrix.data, -2 * matrix.data]))
    members = np.stack([twin.toarray(), -2 * twin.toarray()])
    result = batch.sin()
    assert result.batch_shape == (2,)
    assert_close(result.batch_member(1).todense(), np.sin(members[1]), jnp.float64)
    assert_close(batch.maximum(-0.1).todense(), np.maximum(members, -0.1), jnp.float64)
    np.testing.assert_array_equal(batch.argmax(axis=1), np.argmax(members, axis=2))


def _dense(value):
    return np.asarray(value.todense() if isinstance(value, js.SparseMatrix) else value)


@pytest.mark.parametrize("fmts", [("dia", "dia"), ("csr", "dia"), ("csr", "csr")])
def test_maximum_minimum_match_scipy(fmts):
    rng = np.random.default_rng(6)
    shape = (9, 7)
    make = {"dia": lambda: random_dia(rng, shape, (-2, 0, 3, 8), jnp.float64)}
    make["csr"] = lambda: random_csr(
        rng, shape, density=0.3, dtype=jnp.float64, repeat_columns=True
    )
    (a, a_twin), (b, b_twin) = make[fmts[0]](), make[fmts[1]]()
    dense = random_values(rng, shape, jnp.float64)
    # Each operation, its operand (scipy's twin) and the result's format (None: dense).
    # `maximum(0, s) == 0` only for s <= 0, `minimum(0, s) == 0` for s >= 0.
    union = "dia" if fmts == ("dia", "dia") else "csr"
    operations = [
        (name, operand, twin_operand, fmt)
        for name, sign in (("maximum", 1), ("minimum", -1))
        for operand, twin_operand, fmt in (
            (b, b_twin, union),
            (-0.5 * sign, -0.5 * sign, a.format),
            (0.5 * sign, 0.5 * sign, None),
            (dense, dense, None),
        )
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.sparse.SparseEfficiencyWarning)
        for name, operand, twin_operand, fmt in operations:
            result = getattr(a, name)(operand)
            expected = getattr(scipy.sparse.csr_array(a_twin), name)(twin_operand)
            sparse = isinstance(result, js.SparseMatrix)
            assert (result.format if sparse else None) == fmt, (name, operand)
            assert_close(_dense(result), _dense_twin(expected), jnp.float64)
    jitted = jax.jit(lambda a, s: (a.maximum(s), a.minimum(0.5), a.maximum(0.0)))(a, -0.5)
    assert isinstance(jitted[0], jax.Array)  # a traced scalar: whether it keeps zeros is unknown
    assert jitted[1].format == jitted[2].format == a.format
    assert_close(jitted[0], np.maximum(a_twin.toarray(), -0.5), jnp.float64)
    assert_close(jitted[1].todense(), np.minimum(a_twin.toarray(), 0.5), jnp.float64)


def _dense_twin(value):
    return value.toarray() if scipy.sparse.issparse(value) else np.asarray(value)


def test_maximum_refuses_complex_and_traced_csr_unions():
    rng = np.random.default_rng(7)
    a, _ = random_csr(rng, (5, 4), density=0.5, dtype=jnp.complex128)
    with pytest.raises(TypeError, match="complex"):
        a.maximum(a)
    with pytest.raises(TypeError, match="complex"):
        a.real.minimum(-1j)
    d, _ = random_dia(rng, (5, 4), (0, 1), jnp.float64)
    assert jax.jit(lambda x, y: x.maximum(y))(d, d).format == "dia"
    with pytest.raises(TypeError, match="traced under `jax.jit`"):
        jax.jit(lambda x, y: x.maximum(y))(a.real, d)


def test_maximum_minimum_of_one_traced_structure_match_scipy():
    """Two matrices on one structure (the same index arrays, as `with_data` keeps them),
    unsorted with a repeated position: under `jit` too, where a union of traced structures
    is refused, the result stays on that structure with each position's totals compared."""
    indptr = np.array([0, 3, 5, 5, 8])
    indices = np.array([2, 0, 2, 1, 1, 3, 0, 3])  # row 0 holds column 2 twice
    rng = np.random.default_rng(3)
    first, second = rng.standard_normal(8), rng.standard_normal(8)

    def both(first, second, indices, indptr):
        a = js.CSRMatrix(first, indices, indptr, (4, 4))
        b = a.with_data(second)
        return a.maximum(b).todense(), a.minimum(b).todense()

    twins = [scipy.sparse.csr_array((v, indices, indptr), shape=(4, 4)) for v in (first, second)]
    expected = (twins[0].maximum(twins[1]).toarray(), twins[0].minimum(twins[1]).toarray())
    for results in (
        both(first, second, indices, indptr),
        jax.jit(both)(first, second, indices, indptr),
    ):
        for result, reference in zip(results, expected, strict=True):
            assert_close(result, reference, jnp.float64)


def arg_matrix():
    """A CSR matrix with every kind of row: empty, an implicit zero before a stored zero,
    full and negative, repeats that sum to zero, and a NaN; with its stored-position mask."""
    rows = [1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4]
    cols = [3, 0, 0, 1, 2, 3, 4, 2, 4, 2, 0, 3, 1]
    data = [0.0, -1.0, -3.0, -1.0, -2.0, -1.0, -5.0, 2.0, 1.5, -2.0, 0.0, np.nan, 5.0]
    order = np.argsort(rows, kind="stable")
    counts = np.bincount(rows, minlength=5)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    matrix = js.CSRMatrix(
        jnp.asarray(np.asarray(data)[order]), np.asarray(cols)[order], indptr, (5, 5)
    )
    stored = np.zeros((5, 5), bool)
    stored[rows, cols] = True
    return matrix, stored


def expected_arg(dense, stored, axis, largest, explicit):
    """numpy's `argmax`/`argmin` of the dense matrix; with `explicit`, of the stored entries
    (0 for a line without any, as scipy)."""
    if explicit:
        dense = np.where(stored, dense, -np.inf if largest else np.inf)
    result = (np.argmax if largest else np.argmin)(dense, axis=axis)
    if explicit and axis is not None:
        result = np.where(stored.any(axis=axis), result, 0)
    return result


ARG_CALLS = [
    (name, axis, explicit)
    for name in ("argmax", "argmin")
    for axis in (None, 0, 1)
    for explicit in (False, True)
]


def arg_extremes(matrix):
    """Every `argmax`/`argmin` call of `ARG_CALLS`, in order (one jitted program)."""
    return [
        getattr(matrix, name)(axis=axis, explicit=explicit) for name, axis, explicit in ARG_CALLS
    ]


def test_argmax_argmin_match_dense():
    rng = np.random.default_rng(8)
    handmade, stored = arg_matrix()
    dia, dia_twin = random_dia(rng, (8, 6), (-1, 0, 2, 7), jnp.float64)
    dia_stored = np.zeros((8, 6), bool)
    dia_stored[dia.tocsr().row_ids(), dia.tocsr().indices] = True
    for matrix, dense, positions in (
        (handmade, np.asarray(handmade.todense()), stored),
        (dia, dia_twin.toarray(), dia_stored),
    ):
        traced = jax.jit(arg_extremes)(matrix)
        for (name, axis, explicit), got in zip(ARG_CALLS, traced, strict=True):
            expected = expected_arg(dense, positions, axis, name == "argmax", explicit)
            np.testing.assert_array_equal(got, expected, err_msg=f"{name} {axis} {explicit}")
            if name == "argmax" and not explicit:  # eager: the structure known on the host
                np.testing.assert_array_equal(getattr(matrix, name)(axis=axis), expected)
    # scipy agrees on the rows without NaN (on a NaN, it returns an implicit zero's column).
    canonical = handmade.to_scipy()
    np.testing.assert_array_equal(handmade.argmin(axis=1)[:4], canonical.argmin(axis=1)[:4])
    with pytest.raises(ValueError, match="stores no entry"):
        js.CSRMatrix.fromdense(jnp.zeros((2, 2))).argmax(explicit=True)


NAN_CALLS = [(name, axis) for name in ("nanmax", "nanmin") for axis in (None, 0, 1)]


def nan_extremes(matrix):
    return [getattr(matrix, name)(axis=axis) for name, axis in NAN_CALLS]


def test_nanmax_nanmin_match_numpy():
    rng = np.random.default_rng(9)
    dense = np.where(rng.random((6, 5)) < 0.5, random_values(rng, (6, 5), jnp.float64), 0.0)
    dense[1, 2] = np.nan
    dense[3] = np.nan  # a row of NaNs only
    dense[:, 4] = np.where(np.arange(6) == 3, np.nan, 1.0)
    matrix = js.CSRMatrix.fromdense(jnp.asarray(dense))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for (name, axis), got in zip(NAN_CALLS, jax.jit(nan_extremes)(matrix), strict=True):
            expected = getattr(np, name)(dense, axis=axis)
            np.testing.assert_array_equal(got, expected, err_msg=f"{name} {axis}")
        np.testing.assert_array_equal(matrix.nanmax(axis=1), np.nanmax(dense, axis=1))
