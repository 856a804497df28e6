/* elementwise.c: the transformation rules of the elementwise family (math, comparisons, select,
 * convert, literals, iota): JVP, transpose of the linear ones, batching, simplification. Rules shared by a whole
 * operand form take the primitive from the equation. Depends only on ir/ and transforms/. */
#include <math.h>
#include <string.h>

#include "rules.h"

/* ---- JVP coefficients ------------------------------------------------------------------------ */

/* trigamma(x) = psi'(x): the recurrence psi'(x) = 1/x^2 + psi'(x + 1) up to z = x + 8, then the
 * asymptotic series 1/z + 1/(2 z^2) + sum_k B_2k / z^(2k+1) (through B_14: error below 1e-15
 * relative); below 1/2 the reflection psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x), and inf at the
 * poles 0, -1, ... (as JAX gives). Built from ordinary primitives, so it is differentiable again. */
static int trigamma(kl_build *a, int x) {
  static const double bern[] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6};
  int one = lit(a, 1, x);
  int reflect = kl_build_bin(a, KL_P_LT, x, lit(a, 0.5, x));
  int xr = kl_build_select(a, reflect, x, sub(a, one, x));
  int acc = -1;
  for (int k = 0; k < 8; k++) {
    int xk = k ? add(a, xr, lit(a, k, x)) : xr;
    acc = kl_build_add(a, acc, dv(a, one, sq(a, xk)));
  }
  int z = add(a, xr, lit(a, 8, x)), iz = dv(a, one, z), w = sq(a, iz);
  int poly = lit(a, bern[6], x);
  for (int k = 5; k >= 0; k--) poly = add(a, mul(a, poly, w), lit(a, bern[k], x));
  int series = add(a, add(a, iz, mul(a, lit(a, 0.5, x), w)), mul(a, mul(a, w, iz), poly));
  int base = add(a, acc, series);
  int s = un(a, KL_P_SIN, mul(a, lit(a, M_PI, x), x));
  int refl = sub(a, dv(a, lit(a, M_PI * M_PI, x), sq(a, s)), base);
  /* sin(pi x) is not exactly 0 at the poles -1, -2, ...: they are set apart */
  int pole = kl_build_bin(a, KL_P_AND, kl_build_bin(a, KL_P_LE, x, lit(a, 0, x)),
                       kl_build_bin(a, KL_P_EQ, un(a, KL_P_FLOOR, x), x));
  refl = kl_build_select(a, pole, refl, kl_ad_broadcast_like(a, lit(a, INFINITY, x), x));
  return kl_build_select(a, reflect, base, refl);
}

/* Derivative coefficient of a unary elementwise primitive at x (output y). */
static int unary_coef(kl_build *a, kl_prim p, int x, int y) {
  switch (p) {
  case KL_P_EXP: return y;
  case KL_P_EXP2: return mul(a, y, lit(a, M_LN2, x));
  case KL_P_EXPM1: return add(a, y, lit(a, 1, x));
  case KL_P_LOG: return dv(a, lit(a, 1, x), x);
  case KL_P_LOG1P: return dv(a, lit(a, 1, x), add(a, x, lit(a, 1, x)));
  case KL_P_TANH: return sub(a, lit(a, 1, x), sq(a, y));
  case KL_P_LOGISTIC: return mul(a, y, sub(a, lit(a, 1, x), y));
  case KL_P_SIN: return un(a, KL_P_COS, x);
  case KL_P_COS: return un(a, KL_P_NEG, un(a, KL_P_SIN, x));
  case KL_P_TAN: return add(a, lit(a, 1, x), sq(a, y));
  case KL_P_ASIN: return un(a, KL_P_RSQRT, sub(a, lit(a, 1, x), sq(a, x)));
  case KL_P_ACOS: return un(a, KL_P_NEG, un(a, KL_P_RSQRT, sub(a, lit(a, 1, x), sq(a, x))));
  case KL_P_ATAN: return dv(a, lit(a, 1, x), add(a, lit(a, 1, x), sq(a, x)));
  case KL_P_SINH: return un(a, KL_P_COSH, x);
  case KL_P_COSH: return un(a, KL_P_SINH, x);
  case KL_P_ASINH: return un(a, KL_P_RSQRT, add(a, sq(a, x), lit(a, 1, x)));
  case KL_P_ACOSH: return un(a, KL_P_RSQRT, mul(a, sub(a, x, lit(a, 1, x)), add(a, x, lit(a, 1, x))));
  case KL_P_ATANH: return dv(a, lit(a, 1, x), sub(a, lit(a, 1, x), sq(a, x)));
  case KL_P_SQRT: return dv(a, lit(a, 0.5, x), y);
  case KL_P_RSQRT: return mul(a, lit(a, -0.5, x), dv(a, y, x));
  case KL_P_CBRT: return dv(a, lit(a, 1.0 / 3.0, x), sq(a, y));
  case KL_P_ERF: return mul(a, lit(a, 2.0 / sqrt(M_PI), x), un(a, KL_P_EXP, un(a, KL_P_NEG, sq(a, x))));
  case KL_P_ERFC: return mul(a, lit(a, -2.0 / sqrt(M_PI), x), un(a, KL_P_EXP, un(a, KL_P_NEG, sq(a, x))));
  case KL_P_ERF_INV: return mul(a, lit(a, sqrt(M_PI) / 2.0, x), un(a, KL_P_EXP, sq(a, y)));
  case KL_P_LGAMMA: return un(a, KL_P_DIGAMMA, x);
  case KL_P_DIGAMMA: return trigamma(a, x);
  case KL_P_SQUARE: return mul(a, lit(a, 2, x), x);
  default: return -2; /* no rule */
  }
}

/* d(x^n) = n x^(n-1) dx, without emitting x^0 or x^1 (integer_pow[y=1] is a copy). */
static int integer_pow_jvp(kl_build *a, const kl_eqn *e, int x, int t) {
  int64_t n = e->p.integer_pow.y;
  if (n == 0) return -1;
  if (n == 1) return t;
  int pw = x;
  if (n != 2) {
    kl_params p;
    kl_params_init(&p, KL_P_INTEGER_POW);
    p.integer_pow.y = n - 1;
    pw = kl_build_op(a, KL_P_INTEGER_POW, &x, 1, &p);
  }
  return mul(a, t, mul(a, lit(a, (double)n, x), pw));
}

/* The share of min/max's tangent an operand takes: hit / (1 + other_hit), hits being bools. */
static int balanced_share(kl_build *a, int hit, int other_hit, int out) {
  int o[KL_MAX_OUTS];
  int num[3] = {hit, lit(a, 0, out), lit(a, 1, out)}, den[3] = {other_hit, lit(a, 1, out), lit(a, 2, out)};
  if (kl_build_emit(a, KL_P_SELECT_N, num, 3, NULL, o) < 0) return -1;
  int n = o[0];
  if (kl_build_emit(a, KL_P_SELECT_N, den, 3, NULL, o) < 0) return -1;
  return dv(a, n, o[0]);
}

/* kl_jvp_binary_coefs (rules.h): returns 0, or -2 if there is no rule. */
int kl_jvp_binary_coefs(kl_build *a, kl_prim p, int x, int y, int out, int *da, int *db) {
  switch (p) {
  case KL_P_MUL: *da = y; *db = x; return 0;
  case KL_P_DIV: *da = dv(a, lit(a, 1, x), y); *db = un(a, KL_P_NEG, dv(a, out, y)); return 0;
  case KL_P_POW: {
    /* JAX's rules for a float or complex exponent: d/dx = y x^(y-1) and d/dy = log(x or 1 where x == 0)
     * x^y, with no other special case (bug, issue 32: zeroing them where y == 0 or x == 0 hid JAX's
     * NaN of 0 * inf, as d/dy of 0^-7 and d/dx of 0^0) */
    *da = mul(a, y, kl_build_bin(a, KL_P_POW, x, sub(a, y, lit(a, 1, y))));
    int safe = kl_build_select(a, kl_build_bin(a, KL_P_EQ, x, lit(a, 0, x)), x, lit(a, 1, x));
    *db = mul(a, un(a, KL_P_LOG, safe), out);
    return 0;
  }
  case KL_P_ATAN2: {
    int den = add(a, sq(a, x), sq(a, y));
    *da = dv(a, y, den);
    *db = un(a, KL_P_NEG, dv(a, x, den));
    return 0;
  }
  case KL_P_REM: {
    *da = lit(a, 1, x);
    int q = dv(a, x, y);
    *db = un(a, KL_P_NEG, mul(a, un(a, KL_P_SIGN, q), un(a, KL_P_FLOOR, un(a, KL_P_ABS, q))));
    return 0;
  }
  case KL_P_MAX: case KL_P_MIN: {
    /* JAX's balanced rule: an operand equal to the result takes the tangent, halved on a tie; a
     * NaN result equals neither operand, so neither takes any (not one of them picked at random). */
    int xhit = kl_build_bin(a, KL_P_EQ, x, out), yhit = kl_build_bin(a, KL_P_EQ, y, out);
    *da = balanced_share(a, xhit, yhit, out);
    *db = balanced_share(a, yhit, xhit, out);
    return 0;
  }
  default: return -2;
  }
}

/* ---- unary math ------------------------------------------------------------------------------ */

static int unary_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  int y = ys[0];
  int t = ts[0], x = xs[0];
  if (t < 0) return 0;
  switch (e->prim) {
  case KL_P_NEG: touts[0] = un(a, KL_P_NEG, t); return 0;
  case KL_P_SIGN: case KL_P_FLOOR: case KL_P_CEIL: case KL_P_ROUND: case KL_P_IS_FINITE: case KL_P_STOP_GRADIENT: case KL_P_NOT: return 0;
  case KL_P_INTEGER_POW: touts[0] = integer_pow_jvp(a, e, x, t); return 0;
  case KL_P_OPTIMIZATION_BARRIER: case KL_P_NAME: touts[0] = t; return 0; /* the identity on values */
  case KL_P_REAL: case KL_P_IMAG: case KL_P_CONJ: touts[0] = un(a, e->prim, t); return 0; /* linear */
  case KL_P_ABS:
    if (kl_dtype_is_complex(kl_build_aval(a, x)->dtype)) { /* d|x| = re(conj(x) t) / |x|, 0 at x = 0 (JAX's) */
      kl_params p;
      kl_params_init(&p, KL_P_CONVERT);
      p.convert.new_dtype = (int)kl_build_aval(a, x)->dtype;
      int safe = kl_build_select(a, kl_build_bin(a, KL_P_EQ, y, lit(a, 0, y)), y, lit(a, 1, y));
      int den = kl_build_op(a, KL_P_CONVERT, &safe, 1, &p);
      touts[0] = un(a, KL_P_REAL, mul(a, t, dv(a, un(a, KL_P_CONJ, x), den)));
      return 0;
    }
    /* JAX's select(x >= 0, t, -t): the tangent passes at 0 (sign(x) would stop it), negated for NaN */
    touts[0] = kl_build_select(a, kl_build_bin(a, KL_P_GE, x, lit(a, 0, x)), un(a, KL_P_NEG, t), t);
    return 0;
  default: break;
  }
  int d = unary_coef(a, e->prim, x, y);
  if (d == -2) return kl_jvp_unsupported(a, e);
  touts[0] = scale(a, t, d);
  return 0;
}

/* ---- binary math ----------------------------------------------------------------------------- */

static int binary_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  int y = ys[0];
  int ta = ts[0], tb = ts[1], x = xs[0], w = xs[1];
  if (ta < 0 && tb < 0) return 0;
  if (e->prim == KL_P_COMPLEX) { /* linear in both parts */
    int ca = ta >= 0 ? fit(a, ta, y) : kl_build_zeros(a, kl_build_aval(a, x));
    int cb = tb >= 0 ? fit(a, tb, y) : kl_build_zeros(a, kl_build_aval(a, w));
    touts[0] = kl_build_bin(a, KL_P_COMPLEX, fit(a, ca, y), fit(a, cb, y));
    return 0;
  }
  if (e->prim == KL_P_ADD || e->prim == KL_P_SUB) {
    int nb = tb >= 0 && e->prim == KL_P_SUB ? un(a, KL_P_NEG, tb) : tb;
    touts[0] = fit(a, kl_build_add(a, fit(a, ta, y), fit(a, nb, y)), y);
    return 0;
  }
  if (e->prim == KL_P_DIV) {
    /* JAX's order of operations, t / y and ((-t) x) y^-2, not t * coefficient: transposed, the
     * cotangent meets y^-2 before x, so an infinite x gives JAX's inf+infj where ct * (-(x / y) / y)
     * made (1 + 0i)(inf + inf i) = nan (bug, issue 32) */
    int ca = ta >= 0 ? fit(a, dv(a, ta, w), y) : -1, cb = -1;
    if (tb >= 0) {
      kl_params p;
      kl_params_init(&p, KL_P_INTEGER_POW);
      p.integer_pow.y = -2;
      cb = fit(a, mul(a, mul(a, un(a, KL_P_NEG, tb), x), kl_build_op(a, KL_P_INTEGER_POW, &w, 1, &p)), y);
    }
    touts[0] = kl_build_add(a, ca, cb);
    return 0;
  }
  int da = -1, db = -1;
  int rc = kl_jvp_binary_coefs(a, e->prim, x, w, y, &da, &db);
  if (rc == -2) return kl_jvp_unsupported(a, e);
  int ca = ta >= 0 ? fit(a, scale(a, ta, da), y) : -1;
  int cb = tb >= 0 ? fit(a, scale(a, tb, db), y) : -1;
  touts[0] = kl_build_add(a, ca, cb);
  return 0;
}

/* ---- select, convert ------------------------------------------------------------------------- */

static int select_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)e;
  int y = ys[0];
  if (ts[1] < 0 && ts[2] < 0) return 0;
  int c0 = ts[1] >= 0 ? fit(a, ts[1], y) : zeros_like(a, y);
  int c1 = ts[2] >= 0 ? fit(a, ts[2], y) : zeros_like(a, y);
  touts[0] = kl_build_select(a, xs[0], c0, c1);
  return 0;
}

static int convert_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  if (e->prim == KL_P_BITCAST) return 0; /* reinterpreting bits is not differentiable: zero, as JAX */
  if (ts[0] < 0 || !is_float_val(a, xs[0])) return 0;
  touts[0] = same_prim(a, e, (int *)&ts[0], 1);
  return 0;
}

/* ---- transpose: add, sub, neg, mul, div (numerator), convert, select_n (the branches) -------- */

static int elementwise_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_build *a = c->a;
  const kl_aval *xa = &c->j->vals[e->ins[i]].aval;
  const kl_aval *ya = &c->j->vals[e->outs[0]].aval;
  kl_params p; /* zeroed; each case fills the member of what it emits */
  memset(&p, 0, sizeof p);
  switch (e->prim) {
  case KL_P_ADD: return ct;
  case KL_P_SUB: return i == 0 ? ct : kl_build_un(a, KL_P_NEG, ct);
  case KL_P_NEG: return kl_build_un(a, KL_P_NEG, ct);
  case KL_P_MUL: return kl_build_bin(a, KL_P_MUL, ct, kl_tr_prim_of(c, e->ins[1 - i]));
  case KL_P_DIV:
    if (i == 1) break;
    return kl_build_bin(a, KL_P_DIV, ct, kl_tr_prim_of(c, e->ins[1]));
  case KL_P_CONVERT: {
    p.convert.new_dtype = (int)xa->dtype;
    return kl_build_op(a, KL_P_CONVERT, &ct, 1, &p);
  }
  /* complex parts, with JAX's convention (cotangents are not conjugated) */
  case KL_P_REAL: return kl_build_bin(a, KL_P_COMPLEX, ct, kl_build_zeros(a, kl_build_aval(a, ct)));
  case KL_P_IMAG: return kl_build_bin(a, KL_P_COMPLEX, kl_build_zeros(a, kl_build_aval(a, ct)), kl_build_un(a, KL_P_NEG, ct));
  case KL_P_CONJ: return kl_build_un(a, KL_P_CONJ, ct);
  case KL_P_COMPLEX: return i == 0 ? kl_build_un(a, KL_P_REAL, ct) : kl_build_un(a, KL_P_NEG, kl_build_un(a, KL_P_IMAG, ct));
  case KL_P_SELECT_N: {
    if (i == 0) break;
    int z = kl_build_zeros(a, ya);
    int ins[3] = {kl_tr_prim_of(c, e->ins[0]), i == 1 ? ct : z, i == 1 ? z : ct};
    return kl_build_op(a, KL_P_SELECT_N, ins, 3, NULL);
  }
  default: break;
  }
  return kl_transpose_unsupported(c, e);
}

/* ---- batching -------------------------------------------------------------------------------- */

/* Elementwise (unary, binary, compare, select, convert): operands share the output's shape except
 * rank-0 ones, which broadcast by themselves. An unbatched rank-0 operand can stay as it is; any
 * other operand must become (B,)+S. */
static int elementwise_batch(kl_build *b, rule_args *r) {
  const kl_aval *oa = src_out(r, 0);
  int64_t shape[KL_MAX_RANK + 2], zero = 0;
  if (oa->ndim + 1 > KL_MAX_RANK)
    return kl_build_fail(b, KL_ERR_VALUE, "vmap of %s: batching a rank-%d value exceeds kiln's maximum rank %d", kl_prim_get(r->e->prim)->name, oa->ndim, KL_MAX_RANK);
  shape[0] = b->size;
  memcpy(shape + 1, oa->dims, sizeof(int64_t) * (size_t)oa->ndim);
  for (int i = 0; i < r->e->nin; i++) {
    int rank = src_in(r, i)->ndim;
    if (r->bs[i] && rank == 0 && oa->ndim > 0) r->xs[i] = kl_build_broadcast(b, r->xs[i], shape, oa->ndim + 1, &zero);
    else if (!r->bs[i] && rank > 0) r->xs[i] = kl_batch_add_batch(b, r->xs[i]);
  }
  r->ys[0] = kl_build_op(b, r->e->prim, r->xs, r->e->nin, &r->e->p);
  return r->ys[0] < 0 ? -1 : 0;
}

/* ---- simplify (simplify.h): each rewrite keeps the result bit-identical, -0.0 and NaN included -- */

/* Identity elements of the binary arithmetic ops. x*1, 1*x, x/1: exact for every dtype (IEEE
 * multiplication and division by 1 return x, signed zeros, infinities and NaNs included).
 * Integers: x+0, 0+x, x-0 exact (wrapping arithmetic). Floats: x+0.0 is NOT exact
 * (-0.0 + +0.0 = +0.0), but x+(-0.0), (-0.0)+x and x-(+0.0) are, so only those fire.
 * x*0 for integers is 0 (no NaN/inf); never for floats, where 0*inf and 0*NaN are NaN. */
static int is_float_operand(kl_simp *s, kl_eqn *e) { return kl_dtype_is_float(s->pg->vals[e->ins[0]].aval.dtype); }

static int mul_simplify(kl_simp *s, kl_eqn *e) {
  const kl_program *pg = s->pg;
  int x = e->ins[0], y = e->ins[1];
  int fl = is_float_operand(s, e);
  if (kl_simp_splat_is(pg, y, KL_SPLAT_ONE)) return kl_simp_forward(s, e, x);
  if (kl_simp_splat_is(pg, x, KL_SPLAT_ONE)) return kl_simp_forward(s, e, y);
  if (fl) return KL_SIMP_KEEP;
  int z = kl_simp_splat_is(pg, y, KL_SPLAT_ZERO_INT) ? y : kl_simp_splat_is(pg, x, KL_SPLAT_ZERO_INT) ? x : -1;
  if (z < 0) return KL_SIMP_KEEP;
  int r = kl_simp_forward(s, e, z);
  if (r != KL_SIMP_KEEP) return r;
  return kl_simp_forward(s, e, kl_simp_splat_root(pg, z));
}

static int div_simplify(kl_simp *s, kl_eqn *e) {
  return kl_simp_splat_is(s->pg, e->ins[1], KL_SPLAT_ONE) ? kl_simp_forward(s, e, e->ins[0]) : KL_SIMP_KEEP;
}

static int add_simplify(kl_simp *s, kl_eqn *e) {
  kl_splat_kind zero = is_float_operand(s, e) ? KL_SPLAT_NEG_ZERO_FLOAT : KL_SPLAT_ZERO_INT;
  if (kl_simp_splat_is(s->pg, e->ins[1], zero)) return kl_simp_forward(s, e, e->ins[0]);
  if (kl_simp_splat_is(s->pg, e->ins[0], zero)) return kl_simp_forward(s, e, e->ins[1]);
  return KL_SIMP_KEEP;
}

/* 0 - x is not x; (-0.0) - x is not bitwise neg(x) for NaN, so left alone */
static int sub_simplify(kl_simp *s, kl_eqn *e) {
  kl_splat_kind zero = is_float_operand(s, e) ? KL_SPLAT_POS_ZERO_FLOAT : KL_SPLAT_ZERO_INT;
  return kl_simp_splat_is(s->pg, e->ins[1], zero) ? kl_simp_forward(s, e, e->ins[0]) : KL_SIMP_KEEP;
}

/* neg(neg(x)) = x: negation flips the sign bit (floats) or negates modulo 2^n (integers), so
 * twice is the identity, NaN payloads included. */
static int neg_simplify(kl_simp *s, kl_eqn *e) {
  const kl_eqn *pe = kl_simp_producer(s->pg, e->ins[0]);
  return pe && pe->prim == KL_P_NEG ? kl_simp_forward(s, e, pe->ins[0]) : KL_SIMP_KEEP;
}

/* integer_pow[y=1](x) = x. */
static int integer_pow_simplify(kl_simp *s, kl_eqn *e) {
  return e->p.integer_pow.y == 1 ? kl_simp_forward(s, e, e->ins[0]) : KL_SIMP_KEEP;
}

/* stop_gradient is the identity on values; it only matters to a later differentiation of the
 * program (it may be inlined into an outer grad), so it goes only where its operand does not
 * depend on any input: no derivative can flow through it then. */
static int stop_gradient_simplify(kl_simp *s, kl_eqn *e) {
  return !s->dep[e->ins[0]] ? kl_simp_forward(s, e, e->ins[0]) : KL_SIMP_KEEP;
}

/* select_n(p, a, b): a literal predicate picks its case (0 -> a, 1 -> b; an int32 predicate
 * with any other value is left alone); equal cases give that case. */
static int select_simplify(kl_simp *s, kl_eqn *e) {
  int64_t which;
  if (e->ins[1] == e->ins[2]) return kl_simp_forward(s, e, e->ins[1]);
  if (kl_simp_splat_int(s->pg, e->ins[0], &which) && (which == 0 || which == 1)) return kl_simp_forward(s, e, e->ins[1 + which]);
  return KL_SIMP_KEEP;
}

/* convert_element_type / bitcast_convert_type to its own dtype and weak type: nothing to do */
static int convert_simplify(kl_simp *s, kl_eqn *e) {
  const kl_program *pg = s->pg;
  return kl_aval_equal(&pg->vals[e->ins[0]].aval, &pg->vals[e->outs[0]].aval) ? kl_simp_forward(s, e, e->ins[0]) : KL_SIMP_KEEP;
}

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_elementwise[] = {
    {KL_P_NEG, unary_jvp, elementwise_transpose, elementwise_batch, neg_simplify, NULL, NULL},
    {KL_P_SIGN, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_FLOOR, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_CEIL, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ROUND, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_IS_FINITE, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_EXP, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_EXP2, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_LOG, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_LOG1P, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_EXPM1, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_TANH, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_LOGISTIC, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_SIN, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_COS, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_TAN, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ASIN, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ACOS, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ATAN, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_SINH, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_COSH, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ASINH, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ACOSH, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ATANH, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_SQRT, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_RSQRT, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_CBRT, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ABS, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ERF, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ERFC, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ERF_INV, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_LGAMMA, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_DIGAMMA, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_NOT, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_REAL, unary_jvp, elementwise_transpose, elementwise_batch, NULL, NULL, NULL},
    {KL_P_IMAG, unary_jvp, elementwise_transpose, elementwise_batch, NULL, NULL, NULL},
    {KL_P_CONJ, unary_jvp, elementwise_transpose, elementwise_batch, NULL, NULL, NULL},
    {KL_P_SQUARE, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_INTEGER_POW, unary_jvp, NULL, elementwise_batch, integer_pow_simplify, NULL, NULL},
    {KL_P_STOP_GRADIENT, unary_jvp, NULL, elementwise_batch, stop_gradient_simplify, NULL, NULL},
    {KL_P_OPTIMIZATION_BARRIER, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_NAME, unary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ADD, binary_jvp, elementwise_transpose, elementwise_batch, add_simplify, NULL, NULL},
    {KL_P_SUB, binary_jvp, elementwise_transpose, elementwise_batch, sub_simplify, NULL, NULL},
    {KL_P_MUL, binary_jvp, elementwise_transpose, elementwise_batch, mul_simplify, NULL, NULL},
    {KL_P_DIV, binary_jvp, elementwise_transpose, elementwise_batch, div_simplify, NULL, NULL},
    {KL_P_REM, binary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_POW, binary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_MAX, binary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_MIN, binary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_ATAN2, binary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_COMPLEX, binary_jvp, elementwise_transpose, elementwise_batch, NULL, NULL, NULL},
    {KL_P_AND, binary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_OR, binary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_XOR, binary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_SHL, binary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_SHR_LOGICAL, binary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_SHR_ARITH, binary_jvp, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_EQ, kl_jvp_zero, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_NE, kl_jvp_zero, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_LT, kl_jvp_zero, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_LE, kl_jvp_zero, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_GT, kl_jvp_zero, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_GE, kl_jvp_zero, NULL, elementwise_batch, NULL, NULL, NULL},
    {KL_P_SELECT_N, select_jvp, elementwise_transpose, elementwise_batch, select_simplify, NULL, NULL},
    {KL_P_CONVERT, convert_jvp, elementwise_transpose, elementwise_batch, convert_simplify, NULL, NULL},
    {KL_P_BITCAST, convert_jvp, NULL, elementwise_batch, convert_simplify, NULL, NULL},
    {KL_P_CONST, kl_jvp_zero, NULL, NULL, NULL, NULL, NULL},
    {KL_P_IOTA, kl_jvp_zero, NULL, NULL, NULL, NULL, NULL},
    KL_RULES_END};
