"""`jaxsparse.linalg`: linear algebra on sparse matrices, after `scipy.sparse.linalg`."""

from .._reductions import norm as norm
from ._eigsh import eigsh as eigsh
from ._expm_multiply import expm_multiply as expm_multiply
