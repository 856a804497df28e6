"""kiln.image.resize / scale_and_translate (issue 13, item 3) against a float64 NumPy
implementation of the same definition (separable kernel weights, antialiased when
downsampling, normalized per output sample), known values, gradients, vmap, jit."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


def _kernel(method):
    if method == "linear":
        return lambda x: np.maximum(0.0, 1.0 - np.abs(x))
    if method == "cubic":
        def keys(x):
            out = ((1.5 * x - 2.5) * x) * x + 1.0
            out = np.where(x >= 1.0, ((-0.5 * x + 2.5) * x - 4.0) * x + 2.0, out)
            return np.where(x >= 2.0, 0.0, out)
        return keys
    r = {"lanczos3": 3.0, "lanczos5": 5.0}[method]

    def lanczos(x):
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(x > 1e-3, r * np.sin(np.pi * x) * np.sin(np.pi * x / r) / (np.pi ** 2 * x ** 2), 1.0)
        return np.where(x > r, 0.0, out)
    return lanczos


def _ref_weights(n_in, n_out, scale, shift, method, antialias):
    inv = 1.0 / scale
    ks = max(inv, 1.0) if antialias else 1.0
    sample = (np.arange(n_out) + 0.5) * inv - shift * inv - 0.5
    w = _kernel(method)(np.abs(sample[None, :] - np.arange(n_in)[:, None]) / ks)
    tot = w.sum(0, keepdims=True)
    w = np.where(np.abs(tot) > 1000 * np.finfo(np.float32).eps, w / np.where(tot != 0, tot, 1), 0)
    return np.where(((sample >= -0.5) & (sample <= n_in - 0.5))[None, :], w, 0)


def _ref_resize(x, shape, method, antialias=True):
    for d in range(x.ndim):
        if x.shape[d] == shape[d]:
            continue
        if method == "nearest":
            idx = np.floor((np.arange(shape[d]) + 0.5) * x.shape[d] / shape[d]).astype(int)
            x = np.take(x, idx, axis=d)
        else:
            w = _ref_weights(x.shape[d], shape[d], shape[d] / x.shape[d], 0.0, method, antialias)
            x = np.moveaxis(np.tensordot(x, w, axes=([d], [0])), -1, d)
    return x


@pytest.mark.parametrize("method", ["nearest", "linear", "cubic", "lanczos3", "lanczos5"])
@pytest.mark.parametrize("shape", [(2, 26, 9, 3), (2, 7, 40, 3), (3, 5, 6, 2)])
@pytest.mark.parametrize("antialias", [True, False])
def test_resize_matches_the_definition(x64, method, shape, antialias):
    img = np.random.default_rng(1).standard_normal((2, 13, 17, 3))
    got = kiln.image.resize(img, shape, method, antialias=antialias)
    np.testing.assert_allclose(np.asarray(got), _ref_resize(img, shape, method, antialias), rtol=1e-10, atol=1e-10)


def test_known_values_dtypes_and_errors():
    np.testing.assert_allclose(np.asarray(kiln.image.resize(np.array([0.0, 1.0]), (4,), "bilinear")),
                               [0.0, 0.25, 0.75, 1.0])
    np.testing.assert_array_equal(np.asarray(kiln.image.resize(np.array([1, 2, 3]), (6,), "nearest")),
                                  [1, 1, 2, 2, 3, 3])
    assert kiln.image.resize(np.arange(12).reshape(3, 4), (6, 8), "linear").dtype == np.float32
    assert kiln.image.resize(np.ones((4, 4), np.float32), (4, 4), kiln.image.ResizeMethod.CUBIC).shape == (4, 4)
    with pytest.raises(ValueError, match="unknown method 'bogus'"):
        kiln.image.resize(np.ones((2, 2)), (4, 4), "bogus")
    with pytest.raises(ValueError, match="one entry per dimension"):
        kiln.image.resize(np.ones((2, 2)), (4,), "linear")


def test_scale_and_translate(x64):
    img = np.random.default_rng(2).standard_normal((3, 11, 9))
    got = kiln.image.scale_and_translate(img, (3, 20, 6), (1, 2), np.array([1.5, 0.6]), np.array([0.3, -1.0]),
                                         "linear")
    want = img
    for i, (d, n) in enumerate(((1, 20), (2, 6))):
        w = _ref_weights(want.shape[d], n, [1.5, 0.6][i], [0.3, -1.0][i], "linear", True)
        want = np.moveaxis(np.tensordot(want, w, axes=([d], [0])), -1, d)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10)


def test_gradient_vmap_and_jit(x64):
    rng = np.random.default_rng(3)
    img = rng.standard_normal((6, 7))
    f = lambda x: (kiln.image.resize(x, (9, 4), "cubic") ** 2).sum()  # noqa: E731
    g = np.asarray(kiln.grad(f)(img))
    eps = 1e-6
    for idx in [(0, 0), (3, 4), (5, 6)]:
        d = np.zeros_like(img)
        d[idx] = eps
        np.testing.assert_allclose(g[idx], (float(f(img + d)) - float(f(img - d))) / (2 * eps), rtol=1e-6, atol=1e-8)
    batch = rng.standard_normal((4, 6, 7))
    r = lambda x: kiln.image.resize(x, (12, 3), "lanczos3")  # noqa: E731
    np.testing.assert_allclose(np.asarray(kiln.vmap(r)(batch)), np.stack([np.asarray(r(b)) for b in batch]),
                               rtol=1e-12)
    np.testing.assert_allclose(np.asarray(kiln.jit(r)(img)), np.asarray(r(img)), rtol=1e-12)
