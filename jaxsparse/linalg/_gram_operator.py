"""`GramOperator`: `A^H A` or `A A^H` of a sparse matrix as an operator for `eigsh`'s
iteration (`svds`, `norm(A, 2)`), applied as two products with `A`, never formed; its
tangent in `A`'s values is `dA^H A + A^H dA` (`tangent_product`)."""

import equinox as eqx

from .._base import SparseMatrix
from ._eigsh import tangent_product


class GramOperator(eqx.Module):
    """`A^H A` (`tall`) or `A A^H` as an operator: `G @ X` is two products with `A`."""

    matrix: SparseMatrix
    tall: bool = eqx.field(static=True)

    @property
    def shape(self) -> tuple[int, int]:
        size = self.matrix.shape[1] if self.tall else self.matrix.shape[0]
        return size, size

    @property
    def dtype(self):
        return self.matrix.dtype

    def astype(self, dtype) -> "GramOperator":
        return GramOperator(self.matrix.astype(dtype), self.tall)

    def __matmul__(self, X):
        A = self.matrix
        return A.H @ (A @ X) if self.tall else A @ (A.H @ X)


@tangent_product.register
def _gram_tangent_product(G: GramOperator, G_dot, X):
    """`dG X = dA^H (A X) + A^H (dA X)` (tall), `dA (A^H X) + A (dA^H X)` (wide)."""
    if G_dot is None or G_dot.matrix is None or G_dot.matrix.data is None:
        return None
    A = G.matrix
    dA = A.with_data(G_dot.matrix.data)
    if G.tall:
        return dA.H @ (A @ X) + A.H @ (dA @ X)
    return dA @ (A.H @ X) + A @ (dA.H @ X)
