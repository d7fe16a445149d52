"""Tridiagonal solves on the GPU itself: `jax.lax.linalg.tridiagonal_solve`, which lowers to
cuSPARSE's (on ROCm hipSPARSE's) `gtsv2`, which pivots, for a DIA band with at most one sub-
and one superdiagonal (`covers`). What `native_banded_lu`'s solves and adjoint run on CUDA
and ROCm for such a band, where a wider band goes to LAPACK on the host with a copy each
way.

Values are DIA's `(..., ndiag, n)` (`data[d, j] == A[j - offsets[d], j]`), right-hand
sides `(..., n, k)`; batches of matrices carry the same leading axes as their right-hand
sides, or one matrix serves all of them (its batch solved as columns). A column whose
solution is not finite is `nan` throughout: a zero pivot makes every column of its member
so, which is `nan` everywhere as the CPU's kernels give, while a non-finite right-hand side
spoils its own column alone.
"""

import jax
import jax.numpy as jnp

from .xla_dia import dia_sddmm_xla


def covers(kl: int, ku: int, n: int) -> bool:
    """Whether an `n x n` band with `kl` sub- and `ku` superdiagonals is solved here on GPUs:
    a tridiagonal band of at least 3 rows (jaxlib solves fewer without pivoting)."""
    return kl <= 1 and ku <= 1 and n >= 3


def _diagonals(data, offsets):
    """`(dl, d, du)` of `tridiagonal_solve` (`dl[i] = A[i, i - 1]`, `d[i] = A[i, i]`,
    `du[i] = A[i, i + 1]`, `dl[0] = du[-1] = 0`), each `(..., n)`, from DIA values."""
    row = dict(zip(offsets, jnp.moveaxis(data, -2, 0), strict=True))
    zeros = jnp.zeros(data.shape[:-2] + data.shape[-1:], data.dtype)
    edge = zeros[..., :1]
    lower = row.get(-1, zeros)  # A[j + 1, j] at column j
    upper = row.get(1, zeros)  # A[j - 1, j] at column j
    return (
        jnp.concatenate([edge, lower[..., :-1]], axis=-1),
        row.get(0, zeros),
        jnp.concatenate([upper[..., 1:], edge], axis=-1),
    )


def _transposed(dl, d, du):
    """The diagonals of `A^T` from those of `A`."""
    edge = jnp.zeros_like(d[..., :1])
    return (
        jnp.concatenate([edge, du[..., :-1]], axis=-1),
        d,
        jnp.concatenate([dl[..., 1:], edge], axis=-1),
    )


@jax.custom_batching.custom_vmap
def _pivoting_solve(dl, d, du, b):
    """`tridiagonal_solve` that pivots for every shape: jaxlib hands a batch of single
    columns to `gtsv2StridedBatch`, which does not pivot (any other shape goes member by
    member to the pivoting `gtsv2`), so such a batch gets a zero column; under `vmap` the
    batch is made explicit first, so the rule sees it."""
    padded = b.ndim > 2 and b.shape[-1] == 1
    rhs = jnp.concatenate([b, jnp.zeros_like(b)], axis=-1) if padded else b
    return jax.lax.linalg.tridiagonal_solve(dl, d, du, rhs)[..., : b.shape[-1]]


@_pivoting_solve.def_vmap
def _(axis_size, in_batched, dl, d, du, b):
    *diagonals_batched, b_batched = in_batched
    if not any(diagonals_batched):
        # One matrix for the whole batch: the batch becomes columns of one solve.
        b = b if b_batched else jnp.broadcast_to(b, (axis_size, *b.shape))
        columns = jnp.moveaxis(b, 0, -2).reshape(*b.shape[1:-1], -1)
        x = _pivoting_solve(dl, d, du, columns).reshape(*b.shape[1:-1], axis_size, -1)
        return jnp.moveaxis(x, -2, 0), True
    arrays = [
        value if batched else jnp.broadcast_to(value, (axis_size, *value.shape))
        for value, batched in zip((dl, d, du, b), in_batched, strict=True)
    ]
    return _pivoting_solve(*arrays), True


def solve(data, b, *, offsets, op: str = "N"):
    """`x` with `A x = b` (`op` "N"), `A^T x = b` ("T") or `A^H x = b` ("H") for the DIA
    values `data` with static `offsets` inside the tridiagonal band."""
    diagonals = _diagonals(data, tuple(offsets))
    if op != "N":
        diagonals = _transposed(*diagonals)
    if op == "H":
        diagonals = tuple(diagonal.conj() for diagonal in diagonals)
    # One matrix for batched right-hand sides: `vmap`, whose rule solves them as columns.
    solve_all = _pivoting_solve
    for _ in range(b.ndim - 1 - diagonals[0].ndim):
        solve_all = jax.vmap(solve_all, in_axes=(None, None, None, 0))
    x = solve_all(*diagonals, b)
    return jnp.where(jnp.all(jnp.isfinite(x), axis=-2, keepdims=True), x, jnp.nan)


def adjoint(data, x, g, *, offsets):
    """The reverse-mode step of `x = solve(data, b)`: `(lambda, dvalues)` with `lambda =
    A^{-T} g` and `dvalues[..., d, j] = -lambda[j - offsets[d]] . x[j]` inside the matrix,
    zero elsewhere (plain transposes for complex values)."""
    n = x.shape[-2]
    lam = solve(data, g, offsets=offsets, op="T")
    dvalues = -dia_sddmm_xla(lam, x, offsets=tuple(offsets), shape=(n, n))
    return lam, dvalues
