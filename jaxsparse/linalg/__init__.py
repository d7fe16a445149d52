"""`jaxsparse.linalg`: linear algebra on sparse matrices, after `scipy.sparse.linalg`."""

from .._reductions import norm as norm
