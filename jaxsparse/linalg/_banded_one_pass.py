"""`one_pass_solve`: the one-pass banded solve of a DIA matrix (what `spsolve` runs) as a
differentiable function of the stored values and `b`, with a fused reverse-mode step.

The solve keeps no factors, so its adjoint is a second pass with `A^T`. Through
`jax.lax.custom_linear_solve` that pass is followed by a negation of `lambda` and the
product's transpose in the values, each another pass over memory; here the tangent
`dx = A^{-1} (db - dA x)` is one primitive, linear in `(dA, db)` together, whose transpose
is one native call returning `lambda = A^{-T} g` and the values' cotangent `-lambda[row(p)]
* x[col(p)]` (`native_banded_lu.banded_adjoint`). Forward mode evaluates the tangent as a
product and a solve; its own derivatives are those of that composition. JAX's convention
for complex values holds: plain transposes, never conjugates.
"""

import functools

import jax
import jax.numpy as jnp
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from .._dia_layout import transpose_data
from ..kernels import native_banded_lu
from ..kernels.xla_dia import dia_matmul_xla, dia_sddmm_xla


def _per_matrix(function, arrays, ranks):
    """`function`, written for one matrix, over the leading axes that `arrays` carry beyond
    their `ranks` (the same axes on every array that has them; the others are shared)."""
    extra = max(a.ndim - rank for a, rank in zip(arrays, ranks, strict=True))
    in_axes = tuple(0 if a.ndim > rank else None for a, rank in zip(arrays, ranks, strict=True))
    for _ in range(extra):
        function = jax.vmap(function, in_axes=in_axes)
    return function(*arrays)


def _product(values, x, offsets):
    """`A @ x` for DIA values `(..., ndiag, n)` and `x` `(..., n, k)`."""
    n = values.shape[-1]
    product = functools.partial(dia_matmul_xla, offsets=offsets, shape=(n, n))
    return _per_matrix(product, (values, x), (2, 2))


def _transposed_values(data, offsets):
    """`A^T`'s DIA values for the offsets negated."""
    n = data.shape[-1]
    return _per_matrix(lambda d: transpose_data(d, offsets, (n, n)), (data,), (2,))


def _values_cotangent(adjoint, x, offsets):
    """`-adjoint[j - offset] . x[j]` at every slot `(d, j)` inside the matrix, zero outside."""
    n = x.shape[-2]
    sddmm = functools.partial(dia_sddmm_xla, offsets=offsets, shape=(n, n))
    return -_per_matrix(sddmm, (adjoint, x), (2, 2))


@functools.cache
def _adjoint(offsets: tuple, fused: bool):
    """`adjoint(data, x, g)`: `(lambda, dvalues)` (`fused`) or `lambda` alone, in one native
    call; its own derivatives (second order) are those of the same as one-pass solves of
    `A^T` and products."""

    def reference(data, x, g):
        transposed = tuple(-offset for offset in offsets)
        adjoint = one_pass_solve(_transposed_values(data, offsets), g, transposed)
        return (adjoint, _values_cotangent(adjoint, x, offsets)) if fused else adjoint

    @jax.custom_jvp
    def adjoint(data, x, g):
        if fused:
            return native_banded_lu.banded_adjoint(data, x, g, offsets=offsets)
        return _solve_members(data, g, offsets, "T")

    adjoint.defjvp(lambda primals, tangents: jax.jvp(reference, primals, tangents))
    return adjoint


def _solve_members(data, b, offsets, op):
    """The solve for `b` `(..., n, k)` and `data` `(ndiag, n)` or with `b`'s leading axes."""
    lead = b.shape[:-2]
    if not lead:
        return native_banded_lu.banded_solve(data, b, offsets=offsets, op=op)
    columns = b.reshape(-1, *b.shape[-2:])
    solve = functools.partial(native_banded_lu.banded_solve, offsets=offsets, op=op)
    if data.ndim == 2:
        x = jax.vmap(solve, in_axes=(None, 0))(data, columns)
    else:
        x = jax.vmap(solve)(data.reshape(-1, *data.shape[-2:]), columns)
    return x.reshape(b.shape)


def _tangent_value(ddata, db, data, x, *, offsets):
    return _solve_members(data, db - _product(ddata, x, offsets), offsets, "N")


# tangent_solve(ddata, db, data, x) = A^{-1} (db - dA x), linear in (ddata, db); every
# argument may carry leading batch axes, `data` may lack them.
tangent_solve_p = Primitive("jaxsparse_banded_tangent_solve")


@tangent_solve_p.def_abstract_eval
def _abstract_eval(ddata, db, data, x, *, offsets):
    return ShapedArray(x.shape, x.dtype)


tangent_solve_p.def_impl(_tangent_value)
mlir.register_lowering(tangent_solve_p, mlir.lower_fun(_tangent_value, multiple_results=False))


def _transpose(ct, ddata, db, data, x, *, offsets):
    if type(ct) is ad.Zero:
        return [None, None, None, None]
    if ad.is_undefined_primal(ddata):
        adjoint, dvalues = _adjoint(offsets, True)(data, x, ct)
    else:
        adjoint, dvalues = _adjoint(offsets, False)(data, x, ct), None
    return [dvalues, adjoint if ad.is_undefined_primal(db) else None, None, None]


ad.primitive_transposes[tangent_solve_p] = _transpose


def _jvp(primals, tangents, *, offsets):
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    composition = functools.partial(_composition, offsets=offsets)
    return jax.jvp(composition, tuple(primals), tuple(tangents))


def _composition(ddata, db, data, x, *, offsets):
    return one_pass_solve(data, db - _product(ddata, x, offsets), offsets)


ad.primitive_jvps[tangent_solve_p] = _jvp


def _batch(args, dims, *, offsets):
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)

    def front(value, dim):
        if dim is None:
            return jnp.broadcast_to(value, (size, *value.shape))
        return jnp.moveaxis(value, dim, 0)

    ddata, db, data, x = args
    shared = dims[2] is None and data.ndim == 2
    moved = [
        front(ddata, dims[0]),
        front(db, dims[1]),
        data if shared else front(data, dims[2]),
        front(x, dims[3]),
    ]
    return tangent_solve_p.bind(*moved, offsets=offsets), 0


batching.primitive_batchers[tangent_solve_p] = _batch


@functools.cache
def _solver(offsets: tuple):
    @jax.custom_jvp
    def solve(data, b):
        return native_banded_lu.banded_solve(data, b, offsets=offsets)

    @solve.defjvp
    def _(primals, tangents):
        data, b = primals
        ddata, db = tangents
        x = solve(data, b)
        return x, tangent_solve_p.bind(ddata, db, data, x, offsets=offsets)

    return solve


def one_pass_solve(data, b, offsets) -> jax.Array:
    """`A^{-1} b` for the square DIA matrix with values `data` `(ndiag, n)` and static
    `offsets`, `b` `(n, k)`: `native_banded_lu.banded_solve`, differentiable in `data` and
    `b` in both modes."""
    return _solver(tuple(offsets))(data, b)
