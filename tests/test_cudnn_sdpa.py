"""cuDNN's fused attention (runtime/cudnn_sdpa.c), called directly through the test-only entry point
kiln._kiln._test_cudnn_sdpa over raw device pointers of kiln arrays, against a float64 NumPy
reference: the forward's output and log-sum-exp rows ("Stats"), the backward's dq, dk, dv, for plain
and grouped-query heads, causal (JAX's top-left mask) or not, bfloat16 and float16, JAX's
[B, T, N, H] layout and a head-major one. Tests marked `gpu` need an NVIDIA GPU and are skipped
elsewhere. KILN_CUDNN_SDPA_DEBUG=1 prints every cuDNN build step and waits for every run:

    KILN_CUDNN_SDPA_DEBUG=1 PYTHONPATH=python python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cudnn_sdpa.py
"""
import zlib

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln import _kiln

HAS_GPU = kiln.default_backend() == "gpu"
_needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU")


def gpu(test):
    """Marks a test `gpu` (select them with `pytest -m gpu`) and skips it without a GPU."""
    return pytest.mark.gpu(_needs_gpu(test))


DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
# max |error| / max |reference|: outputs rounded to the dtype, P rounded to it before P @ V and dS
# before dS @ Q, dS^T @ K (as every flash attention does), float32 accumulation. On an H100 with
# cuDNN 9.19 the worst of this file's cases were bfloat16 o 3.6e-3, grads 6.6e-3; float16 o 3.9e-4,
# grads 1.0e-3; stats 1e-6 (a wrong mask, scale or head mapping is off by 1e-1 or more).
TOL_O = {"bfloat16": 1e-2, "float16": 2e-3}
TOL_GRAD = {"bfloat16": 2e-2, "float16": 4e-3}
TOL_STATS = 1e-3  # absolute, on log-sum-exp values of a few units (float32 throughout)


def _need_sdpa():
    ok, why = _kiln._test_cudnn_sdpa("available")
    if not ok:
        pytest.skip(f"cuDNN fused attention is not available: {why}")


def _dev(a):
    """A kiln array on the GPU holding a copy of host array a (its own buffer)."""
    return kiln.device_put(a, kiln.devices("gpu")[0])


def _ptr(x):
    """x's device address, its data ready and no pending kiln work reading it."""
    return x.__cuda_array_interface__["data"][0]


class Case:
    """One attention instance: shapes, dtype, mask, layout ('bthd': JAX's [B, T, N, H] arrays;
    'bhsd': head-major [B, N, T, H]) and the element strides kiln passes, (batch, head, seq, dim)."""

    def __init__(self, dtype, hq, hkv, sq, skv, d, causal, layout="bthd", b=2):
        self.dtype, self.np_dtype = dtype, DTYPES.get(dtype, np.dtype(dtype))
        self.b, self.hq, self.hkv, self.sq, self.skv, self.d = b, hq, hkv, sq, skv, d
        self.causal, self.layout = causal, layout
        self.scale = 1.0 / np.sqrt(d)

    def host_shape(self, h, s):
        return (self.b, s, h, self.d) if self.layout == "bthd" else (self.b, h, s, self.d)

    def strides(self, h, s):
        d = self.d
        return (s * h * d, d, h * d, 1) if self.layout == "bthd" else (h * s * d, s * d, d, 1)

    def to_bhsd(self, a):
        """A host array of this layout as float64 [B, H, S, D]."""
        a = np.asarray(a).astype(np.float64)
        return a.transpose(0, 2, 1, 3) if self.layout == "bthd" else a

    def from_bhsd(self, a):
        return np.ascontiguousarray(a.transpose(0, 2, 1, 3) if self.layout == "bthd" else a)

    def desc(self):
        qs, ks = self.strides(self.hq, self.sq), self.strides(self.hkv, self.skv)
        return (self.b, self.hq, self.hkv, self.sq, self.skv, self.d, self.dtype, self.causal, float(self.scale),
                qs, ks, ks, qs)

    def rand(self, rng, h, s):
        return rng.standard_normal(self.host_shape(h, s)).astype(self.np_dtype)

    def nan(self, h, s):
        return np.full(self.host_shape(h, s), np.nan, self.np_dtype)


def reference(c, q, k, v):
    """o, lse, p in float64 from [B, H, S, D] float64 operands (query head i reads key/value head
    i // (hq // hkv), as jnp.repeat does in JAX's dot_product_attention)."""
    g = c.hq // c.hkv
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = c.scale * (q @ kr.transpose(0, 1, 3, 2))
    if c.causal:  # top-left: query i sees keys j <= i
        s = np.where(np.tril(np.ones((c.sq, c.skv), bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    z = e.sum(-1, keepdims=True)
    p = e / z
    return p @ vr, (m + np.log(z))[..., 0], p


def reference_grads(c, q, k, v, o, do, p):
    """dq, dk, dv in float64 given the forward's o (as passed to cuDNN) and exact p."""
    g = c.hq // c.hkv
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    dv = p.transpose(0, 1, 3, 2) @ do
    dp = do @ vr.transpose(0, 1, 3, 2)
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    dq = c.scale * (ds @ kr)
    dk = c.scale * (ds.transpose(0, 1, 3, 2) @ q)
    fold = lambda x: x.reshape(c.b, c.hkv, g, c.skv, c.d).sum(2)  # noqa: E731 - the group's heads summed
    return dq, fold(dk), fold(dv)


def _close(got, want, tol, what):
    assert np.all(np.isfinite(got)), f"{what}: {np.sum(~np.isfinite(got))} values not finite (not written?)"
    err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-6)
    assert err <= tol, f"{what}: max error {err:.2e} of max |reference| (tolerance {tol:.0e})"


def run_case(c):
    """The forward and the backward of case c against the reference."""
    _need_sdpa()
    ok, why = _kiln._test_cudnn_sdpa("supported", c.desc())
    assert ok, why
    rng = np.random.default_rng(zlib.crc32(repr(c.desc()).encode()))
    q, k, v = c.rand(rng, c.hq, c.sq), c.rand(rng, c.hkv, c.skv), c.rand(rng, c.hkv, c.skv)
    qd, kd, vd = _dev(q), _dev(k), _dev(v)
    q64, k64, v64 = c.to_bhsd(q), c.to_bhsd(k), c.to_bhsd(v)
    o_ref, lse_ref, p_ref = reference(c, q64, k64, v64)

    # forward
    o, stats = _dev(c.nan(c.hq, c.sq)), _dev(np.full((c.b, c.hq, c.sq), np.nan, np.float32))
    _kiln._test_cudnn_sdpa("fwd", c.desc(), tuple(_ptr(x) for x in (qd, kd, vd, o, stats)))
    _kiln.synchronize()  # the run wrote behind kiln's back: reads must wait for the stream
    _close(c.to_bhsd(o), o_ref, TOL_O[c.dtype], "o")
    lse = np.asarray(stats).astype(np.float64)
    assert np.all(np.isfinite(lse)), "stats: not finite (not written?)"
    assert np.max(np.abs(lse - lse_ref)) <= TOL_STATS, f"stats: max error {np.max(np.abs(lse - lse_ref)):.2e}"

    # backward, from the reference's o (rounded as the forward's would be) and stats
    o_in = c.from_bhsd(o_ref).astype(c.np_dtype)
    do = c.rand(rng, c.hq, c.sq)
    dq_ref, dk_ref, dv_ref = reference_grads(c, q64, k64, v64, c.to_bhsd(o_in), c.to_bhsd(do), p_ref)
    od, dod, sd = _dev(o_in), _dev(do), _dev(lse_ref.astype(np.float32))
    dq, dk, dv = _dev(c.nan(c.hq, c.sq)), _dev(c.nan(c.hkv, c.skv)), _dev(c.nan(c.hkv, c.skv))
    _kiln._test_cudnn_sdpa("bwd", c.desc(), tuple(_ptr(x) for x in (qd, kd, vd, od, dod, sd, dq, dk, dv)))
    _kiln.synchronize()
    _close(c.to_bhsd(dq), dq_ref, TOL_GRAD[c.dtype], "dq")
    _close(c.to_bhsd(dk), dk_ref, TOL_GRAD[c.dtype], "dk")
    _close(c.to_bhsd(dv), dv_ref, TOL_GRAD[c.dtype], "dv")


@gpu
def test_available():
    """cuDNN 9 is found and the GPU can run its fused attention (the tests below skip otherwise)."""
    ok, why = _kiln._test_cudnn_sdpa("available")
    assert ok, why


@gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("s", [128, 256])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_attention_matches_reference(dtype, hq, hkv, s, d, causal):
    run_case(Case(dtype, hq, hkv, s, s, d, causal))


@gpu
@pytest.mark.parametrize("sq,skv", [(128, 256), (256, 128)])
def test_causal_mask_is_top_left(sq, skv):
    """Query i sees keys j <= i whatever the lengths (JAX's is_causal), not the bottom-right diagonal."""
    run_case(Case("bfloat16", 4, 2, sq, skv, 64, True))


@gpu
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 1)], ids=["mha", "mqa"])
def test_head_major_layout(hq, hkv):
    """Strides of a [B, N, T, H] array (not JAX's layout) reach cuDNN as given."""
    run_case(Case("float16", hq, hkv, 128, 128, 64, True, layout="bhsd"))


@gpu
def test_work_area_holds_the_backward_accumulators():
    _need_sdpa()
    c = Case("bfloat16", 4, 2, 128, 128, 64, False)
    fwd, bwd = _kiln._test_cudnn_sdpa("work", c.desc())
    assert fwd >= 0 and bwd >= c.b * c.hq * c.sq * (c.d + 1) * 4


@gpu
@pytest.mark.parametrize("change,message", [
    (dict(d=60), "multiple of 8"),
    (dict(hkv=3), "multiple of key/value heads"),
    (dict(dtype="float32"), "bfloat16 or float16"),
])
def test_refusals_say_why(change, message):
    """What cuDNN cannot run is refused at compile time with kiln's reason, not a status code."""
    _need_sdpa()
    args = dict(dtype="bfloat16", hq=4, hkv=2, sq=128, skv=128, d=64, causal=False)
    args.update(change)
    ok, why = _kiln._test_cudnn_sdpa("supported", Case(**args).desc())
    assert not ok and message in why, why


@gpu
def test_unit_head_stride_required():
    _need_sdpa()
    desc = list(Case("bfloat16", 4, 2, 128, 128, 64, False).desc())
    desc[9] = (desc[9][0], desc[9][1], desc[9][2], 2)
    ok, why = _kiln._test_cudnn_sdpa("supported", tuple(desc))
    assert not ok and "stride must be 1" in why, why
