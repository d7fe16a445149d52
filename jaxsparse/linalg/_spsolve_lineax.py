"""`LineaxSparseLU`: a lineax solver that factors the matrix of a `js.lineax_operator` by
`js.linalg.factorized` (a banded LU for DIA, SuperLU for CSR).

lineax is optional (`pip install jaxsparse[lineax]`); without it the class exists and
constructing it says how to install lineax.
"""

from typing import Any

import equinox as eqx

from .._lineax import SparseMatrixOperator, lineax
from ._factor import Factorization
from ._spsolve import factorized

_Base = lineax.AbstractLinearSolver if lineax is not None else eqx.Module


class _FactorState(eqx.Module):
    """The factors of `A` and which of `A`, `A^T`, `conj(A)`, `A^H` the state solves."""

    factors: Factorization
    transposed: bool = eqx.field(static=True)
    conjugated: bool = eqx.field(static=True)


class LineaxSparseLU(_Base):
    """A sparse direct solver for `lineax.linear_solve(js.lineax_operator(A), b, solver)`.

    `init` factors the operator's matrix once (`js.linalg.factorized`); `compute` solves
    from the factors, and the transposed solve that lineax's derivatives need reuses them.
    `js.lineax_operator(A).T` is the operator of `A.T`, which it solves from `A`'s factors.
    Derivatives with respect to `A`'s values and `b` come from lineax (implicit
    differentiation through the operator's products) with this solver's solves. `A` must
    be square; a singular `A` gives `nan`.
    """

    def __check_init__(self):
        if lineax is None:
            raise ImportError(
                "`LineaxSparseLU` needs lineax: `pip install lineax` (or `jaxsparse[lineax]`)."
            )

    def init(self, operator, options: dict[str, Any]) -> _FactorState:
        if not isinstance(operator, SparseMatrixOperator):
            raise TypeError(
                "`LineaxSparseLU` solves operators made by `js.lineax_operator(A)` (or their "
                f"`.T`), got {type(operator).__name__}."
            )
        factors = factorized(operator.matrix)
        return _FactorState(factors, transposed=operator.transposed, conjugated=False)

    def compute(self, state: _FactorState, vector, options: dict[str, Any]):
        factors = state.factors
        if state.conjugated and not state.transposed:  # conj(A) x = b: A conj(x) = conj(b)
            x = factors.solve(vector.conj(), "N").conj()
        else:
            x = factors.solve(
                vector,
                {(False, False): "N", (True, False): "T"}.get(
                    (state.transposed, state.conjugated), "H"
                ),
            )
        return x, lineax.RESULTS.successful, {}

    def transpose(self, state: _FactorState, options: dict[str, Any]):
        return _FactorState(state.factors, not state.transposed, state.conjugated), options

    def conj(self, state: _FactorState, options: dict[str, Any]):
        return _FactorState(state.factors, state.transposed, not state.conjugated), options

    def assume_full_rank(self) -> bool:
        return True
