"""The rest of jax.nn in kiln.nn: the newer activations, logmeanexp, standardize's algorithms,
dot_product_attention (against a per-head NumPy float64 loop), the block-scaled matmuls, and
kiln.nn.initializers (exact for the constant ones, statistics, shapes and dtypes for the random ones,
since kiln.random is not pinned to JAX's bits here)."""

import math

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
import kiln.nn as nn
from kiln.nn import initializers as init


# (the x64 fixture is in conftest.py)

def _check(got, want, dtype, rtol=None, atol=None):
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    single = np.dtype(dtype) == np.float32
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol or (2e-5 if single else 1e-12),
                               atol=atol if atol is not None else (1e-6 if single else 1e-13))


# Every public name of jax.nn (JAX 0.10) and jax.nn.initializers.
JAX_NN_NAMES = [
    "celu", "dot_product_attention", "elu", "gelu", "get_scaled_dot_general_config", "glu", "hard_sigmoid",
    "hard_silu", "hard_swish", "hard_tanh", "identity", "initializers", "leaky_relu", "log1mexp", "log_sigmoid",
    "log_softmax", "logmeanexp", "logsumexp", "mish", "one_hot", "relu", "relu6", "scaled_dot_general",
    "scaled_matmul", "selu", "sigmoid", "silu", "soft_sign", "softmax", "softplus", "sparse_plus",
    "sparse_sigmoid", "squareplus", "standardize", "swish", "tanh"]
JAX_INITIALIZER_NAMES = [
    "Initializer", "constant", "delta_orthogonal", "glorot_normal", "glorot_uniform", "he_normal", "he_uniform",
    "kaiming_normal", "kaiming_uniform", "lecun_normal", "lecun_uniform", "normal", "ones", "orthogonal",
    "truncated_normal", "uniform", "variance_scaling", "xavier_normal", "xavier_uniform", "zeros"]


def test_every_jax_nn_name_exists():
    assert [n for n in JAX_NN_NAMES if not hasattr(nn, n)] == []
    assert [n for n in JAX_INITIALIZER_NAMES if not hasattr(init, n)] == []
    assert init.xavier_uniform is init.glorot_uniform and init.kaiming_normal is init.he_normal


# ---------------------------------------------------------------------------------------------------------
# activations

NEW_ACTIVATIONS = [
    ("identity", lambda x: x),
    ("tanh", np.tanh),
    ("squareplus", lambda x: (x + np.sqrt(x * x + 4)) / 2),
    ("sparse_plus", lambda x: np.where(x <= -1, 0.0, np.where(x >= 1, x, (x + 1) ** 2 / 4))),
    ("sparse_sigmoid", lambda x: np.clip((x + 1) / 2, 0, 1)),
]


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("name,ref", NEW_ACTIVATIONS, ids=[a[0] for a in NEW_ACTIVATIONS])
def test_new_activation_matches_closed_form(request, name, ref, dtype_name):
    if dtype_name == "float64":
        request.getfixturevalue("x64")
    dtype = np.dtype(dtype_name)
    x = (np.random.default_rng(len(name)).normal(size=(3, 8)) * 2).astype(dtype)
    x[0, :4] = [-1.0, 1.0, 0.0, -30.0]
    _check(getattr(nn, name)(x), ref(x.astype(np.float64)), dtype)


def test_log1mexp_is_accurate_on_both_sides_of_log2(x64):
    # log(-expm1(-x)) near 0 and log1p(-exp(-x)) for large x; the naive log(1 - exp(-x)) loses both ends
    x = np.array([1e-300, 1e-10, 0.1, math.log(2), 1.0, 20.0, 700.0])
    want = np.array([math.log(-math.expm1(-v)) if v < 1 else math.log1p(-math.exp(-v)) for v in x])
    _check(nn.log1mexp(x), want, np.float64)
    with np.errstate(invalid="ignore"):
        got = np.asarray(nn.log1mexp(np.array([0.0, -1.0])))
    assert got[0] == -np.inf and np.isnan(got[1])


def test_activation_dtypes_follow_jax():
    xi = np.array([-3, 0, 2, 7], np.int32)
    assert nn.identity(xi).dtype == np.int32
    assert nn.hard_tanh(xi).dtype == np.int32
    for name in ("relu6", "squareplus", "sparse_plus", "sparse_sigmoid", "log1mexp", "tanh", "leaky_relu"):
        assert getattr(nn, name)(xi).dtype == np.float32, name
    np.testing.assert_array_equal(np.asarray(nn.relu6(xi)), [0.0, 0.0, 2.0, 6.0])
    xb = np.array([0.5, -2.0], np.dtype("bfloat16"))
    assert nn.sparse_plus(xb).dtype == xb.dtype and nn.squareplus(xb).dtype == xb.dtype


def test_array_valued_activation_parameters():
    x = np.array([-1.0, -2.0, 3.0], np.float32)
    alpha = np.array([1.0, 2.0, 0.5], np.float32)
    x64 = x.astype(np.float64)
    _check(nn.elu(x, alpha=alpha), np.where(x64 > 0, x64, alpha * np.expm1(x64)), np.float32)
    _check(nn.celu(x, alpha=alpha), np.where(x64 > 0, x64, alpha * np.expm1(x64 / alpha)), np.float32)
    _check(nn.leaky_relu(x, alpha), np.where(x64 >= 0, x64, alpha * x64), np.float32)
    b = np.array([0.0, 4.0, 1.0], np.float32)
    _check(nn.squareplus(x, b), (x64 + np.sqrt(x64 ** 2 + b)) / 2, np.float32)


def _directional_fd(f, x, eps):
    """(analytic, central-difference) derivatives of the scalar f at x along a fixed random direction."""
    d = np.random.default_rng(0).normal(size=np.shape(x)).astype(x.dtype)
    analytic = float(np.sum(np.asarray(kiln.grad(f)(x), np.float64) * d))
    numeric = (float(f(x + eps * d)) - float(f(x - eps * d))) / (2 * eps)
    return analytic, numeric


@pytest.mark.parametrize("name", ["squareplus", "sparse_plus", "sparse_sigmoid", "log1mexp", "mish", "celu",
                                  "selu", "gelu"])
def test_activation_gradient_matches_finite_differences(x64, name):
    rng = np.random.default_rng(12)
    x = rng.uniform(0.1, 3.0, 10) if name == "log1mexp" else rng.uniform(-3, 3, 10)
    x = x[np.abs(np.abs(x) - 1) > 0.05]  # away from sparse_*'s kinks
    analytic, numeric = _directional_fd(lambda v: jnp.sum(getattr(nn, name)(v)), x, 1e-6)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-7, atol=1e-8)


def test_gradients_at_kinks_follow_jax():
    grad = lambda f, v: float(kiln.grad(f)(np.float32(v)))  # noqa: E731
    assert [grad(nn.relu6, v) for v in (0.0, 6.0, 3.0)] == [0.0, 0.0, 1.0]
    assert [grad(nn.sparse_plus, v) for v in (-1.0, 1.0, 0.0)] == [0.0, 1.0, 0.5]
    # log1mexp's custom derivative 1/expm1(x) stays accurate where d/dx of its formula would cancel
    np.testing.assert_allclose(grad(nn.log1mexp, 1e-6), 1 / math.expm1(1e-6), rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------
# logmeanexp, standardize, softmax where=

@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, False), (0, True), ((0, 1), True)], ids=str)
def test_logmeanexp(axis, keepdims):
    rng = np.random.default_rng(13)
    x = (rng.normal(size=(4, 6)) * 10).astype(np.float32)
    where = rng.random((4, 6)) < 0.7
    where[:, 0] = where[0, :] = True
    x64 = x.astype(np.float64)
    want = np.log(np.mean(np.exp(x64), axis=axis, keepdims=keepdims))
    _check(nn.logmeanexp(x, axis=axis, keepdims=keepdims), want, np.float32)
    masked = np.where(where, np.exp(x64), 0.0)
    want_w = np.log(masked.sum(axis=axis, keepdims=keepdims) / where.sum(axis=axis, keepdims=keepdims))
    _check(nn.logmeanexp(x, axis=axis, keepdims=keepdims, where=where), want_w, np.float32)


def test_standardize_algorithms():
    rng = np.random.default_rng(14)
    x = (rng.normal(size=(3, 7)) * 2 + 5).astype(np.float32)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    for algorithm in ("fast", "stable"):
        _check(nn.standardize(x, algorithm=algorithm), want, np.float32, rtol=1e-4, atol=1e-5)
    # a constant row with a large offset: mean(x^2) - mean^2 rounds to -16 in float32; "fast" clips it
    # at 0 (JAX's behaviour) where rsqrt of the negative number would give nan
    flat = np.full((1, 7), 12345.678, np.float32)
    raw = np.asarray(jnp.mean(flat * flat, -1) - jnp.mean(flat, -1) ** 2)
    assert raw[0] < 0  # the premise: the cancellation really happens
    assert np.all(np.isfinite(np.asarray(nn.standardize(flat, algorithm="fast"))))
    assert np.all(np.abs(np.asarray(nn.standardize(flat, algorithm="stable"))) < 1.0)
    with pytest.raises(ValueError, match="algorithm"):
        nn.standardize(x, algorithm="exact")


def test_softmax_where_broadcasts_and_blocks_gradient():
    x = np.random.default_rng(15).normal(size=(3, 6)).astype(np.float32)
    where = np.array([[True, True, False, True, False, True]])
    e = np.where(where, np.exp(x.astype(np.float64)), 0.0)
    _check(nn.softmax(x, where=where), e / e.sum(-1, keepdims=True), np.float32)
    g = np.asarray(kiln.grad(lambda v: nn.softmax(v, where=where)[0, 0])(x))
    assert np.all(g[:, ~where[0]] == 0) and np.all(g[1:] == 0) and g[0, 0] > 0


# ---------------------------------------------------------------------------------------------------------
# dot_product_attention

_F32_BIG_NEG = -0.7 * float(np.finfo(np.float32).max)


def _np_attention(q, k, v, bias=None, mask=None, scale=None, is_causal=False, q_len=None, kv_len=None,
                  window=None):
    """Per batch and head in float64: query head n reads key/value head n // (N / K)."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    b_size, t_len, n_heads, h = q.shape
    s_len, kv_heads = k.shape[1], k.shape[2]
    group = n_heads // kv_heads
    scale = 1 / math.sqrt(h) if scale is None else scale
    t_i, s_i = np.arange(t_len)[:, None], np.arange(s_len)[None, :]
    out, lse = np.zeros(q.shape), np.zeros(q.shape[:-1])
    for b in range(b_size):
        for n in range(n_heads):
            kh = n // group
            logits = q[b, :, n] @ k[b, :, kh].T * scale
            if bias is not None:
                logits = logits + np.broadcast_to(bias, (b_size, n_heads, t_len, s_len))[b, n]
            keep = np.ones((t_len, s_len), bool)
            if mask is not None:
                keep &= np.broadcast_to(mask, (b_size, n_heads, t_len, s_len))[b, n]
            if is_causal:
                keep &= s_i <= t_i
            if window is not None:
                keep &= (s_i >= t_i - window[0]) & (s_i <= t_i + window[1])
            if q_len is not None:
                keep &= t_i < q_len[b]
            if kv_len is not None:
                keep &= s_i < kv_len[b]
            logits = np.where(keep, logits, _F32_BIG_NEG)
            top = logits.max(-1, keepdims=True)
            e = np.exp(logits - top)
            o = (e / e.sum(-1, keepdims=True)) @ v[b, :, kh]
            if q_len is not None:
                o[q_len[b]:] = 0
            out[b, :, n] = o
            lse[b, :, n] = np.log(e.sum(-1)) + top[:, 0]
    return out, lse


def _qkv(b=2, t=5, s=7, n=4, k=2, h=8, dtype=np.float32, seed=16):
    rng = np.random.default_rng(seed)
    return tuple(rng.normal(size=shape).astype(dtype) for shape in ((b, t, n, h), (b, s, k, h), (b, s, k, h)))


_rng = np.random.default_rng(17)
_BIAS = _rng.normal(size=(1, 4, 5, 7)).astype(np.float32)
_MASK = _rng.random((2, 1, 5, 7)) < 0.7
_QLEN = np.array([3, 5], np.int32)
_KVLEN = np.array([7, 2], np.int32)
ATTENTION_CASES = {
    "plain": {}, "bias": {"bias": _BIAS}, "mask": {"mask": _MASK}, "causal": {"is_causal": True},
    "scale": {"scale": 0.3}, "q_lengths": {"query_seq_lengths": _QLEN}, "kv_lengths": {"key_value_seq_lengths": _KVLEN},
    "window": {"local_window_size": (2, 1)}, "window_int_causal": {"local_window_size": 1, "is_causal": True},
    "bias_2d": {"bias": _BIAS[0, 0]}, "everything": {"bias": _BIAS, "mask": _MASK, "is_causal": True,
                                                     "query_seq_lengths": _QLEN, "key_value_seq_lengths": _KVLEN},
}


def _ref_kwargs(kw):
    window = kw.get("local_window_size")
    return dict(bias=kw.get("bias"), mask=kw.get("mask"), scale=kw.get("scale"), is_causal=kw.get("is_causal", False),
                q_len=kw.get("query_seq_lengths"), kv_len=kw.get("key_value_seq_lengths"),
                window=(window, window) if isinstance(window, int) else window)


@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_attention_matches_numpy(case):
    kw = ATTENTION_CASES[case]
    q, k, v = _qkv()
    want, want_lse = _np_attention(q, k, v, **_ref_kwargs(kw))
    _check(nn.dot_product_attention(q, k, v, **kw), want, np.float32, rtol=1e-5, atol=1e-5)
    out, lse = nn.dot_product_attention(q, k, v, return_residual=True, implementation="xla", **kw)
    _check(out, want, np.float32, rtol=1e-5, atol=1e-5)
    _check(lse, want_lse, np.float32, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kv_heads", [1, 2, 4], ids=["mqa", "gqa", "mha"])
def test_attention_head_grouping(kv_heads):
    q, k, v = _qkv(n=4, k=kv_heads, t=6, s=6)
    want, _ = _np_attention(q, k, v, is_causal=True)
    _check(nn.dot_product_attention(q, k, v, is_causal=True), want, np.float32, rtol=1e-5, atol=1e-5)


def test_attention_unbatched_layout_and_bfloat16():
    q, k, v = _qkv()
    want, want_lse = _np_attention(q[:1], k[:1], v[:1])
    out, lse = nn.dot_product_attention(q[0], k[0], v[0], return_residual=True)
    assert out.shape == (5, 4, 8) and lse.shape == (5, 4)
    _check(out, want[0], np.float32, rtol=1e-5, atol=1e-5)
    bf16 = np.dtype("bfloat16")
    got = nn.dot_product_attention(*(t.astype(bf16) for t in (q, k, v)))
    assert got.dtype == bf16
    np.testing.assert_allclose(np.asarray(got, np.float32), _np_attention(q, k, v)[0], atol=3e-2)


def test_attention_in_float64_keeps_its_dtype(x64):
    q, k, v = _qkv(dtype=np.float64)
    out = nn.dot_product_attention(q, k, v, is_causal=True)
    # JAX takes the softmax in float32 even for float64 inputs, so only float32 accuracy is promised
    _check(out, _np_attention(q, k, v, is_causal=True)[0], np.float64, rtol=1e-5, atol=1e-6)


def test_attention_gradients_match_finite_differences():
    q, k, v = _qkv(b=1, t=4, s=5, n=2, k=1, h=4)
    weights = np.random.default_rng(18).normal(size=q.shape).astype(np.float32)
    for argnum in range(3):
        def loss(t):
            args = [q, k, v]
            args[argnum] = t
            out = nn.dot_product_attention(*args, bias=_BIAS[:, :2, :4, :5], is_causal=True)
            return jnp.sum(out * weights)
        analytic, numeric = _directional_fd(loss, [q, k, v][argnum], 1e-2)
        np.testing.assert_allclose(analytic, numeric, rtol=2e-3, atol=2e-3)


def test_attention_under_jit_and_vmap():
    q, k, v = _qkv()
    want, _ = _np_attention(q, k, v, kv_len=_KVLEN, is_causal=True)
    jitted = kiln.jit(lambda q, k, v, lengths: nn.dot_product_attention(q, k, v, is_causal=True,
                                                                        key_value_seq_lengths=lengths))
    _check(jitted(q, k, v, _KVLEN), want, np.float32, rtol=1e-5, atol=1e-5)
    # vmap over the batch of unbatched [T, N, H] calls is the batched call
    mapped = kiln.vmap(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True))(q, k, v)
    _check(mapped, _np_attention(q, k, v, is_causal=True)[0], np.float32, rtol=1e-5, atol=1e-5)


def test_attention_argument_errors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="value shape"):
        nn.dot_product_attention(q, k, v[:, :3])
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        nn.dot_product_attention(q[:, :, :3], k, v)
    with pytest.raises(ValueError, match="mask dtype"):
        nn.dot_product_attention(q, k, v, mask=_MASK.astype(np.float32))
    with pytest.raises(ValueError, match="query dtype"):
        nn.dot_product_attention(q.astype(np.float16), k, v)
    with pytest.raises(ValueError, match="key_value_seq_lengths shape"):
        nn.dot_product_attention(q, k, v, key_value_seq_lengths=np.array([1, 2, 3], np.int32))
    with pytest.raises(ValueError, match="Unsupported implementation"):
        nn.dot_product_attention(q, k, v, implementation="triton")
    with pytest.raises(NotImplementedError, match="cuDNN"):
        nn.dot_product_attention(q, k, v, implementation="cudnn")


# ---------------------------------------------------------------------------------------------------------
# block-scaled matmuls

def test_scaled_matmul_is_its_mathematical_definition():
    rng = np.random.default_rng(19)
    a, b = rng.normal(size=(2, 3, 8)).astype(np.float32), rng.normal(size=(2, 5, 8)).astype(np.float32)
    sa, sb = rng.uniform(0.5, 2, (2, 3, 2)).astype(np.float32), rng.uniform(0.5, 2, (2, 5, 2)).astype(np.float32)
    want = np.einsum("bmk,bnk->bmn", a * np.repeat(sa, 4, -1), b * np.repeat(sb, 4, -1).astype(np.float64))
    _check(nn.scaled_matmul(a, b, sa, sb), want, np.float32, rtol=1e-5, atol=1e-5)
    assert nn.scaled_matmul(a, b, sa, sb, preferred_element_type=np.float16).dtype == np.float16
    with pytest.raises(ValueError, match="3-dimensional"):
        nn.scaled_matmul(a[0], b, sa, sb)
    with pytest.raises(ValueError, match="scales to have matching"):
        nn.scaled_matmul(a, b, sa, sb[:, :, :1])


def test_scaled_dot_general():
    rng = np.random.default_rng(20)
    a, b = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(4, 2)).astype(np.float32)
    _check(nn.scaled_dot_general(a, b, (((1,), (0,)), ((), ()))), a.astype(np.float64) @ b, np.float32)
    config = nn.get_scaled_dot_general_config("mxfp8")
    assert (config.mode, config.block_size, config.global_scale) == ("mxfp8", 32, None)
    assert config.data_type.name == "float8_e4m3fn" and config.scale_type.name == "float8_e8m0fnu"
    assert nn.get_scaled_dot_general_config("nvfp4").block_size == 16
    with pytest.raises(ValueError, match="mode"):
        nn.get_scaled_dot_general_config("int4")
    with pytest.raises(NotImplementedError, match="float8"):
        nn.scaled_dot_general(a, b, (((1,), (0,)), ((), ())), configs=[config] * 3)


# ---------------------------------------------------------------------------------------------------------
# initializers

KEY = kiln.random.PRNGKey(42)


def test_constant_initializers_are_exact():
    np.testing.assert_array_equal(np.asarray(init.zeros(KEY, (2, 3))), np.zeros((2, 3), np.float32))
    assert init.zeros(KEY, (2, 3)).dtype == np.float32
    ones = init.ones(KEY, [4], np.int32)
    assert ones.dtype == np.int32 and np.asarray(ones).tolist() == [1, 1, 1, 1]
    fill = init.constant(-7.5)(KEY, (2, 2))
    assert fill.dtype == np.float32 and np.all(np.asarray(fill) == -7.5)
    assert init.constant(3, dtype=np.float16)(KEY, (1,)).dtype == np.float16
    assert init.constant(3, dtype=np.float16)(KEY, (1,), np.float32).dtype == np.float32
    assert isinstance(init.zeros, init.Initializer) and isinstance(init.constant(1.0), init.Initializer)
    with pytest.raises(NotImplementedError, match="sharding"):
        init.zeros(KEY, (2,), out_sharding="x")


N_SAMPLES = (400, 500)  # 200k draws: standard errors of ~0.3% on a variance


def _var_close(x, want, rel=0.02):
    x = np.asarray(x, np.float64 if np.asarray(x).dtype.kind != "c" else np.complex128)
    assert abs(np.mean(x)) < 5 * math.sqrt(want / x.size) + 1e-12
    got = np.mean(np.abs(x) ** 2)
    assert abs(got / want - 1) < rel, (got, want)


def test_uniform_normal_truncated_normal():
    u = np.asarray(init.uniform(0.5)(KEY, N_SAMPLES))
    assert u.shape == N_SAMPLES and u.min() >= 0 and u.max() < 0.5
    assert abs(u.mean() - 0.25) < 2e-3 and abs(u.var() - 0.25 / 12) < 2e-4
    g = init.normal(3.0)(KEY, N_SAMPLES)
    _var_close(g, 9.0)
    t = np.asarray(init.truncated_normal(2.0, lower=-1.0, upper=1.5)(KEY, N_SAMPLES))
    assert t.min() > -2.0 and t.max() < 3.0 and t.min() < -1.98 and t.max() > 2.98
    # the standard normal truncated to (-1, 1.5): its mean and variance from the closed forms
    pdf = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda z: 0.5 * math.erfc(-z / math.sqrt(2))  # noqa: E731
    mass = cdf(1.5) - cdf(-1.0)
    mean = (pdf(-1.0) - pdf(1.5)) / mass
    var = 1 + (-1.0 * pdf(-1.0) - 1.5 * pdf(1.5)) / mass - mean ** 2
    assert abs(t.mean() / 2 - mean) < 5e-3 and abs(t.var() / 4 / var - 1) < 0.02


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float64"])
def test_initializer_dtypes(request, dtype_name):
    if dtype_name == "float64":
        request.getfixturevalue("x64")
    dtype = np.dtype(dtype_name)
    makers = [init.uniform(), init.normal(), init.truncated_normal(), init.glorot_uniform(), init.he_normal(),
              init.constant(2.0)]
    if dtype.itemsize >= 4:  # QR (so orthogonal) has no 16-bit version, in kiln as in JAX
        makers.append(init.orthogonal())
    for make in makers:
        out = make(KEY, (6, 4), dtype)
        assert out.dtype == dtype and out.shape == (6, 4)
        assert np.all(np.isfinite(np.asarray(out, np.float64)))


# (shape, in_axis, out_axis, batch_axis, fan_in, fan_out)
FANS = [
    ((300, 200), -2, -1, (), 300, 200),
    ((3, 3, 40, 60), -2, -1, (), 9 * 40, 9 * 60),  # HWIO convolution kernel
    ((60, 40, 3, 3), 1, 0, (), 9 * 40, 9 * 60),  # OIHW, axes named
    ((5, 200, 100), -2, -1, 0, 200, 100),  # a batch of dense layers
    ((10, 20, 30), (0, 1), -1, (), 200, 30),  # several input axes
]
MODES = {"fan_in": lambda i, o: i, "fan_out": lambda i, o: o, "fan_avg": lambda i, o: (i + o) / 2,
         "fan_geo_avg": lambda i, o: math.sqrt(i * o)}


@pytest.mark.parametrize("distribution", ["uniform", "normal", "truncated_normal"])
@pytest.mark.parametrize("mode", list(MODES))
def test_variance_scaling_variance_and_support(mode, distribution):
    for i, (shape, in_axis, out_axis, batch_axis, fan_in, fan_out) in enumerate(FANS):
        if (mode, distribution) != ("fan_avg", "uniform") and i not in (0, 1):
            continue  # every axis layout once, the modes on the first two
        variance = 2.0 / MODES[mode](fan_in, fan_out)
        w = init.variance_scaling(2.0, mode, distribution, in_axis, out_axis, batch_axis)(KEY, shape)
        assert w.shape == shape and w.dtype == np.float32
        _var_close(w, variance, rel=0.03)
        w = np.abs(np.asarray(w, np.float64))
        bound = {"uniform": math.sqrt(3 * variance), "truncated_normal": 2 * math.sqrt(variance) / 0.8796256610342398,
                 "normal": np.inf}[distribution]
        assert w.max() <= bound * (1 + 1e-6)
        if distribution != "normal":
            assert w.max() > 0.97 * bound


@pytest.mark.parametrize("distribution", ["uniform", "normal", "truncated_normal"])
def test_variance_scaling_complex(distribution):
    w = init.variance_scaling(1.0, "fan_in", distribution)(KEY, (250, 400), np.complex64)
    assert w.dtype == np.complex64
    z = np.asarray(w).astype(np.complex128)
    # the modulus truncation rescales by JAX's constant 0.95311..., which leaves E|z|^2 about 1.9% high
    _var_close(z, 1 / 250 * (1.0187 if distribution == "truncated_normal" else 1.0), rel=0.02)
    if distribution == "uniform":  # uniform on a disk: |z|^2 / R^2 is uniform on [0, 1)
        r2 = np.abs(z) ** 2 / (2 / 250)
        assert r2.max() <= 1 + 1e-5 and abs(r2.mean() - 0.5) < 5e-3
    if distribution == "truncated_normal":
        assert np.abs(z).max() <= 2 * math.sqrt(1 / 250) / 0.95311164380491208 * (1 + 1e-5)
    angles = np.angle(z)
    assert abs(np.mean(np.cos(angles))) < 0.01 and abs(np.mean(np.sin(angles))) < 0.01


PRESETS = [("glorot_uniform", 1.0, "fan_avg", "uniform"), ("glorot_normal", 1.0, "fan_avg", "truncated_normal"),
           ("lecun_uniform", 1.0, "fan_in", "uniform"), ("lecun_normal", 1.0, "fan_in", "truncated_normal"),
           ("he_uniform", 2.0, "fan_in", "uniform"), ("he_normal", 2.0, "fan_in", "truncated_normal")]


@pytest.mark.parametrize("name,scale,mode,distribution", PRESETS, ids=[p[0] for p in PRESETS])
def test_variance_scaling_presets(name, scale, mode, distribution):
    shape = (3, 16, 24)
    got = getattr(init, name)(in_axis=1, out_axis=2, batch_axis=0)(KEY, shape)
    want = init.variance_scaling(scale, mode, distribution, 1, 2, 0)(KEY, shape)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert getattr(init, name).__name__ == name


def test_variance_scaling_errors_and_keys():
    with pytest.raises(ValueError, match="mode"):
        init.variance_scaling(1.0, "fan_max", "normal")(KEY, (3, 4))
    with pytest.raises(ValueError, match="distribution"):
        init.variance_scaling(1.0, "fan_in", "cauchy")(KEY, (3, 4))
    with pytest.raises(ValueError, match="at least 2D"):
        init.glorot_uniform()(KEY, (5,))
    make = init.lecun_normal()
    a, b = make(KEY, (8, 8)), make(kiln.random.PRNGKey(7), (8, 8))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(make(KEY, (8, 8))))
    assert not np.array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda k: make(k, (8, 8)))(KEY)), np.asarray(a))


@pytest.mark.parametrize("shape,column_axis", [((6, 6), -1), ((10, 4), -1), ((3, 8), -1), ((2, 3, 12), -1),
                                                ((5, 2, 3), 0)], ids=str)
def test_orthogonal(shape, column_axis):
    w = np.asarray(init.orthogonal(scale=1.5, column_axis=column_axis)(KEY, shape), np.float64)
    assert w.shape == shape
    cols = np.moveaxis(w, column_axis, -1).reshape(-1, shape[column_axis]) / 1.5
    gram = cols.T @ cols if cols.shape[0] >= cols.shape[1] else cols @ cols.T
    np.testing.assert_allclose(gram, np.eye(gram.shape[0]), atol=2e-5)
    np.testing.assert_array_equal(np.asarray(init.orthogonal()(KEY, (0, 3))), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="2D"):
        init.orthogonal()(KEY, (4,))


@pytest.mark.parametrize("shape", [(3, 4, 4), (3, 5, 2, 6), (2, 3, 3, 4, 4)], ids=str)
def test_delta_orthogonal(shape):
    w = np.asarray(init.delta_orthogonal(scale=2.0)(KEY, shape), np.float64)
    centre = tuple((k - 1) // 2 for k in shape[:-2])
    m = w[centre] / 2.0
    np.testing.assert_allclose(m @ m.T, np.eye(shape[-2]), atol=2e-5)
    rest = w.copy()
    rest[centre] = 0
    assert np.all(rest == 0)


def test_delta_orthogonal_errors():
    with pytest.raises(ValueError, match="3D, 4D or 5D"):
        init.delta_orthogonal()(KEY, (4, 4))
    with pytest.raises(ValueError, match="fan_in"):
        init.delta_orthogonal()(KEY, (3, 6, 4))
