"""examples/bayes.py (Bayesian logistic regression: a MAP by minibatch SGD, then four vmapped chains of
MALA + a Gibbs draw of the prior's precision in a jitted scan, reported by tree path): the posterior
recovers the synthetic data's coefficients, the sampler accepts at MALA's usual rate, the progress
lines of jax.debug.print come out, the pure_callback runs once per vmapped batch, and the numbers
are JAX's. Needs no JAX: its numbers are pinned below."""
import contextlib
import importlib.util
import io
import os

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "bayes.py")
_spec = importlib.util.spec_from_file_location("bayes_example", _PATH)
bayes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bayes)

STEPS, PRINT_EVERY = 400, 100

# JAX 0.10.2 on the CPU, running bayes.run(jax, jnp, lax, steps=400, print_every=100) from the same
# file (kiln agreed to 1e-6 relative on every number; over 4 x 4000 steps the draws stayed within
# 2e-6 of JAX's, with the same accept decisions).
JAX_MAP_W = [1.6935999, -1.8993969, 0.10286439, 0.70658165, 1.342489, -1.060037]
JAX_MAP_B = -0.52062714
JAX_ACCEPTANCE = [0.5925, 0.6, 0.5925, 0.63]
JAX_MEAN_W = [1.8694688, -2.0763924, 0.10916375, 0.78996933, 1.7717879, -0.84319133]
JAX_MEAN_B = -0.84537971
JAX_MEAN_PRECISION = 0.61140168
JAX_ELPD = -0.34251902
JAX_PPC_PVALUE = [0.485, 0.49, 0.6325]


@pytest.fixture(scope="module")
def program():
    """The program's result and everything it printed, the debug.print lines included."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = bayes.run(kiln, jnp, lax, steps=STEPS, print_every=PRINT_EVERY)
        kiln.effects_barrier()
    return result, out.getvalue()


def test_numbers_are_jax_numbers(program):
    r, _ = program
    np.testing.assert_allclose(r.map_coef["w"], JAX_MAP_W, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(r.map_coef["b"], JAX_MAP_B, rtol=1e-4)
    np.testing.assert_allclose(r.acceptance, JAX_ACCEPTANCE, rtol=1e-6)  # same accept decisions
    np.testing.assert_allclose(r.mean.coef["w"], JAX_MEAN_W, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(r.mean.coef["b"], JAX_MEAN_B, rtol=1e-4)
    np.testing.assert_allclose(r.mean.precision, JAX_MEAN_PRECISION, rtol=1e-4)
    np.testing.assert_allclose(r.elpd, JAX_ELPD, rtol=1e-4)
    # counts of replicated label sets: one Bernoulli draw flipped by an ulp moves a p-value by 1/400
    np.testing.assert_allclose(r.ppc_pvalue, JAX_PPC_PVALUE, atol=2.5 / bayes.PPC_DRAWS)


def test_posterior_recovers_the_true_coefficients(program):
    r, _ = program
    true = np.array(bayes.TRUE_W + (bayes.TRUE_B,))
    draws = np.concatenate([r.draws.coef["w"].reshape(-1, len(bayes.TRUE_W)),
                            r.draws.coef["b"].reshape(-1, 1)], axis=1)
    mean, sd = draws.mean(axis=0), draws.std(axis=0)
    assert np.all(np.abs(mean - true) < 3 * sd), (mean, sd, true)
    lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
    assert np.array_equal(lo > 0, true > 0) and np.array_equal(hi < 0, true < 0), (lo, hi, true)  # signs found
    assert np.all(r.draws.precision > 0)
    # near the truth, hence near its held-out density; far better than a coin (log 1/2 = -0.693)
    assert abs(r.elpd - r.elpd_truth) < 0.02 and r.elpd > -0.45, (r.elpd, r.elpd_truth)
    assert np.all((r.ppc_pvalue > 0.05) & (r.ppc_pvalue < 0.95)), r.ppc_pvalue


def test_sampler_accepts_at_malas_rate(program):
    r, _ = program
    assert r.acceptance.shape == (bayes.CHAINS,)
    assert np.all((r.acceptance > 0.4) & (r.acceptance < 0.8)), r.acceptance
    kept = STEPS - STEPS // 4
    assert r.draws.coef["w"].shape == (bayes.CHAINS, kept, len(bayes.TRUE_W))
    # the chains move: a stuck chain repeats its draw
    assert all(len(np.unique(r.draws.coef["b"][c])) > kept // 3 for c in range(bayes.CHAINS))


def test_summary_names_every_coordinate_by_its_tree_path(program):
    r, _ = program
    names = [".coef['b']"] + [f".coef['w'][{j}]" for j in range(len(bayes.TRUE_W))] + [".precision"]
    assert list(r.summary) == names
    assert isinstance(r.draws, bayes.Params) and isinstance(r.mean, bayes.Params)
    mean, sd, lo, hi, rhat, true = r.summary[".coef['w'][1]"]
    assert lo < mean < hi and sd > 0 and true == bayes.TRUE_W[1] and 0.9 < rhat < 1.5
    assert np.isnan(r.summary[".precision"][5])  # no true value


def test_debug_print_reports_progress_every_print_every_steps(program):
    _, out = program
    lines = [ln for ln in out.splitlines() if ln.startswith("chain ")]
    assert len(lines) == bayes.CHAINS * STEPS // PRINT_EVERY, out
    assert lines[0].startswith("chain 0 step   100: log posterior")
    steps = sorted({int(ln.split()[3].rstrip(":")) for ln in lines})
    assert steps == list(range(PRINT_EVERY, STEPS + 1, PRINT_EVERY))


def test_pure_callback_sees_the_whole_batch_once(monkeypatch):
    # vmap_method="expand_dims": one host call for all draws, the draws' logits (S, n) and the
    # unbatched labels with a leading 1
    calls, original = [], bayes.host_log_likelihood

    def host(z, y):
        calls.append((z.shape, y.shape))
        return original(z, y)
    monkeypatch.setattr(bayes, "host_log_likelihood", host)
    model = bayes.make_model(kiln, jnp, lax)
    r = np.random.default_rng(0)
    x, y = r.normal(size=(5, 6)).astype(np.float32), (r.random(5) < 0.5).astype(np.float32)
    coefs = {"w": r.normal(size=(3, 6)).astype(np.float32), "b": r.normal(size=3).astype(np.float32)}
    got = float(model.heldout(coefs, bayes.Data(jnp.asarray(x), jnp.asarray(y), jnp.zeros(5, jnp.int32))))
    assert calls == [((3, 5), (1, 5))]
    z = (x @ coefs["w"].T + coefs["b"]).T.astype(np.float64)
    ll = y * -np.logaddexp(0, -z) + (1 - y) * -np.logaddexp(0, z)
    want = np.mean(np.log(np.mean(np.exp(ll), axis=0)))
    np.testing.assert_allclose(got, want, rtol=1e-5)
