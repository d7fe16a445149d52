"""jaxsparse: sparse matrices for JAX, in DIA and CSR formats, with Pallas kernels."""

from importlib.metadata import version as _version

from ._base import SparseMatrix as SparseMatrix
from ._csr import CSRMatrix as CSRMatrix
from ._dia import DIAMatrix as DIAMatrix
from ._matmul import matmul as matmul

__version__ = _version("jaxsparse")
from ._shard import ShardedCSRMatrix as ShardedCSRMatrix
from ._shard import ShardedDIAMatrix as ShardedDIAMatrix
from ._shard import ShardedMatrix as ShardedMatrix
from ._shard import shard as shard
