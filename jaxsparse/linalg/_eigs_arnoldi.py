"""Restarted Arnoldi for a few eigenpairs of a general square operator, in JAX.

The basis has a static size `ncv`, so one compiled program serves every restart. A cycle
extends an orthonormal basis `V` from `kept` to `ncv` vectors with Arnoldi steps (two
classical Gram-Schmidt passes each), keeping the Krylov decomposition

    A V = V S + f b^H        (V: n x ncv, f: the next unit basis vector, b: a row)

with `S = V^H A V` dense. The restart is Stewart's Krylov-Schur restart, with the
invariant subspace of `S` for the `kept` most wanted Ritz values taken from their
eigenvectors (`jnp.linalg.eig`) orthonormalized by a QR factorization, instead of a
reordered Schur form (which JAX lacks): `V <- V Q`, `S <- Q^H S Q`, `b <- b Q`, and the
decomposition holds as before. The computation is complex throughout, so a real operator's
complex conjugate pairs need no special case.

A Ritz pair `(theta, V y)` has the residual norm `|b y|` exactly; it converges when that
is at most `tol` times the largest Ritz value's magnitude (an estimate of `||A||_2`).
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._eigsh_lanczos import kept_vectors, start_vector

WHICH = ("LM", "SM", "LR", "SR", "LI", "SI")


class ArnoldiResult(NamedTuple):
    """The `k` wanted Ritz values (in `which`'s order), their unit vectors `(n, k)`, and
    whether they converged."""

    values: jax.Array
    vectors: jax.Array
    converged: jax.Array


class _Decomposition(NamedTuple):
    vectors: jax.Array  # (ncv + 1, n): rows are the orthonormal basis, then f
    rayleigh: jax.Array  # (ncv + 1, ncv): S above its last row b


def wanted_key(values: jax.Array, which: str) -> jax.Array:
    """A real key that is smaller for more wanted (complex) values."""
    return {
        "LM": -jnp.abs(values),
        "SM": jnp.abs(values),
        "LR": -values.real,
        "SR": values.real,
        "LI": -values.imag,
        "SI": values.imag,
    }[which]


def _components(vectors: jax.Array, earlier: jax.Array, w: jax.Array) -> jax.Array:
    """`V^H w` over the rows marked `earlier` (zero elsewhere)."""
    return jnp.where(earlier, jnp.conj(vectors @ jnp.conj(w)), 0)


def _random_vector(key, n: int, dtype) -> jax.Array:
    parts = jax.random.normal(key, (2, n), jnp.finfo(dtype).dtype)
    return lax.complex(parts[0], parts[1]).astype(dtype)


def _extend(matvec, decomposition: _Decomposition, start: int, stop: int, key):
    """Arnoldi steps `start .. stop - 1`: each adds one basis vector and one column of the
    Rayleigh matrix. Rows past the current step are masked out of the projections, so one
    compiled step serves every `j`; the current vector travels in the loop's state (a
    slice of the basis per step would make XLA copy the whole basis)."""

    def step(j, state):
        (vectors, rayleigh), current = state
        earlier = jnp.arange(vectors.shape[0]) <= j
        w = matvec(current)
        # Two classical Gram-Schmidt passes: orthogonal to working precision ("twice is
        # enough", Giraud, Langou and Rozloznik).
        first = _components(vectors, earlier, w)
        w = w - first @ vectors
        second = _components(vectors, earlier, w)
        w = w - second @ vectors
        coefficients = first + second
        norm = jnp.linalg.norm(w)
        tiny = jnp.finfo(norm.dtype).eps * jnp.maximum(jnp.linalg.norm(coefficients), 1)
        # An invariant subspace: continue from a random vector orthogonal to the basis,
        # coupled by zero, so the Rayleigh matrix stays exact.
        broke_down = norm <= tiny

        def fresh(w):
            w = _random_vector(jax.random.fold_in(key, j), w.shape[0], w.dtype)
            for _ in range(2):
                w = w - _components(vectors, earlier, w) @ vectors
            return w

        w = lax.cond(broke_down, fresh, lambda w: w, w)
        following = w / jnp.linalg.norm(w).astype(w.dtype)
        coupling = jnp.where(broke_down, 0, norm).astype(w.dtype)
        rayleigh = rayleigh.at[:, j].set(coefficients.at[j + 1].set(coupling))
        return _Decomposition(vectors.at[j + 1].set(following), rayleigh), following

    state = (decomposition, decomposition.vectors[start])
    return lax.fori_loop(start, stop, step, state)[0]


def restarted_arnoldi(
    matvec: Callable[[jax.Array], jax.Array],
    v0: jax.Array,
    *,
    k: int,
    ncv: int,
    which: str,
    tol: float,
    maxiter: int,
) -> ArnoldiResult:
    """The `k` wanted eigenpairs of the operator `matvec` (see the module).

    **Arguments:**

    - `matvec`: `v -> A v` for a complex `v` of shape `(n,)`.
    - `v0`: the unit start vector, complex, in the computation's dtype.
    - `k`, `ncv`: wanted pairs and the basis size, `k + 1 < ncv <= n` (static).
    - `which`: one of `WHICH`.
    - `tol`: the convergence tolerance relative to the largest Ritz value's magnitude.
    - `maxiter`: the most restart cycles.

    **Returns:** an `ArnoldiResult`.
    """
    n = v0.shape[0]
    dtype = v0.dtype
    kept = kept_vectors(k, ncv)
    key = jax.random.key(1)
    vectors = jnp.zeros((ncv + 1, n), dtype).at[0].set(v0)
    decomposition = _extend(
        matvec, _Decomposition(vectors, jnp.zeros((ncv + 1, ncv), dtype)), 0, kept, key
    )
    # The wanted Ritz values and the triangle `R` with `Y[:, :k] = Q R`: the Ritz vectors
    # are `V Q R`, the restarted basis's first `k` vectors combined by `R`.
    ritz = (jnp.zeros((k,), dtype), jnp.eye(k, dtype=dtype))

    def cycle(state):
        decomposition, _, _, cycles = state
        decomposition = _extend(matvec, decomposition, kept, ncv, jax.random.fold_in(key, cycles))
        vectors, rayleigh = decomposition
        S, b = rayleigh[:ncv], rayleigh[ncv]
        values, Y = jnp.linalg.eig(S)
        values, Y = values.astype(dtype), Y.astype(dtype)
        scale = jnp.max(jnp.abs(values))
        order = jnp.argsort(wanted_key(values, which), stable=True)[:kept]
        values, Y = values[order], Y[:, order]
        residuals = jnp.abs(b @ Y[:, :k])
        converged = jnp.all(residuals <= tol * scale)
        Q, R = jnp.linalg.qr(Y)
        restarted = (
            jnp.zeros_like(vectors).at[:kept].set(Q.T @ vectors[:ncv]).at[kept].set(vectors[ncv])
        )
        rayleigh = (
            jnp.zeros_like(rayleigh)
            .at[:kept, :kept]
            .set(jnp.conj(Q).T @ S @ Q)
            .at[kept, :kept]
            .set(b @ Q)
        )
        return _Decomposition(restarted, rayleigh), (values[:k], R[:k, :k]), converged, cycles + 1

    def unfinished(state):
        # An inf or nan (a singular shift, a value of `A` or `v0`) never converges: stop.
        decomposition, _, converged, cycles = state
        return ~converged & (cycles < maxiter) & jnp.all(jnp.isfinite(decomposition.rayleigh))

    decomposition, (values, R), converged, _ = lax.while_loop(
        unfinished, cycle, (decomposition, ritz, jnp.zeros((), bool), jnp.zeros((), jnp.int32))
    )
    vectors = (R.T @ decomposition.vectors[:k]).T
    # A run ended by an inf or nan reports it in its values, whichever cycle met it.
    values = jnp.where(jnp.all(jnp.isfinite(decomposition.rayleigh)), values, jnp.nan)
    return ArnoldiResult(values, vectors, converged)


def arnoldi_start(v0: jax.Array | None, n: int, dtype) -> jax.Array:
    """The unit complex start vector: `v0`, or a fixed pseudo-random one."""
    if v0 is None:
        v0 = _random_vector(jax.random.key(0), n, dtype)
    return start_vector(v0.astype(dtype), n, dtype)
