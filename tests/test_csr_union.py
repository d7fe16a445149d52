"""The structure of `A + B` for canonical CSR structures (`_csr_union.py`): the native row
merge on a CPU (`kernels/native/csr_union.cc`) and the portable search give the same
arrays, eagerly and under `jit`, one pair and a batch, whose sources give the sum's values
(`_csr_sum.py`) with their derivatives; the native merge refuses an invalid structure;
`jax.export` keeps the search."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from jax import export
from jax.test_util import check_grads

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
    """The sources, columns and row pointers of both implementations agree bit for bit with
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
        assert int(native[3][-1]) == found
    summed = (first + second).tocsr()
    native, _ = _both(*arrays, num_cols=7, nnz=found)
    np.testing.assert_array_equal(native[2], summed.indices)
    np.testing.assert_array_equal(native[3], summed.indptr)
    twice = [jnp.stack([array, array]) for array in arrays]
    batched = jax.vmap(functools.partial(_csr_union.union_structure, num_cols=7, nnz=found))
    for got, want in zip(batched(*twice), native, strict=True):
        np.testing.assert_array_equal(got, jnp.stack([want, want]))


def structure_pairs(seed: int):
    """Pairs of scipy CSR matrices of shape (12, 9) with sorted columns, by name: random
    with empty rows, disjoint columns, the same positions, one row each."""
    rng = np.random.default_rng(seed)

    def random(density, keep=lambda rows, cols: np.ones_like(rows, bool)):
        matrix = scipy.sparse.random_array((12, 9), density=density, format="coo", rng=rng)
        matrix.data += 1  # no explicit zeros for scipy to drop
        kept = keep(matrix.row, matrix.col) & (matrix.row % 4 != 1)  # empty rows
        return scipy.sparse.csr_array(
            (matrix.data[kept], (matrix.row[kept], matrix.col[kept])), shape=(12, 9)
        )

    same = random(0.4)
    last_row, first_row = random(0.9, lambda r, c: r == 11), random(0.9, lambda r, c: r == 0)
    pairs = {
        "random": (random(0.3), random(0.5)),
        "disjoint": (random(0.5, lambda r, c: c % 2 == 0), random(0.5, lambda r, c: c % 2 == 1)),
        "same positions": (same, same * 3),
        "one row each": (last_row, first_row),
    }
    for pair in pairs.values():
        for matrix in pair:
            matrix.sort_indices()
    return pairs


def from_sources(first, second, a_source, b_source):
    """The sum's values from its sources (a sentinel reads zero), on the host."""
    a_source, b_source = np.asarray(a_source), np.asarray(b_source)
    return np.append(first.data, 0)[a_source] + np.append(second.data, 0)[b_source]


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("name", ["random", "disjoint", "same positions", "one row each"])
def test_sources_give_the_sum_on_any_layout(name, index_dtype):
    """On every layout both implementations give the same arrays, and the sources pick
    each slot's entries: the values they give are scipy's sum, the padding slots hold
    neither matrix's entry; a batch of two different pairs is each pair's."""
    first, second = structure_pairs(5)[name]
    summed = (first + second).tocsr()
    summed.sort_indices()
    found = summed.nnz

    def arrays(pair):
        return [jnp.asarray(a, index_dtype) for m in pair for a in (m.indices, m.indptr)]

    for nnz in (found, found + 3, found - 2):
        native, searched = _both(*arrays((first, second)), num_cols=9, nnz=nnz)
        for got, want in zip(native, searched, strict=True):
            np.testing.assert_array_equal(got, want)
        a_source, b_source, indices, indptr = native
        kept = min(nnz, found)
        np.testing.assert_array_equal(indptr, summed.indptr)
        np.testing.assert_array_equal(indices[:kept], summed.indices[:kept])
        np.testing.assert_array_equal(indices[kept:], 8)
        values = from_sources(first, second, a_source, b_source)
        np.testing.assert_allclose(values[:kept], summed.data[:kept], rtol=1e-15)
        np.testing.assert_array_equal(a_source[kept:], first.nnz)
        np.testing.assert_array_equal(b_source[kept:], second.nnz)
    flipped = tuple(scipy.sparse.csr_array(m[::-1]) for m in (first, second))
    for matrix in flipped:
        matrix.sort_indices()
    batch = [jnp.stack(pair) for pair in zip(arrays((first, second)), arrays(flipped), strict=True)]
    union = jax.vmap(functools.partial(_csr_union.union_structure, num_cols=9, nnz=found))
    for member, pair in enumerate(((first, second), flipped)):
        alone = _both(*arrays(pair), num_cols=9, nnz=found)[0]
        for got, want in zip(union(*batch), alone, strict=True):
            np.testing.assert_array_equal(got[member], want)


@pytest.mark.parametrize(
    "dtype", [jnp.bool_, jnp.float16, jnp.bfloat16, jnp.float32, jnp.complex64]
)
def test_sum_from_sources_is_the_sorts_in_every_dtype(dtype):
    """The sum of canonical structures, eagerly and under `jit` with a traced structure,
    is the matrix the sort of both matrices' entries builds, bit for bit: half precision
    added in float32, booleans by `or`, complex and differences alike."""
    rng = np.random.default_rng(8)
    first, second = structure_pairs(6)["random"]

    def values(size):
        if dtype == jnp.bool_:
            return jnp.asarray(rng.random(size) < 0.5)
        normal = rng.normal(size=(2, size))
        return jnp.asarray(normal[0] + 1j * normal[1] if dtype == jnp.complex64 else normal[0])

    a, b = (
        js.CSRMatrix(values(m.nnz).astype(dtype), m.indices, m.indptr, m.shape)
        for m in (first, second)
    )
    found = (first + second).nnz
    signs = (1,) if dtype == jnp.bool_ else (1, -1)
    for sign, nnz in ((s, n) for s in signs for n in (None, found + 2)):
        operation = js.add if sign > 0 else js.subtract
        sort = _arithmetic._add_entries(a, b, sign=sign, dtype=a.dtype, nnz=nnz, operator="+")
        traced = jax.jit(lambda a, b, f=operation, n=nnz or found: f(a, b, nnz=n))(a, b)
        for got in (operation(a, b, nnz=nnz), traced):
            for name in ("data", "indices", "indptr"):
                assert getattr(got, name).dtype == getattr(sort, name).dtype, name
                np.testing.assert_array_equal(getattr(got, name), getattr(sort, name), name)


# complex values take the real ones' gathers: `slow`.
@pytest.mark.parametrize(
    "dtype", [jnp.float64, pytest.param(jnp.complex128, marks=pytest.mark.slow)]
)
def test_sum_from_sources_differentiates(dtype):
    """Derivatives of `A - B` in both matrices' values, forward and reverse (to second
    order for real values), through the gathers: eagerly known structures and traced ones
    alike."""
    rng = np.random.default_rng(9)
    first, second = structure_pairs(7)["random"]
    a, b = (js.CSRMatrix.from_scipy(m).astype(dtype) for m in (first, second))
    weights = jnp.asarray(rng.normal(size=first.shape)).astype(dtype)
    found = (first + second).nnz
    traced = jax.jit(lambda a, b: js.subtract(a, b, nnz=found + 2))
    for subtract in (js.subtract, traced):

        def loss(a_data, b_data, subtract=subtract):
            total = subtract(a.with_data(a_data), b.with_data(b_data)).todense()
            return jnp.sum(jnp.abs(total * weights) ** 2)

        # The loss is quadratic: second order once, in the real dtype (its gathers are the
        # same for complex values).
        order = 2 if dtype == jnp.float64 else 1
        check_grads(loss, (a.data, b.data), order=order, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)


# int64 indices take the pieces' code of int32 ones: `slow`, which CI runs.
@pytest.mark.parametrize("index_dtype", [np.int32, pytest.param(np.int64, marks=pytest.mark.slow)])
def test_pieces_over_the_threads_give_the_searchs_arrays(index_dtype):
    """Structures long enough to be cut into pieces over XLA's threads (each piece counts
    its slots, then writes them), with `nnz` cutting a piece short: the search's arrays."""
    rng = np.random.default_rng(10)
    pair = [
        scipy.sparse.random_array((3000, 4000), density=0.02, format="csr", rng=rng)
        for _ in range(2)
    ]
    arrays = [jnp.asarray(a, index_dtype) for m in pair for a in (m.indices, m.indptr)]
    found = (pair[0] + pair[1]).nnz
    for nnz in (found, found - 30_000, found + 5):
        native, searched = _both(*arrays, num_cols=4000, nnz=nnz)
        for got, want in zip(native, searched, strict=True):
            np.testing.assert_array_equal(got, want)


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


def test_search_reads_an_invalid_structure_as_nan(monkeypatch):
    """Under `JAXSPARSE_BACKEND=xla` the search adds an invalid structure (a column outside
    the matrix) into NaN wherever one of its entries lands, as the sort does: no slot holds
    a finite value that is not the valid matrix's own or padding."""
    monkeypatch.setenv("JAXSPARSE_BACKEND", "xla")
    first, second = canonical_pair(2)
    indices = second.indices.copy()
    indices[-1] = 7
    a = js.CSRMatrix.from_scipy(first)
    # `nnz` of its own: a program apart from the native one of the test above.
    add = jax.jit(lambda a, d, i, p: js.add(a, js.CSRMatrix(d, i, p, a.shape), nnz=41))
    summed = add(a, second.data, indices, second.indptr)
    values = np.asarray(summed.data)
    rows = np.repeat(np.arange(9), np.diff(np.asarray(summed.indptr)))
    placed = zip(rows.tolist(), np.asarray(summed.indices).tolist(), strict=True)
    # The positions of the invalid matrix's entries inside it: all but the last.
    held = set(zip(*second.tocoo().coords, strict=True)) - {(8, int(second.indices[-1]))}
    landed = np.array([position in held for position in placed])
    assert landed.any() and np.isnan(values[landed]).all()
    finite = values[np.isfinite(values)]
    assert np.isin(finite, np.append(first.data, 0)).all()


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
