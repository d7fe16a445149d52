"""`one_pass_solve`: the one-pass banded solve of a DIA matrix (what `spsolve` runs) as a
differentiable function of the stored values and `b`.

A plain solve keeps no factors. Under differentiation the pass keeps them where that pays
(`keeps_factors`; `native_banded_kept.solve_keeping`), and the tangent `dx = A^{-1} (db -
dA x)` is one primitive, linear in `(dA, db)` together, that solves with those factors by
multiply-adds alone, or else from the values. Its transpose is one native call returning
`lambda = A^{-T} g` and the values' cotangent `-lambda[row(p)] * x[col(p)]`
(`native_banded_kept.kept_adjoint`, or `native_banded_lu.banded_adjoint` from the values),
where `jax.lax.custom_linear_solve` would solve with `A^T` and then make two more passes over
memory. Derivatives of those steps (second order) are those of the same written as one-pass
solves and products. JAX's convention for complex values holds: plain transposes, never
conjugates.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from .._dia_layout import transpose_data
from ..kernels import native_banded_kept, native_banded_lu
from ..kernels._folded_batch import batch_shape, fold_arrays, unfold
from ..kernels.native_banded_kept import is_tridiagonal, kept_factors, kept_ranks
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


def _solve(data, b, offsets):
    """`one_pass_solve` for `b` `(..., n, k)` and `data` one matrix's or with `b`'s leading
    axes, member by member (`vmap`, whose rules solve right-hand sides over one matrix as
    columns)."""
    return _per_matrix(functools.partial(one_pass_solve, offsets=offsets), (data, b), (2, 2))


def _values_cotangent(adjoint, x, offsets):
    """`-adjoint[j - offset] . x[j]` at every slot `(d, j)` inside the matrix, zero outside."""
    n = x.shape[-2]
    sddmm = functools.partial(dia_sddmm_xla, offsets=offsets, shape=(n, n))
    return -_per_matrix(sddmm, (adjoint, x), (2, 2))


# Kept factors with the solution and its cotangent beside them, in bytes, up to which any band
# keeps its factors for the derivatives.
KEPT_BYTES = 32 << 20


def keeps_factors(offsets, n: int, columns: int, dtype) -> bool:
    """Whether the derivatives of a solve with this `n x n` band and `columns` right-hand
    sides keep the forward pass's factors (`native_banded_kept`) rather than factor `A^T`
    again from the values: always for a tridiagonal band (which keeps its inverse pivots
    alone, `n` values); otherwise when the factors, the solution and its cotangent take at
    most `KEPT_BYTES`, or the band is wider than pentadiagonal (`kl + ku > 4`).

    XLA allocates a call's buffers afresh, and glibc hands out blocks over 32 MiB as new
    mappings whose pages fault in on every call: for a band with `kl + ku <= 4`, that costs
    more than factoring again (which searches and divides where the kept
    factors only multiply); a wider band costs far more to factor again than to fault in.
    Measured in `benchmarks/results/solve-gradient-2026-11-26-epyc.txt`."""
    kl, ku = native_banded_lu.bandwidths(offsets, n)
    if is_tridiagonal(kl, ku):
        return True
    itemsize = np.dtype(dtype).itemsize
    size = n * (kl + ku + max(kl, ku) + 1 + 2 * columns) * itemsize + 4 * n
    return size <= KEPT_BYTES or kl + ku > 4


def _solve_members(data, b, offsets, op):
    """The one-pass solve for `b` `(..., n, k)` and `data` `(ndiag, n)` or with `b`'s leading
    axes."""
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


@functools.cache
def _adjoint(offsets: tuple, fused: bool):
    """`adjoint(data, kept, x, g)`: `(lambda, dvalues)` (`fused`) or `lambda` alone, in one
    native call from the kept factors, or from the values where `kept` is None; its own
    derivatives (second order) are those of the same as one-pass solves of `A^T` and
    products."""

    def reference(data, x, g):
        transposed = tuple(-offset for offset in offsets)
        adjoint = _solve(_transposed_values(data, offsets), g, transposed)
        return (adjoint, _values_cotangent(adjoint, x, offsets)) if fused else adjoint

    @jax.custom_jvp
    def adjoint(data, kept, x, g):
        if kept is None and fused:
            return native_banded_lu.banded_adjoint(data, x, g, offsets=offsets)
        if kept is None:
            return _solve_members(data, g, offsets, "T")
        if fused:
            return native_banded_kept.kept_adjoint(data, kept, x, g, offsets=offsets)
        return native_banded_kept.kept_solve(data, kept, g, offsets=offsets, op="T")

    @adjoint.defjvp
    def _(primals, tangents):
        (data, _, x, g), (ddata, _, dx, dg) = primals, tangents
        return jax.jvp(reference, (data, x, g), (ddata, dx, dg))

    return adjoint


def _tangent_value(ddata, db, data, x, *kept, offsets):
    rhs = db - _product(ddata, x, offsets)
    if not kept:
        return _solve_members(data, rhs, offsets, "N")
    return native_banded_kept.kept_solve(data, kept_factors(kept), rhs, offsets=offsets)


# tangent_solve(ddata, db, data, x, *kept) = A^{-1} (db - dA x), linear in (ddata, db), with
# `kept` the factors of the pass that gave x, or nothing; every argument may carry one
# leading batch axis (`_batch` folds any depth of `vmap` into it), `data` and `kept` may
# lack it.
tangent_solve_p = Primitive("jaxsparse_banded_tangent_solve")


@tangent_solve_p.def_abstract_eval
def _abstract_eval(ddata, db, data, x, *kept, offsets):
    return ShapedArray(x.shape, x.dtype)


tangent_solve_p.def_impl(_tangent_value)
mlir.register_lowering(tangent_solve_p, mlir.lower_fun(_tangent_value, multiple_results=False))


def _transpose(ct, ddata, db, data, x, *kept, offsets):
    unused = [None] * (2 + len(kept))
    if type(ct) is ad.Zero:
        return [None, None, *unused]
    factors = kept_factors(kept) if kept else None
    if ad.is_undefined_primal(ddata):
        adjoint, dvalues = _adjoint(offsets, True)(data, factors, x, ct)
    else:
        adjoint, dvalues = _adjoint(offsets, False)(data, factors, x, ct), None
    return [dvalues, adjoint if ad.is_undefined_primal(db) else None, *unused]


ad.primitive_transposes[tangent_solve_p] = _transpose


def _jvp(primals, tangents, *, offsets):
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    composition = functools.partial(_composition, offsets=offsets)
    return jax.jvp(composition, tuple(primals), tuple(tangents))


def _composition(ddata, db, data, x, *kept, offsets):
    return _solve(data, db - _product(ddata, x, offsets), offsets)


ad.primitive_jvps[tangent_solve_p] = _jvp


def _batch(args, dims, *, offsets):
    """The new batch axis and the one the arguments carry folded into one: the primitive's
    arguments keep one batch axis at most under any depth of `vmap`."""
    kept = args[4:]
    ranks = (2, 2, 2, 2, *(kept_ranks(kept_factors(kept)) if kept else ()))
    # A matrix shared by the whole batch keeps its values and factors unbatched.
    shared = (False, False, True, False, *(True for _ in kept))
    vmapped = tuple(d is not None for d in dims)
    args = [a if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims, strict=True)]
    size = next(a.shape[0] for a, v in zip(args, vmapped, strict=True) if v)
    batch = (size, *batch_shape(args, ranks, vmapped))
    folded = fold_arrays(args, ranks, shared, batch, vmapped)
    return unfold(tangent_solve_p.bind(*folded, offsets=offsets), batch), 0


batching.primitive_batchers[tangent_solve_p] = _batch


@functools.cache
def _keeping_solver(offsets: tuple):
    """`(x, kept)` for `(data, b)`, differentiable in `data` and `b` (the factors' tangents
    are zero)."""

    @jax.custom_jvp
    def solve(data, b):
        return native_banded_kept.solve_keeping(data, b, offsets=offsets)

    @solve.defjvp
    def _(primals, tangents):
        data, b = primals
        ddata, db = tangents
        x, kept = solve(data, b)
        dx = tangent_solve_p.bind(ddata, db, data, x, *kept, offsets=offsets)
        return (x, kept), (dx, jax.tree.map(_zero_tangent, kept))

    return solve


def _zero_tangent(value):
    if jnp.issubdtype(value.dtype, jnp.inexact):
        return jnp.zeros_like(value)
    return np.zeros(value.shape, jax.dtypes.float0)


@functools.cache
def _solver(offsets: tuple):
    @jax.custom_jvp
    def solve(data, b):
        return native_banded_lu.banded_solve(data, b, offsets=offsets)

    @solve.defjvp
    def _(primals, tangents):
        data, b = primals
        if keeps_factors(offsets, data.shape[-1], b.shape[-1], data.dtype):
            (x, _), (dx, _) = jax.jvp(_keeping_solver(offsets), primals, tangents)
            return x, dx
        x = solve(data, b)
        return x, tangent_solve_p.bind(*tangents, data, x, offsets=offsets)

    return solve


def one_pass_solve(data, b, offsets) -> jax.Array:
    """`A^{-1} b` for the square DIA matrix with values `data` `(ndiag, n)` and static
    `offsets`, `b` `(n, k)`: `native_banded_lu.banded_solve`, differentiable in `data` and
    `b` in both modes."""
    return _solver(tuple(offsets))(data, b)
