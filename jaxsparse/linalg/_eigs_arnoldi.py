"""Restarted Arnoldi for a few eigenpairs of a general square operator, in JAX.

The basis has a static size `ncv`, so one compiled program serves every restart. A cycle
extends an orthonormal basis `V` from `kept` to `ncv` vectors with Arnoldi steps
(classical Gram-Schmidt, with a second pass where the first cancels much of the vector),
keeping the Arnoldi decomposition

    A V = V H + beta f e_ncv^T        (V: n x ncv, f: the next unit basis vector)

with `H = V^H A V` upper Hessenberg. The restart is Sorensen's implicit restart with exact
shifts, as ARPACK's: one shifted QR step `H - mu I = Q R`, `H <- Q^H H Q`, `V <- V Q` per
unwanted Ritz value `mu`, after which the first `kept` columns are again an Arnoldi
decomposition, started from the old start vector filtered by the polynomial with the
unwanted values as roots. Every transformation is unitary to working precision, so
ill-conditioned eigenvectors of `H` cost the decomposition no accuracy. The computation is
complex throughout, so a real operator's complex conjugate pairs need no
special case.

A Ritz pair `(theta, V y)` converges when its computed residual `||A V y - theta V y||`
is at most `tol` times `||H||_2` (an estimate of `||A||_2`).
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._eigsh_lanczos import kept_vectors, start_vector

WHICH = ("LM", "SM", "LR", "SR", "LI", "SI")


class ArnoldiResult(NamedTuple):
    """The `k` wanted Ritz values (in `which`'s order), their unit vectors `(n, k)`,
    whether they converged, and `||H||_2` (the estimate of the operator's norm that the
    tolerance is relative to)."""

    values: jax.Array
    vectors: jax.Array
    converged: jax.Array
    scale: jax.Array


class _Decomposition(NamedTuple):
    vectors: jax.Array  # (ncv + 1, n): rows are the orthonormal basis, then f
    rayleigh: jax.Array  # (ncv + 1, ncv): H above its last row beta e_ncv^T


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


def wanted_order(values: jax.Array, which: str, pairing, pairs: int = 0) -> jax.Array:
    """Indices of `values` from most to least wanted. With `pairs` (+1 or -1: the Ritz
    values of a real operator, which come in complex conjugate pairs), for the keys a
    conjugation does not change (all but `"LI"` and `"SI"`), two non-real values that are
    each other's nearest conjugate, within `pairing`, share the more wanted one's key and
    come in the order of `pairs * imag` (largest first), so rounding cannot swap the two
    members of a pair."""
    key = wanted_key(values, which)
    if not pairs or which in ("LI", "SI"):
        return jnp.argsort(key, stable=True)
    non_real = jnp.abs(values.imag) > pairing
    distance = jnp.abs(values[:, None] - jnp.conj(values)[None, :])
    distance = jnp.where(non_real[:, None] & non_real[None, :], distance, jnp.inf)
    partner = jnp.argmin(distance, axis=1)
    paired = (partner[partner] == jnp.arange(values.shape[0])) & (
        jnp.min(distance, axis=1) <= pairing
    )
    key = jnp.where(paired, jnp.minimum(key, key[partner]), key)
    return jnp.lexsort((-pairs * values.imag, key))


def _components(vectors: jax.Array, earlier: jax.Array, w: jax.Array) -> jax.Array:
    """`V^H w` over the rows marked `earlier` (zero elsewhere)."""
    return jnp.where(earlier, jnp.conj(vectors @ jnp.conj(w)), 0)


def _random_vector(key, n: int, dtype) -> jax.Array:
    parts = jax.random.normal(key, (2, n), jnp.finfo(dtype).dtype)
    return lax.complex(parts[0], parts[1]).astype(dtype)


def _random_orthogonal(key, n: int, dtype, remove) -> jax.Array:
    """A random unit vector orthogonal to a basis, `remove(w)` taking `w`'s components along
    the basis away: twice, so orthogonal to working precision."""
    w = _random_vector(key, n, dtype)
    for _ in range(2):
        w = remove(w)
    return w / jnp.linalg.norm(w).astype(w.dtype)


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
                return _random_orthogonal(
                    jax.random.fold_in(key, j),
                    w.shape[0],
                    w.dtype,
                    lambda w: w - _components(vectors, earlier, w) @ vectors,
                )

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


def _implicit_restart(decomposition: _Decomposition, shifts: jax.Array, kept: int, key):
    """The decomposition compressed to its first `kept` columns by one shifted QR step per
    value in `shifts` (see the module)."""
    vectors, rayleigh = decomposition
    ncv = rayleigh.shape[1]
    eye = jnp.eye(ncv, dtype=rayleigh.dtype)

    def shifted_qr_step(i, state):
        H, Q = state
        step, _ = jnp.linalg.qr(H - shifts[i] * eye)
        # `Q^H H Q` stays Hessenberg; the rounding below the subdiagonal is dropped.
        return jnp.triu(jnp.conj(step).T @ H @ step, -1), Q @ step

    H, Q = lax.fori_loop(0, shifts.shape[0], shifted_qr_step, (rayleigh[:ncv], eye))
    kept_rows = Q[:, :kept].T @ vectors[:ncv]
    # The new residual `V Q e_(kept+1) h + beta f q`, orthogonal to the kept vectors in
    # exact arithmetic; one more projection keeps it so in rounding.
    beta, corner = rayleigh[ncv, ncv - 1], Q[ncv - 1, kept - 1]
    residual = H[kept, kept - 1] * (Q[:, kept] @ vectors[:ncv]) + beta * corner * vectors[ncv]
    residual = residual - (jnp.conj(kept_rows) @ residual) @ kept_rows
    norm = jnp.linalg.norm(residual)
    tiny = jnp.finfo(norm.dtype).eps * jnp.maximum(jnp.linalg.norm(H), 1)

    def fresh(_):
        # The kept vectors span an invariant subspace: go on from a random vector
        # orthogonal to them, coupled by zero.
        return _random_orthogonal(
            key,
            residual.shape[0],
            residual.dtype,
            lambda w: w - (jnp.conj(kept_rows) @ w) @ kept_rows,
        )

    following = lax.cond(
        norm <= tiny, fresh, lambda _: residual / norm.astype(residual.dtype), None
    )
    coupling = jnp.where(norm <= tiny, 0, norm).astype(rayleigh.dtype)
    restarted = jnp.zeros_like(vectors).at[:kept].set(kept_rows).at[kept].set(following)
    rayleigh = (
        jnp.zeros_like(rayleigh)
        .at[:kept, :kept]
        .set(H[:kept, :kept])
        .at[kept, kept - 1]
        .set(coupling)
    )
    return _Decomposition(restarted, rayleigh)


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
    pairs: int = 0,
) -> ArnoldiResult:
    """The `k` wanted eigenpairs of the operator `matvec` (see the module).

    **Arguments:**

    - `matvec`: `v -> A v` for `v` of shape `(n,)` in `v0`'s dtype, and `(n, k)` complex.
    - `v0`: the unit start vector, complex.
    - `k`, `ncv`: wanted pairs and the basis size, `k + 1 < ncv <= n` (static).
    - `which`: one of `WHICH`.
    - `tol`: the convergence tolerance relative to `||H||_2`.
    - `maxiter`: the most restart cycles.
    - `converging`: how many of the most wanted pairs must converge (default `k`); the
      others are returned as they are.
    - `pairs`: for a real operator, the order of a complex conjugate pair's members (see
      `wanted_order`); 0 for a complex one, where values have no partners.

    **Returns:** an `ArnoldiResult`, complex.
    """
    n = v0.shape[0]
    dtype = v0.dtype
    norm_dtype = jnp.finfo(dtype).dtype
    kept = kept_vectors(k, ncv)
    converging = k if converging is None else converging
    key = jax.random.key(1)
    vectors = jnp.zeros((ncv + 1, n), dtype).at[0].set(v0)
    decomposition = _extend(
        matvec, _Decomposition(vectors, jnp.zeros((ncv + 1, ncv), dtype)), 0, kept, key
    )
    ritz = (jnp.zeros((k,), dtype), jnp.zeros((n, k), dtype), jnp.zeros((), norm_dtype))

    def cycle(state):
        decomposition, _, _, cycles = state
        cycle_key = jax.random.fold_in(key, cycles)
        decomposition = _extend(matvec, decomposition, kept, ncv, cycle_key)
        H = decomposition.rayleigh[:ncv]
        values, Y = jnp.linalg.eig(H)
        values, Y = values.astype(dtype), Y.astype(dtype)
        # `||H||_2` estimates `||A||_2`, which a non-normal matrix's Ritz values can
        # underestimate by orders of magnitude.
        scale = jnp.linalg.norm(H, 2)
        order = wanted_order(values, which, float(tol) ** 0.5 * scale, pairs)
        values, Y = values[order], Y[:, order]
        # Residuals computed, not read off the decomposition (`beta |y_ncv|`), which
        # assumes the decomposition exact: rounding accumulates over many restarts.
        wanted = (Y[:, :k].T @ decomposition.vectors[:ncv]).T
        residuals = jnp.linalg.norm(
            matvec(wanted[:, :converging]) - wanted[:, :converging] * values[:converging], axis=0
        )
        converged = jnp.all(residuals <= tol * scale)
        decomposition = _implicit_restart(decomposition, values[kept:], kept, cycle_key)
        return decomposition, (values[:k], wanted, scale), converged, cycles + 1

    def unfinished(state):
        # An inf or nan (a singular shift, a value of `A` or `v0`) never converges: stop.
        decomposition, _, converged, cycles = state
        return ~converged & (cycles < maxiter) & jnp.all(jnp.isfinite(decomposition.rayleigh))

    start = (decomposition, ritz, jnp.zeros((), bool), jnp.int32(0))
    decomposition, (values, vectors, scale), converged, _ = lax.while_loop(unfinished, cycle, start)
    # A run ended by an inf or nan reports it in its values, whichever cycle met it.
    values = jnp.where(jnp.all(jnp.isfinite(decomposition.rayleigh)), values, jnp.nan)
    return ArnoldiResult(values, vectors, converged, scale)


def arnoldi_start(v0: jax.Array | None, n: int, dtype) -> jax.Array:
    """The unit start vector in `dtype`: `v0`, or a fixed pseudo-random one."""
    if v0 is None:
        v0 = _random_vector(jax.random.key(0), n, dtype)
    return start_vector(v0.astype(dtype), n, dtype)
