"""A small convolutional network trained with SGD + momentum, written against JAX's API: the same
code runs on kiln (`import kiln as jax`) and, with --jax, on JAX, and gives JAX's loss history.

The model: two blocks of a 3x3 SAME convolution (NHWC images, HWIO kernels, through
lax.conv_general_dilated), a bias and relu, then 2x2 max pooling (lax.reduce_window with a -inf
init and lax.max); the 3x3x16 features are flattened into a dense layer to four logits, trained
on a softmax cross-entropy. The data are 12x12 single-channel images of a short bar in one of four
orientations (-, |, \\, /) at a random place, with a random brightness and Gaussian noise, drawn
with NumPy from a fixed seed; the initial parameters are drawn with NumPy as well, so kiln and JAX
start from the same bits and see the same minibatches.

    python3 examples/cnn.py [--steps 150] [--jax]

train(jax, jnp, lax, steps) runs the whole program over the given modules and returns the loss
of every step, the held-out accuracy and the final parameters; tests/test_cnn_example.py uses it.
"""
import argparse
import time
from typing import NamedTuple

import numpy as np

SIZE = 12                     # images are SIZE x SIZE x 1
CLASSES = 4                   # bar orientations: horizontal, vertical, diagonal, anti-diagonal
CHANNELS = (1, 8, 16)         # input, first and second convolution's output channels
BATCH = 64
TRAIN, TEST = 512, 256        # examples drawn for training and for the held-out accuracy
STEPS = 150
LEARNING_RATE, MOMENTUM = 0.05, 0.9
PRINT_EVERY = 25
SEED = 0


def bars(rng, n, size=SIZE, noise=0.2):
    """n float32 images (n, size, size, 1) of a bar of 3..5 pixels, and their int32 orientations."""
    steps = [(0, 1), (1, 0), (1, 1), (1, -1)]   # (row, column) step along the bar, one per class
    labels = rng.integers(0, CLASSES, n)
    images = noise * rng.standard_normal((n, size, size))
    for img, label in zip(images, labels):
        dr, dc = steps[label]
        length = rng.integers(3, 6)
        reach = length - 1
        r = rng.integers(0, size - reach * dr)
        c = rng.integers(reach if dc < 0 else 0, size - (reach * dc if dc > 0 else 0))
        img[r + dr * np.arange(length), c + dc * np.arange(length)] += rng.uniform(0.7, 1.3)
    return images[..., None].astype(np.float32), labels.astype(np.int32)


def init_params(seed=SEED):
    """float32 NumPy parameters: He-scaled HWIO kernels and zero biases for the two convolutions,
    then the dense head's weight and bias."""
    rng = np.random.default_rng(seed)

    def normal(*shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    (c0, c1, c2), flat = CHANNELS, (SIZE // 4) ** 2 * CHANNELS[2]
    return {"conv1": {"w": normal(3, 3, c0, c1, fan_in=9 * c0), "b": np.zeros(c1, np.float32)},
            "conv2": {"w": normal(3, 3, c1, c2, fan_in=9 * c1), "b": np.zeros(c2, np.float32)},
            "dense": {"w": normal(flat, CLASSES, fan_in=flat), "b": np.zeros(CLASSES, np.float32)}}


class Model(NamedTuple):
    predict: object           # (params, images) -> logits
    loss: object              # (params, images, labels) -> mean cross-entropy
    step: object              # (params, velocity, images, labels) -> (params, velocity, loss), not jitted
    accuracy: object          # (params, images, labels) -> fraction classified right, jitted


def make_model(jax, jnp, lax, lr=LEARNING_RATE, momentum=MOMENTUM):
    """The network, its loss and its training step over the given JAX-like modules."""

    def conv_block(x, p):
        y = lax.conv_general_dilated(x, p["w"], window_strides=(1, 1), padding="SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = jax.nn.relu(y + p["b"])
        return lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def predict(params, x):
        x = conv_block(x, params["conv1"])
        x = conv_block(x, params["conv2"])
        x = x.reshape(x.shape[0], -1)
        return x @ params["dense"]["w"] + params["dense"]["b"]

    def loss(params, x, y):
        logp = jax.nn.log_softmax(predict(params, x), axis=-1)
        return -jnp.mean(jnp.sum(logp * jax.nn.one_hot(y, CLASSES), axis=-1))

    def step(params, velocity, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        velocity = jax.tree_util.tree_map(lambda v, g: momentum * v + g, velocity, grads)
        params = jax.tree_util.tree_map(lambda p, v: p - lr * v, params, velocity)
        return params, velocity, value

    @jax.jit
    def accuracy(params, x, y):
        return jnp.mean(jnp.argmax(predict(params, x), axis=-1) == y)

    return Model(predict, loss, step, accuracy)


class Result(NamedTuple):
    losses: list              # the minibatch loss of every step, as Python floats
    accuracy: float           # held-out accuracy after training
    params: dict              # the trained parameters (arrays of the module trained with)


def dataset(rng, dtype=np.float32):
    """Training and held-out images and labels, drawn with rng."""
    x_train, y_train = bars(rng, TRAIN)
    x_test, y_test = bars(rng, TEST)
    return x_train.astype(dtype), y_train, x_test.astype(dtype), y_test


def minibatches(rng, x, y, steps):
    """steps minibatches of BATCH examples, in an order rng reshuffles each epoch."""
    per_epoch = len(y) // BATCH
    for i in range(steps):
        if i % per_epoch == 0:
            order = rng.permutation(len(y))
        idx = order[(i % per_epoch) * BATCH:(i % per_epoch + 1) * BATCH]
        yield x[idx], y[idx]


def train(jax, jnp, lax, steps=STEPS, seed=SEED, print_every=0, dtype=np.float32):
    """Trains from init_params(seed) on the dataset and minibatches drawn from seed, with the step
    under jax.jit; prints every print_every steps (0: silent). dtype=np.float64 trains in double
    precision (enable jax_enable_x64 first)."""
    rng = np.random.default_rng(seed)
    x_train, y_train, x_test, y_test = dataset(rng, dtype)
    model = make_model(jax, jnp, lax)
    step = jax.jit(model.step)
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), init_params(seed))
    velocity = jax.tree_util.tree_map(jnp.zeros_like, params)

    losses = []
    for i, (x, y) in enumerate(minibatches(rng, x_train, y_train, steps)):
        params, velocity, loss = step(params, velocity, x, y)
        losses.append(loss)
        if print_every and (i + 1) % print_every == 0:
            recent = [float(v) for v in losses[-print_every:]]
            print(f"step {i + 1:4d}: minibatch loss {recent[-1]:.4f} (mean of last {print_every}: "
                  f"{np.mean(recent):.4f})")
    accuracy = float(model.accuracy(params, x_test, y_test))
    return Result([float(v) for v in losses], accuracy, params)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--jax", action="store_true", help="run with JAX instead of kiln")
    args = ap.parse_args()
    if args.jax:
        import jax
        import jax.numpy as jnp
        from jax import lax
    else:
        import kiln as jax
        import kiln.numpy as jnp
        from kiln import lax
    print(f"CNN on {jax.devices()[0]} ({jax.__name__} {jax.__version__}): "
          f"conv3x3({CHANNELS[1]})-relu-maxpool, conv3x3({CHANNELS[2]})-relu-maxpool, dense({CLASSES}); "
          f"{TRAIN} {SIZE}x{SIZE} images of bars in {CLASSES} orientations, batch {BATCH}, "
          f"SGD lr {LEARNING_RATE} momentum {MOMENTUM}")
    t0 = time.perf_counter()
    result = train(jax, jnp, lax, args.steps, print_every=PRINT_EVERY)
    print(f"loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f} in {args.steps} steps "
          f"(chance level ln {CLASSES} = {np.log(CLASSES):.4f}); held-out accuracy "
          f"{result.accuracy * 100:.1f} % on {TEST} images; {time.perf_counter() - t0:.2f} s in all")


if __name__ == "__main__":
    main()
