"""Interop: `jax.experimental.sparse` BCOO/BCSR both ways, the CSR clean-ups
(`sum_duplicates`, `sort_indices`, `eliminate_zeros`), `dot`, `asformat`, `tocsr`/`todia`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from helpers import MATRICES, assert_close, cases, random_csr, random_dia
from jax.experimental import sparse as jsparse

import jaxsparse as js

INTEROP_CASES = [
    case
    for case in MATRICES
    if case.name
    in ("dia-tall-beyond-matrix", "dia-all-outside", "csr-empty-rows", "csr-repeated-columns")
]


@pytest.mark.parametrize("case", cases(INTEROP_CASES))
def test_bcoo_and_bcsr_round_trips(case):
    rng = np.random.default_rng(0)
    matrix, twin = case.make(rng, jnp.float32)

    @jax.jit
    def round_trips(matrix):
        bcoo, bcsr = matrix.to_bcoo(), matrix.to_bcsr()
        return bcoo, bcsr, js.from_bcoo(bcoo), js.CSRMatrix.from_bcsr(bcsr)

    bcoo, bcsr, from_bcoo, from_bcsr = round_trips(matrix)
    assert isinstance(bcoo, jsparse.BCOO) and isinstance(bcsr, jsparse.BCSR)
    assert bcoo.nse == matrix.nnz and bcsr.nse == matrix.nnz
    for result in (bcoo.todense(), bcsr.todense(), from_bcoo.todense(), from_bcsr.todense()):
        assert_close(result, twin.toarray(), jnp.float32)
    assert isinstance(from_bcoo, js.CSRMatrix) and isinstance(from_bcsr, js.CSRMatrix)


def test_from_jax_experimental_sparse_own_matrices():
    dense = jnp.asarray(np.random.default_rng(1).standard_normal((5, 6)) > 0.5, jnp.float32)
    padded = jsparse.BCOO.fromdense(dense, nse=int(dense.sum()) + 3)  # padding entries
    assert np.array_equal(js.from_bcoo(padded).todense(), dense)
    assert np.array_equal(js.from_bcsr(jsparse.BCSR.fromdense(dense)).todense(), dense)
    with pytest.raises(ValueError, match="no batch or dense dimensions"):
        batched = (jnp.ones((2, 1)), jnp.zeros((2, 1, 2), jnp.int32))
        js.from_bcoo(jsparse.BCOO(batched, shape=(2, 3, 3)))
    with pytest.raises(TypeError, match="must be a BCOO"):
        js.from_bcoo(dense)


def test_from_bcsr_with_padding_slots():
    dense = jnp.array([[1.0, 0, 2], [0, 0, 3], [4, 5, 0]])
    padded = jsparse.BCSR.fromdense(dense, nse=7)
    x = jnp.arange(1.0, 4.0)
    for matrix in (js.from_bcsr(padded), jax.jit(js.from_bcsr)(padded)):
        matrix.check()
        np.testing.assert_array_equal(matrix.todense(), dense)
        np.testing.assert_allclose(matrix @ x, np.asarray(dense) @ np.asarray(x))
    with pytest.raises(ValueError, match="nse=2"):
        empty = (jnp.zeros(2), jnp.zeros(2, jnp.int32), jnp.zeros(1, jnp.int32))
        js.from_bcsr(jsparse.BCSR(empty, shape=(0, 3)))


def test_boolean_bcoo_bcsr_and_triangles_under_jit_stay_boolean():
    """Boolean values survive the conversions and `js.tril` under `jit` that fill padding
    slots with zeros (a literal 0 would make them integers)."""
    flags = jnp.asarray(np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0]], bool))
    coo = jsparse.BCOO.fromdense(flags.astype(jnp.float32), nse=6)  # one padding entry
    csr = jsparse.BCSR.fromdense(flags.astype(jnp.float32), nse=6)
    converted = [
        js.from_bcoo(jsparse.BCOO((coo.data > 0, coo.indices), shape=coo.shape)),
        js.from_bcsr(jsparse.BCSR((csr.data > 0, csr.indices, csr.indptr), shape=csr.shape)),
    ]
    for matrix in converted:
        assert matrix.dtype == jnp.bool_
        np.testing.assert_array_equal(matrix.todense(), flags)
    lower = jax.jit(js.tril)(js.CSRMatrix.fromdense(flags))
    assert lower.dtype == jnp.bool_
    np.testing.assert_array_equal(lower.todense(), jnp.tril(flags))


def test_sum_duplicates_and_sort_indices_match_scipy():
    rng = np.random.default_rng(2)
    matrix, twin = random_csr(
        rng, (9, 8), density=0.5, dtype=jnp.float64, shuffle_columns=True, repeat_columns=True
    )
    canonical = twin.copy()
    canonical.sum_duplicates()
    summed = matrix.sum_duplicates()
    np.testing.assert_array_equal(summed.indptr, canonical.indptr)
    np.testing.assert_array_equal(summed.indices, canonical.indices)
    np.testing.assert_allclose(summed.data, canonical.data, atol=1e-12)
    traced = jax.jit(lambda a: a.sum_duplicates(nnz=summed.nnz))(matrix)
    np.testing.assert_array_equal(traced.indices, summed.indices)
    with pytest.raises(TypeError, match="Pass a static `nnz`"):
        jax.jit(lambda a: a.sum_duplicates())(matrix)
    with pytest.raises(ValueError, match="`nnz`=0 is smaller"):
        jax.jit(lambda a: a.sum_duplicates(nnz=0).todense())(matrix)

    ordered = jax.jit(lambda a: a.sort_indices())(matrix)
    assert ordered.nnz == matrix.nnz
    assert ordered.to_scipy().has_sorted_indices
    np.testing.assert_allclose(ordered.to_scipy().toarray(), twin.toarray(), atol=1e-12)
    # A structure closed over (known on the host) with values traced.
    values = jax.jit(lambda data: matrix.with_data(data).sort_indices().data)(matrix.data)
    np.testing.assert_array_equal(values, ordered.data)


def test_to_scipy_gives_arrays_of_its_own():
    """scipy's in-place operations work on `to_scipy()`'s result (as on any scipy matrix)
    and leave the jaxsparse matrix as it was."""
    rng = np.random.default_rng(4)
    for fmt in ("csr", "dia"):
        matrix = js.CSRMatrix.from_scipy(random_csr(rng, (6, 6), density=0.5)[1])
        matrix = matrix if fmt == "csr" else matrix.todia()
        before = np.asarray(matrix.todense())
        host = matrix.to_scipy()
        host *= 2
        host.setdiag(7.0)
        expected = 2 * before
        np.fill_diagonal(expected, 7.0)
        np.testing.assert_array_equal(host.toarray(), expected)
        np.testing.assert_array_equal(np.asarray(matrix.todense()), before)


def test_host_structure_helpers_match_numpy():
    # The sort-based stand-ins for numpy's values-only `np.unique` and `np.isin`, behind
    # every structure computed on the host.
    from jaxsparse._coordinates import host_isin, sorted_unique, unique_positions

    rng = np.random.default_rng(4)
    # The last keys leave no room for their index in the low bits: the `argsort` path.
    large = np.array([2**62, 3, 2**62, -1, 0])
    some = rng.integers(0, 50, 200)
    for keys in (some, np.sort(some), np.zeros(0, np.int64), np.array([7]), large):
        np.testing.assert_array_equal(sorted_unique(keys), np.unique(keys))
        unique, inverse = unique_positions(keys)
        np.testing.assert_array_equal(unique, np.unique(keys))
        np.testing.assert_array_equal(unique[inverse], keys)
        queries = rng.integers(-5, 60, 100)
        np.testing.assert_array_equal(host_isin(queries, keys), np.isin(queries, keys))


def test_eliminate_zeros():
    rng = np.random.default_rng(3)
    matrix, twin = random_csr(rng, (7, 6), density=0.5, dtype=jnp.float32)
    zeroed = matrix.with_data(jnp.where(jnp.arange(matrix.nnz) % 3 == 0, 0, matrix.data))
    expected = zeroed.to_scipy()
    expected.eliminate_zeros()
    result = zeroed.eliminate_zeros()
    assert result.nnz == expected.nnz < matrix.nnz
    np.testing.assert_array_equal(result.indices, expected.indices)
    np.testing.assert_array_equal(result.to_scipy().toarray(), expected.toarray())
    with pytest.raises(TypeError, match="call it outside `jit`"):
        jax.jit(lambda a: a.eliminate_zeros())(zeroed)
    with pytest.raises(TypeError, match="`jax.grad`.*`with_data`"):
        jax.grad(lambda data: zeroed.with_data(data).eliminate_zeros().sum())(zeroed.data)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.bool_])
def test_csr_todia_keeps_dtype(dtype):
    dense = np.array([[1.0, 2.0, 0.0], [0.0, 3.0, 4.0]], np.float32)
    if dtype == jnp.bool_:
        csr = js.CSRMatrix.fromdense(jnp.asarray(dense)) > 1
    else:
        csr = js.CSRMatrix.fromdense(jnp.asarray(dense, dtype))
    for dia in (csr.todia(), csr.asformat("dia")):
        assert dia.dtype == dtype
        np.testing.assert_array_equal(np.asarray(dia.todense()), np.asarray(csr.todense()))


def test_csr_todia_under_jit_and_grad_with_a_concrete_structure():
    rng = np.random.default_rng(12)
    csr, twin = random_csr(rng, (5, 7), density=0.4, dtype=jnp.float64, repeat_columns=True)
    expected = scipy.sparse.dia_array(twin)
    dia = jax.jit(lambda values: csr.with_data(values).todia())(csr.data)
    assert dia.offsets == tuple(expected.offsets.tolist())
    np.testing.assert_allclose(dia.todense(), twin.toarray(), atol=1e-12)
    weights = rng.standard_normal((5, 7))

    def loss(values):
        return jnp.sum(weights * csr.with_data(values).todia().todense())

    rows = np.repeat(np.arange(5), np.diff(twin.indptr))
    np.testing.assert_allclose(jax.grad(loss)(csr.data), weights[rows, twin.indices], atol=1e-12)
    with pytest.raises(TypeError, match="`indices` and `indptr` are traced"):
        jax.jit(lambda a: a.todia())(csr)


def test_dot_asformat_and_conversions():
    rng = np.random.default_rng(4)
    dia, twin = random_dia(rng, (6, 6), (-1, 0, 2), jnp.float64)
    x = rng.standard_normal(6)
    np.testing.assert_allclose(dia.dot(x), twin @ x, atol=1e-12)
    csr = dia.asformat("csr")
    assert isinstance(csr, js.CSRMatrix) and csr.asformat("csr") is csr
    back = csr.asformat("dia")
    assert isinstance(back, js.DIAMatrix) and set(back.offsets) == {-1, 0, 2}
    np.testing.assert_allclose(back.to_scipy().toarray(), twin.toarray(), atol=1e-12)
    assert isinstance(dia.dot(csr), js.CSRMatrix)
    np.testing.assert_allclose(
        dia.dot(csr).to_scipy().toarray(), (twin @ twin).toarray(), atol=1e-12
    )
    with pytest.raises(ValueError, match="`format` must be"):
        dia.asformat("coo")
    with pytest.raises(TypeError, match="concrete"):
        jax.jit(lambda a: a.todia())(csr)
    assert isinstance(scipy.sparse.csr_array(csr.to_scipy()), scipy.sparse.csr_array)
