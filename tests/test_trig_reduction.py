"""sin/cos/tan of huge arguments: the exact (Payne-Hanek) argument reduction of codegen/mathfn.c,
against NumPy in float64 (glibc reduces exactly) and values hard-coded from mpmath at 2000 bits.
Guards fuzzer defect D1 (issue 32): jnp.cos(9.2e18) was -8.2e27 and jnp.cos(1e300) NaN with x64,
since the three-part Cody-Waite reduction lost every bit above ~1e18."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp

# (the x64 fixture is in conftest.py)

FNS = ("sin", "cos", "tan")
ULPS = {"sin": 3, "cos": 3, "tan": 6}  # tan divides sin by cos: a few ulp more


def ulp_err(got, want, dtype):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    spacing = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    return np.abs(got - want) / spacing


def huge_f64(rng, n):
    """Magnitudes log-uniform over 1e-300..1e308 and over the int64 range, both signs, and the
    doubles just above the reduction's switch (2^30)."""
    mags = np.concatenate([10.0 ** rng.uniform(-300, 308.25, n),
                           np.abs(rng.integers(-2**63, 2**63 - 1, n // 4, dtype=np.int64).astype(np.float64)),
                           2.0 ** 30 + rng.uniform(-8, 8, 64), 2.0 ** rng.uniform(29, 64, n // 4)])
    return mags * rng.choice([-1.0, 1.0], size=mags.shape)


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("jit", [False, True])
def test_f64_huge_arguments_match_numpy(x64, fn, jit):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    x = huge_f64(np.random.default_rng(seed), 20000)
    f = getattr(jnp, fn)
    got = np.asarray((kiln.jit(f) if jit else f)(jnp.asarray(x)))
    err = ulp_err(got, getattr(np, fn)(x), np.float64)
    i = int(np.argmax(err))
    assert err[i] <= ULPS[fn], f"seed {seed}: {fn}({x[i]!r}) = {got[i]!r}, NumPy {getattr(np, fn)(x[i])!r}"


# 6381956970095103 * 2^797 = 5.319372648326541e+255 is the double closest to a multiple of pi/2
# (|r| = 4.7e-19): it needs 61 bits of the reduced argument beyond the 53 of the result. glibc's
# cos there is 8 ulp off; these are mpmath's values at 2000 bits.
HARD = 6381956970095103 * 2.0 ** 797
HARD_VALUES = {"sin": 1.0, "cos": -4.687165924254628e-19, "tan": -2.133485385753704e+18}


@pytest.mark.parametrize("fn", FNS)
def test_f64_closest_to_a_multiple_of_pi_over_2(x64, fn):
    x = np.array([HARD, -HARD, 5.319372648326541e+255])
    got = np.asarray(kiln.jit(getattr(jnp, fn))(jnp.asarray(x)))
    want = np.array([HARD_VALUES[fn], HARD_VALUES[fn] * (1.0 if fn == "cos" else -1.0), HARD_VALUES[fn]])
    assert np.all(ulp_err(got, want, np.float64) <= 1), (fn, got, want)


def test_f64_fuzzer_repros_d1(x64):
    """The fuzzer's repros: JAX gives 0.89459905 and -0.57538611 (and kiln gave -8.2e27 and NaN)."""
    got = np.asarray(jnp.cos(np.array([9.2e18, 1e300, np.iinfo(np.int64).max], np.float64)))
    want = np.cos(np.array([9.2e18, 1e300, float(np.iinfo(np.int64).max)]))
    np.testing.assert_allclose(got[:2], [0.89459905, -0.57538611], atol=1e-8)
    assert np.all(ulp_err(got, want, np.float64) <= 3), (got, want)
    assert np.isnan(np.asarray(jnp.sin(np.array([np.inf, -np.inf, np.nan])))).all()
    assert float(jnp.sin(np.float64(1.7976931348623157e308))) == pytest.approx(np.sin(1.7976931348623157e308), rel=1e-15)


@pytest.mark.parametrize("fn", FNS)
def test_f32_huge_arguments_match_numpy(fn):
    rng = np.random.default_rng()
    x = (10.0 ** rng.uniform(-30, 38.5, 20000) * rng.choice([-1.0, 1.0], 20000)).astype(np.float32)
    x = np.concatenate([x, np.float32([1e30, 3e38, -3e38, 3.4028235e38, 1e5, -123456.7])])
    got = np.asarray(kiln.jit(getattr(jnp, fn))(jnp.asarray(x)))
    err = ulp_err(got, getattr(np, fn)(x.astype(np.float64)), np.float32)
    i = int(np.argmax(err))
    assert err[i] <= ULPS[fn], f"{fn}({x[i]!r}) = {got[i]!r}"


@pytest.mark.parametrize("fn", ["sin", "cos", "tan", "sinh", "cosh", "exp"])
def test_complex_parts_that_feed_a_huge_trig_argument(x64, fn):
    """sin/cos/tan of z with a huge real part, sinh/cosh/exp with a huge imaginary part: their
    cos/sin of that part go through the same reduction."""
    rng = np.random.default_rng()
    big = 10.0 ** rng.uniform(10, 300, 2000) * rng.choice([-1.0, 1.0], 2000)
    # |small| >= 1/2: tan's denominator cos 2a + cosh 2b cancels near its poles for small b (as at
    # moderate a: a conditioning matter of the complex formula, not of the reduction)
    small = rng.uniform(0.5, 3, 2000) * rng.choice([-1.0, 1.0], 2000)
    z = big + 1j * small if fn in ("sin", "cos", "tan") else small + 1j * big
    got = np.asarray(kiln.jit(getattr(jnp, fn))(jnp.asarray(z)))
    want = getattr(np, fn)(z)
    err = np.abs(got - want) / np.spacing(np.abs(want))
    assert err.max() <= 8, (fn, z[np.argmax(err)], got[np.argmax(err)], want[np.argmax(err)])


def sprinkle_huge(rng, shape, dtype):
    """Moderate values with a few huge ones (both signs) among them."""
    x = rng.uniform(-10, 10, shape)
    flat = x.reshape(-1)
    where = rng.choice(flat.size, size=max(1, flat.size // 50), replace=False)
    big = 3e38 if dtype in (np.float32, "bfloat16") else 1e300
    flat[where] = 10.0 ** rng.uniform(6, np.log10(big), where.size) * rng.choice([-1.0, 1.0], where.size)
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(), (7,), (33, 65), (3, 4, 5)])
def test_cpu_rerun_of_flagged_elements_in_fused_kernels(x64, dtype, shape):
    """A CPU kernel runs the fast reduction over every element (vectorized) and redoes, in a second
    scalar pass, the elements it flagged as huge: fused around other ops, any rank, a 0-d one, and
    a bool result."""
    rng = np.random.default_rng()
    x = sprinkle_huge(rng, shape, dtype).astype(dtype)
    if shape == ():
        x = np.asarray(dtype(1e30 if dtype == np.float32 else 1e300))
    got = np.asarray(kiln.jit(lambda a: jnp.sin(a) * 3.0 - jnp.cos(a))(jnp.asarray(x)))
    xd = x.astype(np.float64)
    want = np.sin(xd) * 3.0 - np.cos(xd)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)
    flags = np.asarray(kiln.jit(lambda a: jnp.sin(a) > 0.5)(jnp.asarray(x)))
    near = np.abs(np.sin(xd) - 0.5) < 1e-5  # rounding may go either way there
    assert np.array_equal(flags[~near], (np.sin(xd) > 0.5)[~near])


def test_cpu_rerun_with_a_transposed_read_and_low_floats(x64):
    """The tiled nest (a transposed read) computes every path inline; bfloat16's range reaches the
    exact reduction, float16's does not."""
    rng = np.random.default_rng()
    x = sprinkle_huge(rng, (40, 70), np.float64)
    got = np.asarray(kiln.jit(lambda a: jnp.tan(a.T) + 1.0)(jnp.asarray(x)))
    want = np.tan(x.T) + 1.0
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    xb = jnp.asarray(sprinkle_huge(rng, (300,), np.float32)).astype(jnp.bfloat16)
    got = np.asarray(kiln.jit(jnp.sin)(xb)).astype(np.float64)
    want = np.sin(np.asarray(xb).astype(np.float64))
    np.testing.assert_allclose(got, want, atol=1e-2)
    xh = rng.uniform(-6e4, 6e4, 300).astype(np.float16)
    np.testing.assert_allclose(np.asarray(kiln.jit(jnp.cos)(jnp.asarray(xh))).astype(np.float64),
                               np.cos(xh.astype(np.float64)), atol=2e-3)


def test_trig_inside_a_pad_block_and_outside_in_one_kernel():
    """A CPU kernel whose sin runs both inside a pad's/concatenate's scf.if block and outside it:
    the huge-argument flags of the two blocks were ORed across them (generated MLIR did not
    parse; optax's line-search tests)."""
    x = np.random.default_rng().uniform(-3, 3, 9).astype(np.float32)
    f = kiln.jit(lambda x: jnp.sin(jnp.concatenate([jnp.sin(x), jnp.cos(x)]) * 2e5))
    # against the same operations run one at a time (eager: no fusion), and NumPy in float64 within
    # what one float32 ulp of the inner sin becomes once multiplied by 2e5 (~0.012)
    eager = jnp.sin(jnp.concatenate([jnp.sin(x), jnp.cos(x)]) * 2e5)
    np.testing.assert_allclose(np.asarray(f(x)), np.asarray(eager), rtol=1e-6, atol=1e-6)
    inner = np.concatenate([np.sin(x.astype(np.float64)), np.cos(x.astype(np.float64))]).astype(np.float32)
    np.testing.assert_allclose(np.asarray(f(x)), np.sin((inner * np.float32(2e5)).astype(np.float64)), atol=3e-2)
    g = kiln.jit(lambda x: jnp.sin(jnp.pad(jnp.sin(x), (2, 3))) + jnp.sin(x).sum())
    s = np.sin(x.astype(np.float64))
    np.testing.assert_allclose(np.asarray(g(x)), np.sin(np.pad(s, (2, 3))) + s.sum(), rtol=1e-5, atol=1e-5)
