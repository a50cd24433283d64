"""Train a two-layer network with fastad's fused linear+ReLU on synthetic data.

    python examples/train_two_layer.py [--steps 300]

The model is ``H = relu(X @ W1 + b1)`` (one fused node) followed by
``Y = H @ W2 + b2`` (fused linear) and the fused mean squared error. Each
step records a fresh tape, runs backward, and then, separately from
backward, the optimiser: gradients are accumulated over two half-batches,
clipped to a maximum global norm, and applied with plain SGD. Backward
only computes gradients; what happens to them is the caller's choice.
"""

import argparse

import numpy as np

import fastad as fa


def make_data(rng, samples=256, inputs=8, outputs=2):
    """A smooth nonlinear target the network can learn."""
    X = rng.normal(size=(samples, inputs))
    mixing = rng.normal(size=(inputs, outputs))
    Y = np.tanh(X @ mixing) + 0.1 * np.sin(3.0 * X[:, :outputs])
    return X, Y


def init_parameters(rng, inputs=8, hidden=32, outputs=2):
    return {
        "W1": rng.normal(size=(inputs, hidden)) * np.sqrt(2.0 / inputs),
        "b1": np.zeros(hidden),
        "W2": rng.normal(size=(hidden, outputs)) * np.sqrt(1.0 / hidden),
        "b2": np.zeros(outputs),
    }


def loss_and_gradients(parameters, X, Y):
    """One forward and backward pass on a fresh tape: (loss, {name: gradient})."""
    with fa.Tape():
        nodes = {name: fa.var(value) for name, value in parameters.items()}
        H = fa.linear_relu(X, nodes["W1"], nodes["b1"])
        prediction = fa.linear(H, nodes["W2"], nodes["b2"])
        loss = fa.mse_loss(prediction, Y)
        loss.backward()
        return loss.value, {name: node.grad for name, node in nodes.items()}


def clip_by_global_norm(gradients, max_norm):
    """Scale all gradients together so their joint norm is at most ``max_norm``."""
    norm = np.sqrt(sum(float(np.sum(g * g)) for g in gradients.values()))
    scale = min(1.0, max_norm / (norm + 1e-12))
    return {name: g * scale for name, g in gradients.items()}, norm


def train(steps=300, learning_rate=0.1, max_norm=5.0, seed=0, log_every=50, out=print):
    """Train and return the list of per-step losses."""
    rng = np.random.default_rng(seed)
    X, Y = make_data(rng)
    parameters = init_parameters(rng)
    halves = np.array_split(np.arange(X.shape[0]), 2)
    losses = []
    for step in range(steps):
        # Gradient accumulation: two half-batches, averaged.
        accumulated = {name: np.zeros_like(value) for name, value in parameters.items()}
        step_loss = 0.0
        for half in halves:
            loss, gradients = loss_and_gradients(parameters, X[half], Y[half])
            step_loss += loss / len(halves)
            for name, gradient in gradients.items():
                accumulated[name] += gradient / len(halves)
        clipped, norm = clip_by_global_norm(accumulated, max_norm)
        for name in parameters:  # the optimiser step: plain SGD
            parameters[name] = parameters[name] - learning_rate * clipped[name]
        losses.append(step_loss)
        if log_every and (step % log_every == 0 or step == steps - 1):
            out(f"step {step:4d}  loss {step_loss:.6f}  gradient norm {norm:.4f}")
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    args = parser.parse_args(argv)
    losses = train(steps=args.steps, learning_rate=args.learning_rate)
    print(f"loss went from {losses[0]:.6f} to {losses[-1]:.6f}")


if __name__ == "__main__":
    main()
