"""Graphs with `CSRMatrix`: a graph convolutional network that learns its edge weights,
and PageRank by power iteration.

The graph is a stochastic block model: three communities, dense inside, sparse across.
Node features are weak, noisy hints of the community; only a tenth of the labels are known.
A two-layer GCN, `logits = A @ relu(A @ (X @ W1)) @ W2`, with `A` the symmetrically
normalized adjacency (self loops added) as a `CSRMatrix`, classifies every node.
First, the gradients with respect to the edge weights `A.data` and the node features `X`
are checked against the same model with a dense adjacency. Then `W1`, `W2` and one gate
per edge (`A.with_data(A.data * exp(log_gates))`, so the gradient flows through
`A.data`) are trained by Adam; the loss falls and the unlabelled nodes get classified.

PageRank runs `r <- alpha * P @ r + (1 - alpha) / n` under `jit` and is checked against
the solution of `(I - alpha P) r = (1 - alpha) / n` by `scipy.sparse.linalg.spsolve`.

Run it with `python examples/graph_gnn.py`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import scipy.sparse.linalg

import jaxsparse as js

DTYPE = np.float32


def stochastic_block_model(sizes, p_in, p_out, rng) -> tuple[scipy.sparse.csr_array, np.ndarray]:
    """A symmetric 0/1 adjacency (no self loops) and the community of every node."""
    labels = np.repeat(np.arange(len(sizes)), sizes)
    same = labels[:, None] == labels[None, :]
    upper = np.triu(rng.random((len(labels), len(labels))) < np.where(same, p_in, p_out), 1)
    adjacency = scipy.sparse.csr_array((upper | upper.T).astype(DTYPE))
    return adjacency, labels


def normalized_adjacency(adjacency) -> scipy.sparse.csr_array:
    """`D^-1/2 (A + I) D^-1/2`, the GCN propagation matrix (Kipf and Welling, 2017)."""
    with_loops = adjacency + scipy.sparse.eye_array(adjacency.shape[0], dtype=DTYPE)
    scale = scipy.sparse.diags_array(1.0 / np.sqrt(with_loops.sum(axis=1))).astype(DTYPE)
    return scipy.sparse.csr_array(scale @ with_loops @ scale)


def gcn_logits(A, features, W1, W2):
    """Two graph convolutions. `A` is a `CSRMatrix` (or, to check it, the dense matrix)."""
    hidden = jax.nn.relu(A @ (features @ W1))
    return A @ (hidden @ W2)


def gated(A: js.CSRMatrix, log_gates) -> js.CSRMatrix:
    """`A` with each edge weight scaled by `exp(log_gate)`: same pattern, new `data`."""
    return A.with_data(A.data * jnp.exp(log_gates))


def cross_entropy(logits, labels, mask):
    log_probs = jax.nn.log_softmax(logits)
    picked = jnp.take_along_axis(log_probs, labels[:, None], axis=1)[:, 0]
    return -jnp.sum(jnp.where(mask, picked, 0.0)) / jnp.sum(mask).astype(picked.dtype)


def relative_error(actual, expected) -> float:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


def check_gradients(A: js.CSRMatrix, features, W1, W2, labels, mask) -> dict:
    """Gradients w.r.t. `A.data` and the features vs the same model with a dense `A`.

    The dense model's gradient with respect to the adjacency, read at the stored entries,
    is the gradient with respect to `A.data`.
    """

    def loss(A, features):
        return cross_entropy(gcn_logits(A, features, W1, W2), labels, mask)

    def sparse_loss(edge_weights, features):
        return loss(A.with_data(edge_weights), features)

    @jax.jit
    def both_gradients(edge_weights, features):
        edges, feats = jax.grad(sparse_loss, argnums=(0, 1))(edge_weights, features)
        dense = A.with_data(edge_weights).todense()
        dense_edges, dense_feats = jax.grad(loss, argnums=(0, 1))(dense, features)
        return (edges, feats), (dense_edges[A.row_ids(), A.indices], dense_feats)

    (edges, feats), (edges_dense, feats_dense) = both_gradients(A.data, features)
    return {
        "grad_edges": relative_error(edges, edges_dense),
        "grad_features": relative_error(feats, feats_dense),
    }


def pagerank(P: js.CSRMatrix, alpha: float, iterations: int):
    """Power iteration `r <- alpha P r + (1 - alpha) / n`, from the uniform vector."""
    n = P.shape[0]
    start = jnp.full(n, 1.0 / n, P.dtype)
    return jax.lax.fori_loop(0, iterations, lambda _, r: alpha * (P @ r) + (1 - alpha) / n, start)


def adam(loss_fn, params, steps: int, learning_rate: float, b1=0.9, b2=0.999, eps=1e-8):
    """Plain Adam on a pytree of arrays; returns the final `params` and every step's loss."""

    def step(state, t):
        params, m, v = state
        loss, grads = jax.value_and_grad(loss_fn)(params)
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g**2, v, grads)
        rate = learning_rate * jnp.sqrt(1 - b2 ** (t + 1)) / (1 - b1 ** (t + 1))
        params = jax.tree.map(lambda p, m, v: p - rate * m / (jnp.sqrt(v) + eps), params, m, v)
        return (params, m, v), loss

    zeros = jax.tree.map(jnp.zeros_like, params)
    ts = jnp.arange(steps).astype(DTYPE)
    (params, _, _), losses = jax.lax.scan(step, (params, zeros, zeros), ts)
    return params, losses


def main(
    sizes=(80, 80, 80),
    p_in: float = 0.1,
    p_out: float = 0.01,
    n_features: int = 16,
    hidden: int = 16,
    hint: float = 0.5,
    steps: int = 100,
    learning_rate: float = 0.01,
    weight_decay: float = 5e-3,
    gate_decay: float = 1.0,
    labelled_fraction: float = 0.1,
    alpha: float = 0.85,
    pagerank_iterations: int = 100,
    seed: int = 0,
    verbose: bool = False,
) -> dict:
    """Check the GCN's gradients, train it (edge gates included), and run PageRank.

    **Arguments:**

    - `sizes`, `p_in`, `p_out`: the block model (community sizes, edge probabilities).
    - `n_features`, `hidden`: widths of the features and of the hidden layer.
    - `hint`: how far the features lean towards the community (the noise has std 1).
    - `steps`, `learning_rate`: Adam on all parameters.
    - `weight_decay`, `gate_decay`: penalties on `W1, W2` and on the log edge gates
      (free edge weights overfit the few labels).
    - `labelled_fraction`: the share of nodes whose label the loss sees.
    - `alpha`, `pagerank_iterations`: PageRank's damping and its power iterations.
    - `seed`: seed of the graph, the features, the labelled nodes and the initial weights.
    - `verbose`: print the progress.

    **Returns:** a dict of floats: `initial_loss`, `final_loss`, `train_accuracy`,
    `test_accuracy` (on the unlabelled nodes), `grad_edges` and `grad_features` (relative
    errors vs the dense model), `pagerank_error` (relative, vs scipy).
    """
    say = print if verbose else (lambda *args: None)
    rng = np.random.default_rng(seed)
    adjacency, labels_np = stochastic_block_model(sizes, p_in, p_out, rng)
    n, n_classes = adjacency.shape[0], len(sizes)
    A = js.CSRMatrix.from_scipy(normalized_adjacency(adjacency))
    say(f"stochastic block model: {n} nodes, {adjacency.nnz // 2} edges; A = {A}")

    hints = np.eye(n_classes, n_features)[labels_np]
    features = jnp.asarray(hint * hints + rng.standard_normal((n, n_features)), DTYPE)
    labels = jnp.asarray(labels_np, jnp.int32)
    train_mask = jnp.asarray(rng.random(n) < labelled_fraction)
    params = {
        "log_gates": jnp.zeros(A.nnz, DTYPE),
        "W1": jnp.asarray(rng.standard_normal((n_features, hidden)) / np.sqrt(n_features), DTYPE),
        "W2": jnp.asarray(rng.standard_normal((hidden, n_classes)) / np.sqrt(hidden), DTYPE),
    }

    errors = check_gradients(A, features, params["W1"], params["W2"], labels, train_mask)
    say("gradients of the loss, relative error vs the same model with a dense adjacency:")
    say(f"  w.r.t. the edge weights A.data: {errors['grad_edges']:.1e}")
    say(f"  w.r.t. the node features X:     {errors['grad_features']:.1e}")

    def loss_fn(params):
        logits = gcn_logits(gated(A, params["log_gates"]), features, params["W1"], params["W2"])
        weights = jnp.sum(params["W1"] ** 2) + jnp.sum(params["W2"] ** 2)
        gates = jnp.mean(params["log_gates"] ** 2)
        misfit = cross_entropy(logits, labels, train_mask)
        return misfit + weight_decay * weights + gate_decay * gates

    train = jax.jit(lambda params: adam(loss_fn, params, steps, learning_rate))
    params, losses = train(params)
    final_loss = float(loss_fn(params))
    logits = gcn_logits(gated(A, params["log_gates"]), features, params["W1"], params["W2"])
    correct = np.asarray(jnp.argmax(logits, axis=1)) == labels_np
    mask = np.asarray(train_mask)
    results = dict(
        initial_loss=float(losses[0]),
        final_loss=final_loss,
        train_accuracy=float(correct[mask].mean()),
        test_accuracy=float(correct[~mask].mean()),
        **errors,
    )
    say(f"Adam on W1, W2 and the edge gates, {mask.sum()} labelled nodes:")
    for step in np.linspace(0, steps - 1, 5).astype(int):
        say(f"  step {step:4d}  loss {losses[step]:.4f}")
    say(f"  final      loss {final_loss:.4f}")
    say(
        f"accuracy: {results['train_accuracy']:.2f} on the labelled nodes, "
        f"{results['test_accuracy']:.2f} on the {(~mask).sum()} others"
    )
    rows = np.repeat(np.arange(n), np.diff(np.asarray(A.indptr)))
    inside = labels_np[rows] == labels_np[np.asarray(A.indices)]
    ratio = np.exp(np.asarray(params["log_gates"]))
    say(
        f"learned edge weights / initial: {ratio[inside].mean():.2f} inside communities, "
        f"{ratio[~inside].mean():.2f} across"
    )

    # PageRank on the same graph: P = A D^-1 moves each node's rank to its neighbours.
    degrees = np.asarray(adjacency.sum(axis=0)).ravel()
    transition = adjacency @ scipy.sparse.diags_array(1.0 / np.maximum(degrees, 1.0))
    transition = scipy.sparse.csr_array(transition).astype(DTYPE)
    rank = jax.jit(pagerank, static_argnums=(1, 2))(
        js.CSRMatrix.from_scipy(transition), alpha, pagerank_iterations
    )
    system = scipy.sparse.eye_array(n) - alpha * transition.astype(np.float64)
    expected = scipy.sparse.linalg.spsolve(system.tocsc(), np.full(n, (1 - alpha) / n))
    results["pagerank_error"] = relative_error(rank, expected)
    top = np.argsort(-np.asarray(rank))[:3]
    say(f"PageRank: top nodes {top.tolist()} (degrees {degrees[top].astype(int).tolist()}),")
    say(f"  relative error vs scipy spsolve: {results['pagerank_error']:.1e}")
    return results


if __name__ == "__main__":
    main(verbose=True)
