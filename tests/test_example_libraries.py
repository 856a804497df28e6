"""kiln.example_libraries (stax, optimizers) against JAX 0.10.2's jax.example_libraries.

The JAX comparisons build the same network / run the same optimizer on both sides from the same key
and inputs; they skip when JAX is missing. The NumPy tests at the end need only kiln.
"""
import random as pyrandom

import numpy as np
import pytest

import kiln
import kiln.numpy as kjnp
from kiln import random as krandom
from kiln.example_libraries import optimizers as kopt
from kiln.example_libraries import stax as kstax


def _seed():
    return pyrandom.randrange(2**31)


def _leaves(tree, lib):
    return [np.asarray(x) for x in lib.tree_util.tree_leaves(tree)]


def _assert_trees_close(kiln_tree, jax_tree, jax, tol, what):
    k, j = _leaves(kiln_tree, kiln), _leaves(jax_tree, jax)
    assert len(k) == len(j), what
    for a, b in zip(k, j):
        assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=what)


def _both(build):
    """build(stax) on kiln's and JAX's stax."""
    from jax.example_libraries import stax as jstax
    return build(kstax), build(jstax)


def _init_and_apply(build, input_shape, seed, apply_kwargs=lambda lib, key: {}, out_tol=1e-5):
    """Same key on both sides -> same output shape and params and same outputs.

    Params: 2e-5 relative. Normal initializers go through erf_inv, where XLA's f32 polynomial is up to
    about 65 ulp off in the tail (|x| > 0.9998) and kiln's within 3 ulp, so tail samples differ by a
    few 1e-6 relative (seen: 4.4e-6 at 3.8 sigma)."""
    jax = pytest.importorskip("jax")
    (k_init, k_apply), (j_init, j_apply) = _both(build)
    k_shape, k_params = k_init(krandom.PRNGKey(seed), input_shape)
    j_shape, j_params = j_init(jax.random.PRNGKey(seed), input_shape)
    assert tuple(k_shape) == tuple(j_shape)
    _assert_trees_close(k_params, j_params, jax, 2e-5, f"params, seed {seed}")
    x = np.random.default_rng(seed).standard_normal(input_shape).astype(np.float32)
    k_out = k_apply(k_params, kjnp.asarray(x), **apply_kwargs(krandom, seed))
    j_out = j_apply(j_params, jax.numpy.asarray(x), **apply_kwargs(jax.random, seed))
    _assert_trees_close(k_out, j_out, jax, out_tol, f"outputs, seed {seed}")
    return k_out


def test_mlp_params_and_outputs_match_jax():
    def mlp(stax):
        return stax.serial(stax.Dense(32), stax.Relu, stax.Dense(16), stax.Tanh,
                           stax.Dense(8, W_init=stax.randn(0.3)), stax.Elu, stax.Dense(5),
                           stax.LogSoftmax)
    out = _init_and_apply(mlp, (7, 12), _seed())
    assert out.shape == (7, 5)


def test_cnn_params_and_outputs_match_jax():
    def cnn(stax):
        return stax.serial(
            stax.Conv(6, (3, 3), padding="SAME"), stax.BatchNorm(), stax.Relu,
            stax.MaxPool((2, 2), strides=(2, 2)),
            stax.Conv(5, (3, 2), strides=(2, 1)), stax.Gelu,
            stax.AvgPool((2, 2), padding="SAME"), stax.SumPool((1, 2)),
            stax.Flatten, stax.Dense(10), stax.Softmax)
    out = _init_and_apply(cnn, (3, 16, 12, 2), _seed())
    assert out.shape == (3, 10)


def test_transposed_and_general_convolutions_match_jax():
    seed = _seed()

    def nets(stax):
        return stax.serial(stax.ConvTranspose(4, (3, 3), strides=(2, 2), padding="SAME"),
                           stax.Sigmoid,
                           stax.GeneralConv(("NHWC", "OIHW", "NHWC"), 3, (2, 2)),
                           stax.AvgPool((3, 3), strides=(2, 1), padding="SAME"))
    _init_and_apply(nets, (2, 5, 6, 3), seed)

    def nets1d(stax):
        return stax.serial(stax.Conv1DTranspose(4, (3,), strides=(2,)), stax.Softplus,
                           stax.BatchNorm(axis=(0, 1), center=False),
                           stax.MaxPool((2,), padding="SAME"))
    _init_and_apply(nets1d, (2, 7, 3), seed)

    def nchw(stax):
        return stax.serial(stax.GeneralConv(("NCHW", "OIHW", "NCHW"), 4, (3, 3), padding="SAME"),
                           stax.BatchNorm(axis=(0, 2, 3), scale=False),
                           stax.AvgPool((2, 2), spec="NCHW", padding="SAME"))
    _init_and_apply(nchw, (2, 3, 5, 6), seed)


def test_combinators_and_elementwise_layers_match_jax():
    def net(stax):
        branch = stax.serial(stax.Dense(6), stax.Selu)
        residual = stax.serial(stax.FanOut(2), stax.parallel(branch, stax.Dense(6)), stax.FanInSum)
        concat = stax.serial(stax.FanOut(3),
                             stax.parallel(stax.Identity, stax.Exp,
                                           stax.shape_dependent(lambda s: stax.Dense(s[-1] + 1))),
                             stax.FanInConcat())
        return stax.serial(stax.Dense(6), residual, stax.LeakyRelu, concat,
                           stax.Dense(4), stax.Softmax)
    out = _init_and_apply(net, (5, 3), _seed())
    assert out.shape == (5, 4)


@pytest.mark.parametrize("mode", ["train", "test"])
def test_dropout_matches_jax(mode):
    def net(stax):
        return stax.serial(stax.Dense(9), stax.Dropout(0.7, mode=mode), stax.Dense(3))
    _init_and_apply(net, (4, 6), _seed(),
                    apply_kwargs=lambda random, seed: {"rng": random.PRNGKey(seed + 1)})
    init, apply = kstax.Dropout(0.5)
    with pytest.raises(ValueError, match="PRNG key"):
        apply((), kjnp.ones((2, 2)))


def test_parallel_init_returns_shapes_and_params():
    init, _ = kstax.parallel(kstax.Dense(3), kstax.Identity)
    shapes, params = init(krandom.PRNGKey(0), [(2, 4), (2, 5)])
    assert tuple(shapes) == ((2, 3), (2, 5))
    assert params[1] == ()


_QUADRATIC_TARGET = np.array([[0.5, -1.0, 2.0], [1.5, 0.0, -0.25]], np.float32)


def _optimizer_cases(opt):
    return [
        ("sgd", opt.sgd(0.1)),
        ("sgd-exp-decay", opt.sgd(opt.exponential_decay(0.2, 2, 0.5))),
        ("momentum", opt.momentum(0.05, 0.9)),
        ("nesterov", opt.nesterov(opt.inverse_time_decay(0.05, 3, 0.5), 0.8)),
        ("nesterov-staircase", opt.nesterov(opt.inverse_time_decay(0.05, 2, 0.5, staircase=True), 0.8)),
        ("adagrad", opt.adagrad(0.3)),
        ("rmsprop", opt.rmsprop(opt.polynomial_decay(0.05, 4, 0.01, power=2.0))),
        ("rmsprop_momentum", opt.rmsprop_momentum(0.01)),
        ("adam", opt.adam(opt.piecewise_constant([1, 3], [0.1, 0.05, 0.02]))),
        ("adamax", opt.adamax(0.1)),
        ("sm3", opt.sm3(0.2)),
    ]


def _run_optimizer(lib, triple, params, steps=5):
    """`steps` updates on sum((w - target)**2) + sum(b**2) + c**2, gradients computed by `lib`."""
    init, update, get_params = triple
    target = lib.numpy.asarray(_QUADRATIC_TARGET)

    def loss(p):
        return (lib.numpy.sum((p["w"] - target) ** 2) + lib.numpy.sum(p["b"] ** 2) + p["c"] ** 2)
    state = init(params)
    for i in range(steps):
        state = update(i, lib.grad(loss)(get_params(state)), state)
    return get_params(state)


def test_each_optimizer_matches_jax_after_five_steps():
    jax = pytest.importorskip("jax")
    from jax.example_libraries import optimizers as jopt
    rng = np.random.default_rng(_seed())
    start = {"w": rng.standard_normal((2, 3)).astype(np.float32),
             "b": rng.standard_normal(4).astype(np.float32),
             "c": np.float32(rng.standard_normal())}
    for (name, k_triple), (_, j_triple) in zip(_optimizer_cases(kopt), _optimizer_cases(jopt)):
        k_params = _run_optimizer(kiln, k_triple, kiln.tree_util.tree_map(kjnp.asarray, start))
        j_params = _run_optimizer(jax, j_triple, jax.tree_util.tree_map(jax.numpy.asarray, start))
        _assert_trees_close(k_params, j_params, jax, 1e-5, name)
        # and the parameters moved: a test that cannot fail is no test
        assert not np.allclose(np.asarray(k_params["w"]), start["w"]), name


def test_optimizer_state_is_a_pytree_through_jit_and_pack_unpack():
    rng = np.random.default_rng(_seed())
    params = (kjnp.asarray(rng.standard_normal(3).astype(np.float32)),
              {"a": kjnp.asarray(rng.standard_normal((2, 2)).astype(np.float32))})
    init, update, get_params = kopt.adam(0.1)
    state = init(params)
    assert isinstance(state, kopt.OptimizerState)
    assert len(kiln.tree_util.tree_leaves(state)) == 6
    grads = kiln.tree_util.tree_map(lambda x: 2 * x, params)
    eager = update(0, grads, state)
    jitted = kiln.jit(update)(0, grads, state)
    for a, b in zip(kiln.tree_util.tree_leaves(eager), kiln.tree_util.tree_leaves(jitted)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    marked = kopt.unpack_optimizer_state(eager)
    assert isinstance(marked[0], kopt.JoinPoint)
    repacked = kopt.pack_optimizer_state(marked)
    assert repacked.tree_def == eager.tree_def and repacked.subtree_defs == eager.subtree_defs
    for a, b in zip(kiln.tree_util.tree_leaves(repacked), kiln.tree_util.tree_leaves(eager)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(TypeError, match="structure"):
        update(1, [grads[0]], eager)


def test_clip_grads_l2_norm_and_make_schedule_match_numpy():
    rng = np.random.default_rng(_seed())
    tree = {"x": rng.standard_normal(4).astype(np.float32),
            "y": [rng.standard_normal((2, 3)).astype(np.float32)]}
    norm = np.sqrt(np.sum(tree["x"].astype(np.float64) ** 2) + np.sum(tree["y"][0].astype(np.float64) ** 2))
    ktree = kiln.tree_util.tree_map(kjnp.asarray, tree)
    np.testing.assert_allclose(float(kopt.l2_norm(ktree)), norm, rtol=1e-5)
    clipped = kopt.clip_grads(ktree, norm / 2)
    np.testing.assert_allclose(np.asarray(clipped["x"]), tree["x"] / 2, rtol=1e-5)
    kept = kopt.clip_grads(ktree, norm * 2)
    np.testing.assert_allclose(np.asarray(kept["y"][0]), tree["y"][0], rtol=1e-6)
    assert kopt.make_schedule(0.3)(17) == 0.3
    with pytest.raises(TypeError):
        kopt.make_schedule([0.1, 0.2])
    schedule = kopt.piecewise_constant([2, 5], [1.0, 0.5, 0.25])
    assert [float(schedule(i)) for i in (0, 2, 3, 5, 6)] == [1.0, 1.0, 0.5, 0.5, 0.25]
    with pytest.raises(ValueError, match="one shorter"):
        kopt.piecewise_constant([1, 2], [1.0, 2.0])


def test_dense_matches_numpy_float64():
    seed = _seed()
    init, apply = kstax.Dense(5)
    shape, (W, b) = init(krandom.PRNGKey(seed), (3, 4))
    assert shape == (3, 5) and W.shape == (4, 5) and b.shape == (5,)
    # glorot_normal: truncated normal with std sqrt(2 / (fan_in + fan_out)), cut at 2 std
    bound = 2 * np.sqrt(2.0 / (4 + 5)) / 0.87962566103423978
    assert np.all(np.abs(np.asarray(W)) <= bound)
    x = np.random.default_rng(seed).standard_normal((3, 4))
    expected = x @ np.asarray(W, np.float64) + np.asarray(b, np.float64)
    got = apply((W, b), kjnp.asarray(x.astype(np.float32)))
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-6)


def test_adam_matches_numpy_float64():
    rng = np.random.default_rng(_seed())
    x = rng.standard_normal(6)
    grads = [rng.standard_normal(6) for _ in range(4)]
    lr, b1, b2, eps = 0.05, 0.8, 0.99, 1e-8
    m = np.zeros(6)
    v = np.zeros(6)
    ref = x.copy()
    for i, g in enumerate(grads):
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * g * g + b2 * v
        ref = ref - lr * (m / (1 - b1 ** (i + 1))) / (np.sqrt(v / (1 - b2 ** (i + 1))) + eps)
    init, update, get_params = kopt.adam(lr, b1, b2, eps)
    state = init(kjnp.asarray(x.astype(np.float32)))
    for i, g in enumerate(grads):
        state = update(i, kjnp.asarray(g.astype(np.float32)), state)
    np.testing.assert_allclose(np.asarray(get_params(state)), ref, rtol=1e-5, atol=1e-6)
