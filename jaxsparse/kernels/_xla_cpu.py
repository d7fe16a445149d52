"""Workarounds for XLA CPU on the XLA path: column sums as adds, and a product's result
kept out of its consumer's YNNPACK fusion.

A reduction over the `k` columns (`jnp.sum(products, axis=1)`) becomes a YNNPACK fusion
on XLA CPU (JAX 0.10), far slower than adding the columns in XLA's own loop. Measured,
float32, ms (sum / unrolled adds): DIA data gradient, 5 diagonals, 10^6 rows, k = 8:
178 / 20; 1.5 x 10^5 rows, k = 32: 59 / 37, k = 64: 122 / 76. CSR sampled product with
the rows given, 5 x 10^6 entries, k = 2: 52 / 4.0, k = 8: 110 / 7.6; 7.5 x 10^5
entries, k = 16: 26 / 15, k = 64: 109 / 58. Past `UNROLLED_COLUMNS` columns the program
would grow with `k`, so the sum stays a reduction there.
"""

import jax.numpy as jnp
import numpy as np
from jax import lax

UNROLLED_COLUMNS = 64


def sum_over_columns(products):
    """`products.sum(axis=1)` for a `(p, k)` array, as unrolled adds when `k` is small."""
    k = products.shape[1]
    if k == 0 or k > UNROLLED_COLUMNS:
        return jnp.sum(products, axis=1)
    total = products[:, 0]
    for c in range(1, k):
        total = total + products[:, c]
    return total


def outside_ynn_fusions(y):
    """`y`, through a `select` XLA CPU's YNNPACK fusions cannot take: without it a
    consumer's reduction pulls the product into one YNNPACK fusion. Measured for 64 DIA
    5-point products at 2^16 rows, k = 1 (ms): the batched product 11.9, `jnp.sum(product
    * w)` 552 without the select, 44 with it. The mask is always true."""
    rows = lax.broadcasted_iota(np.int32, y.shape, 0)
    return jnp.where(rows < y.shape[0], y, 0)
