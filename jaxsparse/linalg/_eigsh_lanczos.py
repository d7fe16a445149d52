"""Thick-restart Lanczos with full reorthogonalization (Wu and Simon, 2000), in JAX.

The Krylov basis has a static size `ncv`, so one compiled program serves every restart: a
cycle extends the basis from `kept` to `ncv` vectors, takes the Ritz pairs of the projected
matrix, and keeps the `kept` best of them with the residual direction as the next cycle's
start. `lax.while_loop` runs the
cycles until the wanted Ritz pairs converge or `maxiter` cycles have run.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax


class LanczosResult(NamedTuple):
    """The wanted Ritz values `(k,)` (in `which`'s order), their vectors `(n, k)`, and whether
    they converged."""

    values: jax.Array
    vectors: jax.Array
    converged: jax.Array


class _Basis(NamedTuple):
    vectors: jax.Array  # (ncv + 1, n): rows are the orthonormal Krylov basis
    projected: jax.Array  # (ncv, ncv): V^H A V, Hermitian


def kept_vectors(k: int, ncv: int) -> int:
    """How many Ritz vectors a restart keeps: the `k` wanted and half of the rest, which
    speeds convergence, and at least one new vector per cycle."""
    return min(k + (ncv - k) // 2, ncv - 1)


def wanted_order(values: jax.Array, which: str) -> jax.Array:
    """Indices of `values` from most to least wanted."""
    return jnp.argsort(wanted_key(values, which), stable=True)


def _extend(matvec, basis: _Basis, start: int, stop: int, key, project) -> _Basis:
    """Lanczos steps `start .. stop - 1`: each adds one basis vector and one column of the
    projected matrix, orthogonalized twice against every earlier vector (classical
    Gram-Schmidt repeated: the twice-is-enough rule keeps the basis orthonormal). The
    coefficients of rows past the current step are masked out (the basis is never copied),
    so one compiled step serves every `j`."""

    def step(j, basis):
        vectors, projected = basis
        earlier = jnp.arange(vectors.shape[0]) <= j
        w = matvec(vectors[j])
        coefficients = jnp.zeros((vectors.shape[0],), w.dtype)
        for _ in range(2):
            h = _components(vectors, earlier, w)
            w = w - h @ vectors
            coefficients = coefficients + h
        residual_norm = jnp.linalg.norm(w)
        scale = jnp.max(jnp.abs(coefficients))
        tiny = jnp.finfo(residual_norm.dtype).eps * jnp.maximum(scale, 1)
        # An invariant subspace: continue from a random vector orthogonal to the basis; the
        # coupling to it is zero, so the projected matrix stays exact.
        broke_down = residual_norm <= tiny
        w = lax.cond(
            broke_down,
            lambda *args: _fresh_direction(*args, project),
            lambda *_: w,
            vectors,
            earlier,
            jax.random.fold_in(key, j),
        )
        vectors = vectors.at[j + 1].set(w / jnp.linalg.norm(w).astype(w.dtype))
        coefficients = coefficients[:-1].at[j].set(jnp.real(coefficients[j]).astype(w.dtype))
        projected = projected.at[:, j].set(coefficients).at[j, :].set(jnp.conj(coefficients))
        return _Basis(vectors, projected)

    return lax.fori_loop(start, stop, step, basis)


def _components(vectors: jax.Array, earlier: jax.Array, w: jax.Array) -> jax.Array:
    """`V^H w` over the rows marked `earlier` (zero elsewhere), conjugating `w` rather than
    the basis."""
    return jnp.where(earlier, jnp.conj(vectors @ jnp.conj(w)), 0)


def _fresh_direction(vectors: jax.Array, earlier: jax.Array, key, project) -> jax.Array:
    w = project(_random_vector(key, vectors.shape[1], vectors.dtype))
    for _ in range(2):
        w = w - _components(vectors, earlier, w) @ vectors
    return w


def _random_vector(key, n: int, dtype) -> jax.Array:
    if jnp.issubdtype(dtype, jnp.complexfloating):
        real = jnp.finfo(dtype).dtype
        parts = jax.random.normal(key, (2, n), real)
        return lax.complex(parts[0], parts[1]).astype(dtype)
    return jax.random.normal(key, (n,), dtype)


def start_vector(v0: jax.Array | None, n: int, dtype, key=None) -> jax.Array:
    """`v0` normalized, or a pseudo-random vector from `key` (by default a fixed one, so
    results are reproducible)."""
    key = jax.random.key(0) if key is None else key
    v = _random_vector(key, n, dtype) if v0 is None else v0
    return v / jnp.linalg.norm(v).astype(v.dtype)


def wanted_key(values: jax.Array, which: str) -> jax.Array:
    """A key that is smaller for more wanted values."""
    return {"LA": -values, "SA": values, "LM": -jnp.abs(values)}[which]


def thick_restart_lanczos(
    matvec: Callable[[jax.Array], jax.Array],
    v0: jax.Array,
    *,
    k: int,
    ncv: int,
    which: str,
    tol: float,
    maxiter: int,
    key=None,
    project=None,
) -> LanczosResult:
    """The `k` wanted eigenpairs of the Hermitian operator `matvec` (see the module).

    **Arguments:**

    - `matvec`: `v -> A v` for `v` of shape `(n,)` or `(n, k)`.
    - `v0`: the unit start vector, in the computation's dtype.
    - `k`, `ncv`: wanted pairs and the Krylov basis size, `k < ncv <= n` (static).
    - `which`: `"LA"`, `"SA"` or `"LM"`.
    - `tol`: a Ritz pair converges when its residual norm `|| A y - theta y ||` is at most
      `tol` times the largest Ritz value's magnitude (an estimate of `||A||_2`).
    - `maxiter`: the most restart cycles.
    - `key`: the random key for fresh directions after a breakdown.
    - `project`: applied to fresh directions, so that they stay in the operator's subspace
      (the complement of locked vectors); by default the identity.

    **Returns:** a `LanczosResult`.
    """
    n = v0.shape[0]
    dtype = v0.dtype
    kept = kept_vectors(k, ncv)
    key = jax.random.key(1) if key is None else key
    project = (lambda v: v) if project is None else project
    vectors = jnp.zeros((ncv + 1, n), dtype).at[0].set(v0)
    projected = jnp.zeros((ncv, ncv), dtype)
    basis = _extend(matvec, _Basis(vectors, projected), 0, kept, key, project)

    def cycle(state):
        basis, _, cycles = state
        basis = _extend(matvec, basis, kept, ncv, jax.random.fold_in(key, cycles + 1), project)
        values, rotation = jnp.linalg.eigh(basis.projected)
        order = wanted_order(values, which)[:kept]
        values, rotation = values[order], rotation[:, order]
        ritz = rotation.T.astype(dtype) @ basis.vectors[:ncv]
        # Residuals computed, not estimated from the projected matrix: the estimate can
        # declare convergence before a second copy of a repeated eigenvalue (which a single
        # start vector reaches only through rounding errors, as in ARPACK) has appeared.
        wanted = ritz[:k].T
        residuals = jnp.linalg.norm(matvec(wanted) - wanted * values[:k].astype(dtype), axis=0)
        converged = jnp.all(residuals <= tol * jnp.max(jnp.abs(values)))
        vectors = jnp.zeros_like(basis.vectors).at[:kept].set(ritz).at[kept].set(basis.vectors[ncv])
        projected = (
            jnp.zeros_like(basis.projected).at[:kept, :kept].set(jnp.diag(values).astype(dtype))
        )
        return _Basis(vectors, projected), converged, cycles + 1

    def unfinished(state):
        _, converged, cycles = state
        return ~converged & (cycles < maxiter)

    basis, converged, _ = lax.while_loop(
        unfinished, cycle, (basis, jnp.zeros((), bool), jnp.zeros((), jnp.int32))
    )
    values = jnp.real(jnp.diagonal(basis.projected)[:k])
    return LanczosResult(values, basis.vectors[:k].T, converged)
