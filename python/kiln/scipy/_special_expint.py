"""Exponential, sine and cosine integrals and the dilogarithm of kiln.scipy.special: expi, exp1, expn, sici
and spence, by Cephes' rational approximations, series and continued fractions (the algorithms JAX uses).
Built on kiln.lax and kiln.numpy; re-exported by kiln.scipy.special.
"""

import math

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln._src.api import jit
from kiln._src.custom import custom_jvp
from kiln.scipy._special_common import eps, float_only, horner, iterate, real_args, safe

_EULER = 0.57721566490153286061

# ---------------------------------------------------------------------------------------------------------
# expi: Cephes' ei, one rational approximation per octave (0, 2], (2, 4], ..., (32, 64], the last beyond

_EXPI_SMALL = ([-5.350447357812542947283e0, 2.185049168816613393830e2, -4.176572384826693777058e3,
                5.541176756393557601232e4, -3.313381331178144034309e5, 1.592627163384945414220e6],
               [1.0, -5.250547959112862969197e1, 1.259616186786790571525e3, -1.756549581973534652631e4,
                1.493062117002725991967e5, -7.294949239640527645655e5, 1.592627163384945429726e6])
_EXPI_OCTAVES = [  # (upper end of the octave, numerator, denominator) of exp(-x) x Ei(x) - 1 in 1/x
    (4.0, [1.981808503259689673238e-2, -1.271645625984917501326e0, -2.088160335681228318920e0,
           2.755544509187936721172e0, -4.409507048701600257171e-1, 4.665623805935891391017e-2,
           -1.545042679673485262580e-3, 7.059980605299617478514e-5],
     [1.0, 1.476498670914921440652e0, 5.629177174822436244827e-1, 1.699017897879307263248e-1,
      2.291647179034212017463e-2, 4.450150439728752875043e-3, 1.727439612206521482874e-4,
      3.953167195549672482304e-5]),
    (8.0, [-1.373215375871208729803e0, -7.084559133740838761406e-1, 1.580806855547941010501e0,
           -2.601500427425622944234e-1, 2.994674694113713763365e-2, -1.038086040188744005513e-3,
           4.371064420753005429514e-5, 2.141783679522602903795e-6],
     [1.0, 8.585231423622028380768e-1, 4.483285822873995129957e-1, 7.687932158124475434091e-2,
      2.449868241021887685904e-2, 8.832165941927796567926e-4, 4.590952299511353531215e-4,
      -4.729848351866523044863e-6, 2.665195537390710170105e-6]),
    (16.0, [-2.106934601691916512584e0, 1.732733869664688041885e0, -2.423619178935841904839e-1,
            2.322724180937565842585e-2, 2.372880440493179832059e-4, -8.343219561192552752335e-5,
            1.363408795605250394881e-5, -3.655412321999253963714e-7, 1.464941733975961318456e-8,
            6.176407863710360207074e-10],
     [1.0, -2.298062239901678075778e-1, 1.105077041474037862347e-1, -1.566542966630792353556e-2,
      2.761106850817352773874e-3, -2.089148012284048449115e-4, 1.708528938807675304186e-5,
      -4.459311796356686423199e-7, 1.394634930353847498145e-8, 6.150865933977338354138e-10]),
    (32.0, [-2.458119367674020323359e-1, -1.483382253322077687183e-1, 7.248291795735551591813e-2,
            -1.348315687380940523823e-2, 1.342775069788636972294e-3, -7.942465637159712264564e-5,
            2.644179518984235952241e-6, -4.239473659313765177195e-8],
     [1.0, -1.044225908443871106315e-1, -2.676453128101402655055e-1, 9.695000254621984627876e-2,
      -1.601745692712991078208e-2, 1.496414899205908021882e-3, -8.462452563778485013756e-5,
      2.728938403476726394024e-6, -4.239462431819542051337e-8]),
    (64.0, [1.212561118105456670844e-1, -5.823133179043894485122e-1, 2.348887314557016779211e-1,
            -3.040034318113248237280e-2, 1.510082146865190661777e-3, -2.523137095499571377122e-5],
     [1.0, -1.002252150365854016662e0, 2.928709694872224144953e-1, -3.337004338674007801307e-2,
      1.560544881127388842819e-3, -2.523137093603234562648e-5]),
    (np.inf, [-7.657847078286127362028e-1, 6.886192415566705051750e-1, -2.132598113545206124553e-1,
              3.346107552384193813594e-2, -3.076541477344756050249e-3, 1.747119316454907477380e-4,
              -6.103711682274170530369e-6, 1.218032765428652199087e-7, -1.086076102793290233007e-9],
     [1.0, -1.888802868662308731041e0, 1.066691687211408896850e0, -2.751915982306380647738e-1,
      3.930852688233823569726e-2, -3.414684558602365085394e-3, 1.866844370703555398195e-4,
      -6.345146083130515357861e-6, 1.239754287483206878024e-7, -1.086076102793126632978e-9]),
]


def _expi_positive(x):
    small = x <= 2.0
    xs = safe(small, x, 1.0)
    out = xs * horner(_EXPI_SMALL[0], xs) / horner(_EXPI_SMALL[1], xs) + _EULER + jnp.log(xs)
    lower = 2.0
    for upper, num, den in _EXPI_OCTAVES:
        here = (x > lower) & (x <= upper)
        xo = safe(here, x, min(2.0 * lower, 64.0))
        w = 1.0 / xo
        octave = jnp.exp(xo) * w * (w * horner(num, w) / horner(den, w) + 1.0)
        out = jnp.where(here, octave, out)
        lower = upper
    return out


def _expi_impl(x):
    negative = x < 0
    pos = _expi_positive(safe(x > 0, x, 1.0))
    neg = -_expn_impl(jnp.ones_like(x), safe(negative, -x, 1.0))
    return jnp.where(negative, neg, jnp.where(x == 0, -np.inf, pos))


_expi_jit = jit(_expi_impl)
_expi = custom_jvp(lambda x: _expi_jit(x))
_expi.defjvps(lambda t, out, x: t * jnp.exp(x) / x)


def expi(x, /):
    """The exponential integral Ei(x) = -PV int_{-x}^inf exp(-t)/t dt (-inf at 0); its derivative is exp(x)/x."""
    x, = real_args("expi", x)
    return _expi(x)


# ---------------------------------------------------------------------------------------------------------
# expn: Cephes' expn (a power series for x <= 1, a continued fraction above, an asymptotic form for n >= 5000)

def _expn_small_x(n, x, active):
    """E_n(x) for 0 < x <= 1: (-x)^(n-1) / (n-1)! (psi(n) - log x) - sum_k (-x)^k / ((k - n + 1) k!)."""
    e = eps(x)
    one, zero = jnp.ones_like(x), jnp.zeros_like(x)

    def harmonic_step(state):  # psi(n) = -euler + sum_{i<n} 1/i
        i, psi = state
        return (i + 1.0, psi + 1.0 / i), i + 1.0 < n

    _, psi = iterate(harmonic_step, (one, -_EULER - jnp.log(x)), active & (n > 1), 1 << 30)
    z = -x

    def series_step(state):
        xk, yk, pk, total, _ = state
        xk = xk + 1.0
        yk = yk * z / xk
        pk = pk + 1.0
        total = total + jnp.where(pk != 0, yk / safe(pk != 0, pk, 1.0), 0.0)
        t = jnp.where(total != 0, jnp.abs(yk / safe(total != 0, total, 1.0)), 1.0)
        return (xk, yk, pk, total, t), t > e

    n1 = jnp.where(n == 1, 2.0, n)
    total0 = jnp.where(n == 1, 0.0, 1.0 / (1.0 - n1))
    _, _, _, total, _ = iterate(series_step, (zero, one, 1.0 - n, total0, one), active, 1 << 30)
    return z ** (n - 1.0) * psi / jnp.exp(lax.lgamma(n)) - total


def _expn_large_x(n, x, active):
    """E_n(x) for x > 1 by its continued fraction (convergents rescaled as they grow)."""
    e = eps(x)
    big = 1.44115188075855872e17
    one = jnp.ones_like(x)

    def step(state):
        k, pkm2, qkm2, pkm1, qkm1, ans = state
        k = k + 1.0
        odd = jnp.fmod(k, 2.0) == 1.0
        yk = jnp.where(odd, 1.0, x)
        xk = jnp.where(odd, n + (k - 1.0) / 2.0, k / 2.0)
        pk = pkm1 * yk + pkm2 * xk
        qk = qkm1 * yk + qkm2 * xk
        nonzero = qk != 0
        r = pk / safe(nonzero, qk, 1.0)
        t = jnp.where(nonzero, jnp.abs((ans - r) / r), 1.0)
        ans = jnp.where(nonzero, r, ans)
        scale = jnp.where(jnp.abs(pk) > big, 1.0 / big, 1.0)
        return (k, pkm1 * scale, qkm1 * scale, pk * scale, qk * scale, ans), t > e

    init = (one, one, x, one, x + n, 1.0 / (x + n))
    ans = iterate(step, init, active, 1 << 30)[5]
    return ans * jnp.exp(-x)


def _expn_huge_n(n, x):
    """E_n(x) for n >= 5000: the first terms of its asymptotic expansion in n."""
    xk = x + n
    yk = 1.0 / (xk * xk)
    ans = yk * n * (6.0 * x * x - 8.0 * n * x + n * n)
    ans = yk * (ans + n * (n - 2.0 * x))
    ans = yk * (ans + n)
    return (ans + 1.0) * jnp.exp(-x) / xk


def _expn_impl(n, x):
    invalid = (n < 0) | (x < 0) | jnp.isnan(x) | jnp.isnan(n)
    x_zero = x == 0
    n_zero = n == 0
    huge_n = n >= 5000
    done = invalid | x_zero | n_zero | huge_n
    small = ~done & (x <= 1)
    large = ~done & (x > 1)
    xs, ns = safe(~done, x, 1.0), safe(~done, n, 1.0)
    out = jnp.where(small, _expn_small_x(ns, safe(small, xs, 0.5), small),
                    _expn_large_x(ns, safe(large, xs, 2.0), large))
    out = jnp.where(huge_n, _expn_huge_n(safe(huge_n, n, 5000.0), x), out)
    out = jnp.where(n_zero, jnp.exp(-x) / x, out)
    out = jnp.where(x_zero, jnp.where(n < 2, np.inf, 1.0 / jnp.maximum(n - 1.0, 1.0)), out)
    return jnp.where(invalid, np.nan, out)


_expn_jit = jit(_expn_impl)


def _expn_jvp(primals, tangents):
    n, x = primals
    _, t = tangents
    # d/dx E_n = -E_{n-1}; for n == 0 that is -E_{-1}(x) = -exp(-x) (1/x + 1/x^2), which expn itself calls nan
    e_minus_1 = jnp.exp(-x) * (1.0 / x + 1.0 / (x * x))
    return _expn(n, x), -t * jnp.where(n == 0, e_minus_1, _expn(n - 1.0, x))


_expn = custom_jvp(lambda n, x: _expn_jit(n, x))
_expn.defjvp(_expn_jvp)


def expn(n, x):
    """The generalized exponential integral E_n(x) = int_1^inf exp(-x t) / t^n dt (nan for n < 0 or x < 0);
    n broadcasts against x and is not differentiated; d/dx E_n = -E_{n-1}."""
    n, x = real_args("expn", n, x)
    return _expn(lax.stop_gradient(n), x)


def exp1(x, /):
    """The exponential integral E_1(x) = expn(1, x)."""
    x, = real_args("exp1", x)
    return _expn(jnp.ones_like(x), x)


# ---------------------------------------------------------------------------------------------------------
# sici: Cephes' sici (rational approximations up to 4, auxiliary functions f and g beyond)

_SI_N = [-8.39167827910303881427e-11, 4.62591714427012837309e-8, -9.75759303843632795789e-6,
         9.76945438170435310816e-4, -4.13470316229406538752e-2, 1.00000000000000000302e0]
_SI_D = [2.03269266195951942049e-12, 1.27997891179943299903e-9, 4.41827842801218905784e-7,
         9.96412122043875552487e-5, 1.42085239326149893930e-2, 9.99999999999999996984e-1]
_CI_N = [2.02524002389102268789e-11, -1.35249504915790756375e-8, 3.59325051419993077021e-6,
         -4.74007206873407909465e-4, 2.89159652607555242092e-2, -1.00000000000000000080e0]
_CI_D = [4.07746040061880559506e-12, 3.06780997581887812692e-9, 1.23210355685883423679e-6,
         3.17442024775032769882e-4, 5.10028056236446052392e-2, 4.00000000000000000080e0]
_F4 = ([4.23612862892216586994e0, 5.45937717161812843388e0, 1.62083287701538329132e0, 1.67006611831323023771e-1,
        6.81020132472518137426e-3, 1.08936580650328664411e-4, 5.48900223421373614008e-7],
       [1.0, 8.16496634205391016470e0, 7.30828822505564552187e0, 1.86792257950184183883e0, 1.78792052963149907262e-1,
        7.01710668322789753610e-3, 1.10034357153915731354e-4, 5.48900252756255700982e-7])
_G4 = ([8.71001698973114191777e-2, 6.11379109952219284151e-1, 3.97180296392337498885e-1, 7.48527737628469092119e-2,
        5.38868681462177273157e-3, 1.61999794598934024525e-4, 1.97963874140963632189e-6, 7.82579040744090311069e-9],
       [1.0, 1.64402202413355338886e0, 6.66296701268987968381e-1, 9.88771761277688796203e-2, 6.22396345441768420760e-3,
        1.73221081474177119497e-4, 2.02659182086343991969e-6, 7.82579218933534490868e-9])
_F8 = ([4.55880873470465315206e-1, 7.13715274100146711374e-1, 1.60300158222319456320e-1, 1.16064229408124407915e-2,
        3.49556442447859055605e-4, 4.86215430826454749482e-6, 3.20092790091004902806e-8, 9.41779576128512936592e-11,
        9.70507110881952024631e-14],
       [1.0, 9.17463611873684053703e-1, 1.78685545332074536321e-1, 1.22253594771971293032e-2, 3.58696481881851580297e-4,
        4.92435064317881464393e-6, 3.21956939101046018377e-8, 9.43720590350276732376e-11, 9.70507110881952025725e-14])
_G8 = ([6.97359953443276214934e-1, 3.30410979305632063225e-1, 3.84878767649974295920e-2, 1.71718239052347903558e-3,
        3.48941165502279436777e-5, 3.47131167084116673800e-7, 1.70404452782044526189e-9, 3.85945925430276600453e-12,
        3.14040098946363334640e-15],
       [1.0, 1.68548898811011640017e0, 4.87852258695304967486e-1, 4.67913194259625806320e-2, 1.90284426674399523638e-3,
        3.68475504442561108162e-5, 3.57043223443740838771e-7, 1.72693748966316146736e-9, 3.87830166023954706752e-12,
        3.14040098946363335242e-15])


def _sici_impl(x):
    ax = jnp.abs(x)
    near = ax <= 4.0
    far = (ax > 4.0) & (ax <= 1e9)
    xn = safe(near & (ax > 0), ax, 1.0)
    t = xn * xn
    si_near = xn * horner(_SI_N, t) / horner(_SI_D, t)
    ci_near = _EULER + jnp.log(xn) + t * horner(_CI_N, t) / horner(_CI_D, t)
    si_near = jnp.where(ax == 0, 0.0, si_near)
    ci_near = jnp.where(ax == 0, -np.inf, ci_near)
    xf = safe(far, ax, 8.0)
    z = 1.0 / (xf * xf)
    below8 = xf < 8.0
    f = jnp.where(below8, horner(_F4[0], z) / (xf * horner(_F4[1], z)), horner(_F8[0], z) / (xf * horner(_F8[1], z)))
    g = jnp.where(below8, z * horner(_G4[0], z) / horner(_G4[1], z), z * horner(_G8[0], z) / horner(_G8[1], z))
    s, c = jnp.sin(xf), jnp.cos(xf)
    si_far = math.pi / 2 - f * c - g * s
    ci_far = f * s - g * c
    xh = safe(~near & ~far, ax, 1e10)
    si_huge = jnp.where(jnp.isposinf(xh), math.pi / 2, math.pi / 2 - jnp.cos(xh) / xh)
    ci_huge = jnp.where(jnp.isposinf(xh), 0.0, jnp.sin(xh) / xh)
    si = jnp.where(near, si_near, jnp.where(far, si_far, si_huge))
    ci = jnp.where(near, ci_near, jnp.where(far, ci_far, ci_huge))
    return jnp.sign(x) * si, jnp.where(jnp.isneginf(x), np.nan, ci)


def _sici_jvp(primals, tangents):
    x, = primals
    t, = tangents
    return _sici(x), (jnp.sinc(x / math.pi) * t, jnp.cos(x) / x * t)


_sici = custom_jvp(_sici_impl)
_sici.defjvp(_sici_jvp)


def sici(x, /):
    """The sine and cosine integrals (Si(x), Ci(x)); for x < 0, Ci is the real part (as JAX) and nan at -inf."""
    x, = real_args("sici", x)
    return _sici(x)


# ---------------------------------------------------------------------------------------------------------
# spence: Cephes' dilogarithm, int_1^x log(t) / (1 - t) dt for x >= 0

_SPENCE_A = [4.65128586073990045278e-5, 7.31589045238094711071e-3, 1.33847639578309018650e-1,
             8.79691311754530315341e-1, 2.71149851196553469920e0, 4.25697156008121755724e0,
             3.29771340985225106936e0, 1.00000000000000000126e0]
_SPENCE_B = [6.90990488912553276999e-4, 2.54043763932544379113e-2, 2.82974860602568089943e-1,
             1.41172597751831069617e0, 3.63800533345137075418e0, 5.03278880143316990390e0,
             3.54771340985225096217e0, 9.99999999999999998740e-1]


def _spence_impl(x):
    ok = (x > 0) & (x != 1)
    v = safe(ok, x, 0.5)
    inverted = v > 2.0
    v = jnp.where(inverted, 1.0 / v, v)
    above = v > 1.5
    below = v < 0.5
    w = jnp.where(above, 1.0 / v - 1.0, jnp.where(below, -v, v - 1.0))
    y = -w * horner(_SPENCE_A, w) / horner(_SPENCE_B, w)
    vb = safe(below, v, 0.25)
    y = jnp.where(below, math.pi ** 2 / 6.0 - jnp.log(vb) * jnp.log1p(-vb) - y, y)
    y = jnp.where(inverted | above, -0.5 * jnp.log(v) ** 2 - y, y)
    y = jnp.where(x == 1, 0.0, jnp.where(x == 0, math.pi ** 2 / 6.0, y))
    return jnp.where(x < 0, np.nan, y)


def spence(x, /):
    """Spence's function (the dilogarithm of 1 - x) for real x >= 0 (nan below); float32/float64 only."""
    x = float_only("spence", x)
    return _spence_impl(x)

