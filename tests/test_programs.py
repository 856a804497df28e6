"""Whole JAX programs run unchanged on kiln and print JAX's numbers (values pinned from jax 0.10.2,
CPU, running the same file)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

JAX_OUTPUT = """final loss 0.023256
per-example grad norms [0.41372 0.68222 0.34311 0.10053]
scan 2.65526 [-1.7406  -0.79845  0.92825]
hessian trace 16.65670
logsumexp 2.14685 argsort [3 7 1 4]
take [ 0.88849 -1.28893  1.07096] where 380.90325927734375"""


LOOPS_JAX_OUTPUT = """ode y(T) [-0.559197 -0.784535] steps 8770
ode grad [-1.0519 -3.6782]
kmeans centers [0.04244 0.03745 4.03461 0.07097 0.0145  3.92225] iterations 3
rnn loss 0.198999 -> 0.012519
sampler mean -0.050209 acceptance 0.692"""


def _numbers(text):
    out = []
    for tok in text.replace("[", " ").replace("]", " ").split():
        try:
            out.append(float(tok))
        except ValueError:
            pass
    return out


def test_jax_program_gives_jax_numbers():
    import kiln  # the child imports the same kiln as this process (a source tree or an installed wheel)
    # the pinned numbers are JAX's on the CPU: full float32 matmuls (a GPU's default is TF32)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(kiln.__file__)),
               JAX_DEFAULT_MATMUL_PRECISION="highest")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "jax_program.py")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    got, want = _numbers(p.stdout), _numbers(JAX_OUTPUT)
    assert len(got) == len(want), (p.stdout, p.stderr[-2000:])
    for g, w in zip(got, want):
        assert abs(g - w) <= 2e-5 * max(1.0, abs(w)), (g, w, p.stdout)


def test_loop_programs_give_jax_numbers():
    # examples/loops.py: an adaptive ODE integrator (while_loop) and its gradient, which JAX
    # refuses (its line comes from finite differences on JAX), k-means until convergence, an RNN
    # trained with scan, a Metropolis sampler in fori_loop with cond (float64 throughout)
    import kiln
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(kiln.__file__)))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "loops.py")], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    got, want = _numbers(p.stdout), _numbers(LOOPS_JAX_OUTPUT)
    assert len(got) == len(want), (p.stdout, p.stderr[-2000:])
    for g, w in zip(got, want):
        assert abs(g - w) <= 1e-5 * max(1.0, abs(w)), (g, w, p.stdout)


# ---------------------------------------------------------------------------
# Real programs built from the transformations together: custom rules, remat, per-example
# gradients, Newton's method, a training loop. Each is checked against the same program written
# without the custom rules / checkpointing (whose rules are exact, so the numbers must agree) or
# against a Python loop.

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import kiln  # noqa: E402
import kiln.numpy as jnp  # noqa: E402


@kiln.custom_jvp
def _softplus(x):
    return jnp.logaddexp(x, 0.0)


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _softplus(x), t * kiln.nn.sigmoid(x)


@kiln.custom_vjp
def _clip_grad(x):
    return x


_clip_grad.defvjp(lambda x: (x, None), lambda _, ct: (jnp.clip(ct, -0.05, 0.05),))


def _model(custom):
    act = _softplus if custom else (lambda x: jnp.logaddexp(x, 0.0))

    def layer(w, b, h):
        return act(h @ w + b)
    layer = kiln.checkpoint(layer) if custom else layer

    def loss(p, x, y):
        h = layer(p["w1"], p["b1"], x)
        out = h @ p["w2"] + p["b2"]
        return jnp.mean((out - y) ** 2)
    return loss


def _data():
    r = np.random.default_rng(7)
    X = r.normal(size=(16, 3)).astype(np.float32)
    Y = (np.sin(X[:, :1]) + X[:, 1:2] * X[:, 2:3]).astype(np.float32)
    p = {"w1": (r.normal(size=(3, 8)) * 0.5).astype(np.float32), "b1": np.zeros(8, np.float32),
         "w2": (r.normal(size=(8, 1)) * 0.5).astype(np.float32), "b2": np.zeros(1, np.float32)}
    return kiln.tree_util.tree_map(jnp.asarray, p), jnp.asarray(X), jnp.asarray(Y)


def test_training_with_remat_and_custom_rules_matches_the_plain_program():
    params, X, Y = _data()
    runs = {}
    for custom in (True, False):
        loss = _model(custom)

        @kiln.jit
        def update(p, x, y):
            l, g = kiln.value_and_grad(loss)(p, x, y)
            return kiln.tree_util.tree_map(lambda a, b: a - 0.2 * b, p, g), l
        p, losses = params, []
        for _ in range(30):
            p, l = update(p, X, Y)
            losses.append(float(l))
        runs[custom] = (p, losses)
    assert runs[True][1][-1] < 0.5 * runs[True][1][0]
    np.testing.assert_allclose(runs[True][1], runs[False][1], rtol=2e-5)
    for k in params:
        np.testing.assert_allclose(np.asarray(runs[True][0][k]), np.asarray(runs[False][0][k]), rtol=1e-4, atol=1e-5)


def test_per_example_gradients_with_custom_rules_match_a_python_loop():
    params, X, Y = _data()
    loss = _model(True)

    def single(p, x, y):  # one example, its gradient clipped elementwise by a custom_vjp
        return loss(kiln.tree_util.tree_map(_clip_grad, p), x[None], y[None])
    per_ex = kiln.jit(kiln.vmap(kiln.grad(single), in_axes=(None, 0, 0)))(params, X, Y)
    for i in range(X.shape[0]):
        gi = kiln.grad(single)(params, X[i], Y[i])
        for k in params:
            np.testing.assert_allclose(np.asarray(per_ex[k][i]), np.asarray(gi[k]), rtol=1e-5, atol=1e-7)
            assert float(jnp.max(jnp.abs(per_ex[k][i]))) <= 0.05 + 1e-7
    # the clipping is what the gradients went through: the plain gradient is larger somewhere
    plain = kiln.grad(lambda p, x, y: loss(p, x[None], y[None]))(params, X[0], Y[0])
    assert max(float(jnp.max(jnp.abs(plain[k]))) for k in params) > 0.05


def test_newton_method_with_hessian_through_custom_jvp_and_checkpoint(x64):
    r = np.random.default_rng(3)
    A, b = jnp.asarray(r.normal(size=(6, 3))), jnp.asarray(r.normal(size=6))

    @kiln.checkpoint
    def f(x):
        return jnp.sum(_softplus(A @ x - b)) + 0.5 * jnp.sum(x ** 2)
    plain = lambda x: jnp.sum(jnp.logaddexp(A @ x - b, 0.0)) + 0.5 * jnp.sum(x ** 2)
    x0 = jnp.asarray([0.3, -0.2, 0.1])
    np.testing.assert_allclose(np.asarray(kiln.hessian(f)(x0)), np.asarray(kiln.hessian(plain)(x0)), rtol=1e-12)
    step = kiln.jit(lambda x: x - jnp.linalg.solve(kiln.hessian(f)(x), kiln.grad(f)(x)))
    x = jnp.zeros(3)
    for _ in range(8):
        x = step(x)
    assert float(jnp.linalg.norm(kiln.grad(plain)(x))) < 1e-12
