"""A workaround for XLA CPU on the XLA path: column sums as adds.

A reduction over the `k` columns (`jnp.sum(products, axis=1)`) becomes a YNNPACK fusion
on XLA CPU (JAX 0.10), far slower than adding the columns in XLA's own loop, so the
columns are added one by one. Past `UNROLLED_COLUMNS` columns the program would grow with
`k`, so the sum stays a reduction there.
"""

import jax.numpy as jnp

UNROLLED_COLUMNS = 64


def sum_over_columns(products):
    """`products.sum(axis=1)` for a `(p, k)` array, as unrolled adds when `k` is small
    (and known: a symbolic `k` of `jax.export` stays a reduction)."""
    k = products.shape[1]
    if not isinstance(k, int) or k == 0 or k > UNROLLED_COLUMNS:
        return jnp.sum(products, axis=1)
    total = products[:, 0]
    for c in range(1, k):
        total = total + products[:, c]
    return total
