"""The banded LU of a square DIA matrix and its solves on CPU by jaxsparse's native kernels
(`native/banded_lu.cc`), and the same on the host through LAPACK's `?gbtrf`/`?gbtrs`
(scipy) for every other platform; and `banded_solve`, factor and solve in one pass with no
factors kept (`native/banded_solve.cc`; on GPUs a tridiagonal band on the device,
`device_tridiagonal.py`, and LAPACK on the host elsewhere).

Both produce the same factors: LAPACK's band in LAPACK's memory order, a row-major
`(n, 2 * kl + ku + 1)` array whose row `j` is LAPACK's column `j`, `band[j, kl + ku + i - j]
== A[i, j]` (the transpose of LAPACK's `(2 * kl + ku + 1, n)` array), 0-based int32 pivots,
and LAPACK's `info` (0, or the 1-based column of the first zero pivot). Factors are plain
arrays, so they are pytree leaves that `jit`, `vmap` and `eqx.filter_*` carry like any
other.

Batches: the factorization of values `(..., ndiag, n)` is one call over every member.
A solve with shared factors and batched right-hand sides puts the batch into columns, one
multi-column solve; batched factors solve member by member in one call (threads on CPU).
Every native and host call takes its batch, whatever its axes and depth of `vmap`, folded
into one leading axis (`_folded_batch.fold_batch`).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg.lapack

from . import _native_library, device_tridiagonal
from ._folded_batch import fold_batch

SOLVE_OPS = {"N": 0, "T": 1, "H": 2}
_VALUE_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def bandwidths(offsets, n: int) -> tuple[int, int]:
    """`(kl, ku)`: the sub- and superdiagonals of an `n x n` DIA matrix with `offsets`,
    diagonals wholly outside the matrix dropped."""
    inside = [offset for offset in offsets if -n < offset < n]
    return max([0, *(-offset for offset in inside)]), max([0, *inside])


def native_available(dtype) -> bool:
    """Whether the native kernels are built and take `dtype`."""
    return _native_library.AVAILABLE and np.dtype(dtype) in _VALUE_DTYPES


def _factor_shapes(data, kl, ku):
    lead, n = data.shape[:-2], data.shape[-1]
    return (
        jax.ShapeDtypeStruct((*lead, n, 2 * kl + ku + 1), data.dtype),
        jax.ShapeDtypeStruct((*lead, n), np.int32),
        jax.ShapeDtypeStruct(lead, np.int32),
    )


def _factor_native(data, *, offsets, kl, ku):
    def call(data):
        factor = jax.ffi.ffi_call("jaxsparse_dia_banded_lu", _factor_shapes(data, kl, ku))
        return tuple(factor(data, offsets=np.asarray(offsets, np.int64)))

    return fold_batch(call, (data,), (2,))


def _band_on_host(data: np.ndarray, offsets, kl: int, ku: int) -> np.ndarray:
    """LAPACK's `(2 * kl + ku + 1, n)` band of one member's DIA values, fill rows zero."""
    n = data.shape[-1]
    band = np.zeros((2 * kl + ku + 1, n), data.dtype)
    for values, offset in zip(data, offsets, strict=True):
        if -n < offset < n:
            columns = slice(max(0, offset), min(n, n + offset))
            band[kl + ku - offset, columns] = values[columns]
    return band


def _lapack(name: str, dtype):
    return scipy.linalg.lapack.get_lapack_funcs(name, dtype=np.dtype(dtype))


def _factor_on_host(data, *, offsets, kl, ku):
    data = np.asarray(data)
    lead = data.shape[:-2]
    band_shape, pivots_shape, info_shape = _factor_shapes(data, kl, ku)
    bands = np.empty(band_shape.shape, data.dtype)
    pivots = np.empty(pivots_shape.shape, np.int32)
    info = np.empty(info_shape.shape, np.int32)
    gbtrf = _lapack("gbtrf", data.dtype)
    for index in np.ndindex(*lead):
        band = _band_on_host(data[index], offsets, kl, ku)
        lu, piv, status = gbtrf(band, kl, ku)
        bands[index], pivots[index] = lu.T, piv
        info[index] = max(status, 0)
    return bands, pivots, info


def _factor_host(data, *, offsets, kl, ku):
    factor = functools.partial(_factor_on_host, offsets=tuple(offsets), kl=kl, ku=ku)

    def call(data):
        return jax.pure_callback(factor, _factor_shapes(data, kl, ku), data)

    return fold_batch(call, (data,), (2,))


def banded_lu(data, *, offsets, kl: int, ku: int, host: bool = False):
    """The banded LU of the square DIA matrix with values `data` (`(..., ndiag, n)`) and
    static `offsets`: `(band, pivots, info)`, each with `data`'s leading batch axes.

    On CPU with the native kernels built (and `host` False): one native call; elsewhere
    LAPACK's `?gbtrf` on the host through `jax.pure_callback`."""
    kwargs = dict(offsets=tuple(offsets), kl=kl, ku=ku)
    if host or not native_available(data.dtype):
        return _factor_host(data, **kwargs)
    return jax.lax.platform_dependent(
        data,
        cpu=functools.partial(_factor_native, **kwargs),
        default=functools.partial(_factor_host, **kwargs),
    )


# The solves' arrays: the factors or values (one matrix's for the whole batch, or each
# member's), then right-hand sides or cotangents (each member's).
_FACTORS_THEN_B = dict(ranks=(2, 1, 2), shared=(True, True, False))
_VALUES_THEN_B = dict(ranks=(2, 2), shared=(True, False))
_VALUES_X_G = dict(ranks=(2, 2, 2), shared=(True, False, False))


def _solve_native(band, pivots, b, *, kl, ku, op):
    def call(band, pivots, b):
        out = jax.ShapeDtypeStruct(b.shape, b.dtype)
        solve = jax.ffi.ffi_call("jaxsparse_banded_lu_solve", out)
        return solve(band, pivots, b, kl=np.int64(kl), ku=np.int64(ku), op=np.int64(SOLVE_OPS[op]))

    return fold_batch(call, (band, pivots, b), **_FACTORS_THEN_B)


def _solve_on_host(band, pivots, b, *, kl, ku, op):
    band, pivots, b = np.asarray(band), np.asarray(pivots), np.asarray(b)
    # LAPACK swaps row j with row pivots[j]: factors edited by hand must not move a row
    # from outside the matrix or the band (the native solve refuses them alike).
    j = np.arange(pivots.shape[-1])
    if np.any((pivots < j) | (pivots > np.minimum(j.size - 1, j + kl))):
        raise ValueError("banded solve: pivots[j] must lie in [j, j + kl]")
    gbtrs = _lapack("gbtrs", b.dtype)
    x = np.empty_like(b)
    for index in np.ndindex(*b.shape[:-2]):
        x[index], _ = gbtrs(band[index].T, kl, ku, b[index], pivots[index], trans=SOLVE_OPS[op])
    return x


def _solve_host(band, pivots, b, *, kl, ku, op):
    solve = functools.partial(_solve_on_host, kl=kl, ku=ku, op=op)

    def call(band, pivots, b):
        return jax.pure_callback(solve, jax.ShapeDtypeStruct(b.shape, b.dtype), band, pivots, b)

    return fold_batch(call, (band, pivots, b), **_FACTORS_THEN_B)


def _solve_members(band, pivots, data, b, *, offsets, kl, ku, op, host):
    """The solve from the factors `(band, pivots)` of the values `data`: natively on CPU; on
    GPUs for a tridiagonal band from `data` on the device; elsewhere on the host."""
    kwargs = dict(kl=kl, ku=ku, op=op)

    def on_host(band, pivots, data, b):
        return _solve_host(band, pivots, b, **kwargs)

    if host:
        return on_host(band, pivots, data, b)

    def on_device(band, pivots, data, b):
        return device_tridiagonal.solve(data, b, offsets=offsets, op=op)

    def native(band, pivots, data, b):
        return _solve_native(band, pivots, b, **kwargs)

    branches = _off_cpu(on_device, on_host, kl, ku, b.shape[-2])
    if native_available(b.dtype):
        branches["cpu"] = native
    return jax.lax.platform_dependent(band, pivots, data, b, **branches)


def batch_as_columns(b):
    """Right-hand sides `(batch, n, k)` that share one matrix as the columns `(n, batch * k)`
    of one solve (`columns_as_batch` undoes it)."""
    batch, n, k = b.shape
    return jnp.moveaxis(b, 0, 1).reshape(n, batch * k)


def columns_as_batch(x, batch: int):
    """The solution `(n, batch * k)` of `batch_as_columns`'s solve as `(batch, n, k)`."""
    n = x.shape[0]
    return jnp.moveaxis(x.reshape(n, batch, -1), 1, 0)


@functools.cache
def _solver(offsets: tuple, kl: int, ku: int, op: str, host: bool):
    """`solve(band, pivots, data, b)` for one matrix and `b` of shape `(n, k)`, whose
    batching rule turns right-hand sides batched over a shared matrix into columns."""
    kwargs = dict(offsets=offsets, kl=kl, ku=ku, op=op, host=host)

    @jax.custom_batching.custom_vmap
    def solve(band, pivots, data, b):
        return _solve_members(band, pivots, data, b, **kwargs)

    @solve.def_vmap
    def _(axis_size, in_batched, band, pivots, data, b):
        if not any(in_batched[:3]):
            x = solve(band, pivots, data, batch_as_columns(b))
            return columns_as_batch(x, axis_size), True
        batched = [
            value if is_batched else jnp.broadcast_to(value, (axis_size, *value.shape))
            for value, is_batched in zip((band, pivots, data, b), in_batched, strict=True)
        ]
        return _solve_members(*batched, **kwargs), True

    return solve


def banded_lu_solve(
    band, pivots, data, b, *, offsets, kl: int, ku: int, op: str = "N", host: bool = False
):
    """`x` with `A x = b` (`op="N"`), `A^T x = b` ("T") or `A^H x = b` ("H") from the factors
    `(band, pivots)` that `banded_lu` made of the DIA values `data` (static `offsets`); `b`
    of shape `(n, k)`. On GPUs a tridiagonal band is solved again from `data` on the device
    (`device_tridiagonal`), where the factors would need the host. No zero-pivot check: a
    singular factor gives inf or nan."""
    return _solver(tuple(offsets), kl, ku, op, host)(band, pivots, data, b)


def _solve_once_native(data, b, *, offsets, op):
    def call(data, b):
        out = jax.ShapeDtypeStruct(b.shape, b.dtype)
        solve = jax.ffi.ffi_call("jaxsparse_dia_banded_solve", out)
        return solve(data, b, offsets=np.asarray(offsets, np.int64), op=np.int64(SOLVE_OPS[op]))

    return fold_batch(call, (data, b), **_VALUES_THEN_B)


def _solve_once_on_host(data, b, *, offsets, kl, ku, op):
    """The solve for `b` `(..., n, k)` with `data` one matrix's or with `b`'s leading axes."""
    b = np.asarray(b)
    data = np.broadcast_to(np.asarray(data), (*b.shape[:-2], *np.shape(data)[-2:]))
    bands, pivots, info = _factor_on_host(data, offsets=offsets, kl=kl, ku=ku)
    x = _solve_on_host(bands, pivots, b, kl=kl, ku=ku, op=op)
    return np.where((info == 0)[..., None, None], x, np.nan).astype(x.dtype)


def _solve_once_host(data, b, *, offsets, kl, ku, op):
    solve = functools.partial(_solve_once_on_host, offsets=offsets, kl=kl, ku=ku, op=op)

    def call(data, b):
        return jax.pure_callback(solve, jax.ShapeDtypeStruct(b.shape, b.dtype), data, b)

    return fold_batch(call, (data, b), **_VALUES_THEN_B)


def _off_cpu(device, host, kl: int, ku: int, n: int) -> dict:
    """`jax.lax.platform_dependent`'s branches where the native kernels do not run: `device`
    on GPUs where `device_tridiagonal` covers the band, `host` everywhere else (the CPU
    included, for dtypes or builds without native kernels)."""
    if device_tridiagonal.covers(kl, ku, n):
        return dict(cuda=device, rocm=device, default=host)
    return dict(default=host)


def solve_once_off_cpu(data, b, *, offsets, kl, ku, op):
    """The one-pass solve where the native kernels do not run (see `_off_cpu`)."""
    device = functools.partial(device_tridiagonal.solve, offsets=offsets, op=op)
    host = functools.partial(_solve_once_host, offsets=offsets, kl=kl, ku=ku, op=op)
    return jax.lax.platform_dependent(data, b, **_off_cpu(device, host, kl, ku, b.shape[-2]))


def _solve_once_members(data, b, *, offsets, kl, ku, op, host):
    kwargs = dict(offsets=offsets, kl=kl, ku=ku, op=op)
    if host:
        return _solve_once_host(data, b, **kwargs)
    if not native_available(b.dtype):
        return solve_once_off_cpu(data, b, **kwargs)
    return jax.lax.platform_dependent(
        data,
        b,
        cpu=functools.partial(_solve_once_native, offsets=offsets, op=op),
        default=functools.partial(solve_once_off_cpu, **kwargs),
    )


@functools.cache
def _one_pass_solver(offsets: tuple, kl: int, ku: int, op: str, host: bool):
    """`solve(data, b)` for one matrix and `b` of shape `(n, k)`, whose batching rule turns
    right-hand sides batched over one matrix into columns."""
    kwargs = dict(offsets=offsets, kl=kl, ku=ku, op=op, host=host)

    @jax.custom_batching.custom_vmap
    def solve(data, b):
        return _solve_once_members(data, b, **kwargs)

    @solve.def_vmap
    def _(axis_size, in_batched, data, b):
        data_batched, b_batched = in_batched
        if not data_batched:
            return columns_as_batch(solve(data, batch_as_columns(b)), axis_size), True
        if not b_batched:
            b = jnp.broadcast_to(b, (axis_size, *b.shape))
        return _solve_once_members(data, b, **kwargs), True

    return solve


def banded_solve(data, b, *, offsets, op: str = "N", host: bool = False):
    """`x` with `A x = b` (`op="N"`), `A^T x = b` ("T") or `A^H x = b` ("H") for the square
    DIA matrix with values `data` (`(ndiag, n)`) and static `offsets`, `b` of shape `(n, k)`:
    LU with partial pivoting and the solve in one pass, no factors kept. On CPU one native
    call (split over two threads where `A` is diagonally dominant, `native/banded_split.h`);
    on GPUs a tridiagonal band on the device (`device_tridiagonal`); elsewhere LAPACK on
    the host. A singular matrix gives `nan` everywhere."""
    kl, ku = bandwidths(offsets, data.shape[-1])
    return _one_pass_solver(tuple(offsets), kl, ku, op, host)(data, b)


def _adjoint_shapes(data, x):
    lead = x.shape[:-2]
    return (
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct((*lead, *data.shape[-2:]), x.dtype),
    )


def _adjoint_native(data, x, g, *, offsets):
    def call(data, x, g):
        adjoint = jax.ffi.ffi_call("jaxsparse_dia_banded_adjoint", _adjoint_shapes(data, x))
        return tuple(adjoint(data, x, g, offsets=np.asarray(offsets, np.int64)))

    return fold_batch(call, (data, x, g), **_VALUES_X_G)


def _adjoint_on_host(data, x, g, *, offsets, kl, ku):
    x = np.asarray(x)
    adjoint = _solve_once_on_host(data, g, offsets=offsets, kl=kl, ku=ku, op="T")
    n = x.shape[-2]
    dvalues = np.zeros((*x.shape[:-2], *np.shape(data)[-2:]), x.dtype)
    for d, offset in enumerate(offsets):
        columns = np.arange(max(0, offset), min(n, n + offset))
        if columns.size:
            products = adjoint[..., columns - offset, :] * x[..., columns, :]
            dvalues[..., d, columns] = -products.sum(axis=-1)
    return adjoint, dvalues


def _adjoint_host(data, x, g, *, offsets, kl, ku):
    adjoint = functools.partial(_adjoint_on_host, offsets=offsets, kl=kl, ku=ku)

    def call(data, x, g):
        return jax.pure_callback(adjoint, _adjoint_shapes(data, x), data, x, g)

    return fold_batch(call, (data, x, g), **_VALUES_X_G)


def adjoint_off_cpu(data, x, g, *, offsets, kl, ku):
    """`banded_adjoint` where the native kernels do not run (see `_off_cpu`)."""
    device = functools.partial(device_tridiagonal.adjoint, offsets=offsets)
    host = functools.partial(_adjoint_host, offsets=offsets, kl=kl, ku=ku)
    return jax.lax.platform_dependent(data, x, g, **_off_cpu(device, host, kl, ku, x.shape[-2]))


def banded_adjoint(data, x, g, *, offsets, host: bool = False):
    """The reverse-mode step of `x = banded_solve(data, b)`: `(lambda, dvalues)` with
    `lambda = A^{-T} g` (`b`'s cotangent) and `dvalues[..., d, j] = -lambda[j - offsets[d]]
    . x[j]` on the slots inside the matrix, zero elsewhere (the values' cotangent, plain
    transposes for complex values), in one native call on CPU (the adjoint pass, then the
    values' cotangent on both threads); on GPUs for a tridiagonal band on the device;
    elsewhere on the host.

    `x` and `g` are `(..., n, k)` with the same leading axes; `data` is `(ndiag, n)` or has
    those leading axes too."""
    kl, ku = bandwidths(offsets, data.shape[-1])
    kwargs = dict(offsets=tuple(offsets), kl=kl, ku=ku)
    if host:
        return _adjoint_host(data, x, g, **kwargs)
    if not native_available(x.dtype):
        return adjoint_off_cpu(data, x, g, **kwargs)
    return jax.lax.platform_dependent(
        data,
        x,
        g,
        cpu=functools.partial(_adjoint_native, offsets=tuple(offsets)),
        default=functools.partial(adjoint_off_cpu, **kwargs),
    )
