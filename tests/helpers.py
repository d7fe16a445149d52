"""Random-matrix factories (a jaxsparse matrix and its scipy twin) and tolerances by dtype."""

import jax.numpy as jnp
import numpy as np
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


def random_values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Random standard-normal values as a numpy array of `dtype` (bfloat16 via ml_dtypes)."""
    dtype = np.dtype(dtype)
    values = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        values = values + 1j * rng.standard_normal(shape)
    return np.asarray(jnp.asarray(values).astype(dtype))


def as_float64(values) -> np.ndarray:
    """Host copy in float64 (or complex128), the oracle's precision."""
    values = np.asarray(values)
    wide = np.complex128 if np.issubdtype(values.dtype, np.complexfloating) else np.float64
    return values.astype(wide)


def random_dia(rng, shape, offsets, dtype=jnp.float32, *, junk_in_ignored_slots=True):
    """A `DIAMatrix` and its scipy twin (float64/complex128 values).

    With `junk_in_ignored_slots`, the slots outside the matrix hold random nonzeros, which
    must never reach a product.
    """
    m, n = shape
    data = random_values(rng, (len(offsets), n), dtype)
    if not junk_in_ignored_slots:
        rows = np.arange(n)[None, :] - np.asarray(offsets, dtype=np.int64).reshape(-1, 1)
        data = np.where((rows >= 0) & (rows < m), data, np.zeros((), data.dtype))
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
):
    """A `CSRMatrix` and its scipy twin (float64/complex128 values).

    `row_lengths`, if given, fixes how many entries each row holds (distinct columns);
    otherwise entries are uniform with `density`. `shuffle_columns` leaves each row's
    column indices unsorted.
    """
    m, n = shape
    if row_lengths is None:
        row_lengths = rng.binomial(n, density, size=m) if n else np.zeros(m, int)
    row_lengths = np.minimum(np.asarray(row_lengths, dtype=np.int64), n)
    columns = [np.sort(rng.choice(n, size=length, replace=False)) for length in row_lengths]
    if shuffle_columns:
        columns = [rng.permutation(cols) for cols in columns]
    indices = np.concatenate(columns or [np.zeros(0, np.int64)]).astype(index_dtype)
    indptr = np.concatenate([[0], np.cumsum(row_lengths)]).astype(index_dtype)
    data = random_values(rng, (len(indices),), dtype)
    matrix = js.CSRMatrix(jnp.asarray(data).astype(dtype), indices, indptr, shape)
    twin = scipy.sparse.csr_array((as_float64(data), indices, indptr), shape=shape)
    return matrix, twin


def power_law_row_lengths(rng, m, n, *, exponent=1.5, max_fraction=0.9):
    """Row lengths drawn from a Pareto tail: a few very long rows, many short or empty."""
    lengths = np.floor(rng.pareto(exponent, size=m)).astype(np.int64)
    return np.minimum(lengths, max(1, int(max_fraction * n)))


def assert_close(actual, expected, dtype, *, scale=None):
    """`actual` (any dtype) close to the float64 `expected`, relative to its magnitude."""
    actual = as_float64(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if scale is None:
        scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=tolerance(dtype) * scale * 10)
