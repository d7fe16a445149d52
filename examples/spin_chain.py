"""Ground state and time evolution of a transverse-field Ising chain, and their gradients.

`H(h) = -sum_i Z_i Z_{i+1} - h sum_i X_i` on `L` spins (open chain) is built with `js.kron`
from 2x2 Pauli matrices as a complex `DIAMatrix` of size `2^L` (each term is a diagonal or
a pair of diagonals). Then:

- the ground-state energy `E0(h)` by `js.linalg.eigsh(H, 1, which="SA")`, checked against
  `scipy.sparse.linalg.eigsh`;
- the state `psi(t) = exp(-i t H) psi0` from all spins up, by `js.linalg.expm_multiply`,
  checked against `scipy.sparse.linalg.expm_multiply`, and the magnetization `<Z_0>(t)`;
- `dE0/dh` (by `jax.grad` through `eigsh`; it equals `-<sum X_i>` in the ground state) and
  `d<Z_0>(t)/dh` (through `expm_multiply`), both against central finite differences.

Run it with `python examples/spin_chain.py`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse.linalg

import jaxsparse as js

jax.config.update("jax_enable_x64", True)

DTYPE = jnp.complex128
PAULI_X = js.DIAMatrix(jnp.array([[1, 0], [0, 1]], DTYPE), (-1, 1), (2, 2))
PAULI_Z = js.DIAMatrix(jnp.array([[1, -1]], DTYPE), (0,), (2, 2))


def site_operator(single, site: int, spins: int):
    """`I x ... x single x ... x I` with `single` acting on `site`."""
    left = js.identity(2**site, dtype=DTYPE)
    right = js.identity(2 ** (spins - site - 1), dtype=DTYPE)
    return js.kron(js.kron(left, single), right)


def hamiltonian_terms(spins: int):
    """The coupling `-sum Z_i Z_{i+1}` and the field term `-sum X_i`, as DIA matrices."""
    coupling = functools.reduce(
        js.add,
        [
            site_operator(PAULI_Z, i, spins) @ site_operator(PAULI_Z, i + 1, spins)
            for i in range(spins - 1)
        ],
    )
    field = functools.reduce(js.add, [site_operator(PAULI_X, i, spins) for i in range(spins)])
    return -1 * coupling, -1 * field


def main(spins: int = 8, h: float = 0.7, t: float = 1.5) -> dict:
    coupling, field = hamiltonian_terms(spins)
    n = 2**spins
    norm_bound = 2 * t * (spins - 1 + 2 * spins)  # >= 2 t ||H||_1 for h <= 2

    def hamiltonian(h):
        return coupling + h * field

    def ground_energy(h):
        return js.linalg.eigsh(hamiltonian(h), 1, which="SA")[0][0]

    up = jnp.zeros(n, DTYPE).at[0].set(1)
    z0 = site_operator(PAULI_Z, 0, spins)

    def magnetization(h):
        psi = js.linalg.expm_multiply((-1j) * hamiltonian(h), up, t, norm_bound=norm_bound)
        return jnp.real(jnp.vdot(psi, z0 @ psi))

    H = hamiltonian(h)
    twin = H.to_scipy().tocsr()
    energy = float(ground_energy(h))
    energy_scipy = scipy.sparse.linalg.eigsh(twin, 1, which="SA")[0][0]
    psi = js.linalg.expm_multiply((-1j) * H, up, t)
    psi_scipy = scipy.sparse.linalg.expm_multiply(-1j * t * twin, np.asarray(up))

    step = 1e-5
    grad_energy = float(jax.grad(ground_energy)(h))
    fd_energy = (ground_energy(h + step) - ground_energy(h - step)) / (2 * step)
    grad_magnetization = float(jax.grad(magnetization)(h))
    fd_magnetization = (magnetization(h + step) - magnetization(h - step)) / (2 * step)
    results = {
        "energy_error": abs(energy - energy_scipy),
        "state_error": float(np.max(np.abs(np.asarray(psi) - psi_scipy))),
        "energy_gradient_error": abs(grad_energy - float(fd_energy)),
        "magnetization_gradient_error": abs(grad_magnetization - float(fd_magnetization)),
    }
    print(f"L = {spins} spins, h = {h}: E0 = {energy:.12f} (scipy {energy_scipy:.12f})")
    print(f"|psi(t = {t}) - scipy|_max = {results['state_error']:.2e}")
    print(f"dE0/dh = {grad_energy:.10f}, finite difference {float(fd_energy):.10f}")
    print(
        f"d<Z_0>/dh at t = {t}: {grad_magnetization:.10f}, "
        f"finite difference {float(fd_magnetization):.10f}"
    )
    return results


if __name__ == "__main__":
    errors = main()
    assert max(errors.values()) < 1e-6, errors
    print("All checks passed")
