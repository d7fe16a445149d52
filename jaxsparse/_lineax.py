"""`lineax_operator`: any jaxsparse matrix as a lineax linear operator.

lineax is an optional dependency (`pip install jaxsparse[lineax]`); this module imports
without it and `lineax_operator` says how to install it when it is missing.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from ._base import SparseMatrix

try:
    import lineax
except ImportError:  # the optional extra is not installed
    lineax = None
    SparseMatrixOperator = None

if lineax is not None:

    class SparseMatrixOperator(lineax.AbstractLinearOperator):
        """A jaxsparse matrix `A` of shape `(m, n)` as a lineax operator from `(n,)` to
        `(m,)` vectors in `A`'s dtype: `mv(x) = A @ x` on jaxsparse's kernels.

        `A` is a pytree field, so its arrays are leaves and its structure (DIA offsets,
        shape) and the tags are static: `jax.jit` and `eqx.filter_jit` cache on them as on
        any pytree, and gradients reach `A.data`. Conventions, as lineax's own operators:

        - `transpose()` (`.T`) is the plain transpose, an operator around `A.T` with the
          tags transposed; an operator tagged symmetric is its own transpose.
          `lineax.conj` gives the operator around `A.conj()`.
        - The tags are the caller's word and are not checked.
        - `lineax.diagonal` and `lineax.tridiagonal` read the stored diagonals;
          `as_matrix()` makes the dense matrix (lineax's dense solvers ask for it).
          `lineax.materialise` and `lineax.linearise` return the operator itself: it is
          held in memory already.
        """

        matrix: SparseMatrix
        tags: frozenset[object] = eqx.field(static=True)

        def __init__(self, matrix, tags=()):
            if not isinstance(matrix, SparseMatrix):
                raise TypeError(
                    "`lineax_operator` takes a `DIAMatrix` or a `CSRMatrix`, got "
                    f"{type(matrix).__name__}."
                )
            if matrix.batch_shape:
                raise ValueError(
                    "`lineax_operator` takes one matrix, got a batch of shape "
                    f"{matrix.batch_shape}; `jax.vmap` over the solve instead."
                )
            self.matrix = matrix
            self.tags = frozenset(tags)

        def mv(self, vector):
            return self.matrix @ vector

        def as_matrix(self):
            return self.matrix.todense()

        def transpose(self):
            if lineax.is_symmetric(self):
                return self
            return SparseMatrixOperator(self.matrix.T, lineax.transpose_tags(self.tags))

        def in_structure(self):
            return jax.ShapeDtypeStruct((self.matrix.shape[1],), self.matrix.dtype)

        def out_structure(self):
            return jax.ShapeDtypeStruct((self.matrix.shape[0],), self.matrix.dtype)

    # lineax dispatches these operations on the operator's type and raises
    # `NotImplementedError` for a type without them. The queries read the tags only, as
    # for `MatrixLinearOperator`: `AutoLinearSolver` chooses as for the dense matrix.

    @lineax.linearise.register(SparseMatrixOperator)
    @lineax.materialise.register(SparseMatrixOperator)
    def _(operator):
        return operator

    @lineax.diagonal.register(SparseMatrixOperator)
    def _(operator):
        return operator.matrix.diagonal()

    @lineax.tridiagonal.register(SparseMatrixOperator)
    def _(operator):
        matrix = operator.matrix
        return matrix.diagonal(0), matrix.diagonal(-1), matrix.diagonal(1)

    @lineax.conj.register(SparseMatrixOperator)
    def _(operator):
        return SparseMatrixOperator(operator.matrix.conj(), operator.tags)

    @lineax.is_symmetric.register(SparseMatrixOperator)
    def _(operator):
        if lineax.symmetric_tag in operator.tags or lineax.diagonal_tag in operator.tags:
            return True
        # A semidefinite complex matrix is Hermitian, not symmetric.
        definite = {lineax.positive_semidefinite_tag, lineax.negative_semidefinite_tag}
        return bool(definite & operator.tags) and not jnp.issubdtype(
            operator.matrix.dtype, jnp.complexfloating
        )

    @lineax.is_diagonal.register(SparseMatrixOperator)
    def _(operator):
        return lineax.diagonal_tag in operator.tags or operator.matrix.shape == (1, 1)

    @lineax.is_tridiagonal.register(SparseMatrixOperator)
    def _(operator):
        return bool({lineax.tridiagonal_tag, lineax.diagonal_tag} & operator.tags)

    def _tagged(tag):
        return lambda operator: tag in operator.tags

    lineax.has_unit_diagonal.register(SparseMatrixOperator, _tagged(lineax.unit_diagonal_tag))
    lineax.is_lower_triangular.register(SparseMatrixOperator, _tagged(lineax.lower_triangular_tag))
    lineax.is_upper_triangular.register(SparseMatrixOperator, _tagged(lineax.upper_triangular_tag))
    lineax.is_positive_semidefinite.register(
        SparseMatrixOperator, _tagged(lineax.positive_semidefinite_tag)
    )
    lineax.is_negative_semidefinite.register(
        SparseMatrixOperator, _tagged(lineax.negative_semidefinite_tag)
    )


def lineax_operator(matrix, *, symmetric: bool = False, positive_semidefinite: bool = False):
    """`matrix` as a lineax linear operator, `mv(x) = matrix @ x`, that keeps `matrix` for
    solvers that factor it (`js.linalg.LineaxSparseLU`).

    The operator is an Equinox module holding `matrix` as a field: passed into `jax.jit`
    or `eqx.filter_jit` it compiles once per structure (shape, DIA offsets, CSR number of
    entries, dtype, tags), as `matrix` would. `lineax.linear_solve` differentiates with
    respect to the matrix's values and to the right-hand side. Products run on
    jaxsparse's kernels; the operator is never made dense unless a solver asks for it
    (`lineax.LU` does; `lineax.CG` and the other iterative solvers do not).
    `operator.T` is the operator of `matrix.T` (the plain transpose, as in lineax, not
    the conjugate one), so `js.linalg.LineaxSparseLU` solves with it too.

    **Arguments:**

    - `matrix`: a `DIAMatrix` or `CSRMatrix` of shape `(m, n)` (one matrix, not a batch).
    - `symmetric`, `positive_semidefinite`: lineax's tags, which the caller vouches for
      (they are not checked); `lineax.CG` needs both.

    **Returns:** a lineax operator from `(n,)` vectors to `(m,)` vectors, in the matrix's
    dtype.
    """
    if lineax is None:
        raise ImportError(
            "`lineax_operator` needs lineax: `pip install lineax` (or `jaxsparse[lineax]`)."
        )
    tags = []
    if symmetric:
        tags.append(lineax.symmetric_tag)
    if positive_semidefinite:
        tags.append(lineax.positive_semidefinite_tag)
    return SparseMatrixOperator(matrix, tags)
