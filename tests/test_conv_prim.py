"""The conv primitive family (conv_general_dilated, conv_bwd_data, conv_bwd_filter; issue 13):
forward against a direct float64 NumPy reference, gradients against finite differences and the
composed path (KILN_CONV_PRIM=0), gradients of gradients, vmap against a Python loop, jit against
eager, over many dimension_numbers, strides, paddings, dilations and groups, with fresh random
inputs. Tests marked `gpu` run cuDNN (KILN_CUDNN=0 is the host routine) and are skipped without a
GPU."""
import sys

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

CONV = sys.modules["kiln.lax.conv"]
HAS_GPU = kiln.default_backend() == "gpu"


def gpu(test):
    return pytest.mark.gpu(pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU")(test))


@pytest.fixture
def composed(monkeypatch):
    """The composed path (the primitives off) inside a `with composed():` block."""
    import contextlib

    @contextlib.contextmanager
    def off():
        monkeypatch.setattr(CONV, "_PRIM", False)
        try:
            yield
        finally:
            monkeypatch.setattr(CONV, "_PRIM", True)
    return off


def ref_conv(x, w, strides, padding, lhs_dil, rhs_dil, dn, groups):
    """Direct float64 conv_general_dilated: the definition, one kernel tap at a time."""
    spec = lax.conv_dimension_numbers(x.shape, w.shape, dn)
    nd = x.ndim - 2
    x = np.transpose(np.asarray(x, np.float64), spec.lhs_spec)  # (N, C, S...)
    w = np.transpose(np.asarray(w, np.float64), spec.rhs_spec)  # (O, I, K...)
    if isinstance(padding, str):
        dil_in = [(s - 1) * d + 1 for s, d in zip(x.shape[2:], lhs_dil)]
        eff = [(k - 1) * d + 1 for k, d in zip(w.shape[2:], rhs_dil)]
        padding = CONV.padtype_to_pads(dil_in, eff, strides, padding)
    xd = np.zeros(x.shape[:2] + tuple((s - 1) * d + 1 for s, d in zip(x.shape[2:], lhs_dil)))
    xd[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in lhs_dil)] = x
    for i, (lo, hi) in enumerate(padding):  # negative padding crops
        ax = 2 + i
        if lo < 0:
            xd = np.take(xd, range(-lo, xd.shape[ax]), axis=ax)
        if hi < 0:
            xd = np.take(xd, range(0, xd.shape[ax] + hi), axis=ax)
        pw = [(0, 0)] * xd.ndim
        pw[ax] = (max(lo, 0), max(hi, 0))
        xd = np.pad(xd, pw)
    N, C = xd.shape[:2]
    O, I = w.shape[:2]
    ksz = w.shape[2:]
    out = [(xd.shape[2 + i] - ((ksz[i] - 1) * rhs_dil[i] + 1)) // strides[i] + 1 for i in range(nd)]
    y = np.zeros((N, O) + tuple(out))
    og = O // groups
    for g in range(groups):
        xg = xd[:, g * I:(g + 1) * I]
        wg = w[g * og:(g + 1) * og]
        for k in np.ndindex(*ksz):
            sl = tuple(slice(k[i] * rhs_dil[i], k[i] * rhs_dil[i] + (out[i] - 1) * strides[i] + 1, strides[i])
                       for i in range(nd))
            y[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", xg[(slice(None), slice(None)) + sl],
                                                   wg[(slice(None), slice(None)) + k])
    # to the output layout
    inv = np.argsort(spec.out_spec)
    return np.transpose(y, inv)


def shapes_for(dn, n, c, o, spatial, ksz, groups):
    """lhs and rhs shapes of a convolution in layout dn (three strings)."""
    lhs_s, rhs_s, _ = dn
    letters = [ch for ch in rhs_s if ch not in "OI"]
    lhs = tuple(n if ch == "N" else c if ch == "C" else spatial[letters.index(ch)] for ch in lhs_s)
    rhs = tuple(o if ch == "O" else c // groups if ch == "I" else ksz[letters.index(ch)] for ch in rhs_s)
    return lhs, rhs


# (name, dn, n, c, o, spatial, kernel, strides, padding, lhs_dil, rhs_dil, groups)
CASES = [
    ("nhwc_same", ("NHWC", "HWIO", "NHWC"), 2, 3, 4, (7, 6), (3, 3), (1, 1), "SAME", (1, 1), (1, 1), 1),
    ("nchw_valid", ("NCHW", "OIHW", "NCHW"), 2, 3, 5, (8, 7), (3, 2), (1, 1), "VALID", (1, 1), (1, 1), 1),
    ("nhwc_stride2_same", ("NHWC", "HWIO", "NHWC"), 2, 4, 6, (9, 8), (3, 3), (2, 2), "SAME", (1, 1), (1, 1), 1),
    ("nchw_stride_pad", ("NCHW", "OIHW", "NCHW"), 1, 2, 3, (10, 9), (3, 4), (2, 3), [(1, 2), (0, 3)], (1, 1), (1, 1), 1),
    ("dilated", ("NHWC", "HWIO", "NHWC"), 2, 3, 4, (11, 10), (3, 2), (1, 2), [(2, 2), (1, 0)], (1, 1), (2, 3), 1),
    ("groups", ("NHWC", "HWIO", "NHWC"), 2, 6, 9, (7, 7), (3, 3), (1, 1), "SAME", (1, 1), (1, 1), 3),
    ("depthwise", ("NCHW", "OIHW", "NCHW"), 2, 4, 8, (6, 6), (3, 3), (2, 1), "SAME", (1, 1), (1, 1), 4),
    ("mixed_layout", ("NCHW", "HWIO", "NHWC"), 2, 3, 4, (6, 7), (2, 3), (1, 2), "VALID", (1, 1), (1, 1), 1),
    ("odd_layout", ("HNCW", "WOIH", "CWHN"), 2, 4, 2, (5, 6), (2, 3), (1, 1), [(1, 0), (2, 1)], (1, 1), (1, 2), 2),
    ("conv1d", ("NWC", "WIO", "NWC"), 3, 4, 5, (13,), (4,), (2,), "SAME", (1,), (1,), 1),
    ("conv3d", ("NDHWC", "DHWIO", "NDHWC"), 1, 2, 3, (5, 6, 4), (2, 3, 2), (1, 2, 1), "SAME", (1, 1, 1), (1, 1, 2), 1),
    ("one_by_one", ("NHWC", "HWIO", "NHWC"), 2, 8, 5, (5, 5), (1, 1), (1, 1), "VALID", (1, 1), (1, 1), 1),
    ("one_by_one_groups", ("NCHW", "OIHW", "NCHW"), 2, 8, 4, (5, 5), (1, 1), (1, 1), "VALID", (1, 1), (1, 1), 2),
    ("transposed", ("NHWC", "HWIO", "NHWC"), 2, 3, 4, (5, 4), (3, 3), (1, 1), [(2, 2), (1, 2)], (2, 2), (1, 1), 1),
    ("transposed_groups", ("NCHW", "OIHW", "NCHW"), 1, 4, 6, (4, 5), (3, 2), (1, 1), [(1, 2), (1, 1)], (2, 3), (1, 1), 2),
]
IDS = [c[0] for c in CASES]


def make(case, rng, dtype=np.float32):
    _, dn, n, c, o, sp, k, st, pad, ld, rd, g = case
    ls, rs = shapes_for(dn, n, c, o, sp, k, g)
    x = rng.standard_normal(ls).astype(dtype)
    w = (rng.standard_normal(rs) / np.sqrt(c * np.prod(k) / g)).astype(dtype)

    def f(x, w):
        return lax.conv_general_dilated(x, w, st, pad, lhs_dilation=ld, rhs_dilation=rd, dimension_numbers=dn,
                                        feature_group_count=g)
    return x, w, f, (st, pad, ld, rd, dn, g)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_matches_the_float64_reference(case):
    rng = np.random.default_rng()
    x, w, f, args = make(case, rng)
    want = ref_conv(x, w, *args)
    jaxpr = str(kiln.make_jaxpr(f)(x, w))
    assert ("conv_bwd_data[" if "transposed" in case[0] else "conv_general_dilated[") in jaxpr, jaxpr
    got = f(x, w)
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(x, w)), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gradients_match_the_composed_path(case, composed):
    rng = np.random.default_rng()
    x, w, f, _ = make(case, rng)
    ct = rng.standard_normal(np.asarray(f(x, w)).shape).astype(np.float32)
    loss = lambda x, w: (f(x, w) * ct).sum()
    gx, gw = kiln.grad(loss, argnums=(0, 1))(x, w)
    jgx, jgw = kiln.jit(kiln.grad(loss, argnums=(0, 1)))(x, w)
    with composed():
        cx, cw = kiln.grad(loss, argnums=(0, 1))(x, w)
    for a, b in ((gx, cx), (gw, cw), (jgx, cx), (jgw, cw)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("case", [CASES[i] for i in (2, 4, 5, 9, 13)], ids=[IDS[i] for i in (2, 4, 5, 9, 13)])
def test_gradients_match_finite_differences(case, x64):
    rng = np.random.default_rng()
    x, w, f, _ = make(case, rng, np.float64)
    ct = rng.standard_normal(np.asarray(f(x, w)).shape)
    loss = lambda x, w: (f(x, w) * ct).sum()
    gx, gw = kiln.grad(loss, argnums=(0, 1))(x, w)
    eps = 1e-6
    for arr, g, which in ((x, gx, 0), (w, gw, 1)):
        d = rng.standard_normal(arr.shape)
        plus = [x + eps * d, w] if which == 0 else [x, w + eps * d]
        minus = [x - eps * d, w] if which == 0 else [x, w - eps * d]
        fd = (float(loss(*plus)) - float(loss(*minus))) / (2 * eps)
        np.testing.assert_allclose(float(np.sum(np.asarray(g) * d)), fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", [CASES[i] for i in (0, 3, 5, 13)], ids=[IDS[i] for i in (0, 3, 5, 13)])
def test_grad_of_grad_matches_the_composed_path(case, composed):
    """Second derivatives are the transposes of the backward primitives: still members of the set."""
    rng = np.random.default_rng()
    x, w, f, _ = make(case, rng)
    ct = rng.standard_normal(np.asarray(f(x, w)).shape).astype(np.float32)

    def outer(x, w):
        gx, gw = kiln.grad(lambda x, w: (f(x, w) ** 2 * ct).sum(), argnums=(0, 1))(x, w)
        return (gx ** 2).sum() + (gw * gw).sum() * 0.5
    h = kiln.grad(outer, argnums=(0, 1))(x, w)
    names = str(kiln.make_jaxpr(kiln.grad(outer, argnums=(0, 1)))(x, w))
    assert "conv_bwd_filter" in names and "conv_bwd_data" in names
    with composed():
        hc = kiln.grad(outer, argnums=(0, 1))(x, w)
    for a, b in zip(h, hc):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-3, atol=2e-3)


def test_jvp_matches_the_reference_on_both_tangents():
    rng = np.random.default_rng()
    x, w, f, args = make(CASES[2], rng)
    dx, dw = rng.standard_normal(x.shape).astype(np.float32), rng.standard_normal(w.shape).astype(np.float32)
    y, t = kiln.jvp(f, (x, w), (dx, dw))
    want = ref_conv(dx, w, *args) + ref_conv(x, dw, *args)
    np.testing.assert_allclose(np.asarray(t), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("axes", [(0, None), (None, 0), (0, 0), (1, 2)], ids=["lhs", "rhs", "both", "inner_axes"])
@pytest.mark.parametrize("case", [CASES[i] for i in (1, 5, 13)], ids=[IDS[i] for i in (1, 5, 13)])
def test_vmap_matches_a_python_loop(case, axes):
    rng = np.random.default_rng()
    x, w, f, _ = make(case, rng)
    B = 3
    xs = np.stack([x + i for i in range(B)], axes[0]) if axes[0] is not None else x
    ws = np.stack([w * (i + 1) for i in range(B)], axes[1]) if axes[1] is not None else w
    got = kiln.vmap(f, in_axes=axes)(xs, ws)
    want = np.stack([np.asarray(f(np.take(xs, i, axes[0]) if axes[0] is not None else x,
                                  np.take(ws, i, axes[1]) if axes[1] is not None else w)) for i in range(B)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [CASES[i] for i in (3, 6)], ids=[IDS[i] for i in (3, 6)])
def test_per_example_gradients_vmap_of_grad(case):
    """vmap of grad batches conv_bwd_filter with both operands batched: the feature-group fold."""
    rng = np.random.default_rng()
    x, w, f, _ = make(case, rng)
    xs = np.stack([x, 2 * x + 1, -x])
    g = lambda x, w: kiln.grad(lambda w: (f(x, w) ** 2).sum())(w)
    got = kiln.vmap(g, in_axes=(0, None))(xs, w)
    want = np.stack([np.asarray(g(xi, w)) for xi in xs])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-3)


def test_half_precision_dtypes_run_through_float32():
    rng = np.random.default_rng()
    for dt in (jnp.bfloat16, jnp.float16):
        x, w, f, args = make(CASES[0], rng)
        xh, wh = jnp.asarray(x, dt), jnp.asarray(w, dt)
        got = f(xh, wh)
        assert got.dtype == dt
        want = ref_conv(np.asarray(xh.astype(jnp.float32)), np.asarray(wh.astype(jnp.float32)), *args)
        np.testing.assert_allclose(np.asarray(got.astype(jnp.float32)), want, rtol=3e-2, atol=3e-2)


def test_preferred_element_type_widens_the_result():
    rng = np.random.default_rng()
    x, w, _, args = make(CASES[0], rng)
    xh, wh = jnp.asarray(x, jnp.bfloat16), jnp.asarray(w, jnp.bfloat16)
    dn = ("NHWC", "HWIO", "NHWC")
    got = lax.conv_general_dilated(xh, wh, (1, 1), "SAME", dimension_numbers=dn, preferred_element_type=jnp.float32)
    assert got.dtype == jnp.float32
    want = ref_conv(np.asarray(xh.astype(jnp.float32)), np.asarray(wh.astype(jnp.float32)), *args)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    gw = kiln.grad(lambda w: lax.conv_general_dilated(xh, w, (1, 1), "SAME", dimension_numbers=dn,
                                                      preferred_element_type=jnp.float32).sum())(wh)
    assert gw.dtype == jnp.bfloat16


def test_float64(x64):
    rng = np.random.default_rng()
    x, w, f, args = make(CASES[6], rng, np.float64)
    np.testing.assert_allclose(np.asarray(f(x, w)), ref_conv(x, w, *args), rtol=1e-12, atol=1e-12)


def test_what_the_primitives_do_not_cover_is_composed(capfd, monkeypatch):
    """Integer dtypes, batch_group_count, negative padding: the composition, as before."""
    monkeypatch.setenv("KILN_LOG_COMPILES", "1")
    xi, wi = np.arange(2 * 5 * 5 * 2).reshape(2, 5, 5, 2).astype(np.int32), np.ones((3, 3, 2, 2), np.int32)
    dn = ("NHWC", "HWIO", "NHWC")
    y = lax.conv_general_dilated(xi, wi, (1, 1), "SAME", dimension_numbers=dn)
    assert y.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(y), ref_conv(xi, wi, (1, 1), "SAME", (1, 1), (1, 1), dn, 1).astype(np.int32))
    x = np.random.default_rng().standard_normal((4, 6, 6, 2)).astype(np.float32)
    w = np.random.default_rng().standard_normal((3, 3, 2, 4)).astype(np.float32)
    lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn, batch_group_count=2)
    y = lax.conv_general_dilated(x, w, (1, 1), [(-1, 1), (0, 0)], dimension_numbers=dn)
    np.testing.assert_allclose(np.asarray(y), ref_conv(x, w, (1, 1), [(-1, 1), (0, 0)], (1, 1), (1, 1), dn, 1),
                               rtol=1e-4, atol=1e-4)
    err = capfd.readouterr().err
    assert "composed (dtype int32)" in err and "composed (batch_group_count 2)" in err
    assert "composed (negative padding" in err


def test_the_choice_is_logged(capfd, monkeypatch):
    monkeypatch.setenv("KILN_LOG_COMPILES", "1")
    lax.conv_general_dilated(np.ones((1, 3, 8, 8), np.float32), np.ones((4, 3, 3, 3), np.float32), (1, 1), "SAME")
    assert "kiln: conv_general_dilated of float32[1, 3, 8, 8] by [4, 3, 3, 3]: the conv_general_dilated primitive" in \
        capfd.readouterr().err


def test_layout_transposes_cancel_for_channels_last():
    """NHWC input and output need no transpose around the primitive (only the HWIO kernel moves)."""
    x, w = np.ones((1, 5, 5, 2), np.float32), np.ones((3, 3, 2, 4), np.float32)
    text = str(kiln.make_jaxpr(lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))(x, w))
    assert text.count("transpose[") == 1, text


def test_shape_errors_name_the_operation_and_the_fix():
    from kiln._src.core import bind1
    x, w = jnp.ones((1, 5, 5, 4)), jnp.ones((3, 3, 3, 3))
    p = dict(window_strides=(1, 1), padding_lo=(0, 0), padding_hi=(0, 0), rhs_dilation=(1, 1), spatial_shape=(),
             feature_group_count=1, precision=0)
    with pytest.raises(TypeError, match=r"conv_general_dilated: the input's 4 features must equal the kernel's "
                                        r"input features 3 times feature_group_count 1"):
        bind1("conv_general_dilated", [x, w], p)
    with pytest.raises(ValueError, match=r"conv_bwd_data: the output cotangent .* does not match"):
        bind1("conv_bwd_data", [jnp.ones((1, 4, 4, 3)), jnp.ones((3, 3, 3, 4))], dict(p, spatial_shape=(5, 5)))
    with pytest.raises(ValueError, match=r"smaller than the dilated kernel"):
        bind1("conv_general_dilated", [jnp.ones((1, 2, 2, 3)), jnp.ones((3, 3, 3, 3))], p)


def test_fresh_random_shapes_match_the_reference():
    rng = np.random.default_rng()
    for _ in range(6):
        nd = int(rng.integers(1, 4))
        g = int(rng.choice([1, 2]))
        c, o = g * int(rng.integers(1, 4)), g * int(rng.integers(1, 4))
        sp = tuple(int(v) for v in rng.integers(4, 9, nd))
        k = tuple(int(v) for v in rng.integers(1, 4, nd))
        st = tuple(int(v) for v in rng.integers(1, 3, nd))
        rd = tuple(int(v) for v in rng.integers(1, 3, nd))
        pad = [(int(a), int(b)) for a, b in rng.integers(0, 3, (nd, 2))]
        letters = "DHW"[3 - nd:]
        dn = ("N" + letters + "C", letters + "IO", "NC" + letters)
        case = ("random", dn, 2, c, o, sp, k, st, pad, (1,) * nd, rd, g)
        x, w, f, args = make(case, rng)
        try:
            want = ref_conv(x, w, *args)
        except ValueError:
            continue
        if min(want.shape) == 0:
            continue
        np.testing.assert_allclose(np.asarray(f(x, w)), want, rtol=1e-4, atol=1e-4, err_msg=str(case))


# ---- cuDNN (needs a GPU) ----

@gpu
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gpu_forward_and_gradients_match_float64(case):
    """cuDNN's forward, input and kernel gradients (conv_general_dilated, conv_bwd_data,
    conv_bwd_filter, at precision HIGHEST as conftest sets it) against float64 references."""
    rng = np.random.default_rng()
    x, w, f, args = make(case, rng)
    want = ref_conv(x, w, *args)
    np.testing.assert_allclose(np.asarray(kiln.jit(f)(x, w)), want, rtol=1e-4, atol=1e-4)
    ct = rng.standard_normal(want.shape).astype(np.float32)
    loss = lambda x, w: (f(x, w) * ct).sum()
    gx, gw = kiln.jit(kiln.grad(loss, argnums=(0, 1)))(x, w)
    # the float64 reference gradients: loss is linear in each operand, so its gradient is loss
    # at each unit vector
    eye_x = _ref_grad(lambda xx: (ref_conv(xx, w, *args) * ct).sum(), x)
    eye_w = _ref_grad(lambda ww: (ref_conv(x, ww, *args) * ct).sum(), w)
    np.testing.assert_allclose(np.asarray(gx), eye_x, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(np.asarray(gw), eye_w, rtol=1e-3, atol=1e-3)


def _ref_grad(fn, a):
    """Gradient of a linear function fn of a (float64): fn at each unit vector."""
    a = np.asarray(a, np.float64)
    g = np.zeros(a.size)
    for i in range(a.size):
        e = np.zeros(a.size)
        e[i] = 1
        g[i] = fn(e.reshape(a.shape))
    return g.reshape(a.shape)


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_half_precision_uses_tensor_cores_and_matches(dtype):
    rng = np.random.default_rng()
    x, w, f, args = make(CASES[0], rng)
    xh, wh = jnp.asarray(x, dtype), jnp.asarray(w, dtype)
    want = ref_conv(np.asarray(xh.astype(jnp.float32)), np.asarray(wh.astype(jnp.float32)), *args)
    got = kiln.jit(f)(xh, wh)
    np.testing.assert_allclose(np.asarray(got.astype(jnp.float32)), want, rtol=3e-2, atol=3e-2)


@gpu
def test_gpu_cudnn_off_is_the_host_routine(monkeypatch):
    """KILN_CUDNN=0 (read when a program compiles) runs the host routine over copies: same numbers."""
    rng = np.random.default_rng()
    x, w, f, args = make(CASES[5], rng)
    a = np.asarray(kiln.jit(f)(x, w))
    monkeypatch.setenv("KILN_CUDNN", "0")
    b = np.asarray(kiln.jit(lambda x, w: f(x, w) + 0)(x, w))
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@gpu
def test_gpu_resnet_layer_in_a_loop_is_capturable():
    """A conv inside a scan body (a captured graph on the GPU): the plan is made under capture."""
    rng = np.random.default_rng()
    x = rng.standard_normal((4, 16, 16, 8)).astype(np.float32)
    w = (rng.standard_normal((3, 3, 8, 8)) * 0.1).astype(np.float32)
    dn = ("NHWC", "HWIO", "NHWC")

    def body(c, _):
        return jnp.tanh(lax.conv_general_dilated(c, w, (1, 1), "SAME", dimension_numbers=dn)), None
    got, _ = kiln.jit(lambda x: lax.scan(body, x, None, length=3))(x)
    want = x
    for _ in range(3):
        want = np.tanh(ref_conv(want, w, (1, 1), "SAME", (1, 1), (1, 1), dn, 1))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
