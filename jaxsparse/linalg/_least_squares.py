"""`lsqr` and `lsmr`: sparse least squares, after `scipy.sparse.linalg`, on jaxsparse's
products.

The iterations (`_least_squares_loops.py`) are scipy's, in JAX; this module gives them
scipy's surface: its arguments, its result tuples as arrays, the promoted working dtype,
and errors naming the argument. Derivatives are implicit (a custom JVP): the solution of
`min ||A x - b||^2 + damp^2 ||x - x0||^2` satisfies the normal equations
`(A^H A + damp^2 I) x = A^H b + damp^2 x0`, whose tangent is one solve with that operator
(CG); the iterations are never differentiated.
"""

import dataclasses
import numbers

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.sparse import linalg as jax_krylov

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
    - `b`: `(m,)`. scipy's solvers take one right-hand side, and so do these: `jax.vmap`
      over the columns of a `(m, k)` `b` solves several.
    - `damp`: the regularization weight, a real number `>= 0`.
    - `atol`, `btol`: scipy's stopping tolerances: the iterations stop once `||r|| <= btol
      ||b|| + atol ||A|| ||x||` (istop 1, a compatible system) or `||A^H r|| <= atol ||A||
      ||r||` (istop 2, a least-squares solution), with `r = b - A x` and the iteration's
      estimates of the norms.
    - `conlim`: stop once the estimate of `cond(A)` exceeds it (istop 3); 0 turns the
      test off. `damp`, `atol`, `btol` and `conlim` are values of the compiled solve
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
    too). A zero `b` gives `x = 0` and `istop = 0` from any `x0`, every norm 0.

    **Derivatives.** The tangent of `x` is `(A^H A + damp^2 I)^{-1} (dA^H r - A^H dA x +
    A^H db + damp^2 dx0 - 2 damp ddamp (x - x0))`, solved by CG on `A^H A + damp^2 I` (its
    cotangent by CG on the transposed operator) from zero to the relative accuracy
    `max(atol, btol)` within `max(iter_lim, 2 n)` iterations. This is the derivative of
    the unique minimizer: it assumes `A` has full column rank or `damp > 0` (the
    minimum-norm solution of a rank-deficient system has further terms in `dA`, which
    this leaves out; its derivative in `b` is right). The other results have no
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
    ||x||`. A zero `b` gives `x = 0` and `istop = 0` from
    any `x0`.
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
        for value, argument in ((damp, "damp"), (atol, "atol"), (btol, "btol"), (conlim, "conlim"))
    )
    settings = _Settings(name, limit, calc_var)
    return run_compiled(_solve, A.astype(dtype), b.astype(dtype), x0, scalars, settings)


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
    fixed_A, fixed_b, fixed_x0, fixed_damp = lax.stop_gradient((A, b, x0, damp))
    start = jnp.zeros(A.shape[1], b.dtype) if fixed_x0 is None else fixed_x0
    # A zero `b` gives `x = 0` from any `x0`, as scipy's LSMR (its tests divide by `||b||`).
    nonzero = jnp.any(fixed_b != 0)
    residual = jnp.where(nonzero, fixed_b - fixed_A @ start, 0)
    adjoint = fixed_A.H
    loop_scalars = (fixed_damp, atol, btol, jnp.where(conlim > 0, 1 / conlim, 0))
    arguments = (
        lambda v: fixed_A @ v,
        lambda u: adjoint @ u,
        start,
        residual,
        jnp.linalg.norm(fixed_b),
        loop_scalars,
        settings.limit,
    )
    if settings.name == "lsqr":
        x, *stats = lsqr_loop(*arguments, settings.calc_var)
    else:
        x, *stats = lsmr_loop(*arguments)
    x = jnp.where(nonzero, x, 0)
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
    adjoint = A.H
    dA_x = tangent_product(A, A_dot, x)
    rhs = jnp.zeros_like(b) if b_dot is None else b_dot
    rhs = adjoint @ (rhs if dA_x is None else rhs - dA_x)
    if dA_x is not None:
        rhs = rhs + A.with_data(A_dot.data).H @ (b - A @ x)
    if damp_dot is not None:
        rhs = rhs - (2 * damp * damp_dot).astype(x.dtype) * (x if x0 is None else x - x0)
    if x0_dot is not None:
        rhs = rhs + (damp**2).astype(x.dtype) * x0_dot

    def normal(v):
        return adjoint @ (A @ v) + (damp**2).astype(v.dtype) * v

    def solve(matvec, rhs):
        # `A^H A + damp^2 I` is Hermitian positive definite (full column rank or
        # `damp > 0`), and so is its plain transpose, the conjugate operator.
        bound = relative * jnp.linalg.norm(rhs)
        return jax_krylov.cg(matvec, rhs, tol=0.0, atol=bound, maxiter=limit)[0]

    return x, lax.custom_linear_solve(normal, rhs, solve, solve)
