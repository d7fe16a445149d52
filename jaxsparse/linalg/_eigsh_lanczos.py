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
    projected matrix. The coefficients of rows past the current step are masked out (the
    basis is never copied), so one compiled step serves every `j`. The current and the
    previous vector travel in the loop's state: slicing them out of the basis each step
    would make XLA copy the whole basis.

    Orthogonalization: the three-term recurrence's two terms are subtracted first, then
    one classical Gram-Schmidt pass against every earlier vector, and a second pass only
    if that pass shrank the vector by more than `1 / sqrt(2)` (Daniel, Gragg, Kaufman and
    Stewart): the first pass then removes only rounding-level components, so the vector
    is orthogonal to working precision without the second read of the basis."""

    def step(j, state):
        (vectors, projected), before_current, current = state
        earlier = jnp.arange(vectors.shape[0]) <= j
        w = matvec(current)
        # The recurrence's terms: the coupling to the previous vector, stored by its step
        # (zero right after a restart, whose couplings the full pass removes), and the
        # Rayleigh quotient.
        previous = jnp.where(j > 0, projected[jnp.maximum(j - 1, 0), j], 0)
        w = w - previous * before_current
        diagonal = jnp.vdot(current, w)
        w = w - diagonal * current
        coefficients = jnp.zeros((vectors.shape[0],), w.dtype)
        coefficients = coefficients.at[jnp.maximum(j - 1, 0)].add(previous).at[j].add(diagonal)
        h = _components(vectors, earlier, w)
        before = jnp.linalg.norm(w)
        w = w - h @ vectors
        coefficients = coefficients + h
        scale = jnp.max(jnp.abs(coefficients))
        tiny = jnp.finfo(before.dtype).eps * jnp.maximum(scale, 1)

        def refine(w, coefficients):
            h = _components(vectors, earlier, w)
            w = w - h @ vectors
            residual_norm = jnp.linalg.norm(w)
            # An invariant subspace: continue from a random vector orthogonal to the
            # basis; the coupling to it is zero, so the projected matrix stays exact.
            broke_down = residual_norm <= tiny
            w = lax.cond(
                broke_down,
                lambda *args: _fresh_direction(*args, project),
                lambda *_: w,
                vectors,
                earlier,
                jax.random.fold_in(key, j),
            )
            return w, coefficients + h, jnp.where(broke_down, 0, residual_norm)

        # One branch for the rare cases (second pass, breakdown), so the common step
        # passes the basis through no conditional.
        residual_norm = jnp.linalg.norm(w)
        w, coefficients, coupling = lax.cond(
            (residual_norm < before / jnp.sqrt(2.0).astype(before.dtype)) | (residual_norm <= tiny),
            refine,
            lambda w, coefficients: (w, coefficients, residual_norm),
            w,
            coefficients,
        )
        following = w / jnp.linalg.norm(w).astype(w.dtype)
        vectors = vectors.at[j + 1].set(following)
        # The coupling to the next vector, which the next step subtracts first (and then
        # overwrites with the coefficient it computes); past the last column it drops out.
        coefficients = coefficients.at[j].set(jnp.real(coefficients[j]).astype(w.dtype))
        coefficients = coefficients.at[j + 1].set(coupling.astype(w.dtype))[:-1]
        projected = projected.at[:, j].set(coefficients).at[j, :].set(jnp.conj(coefficients))
        return _Basis(vectors, projected), current, following

    state = (basis, basis.vectors[max(start - 1, 0)], basis.vectors[start])
    return lax.fori_loop(start, stop, step, state)[0]


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
    bar=None,
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
    - `bar`: for `k = 1`, a `wanted_key` value: the run also ends, reporting convergence,
      once the Ritz value is less wanted than `bar` by more than its residual norm (an
      eigenvalue lies within that distance), so an eigenvalue that cannot be wanted is
      not converged further. By default none.

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
        # The scale is every Ritz value's (an estimate of ||A||), not the kept ones': with
        # "SA" or "LA" those can be far below it, and rounding would never pass the test.
        scale = jnp.max(jnp.abs(values))
        order = wanted_order(values, which)[:kept]
        values, rotation = values[order], rotation[:, order]
        ritz = rotation.T.astype(dtype) @ basis.vectors[:ncv]
        # Residuals computed, not estimated from the projected matrix: the estimate can
        # declare convergence before a second copy of a repeated eigenvalue (which a single
        # start vector reaches only through rounding errors, as in ARPACK) has appeared.
        wanted = ritz[:k].T
        residuals = jnp.linalg.norm(matvec(wanted) - wanted * values[:k].astype(dtype), axis=0)
        converged = jnp.all(residuals <= tol * scale)
        if bar is not None:
            converged = converged | (wanted_key(values[0], which) - residuals[0] > bar)
        vectors = jnp.zeros_like(basis.vectors).at[:kept].set(ritz).at[kept].set(basis.vectors[ncv])
        projected = (
            jnp.zeros_like(basis.projected).at[:kept, :kept].set(jnp.diag(values).astype(dtype))
        )
        return _Basis(vectors, projected), converged, cycles + 1

    def unfinished(state):
        # An inf or nan (a singular shift, a value of `A` or `v0`) never converges: stop.
        basis, converged, cycles = state
        return ~converged & (cycles < maxiter) & jnp.all(jnp.isfinite(basis.projected))

    basis, converged, _ = lax.while_loop(
        unfinished, cycle, (basis, jnp.zeros((), bool), jnp.zeros((), jnp.int32))
    )
    values = jnp.real(jnp.diagonal(basis.projected)[:k])
    return LanczosResult(values, basis.vectors[:k].T, converged)
