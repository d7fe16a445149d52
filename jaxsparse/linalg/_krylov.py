"""`cg`, `bicgstab` and `gmres`: Krylov solves of square sparse systems, after
`scipy.sparse.linalg`, on jaxsparse's products.

The iterations are JAX's own (`jax.scipy.sparse.linalg`); this module gives them scipy's
surface and semantics: `rtol` and `atol` against `||b||` from any `x0`, GMRES's restart
cycles stopped on the true residual, an `(x, info)` result whose `info`
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


@dataclasses.dataclass(frozen=True)
class _Settings:
    """What shapes the compiled solve (static)."""

    name: str
    maxiter: int
    restart: int | None


def _krylov(name, A, b, x0, M, rtol, atol, maxiter, restart=None):
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
        maxiter = 10 * n
    elif isinstance(maxiter, bool) or not isinstance(maxiter, numbers.Integral) or maxiter < 1:
        raise ValueError(f"{name}: `maxiter` must be a positive int or None, got {maxiter!r}.")
    real = np.finfo(dtype).dtype
    tolerances = (_tolerance(rtol, "rtol", name, real), _tolerance(atol, "atol", name, real))
    M = _preconditioner(M, n, dtype, name)
    settings = _Settings(name, int(maxiter), restart)
    if n == 0:  # nothing to solve (JAX's GMRES cannot build a space of no vectors)
        return b.astype(dtype), jnp.zeros(b.shape[1:], jnp.int32)
    return run_compiled(_solve, A.astype(dtype), b.astype(dtype), x0, M, tolerances, settings)


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
    if not np.isfinite(value) or not value >= 0:
        raise ValueError(f"{name}: `{argument}` must be finite and >= 0, got {value!r}.")
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


def _constant(leaf):
    return lax.stop_gradient(leaf) if eqx.is_array(leaf) else leaf


def _bound(b, tolerances) -> jax.Array:
    """scipy's stopping bound `max(rtol ||b||, atol)`."""
    rtol, atol = tolerances
    return jnp.maximum(rtol * jnp.linalg.norm(b), atol)


def _iterate(settings: _Settings, matvec, rhs, precondition, bound) -> jax.Array:
    """A solution `x` of `matvec(x) = rhs` from zero, to `||rhs - matvec(x)|| <= bound`."""
    if settings.name == "gmres":
        return _gmres(settings, matvec, rhs, precondition, bound)
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


@eqx.filter_custom_jvp
def _solution(A, b, x0, *, M, tolerances, settings: _Settings):
    bound = _bound(b, tolerances)
    residual = b if x0 is None else b - A @ x0
    precondition = None if M is None else functools.partial(_apply, M)
    x = _iterate(settings, lambda v: A @ v, residual, precondition, bound)
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
        return _iterate(settings, matvec, rhs, precondition, relative * jnp.linalg.norm(rhs))

    def transpose_solve(vecmat, rhs):
        transposed = None if M is None else _transposed(M, rhs)
        return _iterate(settings, vecmat, rhs, transposed, relative * jnp.linalg.norm(rhs))

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
