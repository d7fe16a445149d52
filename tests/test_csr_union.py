"""The structure of `A + B` for canonical CSR structures (`_csr_union.py`): the native row
merge on a CPU (`kernels/native/csr_union.cc`) and the portable search give the same
arrays, eagerly and under `jit`, one pair and a batch; the native merge refuses an invalid
structure; `jax.export` keeps the search."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from jax import export

import jaxsparse as js
from jaxsparse import _arithmetic, _csr_union
from jaxsparse.kernels import _native_library

pytestmark = [
    pytest.mark.on_cpu,
    pytest.mark.skipif(
        not _native_library.AVAILABLE,
        reason=f"native kernels not built: {_native_library.UNAVAILABLE_REASON}",
    ),
]


def canonical_pair(seed: int, shape=(9, 7)):
    """Two scipy CSR matrices with sorted columns, empty and full rows among them."""
    rng = np.random.default_rng(seed)
    pair = []
    for density in (0.3, 0.5):
        matrix = scipy.sparse.random_array(shape, density=density, format="csr", rng=rng)
        matrix = matrix.tolil()
        matrix[1, :] = 0
        matrix[2, :] = rng.random(shape[1]) + 1
        matrix = matrix.tocsr()
        matrix.sort_indices()
        pair.append(matrix)
    return pair


@functools.partial(jax.jit, static_argnames=("num_cols", "nnz"))
def _both(a_indices, a_indptr, b_indices, b_indptr, *, num_cols, nnz):
    arrays = (a_indices, a_indptr, b_indices, b_indptr)
    return (
        _csr_union.union_structure(*arrays, num_cols=num_cols, nnz=nnz),
        _csr_union._union_by_search(*arrays, num_cols=num_cols, nnz=nnz),
    )


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_native_merge_gives_the_searchs_arrays(index_dtype):
    """The slots, columns and row pointers of both implementations agree bit for bit with
    `nnz` the positions found, more (padding) and fewer; a batch of pairs is each pair's."""
    first, second = canonical_pair(0)
    found = (first + second).nnz
    arrays = [
        jnp.asarray(array, index_dtype)
        for matrix in (first, second)
        for array in (matrix.indices, matrix.indptr)
    ]
    assert "jaxsparse_csr_union" in _both.lower(*arrays, num_cols=7, nnz=found).as_text()
    for nnz in (found, found + 3, found - 2):
        native, searched = _both(*arrays, num_cols=7, nnz=nnz)
        for got, want in zip(native, searched, strict=True):
            assert got.dtype == index_dtype
            np.testing.assert_array_equal(got, want)
        assert int(native[2][-1]) == found
    summed = (first + second).tocsr()
    native, _ = _both(*arrays, num_cols=7, nnz=found)
    np.testing.assert_array_equal(native[1], summed.indices)
    np.testing.assert_array_equal(native[2], summed.indptr)
    twice = [jnp.stack([array, array]) for array in arrays]
    batched = jax.vmap(functools.partial(_csr_union.union_structure, num_cols=7, nnz=found))
    for got, want in zip(batched(*twice), native, strict=True):
        np.testing.assert_array_equal(got, jnp.stack([want, want]))


def test_eager_sum_of_canonical_structures_is_the_host_paths():
    """Eager `A + B` and `A - B` of canonical structures merge natively into the matrix the
    host path builds, bit for bit, with and without `nnz`; too small an `nnz` is refused."""
    first, second = canonical_pair(1)
    a, b = js.CSRMatrix.from_scipy(first), js.CSRMatrix.from_scipy(second)
    assert _arithmetic._merges_natively(a, b)
    found = (first + second).nnz
    for sign, nnz in ((1, None), (-1, None), (1, found + 2)):
        merged = js.add(a, b, nnz=nnz) if sign > 0 else js.subtract(a, b, nnz=nnz)
        host = _arithmetic._add_entries(a, b, sign=sign, dtype=a.dtype, nnz=nnz, operator="+")
        for name in ("data", "indices", "indptr"):
            got, want = getattr(merged, name), getattr(host, name)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want, err_msg=name)
    with pytest.raises(ValueError, match="smaller than the result's"):
        js.add(a, b, nnz=found - 1)


@pytest.mark.parametrize(
    "fault, message",
    [
        ("column", r"CSR sum: a column index lies outside \[0, 7\)"),
        ("indptr", r"CSR sum: the second indptr must be a non-decreasing sequence"),
    ],
)
def test_native_merge_refuses_an_invalid_structure(fault, message):
    """Under `jit` the native merge fails the call with an error naming the fault, as the
    native products do (never an access outside the arrays)."""
    first, second = canonical_pair(2)
    indices, indptr = second.indices.copy(), second.indptr.copy()
    if fault == "column":
        indices[-1] = 7
    else:
        indptr[3], indptr[4] = indptr[4], indptr[3]
    a = js.CSRMatrix.from_scipy(first)
    add = jax.jit(lambda a, d, i, p: js.add(a, js.CSRMatrix(d, i, p, a.shape), nnz=40))
    with pytest.raises(Exception, match=message):
        add(a, second.data, indices, indptr).data.block_until_ready()


def test_export_keeps_the_search():
    """`jax.export` lowers the portable search, not the native custom call, and the exported
    program gives the native merge's arrays."""
    first, second = canonical_pair(3)
    arrays = [
        jnp.asarray(m.indices if i % 2 == 0 else m.indptr)
        for i, m in enumerate((first, first, second, second))
    ]
    nnz = (first + second).nnz
    union = jax.jit(functools.partial(_csr_union.union_structure, num_cols=7, nnz=nnz))
    exported = export.export(union)(*arrays)
    assert "stablehlo.custom_call" not in exported.mlir_module()
    for got, want in zip(exported.call(*arrays), union(*arrays), strict=True):
        np.testing.assert_array_equal(got, want)
