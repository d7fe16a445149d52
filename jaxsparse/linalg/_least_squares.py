"""`lsqr` and `lsmr`: sparse least squares, after `scipy.sparse.linalg`, on jaxsparse's
products.

The iterations (`_least_squares_loops.py`) are scipy's, in JAX; this module gives them
scipy's surface: its arguments, its result tuples as arrays, the promoted working dtype,
and errors naming the argument. Derivatives are implicit (a custom JVP): the solution of
`min ||A x - b||^2 + damp^2 ||x - x0||^2` satisfies the normal equations
`(A^H A + damp^2 I) x = A^H b + damp^2 x0`; its tangent is applied as two minimum-norm
least-squares solves (LSQR) whose transposes are again such solves, so reverse mode is
right wherever forward mode is; the iterations are never differentiated.
"""

import dataclasses
import functools
import numbers

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._arrays import device_array
from .._base import SparseMatrix
from .._batching import refuse_batch
from ._eigsh import tangent_product
from ._factor import dense_rhs, run_compiled, solve_dtype
from ._krylov import _tolerance
from ._least_squares_loops import lsmr_loop, lsqr_loop
from ._working_dtype import working_dtype


def lsqr(
    A, b, damp=0.0, atol=1e-6, btol=1e-6, conlim=1e8, iter_lim=None, *, calc_var=False, x0=None
):
    """LSQR for `min ||A x - b||^2 + damp^2 ||x||^2` with any sparse `A` (rectangular or
    square).

    As `scipy.sparse.linalg.lsqr` (Paige and Saunders), inside or outside `jax.jit`,
    differentiable with respect to `b`, `A`'s stored values, `damp` and `x0` in forward and
    reverse mode. `jax.vmap` over `b`, `x0` or `A.data` solves each member; a batch
    iterates until its last member stops.

    **Arguments:**

    - `A`: a `DIAMatrix` or `CSRMatrix` of shape `(m, n)`; only products `A v` and
      `A^H u` (the conjugate transpose) are used.
    - `b`: `(m,)` or `(m, 1)` (squeezed, as scipy's). scipy's solvers take one right-hand
      side, and so do these: `jax.vmap` over the columns of a `(m, k)` `b` solves several.
    - `damp`: the regularization weight, a real number `>= 0` (a negative Python number is
      a ValueError; a traced negative one acts as `|damp|`, as only `damp^2` enters the
      objective: scipy's LSMR does the same, its LSQR drops the damping).
    - `atol`, `btol`: scipy's stopping tolerances: the iterations stop once `||r|| <= btol
      ||b|| + atol ||A|| ||x||` (istop 1, a compatible system) or `||A^H r|| <= atol ||A||
      ||r||` (istop 2, a least-squares solution), with `r = b - A x` and the iteration's
      estimates of the norms. A zero `b` with `x0` measures `||b - A x0||` instead of
      `||b||`.
    - `conlim`: stop once the estimate of `cond(A)` exceeds it (istop 3); 0 or `inf`
      turns the test off. `damp`, `atol`, `btol` and `conlim` are values of the compiled solve
      (Python numbers or 0-d arrays, traced under `jit`): a new value compiles nothing.
    - `iter_lim`: the most iterations (static; `2 n` by default, as scipy's; 0 runs none).
    - `calc_var`: estimate the diagonal of `(A^H A + damp^2 I)^{-1}` (static, keyword
      only; scipy's `show` is left out, and `calc_var` and `x0` are keyword arguments so
      that no call positioned for scipy's `show` reads another argument).
    - `x0`: the starting guess `(n,)` (keyword only; zeros by default). As scipy's, the
      iterations solve for the correction `x - x0`, so with `damp > 0` they minimize
      `||A x - b||^2 + damp^2 ||x - x0||^2`.

    **Returns:** scipy's tuple `(x, istop, itn, r1norm, r2norm, anorm, acond, arnorm,
    xnorm, var)`, each a JAX array: `x` `(n,)` in `A`'s and `b`'s promoted dtype (half
    precisions and integers solve in float32 and JAX's float); `istop` and `itn` int32
    (`istop`: 0 where the start already solves it, `A^H (b - A x0) = 0`, or `iter_lim` is
    0; 1 to 7 as scipy's, 4 to 6 at the dtype's own precision, 7 for `iter_lim`
    reached); the others, in the real dtype, the iteration's estimates (as scipy's) of
    `r1norm = ||b - A x||`, `r2norm = sqrt(r1norm^2 + damp^2 ||x - x0||^2)`, `anorm`
    (the Frobenius norm of `[A; damp I]`, grown with the iterations), `acond` (its
    condition number), `arnorm = ||A^H r - damp^2 (x - x0)||` and `xnorm = ||x - x0||`,
    and `var` `(n,)` (zeros unless `calc_var`; `|d_k|^2` summed, real for complex `A`
    too). A zero `b` without `x0` gives `x = 0`, `istop = 0` and every norm 0, as scipy's;
    with `x0` it gives the minimizer (scipy's LSMR returns `x = 0` there, its LSQR stops
    after one step).

    **Derivatives.** With `r = b - A x`, `c = x - x0` and `N = A^H A + damp^2 I`, the
    tangent of `x` is `dx0 + N^+ (A^H (db - dA x - A dx0) + dA^H r - 2 damp ddamp c)`,
    applied as `B^+ ([u; 0] + B^{+H} w)` with `B = [A; damp I]`: two minimum-norm LSQR
    solves (their transposes, for reverse mode, are LSQR solves with `A^T`) from zero to
    the relative accuracy `max(atol, btol)` within `max(iter_lim, 2 n)` iterations. With
    `damp > 0` or full column rank this is the derivative of the unique minimizer. With
    `damp = 0` and rank-deficient `A` (an underdetermined one, say), `x = x0 + pinv(A)
    (b - A x0)` and the derivatives in `b` and `x0` are right (`pinv(A)` and `I - pinv(A)
    A`); the one in `A`'s values leaves out the term `(I - pinv(A) A) dA^H pinv(A)^H c`.
    Reverse mode is forward mode's transpose in every case. The other results have no
    derivative.
    """
    limit = _iteration_limit(iter_lim, "iter_lim", "lsqr", lambda m, n: 2 * n, A)
    if not isinstance(calc_var, bool):
        raise ValueError(f"lsqr: `calc_var` must be True or False, got {calc_var!r}.")
    return _least_squares("lsqr", A, b, damp, atol, btol, conlim, limit, x0, calc_var)


def lsmr(A, b, damp=0.0, atol=1e-6, btol=1e-6, conlim=1e8, maxiter=None, *, x0=None):
    """LSMR for `min ||A x - b||^2 + damp^2 ||x||^2` with any sparse `A` (rectangular or
    square).

    As `scipy.sparse.linalg.lsmr` (Fong and Saunders): MINRES on the normal equations,
    whose `||A^H r||` decreases monotonically, so it may stop earlier than LSQR on
    `atol`. See `lsqr` for the arguments (`maxiter` is its `iter_lim`, `min(m, n)` by
    default as scipy's; no `calc_var`) and the derivatives.

    **Returns:** scipy's tuple `(x, istop, itn, normr, normar, norma, conda, normx)`, each
    a JAX array: `x` `(n,)`, `istop` and `itn` int32 as `lsqr`'s, and in the real dtype
    the iteration's estimates (as scipy's) of `normr = sqrt(||b - A x||^2 + damp^2 ||x -
    x0||^2)`, `normar = ||A^H r - damp^2 (x - x0)||`, `norma` (the Frobenius norm of `[A;
    damp I]`, grown with the iterations) and `conda` (its condition number), and `normx =
    ||x||`. A zero `b` is treated as by `lsqr`.
    """
    limit = _iteration_limit(maxiter, "maxiter", "lsmr", min, A)
    return _least_squares("lsmr", A, b, damp, atol, btol, conlim, limit, x0, False)


@dataclasses.dataclass(frozen=True)
class _Settings:
    """What shapes the compiled solve (static)."""

    name: str
    limit: int
    calc_var: bool


def _iteration_limit(value, argument: str, name: str, default, A) -> int:
    """The iteration limit: `default(m, n)` for None, else a non-negative int (`A` is
    checked first: its shape gives the default)."""
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"{name}: `A` must be a DIAMatrix or CSRMatrix, got {type(A).__name__}.")
    if value is None:
        return default(*A.shape)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name}: `{argument}` must be an int >= 0 or None, got {value!r}.")
    return int(value)


def _least_squares(name, A, b, damp, atol, btol, conlim, limit, x0, calc_var):
    refuse_batch(f"`{name}`", A)
    m, n = A.shape
    b = device_array(dense_rhs(b))
    if b.shape == (m, 1):  # a column, as scipy's squeezes it
        b = b[:, 0]
    if not jnp.issubdtype(b.dtype, jnp.number):
        raise TypeError(f"{name}: `b` must hold numbers, got dtype {b.dtype}.")
    if b.shape != (m,):
        raise ValueError(
            f"{name}: `b` must have shape ({m},) for a matrix of {m} rows, got {b.shape} "
            "(for several right-hand sides, `jax.vmap` over them)."
        )
    dtype = working_dtype(solve_dtype(A.dtype, b.dtype))
    x0 = None if x0 is None else _start(x0, n, dtype, name)
    real = np.finfo(dtype).dtype
    scalars = tuple(
        _tolerance(value, argument, name, real)
        for value, argument in ((damp, "damp"), (atol, "atol"), (btol, "btol"))
    ) + (_condition_limit(conlim, name, real),)
    settings = _Settings(name, limit, calc_var)
    return run_compiled(_solve, A.astype(dtype), b.astype(dtype), x0, scalars, settings)


def _condition_limit(conlim, name: str, real):
    """`conlim` as a tolerance, `+inf` included (no limit, as scipy's)."""
    concrete = not isinstance(conlim, (jax.core.Tracer, bool)) and np.ndim(conlim) == 0
    if concrete and np.isrealobj(conlim):
        if np.isposinf(conlim):
            return np.asarray(conlim, real)
        if not conlim >= 0:  # NaN, negative or -inf
            raise ValueError(
                f"{name}: `conlim` must be >= 0 or inf (either turns the test off), got {conlim!r}."
            )
    return _tolerance(conlim, "conlim", name, real)


def _start(x0, n: int, dtype, name: str) -> jax.Array:
    """`x0` in the solve's dtype (a complex `x0` in a real solve would lose its imaginary
    part: a TypeError)."""
    x0 = device_array(dense_rhs(x0))
    if x0.shape != (n,):
        raise ValueError(f"{name}: `x0` must have shape ({n},), got {x0.shape}.")
    if not jnp.issubdtype(x0.dtype, jnp.number):
        raise TypeError(f"{name}: `x0` must hold numbers, got dtype {x0.dtype}.")
    if jnp.iscomplexobj(x0) and not jnp.issubdtype(dtype, jnp.complexfloating):
        raise TypeError(f"{name}: `x0` is complex but the solve is real ({dtype}).")
    return x0.astype(dtype)


def _solve(A, b, x0, scalars, settings: _Settings):
    """The iteration on constants (its results carry no derivative), then `x` with its
    implicit derivative attached."""
    damp, atol, btol, conlim = scalars
    # Only `damp^2` enters the objective: a negative traced `damp` acts as `|damp|`.
    damp = jnp.abs(damp)
    fixed_A, fixed_b, fixed_x0, fixed_damp = lax.stop_gradient((A, b, x0, damp))
    start = jnp.zeros(A.shape[1], b.dtype) if fixed_x0 is None else fixed_x0
    residual = fixed_b - fixed_A @ start
    # The tests are relative to `||b||`; a zero `b` (with `x0`) measures `||b - A x0||`.
    b_norm = jnp.linalg.norm(fixed_b)
    b_norm = jnp.where(b_norm > 0, b_norm, jnp.linalg.norm(residual))
    adjoint = fixed_A.H
    loop_scalars = (fixed_damp, atol, btol, jnp.where(conlim > 0, 1 / conlim, 0))
    arguments = (
        lambda v: fixed_A @ v,
        lambda u: adjoint @ u,
        start,
        residual,
        b_norm,
        loop_scalars,
        settings.limit,
    )
    if settings.name == "lsqr":
        x, *stats = lsqr_loop(*arguments, settings.calc_var)
    else:
        x, *stats = lsmr_loop(*arguments)
    relative = jnp.maximum(jnp.maximum(atol, btol), jnp.finfo(atol.dtype).eps)
    x = _solution(A, b, damp, x0, x, relative=relative, limit=max(settings.limit, 2 * A.shape[1]))
    return (x, *stats)


@eqx.filter_custom_jvp
def _solution(A, b, damp, x0, x, *, relative, limit: int):
    """`x`, the computed minimizer, with the implicit derivative of the true one."""
    return x


@_solution.def_jvp
def _solution_jvp(primals, tangents, *, relative, limit: int):
    A, b, damp, x0, computed = primals
    A_dot, b_dot, damp_dot, x0_dot, _ = tangents
    # Through `_solution` again: a second derivative sees `x` move with the primals.
    x = _solution(A, b, damp, x0, computed, relative=relative, limit=limit)
    correction = x if x0 is None else x - x0
    m, n = A.shape
    # The correction `c = x - x0` moves by `N^+ (A^H u + w)`, `N = A^H A + damp^2 I`:
    dA_x = tangent_product(A, A_dot, x)
    u = jnp.zeros_like(b) if b_dot is None else b_dot
    if dA_x is not None:
        u = u - dA_x
    if x0_dot is not None:
        u = u - A @ x0_dot
    w = jnp.zeros_like(x)
    if dA_x is not None:
        w = w + A.with_data(A_dot.data).H @ (b - A @ x)
    if damp_dot is not None:
        w = w - (2 * damp * damp_dot).astype(x.dtype) * correction
    # `N^+ (A^H u + w) = B^+ ([u; 0] + B^{+H} w)` with `B = [A; damp I]`, two minimum-norm
    # least-squares solves: right for singular `N` too, and their transposes are such solves.
    stacked = _Stacked(A, damp)
    solve = functools.partial(_saddle_solve, stacked, relative=relative, limit=limit)
    # One vector `(u, 0, -w)`: JAX transposes a solve only in a right side all tangent.
    rhs = jnp.concatenate([u, jnp.zeros_like(x), -w])
    solution = lax.custom_linear_solve(stacked.saddle, rhs, solve, _conjugated(solve))
    correction_dot = solution[m + n :]
    return x, correction_dot if x0_dot is None else x0_dot + correction_dot


@dataclasses.dataclass(frozen=True)
class _Stacked:
    """`B = [A; damp I]`, the operator of the damped problem as an undamped one."""

    A: SparseMatrix
    damp: jax.Array

    def matvec(self, v):
        return jnp.concatenate([self.A @ v, self.damp.astype(v.dtype) * v])

    def rmatvec(self, z):
        m = self.A.shape[0]
        return self.A.H @ z[:m] + self.damp.astype(z.dtype) * z[m:]

    def saddle(self, v):
        """`K (r, y) = (r + B y, B^H r)` on `v = (r, y)` concatenated: the operator whose
        (pseudo-)inverse `_saddle_solve` applies."""
        r, y = jnp.split(v, [sum(self.A.shape)])
        return jnp.concatenate([r + self.matvec(y), self.rmatvec(r)])


def _saddle_solve(stacked: _Stacked, _, rhs, *, relative, limit: int):
    """`(r, y)` with `y = B^+ (u - B^{+H} t)`, `r = u - B y` for `rhs = (u, t)`
    (concatenated): `K^{-1}` where `B` has full column rank; a Hermitian map for every `B`,
    so its transpose is itself with `A` conjugated (`_conjugated`)."""
    u, t = jnp.split(rhs, [sum(stacked.A.shape)])
    z = _minimum_norm(stacked.rmatvec, stacked.matvec, t, u.shape[0], relative, limit)
    y = _minimum_norm(stacked.matvec, stacked.rmatvec, u - z, t.shape[0], relative, limit)
    return jnp.concatenate([u - stacked.matvec(y), y])


def _conjugated(solve):
    """The plain transpose of a Hermitian linear map `solve`: conjugate in, conjugate out."""
    return lambda _, rhs: jnp.conj(solve(None, jnp.conj(rhs)))


def _minimum_norm(matvec, rmatvec, rhs, size: int, relative, limit: int):
    """The minimum-norm minimizer of `||M y - rhs||` (LSQR from zero), `M` of `size`
    columns given by its products."""
    real = relative.dtype
    zero = jnp.zeros((), real)
    scalars = (zero, relative, relative, zero)
    start = jnp.zeros(size, rhs.dtype)
    rhs_norm = jnp.linalg.norm(rhs).astype(real)
    return lsqr_loop(matvec, rmatvec, start, rhs, rhs_norm, scalars, limit, False)[0]
