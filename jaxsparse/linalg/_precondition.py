"""Preconditioners for Krylov solvers: what they share, and `jacobi`.

A preconditioner `M` approximates `A^{-1}`: `M @ r` (or `M(r)`) applies it, so it is
accepted as `M=` by `jax.scipy.sparse.linalg.cg`, `gmres` and `bicgstab`, and
`M.lineax_operator()` gives lineax's `preconditioner` option. Its arrays are built under
`stop_gradient`: it is a fixed operator, and a solve's gradient (an implicit function of
`A` and `b`) does not depend on it.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._arrays import device_array
from .._base import SparseMatrix
from .._batching import refuse_batch
from .._reductions import diagonal
from ._working_dtype import working_dtype


class Preconditioner(eqx.Module):
    """An approximate inverse of a square matrix, applied by `M @ r` or `M(r)`."""

    shape: eqx.AbstractVar[tuple[int, int]]

    @abc.abstractmethod
    def __call__(self, r) -> jax.Array:
        """`M @ r` for `r` of shape `(n,)` or `(n, k)`."""

    @property
    @abc.abstractmethod
    def dtype(self):
        """The dtype of the preconditioner's values."""

    def __matmul__(self, r):
        return self(r)

    def _check_operand(self, r) -> None:
        if r.ndim not in (1, 2) or r.shape[0] != self.shape[1]:
            raise ValueError(
                f"preconditioner: the operand must have shape ({self.shape[1]},) or "
                f"({self.shape[1]}, k), got {r.shape}."
            )

    def lineax_operator(self, *, symmetric: bool = False, positive_semidefinite: bool = False):
        """This preconditioner as a lineax operator on `(n,)` vectors, for
        `lineax.linear_solve(..., options={"preconditioner": M.lineax_operator(...)})`.

        The operator is an Equinox module holding `M`: passed into `jax.jit` or
        `eqx.filter_jit`, a new preconditioner of the same structure reuses the compiled
        function.

        **Arguments:**

        - `symmetric`, `positive_semidefinite`: lineax's tags, which the caller vouches for
          (`lineax.CG` wants a positive semidefinite preconditioner).
        """
        from .._lineax import PreconditionerOperator, lineax, lineax_tags

        if lineax is None:
            raise ImportError("`lineax_operator` needs lineax: `pip install lineax`.")
        tags = lineax_tags(symmetric=symmetric, positive_semidefinite=positive_semidefinite)
        return PreconditionerOperator(self, tags)


class JacobiPreconditioner(Preconditioner):
    """`M @ r = r / diag(A)`."""

    inverse_diagonal: jax.Array
    shape: tuple[int, int] = eqx.field(static=True)

    def __call__(self, r):
        r = device_array(r)
        self._check_operand(r)
        scale = self.inverse_diagonal if r.ndim == 1 else self.inverse_diagonal[:, None]
        dtype = jnp.result_type(scale.dtype, r.dtype)
        return scale.astype(dtype) * r.astype(dtype)

    @property
    def dtype(self):
        return self.inverse_diagonal.dtype


def check_square(A, name: str) -> None:
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"{name}: `A` must be a jaxsparse matrix, got {type(A).__name__}.")
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"{name}: `A` must be square, got shape {A.shape}.")


def jacobi(A: SparseMatrix) -> JacobiPreconditioner:
    """The Jacobi (diagonal) preconditioner of the square `A`.

    **Arguments:**

    - `A`: a square `DIAMatrix` or `CSRMatrix` (jit-able), one matrix: a batched one is
      refused (build one preconditioner per member inside `jax.vmap`). A zero on the
      diagonal gives `inf` in `M @ r`.

    **Returns:** a `JacobiPreconditioner` (see the module for its uses).
    """
    check_square(A, "jacobi")
    refuse_batch("`jacobi`", A)
    dtype = working_dtype(A.dtype)
    main = lax.stop_gradient(diagonal(A).astype(dtype))
    return JacobiPreconditioner(inverse_diagonal=1 / main, shape=A.shape)
