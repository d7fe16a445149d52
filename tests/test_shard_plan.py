"""The communication plans of the sharded products, on the host (no devices needed).

The CSR plan is checked by simulating its exchange in numpy for every device count from 1
to 8: each device's buffer (its block, what each shift sends it, a zero row) times its
local matrix must give its rows of `A @ x`. The DIA plan is checked for what it sends.
The products themselves run on 8 simulated devices in `test_sharding.py`.
"""

import numpy as np
import pytest
import scipy.sparse

from jaxsparse._shard_plan import column_plan, halo_plan, shift_pairs


def simulated_product(plan, arrays, A, x) -> np.ndarray:
    """`A @ x` as the sharded CSR product computes it, device by device, in numpy."""
    devices, column_block = plan.devices, plan.column_block
    padded = np.zeros(devices * column_block)
    padded[: len(x)] = x
    blocks = padded.reshape(devices, column_block)
    out = []
    for p in range(devices):
        if plan.all_gather:
            parts = [padded]
        else:
            parts, start = [blocks[p]], 0
            for shift, length in plan.shifts:
                q = p + shift
                sent = (
                    arrays.send_positions[q, start : start + length] if 0 <= q < devices else None
                )
                parts.append(blocks[q][sent] if sent is not None else np.zeros(length))
                start += length
        buffer = np.concatenate([*parts, [0.0]])
        assert len(buffer) == plan.buffer
        source = arrays.entry_source[p]
        values = np.where(source >= 0, A.data[np.maximum(source, 0)], 0.0)
        local = scipy.sparse.csr_array(
            (values, arrays.local_indices[p], arrays.local_indptr[p]),
            shape=(plan.row_block, plan.buffer),
        )
        out.append(local @ buffer)
    return np.concatenate(out)[: A.shape[0]]


def banded(n: int, band: int, rng) -> scipy.sparse.csr_array:
    dense = rng.standard_normal((n, n)) * (rng.random((n, n)) < 0.3)
    rows, cols = np.indices((n, n))
    return scipy.sparse.csr_array(np.where(np.abs(rows - cols) <= band, dense, 0.0))


MATRICES = {
    "banded": lambda rng: banded(45, 6, rng),
    "random-rectangular": lambda rng: scipy.sparse.random_array(
        (31, 44), density=0.08, random_state=rng
    ),
    "empty-rows": lambda rng: scipy.sparse.csr_array(
        scipy.sparse.random_array((40, 40), density=0.02, random_state=rng)
    ),
}


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_simulated_csr_exchange_gives_the_product(name):
    rng = np.random.default_rng(5)
    A = scipy.sparse.csr_array(MATRICES[name](rng))
    x = rng.standard_normal(A.shape[1])
    for devices in range(1, 9):
        plan, arrays = column_plan(A.indices, A.indptr, A.shape, devices)
        np.testing.assert_allclose(simulated_product(plan, arrays, A, x), A @ x, atol=1e-12)


def test_csr_plan_of_a_banded_matrix_sends_less_than_an_all_gather():
    A = banded(400, 5, np.random.default_rng(0))
    plan, _ = column_plan(A.indices, A.indptr, A.shape, 8)
    assert not plan.all_gather
    assert {shift for shift, _ in plan.shifts} == {-1, 1}
    assert plan.exchanged_rows() <= 2 * 7 * 5


def test_dia_halo_of_a_five_point_stencil():
    N, devices = 10, 4
    plan = halo_plan((-N, -1, 0, 1, N), (N * N, N * N), devices)
    block = N * N // devices
    assert plan.pieces == ((-1, block - N, block), (0, 0, block), (1, 0, N))
    assert plan.exchanged_rows() == 2 * N * (devices - 1)
    assert plan.local_offsets == (0, N - 1, N, N + 1, 2 * N)


def test_dia_offsets_longer_than_a_block_send_only_the_rows_touched():
    plan = halo_plan((-16, -4, -1, 0, 1, 4, 16), (64, 64), 8)
    # Blocks of 8 rows: offsets +-16 take whole blocks two away, +-4 half a neighbour.
    received = {shift: hi - lo for shift, lo, hi in plan.pieces if shift}
    assert received == {-2: 8, -1: 4, 1: 4, 2: 8}
    assert plan.window == 8 + sum(received.values())
    assert not plan.all_gather


def test_dia_rectangular_with_different_blockings_gathers():
    plan = halo_plan((-2, 0, 3), (12, 30), 2)
    assert plan.all_gather and plan.exchanged_rows() == 2 * 1 * 15


def test_shift_pairs():
    assert shift_pairs(1, 3) == ((1, 0), (2, 1))
    assert shift_pairs(-2, 3) == ((0, 2),)
    assert shift_pairs(3, 3) == ()


def test_csr_plans_are_cached_by_structure_within_a_byte_bound(monkeypatch):
    """Sharding new values of one structure reuses its plan; the cache holds at most
    `PLAN_CACHE_BYTES` of plans (the newest always), not copies of every structure."""
    import jax

    import jaxsparse as js
    from jaxsparse import _shard

    planned = []
    monkeypatch.setattr(
        _shard, "column_plan", lambda *args: planned.append(1) or column_plan(*args)
    )
    monkeypatch.setattr(_shard, "_plans", type(_shard._plans)())
    monkeypatch.setattr(_shard, "PLAN_CACHE_BYTES", 1)
    mesh = jax.make_mesh((1,), ("x",))
    rng = np.random.default_rng(4)
    first = scipy.sparse.random_array((30, 30), density=0.2, format="csr", rng=rng)
    x = rng.standard_normal(30)
    for scale in (1.0, 2.0):
        sharded = js.shard(js.CSRMatrix.from_scipy(first * scale), mesh, "x")
        np.testing.assert_allclose(sharded @ x, (first * scale) @ x, rtol=1e-5)
    assert len(planned) == 1
    for density in (0.1, 0.3):
        other = scipy.sparse.random_array((30, 30), density=density, format="csr", rng=rng)
        js.shard(js.CSRMatrix.from_scipy(other), mesh, "x")
        assert len(_shard._plans) == 1
    assert len(planned) == 3
