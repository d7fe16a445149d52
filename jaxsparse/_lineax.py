"""`lineax_operator`: any jaxsparse matrix as a lineax linear operator.

lineax is an optional dependency (`pip install jaxsparse[lineax]`); this module imports
without it and `lineax_operator` says how to install it when it is missing.
"""

import jax

try:
    import lineax
except ImportError:  # the optional extra is not installed
    lineax = None
    SparseMatrixOperator = None

if lineax is not None:

    class SparseMatrixOperator(lineax.FunctionLinearOperator):
        """`matrix @ x` as a lineax operator that keeps `matrix`, the jaxsparse matrix, for
        solvers that factor it (`js.linalg.LineaxSparseLU`)."""

        matrix: object

        def __init__(self, matrix, tags):
            vector = jax.ShapeDtypeStruct((matrix.shape[1],), matrix.dtype)
            super().__init__(matrix.__matmul__, vector, tags=tags)
            self.matrix = matrix


def lineax_operator(matrix, *, symmetric: bool = False, positive_semidefinite: bool = False):
    """A `lineax.FunctionLinearOperator` applying `matrix @ x` (that also keeps `matrix`, for
    `js.linalg.LineaxSparseLU`).

    The matrix's values are leaves of the operator (lineax closure-converts the product),
    so `lineax.linear_solve` differentiates with respect to them and to the right-hand
    side. Products run on jaxsparse's kernels; the operator is never made dense unless a
    solver asks for it (`lineax.CG` and the other iterative solvers do not).

    **Arguments:**

    - `matrix`: a `DIAMatrix` or `CSRMatrix` of shape `(m, n)`.
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
    return SparseMatrixOperator(matrix, tuple(tags))
