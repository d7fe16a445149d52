"""The CSR structure of a list of positions (`_csr_positions.py`): the native counting sort
on a CPU (`kernels/native/csr_positions.cc`) and the portable sort give the same arrays,
scipy's structure, one list and a batch; the native sort refuses a position outside the
matrix; `from_coo` and sums of unsorted structures reach it eagerly and under `jit`;
`jax.export` keeps the portable sort."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from jax import export

import jaxsparse as js
from jaxsparse import _coordinates, _csr_positions
from jaxsparse.kernels import _native_library

pytestmark = [
    pytest.mark.on_cpu,
    pytest.mark.skipif(
        not _native_library.AVAILABLE,
        reason=f"native kernels not built: {_native_library.UNAVAILABLE_REASON}",
    ),
]


def listed(seed: int, shape=(9, 7), length=60):
    """Unsorted positions with repeats, an empty row, and a row holding every column."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, shape[0], length)
    rows[rows == 1] = 0
    cols = rng.integers(0, shape[1], length)
    full_row = np.full(shape[1], 2)
    every_col = rng.permutation(shape[1])
    return np.concatenate([rows, full_row]), np.concatenate([cols, every_col])


@functools.partial(jax.jit, static_argnames=("shape", "nnz"))
def _both(rows, cols, *, shape, nnz):
    sizes = dict(num_rows=shape[0], num_cols=shape[1], nnz=nnz)
    return (
        _csr_positions.positions_structure(rows, cols, **sizes),
        _csr_positions._by_sort(rows, cols, **sizes),
    )


@pytest.mark.parametrize("order", ["listed", "sorted"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_native_sort_gives_the_portable_sorts_arrays_and_scipys_structure(index_dtype, order):
    """Slots, columns and row pointers agree bit for bit with `nnz` the positions found,
    more (padding: column n - 1) and fewer (the count still in `indptr[m]`); the structure
    is scipy's `coo -> csr` with repeats summed; a batch of lists is each list's. A list
    already sorted by row, then column (repeats side by side) takes the native one-pass
    numbering."""
    rows, cols = listed(0)
    if order == "sorted":
        by_position = np.lexsort((cols, rows))
        rows, cols = rows[by_position], cols[by_position]
    coo = scipy.sparse.coo_array((np.arange(1.0, rows.size + 1), (rows, cols)), shape=(9, 7))
    expected = coo.tocsr()
    expected.sum_duplicates()
    found = expected.nnz
    arrays = [jnp.asarray(rows, index_dtype), jnp.asarray(cols, index_dtype)]
    assert "jaxsparse_csr_positions" in _both.lower(*arrays, shape=(9, 7), nnz=found).as_text()
    for nnz in (found, found + 3, found - 2):
        native, sorted_ = _both(*arrays, shape=(9, 7), nnz=nnz)
        for got, want in zip(native, sorted_, strict=True):
            assert got.dtype == index_dtype
            np.testing.assert_array_equal(got, want)
        assert int(native[2][-1]) == found
        kept = min(nnz, found)
        np.testing.assert_array_equal(native[1][:kept], expected.indices[:kept])
        np.testing.assert_array_equal(native[1][kept:], 6)
    slots, indices, indptr = _both(*arrays, shape=(9, 7), nnz=found)[0]
    np.testing.assert_array_equal(indptr, expected.indptr)
    summed = np.zeros(found)
    np.add.at(summed, np.asarray(slots), coo.data)
    np.testing.assert_array_equal(summed, expected.data)
    twice = [jnp.stack([array, array[::-1]]) for array in arrays]
    batched = jax.vmap(
        functools.partial(_csr_positions.positions_structure, num_rows=9, num_cols=7, nnz=found)
    )
    reversed_ = _both(*(array[::-1] for array in arrays), shape=(9, 7), nnz=found)[0]
    for got, first, second in zip(
        batched(*twice), (slots, indices, indptr), reversed_, strict=True
    ):
        np.testing.assert_array_equal(got, jnp.stack([first, second]))


def test_an_empty_list_gives_padding_alone():
    rows = jnp.zeros((0,), jnp.int32)
    native, sorted_ = _both(rows, rows, shape=(3, 4), nnz=2)
    for got, want in zip(native, sorted_, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(native[1], [3, 3])
    np.testing.assert_array_equal(native[2], [0, 0, 0, 0])


@pytest.mark.parametrize("where", ["row", "col", "negative"])
def test_native_sort_refuses_a_position_outside_the_matrix(where):
    """The call fails naming the position, before writing anything (never an access
    outside the arrays)."""
    rows, cols = (np.array(index, np.int32) for index in listed(1))
    if where == "row":
        rows[5] = 9
    elif where == "col":
        cols[5] = 7
    else:
        rows[5] = -1
    sort = jax.jit(
        functools.partial(_csr_positions.positions_structure, num_rows=9, num_cols=7, nnz=30)
    )
    with pytest.raises(Exception, match=r"position 5 of the list, .* is out of range"):
        jax.block_until_ready(sort(rows, cols))


def test_export_keeps_the_portable_sort():
    rows, cols = (jnp.asarray(index, jnp.int32) for index in listed(2))
    sort = jax.jit(
        functools.partial(_csr_positions.positions_structure, num_rows=9, num_cols=7, nnz=40)
    )
    exported = export.export(sort)(rows, cols)
    assert "stablehlo.custom_call" not in exported.mlir_module()
    for got, want in zip(exported.call(rows, cols), sort(rows, cols), strict=True):
        np.testing.assert_array_equal(got, want)


def _assert_same_matrix(got, want):
    for name in ("data", "indices", "indptr"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize("nnz", [None, "found", "more"])
def test_from_coo_eagerly_is_the_host_paths_matrix(nnz, monkeypatch):
    """Eager `from_coo` of a long list takes the native sort and builds the matrix numpy's
    host path builds, bit for bit; too small an `nnz` is refused. A short list sorts on
    the host."""
    rows, cols = listed(3)
    assert not _coordinates._lists_natively(rows, (9, 7), None)
    monkeypatch.setattr(_coordinates, "NATIVE_LIST_MIN", rows.size)
    values = jnp.asarray(np.random.default_rng(3).standard_normal(rows.size), jnp.float32)
    found = scipy.sparse.coo_array((np.ones(rows.size), (rows, cols)), shape=(9, 7)).tocsr().nnz
    nnz = {None: None, "found": found, "more": found + 4}[nnz]
    assert _coordinates._lists_natively(rows, (9, 7), nnz)
    native = js.CSRMatrix.from_coo(values, rows, cols, (9, 7), nnz=nnz)
    monkeypatch.setattr(_coordinates, "_lists_natively", lambda *args: False)
    host = js.CSRMatrix.from_coo(values, rows, cols, (9, 7), nnz=nnz)
    _assert_same_matrix(native, host)
    with pytest.raises(ValueError, match="smaller than the result's"):
        js.CSRMatrix.from_coo(values, rows, cols, (9, 7), nnz=found - 1)


def test_from_coo_under_jit_sorts_natively_and_matches_scipy():
    """Traced positions: the compiled program runs the native sort, not XLA's; the matrix
    is scipy's, padding included; too small an `nnz` raises at run time; gradients in the
    values are the summed positions' (a gather)."""
    rows, cols = listed(4)
    values = np.random.default_rng(4).standard_normal(rows.size)
    expected = scipy.sparse.coo_array((values, (rows, cols)), shape=(9, 7)).tocsr()
    expected.sum_duplicates()

    def build(values, rows, cols, nnz):
        return js.CSRMatrix.from_coo(values, rows, cols, (9, 7), nnz=nnz)

    arguments = (jnp.asarray(values, jnp.float32), jnp.asarray(rows), jnp.asarray(cols))
    built = jax.jit(build, static_argnums=3)
    text = built.lower(*arguments, expected.nnz).compile().as_text()
    assert "jaxsparse_csr_positions" in text and " sort(" not in text
    matrix = built(*arguments, expected.nnz + 2)
    np.testing.assert_allclose(matrix.todense(), expected.toarray(), rtol=1e-6)
    np.testing.assert_array_equal(matrix.indices[: expected.nnz], expected.indices)
    assert int(matrix.indptr[-1]) == expected.nnz + 2
    with pytest.raises(Exception, match="smaller than the number of entries"):
        built(*arguments, expected.nnz - 1).data.block_until_ready()
    weights = jnp.asarray(np.random.default_rng(5).standard_normal((9, 7)), jnp.float32)
    gradient = jax.grad(
        lambda v: jnp.sum(built(v, *arguments[1:], expected.nnz).todense() * weights)
    )
    np.testing.assert_allclose(gradient(arguments[0]), weights[rows, cols], rtol=1e-6)


def test_sum_of_unsorted_structures_under_jit_matches_scipy():
    """`A + B` under `jit` with structures whose columns do not rise takes the sort of the
    listed positions (`lax.cond`'s other branch): scipy's sum."""
    first = scipy.sparse.random_array((9, 7), density=0.4, format="csr", rng=0)
    second = scipy.sparse.random_array((9, 7), density=0.4, format="csr", rng=1)
    a, b = js.CSRMatrix.from_scipy(first), js.CSRMatrix.from_scipy(second)
    rows = list(zip(second.indptr[:-1], second.indptr[1:], strict=True))
    assert max(end - start for start, end in rows) > 1  # some row's columns then fall
    reversed_b = js.CSRMatrix(
        np.concatenate([second.data[start:end][::-1] for start, end in rows]),
        np.concatenate([second.indices[start:end][::-1] for start, end in rows]),
        second.indptr,
        b.shape,
    )
    nnz = (first + second).nnz
    summed = jax.jit(lambda a, b: js.add(a, b, nnz=nnz))(a, reversed_b)
    np.testing.assert_allclose(summed.todense(), (first + second).toarray(), rtol=1e-6)
    np.testing.assert_array_equal(summed.indices, (first + second).tocsr().indices)


@pytest.mark.parametrize("backend", ["auto", "xla"])
def test_from_coo_under_jit_refuses_a_position_outside_the_matrix(backend, monkeypatch):
    """Traced positions outside the matrix raise at run time with the check naming the
    argument, on every backend: the native sort gets them moved into the matrix and never
    fails first."""
    monkeypatch.setenv("JAXSPARSE_BACKEND", backend)
    shape = (5, 4) if backend == "auto" else (4, 5)  # a program of its own per backend
    build = jax.jit(lambda d, r, c: js.CSRMatrix.from_coo(d, r, c, shape, nnz=3))
    for rows, cols, name in (([0, shape[0]], [0, 1], "row"), ([0, 1], [-1, 0], "col")):
        with pytest.raises(Exception, match=f"`{name}` out of range"):
            build(jnp.ones(2), jnp.asarray(rows), jnp.asarray(cols)).data.block_until_ready()


@pytest.mark.parametrize("backend", ["auto", "xla"])
def test_an_invalid_structure_summed_under_jit_is_nan(backend, monkeypatch):
    """`sum_duplicates` of an invalid traced structure (a column outside the matrix) reads
    its values as NaN on every backend, as docs/backends.md says, rather than failing in
    the native sort."""
    monkeypatch.setenv("JAXSPARSE_BACKEND", backend)
    shape = (3, 4) if backend == "auto" else (4, 3)
    summed = jax.jit(lambda d, i, p: js.CSRMatrix(d, i, p, shape).sum_duplicates(nnz=3).data)
    indices = jnp.asarray([0, 9, 1], jnp.int32)
    indptr = jnp.asarray([0, 2, 2, 3] + [3] * (shape[0] - 3), jnp.int32)
    values = summed(jnp.ones(3), indices, indptr)
    assert np.isnan(np.asarray(values)).all()


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_long_rows_and_pieces_over_the_threads_give_the_portable_sorts_arrays(index_dtype):
    """Rows far longer than an insertion sort takes (a merge sort each), lists long enough
    to be cut into pieces over XLA's threads, and a batch of them run side by side: the
    same arrays as XLA's sort."""
    rng = np.random.default_rng(6)
    shape, length = (40, 3000), 150_000
    lists = [
        [jnp.asarray(rng.integers(0, size, length), index_dtype) for size in shape]
        for _ in range(3)
    ]
    found = max(
        scipy.sparse.coo_array((np.ones(length), tuple(map(np.asarray, pair))), shape).tocsr().nnz
        for pair in lists
    )
    native, sorted_ = _both(*lists[0], shape=shape, nnz=found)
    for got, want in zip(native, sorted_, strict=True):
        np.testing.assert_array_equal(got, want)
    batched = jax.jit(
        jax.vmap(
            functools.partial(
                _csr_positions.positions_structure, num_rows=40, num_cols=3000, nnz=found
            )
        )
    )
    stacked = [jnp.stack([pair[axis] for pair in lists]) for axis in (0, 1)]
    for member, pair in enumerate(lists):
        want = _both(*pair, shape=shape, nnz=found)[1]
        for got, expected in zip(batched(*stacked), want, strict=True):
            np.testing.assert_array_equal(got[member], expected)
