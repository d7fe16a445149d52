"""`lineax_operator`: any jaxsparse matrix (and `Preconditioner.lineax_operator`, any
preconditioner) as a lineax linear operator.

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
    SparseMatrixOperator = PreconditionerOperator = None

if lineax is not None:

    class _TaggedOperator(lineax.AbstractLinearOperator):
        """A lineax operator whose structural properties are its static `tags`, the
        caller's word (not checked), read as lineax reads a `MatrixLinearOperator`'s."""

        tags: eqx.AbstractVar[frozenset]

    class SparseMatrixOperator(_TaggedOperator):
        """A jaxsparse matrix `A` of shape `(m, n)` as a lineax operator from `(n,)` to
        `(m,)` vectors in `A`'s dtype: `mv(x) = A @ x` on jaxsparse's kernels.

        `A` is a pytree field, so its arrays are leaves and its structure (DIA offsets,
        shape) and the tags are static: `jax.jit` and `eqx.filter_jit` cache on them as on
        any pytree, and gradients reach `A.data`. Conventions, as lineax's own operators:

        - `transpose()` (`.T`) is the plain transpose with the tags transposed: the same
          `A`, marked `transposed`, whose products are `A^T x` (the transposed kernels;
          `A.T` is never built). An operator tagged symmetric is its own transpose.
          `lineax.conj` gives the operator around `A.conj()`.
        - `lineax.diagonal` and `lineax.tridiagonal` read the stored diagonals;
          `as_matrix()` makes the dense matrix (lineax's dense solvers ask for it).
          `lineax.materialise` and `lineax.linearise` return the operator itself: it is
          held in memory already.
        """

        matrix: SparseMatrix
        tags: frozenset = eqx.field(static=True)
        transposed: bool = eqx.field(static=True)

        def __init__(self, matrix, tags=(), transposed: bool = False):
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
            self.transposed = transposed

        def mv(self, vector):
            return vector @ self.matrix if self.transposed else self.matrix @ vector

        def as_matrix(self):
            dense = self.matrix.todense()
            return dense.T if self.transposed else dense

        def transpose(self):
            if lineax.is_symmetric(self):
                return self
            tags = lineax.transpose_tags(self.tags)
            return SparseMatrixOperator(self.matrix, tags, not self.transposed)

        def diagonal(self, k: int = 0):
            """Diagonal `k` of the operator's matrix (of `A^T` when `transposed`)."""
            return self.matrix.diagonal(-k if self.transposed else k)

        def in_structure(self):
            rows, columns = self.matrix.shape
            length = rows if self.transposed else columns
            return jax.ShapeDtypeStruct((length,), self.matrix.dtype)

        def out_structure(self):
            rows, columns = self.matrix.shape
            length = columns if self.transposed else rows
            return jax.ShapeDtypeStruct((length,), self.matrix.dtype)

    class PreconditionerOperator(_TaggedOperator):
        """A `js.linalg` preconditioner `M` (`n x n`) as a lineax operator on `(n,)`
        vectors in `M`'s dtype: `mv(r) = M @ r`; `M` is a pytree field, as the matrix of a
        `SparseMatrixOperator`. `transpose()` applies `M^T` (JAX's transpose of the
        linear map `M`), `lineax.conj` applies `conj(M)`; `as_matrix()` is dense."""

        preconditioner: eqx.Module
        tags: frozenset = eqx.field(static=True)
        transposed: bool = eqx.field(static=True, default=False)
        conjugated: bool = eqx.field(static=True, default=False)

        def mv(self, vector):
            vector = vector.conj() if self.conjugated else vector
            if self.transposed:
                (result,) = jax.linear_transpose(self.preconditioner, self.in_structure())(vector)
            else:
                result = self.preconditioner(vector)
            return result.conj() if self.conjugated else result

        def as_matrix(self):
            identity = jnp.eye(self.preconditioner.shape[0], dtype=self.preconditioner.dtype)
            return jax.vmap(self.mv, out_axes=1)(identity)

        def transpose(self):
            if lineax.is_symmetric(self):
                return self
            tags = lineax.transpose_tags(self.tags)
            return PreconditionerOperator(
                self.preconditioner, tags, not self.transposed, self.conjugated
            )

        def in_structure(self):
            n = self.preconditioner.shape[0]
            return jax.ShapeDtypeStruct((n,), self.preconditioner.dtype)

        out_structure = in_structure

    # lineax dispatches these operations on the operator's type and raises
    # `NotImplementedError` for a type without them. The queries read the tags only, as
    # for `MatrixLinearOperator`: `AutoLinearSolver` chooses as for the dense matrix.

    @lineax.linearise.register(_TaggedOperator)
    @lineax.materialise.register(_TaggedOperator)
    def _(operator):
        return operator

    @lineax.diagonal.register(SparseMatrixOperator)
    def _(operator):
        return operator.diagonal()

    @lineax.diagonal.register(PreconditionerOperator)
    def _(operator):
        return jnp.diagonal(operator.as_matrix())

    @lineax.tridiagonal.register(SparseMatrixOperator)
    def _(operator):
        return operator.diagonal(0), operator.diagonal(-1), operator.diagonal(1)

    @lineax.tridiagonal.register(PreconditionerOperator)
    def _(operator):
        dense = operator.as_matrix()
        return tuple(jnp.diagonal(dense, k) for k in (0, -1, 1))

    @lineax.conj.register(SparseMatrixOperator)
    def _(operator):
        return SparseMatrixOperator(operator.matrix.conj(), operator.tags, operator.transposed)

    @lineax.conj.register(PreconditionerOperator)
    def _(operator):
        return PreconditionerOperator(
            operator.preconditioner, operator.tags, operator.transposed, not operator.conjugated
        )

    @lineax.is_symmetric.register(_TaggedOperator)
    def _(operator):
        if lineax.symmetric_tag in operator.tags or lineax.diagonal_tag in operator.tags:
            return True
        # A semidefinite complex matrix is Hermitian, not symmetric.
        definite = {lineax.positive_semidefinite_tag, lineax.negative_semidefinite_tag}
        return bool(definite & operator.tags) and not jnp.issubdtype(
            operator.in_structure().dtype, jnp.complexfloating
        )

    @lineax.is_diagonal.register(_TaggedOperator)
    def _(operator):
        one_by_one = operator.in_structure().shape == operator.out_structure().shape == (1,)
        return lineax.diagonal_tag in operator.tags or one_by_one

    @lineax.is_tridiagonal.register(_TaggedOperator)
    def _(operator):
        return bool({lineax.tridiagonal_tag, lineax.diagonal_tag} & operator.tags)

    def _tagged(tag):
        return lambda operator: tag in operator.tags

    lineax.has_unit_diagonal.register(_TaggedOperator, _tagged(lineax.unit_diagonal_tag))
    lineax.is_lower_triangular.register(_TaggedOperator, _tagged(lineax.lower_triangular_tag))
    lineax.is_upper_triangular.register(_TaggedOperator, _tagged(lineax.upper_triangular_tag))
    lineax.is_positive_semidefinite.register(
        _TaggedOperator, _tagged(lineax.positive_semidefinite_tag)
    )
    lineax.is_negative_semidefinite.register(
        _TaggedOperator, _tagged(lineax.negative_semidefinite_tag)
    )


def lineax_tags(*, symmetric: bool, positive_semidefinite: bool) -> frozenset:
    """lineax's tags for the two properties a caller can vouch for."""
    tags = {lineax.symmetric_tag} if symmetric else set()
    if positive_semidefinite:
        tags.add(lineax.positive_semidefinite_tag)
    return frozenset(tags)


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
    the conjugate one) on the transposed kernels, and `js.linalg.LineaxSparseLU` solves
    with it from the factors of `matrix`.

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
    tags = lineax_tags(symmetric=symmetric, positive_semidefinite=positive_semidefinite)
    return SparseMatrixOperator(matrix, tags)
