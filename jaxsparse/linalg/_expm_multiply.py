"""`expm_multiply`: `exp(t A) @ B` without forming `exp(t A)`, after
`scipy.sparse.linalg.expm_multiply` (Al-Mohy and Higham, SIAM J. Sci. Comput. 33, 2011).

The truncated Taylor method: `A` is shifted by `mu = trace(A) / n`, the interval is cut into
`s` steps, and each step sums at most `m` Taylor terms, stopping early once two terms in a
row are below the tolerance. `m` and `s` shape the program, so they are static: computed on
the host from `||t (A - mu I)||_1` when `A` and `t` are concrete, else from `norm_bound`.
"""

import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from jax import lax

from .._arrays import device_array
from .._base import SparseMatrix, is_concrete
from .._batching import refuse_batch
from .._coordinates import reduce_distinct
from .._dia import DIAMatrix
from .._reductions import trace
from ._working_dtype import working_dtype

# theta_m: the largest ||t A||_1 for which m Taylor terms reach double-precision backward
# error (Higham, "Functions of Matrices", table A.3 for m <= 30; Al-Mohy and Higham, table
# 3.1 above).
_THETA = {
    1: 2.29e-16, 2: 2.58e-8, 3: 1.39e-5, 4: 3.40e-4, 5: 2.40e-3, 6: 9.07e-3, 7: 2.38e-2,
    8: 5.00e-2, 9: 8.96e-2, 10: 1.44e-1, 11: 2.14e-1, 12: 3.00e-1, 13: 4.00e-1, 14: 5.14e-1,
    15: 6.41e-1, 16: 7.81e-1, 17: 9.31e-1, 18: 1.09, 19: 1.26, 20: 1.44, 21: 1.62, 22: 1.82,
    23: 2.01, 24: 2.22, 25: 2.43, 26: 2.64, 27: 2.86, 28: 3.08, 29: 3.31, 30: 3.54, 35: 4.7,
    40: 6.0, 45: 7.2, 50: 8.5, 55: 9.9,
}  # fmt: skip

# A given `norm_bound` may fall short of the norm computed in the program by this relative
# rounding margin (the two sums round differently); `theta_m` has far more slack than that.
_BOUND_ROUNDING = 1e-3

# The most Taylor steps one call takes. Each step is up to 55 products, so more is millions
# of products (in effect a hang) and, in reverse mode, one stored `B` per step: far more
# likely a mistaken `t` or `norm_bound` than a wanted evolution, which a grid can split.
MAX_STEPS = 100_000


def taylor_degree_and_steps(norm: float) -> tuple[int, int]:
    """`(m, s)` minimising the products `m * s` with `s = ceil(norm / theta_m)`.

    **Arguments:**

    - `norm`: a bound on `||t (A - mu I)||_1` (a Python float).

    **Returns:** the Taylor degree `m` and the number of steps `s` (`(0, 1)` for zero).
    """
    if not math.isfinite(norm) or norm < 0:
        raise ValueError(f"expm_multiply: the norm bound must be finite and >= 0, got {norm}.")
    if norm == 0:
        return 0, 1
    return min(
        ((m, max(1, math.ceil(norm / theta))) for m, theta in _THETA.items()),
        key=lambda choice: (choice[0] * choice[1], choice[0]),
    )


@functools.singledispatch
def shifted_one_norm(A: SparseMatrix) -> float:
    """`||A - mu I||_1` with `mu = trace(A) / n`, exact, on the host (`A` must be concrete)."""
    n = A.shape[0]
    matrix = A.to_scipy().tocsr()
    matrix.sum_duplicates()
    mu = matrix.diagonal().sum() / n
    return float(scipy.sparse.linalg.norm(matrix - mu * scipy.sparse.eye_array(n), 1))


@shifted_one_norm.register
def _dia_shifted_one_norm(A: DIAMatrix) -> float:
    n = A.shape[0]
    offsets = np.asarray(A.offsets).reshape(-1, 1)
    rows = np.arange(A.data.shape[1])[None, :] - offsets
    values = np.where((rows >= 0) & (rows < n), np.asarray(A.data), 0)
    main = offsets[:, 0] == 0
    mu = values[main].sum() / n
    values[main] -= mu
    return float(np.max(np.abs(values).sum(axis=0), initial=0))


def traced_shifted_one_norm(A: SparseMatrix, mu: jax.Array) -> jax.Array:
    """`||A - mu I||_1` inside the program (jit-able), in one pass over the stored values:
    each column's off-diagonal magnitudes plus `|A[j, j] - mu|` (`|mu|` where no diagonal
    entry is stored). Not differentiated: it only checks a bound."""
    n = A.shape[0]
    A, mu = lax.stop_gradient((A, mu))

    def reduce(rows, cols, values, valid):
        on_diagonal = valid & (rows == cols)
        off_diagonal = jnp.where(valid & ~on_diagonal, jnp.abs(values), 0)
        diagonal = jax.ops.segment_sum(jnp.where(on_diagonal, values, 0), cols, n)
        column_sums = jax.ops.segment_sum(off_diagonal, cols, n) + jnp.abs(diagonal - mu)
        return jnp.max(column_sums)

    return reduce_distinct(A, reduce)


def _check_norm_bound(B, A, t, mu, norm_bound: float) -> jax.Array:
    """`B`, or `nan` where `norm_bound` is below `||t (A - mu I)||_1`: too few Taylor terms
    would give a plausible but wrong result. `B` is multiplied by a factor of 1 or `nan`, so
    that the result and every derivative are `nan`; `nan` rather than `eqx.error_if`, whose
    host callback would keep `expm_multiply` from exporting."""
    norm = jnp.abs(lax.stop_gradient(t)) * traced_shifted_one_norm(A, mu)
    enough = norm <= norm_bound * (1 + _BOUND_ROUNDING)
    return B * jnp.where(enough, 1, jnp.nan).astype(B.dtype)


def _shifted(A: SparseMatrix, mu: jax.Array):
    """`A - mu I` as an operator: a DIA matrix with a main diagonal takes the shift into its
    values (one pass fewer per product), and the shift left over is `None`; otherwise
    `mu * x` is subtracted after each product."""
    if isinstance(A, DIAMatrix) and 0 in A.offsets:
        data = A.data.at[A.offsets.index(0)].add(-mu)
        return A.with_data(data), None
    return A, mu


def expm_multiply(
    A: SparseMatrix,
    B,
    t=None,
    *,
    start=None,
    stop=None,
    num: int | None = None,
    endpoint: bool = True,
    norm_bound: float | None = None,
):
    """`exp(t A) @ B` for a square sparse `A`, by the truncated Taylor method.

    Runs on `A`'s products, under `jax.jit` and `jax.vmap` (over `B`, or over `A`'s values
    with `norm_bound`), and is differentiable in `A`'s values, `B` and `t`, in forward and
    reverse mode (reverse mode stores one `B`-sized array per step and recomputes inside
    a step).

    **Arguments:**

    - `A`: a square `DIAMatrix` or `CSRMatrix` (for a Schrodinger evolution `exp(-i t H)`,
      pass `(-1j) * H`).
    - `B`: a dense `(n,)` or `(n, k)` array.
    - `t`: a real scalar time (default 1).
    - `start`, `stop`, `num`, `endpoint`: instead of `t`, a grid of `num` times from
      `start` to `stop` (as `numpy.linspace`): the result is stacked along a new first
      axis, stepping from each time to the next with the same static degree and steps.
    - `norm_bound`: a Python float `>= ||t (A - mu I)||_1`, `mu = trace(A) / n` (`2 |t|
      ||A||_1` always is one). It sets the
      static degree and steps and is needed when `A`'s values or `t` are traced (under
      `jit`, `grad` or `vmap`); when both are concrete it is computed on the host. For a
      grid it must hold for `t = start` and for `t` the step between times.
      A given bound is checked against `||t (A - mu I)||_1` computed in the program (one
      pass over the stored values): too small a bound makes the result (and its
      derivatives) `nan`, too large costs products. A norm past about 1e6 (over
      100,000 Taylor steps) is a `ValueError` naming `t` or `norm_bound`: split a long
      evolution with a grid.

    **Returns:** `exp(t A) @ B` in the dtype of `A @ B`, shaped as `B`; with a grid,
    `(num, *B.shape)`.
    """
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"expm_multiply: `A` must be a jaxsparse matrix, got {type(A).__name__}.")
    refuse_batch("`expm_multiply`", A)
    n = A.shape[0]
    if A.shape != (n, n):
        raise ValueError(f"expm_multiply: `A` must be square, got shape {A.shape}.")
    norm_bound = _norm_bound(norm_bound)
    B = device_array(B)
    if B.ndim not in (1, 2) or B.shape[0] != n:
        raise ValueError(f"expm_multiply: `B` must have shape ({n},) or ({n}, k), got {B.shape}.")
    dtype = working_dtype(jnp.result_type(A.dtype, B.dtype))
    real = jnp.finfo(dtype).dtype
    A, B = A.astype(dtype), B.astype(dtype)
    grid = (start, stop, num) != (None, None, None)
    if grid:
        if None in (start, stop, num):
            raise ValueError("expm_multiply: a grid needs all of `start`, `stop` and `num`.")
        if t is not None:
            raise ValueError("expm_multiply: give either `t` or a grid (`start`, `stop`, `num`).")
        if not isinstance(num, int) or num < 1:
            raise ValueError(f"expm_multiply: `num` must be a positive int, got {num!r}.")
        intervals = num - 1 if endpoint else num
        span = _real_scalar(stop, real, "stop") - _real_scalar(start, real, "start")
        t = span / max(intervals, 1)
    else:
        t = _real_scalar(1.0 if t is None else t, real, "t")
    if n == 0:  # nothing to evolve; the norm below would reduce over no entries
        return jnp.broadcast_to(B, (num, *B.shape)) if grid else B
    degree, steps = _static_schedule(A, t, norm_bound)
    tol = float(jnp.finfo(dtype).eps) / 2
    mu = (trace(A) / n).astype(dtype)
    if norm_bound is not None:
        B = _check_norm_bound(B, A, t, mu, norm_bound)
    if not grid:
        return _taylor(A, B, t, mu, degree=degree, steps=steps, tol=tol)
    first = expm_multiply(A, B, _real_scalar(start, real, "start"), norm_bound=norm_bound)

    def advance(X, _):
        X = _taylor(A, X, t, mu, degree=degree, steps=steps, tol=tol)
        return X, X

    _, rest = lax.scan(advance, first, length=num - 1)
    return jnp.concatenate([first[None], rest])


def _real_scalar(value, real, name: str) -> jax.Array:
    value = jnp.asarray(value)
    if value.ndim != 0 or jnp.issubdtype(value.dtype, jnp.complexfloating):
        raise ValueError(f"expm_multiply: `{name}` must be a real scalar, got {value!r}.")
    return value.astype(real)


def _static_schedule(A, t, norm_bound: float | None) -> tuple[int, int]:
    if norm_bound is None:
        if not is_concrete(t, *jax.tree.leaves(A)):
            raise ValueError(
                "expm_multiply: `A`'s values or `t` are traced (under jit, grad or vmap), "
                "so the static Taylor degree and steps need `norm_bound=`, a Python float "
                ">= ||t (A - trace(A)/n I)||_1 (2 |t| ||A||_1 always is one)."
            )
        norm, source = abs(float(t)) * shifted_one_norm(A), "`t`"
        if not math.isfinite(norm):
            raise ValueError("expm_multiply: `A` or `t` holds a value that is not finite.")
        remedy = "split `t` into shorter times (a grid `start`, `stop`, `num` steps through them)"
    else:
        norm, source = norm_bound, "`norm_bound`"
        remedy = "give a bound closer to ||t (A - mu I)||_1, or split `t` into shorter times"
    degree, steps = taylor_degree_and_steps(norm)
    if steps > MAX_STEPS:
        raise ValueError(
            f"expm_multiply: {source} is too large: ||t (A - mu I)||_1 <= {norm:.3g} would take "
            f"{steps:.3g} Taylor steps of {degree} products each, more than {MAX_STEPS} "
            f"(in effect a hang); {remedy}."
        )
    return degree, steps


def _norm_bound(norm_bound) -> float | None:
    """`norm_bound` as a Python float (`None` stays `None`), or a TypeError naming it."""
    if norm_bound is None:
        return None
    if isinstance(norm_bound, jax.core.Tracer):
        raise TypeError("expm_multiply: `norm_bound` must be a Python float, not traced.")
    number = isinstance(norm_bound, numbers.Real) and not isinstance(norm_bound, bool)
    scalar_array = (
        isinstance(norm_bound, (jax.Array, np.ndarray))
        and norm_bound.shape == ()
        and (
            jnp.issubdtype(norm_bound.dtype, jnp.floating)
            or jnp.issubdtype(norm_bound.dtype, jnp.integer)
        )
    )
    if not (number or scalar_array):
        raise TypeError(
            f"expm_multiply: `norm_bound` must be a real number (a Python float), got "
            f"{norm_bound!r}."
        )
    return float(norm_bound)


def _max_abs(X) -> jax.Array:
    """`||X||_inf` (a stopping test only, so not differentiated). Magnitudes are never
    squared: a square overflows or underflows far inside the dtype's range (a complex
    `abs` is a scaled hypot), which would make the test `inf <= inf` or `0 <= 0`."""
    X = lax.stop_gradient(X)
    if X.ndim == 2:
        return jnp.max(jnp.sum(jnp.abs(X), axis=-1))
    return jnp.max(jnp.abs(X))


@functools.partial(jax.jit, static_argnames=("degree", "steps", "tol"))
def _taylor(A, B, t, mu, *, degree: int, steps: int, tol: float):
    """`s` steps of `F <- exp(t mu / s) * sum_{j <= m} (t (A - mu I) / s)^j / j! F`."""
    return _taylor_early_exit(A, B, t, mu, degree, steps, tol)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5, 6))
def _taylor_early_exit(A, B, t, mu, degree, steps, tol):
    """The Taylor steps with each step's loop ending at its last needed term (a
    `while_loop`, which reverse mode cannot differentiate)."""
    return _taylor_steps(A, B, t, mu, degree, steps, tol, early_exit=True)


@_taylor_early_exit.defjvp
def _taylor_early_exit_jvp(degree, steps, tol, primals, tangents):
    """Derivatives come from the same steps over a fixed `degree` terms (terms past the
    last needed one are zeros, skipped by a `cond`), which both modes differentiate."""

    def fixed(A, B, t, mu):
        return _taylor_steps(A, B, t, mu, degree, steps, tol, early_exit=False)

    return jax.jvp(fixed, primals, tangents)


def _taylor_steps(A, B, t, mu, degree, steps, tol, *, early_exit: bool):
    eta = jnp.exp(t.astype(mu.dtype) * mu / steps)
    A, mu = _shifted(A, mu)

    def product(X):
        return A @ X if mu is None else A @ X - mu * X

    def term(j, carry):
        X, total, previous, done = carry
        coefficient = (t / (steps * (j + 1).astype(t.dtype))).astype(X.dtype)
        X = coefficient * product(X)
        size = _max_abs(X)
        total = total + X
        return X, total, size, previous + size <= tol * _max_abs(total)

    def skippable_term(j, carry):
        # Once two terms in a row are negligible, the rest are zeros: `cond` runs one
        # branch (both under `vmap`).
        X, total, previous, done = carry
        return lax.cond(done, lambda j, carry: carry, term, j, carry)

    @jax.checkpoint
    def step(F, _):
        carry = (F, F, _max_abs(F), jnp.zeros((), bool))
        if early_exit:
            _, (_, total, _, _) = lax.while_loop(
                lambda state: (state[0] < degree) & ~state[1][3],
                lambda state: (state[0] + 1, term(state[0], state[1])),
                (jnp.zeros((), jnp.int32), carry),
            )
        else:
            _, total, _, _ = lax.fori_loop(0, degree, skippable_term, carry)
        return eta * total, None

    F, _ = lax.scan(step, B, length=steps)
    return F
