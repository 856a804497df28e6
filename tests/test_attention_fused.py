"""Fused dot-product attention (issue 34): the dot_product_attention_fwd/_bwd primitives under
their custom_vjp (python/kiln/nn/attention.py), against float64 NumPy, on the CPU's host routine
(the GPU runs cuDNN's kernel: tests/test_cudnn_sdpa.py and the gpu-marked test below)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln.nn import attention as A


def _reference(q, k, v, scale, causal):
    """(out, lse [B, N, T]) in float64, grouped heads as dot_product_attention's."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b, t, n, h = q.shape
    s, kv = k.shape[1], k.shape[2]
    k = np.repeat(k, n // kv, axis=2)
    v = np.repeat(v, n // kv, axis=2)
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if causal:
        logits = np.where(np.arange(s)[None, :] <= np.arange(t)[:, None], logits, -np.inf)
    m = logits.max(-1, keepdims=True)
    p = np.exp(logits - m)
    lse = (m + np.log(p.sum(-1, keepdims=True)))[..., 0]
    return np.einsum("bnts,bsnh->btnh", p / p.sum(-1, keepdims=True), v), lse


def _inputs(rng, b, t, s, n, kv, h, dtype):
    q = rng.standard_normal((b, t, n, h)).astype(np.float32)
    k = rng.standard_normal((b, s, kv, h)).astype(np.float32)
    v = rng.standard_normal((b, s, kv, h)).astype(np.float32)
    return [jnp.asarray(x).astype(dtype) for x in (q, k, v)]


CASES = [(2, 7, 7, 4, 2, 8, True), (1, 5, 9, 3, 3, 16, False), (2, 6, 6, 4, 1, 8, False), (1, 9, 4, 2, 2, 8, True)]


@pytest.mark.parametrize("b,t,s,n,kv,h,causal", CASES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_forward_and_gradient(b, t, s, n, kv, h, causal, dtype):
    rng = np.random.default_rng(7)
    dt = jnp.bfloat16 if dtype == "bfloat16" else jnp.float32
    tol = 2e-2 if dtype == "bfloat16" else 1e-5
    q, k, v = _inputs(rng, b, t, s, n, kv, h, dt)
    scale = 0.37
    want, want_lse = _reference(q.astype(jnp.float32), k.astype(jnp.float32), v.astype(jnp.float32), scale, causal)
    for f in (A._fused, kiln.jit(A._fused, static_argnums=(3, 4))):
        out, lse = f(q, k, v, scale, causal)
        assert out.dtype == dt and out.shape == (b, t, n, h) and lse.dtype == np.float32 and lse.shape == (b, n, t)
        np.testing.assert_allclose(np.asarray(out.astype(jnp.float32)), want, atol=tol, rtol=tol)
        np.testing.assert_allclose(np.asarray(lse), want_lse, atol=1e-5, rtol=1e-5)
    # the gradient of <out, ct> against finite differences of the float64 reference
    ct = rng.standard_normal((b, t, n, h))
    loss = lambda q, k, v: jnp.sum(A._fused(q, k, v, scale, causal)[0].astype(jnp.float32) * jnp.asarray(ct, jnp.float32))
    grads = kiln.jit(kiln.grad(loss, (0, 1, 2)))(q, k, v)
    base = [np.asarray(x.astype(jnp.float32), np.float64) for x in (q, k, v)]
    for i, g in enumerate(grads):
        assert g.dtype == dt and g.shape == base[i].shape
        want_g = np.zeros_like(base[i])
        eps = 1e-6
        for idx in np.ndindex(*base[i].shape):
            hi, lo = [x.copy() for x in base], [x.copy() for x in base]
            hi[i][idx] += eps
            lo[i][idx] -= eps
            want_g[idx] = (np.sum(_reference(*hi, scale, causal)[0] * ct) -
                           np.sum(_reference(*lo, scale, causal)[0] * ct)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(g.astype(jnp.float32)), want_g, atol=10 * tol, rtol=10 * tol)


def test_fused_vmap_matches_loop():
    rng = np.random.default_rng(3)
    qs, ks, vs = ([jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(3)]
                  for shape in ((2, 5, 4, 8), (2, 6, 2, 8), (2, 6, 2, 8)))
    q, k, v = jnp.stack(qs), jnp.stack(ks), jnp.stack(vs)
    out = kiln.vmap(lambda q, k, v: A._fused(q, k, v, 0.5, False)[0])(q, k, v)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(out[i]), np.asarray(A._fused(qs[i], ks[i], vs[i], 0.5, False)[0]),
                                   rtol=1e-6, atol=1e-6)


def test_fused_second_derivative_raises():
    """The backward primitive has no derivative: differentiating twice raises (never a wrong answer)."""
    q = jnp.asarray(np.random.default_rng(1).standard_normal((1, 3, 2, 8)), jnp.float32)
    ct = jnp.asarray(np.random.default_rng(2).standard_normal((1, 3, 2, 8)), jnp.float32)
    f = lambda q: jnp.sum(A._fused(q, q, q, 0.3, True)[0] * ct)
    with pytest.raises(NotImplementedError, match="dot_product_attention_bwd"):
        kiln.grad(lambda q: jnp.sum(kiln.grad(f)(q)))(q)
    with pytest.raises(NotImplementedError, match="forward-mode"):
        kiln.jvp(f, (q,), (q,))


def test_cudnn_implementation_refused_where_it_cannot_run():
    q = jnp.ones((1, 4, 2, 8), jnp.float32)
    with pytest.raises(NotImplementedError, match="implementation='cudnn'.*float16 or bfloat16"):
        kiln.nn.dot_product_attention(q, q, q, implementation="cudnn")
    qb = q.astype(jnp.bfloat16)
    with pytest.raises(NotImplementedError, match="implementation='cudnn'.*mask"):
        kiln.nn.dot_product_attention(qb, qb, qb, mask=jnp.ones((1, 1, 4, 4), bool), implementation="cudnn")
    # the library keeps working, and None falls back to the written-out implementation
    out = kiln.nn.dot_product_attention(qb, qb, qb, is_causal=True)
    assert out.shape == (1, 4, 2, 8) and out.dtype == jnp.bfloat16


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_dot_product_attention_fused_on_gpu(causal):
    """On the GPU, bfloat16 attention runs the fused kernel (implementation=None and 'cudnn') and
    agrees with the written-out 'xla' implementation, forward and gradient."""
    if kiln.default_backend() != "gpu":
        pytest.skip("needs a GPU")
    rng = np.random.default_rng(11)
    q, k, v = _inputs(rng, 2, 256, 256, 4, 2, 64, jnp.bfloat16)
    ct = jnp.asarray(rng.standard_normal((2, 256, 4, 64)), jnp.float32)
    outs = {}
    for impl in ("xla", "cudnn", None):
        f = lambda q, k, v: jnp.sum(kiln.nn.dot_product_attention(q, k, v, is_causal=causal,
                                                                  implementation=impl).astype(jnp.float32) * ct)
        outs[impl] = (kiln.nn.dot_product_attention(q, k, v, is_causal=causal, implementation=impl),
                      kiln.jit(kiln.grad(f, (0, 1, 2)))(q, k, v))
    want, want_lse = _reference(q.astype(jnp.float32), k.astype(jnp.float32), v.astype(jnp.float32), 1 / 8, causal)
    for impl in ("cudnn", None):
        np.testing.assert_allclose(np.asarray(outs[impl][0].astype(jnp.float32)), want, atol=2e-2, rtol=2e-2)
        for g, g_xla in zip(outs[impl][1], outs["xla"][1]):
            np.testing.assert_allclose(np.asarray(g.astype(jnp.float32)), np.asarray(g_xla.astype(jnp.float32)),
                                       atol=5e-2, rtol=5e-2)
