"""First calls in a fresh process: what a newcomer waits for before any work is done.

Each case runs in its own Python process (imports done before the clock starts) and prints
the first call's time, then a second call with new values of the same signature (which
must reuse the compiled function). Cases: eager `D @ D`, `CSR.T` and `js.kron` on 10^5 rows;
the L = 10 spin-chain Hamiltonian (Heisenberg, from `js.kron` of 2 x 2 Pauli matrices) built
under `jit`, with the Pauli matrices built inside the jitted function (traced) and outside it
(known values); the compilation of the gradient through 200 RK4 steps with it (built from
known and from traced Pauli matrices).

Run: `flock /tmp/jaxsparse-bench.lock python benchmarks/first_calls.py`
"""

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import cpu_name, uptime  # noqa: E402

RK4_GRADIENT = """
grad = jax.jit(jax.grad(functools.partial(rk4_loss, paulis={paulis})))
couplings = jnp.array([1.0, 1.0, 0.5], jnp.float32)
psi0 = jnp.zeros(2 ** 10, jnp.complex64).at[1].set(1.0)
compiled = []
first_call = lambda: compiled.append(grad.lower(couplings, psi0).compile())
second_call = lambda: compiled[0](couplings, psi0)
"""

CASES = {
    "eager D @ D (10^5 rows, 3 diagonals)": """
D = js.diags([jnp.ones(N - 1), -2 * jnp.ones(N), jnp.ones(N - 1)], [-1, 0, 1])
E = D * 2.0
jax.block_until_ready(D.data)
first_call = lambda: (D @ D).data
second_call = lambda: (E @ E).data
""",
    "eager CSR.T (10^5 rows, 3 entries a row)": """
A = js.diags([jnp.ones(N - 1), -2 * jnp.ones(N), jnp.ones(N - 1)], [-1, 0, 1]).tocsr()
B = A * 2.0
jax.block_until_ready(A.data)
first_call = lambda: A.T.data
second_call = lambda: B.T.data
""",
    "eager js.kron (10^5 rows: 316 x 316 tridiagonal and identity)": """
n = 316
T = js.diags([jnp.ones(n - 1), -2 * jnp.ones(n), jnp.ones(n - 1)], [-1, 0, 1])
I = js.eye(n)
U = T * 2.0
jax.block_until_ready(T.data)
first_call = lambda: js.kron(T, I).data
second_call = lambda: js.kron(U, I).data
""",
    "L = 10 spin chain Hamiltonian under jit": """
build = jax.jit(hamiltonian)
couplings = jnp.array([1.0, 1.0, 0.5], jnp.complex64)
first_call = lambda: build(couplings).data
second_call = lambda: build(2 * couplings).data
""",
    "gradient through 200 RK4 steps (L = 10 chain, Pauli matrices outside): compile": (
        RK4_GRADIENT.format(paulis="PAULIS_OUTSIDE")
    ),
    "gradient through 200 RK4 steps (L = 10 chain built inside, Pauli matrices too): compile": (
        RK4_GRADIENT.format(paulis="None")
    ),
    "L = 10 spin chain Hamiltonian under jit, Pauli matrices built outside": """
build = jax.jit(lambda c: hamiltonian(c, PAULIS_OUTSIDE))
couplings = jnp.array([1.0, 1.0, 0.5], jnp.complex64)
first_call = lambda: build(couplings).data
second_call = lambda: build(2 * couplings).data
""",
}

PRELUDE = (
    """
import functools, json, time
import jax, jax.numpy as jnp
import jaxsparse as js
N = 100_000
"""
    + """
def pauli_matrices():
    return [
        js.DIAMatrix(jnp.ones((2, 2), jnp.complex64), (-1, 1), (2, 2)),
        js.DIAMatrix(jnp.array([[1j, 1j], [-1j, -1j]], jnp.complex64), (-1, 1), (2, 2)),
        js.DIAMatrix(jnp.array([[1.0, -1.0]], jnp.complex64), (0,), (2, 2)),
        js.eye(2, dtype=jnp.complex64),
    ]

PAULIS_OUTSIDE = pauli_matrices()

def hamiltonian(couplings, paulis=None):
    sites = 10
    *paulis, eye = pauli_matrices() if paulis is None else paulis
    total = None
    for i in range(sites - 1):
        for a, pauli in enumerate(paulis):
            factors = [pauli if j in (i, i + 1) else eye for j in range(sites)]
            term = factors[0]
            for factor in factors[1:]:
                term = js.kron(term, factor)
            term = couplings[a] * term
            total = term if total is None else total + term
    return total

def rk4_loss(couplings, psi0, paulis):
    H = hamiltonian(couplings.astype(jnp.complex64), paulis)
    dt = 0.01
    def f(psi):
        return -1j * (H @ psi)
    def step(psi, _):
        k1 = f(psi); k2 = f(psi + dt / 2 * k1); k3 = f(psi + dt / 2 * k2); k4 = f(psi + dt * k3)
        return psi + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None
    psi, _ = jax.lax.scan(step, psi0, None, length=200)
    return jnp.abs(psi[0]) ** 2
"""
)

EPILOGUE = """
def seconds(call):
    start = time.perf_counter()
    jax.block_until_ready(call())
    return time.perf_counter() - start
first = seconds(first_call)
second = seconds(second_call)
print(json.dumps({"first_s": first, "second_s": second}))
"""


def run_case(body: str) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", PRELUDE + body + EPILOGUE],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    import jax

    print(f"uptime before: {uptime()}")
    print(f"machine: {cpu_name()}, {os.cpu_count()} cpus; jax {jax.__version__}")
    print("| case (fresh process) | first call (s) | second call, new values (s) |")
    print("|---|---|---|")
    for name, body in CASES.items():
        result = run_case(body)
        print(f"| {name} | {result['first_s']:.3f} | {result['second_s']:.4f} |", flush=True)
    print(f"uptime after: {uptime()}")


if __name__ == "__main__":
    main()
