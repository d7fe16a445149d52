"""`eigsh`: a few eigenpairs of a sparse Hermitian matrix, after `scipy.sparse.linalg.eigsh`.

The iteration is thick-restart Lanczos (`_eigsh_lanczos.py`) on the library's products, so
it runs on every backend, under `jax.jit` and `jax.vmap`. Derivatives come from a custom
JVP (reverse mode is its transpose): an eigenvalue moves by `Re(v^H dA v)`, an eigenvector
by its components along the other computed eigenvectors plus a projected solve
`(A - lambda) x = -(I - V V^H) dA v` on the complement of the computed ones.
"""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._arrays import device_array
from .._base import SparseMatrix, is_concrete
from .._batching import refuse_batch
from ._eigsh_copies import lanczos_with_copies
from ._eigsh_lanczos import start_vector
from ._eigsh_shift_invert import inverse_operator
from ._working_dtype import working_dtype

_ZERO_V0 = "`v0` must not be zero."
_NONFINITE_V0 = "`v0` must be finite: it holds inf or nan."
_NONFINITE_SIGMA = "eigsh: `sigma` must be finite."
# Told apart from no convergence by the results, which an inf or nan reaches at once.
_NONFINITE_RESULT = {
    False: "the iteration met inf or nan: `A` holds a value that is not finite.",
    True: "the iteration met inf or nan: `A - sigma I` is singular (`sigma` is an "
    "eigenvalue of `A`: move it slightly, as scipy's 'Factor is exactly singular'), or `A` "
    "holds a value that is not finite.",
}

_WHICH = ("LA", "SA", "LM")


@dataclasses.dataclass(frozen=True)
class _Settings:
    k: int
    ncv: int
    which: str
    tol: float
    maxiter: int
    shift_invert: bool
    name: str  # the function errors name: `eigsh`, or one that runs it (`svds`)


def eigsh(
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
):
    """`k` eigenvalues and eigenvectors of the real symmetric or complex Hermitian `A`.

    Thick-restart Lanczos with full reorthogonalization, in JAX on `A`'s products: it runs
    under `jax.jit` (the loop over restarts is a `lax.while_loop`), batches with `jax.vmap`
    over `A`'s values, and is differentiable in `A`'s values (forward and reverse mode).

    **Arguments:**

    - `A`: a square `DIAMatrix` or `CSRMatrix`, Hermitian (only products with it are used;
      a non-Hermitian `A` gives meaningless results, as in scipy).
    - `k`: how many eigenpairs, `1 <= k < n` (static).
    - `M`: the generalized problem is not supported; anything but `None` raises
      `ValueError`.
    - `sigma`: a finite real number (a Python number or a real scalar array, traced under `jit`:
      a sweep over shifts compiles once) for shift-invert mode (scipy's `mode="normal"`):
      the iteration runs on `(A - sigma I)^{-1}`, applied by solves with one
      `js.linalg.factorized(A - sigma I)`, and `which` selects among its eigenvalues
      `1 / (lambda - sigma)`: `"LM"` gives the eigenvalues nearest `sigma`. The returned
      eigenvalues are `A`'s (Rayleigh quotients `v^H A v`).
    - `which`: `"LM"` (largest magnitude, scipy's default), `"LA"` (largest algebraic) or
      `"SA"` (smallest algebraic).
    - `v0`: the start vector `(n,)`; by default a fixed pseudo-random vector.
    - `ncv`: the Krylov basis size, `k < ncv <= n` (static; default `min(n, max(2k + 1,
      40))`: twice scipy's 20, which halves the cycles on clustered spectra). Memory is
      `(ncv + 1) * n` values.
    - `maxiter`: the most restart cycles (static; default `10 n`, as scipy). Each cycle
      costs `ncv - kept` products, `kept = k + (ncv - k) // 2`, and one product with `k`
      columns for the residuals.
    - `tol`: a pair is converged when `||A v - lambda v|| <= tol * |lambda_max|`, where
      `|lambda_max|` is the largest Ritz value's magnitude (an estimate of `||A||_2`);
      `0` (the default) means machine precision of the dtype times 100. Every copy of a
      repeated eigenvalue is found (deflated restarts; see the guide, `docs/eigen.md`).
    - `return_eigenvectors`: if `False`, return the eigenvalues only.

    **Returns:** `(w, v)`: the eigenvalues `(k,)` in ascending order (real, in `A`'s real
    dtype) and the unit eigenvectors `(n, k)` as columns; or `w` alone. If the iteration
    has not converged after `maxiter` cycles, it raises an error (`eqx.error_if`, also
    inside `jit`; scipy raises `ArpackNoConvergence`); an inf or nan met on the way (an
    `A - sigma I` that is exactly singular, a value of `A` that is not finite) ends the
    iteration at once with an error that says so.
    """
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"eigsh: `A` must be a jaxsparse matrix, got {type(A).__name__}.")
    if M is not None:
        raise ValueError("eigsh: the generalized problem (`M=`) is not supported.")
    refuse_batch("`eigsh`", A)
    values, vectors = hermitian_eigenpairs(A, k, which, v0, ncv, maxiter, tol, sigma)
    return (values, vectors) if return_eigenvectors else values


def hermitian_eigenpairs(A, k, which, v0, ncv, maxiter, tol, sigma=None, *, name="eigsh"):
    """`eigsh`'s `(values, vectors)` of a Hermitian operator `A`: a sparse matrix, or
    another that registers `tangent_product` (its arguments checked as `eigsh`'s, errors
    named after `name`)."""
    settings = _settings(A, k, which, ncv, maxiter, tol, sigma is not None, name)
    n = A.shape[0]
    dtype = working_dtype(A.dtype)
    if sigma is not None:
        sigma = _real_scalar(sigma, jnp.finfo(dtype).dtype)
        if is_concrete(sigma) and not jnp.isfinite(sigma):
            raise ValueError(f"eigsh: `sigma` must be finite, got {sigma}.")
        sigma = eqx.error_if(sigma, ~jnp.isfinite(sigma), _NONFINITE_SIGMA)
    if v0 is not None:
        v0 = device_array(v0)
        if v0.shape != (n,):
            raise ValueError(f"{name}: `v0` must have shape ({n},), got {v0.shape}.")
        if jnp.iscomplexobj(v0) and not jnp.issubdtype(A.dtype, jnp.complexfloating):
            raise TypeError(f"{name}: `v0` is complex ({v0.dtype}) but `A` is real ({A.dtype}).")
        zero, nonfinite = f"{name}: {_ZERO_V0}", f"{name}: {_NONFINITE_V0}"
        if is_concrete(v0) and not jnp.any(v0 != 0):
            raise ValueError(zero)
        if is_concrete(v0) and not jnp.all(jnp.isfinite(v0)):
            raise ValueError(nonfinite)
        v0 = eqx.error_if(v0, ~jnp.any(v0 != 0), zero)
        v0 = eqx.error_if(v0, ~jnp.all(jnp.isfinite(v0)), nonfinite).astype(dtype)
    return _compiled_eigsh(A.astype(dtype), v0, sigma, settings=settings)


def _real_scalar(sigma, dtype) -> jax.Array:
    """`sigma` as a scalar array of `dtype`: an array, not a Python float, so that
    `filter_jit` traces it and a new shift reuses the compiled iteration."""
    if isinstance(sigma, bool) or not isinstance(
        sigma, (int, float, jax.Array, np.ndarray, np.number)
    ):
        raise TypeError(f"eigsh: `sigma` must be a real number, got {sigma!r}.")
    sigma = jnp.asarray(sigma)
    if sigma.shape != () or not jnp.issubdtype(sigma.dtype, jnp.number):
        raise TypeError(
            f"eigsh: `sigma` must be a real scalar, got {sigma.dtype}{list(sigma.shape)}."
        )
    if jnp.issubdtype(sigma.dtype, jnp.complexfloating):
        raise TypeError(f"eigsh: `sigma` must be real, got {sigma.dtype}.")
    return sigma.astype(dtype)


def _integer(value):
    """A Python int for an integer of Python's or numpy's (not a bool); other values as
    they are, for the checks to name."""
    if isinstance(value, np.integer) or (isinstance(value, int) and not isinstance(value, bool)):
        return int(value)
    return value


def _settings(A, k, which, ncv, maxiter, tol, shift_invert: bool, name: str) -> _Settings:
    m, n = A.shape
    if m != n:
        raise ValueError(f"{name}: `A` must be square, got shape {A.shape}.")
    k, ncv, maxiter = (_integer(value) for value in (k, ncv, maxiter))
    if type(k) is not int or not 1 <= k < n:
        raise ValueError(f"{name}: `k` must be an int with 1 <= k < n = {n}, got {k!r}.")
    if which not in _WHICH:
        raise ValueError(f"{name}: `which` must be one of {_WHICH}, got {which!r}.")
    if ncv is None:
        ncv = min(n, max(2 * k + 1, 40))
    if type(ncv) is not int or not k < ncv <= n:
        raise ValueError(f"{name}: `ncv` must be an int with k < ncv <= n = {n}, got {ncv!r}.")
    if maxiter is None:
        maxiter = 10 * n
    if type(maxiter) is not int or maxiter < 1:
        raise ValueError(f"{name}: `maxiter` must be a positive int, got {maxiter!r}.")
    tol = static_tolerance(tol, A.dtype, name)
    return _Settings(k, ncv, which, tol, maxiter, shift_invert, name)


def static_tolerance(tol, dtype, name: str) -> float:
    """`tol` as a Python float: a concrete, finite real number >= 0 (a static setting of
    the compiled iteration), where `0` means 100 times the machine precision of `dtype`."""
    if isinstance(tol, jax.core.Tracer):
        raise TypeError(f"{name}: `tol` must be concrete (it is static), got a traced value.")
    try:
        if (
            isinstance(tol, (bool, np.bool_, str, bytes))
            or np.ndim(tol) != 0
            or (hasattr(tol, "dtype") and not np.issubdtype(tol.dtype, np.number))
            or np.iscomplexobj(tol)
        ):
            raise TypeError
        value = float(tol)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: `tol` must be a real number, got {tol!r}.") from None
    if not 0 <= value < np.inf:
        raise ValueError(f"{name}: `tol` must be finite and >= 0, got {tol!r}.")
    return value if value > 0 else 100 * float(jnp.finfo(working_dtype(dtype)).eps)


@eqx.filter_custom_jvp
def _eigsh(A, v0, sigma, *, settings: _Settings):
    n = A.shape[0]
    matvec = inverse_operator(A, sigma) if settings.shift_invert else (lambda v: A @ v)
    result = lanczos_with_copies(
        matvec,
        start_vector(v0, n, A.dtype),
        k=settings.k,
        ncv=settings.ncv,
        which=settings.which,
        tol=settings.tol,
        maxiter=settings.maxiter,
    )
    values = result.values
    if settings.shift_invert:
        values = jnp.real(jnp.sum(jnp.conj(result.vectors) * (A @ result.vectors), axis=0))
    order = jnp.argsort(values)
    nonfinite = f"{settings.name}: {_NONFINITE_RESULT[settings.shift_invert]}"
    values = eqx.error_if(values[order], ~jnp.all(jnp.isfinite(values)), nonfinite)
    values = eqx.error_if(
        values,
        ~result.converged,
        f"{settings.name}: no convergence within `maxiter` restart cycles; raise `maxiter` "
        "or `ncv`, or loosen `tol`.",
    )
    return values, result.vectors[:, order]


@_eigsh.def_jvp
def _eigsh_jvp(primals, tangents, *, settings: _Settings):
    A, v0, sigma = primals
    A_dot = tangents[0]
    values, vectors = _eigsh(A, v0, sigma, settings=settings)
    dA_vectors = tangent_product(A, A_dot, vectors)
    if dA_vectors is None:
        return (values, vectors), (jnp.zeros_like(values), jnp.zeros_like(vectors))
    coupling = jnp.conj(vectors).T @ dA_vectors  # [j, i] = v_j^H dA v_i
    values_dot = jnp.real(jnp.diagonal(coupling))
    gaps = (values[None, :] - values[:, None]).astype(vectors.dtype)  # [j, i]: lambda_i - lambda_j
    off_diagonal = ~jnp.eye(settings.k, dtype=bool)
    inside = jnp.where(off_diagonal, coupling / jnp.where(off_diagonal, gaps, 1), 0)
    rhs = dA_vectors - vectors @ coupling
    outside = _complement_solve(A, values, vectors, rhs, sigma, settings)
    return (values, vectors), (values_dot, vectors @ inside + outside)


_compiled_eigsh = eqx.filter_jit(_eigsh)


@functools.singledispatch
def tangent_product(A, A_dot, X):
    """`dA @ X` for the tangent `A_dot` of the operator `A` (a pytree of its structure),
    or None where it carries none. A sparse matrix's tangent lives in its values; another
    Hermitian operator that `_eigsh` takes (`A @ X`, `shape`, `dtype`) registers its own."""
    if A_dot is None or A_dot.data is None:
        return None
    return A.with_data(A_dot.data) @ X


def _complement_solve(A, values, vectors, rhs, sigma, settings: _Settings):
    """`X` with `(I - V V^H)(A - lambda_i)(I - V V^H) x_i = -rhs_i` and `x_i` orthogonal to
    `V`, for every column `i`.

    Each `lambda_i` lies outside the spectrum of `A` on the complement of `V` (that is the
    separation condition), so `s_i (A - lambda_i)` is positive definite there for the sign
    `s_i` below, and one conjugate-gradient solve serves all columns. With `sigma` the
    eigenvalues are inside the spectrum and the operator indefinite: GMRES solves it,
    preconditioned by `(A - sigma I)^{-1}` (which clusters the spectrum near 1).
    """
    if settings.shift_invert:
        return _complement_solve_shifted(A, values, vectors, rhs, sigma)
    sign = {"LA": -jnp.ones_like(values), "SA": jnp.ones_like(values)}.get(
        settings.which, -jnp.sign(values)
    ).astype(vectors.dtype)
    shift = values.astype(vectors.dtype)

    def project(X):
        return X - vectors @ (jnp.conj(vectors).T @ X)

    def operator(X):
        X = project(X)
        return project((A @ X - X * shift) * sign)

    # The operator is singular on span(V): both solves project first, so they apply its
    # pseudo-inverse, and a cotangent with a part along V does not make CG diverge. The
    # tolerance is relative to `b` before projection: a cotangent along V leaves rounding
    # noise, whose own relative tolerance CG would chase into that null space.
    def solve(_, b):
        return project(_cg(operator, project(b), scale=jnp.linalg.norm(b)))

    # The operator is Hermitian, so its plain transpose is its complex conjugate.
    def transpose_solve(_, b):
        return jnp.conj(solve(None, jnp.conj(b)))

    b = -project(rhs) * sign
    return lax.custom_linear_solve(operator, b, solve, transpose_solve)


def _complement_solve_shifted(A, values, vectors, rhs, sigma):
    shift = values.astype(vectors.dtype)
    inverse = inverse_operator(lax.stop_gradient(A), lax.stop_gradient(sigma))

    def project(X):
        return X - vectors @ (jnp.conj(vectors).T @ X)

    def columns(fn):
        return lambda X: jax.vmap(fn, in_axes=(1, 0), out_axes=1)(X, shift)

    def operator(X):
        X = project(X)
        return project(A @ X - X * shift)

    def solve(_, b):
        def one(b, theta):
            def column_operator(x):
                x = project(x[:, None])
                return project(A @ x - x * theta)[:, 0]

            def preconditioner(x):
                return project(inverse(project(x[:, None])))[:, 0]

            rtol = float(jnp.finfo(b.dtype).eps) ** 0.75
            x, _ = jax.scipy.sparse.linalg.gmres(
                column_operator, b, tol=rtol, M=preconditioner, restart=30, maxiter=20
            )
            return x

        return project(columns(one)(project(b)))

    def transpose_solve(_, b):
        return jnp.conj(solve(None, jnp.conj(b)))

    return lax.custom_linear_solve(operator, -project(rhs), solve, transpose_solve)


def _cg(operator, b, scale):
    """CG to a residual of `eps^0.75` times `scale`, the norm its right-hand side is measured
    against."""
    rtol = float(jnp.finfo(b.dtype).eps) ** 0.75
    atol = rtol * scale.astype(jnp.finfo(b.dtype).dtype)
    x, _ = jax.scipy.sparse.linalg.cg(operator, b, tol=0.0, atol=atol, maxiter=10 * b.shape[0])
    return x
