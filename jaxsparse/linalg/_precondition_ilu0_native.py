"""ILU(0) on CPU by the native kernels (`kernels/native_ilu0.py`): the factors in CSR form
on the matrix's pattern, factored and applied by ordered sweeps over the rows, which on
a CPU beat the level-scheduled JAX loops (`_precondition_ilu0.py`) that GPUs run."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._arrays import device_array
from ..kernels import native_ilu0
from ._precondition import Preconditioner
from ._precondition_ilu0_schedule import Pattern


class NativeILU0Preconditioner(Preconditioner):
    """`M @ r = U^{-1} L^{-1} r` for the ILU(0) factors `A ~ L U` (unit lower `L`), held
    on `A`'s CSR pattern: positions before a row's diagonal hold `L`, the rest `U`. They
    are constants for autodiff; `M` is linear in `r` (derivatives in `r` are `M` itself,
    or its transpose in reverse mode)."""

    values: jax.Array  # (nnz,): L and U on the pattern
    cols: jax.Array  # (nnz,), int32, increasing within each row
    indptr: jax.Array  # (n + 1,), int32
    diagonal: jax.Array  # (n,), int32: each row's diagonal position
    rows: jax.Array  # (nnz,), int32: each position's row
    shape: tuple[int, int] = eqx.field(static=True)

    def __call__(self, r):
        r = device_array(r)
        self._check_operand(r)
        return _apply(self, r)

    @property
    def dtype(self):
        return self.values.dtype

    def _product(self, values, x):
        """`L U x`, the operator `M` inverts (for the solve's derivative rules)."""
        n = self.shape[0]
        upper = jnp.arange(values.shape[0], dtype=jnp.int32) >= self.diagonal[self.rows]

        def rows_times(entries, x):
            return jax.ops.segment_sum(entries[:, None] * x[self.cols], self.rows, n)

        y = rows_times(jnp.where(upper, values, 0), x)
        return y + rows_times(jnp.where(upper, 0, values), y)

    def factors(self):
        """`(L, U)` as dense `(n, n)` arrays (for checks on small matrices)."""
        return _factors(self)


@jax.jit
def _factors(M: NativeILU0Preconditioner):
    n = M.shape[0]
    upper = jnp.arange(M.values.shape[0], dtype=jnp.int32) >= M.diagonal[M.rows]
    dense = jnp.zeros((n, n), M.dtype).at[M.rows, M.cols].add(M.values)
    lower = jnp.zeros((n, n), M.dtype).at[M.rows, M.cols].add(jnp.where(upper, 0, M.values))
    return lower + jnp.eye(n, dtype=M.dtype), dense - lower


# One compiled program per operand shape: eagerly, `custom_linear_solve` would run its
# solve's operations one by one.
@jax.jit
def _apply(M: NativeILU0Preconditioner, r: jax.Array) -> jax.Array:
    dtype = jnp.result_type(M.dtype, r.dtype)
    columns = (r[:, None] if r.ndim == 1 else r).astype(dtype)
    values = M.values.astype(dtype)
    structure = (M.cols, M.indptr, M.diagonal)

    def solve(_, b, transpose=False):
        return native_ilu0.apply(values, *structure, b, transpose=transpose)

    out = lax.custom_linear_solve(
        lambda x: M._product(values, x),
        columns,
        solve,
        lambda _, b: solve(None, b, transpose=True),
    )
    return out[:, 0] if r.ndim == 1 else out


def native_spilu0(pattern: Pattern, values: jax.Array) -> NativeILU0Preconditioner:
    """The native ILU(0) of the matrix with `values` on `pattern` (values gathered already
    and `stop_gradient`ed)."""
    n = pattern.n
    rows = np.repeat(np.arange(n), np.diff(pattern.indptr))
    diagonal = np.flatnonzero(pattern.cols == rows)
    if len(diagonal) != n:
        missing = np.setdiff1d(np.arange(n), rows[diagonal])
        raise ValueError(
            f"spilu0: ILU(0) needs every diagonal entry in the pattern; row {missing[0]} has none."
        )
    structure = tuple(device_array(a, np.int32) for a in (pattern.cols, pattern.indptr, diagonal))
    return NativeILU0Preconditioner(
        values=native_ilu0.factor(values, *structure),
        cols=structure[0],
        indptr=structure[1],
        diagonal=structure[2],
        rows=device_array(rows, np.int32),
        shape=(n, n),
    )
