"""The structure of a CSR matrix's transpose as a primitive: the native counting sort on a
CPU, XLA's sort everywhere else.

`transposed_structure(indices, indptr, num_cols)` returns `(order, indices_t, indptr_t)` as
`_csr_layout.transposed_structure` does, all three in the index dtype: entry `q` of `A^T`
is entry `order[q]` of `A`, so `A^T`'s values are `data[order]`, a gather through which
gradients reach `data`. Both implementations give the same arrays for any structure, an
invalid one included: there no error, since a transpose is only built, but an `indptr_t`
of `_csr_layout.INVALID_TRANSPOSE_INDPTR` throughout, so that the products on `A^T`
answer as on `A` (native: an error; XLA and Pallas: NaN).

The implementation is chosen at lowering, by the products' rule
(`_backend.choose_implementation`): `"auto"` takes the `native` family (`O(nnz + m + n)`,
`kernels/native/csr_transpose.cc`) on a CPU where it is built, except when `jax.export`
lowers, since its custom call has no compatibility guarantee; `JAXSPARSE_BACKEND=xla`
takes XLA's sort (`O(nnz log nnz)`), as every other platform does.

Batches: the primitive takes one leading batch axis on both index arrays; `jax.vmap` at any
depth folds into it.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from . import _csr_layout
from ._backend import choose_implementation, resolve_backend
from ._families import PLATFORMS
from .kernels import native_csr
from .kernels._batch import over_batch

csr_transpose_p = Primitive("jaxsparse_csr_transpose")
csr_transpose_p.multiple_results = True


def transposed_structure(indices, indptr, num_cols: int):
    """The CSR structure of `A^T` for `A` with `num_cols` columns.

    **Arguments:**

    - `indices`: `(nnz,)` column indices, int32 or int64.
    - `indptr`: `(m + 1,)` row pointers, of `indices`' dtype.
    - `num_cols`: `n`, a static int.

    **Returns:** `(order, indices_t, indptr_t)`, `(nnz,)`, `(nnz,)` and `(n + 1,)` in the
    index dtype: a stable sort of the column indices (see the module docstring).
    """
    backend = "xla" if resolve_backend(None) == "xla" else "auto"
    return tuple(csr_transpose_p.bind(indices, indptr, num_cols=num_cols, backend=backend))


def _abstract_eval(indices, indptr, *, num_cols, backend):
    if indices.dtype != indptr.dtype or indices.shape[:-1] != indptr.shape[:-1]:
        raise ValueError(
            f"{csr_transpose_p.name}: {indices.shape=} {indices.dtype} and {indptr.shape=} "
            f"{indptr.dtype} must share a dtype and batch axes."
        )
    entries = ShapedArray(indices.shape, indices.dtype)
    return [entries, entries, ShapedArray((*indices.shape[:-1], num_cols + 1), indices.dtype)]


def _by_sort(indices, indptr, *, num_cols):
    def one(indices, indptr):
        order, indices_t, indptr_t = _csr_layout.transposed_structure(indices, indptr, num_cols)
        return order.astype(indices.dtype), indices_t, indptr_t

    return over_batch(one, (indices, indptr), (1, 1))


def _lowering(ctx, indices, indptr, *, num_cols, backend, platform):
    index_dtype = ctx.avals_in[0].dtype
    symbolic = any(not isinstance(d, int) for a in ctx.avals_in for d in a.shape)
    implementations = {"native": native_csr.csr_transposed_structure_native, "xla": _by_sort}
    # The native call needs static shapes; positions or rows past the index dtype come only
    # with invalid structures (int32 arrays of 2^31 values), which get the sort's answer.
    if symbolic or max(ctx.avals_in[0].shape[-1], ctx.avals_in[1].shape[-1] - 1) > (
        np.iinfo(index_dtype).max
    ):
        del implementations["native"]
    implementation = choose_implementation(
        csr_transpose_p.name,
        implementations,
        {"native": native_csr.transposes},
        backend=backend,
        platform=platform,
        dtype=index_dtype,
        for_export=ctx.module_context.lowering_parameters.for_export,
        symbolic_shapes=symbolic,
    )
    function = functools.partial(implementation, num_cols=num_cols)
    return mlir.lower_fun(function, multiple_results=True)(ctx, indices, indptr)


def _batch(args, dims, **params):
    """The batch of this `vmap` in front of any batch the arrays carry, folded into one
    leading axis; an array without it is repeated."""
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    args = [
        jnp.broadcast_to(a, (size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)
        for a, d in zip(args, dims, strict=True)
    ]
    batch = args[0].shape[:-1]
    # Explicit sizes: `reshape(-1, 0)` divides by 0 for members with no entries.
    members = math.prod(batch)
    results = csr_transpose_p.bind(*(a.reshape(members, a.shape[-1]) for a in args), **params)
    return [r.reshape(*batch, r.shape[-1]) for r in results], [0, 0, 0]


def _apply_compiled(indices, indptr, **params):
    """Eager evaluation: compile the single primitive once per set of parameters."""
    return _compiled(tuple(sorted(params.items())))(indices, indptr)


@functools.lru_cache(maxsize=64)
def _compiled(params: tuple):
    return jax.jit(functools.partial(csr_transpose_p.bind, **dict(params)))


csr_transpose_p.def_abstract_eval(_abstract_eval)
csr_transpose_p.def_impl(_apply_compiled)
batching.primitive_batchers[csr_transpose_p] = _batch
for _platform in PLATFORMS:
    mlir.register_lowering(
        csr_transpose_p, functools.partial(_lowering, platform=_platform), platform=_platform
    )
