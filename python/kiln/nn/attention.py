"""jax.nn.dot_product_attention: softmax(q k^T * scale + bias, masked) v, over [B, T, N, H] layouts,
with grouped-query attention (fewer key/value heads than query heads).

Two implementations. JAX's 'xla' one written out: logits in promote(dtype, float32), the softmax always
in float32 (as JAX does, so float64 inputs get float32 accuracy), masks applied by replacing logits with
a large negative number. And a fused one (flash attention: no [T, S] matrix in memory), the
dot_product_attention_fwd / _bwd primitives under a custom_vjp: cuDNN's fused attention on the GPU
(implementation='cudnn', and what None picks there for float16/bfloat16 without bias, mask or lengths),
kiln's host routine on the CPU. Depends on kiln.lax, kiln.numpy and the primitives only.
"""

import functools

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln._src import dtypes
from kiln._src.custom import custom_vjp
from kiln._src.dispatch import bind
from kiln._src.numpy import util
from kiln.scipy.special import logsumexp


def _to_4d(x):
    """x with leading unit axes added up to rank 4 (JAX accepts TNH inputs and low-rank masks)."""
    return lax.expand_dims(x, tuple(range(4 - x.ndim))) if x.ndim < 4 else x


def _check(t, shape, dtype, name):
    """JAX's argument check: t's rank is len(shape), its dtype `dtype` (None: any), and each of its
    sizes the one in `shape` (-1: any)."""
    if t is None:
        return
    if t.ndim != len(shape):
        raise ValueError(f"{name} ndim should be {len(shape)}, but got {t.ndim}")
    if dtype is not None and t.dtype != dtype:
        raise ValueError(f"{name} dtype should be {np.dtype(dtype)}, but got {t.dtype}")
    if any(want != -1 and got != want for got, want in zip(t.shape, shape)):
        raise ValueError(f"{name} shape should be {tuple(shape)}: but got {tuple(t.shape)}")


def _grouped(t, num_kv_heads, group, name):
    """A [B, N, T, S] bias or mask (N = 1 or the query heads) as [B, K, G, T, S] to match the logits."""
    b, n, t_len, s_len = t.shape
    if n == 1:
        return lax.expand_dims(t, (2,))
    if n != num_kv_heads * group:
        raise ValueError(f"{name}'s head axis must be 1 or the number of query heads "
                         f"{num_kv_heads * group}, but got shape {tuple(t.shape)}")
    return jnp.reshape(t, (b, num_kv_heads, group, t_len, s_len))


def _large_negative(dtype):
    """The masked-logit value: -0.7 * the largest float32 (finite after the float32 softmax cast)."""
    biggest = min(float(dtypes.finfo(dtype).max), float(np.finfo(np.float32).max))
    return jnp.asarray(-0.7 * biggest, dtype=dtype)


def _combined_mask(mask, is_causal, q_seqlen, kv_seqlen, window, t_len, s_len):
    """The AND of every requested mask, broadcastable to the [B, K, G, T, S] logits, or None."""
    parts = [] if mask is None else [mask]
    q_pos = jnp.arange(t_len, dtype=np.int32)[:, None]
    k_pos = jnp.arange(s_len, dtype=np.int32)[None, :]
    if is_causal:
        parts.append(k_pos <= q_pos)
    if window is not None:
        left, right = window
        parts.append(jnp.logical_and(q_pos <= k_pos + left, q_pos >= k_pos - right))
    if q_seqlen is not None:
        parts.append((q_pos[None] < q_seqlen[:, None, None])[:, None, None])
    if kv_seqlen is not None:
        parts.append((k_pos[None] < kv_seqlen[:, None, None])[:, None, None])
    if not parts:
        return None
    combined = parts[0]
    for part in parts[1:]:
        combined = jnp.logical_and(combined, part)
    return combined


def _attention(query, key, value, bias, mask, is_causal, scale, q_seqlen, kv_seqlen, window, want_residual):
    """The 'xla' implementation on 4-D arguments: (encoded [B, T, N, H], the logsumexp residual
    [B, T, N] or None unless want_residual)."""
    b, t_len, n, h = query.shape
    s_len, k = key.shape[1], key.shape[2]
    g = n // k
    q = jnp.reshape(query, (b, t_len, k, g, h))
    logits_dtype = dtypes.promote_types(query.dtype, np.float32)
    logits = jnp.einsum("btkgh,bskh->bkgts", q, key, preferred_element_type=logits_dtype)
    logits = logits * jnp.asarray(scale, dtype=logits_dtype)
    if bias is not None:
        logits = (logits + _grouped(bias, k, g, "bias")).astype(logits_dtype)
    combined = _combined_mask(None if mask is None else _grouped(mask, k, g, "mask"), is_causal, q_seqlen,
                              kv_seqlen, window, t_len, s_len)
    if combined is not None:
        logits = jnp.where(combined, logits, _large_negative(logits_dtype))
    logits32 = logits.astype(np.float32)
    from kiln.nn import softmax  # kiln.nn imports this module
    probs = softmax(logits32, axis=-1).astype(key.dtype)
    encoded = jnp.einsum("bkgts,bskh->btkgh", probs, value)
    if q_seqlen is not None:
        valid = jnp.arange(t_len, dtype=np.int32)[None, :] < q_seqlen[:, None]
        encoded = encoded * valid[:, :, None, None, None].astype(encoded.dtype)
    encoded = jnp.reshape(encoded, (b, t_len, n, h))
    if not want_residual:
        return encoded, None
    residual = logsumexp(logits32, axis=-1).astype(key.dtype)  # [B, K, G, T]
    residual = jnp.reshape(jnp.transpose(residual, (0, 3, 1, 2)), (b, t_len, n))
    return encoded, lax.stop_gradient(residual)


@functools.partial(custom_vjp, nondiff_argnums=(3, 4))
def _fused(query, key, value, scale, is_causal):
    """(out [B, T, N, H], logsumexp float32 [B, N, T]) of the fused primitive."""
    return tuple(bind("dot_product_attention_fwd", [query, key, value],
                      {"scale": float(scale), "causal": int(bool(is_causal))}))


def _fused_fwd(query, key, value, scale, is_causal):
    # The primitives have no JVP rule: the forward runs on values the differentiation does not
    # follow (the rule below gives the cotangents), and the residuals keep the operands themselves,
    # so differentiating the backward again meets dot_product_attention_bwd and raises, never
    # silently missing the terms through out and lse.
    out, lse = _fused(*(lax.stop_gradient(x) for x in (query, key, value)), scale, is_causal)
    return (out, lse), (query, key, value, out, lse)


def _fused_bwd(scale, is_causal, residuals, cts):
    query, key, value, out, lse = residuals
    # cts[1], the logsumexp's, is zero: every caller stops its gradient (dot_product_attention's
    # return_residual) or leaves it unused, and the backward kernel takes none
    d_out = cts[0].astype(out.dtype)
    return tuple(bind("dot_product_attention_bwd", [query, key, value, out, d_out, lse],
                      {"scale": float(scale), "causal": int(bool(is_causal))}))


_fused.defvjp(_fused_fwd, _fused_bwd)

_FUSED_DTYPES = (np.dtype(np.float16), np.dtype(dtypes.bfloat16))


def _cudnn_why_not(query, key, bias, mask, q_seqlen, kv_seqlen, window, is_causal, scale):
    """Why cuDNN's fused attention cannot run this call (None when it can)."""
    if bias is not None or mask is not None or q_seqlen is not None or kv_seqlen is not None or window is not None:
        return "bias, mask, sequence lengths and local windows are not in kiln's fused kernel yet"
    if query.dtype not in _FUSED_DTYPES:
        return f"it takes float16 or bfloat16, got {query.dtype}"
    h = query.shape[-1]
    if h % 8 or h > 128:
        return f"the head dimension must be a multiple of 8 up to 128, got {h}"
    from kiln._src import api
    if api.default_backend() != "gpu":
        return "it runs on the GPU only (no GPU is in use)"
    from kiln import _kiln
    why = _kiln.fused_attention_why_not(str(query.dtype), *query.shape, key.shape[1], key.shape[2],
                                         float(scale), int(bool(is_causal)))
    return why or None


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False,
                          query_seq_lengths=None, key_value_seq_lengths=None, local_window_size=None,
                          implementation=None, return_residual=False):
    """Scaled dot-product attention, softmax(Q K^T * scale + bias) V per head, as jax.nn's.

    query [B, T, N, H] (or [T, N, H]); key and value [B, S, K, H] with N a multiple of K (GQA; K = 1
    is multi-query). bias and mask (bool, True = attend) broadcast to [B, N, T, S]. scale defaults
    to 1/sqrt(H). is_causal keeps key s <= query t; local_window_size (left, right) (or one int for
    both) keeps t - left <= s <= t + right; query_seq_lengths / key_value_seq_lengths (int32 [B])
    mask padding, and padded query rows come out zero. A query row with nothing to attend to
    averages all values (as in JAX). return_residual also returns the logsumexp of the scaled,
    masked logits, [B, T, N] (or [T, N]). implementation: 'xla' (written out), 'cudnn' (the fused
    kernel: float16/bfloat16 on the GPU, no bias, mask or lengths; anything else raises), or None
    (the fused kernel where it can run, else 'xla').
    """
    query = util.asarray_arg("dot_product_attention", query)
    output_shape = tuple(query.shape)
    query, key, value = (_to_4d(util.asarray_arg("dot_product_attention", t)) for t in (query, key, value))
    bias = None if bias is None else _to_4d(util.asarray_arg("dot_product_attention", bias))
    mask = None if mask is None else _to_4d(util.asarray_arg("dot_product_attention", mask))
    if query_seq_lengths is not None:
        query_seq_lengths = util.asarray_arg("dot_product_attention", query_seq_lengths)
    if key_value_seq_lengths is not None:
        key_value_seq_lengths = util.asarray_arg("dot_product_attention", key_value_seq_lengths)
    if isinstance(local_window_size, (int, np.integer)):
        local_window_size = (int(local_window_size), int(local_window_size))

    b, s_len, k, h = key.shape
    _check(value, [b, s_len, k, h], key.dtype, "value")
    _check(query, [b, -1, -1, h], key.dtype, "query")
    _check(mask, [-1] * 4, np.dtype(bool), "mask")
    _check(bias, [-1] * 4, None, "bias")
    _check(query_seq_lengths, [b], np.dtype(np.int32), "query_seq_lengths")
    _check(key_value_seq_lengths, [b], np.dtype(np.int32), "key_value_seq_lengths")
    if k == 0 or query.shape[-2] % k:
        raise ValueError(f"The number of query heads must be a multiple of key/value heads, but got "
                         f"{query.shape[-2]} vs {k}")
    scale = 1.0 / np.sqrt(h) if scale is None else scale

    if implementation not in (None, "xla", "cudnn"):
        raise ValueError(f"Unsupported implementation option: {implementation}")
    why = None
    if implementation != "xla":
        why = _cudnn_why_not(query, key, bias, mask, query_seq_lengths, key_value_seq_lengths, local_window_size,
                             is_causal, scale)
        if why and implementation == "cudnn":
            raise NotImplementedError(f"dot_product_attention(implementation='cudnn'): cuDNN's fused attention "
                                      f"cannot run this call: {why}; use implementation=None or 'xla'")
    if implementation != "xla" and not why:
        out, lse = _fused(query, key, value, scale, is_causal)
        residual = lax.stop_gradient(jnp.transpose(lse, (0, 2, 1)).astype(key.dtype)) if return_residual else None
    else:
        out, residual = _attention(query, key, value, bias, mask, is_causal, scale, query_seq_lengths,
                                   key_value_seq_lengths, local_window_size, return_residual)
    out = jnp.reshape(out, output_shape)
    if return_residual:
        return out, jnp.reshape(residual, output_shape[:-1])
    return out
