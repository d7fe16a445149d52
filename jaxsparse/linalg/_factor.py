"""`Factorization`: what every sparse factorization shares, the solves with `A`, `A^T` and
`A^H` as implicit functions of the matrix, so that they differentiate.

A solve `x = A^{-1} b` goes through `jax.lax.custom_linear_solve` with the matrix's own
product as `matvec` and the factors' solves as `solve` and `transpose_solve`. Its
derivatives are then adjoint solves from the same factors: the cotangent of `b` is
`lambda = A^{-T} g` and that of the stored values is `-lambda[row(p)] * x[col(p)]` on the
stored pattern (the product's own transpose), and forward mode solves `A dx = db - dA x`.
JAX's convention for complex values holds: transposes are plain, never conjugate. The
factors themselves carry no derivative (`stop_gradient` where they are made).
"""

import abc
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse

from .._arrays import device_array
from .._batching import refuse_batch

_OPERATIONS = ("N", "T", "H")


def dense_rhs(b):
    """`b` as an array; a scipy sparse `b` is made dense on the host (`.toarray()`): the
    solution is dense anyway."""
    return b.toarray() if scipy.sparse.issparse(b) else b


def solve_dtype(matrix_dtype, b_dtype) -> np.dtype:
    """The dtype `spsolve` solves in and returns, as scipy's: `A`'s and `b`'s promoted (a
    complex `b` with a real `A` gives a complex solution; an integer `b` takes `A`'s)."""
    if not jnp.issubdtype(b_dtype, jnp.inexact):
        return np.dtype(matrix_dtype)
    return _promoted(matrix_dtype, b_dtype)


def _promoted(a, b) -> np.dtype:
    # An explicit promotion, allowed under `jax_numpy_dtype_promotion="strict"` too.
    with jax.numpy_dtype_promotion("standard"):
        return np.dtype(jnp.promote_types(a, b))


def check_rhs(b, n: int, dtype, name: str = "b") -> jax.Array:
    """`b` as an array of `dtype`, of shape `(n,)` or `(n, k)`, or a clear error. A `b`
    that `dtype` cannot hold without rounding (complex into real, float64 into float32) is
    a TypeError, as scipy's `SuperLU.solve` refuses it."""
    b = device_array(b)
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(
            f"`{name}` must have shape ({n},) or ({n}, k) for a matrix of {n} rows, got {b.shape}."
        )
    if not jnp.issubdtype(b.dtype, jnp.inexact) and not jnp.issubdtype(b.dtype, jnp.integer):
        raise TypeError(f"`{name}` must hold numbers, got dtype {b.dtype}.")
    if jnp.issubdtype(b.dtype, jnp.inexact) and _promoted(b.dtype, dtype) != dtype:
        raise TypeError(
            f"`{name}` is {b.dtype} but the factors are {dtype}: solving would round `{name}`. "
            f"Factor `A.astype(jnp.{_promoted(b.dtype, dtype)})` (or use `spsolve`, which "
            "promotes as scipy's does)."
        )
    return b.astype(dtype)


def run_compiled(fn, *args):
    """`fn(*args)`; called eagerly (no traced array in `args`), as one compiled program
    cached on the arrays' shapes and dtypes and the other arguments' values: a solve's host
    callbacks and platform branches would otherwise compile anew on every eager call."""
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(args)):
        return fn(*args)
    return _compiled(fn)(*args)


@functools.cache
def _compiled(fn):
    return eqx.filter_jit(fn)


class Factorization(eqx.Module):
    """A factorization of a square sparse matrix `A`, reusable for any number of solves.

    Solves differentiate with respect to the right-hand side and to the matrix's stored
    values (through `matrix`), in reverse and forward mode; `jax.vmap` over right-hand
    sides runs one multi-column solve.
    """

    matrix: eqx.AbstractVar[object]

    @abc.abstractmethod
    def _solve_columns(self, b: jax.Array, op: str) -> jax.Array:
        """`A^{-1} b`, `A^{-T} b` or `A^{-H} b` (`op` "N", "T", "H") for `b` of shape
        `(n, k)` in the factors' dtype, with no derivative rule."""

    def _solve(self, b: jax.Array, op: str) -> jax.Array:
        if op not in _OPERATIONS:
            raise ValueError(f"`trans` must be 'N', 'T' or 'H', got {op!r}.")
        refuse_batch("`Factorization.solve`", self.matrix)
        n = self.matrix.shape[0]
        b = check_rhs(b, n, self.matrix.dtype)
        vector = b.ndim == 1
        x = self._linear_solve(b[:, None] if vector else b, op)
        return x[:, 0] if vector else x

    def _linear_solve(self, columns: jax.Array, op: str) -> jax.Array:
        """`op(A)^{-1} columns` with its derivatives: adjoint solves from the same factors
        through `jax.lax.custom_linear_solve`."""
        adjoint = {"N": "T", "T": "N", "H": "C"}[op]

        def matvec(x):
            # Transposed products as `x^T A`, with no transposed copy of the structure.
            if op == "N":
                return self.matrix @ x
            matrix = self.matrix.conj() if op == "H" else self.matrix
            return (x.T @ matrix).T

        def solve(_, rhs):
            return self._solve_columns(rhs, op)

        def transpose_solve(_, rhs):
            # The plain transpose of A^H is conj(A): its solve conjugates around A^{-1}.
            if adjoint == "C":
                return self._solve_columns(rhs.conj(), "N").conj()
            return self._solve_columns(rhs, adjoint)

        return jax.lax.custom_linear_solve(matvec, columns, solve, transpose_solve)

    def solve(self, b, trans: str = "N") -> jax.Array:
        """The solution of `A x = b` (`trans="N"`), `A^T x = b` ("T") or `A^H x = b` ("H").

        **Arguments:**

        - `b`: `(n,)` or `(n, k)` right-hand sides (a scipy sparse `b` is made dense on
          the host); converted to the matrix's dtype. A
          `b` that would be rounded (complex with a real matrix, float64 with float32) is
          a `TypeError`, as in scipy's `SuperLU.solve`.
        - `trans`: "N", "T" or "H", as `scipy.sparse.linalg.SuperLU.solve`.

        **Returns:** `x`, shaped like `b`, in the matrix's dtype. A singular matrix gives
        `nan` (a nearly singular one, large or non-finite entries).
        """
        return run_compiled(Factorization._solve, self, device_array(dense_rhs(b)), trans)

    def __call__(self, b) -> jax.Array:
        """`solve(b)`: the factorization is also the solve function that
        `scipy.sparse.linalg.factorized` returns."""
        return self.solve(b)
