"""Bad input gets a ValueError or TypeError that names the problem, never a wrong answer."""

import io
import operator

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse

import jaxsparse as js

DATA = np.ones((3, 4), np.float32)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(data=np.ones((2, 4)), offsets=(-1, 0, 1)), ValueError, "2 diagonals.*3 entries"),
        (dict(offsets=(0, 1, 1)), ValueError, "duplicate"),
        (dict(offsets=(0, 1, 2**64)), ValueError, "fit in int64"),
        (dict(offsets=(0, 1.0, 2)), TypeError, "`offsets` must hold integers"),
        (dict(offsets=(0, True, 2)), TypeError, "`offsets` must hold integers"),
        (dict(offsets="abc"), TypeError, "`offsets`"),
        (dict(data=np.ones((3, 5))), ValueError, "one column per matrix column"),
        (dict(data=np.ones((3, 4, 1))), ValueError, "`data` must be 2-D"),
        (dict(data=np.ones((3, 4), np.int32)), TypeError, "floating or complex"),
        (dict(shape=(4,)), ValueError, "`shape` must have two entries"),
        (dict(shape=(4, -1)), ValueError, "non-negative"),
        (dict(shape=(4.0, 4)), TypeError, "`shape` must hold Python ints"),
        (dict(data=np.full((3, 4), None)), TypeError, "`data` must have a floating.*object"),
        (dict(data=scipy.sparse.eye_array(4).todia()), TypeError, r"DIAMatrix\.from_scipy"),
    ],
)
def test_dia_constructor_errors(kwargs, error, message):
    arguments = dict(data=DATA, offsets=(-1, 0, 1), shape=(4, 4)) | kwargs
    with pytest.raises(error, match=message):
        js.DIAMatrix(**arguments)


@pytest.mark.parametrize("k", [4, 10, -4])
def test_setdiag_outside_the_matrix_is_refused(k):
    """As scipy's `setdiag`; it used to add an all-zero diagonal and change nothing."""
    with pytest.raises(ValueError, match=f"`k` exceeds array dimensions: k={k}"):
        js.DIAMatrix(DATA, (-1, 0, 1), (4, 4)).setdiag(1.0, k)


def test_dia_to_scipy_keeps_only_diagonals_inside():
    """scipy casts offsets to int32: a diagonal far outside must not come back inside."""
    A = js.DIAMatrix(np.ones((3, 6)), (0, 2**32 + 1, -(2**40)), (4, 6))
    S = A.to_scipy()
    assert list(S.offsets) == [0]
    np.testing.assert_array_equal(S.toarray(), np.asarray(A.todense()))


def test_dia_traced_offsets_are_rejected():
    with pytest.raises(TypeError, match="concrete Python ints"):
        jax.jit(lambda o: js.DIAMatrix(DATA[:1], o, (4, 4)))(jnp.array([0]))


CSR = dict(
    data=np.array([1.0, 2.0, 3.0], np.float32),
    indices=np.array([0, 2, 1], np.int32),
    indptr=np.array([0, 2, 2, 3], np.int32),
    shape=(3, 3),
)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(indptr=np.array([0, 2, 3], np.int32)), ValueError, r"`indptr` must have shape"),
        (dict(indptr=np.array([1, 2, 2, 3], np.int32)), ValueError, "should start with 0"),
        (dict(indptr=np.array([0, 2, 1, 3], np.int32)), ValueError, "non-decreasing"),
        (dict(indptr=np.array([0, 1, 2, 2], np.int32)), ValueError, "should be nnz=3"),
        (dict(indices=np.array([0, 3, 1], np.int32)), ValueError, r"out of range.*\[0, 3\)"),
        (dict(indices=np.array([0, -1, 1], np.int32)), ValueError, "out of range"),
        (dict(indices=np.array([0, 2, 1], np.int64)), ValueError, "share an index dtype"),
        (dict(indices=np.array([0.0, 2.0, 1.0])), TypeError, "`indices` must have an integer"),
        (dict(indices=np.array([0, 2, 1], np.int16)), TypeError, "int32 or int64"),
        (dict(indices=np.array([0, 2], np.int32)), ValueError, "same shape"),
        (dict(data=np.array([1, 2, 3], np.int32)), TypeError, "floating or complex"),
        (dict(data=np.ones((3, 1), np.float32)), ValueError, "`data` must be 1-D"),
        (
            dict(data=np.ones((1, 3), np.float32), indices=np.array([[0, 2, 1]], np.int32)),
            ValueError,
            r"`indptr` must have shape \(1, 4\).*batch axes of `indices`",
        ),
        (dict(indices=[0, 2**32 + 2, 1]), ValueError, "`indices` holds values outside int32"),
        (dict(indptr=[0, 2, 2, -(2**40)]), ValueError, "`indptr` holds values outside int32"),
        (dict(indices=[0.0, 2.5, 1.0]), TypeError, "`indices` must have an integer dtype"),
        (dict(data=np.array([1.0, "a", None])), TypeError, "`data` must have a floating.*object"),
        (dict(data=scipy.sparse.eye_array(3).tocsr()), TypeError, r"CSRMatrix\.from_scipy"),
    ],
)
def test_csr_constructor_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        js.CSRMatrix(**(CSR | kwargs))


def test_64_bit_indices_past_int32_without_x64_are_refused():
    """Without x64 JAX would cast them to int32 and wrap column 2**32 + 2 onto column 2."""
    indices = np.array([0, 2**32 + 2, 1], np.int64)
    with jax.enable_x64(False), pytest.raises(ValueError, match="`indices` holds values outside"):
        js.CSRMatrix(**(CSR | dict(indices=indices, indptr=CSR["indptr"].astype(np.int64))))


def test_csr_check_under_jit_flags_each_problem():
    """Under jit the constructor cannot see values; `check()` raises at run time."""

    def build_and_check(data, indices, indptr):
        return js.CSRMatrix(data, indices, indptr, (3, 3)).check().data

    run = jax.jit(build_and_check)
    run(CSR["data"], CSR["indices"], CSR["indptr"]).block_until_ready()
    for indices, indptr, message in [
        (CSR["indices"], np.array([1, 2, 2, 3], np.int32), "start with 0"),
        (CSR["indices"], np.array([0, 3, 2, 3], np.int32), "non-decreasing"),
        (CSR["indices"], np.array([0, 1, 1, 2], np.int32), "nnz"),
        (np.array([0, 5, 1], np.int32), CSR["indptr"], "out of range"),
    ]:
        with pytest.raises(Exception, match=message):
            run(CSR["data"], indices, indptr).block_until_ready()


@pytest.mark.parametrize("fmt", ["dia", "csr"])
def test_matmul_errors(fmt):
    matrix = (
        js.DIAMatrix(DATA, (-1, 0, 1), (5, 4))
        if fmt == "dia"
        else js.CSRMatrix(**(CSR | dict(shape=(3, 4), indptr=np.array([0, 2, 2, 3], np.int32))))
    )
    m, n = matrix.shape
    with pytest.raises(ValueError, match=rf"dimension mismatch: \({m}, {n}\) @ \({n + 1},\)"):
        matrix @ np.ones(n + 1, np.float32)
    with pytest.raises(ValueError, match=rf"dimension mismatch: \(2, {m + 1}\) @ \({m}, {n}\)"):
        np.ones((2, m + 1), np.float32) @ matrix
    with pytest.raises(ValueError, match="1-D or 2-D"):
        matrix @ np.ones((2, n, 2), np.float32)
    with pytest.raises(ValueError, match="1-D or 2-D"):
        matrix @ np.float32(2.0)
    with pytest.raises(TypeError, match="must be an array"):
        matrix @ "abc"
    with pytest.raises(ValueError, match=rf"dimension mismatch: \({m}, {n}\) @ \({n + 1}, {n}\)"):
        matrix @ js.CSRMatrix.fromdense(np.eye(n + 1, n))
    with pytest.raises(ValueError, match="`backend` must be"):
        js.matmul(matrix, np.ones(n, np.float32), backend="gpu")
    with pytest.raises(TypeError, match="one operand must be a jaxsparse matrix"):
        js.matmul(np.ones((2, 2)), np.ones(2))
    # Every elementwise operator names both shapes, as a ValueError (scipy's type).
    wrong = jnp.ones((m + 1, n + 1), jnp.float32)
    mismatch = rf"\({m + 1}, {n + 1}\) does not broadcast.*\({m}, {n}\)"
    for operation in (operator.add, operator.sub, operator.mul, operator.eq, operator.lt):
        for left, right in ((matrix, wrong), (wrong, matrix)):
            with pytest.raises(ValueError, match=mismatch):
                operation(left, right)
    with pytest.raises(ValueError, match="does not broadcast"):
        matrix * np.ones(n + 1)
    with pytest.raises(TypeError, match="only scalars"):
        matrix / np.ones(n)


def test_from_scipy_and_fromdense_errors():
    with pytest.raises(TypeError, match=r"CSRMatrix\.from_scipy"):
        js.CSRMatrix(scipy.sparse.csr_array(np.eye(3)), shape=(3, 3))
    with pytest.raises(TypeError, match=r"DIAMatrix\.from_scipy"):
        js.DIAMatrix(scipy.sparse.dia_array(np.eye(3)), shape=(3, 3))
    with pytest.raises(TypeError, match="save_npz: `matrix` must be a jaxsparse matrix"):
        js.save_npz(io.BytesIO(), np.eye(3))
    with pytest.raises(TypeError, match="scipy.sparse matrix or array"):
        js.DIAMatrix.from_scipy(np.eye(3))
    with pytest.raises(TypeError, match="scipy.sparse matrix or array"):
        js.CSRMatrix.from_scipy([[1.0]])
    with pytest.raises(TypeError, match="needs `offsets`"):
        jax.jit(js.DIAMatrix.fromdense)(jnp.eye(3))
    with pytest.raises(TypeError, match="needs a static `nnz`"):
        jax.jit(js.CSRMatrix.fromdense)(jnp.eye(3))
    with pytest.raises(ValueError, match="`dense` must be 2-D"):
        js.CSRMatrix.fromdense(np.ones(3))
    with pytest.raises(ValueError, match="inconsistent shapes"):
        js.DIAMatrix(DATA, (-1, 0, 1), (4, 4)) + js.DIAMatrix(DATA, (-1, 0, 1), (5, 4))


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ((0, 1, 2), "at most two indices, got 3"),
        ((Ellipsis, 0), "takes no `...`"),
        ((0, Ellipsis), "takes no `...`"),
        (Ellipsis, "takes no `...`"),
    ],
)
def test_indexing_with_too_many_indices_or_an_ellipsis_is_an_index_error(key, message):
    for matrix in (js.eye(3), js.CSRMatrix.from_scipy(scipy.sparse.eye_array(3, format="csr"))):
        with pytest.raises(IndexError, match=message):
            matrix[key]


def test_unsigned_indices_are_refused_naming_the_dtype_given():
    """Without x64 JAX narrows uint64 to uint32 on the way in: the message names uint64."""
    for x64 in (True, False):
        for dtype in (np.uint32, np.uint64):
            message = f"must be int32 or int64, got {np.dtype(dtype)}"
            with jax.enable_x64(x64), pytest.raises(TypeError, match=message):
                js.CSRMatrix(np.ones(1), np.zeros(1, dtype), np.array([0, 1], dtype), (1, 1))


def test_environment_backend_is_validated(monkeypatch):
    matrix = js.DIAMatrix(DATA, (-1, 0, 1), (4, 4))
    monkeypatch.setenv("JAXSPARSE_BACKEND", "cuda")
    with pytest.raises(ValueError, match="JAXSPARSE_BACKEND"):
        matrix @ np.ones(4, np.float32)


def _every_operation(data, indices, indptr):
    """Operations other than the products on a CSR matrix whose structure is traced."""
    A = js.CSRMatrix(data, indices, indptr, (3, 3))
    return {
        "row": A[1],
        "entry": A[1, 0],
        "column": A[:, 1],
        "todense": A.todense(),
        "sum": A.sum(),
        "diagonal": A.diagonal(),
        "A + A": (A + A).todense(),
        "abs": abs(A).todense(),
        "max": A.max(axis=1),
        "norm": js.linalg.norm(A),
        "sort_indices": A.sort_indices().todense(),
        "A.T": A.T.todense(),
    }


_every_operation_jitted = jax.jit(_every_operation)

# (what is wrong, indices, indptr) of a 3 x 3 matrix with 3 entries, as `CSR`; each fault
# touches row 1, as `A[1]` reads only that row.
INVALID_TRACED = [
    ("column-negative", [0, -1, 1], [0, 1, 2, 3]),
    ("column-past-the-end", [0, 3, 1], [0, 1, 2, 3]),
    ("indptr-decreasing", [0, 2, 1], [0, 3, 2, 3]),
    ("indptr-start", [0, 2, 1], [1, 2, 2, 3]),
    # Row 1 would end past 2**31: the row loop of `A[1]` once ran forever on it.
    ("indptr-huge", [0, 2, 1], [0, 2, 2**31 - 1, 3]),
]
# JAX's gathers and scatters once read column 2**32 + 1 of int64 indices as column 1.
INVALID_TRACED_INT64 = [("column-past-int32", [0, 2**32 + 1, 1], [0, 1, 2, 3])]


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_operations_on_an_invalid_traced_structure_give_nan(index_dtype):
    """Under `jit` the constructor cannot check the structure: every operation reading it
    answers NaN (rows and entries as the products do, everything else through its values),
    never a finite wrong answer, and a valid one gets the dense answer."""
    data = np.array([1.0, -2.0, 3.0])
    dense = scipy.sparse.csr_array((data, CSR["indices"], CSR["indptr"]), shape=(3, 3))
    dense = dense.toarray()
    good = _every_operation_jitted(
        data, *(CSR[k].astype(index_dtype) for k in ("indices", "indptr"))
    )
    expected = _every_operation(data, CSR["indices"], CSR["indptr"])
    for name, value in good.items():
        np.testing.assert_allclose(value, expected[name], err_msg=name)
    np.testing.assert_allclose(good["todense"], dense)
    cases = INVALID_TRACED + (INVALID_TRACED_INT64 if index_dtype == np.int64 else [])
    for fault, indices, indptr in cases:
        results = _every_operation_jitted(
            data, np.array(indices, index_dtype), np.array(indptr, index_dtype)
        )
        for name, value in results.items():
            value = np.asarray(value)
            assert np.isnan(value).any(), (fault, name, value)
            if name in ("row", "entry", "sum", "norm"):
                assert np.isnan(value).all(), (fault, name, value)


# Results that hold no NaN (indices, counts, booleans), which NaN values would turn into
# finite answers: on an invalid traced structure they fail at run time instead.
_RESULTS_WITHOUT_NAN = {
    "bool max": lambda A: A.astype(bool).max(),
    "bool min(axis=1)": lambda A: A.astype(bool).min(axis=1),
    "argmax": lambda A: A.argmax(),
    "argmin(axis=0)": lambda A: A.argmin(axis=0),
    "argmax(axis=1)": lambda A: A.argmax(axis=1),
    "count_nonzero": lambda A: A.count_nonzero(),
    "A > 0": lambda A: (A > 0).todense(),
    "A <= 0": lambda A: A <= 0,
    "A != dense": lambda A: A != jnp.ones((3, 3)),
}


@pytest.mark.parametrize("name", list(_RESULTS_WITHOUT_NAN))
def test_results_without_nan_fail_on_an_invalid_traced_structure(name):
    operation = _RESULTS_WITHOUT_NAN[name]
    run = jax.jit(lambda d, i, p: operation(js.CSRMatrix(d, i, p, (3, 3))))
    data = np.array([1.0, -2.0, 3.0])
    good = run(data, CSR["indices"], CSR["indptr"])
    expected = operation(js.CSRMatrix(data, CSR["indices"], CSR["indptr"], (3, 3)))
    np.testing.assert_array_equal(good, expected)
    for _, indices, indptr in INVALID_TRACED:
        arrays = (data, np.array(indices, np.int32), np.array(indptr, np.int32))
        with pytest.raises(Exception, match="invalid CSR structure"):
            jax.block_until_ready(run(*arrays))


def test_results_without_nan_fail_on_an_invalid_known_structure():
    """A known structure put in without the constructor's checks (`eqx.tree_at`) fails too,
    eagerly, comparisons with another matrix and `nonzero()` included (the eager transpose
    of `argmin(axis=0)` with the host check's message)."""
    matrix = js.CSRMatrix(np.array([1.0, -2.0, 3.0]), CSR["indices"], CSR["indptr"], (3, 3))
    invalid = eqx.tree_at(lambda m: m.indices, matrix, jnp.asarray([0, 3, 1], jnp.int32))
    operations = {
        **_RESULTS_WITHOUT_NAN,
        "nonzero": lambda A: A.nonzero(),
        "A != B": lambda A: A != matrix,
        "A == B": lambda A: A == matrix,
    }
    for operation in operations.values():
        with pytest.raises(Exception, match="invalid CSR structure|`indices` out of range"):
            jax.block_until_ready(operation(invalid))
        jax.block_until_ready(operation(matrix))


def test_multiply_by_an_invalid_traced_structure_is_nan():
    """`A.multiply(B)` keeps `A`'s valid structure and reads `B`'s values by a search in its
    rows, which must not take an invalid `B`'s values as they are."""
    indices, indptr = np.tile([0, 1, 2], 3).astype(np.int32), np.arange(0, 10, 3, dtype=np.int32)
    valid = js.CSRMatrix(np.arange(1.0, 10.0), indices, indptr, (3, 3))
    product = jax.jit(lambda a, d, i, p: a.multiply(js.CSRMatrix(d, i, p, (3, 3))).todense())
    data = np.array([1.0, -2.0, 3.0])
    for fault, indices, indptr in INVALID_TRACED:
        arrays = (data, np.array(indices, np.int32), np.array(indptr, np.int32))
        assert np.isnan(np.asarray(product(valid, *arrays))).any(), fault


def _line_sums(data, indices, indptr):
    """The reductions that are products with ones, on a CSR matrix whose structure is
    traced."""
    A = js.CSRMatrix(data, indices, indptr, (3, 3))
    return {
        "sum(axis=0)": A.sum(axis=0),
        "sum(axis=1)": A.sum(axis=1),
        "mean(axis=1)": A.mean(axis=1),
        "norm 1": js.linalg.norm(A, 1),
        "norm inf": js.linalg.norm(A, np.inf),
    }


@pytest.mark.parametrize("backend", ["xla", "auto"])
def test_line_sums_of_an_invalid_traced_structure_answer_as_the_products(backend, monkeypatch):
    """Sums along an axis and the norms 1 and inf run the products with ones: on an invalid
    structure, NaN where the XLA products put it, the native kernels' error on the CPU."""
    monkeypatch.setenv("JAXSPARSE_BACKEND", backend)
    # A dtype, so a program, of its own per backend, which is read while tracing.
    data = np.array([1.0, -2.0, 3.0], np.float32 if backend == "xla" else np.float64)
    line_sums = jax.jit(_line_sums)
    good = line_sums(data, CSR["indices"], CSR["indptr"])
    expected = _line_sums(data, CSR["indices"], CSR["indptr"])
    for name, value in good.items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-6, err_msg=name)
    for fault, indices, indptr in INVALID_TRACED:
        arrays = (data, np.array(indices, np.int32), np.array(indptr, np.int32))
        if backend == "auto" and jax.default_backend() == "cpu":
            with pytest.raises(Exception, match="INVALID_ARGUMENT: CSR"):
                jax.block_until_ready(line_sums(*arrays))
            continue
        for name, value in line_sums(*arrays).items():
            assert np.isnan(np.asarray(value)).any(), (fault, name, value)
