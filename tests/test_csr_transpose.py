"""`CSRMatrix.transpose`: scipy's stable transpose on the host and under `jit`, where a CPU
runs the native counting sort (`kernels/native/csr_transpose.cc`) and every other
platform, and `jax.export`, XLA's sort; both give the same structure for any input, an
invalid one included (`_csr_transpose.py`)."""

import functools
import gc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from jax import export
from jax.test_util import check_grads

import jaxsparse as js
from jaxsparse import _csr_layout, _csr_transpose, _matmul
from jaxsparse.kernels import _native_library

pytestmark = pytest.mark.on_cpu

needs_native = pytest.mark.skipif(
    not _native_library.AVAILABLE,
    reason=f"native kernels not built: {_native_library.UNAVAILABLE_REASON}",
)

# (m, n), indptr, indices: repeated and unsorted columns, empty rows and columns.
STRUCTURES = {
    "repeats-unsorted-empty": ((5, 7), [0, 3, 3, 6, 6, 9], [4, 1, 4, 6, 0, 1, 1, 4, 0]),
    "no-entries": ((3, 4), [0, 0, 0, 0], []),
    "one-column": ((4, 1), [0, 2, 2, 3, 4], [0, 0, 0, 0]),
}


def structure_arrays(name, index_dtype):
    shape, indptr, indices = STRUCTURES[name]
    return shape, np.asarray(indices, index_dtype), np.asarray(indptr, index_dtype)


@jax.jit
def _transposed(matrix):
    return matrix.T


@pytest.mark.parametrize(
    ("jit", "backend"), [(False, "auto"), (False, "xla"), (True, "auto")], ids=str
)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("name", list(STRUCTURES))
def test_transpose_is_scipys_in_entry_order(name, index_dtype, jit, backend, monkeypatch):
    """The structure, entry order (a stable sort: scipy's CSR to CSC conversion) and index
    dtype of `A.T` are scipy's, eagerly (by the native sort, or on the host under
    `JAXSPARSE_BACKEND=xla`) and under `jit`."""
    monkeypatch.setenv("JAXSPARSE_BACKEND", backend)
    shape, indices, indptr = structure_arrays(name, index_dtype)
    data = np.arange(1.0, len(indices) + 1)
    matrix = js.CSRMatrix(data, indices, indptr, shape)
    result = (_transposed if jit else js.CSRMatrix.transpose)(matrix)
    expected = scipy.sparse.csr_array((data, indices, indptr), shape=shape).tocsc()
    assert result.shape == shape[::-1]
    assert result.indices.dtype == result.indptr.dtype == index_dtype
    np.testing.assert_array_equal(result.data, expected.data)
    np.testing.assert_array_equal(result.indices, expected.indices)
    np.testing.assert_array_equal(result.indptr, expected.indptr)


# (name, indptr, indices) of a 3 x 3 matrix with 3 entries; `A.check()` refuses each.
INVALID = [
    ("indptr-start", [1, 2, 2, 3], [0, 2, 1]),
    ("indptr-decreasing", [0, 2, 1, 3], [0, 2, 1]),
    ("indptr-beyond-entries", [0, 2, 9, 3], [0, 2, 1]),
    ("indptr-negative", [0, -2, 2, 3], [0, 2, 1]),
    ("indptr-end", [0, 2, 2, 2], [0, 2, 1]),
    ("column-too-large", [0, 2, 2, 3], [0, 99, 1]),
    ("column-minus-one", [0, 2, 2, 3], [0, -1, 1]),
    ("column-negative", [0, 2, 2, 3], [0, -5, 1]),
    ("zero-filled", [0, 0, 0, 0], [0, 0, 0]),
]


@functools.partial(jax.jit, static_argnums=2)
def _both_structures(indices, indptr, num_cols=3):
    """The structure of `A.T` by the primitive (natively on a CPU) and by XLA's sort."""
    return (
        _csr_transpose.transposed_structure(indices, indptr, num_cols),
        _csr_layout.transposed_structure(indices, indptr, num_cols),
    )


def assert_same_structures(native, by_sort, index_dtype, name=""):
    for got, want in zip(native, by_sort, strict=True):
        np.testing.assert_array_equal(got, want.astype(index_dtype), err_msg=name)


# Past int32: JAX's own gathers and scatters would read it as column 1.
INVALID_INT64 = [("column-past-int32", [0, 2, 2, 3], [0, 2**32 + 1, 1])]


def _rebuilt(matrix):
    """The same matrix as a new object, which `A.T`'s mark does not follow."""
    return jax.tree.map(lambda leaf: leaf, matrix)


def _transpose_of_three_by_three(data, indices, indptr, rebuilt):
    transposed = js.CSRMatrix(data, indices, indptr, (3, 3)).T
    return _rebuilt(transposed) if rebuilt else transposed


@functools.partial(jax.jit, static_argnums=4)
def _transposed_products(data, x, indices, indptr, rebuilt):
    """`A.T @ x` on the portable and the Pallas families."""
    transposed = _transpose_of_three_by_three(data, indices, indptr, rebuilt)
    return tuple(js.matmul(transposed, x, backend=b) for b in ("xla", "interpret"))


@functools.partial(jax.jit, static_argnums=4)
def _native_transposed_product(data, x, indices, indptr, rebuilt):
    return _transpose_of_three_by_three(data, indices, indptr, rebuilt) @ x


@jax.jit
def _native_product_on_the_left(data, x, indices, indptr):
    return x @ js.CSRMatrix(data, indices, indptr, (3, 3))


@needs_native
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_invalid_structures_under_jit_get_the_sorts_structure(index_dtype):
    """Under `jit` an invalid structure is transposed as XLA's sort transposes it (never an
    error nor an access outside the arrays), with an index pointer that marks it invalid,
    so a product with a matrix rebuilt from `A.T` answers as `x @ A` does: an error
    naming the transpose natively, NaN on the XLA and Pallas families; `A.T @ x` itself is
    `x @ A`, the same error. One matrix and a batch of structures."""
    cases = INVALID + (INVALID_INT64 if index_dtype == np.int64 else [])
    indptr = jnp.asarray([case[1] for case in cases], index_dtype)
    indices = jnp.asarray([case[2] for case in cases], index_dtype)
    assert "jaxsparse_csr_transpose" in _both_structures.lower(indices[0], indptr[0]).as_text()
    data, x = jnp.ones(3), jnp.ones(3)
    for member, (name, *_) in enumerate(cases):
        native, by_sort = _both_structures(indices[member], indptr[member])
        assert_same_structures(native, by_sort, index_dtype, name)
        np.testing.assert_array_equal(native[2], -1, err_msg=name)
        arrays = (data, x, indices[member], indptr[member])
        for rebuilt in (False, True):
            for product in _transposed_products(*arrays, rebuilt):
                assert np.isnan(np.asarray(product)).all(), name
        with pytest.raises(Exception, match=r"transpose \(A.T under jit\).*A.check\(\)"):
            _native_transposed_product(*arrays, True).block_until_ready()
        with pytest.raises(Exception) as on_the_left:
            _native_product_on_the_left(*arrays).block_until_ready()
        with pytest.raises(Exception) as transposed:
            _native_transposed_product(*arrays, False).block_until_ready()
        assert str(transposed.value).splitlines()[0] == str(on_the_left.value).splitlines()[0]
    assert_same_structures(*jax.vmap(_both_structures)(indices, indptr), index_dtype)


@needs_native
@pytest.mark.parametrize("fault", ["none", "column", "indptr"])
def test_a_structure_cut_into_pieces_is_transposed_as_the_sort_does(fault):
    """A structure large enough to be cut into pieces over the threads, valid or with one
    fault far from both ends."""
    rng = np.random.default_rng(4)
    m, per_row = 20_000, 4
    indices = rng.integers(0, m, m * per_row).astype(np.int32)
    indptr = np.arange(0, m * per_row + 1, per_row, dtype=np.int32)
    if fault == "column":
        indices[len(indices) * 2 // 3] = m
    if fault == "indptr":
        indptr[m // 2] = indptr[m // 2 - 1] - 1
    native, by_sort = _both_structures(jnp.asarray(indices), jnp.asarray(indptr), m)
    assert_same_structures(native, by_sort, np.int32)


@needs_native
def test_gradient_of_the_transposed_product_in_the_values():
    """`A.T @ x` and `y @ A.T` under `jit` with a traced structure (`A`'s transposed
    products) and `A.T @ x` eagerly (the transpose built on the host), differentiated in
    `A.data` and the operand against finite differences."""
    shape, indices, indptr = structure_arrays("repeats-unsorted-empty", np.int32)
    rng = np.random.default_rng(0)
    data = jnp.asarray(rng.standard_normal(len(indices)))
    x = jnp.asarray(rng.standard_normal((shape[0], 2)))
    y = jnp.asarray(rng.standard_normal((2, shape[1])))
    product = jax.jit(lambda d, x, i, p: js.CSRMatrix(d, i, p, shape).T @ x)
    on_the_left = jax.jit(lambda d, y, i, p: y @ js.CSRMatrix(d, i, p, shape).T)
    structure = (jnp.asarray(indices), jnp.asarray(indptr))
    known = js.CSRMatrix(data, indices, indptr, shape)
    for function, operand in (
        (lambda d, x: product(d, x, *structure), x),
        (lambda d, y: on_the_left(d, y, *structure), y),
        (lambda d, x: known.with_data(d).T @ x, x),
    ):
        check_grads(function, (data, operand), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("backend", ["auto", "xla"])
def test_export_and_the_xla_backend_keep_the_sort(backend, monkeypatch):
    """`jax.export` lowers the transpose to XLA's sort, as `JAXSPARSE_BACKEND=xla` does
    at run time: no custom call, and the artifact's answer is scipy's."""
    monkeypatch.setenv("JAXSPARSE_BACKEND", backend)
    shape, indices, indptr = structure_arrays("repeats-unsorted-empty", np.int32)
    data = np.arange(1.0, len(indices) + 1)
    matrix = js.CSRMatrix(data, indices, indptr, shape)
    x = jnp.ones(shape[0])
    program = jax.jit(lambda a, x: a.T @ x)
    exported = export.export(program)(matrix, x)
    assert "stablehlo.custom_call" not in exported.mlir_module()
    twin = scipy.sparse.csr_array((data, indices, indptr), shape=shape)
    np.testing.assert_allclose(exported.call(matrix, x), twin.T @ np.ones(shape[0]))
    lowered = jax.jit(lambda a: a.T).lower(matrix).as_text()
    native = backend == "auto" and _native_library.AVAILABLE
    assert ("jaxsparse_csr_transpose" in lowered) == native


@functools.partial(jax.jit, static_argnums=3)
def _products_with_the_transpose(data, indices, indptr, shape, x, X, y, Y):
    """Every product with `A.T` under `jit` (a traced structure), and `A.T.T`'s."""
    matrix = js.CSRMatrix(data, indices, indptr, shape)
    return (matrix.T @ x, matrix.T @ X, y @ matrix.T, Y @ matrix.T, matrix.T.T @ y)


@pytest.mark.parametrize("backend", ["auto", "xla"])
def test_products_with_a_traced_transpose_run_no_sort(backend, monkeypatch):
    """Under `jit`, `A.T @ x` and `x @ A.T` are `A`'s transposed products: the compiled
    program neither sorts nor calls the native transpose, and each product is scipy's,
    also under `jax.vmap` over the values."""
    monkeypatch.setenv("JAXSPARSE_BACKEND", backend)
    shape, indices, indptr = structure_arrays("repeats-unsorted-empty", np.int32)
    rng = np.random.default_rng(1)
    data = rng.standard_normal(len(indices))
    x, X = rng.standard_normal(shape[0]), rng.standard_normal((shape[0], 3))
    y, Y = rng.standard_normal(shape[1]), rng.standard_normal((2, shape[1]))
    arrays = (data, indices, indptr, shape, x, X, y, Y)
    registered = len(_matmul._TRANSPOSE_SOURCES)
    compiled = _products_with_the_transpose.lower(*arrays).compile().as_text()
    gc.collect()
    assert len(_matmul._TRANSPOSE_SOURCES) == registered, "a traced transpose outlived its trace"
    assert "jaxsparse_csr_transpose" not in compiled
    assert " sort(" not in compiled
    twin = scipy.sparse.csr_array((data, indices, indptr), shape=shape)
    expected = (twin.T @ x, twin.T @ X, y @ twin.T, Y @ twin.T, twin @ y)
    for got, want in zip(_products_with_the_transpose(*arrays), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    batch = np.stack([data, 2 * data])
    over_values = jax.jit(
        jax.vmap(lambda d: js.CSRMatrix(d, jnp.asarray(indices), jnp.asarray(indptr), shape).T @ x)
    )
    np.testing.assert_allclose(over_values(batch), [twin.T @ x, 2 * (twin.T @ x)], rtol=1e-12)


def test_a_matrix_rebuilt_from_a_traced_transpose_holds_its_own_values():
    """`A.T`'s mark stays with the object `A.T` returned and leaves its pytree structure
    alone: a matrix made from it with new values (`with_data`, `eqx.tree_at`) multiplies
    by those values."""
    shape, indices, indptr = structure_arrays("repeats-unsorted-empty", np.int32)
    rng = np.random.default_rng(2)
    data, other = rng.standard_normal((2, len(indices)))
    x = rng.standard_normal(shape[0])

    @jax.jit
    def rebuilt_products(data, indices, indptr):
        transposed = js.CSRMatrix(data, indices, indptr, shape).T
        assert jax.tree.structure(transposed) == jax.tree.structure(_rebuilt(transposed))
        scaled = transposed.with_data(2 * transposed.data)
        replaced = eqx.tree_at(lambda matrix: matrix.data, transposed, jnp.asarray(other))
        return scaled @ x, replaced @ x, x @ replaced.T, transposed.indices, transposed.indptr

    scaled, replaced, replaced_twice, indices_t, indptr_t = rebuilt_products(data, indices, indptr)
    twin = scipy.sparse.csr_array((data, indices, indptr), shape=shape)
    np.testing.assert_allclose(scaled, 2 * (twin.T @ x), rtol=1e-12)
    twin_replaced = scipy.sparse.csr_array((other, indices_t, indptr_t), shape=shape[::-1])
    np.testing.assert_allclose(replaced, twin_replaced @ x, rtol=1e-12)
    np.testing.assert_allclose(replaced_twice, x @ twin_replaced.T, rtol=1e-12)


def test_a_known_structure_closed_over_under_jit_keeps_a_constant_transpose():
    """A matrix with concrete index arrays closed over by a jitted function: `A.T`'s
    structure is computed while tracing (no sort in the program) and stays concrete, so
    operations that need a known structure (`todia()`, sparse @ sparse) work on it."""
    shape, indices, indptr = structure_arrays("repeats-unsorted-empty", np.int32)
    data = np.arange(1.0, len(indices) + 1)
    matrix = js.CSRMatrix(data, indices, indptr, shape)
    twin = scipy.sparse.csr_array((data, indices, indptr), shape=shape)
    assert "jaxsparse_csr_transpose" not in str(jax.make_jaxpr(lambda: matrix.T)())
    np.testing.assert_allclose(jax.jit(lambda: matrix.T.todia().todense())(), twin.T.toarray())
    product = jax.jit(lambda x: (matrix.T @ matrix) @ x)(jnp.ones(shape[1]))
    np.testing.assert_allclose(product, (twin.T @ twin) @ np.ones(shape[1]))
