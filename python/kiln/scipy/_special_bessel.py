"""Bessel functions and spherical harmonics of kiln.scipy.special: i0, i0e, i1, i1e (Cephes' Chebyshev
expansions), bessel_jn (Miller's backward recurrence, as JAX) and sph_harm_y (normalized associated Legendre
functions by the standard three-term recurrence). Built on kiln.lax and kiln.numpy; re-exported by
kiln.scipy.special.
"""

import math

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln._src import core
from kiln._src.custom import custom_jvp
from kiln._src.numpy.util import concrete_int, promote_args_inexact, promote_dtypes_inexact
from kiln.scipy._special_common import chebyshev, eps, real_args, safe

# Cephes' Chebyshev coefficients: A for exp(-x) I(x) on [0, 8] (in x/2 - 2), B for exp(-x) sqrt(x) I(x) on
# (8, inf) (in 32/x - 2). float32 uses the last 18 and 7 terms of each (JAX's single-precision tables).
_I0E_A = [-4.41534164647933937950e-18, 3.33079451882223809783e-17, -2.43127984654795469359e-16,
          1.71539128555513303061e-15, -1.16853328779934516808e-14, 7.67618549860493561688e-14,
          -4.85644678311192946090e-13, 2.95505266312963983461e-12, -1.72682629144155570723e-11,
          9.67580903537323691224e-11, -5.18979560163526290666e-10, 2.65982372468238665035e-9,
          -1.30002500998624804212e-8, 6.04699502254191894932e-8, -2.67079385394061173391e-7,
          1.11738753912010371815e-6, -4.41673835845875056359e-6, 1.64484480707288970893e-5,
          -5.75419501008210370398e-5, 1.88502885095841655729e-4, -5.76375574538582365885e-4,
          1.63947561694133579842e-3, -4.32430999505057594430e-3, 1.05464603945949983183e-2,
          -2.37374148058994688156e-2, 4.93052842396707084878e-2, -9.49010970480476444210e-2,
          1.71620901522208775349e-1, -3.04682672343198398683e-1, 6.76795274409476084995e-1]
_I0E_B = [-7.23318048787475395456e-18, -4.83050448594418207126e-18, 4.46562142029675999901e-17,
          3.46122286769746109310e-17, -2.82762398051658348494e-16, -3.42548561967721913462e-16,
          1.77256013305652638360e-15, 3.81168066935262242075e-15, -9.55484669882830764870e-15,
          -4.15056934728722208663e-14, 1.54008621752140982691e-14, 3.85277838274214270114e-13,
          7.18012445138366623367e-13, -1.79417853150680611778e-12, -1.32158118404477131188e-11,
          -3.14991652796324136454e-11, 1.18891471078464383424e-11, 4.94060238822496958910e-10,
          3.39623202570838634515e-9, 2.26666899049817806459e-8, 2.04891858946906374183e-7,
          2.89137052083475648297e-6, 6.88975834691682398426e-5, 3.36911647825569408990e-3,
          8.04490411014108831608e-1]
_I1E_A = [2.77791411276104639959e-18, -2.11142121435816608115e-17, 1.55363195773620046921e-16,
          -1.10559694773538630805e-15, 7.60068429473540693410e-15, -5.04218550472791168711e-14,
          3.22379336594557470981e-13, -1.98397439776494371520e-12, 1.17361862988909016308e-11,
          -6.66348972350202774223e-11, 3.62559028155211703701e-10, -1.88724975172282928790e-9,
          9.38153738649577178388e-9, -4.44505912879632808065e-8, 2.00329475355213526229e-7,
          -8.56872026469545474066e-7, 3.47025130813767847674e-6, -1.32731636560394358279e-5,
          4.78156510755005422638e-5, -1.61760815825896745588e-4, 5.12285956168575772895e-4,
          -1.51357245063125314899e-3, 4.15642294431288815669e-3, -1.05640848946261981558e-2,
          2.47264490306265168283e-2, -5.29459812080949914269e-2, 1.02643658689847095384e-1,
          -1.76416518357834055153e-1, 2.52587186443633654823e-1]
_I1E_B = [7.51729631084210481353e-18, 4.41434832307170791151e-18, -4.65030536848935832153e-17,
          -3.20952592199342395980e-17, 2.96262899764595013876e-16, 3.30820231092092828324e-16,
          -1.88035477551078244854e-15, -3.81440307243700780478e-15, 1.04202769841288027642e-14,
          4.27244001671195135429e-14, -2.10154184277266431302e-14, -4.08355111109219731823e-13,
          -7.19855177624590851209e-13, 2.03562854414708950722e-12, 1.41258074366137813316e-11,
          3.25260358301548823856e-11, -1.89749581235054123450e-11, -5.58974346219658380687e-10,
          -3.83538038596423702205e-9, -2.63146884688951950684e-8, -2.51223623787020892529e-7,
          -3.88256480887769039346e-6, -1.10588938762623716291e-4, -9.76109749136146840777e-3,
          7.78576235018280120474e-1]


def _scaled_bessel(x, small_coeffs, large_coeffs, odd):
    """exp(-|x|) I_0(x) (odd=False) or exp(-|x|) I_1(x) (odd=True) from Cephes' two expansions."""
    single = x.dtype != np.float64
    if single:
        small_coeffs, large_coeffs = small_coeffs[-18:], large_coeffs[-7:]
    ax = jnp.abs(x)
    near = ax <= 8.0
    xs = safe(near, ax, 4.0)
    small = chebyshev(small_coeffs, xs * 0.5 - 2.0)
    xl = safe(~near, ax, 16.0)
    large = chebyshev(large_coeffs, 32.0 / xl - 2.0) / jnp.sqrt(xl)
    if odd:
        small = small * xs
        return jnp.sign(x) * jnp.where(near, small, large)
    return jnp.where(near, small, large)


def _compute_in_float(fn, x):
    """fn on float32/float64 x; other floats (float16, bfloat16) go through float32, as in JAX."""
    if x.dtype in (np.float32, np.float64):
        return fn(x)
    return fn(x.astype(np.float32)).astype(x.dtype)


def _i0e_impl(x):
    return _compute_in_float(lambda v: _scaled_bessel(v, _I0E_A, _I0E_B, False), x)


def _i1e_impl(x):
    return _compute_in_float(lambda v: _scaled_bessel(v, _I1E_A, _I1E_B, True), x)


_i0e = custom_jvp(_i0e_impl)
_i1e = custom_jvp(_i1e_impl)
_i0e.defjvps(lambda t, out, x: t * (_i1e(x) - jnp.sign(x) * out))


def _i1e_derivative(t, out, x):
    e = eps(x)
    tiny = jnp.abs(x) <= e  # i1e(x) ~ x/2 there
    xs = safe(~tiny, x, e)
    return t * jnp.where(tiny, 0.5, _i0e(xs) - out * (jnp.sign(xs) + 1.0 / xs))


_i1e.defjvps(_i1e_derivative)


def i0e(x, /):
    """The exponentially scaled modified Bessel function of order 0, exp(-|x|) I_0(x)."""
    x, = real_args("i0e", x)
    return _i0e(x)


def i0(x, /):
    """The modified Bessel function of order 0, I_0(x) = exp(|x|) i0e(x)."""
    x, = real_args("i0", x)
    return jnp.exp(jnp.abs(x)) * _i0e(x)


def i1e(x, /):
    """The exponentially scaled modified Bessel function of order 1, exp(-|x|) I_1(x)."""
    x, = real_args("i1e", x)
    return _i1e(x)


def i1(x, /):
    """The modified Bessel function of order 1, I_1(x) = exp(|x|) i1e(x)."""
    x, = real_args("i1", x)
    return jnp.exp(jnp.abs(x)) * _i1e(x)


# ---------------------------------------------------------------------------------------------------------
# bessel_jn: J_0 .. J_v by Miller's backward recurrence, normalized by J_0 + 2 J_2 + 2 J_4 + ... = 1

def bessel_jn(z, *, v, n_iter=50):
    """The Bessel functions of the first kind J_0(z) .. J_v(z), stacked on a new leading axis (shape
    (v + 1,) + z.shape). v and n_iter are Python ints; n_iter is the recurrence's starting order, which
    must exceed v and should exceed |z| (accuracy falls for larger z, as in JAX)."""
    z, = promote_dtypes_inexact("bessel_jn", z)
    if np.dtype(z.dtype).kind == "c":
        raise ValueError("complex input not supported.")
    v = concrete_int(v, "Argument v of bessel_jn.")
    n_iter = concrete_int(n_iter, "Argument n_iter of bessel_jn.")
    f0, f1 = jnp.zeros_like(z), lax.full_like(z, 1e-16)
    normalizer = jnp.zeros_like(z)
    values = [None] * (n_iter + 1)
    for k in range(n_iter, -1, -1):  # f_k = 2 (k + 1) f_{k+1} / z - f_{k+2}
        f = 2.0 * (k + 1.0) * f1 / z - f0
        if k % 2 == 0:
            normalizer = normalizer + 2.0 * f
        values[k] = f
        f0, f1 = f1, f
    normalizer = normalizer - values[0]
    return jnp.stack([values[k] / normalizer for k in range(v + 1)])


# ---------------------------------------------------------------------------------------------------------
# sph_harm_y: Y_n^m(theta, phi) with the Condon-Shortley phase, as scipy.special.sph_harm_y

def _normalized_legendre(n, m, x, n_max):
    """The orthonormalized associated Legendre function P_n^m(x) (m = |m| <= n <= n_max elementwise):
    P_m^m from the product formula, then P_l^m = a_l x P_{l-1}^m - b_l P_{l-2}^m up to l = n."""
    sin_t = jnp.sqrt(jnp.maximum(1.0 - x * x, 0.0))
    diag = lax.full_like(x, 0.5 / math.sqrt(math.pi))
    for k in range(1, n_max + 1):  # P_k^k = -sqrt(1 + 1/(2k)) sin(theta) P_{k-1}^{k-1}
        diag = jnp.where(k <= m, -math.sqrt(1.0 + 0.5 / k) * sin_t * diag, diag)
    prev2 = jnp.zeros_like(x)
    prev = diag
    out = jnp.where(n == m, diag, 0.0)
    for l in range(1, n_max + 1):  # l runs over m + 1 .. n elementwise; other elements keep their values
        live = (l > m) & (l <= n)
        ms = jnp.where(live, m, 0.0)
        a = jnp.sqrt((4.0 * l * l - 1.0) / jnp.where(live, l * l - ms * ms, 1.0))
        b = jnp.sqrt(jnp.maximum((2.0 * l + 1.0) * ((l - 1.0) ** 2 - ms * ms), 0.0)
                     / jnp.where(live, (2.0 * l - 3.0) * (l * l - ms * ms), 1.0))
        b = jnp.where(l - 1 == m, 0.0, b)
        cur = a * x * prev - b * prev2
        out = jnp.where(live & (l == n), cur, out)
        prev2 = jnp.where(live, prev, prev2)
        prev = jnp.where(live, cur, prev)
    return out


def sph_harm_y(n, m, theta, phi, diff_n=None, n_max=None):
    """The spherical harmonic Y_n^m(theta, phi) (theta the polar angle, phi the azimuth), complex, as
    scipy.special.sph_harm_y; n, m, theta and phi broadcast together. n_max bounds n and must be known while
    tracing (by default max(n), which needs a concrete n). diff_n (derivatives) is not supported, as in JAX."""
    if diff_n is not None:
        raise NotImplementedError("The 'diff_n' argument to jax.scipy.special.sph_harm_y is not supported.")
    if n_max is None:
        n_max = int(np.max(core.concrete_or_error(n, "The `n_max` argument of `sph_harm_y`, which must be "
                                                  "statically specified to use sph_harm_y within transformations")))
    n_max = concrete_int(n_max, "The `n_max` argument of `sph_harm_y`")
    theta, phi = promote_args_inexact("sph_harm_y", theta, phi)
    n, m, theta, phi = jnp.broadcast_arrays(jnp.asarray(n), jnp.asarray(m), theta, phi)
    nf, mf = n.astype(theta.dtype), m.astype(theta.dtype)
    abs_m = jnp.abs(mf)
    legendre = _normalized_legendre(nf, abs_m, jnp.cos(theta), n_max)
    angle = abs_m * phi
    harmonic = lax.complex(legendre * jnp.cos(angle), legendre * jnp.sin(angle))
    # Y_n^{-m} = (-1)^m conj(Y_n^m)
    flip = jnp.where(jnp.fmod(abs_m, 2.0) == 1, -1.0, 1.0)
    negative = lax.complex(flip * jnp.real(harmonic), -flip * jnp.imag(harmonic))
    return jnp.where(mf < 0, negative, harmonic)
