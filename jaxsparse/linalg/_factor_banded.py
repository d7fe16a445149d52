"""`BandedLU` and `DenseLU`: the factorizations of a square `DIAMatrix`.

A DIA matrix with `kl` sub- and `ku` superdiagonals factors as a band, LU with partial
pivoting (LAPACK's `gbtrf`), into a fixed-size `(n, 2 * kl + ku + 1)` array and `n`
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

import abc
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg
from jaxtyping import Array, Inexact, Int

from .._dia import DIAMatrix
from ..kernels import native_banded_lu
from ._banded_one_pass import one_pass_solve
from ._factor import Factorization


class _StoredFactors(Factorization):
    """A factorization of a `DIAMatrix` kept as arrays, with `factored`, the matrix its
    factors were computed from (read under `stop_gradient`). A solve whose `matrix` no
    longer holds those bits (replaced afterwards, e.g. by `eqx.tree_at`) returns `nan`, as
    its derivatives do: the factors would solve the old matrix while the derivatives
    differentiate the new one. `nan` rather than an error, so that the solves keep no host
    callback (they export, and run on the device on GPUs); rather than refactoring in a
    `lax.cond`, which under `vmap` would factor on every solve."""

    matrix: eqx.AbstractVar[DIAMatrix]
    factored: eqx.AbstractVar[DIAMatrix]

    @abc.abstractmethod
    def _solve_with_factors(self, b: jax.Array, op: str) -> jax.Array:
        """`_solve_columns` with the factors, trusting that they are `matrix`'s."""

    def _solve_columns(self, b, op):
        x = self._solve_with_factors(b, op)
        return jnp.where(_same_matrix(self.matrix, self.factored), x, jnp.full_like(x, jnp.nan))


def _same_matrix(matrix: DIAMatrix, factored: DIAMatrix) -> jax.Array:
    """Whether `matrix` holds the same offsets, shape and value bits as `factored` (NaN
    matches itself; a bitwise test is also the cheapest). Known without a test where both
    are one array, as when the factorization is made and solved in one trace."""
    if matrix.data is factored.data and matrix.offsets == factored.offsets:
        return jnp.ones((), bool)
    a, b = jax.lax.stop_gradient((matrix.data, factored.data))
    same_layout = (matrix.offsets, matrix.shape) == (factored.offsets, factored.shape)
    if not same_layout or (a.shape, a.dtype) != (b.shape, b.dtype):
        return jnp.zeros((), bool)
    if jnp.iscomplexobj(a):
        return _same_bits(a.real, b.real) & _same_bits(a.imag, b.imag)
    return _same_bits(a, b)


def _same_bits(a: jax.Array, b: jax.Array) -> jax.Array:
    unsigned = jnp.dtype(f"uint{8 * a.dtype.itemsize}")
    bits = functools.partial(jax.lax.bitcast_convert_type, new_dtype=unsigned)
    return jnp.array_equal(bits(a), bits(b))


class BandedLU(_StoredFactors):
    """The LU factorization with partial pivoting of a square banded `DIAMatrix`.

    `band[j, kl + ku + i - j]` holds `U[i, j]` for `i <= j` and the multipliers of `L`
    below, as LAPACK's `?gbtrf` leaves them (`band.T` is LAPACK's band array);
    `pivots[j]` is the row that row `j` was swapped with (0-based). `info` is 0, or the
    1-based column of the first zero pivot: then the matrix is singular and every solve
    returns `nan`. `factored`: the matrix factored; a solve whose `matrix` differs from it
    returns `nan`.
    """

    matrix: DIAMatrix
    factored: DIAMatrix
    band: Inexact[Array, "rows n"]
    pivots: Int[Array, " n"]
    info: Int[Array, ""]
    kl: int = eqx.field(static=True)
    ku: int = eqx.field(static=True)

    def _solve_with_factors(self, b, op):
        x = native_banded_lu.banded_lu_solve(
            self.band,
            self.pivots,
            jax.lax.stop_gradient(self.factored.data),
            b,
            offsets=self.factored.offsets,
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


class DenseLU(_StoredFactors):
    """The dense LU factorization of a `DIAMatrix` whose band is no narrower than the
    matrix (`jax.scipy.linalg.lu_factor`): `lu` and 0-based `pivots`. A zero pivot (a
    singular matrix) makes every solve `nan`, as `BandedLU`'s and scipy's do. `factored`:
    the matrix factored; a solve whose `matrix` differs from it returns `nan`."""

    matrix: DIAMatrix
    factored: DIAMatrix
    lu: Inexact[Array, "n n"]
    pivots: Int[Array, " n"]

    def _solve_with_factors(self, b, op):
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
    return DenseLU(matrix, matrix, lu, pivots)


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
    return BandedLU(matrix, matrix, band, pivots, info, kl, ku)
