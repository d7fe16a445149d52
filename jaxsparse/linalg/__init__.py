"""`jaxsparse.linalg`: linear algebra on sparse matrices, after `scipy.sparse.linalg`."""

from .._reductions import norm as norm
from ._eigsh import eigsh as eigsh
from ._expm_multiply import expm_multiply as expm_multiply
from ._precondition import JacobiPreconditioner as JacobiPreconditioner
from ._precondition import Preconditioner as Preconditioner
from ._precondition import jacobi as jacobi
from ._precondition_ilu0 import ILU0Preconditioner as ILU0Preconditioner
from ._precondition_ilu0 import spilu0 as spilu0
