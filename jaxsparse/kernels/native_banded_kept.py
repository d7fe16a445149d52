"""The one-pass banded solve of a square DIA matrix keeping its factors, and the solves of
its derivatives from them (`native/banded_factored.h`): what `spsolve`'s derivatives run.

`solve_keeping(data, b)` returns `x` with `A x = b` and `Kept`, the factors of that pass:
`u` `(..., n, kl + ku)` (U's rows past the diagonal, over their pivot), `lower` `(..., n,
max(kl, ku) + 1)` (the inverse pivot, then the multipliers), `pivots` `(..., n)` int32 (row
`j + pivots[j]` swapped with row `j`) and `status` `(...)` int32 (0: a zero pivot, the
solve is nan; 1: one pass; 2: the two blocks of the split). `kept_solve` (with `A` or `A^T`)
and `kept_adjoint` (`A^T` and the values' cotangent) sweep with those factors, multiply-adds
alone, where a solve from the values would search for pivots and divide again.

A tridiagonal band (`kl, ku <= 1`) keeps `TridiagonalKept` instead: the inverse pivots
`(..., n)` of an elimination without interchanges, and `status` `(...)` int32 (1: kept; 0:
a matrix of the call was neither row nor column diagonally dominant, or singular, so the
pass solved with pivoting and the derivatives' solves factor again from the values). With
the values beside them they are the whole factorization, in a quarter of `Kept`'s memory,
which lets a gradient step keep them at any size (`native/banded_tridiagonal.h`).

On CPU with the native kernels built: native calls. Elsewhere the solve runs as
`native_banded_lu.banded_solve` runs it there (a tridiagonal band on a GPU itself, LAPACK on
the host otherwise) and keeps nothing: the factors are zeros of the same shapes, and the
derivatives' solves factor again from the values.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._folded_batch import fold_batch
from .native_banded_lu import (
    SOLVE_OPS,
    _adjoint_host,
    _adjoint_shapes,
    _solve_once_host,
    adjoint_off_cpu,
    bandwidths,
    batch_as_columns,
    columns_as_batch,
    native_available,
    solve_once_off_cpu,
)


class Kept(NamedTuple):
    """The factors `solve_keeping` keeps (see the module's docstring)."""

    u: jax.Array
    lower: jax.Array
    pivots: jax.Array
    status: jax.Array


class TridiagonalKept(NamedTuple):
    """What `solve_keeping` keeps of a tridiagonal band (see the module's docstring)."""

    inverse_pivots: jax.Array
    status: jax.Array


def is_tridiagonal(kl: int, ku: int) -> bool:
    """Whether a band with these bandwidths keeps `TridiagonalKept`."""
    return kl <= 1 and ku <= 1


def kept_factors(arrays) -> Kept | TridiagonalKept:
    """The kept factors as their tuple, from their arrays in order."""
    return (TridiagonalKept if len(arrays) == len(TridiagonalKept._fields) else Kept)(*arrays)


def kept_ranks(kept) -> tuple[int, ...]:
    """The ranks of the kept factors' arrays for one matrix."""
    return (1, 0) if isinstance(kept, TridiagonalKept) else (2, 2, 1, 0)


def _kept_shapes(b, kl: int, ku: int) -> Kept | TridiagonalKept:
    lead, n = b.shape[:-2], b.shape[-2]
    if is_tridiagonal(kl, ku):
        return TridiagonalKept(
            jax.ShapeDtypeStruct((*lead, n), b.dtype), jax.ShapeDtypeStruct(lead, np.int32)
        )
    return Kept(
        jax.ShapeDtypeStruct((*lead, n, kl + ku), b.dtype),
        jax.ShapeDtypeStruct((*lead, n, max(kl, ku) + 1), b.dtype),
        jax.ShapeDtypeStruct((*lead, n), np.int32),
        jax.ShapeDtypeStruct(lead, np.int32),
    )


def _keeping_native(data, b, *, offsets, kl, ku):
    target = "tridiagonal" if is_tridiagonal(kl, ku) else "banded"

    def call(data, b):
        kept_shapes = _kept_shapes(b, kl, ku)
        shapes = (jax.ShapeDtypeStruct(b.shape, b.dtype), *kept_shapes)
        keeping = jax.ffi.ffi_call(f"jaxsparse_dia_{target}_solve_keeping", shapes)
        x, *kept = keeping(data, b, offsets=np.asarray(offsets, np.int64))
        return x, type(kept_shapes)(*kept)

    # The kernel keeps one set of factors per member of b's batch: the values get that batch.
    return fold_batch(call, (data, b), (2, 2))


def _keeping_elsewhere(data, b, *, offsets, kl, ku, host):
    """The solve where no native kernel keeps factors, on the host (`host`) or as
    `solve_once_off_cpu` runs it; the factors are zeros."""
    solve = _solve_once_host if host else solve_once_off_cpu
    x = solve(data, b, offsets=offsets, kl=kl, ku=ku, op="N")
    shapes = _kept_shapes(b, kl, ku)
    return x, type(shapes)(*(jnp.zeros(s.shape, s.dtype) for s in shapes))


def _keeping_members(data, b, *, offsets, kl, ku, host):
    kwargs = dict(offsets=offsets, kl=kl, ku=ku)
    if host or not native_available(b.dtype):
        return _keeping_elsewhere(data, b, **kwargs, host=host)
    return jax.lax.platform_dependent(
        data,
        b,
        cpu=functools.partial(_keeping_native, **kwargs),
        default=functools.partial(_keeping_elsewhere, **kwargs, host=False),
    )


@functools.cache
def _keeping_solver(offsets: tuple, kl: int, ku: int, host: bool):
    """`solve(data, b)` for one matrix and `b` `(n, k)`; its batching rule turns right-hand
    sides batched over one matrix into columns (one set of factors)."""
    kwargs = dict(offsets=offsets, kl=kl, ku=ku, host=host)

    @jax.custom_batching.custom_vmap
    def solve(data, b):
        return _keeping_members(data, b, **kwargs)

    @solve.def_vmap
    def _(axis_size, in_batched, data, b):
        data_batched, b_batched = in_batched
        if not data_batched:
            x, kept = solve(data, batch_as_columns(b))
            unbatched = type(kept)(*(False for _ in kept))
            return (columns_as_batch(x, axis_size), kept), (True, unbatched)
        if not b_batched:
            b = jnp.broadcast_to(b, (axis_size, *b.shape))
        x, kept = _keeping_members(data, b, **kwargs)
        return (x, kept), (True, type(kept)(*(True for _ in kept)))

    return solve


def solve_keeping(data, b, *, offsets, host: bool = False):
    """`(x, kept)`: `x` with `A x = b` for the square DIA matrix with values `data`
    (`(ndiag, n)`) and static `offsets`, `b` `(n, k)`, as `native_banded_lu.banded_solve`
    computes it, and the factors (`Kept`) of that pass; zeros where no native kernel runs
    it (`host`, or a platform other than CPU)."""
    kl, ku = bandwidths(offsets, data.shape[-1])
    return _keeping_solver(tuple(offsets), kl, ku, host)(data, b)


def _tridiagonal_kept_solve_native(data, kept, b, *, offsets, op):
    def call(data, inverse_pivots, status, b):
        solve = jax.ffi.ffi_call(
            "jaxsparse_dia_tridiagonal_kept_solve", jax.ShapeDtypeStruct(b.shape, b.dtype)
        )
        offsets_attribute = np.asarray(offsets, np.int64)
        return solve(
            data, inverse_pivots, status, b, offsets=offsets_attribute, op=np.int64(SOLVE_OPS[op])
        )

    return fold_batch(call, (data, *kept, b), (2, 1, 0, 2), (True, True, True, False))


def _kept_solve_native(data, kept, b, *, offsets, op):
    if isinstance(kept, TridiagonalKept):
        return _tridiagonal_kept_solve_native(data, kept, b, offsets=offsets, op=op)

    def call(u, lower, pivots, status, b):
        out = jax.ShapeDtypeStruct(b.shape, b.dtype)
        solve = jax.ffi.ffi_call("jaxsparse_dia_banded_factored_solve", out)
        return solve(
            u,
            lower,
            pivots,
            status,
            b,
            offsets=np.asarray(offsets, np.int64),
            op=np.int64(SOLVE_OPS[op]),
        )

    shared = (True,) * len(kept) + (False,)
    return fold_batch(call, (*kept, b), (*kept_ranks(kept), 2), shared)


def _kept_solve_elsewhere(data, kept, b, *, offsets, op, host):
    kl, ku = bandwidths(offsets, data.shape[-1])
    solve = _solve_once_host if host else solve_once_off_cpu
    return solve(data, b, offsets=offsets, kl=kl, ku=ku, op=op)


def kept_solve(
    data, kept: Kept | TridiagonalKept, b, *, offsets, op: str = "N", host: bool = False
):
    """`x` with `A x = b` (`op="N"`) or `A^T x = b` ("T") from the factors that
    `solve_keeping(data, ...)` kept, `b` `(..., n, k)`; `data` and the factors are one
    matrix's or have `b`'s leading axes. On CPU one native call; elsewhere (or with
    `host`) `data` is factored again. A singular matrix gives nan."""
    kwargs = dict(offsets=tuple(offsets), op=op)
    if host or not native_available(b.dtype):
        return _kept_solve_elsewhere(data, kept, b, **kwargs, host=host)
    return jax.lax.platform_dependent(
        data,
        kept,
        b,
        cpu=functools.partial(_kept_solve_native, **kwargs),
        default=functools.partial(_kept_solve_elsewhere, **kwargs, host=False),
    )


def _kept_adjoint_native(data, kept, x, g, *, offsets):
    values = jax.ShapeDtypeStruct(data.shape[-2:], data.dtype)
    offsets_attribute = np.asarray(offsets, np.int64)
    if isinstance(kept, TridiagonalKept):

        def call(data, inverse_pivots, status, x, g):
            shapes = _adjoint_shapes(values, x)
            # lambda in g's buffer: a gradient step allocates 8 bytes a row less.
            adjoint = jax.ffi.ffi_call(
                "jaxsparse_dia_tridiagonal_kept_adjoint", shapes, input_output_aliases={4: 0}
            )
            return tuple(adjoint(data, inverse_pivots, status, x, g, offsets=offsets_attribute))

        shared = (True, True, True, False, False)
        return fold_batch(call, (data, *kept, x, g), (2, 1, 0, 2, 2), shared)

    def call(u, lower, pivots, status, x, g):
        shapes = _adjoint_shapes(values, x)
        adjoint = jax.ffi.ffi_call("jaxsparse_dia_banded_factored_adjoint", shapes)
        return tuple(adjoint(u, lower, pivots, status, x, g, offsets=offsets_attribute))

    shared = (True,) * len(kept) + (False, False)
    return fold_batch(call, (*kept, x, g), (*kept_ranks(kept), 2, 2), shared)


def _kept_adjoint_elsewhere(data, kept, x, g, *, offsets, host):
    kl, ku = bandwidths(offsets, data.shape[-1])
    adjoint = _adjoint_host if host else adjoint_off_cpu
    return adjoint(data, x, g, offsets=offsets, kl=kl, ku=ku)


def kept_adjoint(data, kept: Kept | TridiagonalKept, x, g, *, offsets, host: bool = False):
    """The reverse-mode step of `x, kept = solve_keeping(data, b)`: `(lambda, dvalues)` with
    `lambda = A^{-T} g` (`b`'s cotangent) and `dvalues[..., d, j] = -lambda[j - offsets[d]]
    . x[j]` on the slots inside the matrix, zero elsewhere (the values' cotangent, plain
    transposes for complex values): on CPU one native call (the sweeps with the factors,
    then the values' cotangent, on both threads); elsewhere (or with `host`) from `data`
    as `native_banded_lu.banded_adjoint` runs it there.

    `x` and `g` are `(..., n, k)` with the same leading axes; `data` and the factors are
    one matrix's or have those leading axes too."""
    kwargs = dict(offsets=tuple(offsets))
    if host or not native_available(x.dtype):
        return _kept_adjoint_elsewhere(data, kept, x, g, **kwargs, host=host)
    return jax.lax.platform_dependent(
        data,
        kept,
        x,
        g,
        cpu=functools.partial(_kept_adjoint_native, **kwargs),
        default=functools.partial(_kept_adjoint_elsewhere, **kwargs, host=False),
    )
