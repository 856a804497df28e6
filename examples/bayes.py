"""Bayesian logistic regression by MCMC, written against JAX's API: the same code runs on kiln
(`import kiln as jax`) and, with --jax, on JAX, and prints JAX's numbers.

The data are synthetic and drawn with jax.random from one typed key (jax.random.key): four normal
features and a three-level group (proportions from a Dirichlet, levels from a categorical,
dummy-coded), labels from a Bernoulli through the true coefficients; a permutation splits off a
held-out set. The model: y ~ Bernoulli(sigmoid(x @ w + b)), w ~ Normal(0, 1 / precision),
precision ~ Gamma(2, rate 2), b ~ Normal(0, 5^2). The parameters are a registered dataclass
holding a nested dict, so every report names its numbers by their tree path (keystr).

1. A MAP estimate by minibatch SGD (a permutation per epoch, lax.scan over epochs and batches).
2. Four chains, started around the MAP and run at once under vmap, of a Metropolis-within-Gibbs
   sampler in one jitted lax.scan: a MALA step (normal proposal, uniform accept) for (w, b), then
   an exact Gibbs draw of the precision from its Gamma conditional. Every PRINT_EVERY steps a
   lax.cond runs jax.debug.print with the chain's log posterior and acceptance rate.
3. The posterior by path (tree_map_with_path): mean, sd, 90 % interval and split R-hat per
   coordinate; the held-out log predictive density, whose log-likelihoods SciPy computes on the
   host (jax.pure_callback with scipy.special.log_expit, vmapped over the draws with
   vmap_method="expand_dims"); a posterior predictive check of each group's positive rate from
   draws picked by jax.random.choice and labels redrawn by jax.random.bernoulli.

    python3 examples/bayes.py [--steps 4000] [--jax]

run(jax, jnp, lax, steps) does the whole program over the given modules and returns a Result;
tests/test_example_bayes.py uses it.
"""
import argparse
import dataclasses
import functools
import time
from typing import Any, NamedTuple

import numpy as np
import scipy.special

FEATURES = 4                          # continuous features; the group adds GROUPS - 1 dummies
GROUPS = 3
TRUE_W = (1.5, -2.0, 0.0, 0.7, 1.0, -1.2)   # the four features, then groups 1 and 2 against group 0
TRUE_B = -0.5
N_TRAIN, N_TEST = 400, 200
PRIOR_SHAPE, PRIOR_RATE = 2.0, 2.0    # Gamma prior of the weights' precision
BIAS_SCALE = 5.0                      # sd of the bias's normal prior
SGD_EPOCHS, BATCH, LEARNING_RATE = 30, 50, 0.5
CHAINS, STEPS, STEP_SIZE = 4, 4000, 0.18
PRINT_EVERY = 1000                    # steps between the chains' progress lines
PPC_DRAWS = 400                       # posterior predictive replicates
SEED = 0


@dataclasses.dataclass
class Params:
    coef: Any                         # {"w": (features,), "b": ()}: what MALA moves
    precision: Any                    # () precision of w's prior, drawn by Gibbs


_registered = set()


def register(jax):
    """Makes Params a pytree of the given module (once per module: kiln and JAX each keep their own
    registry)."""
    if jax.__name__ not in _registered:
        jax.tree_util.register_dataclass(Params, data_fields=["coef", "precision"], meta_fields=[])
        _registered.add(jax.__name__)


class Data(NamedTuple):
    x: Any                            # (n, features) float32
    y: Any                            # (n,) float32 labels 0 / 1
    group: Any                        # (n,) int32 group of each row


def make_data(jax, jnp, key):
    """Training and held-out Data drawn from the model at the true coefficients (jit it: eagerly
    each sampler would compile on its own)."""
    k_x, k_mix, k_group, k_y, k_split = jax.random.split(key, 5)
    n = N_TRAIN + N_TEST
    mix = jax.random.dirichlet(k_mix, jnp.full((GROUPS,), 2.0))
    group = jax.random.categorical(k_group, jnp.log(mix), shape=(n,))
    x = jnp.concatenate([jax.random.normal(k_x, (n, FEATURES)),
                         jax.nn.one_hot(group, GROUPS)[:, 1:]], axis=1)
    y = jax.random.bernoulli(k_y, jax.nn.sigmoid(x @ jnp.array(TRUE_W) + TRUE_B)).astype(jnp.float32)
    order = jax.random.permutation(k_split, n)
    train, test = order[:N_TRAIN], order[N_TRAIN:]
    return Data(x[train], y[train], group[train]), Data(x[test], y[test], group[test])


class Model(NamedTuple):
    log_likelihood: object            # (coef, x, y) -> sum of log p(y | x, coef)
    log_prior: object                 # (coef, precision) -> log p(coef | precision)
    fit_map: object                   # (key, data) -> coef, jitted
    sample: object                    # (keys, inits, chain ids, data, steps) -> (draws, acceptance), vmapped, jitted
    heldout: object                   # (coef draws, data) -> log pointwise predictive density, jitted
    ppc: object                       # (key, coef draws, data) -> replicated positives per group, jitted


def make_model(jax, jnp, lax, step_size=STEP_SIZE, print_every=PRINT_EVERY):
    """The model and its inference over the given JAX-like modules."""
    register(jax)

    def logits(coef, x):
        return x @ coef["w"] + coef["b"]

    def log_likelihood(coef, x, y):
        z = logits(coef, x)
        return jnp.sum(y * z - jnp.logaddexp(0.0, z))

    def log_prior(coef, precision):
        w = coef["w"]
        return (0.5 * w.shape[0] * jnp.log(precision) - 0.5 * precision * jnp.sum(w * w)
                - 0.5 * (coef["b"] / BIAS_SCALE) ** 2)

    def fit_map(key, data):
        """Minibatch SGD on the mean negative log posterior, the prior's precision at its mean."""
        n = data.y.shape[0]
        batches = n // BATCH
        precision = PRIOR_SHAPE / PRIOR_RATE

        def loss(coef, x, y):
            return -(log_likelihood(coef, x, y) * (n / x.shape[0]) + log_prior(coef, precision)) / n

        def sgd(coef, batch):
            grads = jax.grad(loss)(coef, *batch)
            return jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, coef, grads), None

        def epoch(coef, key):
            order = jax.random.permutation(key, n)[:batches * BATCH].reshape(batches, BATCH)
            coef, _ = lax.scan(sgd, coef, (data.x[order], data.y[order]))
            return coef, None

        coef = {"w": jnp.zeros(data.x.shape[1]), "b": jnp.zeros(())}
        coef, _ = lax.scan(epoch, coef, jax.random.split(key, SGD_EPOCHS))
        return coef

    def mala(key, coef, precision, x, y):
        """One Metropolis-adjusted Langevin step for coef given precision: (coef, accepted)."""
        def target(c):
            return log_likelihood(c, x, y) + log_prior(c, precision)

        def drift(c, g):
            return jax.tree_util.tree_map(lambda p, d: p + 0.5 * step_size ** 2 * d, c, g)

        def log_q(to, frm, g_frm):  # log density (up to a constant) of proposing `to` from `frm`
            mean = drift(frm, g_frm)
            sq = jax.tree_util.tree_map(lambda a, m: jnp.sum((a - m) ** 2), to, mean)
            return -sum(jax.tree_util.tree_leaves(sq)) / (2 * step_size ** 2)

        k_noise, k_accept = jax.random.split(key)
        leaves, tree = jax.tree_util.tree_flatten(coef)
        noise = [jax.random.normal(k, leaf.shape) for k, leaf in
                 zip(jax.random.split(k_noise, len(leaves)), leaves)]
        lp, g = jax.value_and_grad(target)(coef)
        proposal = jax.tree_util.tree_map(lambda m, e: m + step_size * e, drift(coef, g),
                                          jax.tree_util.tree_unflatten(tree, noise))
        lp_new, g_new = jax.value_and_grad(target)(proposal)
        log_ratio = lp_new - lp + log_q(coef, proposal, g_new) - log_q(proposal, coef, g)
        accept = jnp.log(jax.random.uniform(k_accept)) < log_ratio
        coef = jax.tree_util.tree_map(lambda new, old: jnp.where(accept, new, old), proposal, coef)
        return coef, accept

    def gibbs_precision(key, w):
        """An exact draw from precision's conditional, Gamma(a + d/2, rate b + |w|^2 / 2)."""
        shape = PRIOR_SHAPE + 0.5 * w.shape[0]
        return jax.random.gamma(key, shape) / (PRIOR_RATE + 0.5 * jnp.sum(w * w))

    def chain(key, init, chain_id, data, steps):
        """One chain of `steps` transitions from init: the draws (a Params, each leaf with a leading
        steps axis) and the acceptance rate."""
        def transition(carry, xs):
            params, accepted = carry
            i, key = xs
            k_mala, k_gibbs = jax.random.split(key)
            coef, ok = mala(k_mala, params.coef, params.precision, data.x, data.y)
            params = Params(coef, gibbs_precision(k_gibbs, coef["w"]))
            accepted = accepted + ok.astype(jnp.int32)
            lax.cond((i + 1) % print_every == 0,
                     lambda: jax.debug.print(
                         "chain {c} step {s:5d}: log posterior {lp:9.3f}, acceptance {a:.3f}, "
                         "precision {p:.3f}", ordered=True, c=chain_id, s=i + 1,
                         lp=log_likelihood(coef, data.x, data.y) + log_prior(coef, params.precision),
                         a=accepted / (i + 1), p=params.precision),
                     lambda: None)
            return (params, accepted), params

        xs = (jnp.arange(steps), jax.random.split(key, steps))
        (_, accepted), draws = lax.scan(transition, (init, jnp.zeros((), jnp.int32)), xs)
        return draws, accepted / steps

    @jax.jit
    def heldout(coefs, data):
        """The mean over data's rows of log E[p(y | x, coef)], the expectation over the draws in
        coefs (leading axis): the log pointwise predictive density. SciPy computes each draw's
        log p(y | x, coef) on the host."""
        n = data.y.shape[0]

        def one(coef):
            return jax.pure_callback(host_log_likelihood, jax.ShapeDtypeStruct((n,), jnp.float32),
                                     logits(coef, data.x), data.y, vmap_method="expand_dims")
        ll = jax.vmap(one)(coefs)
        return jnp.mean(jax.scipy.special.logsumexp(ll, axis=0) - jnp.log(ll.shape[0]))

    @jax.jit
    def ppc(key, coefs, data):
        """Each group's count of positive labels in PPC_DRAWS replicated label sets, each drawn from
        a posterior draw picked at random: (PPC_DRAWS, GROUPS)."""
        k_pick, k_rep = jax.random.split(key)
        picks = jax.random.choice(k_pick, coefs["b"].shape[0], (PPC_DRAWS,))
        members = jax.nn.one_hot(data.group, GROUPS)

        def replicate(k, i):
            coef = jax.tree_util.tree_map(lambda a: a[i], coefs)
            y_rep = jax.random.bernoulli(k, jax.nn.sigmoid(logits(coef, data.x))).astype(jnp.float32)
            return y_rep @ members
        return jax.vmap(replicate)(jax.random.split(k_rep, PPC_DRAWS), picks)

    sample = jax.jit(jax.vmap(chain, in_axes=(0, 0, 0, None, None)), static_argnums=4)
    return Model(log_likelihood, log_prior, jax.jit(fit_map), sample, heldout, ppc)


def host_log_likelihood(z, y):
    """NumPy/SciPy on the host: log p(y | logits z) per element. Under vmap with
    vmap_method="expand_dims" z arrives as (draws, n) and y as (1, n)."""
    return (y * scipy.special.log_expit(z) + (1 - y) * scipy.special.log_expit(-z)).astype(np.float32)


def split_rhat(draws):
    """Gelman-Rubin's split R-hat of (chains, steps, ...) draws, per coordinate (NumPy)."""
    half = draws.shape[1] // 2
    halves = np.concatenate([draws[:, :half], draws[:, half:2 * half]], axis=0).astype(np.float64)
    within = halves.var(axis=1, ddof=1).mean(axis=0)
    between = half * halves.mean(axis=1).var(axis=0, ddof=1)
    return np.sqrt(((half - 1) / half * within + between / half) / within)


class Result(NamedTuple):
    map_coef: dict                    # the SGD estimate, NumPy
    acceptance: np.ndarray            # (CHAINS,) MALA acceptance rate of each chain
    draws: Params                     # kept draws, NumPy, each leaf (CHAINS, kept, ...)
    mean: Params                      # posterior means, NumPy
    summary: dict                     # keystr(path) + index -> (mean, sd, q05, q95, rhat, truth)
    elpd: float                       # held-out log pointwise predictive density, per example
    elpd_truth: float                 # the same at the true coefficients
    ppc_observed: np.ndarray          # (GROUPS,) observed positive rate per group
    ppc_pvalue: np.ndarray            # (GROUPS,) P(replicated rate >= observed)


def summarize(jax, draws, truth):
    """Per coordinate of every leaf, by tree path: {keystr(path) + index: (posterior mean, sd, 5 %
    and 95 % quantiles, split R-hat, true value)}; and the posterior means, a tree like draws."""
    rows = {}

    def leaf(path, d, t):
        d = np.asarray(d)
        flat, t = d.reshape(d.shape[:2] + (-1,)), np.broadcast_to(t, d.shape[2:]).reshape(-1)
        pooled, rhat = flat.reshape(-1, flat.shape[-1]), split_rhat(flat)
        for j in range(flat.shape[-1]):
            label = jax.tree_util.keystr(path) + (f"[{j}]" if d.ndim > 2 else "")
            rows[label] = (pooled[:, j].mean(), pooled[:, j].std(), *np.quantile(pooled[:, j], [0.05, 0.95]),
                           rhat[j], t[j])
        return pooled.mean(axis=0).reshape(d.shape[2:])
    means = jax.tree_util.tree_map_with_path(leaf, draws, truth)
    return rows, means


def run(jax, jnp, lax, steps=STEPS, seed=SEED, print_every=PRINT_EVERY, verbose=True):
    """The whole program: data, MAP, chains, summary. Prints as it goes when verbose (the chains'
    progress lines come from debug.print whatever verbose says)."""
    say = print if verbose else (lambda *a, **k: None)
    model = make_model(jax, jnp, lax, print_every=print_every)
    key = jax.random.key(seed)
    k_data, k_map, k_init, k_chain, k_ppc = jax.random.split(key, 5)
    train, test = jax.jit(functools.partial(make_data, jax, jnp))(k_data)
    counts = np.bincount(np.asarray(train.group), minlength=GROUPS)
    say(f"data: {N_TRAIN} training rows ({np.asarray(train.y).mean():.3f} positive; groups {counts.tolist()}), "
        f"{N_TEST} held out")

    coef = model.fit_map(k_map, train)
    map_coef = jax.tree_util.tree_map(np.asarray, coef)
    say("MAP by SGD:", ", ".join(f"{jax.tree_util.keystr(p)} {np.round(np.asarray(v, np.float64), 3)}"
                                 for p, v in jax.tree_util.tree_flatten_with_path(map_coef)[0]))

    # chains start from the MAP jittered by a N(0, 0.5^2) per coordinate and the prior's mean precision
    def jitter(k, c):
        leaves, tree = jax.tree_util.tree_flatten(c)
        ks = jax.random.split(k, len(leaves))
        return jax.tree_util.tree_unflatten(
            tree, [x + 0.5 * jax.random.normal(kk, (CHAINS,) + x.shape) for kk, x in zip(ks, leaves)])
    inits = Params(jitter(k_init, coef), jnp.full((CHAINS,), PRIOR_SHAPE / PRIOR_RATE))
    draws, acceptance = model.sample(jax.random.split(k_chain, CHAINS), inits, jnp.arange(CHAINS), train, steps)
    jax.block_until_ready(draws)
    jax.effects_barrier()
    burn = steps // 4
    kept = jax.tree_util.tree_map(lambda a: np.asarray(a)[:, burn:], draws)
    acceptance = np.asarray(acceptance)
    say(f"acceptance per chain {np.round(acceptance, 3)}; {steps - burn} draws kept per chain")

    truth = Params({"w": np.array(TRUE_W, np.float32), "b": np.float32(TRUE_B)}, np.float32(np.nan))
    rows, means = summarize(jax, kept, truth)
    say(f"{'parameter':<16}{'mean':>8}{'sd':>8}{'5%':>8}{'95%':>8}{'R-hat':>8}{'true':>8}")
    for name, (mean, sd, lo, hi, rhat, t) in rows.items():
        say(f"{name:<16}{mean:8.3f}{sd:8.3f}{lo:8.3f}{hi:8.3f}{rhat:8.3f}{t:8.2f}")

    flat = jax.tree_util.tree_map(lambda a: jnp.asarray(a.reshape((-1,) + a.shape[2:])), kept.coef)
    elpd = float(model.heldout(flat, test))
    z_true = np.asarray(test.x) @ np.array(TRUE_W, np.float32) + np.float32(TRUE_B)
    elpd_truth = float(host_log_likelihood(z_true, np.asarray(test.y)).mean())
    say(f"held-out log predictive density {elpd:.4f} per example (at the true coefficients {elpd_truth:.4f})")

    replicated = np.asarray(model.ppc(k_ppc, flat, train))
    observed = np.bincount(np.asarray(train.group), weights=np.asarray(train.y), minlength=GROUPS)
    pvalue = (replicated >= observed).mean(axis=0)
    say(f"posterior predictive check, positive rate per group: observed {np.round(observed / counts, 3)}, "
        f"replicated {np.round(replicated.mean(axis=0) / counts, 3)}, p-value {np.round(pvalue, 3)}")
    return Result(map_coef, acceptance, kept, means, rows, elpd, elpd_truth, observed / counts, pvalue)


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
    print(f"Bayesian logistic regression on {jax.devices()[0]} ({jax.__name__} {jax.__version__}): "
          f"{CHAINS} chains x {args.steps} steps of MALA (step {STEP_SIZE}) + Gibbs for the prior's precision")
    t0 = time.perf_counter()
    run(jax, jnp, lax, args.steps)
    print(f"{time.perf_counter() - t0:.2f} s in all")


if __name__ == "__main__":
    main()
