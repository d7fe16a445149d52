"""`jaxsparse.linalg`: linear algebra on sparse matrices, after `scipy.sparse.linalg`."""

from .._reductions import norm as norm
from ._factor import Factorization as Factorization
from ._factor_banded import BandedLU as BandedLU
from ._factor_banded import DenseLU as DenseLU
from ._factor_superlu import SuperLU as SuperLU
from ._spsolve import factorized as factorized
from ._spsolve import spsolve as spsolve
from ._spsolve_lineax import LineaxSparseLU as LineaxSparseLU
