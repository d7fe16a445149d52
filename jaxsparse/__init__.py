"""jaxsparse: sparse matrices for JAX, in DIA and CSR formats, with Pallas kernels."""

from importlib.metadata import version as _version

from ._base import SparseMatrix as SparseMatrix
from ._construct import block_diag as block_diag
from ._construct import diags as diags
from ._construct import eye as eye
from ._construct import hstack as hstack
from ._construct import identity as identity
from ._construct import kron as kron
from ._construct import random as random
from ._construct import vstack as vstack
from ._csr import CSRMatrix as CSRMatrix
from ._dia import DIAMatrix as DIAMatrix
from ._matmul import matmul as matmul
from ._shard import ShardedCSRMatrix as ShardedCSRMatrix
from ._shard import ShardedDIAMatrix as ShardedDIAMatrix
from ._shard import ShardedMatrix as ShardedMatrix
from ._shard import shard as shard

__version__ = _version("jaxsparse")

__all__ = [
    "CSRMatrix",
    "DIAMatrix",
    "ShardedCSRMatrix",
    "ShardedDIAMatrix",
    "ShardedMatrix",
    "SparseMatrix",
    "block_diag",
    "diags",
    "eye",
    "hstack",
    "identity",
    "kron",
    "matmul",
    "random",
    "shard",
    "vstack",
]


def __dir__() -> list[str]:
    # The public names only: not the private modules, nor `kernels`, which importing
    # the package binds here too.
    return [*__all__, "__version__"]
