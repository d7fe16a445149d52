"""`eigs`: a few eigenpairs of a general sparse square matrix, after
`scipy.sparse.linalg.eigs`.

The iteration is restarted Arnoldi (`_eigs_arnoldi.py`) on the library's products, in
complex arithmetic, under `jax.jit` and `jax.vmap`. Derivatives come
from a custom JVP (reverse mode is its transpose), in `_eigs_tangents.py`.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._arrays import device_array
from .._base import SparseMatrix, is_concrete
from .._batching import refuse_batch
from ._eigs_arnoldi import WHICH, arnoldi_start, restarted_arnoldi
from ._eigs_tangents import eigenpair_tangents, left_vectors
from ._eigsh import _integer, static_tolerance
from ._eigsh_shift_invert import shifted
from ._spsolve import factorized
from ._working_dtype import working_dtype

_NONFINITE_RESULT = {
    False: "the iteration met inf or nan: `A` holds a value that is not finite.",
    True: "the iteration met inf or nan: `A - sigma I` is singular (`sigma` is an "
    "eigenvalue of `A`: move it slightly), or `A` holds a value that is not finite.",
}
# The left iteration on `A^H` looks for the conjugates of the wanted values.
_CONJUGATE_WHICH = {"LM": "LM", "SM": "SM", "LR": "LR", "SR": "SR", "LI": "SI", "SI": "LI"}


@dataclasses.dataclass(frozen=True)
class _Settings:
    k: int
    ncv: int
    which: str
    tol: float
    maxiter: int
    shift_invert: bool


def eigs(
    A: SparseMatrix,
    k: int = 6,
    M=None,
    sigma=None,
    which: str = "LM",
    v0=None,
    ncv: int | None = None,
    maxiter: int | None = None,
    tol: float = 0,
    return_eigenvectors: bool = True,
    Minv=None,
    OPinv=None,
    OPpart=None,
):
    """`k` eigenvalues and eigenvectors of the square matrix `A`, which need not be
    Hermitian.

    Restarted Arnoldi (implicit restarts, as ARPACK) in JAX on `A`'s products, in complex
    arithmetic: it runs under `jax.jit` (the loop over restarts is a `lax.while_loop`), batches with
    `jax.vmap` over `A`'s values, and is differentiable in `A`'s values (forward and
    reverse mode). It runs where `jnp.linalg.eig` does (CPUs and GPUs), which it calls on
    the small projected matrix.

    **Arguments:**

    - `A`: a square `DIAMatrix` or `CSRMatrix` (real or complex).
    - `k`: how many eigenpairs, `1 <= k < n - 1` (static), as scipy.
    - `M`, `Minv`, `OPinv`, `OPpart`: the generalized problem and scipy's own operators
      are not supported; anything but `None` raises `ValueError`.
    - `sigma`: a finite real or complex number (a Python number or a scalar array, traced
      under `jit`) for shift-invert mode: the iteration runs on `(A - sigma I)^{-1}`,
      applied by solves with one `js.linalg.factorized(A - sigma I)` (complex if `sigma`
      is), and `which` selects among its eigenvalues `1 / (lambda - sigma)`: `"LM"` gives
      the eigenvalues nearest `sigma` (for a real `A` and a complex `sigma`, scipy's
      ARPACK also returns some nearest `conj(sigma)`; here they are the nearest
      `sigma`). The returned eigenvalues are `A`'s (Rayleigh
      quotients `v^H A v` of the unit eigenvectors).
    - `which`: `"LM"`/`"SM"` (largest/smallest magnitude), `"LR"`/`"SR"` (real part),
      `"LI"`/`"SI"` (imaginary part); scipy's default `"LM"`.
    - `v0`: the start vector `(n,)`, real or complex; by default a fixed pseudo-random
      one.
    - `ncv`: the basis size, `k + 1 < ncv <= n` (static; default `min(n, max(2k + 1,
      40))`). Memory is `(ncv + 1) * n` complex values.
    - `maxiter`: the most restart cycles (static; default `10 n`, as scipy).
    - `tol`: a pair is converged when `||A v - lambda v|| <= tol * ||V^H A V||_2` (the
      projected matrix's norm estimates `||A||_2`), a finite real number; `0` (the
      default) means 100 times the machine precision of the dtype.
    - `return_eigenvectors`: if `False`, return the eigenvalues only.

    **Returns:** `(w, v)`: the eigenvalues `(k,)`, complex (complex64 for a single-precision
    `A`, else complex128, as scipy), from most to least wanted by `which` (with `sigma`,
    applied to `1 / (lambda - sigma)`), and the unit
    eigenvectors `(n, k)` as columns, each scaled so that its largest entry is real and
    positive (a real eigenvalue of a real `A` then has a real eigenvector); or `w` alone.
    The two members of a complex conjugate pair of a real `A` with a real or no `sigma`
    (`"LM"`, `"SM"`, `"LR"`, `"SR"`) come positive imaginary part first, so where `k`
    splits a pair, the one returned has a positive imaginary part. If the iteration has
    not converged after `maxiter` cycles, it raises an error (`eqx.error_if`, also inside
    `jit`; scipy raises `ArpackNoConvergence`); an inf or nan met on the way ends the
    iteration at once with an error that says so.

    **Derivatives** (simple eigenvalues): an eigenvalue moves by `u^H dA v / (u^H v)`, with
    the left eigenvector `u` from a second iteration on `A^H` in the same mode; an
    eigenvector by the solution of a bordered system `[[A - lambda I, v], [u^H, 0]]` (one
    sparse factorization per eigenpair, `js.linalg.spsolve`), for the normalization above
    (unit norm, largest entry real). An eigenvalue that is not simple has `nan` tangents:
    no eigenvalue of `A^H` within `sqrt(tol)` (relative) of its conjugate (defective), or
    another computed eigenvalue within the iteration's resolution (`10 * tol * ||A|| /
    |u^H v|`, repeated). Second derivatives raise `NotImplementedError`.
    """
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"eigs: `A` must be a jaxsparse matrix, got {type(A).__name__}.")
    for name, value in (("M", M), ("Minv", Minv), ("OPinv", OPinv), ("OPpart", OPpart)):
        if value is not None:
            raise ValueError(f"eigs: `{name}` is not supported (the generalized problem).")
    refuse_batch("`eigs`", A)
    settings = _settings(A, k, which, ncv, maxiter, tol, sigma is not None)
    n = A.shape[0]
    real = working_dtype(A.dtype)
    dtype = np.result_type(real, np.complex64)
    if sigma is not None:
        sigma = _scalar(sigma, real, dtype)
    if v0 is not None:
        v0 = _start(v0, n, dtype)
    values, vectors = _compiled_eigs(A.astype(real), v0, sigma, settings=settings)
    return (values, vectors) if return_eigenvectors else values


def _scalar(sigma, real, dtype) -> jax.Array:
    """`sigma` as a scalar array (traced by `filter_jit`, so a new shift reuses the
    compiled iteration), finite or an error: of the real dtype `real` for a real `sigma`,
    which keeps a real matrix's factors real, else of the complex `dtype`."""
    if isinstance(sigma, bool) or not isinstance(
        sigma, (int, float, complex, jax.Array, np.ndarray, np.number)
    ):
        raise TypeError(f"eigs: `sigma` must be a number, got {sigma!r}.")
    sigma = jnp.asarray(sigma)
    if sigma.shape != () or not jnp.issubdtype(sigma.dtype, jnp.number):
        raise TypeError(f"eigs: `sigma` must be a scalar, got {sigma.dtype}{list(sigma.shape)}.")
    if is_concrete(sigma) and not jnp.isfinite(sigma):
        raise ValueError(f"eigs: `sigma` must be finite, got {sigma}.")
    sigma = eqx.error_if(sigma, ~jnp.isfinite(sigma), "eigs: `sigma` must be finite.")
    return sigma.astype(dtype if jnp.issubdtype(sigma.dtype, jnp.complexfloating) else real)


def _start(v0, n: int, dtype) -> jax.Array:
    """`v0` as a complex `(n,)` array of `dtype`, nonzero and finite or an error."""
    v0 = device_array(v0)
    if v0.shape != (n,):
        raise ValueError(f"eigs: `v0` must have shape ({n},), got {v0.shape}.")
    if not jnp.issubdtype(v0.dtype, jnp.number) or jnp.issubdtype(v0.dtype, jnp.bool_):
        raise TypeError(f"eigs: `v0` must hold numbers, got dtype {v0.dtype}.")
    zero, nonfinite = "eigs: `v0` must not be zero.", "eigs: `v0` must be finite."
    if is_concrete(v0) and not jnp.any(v0 != 0):
        raise ValueError(zero)
    if is_concrete(v0) and not jnp.all(jnp.isfinite(v0)):
        raise ValueError(nonfinite)
    v0 = eqx.error_if(v0, ~jnp.any(v0 != 0), zero)
    v0 = eqx.error_if(v0, ~jnp.all(jnp.isfinite(v0)), nonfinite)
    return v0.astype(dtype)


def _settings(A, k, which, ncv, maxiter, tol, shift_invert: bool) -> _Settings:
    m, n = A.shape
    if m != n:
        raise ValueError(f"eigs: `A` must be square, got shape {A.shape}.")
    k, ncv, maxiter = (_integer(value) for value in (k, ncv, maxiter))
    if type(k) is not int or not 1 <= k < n - 1:
        raise ValueError(
            f"eigs: `k` must be an int with 1 <= k < n - 1 = {n - 1}, got {k!r} (for "
            "k >= n - 1, use a dense eig of `A.toarray()`)."
        )
    if which not in WHICH:
        raise ValueError(f"eigs: `which` must be one of {WHICH}, got {which!r}.")
    if ncv is None:
        ncv = min(n, max(2 * k + 1, 40))
    if type(ncv) is not int or not k + 1 < ncv <= n:
        raise ValueError(f"eigs: `ncv` must be an int with k + 1 < ncv <= n = {n}, got {ncv!r}.")
    if maxiter is None:
        maxiter = 10 * n
    if type(maxiter) is not int or maxiter < 1:
        raise ValueError(f"eigs: `maxiter` must be a positive int, got {maxiter!r}.")
    return _Settings(k, ncv, which, static_tolerance(tol, A.dtype, "eigs"), maxiter, shift_invert)


def _operator(A, sigma, adjoint: bool):
    """`v -> op(A) v` for complex `v` of shape `(n,)`: `A` or `A^H`, or with `sigma` the
    inverse of `A - sigma I` or of its adjoint, by solves with one factorization (real
    where `A` and `sigma` are)."""
    if sigma is None:
        return lambda v: product(A, v, adjoint)
    if jnp.issubdtype(sigma.dtype, jnp.complexfloating):
        A = A.astype(sigma.dtype)
    solve = factorized(shifted(A, sigma)).solve
    trans = "H" if adjoint else "N"
    return _on_parts(lambda X: solve(X, trans), jnp.issubdtype(A.dtype, jnp.complexfloating))


def product(A, X, adjoint: bool = False) -> jax.Array:
    """`A X` or `A^H X` for complex `X` of shape `(n,)` or `(n, k)`; `A^H X` as `conj(conj(X)^T
    A)^T`, a transposed product with no transposed copy of the structure."""

    def apply(X):
        return jnp.conj((jnp.conj(X).T @ A).T) if adjoint else A @ X

    return _on_parts(apply, jnp.issubdtype(A.dtype, jnp.complexfloating))(X)


def _on_parts(apply, complex_operator: bool):
    """`apply` for complex operands; a real operator takes their real and imaginary parts
    as columns of one real operand (a real matrix and a complex operand do not mix)."""
    if complex_operator:
        return apply

    def on_parts(X):
        columns = X[:, None] if X.ndim == 1 else X
        k = columns.shape[1]
        Y = apply(jnp.concatenate([columns.real, columns.imag], axis=1))
        Y = jax.lax.complex(Y[:, :k], Y[:, k:])
        return Y[:, 0] if X.ndim == 1 else Y

    return on_parts


def _eigenpairs(A, sigma, settings: _Settings, *, v0=None, adjoint=False, converging=None):
    """The wanted eigenvalues of `A` (of `A^H` with `adjoint`, whose wanted ones are the
    conjugates of `A`'s), their unit eigenvectors, whether they converged, and the
    iteration's estimate of its operator's norm."""
    n = A.shape[0]
    dtype = np.result_type(A.dtype, np.complex64)
    real = not jnp.issubdtype(A.dtype, jnp.complexfloating) and (
        sigma is None or not jnp.issubdtype(sigma.dtype, jnp.complexfloating)
    )
    # A real operator's conjugate pairs come positive imaginary part first in `A`'s
    # eigenvalues, which shift-invert's `1 / (lambda - sigma)` turns negative.
    pairs = 0 if not real else -1 if settings.shift_invert else 1
    result = restarted_arnoldi(
        _operator(A, sigma, adjoint),
        arnoldi_start(v0, n, dtype),
        k=settings.k,
        ncv=settings.ncv,
        which=_CONJUGATE_WHICH[settings.which] if adjoint else settings.which,
        tol=settings.tol,
        maxiter=settings.maxiter,
        converging=converging,
        pairs=pairs,
    )
    values, vectors = result.values, result.vectors
    if settings.shift_invert:
        # The iteration's values are `1 / (lambda - sigma)`; `A`'s own are the Rayleigh
        # quotients of the unit eigenvectors, exact for exact eigenvectors.
        values = jnp.sum(jnp.conj(vectors) * product(A, vectors, adjoint), axis=0)
    return values, vectors, result.converged, result.scale


def _phase_normalized(vectors: jax.Array) -> jax.Array:
    """Each column scaled by a unit complex number so that its largest entry (the first
    of equal ones) is real and positive."""
    largest = jnp.take_along_axis(vectors, jnp.argmax(jnp.abs(vectors), axis=0)[None], axis=0)
    return vectors * (jnp.conj(largest) / jnp.abs(largest).astype(vectors.dtype))


@eqx.filter_custom_jvp
def _eigs(A, v0, sigma, *, settings: _Settings):
    values, vectors, converged, _ = _eigenpairs(A, sigma, settings, v0=v0)
    finite = jnp.all(jnp.isfinite(values))
    values = eqx.error_if(values, ~finite, f"eigs: {_NONFINITE_RESULT[settings.shift_invert]}")
    values = eqx.error_if(
        values,
        ~converged & finite,
        "eigs: no convergence within `maxiter` restart cycles; raise `maxiter` or `ncv`, or "
        "loosen `tol`.",
    )
    return values, _phase_normalized(vectors)


@jax.custom_jvp
def _first_order_only(x):
    """`x`, whose derivative raises: the JVP rule below is not itself differentiable (it
    calls `jnp.linalg.eig`, whose eigenvectors JAX does not differentiate)."""
    return x


@_first_order_only.defjvp
def _first_order_only_jvp(primals, tangents):
    raise NotImplementedError(
        "eigs: only first derivatives are implemented (forward or reverse mode); a second "
        "derivative, such as `jax.hessian`, is not."
    )


@_eigs.def_jvp
def _eigs_jvp(primals, tangents, *, settings: _Settings):
    primals = jax.tree.map(
        lambda x: _first_order_only(x) if eqx.is_inexact_array(x) else x, primals
    )
    A, v0, sigma = primals
    values, vectors = _eigs(A, v0, sigma, settings=settings)
    A_dot = tangents[0]
    if A_dot is None or A_dot.data is None:
        return (values, vectors), (jnp.zeros_like(values), jnp.zeros_like(vectors))
    dA_vectors = product(A.with_data(A_dot.data), vectors)
    left, matched = left_vectors(_eigenpairs, A, sigma, values, vectors, settings)
    return (values, vectors), eigenpair_tangents(A, values, vectors, left, matched, dA_vectors)


_compiled_eigs = eqx.filter_jit(_eigs)
