"""`matmul`: products of a sparse matrix with a dense vector or matrix, on either side.

This is where `A @ B` lands. It checks shapes and dtypes, promotes both operands to the
result dtype (`jnp.matmul`'s promotion), resolves the backend, and hands the product to
the sparse operand's format through `sparse_times_dense`, which each format's module
registers for its class (as lineax registers its operators), so this module imports no
format. `X @ A` is computed as `(A^T @ X^T)^T` by the transposed product, never by a
dense `A`.
"""

import functools
import weakref

import jax
import jax.numpy as jnp
import scipy.sparse

from ._arrays import device_array
from ._backend import resolve_backend
from ._batching import (
    PerMember,
    batch_shape,
    batches_structure,
    is_batched,
    map_over_batch,
    refuse_batch,
)


@functools.singledispatch
def sparse_times_dense(matrix, data, columns, *, transposed: bool, backend: str) -> jax.Array:
    """`A @ columns`, or `A^T @ columns` if `transposed`, by the format's product primitive.

    Each format registers its own (`sparse_times_dense.register(DIAMatrix)`).

    **Arguments:**

    - `matrix`: the sparse matrix, for its structure and static metadata.
    - `data`: its values, already promoted to the product's dtype.
    - `columns`: a 2-D dense operand of that dtype, `(n, k)` (or `(m, k)` if transposed).
    - `transposed`, `backend`: a resolved backend name.

    **Returns:** the `(m, k)` (or `(n, k)`) product.
    """
    raise TypeError(f"matmul: unsupported sparse format {type(matrix).__name__}.")


_NOT_SPARSE = sparse_times_dense.dispatch(object)


@functools.singledispatch
def operand_rows(matrix, *, transposed: bool) -> tuple[int, ...]:
    """The numbers of rows a dense operand of `A @ x` (of `x @ A` if `transposed`, counting
    its last axis) may have: the matrix's inner dimension; a format whose operands may also
    come padded registers more (a sharded matrix takes its padded length too)."""
    return (matrix.shape[0],) if transposed else (matrix.shape[1],)


@functools.singledispatch
def runs_compiled(matrix) -> bool:
    """Whether an eager product with `matrix` may run as one compiled program; a format
    whose products place its arrays over devices themselves (a sharded matrix) registers
    False."""
    return True


@functools.singledispatch
def sparse_times_sparse(a, b, *, nnz: int | None, backend: str):
    """`a @ b` for two sparse matrices, as a sparse matrix; `_spgemm.py` registers it."""
    raise TypeError(f"matmul: unsupported sparse format {type(a).__name__}.")


def _is_sparse(value) -> bool:
    return sparse_times_dense.dispatch(type(value)) is not _NOT_SPARSE


# A format whose transpose is built under a trace (CSR by a sort, DIA by shifting each
# diagonal) registers the matrix it returns with the matrix it transposes. Both are
# immutable, so while that object lives its arrays are exactly the transpose of the
# source's; a matrix rebuilt from it (a tree map, unflattening, `with_data`) is a new
# object, not registered. The registry is kept beside the object, not on it: an attribute
# of an `eqx.Module` changes its pytree structure.
_TRANSPOSE_SOURCES: dict[int, tuple[weakref.ref, object]] = {}


def mark_transpose(transposed, source):
    """`transposed` (the matrix `source.T` built), registered so that products with it run
    as `source`'s transposed products: under `jit` the work building its arrays then has no
    use, and XLA drops it."""
    key = id(transposed)
    _TRANSPOSE_SOURCES[key] = (weakref.ref(transposed), source)
    weakref.finalize(transposed, _TRANSPOSE_SOURCES.pop, key, None)
    return transposed


def transpose_source(matrix):
    """The matrix that `matrix` is the registered transpose of (`mark_transpose`), or None."""
    alive, source = _TRANSPOSE_SOURCES.get(id(matrix), (None, None))
    return source if alive is not None and alive() is matrix else None


def matmul(a, b, *, backend: str | None = None, nnz: int | None = None):
    """The product `a @ b` where one operand is a jaxsparse matrix, the other dense or sparse.

    **Arguments:**

    - `a`, `b`: a `DIAMatrix` or `CSRMatrix` of shape `(m, n)` and a dense operand of shape
      `(n,)` or `(n, k)` (for `A @ x`), or a dense operand of shape `(m,)` or `(k, m)` and
      the sparse matrix (for `x @ A`). Batches of dense operands go through `jax.vmap`.
    - `backend`: `None` or `"auto"` (Pallas on GPU and TPU, the native C++ kernels on
      CPU, XLA where neither takes the dtype; the environment variable `JAXSPARSE_BACKEND`
      overrides it), `"pallas"`, `"interpret"` or `"xla"`. See `jaxsparse._backend` for
      the full table.
    - `nnz`: for sparse @ sparse with a CSR factor under `jax.jit`, the number of stored
      entries of the result (see `jaxsparse._spgemm`).

    **Returns:** a dense JAX array of shape `(m,)`, `(m, k)`, `(n,)` or `(k, n)`, in the
    dtype `jnp.matmul` would give for the two dtypes; for two sparse operands, a sparse
    matrix (DIA for DIA @ DIA, else CSR).
    """
    backend = resolve_backend(backend)
    if is_batched(a) or is_batched(b):
        return _batched_matmul(a, b, backend=backend, nnz=nnz)
    if _is_sparse(a) and _is_sparse(b):
        return sparse_times_sparse(a, b, nnz=nnz, backend=backend)
    if _is_sparse(a):
        dense = _as_dense_operand(b, "b")
        _check_inner_dims(a, dense.shape, sparse_first=True)
        product = _sparse_at_dense_eager if _compiles_eagerly(a, dense) else _sparse_at_dense
        return product(a, dense, backend)
    if _is_sparse(b):
        dense = _as_dense_operand(a, "a")
        _check_inner_dims(b, dense.shape, sparse_first=False)
        product = _dense_at_sparse_eager if _compiles_eagerly(b, dense) else _dense_at_sparse
        return product(dense, b, backend)
    raise TypeError(
        f"matmul: one operand must be a jaxsparse matrix, got {type(a).__name__} and "
        f"{type(b).__name__}."
    )


def _batched_matmul(a, b, *, backend: str, nnz):
    """A product with a batched sparse operand, member by member (`jax.vmap`, one program):
    a dense operand of rank 1 or 2 is shared by the batch; one with the matrix's batch axes
    in front of those gives each member its own."""

    def product(x, y):
        return matmul(x, y, backend=backend, nnz=nnz)

    if _is_sparse(a) and _is_sparse(b):
        if batches_structure(a) or batches_structure(b):
            refuse_batch("sparse @ sparse with a CSR factor (a structure per member)", a, b)
        return map_over_batch(product, a, b)
    sparse, dense, name = (a, b, "b") if _is_sparse(a) else (b, a, "a")
    batch = batch_shape(sparse)
    dense = jnp.asarray(_as_dense_operand(dense, name, batch=batch))
    if dense.ndim > 2:
        dense = PerMember(dense, dense.ndim - len(batch))
    operands = (sparse, dense) if sparse is a else (dense, sparse)
    return map_over_batch(product, *operands)


def _as_dense_operand(value, name: str, *, batch: tuple[int, ...] = ()) -> jax.Array:
    if scipy.sparse.issparse(value):
        raise TypeError(
            f"matmul: `{name}` is a scipy.sparse matrix: convert it with "
            "`CSRMatrix.from_scipy` (or `DIAMatrix.from_scipy`), or pass `todense()`."
        )
    try:
        array = value if isinstance(value, jax.Array) else device_array(value)
    except (TypeError, ValueError):
        raise TypeError(f"matmul: `{name}` must be an array, got {type(value).__name__}.") from None
    if not (jnp.issubdtype(array.dtype, jnp.number) or array.dtype == jnp.bool_):
        raise TypeError(f"matmul: `{name}` must be numeric, got dtype {array.dtype}.")
    if batch and array.ndim > 2:
        if array.ndim != len(batch) + 2 or array.shape[: len(batch)] != batch:
            raise ValueError(
                f"matmul: `{name}` of shape {array.shape} does not fit a batched matrix "
                f"(batch={batch}): pass a 1-D or 2-D operand shared by the batch, or one "
                f"of shape {batch} + (rows, columns), one per member."
            )
        return array
    if array.ndim not in (1, 2):
        raise ValueError(
            f"matmul: `{name}` must be 1-D or 2-D, got shape {array.shape}; "
            "use jax.vmap for batches."
        )
    return array


def _check_inner_dims(matrix, dense_shape, *, sparse_first: bool) -> None:
    sparse_shape = matrix.shape
    accepted = operand_rows(matrix, transposed=not sparse_first)
    if sparse_first:
        inner_sparse, inner_dense = sparse_shape[1], dense_shape[0]
        shapes = f"{sparse_shape} @ {dense_shape}"
    else:
        inner_sparse, inner_dense = sparse_shape[0], dense_shape[-1]
        shapes = f"{dense_shape} @ {sparse_shape}"
    if inner_dense not in accepted:
        raise ValueError(
            f"matmul: dimension mismatch: {shapes} "
            f"(inner dimensions {inner_dense} and {inner_sparse} differ)."
        )


def _promote(matrix, dense: jax.Array):
    # The arrays, not their dtypes: a weakly typed operand promotes as in `jnp.matmul`.
    dtype = jnp.result_type(matrix.data, dense)
    return matrix.data.astype(dtype), dense.astype(dtype)


def _as_columns(dense):
    """A 2-D operand and a function restoring the caller's dimensionality."""
    if dense.ndim == 1:
        return dense[:, None], lambda out: out[:, 0]
    return dense, lambda out: out


def _counted(product, matrix, data, dense, backend: str):
    """A boolean product (an or of ands, as numpy's) as a sum of the true terms in
    float32, exact for the test: the kernels add, and bool has no addition; a sum of
    zeros and ones is positive exactly when one term is."""
    sums = product(matrix.with_data(data.astype(jnp.float32)), dense.astype(jnp.float32), backend)
    return sums != 0


def _swap_last_axes(dense):
    return dense if dense.ndim == 1 else jnp.swapaxes(dense, -1, -2)


def _sparse_at_dense(matrix, dense, backend: str):
    if (source := transpose_source(matrix)) is not None:
        # `A.T @ X == (X^T @ A)^T`: A's transposed product, without A.T's structure.
        return _swap_last_axes(_dense_at_sparse(_swap_last_axes(dense), source, backend))
    data, dense = _promote(matrix, dense)
    if data.dtype == jnp.bool_:
        return _counted(_sparse_at_dense, matrix, data, dense, backend)
    columns, restore = _as_columns(dense)
    return restore(sparse_times_dense(matrix, data, columns, transposed=False, backend=backend))


def _dense_at_sparse(dense, matrix, backend: str):
    if (source := transpose_source(matrix)) is not None:
        # `X @ A.T == (A @ X^T)^T`: A's product, without A.T's structure.
        return _swap_last_axes(_sparse_at_dense(source, _swap_last_axes(dense), backend))
    data, dense = _promote(matrix, dense)
    if data.dtype == jnp.bool_:
        return _counted(lambda m, d, b: _dense_at_sparse(d, m, b), matrix, data, dense, backend)
    columns, restore = _as_columns(dense.T)
    return restore(sparse_times_dense(matrix, data, columns, transposed=True, backend=backend)).T


def _compiles_eagerly(matrix, dense) -> bool:
    """Whether a product runs as one compiled program (below): its matrix's format allows
    it, no array is traced and all lie on one device."""
    if not runs_compiled(matrix):
        return False
    devices = set()
    for leaf in jax.tree.leaves((matrix, dense)):
        if isinstance(leaf, jax.core.Tracer):
            return False
        if isinstance(leaf, jax.Array):
            devices |= leaf.devices()
    return len(devices) <= 1


# An eager product on one device runs as one compiled program, cached on the operands'
# shapes, dtypes and static metadata, rather than one dispatch per promotion, reshape and
# product step.
_sparse_at_dense_eager = jax.jit(_sparse_at_dense, static_argnames="backend")
_dense_at_sparse_eager = jax.jit(_dense_at_sparse, static_argnames="backend")
