"""`svds`: a few singular triplets of a sparse matrix, after `scipy.sparse.linalg.svds`.

The singular values of `A` are the square roots of the eigenvalues of its smaller Gram
operator, `A^H A` for a tall `A` and `A A^H` for a wide one, as scipy's ARPACK solver finds
them. `eigsh`'s iteration runs on that operator (`_gram_operator`: products with `A` and
`A^H`, the Gram matrix never formed), so the triplets are jit-able with any structure,
batch with `jax.vmap` over the values, and are differentiable through `eigsh`'s
derivatives (where singular values are distinct, as for eigenvectors): the operator's
tangent is `dA^H A + A^H dA`. The other side's vectors and the singular values come from
a thin SVD of `A V` (or `A^H U`), as in scipy: accurate to rounding where `sqrt` of the
eigenvalues would lose half the digits of small ones, and orthonormal where they are 0.
"""

import jax.numpy as jnp
import numpy as np

from .._base import SparseMatrix
from .._batching import refuse_batch
from ._eigsh import hermitian_eigenpairs
from ._gram_operator import GramOperator

_WHICH = {"LM": "LA", "SM": "SA"}


def svds(
    A: SparseMatrix,
    k: int = 6,
    ncv: int | None = None,
    tol: float = 0,
    which: str = "LM",
    v0=None,
    maxiter: int | None = None,
    return_singular_vectors=True,
):
    """`k` singular values and vectors of `A`, as `scipy.sparse.linalg.svds`.

    **Arguments:**

    - `A`: a `DIAMatrix` or `CSRMatrix` of shape `(m, n)`.
    - `k`: how many triplets, `1 <= k < min(m, n)` (static).
    - `ncv`, `tol`, `maxiter`: `eigsh`'s, for the Gram operator of size `min(m, n)` (`tol`
      bounds its residuals relative to the largest eigenvalue, `sigma_max^2`).
    - `which`: `"LM"`, the largest singular values, or `"SM"`, the smallest (their
      accuracy is that of the Gram operator's eigenvalues: about `eps * sigma_max^2 /
      sigma`, as scipy's ARPACK solver).
    - `v0`: the start vector, of length `min(m, n)`.
    - `return_singular_vectors`: `True` for `(u, s, vh)`, `False` for `s` alone, `"u"` or
      `"vh"` for one side (the other `None`), as scipy.

    **Returns:** `u` `(m, k)` and `vh` `(k, n)` with orthonormal columns and rows, and the
    singular values `s` `(k,)` in ascending order, so that `A @ vh[i].conj() == s[i] *
    u[:, i]`; in `A`'s working dtype (float32 for half precisions and booleans).
    """
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"svds: `A` must be a jaxsparse matrix, got {type(A).__name__}.")
    refuse_batch("`svds`", A)
    m, n = A.shape
    k = int(k) if isinstance(k, np.integer) else k
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k < min(m, n):
        raise ValueError(f"svds: `k` must be an int with 1 <= k < min(m, n), got {k!r}.")
    if which not in _WHICH:
        raise ValueError(f"svds: `which` must be 'LM' or 'SM', got {which!r}.")
    if return_singular_vectors not in (True, False, "u", "vh"):
        raise ValueError(
            "svds: `return_singular_vectors` must be True, False, 'u' or 'vh', got "
            f"{return_singular_vectors!r}."
        )
    tall = m >= n
    gram = GramOperator(A, tall)
    _, vectors = hermitian_eigenpairs(gram, k, _WHICH[which], v0, ncv, maxiter, tol, name="svds")
    A = A.astype(vectors.dtype)
    # The other side by a thin SVD of `A V = Q S Z^H` (scipy's step too): `A (V Z) = Q S`,
    # so `Q` is orthonormal even where singular values are 0 and `A v / ||A v||` would
    # normalize rounding noise. Descending there: reversed to ascending.
    image = A @ vectors if tall else A.H @ vectors
    others, values, rotation = jnp.linalg.svd(image, full_matrices=False)
    vectors, others, values = (
        (vectors @ jnp.conj(rotation).T)[:, ::-1],
        others[:, ::-1],
        values[::-1].astype(jnp.finfo(A.dtype).dtype),
    )
    u, v = (others, vectors) if tall else (vectors, others)
    if return_singular_vectors is False:
        return values
    vh = jnp.conj(v).T
    if return_singular_vectors == "u":
        return u, values, None
    if return_singular_vectors == "vh":
        return None, values, vh
    return u, values, vh
