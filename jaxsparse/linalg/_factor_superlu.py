"""`SuperLU`: the sparse LU factorization of a square `CSRMatrix` by scipy's SuperLU
(`scipy.sparse.linalg.splu`: COLAMD fill-reducing column ordering, threshold partial
pivoting; float32, float64, complex64, complex128), on the host through
`jax.pure_callback`, on every platform.

SuperLU's factors have a size known only once they are computed, so they cannot be
arrays of a compiled program. They live on the host in a bounded cache, keyed by an int32
handle that the factorization callback returns; the module holds the handle and the
matrix. Every solve callback also receives the matrix, and a cache entry answers only for
the matrix it factored (the same bytes of values and structure), so a handle whose factors
were evicted, that another process made (a pickled or deserialized factorization) or whose
matrix was replaced is refactored, never wrong: the cache bounds memory
however many factorizations `jit`-compiled code makes, and repeated solves with one
factorization (`factorized(A)` then `.solve` for many right-hand sides, or a solve and its
adjoint solve in a gradient) reuse it.
"""

import collections
import concurrent.futures
import functools
import itertools
import threading

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from jaxtyping import Array, Int

from .._csr import CSRMatrix
from .._csr_checks import check_structure_on_host
from ._factor import Factorization

# The cache keeps the most recently used factors, at most CACHE_ENTRIES of them and
# CACHE_BYTES of L and U (the newest one always): a solve's factors stay while a few other
# factorizations are made, and a program that factors anew on every call holds no more.
# SuperLU's allocations are about twice L and U, and each large factorization held slows
# the next ones made, so large factorizations are kept one at a time.
CACHE_ENTRIES = 8
CACHE_BYTES = 1 << 28


def _same_arrays(kept, given) -> bool:
    """Whether two tuples of host arrays hold the same bytes (NaN and -0.0 included)."""
    return all(
        a.dtype == b.dtype
        and a.shape == b.shape
        and np.array_equal(a.view(np.uint8), np.ascontiguousarray(b).view(np.uint8))
        for a, b in zip(kept, given, strict=True)
    )


class _FactorCache:
    """SuperLU objects by handle, each with the matrix it factored, the least recently used
    evicted first past `CACHE_ENTRIES` or `CACHE_BYTES`."""

    def __init__(self):
        self._entries: collections.OrderedDict[int, tuple[object, tuple, int]] = (
            collections.OrderedDict()
        )
        self._next = itertools.count(1)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, factors, matrix: tuple) -> int:
        """Stores `factors` of `matrix` (its host `(data, indices, indptr)`, copied) under a
        new handle (a positive int32) and returns it."""
        matrix = tuple(np.array(a, copy=True) for a in matrix)
        size = (factors.L.nnz + factors.U.nnz) * (factors.L.dtype.itemsize + 4)
        size += sum(a.nbytes for a in matrix)
        with self._lock:
            handle = next(self._next) % (2**31 - 1) + 1
            self._entries[handle] = (factors, matrix, size)
            total = sum(entry[2] for entry in self._entries.values())
            while len(self._entries) > 1 and (
                total > CACHE_BYTES or len(self._entries) > CACHE_ENTRIES
            ):
                _, (_, _, evicted) = self._entries.popitem(last=False)
                total -= evicted
        return handle

    def get(self, handle: int, matrix: tuple):
        """The factors under `handle` if they are those of `matrix`, else None (evicted,
        made in another process, or of another matrix)."""
        with self._lock:
            entry = self._entries.get(handle)
            if entry is None or not _same_arrays(entry[1], matrix):
                return None
            self._entries.move_to_end(handle)
            return entry[0]


CACHE = _FactorCache()

# scipy's SuperLU frees a factorization's memory only on the thread that allocated it: a
# factorization made on one of XLA's callback threads and evicted on another was never
# freed. Every SuperLU call, and every eviction, runs on this one thread.
_SUPERLU_THREAD = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxsparse-superlu")


def _on_superlu_thread(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        return _SUPERLU_THREAD.submit(fn, *args, **kwargs).result()

    return run


def _splu_or_none(data, indices, indptr, n: int):
    """SuperLU's factors, or None for a matrix it finds exactly singular or an invalid
    structure (under `jit` nothing checked it): their solves return nan."""
    # scipy's conversions index with the structure unchecked: a bad one would read and
    # write out of bounds.
    try:
        check_structure_on_host(indices, indptr, (n, n))
    except ValueError:
        return None
    matrix = scipy.sparse.csr_array((data, indices, indptr), shape=(n, n)).tocsc()
    matrix.sum_duplicates()
    try:
        return scipy.sparse.linalg.splu(matrix, permc_spec="COLAMD")
    except RuntimeError:  # SuperLU: "Factor is exactly singular"
        return None


@_on_superlu_thread
def _factor_on_host(data, indices, indptr, *, n):
    """Factors every member of a batch; returns their handles (0 for a singular one or an
    invalid structure, whose solves return nan)."""
    data, indices, indptr = np.asarray(data), np.asarray(indices), np.asarray(indptr)
    lead = np.broadcast_shapes(data.shape[:-1], indices.shape[:-1], indptr.shape[:-1])
    handles = np.zeros(lead, np.int32)
    for index in np.ndindex(*lead):
        member = [np.broadcast_to(a, (*lead, a.shape[-1]))[index] for a in (data, indices, indptr)]
        factors = _splu_or_none(*member, n)
        handles[index] = 0 if factors is None else CACHE.add(factors, member)
    return handles


def _solve_one(factors, b, op: str):
    if factors is None:
        return np.full_like(b, np.nan)
    return factors.solve(np.ascontiguousarray(b), trans=op).reshape(b.shape)


def _member_factors(handle, data, indices, indptr, n):
    """The cached factors of this matrix, or its factors made again (None if singular)."""
    matrix = (data, indices, indptr)
    factors = CACHE.get(int(handle), matrix)
    if factors is not None:
        return factors
    factors = _splu_or_none(*matrix, n)
    if factors is not None:
        CACHE.add(factors, matrix)
    return factors


@_on_superlu_thread
def _solve_on_host(handle, data, indices, indptr, b, *, n, op):
    """Solves `b` (`(..., n, k)`) with every member's factors; one multi-column solve when
    all members share them."""
    handle, data, indices, indptr, b = (np.asarray(a) for a in (handle, data, indices, indptr, b))
    structure = (data, indices, indptr)
    factor_lead = np.broadcast_shapes(handle.shape, *(a.shape[:-1] for a in structure))
    lead = np.broadcast_shapes(factor_lead, b.shape[:-2])
    b = np.broadcast_to(b, (*lead, *b.shape[-2:]))
    if int(np.prod(factor_lead)) == 1:
        members = [a.reshape(a.shape[-1]) for a in structure]
        factors = _member_factors(handle.reshape(-1)[0], *members, n)
        columns = np.moveaxis(b.reshape(-1, n, b.shape[-1]), 0, 1).reshape(n, -1)
        x = _solve_one(factors, columns, op).reshape(n, -1, b.shape[-1])
        return np.moveaxis(x, 1, 0).reshape(b.shape)
    handle = np.broadcast_to(handle, lead)
    structure = [np.broadcast_to(a, (*lead, a.shape[-1])) for a in structure]
    x = np.empty(b.shape, b.dtype)
    for index in np.ndindex(*lead):
        factors = _member_factors(handle[index], *(a[index] for a in structure), n)
        x[index] = _solve_one(factors, b[index], op)
    return x


class SuperLU(Factorization):
    """The sparse LU factorization of a square `CSRMatrix` by scipy's SuperLU, kept on the
    host (see the module's description): `handle` names the factors in the host cache.
    A matrix that SuperLU finds exactly singular gets handle 0 and solves return `nan`."""

    matrix: CSRMatrix
    handle: Int[Array, ""]

    def _solve_columns(self, b, op):
        n = self.matrix.shape[0]
        m = self.matrix
        return jax.pure_callback(
            lambda *args: _solve_on_host(*args, n=n, op=op),
            jax.ShapeDtypeStruct(b.shape, b.dtype),
            self.handle,
            jax.lax.stop_gradient(m.data),
            m.indices,
            m.indptr,
            b,
            vmap_method="expand_dims",
        )


def factor_csr(matrix: CSRMatrix) -> SuperLU:
    """`SuperLU` of a square `CSRMatrix`: one host callback that factors and caches."""
    n = matrix.shape[0]
    handle = jax.pure_callback(
        lambda *args: _factor_on_host(*args, n=n),
        jax.ShapeDtypeStruct((), jnp.int32),
        jax.lax.stop_gradient(matrix.data),
        matrix.indices,
        matrix.indptr,
        vmap_method="expand_dims",
    )
    return SuperLU(matrix, handle)
