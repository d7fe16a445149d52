"""`BandedLU` and `DenseLU`: the factorizations of a square `DIAMatrix`.

A DIA matrix with `kl` sub- and `ku` superdiagonals factors as a band, LU with partial
pivoting (LAPACK's `gbtrf`), into a fixed-size `(2 * kl + ku + 1, n)` array and `n`
pivots: no handles, so a factorization made inside `jit` is an ordinary array that `vmap`
batches and that is freed like any other. On CPU the native kernels factor and solve;
on other platforms LAPACK runs on the host (`kernels/native_banded_lu.py`), except the
solves of a tridiagonal band on GPUs, which run on the device from the values
(`kernels/device_tridiagonal.py`).

A band at least as tall as the matrix (`2 * kl + ku + 1 >= n`) stores more than the dense
matrix, so such a matrix is factored densely (`jax.scipy.linalg.lu_factor`) instead.

`spsolve` needs no factors to keep: `BandedSolve` factors and solves in one pass per call
(`native_banded_lu.banded_solve`), its gradient's adjoint solve another pass with `A^T`
that also yields the values' cotangent (`_banded_one_pass.py`).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg
from jaxtyping import Array, Inexact, Int

from .._dia import DIAMatrix
from ..kernels import native_banded_lu
from ._banded_one_pass import one_pass_solve
from ._factor import Factorization


class BandedLU(Factorization):
    """The LU factorization with partial pivoting of a square banded `DIAMatrix`.

    `band[kl + ku + i - j, j]` holds `U[i, j]` for `i <= j` and the multipliers of `L`
    below, as LAPACK's `?gbtrf` leaves them; `pivots[j]` is the row that row `j` was
    swapped with (0-based). `info` is 0, or the 1-based column of the first zero pivot:
    then the matrix is singular and every solve returns `nan`.
    """

    matrix: DIAMatrix
    band: Inexact[Array, "rows n"]
    pivots: Int[Array, " n"]
    info: Int[Array, ""]
    kl: int = eqx.field(static=True)
    ku: int = eqx.field(static=True)

    def _solve_columns(self, b, op):
        values = jax.lax.stop_gradient(self.matrix.data)
        x = native_banded_lu.banded_lu_solve(
            self.band,
            self.pivots,
            values,
            b,
            offsets=self.matrix.offsets,
            kl=self.kl,
            ku=self.ku,
            op=op,
        )
        return jnp.where(self.info == 0, x, jnp.full_like(x, jnp.nan))


class BandedSolve(Factorization):
    """A square banded `DIAMatrix` solved afresh by every solve: LU with partial pivoting
    and the solve in one pass, no factors stored (what `spsolve` runs). A singular matrix
    gives `nan`."""

    matrix: DIAMatrix

    def _solve_columns(self, b, op):
        values = jax.lax.stop_gradient(self.matrix.data)
        return native_banded_lu.banded_solve(values, b, offsets=self.matrix.offsets, op=op)

    def _linear_solve(self, columns, op):
        # A solve with A itself differentiates with its adjoint pass fused with the values'
        # cotangent (`_banded_one_pass.py`).
        if op != "N":
            return super()._linear_solve(columns, op)
        return one_pass_solve(self.matrix.data, columns, self.matrix.offsets)


class DenseLU(Factorization):
    """The dense LU factorization of a `DIAMatrix` whose band is no narrower than the
    matrix (`jax.scipy.linalg.lu_factor`): `lu` and 0-based `pivots`. A zero pivot (a
    singular matrix) makes every solve `nan`, as `BandedLU`'s and scipy's do."""

    matrix: DIAMatrix
    lu: Inexact[Array, "n n"]
    pivots: Int[Array, " n"]

    def _solve_columns(self, b, op):
        trans = {"N": 0, "T": 1, "H": 2}[op]
        x = jax.scipy.linalg.lu_solve((self.lu, self.pivots), b, trans=trans)
        singular = jnp.any(jnp.diagonal(self.lu, axis1=-2, axis2=-1) == 0)
        return jnp.where(singular, jnp.full_like(x, jnp.nan), x)


def _dense_lu(matrix: DIAMatrix) -> DenseLU | None:
    """`DenseLU` of `matrix` where its band would be no smaller than the dense matrix."""
    n = matrix.shape[0]
    kl, ku = native_banded_lu.bandwidths(matrix.offsets, n)
    if 2 * kl + ku + 1 < n:
        return None
    lu, pivots = jax.scipy.linalg.lu_factor(jax.lax.stop_gradient(matrix.todense()))
    return DenseLU(matrix, lu, pivots)


def solve_dia(matrix: DIAMatrix) -> BandedSolve | DenseLU:
    """What `spsolve` solves a square `DIAMatrix` with: `BandedSolve`, or `DenseLU` where
    the band would be no smaller than the dense matrix."""
    dense = _dense_lu(matrix)
    return BandedSolve(matrix) if dense is None else dense


def factor_dia(matrix: DIAMatrix) -> BandedLU | DenseLU:
    """`BandedLU` of a square `DIAMatrix`, or `DenseLU` where the band would be no smaller
    than the dense matrix."""
    dense = _dense_lu(matrix)
    if dense is not None:
        return dense
    kl, ku = native_banded_lu.bandwidths(matrix.offsets, matrix.shape[0])
    values = jax.lax.stop_gradient(matrix.data)
    band, pivots, info = native_banded_lu.banded_lu(values, offsets=matrix.offsets, kl=kl, ku=ku)
    return BandedLU(matrix, band, pivots, info, kl, ku)
