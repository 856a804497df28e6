/* mathfn.c: transcendental functions expanded into straight-line arith/math MLIR ops.
 * Range reduction + polynomial kernels; every branch is an arith.select, so a loop around the
 * emitted ops vectorizes (LLVM's loop vectorizer cannot widen libm calls). Depends on emit.h only.
 *
 * Algorithms follow the classical literature: Cody & Waite range reduction ("Software Manual for the
 * Elementary Functions", 1980), the fdlibm formulations of log/log1p (s = f/(2+f) with the hfsq
 * correction), cos (1-hz split), asin (half-angle), expm1/sinh/tanh identities; erfc as
 * exp(-x^2) * t * Q(t) with t = K/(K+x) (the mapping of Numerical Recipes' erfcc); erf_inv in
 * Giles' w = -log(1-x^2) variable ("Approximating the erfinv function", GPU Computing Gems, 2011);
 * Stirling series for lgamma/digamma with upward recurrence and reflection; pow via a double-double
 * log (f64) or an f64 evaluation (f32).
 * Coefficients are our own: near-minimax Chebyshev fits (mpmath.chebyfit, 50 digits) of the reduced
 * function named at each use, rounded to the target precision. Tables ending in 32 are f32
 * coefficients (exact as printed), 64 are f64. Tables with _M/_H are in u = (v - M) / H. */
#include "mathfn.h"
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- coefficient tables (ascending powers) ---- */
/* exp: e^r - 1 = r + r^2 E(r), |r| <= ln2/2.   log: 2 atanh(s) = 2s + s z P(z), z = s^2 <= 0.0295.
 * sin: r + r z S(z), cos: 1 - z/2 + z^2 C(z), z = r^2 <= (pi/4)^2.  atan: t + t z A(z), z <= tan^2(pi/8).
 * asin: s + s z P(z), z <= 1/4.  erf: x + x P(x^2), |x| < 1/2.  erfc: erfc(x) e^(x^2) / t = Q(u),
 * t = K/(K+x), x in [1/2, 10.1] (f32, K=2) or [1/2, 27.5] (f64, K=4).  erf_inv: erf_inv(x)/x as a
 * polynomial in w = -log(1-x^2) (piece 0) or in sqrt(w) (the others). */
static const double k_exp32[] = {
    0.5, 0.166666672, 0.0416664667, 0.00833331048, 0.00139336416, 0.000198909809
};
static const double k_log32[] = {
    0.666666865, 0.3998878, 0.295799494
};
static const double k_sin32[] = {
    -0.166666642, 0.00833274797, -0.000195878907
};
static const double k_cos32[] = {
    0.0416666642, -0.00138883025, 2.45479423e-05
};
static const double k_atan32[] = {
    -0.333333313, 0.199995399, -0.142639562, 0.107437313, -0.0645192787
};
static const double k_asin32[] = {
    0.166666731, 0.0749885514, 0.0450013801, 0.0265545417, 0.0380850248
};
static const double k_exp64[] = {
    0.5, 0.16666666666666671, 0.041666666666666671, 0.0083333333333261411, 0.0013888888888883752,
    0.00019841269874800493, 2.4801587325533363e-05, 2.7557255425746435e-06, 2.7557273661348637e-07,
    2.5105206373957011e-08, 2.0914679376583935e-09
};
static const double k_log64[] = { /* deg 7: at the coefficient-rounding floor, for pow's log */
    0.66666666666666663, 0.40000000000000879, 0.28571428570803614, 0.22222222391713917,
    0.18181795640132906, 0.15386239702814658, 0.13268773138656886, 0.13086626147840102
};
static const double k_sin64[] = {
    -0.16666666666666666, 0.0083333333333333315, -0.00019841269841265065, 2.7557319219339167e-06,
    -2.5052106232447578e-08, 1.6058531618986147e-10, -7.5866971177069183e-13
};
static const double k_cos64[] = {
    0.041666666666666664, -0.0013888888888887398, 2.4801587298765689e-05, -2.7557317271729793e-07,
    2.0876146268403199e-09, -1.1382632425521717e-11
};
static const double k_atan64[] = {
    -0.33333333333333331, 0.19999999999995521, -0.14285714284666542, 0.11111111015256361,
    -0.090909045781239026, 0.076921831908260865, -0.066645114473819475, 0.0585814891280221,
    -0.050854497379402598, 0.039231658295587189, -0.01917688711906226
};
static const double k_asin64[] = {
    0.16666666666666669, 0.074999999999984329, 0.044642857146355429, 0.030381944138531247,
    0.022372172942149889, 0.017352392720869973, 0.013971212973552933, 0.011479177415184906,
    0.010322814350185779, 0.0054575067186403581, 0.017400879442694021, -0.014851887071247204,
    0.028757851367421566
};
static const double k_erf32[] = {
    0.128379166, -0.376126379, 0.112837739, -0.0268631428, 0.00520041352, -0.000769453414
};
static const double k_erfc32[] = {
    0.510791361, 0.343580335, 0.139735907, 0.0182215646, -0.0107524972, -0.0032445176,
    0.00152476062, 0.000439259165, -0.00026885065, -5.06331344e-05
};
#define K_ERFC32_M 0.5
#define K_ERFC32_H 0.5
static const double k_erfinv32_0[] = {
    1.50140941, 0.616600692, -0.0261087064, -0.0195738506, 0.00852927286, -0.000485587865,
    -0.000845699513, 0.000285724702, 3.56078599e-05, -3.40725928e-05
};
#define K_ERFINV32_0_M 2.5
#define K_ERFINV32_0_H 2.5
static const double k_erfinv32_1[] = {
    2.99477983, 0.92914325, 0.00556551199, -0.00378750404, 0.00244985917, -0.00152992911,
    0.000776621921, -0.00019991734, -7.6558048e-05, 5.66078888e-05
};
#define K_ERFINV32_1_M 3.16131566
#define K_ERFINV32_1_H 0.925247685
static const double k_erf64[] = {
    0.12837916709551259, -0.37612638903183754, 0.11283791670955123, -0.026866170645130034,
    0.0052239776254031922, -0.00085483270161591633, 0.00012055332131175981, -1.4925586560096415e-05,
    1.6459034327218912e-06, -1.6273138761686977e-07, 1.3214378238338438e-08
};
static const double k_erfc64[] = {
    0.27399891525012277, 0.24413718227022049, 0.1933021755663093, 0.1352134578283091,
    0.082712896969501556, 0.043502734309969468, 0.019095378727384087, 0.0065925133353612339,
    0.0015280139129401008, 7.0239713410968595e-05, -0.00011376316182163857, -4.4203186087022517e-05,
    -9.0884437279573092e-07, 4.7151494156313726e-06, 1.1737889698230018e-06, -3.558694133811147e-07,
    -2.1198483478338754e-07, 1.8605843307042893e-08, 3.168492204316837e-08, 2.7555238983291625e-11,
    -4.4176297777047219e-09, -1.2852810461065093e-10, 4.5284639107826435e-10
};
#define K_ERFC64_M 0.5
#define K_ERFC64_H 0.5
static const double k_erfinv64_0[] = {
    1.6536545626831027, 0.75049432007996353, -0.058922567103787599, -0.022604447453444733,
    0.017808361818756901, -0.0041373143775478953, -0.0012716922769885114, 0.0012324855702994214,
    -0.00026439358646646055, -0.0001168888508125076, 9.3366927876240577e-05,
    -1.5027665773117194e-05, -1.1255653983969421e-05, 7.12993974314695e-06, -6.8765518072549403e-07,
    -1.0591188098187532e-06, 5.456420572209782e-07, -1.0412692841159635e-08,
    -1.0514990713371436e-07, 3.9315111576465581e-08, 9.0720759478929099e-09,
    -8.6271910090143941e-09, -8.5779669396399409e-11, 7.8017121990362525e-10
};
#define K_ERFINV64_0_M 3.125
#define K_ERFINV64_0_H 3.125
static const double k_erfinv64_1[] = {
    3.0838856104922208, 0.75394422577062392, 0.0030211394363840699, -0.0015825410894034398,
    0.00078830785099813527, -0.00040063569842118248, 0.00016966502592018017,
    -4.7391826778828648e-05, 2.4058391918338327e-06, 5.1273144703487669e-06,
    -2.6646983082852556e-06, 5.2646803054250134e-07, 9.2676427755231175e-08,
    -9.4698459375381103e-08, 2.6703991718481456e-08, -3.6086983146965074e-10,
    -2.7195823537882847e-09, 9.8504713312471308e-10, 3.9290565981829761e-12, -6.385846404875191e-11
};
#define K_ERFINV64_1_M 3.25
#define K_ERFINV64_1_H 0.75
static const double k_erfinv64_2[] = {
    4.8549579002380927, 1.0153505568899484, -0.00014335627770787981, -0.00021673389056898912,
    7.7026388112015078e-05, -2.0040083004243101e-05, 4.6279028554944251e-06,
    -1.0188841595581906e-06, 2.352082288387594e-07, -6.916795098968774e-08, 2.9745639795327308e-08,
    -1.5615505513165286e-08, 7.8779901910705452e-09, -3.6186313359188167e-09,
    1.5638483879358855e-09, -4.5877623967754503e-10, -2.1015609829722197e-11, 4.313830864687001e-11
};
#define K_ERFINV64_2_M 5.0049999999999999
#define K_ERFINV64_2_H 1.0049999999999999

#define NCOEF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- op writers ---- */

typedef struct {
  char s[24]; /* SSA name, "%t17" */
} V;

typedef struct {
  kl_emitter *e;   /* destination and name source */
  int f64;         /* 1 for f64, 0 for f32 */
  const char *ty;  /* "f32" / "f64" */
  const char *ity; /* integer type of the same width */
  const char *ind; /* prefix of every line */
} C;

static C ctx_of(kl_emitter *e, int f64, const char *indent) {
  C c = {e, f64, f64 ? "f64" : "f32", f64 ? "i64" : "i32", indent};
  return c;
}

static V emitv(C *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static V emitv(C *c, const char *fmt, ...) {
  V v;
  kl_emit_fresh(c->e, v.s);
  kl_str_printf(c->e->out, "%s%s = ", c->ind, v.s);
  va_list ap;
  va_start(ap, fmt);
  kl_str_vprintf(c->e->out, fmt, ap);
  va_end(ap);
  kl_str_append(c->e->out, "\n");
  return v;
}

/* MLIR float literal for v rounded to the type: always has a '.', never depends on the C locale's
 * radix character, and spells non-finite values as hex bit patterns (MLIR has no "inf" literal). */
static void float_literal(char *buf, size_t n, double v, int f64) {
  if (!f64) v = (float)v;
  if (isnan(v)) {
    snprintf(buf, n, "%s", f64 ? "0x7FF8000000000000" : "0x7FC00000");
    return;
  }
  if (isinf(v)) {
    snprintf(buf, n, "%s", f64 ? (v > 0 ? "0x7FF0000000000000" : "0xFFF0000000000000")
                               : (v > 0 ? "0x7F800000" : "0xFF800000"));
    return;
  }
  char tmp[40], mant[40], *o = mant;
  const char *expo = "";
  int has_radix = 0;
  snprintf(tmp, sizeof tmp, f64 ? "%.17g" : "%.9g", v);
  for (const char *p = tmp; *p; p++) {
    if (*p == 'e' || *p == 'E') {
      expo = p;
      break;
    }
    if ((*p >= '0' && *p <= '9') || *p == '-' || *p == '+') {
      *o++ = *p;
    } else if (!has_radix) { /* the locale's radix, whatever its spelling */
      *o++ = '.';
      has_radix = 1;
    }
  }
  *o = 0;
  snprintf(buf, n, "%s%s%s", mant, has_radix ? "" : ".0", expo);
}

static V K(C *c, double v) {
  char b[96];
  float_literal(b, sizeof b, v, c->f64);
  return emitv(c, "arith.constant %s : %s", b, c->ty);
}
static V KS(C *c, double v32, double v64) { return K(c, c->f64 ? v64 : v32); }
static V KI(C *c, long long v) { return emitv(c, "arith.constant %lld : %s", v, c->ity); }

static V bin(C *c, const char *op, V a, V b) { return emitv(c, "%s %s, %s : %s", op, a.s, b.s, c->ty); }
static V add(C *c, V a, V b) { return bin(c, "arith.addf", a, b); }
static V sub(C *c, V a, V b) { return bin(c, "arith.subf", a, b); }
static V mul(C *c, V a, V b) { return bin(c, "arith.mulf", a, b); }
static V dvd(C *c, V a, V b) { return bin(c, "arith.divf", a, b); }
static V fmin_(C *c, V a, V b) { return bin(c, "arith.minnumf", a, b); } /* NaN-dropping */
/* (maxnumf-based clamping was replaced by compare+select in clampk) */
static V csign(C *c, V mag, V sgn) { return bin(c, "math.copysign", mag, sgn); }
static V fma3(C *c, V a, V b, V d) {
  return emitv(c, "math.fma %s, %s, %s : %s", a.s, b.s, d.s, c->ty);
}
static V un(C *c, const char *op, V a) { return emitv(c, "%s %s : %s", op, a.s, c->ty); }
static V neg(C *c, V a) { return un(c, "arith.negf", a); }
static V fabs_(C *c, V a) { return un(c, "math.absf", a); }
static V sqrt_(C *c, V a) { return un(c, "math.sqrt", a); }
static V floor_(C *c, V a) { return un(c, "math.floor", a); }
static V rint_(C *c, V a) { return un(c, "math.roundeven", a); }
static V addk(C *c, V a, double k) { return add(c, a, K(c, k)); }
static V mulk(C *c, V a, double k) { return mul(c, a, K(c, k)); }
static V ksub(C *c, double k, V a) { return sub(c, K(c, k), a); }

/* predicates give i1 values */
static V cmp(C *c, const char *pred, V a, V b) {
  return emitv(c, "arith.cmpf %s, %s, %s : %s", pred, a.s, b.s, c->ty);
}
static V cmpk(C *c, const char *pred, V a, double k) { return cmp(c, pred, a, K(c, k)); }
static V sel(C *c, V cond, V a, V b) {
  return emitv(c, "arith.select %s, %s, %s : %s", cond.s, a.s, b.s, c->ty);
}
static V land(C *c, V a, V b) { return emitv(c, "arith.andi %s, %s : i1", a.s, b.s); }
static V lor(C *c, V a, V b) { return emitv(c, "arith.ori %s, %s : i1", a.s, b.s); }
static V lxor(C *c, V a, V b) { return emitv(c, "arith.xori %s, %s : i1", a.s, b.s); }
static V lnot(C *c, V a) { return lxor(c, a, emitv(c, "arith.constant true")); }
static V isnan_(C *c, V x) { return cmp(c, "uno", x, x); }
/* Returns x where x is NaN, else r: the NaN input comes through with its payload. */
static V pass_nan(C *c, V x, V r) { return sel(c, isnan_(c, x), x, r); }

static V iop(C *c, const char *op, V a, V b) { return emitv(c, "%s %s, %s : %s", op, a.s, b.s, c->ity); }
static V f2bits(C *c, V a) { return emitv(c, "arith.bitcast %s : %s to %s", a.s, c->ty, c->ity); }
static V bits2f(C *c, V a) { return emitv(c, "arith.bitcast %s : %s to %s", a.s, c->ity, c->ty); }

/* Horner with fused multiply-adds. */
static V poly(C *c, V z, const double *cs, int n) {
  V p = K(c, cs[n - 1]);
  for (int i = n - 2; i >= 0; i--) p = fma3(c, p, z, K(c, cs[i]));
  return p;
}
#define POLY(c, z, name) \
  ((c)->f64 ? poly(c, z, name##64, NCOEF(name##64)) : poly(c, z, name##32, NCOEF(name##32)))
/* Polynomial in u = (v - m) / h. */
static V poly_u(C *c, V v, const double *cs, int n, double m, double h) {
  return poly(c, fma3(c, v, K(c, 1.0 / h), K(c, -m / h)), cs, n);
}
#define POLY_U(c, v, name, NAME) poly_u(c, v, name, NCOEF(name), NAME##_M, NAME##_H)

/* ---- exp family ---- */

/* 2^n for a float n holding an integer in the normal exponent range. */
static V pow2i(C *c, V n) {
  V i = emitv(c, "arith.fptosi %s : %s to %s", n.s, c->ty, c->ity);
  V b = iop(c, "arith.addi", i, KI(c, c->f64 ? 1023 : 127));
  return bits2f(c, iop(c, "arith.shli", b, KI(c, c->f64 ? 52 : 23)));
}

/* p * 2^n in two steps, so n may span twice the exponent range: the result overflows to inf or is
 * rounded into the subnormals once, as a correctly scaled product would be. */
static V scale2(C *c, V p, V n) {
  /* n1 = floor(n / 2), n2 = n - n1, in the integer domain (n is integral and in range) */
  V i = emitv(c, "arith.fptosi %s : %s to %s", n.s, c->ty, c->ity);
  V i1 = iop(c, "arith.shrsi", i, KI(c, 1));
  V i2 = iop(c, "arith.subi", i, i1);
  V bias = KI(c, c->f64 ? 1023 : 127), sh = KI(c, c->f64 ? 52 : 23);
  V s1 = bits2f(c, iop(c, "arith.shli", iop(c, "arith.addi", i1, bias), sh));
  V s2 = bits2f(c, iop(c, "arith.shli", iop(c, "arith.addi", i2, bias), sh));
  return mul(c, mul(c, p, s1), s2);
}

/* e^r - 1 for |r| <= ln2/2 (relative accuracy kept for tiny r). */
static V expm1_kernel(C *c, V r) { return fma3(c, mul(c, r, r), POLY(c, r, k_exp), r); }

/* Cody-Waite: x = n ln2 + r with the product n*ln2 kept exact by fma; x must be finite and
 * clamped. lo (optional) is a low-order part of x added to r (double-double arguments). */
static V exp_reduce(C *c, V x, const V *lo, V *n) {
  *n = rint_(c, mulk(c, x, 1.4426950408889634));
  V nn = neg(c, *n);
  V r = fma3(c, nn, KS(c, 0.693147182, 0.69314718055994529), x);
  r = fma3(c, nn, KS(c, -1.90465421e-09, 2.3190468138462996e-17), r);
  return lo ? add(c, r, *lo) : r;
}

static V clampk(C *c, V x, double lo, double hi) {
  /* ordered compares and selects (one min/max instruction each on x86); a NaN becomes lo, so no
   * NaN reaches fptosi (callers restore NaN results with pass_nan) */
  V h = K(c, hi), l = K(c, lo);
  V a = sel(c, cmp(c, "olt", x, h), x, h);  /* NaN -> hi */
  return sel(c, cmp(c, "ogt", a, l), a, l); /* hi stays; NaN already replaced */
}

static V exp_impl(C *c, V x, const V *lo) {
  V xc = c->f64 ? clampk(c, x, -746.0, 710.0) : clampk(c, x, -104.0, 89.0);
  V n, r = exp_reduce(c, xc, lo, &n);
  V p = addk(c, expm1_kernel(c, r), 1.0);
  return pass_nan(c, x, scale2(c, p, n));
}
static V f_exp(C *c, V x) { return exp_impl(c, x, NULL); }

static V f_exp2(C *c, V x) {
  V xc = c->f64 ? clampk(c, x, -1077.0, 1025.0) : clampk(c, x, -152.0, 129.0);
  V n = rint_(c, xc);
  V t = mulk(c, sub(c, xc, n), 0.69314718055994531); /* xc - n is exact */
  V p = addk(c, expm1_kernel(c, t), 1.0);
  return pass_nan(c, x, scale2(c, p, n));
}

/* expm1(x) = 2^n (e^r - 1) + (2^n - 1); for n > 60 the "-1" is below rounding and the exp path
 * (two-step scaling) takes over. Below -30 (f32) / -40 (f64) the result is -1 to rounding. */
static V f_expm1(C *c, V x) {
  V xc = clampk(c, x, c->f64 ? -40.0 : -30.0, c->f64 ? 710.0 : 89.0);
  V n, r = exp_reduce(c, xc, NULL, &n);
  V em = expm1_kernel(c, r);
  V s = pow2i(c, fmin_(c, n, K(c, 60.0)));
  V small = fma3(c, s, em, addk(c, s, -1.0));
  V big = scale2(c, addk(c, em, 1.0), n);
  V res = sel(c, cmpk(c, "ogt", n, 60.0), big, small);
  res = sel(c, cmpk(c, "oeq", x, 0.0), x, res); /* keeps -0 */
  return pass_nan(c, x, res);
}

/* ---- log family ---- */

/* x = 2^k (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)); subnormal x is prescaled. kf is k as a
 * float. Garbage for x <= 0, inf and NaN: callers patch those with log_specials. */
static void log_reduce(C *c, V x, V *kf, V *f) {
  V tiny = cmpk(c, "olt", x, c->f64 ? 2.2250738585072014e-308 : 1.17549435e-38);
  V xs = sel(c, tiny, mulk(c, x, c->f64 ? 18014398509481984.0 : 16777216.0), x);
  long long magic = c->f64 ? 0x3FE6A09E667F3BCDLL : 0x3F3504F3LL; /* bits of sqrt(1/2) */
  V ix = iop(c, "arith.subi", f2bits(c, xs), KI(c, magic));
  V k = iop(c, "arith.shrsi", ix, KI(c, c->f64 ? 52 : 23));
  V m = iop(c, "arith.andi", ix, KI(c, c->f64 ? 0xFFFFFFFFFFFFFLL : 0x7FFFFFLL));
  *f = addk(c, bits2f(c, iop(c, "arith.addi", m, KI(c, magic))), -1.0);
  V kk = emitv(c, "arith.sitofp %s : %s to %s", k.s, c->ity, c->ty);
  *kf = add(c, kk, sel(c, tiny, K(c, c->f64 ? -54.0 : -24.0), K(c, 0.0)));
}

/* log(1+f) = f - hfsq + s (hfsq + R), s = f/(2+f): the rounding of s only touches the small
 * correction term. Returns that term in *corr. */
static void log_kernel(C *c, V f, V *hfsq, V *corr) {
  V s = dvd(c, f, addk(c, f, 2.0));
  V z = mul(c, s, s);
  V R = mul(c, z, POLY(c, z, k_log));
  *hfsq = mulk(c, mul(c, f, f), 0.5);
  *corr = mul(c, s, add(c, *hfsq, R));
}

/* ln2 split so that kf * LN2_HI is exact for every exponent kf. */
#define LN2_HI(c) KS(c, 0.693145752, 0.69314718055989033)
#define LN2_LO(c) KS(c, 1.42860677e-06, 5.4979230187083712e-14)

/* Patches the reduction's garbage: +inf -> +inf, x == pole -> -inf, x < pole or NaN -> NaN. */
static V log_specials(C *c, V x, V r, double pole) {
  r = sel(c, cmpk(c, "oeq", x, INFINITY), x, r);
  r = sel(c, cmpk(c, "oeq", x, pole), K(c, -INFINITY), r);
  return sel(c, cmpk(c, "ult", x, pole), K(c, NAN), r);
}

static V f_log(C *c, V x) {
  V kf, f, hfsq, corr;
  log_reduce(c, x, &kf, &f);
  log_kernel(c, f, &hfsq, &corr);
  V t = fma3(c, kf, LN2_LO(c), corr);
  V r = sub(c, mul(c, kf, LN2_HI(c)), sub(c, sub(c, hfsq, t), f));
  return log_specials(c, x, r, 0.0);
}

/* log(1+f) of the reduction, for the log2/log10 scalings. */
static V log1p_of_f(C *c, V f) {
  V hfsq, corr;
  log_kernel(c, f, &hfsq, &corr);
  return sub(c, f, sub(c, hfsq, corr));
}

static V f_log2(C *c, V x) {
  V kf, f;
  log_reduce(c, x, &kf, &f);
  V l = log1p_of_f(c, f);
  V t = fma3(c, l, KS(c, 1.44269502, 1.4426950408889634), mulk(c, l, c->f64 ? 2.0355273740931033e-17 : 1.92596303e-08));
  return log_specials(c, x, add(c, kf, t), 0.0);
}

static V f_log10(C *c, V x) {
  V kf, f;
  log_reduce(c, x, &kf, &f);
  V l = log1p_of_f(c, f);
  V t = fma3(c, kf, KS(c, -1.43209888e-08, -2.8037281277851704e-18),
             mulk(c, l, c->f64 ? 1.0983196502167651e-17 : -1.010305e-08));
  t = fma3(c, l, KS(c, 0.434294492, 0.43429448190325182), t);
  V r = fma3(c, kf, KS(c, 0.30103001, 0.3010299956639812), t);
  return log_specials(c, x, r, 0.0);
}

/* log1p(x) = log(u) + err/u where u = fl(1+x) and err = (1+x) - u exactly (TwoSum). */
static V f_log1p(C *c, V x) {
  V one = K(c, 1.0);
  V u = add(c, x, one);
  V bb = sub(c, u, one);
  V err = add(c, sub(c, one, sub(c, u, bb)), sub(c, x, bb));
  V kf, f, hfsq, corr;
  log_reduce(c, u, &kf, &f);
  log_kernel(c, f, &hfsq, &corr);
  V t = add(c, corr, fma3(c, kf, LN2_LO(c), dvd(c, err, u)));
  V r = sub(c, mul(c, kf, LN2_HI(c)), sub(c, sub(c, hfsq, t), f));
  r = sel(c, cmpk(c, "oeq", x, 0.0), x, r); /* keeps -0 */
  return log_specials(c, x, r, -1.0);
}

/* ---- hyperbolic and logistic ---- */

/* tanh|x| = -e/(2+e), e = expm1(-2|x|): no cancellation anywhere. */
static V f_tanh(C *c, V x) {
  V e = f_expm1(c, mulk(c, fabs_(c, x), -2.0));
  return csign(c, dvd(c, neg(c, e), addk(c, e, 2.0)), x);
}

/* 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below: e^-|x| never overflows. */
static V f_logistic(C *c, V x) {
  V t = exp_impl(c, neg(c, fabs_(c, x)), NULL);
  V d = addk(c, t, 1.0);
  return sel(c, cmpk(c, "oge", x, 0.0), dvd(c, K(c, 1.0), d), dvd(c, t, d));
}

/* Above this |x|, e^-2|x| is below rounding and sinh = cosh = e^|x|/2, computed as (e^(|x|/2)/2)
 * e^(|x|/2) so it stays finite up to the true overflow point. */
#define HYP_BIG(c) ((c)->f64 ? 20.0 : 10.0)

static V f_sinh(C *c, V x) {
  V a = fabs_(c, x);
  V em = f_expm1(c, a);
  V small = mulk(c, add(c, em, dvd(c, em, addk(c, em, 1.0))), 0.5);
  V eh = exp_impl(c, mulk(c, a, 0.5), NULL);
  V big = mul(c, mulk(c, eh, 0.5), eh);
  return csign(c, sel(c, cmpk(c, "ogt", a, HYP_BIG(c)), big, small), x);
}

static V f_cosh(C *c, V x) {
  V a = fabs_(c, x);
  V e = exp_impl(c, a, NULL);
  V small = fma3(c, e, K(c, 0.5), dvd(c, K(c, 0.5), e));
  V eh = exp_impl(c, mulk(c, a, 0.5), NULL);
  V big = mul(c, mulk(c, eh, 0.5), eh);
  return sel(c, cmpk(c, "ogt", a, HYP_BIG(c)), big, small);
}

/* Beyond this, sqrt(x^2 +- 1) == x to rounding: asinh/acosh(x) = log(x) + ln2. */
#define HYP_HUGE(c) ((c)->f64 ? 268435456.0 : 4096.0)

/* asinh|x| = log1p(a + a^2/(1 + sqrt(1+a^2))), written with 1/a so a^2 never overflows. */
static V f_asinh(C *c, V x) {
  V a = fabs_(c, x);
  V ia = dvd(c, K(c, 1.0), a);
  V y = add(c, a, dvd(c, a, add(c, ia, sqrt_(c, fma3(c, ia, ia, K(c, 1.0))))));
  V huge = cmpk(c, "ogt", a, HYP_HUGE(c));
  V r = f_log1p(c, sel(c, huge, addk(c, a, -1.0), y));
  r = add(c, r, sel(c, huge, K(c, 0.69314718055994531), K(c, 0.0)));
  return csign(c, r, x);
}

/* acosh x = log1p((x-1) + sqrt((x-1)(x+1))); x < 1 gives NaN through the sqrt. */
static V f_acosh(C *c, V x) {
  V xm = addk(c, x, -1.0);
  V t = add(c, xm, sqrt_(c, mul(c, xm, addk(c, x, 1.0))));
  V huge = cmpk(c, "ogt", x, HYP_HUGE(c));
  V r = f_log1p(c, sel(c, huge, xm, t));
  r = add(c, r, sel(c, huge, K(c, 0.69314718055994531), K(c, 0.0)));
  return sel(c, cmpk(c, "olt", x, 1.0), K(c, NAN), r); /* -huge would pass the sqrt as inf */
}

/* atanh|x| = log1p(2a + 2a^2/(1-a)) / 2. */
static V f_atanh(C *c, V x) {
  V a = fabs_(c, x);
  V a2 = add(c, a, a);
  V t = add(c, a2, dvd(c, mul(c, a2, a), ksub(c, 1.0, a)));
  V r = csign(c, mulk(c, f_log1p(c, t), 0.5), x);
  return sel(c, cmpk(c, "ogt", a, 1.0), K(c, NAN), r); /* huge a cancels t to 0 */
}

/* ---- trigonometric ---- */

/* sin(r), cos(r) for |r| <= ~pi/4. */
static V sin_kernel(C *c, V r) {
  V z = mul(c, r, r);
  return fma3(c, mul(c, r, z), POLY(c, z, k_sin), r);
}
static V cos_kernel(C *c, V r) {
  V z = mul(c, r, r);
  V hz = mulk(c, z, 0.5);
  V w = ksub(c, 1.0, hz);
  V tail = mul(c, mul(c, z, z), POLY(c, z, k_cos));
  return add(c, w, add(c, sub(c, ksub(c, 1.0, w), hz), tail)); /* 1 - hz with its rounding error */
}

/* x = q pi/2 + r with pi/2 in three parts (Cody-Waite, fma); q4 = q mod 4 as a float in 0..3
 * (exact for every finite q). x must be finite. */
static V trig_reduce(C *c, V x, V *q4) {
  V q = rint_(c, mulk(c, x, 0.63661977236758134));
  V nq = neg(c, q);
  V r = fma3(c, nq, KS(c, 1.57079637, 1.5707963267948966), x);
  r = fma3(c, nq, KS(c, -4.37113883e-08, 6.123233995736766e-17), r);
  r = fma3(c, nq, KS(c, -1.71512451e-15, -1.4973849048591698e-33), r);
  *q4 = sub(c, q, mulk(c, floor_(c, mulk(c, q, 0.25)), 4.0));
  return r;
}

/* 2/pi in 24-bit pieces: k_2opi[j] = (bits 24j+1 .. 24j+24 of 2/pi after the point) * 2^-24(j+1). */
static const double k_2opi[] = {
    0.6366197466850281, 2.5682552973194106e-08, 2.937095214933759e-16, 3.2543794001732456e-23,
    1.2089613708828537e-29, 5.667556795740071e-37, 2.6204031112097215e-44, 7.053957680880629e-52
};

/* f32 x (finite) of any size = q pi/2 + r (Payne-Hanek, without a table): in f64, each product
 * x * k_2opi[j] is exact (24 x 24 bits) and so is its remainder mod 4; the remainders summed mod 4
 * (exact while the pieces are coarse, rounding only in the last, tiny ones) give x * 2/pi mod 4 to
 * about 2^-52, whose nearest integer is q mod 4 and whose rest, times pi/2, is r. */
static V trig_reduce_big(C *c, V x, V *q4) {
  C d = ctx_of(c->e, 1, c->ind);
  V xd = emitv(c, "arith.extf %s : f32 to f64", x.s), s = K(&d, 0.0);
  for (int j = 0; j < NCOEF(k_2opi); j++) {
    V t = mulk(&d, xd, k_2opi[j]);
    if (k_2opi[j] * FLT_MAX >= 4.0) { /* t may be 4 or more: its remainder, and the sum's kept below 4 */
      s = add(&d, s, sub(&d, t, mulk(&d, floor_(&d, mulk(&d, t, 0.25)), 4.0)));
      s = sub(&d, s, mulk(&d, floor_(&d, mulk(&d, s, 0.25)), 4.0));
    } else
      s = add(&d, s, t); /* the last pieces are tiny */
  }
  V k = rint_(&d, s);
  V k4 = sub(&d, k, mulk(&d, floor_(&d, mulk(&d, k, 0.25)), 4.0));
  *q4 = emitv(c, "arith.truncf %s : f64 to f32", k4.s);
  V r = mulk(&d, sub(&d, s, k), 1.5707963267948966);
  return emitv(c, "arith.truncf %s : f64 to f32", r.s);
}

/* 2/pi's bits after the point, most significant first, 64 to a word, after 24 zero bits (the
 * zeros stand for the bits of weight >= 1, which 2/pi lacks): 1192 bits, what the largest double
 * needs (its exponent, 53 bits of mantissa, and 192 bits of window). */
static const unsigned long long k_2opi_words[] = {
    0x000000a2f9836e4eULL, 0x441529fc2757d1f5ULL, 0x34ddc0db6295993cULL, 0x439041fe5163abdeULL,
    0xbbc561b7246e3a42ULL, 0x4dd2e006492eea09ULL, 0xd1921cfe1deb1cb1ULL, 0x29a73ee88235f52eULL,
    0xbb4484e99c7026b4ULL, 0x5f7e413991d63983ULL, 0x5339f49c845f8bbdULL, 0xf9283b1ff897ffdeULL,
    0x05980fef2f118b5aULL, 0x0a6d1f6d367ecf27ULL, 0xcb09b74f463f669eULL, 0x5fea2d7527bac7ebULL,
    0xe5f17b3d0739f78aULL, 0x5292ea6bfb5fb11fULL, 0x8d5d0856033046fcULL,
};
/* Below this the three-part Cody-Waite reduction of f64 is exact enough (q < 2^30: every fma but the
 * last is exact); from it on, trig_reduce_huge. */
#define TRIG_HUGE64 1073741824.0

static V isel(C *c, V cond, V a, V b) {
  return emitv(c, "arith.select %s, %s, %s : %s", cond.s, a.s, b.s, c->ity);
}
static V ishr(C *c, V a, int n) { return iop(c, "arith.shrui", a, KI(c, n)); }
static V iand(C *c, V a, long long m) { return iop(c, "arith.andi", a, KI(c, m)); }
static V iadd(C *c, V a, V b) { return iop(c, "arith.addi", a, b); }

/* f64 x (finite, |x| >= 2^30) = q pi/2 + r, exactly (Payne-Hanek, K.C. Ng's "Argument reduction for
 * huge arguments"), in 64-bit integers and without memory: |x| = m 2^(E-1075) (m: 53 bits), and the
 * bits of 2/pi of weight above 2^(E-1077) give multiples of 4, so x 2/pi mod 4 = m W 2^-190 mod 4,
 * W the 192 bits of 2/pi from there on (a barrel shift of k_2opi_words by the exponent: 27 selects,
 * then a funnel shift). m W is summed in 32-bit columns, only the four that make bits 64..191 of the
 * product (the lower ones change the result by < 2^-125, while |r| >= 2^-62 for every double): its
 * top 2 bits, rounded, are q mod 4, the next 126 the fraction, converted to a double-double and
 * multiplied by pi/2. The error in r is below one ulp. */
static V trig_reduce_huge(C *c, V x, V *q4) {
  V u = f2bits(c, fabs_(c, x));
  V mask = KI(c, 0xffffffffLL);
  V m = iop(c, "arith.ori", iand(c, u, (1LL << 52) - 1), KI(c, 1LL << 52));
  V mh = ishr(c, m, 32), ml = iop(c, "arith.andi", m, mask);
  V s = iop(c, "arith.subi", ishr(c, u, 52), KI(c, 1053)); /* the window's first bit in the table */
  V wi = ishr(c, s, 6), sh = iand(c, s, 63);
  enum { NW = sizeof k_2opi_words / sizeof *k_2opi_words };
  V w[NW];
  for (int i = 0; i < NW; i++) w[i] = KI(c, (long long)k_2opi_words[i]);
  /* w[0..3] = words wi..wi+3 (wi <= 15): shift by 8, 4, 2, 1 where wi has that bit; each step
   * keeps only the words the later ones can still reach */
  for (int b = 3; b >= 0; b--) {
    V bit = emitv(c, "arith.cmpi ne, %s, %s : %s", iand(c, wi, 1LL << b).s, KI(c, 0).s, c->ity);
    for (int i = 0; i < 4 + (1 << b) - 1; i++) w[i] = isel(c, bit, w[i + (1 << b)], w[i]);
  }
  V sh63 = iop(c, "arith.subi", KI(c, 63), sh), v[6];
  for (int i = 0; i < 3; i++) { /* the 192 bits from bit sh of w[0..3]; (w >> 1) >> (63 - sh): no shift by 64 */
    V t = iop(c, "arith.ori", iop(c, "arith.shli", w[i], sh), iop(c, "arith.shrui", ishr(c, w[i + 1], 1), sh63));
    v[2 * i] = ishr(c, t, 32);
    v[2 * i + 1] = iop(c, "arith.andi", t, mask);
  }
  /* column k (weight 2^32k) of m W = mh:ml times v0..v5 (v0 of weight 2^160): ml v[5-k], mh v[6-k] */
  V col[6], carry = KI(c, 0);
  for (int k = 1; k <= 5; k++) col[k] = carry;
  for (int k = 1; k <= 5; k++) {
    V pl = iop(c, "arith.muli", ml, v[5 - k]), ph = iop(c, "arith.muli", mh, v[6 - k]);
    if (k >= 2) { /* column 1 gives only its carries into column 2 */
      col[k] = iadd(c, col[k], iadd(c, iop(c, "arith.andi", pl, mask), iop(c, "arith.andi", ph, mask)));
    }
    if (k <= 4) col[k + 1] = iadd(c, ishr(c, pl, 32), ishr(c, ph, 32));
  }
  for (int k = 2; k <= 5; k++) { /* carries */
    col[k] = iadd(c, col[k], carry);
    carry = ishr(c, col[k], 32);
  }
  V hi = iop(c, "arith.ori", iop(c, "arith.shli", col[5], KI(c, 32)), iop(c, "arith.andi", col[4], mask));
  V lo = iop(c, "arith.ori", iop(c, "arith.shli", col[3], KI(c, 32)), iop(c, "arith.andi", col[2], mask));
  /* hi: 2 bits of integer, 62 of fraction; adding 1/2 and taking the top 2 bits rounds to q; the
   * fraction, less 1/2, is x 2/pi - q. Integers become doubles through the mantissa of 2^52 (x86
   * without AVX-512 has no vector conversion of 64-bit integers): u < 2^32 times 2^-k is
   * fma(bits(2^52 + u), 2^-k, -2^(52-k)), exactly. */
  V hr = iadd(c, hi, KI(c, 1LL << 61));
  V q = ishr(c, hr, 62);
  V g = iand(c, hr, (1LL << 62) - 1), two52 = KI(c, 0x4330000000000000LL);
#define U32_TIMES(u, k) fma3(c, bits2f(c, iop(c, "arith.ori", u, two52)), K(c, ldexp(1.0, -(k))), K(c, -ldexp(1.0, 52 - (k))))
  V fa = fma3(c, U32_TIMES(ishr(c, g, 32), 0), K(c, 0x1p-30), K(c, -0.5)); /* exact */
  V fb = U32_TIMES(iop(c, "arith.andi", g, mask), 62);
  V fy = add(c, U32_TIMES(ishr(c, lo, 32), 94), U32_TIMES(iop(c, "arith.andi", lo, mask), 126));
#undef U32_TIMES
  /* f + fl = fa + fb + fy by two Fast2Sums: fa is 0 or at least 2^-30 > fb, and fa + fb is 0 or at
   * least 2^-62 > fy */
  V fx = add(c, fa, fb), fxl = sub(c, fb, sub(c, fx, fa));
  V f = add(c, fx, fy), fl = add(c, sub(c, fy, sub(c, f, fx)), fxl);
  V pio2 = K(c, 1.5707963267948966), rh = mul(c, f, pio2);
  V rl = fma3(c, f, K(c, 6.123233995736766e-17), fma3(c, fl, pio2, fma3(c, f, pio2, neg(c, rh))));
  V r = add(c, rh, rl);
  V xneg = cmpk(c, "olt", x, 0.0); /* x = -|x|: q and r change sign */
  q = isel(c, xneg, iand(c, iop(c, "arith.subi", KI(c, 0), q), 3), q);
  *q4 = sub(c, bits2f(c, iop(c, "arith.ori", q, two52)), K(c, 0x1p52));
  return sel(c, xneg, neg(c, r), r);
}

/* The exact reduction of x (ax = |x|) where |x| passes `limit` (f32: 1e5, f64: 2^30), else the fast one: under
 * an scf.if where the emitter allows branches (the exact one runs only where an element needs it),
 * else both, merged by selects. */
static V trig_reduce_any(C *c, V xs, V ax, V *q4) {
  V r = trig_reduce(c, xs, q4);
  V big = cmpk(c, "oge", ax, c->f64 ? TRIG_HUGE64 : 1e5); /* inf too: harmless, its result is NaN */
  V (*exact)(C *, V, V *) = c->f64 ? trig_reduce_huge : trig_reduce_big;
  if (c->e->rare_ok) { /* the caller reruns the elements flagged here */
    kl_emitter *e = c->e;
    if (!e->rare[0]) {
      e->rare_ind = c->ind;
      e->rare_region = e->region;
    }
    /* a need noted in another block (a pad's scf.if) cannot be ORed with this one: the caller then
     * computes every path in one body instead */
    e->rare_mixed |= e->rare_ind != c->ind || e->rare_region != e->region;
    if (!e->rare_mixed) {
      V prev;
      memcpy(prev.s, e->rare, sizeof prev.s);
      V any = e->rare[0] ? lor(c, prev, big) : big;
      memcpy(e->rare, any.s, sizeof e->rare);
    }
    if (!c->e->branches) return r; /* wrong where big: those elements are redone */
  }
  if (c->e->branches) {
    char ind[64];
    snprintf(ind, sizeof ind, "%s  ", c->ind);
    V res;
    kl_emit_fresh(c->e, res.s);
    kl_str_printf(c->e->out, "%s%s:2 = scf.if %s -> (%s, %s) {\n", c->ind, res.s, big.s, c->ty, c->ty);
    C in = *c;
    in.ind = ind;
    V q4b, rb;
    if (c->e->defs) { /* the module defines it once (kl_math_define_helpers) */
      *c->e->defs |= (uint64_t)1 << KL_MF_REDUCE_BIT(c->f64);
      kl_emit_fresh(c->e, rb.s);
      kl_str_printf(c->e->out, "%s%s:2 = func.call @KLPFXmf_reduce_%s(%s) : (%s) -> (%s, %s)\n", ind, rb.s, c->ty, xs.s, c->ty,
                    c->ty, c->ty);
      size_t n = strlen(rb.s); /* "%t123": room for the result number */
      memcpy(q4b.s, rb.s, n);
      memcpy(q4b.s + n, "#1", 3);
      memcpy(rb.s + n, "#0", 3);
    } else rb = exact(&in, xs, &q4b);
    kl_str_printf(c->e->out, "%sscf.yield %s, %s : %s, %s\n%s} else {\n%sscf.yield %s, %s : %s, %s\n%s}\n", ind, rb.s,
                  q4b.s, c->ty, c->ty, c->ind, ind, r.s, q4->s, c->ty, c->ty, c->ind);
    size_t n = strlen(res.s); /* "%t123" and a result number: well within the name's room */
    memcpy(r.s, res.s, n);
    memcpy(q4->s, res.s, n);
    memcpy(r.s + n, "#0", 3);
    memcpy(q4->s + n, "#1", 3);
    return r;
  }
  V q4b, rb = exact(c, xs, &q4b);
  *q4 = sel(c, big, q4b, *q4);
  return sel(c, big, rb, r);
}

void kl_math_define_helpers(uint64_t used, kl_str *out) {
  for (int is64 = 0; is64 < 2; is64++) {
    if (!(used >> KL_MF_REDUCE_BIT(is64) & 1)) continue;
    kl_emitter em = {.out = out};
    C c = ctx_of(&em, is64, "    ");
    kl_str_printf(out, "  func.func @KLPFXmf_reduce_%s(%%x: %s) -> (%s, %s) attributes {passthrough = [\"noinline\"]} {\n", c.ty,
                  c.ty, c.ty, c.ty);
    V x, q4;
    snprintf(x.s, sizeof x.s, "%%x");
    V r = (is64 ? trig_reduce_huge : trig_reduce_big)(&c, x, &q4);
    kl_str_printf(out, "    return %s, %s : %s, %s\n  }\n", r.s, q4.s, c.ty, c.ty);
  }
}

static V trig(C *c, V x, kl_mathfn fn) {
  V ax = fabs_(c, x), fin = cmpk(c, "olt", ax, INFINITY);
  V xs = sel(c, fin, x, K(c, 0.0));
  V q4, r = trig_reduce_any(c, xs, ax, &q4);
  V s = sin_kernel(c, r), co = cos_kernel(c, r);
  V odd = cmpk(c, "oeq", sub(c, q4, mulk(c, floor_(c, mulk(c, q4, 0.5)), 2.0)), 1.0);
  V v;
  if (fn == KL_MF_COS) {
    v = sel(c, odd, s, co);
    V flip = land(c, cmpk(c, "ogt", q4, 0.5), cmpk(c, "olt", q4, 2.5)); /* q4 in {1, 2} */
    v = sel(c, flip, neg(c, v), v);
  } else {
    if (fn == KL_MF_SIN) {
      v = sel(c, odd, co, s);
      v = sel(c, cmpk(c, "oge", q4, 2.0), neg(c, v), v);
    } else {
      v = sel(c, odd, neg(c, dvd(c, co, s)), dvd(c, s, co));
    }
    v = sel(c, cmpk(c, "oeq", x, 0.0), x, v); /* keeps -0 */
  }
  return sel(c, fin, v, K(c, NAN));
}
static V f_sin(C *c, V x) { return trig(c, x, KL_MF_SIN); }
static V f_cos(C *c, V x) { return trig(c, x, KL_MF_COS); }
static V f_tan(C *c, V x) { return trig(c, x, KL_MF_TAN); }

#define PIO2_HI(c) KS(c, 1.57079637, 1.5707963267948966)
#define PIO2_LO(c) KS(c, -4.37113883e-08, 6.123233995736766e-17)
#define PI_HI(c) KS(c, 3.14159274, 3.1415926535897931)
#define PI_LO(c) KS(c, -8.74227766e-08, 1.2246467991473532e-16)

/* atan(a) for a >= 0 (inf and NaN allowed): a is mapped into [0, tan(pi/8)] by
 * atan a = pi/4 + atan((a-1)/(a+1)) or pi/2 + atan(-1/a). */
static V atan_pos(C *c, V a) {
  V big = cmpk(c, "ogt", a, 2.414213562373095);
  V mid = cmpk(c, "ogt", a, 0.41421356237309503);
  V tm = dvd(c, addk(c, a, -1.0), addk(c, a, 1.0));
  V t = sel(c, big, neg(c, dvd(c, K(c, 1.0), a)), sel(c, mid, tm, a));
  V bh = sel(c, big, PIO2_HI(c), sel(c, mid, KS(c, 0.785398185, 0.78539816339744828), K(c, 0.0)));
  V bl = sel(c, big, PIO2_LO(c), sel(c, mid, KS(c, -2.18556941e-08, 3.061616997868383e-17), K(c, 0.0)));
  V z = mul(c, t, t);
  V p = fma3(c, mul(c, t, z), POLY(c, z, k_atan), t);
  return add(c, bh, add(c, p, bl));
}
static V f_atan(C *c, V x) { return csign(c, atan_pos(c, fabs_(c, x)), x); }

/* asin |x| for |x| <= 1/2 directly, else pi/2 - 2 asin(sqrt((1-|x|)/2)): both share one
 * polynomial on z in [0, 1/4]. Sets *p = the kernel value and *small = (|x| <= 1/2). */
static void asin_parts(C *c, V x, V *p, V *small) {
  V a = fabs_(c, x);
  *small = cmpk(c, "ole", a, 0.5);
  V z = sel(c, *small, mul(c, a, a), mulk(c, ksub(c, 1.0, a), 0.5));
  V s = sel(c, *small, a, sqrt_(c, z)); /* |x| > 1 gives NaN here */
  *p = fma3(c, mul(c, s, z), POLY(c, z, k_asin), s);
}
static V f_asin(C *c, V x) {
  V p, small;
  asin_parts(c, x, &p, &small);
  V big = sub(c, PIO2_HI(c), sub(c, add(c, p, p), PIO2_LO(c)));
  return csign(c, sel(c, small, p, big), x);
}
static V f_acos(C *c, V x) {
  V p, small;
  asin_parts(c, x, &p, &small);
  V mid = sub(c, PIO2_HI(c), sub(c, csign(c, p, x), PIO2_LO(c)));
  V p2 = add(c, p, p);
  V big = sel(c, cmpk(c, "olt", x, 0.0), sub(c, PI_HI(c), sub(c, p2, PI_LO(c))), p2);
  return sel(c, small, mid, big);
}

/* C99 atan2(y, x), with the signed-zero and infinity quadrant rules. */
static V f_atan2(C *c, V y, V x) {
  V ax = fabs_(c, x), ay = fabs_(c, y);
  V both0 = land(c, cmpk(c, "oeq", ax, 0.0), cmpk(c, "oeq", ay, 0.0));
  V bothinf = land(c, cmpk(c, "oeq", ax, INFINITY), cmpk(c, "oeq", ay, INFINITY));
  V ratio = sel(c, both0, K(c, 0.0), sel(c, bothinf, K(c, 1.0), dvd(c, ay, ax)));
  V a = atan_pos(c, ratio);
  V xneg = cmpk(c, "olt", csign(c, K(c, 1.0), x), 0.0); /* sign bit, so -0 counts */
  a = sel(c, xneg, add(c, sub(c, PI_HI(c), a), PI_LO(c)), a);
  return csign(c, a, y);
}

/* ---- error function family ---- */

static V erf_small(C *c, V a) { return fma3(c, a, POLY(c, mul(c, a, a), k_erf), a); }

/* erfc(a) for a >= 1/2: e^(-a^2) t Q(t). a^2 = h + l exactly (fma), e^-(h+l) = e^-h (1 - l).
 * coef64 picks the coefficient set independently of the arithmetic type (f32 erfc evaluates the
 * f32 set in f64: t = K/(K+a) amplifies its own rounding ~3x, too much for f32 arithmetic). */
static V erfc_big(C *c, V a, int coef64) {
  double kk = coef64 ? 4.0 : 2.0, xmax = coef64 ? 27.5 : 10.1;
  V ac = fmin_(c, a, K(c, xmax));
  V t = dvd(c, K(c, kk), addk(c, ac, kk));
  V q = coef64 ? POLY_U(c, t, k_erfc64, K_ERFC64) : POLY_U(c, t, k_erfc32, K_ERFC32);
  q = mul(c, t, q);
  V h = mul(c, ac, ac);
  V l = fma3(c, ac, ac, neg(c, h));
  V ex = exp_impl(c, neg(c, h), NULL);
  V r = mul(c, ex, fma3(c, neg(c, q), l, q));
  return sel(c, cmpk(c, "ogt", a, xmax), K(c, 0.0), r); /* erfc underflows beyond xmax */
}

static V f_erf(C *c, V x) {
  V a = fabs_(c, x);
  V r = sel(c, cmpk(c, "olt", a, 0.5), erf_small(c, a), ksub(c, 1.0, erfc_big(c, a, c->f64)));
  return pass_nan(c, x, csign(c, r, x));
}

static V erfc_impl(C *c, V x, int coef64) {
  V a = fabs_(c, x);
  V eb = erfc_big(c, a, coef64);
  V mid = ksub(c, 1.0, csign(c, erf_small(c, a), x));
  V tail = sel(c, cmpk(c, "olt", x, 0.0), ksub(c, 2.0, eb), eb);
  return pass_nan(c, x, sel(c, cmpk(c, "olt", a, 0.5), mid, tail));
}

static V f_erfc(C *c, V x) {
  if (c->f64) return erfc_impl(c, x, 1);
  C d = ctx_of(c->e, 1, c->ind);
  V r = erfc_impl(&d, emitv(c, "arith.extf %s : f32 to f64", x.s), 0);
  return emitv(c, "arith.truncf %s : f64 to f32", r.s);
}

/* erf_inv(x) = x P(w), w = -log((1-x)(1+x)), in pieces of w (Giles' variable). */
static V f_erf_inv(C *c, V x) {
  V a = fabs_(c, x);
  V w = neg(c, f_log(c, mul(c, ksub(c, 1.0, a), addk(c, a, 1.0))));
  V s = sqrt_(c, w);
  V p;
  if (c->f64) {
    V p0 = POLY_U(c, w, k_erfinv64_0, K_ERFINV64_0);
    V p1 = POLY_U(c, s, k_erfinv64_1, K_ERFINV64_1);
    V p2 = POLY_U(c, s, k_erfinv64_2, K_ERFINV64_2);
    p = sel(c, cmpk(c, "olt", w, 6.25), p0, sel(c, cmpk(c, "olt", s, 4.0), p1, p2));
  } else {
    V p0 = POLY_U(c, w, k_erfinv32_0, K_ERFINV32_0);
    V p1 = POLY_U(c, s, k_erfinv32_1, K_ERFINV32_1);
    p = sel(c, cmpk(c, "olt", w, 5.0), p0, p1);
  }
  V r = sel(c, cmpk(c, "oeq", a, 1.0), K(c, INFINITY), mul(c, p, a));
  r = sel(c, cmpk(c, "ogt", a, 1.0), K(c, NAN), csign(c, r, x));
  return pass_nan(c, x, r);
}

/* ---- cbrt ---- */

/* Bit-pattern first guess (exponent / 3), then Newton y += (a/y^2 - y)/3. */
static V f_cbrt(C *c, V x) {
  V a = fabs_(c, x);
  V tiny = cmpk(c, "olt", a, c->f64 ? 2.2250738585072014e-308 : 1.17549435e-38);
  V as = sel(c, tiny, mulk(c, a, c->f64 ? 18014398509481984.0 : 16777216.0), a);
  V y;
  if (c->f64) { /* divide the high word: 64-bit vector division does not exist */
    V hi = iop(c, "arith.shrui", f2bits(c, as), KI(c, 32));
    V h32 = emitv(c, "arith.trunci %s : i64 to i32", hi.s);
    V three = emitv(c, "arith.constant 3 : i32");
    V b1 = emitv(c, "arith.constant 715094163 : i32");
    V q = emitv(c, "arith.divsi %s, %s : i32", h32.s, three.s);
    q = emitv(c, "arith.addi %s, %s : i32", q.s, b1.s);
    V w = emitv(c, "arith.extui %s : i32 to i64", q.s);
    y = bits2f(c, iop(c, "arith.shli", w, KI(c, 32)));
  } else {
    V q = iop(c, "arith.divsi", f2bits(c, as), KI(c, 3));
    y = bits2f(c, iop(c, "arith.addi", q, KI(c, 709958130)));
  }
  for (int i = 0; i < (c->f64 ? 4 : 3); i++)
    y = fma3(c, sub(c, dvd(c, as, mul(c, y, y)), y), K(c, 1.0 / 3.0), y);
  V r = csign(c, mul(c, y, sel(c, tiny, K(c, c->f64 ? 0x1p-18 : 0x1p-8), K(c, 1.0))), x);
  V keep = lor(c, cmpk(c, "oeq", a, 0.0), cmpk(c, "oeq", a, INFINITY));
  return pass_nan(c, x, sel(c, keep, x, r));
}

/* ---- gamma family (evaluated in f64; f32 callers widen) ---- */

/* sin(pi x), cos(pi x) for finite x, reduced exactly to r = x - rint(x) in [-1/2, 1/2]. */
static void sincospi(C *c, V x, V *sp, V *cp) {
  V r = sub(c, x, rint_(c, x));
  V ra = fabs_(c, r);
  V low = cmpk(c, "ole", ra, 0.25);
  V arg = sel(c, low, ra, ksub(c, 0.5, ra));
  V t = fma3(c, arg, PI_HI(c), mul(c, arg, PI_LO(c)));
  V sk = sin_kernel(c, t), ck = cos_kernel(c, t);
  *sp = csign(c, sel(c, low, sk, ck), r);
  *cp = sel(c, low, ck, sk);
}

#define GAMMA_SHIFT 12 /* recur up to y >= 12 where the Stirling series below is exact to 1e-17 */

/* y, y+1, ..., y+11: returns y+12 where y < 12 (else y) and the product in *prod. */
static V gamma_shift(C *c, V y, V *shift, V *prod) {
  *shift = cmpk(c, "olt", y, GAMMA_SHIFT);
  V p = y;
  for (int k = 1; k < GAMMA_SHIFT; k++) p = mul(c, p, addk(c, y, k));
  *prod = p;
  return sel(c, *shift, addk(c, y, GAMMA_SHIFT), y);
}

static V pole_of_gamma(C *c, V x) {
  return land(c, cmpk(c, "ole", x, 0.0), cmp(c, "oeq", x, floor_(c, x)));
}

static const double k_stirling[] = {1.0 / 12, -1.0 / 360, 1.0 / 1260, -1.0 / 1680, 1.0 / 1188,
                                    -691.0 / 360360, 1.0 / 156};
static const double k_psi[] = {1.0 / 12, -1.0 / 120, 1.0 / 252, -1.0 / 240, 1.0 / 132,
                               -691.0 / 32760, 1.0 / 12};

/* lgamma: Stirling at y >= 12 after y(y+1)...(y+11); reflection
 * lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1-x) below 1/2. */
static V lgamma64(C *c, V x) {
  V neg_ = cmpk(c, "olt", x, 0.5);
  V y = sel(c, neg_, ksub(c, 1.0, x), x);
  V shift, prod, ys = gamma_shift(c, y, &shift, &prod);
  V iy = dvd(c, K(c, 1.0), ys);
  V ser = mul(c, iy, poly(c, mul(c, iy, iy), k_stirling, NCOEF(k_stirling)));
  V ly = f_log(c, ys); /* (ys - 1/2) log ys - ys as ys (log ys - 1) - log(ys) / 2: no overflow short of the result's */
  V st = add(c, sub(c, mul(c, ys, addk(c, ly, -1.0)), mulk(c, ly, 0.5)), addk(c, ser, 0.91893853320467278));
  V sp, cp;
  sincospi(c, x, &sp, &cp);
  V l2 = f_log(c, sel(c, shift, prod, K(c, 1.0)));
  /* log|sin(pi x)| separately (prod / sin(pi x) overflows for tiny x), and as log|x| + log(pi)
     where pi x would lose digits in the subnormals */
  V tiny = cmpk(c, "olt", fabs_(c, x), 1e-200);
  V lsp = f_log(c, sel(c, tiny, fabs_(c, x), fabs_(c, sp)));
  lsp = add(c, lsp, sel(c, tiny, K(c, 1.1447298858494002), K(c, 0.0)));
  V r = sel(c, neg_, sub(c, add(c, ksub(c, 1.1447298858494002, st), l2), lsp), sub(c, st, l2));
  r = sel(c, lor(c, pole_of_gamma(c, x), cmpk(c, "oeq", fabs_(c, x), INFINITY)), K(c, INFINITY), r);
  return pass_nan(c, x, r);
}

/* digamma: asymptotic series at y >= 12 minus sum 1/(y+k); reflection
 * psi(x) = psi(1-x) - pi cot(pi x) below 1/2; NaN at the poles. */
static V digamma64(C *c, V x) {
  V neg_ = cmpk(c, "olt", x, 0.5);
  V y = sel(c, neg_, ksub(c, 1.0, x), x);
  V shift, prod, ys = gamma_shift(c, y, &shift, &prod);
  V sum = dvd(c, K(c, 1.0), y);
  for (int k = 1; k < GAMMA_SHIFT; k++) sum = add(c, sum, dvd(c, K(c, 1.0), addk(c, y, k)));
  V iy = dvd(c, K(c, 1.0), ys);
  V w = mul(c, iy, iy);
  V psi = sub(c, f_log(c, ys), fma3(c, iy, K(c, 0.5), mul(c, w, poly(c, w, k_psi, NCOEF(k_psi)))));
  psi = sub(c, psi, sel(c, shift, sum, K(c, 0.0)));
  V sp, cp;
  sincospi(c, x, &sp, &cp);
  V refl = sub(c, psi, dvd(c, mul(c, PI_HI(c), cp), sp));
  V r = sel(c, neg_, refl, psi);
  r = sel(c, pole_of_gamma(c, x), K(c, NAN), r);
  return pass_nan(c, x, r);
}

/* f32 callers evaluate in f64: the recurrence/reflection cancellation would cost f32 its digits. */
static V widened(C *c, V x, V (*f64fn)(C *, V)) {
  if (c->f64) return f64fn(c, x);
  C d = ctx_of(c->e, 1, c->ind);
  V xd = emitv(c, "arith.extf %s : f32 to f64", x.s);
  V r = f64fn(&d, xd);
  return emitv(c, "arith.truncf %s : f64 to f32", r.s);
}
static V f_lgamma(C *c, V x) { return widened(c, x, lgamma64); }
static V f_digamma(C *c, V x) { return widened(c, x, digamma64); }

/* ---- pow ---- */

/* e^(y log a) for finite a > 0 and finite y, as f64: log a as a double-double (the reduction's
 * s = f/(2+f) carried with its rounding error), the product y log a likewise, then exp of the pair. */
static V pow_core64(C *c, V a, V y) {
  V kf, f;
  log_reduce(c, a, &kf, &f);
  V dh = addk(c, f, 2.0);
  V dl = sub(c, f, addk(c, dh, -2.0));
  V sh = dvd(c, f, dh);
  V sl = dvd(c, sub(c, fma3(c, neg(c, sh), dh, f), mul(c, sh, dl)), dh);
  V z = mul(c, sh, sh);
  V R = mul(c, z, POLY(c, z, k_log));
  V ah = mul(c, kf, LN2_HI(c)), bh = add(c, sh, sh);
  V s = add(c, ah, bh); /* TwoSum(ah, bh) */
  V bb = sub(c, s, ah);
  V e1 = add(c, sub(c, ah, sub(c, s, bb)), sub(c, bh, bb));
  V lo = add(c, e1, fma3(c, kf, LN2_LO(c), fma3(c, sh, R, add(c, sl, sl))));
  V lh = add(c, s, lo);
  V ll = sub(c, lo, sub(c, lh, s));
  V ph = mul(c, y, lh);
  V pl = fma3(c, y, ll, fma3(c, y, lh, neg(c, ph)));
  pl = sel(c, cmpk(c, "olt", fabs_(c, ph), 1000.0), pl, K(c, 0.0)); /* inf/NaN-safe low part */
  return exp_impl(c, ph, &pl);
}

static V f_pow(C *c, V x, V y) {
  V ax = fabs_(c, x);
  V base;
  if (c->f64) {
    base = pow_core64(c, ax, y);
  } else { /* f64 has the headroom for y*log(x) to be exact enough for f32 */
    C d = ctx_of(c->e, 1, c->ind);
    V axd = emitv(c, "arith.extf %s : f32 to f64", ax.s);
    V yd = emitv(c, "arith.extf %s : f32 to f64", y.s);
    V e = exp_impl(&d, mul(&d, yd, f_log(&d, axd)), NULL);
    base = emitv(c, "arith.truncf %s : f64 to f32", e.s);
  }
  V yint = cmp(c, "oeq", floor_(c, y), y);
  V yh = mulk(c, y, 0.5);
  V yodd = land(c, yint, cmp(c, "one", floor_(c, yh), yh));
  /* zero or infinite |x|, infinite y: the result is 0 or inf */
  V lim_case = lor(c, lor(c, cmpk(c, "oeq", ax, 0.0), cmpk(c, "oeq", ax, INFINITY)),
                   cmpk(c, "oeq", fabs_(c, y), INFINITY));
  V to_zero = lxor(c, cmpk(c, "ogt", ax, 1.0), cmpk(c, "ogt", y, 0.0));
  V r = sel(c, lim_case, sel(c, to_zero, K(c, 0.0), K(c, INFINITY)), base);
  V xneg = cmpk(c, "olt", csign(c, K(c, 1.0), x), 0.0);
  r = sel(c, land(c, xneg, yodd), neg(c, r), r);
  V any_nan = lor(c, isnan_(c, x), isnan_(c, y));
  V neg_frac = land(c, land(c, cmpk(c, "olt", x, 0.0), cmpk(c, "one", x, -INFINITY)), lnot(c, yint));
  r = sel(c, lor(c, any_nan, neg_frac), K(c, NAN), r);
  r = sel(c, land(c, cmpk(c, "oeq", ax, 1.0), cmpk(c, "oeq", fabs_(c, y), INFINITY)), K(c, 1.0), r);
  return sel(c, lor(c, cmpk(c, "oeq", x, 1.0), cmpk(c, "oeq", y, 0.0)), K(c, 1.0), r);
}

/* ---- dispatch ---- */

static const struct {
  const char *name;
  V (*emit)(C *, V);
} unary[KL_MF_COUNT_UNARY] = {
    [KL_MF_EXP] = {"exp", f_exp},           [KL_MF_EXP2] = {"exp2", f_exp2},
    [KL_MF_EXPM1] = {"expm1", f_expm1},     [KL_MF_LOG] = {"log", f_log},
    [KL_MF_LOG2] = {"log2", f_log2},        [KL_MF_LOG10] = {"log10", f_log10},
    [KL_MF_LOG1P] = {"log1p", f_log1p},     [KL_MF_TANH] = {"tanh", f_tanh},
    [KL_MF_LOGISTIC] = {"logistic", f_logistic}, [KL_MF_ERF] = {"erf", f_erf},
    [KL_MF_ERFC] = {"erfc", f_erfc},        [KL_MF_ERF_INV] = {"erf_inv", f_erf_inv},
    [KL_MF_SIN] = {"sin", f_sin},           [KL_MF_COS] = {"cos", f_cos},
    [KL_MF_TAN] = {"tan", f_tan},           [KL_MF_SINH] = {"sinh", f_sinh},
    [KL_MF_COSH] = {"cosh", f_cosh},        [KL_MF_ASIN] = {"asin", f_asin},
    [KL_MF_ACOS] = {"acos", f_acos},        [KL_MF_ATAN] = {"atan", f_atan},
    [KL_MF_ASINH] = {"asinh", f_asinh},     [KL_MF_ACOSH] = {"acosh", f_acosh},
    [KL_MF_ATANH] = {"atanh", f_atanh},     [KL_MF_CBRT] = {"cbrt", f_cbrt},
    [KL_MF_LGAMMA] = {"lgamma", f_lgamma},  [KL_MF_DIGAMMA] = {"digamma", f_digamma},
};

/* 1 for f64, 0 for f32, -1 for anything else. */
static int width_of(const char *ty) {
  if (!ty) return -1;
  if (strcmp(ty, "f64") == 0) return 1;
  if (strcmp(ty, "f32") == 0) return 0;
  return -1;
}

static int copy_name(const char *in, V *v) {
  size_t n = strlen(in);
  if (n >= sizeof v->s) return 0;
  memcpy(v->s, in, n + 1);
  return 1;
}

char *kl_math_emit(kl_emitter *e, kl_mathfn fn, const char *x, const char *ty, const char *indent,
                   char *out) {
  int w = width_of(ty);
  V xv;
  if (w < 0 || (unsigned)fn >= KL_MF_COUNT_UNARY || !copy_name(x, &xv)) return NULL;
  C c = ctx_of(e, w, indent ? indent : "");
  V r = unary[fn].emit(&c, xv);
  memcpy(out, r.s, sizeof r.s);
  return out;
}

char *kl_math_emit2(kl_emitter *e, kl_mathfn2 fn, const char *x, const char *y, const char *ty,
                    const char *indent, char *out) {
  int w = width_of(ty);
  V xv, yv;
  if (w < 0 || (unsigned)fn >= KL_MF2_COUNT || !copy_name(x, &xv) || !copy_name(y, &yv)) return NULL;
  C c = ctx_of(e, w, indent ? indent : "");
  V r = fn == KL_MF2_POW ? f_pow(&c, xv, yv) : f_atan2(&c, xv, yv);
  memcpy(out, r.s, sizeof r.s);
  return out;
}

const char *kl_math_name(kl_mathfn fn) {
  return (unsigned)fn < KL_MF_COUNT_UNARY ? unary[fn].name : "?";
}
