"""`svds`: a few singular triplets of a sparse matrix, after `scipy.sparse.linalg.svds`.

The singular values of `A` are the square roots of the eigenvalues of its smaller Gram
matrix, `A^H A` for a tall `A` and `A A^H` for a wide one, as scipy's ARPACK solver finds
them. Here the Gram matrix is formed (a sparse product) and handed to `eigsh`, so the
triplets are jit-able, batch with `jax.vmap` over the values, and are differentiable
through `eigsh`'s derivatives: where singular values are distinct, as for eigenvectors.
The other side's vectors are `A v / sigma` (or `A^H u / sigma`), and `sigma` is the norm of
`A v`, accurate to rounding where `sqrt` of the eigenvalue would lose half the digits of a
small one.
"""

import jax.numpy as jnp

from .._base import SparseMatrix, is_concrete
from .._batching import refuse_batch
from .._csr import CSRMatrix
from ._eigsh import eigsh

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
    - `ncv`, `tol`, `maxiter`: `eigsh`'s, for the Gram matrix of size `min(m, n)` (`tol`
      bounds its residuals relative to the largest eigenvalue, `sigma_max^2`).
    - `which`: `"LM"`, the largest singular values, or `"SM"`, the smallest (their
      accuracy is that of the Gram matrix's eigenvalues: about `eps * sigma_max^2 /
      sigma`, as scipy's ARPACK solver).
    - `v0`: the start vector, of length `min(m, n)`.
    - `return_singular_vectors`: `True` for `(u, s, vh)`, `False` for `s` alone, `"u"` or
      `"vh"` for one side (the other `None`), as scipy.

    **Returns:** `u` `(m, k)` and `vh` `(k, n)` with orthonormal columns and rows, and the
    singular values `s` `(k,)` in ascending order (in `A`'s real dtype), so that
    `A @ vh[i].conj() == s[i] * u[:, i]`. The Gram matrix takes memory for its entries
    (`A^H A` of a matrix with a dense row is dense). Under `jit`, a CSR matrix's structure
    must be known (closed over, its values traced), as for `A @ B` without `nnz`.
    """
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"svds: `A` must be a jaxsparse matrix, got {type(A).__name__}.")
    refuse_batch("`svds`", A)
    m, n = A.shape
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k < min(m, n):
        raise ValueError(f"svds: `k` must be an int with 1 <= k < min(m, n), got {k!r}.")
    if which not in _WHICH:
        raise ValueError(f"svds: `which` must be 'LM' or 'SM', got {which!r}.")
    if return_singular_vectors not in (True, False, "u", "vh"):
        raise ValueError(
            "svds: `return_singular_vectors` must be True, False, 'u' or 'vh', got "
            f"{return_singular_vectors!r}."
        )
    if isinstance(A, CSRMatrix) and not is_concrete(A.indices, A.indptr):
        raise TypeError(
            "svds: the Gram matrix's structure follows from `A`'s, whose index arrays are "
            "traced (under `jax.jit`): close over `A`'s structure and pass its values "
            "(`jax.jit(lambda data: svds(A.with_data(data)))`), or call it outside `jit`."
        )
    tall = m >= n
    gram = A.H @ A if tall else A @ A.H
    settings = dict(ncv=ncv, tol=tol, maxiter=maxiter, v0=v0)
    _, vectors = eigsh(gram, k, which=_WHICH[which], **settings)
    image = A @ vectors if tall else A.H @ vectors
    values = jnp.linalg.norm(image, axis=0)
    others = image / jnp.where(values > 0, values, 1).astype(image.dtype)
    values = values.astype(jnp.finfo(A.dtype).dtype)
    u, v = (others, vectors) if tall else (vectors, others)
    if return_singular_vectors is False:
        return values
    vh = jnp.conj(v).T
    if return_singular_vectors == "u":
        return u, values, None
    if return_singular_vectors == "vh":
        return None, values, vh
    return u, values, vh
