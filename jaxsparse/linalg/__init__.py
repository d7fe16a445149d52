"""`jaxsparse.linalg`: linear algebra on sparse matrices, after `scipy.sparse.linalg`."""

from ._bands import is_sptriangular as is_sptriangular
from ._bands import spbandwidth as spbandwidth
from ._eigsh import eigsh as eigsh
from ._expm_multiply import expm_multiply as expm_multiply
from ._factor import Factorization as Factorization
from ._factor_banded import BandedLU as BandedLU
from ._factor_banded import DenseLU as DenseLU
from ._factor_superlu import SuperLU as SuperLU
from ._krylov import bicgstab as bicgstab
from ._krylov import cg as cg
from ._krylov import gmres as gmres
from ._least_squares import lsmr as lsmr
from ._least_squares import lsqr as lsqr
from ._matrix_power import matrix_power as matrix_power
from ._norms import norm as norm
from ._precondition import JacobiPreconditioner as JacobiPreconditioner
from ._precondition import Preconditioner as Preconditioner
from ._precondition import jacobi as jacobi
from ._precondition_ilu0 import ILU0Preconditioner as ILU0Preconditioner
from ._precondition_ilu0 import spilu0 as spilu0
from ._precondition_ilu0_native import NativeILU0Preconditioner as NativeILU0Preconditioner
from ._spsolve import factorized as factorized
from ._spsolve import spsolve as spsolve
from ._spsolve_lineax import LineaxSparseLU as LineaxSparseLU
from ._spsolve_triangular import spsolve_triangular as spsolve_triangular
from ._svds import svds as svds
