"""lax.conv_general_dilated, conv, conv_with_general_padding, conv_transpose and reduce_window
(issue 13, item 3) against direct NumPy definitions in float64: layouts, strides, padding modes,
lhs/rhs dilation, feature and batch groups; gradients against finite differences, vmap against
loops, jit against eager; a conv-relu-pool network trains under jit + grad."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def _ref_conv(x, w, strides, pads, lhs_dil=None, rhs_dil=None, groups=1, batch_groups=1):
    """NCHW-style x (N, C, S...), w (O, I, K...): out[n, o, p] = sum over c, k of
    x_dilated_padded[n, c, p * s + k * d] * w[o, c, k], by the definition."""
    nd = x.ndim - 2
    lhs_dil = lhs_dil or (1,) * nd
    rhs_dil = rhs_dil or (1,) * nd
    N, C = x.shape[:2]
    xd = np.zeros((N, C) + tuple((x.shape[2 + i] - 1) * lhs_dil[i] + 1 for i in range(nd)))
    xd[(slice(None), slice(None)) + tuple(slice(None, None, lhs_dil[i]) for i in range(nd))] = x
    for i, (lo, hi) in enumerate(pads):  # negative pads crop
        ax = 2 + i
        if lo < 0:
            xd = np.take(xd, range(-lo, xd.shape[ax]), axis=ax)
        if hi < 0:
            xd = np.take(xd, range(0, xd.shape[ax] + hi), axis=ax)
        widths = [(0, 0)] * xd.ndim
        widths[ax] = (max(lo, 0), max(hi, 0))
        xd = np.pad(xd, widths)
    O, I = w.shape[:2]
    K = w.shape[2:]
    out_sp = [(xd.shape[2 + i] - ((K[i] - 1) * rhs_dil[i] + 1)) // strides[i] + 1 for i in range(nd)]
    nb, ob, og = N // batch_groups, O // batch_groups, O // groups
    out = np.zeros((nb, O) + tuple(out_sp))
    for o in range(O):
        g, bg = o // og, o // ob
        for n in range(nb):
            src = xd[bg * nb + n, g * I:(g + 1) * I]
            for p in np.ndindex(*out_sp):
                win = src[(slice(None),) + tuple(slice(p[i] * strides[i], p[i] * strides[i] + (K[i] - 1) * rhs_dil[i] + 1,
                                                        rhs_dil[i]) for i in range(nd))]
                out[(n, o) + p] = (win * w[o]).sum()
    return out


def _same(n, k, s, lower=False):
    out = -(-n // s)
    t = max((out - 1) * s + k - n, 0)
    lo = t // 2 if not lower else -(-t // 2)
    return lo, t - lo


@pytest.mark.parametrize("padding", ["VALID", "SAME", "SAME_LOWER", ((1, 2), (0, 1)), ((-1, 2), (2, -1))])
@pytest.mark.parametrize("strides", [(1, 1), (2, 3)])
def test_conv_general_dilated_padding_and_strides(x64, padding, strides):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((4, 3, 3, 2))
    if isinstance(padding, str):
        pads = [(0, 0)] * 2 if padding == "VALID" else [_same(n, k, s, padding == "SAME_LOWER")
                                                         for n, k, s in zip((9, 8), (3, 2), strides)]
    else:
        pads = padding
    want = _ref_conv(x, w, strides, pads)
    np.testing.assert_allclose(np.asarray(lax.conv_general_dilated(x, w, strides, padding)), want, rtol=1e-10,
                               atol=1e-10)


def test_dilations_layouts_and_groups(x64):
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 2, 3))
    got = lax.conv_general_dilated(x, w, (2, 1), ((1, 2), (2, 0)), lhs_dilation=(2, 1), rhs_dilation=(1, 2))
    np.testing.assert_allclose(np.asarray(got), _ref_conv(x, w, (2, 1), ((1, 2), (2, 0)), (2, 1), (1, 2)), rtol=1e-10,
                               atol=1e-10)
    got = lax.conv_with_general_padding(x, w, (1, 1), ((0, 0), (1, 1)), (1, 1), (2, 1))
    np.testing.assert_allclose(np.asarray(got), _ref_conv(x, w, (1, 1), ((0, 0), (1, 1)), None, (2, 1)), rtol=1e-10)
    want = _ref_conv(x, w, (1, 1), [_same(7, 2, 1), _same(6, 3, 1)])
    nhwc = lax.conv_general_dilated(np.transpose(x, (0, 2, 3, 1)), np.transpose(w, (2, 3, 1, 0)), (1, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_allclose(np.asarray(nhwc), np.transpose(want, (0, 2, 3, 1)), rtol=1e-10, atol=1e-10)
    dn = lax.conv_dimension_numbers(x.shape, w.shape, ("NCHW", "OIHW", "NHWC"))
    assert dn == lax.ConvDimensionNumbers((0, 1, 2, 3), (0, 1, 2, 3), (0, 3, 1, 2))
    mixed = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn)
    np.testing.assert_allclose(np.asarray(mixed), np.transpose(want, (0, 2, 3, 1)), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(lax.conv(x, w, (1, 1), "SAME")), want, rtol=1e-10, atol=1e-10)
    xg, wg = rng.standard_normal((2, 6, 5, 5)), rng.standard_normal((4, 3, 3, 3))
    np.testing.assert_allclose(np.asarray(lax.conv_general_dilated(xg, wg, (1, 1), "VALID", feature_group_count=2)),
                               _ref_conv(xg, wg, (1, 1), [(0, 0)] * 2, groups=2), rtol=1e-10, atol=1e-10)
    xb, wb = rng.standard_normal((4, 3, 5, 5)), rng.standard_normal((4, 3, 3, 3))
    np.testing.assert_allclose(np.asarray(lax.conv_general_dilated(xb, wb, (1, 1), "VALID", batch_group_count=2)),
                               _ref_conv(xb, wb, (1, 1), [(0, 0)] * 2, batch_groups=2), rtol=1e-10, atol=1e-10)
    x1, w1 = rng.standard_normal((2, 3, 11)), rng.standard_normal((5, 3, 4))  # 1-D and 3-D
    np.testing.assert_allclose(np.asarray(lax.conv_general_dilated(x1, w1, (2,), "VALID")),
                               _ref_conv(x1, w1, (2,), [(0, 0)]), rtol=1e-10, atol=1e-10)
    x3, w3 = rng.standard_normal((1, 2, 4, 5, 3)), rng.standard_normal((2, 2, 2, 2, 2))
    np.testing.assert_allclose(np.asarray(lax.conv_general_dilated(x3, w3, (1, 2, 1), "VALID")),
                               _ref_conv(x3, w3, (1, 2, 1), [(0, 0)] * 3), rtol=1e-10, atol=1e-10)


def test_conv_transpose_is_the_gradient_of_a_strided_conv(x64):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 10, 3)), rng.standard_normal((4, 3, 5))  # NHC, HIO: kernel 4, 3 -> 5 features
    f = lambda x: lax.conv_general_dilated(x, w, (2,), "VALID", dimension_numbers=("NHC", "HIO", "NHC"))  # noqa: E731
    y, vjp = kiln.vjp(f, x)
    ct = rng.standard_normal(y.shape)
    (grad_x,) = vjp(ct)
    # the gradient with respect to x is conv_transpose of the cotangent with the kernel transposed
    got = lax.conv_transpose(ct, w, (2,), "VALID", dimension_numbers=("NHC", "HIO", "NHC"), transpose_kernel=True)
    np.testing.assert_allclose(np.asarray(got), np.asarray(grad_x), rtol=1e-10, atol=1e-10)
    assert lax.conv_transpose(ct, np.transpose(w, (0, 2, 1)), (2,), "SAME").shape == (2, 8, 3)
    with pytest.raises(ValueError, match="lhs_dilation"):
        lax.conv_general_dilated(x, w, (1,), "SAME", lhs_dilation=(2,), dimension_numbers=("NHC", "HIO", "NHC"))


def _ref_window(x, init, op, win, strides, pads, base=None, wdil=None):
    n = x.ndim
    base = base or (1,) * n
    wdil = wdil or (1,) * n
    xd = np.full(tuple((x.shape[i] - 1) * base[i] + 1 for i in range(n)), init)
    xd[tuple(slice(None, None, b) for b in base)] = x
    xd = np.pad(xd, [(max(lo, 0), max(hi, 0)) for lo, hi in pads], constant_values=init)
    out_sp = [(xd.shape[i] - ((win[i] - 1) * wdil[i] + 1)) // strides[i] + 1 for i in range(n)]
    out = np.empty(out_sp)
    for p in np.ndindex(*out_sp):
        acc = init
        for k in np.ndindex(*win):
            acc = op(acc, xd[tuple(p[i] * strides[i] + k[i] * wdil[i] for i in range(n))])
        out[p] = acc
    return out


def test_reduce_window_pools(x64):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 7, 6))
    got = lax.reduce_window(x, -np.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "VALID")
    np.testing.assert_array_equal(np.asarray(got), _ref_window(x, -np.inf, max, (1, 1, 3, 3), (1, 1, 2, 2),
                                                               [(0, 0)] * 4))
    pads = [(0, 0), (0, 0)] + [_same(7, 3, 2), _same(6, 3, 2)]
    got = lax.reduce_window(x, -np.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "SAME")
    np.testing.assert_array_equal(np.asarray(got), _ref_window(x, -np.inf, max, (1, 1, 3, 3), (1, 1, 2, 2), pads))
    got = lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, 3), (1, 1, 1, 2), ((0, 0), (0, 0), (1, 0), (2, 1)),
                            base_dilation=(1, 1, 2, 1), window_dilation=(1, 1, 1, 2))
    want = _ref_window(x, 0.0, lambda a, b: a + b, (1, 1, 2, 3), (1, 1, 1, 2), ((0, 0), (0, 0), (1, 0), (2, 1)),
                       (1, 1, 2, 1), (1, 1, 1, 2))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    got = lax.reduce_window(x, np.inf, lax.min, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    np.testing.assert_array_equal(np.asarray(got), _ref_window(x, np.inf, min, (1, 1, 2, 2), (1, 1, 2, 2),
                                                               [(0, 0)] * 4))


def test_gradients_vmap_and_jit(x64):
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 2, 6, 5)), rng.standard_normal((3, 2, 3, 2))

    def loss(x, w):
        y = lax.conv_general_dilated(x, w, (2, 1), "SAME", rhs_dilation=(1, 2))
        y = lax.reduce_window(jnp.tanh(y), -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 1, 1), "VALID")
        return (y ** 2).sum()

    gx, gw = kiln.grad(loss, argnums=(0, 1))(x, w)
    eps = 1e-6
    for arr, g, which in ((x, gx, 0), (w, gw, 1)):
        for idx in [tuple(rng.integers(0, s) for s in arr.shape) for _ in range(6)]:
            d = np.zeros_like(arr)
            d[idx] = eps
            args_p = (x + d, w) if which == 0 else (x, w + d)
            args_m = (x - d, w) if which == 0 else (x, w - d)
            num = (float(loss(*args_p)) - float(loss(*args_m))) / (2 * eps)
            np.testing.assert_allclose(float(np.asarray(g)[idx]), num, rtol=1e-5, atol=1e-7)
    f = lambda x: lax.conv_general_dilated(x, w, (1, 1), "SAME")  # noqa: E731
    xs = rng.standard_normal((3, 2, 2, 6, 5))
    np.testing.assert_allclose(np.asarray(kiln.vmap(f)(xs)), np.stack([np.asarray(f(v)) for v in xs]), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(kiln.jit(loss)(x, w)), np.asarray(loss(x, w)), rtol=1e-12)


def test_a_small_cnn_trains():
    rng = np.random.default_rng(6)
    xs = rng.standard_normal((32, 8, 8, 1)).astype(np.float32)
    ys = (xs[:, :4].sum((1, 2, 3)) > xs[:, 4:].sum((1, 2, 3))).astype(np.int32)  # top half brighter
    params = {"c1": rng.standard_normal((3, 3, 1, 4)).astype(np.float32) * 0.5,
              "c2": rng.standard_normal((3, 3, 4, 8)).astype(np.float32) * 0.3,
              "d": rng.standard_normal((2 * 2 * 8, 2)).astype(np.float32) * 0.3}

    def net(p, x):
        for k in ("c1", "c2"):
            x = lax.conv_general_dilated(x, p[k], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
            x = lax.reduce_window(kiln.nn.relu(x), -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return x.reshape(x.shape[0], -1) @ p["d"]

    def loss(p, x, y):
        return -jnp.mean(jnp.take_along_axis(kiln.nn.log_softmax(net(p, x)), y[:, None], axis=1))

    step = kiln.jit(lambda p, x, y: kiln.tree_util.tree_map(lambda a, g: a - 0.1 * g, p, kiln.grad(loss)(p, x, y)))
    first = float(loss(params, xs, ys))
    for _ in range(60):
        params = step(params, xs, ys)
    assert float(loss(params, xs, ys)) < 0.5 * first


def test_lax_reduce_with_known_and_user_monoids():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(lax.reduce(x, 0.0, lax.add, (1,))), x.sum(1), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(lax.reduce(x, 1.0, lax.add, (1,))), x.sum(1) + 1, rtol=1e-6)
    assert float(lax.reduce(x, -np.inf, lax.max, (0, 1))) == x.max()
    b = x > 0
    np.testing.assert_array_equal(np.asarray(lax.reduce(b, True, lax.bitwise_and, (0,))), b.all(0))
    user = lambda a, c: a + c  # noqa: E731  (not recognized: halving rounds)
    np.testing.assert_allclose(np.asarray(kiln.jit(lambda x: lax.reduce(x, 0.0, user, (0,)))(x)), x.sum(0), rtol=1e-5,
                               atol=1e-6)
    idx = np.broadcast_to(np.arange(7, dtype=np.int32), (5, 7))

    def argmax_pair(a, c):  # two operands reduced together: (value, index) of the first maximum
        (va, ia), (vc, ic) = a, c
        take = (va > vc) | ((va == vc) & (ia < ic))
        return lax.select(take, va, vc), lax.select(take, ia, ic)

    v, i = lax.reduce((x, idx), (-np.inf, np.int32(7)), argmax_pair, (1,))
    np.testing.assert_array_equal(np.asarray(i), x.argmax(1))
    np.testing.assert_array_equal(np.asarray(v), x.max(1))
    with pytest.raises(TypeError, match="same tree"):
        lax.reduce((x, x), 0.0, lax.add, (0,))


def test_conv_patches_are_what_the_convolution_multiplies(x64):
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 2, 3))
    kw = dict(rhs_dilation=(2, 1))
    p = lax.conv_general_dilated_patches(x, (2, 3), (1, 2), "SAME", **kw)
    assert p.shape == (2, 3 * 6, 7, 3)
    via = np.einsum("nfhw,of->nohw", np.asarray(p), w.reshape(4, 18))  # features: channel, then offsets
    np.testing.assert_allclose(via, np.asarray(lax.conv_general_dilated(x, w, (1, 2), "SAME", **kw)), rtol=1e-10,
                               atol=1e-10)
    nhwc = lax.conv_general_dilated_patches(np.transpose(x, (0, 2, 3, 1)), (2, 3), (1, 2), "SAME",
                                            dimension_numbers=("NHWC", "OIHW", "NHWC"), **kw)
    np.testing.assert_allclose(np.asarray(nhwc), np.transpose(np.asarray(p), (0, 2, 3, 1)), rtol=1e-12)


def test_the_strategy_is_logged(capfd, monkeypatch):
    # the composed path's log (the conv primitives are off here: tests/test_conv_prim.py logs theirs)
    import sys
    monkeypatch.setattr(sys.modules["kiln.lax.conv"], "_PRIM", False)
    monkeypatch.setenv("KILN_LOG_COMPILES", "1")
    lax.conv_general_dilated(np.ones((1, 3, 8, 8), np.float32), np.ones((4, 3, 3, 3), np.float32), (1, 1), "SAME")
    assert "kiln: conv of the padded float32[1, 10, 10, 3] input (channels last) by a [4, 3, 3, 3] kernel: im2col" in \
        capfd.readouterr().err


def test_preferred_element_type_checked_as_jax():
    # guards issue 32: a float convolution with an integer preferred_element_type (or a complex one with a
    # float type) computed where JAX 0.10.2 raises TypeError; widening types still compute
    x = np.array([[[1.7, 2.6, -0.4, 1.2]]], np.float32)
    w = np.array([[[0.5, -1.6]]], np.float32)
    conv = lambda a, b, t: lax.conv_general_dilated(jnp.asarray(a), jnp.asarray(b), (1,), "VALID",  # noqa: E731
                                                     preferred_element_type=t)
    for a, b, t in [(x, w, np.int32), (x, w, np.float16), (x + 0j, w + 0j, np.float32),
                    ((x * 10).astype(np.int32), (w * 10).astype(np.int32), np.int8)]:
        with pytest.raises(TypeError, match="preferred_element_type"):
            conv(a, b, t)
    got = conv((x * 10).astype(np.int8), (w * 10).astype(np.int8), np.int32)
    assert got.dtype == np.int32 and np.asarray(got).tolist() == [[[-331, 194, -212]]]
    got = conv(x.astype(np.float16), w.astype(np.float16), np.float32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), [[[-3.3083, 1.9395, -2.1198]]], atol=2e-3)
