"""`SparseOperators`: the scipy.sparse surface both formats share, as methods.

A mixin of one-line methods, each handing over to the module that does the work
(`_arithmetic`, `_reductions`, `_indexing`, `_spgemm`, `_interop`), so the containers stay
about their fields and those modules import no format.
"""

import jax.numpy as jnp

from . import (
    _arithmetic,
    _comparisons,
    _elementwise,
    _indexing,
    _interop,
    _reductions,
    _spgemm,  # noqa: F401 (registers sparse @ sparse with `matmul`)
)
from ._matmul import matmul


@_elementwise.with_zero_preserving_ufuncs
class SparseOperators:
    """Arithmetic, reductions, indexing and conversions for `DIAMatrix` and `CSRMatrix`,
    and scipy's ufunc methods with `f(0) == 0` (`sin`, `sqrt`, ...: one per entry of
    `_elementwise.ZERO_PRESERVING_UFUNCS`)."""

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

    def power(self, exponent):
        """The elementwise power of the stored values (`**`), as scipy's `power`."""
        return _arithmetic.power(self, exponent)

    def copy(self):
        """The same matrix holding a copy of its values (JAX arrays never change in place,
        so this is scipy's `copy` for code that expects one)."""
        return self.with_data(jnp.array(self.data, copy=True))

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

    def sum(self, axis=None, dtype=None):
        """The sum of the entries: a scalar, or a dense 1-D array along `axis` (0 or 1); in
        `dtype` if given (the values cast to it before they are added up)."""
        return _reductions.total(self, axis, dtype)

    def mean(self, axis=None, dtype=None):
        """The mean of the entries, implicit zeros included: a scalar, or a dense 1-D array
        along `axis` (0 or 1); in `dtype` if given."""
        return _reductions.mean(self, axis, dtype)

    def count_nonzero(self, axis=None):
        """The number of nonzero entries (repeats summed first; stored zeros not counted):
        a 0-d integer array for `axis=None`, else one count per column (`axis=0`) or row
        (`axis=1`), as scipy's (jit-able)."""
        return _reductions.count_nonzero(self, axis)

    def nonzero(self):
        """`(row, col)`: the positions of the nonzero entries in row-major order, as numpy
        arrays on the host (their number depends on the values, so not under `jit`)."""
        return _reductions.nonzero(self)

    def max(self, axis=None, *, explicit: bool = False):
        """The largest entry, implicit zeros included (scipy's semantics): a scalar, or a
        dense 1-D array along `axis`; `explicit=True` looks at the stored entries only (0
        where there are none)."""
        return _reductions.extreme(self, axis, largest=True, explicit=explicit)

    def min(self, axis=None, *, explicit: bool = False):
        """The smallest entry; as `max`."""
        return _reductions.extreme(self, axis, largest=False, explicit=explicit)

    def nanmax(self, axis=None, *, explicit: bool = False):
        """`max`, NaNs skipped (NaN where a line holds only NaNs)."""
        return _elementwise.nanextreme(self, axis, largest=True, explicit=explicit)

    def nanmin(self, axis=None, *, explicit: bool = False):
        """`min`, NaNs skipped (NaN where a line holds only NaNs)."""
        return _elementwise.nanextreme(self, axis, largest=False, explicit=explicit)

    def argmax(self, axis=None, *, explicit: bool = False):
        """The first position of the largest entry, implicit zeros included (numpy's
        `argmax` of the dense matrix): a 0-d row-major index for `axis=None`, else dense
        1-D indices; `explicit=True` looks at the stored entries only (jit-able)."""
        return _elementwise.argextreme(self, axis, largest=True, explicit=explicit)

    def argmin(self, axis=None, *, explicit: bool = False):
        """The first position of the smallest entry; as `argmax`."""
        return _elementwise.argextreme(self, axis, largest=False, explicit=explicit)

    def maximum(self, other):
        """The elementwise maximum with a scalar, a sparse or a dense matrix, as scipy's;
        see `jaxsparse._elementwise` for when the result is sparse."""
        return _elementwise.maximum(self, other)

    def minimum(self, other):
        """The elementwise minimum; as `maximum`."""
        return _elementwise.minimum(self, other)

    def __getitem__(self, key):
        return _indexing.getitem(self, key)

    def tocoo(self):
        """`(data, row, col)`: every stored entry and its position, jit-able (DIA: every slot
        inside the matrix, zeros included; CSR: in storage order, repeats included)."""
        return _interop.tocoo(self)

    def asformat(self, format: str):
        """The matrix in `format` (`"dia"` or `"csr"`)."""
        return _interop.asformat(self, format)

    def to_bcoo(self):
        """The matrix as a `jax.experimental.sparse.BCOO` (jit-able)."""
        return _interop.to_bcoo(self)

    def to_bcsr(self):
        """The matrix as a `jax.experimental.sparse.BCSR` (jit-able)."""
        return _interop.to_bcsr(self)
