"""Recover the diffusion coefficient of a 1-D heat equation from observations.

The forward model is `u_t = (kappa(x) u_x)_x` on `[0, 1]` with `u = 0` at both ends,
discretized by finite volumes on `n` interior points and stepped by explicit Euler:
`u <- A @ u` with `A = I + dt * L(kappa)`, a tridiagonal `DIAMatrix` whose `data` is
built from `kappa` at the cell faces. A batch of initial conditions is stepped at once
(`A @ U`, `U` of shape `(n, batch)`) inside `jax.lax.scan`, and snapshots are recorded.

The inverse problem: given noisy snapshots made with the true `kappa`, find `kappa`.
`jax.grad` of the misfit flows back through every time step into `A.data` and on to
`log kappa`, which plain Adam (a few lines, below) updates.

Run it with `python examples/heat_inverse.py [--figure heat.png]`: the figure is written
only where `--figure` says (the README's is `--figure examples/heat_inverse.png`).
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

import jaxsparse as js

DTYPE = jnp.float32


def true_coefficient(x_faces: np.ndarray) -> np.ndarray:
    """The coefficient to recover: a smooth background with a bump."""
    return 1.0 + 0.4 * np.sin(2 * np.pi * x_faces) + 0.5 * np.exp(-(((x_faces - 0.7) / 0.1) ** 2))


def heat_step_matrix(kappa, dt, h) -> js.DIAMatrix:
    """`I + dt * L(kappa)` as a DIAMatrix, `kappa` given at the `n + 1` cell faces.

    Row `i` of `L` is `(kappa[i+1] (u[i+1] - u[i]) - kappa[i] (u[i] - u[i-1])) / h^2`.
    In DIA storage column `j` of `data` is column `j` of the matrix, so the diagonal
    below holds `L[j+1, j] = kappa[j+1] / h^2`, the main one `L[j, j]`, and the one above
    `L[j-1, j] = kappa[j] / h^2` (the two slots outside the matrix are ignored).
    """
    n = kappa.shape[0] - 1
    lower = kappa[1:] / h**2
    main = 1.0 - dt * (kappa[:-1] + kappa[1:]) / h**2
    upper = kappa[:-1] / h**2
    data = jnp.stack([dt * lower, main, dt * upper])
    return js.DIAMatrix(data, offsets=(-1, 0, 1), shape=(n, n))


def simulate(kappa, u0, *, dt, h, n_steps, record_every):
    """Step `u0` (shape `(n, batch)`) and return the snapshots, `(n_records, n, batch)`."""
    A = heat_step_matrix(kappa, dt, h)

    def record(u, _):
        u = jax.lax.fori_loop(0, record_every, lambda _, u: A @ u, u)
        return u, u

    _, snapshots = jax.lax.scan(record, u0, length=n_steps // record_every)
    return snapshots


def initial_conditions(x: np.ndarray, batch: int, rng) -> np.ndarray:
    """`batch` random combinations of the first sine modes, shape `(n, batch)`."""
    modes = np.arange(1, 9)
    amplitudes = rng.standard_normal((len(modes), batch)) / modes[:, None]
    return np.sin(np.pi * np.outer(x, modes)) @ amplitudes


def adam(loss_fn, params, *, steps, learning_rate, b1=0.9, b2=0.999, eps=1e-8):
    """Plain Adam on one array; returns the final `params` and the loss of every step."""

    def step(state, t):
        params, m, v = state
        loss, grad = jax.value_and_grad(loss_fn)(params)
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad**2
        m_hat = m / (1 - b1 ** (t + 1))
        v_hat = v / (1 - b2 ** (t + 1))
        params = params - learning_rate * m_hat / (jnp.sqrt(v_hat) + eps)
        return (params, m, v), loss

    zeros = jnp.zeros_like(params)
    ts = jnp.arange(steps).astype(params.dtype)
    (params, _, _), losses = jax.lax.scan(step, (params, zeros, zeros), ts)
    return params, losses


def main(
    n: int = 63,
    batch: int = 8,
    final_time: float = 0.02,
    record_every: int = 20,
    sensor_every: int = 4,
    adam_steps: int = 300,
    learning_rate: float = 0.03,
    noise: float = 1e-3,
    smoothing: float = 1e-4,
    seed: int = 0,
    figure_path=None,
    verbose: bool = False,
) -> dict:
    """Make synthetic observations, then fit `kappa` to them by Adam through the solver.

    **Arguments:**

    - `n`: interior grid points (`n + 1` cell faces carry `kappa`).
    - `batch`: initial conditions observed.
    - `final_time`: simulated time; the time step is set for explicit-Euler stability.
    - `record_every`: time steps between two recorded snapshots.
    - `sensor_every`: grid points between two sensors (only they are observed).
    - `adam_steps`, `learning_rate`: the optimizer.
    - `noise`: standard deviation of the observation noise, relative to the data's.
    - `smoothing`: weight of a penalty on the differences of `log kappa`.
    - `seed`: seed of the initial conditions and the noise.
    - `figure_path`: where to save the figure (`None`: no figure).
    - `verbose`: print the progress.

    **Returns:** a dict with `initial_loss`, `final_loss` (floats), `relative_error` of the
    recovered `kappa` (float), `losses`, `kappa_true`, `kappa_recovered` (numpy arrays).
    """
    say = print if verbose else (lambda *args: None)
    rng = np.random.default_rng(seed)
    h = 1.0 / (n + 1)
    x = np.linspace(h, 1.0 - h, n)
    x_faces = np.linspace(h / 2, 1.0 - h / 2, n + 1)
    kappa_true = true_coefficient(x_faces).astype(np.float32)

    # Explicit Euler is stable for dt <= h^2 / (2 max kappa); keep a margin, since the
    # iterates of kappa may exceed the true one.
    dt = 0.25 * h**2 / float(kappa_true.max())
    n_steps = record_every * max(1, round(final_time / dt / record_every))
    settings = dict(dt=dt, h=h, n_steps=n_steps, record_every=record_every)
    say(f"grid n={n}, dt={dt:.2e}, {n_steps} steps, {batch} initial conditions")

    u0 = jnp.asarray(initial_conditions(x, batch, rng), DTYPE)
    clean = jax.jit(lambda kappa: simulate(kappa, u0, **settings))(jnp.asarray(kappa_true))
    scale = float(jnp.std(clean))
    sensors = np.arange(sensor_every // 2, n, sensor_every)
    clean = clean[:, sensors]
    observed = clean + jnp.asarray(noise * scale * rng.standard_normal(clean.shape), DTYPE)
    say(f"observed: {len(sensors)} sensors x {clean.shape[0]} snapshots x {batch} runs")

    def loss_fn(log_kappa):
        predicted = simulate(jnp.exp(log_kappa), u0, **settings)[:, sensors]
        misfit = jnp.mean((predicted - observed) ** 2) / scale**2
        return misfit + smoothing * jnp.sum(jnp.diff(log_kappa) ** 2)

    fit = jax.jit(lambda start: adam(loss_fn, start, steps=adam_steps, learning_rate=learning_rate))
    log_kappa, losses = fit(jnp.zeros(n + 1, DTYPE))
    kappa = np.asarray(jnp.exp(log_kappa))
    losses = np.asarray(losses)
    final_loss = float(loss_fn(log_kappa))
    error = float(np.linalg.norm(kappa - kappa_true) / np.linalg.norm(kappa_true))
    for step in np.linspace(0, adam_steps - 1, 7).astype(int):
        say(f"  step {step:4d}  loss {losses[step]:.3e}")
    say(f"  final      loss {final_loss:.3e}")
    say(f"relative error of the recovered kappa: {error:.3f}")

    if figure_path is not None:
        save_figure(figure_path, x_faces, kappa_true, kappa, losses)
        say(f"figure saved to {figure_path}")
    return dict(
        initial_loss=float(losses[0]),
        final_loss=final_loss,
        relative_error=error,
        losses=losses,
        kappa_true=kappa_true,
        kappa_recovered=kappa,
    )


def save_figure(path, x_faces, kappa_true, kappa, losses) -> None:
    """The true, initial and recovered coefficient beside the loss, as a PNG at `path`."""
    fig = Figure(figsize=(8, 3), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot(x_faces, kappa_true, "k-", label="true")
    left.plot(x_faces, np.ones_like(x_faces), "C7:", label="initial guess")
    left.plot(x_faces, kappa, "C1--", label="recovered")
    left.set(xlabel="x", ylabel="kappa(x)", title="diffusion coefficient")
    left.legend()
    right.semilogy(losses)
    right.set(xlabel="Adam step", ylabel="loss", title="loss (misfit + smoothing)")
    fig.savefig(path, dpi=90)


def command_line() -> argparse.ArgumentParser:
    """The script's options: only `--figure PATH`, where to write the figure (none without)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figure", metavar="PATH", help="write the figure to PATH (a PNG)")
    return parser


if __name__ == "__main__":
    main(figure_path=command_line().parse_args().figure, verbose=True)
