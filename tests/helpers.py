"""The registry of test matrices (each a jaxsparse matrix and its scipy twin), random values,
and tolerances by dtype. Product, gradient and kernel tests parametrize over `MATRICES`."""

import contextlib
import dataclasses

import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse

import jaxsparse as js

VALUE_DTYPES = (jnp.float32, jnp.float64, jnp.bfloat16, jnp.complex64, jnp.complex128)

# Relative/absolute tolerance of one product against a float64 oracle, by value dtype.
TOLERANCES = {
    np.dtype(jnp.float32): 2e-5,
    np.dtype(jnp.float64): 1e-12,
    np.dtype(jnp.bfloat16): 2e-2,
    np.dtype(jnp.float16): 1e-2,
    np.dtype(jnp.complex64): 2e-5,
    np.dtype(jnp.complex128): 1e-12,
}


def tolerance(dtype) -> float:
    return TOLERANCES[np.dtype(dtype)]


def dtype_id(dtype) -> str:
    return np.dtype(dtype).name


def random_values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Random standard-normal values as a numpy array of `dtype` (bfloat16 via ml_dtypes)."""
    dtype = np.dtype(dtype)
    values = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def as_float64(values) -> np.ndarray:
    """Host copy in float64 (or complex128), the oracle's precision."""
    values = np.asarray(values)
    wide = np.complex128 if np.issubdtype(values.dtype, np.complexfloating) else np.float64
    return values.astype(wide)


def ignored_slots(offsets, shape) -> np.ndarray:
    """Mask of the DIA `data` slots that fall outside the matrix."""
    m, n = shape
    rows = np.arange(n)[None, :] - np.asarray(offsets, dtype=np.int64).reshape(-1, 1)
    return (rows < 0) | (rows >= m)


def random_dia(rng, shape, offsets, dtype=jnp.float32, *, junk_in_ignored_slots=True):
    """A `DIAMatrix` and its scipy twin (float64/complex128 values).

    With `junk_in_ignored_slots`, the slots outside the matrix hold random nonzeros, which
    must never reach a product.
    """
    _, n = shape
    data = random_values(rng, (len(offsets), n), dtype)
    if not junk_in_ignored_slots:
        data = np.where(ignored_slots(offsets, shape), np.zeros((), data.dtype), data)
    twin = scipy.sparse.dia_array(
        (as_float64(data).reshape(len(offsets), n), np.asarray(offsets, dtype=np.int64)),
        shape=shape,
    )
    return js.DIAMatrix(data, offsets, shape), twin


def random_csr(
    rng,
    shape,
    *,
    density=0.2,
    dtype=jnp.float32,
    index_dtype=np.int32,
    row_lengths=None,
    shuffle_columns=False,
    repeat_columns=False,
):
    """A `CSRMatrix` and its scipy twin (float64/complex128 values).

    `row_lengths`, if given, fixes how many entries each row holds; otherwise entries are
    uniform with `density`. Columns in a row are distinct unless `repeat_columns` (then
    every other entry repeats the column before it); `shuffle_columns` leaves them
    unsorted.
    """
    m, n = shape
    if row_lengths is None:
        row_lengths = rng.binomial(n, density, size=m) if n else np.zeros(m, int)
    row_lengths = np.minimum(np.asarray(row_lengths, dtype=np.int64), n)
    columns = [np.sort(rng.choice(n, size=length, replace=False)) for length in row_lengths]
    if repeat_columns:
        columns = [np.repeat(cols[::2], 2)[: len(cols)] for cols in columns]
    if shuffle_columns:
        columns = [rng.permutation(cols) for cols in columns]
    indices = np.concatenate(columns or [np.zeros(0, np.int64)]).astype(index_dtype)
    indptr = np.concatenate([[0], np.cumsum(row_lengths)]).astype(index_dtype)
    data = random_values(rng, (len(indices),), dtype)
    matrix = js.CSRMatrix(data, indices, indptr, shape)
    twin = scipy.sparse.csr_array((as_float64(data), indices, indptr), shape=shape)
    return matrix, twin


def power_law_row_lengths(rng, m, n, *, exponent=1.5, max_fraction=0.9):
    """Row lengths drawn from a Pareto tail: a few very long rows, many short or empty."""
    lengths = np.floor(rng.pareto(exponent, size=m)).astype(np.int64)
    return np.minimum(lengths, max(1, int(max_fraction * n)))


# A 27-point stencil on a 4x4x4 grid, in a scrambled order.
STENCIL_27 = tuple(
    np.random.default_rng(27)
    .permutation([a * 16 + b * 4 + c for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)])
    .tolist()
)

# More diagonals than `MAX_UNROLLED_DIAGONALS`, so that products loop over them: every other
# offset of a band, in a scrambled order, and three beyond the matrix.
MANY_DIAGONALS = tuple(
    np.random.default_rng(40).permutation([*range(-41, 38, 2), -60, 45, 90]).tolist()
)

_CSR_ROW_LENGTHS = {
    "uniform": lambda rng, m, n: rng.integers(0, 8, size=m),
    "power-law": power_law_row_lengths,
    "empty-rows": lambda rng, m, n: rng.integers(1, 6, size=m) * (rng.random(m) < 0.4),
    "all-empty": lambda rng, m, n: np.zeros(m, np.int64),
    "dense-row": lambda rng, m, n: np.where(np.arange(m) == m // 3, n, rng.integers(0, 2, m)),
    "repeated-columns": lambda rng, m, n: rng.integers(0, 6, size=m),
}


@dataclasses.dataclass(frozen=True)
class MatrixCase:
    """One test matrix: a format, a shape and a structure (DIA offsets or a CSR kind)."""

    name: str
    fmt: str
    shape: tuple[int, int]
    structure: object

    def make(self, rng, dtype=jnp.float32, index_dtype=np.int32):
        """The jaxsparse matrix (junk in ignored DIA slots, unsorted CSR columns) and its
        scipy twin in float64/complex128."""
        if self.fmt == "dia":
            return random_dia(rng, self.shape, self.structure, dtype)
        m, n = self.shape
        return random_csr(
            rng,
            self.shape,
            dtype=dtype,
            index_dtype=index_dtype,
            row_lengths=_CSR_ROW_LENGTHS[self.structure](rng, m, n),
            shuffle_columns=True,
            repeat_columns=self.structure == "repeated-columns",
        )


MATRICES = [
    MatrixCase("dia-1x1", "dia", (1, 1), (0,)),
    MatrixCase("dia-tridiagonal", "dia", (37, 37), (-1, 0, 1)),
    MatrixCase("dia-unsorted-offsets", "dia", (45, 45), (2, -7, 0, 5)),
    MatrixCase("dia-tall-beyond-matrix", "dia", (50, 23), (3, -40, 0, 22, 100, -50)),
    MatrixCase("dia-wide-beyond-matrix", "dia", (20, 70), (-5, 2, 60, -19, 69, 70, -20)),
    MatrixCase("dia-27-point", "dia", (70, 64), STENCIL_27),
    MatrixCase("dia-many-diagonals", "dia", (44, 40), MANY_DIAGONALS),
    MatrixCase("dia-one-row", "dia", (1, 5), (0, 4, -1, 2)),
    MatrixCase("dia-one-column", "dia", (6, 1), (0, -5, 1, -2)),
    MatrixCase("dia-all-outside", "dia", (10, 10), (10, -10, 25)),
    MatrixCase("csr-uniform", "csr", (20, 16), "uniform"),
    MatrixCase("csr-tall", "csr", (33, 5), "uniform"),
    MatrixCase("csr-wide", "csr", (5, 70), "uniform"),
    MatrixCase("csr-power-law", "csr", (40, 64), "power-law"),
    MatrixCase("csr-empty-rows", "csr", (24, 12), "empty-rows"),
    MatrixCase("csr-all-empty", "csr", (9, 7), "all-empty"),
    MatrixCase("csr-dense-row", "csr", (18, 60), "dense-row"),
    MatrixCase("csr-repeated-columns", "csr", (15, 9), "repeated-columns"),
]
DIA_MATRICES = [case for case in MATRICES if case.fmt == "dia"]
CSR_MATRICES = [case for case in MATRICES if case.fmt == "csr"]


def cases(selection=MATRICES):
    """`pytest.param`s of matrix cases, with their names as ids."""
    return [pytest.param(case, id=case.name) for case in selection]


def small_matrix(fmt, rng, dtype=jnp.float64):
    """A small matrix of each format with every kind of slot: for autodiff tests."""
    if fmt == "dia":
        return random_dia(rng, (7, 5), (-2, 0, 1, 6), dtype)[0]
    return random_csr(rng, (7, 5), density=0.4, dtype=dtype, shuffle_columns=True)[0]


def invertible_nonsymmetric(rng, fmt, dtype=jnp.float64):
    """An 8 x 8 nonsymmetric matrix of either format (offsets -1, 0, 2, the main diagonal
    shifted by 4): well conditioned, for the direct and iterative solvers' tests."""
    matrix, _ = random_dia(rng, (8, 8), (-1, 0, 2), dtype)
    matrix = matrix.with_data(matrix.data.at[1].add(jnp.asarray(4, dtype)))
    return matrix.tocsr() if fmt == "csr" else matrix


def assert_close(actual, expected, dtype, *, scale=None):
    """`actual` (any dtype) close to the float64 `expected`, relative to its magnitude."""
    actual = as_float64(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    # Infinities where `expected` has them; the finite values relative to their magnitude.
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(actual[~finite], expected[~finite])
    if scale is None:
        scale = max(1.0, float(np.max(np.abs(expected[finite]), initial=0.0)))
    np.testing.assert_allclose(
        actual[finite], expected[finite], rtol=0, atol=tolerance(dtype) * scale * 10
    )


def slow_unless(fast: bool) -> tuple:
    """The marks of one parameter set of an exhaustive sweep: none where it is the fast
    suite's representative of its code path, else `slow` (run by `make test-slow`)."""
    return () if fast else (pytest.mark.slow,)


# A program is built by XLA, or loaded from the persistent cache the test workers share
# (tests/conftest.py): either way it missed JAX's in-memory caches.
_PROGRAM_BUILT = (
    "/jax/core/compile/backend_compile_duration",
    "/jax/compilation_cache/cache_retrieval_time_sec",
)


@contextlib.contextmanager
def counted_compilations():
    """A list that collects one entry per XLA program compiled (or loaded from the
    persistent cache) inside the block."""
    compiled = []

    def listener(event, _seconds, **_):
        if event in _PROGRAM_BUILT:
            compiled.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield compiled
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
