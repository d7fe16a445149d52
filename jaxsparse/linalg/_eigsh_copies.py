"""Repeated eigenvalues: a Krylov space grown from one start vector holds one direction of
each eigenspace (`p(A) v0` projected on it), so single-vector Lanczos finds one copy of a
repeated eigenvalue, and the others only through rounding errors.

After the first run converges, the wanted pairs are locked and Lanczos runs again from a
random start on the deflated operator `P A P + c V V^H`, `P = I - V V^H`: its spectrum is
`A`'s less the locked pairs (whose directions it moves to a value never wanted), so the
copies missed are now its own eigenvalues. Each round finds the deflated
operator's most wanted pair; if it is more wanted than the worst locked one, it replaces
it and another round follows, else the search ends: a spectrum without missed copies
costs one round, each missed copy one more, and there are at most `k`.
"""

import jax
import jax.numpy as jnp
from jax import lax

from ._eigsh_lanczos import (
    LanczosResult,
    start_vector,
    thick_restart_lanczos,
    wanted_key,
    wanted_order,
)


def lanczos_with_copies(matvec, v0, *, k: int, ncv: int, which: str, tol: float, maxiter: int):
    """`thick_restart_lanczos` (same arguments), then deflated rounds until no missed copy
    of a wanted eigenvalue remains (see the module)."""
    n = v0.shape[0]
    settings = dict(which=which, tol=tol, maxiter=maxiter)
    first = thick_restart_lanczos(matvec, v0, k=k, ncv=ncv, **settings)
    # Each round converges only the deflated operator's most wanted pair: one run for one
    # pair is several times cheaper than for `k`, and most spectra need one round. The
    # deflated operator acts on `n - k` dimensions; its Krylov basis must fit there.
    deflated_k = 1
    deflated_ncv = min(ncv, n - k)
    if deflated_ncv < 2:
        return first
    key = jax.random.key(2)

    def search(state):
        result, _, rounds = state
        vectors = result.vectors
        # `V^H` and `V^T`, `(k, n)`: products with them read rows, as the Lanczos basis's do
        # (products with the `(n, k)` columns run several times slower on the CPU).
        rows, columns = jnp.conj(vectors).T, vectors.T

        def along(X):
            """`V V^H X` for `X` of shape `(n,)` or `(n, m)`."""
            C = rows @ X
            return C @ columns if X.ndim == 1 else (C.T @ columns).T

        def project(X):
            return X - along(X)

        # The locked directions get an eigenvalue less wanted than every locked one: left
        # at zero they could be the most wanted, and rounding errors would grow them.
        worst = result.values[-1]
        spread = jnp.max(jnp.abs(result.values))
        parked = {"LA": worst - spread, "SA": worst + spread, "LM": 0 * worst}[which]

        def deflated(X):
            locked = along(X)
            Y = matvec(X - locked)
            return Y - along(Y) + parked.astype(X.dtype) * locked

        # A pair less wanted than the worst locked one is discarded, so the round may end
        # as soon as that is certain.
        bar = wanted_key(worst, which) - tol * spread
        start = project(start_vector(None, n, v0.dtype, jax.random.fold_in(key, rounds)))
        found = thick_restart_lanczos(
            deflated,
            start / jnp.linalg.norm(start).astype(start.dtype),
            k=deflated_k,
            ncv=deflated_ncv,
            key=jax.random.fold_in(key, -rounds - 1),
            project=project,
            bar=bar,
            **settings,
        )
        scale = jnp.maximum(jnp.max(jnp.abs(result.values)), jnp.max(jnp.abs(found.values)))
        better = wanted_key(found.values[0], which) < (
            wanted_key(result.values[-1], which) - tol * scale
        )
        values = jnp.concatenate([result.values, found.values])
        best = wanted_order(values, which)[:k]
        merged = LanczosResult(
            values[best],
            jnp.concatenate([vectors, found.vectors], axis=1)[:, best],
            result.converged & found.converged,
        )
        return merged, better, rounds + 1

    def unfinished(state):
        _, better, rounds = state
        return better & (rounds < k)

    result, _, _ = lax.while_loop(
        unfinished, search, (first, jnp.ones((), bool), jnp.zeros((), jnp.int32))
    )
    return result
