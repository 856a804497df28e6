/* complex.c: the compiler's complex pass: every complex value becomes real ones, so that code
 * generation never meets a complex dtype.
 *
 * A complex value of shape S is held as its two parts (real values of shape S) wherever it is
 * computed on, and packed, as one real value of shape S + [2] (re at [..., 0], im at [..., 1]:
 * numpy's interleaved storage, the same bytes), wherever it crosses memory: the program's inputs
 * and outputs, the operands and results of loops and conds (their bodies are rewritten the same
 * way, so a carry stays packed), and library calls that take interleaved data (fft). Each form is
 * made from the other when first needed (a slice, a concatenate: both fuse into kernels).
 *
 * Each equation with a complex operand or result becomes real arithmetic: the formulas below
 * (Smith's division, hypot without overflow, principal branches as numpy and JAX take them).
 * Shape and index equations run on each part; an equation with no rule here raises
 * NotImplementedError naming it. Depends only on ir/ and transforms/. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "ad.h"
#include "build.h"
#include "fuse.h"

typedef struct {
  int r, i;
} cx;

typedef struct {
  kl_build b;
  const kl_program *src;
  int *map;        /* src value -> new value (real values; packed complex values, or -1) */
  int *re, *im;    /* src complex value -> its parts in the new program, or -1 */
} split_ctx;

/* ---- real arithmetic shorthands ------------------------------------------------------------- */

static int lit_like(kl_build *b, double v, int like) { return kl_build_lit(b, v, kl_build_aval(b, like)->dtype); }
static int add(kl_build *b, int x, int y) { return kl_build_bin(b, KL_P_ADD, x, y); }
static int sub(kl_build *b, int x, int y) { return kl_build_bin(b, KL_P_SUB, x, y); }
static int mul(kl_build *b, int x, int y) { return kl_build_bin(b, KL_P_MUL, x, y); }
static int dv(kl_build *b, int x, int y) { return kl_build_bin(b, KL_P_DIV, x, y); }
static int un(kl_build *b, kl_prim p, int x) { return kl_build_un(b, p, x); }
static int neg(kl_build *b, int x) { return un(b, KL_P_NEG, x); }
static int sel(kl_build *b, int pred, int if_true, int if_false) { return kl_build_select(b, pred, if_false, if_true); }
static int cmp(kl_build *b, kl_prim p, int x, int y) { return kl_build_bin(b, p, x, y); }
static int scl(kl_build *b, double v, int x) { return mul(b, lit_like(b, v, x), x); }

static cx mk(int r, int i) { return (cx){r, i}; }
static cx cadd(kl_build *b, cx x, cx y) { return mk(add(b, x.r, y.r), add(b, x.i, y.i)); }
static cx csub(kl_build *b, cx x, cx y) { return mk(sub(b, x.r, y.r), sub(b, x.i, y.i)); }
static cx cneg(kl_build *b, cx x) { return mk(neg(b, x.r), neg(b, x.i)); }
static cx cmulx(kl_build *b, cx x, cx y) {
  return mk(sub(b, mul(b, x.r, y.r), mul(b, x.i, y.i)), add(b, mul(b, x.r, y.i), mul(b, x.i, y.r)));
}
static cx cre(kl_build *b, int r) { return mk(r, lit_like(b, 0, r)); }   /* r + 0i (i rank 0) */
static cx ctimes_i(kl_build *b, cx x) { return mk(neg(b, x.i), x.r); }     /* i z */
static cx cdiv_i(kl_build *b, cx x) { return mk(x.i, neg(b, x.r)); }       /* z / i = -i z */

/* v (0 or 1) with x's sign, -0.0 counted negative (x's NaN counts positive). */
static int signed_unit(kl_build *b, int v, int x) {
  int zero = lit_like(b, 0, x);
  int neg = kl_build_bin(b, KL_P_OR, cmp(b, KL_P_LT, x, zero),
                         kl_build_bin(b, KL_P_AND, cmp(b, KL_P_EQ, x, zero), cmp(b, KL_P_LT, dv(b, lit_like(b, 1, x), x), zero)));
  return sel(b, neg, un(b, KL_P_NEG, v), v);
}

/* Smith's division: the larger of the divisor's parts divides the other, no overflow from the
 * squared norm. Where that gives NaN in both parts, the corner cases JAX gives (XLA through
 * MLIR's complex division, as C99's Annex G): over a zero divisor, inf with the divisor's real
 * part's sign times the dividend (unless the dividend is all NaN); an infinite dividend over a
 * finite divisor, infinities; a finite dividend over an infinite divisor, zeros. */
static cx cdivx(kl_build *b, cx x, cx y) {
  int big = cmp(b, KL_P_GE, un(b, KL_P_ABS, y.r), un(b, KL_P_ABS, y.i));
  int q1 = dv(b, y.i, y.r), d1 = add(b, y.r, mul(b, y.i, q1));
  int r1 = dv(b, add(b, x.r, mul(b, x.i, q1)), d1), i1 = dv(b, sub(b, x.i, mul(b, x.r, q1)), d1);
  int q2 = dv(b, y.r, y.i), d2 = add(b, y.i, mul(b, y.r, q2));
  int r2 = dv(b, add(b, mul(b, x.r, q2), x.i), d2), i2 = dv(b, sub(b, mul(b, x.i, q2), x.r), d2);
  cx smith = mk(sel(b, big, r1, r2), sel(b, big, i1, i2));
#define AND(p, q) kl_build_bin(b, KL_P_AND, (p), (q))
#define OR(p, q) kl_build_bin(b, KL_P_OR, (p), (q))
  int zero = lit_like(b, 0, x.r), one = lit_like(b, 1, x.r), inf = lit_like(b, INFINITY, x.r);
  int axr = un(b, KL_P_ABS, x.r), axi = un(b, KL_P_ABS, x.i), ayr = un(b, KL_P_ABS, y.r), ayi = un(b, KL_P_ABS, y.i);
  /* a zero divisor: 1 / y.r is inf with y.r's sign */
  int yzero = AND(cmp(b, KL_P_EQ, ayr, zero), cmp(b, KL_P_EQ, ayi, zero));
  int case1 = AND(yzero, OR(cmp(b, KL_P_EQ, x.r, x.r), cmp(b, KL_P_EQ, x.i, x.i)));
  int sinf = dv(b, one, y.r);
  cx c1 = mk(mul(b, sinf, x.r), mul(b, sinf, x.i));
  /* an infinite dividend, a finite divisor */
  int xrinf = cmp(b, KL_P_EQ, axr, inf), xiinf = cmp(b, KL_P_EQ, axi, inf);
  int case2 = AND(OR(xrinf, xiinf), AND(cmp(b, KL_P_LT, ayr, inf), cmp(b, KL_P_LT, ayi, inf)));
  int sr = signed_unit(b, sel(b, xrinf, one, zero), x.r), si = signed_unit(b, sel(b, xiinf, one, zero), x.i);
  cx c2 = mk(mul(b, inf, add(b, mul(b, sr, y.r), mul(b, si, y.i))), mul(b, inf, sub(b, mul(b, si, y.r), mul(b, sr, y.i))));
  /* a finite dividend, an infinite divisor */
  int yrinf = cmp(b, KL_P_EQ, ayr, inf), yiinf = cmp(b, KL_P_EQ, ayi, inf);
  int case3 = AND(OR(yrinf, yiinf), AND(cmp(b, KL_P_LT, axr, inf), cmp(b, KL_P_LT, axi, inf)));
  int tr = signed_unit(b, sel(b, yrinf, one, zero), y.r), ti = signed_unit(b, sel(b, yiinf, one, zero), y.i);
  cx c3 = mk(mul(b, zero, add(b, mul(b, x.r, tr), mul(b, x.i, ti))), mul(b, zero, sub(b, mul(b, x.i, tr), mul(b, x.r, ti))));
  cx special = mk(sel(b, case1, c1.r, sel(b, case2, c2.r, sel(b, case3, c3.r, smith.r))),
                  sel(b, case1, c1.i, sel(b, case2, c2.i, sel(b, case3, c3.i, smith.i))));
  int both_nan = AND(cmp(b, KL_P_NE, smith.r, smith.r), cmp(b, KL_P_NE, smith.i, smith.i));
#undef AND
#undef OR
  return mk(sel(b, both_nan, special.r, smith.r), sel(b, both_nan, special.i, smith.i));
}

/* |z| = m sqrt(1 + (n/m)^2), m = max(|re|, |im|), n = min: no overflow or underflow; 0 at 0,
 * inf when a part is infinite. */
static int cabsx(kl_build *b, cx x) {
  int ar = un(b, KL_P_ABS, x.r), ai = un(b, KL_P_ABS, x.i);
  int m = kl_build_bin(b, KL_P_MAX, ar, ai), n = kl_build_bin(b, KL_P_MIN, ar, ai);
  int q = dv(b, n, m);
  int h = mul(b, m, un(b, KL_P_SQRT, add(b, lit_like(b, 1, q), mul(b, q, q))));
  h = sel(b, cmp(b, KL_P_EQ, m, lit_like(b, 0, m)), kl_build_zeros(b, kl_build_aval(b, h)), h);
  return sel(b, cmp(b, KL_P_EQ, m, lit_like(b, INFINITY, m)), m, h);
}

static cx cexpx(kl_build *b, cx x) {
  int e = un(b, KL_P_EXP, x.r);
  /* exp(r + 0i) = exp(r) + 0i exactly (inf * cos 0 would still be inf, but inf * sin 0 is nan);
   * +0 for -0 too, as XLA */
  int zero_im = cmp(b, KL_P_EQ, x.i, lit_like(b, 0, x.i));
  return mk(mul(b, e, un(b, KL_P_COS, x.i)), sel(b, zero_im, lit_like(b, 0, x.i), mul(b, e, un(b, KL_P_SIN, x.i))));
}

/* log|z| = log m + log1p(q^2) / 2 (m = max(|re|, |im|), q = min / m): no overflow where |z| would. */
static cx clogx(kl_build *b, cx x) {
  int ar = un(b, KL_P_ABS, x.r), ai = un(b, KL_P_ABS, x.i);
  int m = kl_build_bin(b, KL_P_MAX, ar, ai), n = kl_build_bin(b, KL_P_MIN, ar, ai);
  int q = dv(b, n, m);
  int fin = cmp(b, KL_P_LT, m, lit_like(b, INFINITY, m));
  q = sel(b, kl_build_bin(b, KL_P_AND, fin, cmp(b, KL_P_GT, m, lit_like(b, 0, m))), q, lit_like(b, 0, m));
  int re = add(b, un(b, KL_P_LOG, m), scl(b, 0.5, un(b, KL_P_LOG1P, mul(b, q, q))));
  return mk(re, kl_build_bin(b, KL_P_ATAN2, x.i, x.r));
}

/* Principal square root: t = sqrt((|re| + |z|) / 2); re >= 0: (t, im / 2t), else
 * (|im| / 2t, t with im's sign); sqrt(0) = 0 with im's sign kept. */
static cx csqrtx(kl_build *b, cx x) {
  /* t = sqrt(m) sqrt((|re| / m + sqrt(1 + q^2)) / 2): no overflow where |re| + |z| would */
  int ar = un(b, KL_P_ABS, x.r), ai = un(b, KL_P_ABS, x.i);
  int m = kl_build_bin(b, KL_P_MAX, ar, ai), n = kl_build_bin(b, KL_P_MIN, ar, ai);
  int q = dv(b, n, m), u = dv(b, ar, m);
  int h = un(b, KL_P_SQRT, add(b, lit_like(b, 1, q), mul(b, q, q)));
  int t = mul(b, un(b, KL_P_SQRT, m), un(b, KL_P_SQRT, scl(b, 0.5, add(b, u, h))));
  int inf = cmp(b, KL_P_EQ, m, lit_like(b, INFINITY, m));
  t = sel(b, inf, m, t);
  int half = dv(b, scl(b, 0.5, lit_like(b, 1, t)), t); /* 1 / 2t */
  int pos = cmp(b, KL_P_GE, x.r, lit_like(b, 0, x.r));
  int negim = cmp(b, KL_P_LT, x.i, lit_like(b, 0, x.i));
  int r = sel(b, pos, t, mul(b, un(b, KL_P_ABS, x.i), half));
  int i = sel(b, pos, mul(b, x.i, half), sel(b, negim, neg(b, t), t));
  /* sqrt(+-0 + 0i) = 0 with im's sign (m == 0 made t 0 * nan); an infinite imaginary part gives
   * inf + i im whatever the real part (C99, JAX) */
  int zero = cmp(b, KL_P_EQ, m, lit_like(b, 0, m)), im_inf = cmp(b, KL_P_EQ, ai, lit_like(b, INFINITY, ai));
  r = sel(b, im_inf, ai, sel(b, zero, m, r));
  i = sel(b, im_inf, x.i, sel(b, zero, x.i, i));
  return mk(r, i);
}

/* The products below of a sine (0 at 0) by a cosh or sinh (inf for a huge argument) are +0 where
 * the sine's argument is +-0, as JAX (XLA keeps no sign there; bug, issue 32: sinh(inf + 0i) gave
 * inf + nan i, cosh(nan + 0i) nan + nan i where JAX gives nan + 0i). */
static int zero_times(kl_build *b, int arg, int prod) {
  return sel(b, cmp(b, KL_P_EQ, arg, lit_like(b, 0, arg)), lit_like(b, 0, prod), prod);
}
static cx csinx(kl_build *b, cx x) {
  return mk(zero_times(b, x.r, mul(b, un(b, KL_P_SIN, x.r), un(b, KL_P_COSH, x.i))),
            mul(b, un(b, KL_P_COS, x.r), un(b, KL_P_SINH, x.i)));
}
static cx ccosx(kl_build *b, cx x) {
  return mk(mul(b, un(b, KL_P_COS, x.r), un(b, KL_P_COSH, x.i)),
            zero_times(b, x.r, neg(b, mul(b, un(b, KL_P_SIN, x.r), un(b, KL_P_SINH, x.i)))));
}
static cx csinhx(kl_build *b, cx x) {
  return mk(mul(b, un(b, KL_P_SINH, x.r), un(b, KL_P_COS, x.i)),
            zero_times(b, x.i, mul(b, un(b, KL_P_COSH, x.r), un(b, KL_P_SIN, x.i))));
}
static cx ccoshx(kl_build *b, cx x) {
  return mk(mul(b, un(b, KL_P_COSH, x.r), un(b, KL_P_COS, x.i)),
            zero_times(b, x.i, mul(b, un(b, KL_P_SINH, x.r), un(b, KL_P_SIN, x.i))));
}

/* tanh(a + bi) = (sinh 2a + i sin 2b) / (cosh 2a + cos 2b), with XLA's terms and special values:
 * 2 sinh 2a = expm1(2a) - expm1(-2a), the denominator expm1(2a) + expm1(-2a) + 4 cos^2 b and the
 * imaginary numerator 4 sin b cos b (from sin b and cos b, so a huge b does not overflow 2b: bug,
 * issue 32, tanh(-2.5 + 3e38i) was nan). Where the cosh term overflows the real part is sign(a).
 * An infinite or NaN b gives NaN + NaN i for every finite a (tanh(400 + inf i) is not 1), an
 * infinite a gives +-1 + 0i whatever b, and b == 0 gives a +0 imaginary part (XLA drops -0's sign;
 * bug, issue 32: kiln took tanh a for |a| > 20, whatever b). */
static cx ctanhx(kl_build *b, cx x) {
  int up = un(b, KL_P_EXPM1, scl(b, 2, x.r)), down = un(b, KL_P_EXPM1, scl(b, -2, x.r));
  int sb = un(b, KL_P_SIN, x.i), cb = un(b, KL_P_COS, x.i);
  int cosh_part = add(b, up, down); /* 2 cosh 2a - 2 */
  int d = add(b, cosh_part, scl(b, 4, mul(b, cb, cb)));
  int num_i = scl(b, 4, mul(b, cb, sb));
  int huge = cmp(b, KL_P_EQ, cosh_part, lit_like(b, INFINITY, cosh_part));
  int re = sel(b, huge, un(b, KL_P_SIGN, x.r), dv(b, sub(b, up, down), d));
  int a_inf = cmp(b, KL_P_EQ, un(b, KL_P_ABS, x.r), lit_like(b, INFINITY, x.r));
  int im_nan = cmp(b, KL_P_NE, num_i, num_i);
  re = sel(b, kl_build_bin(b, KL_P_AND, im_nan, un(b, KL_P_NOT, a_inf)), lit_like(b, NAN, re), re);
  int im_zero = kl_build_bin(b, KL_P_OR, cmp(b, KL_P_EQ, x.i, lit_like(b, 0, x.i)), kl_build_bin(b, KL_P_AND, a_inf, im_nan));
  return mk(re, sel(b, im_zero, lit_like(b, 0, num_i), dv(b, num_i, d)));
}

static cx cone(kl_build *b, int like) { return cre(b, lit_like(b, 1, like)); }

/* 1 / sqrt(z); an infinite part (the other one NaN included) gives zero, its real part with re's
 * sign and its imaginary part with the opposite of im's, as XLA's (bug, issue 32: rsqrt(-inf + nan i)
 * was nan, so arcsinh's derivative at +-inf i was nan where JAX's is 0). */
static cx crsqrtx(kl_build *b, cx x) {
  cx y = cdivx(b, cone(b, x.r), csqrtx(b, x));
  int inf = lit_like(b, INFINITY, x.r), pz = lit_like(b, 0.0, x.r), nz = lit_like(b, -0.0, x.r);
  int big = kl_build_bin(b, KL_P_OR, cmp(b, KL_P_EQ, un(b, KL_P_ABS, x.r), inf), cmp(b, KL_P_EQ, un(b, KL_P_ABS, x.i), inf));
  int r = sel(b, cmp(b, KL_P_LT, x.r, pz), nz, pz), i = sel(b, cmp(b, KL_P_LT, x.i, pz), pz, nz);
  return mk(sel(b, big, r, y.r), sel(b, big, i, y.i));
}

/* log1p(z): (log1p(2 re + re^2 + im^2) / 2, atan2(im, 1 + re)), accurate near 0. */
static cx clog1px(kl_build *b, cx x) {
  int r = scl(b, 0.5, un(b, KL_P_LOG1P, add(b, mul(b, add(b, lit_like(b, 2, x.r), x.r), x.r), mul(b, x.i, x.i))));
  return mk(r, kl_build_bin(b, KL_P_ATAN2, x.i, add(b, lit_like(b, 1, x.r), x.r)));
}

/* Beyond this |z|, z^2 + 1 == z^2 in the precision (and z^2 may overflow): the asymptotic forms. */
static int big_arg(kl_build *b, cx x) {
  double lim = kl_build_aval(b, x.r)->dtype == KL_F64 ? 1e150 : 1e15;
  int m = kl_build_bin(b, KL_P_MAX, un(b, KL_P_ABS, x.r), un(b, KL_P_ABS, x.i));
  return cmp(b, KL_P_GT, m, lit_like(b, lim, m));
}

/* asinh(z) = log1p(z + z^2 / (1 + sqrt(1 + z^2))) (the same as log(z + sqrt(z^2 + 1)), accurate
 * near 0), taken on the right half plane (asinh(-z) = -asinh(z)) where nothing cancels; for huge
 * |z|, log(2 z). */
static cx casinhx(kl_build *b, cx x, int zero_re_negative) {
  int zero = lit_like(b, 0, x.r), flip = cmp(b, KL_P_LT, x.r, zero);
  /* on the cut (re = +-0, |im| > 1) JAX ignores the zero's sign: asinh takes the side of re > 0, asin
   * and acos (through asinh(i z), whose re is -im z) that of im z > 0, i.e. re(i z) < 0 */
  if (zero_re_negative) flip = kl_build_bin(b, KL_P_OR, flip, cmp(b, KL_P_EQ, x.r, zero));
  cx w = mk(sel(b, flip, neg(b, x.r), x.r), sel(b, flip, neg(b, x.i), x.i));
  cx w2 = cmulx(b, w, w), one = cone(b, x.r);
  cx s = clog1px(b, cadd(b, w, cdivx(b, w2, cadd(b, one, csqrtx(b, cadd(b, one, w2))))));
  cx l = clogx(b, w);
  int big = big_arg(b, x);
  s = mk(sel(b, big, add(b, l.r, lit_like(b, M_LN2, l.r)), s.r), sel(b, big, l.i, s.i));
  /* asinh maps the right half-plane into itself: |re| puts w = +-0 + iy, |y| > 1 (the cut) on JAX's
   * side, the limit from re > 0 (bug, issue 32: csqrt, as XLA's, ignores the sign of a zero imaginary
   * part, so w^2 = -y^2 - 0i landed on the other side: asinh(-1.9i) gave -1.257 - 1.571i) */
  s.r = un(b, KL_P_ABS, s.r);
  return mk(sel(b, flip, neg(b, s.r), s.r), sel(b, flip, neg(b, s.i), s.i));
}
/* acosh(z) = log(z + sqrt(z + 1) sqrt(z - 1)); for huge |z|, log(2 z). */
static cx cacoshx(kl_build *b, cx x) {
  cx one = cone(b, x.r);
  cx s = clogx(b, cadd(b, x, cmulx(b, csqrtx(b, cadd(b, x, one)), csqrtx(b, csub(b, x, one)))));
  cx l = clogx(b, x);
  int big = big_arg(b, x);
  return mk(sel(b, big, add(b, l.r, lit_like(b, M_LN2, l.r)), s.r), sel(b, big, l.i, s.i));
}
/* atanh(z) = (log1p(4 re / ((1 - re)^2 + im^2)) / 4, atan2(2 im, (1 - re)(1 + re) - im^2) / 2),
 * accurate near 0; for huge |z|, (re / |z|^2, +-pi/2). */
static cx catanhx(kl_build *b, cx x) {
  int one = lit_like(b, 1, x.r);
  int omr = sub(b, one, x.r);
  int den = add(b, mul(b, omr, omr), mul(b, x.i, x.i));
  int re = scl(b, 0.25, un(b, KL_P_LOG1P, dv(b, scl(b, 4, x.r), den)));
  int im = scl(b, 0.5, kl_build_bin(b, KL_P_ATAN2, scl(b, 2, x.i), sub(b, mul(b, omr, add(b, one, x.r)), mul(b, x.i, x.i))));
  int ar = un(b, KL_P_ABS, x.r), ai = un(b, KL_P_ABS, x.i);
  int m = kl_build_bin(b, KL_P_MAX, ar, ai), q = dv(b, kl_build_bin(b, KL_P_MIN, ar, ai), m);
  int re_big = dv(b, dv(b, dv(b, x.r, m), m), add(b, one, mul(b, q, q)));
  int negim = kl_build_bin(b, KL_P_OR, cmp(b, KL_P_LT, x.i, lit_like(b, 0, x.i)),
                           kl_build_bin(b, KL_P_AND, cmp(b, KL_P_EQ, x.i, lit_like(b, 0, x.i)),
                                        cmp(b, KL_P_LT, dv(b, one, x.i), lit_like(b, 0, x.i)))); /* -0 */
  int im_big = sel(b, negim, lit_like(b, -M_PI / 2, x.r), lit_like(b, M_PI / 2, x.r));
  int big = big_arg(b, x);
  re = sel(b, big, re_big, re);
  im = sel(b, big, im_big, im);
  /* an infinite part (the other NaN included): +-0 +- i pi/2 by the signs as XLA tests them, x >= 0
   * and y >= 0, false for a NaN (bug, issue 32: inf / inf made the real part NaN, so arctan(0.5 +
   * inf i) was pi/2 + nan i where JAX's is pi/2 + 0i) */
  int inf = lit_like(b, INFINITY, x.r), zero = lit_like(b, 0, x.r);
  int any_inf = kl_build_bin(b, KL_P_OR, cmp(b, KL_P_EQ, ar, inf), cmp(b, KL_P_EQ, ai, inf));
  int re_inf = sel(b, cmp(b, KL_P_GE, x.r, zero), zero, lit_like(b, -0.0, x.r));
  int im_inf = sel(b, cmp(b, KL_P_GE, x.i, zero), lit_like(b, M_PI / 2, x.r), lit_like(b, -M_PI / 2, x.r));
  /* a NaN part (none infinite): the imaginary part is +-pi/2 by that test too, as XLA's */
  int any_nan = kl_build_bin(b, KL_P_OR, cmp(b, KL_P_NE, x.r, x.r), cmp(b, KL_P_NE, x.i, x.i));
  return mk(sel(b, any_inf, re_inf, re), sel(b, kl_build_bin(b, KL_P_OR, any_inf, any_nan), im_inf, im));
}

static cx cpow_int(kl_build *b, cx x, int64_t n) {
  uint64_t k = n < 0 ? (uint64_t)(-(n + 1)) + 1 : (uint64_t)n;
  cx acc = {-1, -1}, sq = x;
  while (k) {
    if (k & 1) acc = acc.r < 0 ? sq : cmulx(b, acc, sq);
    k >>= 1;
    if (k) sq = cmulx(b, sq, sq);
  }
  if (acc.r < 0) acc = cone(b, x.r);
  return n < 0 ? cdivx(b, cone(b, x.r), acc) : acc;
}

/* ---- ordering (JAX's: lexicographic on (re, im)), products and extrema along axes ----------- */

/* x > y (strict = GT) or x < y (strict = LT), comparing real parts first */
static int clex(kl_build *b, cx x, cx y, kl_prim strict) {
  return kl_build_bin(b, KL_P_OR, cmp(b, strict, x.r, y.r),
                      kl_build_bin(b, KL_P_AND, cmp(b, KL_P_EQ, x.r, y.r), cmp(b, strict, x.i, y.i)));
}
static cx cpick(kl_build *b, int pred, cx x, cx y) { return mk(sel(b, pred, x.r, y.r), sel(b, pred, x.i, y.i)); }
/* op: MUL (products), MAX or MIN */
static cx ccombine(kl_build *b, kl_prim op, cx x, cx y) {
  if (op == KL_P_MUL) return cmulx(b, x, y);
  return cpick(b, clex(b, x, y, op == KL_P_MAX ? KL_P_GT : KL_P_LT), x, y);
}
/* op's identity: 1, or the pair below (above) every other for max (min) */
static cx cidentity(kl_build *b, kl_prim op, kl_dtype t) {
  if (op == KL_P_MUL) return mk(kl_build_lit(b, 1, t), kl_build_lit(b, 0, t));
  double v = op == KL_P_MAX ? -INFINITY : INFINITY;
  return mk(kl_build_lit(b, v, t), kl_build_lit(b, v, t));
}
static cx cslice(kl_build *b, cx x, int axis, int64_t lo, int64_t hi) {
  return mk(kl_ad_slice_axis(b, x.r, axis, lo, hi), kl_ad_slice_axis(b, x.i, axis, lo, hi));
}
static int concat2(kl_build *b, int x, int y, int axis) {
  kl_params p;
  kl_params_init(&p, KL_P_CONCATENATE);
  p.concatenate.dimension = axis;
  return kl_build_op(b, KL_P_CONCATENATE, (int[]){x, y}, 2, &p);
}

/* x reduced over `axes` by op in halving rounds (log2 n elementwise steps that fuse). */
static cx ctree_reduce(kl_build *b, cx x, const kl_ivec *axes, kl_prim op) {
  kl_aval a = *kl_build_aval(b, x.r);
  int64_t perm[KL_MAX_RANK], shape[KL_MAX_RANK], n = 1;
  int nk = 0, np = 0;
  char red[KL_MAX_RANK] = {0};
  for (int k = 0; k < axes->n; k++) red[axes->v[k]] = 1;
  for (int d = 0; d < a.ndim; d++)
    if (!red[d]) shape[nk] = a.dims[d], perm[np++] = d, nk++;
  for (int d = 0; d < a.ndim; d++)
    if (red[d]) perm[np++] = d, n *= a.dims[d];
  if (n == 0) { /* an empty reduction: the identity */
    cx id = cidentity(b, op, a.dtype);
    return mk(kl_build_broadcast(b, id.r, shape, nk, NULL), kl_build_broadcast(b, id.i, shape, nk, NULL));
  }
  shape[nk] = n;
  x = mk(kl_build_reshape(b, kl_build_transpose(b, x.r, perm, a.ndim), shape, nk + 1),
         kl_build_reshape(b, kl_build_transpose(b, x.i, perm, a.ndim), shape, nk + 1));
  while (n > 1 && !b->failed) {
    int64_t h = n / 2;
    cx c = ccombine(b, op, cslice(b, x, nk, 0, h), cslice(b, x, nk, h, 2 * h));
    if (n % 2) {
      cx rest = cslice(b, x, nk, 2 * h, n);
      c = mk(concat2(b, c.r, rest.r, nk), concat2(b, c.i, rest.i, nk));
    }
    x = c;
    n = h + n % 2;
  }
  return mk(kl_build_reshape(b, x.r, shape, nk), kl_build_reshape(b, x.i, shape, nk));
}

/* inclusive scan of x along axis by op: recursive doubling, log2 n rounds of shifted combines */
static cx cscan(kl_build *b, cx x, int axis, int reverse, kl_prim op) {
  int64_t n = kl_build_aval(b, x.r)->dims[axis];
  cx id = cidentity(b, op, kl_build_aval(b, x.r)->dtype);
  for (int64_t s = 1; s < n && !b->failed; s *= 2) {
    int64_t lo = reverse ? -s : s;
    cx sh = mk(kl_ad_pad_axis(b, x.r, id.r, axis, lo, -lo), kl_ad_pad_axis(b, x.i, id.i, axis, lo, -lo));
    x = ccombine(b, op, sh, x);
  }
  return x;
}

/* ---- the two forms of a complex value ------------------------------------------------------ */

/* x^y as JAX computes it (XLA's lowering, MLIR's complex.pow): with y = c + di,
 * |x|^c e^(-d arg x) (cos q + i sin q), q = c arg x + d log|x|, and its special cases, the later
 * ones winning: 0^c = 0 (c > 0 real; 0^0 = 1), x^0 = 1 (inf and nan too), 1^y = 1 (y nan too),
 * inf^c = inf (c > 0 real), inf^c = 0 (c < 0 real). */
static cx cpowx(kl_build *b, cx x, cx y) {
  int c = y.r, d = y.i, zero = lit_like(b, 0, c), one = lit_like(b, 1, c), inf = lit_like(b, INFINITY, c);
  int ab = cabsx(b, x), arg = kl_build_bin(b, KL_P_ATAN2, x.i, x.r);
  int coeff = mul(b, kl_build_bin(b, KL_P_POW, ab, c), un(b, KL_P_EXP, mul(b, neg(b, d), arg)));
  int q = add(b, mul(b, c, arg), mul(b, d, un(b, KL_P_LOG, ab)));
  cx out = mk(mul(b, coeff, un(b, KL_P_COS, q)), mul(b, coeff, un(b, KL_P_SIN, q)));
#define AND(p, q) kl_build_bin(b, KL_P_AND, (p), (q))
  int d0 = cmp(b, KL_P_EQ, d, zero), c0 = cmp(b, KL_P_EQ, c, zero), b0 = cmp(b, KL_P_EQ, x.i, zero);
  int x0 = AND(cmp(b, KL_P_EQ, ab, zero), AND(d0, cmp(b, KL_P_LE, zero, c)));
  out = cpick(b, x0, mk(sel(b, c0, one, zero), zero), out);
  out = cpick(b, AND(c0, d0), cre(b, one), out);
  out = cpick(b, AND(cmp(b, KL_P_EQ, x.r, one), b0), cre(b, one), out);
  int xinf = AND(AND(cmp(b, KL_P_EQ, x.r, inf), b0), d0);
  out = cpick(b, AND(xinf, cmp(b, KL_P_GT, c, zero)), cre(b, inf), out);
  out = cpick(b, AND(xinf, cmp(b, KL_P_LT, c, zero)), cre(b, zero), out);
#undef AND
  return out;
}

static int is_cx(const kl_aval *a) { return kl_dtype_is_complex(a->dtype); }

/* The packed aval of a complex one: real dtype, shape + [2]. */
static kl_aval packed_aval(const kl_aval *a) {
  kl_aval p = *a;
  p.dtype = kl_dtype_real_part(a->dtype);
  p.dims[p.ndim++] = 2;
  p.weak = 0;
  return p;
}

static cx parts_of(split_ctx *s, int v) {
  kl_build *b = &s->b;
  if (s->re[v] < 0) {
    const kl_aval *a = &s->src->vals[v].aval;
    int pk = s->map[v];
    int64_t start[KL_MAX_RANK + 1] = {0}, limit[KL_MAX_RANK + 1];
    memcpy(limit, a->dims, sizeof(int64_t) * (size_t)a->ndim);
    int r = a->ndim;
    int part[2];
    for (int k = 0; k < 2; k++) {
      kl_params p;
      kl_params_init(&p, KL_P_SLICE);
      start[r] = k, limit[r] = k + 1;
      p.slice.start_indices = (kl_ivec){start, r + 1};
      p.slice.limit_indices = (kl_ivec){limit, r + 1};
      int sl = kl_build_op(b, KL_P_SLICE, &pk, 1, &p);
      part[k] = kl_build_reshape_new(b, sl, a->dims, a->ndim);
    }
    s->re[v] = part[0], s->im[v] = part[1];
  }
  return mk(s->re[v], s->im[v]);
}

static int packed_of(split_ctx *s, int v) {
  kl_build *b = &s->b;
  if (s->map[v] < 0) {
    const kl_aval *a = &s->src->vals[v].aval;
    int64_t shape[KL_MAX_RANK + 1];
    memcpy(shape, a->dims, sizeof(int64_t) * (size_t)a->ndim);
    shape[a->ndim] = 1;
    int ins[2];
    ins[0] = kl_build_reshape_new(b, s->re[v], shape, a->ndim + 1); /* parts have the full shape (set_parts) */
    ins[1] = kl_build_reshape_new(b, s->im[v], shape, a->ndim + 1);
    kl_params p;
    kl_params_init(&p, KL_P_CONCATENATE);
    p.concatenate.dimension = a->ndim;
    s->map[v] = kl_build_op(b, KL_P_CONCATENATE, ins, 2, &p);
  }
  return s->map[v];
}

/* Parts of a result, broadcast to its shape where a formula left one rank-0 (literals). */
static void set_parts(split_ctx *s, int v, cx c) {
  const kl_aval *a = &s->src->vals[v].aval;
  kl_build *b = &s->b;
  if (c.r >= 0 && kl_build_aval(b, c.r)->ndim != a->ndim) c.r = kl_build_broadcast(b, c.r, a->dims, a->ndim, NULL);
  if (c.i >= 0 && kl_build_aval(b, c.i)->ndim != a->ndim) c.i = kl_build_broadcast(b, c.i, a->dims, a->ndim, NULL);
  s->re[v] = c.r, s->im[v] = c.i;
}

/* Operand k of e as a complex pair: a real operand (of a mixed equation) has a zero imaginary part. */
static cx operand(split_ctx *s, const kl_eqn *e, int k) {
  int v = e->ins[k];
  if (is_cx(&s->src->vals[v].aval)) return parts_of(s, v);
  return mk(s->map[v], kl_build_zeros(&s->b, kl_build_aval(&s->b, s->map[v])));
}

/* ---- equations ------------------------------------------------------------------------------ */

static int unsupported(split_ctx *s, const kl_eqn *e, const char *what) {
  return kl_build_fail(&s->b, KL_ERR_UNSUPPORTED, "%s of complex numbers is not supported yet by kiln%s%s",
                       kl_prim_get(e->prim)->name, what ? ": " : "", what ? what : "");
}

/* Elementwise math with complex operands: the result's parts (or a real result in *real). */
static int elementwise(split_ctx *s, const kl_eqn *e, cx *out, int *real) {
  kl_build *b = &s->b;
  cx x = operand(s, e, 0);
  switch (e->prim) {
  case KL_P_NEG: *out = cneg(b, x); return 0;
  case KL_P_ADD: *out = cadd(b, x, operand(s, e, 1)); return 0;
  case KL_P_SUB: *out = csub(b, x, operand(s, e, 1)); return 0;
  case KL_P_MUL: *out = cmulx(b, x, operand(s, e, 1)); return 0;
  case KL_P_DIV: *out = cdivx(b, x, operand(s, e, 1)); return 0;
  case KL_P_SQUARE: *out = cmulx(b, x, x); return 0;
  case KL_P_INTEGER_POW: *out = cpow_int(b, x, e->p.integer_pow.y); return 0;
  case KL_P_CONJ: *out = mk(x.r, neg(b, x.i)); return 0;
  case KL_P_REAL: *real = x.r; return 0;
  case KL_P_IMAG: *real = x.i; return 0;
  case KL_P_ABS: *real = cabsx(b, x); return 0;
  case KL_P_SIGN: {
    int m = cabsx(b, x);
    int zero = cmp(b, KL_P_EQ, m, lit_like(b, 0, m));
    int safe = sel(b, zero, lit_like(b, 1, m), m);
    *out = mk(sel(b, zero, x.r, dv(b, x.r, safe)), sel(b, zero, x.i, dv(b, x.i, safe)));
    return 0;
  }
  case KL_P_EQ: case KL_P_NE: {
    cx y = operand(s, e, 1);
    kl_prim c = e->prim, join = c == KL_P_EQ ? KL_P_AND : KL_P_OR;
    *real = kl_build_bin(b, join, cmp(b, c, x.r, y.r), cmp(b, c, x.i, y.i));
    return 0;
  }
  case KL_P_MAX: case KL_P_MIN: /* lexicographic, as JAX */
    *out = ccombine(b, e->prim, x, operand(s, e, 1));
    return 0;
  case KL_P_EXP: *out = cexpx(b, x); return 0;
  case KL_P_EXP2: *out = cexpx(b, mk(scl(b, M_LN2, x.r), scl(b, M_LN2, x.i))); return 0;
  case KL_P_LOG: *out = clogx(b, x); return 0;
  case KL_P_LOG1P: *out = clog1px(b, x); return 0; /* |1 + z|^2 = 1 + (2 + re) re + im^2 */
  case KL_P_EXPM1: { /* e^re cos im - 1 = expm1(re) cos im - 2 sin^2(im / 2) */
    int h = un(b, KL_P_SIN, scl(b, 0.5, x.i));
    *out = mk(sub(b, mul(b, un(b, KL_P_EXPM1, x.r), un(b, KL_P_COS, x.i)), scl(b, 2, mul(b, h, h))),
              mul(b, un(b, KL_P_EXP, x.r), un(b, KL_P_SIN, x.i)));
    return 0;
  }
  case KL_P_SQRT: *out = csqrtx(b, x); return 0;
  case KL_P_RSQRT: *out = crsqrtx(b, x); return 0;
  case KL_P_SIN: *out = csinx(b, x); return 0;
  case KL_P_COS: *out = ccosx(b, x); return 0;
  case KL_P_TAN: *out = cdiv_i(b, ctanhx(b, ctimes_i(b, x))); return 0; /* tan z = -i tanh(i z) */
  case KL_P_SINH: *out = csinhx(b, x); return 0;
  case KL_P_COSH: *out = ccoshx(b, x); return 0;
  case KL_P_TANH: *out = ctanhx(b, x); return 0;
  case KL_P_ASINH: *out = casinhx(b, x, 0); return 0;
  case KL_P_ACOSH: *out = cacoshx(b, x); return 0;
  case KL_P_ATANH: *out = catanhx(b, x); return 0;
  case KL_P_ASIN: *out = cdiv_i(b, casinhx(b, ctimes_i(b, x), 1)); return 0; /* asin z = -i asinh(i z) */
  case KL_P_ATAN: *out = cdiv_i(b, catanhx(b, ctimes_i(b, x))); return 0; /* atan z = -i atanh(i z) */
  case KL_P_ACOS: { /* acos z = pi/2 - asin z */
    cx a = cdiv_i(b, casinhx(b, ctimes_i(b, x), 1));
    *out = mk(sub(b, lit_like(b, M_PI / 2, x.r), a.r), neg(b, a.i));
    return 0;
  }
  case KL_P_LOGISTIC: *out = cdivx(b, cone(b, x.r), cadd(b, cone(b, x.r), cexpx(b, cneg(b, x)))); return 0;
  case KL_P_ATAN2: { /* atan2(y, x) = -i log((x + i y) / sqrt(x^2 + y^2)), XLA's complex atan2 (JAX's) */
    cx w = operand(s, e, 1);
    cx r = csqrtx(b, cadd(b, cmulx(b, w, w), cmulx(b, x, x)));
    *out = cdiv_i(b, clogx(b, cdivx(b, cadd(b, w, ctimes_i(b, x)), r)));
    return 0;
  }
  case KL_P_POW: *out = cpowx(b, x, operand(s, e, 1)); return 0;
  case KL_P_STOP_GRADIENT: case KL_P_OPTIMIZATION_BARRIER:
    *out = mk(un(b, e->prim, x.r), un(b, e->prim, x.i));
    return 0;
  default: return unsupported(s, e, NULL);
  }
}

/* The same equation on each part (shape and index equations; complex operands at `which`). */
static int per_part(split_ctx *s, const kl_eqn *e, int *ys) {
  kl_build *b = &s->b;
  int *ins = kl_malloc(sizeof(int) * ((size_t)e->nin + 1));
  if (!ins) return kl_build_oom(b);
  for (int k = 0; k < 2; k++) {
    for (int j = 0; j < e->nin; j++) {
      int v = e->ins[j];
      if (!is_cx(&s->src->vals[v].aval)) ins[j] = s->map[v];
      else {
        cx c = parts_of(s, v);
        ins[j] = k ? c.i : c.r;
      }
    }
    kl_params p = e->p;
    int o[KL_MAX_OUTS];
    if (kl_build_emit(b, e->prim, ins, e->nin, &p, o) < 0) break;
    ys[k] = o[0];
  }
  free(ins);
  return b->failed ? -1 : 0;
}

/* A real scatter with e's axis (and source line) and combiner op. */
static int scatter_real(kl_build *b, const kl_eqn *e, int op, int operand, int idx, int updates) {
  kl_params p = e->p;
  p.scatter.op = op;
  return kl_build_op(b, KL_P_SCATTER, (int[]){operand, idx, updates}, 3, &p);
}

/* scatter of complex numbers combined by min, max or mul (x.at[i].min/max/multiply/divide/power).
 * min/max in JAX's lexicographic order: the real parts' extreme first, then the imaginary parts'
 * extreme among the candidates (operand and updates) whose real part reached it. mul: each slot's
 * product of its updates (the update itself where one lands, exactly; where several do, |u|
 * multiplied and arg u summed, to a few ulps) times the operand; slots no update reaches keep the
 * operand unchanged. */
static int scatter_combine(split_ctx *s, const kl_eqn *e, cx *out) {
  kl_build *b = &s->b;
  cx x = parts_of(s, e->ins[0]), u = parts_of(s, e->ins[2]);
  int idx = s->map[e->ins[1]], op = e->p.scatter.op;
  kl_aval xa = *kl_build_aval(b, x.r), ua = *kl_build_aval(b, u.r); /* copies: building moves avals */
  kl_params tp;
  kl_params_init(&tp, KL_P_TAKE);
  tp.take.axis = e->p.scatter.axis;
#define SCAT(m, opnd, upd) scatter_real(b, e, (m), (opnd), idx, (upd))
  if (op == KL_SCATTER_MIN || op == KL_SCATTER_MAX) {
    int re = SCAT(op, x.r, u.r);
    int worst = lit_like(b, op == KL_SCATTER_MAX ? -INFINITY : INFINITY, x.i);
    int re_at_u = kl_build_op(b, KL_P_TAKE, (int[]){re, idx}, 2, &tp);
    int xi = sel(b, cmp(b, KL_P_EQ, x.r, re), x.i, worst);
    int ui = sel(b, cmp(b, KL_P_EQ, u.r, re_at_u), u.i, worst);
    *out = mk(re, SCAT(op, xi, ui));
    return b->failed ? -1 : 0;
  }
  int zeros = kl_build_zeros(b, &xa);
  int ones_x = kl_build_broadcast(b, lit_like(b, 1, x.r), xa.dims, xa.ndim, NULL);
  int ones_u = kl_build_broadcast(b, lit_like(b, 1, u.r), ua.dims, ua.ndim, NULL);
  int count = SCAT(KL_SCATTER_ADD, zeros, ones_u);
  cx single = mk(SCAT(KL_SCATTER_ADD, zeros, u.r), SCAT(KL_SCATTER_ADD, zeros, u.i));
  int mag = SCAT(KL_SCATTER_MUL, ones_x, cabsx(b, u));
  int arg = SCAT(KL_SCATTER_ADD, zeros, kl_build_bin(b, KL_P_ATAN2, u.i, u.r));
  cx polar = mk(mul(b, mag, un(b, KL_P_COS, arg)), mul(b, mag, un(b, KL_P_SIN, arg)));
  cx prod = cmulx(b, x, cpick(b, cmp(b, KL_P_EQ, count, lit_like(b, 1, count)), single, polar));
  *out = cpick(b, cmp(b, KL_P_EQ, count, lit_like(b, 0, count)), x, prod);
#undef SCAT
  return b->failed ? -1 : 0;
}

/* sort with complex operands: each becomes its two parts, a complex key two keys (real part
 * first: JAX's lexicographic order). */
static int sort_parts(split_ctx *s, const kl_eqn *e) {
  kl_build *b = &s->b;
  int ins[KL_MAX_OUTS], n = 0, keys = 0, ys[KL_MAX_OUTS];
  for (int j = 0; j < e->nin; j++) {
    int v = e->ins[j], two = is_cx(&s->src->vals[v].aval);
    if (n + 1 + two > KL_MAX_OUTS) return unsupported(s, e, "too many operands once complex ones are split");
    if (two) {
      cx c = parts_of(s, v);
      ins[n++] = c.r, ins[n++] = c.i;
    } else {
      ins[n++] = s->map[v];
    }
    if (j < e->p.sort.num_keys) keys += 1 + two;
  }
  kl_params p = e->p;
  p.sort.num_keys = keys;
  if (kl_build_emit(b, KL_P_SORT, ins, n, &p, ys) < 0) return -1;
  for (int j = 0, k = 0; j < e->nout; j++) {
    int v = e->outs[j];
    if (is_cx(&s->src->vals[v].aval)) {
      set_parts(s, v, mk(ys[k], ys[k + 1]));
      k += 2;
    } else {
      s->map[v] = ys[k++];
    }
  }
  return 0;
}

/* dot_general of complex operands: four real products (a real operand has no imaginary one).
 * With a real preferred_element_type (complex64 operands, float32 or int32 result) the result is
 * the real part of the complex product converted to it, as JAX gives: *real gets it. */
static int dot(split_ctx *s, const kl_eqn *e, cx *out, int *real) {
  kl_build *b = &s->b;
  const kl_aval *la = &s->src->vals[e->ins[0]].aval, *ra = &s->src->vals[e->ins[1]].aval;
  kl_dtype t = s->src->vals[e->outs[0]].aval.dtype;
  cx x = is_cx(la) ? parts_of(s, e->ins[0]) : mk(s->map[e->ins[0]], -1);
  cx y = is_cx(ra) ? parts_of(s, e->ins[1]) : mk(s->map[e->ins[1]], -1);
  kl_params p = e->p;
  if (p.dot.preferred_element_type >= 0)
    p.dot.preferred_element_type = kl_dtype_is_complex(t) ? (int)kl_dtype_real_part(t) : -1;
  int o[KL_MAX_OUTS];
#define PROD(l, r) (kl_build_emit(b, KL_P_DOT_GENERAL, (int[]){(l), (r)}, 2, &p, o) < 0 ? -1 : o[0])
  int rr = PROD(x.r, y.r);
  int ii = x.i >= 0 && y.i >= 0 ? PROD(x.i, y.i) : -1;
  out->r = ii >= 0 ? sub(b, rr, ii) : rr;
  if (!kl_dtype_is_complex(t)) {
    *real = kl_build_convert(b, out->r, t);
    return b->failed ? -1 : 0;
  }
  int ri = y.i >= 0 ? PROD(x.r, y.i) : -1;
  int ir = x.i >= 0 ? PROD(x.i, y.r) : -1;
#undef PROD
  out->i = kl_build_add(b, ri, ir);
  if (out->i < 0 && !b->failed) out->i = kl_build_zeros(b, kl_build_aval(b, rr));
  return b->failed ? -1 : 0;
}

/* An equation with bodies (while, scan, cond, ...): complex operands go in packed and its bodies
 * are rewritten by this pass, so their inputs and results are packed alike. */
static int with_bodies(split_ctx *s, const kl_eqn *e, int *ys) {
  kl_build *b = &s->b;
  kl_params p = e->p;
  kl_program *made[4];
  int nmade = 0, rc = 0;
  for (const kl_param_field *f = kl_prim_get(e->prim)->fields; f->name && !rc; f++) {
    if (f->kind != KL_PF_PROGRAM) continue;
    kl_program **at = kl_param_ptr(&p, f);
    if (!*at) continue;
    kl_program *body = kl_program_copy(*at);
    if (!body) {
      rc = kl_build_oom(b);
      break;
    }
    made[nmade++] = body;
    if (kl_complex_split(body, b->err, b->errlen)) {
      b->failed = 1;
      rc = -1;
    }
    *at = body;
  }
  int *ins = kl_malloc(sizeof(int) * ((size_t)e->nin + 1));
  if (!ins && !rc) rc = kl_build_oom(b);
  if (!rc) {
    for (int j = 0; j < e->nin; j++) ins[j] = is_cx(&s->src->vals[e->ins[j]].aval) ? packed_of(s, e->ins[j]) : s->map[e->ins[j]];
    if (kl_build_emit(b, e->prim, ins, e->nin, &p, ys) < 0) rc = -1;
  }
  free(ins);
  for (int k = 0; k < nmade; k++) kl_program_free(made[k]); /* the new program holds them */
  return rc;
}

/* A library primitive's `packed` param (complex data interleaved as real [..., 2]: bit 0 the
 * operands, bit 1 the results), or NULL when it has none. */
static int *packed_field(kl_prim prim, kl_params *p) {
  for (const kl_param_field *f = kl_prim_get(prim)->fields; f->name; f++)
    if (!strcmp(f->name, "packed")) return kl_param_ptr(p, f);
  return NULL;
}

static int has_complex(const kl_program *pg) {
  for (int v = 0; v < pg->nvals; v++)
    if (is_cx(&pg->vals[v].aval)) return 1;
  return 0;
}

/* One equation of the source program. */
static int rewrite(split_ctx *s, const kl_eqn *e) {
  kl_build *b = &s->b;
  const kl_program *src = s->src;
  int any = 0, bodies = 0;
  for (int j = 0; j < e->nin; j++) any |= is_cx(&src->vals[e->ins[j]].aval);
  for (int j = 0; j < e->nout; j++) any |= is_cx(&src->vals[e->outs[j]].aval);
  for (const kl_param_field *f = kl_prim_get(e->prim)->fields; f->name; f++)
    if (f->kind == KL_PF_PROGRAM && *(kl_program *const *)kl_param_cptr(&e->p, f)) bodies = 1;
  int ys[KL_MAX_OUTS];
  if (!any) { /* copied; bodies with complex values inside are rewritten by the pipeline's walk */
    int *ins = kl_malloc(sizeof(int) * ((size_t)e->nin + 1));
    if (!ins) return kl_build_oom(b);
    for (int j = 0; j < e->nin; j++) ins[j] = s->map[e->ins[j]];
    int n = kl_build_emit(b, e->prim, ins, e->nin, &e->p, ys);
    free(ins);
    if (n < 0) return -1;
    for (int j = 0; j < e->nout; j++) s->map[e->outs[j]] = ys[j];
    return 0;
  }
  int *packed = packed_field(e->prim, &(kl_params){0});
  if (packed) { /* library calls on interleaved data (fft, linalg): packed in and out */
    kl_params p = e->p;
    int flag = 0, *ins = kl_malloc(sizeof(int) * ((size_t)e->nin + 1));
    if (!ins) return kl_build_oom(b), -1;
    for (int j = 0; j < e->nin; j++) flag |= is_cx(&src->vals[e->ins[j]].aval);
    for (int j = 0; j < e->nout; j++) flag |= is_cx(&src->vals[e->outs[j]].aval) << 1;
    *packed_field(e->prim, &p) = flag;
    for (int j = 0; j < e->nin; j++) ins[j] = is_cx(&src->vals[e->ins[j]].aval) ? packed_of(s, e->ins[j]) : s->map[e->ins[j]];
    int n = kl_build_emit(b, e->prim, ins, e->nin, &p, ys);
    free(ins);
    if (n < 0) return -1;
    for (int j = 0; j < e->nout; j++) s->map[e->outs[j]] = ys[j];
    return 0;
  }
  if (bodies) {
    if (with_bodies(s, e, ys)) return -1;
    for (int j = 0; j < e->nout; j++) s->map[e->outs[j]] = ys[j]; /* packed where complex */
    return 0;
  }
  int y = e->outs[0];
  const kl_aval *ya = &src->vals[y].aval;
  kl_dtype yr = kl_dtype_real_part(ya->dtype);
  kl_form form = kl_prim_get(e->prim)->form;
  cx out = {-1, -1};
  int real = -1;
  switch (e->prim) {
  case KL_P_CONST:
    out = mk(kl_build_lit(b, e->p.literal.value, yr), kl_build_lit(b, e->p.literal.imag, yr));
    break;
  case KL_P_IOTA: {
    kl_params p = e->p;
    p.iota.dtype = (int)yr;
    out = mk(kl_build_op(b, KL_P_IOTA, NULL, 0, &p), kl_build_zeros(b, &(kl_aval){.dtype = yr}));
    break;
  }
  case KL_P_COMPLEX: out = mk(s->map[e->ins[0]], s->map[e->ins[1]]); break;
  case KL_P_SELECT_N: {
    cx f = operand(s, e, 1), t = operand(s, e, 2);
    int pr = s->map[e->ins[0]];
    out = mk(kl_build_select(b, pr, f.r, t.r), kl_build_select(b, pr, f.i, t.i));
    break;
  }
  case KL_P_CONVERT: {
    const kl_aval *xa = &src->vals[e->ins[0]].aval;
    if (!is_cx(xa)) { /* real -> complex */
      int r = kl_build_convert(b, s->map[e->ins[0]], yr);
      out = mk(r, kl_build_zeros(b, kl_build_aval(b, r)));
    } else if (is_cx(ya)) {
      cx x = parts_of(s, e->ins[0]);
      out = mk(kl_build_convert(b, x.r, yr), kl_build_convert(b, x.i, yr));
    } else if (ya->dtype == KL_BOOL) { /* nonzero, as numpy */
      cx x = parts_of(s, e->ins[0]);
      real = kl_build_bin(b, KL_P_OR, cmp(b, KL_P_NE, x.r, lit_like(b, 0, x.r)), cmp(b, KL_P_NE, x.i, lit_like(b, 0, x.i)));
    } else { /* the real part, as JAX */
      real = kl_build_convert(b, parts_of(s, e->ins[0]).r, ya->dtype);
    }
    break;
  }
  case KL_P_DOT_GENERAL:
    if (dot(s, e, &out, &real)) return -1;
    break;
  case KL_P_REDUCE_SUM: case KL_P_CUMSUM: case KL_P_BROADCAST_IN_DIM: case KL_P_RESHAPE: case KL_P_TRANSPOSE:
  case KL_P_REV: case KL_P_SLICE: case KL_P_PAD: case KL_P_CONCATENATE: case KL_P_DYNAMIC_SLICE:
  case KL_P_DYNAMIC_UPDATE_SLICE: case KL_P_TAKE: {
    int r[2];
    if (per_part(s, e, r)) return -1;
    out = mk(r[0], r[1]);
    break;
  }
  case KL_P_REDUCE_PROD: case KL_P_REDUCE_MAX: case KL_P_REDUCE_MIN: {
    kl_prim op = e->prim == KL_P_REDUCE_PROD ? KL_P_MUL : e->prim == KL_P_REDUCE_MAX ? KL_P_MAX : KL_P_MIN;
    out = ctree_reduce(b, parts_of(s, e->ins[0]), &e->p.reduce.axes, op);
    break;
  }
  case KL_P_CUMPROD: case KL_P_CUMMAX: case KL_P_CUMMIN: {
    kl_prim op = e->prim == KL_P_CUMPROD ? KL_P_MUL : e->prim == KL_P_CUMMAX ? KL_P_MAX : KL_P_MIN;
    out = cscan(b, parts_of(s, e->ins[0]), (int)e->p.cumulative.axis, e->p.cumulative.reverse, op);
    break;
  }
  case KL_P_SORT: return sort_parts(s, e);
  case KL_P_SCATTER: {
    if (e->p.scatter.op != KL_SCATTER_SET && e->p.scatter.op != KL_SCATTER_ADD) {
      if (scatter_combine(s, e, &out)) return -1;
      break;
    }
    int r[2];
    if (per_part(s, e, r)) return -1;
    out = mk(r[0], r[1]);
    break;
  }
  default:
    if (kl_form_elementwise(form)) {
      if (elementwise(s, e, &out, &real)) return -1;
      break;
    }
    return unsupported(s, e, NULL);
  }
  if (b->failed) return -1;
  if (real >= 0) {
    if (kl_build_aval(b, real)->ndim != ya->ndim) real = kl_build_broadcast(b, real, ya->dims, ya->ndim, NULL);
    s->map[y] = real;
  } else {
    set_parts(s, y, out);
  }
  return b->failed ? -1 : 0;
}

int kl_complex_split(kl_program *pg, char *err, size_t errlen) {
  if (!has_complex(pg)) return 0;
  kl_program *np = kl_program_new();
  size_t n = (size_t)pg->nvals + 1;
  split_ctx s = {.b = {.pg = np, .err = err, .errlen = errlen, .who = "complex: "}, .src = pg};
  s.map = kl_malloc(sizeof(int) * n), s.re = kl_malloc(sizeof(int) * n), s.im = kl_malloc(sizeof(int) * n);
  int *outs = kl_malloc(sizeof(int) * ((size_t)pg->noutputs + 1));
  int rc = 0;
  if (!np || !s.map || !s.re || !s.im || !outs) {
    rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass complex");
    goto done;
  }
  for (size_t v = 0; v < n; v++) s.map[v] = s.re[v] = s.im[v] = -1;
  for (int i = 0; i < pg->ninputs; i++) {
    const kl_aval *a = &pg->vals[pg->inputs[i]].aval;
    kl_aval pa = is_cx(a) ? packed_aval(a) : *a;
    s.map[pg->inputs[i]] = kl_program_add_input(np, &pa);
  }
  for (int k = 0; k < pg->neqns && !rc; k++) rc = rewrite(&s, &pg->eqns[k]);
  if (!rc) {
    for (int i = 0; i < pg->noutputs && !s.b.failed; i++) {
      int v = pg->outputs[i];
      outs[i] = is_cx(&pg->vals[v].aval) ? packed_of(&s, v) : s.map[v];
    }
    if (s.b.failed) rc = -1;
  }
  if (!rc) {
    kl_program_set_outputs(np, outs, pg->noutputs);
    if (np->oom) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass complex");
  }
  if (!rc) kl_program_swap(pg, np);
done:
  free(outs);
  free(s.map), free(s.re), free(s.im);
  kl_program_free(np);
  return rc;
}
