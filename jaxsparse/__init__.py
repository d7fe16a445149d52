"""jaxsparse: sparse matrices for JAX, in DIA and CSR formats, with Pallas kernels."""

from importlib.metadata import version as _version

from ._base import SparseMatrix as SparseMatrix
from ._csr import CSRMatrix as CSRMatrix
from ._dia import DIAMatrix as DIAMatrix
from ._matmul import matmul as matmul

__version__ = _version("jaxsparse")
from . import linalg as linalg
from ._arithmetic import add as add
from ._arithmetic import subtract as subtract
from ._interop import from_bcoo as from_bcoo
from ._interop import from_bcsr as from_bcsr
from ._lineax import lineax_operator as lineax_operator
