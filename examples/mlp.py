"""A small MLP classifier trained with kiln exactly as one would with JAX: params are a pytree (a list of
dicts), the training step is kiln.jit(kiln.value_and_grad(...)) with an SGD update through tree_map, and
kiln.vmap gives per-example predictions and per-example gradient norms.

    PYTHONPATH=python python3 examples/mlp.py       (also run by examples/demo.py, i.e. make demo)

The data are three interleaved noisy spirals in the plane (not linearly separable), drawn with NumPy.
run() prints the loss as it falls, the time per training step and the held-out accuracy, and checks
the gradient against finite differences and vmap against the batched code; it returns True when all
checks pass.
"""

import sys
import time

import numpy as np

import kiln as jax
import kiln.numpy as jnp

CLASSES = 3
SIZES = [2, 64, 64, CLASSES]   # input, two hidden layers (tanh, relu), logits
BATCH = 128
STEPS = 2000
LEARNING_RATE = (0.5, 0.02)   # SGD step size, decayed linearly from the first to the second value
PRINT_EVERY = 250
SEED = 0


def spirals(rng, n_per_class, noise=0.15):
    """Points on CLASSES interleaved spiral arms (radius 0.1..1, one turn), with Gaussian noise."""
    xs, ys = [], []
    for c in range(CLASSES):
        r = rng.uniform(0.1, 1.0, n_per_class)
        theta = 2.0 * np.pi * r + 2.0 * np.pi * c / CLASSES
        pts = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1)
        xs.append(pts + noise * r[:, None] * rng.standard_normal((n_per_class, 2)))
        ys.append(np.full(n_per_class, c))
    x, y = np.concatenate(xs), np.concatenate(ys)
    order = rng.permutation(len(y))
    return x[order].astype(np.float32), y[order].astype(np.int32)


def init_params(rng, sizes):
    """A list of {'w', 'b'} layers, Glorot-style scaled weights and zero biases."""
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w = rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / (fan_in + fan_out))
        params.append({"w": jnp.asarray(w.astype(np.float32)), "b": jnp.zeros((fan_out,), jnp.float32)})
    return params


def predict(params, x):
    """Logits for x of shape (..., 2): a tanh layer, a relu layer, then a linear read-out."""
    h = jnp.tanh(x @ params[0]["w"] + params[0]["b"])
    h = jax.nn.relu(h @ params[1]["w"] + params[1]["b"])
    return h @ params[2]["w"] + params[2]["b"]


def loss_fn(params, x, y):
    """Mean softmax cross-entropy of the labels y (int) under the logits of x."""
    logp = jax.nn.log_softmax(predict(params, x), axis=-1)
    return -jnp.mean(jnp.sum(logp * jax.nn.one_hot(y, CLASSES), axis=-1))


@jax.jit
def train_step(params, x, y, lr):
    """One SGD step on the batch (x, y); lr is traced, so the decaying step size never recompiles."""
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return params, loss


@jax.jit
def accuracy(params, x, y):
    return jnp.mean(jnp.argmax(predict(params, x), axis=-1) == y)


# Per-example views written for ONE example (x: (2,), y: scalar) and mapped over the batch by vmap.
def _example_loss(params, x, y):
    return loss_fn(params, x[None, :], y[None])


@jax.jit
def per_example_grad_norms(params, x, y):
    grads = jax.vmap(jax.grad(_example_loss), in_axes=(None, 0, 0))(params, x, y)
    squares = [jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in jax.tree_util.tree_leaves(grads)]
    return jnp.sqrt(sum(squares)), grads


per_example_predict = jax.jit(jax.vmap(predict, in_axes=(None, 0)))


def finite_difference_check(params, x, y, eps=1e-2):
    """Central difference of the full-data loss along the first-layer weight with the largest gradient."""
    loss = jax.jit(loss_fn)
    grad_w = np.asarray(jax.jit(jax.grad(loss_fn))(params, x, y)[0]["w"])
    i, j = np.unravel_index(np.argmax(np.abs(grad_w)), grad_w.shape)

    def shifted(delta):
        p = jax.tree_util.tree_map(lambda a: a, params)
        p[0] = dict(p[0], w=p[0]["w"].at[i, j].add(delta))
        return float(loss(p, x, y))

    fd = (shifted(eps) - shifted(-eps)) / (2 * eps)
    rel = abs(fd - grad_w[i, j]) / max(abs(fd), 1e-12)
    print(f"gradient check on w0[{i},{j}]: kiln.grad {grad_w[i, j]:+.6f}, central difference {fd:+.6f} "
          f"(eps={eps}), relative difference {rel:.1e}")
    return rel < 2e-2   # float32 rounding of the loss alone gives up to a few 1e-3 here


def run():
    rng = np.random.default_rng(SEED)
    x_train, y_train = spirals(rng, 512)
    x_test, y_test = spirals(rng, 256)
    params = init_params(rng, SIZES)
    n_params = sum(int(p.size) for p in jax.tree_util.tree_leaves(params))
    print(f"MLP on {jax.devices()[0]!r} ({jax.default_backend()}): "
          f"{SIZES[0]}-{SIZES[1]}(tanh)-{SIZES[2]}(relu)-{SIZES[3]}, {n_params} params, "
          f"{len(y_train)} spiral points in {CLASSES} classes;\n"
          f"  SGD with step size {LEARNING_RATE[0]} -> {LEARNING_RATE[1]}, batch {BATCH}, {STEPS} steps")

    xtr, ytr = jnp.asarray(x_train), jnp.asarray(y_train)
    xte, yte = jnp.asarray(x_test), jnp.asarray(y_test)
    full_loss = jax.jit(loss_fn)
    ok = finite_difference_check(params, xtr, ytr)

    loss0, acc0 = float(full_loss(params, xtr, ytr)), float(accuracy(params, xte, yte))
    print(f"step    0: train loss {loss0:.4f}  (chance level ln 3 = {np.log(CLASSES):.4f}), "
          f"test accuracy {acc0 * 100:.1f} %")

    # Each step takes a fixed-size batch (same shapes -> one compiled program); epochs reshuffle.
    batches_per_epoch = len(y_train) // BATCH
    perm, times, first_call = None, [], None
    recent = []
    for step in range(1, STEPS + 1):
        k = (step - 1) % batches_per_epoch
        if k == 0:
            perm = rng.permutation(len(y_train))
        idx = perm[k * BATCH:(k + 1) * BATCH]
        xb, yb = jnp.asarray(x_train[idx]), jnp.asarray(y_train[idx])
        t0 = time.perf_counter()
        lr = LEARNING_RATE[0] + (LEARNING_RATE[1] - LEARNING_RATE[0]) * (step - 1) / (STEPS - 1)
        params, loss = train_step(params, xb, yb, lr)
        loss.block_until_ready()
        elapsed = time.perf_counter() - t0
        if first_call is None:
            first_call = elapsed
        else:
            times.append(elapsed)
        recent.append(loss)
        if step % PRINT_EVERY == 0:
            batch_mean = float(np.mean([float(v) for v in recent]))
            recent = []
            print(f"step {step:4d}: batch loss (mean of last {PRINT_EVERY}) {batch_mean:.4f}, "
                  f"train loss {float(full_loss(params, xtr, ytr)):.4f}")

    loss1 = float(full_loss(params, xtr, ytr))
    acc1 = float(accuracy(params, xte, yte))
    step_ms = float(np.median(times)) * 1e3
    print(f"first training step (trace + compile + run): {first_call * 1e3:.1f} ms; "
          f"then {step_ms:.3f} ms per step (median, host->device batch copy included)")
    print(f"train loss {loss0:.4f} -> {loss1:.4f}; held-out accuracy {acc0 * 100:.1f} % -> {acc1 * 100:.1f} % "
          f"on {len(y_test)} test points")

    # vmap: per-example predictions agree with the batched forward pass ...
    logits_batched = np.asarray(predict(params, xte))
    logits_vmapped = np.asarray(per_example_predict(params, xte))
    pred_diff = float(np.max(np.abs(logits_batched - logits_vmapped)))
    # ... and the mean of the per-example gradients is the batch gradient.
    norms, ex_grads = per_example_grad_norms(params, xte, yte)
    norms = np.asarray(norms)
    batch_grads = jax.grad(loss_fn)(params, xte, yte)
    grad_diff = max(float(np.max(np.abs(np.asarray(g).mean(axis=0) - np.asarray(b))))
                    for g, b in zip(jax.tree_util.tree_leaves(ex_grads), jax.tree_util.tree_leaves(batch_grads)))
    wrong = np.asarray(jnp.argmax(predict(params, xte), axis=-1)) != y_test
    print(f"vmap: per-example logits vs batched: max abs difference {pred_diff:.1e}; mean of per-example "
          f"gradients vs batch gradient: {grad_diff:.1e}")
    print(f"vmap: per-example gradient norms: median {np.median(norms):.3g}, max {norms.max():.3g}; "
          f"misclassified points ({int(wrong.sum())}) average {norms[wrong].mean() if wrong.any() else 0:.3g} "
          f"vs {norms[~wrong].mean():.3g} for the others")

    checks = {
        "gradient matches finite differences": ok,
        "loss fell below a quarter of its start": loss1 < 0.25 * loss0,
        "held-out accuracy above 90 %": acc1 > 0.90,
        "vmapped predictions match batched ones": pred_diff < 1e-4,
        "mean per-example gradient matches batch gradient": grad_diff < 1e-5,
    }
    failed = [name for name, passed in checks.items() if not passed]
    print("MLP checks:", "all passed" if not failed else "FAILED: " + "; ".join(failed))
    return not failed


if __name__ == "__main__":
    print(f"kiln {jax.__version__} on {jax.devices()} (backend: {jax.default_backend()})")
    sys.exit(0 if run() else 1)
