"""jaxsparse: sparse matrices for JAX, in DIA and CSR formats, with Pallas kernels."""

from importlib.metadata import version as _version

from . import linalg as linalg
from ._arithmetic import add as add
from ._arithmetic import subtract as subtract
from ._base import SparseMatrix as SparseMatrix
from ._construct import block_diag as block_diag
from ._construct import bmat as bmat
from ._construct import diags as diags
from ._construct import diags_array as diags_array
from ._construct import eye as eye
from ._construct import eye_array as eye_array
from ._construct import hstack as hstack
from ._construct import identity as identity
from ._construct import issparse as issparse
from ._construct import kron as kron
from ._construct import random as random
from ._construct import tril as tril
from ._construct import triu as triu
from ._construct import vstack as vstack
from ._csr import CSRMatrix as CSRMatrix
from ._dia import DIAMatrix as DIAMatrix
from ._interop import from_bcoo as from_bcoo
from ._interop import from_bcsr as from_bcsr
from ._interop import load_npz as load_npz
from ._interop import save_npz as save_npz
from ._lineax import lineax_operator as lineax_operator
from ._matmul import matmul as matmul
from ._shard import ShardedCSRMatrix as ShardedCSRMatrix
from ._shard import ShardedDIAMatrix as ShardedDIAMatrix
from ._shard import ShardedMatrix as ShardedMatrix
from ._shard import shard as shard
from ._shard_rows import shard_from_rows as shard_from_rows

__version__ = _version("jaxsparse")

__all__ = [
    "CSRMatrix",
    "DIAMatrix",
    "ShardedCSRMatrix",
    "ShardedDIAMatrix",
    "ShardedMatrix",
    "SparseMatrix",
    "add",
    "block_diag",
    "bmat",
    "diags",
    "diags_array",
    "eye",
    "eye_array",
    "from_bcoo",
    "from_bcsr",
    "hstack",
    "identity",
    "issparse",
    "kron",
    "linalg",
    "lineax_operator",
    "load_npz",
    "matmul",
    "random",
    "save_npz",
    "shard",
    "shard_from_rows",
    "subtract",
    "tril",
    "triu",
    "vstack",
]


def __dir__() -> list[str]:
    # The public names only: not the private modules, nor `kernels`, which importing
    # the package binds here too.
    return [*__all__, "__version__"]
