"""JAX programs made of loops (lax.while_loop, scan, fori_loop, cond) that run unchanged on kiln:
an adaptive-step ODE integrator and its gradient, k-means until convergence, an RNN trained with
scan, and a Metropolis sampler drawing from kiln.random inside fori_loop.

    PYTHONPATH=python python3 examples/loops.py        # kiln
    python3 examples/loops.py jax                       # the same file on JAX

Both print the same numbers (tests/test_programs.py pins JAX's), but for one line: JAX refuses
reverse-mode differentiation of while_loop (its issue #2469), so on JAX the gradient of the
adaptive integrator is printed from central finite differences; kiln differentiates the loop."""
import sys

import numpy as np

ON_JAX = len(sys.argv) > 1 and sys.argv[1] == "jax"
if ON_JAX:
    import jax, jax.numpy as jnp  # noqa: E401
else:
    import kiln as jax, kiln.numpy as jnp  # noqa: E401
lax = jax.lax
jax.config.update("jax_enable_x64", True)


# ---- an adaptive-step integrator (Heun with an Euler error estimate) of a damped pendulum
def rhs(y, theta):
    return jnp.stack([y[1], -theta[0] * jnp.sin(y[0]) - theta[1] * y[1]])


def integrate(theta, y0, t_end=3.0, tol=1e-6):
    def cond(c):
        return c[0] < t_end

    def body(c):
        t, y, dt, n = c
        dt = jnp.minimum(dt, t_end - t)
        k1 = rhs(y, theta)
        k2 = rhs(y + dt * k1, theta)
        y_new = y + dt * 0.5 * (k1 + k2)
        err = jnp.max(jnp.abs(dt * 0.5 * (k2 - k1))) + 1e-300
        ok = err <= tol
        t, y = jnp.where(ok, t + dt, t), jnp.where(ok, y_new, y)
        dt = dt * jnp.clip(0.9 * jnp.sqrt(tol / err), 0.2, 5.0)
        return t, y, dt, n + 1

    _, y, _, n = lax.while_loop(cond, body, (0.0, y0, 0.01, 0))
    return y, n


theta, y0 = jnp.array([9.81, 0.3]), jnp.array([1.0, 0.0])
y, n = jax.jit(integrate)(theta, y0)
print("ode y(T)", np.round(np.asarray(y), 6), "steps", int(n))
final = lambda th: jnp.sum(integrate(th, y0)[0] ** 2)  # noqa: E731
if ON_JAX:  # JAX cannot differentiate the while_loop in reverse mode
    eps = 1e-6
    g = np.array([(float(final(theta + eps * e)) - float(final(theta - eps * e))) / (2 * eps) for e in np.eye(2)])
else:
    g = np.asarray(jax.jit(jax.grad(final))(theta))
print("ode grad", np.round(g, 4))

# ---- k-means until no point changes its cluster
key = jax.random.PRNGKey(0)
k1, k2 = jax.random.split(key)
centers = jnp.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
pts = (centers[:, None, :] + 0.7 * jax.random.normal(k1, (3, 100, 2))).reshape(300, 2)


def kmeans(pts, c0):
    def assign(c):
        return jnp.argmin(jnp.sum((pts[:, None, :] - c[None]) ** 2, -1), axis=1)

    def body(s):
        c, a, _, it = s
        onehot = (a[:, None] == jnp.arange(3)[None]).astype(pts.dtype)
        c = (onehot.T @ pts) / jnp.maximum(onehot.sum(0), 1.0)[:, None]
        a_new = assign(c)
        return c, a_new, jnp.any(a_new != a), it + 1

    c, a, _, it = lax.while_loop(lambda s: s[2] & (s[3] < 100), body, (c0, assign(c0), True, 0))
    return c, it


c, it = jax.jit(kmeans)(pts, pts[:3])
order = np.argsort(np.asarray(c)[:, 0] + 10 * np.asarray(c)[:, 1])
print("kmeans centers", np.round(np.asarray(c)[order], 5).ravel(), "iterations", int(it))

# ---- an RNN trained with scan: predict the next value of a noisy sine
T = 60
ts = jnp.arange(T + 1) * 0.2
seq = jnp.sin(ts) + 0.05 * jax.random.normal(k2, (T + 1,))
xs, ys = seq[:-1], seq[1:]
kw = jax.random.split(jax.random.PRNGKey(1), 3)
params = {"w": 0.3 * jax.random.normal(kw[0], (8, 8)), "u": 0.5 * jax.random.normal(kw[1], (8,)),
          "v": 0.5 * jax.random.normal(kw[2], (8,))}


def rnn_loss(p, xs, ys):
    def cell(h, x):
        h = jnp.tanh(p["w"] @ h + p["u"] * x)
        return h, p["v"] @ h

    _, pred = lax.scan(cell, jnp.zeros(8), xs)
    return jnp.mean((pred - ys) ** 2)


@jax.jit
def sgd(p, xs, ys):
    l, g = jax.value_and_grad(rnn_loss)(p, xs, ys)
    return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g), l


first = None
for _ in range(30):
    params, l = sgd(params, xs, ys)
    first = float(l) if first is None else first
print("rnn loss", round(first, 6), "->", round(float(rnn_loss(params, xs, ys)), 6))


# ---- a Metropolis sampler of a two-mode density, keys split inside fori_loop
def logp(x):
    return jnp.logaddexp(-0.5 * (x - 2.0) ** 2, -0.5 * (x + 2.0) ** 2)


def sample(key, n):
    def step(i, s):
        key, x, acc, total = s
        key, kp, ku = jax.random.split(key, 3)
        prop = x + 1.5 * jax.random.normal(kp, ())
        take = jnp.log(jax.random.uniform(ku, ())) < logp(prop) - logp(x)
        x = lax.cond(take, lambda: prop, lambda: x)
        return key, x, acc + take, total + x

    _, x, acc, total = lax.fori_loop(0, n, step, (key, 0.0, 0, 0.0))
    return total / n, acc / n


m, rate = jax.jit(sample, static_argnums=1)(jax.random.PRNGKey(2), 2000)
print("sampler mean", round(float(m), 6), "acceptance", round(float(rate), 6))
