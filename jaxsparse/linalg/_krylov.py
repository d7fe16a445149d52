"""`cg`, `bicgstab`, `gmres` and `minres`: Krylov solves of square sparse systems, after
`scipy.sparse.linalg`, on jaxsparse's products.

CG's and BiCGSTAB's iterations are JAX's own (`jax.scipy.sparse.linalg`), GMRES runs its
own loop of JAX's cycles, and MINRES (which JAX lacks) is written here; this module gives
them scipy's surface and semantics: `rtol` and `atol` against `||b||` from any `x0`,
GMRES's restart cycles stopped on the true residual, an `(x, info)` result whose `info`
checks the `x` returned, the promoted working dtype, `(n, k)` right-hand sides solved
column by column, preconditioners of every kind scipy takes, and errors naming the
argument. Derivatives are implicit (a custom JVP): the tangent is one more solve with `A`,
the cotangent one with `A^T` and `M^T`, each from zero; the iterations are never
differentiated.
"""

import dataclasses
import functools
import numbers
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from jax import lax
from jax.scipy.sparse import linalg as jax_krylov

from .._arrays import device_array
from .._base import SparseMatrix
from .._batching import refuse_batch
from .._csr import CSRMatrix
from ._eigsh import tangent_product
from ._factor import dense_rhs, run_compiled, solve_dtype
from ._working_dtype import working_dtype

# `info` where `x` or its residual is not finite (a breakdown, or a non-finite `A`, `b` or
# `x0`), as scipy's negative codes for a breakdown.
BREAKDOWN = -1

# JAX's loops, whole; GMRES runs its own loop of JAX's cycles (`_gmres`).
_METHODS = {"cg": jax_krylov.cg, "bicgstab": jax_krylov.bicgstab}


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None):
    """Conjugate gradients for `A x = b` with `A` Hermitian positive definite.

    As `scipy.sparse.linalg.cg`; see `gmres` for the arguments, the result and the
    derivatives. `A` and a preconditioner `M` must be Hermitian positive definite (not
    checked: another `A` gives a wrong `x` and, usually, `info > 0`).
    """
    return _krylov("cg", A, b, x0, M, rtol, atol, maxiter)


def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None):
    """BiCGSTAB for `A x = b` with any square `A`.

    As `scipy.sparse.linalg.bicgstab`; see `gmres` for the arguments, the result and the
    derivatives.
    """
    return _krylov("bicgstab", A, b, x0, M, rtol, atol, maxiter)


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=20, maxiter=None, M=None):
    """Restarted GMRES for `A x = b` with any square `A`.

    As `scipy.sparse.linalg.gmres`, inside or outside `jax.jit`, differentiable with respect
    to `b` and to `A`'s stored values in forward and reverse mode. `jax.vmap` over `b`,
    `x0` or `A.data` solves each member; a batch iterates until its last member stops.

    **Arguments:**

    - `A`: a square `DIAMatrix` or `CSRMatrix` of shape `(n, n)`.
    - `b`: `(n,)`, or `(n, k)` for `k` solves, one per column.
    - `x0`: the starting guess, shaped as `b` (zeros by default).
    - `rtol`, `atol`: the iterations stop once `||b - A x|| <= max(rtol ||b||, atol)`, as
      scipy's. Python numbers are passed into the compiled solve as values: a new one
      compiles nothing.
    - `restart`: the Krylov vectors each restart cycle builds (GMRES only). As scipy's,
      GMRES is preconditioned on the left and its cycles stop on the true residual.
    - `maxiter`: the most iterations, for GMRES the most restart cycles (`10 n` by
      default, as scipy's).
    - `M`: a preconditioner approximating `A^{-1}`: `js.linalg.jacobi(A)`,
      `js.linalg.spilu0(A)`, a jaxsparse, scipy sparse or dense `(n, n)` matrix (each
      applied in its own dtype, its result cast to the solve's; a complex `M` in a real
      solve is a TypeError), or a function of a vector (a static argument: the same
      function object reuses the compiled solve).

    **Returns:** `(x, info)`. `x` is shaped as `b`, in `A`'s and `b`'s promoted dtype
    (half precisions and integers solve in float32 and JAX's float); a zero `b` gives a
    zero `x`, as scipy's. `info`, an int32 array (one per column of `b`), is 0 where
    `||b - A x|| <= max(rtol ||b||, atol)` holds for the `x` returned, `maxiter` where it
    does not, and -1 where `x` or its residual is not finite (a breakdown, or a non-finite
    `A`, `b` or `x0`). The iterations stop on residuals they update rather than recompute, so
    near the dtype's attainable accuracy they may stop early with `info == maxiter`
    (scipy, which reports its own residuals, then says 0).

    **Derivatives.** The tangent of `x` is one more solve with `A`, its cotangent one with
    `A^T` (preconditioned by `M^T`, from `jax.linear_transpose`: for derivatives of either
    mode a function `M` must be linear and transposable by JAX), each by the same method
    from zero, to the relative accuracy `max(rtol, atol / ||b||)` within the same
    `maxiter`: a derivative is as accurate as its own solve, whatever the primal's `x0`.
    """
    if isinstance(restart, bool) or not isinstance(restart, numbers.Integral) or restart < 1:
        raise ValueError(f"gmres: `restart` must be a positive int, got {restart!r}.")
    return _krylov("gmres", A, b, x0, M, rtol, atol, maxiter, int(restart))


def minres(A, b, x0=None, *, rtol=1e-5, shift=0.0, maxiter=None, M=None):
    """MINRES for `(A - shift I) x = b` with `A` Hermitian, possibly indefinite or singular.

    As `scipy.sparse.linalg.minres` (Paige and Saunders' iteration), inside or outside
    `jax.jit`, differentiable with respect to `b`, to `A`'s stored values and to `shift`
    in forward and reverse mode. `jax.vmap` over `b`, `x0`, `A.data` or `shift` solves each
    member; a batch iterates until its last member stops. `A` must be Hermitian (real
    symmetric or complex Hermitian) and `M` Hermitian positive definite; neither is checked
    (another `A` gives a wrong `x` and, usually, `info > 0`).

    **Arguments:**

    - `A`: a square `DIAMatrix` or `CSRMatrix` of shape `(n, n)`.
    - `b`: `(n,)`, or `(n, k)` for `k` solves, one per column.
    - `x0`: the starting guess, shaped as `b` (zeros by default).
    - `rtol`: the iterations stop once `||b - (A - shift I) x|| <= rtol ||b||`, the others'
      test, on the residual they update; where that passes and the true residual does not
      (it drifts in low precision), MINRES restarts from `x` on the true one, within
      `maxiter` steps in all. As scipy's, they also stop at a least-squares point
      (`||A r|| <= rtol ||A|| ||r||`, estimated) and once `A - shift I` is numerically
      singular (estimated condition number `>= 0.1 / eps`), both keeping the `x` before
      the step that found it; they do not stop on scipy's `||r|| <= rtol ||A|| ||x||`. As
      scipy's, there is no `atol`.
    - `shift`: a real number; the solve is of `A - shift I`. Like `rtol`, a Python number
      is passed into the compiled solve as a value: a new one compiles nothing.
    - `maxiter`: the most iterations (`5 n` by default, as scipy's).
    - `M`: a Hermitian positive definite preconditioner approximating
      `(A - shift I)^{-1}`, of any kind `gmres` takes. Where `<r, M r>` comes out negative
      or not finite (an indefinite `M`; scipy raises) the solve breaks down: `info == -1`.

    **Returns:** `(x, info)`, as `gmres`'s: `info` is 0 where
    `||b - (A - shift I) x|| <= rtol ||b||` holds for the `x` returned, `maxiter` where it
    does not (an inconsistent singular system: its least-squares stop leaves a residual as
    small as `lstsq`'s, where scipy says 0; with an `rtol` below the accuracy that test
    attains, `x` can grow large in `A`'s null space, as scipy's), and -1 where `x` or its
    residual is not finite. A Krylov space that ends early (a zero Lanczos `beta`: `b` in
    an invariant subspace of `A`) stops the iterations at the solution it holds.

    **Derivatives** as `gmres`'s: the tangent of `x` is one more MINRES solve with
    `A - shift I`, its cotangent one with `(A - shift I)^T = conj(A) - shift I`, Hermitian
    too, preconditioned by `M^T`, each from zero to the relative accuracy `rtol` within the
    same `maxiter`. `shift` is part of the operator: its derivative is `x`'s through
    `(A - shift I)`. They need a nonsingular `A - shift I`: the minimum-norm solution of a
    singular system has further terms, and these solves, whose right-hand sides leave
    `A`'s range, end at least-squares points with parts in the null space.
    """
    return _krylov("minres", A, b, x0, M, rtol, 0.0, maxiter, shift=shift)


@dataclasses.dataclass(frozen=True)
class _Settings:
    """What shapes the compiled solve (static)."""

    name: str
    maxiter: int
    restart: int | None


def _krylov(name, A, b, x0, M, rtol, atol, maxiter, restart=None, shift=None):
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"{name}: `A` must be a DIAMatrix or CSRMatrix, got {type(A).__name__}.")
    refuse_batch(f"`{name}`", A)
    n = A.shape[0]
    if A.shape != (n, n):
        raise ValueError(f"{name}: `A` must be square, got shape {A.shape}.")
    b = device_array(dense_rhs(b))
    if not jnp.issubdtype(b.dtype, jnp.number):
        raise TypeError(f"{name}: `b` must hold numbers, got dtype {b.dtype}.")
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(f"{name}: `b` must have shape ({n},) or ({n}, k), got {b.shape}.")
    dtype = working_dtype(solve_dtype(A.dtype, b.dtype))
    x0 = None if x0 is None else _start(x0, b.shape, dtype, name)
    if maxiter is None:
        maxiter = (5 if name == "minres" else 10) * n
    elif isinstance(maxiter, bool) or not isinstance(maxiter, numbers.Integral) or maxiter < 1:
        raise ValueError(f"{name}: `maxiter` must be a positive int or None, got {maxiter!r}.")
    real = np.finfo(dtype).dtype
    tolerances = (_tolerance(rtol, "rtol", name, real), _tolerance(atol, "atol", name, real))
    M = _preconditioner(M, n, dtype, name)
    settings = _Settings(name, int(maxiter), restart)
    if n == 0:  # nothing to solve (JAX's GMRES cannot build a space of no vectors)
        return b.astype(dtype), jnp.zeros(b.shape[1:], jnp.int32)
    A = A.astype(dtype)
    if shift is not None:
        A = ShiftedOperator(A, _real_scalar(shift, "shift", name, real))
    return run_compiled(_solve, A, b.astype(dtype), x0, M, tolerances, settings)


def _start(x0, shape, dtype, name: str) -> jax.Array:
    """`x0` in the solve's dtype (cast, as scipy's; a complex `x0` in a real solve would
    lose its imaginary part, a TypeError)."""
    x0 = device_array(dense_rhs(x0))
    if x0.shape != shape:
        raise ValueError(f"{name}: `x0` must have the shape of `b`, {shape}; got {x0.shape}.")
    if not jnp.issubdtype(x0.dtype, jnp.number):
        raise TypeError(f"{name}: `x0` must hold numbers, got dtype {x0.dtype}.")
    if jnp.iscomplexobj(x0) and not _complex(dtype):
        raise TypeError(f"{name}: `x0` is complex but the solve is real ({dtype}).")
    return x0.astype(dtype)


def _tolerance(value, argument: str, name: str, real):
    """A tolerance as a 0-d array of the solve's real dtype: a value of the compiled solve,
    not a static argument."""
    tolerance = _real_scalar(value, argument, name, real)
    if not isinstance(value, jax.core.Tracer) and value < 0:
        raise ValueError(f"{name}: `{argument}` must be finite and >= 0, got {value!r}.")
    return tolerance


def _real_scalar(value, argument: str, name: str, real):
    """A finite real scalar as a 0-d array of the solve's real dtype: a value of the
    compiled solve, not a static argument (a traced one is checked by its type only)."""
    if isinstance(value, jax.core.Tracer):
        if (
            value.ndim != 0
            or not jnp.issubdtype(value.dtype, jnp.number)
            or jnp.iscomplexobj(value)
        ):
            raise ValueError(f"{name}: `{argument}` must be a real scalar, got {value.aval}.")
        return value.astype(real)
    if isinstance(value, bool) or np.ndim(value) != 0 or not np.isrealobj(value):
        raise ValueError(f"{name}: `{argument}` must be a real number, got {value!r}.")
    if not np.isfinite(value):
        raise ValueError(f"{name}: `{argument}` must be finite, got {value!r}.")
    return np.asarray(value, real)


def _preconditioner(M, n: int, dtype, name: str):
    """`M` as the solve applies it: a jaxsparse matrix or preconditioner, an array, or a
    function; checked to be `(n, n)`, single, and real for a real solve."""
    if M is None:
        return None
    if isinstance(M, scipy.sparse.linalg.LinearOperator):
        raise TypeError(
            f"{name}: `M` is a scipy LinearOperator, which runs on the host: pass a "
            "jaxsparse matrix or preconditioner, an array, or a JAX function."
        )
    if scipy.sparse.issparse(M):
        M = CSRMatrix.from_scipy(M)
    elif isinstance(M, np.ndarray):
        M = device_array(M)
    if isinstance(M, SparseMatrix):
        refuse_batch(f"`{name}`'s preconditioner `M`", M)
    if not hasattr(M, "__matmul__"):
        if callable(M):
            return M
        raise TypeError(
            f"{name}: `M` must be a preconditioner, a matrix or a function, got {type(M).__name__}."
        )
    if tuple(getattr(M, "shape", ())) != (n, n):
        raise ValueError(
            f"{name}: `M` must be ({n}, {n}) for a matrix of {n} rows, got "
            f"{getattr(M, 'shape', None)}."
        )
    if _complex(M.dtype) and not _complex(dtype):
        raise TypeError(f"{name}: `M` is complex ({M.dtype}) but the solve is real ({dtype}).")
    if isinstance(M, (SparseMatrix, jax.Array)):
        M = M.astype(working_dtype(M.dtype))
    return M


def _complex(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.complexfloating)


def _apply(M, r) -> jax.Array:
    """`M @ r` (or `M(r)` for a function) in `M`'s own dtype (a real `M` applies to a
    complex `r` part by part), the result in `r`'s."""
    if not hasattr(M, "__matmul__"):
        result = jnp.asarray(M(r))
        if result.shape != r.shape:
            raise ValueError(f"The preconditioner `M` returned shape {result.shape} for {r.shape}.")
        return result.astype(r.dtype)
    if jnp.iscomplexobj(r) and not _complex(M.dtype):
        return lax.complex(_apply(M, r.real), _apply(M, r.imag))
    return jnp.asarray(M @ r.astype(M.dtype)).astype(r.dtype)


def _solve(A, b, x0, M, tolerances, settings: _Settings):
    """The solve of each column of `b`, and its `info`."""
    # Fixed operators: no derivative reaches `M`'s arrays or the tolerances.
    M, tolerances = jax.tree.map(_constant, (M, tolerances))

    def one(b, x0):
        x = _solution(A, b, x0, M=M, tolerances=tolerances, settings=settings)
        return x, _info(A, b, x, tolerances, settings.maxiter)

    if b.ndim == 1:
        return one(b, x0)
    return jax.vmap(one, in_axes=(1, None if x0 is None else 1), out_axes=(1, 0))(b, x0)


class ShiftedOperator(eqx.Module):
    """`A - shift I` as an operator: `S @ X` is one product with `A`; `shift` is a real
    0-d array, so its derivative is that of the operator's values."""

    matrix: SparseMatrix
    shift: jax.Array

    def __matmul__(self, X):
        return self.matrix @ X - self.shift.astype(X.dtype) * X


@tangent_product.register
def _shifted_tangent_product(S: ShiftedOperator, S_dot, X):
    """`d(A - shift I) X = dA X - dshift X`."""
    if S_dot is None:
        return None
    dA_X = tangent_product(S.matrix, S_dot.matrix, X)
    if S_dot.shift is None:
        return dA_X
    dshift_X = S_dot.shift.astype(X.dtype) * X
    return -dshift_X if dA_X is None else dA_X - dshift_X


def _constant(leaf):
    return lax.stop_gradient(leaf) if eqx.is_array(leaf) else leaf


def _bound(b, tolerances) -> jax.Array:
    """scipy's stopping bound `max(rtol ||b||, atol)`."""
    rtol, atol = tolerances
    return jnp.maximum(rtol * jnp.linalg.norm(b), atol)


def _iterate(settings: _Settings, matvec, rhs, precondition, bound, rtol) -> jax.Array:
    """A solution `x` of `matvec(x) = rhs` from zero, to `||rhs - matvec(x)|| <= bound`
    (MINRES also stops at a least-squares point, to the relative accuracy `rtol`)."""
    if settings.name == "gmres":
        return _gmres(settings, matvec, rhs, precondition, bound)
    if settings.name == "minres":
        return _minres(settings.maxiter, matvec, rhs, precondition, bound, rtol)
    method = _METHODS[settings.name]
    return method(matvec, rhs, tol=0.0, atol=bound, maxiter=settings.maxiter, M=precondition)[0]


def _gmres(settings: _Settings, matvec, rhs, precondition, bound) -> jax.Array:
    """Restart cycles of GMRES preconditioned on the left, as scipy's: each cycle is one of
    JAX's (`restart` Arnoldi steps, fewer at a breakdown) on the correction of the true
    residual, and the cycles stop on the true residual (JAX's loop of cycles stops on the
    preconditioned one)."""

    def unfinished(state):
        _, residual, cycles = state
        return (cycles < settings.maxiter) & (jnp.linalg.norm(residual) > bound)

    def cycle(state):
        x, residual, cycles = state
        # No tolerance: the one cycle runs whole, and this loop tests what it gives. The
        # incremental (Givens) cycle stays finite where the batched one's normal equations
        # fail: a Krylov space that ends early, or a nearly singular `A`.
        correction, _ = jax_krylov.gmres(
            matvec, residual, tol=0.0, atol=0.0, restart=settings.restart, maxiter=1,
            M=precondition, solve_method="incremental",
        )  # fmt: skip
        x = x + correction
        return x, rhs - matvec(x), cycles + 1

    return lax.while_loop(unfinished, cycle, (jnp.zeros_like(rhs), rhs, 0))[0]


def _minres(maxiter: int, matvec, rhs, precondition, bound, rtol) -> jax.Array:
    """MINRES cycles (`_minres_cycle`) from zero until `||rhs - matvec(x)|| <= bound` or
    `maxiter` steps in all. A cycle's residual is updated, and drifts from the true one in
    low precision: a cycle that stops on it is followed by another on the correction of the
    true residual while that one fails the test, as GMRES's restart cycles."""

    def unfinished(state):
        _, residual, steps, restart = state
        return restart & (steps < maxiter) & (jnp.linalg.norm(residual) > bound)

    def cycle(state):
        x, residual, steps, _ = state
        correction, taken, converged = _minres_cycle(
            maxiter - steps, matvec, residual, precondition, bound, rtol
        )
        x = x + correction
        return x, rhs - matvec(x), steps + taken, converged

    return lax.while_loop(unfinished, cycle, (jnp.zeros_like(rhs), rhs, 0, True))[0]


def _minres_cycle(maxiter, matvec, rhs, precondition, bound, rtol):
    """Paige and Saunders' MINRES from zero, preconditioned by a Hermitian positive definite
    `precondition`, as scipy's, until its updated residual `||rhs - matvec(x)|| <= bound`
    (or its estimate `phibar` has fallen as far), `maxiter` steps, the end of the Krylov
    space (a zero `beta`), or scipy's two other stops (a least-squares point, a numerically
    singular operator). The residual is updated alongside `x` (through `matvec(w)` for
    each search direction `w`): scipy's `phibar` is its norm only without a preconditioner.
    Every scalar is real; inner products conjugate their first vector, so a complex
    Hermitian operator takes the same steps.

    Returns `x`, the steps taken, and whether the updated residual or `phibar` met the
    test."""
    precondition = (lambda r: r) if precondition is None else precondition

    def inner(u, v):
        return jnp.vdot(u, v).real

    def times(scalar, v):  # a real scalar times a vector of the solve's dtype
        return scalar.astype(v.dtype) * v

    y = precondition(rhs)
    beta = jnp.sqrt(inner(rhs, y))  # NaN for an indefinite preconditioner
    eps = jnp.finfo(beta.dtype).eps
    zero = jnp.zeros_like(rhs)
    scalar = functools.partial(jnp.asarray, dtype=beta.dtype)
    # The Lanczos vector before the first is zero, so its coefficient's scale is arbitrary.
    lanczos = (zero, rhs, y, scalar(1.0), beta)  # r1, r2, y = M r2, previous beta, beta
    rotation = (scalar(-1.0), *(scalar(0.0),) * 3, beta)  # cs, sn, dbar, epsilon, phibar
    estimates = (scalar(0.0), scalar(0.0), scalar(jnp.inf))  # ||A||, largest, least gamma
    directions = (zero,) * 4  # w, the one before, and their products
    state = (0, False, zero, rhs, lanczos, rotation, estimates, directions)
    # The updated residual can stall above `bound` in low precision while scipy's estimate
    # `phibar` (||r|| in M's norm) falls on: either one ends the cycle, by the same factor.
    relative_bound = beta * bound / jnp.linalg.norm(rhs)

    def passed(residual, phibar):
        return (jnp.linalg.norm(residual) <= bound) | (phibar <= relative_bound)

    def unfinished(state):
        steps, stopped, _, residual, (*_, beta), (*_, phibar), _, _ = state
        return ~stopped & (steps < maxiter) & (beta > 0) & ~passed(residual, phibar)

    def step(state):
        steps, _, x, residual, lanczos, rotation, estimates, directions = state
        r1, r2, y, previous_beta, beta = lanczos
        cs, sn, dbar, epsilon, phibar = rotation
        norm_A, largest, smallest = estimates
        w, w2, product_w, product_w2 = directions
        # One Lanczos step: `v` M-orthonormal to the earlier ones, `beta` the next norm.
        v = times(1 / beta, y)
        product_v = matvec(v)
        y = product_v - times(beta / previous_beta, r1)
        alpha = inner(v, y)
        y = y - times(alpha / beta, r2)
        r1, r2 = r2, y
        y = precondition(r2)
        previous_beta, beta = beta, jnp.sqrt(inner(r2, y))
        # The last rotation on the new column of the tridiagonal matrix, then the next one.
        previous_epsilon = epsilon
        delta = cs * dbar + sn * alpha
        gbar = sn * dbar - cs * alpha
        epsilon = sn * beta
        dbar = -cs * beta
        gamma = jnp.hypot(gbar, beta)
        # ||A|| as the tridiagonal matrix's Frobenius norm, as scipy's, less the `beta` before
        # the first column (||rhs||, which would make the test depend on the scale of `b`).
        column = jnp.hypot(jnp.where(steps == 0, 0, previous_beta), jnp.hypot(alpha, beta))
        norm_A = jnp.hypot(norm_A, column)
        largest, smallest = jnp.maximum(largest, gamma), jnp.minimum(smallest, gamma)
        # scipy's other stops: the residual before this step is a least-squares one
        # (`||A r|| <= rtol ||A|| ||r||`, its istop 2), or cond(A) >= 0.1 / eps estimated
        # from the gammas (istop 4). Both keep that `x`: this step's small `gamma` would make
        # it large, as on a singular inconsistent system; a zero one would divide by zero.
        stop = (jnp.hypot(gbar, dbar) <= jnp.maximum(rtol, eps) * norm_A) | (
            smallest <= 10 * eps * largest
        )
        gamma = jnp.where(stop, 1, gamma)
        cs, sn = gbar / gamma, beta / gamma
        phi, phibar = jnp.where(stop, 0, cs * phibar), jnp.where(stop, phibar, sn * phibar)

        def direction(latest, last, before):  # scipy's `w` from `v` and the last two
            return times(1 / gamma, latest - times(previous_epsilon, before) - times(delta, last))

        w, w2 = direction(v, w, w2), w
        product_w, product_w2 = direction(product_v, product_w, product_w2), product_w
        x = x + times(phi, w)
        residual = residual - times(phi, product_w)
        return (
            steps + 1, stop, x, residual, (r1, r2, y, previous_beta, beta),
            (cs, sn, dbar, epsilon, phibar), (norm_A, largest, smallest),
            (w, w2, product_w, product_w2),
        )  # fmt: skip

    steps, _, x, residual, (*_, beta), (*_, phibar), _, _ = lax.while_loop(unfinished, step, state)
    return jnp.where(jnp.isnan(beta), jnp.nan, x), steps, passed(residual, phibar)


@eqx.filter_custom_jvp
def _solution(A, b, x0, *, M, tolerances, settings: _Settings):
    bound = _bound(b, tolerances)
    residual = b if x0 is None else b - A @ x0
    precondition = None if M is None else functools.partial(_apply, M)
    x = _iterate(settings, lambda v: A @ v, residual, precondition, bound, tolerances[0])
    x = x if x0 is None else x0 + x
    return jnp.where(jnp.any(b != 0), x, 0)


@_solution.def_jvp
def _solution_jvp(primals, tangents, *, M, tolerances, settings: _Settings):
    A, b, x0 = primals
    A_dot, b_dot, _ = tangents
    x = _solution(A, b, x0, M=M, tolerances=tolerances, settings=settings)
    rhs = jnp.zeros_like(b) if b_dot is None else b_dot
    dA_x = tangent_product(A, A_dot, x)
    rhs = rhs if dA_x is None else rhs - dA_x
    # The derivatives' solves: the primal's relative accuracy, from zero.
    rtol, _ = tolerances
    norm_b = jnp.linalg.norm(b)
    relative = jnp.where(norm_b > 0, _bound(b, tolerances) / jnp.where(norm_b > 0, norm_b, 1), rtol)
    precondition = None if M is None else functools.partial(_apply, M)

    def solve(matvec, rhs):
        return _iterate(
            settings, matvec, rhs, precondition, relative * jnp.linalg.norm(rhs), relative
        )

    def transpose_solve(vecmat, rhs):
        transposed = None if M is None else _transposed(M, rhs)
        return _iterate(
            settings, vecmat, rhs, transposed, relative * jnp.linalg.norm(rhs), relative
        )

    # Not `symmetric=True` even for a real CG: the transposed product must transpose `A`'s
    # stored values one by one, which a second derivative perturbs apart.
    x_dot = lax.custom_linear_solve(lambda v: A @ v, rhs, solve, transpose_solve)
    return x, x_dot


def _transposed(M, like) -> Callable:
    """`r -> M^T r` (the plain transpose) on vectors shaped as `like`, by transposing the
    linear map `_apply(M, .)`; a real `M` on a complex `r`, part by part, as applied."""
    if jnp.iscomplexobj(like) and hasattr(M, "__matmul__") and not _complex(M.dtype):
        part = _transposed(M, like.real)
        return lambda r: lax.complex(part(r.real), part(r.imag))
    transpose = jax.linear_transpose(
        functools.partial(_apply, M), jax.ShapeDtypeStruct(like.shape, like.dtype)
    )
    return lambda r: transpose(r)[0]


def _info(A, b, x, tolerances, maxiter: int) -> jax.Array:
    """0 where `x` meets the stopping test, `maxiter` where not, `BREAKDOWN` where `x` or
    its residual is not finite."""
    A, b, x = lax.stop_gradient((A, b, x))
    residual = jnp.linalg.norm(b - A @ x)
    code = jnp.where(residual <= _bound(b, tolerances), 0, maxiter)
    finite = jnp.isfinite(residual) & jnp.all(jnp.isfinite(x))
    return jnp.where(finite, code, BREAKDOWN).astype(jnp.int32)
