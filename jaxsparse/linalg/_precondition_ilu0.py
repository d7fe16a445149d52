"""`spilu0`: the incomplete LU factorization with zero fill, as a preconditioner.

Two implementations of the same factors. On CPU (the default backend) with the native
kernels built, the factorization and both triangular solves are ordered sweeps in C++
(`_precondition_ilu0_native.py`). Elsewhere (GPU, TPU) the symbolic work
(`_precondition_ilu0_schedule.py`) runs once on the host, and the numeric factorization
and both triangular solves are `lax.fori_loop`s over the level schedules in pure JAX.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._arrays import device_array, take_at_each
from .._base import SparseMatrix, is_concrete
from .._batching import refuse_batch
from ..kernels.native_ilu0 import native_available
from ._precondition import Preconditioner, check_square
from ._precondition_ilu0_native import native_spilu0
from ._precondition_ilu0_schedule import Schedule, ilu0_schedule, matrix_pattern
from ._working_dtype import working_dtype


class ILU0Preconditioner(Preconditioner):
    """`M @ r = U^{-1} L^{-1} r` for the ILU(0) factors `A ~ L U` (unit lower `L`).

    The factors are held as padded per-row tables, so applying `M` costs two passes over
    the levels of the pattern; they are constants for autodiff (`stop_gradient`).
    """

    lower_values: jax.Array  # (n + 1, T): L's strictly lower entries per row
    lower_cols: jax.Array
    upper_values: jax.Array  # (n + 1, T'): U's strictly upper entries per row
    upper_cols: jax.Array
    upper_diagonal: jax.Array  # (n + 1,)
    forward_levels: jax.Array
    backward_levels: jax.Array
    shape: tuple[int, int] = eqx.field(static=True)

    def __call__(self, r):
        r = device_array(r)
        self._check_operand(r)
        return _apply(self, r)

    @property
    def dtype(self):
        return self.lower_values.dtype

    def factors(self):
        """`(L, U)` as dense `(n, n)` arrays (for checks on small matrices)."""
        n = self.shape[0]
        lower = _dense_rows(self.lower_values, self.lower_cols, n) + jnp.eye(n, dtype=self.dtype)
        upper = _dense_rows(self.upper_values, self.upper_cols, n)
        upper = upper + jnp.diag(self.upper_diagonal[:n])
        return lower, upper


_METHODS = ("auto", "native", "levels")


def spilu0(A: SparseMatrix, *, method: str = "auto") -> Preconditioner:
    """The ILU(0) preconditioner of the square `A`: `L U` matches `A` on its pattern.

    For a symmetric positive definite `A` the factors satisfy `U = D L^T`, so `M` is the
    incomplete Cholesky IC(0) preconditioner and suits conjugate gradients.

    **Arguments:**

    - `A`: a square `DIAMatrix` (any values, also traced under `jit`) or `CSRMatrix` (whose
      index arrays must be concrete: build it outside `jit`). Every diagonal entry must be
      in the pattern. A zero pivot gives `inf`/`nan` in `M @ r`, as in exact arithmetic.
    - `method`: `"native"` (C++ sweeps, CPU only: a `NativeILU0Preconditioner`),
      `"levels"` (level-scheduled JAX loops, every backend: an `ILU0Preconditioner`), or
      `"auto"` (the default): native when JAX's default backend is the CPU and the native
      kernels are built, else levels. The levels' schedule skips stored zeros that stay
      zero when `A`'s values are concrete (a stencil stored as diagonals has them where
      its grid lines wrap); under `jit` every stored entry counts, and such a stencil's
      rows chain into as many levels as rows: build the levels outside `jit`.

    **Returns:** a preconditioner `M`; `M @ r` and `M(r)` apply it to `(n,)` or
    `(n, k)` operands. Pass it as `M=` to `jax.scipy.sparse.linalg.cg`, `gmres` or
    `bicgstab`, or `M.lineax_operator()` as lineax's preconditioner. It is a pytree: it can
    be passed into `jit`. Its values are `stop_gradient`ed: gradients through a solve
    preconditioned by it never differentiate the factorization.
    """
    check_square(A, "spilu0")
    refuse_batch("`spilu0`", A)
    if method not in _METHODS:
        raise ValueError(f"spilu0: `method` must be one of {_METHODS}, got {method!r}.")
    dtype = working_dtype(A.dtype)
    if method == "auto":
        native = jax.default_backend() == "cpu" and native_available(dtype)
        method = "native" if native else "levels"
    if method == "native" and not native_available(dtype):
        raise ValueError("spilu0: `method='native'` needs the native CPU kernels (not built).")
    if method == "native" and is_concrete(A.data):
        platforms = {device.platform for device in A.data.devices()}
        if platforms != {"cpu"}:
            raise ValueError(
                f"spilu0: `method='native'` runs on the CPU, and `A` is on {sorted(platforms)}: "
                "put `A` on the CPU (`jax.device_put(A, jax.devices('cpu')[0])`) or use "
                "`method='levels'`."
            )
    pattern = matrix_pattern(A)
    values = _pattern_values(A.data, pattern.source, pattern.target, len(pattern.cols), dtype)
    if method == "native":
        return native_spilu0(pattern, values)
    schedule = ilu0_schedule(pattern, np.asarray(values) if is_concrete(values) else None)
    lower_values, upper_values, upper_diagonal = take_at_each(
        _factorize(values, schedule),
        schedule.lower_positions,
        schedule.upper_positions,
        schedule.diagonal,
    )
    n = pattern.n
    return ILU0Preconditioner(
        lower_values=lower_values,
        lower_cols=device_array(schedule.lower_cols),
        upper_values=upper_values,
        upper_cols=device_array(schedule.upper_cols),
        upper_diagonal=upper_diagonal,
        forward_levels=device_array(schedule.forward_levels),
        backward_levels=device_array(schedule.backward_levels),
        shape=(n, n),
    )


@functools.partial(jax.jit, static_argnums=(3, 4))
def _pattern_values(data, source, target, size: int, dtype) -> jax.Array:
    """The values of `A` (`data`, any format) at the pattern's positions, in `dtype`, as
    constants for autodiff."""
    flat = lax.stop_gradient(data).astype(dtype).reshape(-1)
    return jnp.zeros((size,), dtype).at[target].add(flat[source])


@jax.jit
def _apply(M: ILU0Preconditioner, r: jax.Array) -> jax.Array:
    dtype = jnp.result_type(M.dtype, r.dtype)
    padded = jnp.concatenate([r.astype(dtype), jnp.zeros((1, *r.shape[1:]), dtype)])
    y = _sweep(padded, M.forward_levels, M.lower_values, M.lower_cols, None)
    x = _sweep(y, M.backward_levels, M.upper_values, M.upper_cols, M.upper_diagonal)
    return x[:-1]


def _factorize(values: jax.Array, schedule: Schedule) -> jax.Array:
    """ILU(0) in place on the pattern's values, level by level; within a level, one lower
    entry rank at a time (a row's pivots must be eliminated left to right)."""
    pivot_diagonals = schedule.diagonal[schedule.lower_cols]
    return _factorize_levels(
        values, schedule.lower_positions, pivot_diagonals, schedule.forward_levels, schedule.updates
    )


@jax.jit
def _factorize_levels(values, lower_positions, pivot_diagonals, levels, updates):
    scratch = jnp.array([0, 1], values.dtype)
    a = jnp.concatenate([values, scratch])

    def level_step(level, a):
        rows = levels[level]
        for rank in range(lower_positions.shape[1]):
            pivots = lower_positions[rows, rank]
            a = a.at[pivots].set(a[pivots] / a[pivot_diagonals[rows, rank]])
            target, pivot, source = updates[level, rank]
            a = a.at[target].add(-a[pivot] * a[source])
            # Padded slots must keep their scratch values for the next stage.
            a = a.at[-2:].set(scratch)
        return a

    return lax.fori_loop(0, levels.shape[0], level_step, a)


def _sweep(x, levels, values, cols, diagonal):
    """A triangular solve over the level schedule: per level, `x[i] = (x[i] - sum_j
    t_ij x[j]) / t_ii` for all its rows at once (`t_ii = 1` when `diagonal` is `None`)."""

    def level_step(level, x):
        rows = levels[level]
        row_values = values[rows].reshape(*values[rows].shape, *(1,) * (x.ndim - 1))
        solved = x[rows] - jnp.sum(row_values * x[cols[rows]], axis=1)
        if diagonal is not None:
            pivot = diagonal[rows].reshape(-1, *(1,) * (x.ndim - 1))
            solved = solved / pivot
        # Rows of a level are distinct but for the padding's scratch row `n`, which every
        # padded slot sets to the same zero; declaring them unique makes the sweep
        # transposable (`M^T`, which lineax's reverse mode applies).
        x = x.at[rows].set(solved, unique_indices=True)
        return x.at[-1].set(0)

    return lax.fori_loop(0, levels.shape[0], level_step, x)


@functools.partial(jax.jit, static_argnums=2)
def _dense_rows(values, cols, n: int) -> jax.Array:
    rows = np.broadcast_to(np.arange(n + 1)[:, None], cols.shape)
    dense = jnp.zeros((n + 1, n + 1), values.dtype).at[rows, cols].add(values)
    return dense[:n, :n]
