"""`SparseOperators`: the scipy.sparse surface both formats share, as methods.

A mixin of one-line methods, each handing over to the module that does the work
(`_arithmetic`, `_reductions`, `_indexing`, `_spgemm`, `_interop`), so the containers stay
about their fields and those modules import no format.
"""

from . import (
    _arithmetic,
    _comparisons,
    _indexing,
    _interop,
    _reductions,
    _spgemm,  # noqa: F401 (registers sparse @ sparse with `matmul`)
)
from ._matmul import matmul


class SparseOperators:
    """Arithmetic, reductions, indexing and conversions for `DIAMatrix` and `CSRMatrix`."""

    def __add__(self, other):
        return _arithmetic.add(self, other)

    def __radd__(self, other):
        return _arithmetic.add(other, self)

    def __sub__(self, other):
        return _arithmetic.subtract(self, other)

    def __rsub__(self, other):
        return _arithmetic.subtract(other, self)

    def __mul__(self, other):
        return _arithmetic.multiply(self, other)

    def __rmul__(self, other):
        return _arithmetic.multiply(self, other)

    def multiply(self, other):
        """The elementwise product (`*`), as scipy's; see `jaxsparse._arithmetic`."""
        return _arithmetic.multiply(self, other)

    def compare(self, other, op: str):
        """`self op other` elementwise for `op` in `==`, `!=`, `<`, `<=`, `>`, `>=`; see
        `jaxsparse._comparisons` for when the result is sparse."""
        return _comparisons.compare(self, other, op)

    def __lt__(self, other):
        return _comparisons.compare(self, other, "<")

    def __le__(self, other):
        return _comparisons.compare(self, other, "<=")

    def __gt__(self, other):
        return _comparisons.compare(self, other, ">")

    def __ge__(self, other):
        return _comparisons.compare(self, other, ">=")

    def __truediv__(self, scalar):
        return _arithmetic.divide(self, scalar)

    def __neg__(self):
        return _arithmetic.negative(self)

    def __abs__(self):
        return _arithmetic.absolute(self)

    def __pow__(self, exponent):
        return _arithmetic.power(self, exponent)

    def conj(self):
        """The complex conjugate."""
        return _arithmetic.conj(self)

    conjugate = conj

    @property
    def H(self):
        """The conjugate transpose."""
        return _arithmetic.conj(self).transpose()

    @property
    def real(self):
        """The real part of the values (a real matrix of the same structure)."""
        return _arithmetic.real(self)

    @property
    def imag(self):
        """The imaginary part of the values (a real matrix of the same structure)."""
        return _arithmetic.imag(self)

    def dot(self, other):
        """`self @ other`, as scipy's `dot`."""
        return matmul(self, other)

    def diagonal(self, k: int = 0):
        """Diagonal `k` as a dense 1-D array (jit-able)."""
        return _reductions.diagonal(self, k)

    def trace(self, offset: int = 0):
        """The sum of diagonal `offset`."""
        return _reductions.trace(self, offset)

    def sum(self, axis=None):
        """The sum of the entries: a scalar, or a dense 1-D array along `axis` (0 or 1)."""
        return _reductions.total(self, axis)

    def max(self, axis=None):
        """The largest entry, implicit zeros included (scipy's semantics)."""
        return _reductions.extreme(self, axis, largest=True)

    def min(self, axis=None):
        """The smallest entry, implicit zeros included (scipy's semantics)."""
        return _reductions.extreme(self, axis, largest=False)

    def __getitem__(self, key):
        return _indexing.getitem(self, key)

    def asformat(self, format: str):
        """The matrix in `format` (`"dia"` or `"csr"`)."""
        return _interop.asformat(self, format)

    def to_bcoo(self):
        """The matrix as a `jax.experimental.sparse.BCOO` (jit-able)."""
        return _interop.to_bcoo(self)

    def to_bcsr(self):
        """The matrix as a `jax.experimental.sparse.BCSR` (jit-able)."""
        return _interop.to_bcsr(self)
