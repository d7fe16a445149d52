"""Restarted Arnoldi for a few eigenpairs of a general square operator, in JAX.

The basis has a static size `ncv`, so one compiled program serves every restart. A cycle
extends an orthonormal basis `V` from `kept` to `ncv` vectors with Arnoldi steps
(classical Gram-Schmidt, with a second pass where the first cancels much of the vector),
keeping the Krylov decomposition

    A V = V S + f b^H        (V: n x ncv, f: the next unit basis vector, b: a row)

with `S = V^H A V` dense. The restart is Stewart's Krylov-Schur restart, with the
invariant subspace of `S` for the most wanted Ritz values taken from their eigenvectors
(`jnp.linalg.eig`) orthonormalized by a QR factorization, instead of a reordered Schur
form (which JAX lacks): `V <- V Q`, `S <- Q^H S Q`, `b <- b Q`, and the decomposition
holds as before. The computation is complex throughout, so a real operator's complex
conjugate pairs need no special case.

A Ritz pair `(theta, V y)` converges when its computed residual `||A V y - theta V y||`
is at most `tol` times `||S||_2` (an estimate of `||A||_2`).
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
        before = jnp.linalg.norm(w)
        coefficients = _components(vectors, earlier, w)
        w = w - coefficients @ vectors
        norm = jnp.linalg.norm(w)
        tiny = jnp.finfo(norm.dtype).eps * jnp.maximum(jnp.linalg.norm(coefficients), 1)

        def refine(w, coefficients):
            # A second classical Gram-Schmidt pass, then orthogonal to working precision
            # ("twice is enough"); an invariant subspace continues from a random vector
            # orthogonal to the basis, coupled by zero, so the Rayleigh matrix stays exact.
            second = _components(vectors, earlier, w)
            w = w - second @ vectors
            norm = jnp.linalg.norm(w)
            broke_down = norm <= tiny

            def fresh(w):
                w = _random_vector(jax.random.fold_in(key, j), w.shape[0], w.dtype)
                for _ in range(2):
                    w = w - _components(vectors, earlier, w) @ vectors
                return w

            w = lax.cond(broke_down, fresh, lambda w: w, w)
            return w, coefficients + second, jnp.where(broke_down, 0, norm)

        # The second pass only where the first cancelled more than `1 / sqrt(2)` of the
        # vector (Daniel, Gragg, Kaufman and Stewart), in one branch, so the common step
        # passes the basis through no conditional.
        w, coefficients, coupling = lax.cond(
            (norm < before / 2**0.5) | (norm <= tiny),
            refine,
            lambda w, coefficients: (w, coefficients, norm),
            w,
            coefficients,
        )
        following = w / jnp.linalg.norm(w).astype(w.dtype)
        coupling = coupling.astype(w.dtype)
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
    converging: int | None = None,
) -> ArnoldiResult:
    """The `k` wanted eigenpairs of the operator `matvec` (see the module).

    **Arguments:**

    - `matvec`: `v -> A v` for `v` of shape `(n,)` in `v0`'s dtype, and `(n, k)` complex.
    - `v0`: the unit start vector, complex.
    - `k`, `ncv`: wanted pairs and the basis size, `k + 1 < ncv <= n` (static).
    - `which`: one of `WHICH`.
    - `tol`: the convergence tolerance relative to the largest Ritz value's magnitude.
    - `maxiter`: the most restart cycles.
    - `converging`: how many of the most wanted pairs must converge (default `k`); the
      others are returned as they are.

    **Returns:** an `ArnoldiResult`, complex.
    """
    n = v0.shape[0]
    dtype = v0.dtype
    kept = kept_vectors(k, ncv)
    converging = k if converging is None else converging
    key = jax.random.key(1)
    vectors = jnp.zeros((ncv + 1, n), dtype).at[0].set(v0)
    decomposition = _extend(
        matvec, _Decomposition(vectors, jnp.zeros((ncv + 1, ncv), dtype)), 0, kept, key
    )
    # The wanted Ritz values and their vectors' coefficients `C` in the restarted basis.
    ritz = (jnp.zeros((k,), dtype), jnp.eye(kept, k, dtype=dtype))

    def cycle(state):
        decomposition, _, _, cycles = state
        decomposition = _extend(matvec, decomposition, kept, ncv, jax.random.fold_in(key, cycles))
        vectors, rayleigh = decomposition
        S, b = rayleigh[:ncv], rayleigh[ncv]
        values, Y = jnp.linalg.eig(S)
        values, Y = values.astype(dtype), Y.astype(dtype)
        # `||S||_2` estimates `||A||_2`, which a non-normal matrix's Ritz values can
        # underestimate by orders of magnitude.
        scale = jnp.linalg.norm(S, 2)
        order = jnp.argsort(wanted_key(values, which), stable=True)
        values, Y = values[order], Y[:, order]
        # Residuals computed, not read off the decomposition: with a non-normal `S` the
        # eigenvectors that span the kept subspace are ill-conditioned, the restarted
        # decomposition drifts, and `|b y|` would report convergence too early.
        wanted = (Y[:, :converging].T @ vectors[:ncv]).T
        residuals = jnp.linalg.norm(matvec(wanted) - wanted * values[:converging], axis=0)
        converged = jnp.all(residuals <= tol * scale)
        # The kept subspace: the wanted Ritz vectors of `S` orthonormalized, `Y = Q R`.
        Q, R = jnp.linalg.qr(Y[:, :kept])
        # `V <- V Q`, `S <- Q^H S Q`, `b <- b Q`, and the next basis vector after them.
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
        return _Decomposition(restarted, rayleigh), (values[:k], R[:, :k]), converged, cycles + 1

    def unfinished(state):
        # An inf or nan (a singular shift, a value of `A` or `v0`) never converges: stop.
        decomposition, _, converged, cycles = state
        return ~converged & (cycles < maxiter) & jnp.all(jnp.isfinite(decomposition.rayleigh))

    start = (decomposition, ritz, jnp.zeros((), bool), jnp.int32(0))
    decomposition, (values, coefficients), converged, _ = lax.while_loop(unfinished, cycle, start)
    vectors = (coefficients.T @ decomposition.vectors[:kept]).T
    # A run ended by an inf or nan reports it in its values, whichever cycle met it.
    values = jnp.where(jnp.all(jnp.isfinite(decomposition.rayleigh)), values, jnp.nan)
    return ArnoldiResult(values, vectors, converged)


def arnoldi_start(v0: jax.Array | None, n: int, dtype) -> jax.Array:
    """The unit start vector in `dtype`: `v0`, or a fixed pseudo-random one."""
    if v0 is None:
        v0 = _random_vector(jax.random.key(0), n, dtype)
    return start_vector(v0.astype(dtype), n, dtype)
