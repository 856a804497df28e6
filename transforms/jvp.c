/* jvp.c: forward-mode differentiation of a Program. Every equation is copied, then its JVP rule
 * writes the tangent of its outputs as linear functions of the input tangents, with primal
 * values as coefficients. A missing tangent (-1) is a symbolic zero. Rules live in one switch
 * (jvp_rule, at the bottom), grouped by family in prim.h's order; the longer ones (scans,
 * sort, scatter, linear algebra) are the functions just above it. A primitive without a rule
 * fails with "differentiation of <prim> is not supported yet", NotImplementedError in Python. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ad.h"

static int is_float_val(kl_ad *a, int v) { return v >= 0 && kl_dtype_is_float(kl_ad_aval(a, v)->dtype); }

/* t broadcast up to the shape of `like` when t is rank-0 and like is not. */
static int fit(kl_ad *a, int t, int like) { return kl_ad_broadcast_like(a, t, like); }

static int lit(kl_ad *a, double v, int like) { return kl_ad_lit(a, v, kl_ad_aval(a, like)->dtype); }
static int mul(kl_ad *a, int x, int y) { return kl_ad_bin(a, KL_P_MUL, x, y); }
static int dv(kl_ad *a, int x, int y) { return kl_ad_bin(a, KL_P_DIV, x, y); }
static int sub(kl_ad *a, int x, int y) { return kl_ad_bin(a, KL_P_SUB, x, y); }
static int add(kl_ad *a, int x, int y) { return kl_ad_bin(a, KL_P_ADD, x, y); }
static int un(kl_ad *a, kl_prim p, int x) { return kl_ad_un(a, p, x); }
static int sq(kl_ad *a, int x) { return mul(a, x, x); }

/* t * d, where d is a primal coefficient (or -1 for zero tangent). */
static int scale(kl_ad *a, int t, int d) { return t < 0 ? -1 : mul(a, t, d); }

static int zeros_like(kl_ad *a, int v) {
  kl_aval l = *kl_ad_aval(a, v);
  return kl_ad_zeros(a, &l);
}

static int same_prim(kl_ad *a, const kl_eqn *e, int *ins, int nin) {
  int o[KL_MAX_OUTS];
  return kl_ad_emit(a, e->prim, ins, nin, &e->p, o) < 0 ? -1 : o[0];
}

/* trigamma(x) = psi'(x): the recurrence psi'(x) = 1/x^2 + psi'(x + 1) up to z = x + 8, then the
 * asymptotic series 1/z + 1/(2 z^2) + sum_k B_2k / z^(2k+1) (through B_14: error below 1e-15
 * relative); below 1/2 the reflection psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x), and inf at the
 * poles 0, -1, ... (as JAX gives). Built from ordinary primitives, so it is differentiable again. */
static int trigamma(kl_ad *a, int x) {
  static const double bern[] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6};
  int one = lit(a, 1, x);
  int reflect = kl_ad_bin(a, KL_P_LT, x, lit(a, 0.5, x));
  int xr = kl_ad_select(a, reflect, x, sub(a, one, x));
  int acc = -1;
  for (int k = 0; k < 8; k++) {
    int xk = k ? add(a, xr, lit(a, k, x)) : xr;
    acc = kl_ad_add(a, acc, dv(a, one, sq(a, xk)));
  }
  int z = add(a, xr, lit(a, 8, x)), iz = dv(a, one, z), w = sq(a, iz);
  int poly = lit(a, bern[6], x);
  for (int k = 5; k >= 0; k--) poly = add(a, mul(a, poly, w), lit(a, bern[k], x));
  int series = add(a, add(a, iz, mul(a, lit(a, 0.5, x), w)), mul(a, mul(a, w, iz), poly));
  int base = add(a, acc, series);
  int s = un(a, KL_P_SIN, mul(a, lit(a, M_PI, x), x));
  int refl = sub(a, dv(a, lit(a, M_PI * M_PI, x), sq(a, s)), base);
  /* sin(pi x) is not exactly 0 at the poles -1, -2, ...: they are set apart */
  int pole = kl_ad_bin(a, KL_P_AND, kl_ad_bin(a, KL_P_LE, x, lit(a, 0, x)),
                       kl_ad_bin(a, KL_P_EQ, un(a, KL_P_FLOOR, x), x));
  refl = kl_ad_select(a, pole, refl, kl_ad_broadcast_like(a, lit(a, INFINITY, x), x));
  return kl_ad_select(a, reflect, base, refl);
}

/* Derivative coefficient of a unary elementwise primitive at x (output y). */
static int unary_coef(kl_ad *a, kl_prim p, int x, int y) {
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
  case KL_P_ABS: return un(a, KL_P_SIGN, x);
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
static int integer_pow_jvp(kl_ad *a, const kl_eqn *e, int x, int t) {
  int64_t n = e->p.integer_pow.y;
  if (n == 0) return -1;
  if (n == 1) return t;
  int pw = x;
  if (n != 2) {
    kl_params p;
    kl_params_init(&p, KL_P_INTEGER_POW);
    p.integer_pow.y = n - 1;
    pw = kl_ad_op(a, KL_P_INTEGER_POW, &x, 1, &p);
  }
  return mul(a, t, mul(a, lit(a, (double)n, x), pw));
}

/* Coefficients (da, db) of a binary elementwise primitive; returns 0, or -2 if there is no rule. */
static int binary_coefs(kl_ad *a, kl_prim p, int x, int y, int out, int *da, int *db) {
  switch (p) {
  case KL_P_MUL: *da = y; *db = x; return 0;
  case KL_P_DIV: *da = dv(a, lit(a, 1, x), y); *db = un(a, KL_P_NEG, dv(a, out, y)); return 0;
  case KL_P_POW: {
    int z = lit(a, 0, x);
    int pw = kl_ad_bin(a, KL_P_POW, x, sub(a, y, lit(a, 1, y)));
    int dxv = mul(a, y, pw);
    /* d/dx = y x^(y-1), taken as 0 where y == 0; d/dy = log(x) x^y, taken as 0 where x == 0 */
    int ins[3] = {kl_ad_bin(a, KL_P_EQ, y, lit(a, 0, y)), dxv, z};
    int o[KL_MAX_OUTS];
    *da = kl_ad_emit(a, KL_P_SELECT_N, ins, 3, NULL, o) < 0 ? -1 : o[0];
    int ins2[3] = {kl_ad_bin(a, KL_P_EQ, x, z), mul(a, un(a, KL_P_LOG, x), out), lit(a, 0, x)};
    *db = kl_ad_emit(a, KL_P_SELECT_N, ins2, 3, NULL, o) < 0 ? -1 : o[0];
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
  case KL_P_MAX: case KL_P_MIN: { /* ties split the tangent evenly, as JAX does */
    int win = kl_ad_bin(a, p == KL_P_MAX ? KL_P_GT : KL_P_LT, x, y);
    int tie = kl_ad_bin(a, KL_P_EQ, x, y);
    int o[KL_MAX_OUTS];
    int half = lit(a, 0.5, out), one = lit(a, 1, out), zero = lit(a, 0, out);
    int s1[3] = {tie, zero, half};
    if (kl_ad_emit(a, KL_P_SELECT_N, s1, 3, NULL, o) < 0) return -1;
    int lose_or_tie = o[0];
    int s2[3] = {win, lose_or_tie, one};
    if (kl_ad_emit(a, KL_P_SELECT_N, s2, 3, NULL, o) < 0) return -1;
    *da = o[0];
    *db = sub(a, one, *da);
    return 0;
  }
  default: return -2;
  }
}

/* Reduce max/min: the tangent at the arg-extreme positions, averaged over ties. */
static int reduce_extreme(kl_ad *a, const kl_eqn *e, int x, int y, int t) {
  const kl_aval *xa = kl_ad_aval(a, x);
  kl_aval xl = *xa;
  /* broadcast y back to x's shape */
  const kl_ivec *axes = &e->p.reduce.axes;
  kl_params b;
  kl_params_init(&b, KL_P_BROADCAST_IN_DIM);
  int64_t dims[KL_MAX_RANK];
  int nd = 0;
  for (int i = 0; i < xl.ndim; i++) {
    int red = 0;
    for (int k = 0; k < axes->n; k++) red |= axes->v[k] == i;
    if (!red) dims[nd++] = i;
  }
  b.broadcast.shape = (kl_ivec){xl.dims, xl.ndim};
  b.broadcast.broadcast_dimensions = (kl_ivec){dims, nd};
  int o[KL_MAX_OUTS];
  if (kl_ad_emit(a, KL_P_BROADCAST_IN_DIM, &y, 1, &b, o) < 0) return -1;
  int mask = kl_ad_bin(a, KL_P_EQ, x, o[0]);
  kl_params cv;
  kl_params_init(&cv, KL_P_CONVERT);
  cv.convert.new_dtype = (int)xl.dtype;
  if (kl_ad_emit(a, KL_P_CONVERT, &mask, 1, &cv, o) < 0) return -1;
  int maskf = o[0];
  kl_params rs;
  kl_params_init(&rs, KL_P_REDUCE_SUM);
  rs.reduce.axes = *axes;
  if (kl_ad_emit(a, KL_P_REDUCE_SUM, &maskf, 1, &rs, o) < 0) return -1;
  int count = o[0];
  int tm = mul(a, t, maskf);
  if (kl_ad_emit(a, KL_P_REDUCE_SUM, &tm, 1, &rs, o) < 0) return -1;
  return dv(a, o[0], count);
}

/* ---- reductions and scans --------------------------------------------------------------- */

/* Tangent of an inclusive scan of x along `axis` with combiner comb (MUL, MAX, MIN): recursive
 * doubling on (primal, tangent) pairs, log2(n) rounds of shifts. Exact with zeros in a
 * product (no division), ties of max/min split as in the binary rule. */
static int scan_jvp(kl_ad *a, kl_prim comb, int x, int t, int axis, int reverse) {
  kl_aval xa = *kl_ad_aval(a, x);
  int64_t n = xa.dims[axis];
  double ident = comb == KL_P_MUL ? 1 : comb == KL_P_MAX ? -INFINITY : INFINITY;
  int fill_p = kl_ad_lit(a, ident, xa.dtype), fill_t = kl_ad_lit(a, 0, xa.dtype);
  int p = x;
  for (int64_t s = 1; s < n && !a->failed; s *= 2) {
    int64_t lo = reverse ? -s : s;
    int ps = kl_ad_pad_axis(a, p, fill_p, axis, lo, -lo), ts = kl_ad_pad_axis(a, t, fill_t, axis, lo, -lo);
    int ce = p, cl = ps; /* coefficients of the earlier (shifted) and later tangents */
    if (comb != KL_P_MUL) binary_coefs(a, comb, ps, p, p, &ce, &cl);
    t = add(a, mul(a, ts, ce), mul(a, t, cl));
    p = kl_ad_bin(a, comb, ps, p);
  }
  return t;
}

/* reduce_prod: sum_i t_i * prod_{j != i} x_j, the products from exclusive cumprods both ways
 * (exact with zeros). The reduced axes are moved last and flattened into one. */
static int reduce_prod_jvp(kl_ad *a, const kl_eqn *e, int x, int t) {
  kl_aval xa = *kl_ad_aval(a, x);
  const kl_ivec *axes = &e->p.reduce.axes;
  if (axes->n == 0) return t;
  int64_t perm[KL_MAX_RANK], shape[KL_MAX_RANK], nred = 1;
  int nk = 0, np = 0;
  for (int d = 0; d < xa.ndim; d++) {
    int red = 0;
    for (int k = 0; k < axes->n; k++) red |= axes->v[k] == d;
    if (red) nred *= xa.dims[d];
    else {
      perm[np++] = d;
      shape[nk++] = xa.dims[d];
    }
  }
  for (int d = 0; d < xa.ndim; d++)
    for (int k = 0; k < axes->n; k++)
      if (axes->v[k] == d) perm[np++] = d;
  if (nred == 0) return -1; /* the empty product is the constant 1 */
  shape[nk] = nred;
  int xr = kl_ad_reshape(a, kl_ad_transpose(a, x, perm), shape, nk + 1);
  int tr = kl_ad_reshape(a, kl_ad_transpose(a, t, perm), shape, nk + 1);
  kl_params cp;
  kl_params_init(&cp, KL_P_CUMPROD);
  cp.cumulative.axis = nk;
  int fwd = kl_ad_op(a, KL_P_CUMPROD, &xr, 1, &cp);
  cp.cumulative.reverse = 1;
  int bwd = kl_ad_op(a, KL_P_CUMPROD, &xr, 1, &cp);
  int one = lit(a, 1, x);
  int others = mul(a, kl_ad_pad_axis(a, fwd, one, nk, 1, -1), kl_ad_pad_axis(a, bwd, one, nk, -1, 1));
  int64_t last = nk;
  return kl_ad_reduce_sum(a, mul(a, tr, others), &last, 1);
}

/* sort: sort an iota along with the operands to get the permutation, then gather each
 * tangent with it. */
static int sort_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int *touts) {
  int n = e->nin, dim = (int)e->p.sort.dimension, any = 0;
  for (int i = 0; i < n; i++) any |= ts[i] >= 0 && is_float_val(a, xs[i]);
  if (!any) return 0;
  if (n + 1 > KL_MAX_OUTS) return kl_ad_fail(a, "differentiation of sort with %d operands is not supported yet by kiln", n);
  kl_aval xa = *kl_ad_aval(a, xs[0]);
  int ins[KL_MAX_OUTS], outs[KL_MAX_OUTS];
  memcpy(ins, xs, sizeof(int) * (size_t)n);
  ins[n] = kl_ad_iota(a, KL_I32, xa.dims, xa.ndim, dim);
  if (kl_ad_emit(a, KL_P_SORT, ins, n + 1, &e->p, outs) < 0) return -1;
  for (int i = 0; i < n; i++)
    if (ts[i] >= 0 && is_float_val(a, xs[i])) touts[i] = kl_ad_take_along(a, ts[i], outs[n], dim);
  return 0;
}

/* ---- scatter ------------------------------------------------------------------------------ */

/* All scatters differentiate to one linear scatter-add: out' = scatter_add(tx * cx, idx, tu * cu)
 * with primal coefficients cx (operand) and cu (updates; zero for dropped out-of-bounds
 * updates, and for `set`, for the updates that lost to a duplicate index). */
static int scatter_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int y) {
  int x = xs[0], idx = xs[1], u = xs[2], tx = ts[0], tu = ts[2], mode = e->p.scatter.op;
  int axis = (int)e->p.scatter.axis;
  kl_aval xa = *kl_ad_aval(a, x), ua = *kl_ad_aval(a, u), ia = *kl_ad_aval(a, idx);
  kl_params sp = e->p, tp;
  kl_params_init(&tp, KL_P_TAKE);
  tp.take.axis = axis;
#define SCAT(m, opnd, upd) (sp.scatter.op = (m), kl_ad_op(a, KL_P_SCATTER, (int[]){(opnd), idx, (upd)}, 3, &sp))
#define TAKE(v) kl_ad_op(a, KL_P_TAKE, (int[]){(v), idx}, 2, &tp)
  int64_t bd[KL_MAX_RANK];
  for (int k = 0; k < ia.ndim; k++) bd[k] = axis + k;
  int inb_b = kl_ad_bin(a, KL_P_LT, idx, kl_ad_lit(a, (double)xa.dims[axis], ia.dtype));
  int inb = kl_ad_convert(a, kl_ad_broadcast(a, inb_b, ua.dims, ua.ndim, bd), xa.dtype);
  int zx = kl_ad_zeros(a, &xa), cx = -1, cu = -1;
  switch (mode) {
  case KL_SCATTER_ADD: cu = inb; break;
  case KL_SCATTER_SET: {
    int hit = SCAT(KL_SCATTER_SET, zx, kl_ad_broadcast(a, lit(a, 1, u), ua.dims, ua.ndim, NULL));
    cx = sub(a, lit(a, 1, x), hit);
    int64_t total = kl_aval_size(&ua);
    int ids = kl_ad_reshape(a, kl_ad_iota(a, KL_I32, &total, 1, 0), ua.dims, ua.ndim);
    int none = kl_ad_broadcast(a, kl_ad_lit(a, -1, KL_I32), xa.dims, xa.ndim, NULL);
    cu = kl_ad_convert(a, kl_ad_bin(a, KL_P_EQ, TAKE(SCAT(KL_SCATTER_SET, none, ids)), ids), xa.dtype);
    break;
  }
  case KL_SCATTER_MUL: {
    cx = SCAT(KL_SCATTER_MUL, kl_ad_broadcast(a, lit(a, 1, x), xa.dims, xa.ndim, NULL), u);
    /* d/du_i = x * prod of the other updates at its position: x itself for a unique index,
     * y / u_i for a duplicated one (not exact when a duplicated update is 0) */
    int dup = kl_ad_bin(a, KL_P_GT, TAKE(SCAT(KL_SCATTER_ADD, zx, inb)), lit(a, 1, x));
    cu = mul(a, kl_ad_select(a, dup, TAKE(x), dv(a, TAKE(y), u)), inb);
    break;
  }
  case KL_SCATTER_MIN: case KL_SCATTER_MAX: { /* ties share the tangent evenly */
    int ex = kl_ad_convert(a, kl_ad_bin(a, KL_P_EQ, x, y), xa.dtype);
    int eu = mul(a, kl_ad_convert(a, kl_ad_bin(a, KL_P_EQ, u, TAKE(y)), xa.dtype), inb);
    int cnt = add(a, ex, SCAT(KL_SCATTER_ADD, zx, eu));
    cx = dv(a, ex, cnt);
    cu = dv(a, eu, TAKE(cnt));
    break;
  }
  default: return kl_ad_fail(a, "differentiation of scatter mode %d is not supported yet by kiln", mode);
  }
  int tx2 = tx < 0 ? zx : cx < 0 ? tx : mul(a, tx, cx);
  if (tu < 0) return tx2;
  return SCAT(KL_SCATTER_ADD, tx2, mul(a, tu, cu));
#undef SCAT
#undef TAKE
}

/* ---- linear algebra (matrices are the last two dims) --------------------------------------- */

static int trsolve(kl_ad *a, int m, int b, int left, int flags) {
  if (b < 0) return -1;
  kl_params p;
  kl_params_init(&p, KL_P_TRIANGULAR_SOLVE);
  p.triangular_solve.left_side = left;
  p.triangular_solve.flags = flags;
  int ins[2] = {m, b};
  return kl_ad_op(a, KL_P_TRIANGULAR_SOLVE, ins, 2, &p);
}

/* The symmetric matrix a factorization reading only one triangle of its input sees. */
static int sym_from_tri(kl_ad *a, int t, int lower) {
  int tri = mul(a, t, kl_ad_tri(a, t, lower, 0)), strict = mul(a, t, kl_ad_tri(a, t, lower, lower ? -1 : 1));
  return add(a, tri, kl_ad_mT(a, strict));
}

/* m broadcast along rows (row = 1: m[..., j] at [..., i, j]) or columns into `like`'s shape. */
static int spread(kl_ad *a, int v, int like, int row) {
  kl_aval l = *kl_ad_aval(a, like);
  int64_t dims[KL_MAX_RANK];
  for (int d = 0; d < l.ndim - 2; d++) dims[d] = d;
  dims[l.ndim - 2] = row ? l.ndim - 1 : l.ndim - 2;
  return kl_ad_broadcast(a, v, l.dims, l.ndim, dims);
}

/* F[i, j] = 1 / d[i, j] off the diagonal, 0 on it. */
static int off_diag_inverse(kl_ad *a, int d) {
  int eye = kl_ad_eye_bool(a, d);
  int one = kl_ad_broadcast_like(a, lit(a, 1, d), d), zero = zeros_like(a, d);
  return kl_ad_select(a, eye, dv(a, one, kl_ad_select(a, eye, d, one)), zero);
}

/* L' = L phi(L^-1 A' L^-T), phi: the lower triangle with the diagonal halved. */
static int cholesky_jvp(kl_ad *a, int t, int l) {
  int da = sym_from_tri(a, t, 1);
  int x = trsolve(a, l, trsolve(a, l, da, 0, KL_TRSV_LOWER | KL_TRSV_TRANSPOSE_A), 1, KL_TRSV_LOWER);
  int eye = kl_ad_convert(a, kl_ad_eye_bool(a, l), kl_ad_aval(a, l)->dtype);
  int phi = add(a, kl_ad_tri(a, l, 1, -1), mul(a, eye, lit(a, 0.5, l)));
  return kl_ad_matmul(a, l, mul(a, x, phi));
}

/* op(A) X = B (left) or X op(A) = B: X' = op(A)^-1 (B' - op(A') X), or (B' - X op(A')) op(A)^-1;
 * A' restricted to the triangle the solve reads. */
static int triangular_solve_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int x) {
  int left = e->p.triangular_solve.left_side, flags = e->p.triangular_solve.flags, lower = flags & KL_TRSV_LOWER;
  int res = trsolve(a, xs[0], ts[1], left, flags);
  if (ts[0] >= 0) {
    int k = flags & KL_TRSV_UNIT_DIAGONAL ? (lower ? -1 : 1) : 0;
    int da = mul(a, ts[0], kl_ad_tri(a, xs[0], lower, k));
    if (flags & KL_TRSV_TRANSPOSE_A) da = kl_ad_mT(a, da);
    int prod = left ? kl_ad_matmul(a, da, x) : kl_ad_matmul(a, x, da);
    res = kl_ad_add(a, res, un(a, KL_P_NEG, trsolve(a, xs[0], prod, left, flags)));
  }
  return res;
}

/* P A = L U (A m x n, k = min(m, n)): with L padded to m x m and U to n x n by identity blocks,
 * L^-1 P A' U^-1 = L^-1 L' + U' U^-1 splits into its strict lower and upper parts (JAX's rule). */
static int lu_jvp(kl_ad *a, int x, int t, int lu, int perm) {
  kl_aval xa = *kl_ad_aval(a, x);
  int nd = xa.ndim;
  int64_t m = xa.dims[nd - 2], n = xa.dims[nd - 1], k = m < n ? m : n;
  int64_t bd[KL_MAX_RANK];
  for (int d = 0; d < nd - 1; d++) bd[d] = d;
  int pt = kl_ad_take_along(a, t, kl_ad_broadcast(a, perm, xa.dims, nd, bd), nd - 2);
  int zero = lit(a, 0, x);
  /* L: the strict lower part of lu's first k columns, padded with zero columns, plus I (m x m) */
  int lk = kl_ad_slice_axis(a, lu, nd - 1, 0, k);
  int l = kl_ad_pad_axis(a, mul(a, lk, kl_ad_tri(a, lk, 1, -1)), zero, nd - 1, 0, m - k);
  l = add(a, l, kl_ad_convert(a, kl_ad_eye_bool(a, l), xa.dtype));
  /* U: the upper part of lu's first k rows, padded with zero rows, plus I on rows k.. (n x n) */
  int uk = kl_ad_slice_axis(a, lu, nd - 2, 0, k);
  int u = kl_ad_pad_axis(a, mul(a, uk, kl_ad_tri(a, uk, 0, 0)), zero, nd - 2, 0, n - k);
  if (n > k) {
    int eye = kl_ad_convert(a, kl_ad_eye_bool(a, u), xa.dtype);
    int64_t ud[KL_MAX_RANK];
    memcpy(ud, kl_ad_aval(a, u)->dims, sizeof(int64_t) * (size_t)nd);
    int low_rows = kl_ad_convert(a, kl_ad_bin(a, KL_P_GE, kl_ad_iota(a, KL_I32, ud, nd, nd - 2),
                                             kl_ad_broadcast(a, kl_ad_lit(a, (double)k, KL_I32), ud, nd, NULL)),
                                 xa.dtype);
    u = add(a, u, mul(a, eye, low_rows));
  }
  int lau = trsolve(a, u, trsolve(a, l, pt, 1, KL_TRSV_LOWER | KL_TRSV_UNIT_DIAGONAL), 0, 0);
  return add(a, kl_ad_matmul(a, l, mul(a, lau, kl_ad_tri(a, lau, 1, -1))),
             kl_ad_matmul(a, mul(a, lau, kl_ad_tri(a, lau, 0, 0)), u));
}

/* Reduced QR of a tall (m >= n) matrix. */
static int qr_jvp(kl_ad *a, const kl_eqn *e, int x, int t, int q, int r, int *touts) {
  kl_aval xa = *kl_ad_aval(a, x);
  int64_t m = xa.dims[xa.ndim - 2], n = xa.dims[xa.ndim - 1];
  if (m < n || (e->p.qr.full_matrices && m != n))
    return kl_ad_fail(a, "differentiation of qr is not supported yet by kiln for a %lld x %lld matrix%s "
                         "(supported: m >= n with full_matrices=False, or square)",
                      (long long)m, (long long)n, e->p.qr.full_matrices ? " with full_matrices=True" : "");
  int dx_rinv = trsolve(a, r, t, 0, 0);
  int qt = kl_ad_matmul(a, kl_ad_mT(a, q), dx_rinv);
  int low = mul(a, qt, kl_ad_tri(a, qt, 1, -1));
  int om = sub(a, low, kl_ad_mT(a, low)); /* antisymmetric */
  touts[0] = add(a, kl_ad_matmul(a, q, sub(a, om, qt)), dx_rinv);
  touts[1] = kl_ad_matmul(a, sub(a, qt, om), r);
  return 0;
}

/* A = V diag(w) V^T: w' = diag(V^T A' V), V' = V (F * V^T A' V), F_ij = 1 / (w_j - w_i). */
static int eigh_jvp(kl_ad *a, const kl_eqn *e, int t, int v, int w, int *touts) {
  int vav = kl_ad_matmul(a, kl_ad_mT(a, v), kl_ad_matmul(a, sym_from_tri(a, t, e->p.eigh.lower), v));
  int f = off_diag_inverse(a, sub(a, spread(a, w, vav, 1), spread(a, w, vav, 0)));
  touts[0] = kl_ad_matmul(a, v, mul(a, f, vav));
  touts[1] = kl_ad_diag(a, vav);
  return 0;
}

/* SVD A = U diag(s) V^T (reduced, or square). */
static int svd_jvp(kl_ad *a, const kl_eqn *e, int x, int t, const int *ys, int *touts) {
  kl_aval xa = *kl_ad_aval(a, x);
  int64_t m = xa.dims[xa.ndim - 2], n = xa.dims[xa.ndim - 1];
  int full = e->p.svd.full_matrices, uv = e->p.svd.compute_uv;
  if (uv && full && m != n)
    return kl_ad_fail(a, "differentiation of svd with full_matrices=True of a non-square matrix (%lld x %lld) "
                         "is not supported yet by kiln; use full_matrices=False", (long long)m, (long long)n);
  int u = ys[0], s = ys[1], vt = ys[2];
  if (!uv) {
    kl_params p = e->p;
    p.svd.full_matrices = 0;
    p.svd.compute_uv = 1;
    int o[KL_MAX_OUTS];
    if (kl_ad_emit(a, KL_P_SVD, &x, 1, &p, o) < 0) return -1;
    u = o[0], s = o[1], vt = o[2];
  }
  int v = kl_ad_mT(a, vt), ut = kl_ad_mT(a, u);
  int ds = kl_ad_matmul(a, ut, kl_ad_matmul(a, t, v));
  touts[uv ? 1 : 0] = kl_ad_diag(a, ds);
  if (!uv) return 0;
  int srow = spread(a, s, ds, 1), scol = spread(a, s, ds, 0);
  int f = off_diag_inverse(a, sub(a, sq(a, srow), sq(a, scol)));
  int dss = mul(a, ds, srow), sds = mul(a, scol, ds);
  int du = kl_ad_matmul(a, u, mul(a, f, add(a, dss, kl_ad_mT(a, dss))));
  int dvv = kl_ad_matmul(a, v, mul(a, f, add(a, sds, kl_ad_mT(a, sds))));
  if (m != n) { /* the part of A' outside the span of the thin factors */
    int sz = kl_ad_convert(a, kl_ad_bin(a, KL_P_EQ, s, lit(a, 0, s)), xa.dtype);
    int sinv = sub(a, dv(a, lit(a, 1, s), add(a, s, sz)), sz);
    if (m > n) {
      int dav = kl_ad_matmul(a, t, v);
      int rest = sub(a, dav, kl_ad_matmul(a, u, kl_ad_matmul(a, ut, dav)));
      du = add(a, du, mul(a, rest, spread(a, sinv, rest, 1)));
    } else {
      int dau = kl_ad_matmul(a, kl_ad_mT(a, t), u);
      int rest = sub(a, dau, kl_ad_matmul(a, v, kl_ad_matmul(a, vt, dau)));
      dvv = add(a, dvv, mul(a, rest, spread(a, sinv, rest, 1)));
    }
  }
  touts[0] = du;
  touts[2] = kl_ad_mT(a, dvv);
  return 0;
}

/* ---- the rule table ----------------------------------------------------------------------- */

/* custom_vjp: the outputs' tangents are custom_vjp_lin(outputs, residuals, consts, input tangents),
 * an opaque linear map whose transpose runs the user's bwd rule (transpose.c); the tangents of the
 * forward computation that produced the outputs are ignored, as the rule replaces them. */
static int custom_vjp_call_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, const int *ys, int *touts) {
  const int64_t *c = e->p.custom_vjp.counts.v;
  int64_t n_out = c[0], n_keep = c[1] + c[2], n_x = c[3];
  int any = 0;
  for (int64_t j = 0; j < n_x; j++) any |= ts[n_out + n_keep + j] >= 0;
  if (!any) return 0;
  int *ins = malloc(sizeof(int) * (size_t)e->nin), outs[KL_MAX_OUTS];
  if (!ins) abort();
  for (int64_t i = 0; i < n_out; i++) ins[i] = ys[i];
  for (int64_t i = 0; i < n_keep; i++) ins[n_out + i] = xs[n_out + i];
  for (int64_t j = 0; j < n_x; j++) {
    int64_t at = n_out + n_keep + j;
    ins[at] = ts[at] >= 0 ? ts[at] : zeros_like(a, xs[at]);
  }
  int n = kl_ad_emit(a, KL_P_CUSTOM_VJP_LIN, ins, e->nin, &e->p, outs);
  free(ins);
  if (n < 0) return -1;
  for (int i = 0; i < n; i++) touts[i] = is_float_val(a, outs[i]) ? outs[i] : -1;
  return 0;
}

/* Writes the tangents of e's outputs into touts (-1 = zero). xs/ys: e's operands and results
 * in the new program; ts: operand tangents. Returns 0, or -1 with a message. */
static int jvp_rule(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, const int *ys, int *touts) {
  const kl_prim_info *pi = kl_prim_get(e->prim);
  for (int i = 0; i < e->nout; i++) touts[i] = -1;
  int y = ys[0];
  int multi = e->prim == KL_P_SORT || e->prim == KL_P_EIGH || e->prim == KL_P_SVD || e->prim == KL_P_LU;
  if (!is_float_val(a, y) && !multi) return 0; /* int/bool results carry no tangent */
  if (pi->family == KL_FAM_SHAPE) {
    if (e->prim == KL_P_PAD) {
      if (ts[0] < 0 && ts[1] < 0) return 0;
      int ins[2] = {ts[0] >= 0 ? ts[0] : zeros_like(a, xs[0]), ts[1] >= 0 ? ts[1] : lit(a, 0, xs[1])};
      touts[0] = same_prim(a, e, ins, 2);
      return 0;
    }
    int any = 0, ins[256];
    if (e->nin > 256) return kl_ad_fail(a, "differentiation of %s with %d operands is not supported yet", pi->name, e->nin);
    for (int i = 0; i < e->nin; i++) any |= ts[i] >= 0;
    if (!any) return 0;
    for (int i = 0; i < e->nin; i++) ins[i] = ts[i] >= 0 ? ts[i] : zeros_like(a, xs[i]);
    touts[0] = same_prim(a, e, ins, e->nin);
    return 0;
  }
  switch (pi->form) {
  case KL_FORM_CONST: case KL_FORM_IOTA: case KL_FORM_COMPARE: return 0;
  case KL_FORM_UNARY: {
    int t = ts[0], x = xs[0];
    if (t < 0) return 0;
    switch (e->prim) {
    case KL_P_NEG: touts[0] = un(a, KL_P_NEG, t); return 0;
    case KL_P_SIGN: case KL_P_FLOOR: case KL_P_CEIL: case KL_P_ROUND: case KL_P_IS_FINITE: case KL_P_STOP_GRADIENT: case KL_P_NOT: return 0;
    case KL_P_INTEGER_POW: touts[0] = integer_pow_jvp(a, e, x, t); return 0;
    case KL_P_OPTIMIZATION_BARRIER: touts[0] = t; return 0; /* the identity on values */
    default: break;
    }
    int d = unary_coef(a, e->prim, x, y);
    if (d == -2) return kl_ad_fail(a, "differentiation of %s is not supported yet by kiln", pi->name);
    touts[0] = scale(a, t, d);
    return 0;
  }
  case KL_FORM_BINARY: {
    int ta = ts[0], tb = ts[1], x = xs[0], w = xs[1];
    if (ta < 0 && tb < 0) return 0;
    if (e->prim == KL_P_ADD || e->prim == KL_P_SUB) {
      int nb = tb >= 0 && e->prim == KL_P_SUB ? un(a, KL_P_NEG, tb) : tb;
      touts[0] = fit(a, kl_ad_add(a, fit(a, ta, y), fit(a, nb, y)), y);
      return 0;
    }
    int da = -1, db = -1;
    int rc = binary_coefs(a, e->prim, x, w, y, &da, &db);
    if (rc == -2) return kl_ad_fail(a, "differentiation of %s is not supported yet by kiln", pi->name);
    int ca = ta >= 0 ? fit(a, scale(a, ta, da), y) : -1;
    int cb = tb >= 0 ? fit(a, scale(a, tb, db), y) : -1;
    touts[0] = kl_ad_add(a, ca, cb);
    return 0;
  }
  case KL_FORM_SELECT: {
    if (ts[1] < 0 && ts[2] < 0) return 0;
    int c0 = ts[1] >= 0 ? fit(a, ts[1], y) : zeros_like(a, y);
    int c1 = ts[2] >= 0 ? fit(a, ts[2], y) : zeros_like(a, y);
    touts[0] = kl_ad_select(a, xs[0], c0, c1);
    return 0;
  }
  case KL_FORM_CONVERT:
    if (e->prim == KL_P_BITCAST) return 0; /* reinterpreting bits is not differentiable: zero, as JAX */
    if (ts[0] < 0 || !is_float_val(a, xs[0])) return 0;
    touts[0] = same_prim(a, e, (int *)&ts[0], 1);
    return 0;
  case KL_FORM_REDUCE:
    if (ts[0] < 0) return 0;
    switch (e->prim) {
    case KL_P_REDUCE_SUM: touts[0] = same_prim(a, e, (int *)&ts[0], 1); return 0;
    case KL_P_REDUCE_MAX: case KL_P_REDUCE_MIN: touts[0] = reduce_extreme(a, e, xs[0], y, ts[0]); return 0;
    case KL_P_REDUCE_PROD: touts[0] = reduce_prod_jvp(a, e, xs[0], ts[0]); return 0;
    default: return kl_ad_fail(a, "differentiation of %s is not supported yet by kiln", pi->name);
    }
  case KL_FORM_NONE:
    switch (e->prim) {
    case KL_P_ARGMAX: case KL_P_ARGMIN: return 0;
    case KL_P_CUMSUM:
      if (ts[0] >= 0) touts[0] = same_prim(a, e, (int *)&ts[0], 1);
      return 0;
    case KL_P_CUMPROD: case KL_P_CUMMAX: case KL_P_CUMMIN: {
      kl_prim comb = e->prim == KL_P_CUMPROD ? KL_P_MUL : e->prim == KL_P_CUMMAX ? KL_P_MAX : KL_P_MIN;
      if (ts[0] >= 0) touts[0] = scan_jvp(a, comb, xs[0], ts[0], (int)e->p.cumulative.axis, e->p.cumulative.reverse);
      return 0;
    }
    case KL_P_SORT: return sort_jvp(a, e, xs, ts, touts);
    case KL_P_DOT_GENERAL: {
      int c1 = -1, c2 = -1;
      if (ts[0] >= 0) {
        int ins[2] = {ts[0], xs[1]};
        c1 = same_prim(a, e, ins, 2);
      }
      if (ts[1] >= 0) {
        int ins[2] = {xs[0], ts[1]};
        c2 = same_prim(a, e, ins, 2);
      }
      touts[0] = kl_ad_add(a, c1, c2);
      return 0;
    }
    case KL_P_DYNAMIC_SLICE: case KL_P_TAKE:
      if (ts[0] >= 0) {
        int ins[64];
        if (e->nin > 64) return kl_ad_fail(a, "differentiation of %s: too many operands", pi->name);
        memcpy(ins, xs, sizeof(int) * (size_t)e->nin);
        ins[0] = ts[0];
        touts[0] = same_prim(a, e, ins, e->nin);
      }
      return 0;
    case KL_P_DYNAMIC_UPDATE_SLICE: {
      if (ts[0] < 0 && ts[1] < 0) return 0;
      int ins[64];
      if (e->nin > 64) return kl_ad_fail(a, "differentiation of %s: too many operands", pi->name);
      memcpy(ins, xs, sizeof(int) * (size_t)e->nin);
      ins[0] = ts[0] >= 0 ? ts[0] : zeros_like(a, xs[0]);
      ins[1] = ts[1] >= 0 ? ts[1] : zeros_like(a, xs[1]);
      touts[0] = same_prim(a, e, ins, e->nin);
      return 0;
    }
    case KL_P_SCATTER:
      if (ts[0] >= 0 || ts[2] >= 0) touts[0] = scatter_jvp(a, e, xs, ts, y);
      return 0;
    case KL_P_CHOLESKY: touts[0] = cholesky_jvp(a, ts[0], y); return 0;
    case KL_P_TRIANGULAR_SOLVE: touts[0] = triangular_solve_jvp(a, e, xs, ts, y); return 0;
    case KL_P_LU: touts[0] = lu_jvp(a, xs[0], ts[0], ys[0], ys[2]); return 0;
    case KL_P_QR: return qr_jvp(a, e, xs[0], ts[0], ys[0], ys[1], touts);
    case KL_P_EIGH: return eigh_jvp(a, e, ts[0], ys[0], ys[1], touts);
    case KL_P_SVD: return svd_jvp(a, e, xs[0], ts[0], ys, touts);
    case KL_P_CUSTOM_VJP_LIN: /* what a forward-mode derivative of a custom_vjp function leaves */
      return kl_ad_fail(a, "forward-mode differentiation (jvp, jacfwd, linearize) of a custom_vjp function is not "
                           "supported (as in JAX), so neither is differentiating it again; use reverse mode (grad, "
                           "vjp, jacrev), or custom_jvp");
    default: break;
    }
    for (int i = 0; i < e->nin; i++)
      if (ts[i] >= 0) return kl_ad_fail(a, "differentiation of %s is not supported yet by kiln", pi->name);
    return 0;
  }
  return kl_ad_fail(a, "differentiation of %s is not supported yet by kiln", pi->name);
}

/* ---- call equations: checkpoint, custom_jvp_call, custom_vjp_call -------------------------- */

static int jvp_eqns(kl_ad *a, const kl_program *pg, int *pmap, int *tmap, const int *fwd, int policy, int barrier);

static int is_call(kl_prim p) { return p == KL_P_CHECKPOINT || p == KL_P_CUSTOM_JVP_CALL || p == KL_P_CUSTOM_VJP_CALL; }

/* Per value of pg: -1 (no value yet). Owned by the caller. */
static int *new_map(const kl_program *pg) {
  int *m = malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  if (!m) abort();
  for (int v = 0; v < pg->nvals; v++) m[v] = -1;
  return m;
}

static int saveable(const kl_eqn *e, int policy) {
  if (e->prim != KL_P_DOT_GENERAL) return 0;
  return policy == KL_REMAT_DOTS || (policy == KL_REMAT_DOTS_NO_BATCH && e->p.dot.lhs_batch.n == 0);
}

static const kl_program *body_of(kl_ad *a, const kl_eqn *e, const kl_program *b) {
  if (!b) kl_ad_fail(a, "internal error: %s has no body", kl_prim_get(e->prim)->name);
  return b;
}

/* checkpoint: in forward mode the body's JVP, inline. For reverse mode the body is emitted for its
 * outputs, then its JVP again on its inputs passed through optimization_barrier (so CSE cannot
 * merge the two), all tagged KL_TAG_REMAT: transpose.c emits those primal values in the backward
 * pass where they are needed, and nothing of the body but its outputs outlives the forward pass
 * (JAX's remat with policy nothing_saveable; dots_saveable reuses dot_general results). */
static int checkpoint_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  const kl_program *body = body_of(a, e, e->p.checkpoint.body);
  if (!body) return -1;
  int *fp = new_map(body), *ft = new_map(body), *rp = NULL, *rt = NULL;
  for (int i = 0; i < body->ninputs; i++) {
    fp[body->inputs[i]] = xs[i];
    if (!a->remat) ft[body->inputs[i]] = ts[i];
  }
  int rc = jvp_eqns(a, body, fp, ft, NULL, 0, 0);
  if (!rc && a->remat) {
    rp = new_map(body);
    rt = new_map(body);
    char saved = a->extra_tag;
    a->extra_tag |= KL_TAG_REMAT;
    for (int i = 0; i < body->ninputs; i++) {
      rp[body->inputs[i]] = e->p.checkpoint.prevent_cse ? kl_ad_un(a, KL_P_OPTIMIZATION_BARRIER, xs[i]) : xs[i];
      rt[body->inputs[i]] = ts[i];
    }
    rc = jvp_eqns(a, body, rp, rt, fp, e->p.checkpoint.policy, e->p.checkpoint.prevent_cse != 0);
    a->extra_tag = saved;
  }
  for (int i = 0; !rc && i < e->nout; i++) {
    ys[i] = fp[body->outputs[i]];
    touts[i] = (a->remat ? rt : ft)[body->outputs[i]];
  }
  free(fp);
  free(ft);
  free(rp);
  free(rt);
  return rc;
}

/* custom_jvp_call: the rule's program, inline, on (inputs, their tangents (zeros where missing),
 * the rule's consts): its primal outputs replace the call's, its tangent outputs are the tangents.
 * The rule's equations are ordinary ones, so a later differentiation differentiates the rule
 * itself, as JAX does. */
static int custom_jvp_call_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  const kl_program *rule = body_of(a, e, e->p.custom_jvp.jvp);
  if (!rule) return -1;
  const int64_t *c = e->p.custom_jvp.counts.v;
  int64_t n_x = c[0], n_fc = c[1], n_rc = c[2];
  int *rp = new_map(rule), *rt = new_map(rule);
  for (int64_t i = 0; i < n_x; i++) {
    rp[rule->inputs[i]] = xs[i];
    rp[rule->inputs[n_x + i]] = ts[i] >= 0 ? ts[i] : zeros_like(a, xs[i]);
  }
  for (int64_t k = 0; k < n_rc; k++) rp[rule->inputs[2 * n_x + k]] = xs[n_x + n_fc + k];
  int rc = jvp_eqns(a, rule, rp, rt, NULL, 0, 0);
  for (int i = 0; !rc && i < e->nout; i++) {
    ys[i] = rp[rule->outputs[i]];
    int t = rp[rule->outputs[e->nout + i]];
    /* a tangent output that does not depend on the tangents is zero (the rule must be linear) */
    touts[i] = t >= 0 && (a->tangent[t] & KL_TAG_TANGENT) && is_float_val(a, t) ? t : -1;
  }
  free(rp);
  free(rt);
  return rc;
}

/* A call equation with some input tangent: it is consumed here (the outputs come from the rule's
 * equations), so enclosing differentiations see what the rule computed, as in JAX. */
static int call_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  for (int i = 0; i < e->nout; i++) touts[i] = -1;
  switch (e->prim) {
  case KL_P_CHECKPOINT: return checkpoint_jvp(a, e, xs, ts, ys, touts);
  case KL_P_CUSTOM_JVP_CALL: return custom_jvp_call_jvp(a, e, xs, ts, ys, touts);
  default: /* custom_vjp_call: the forward rule's outputs, with the bwd rule as derivative */
    for (int i = 0; i < e->nout; i++) ys[i] = xs[i];
    return custom_vjp_call_jvp(a, e, xs, ts, ys, touts);
  }
}

/* The JVP of pg's equations into a->pg. pmap/tmap: pg value -> primal / tangent value (-1: none,
 * a zero tangent), the inputs' entries set by the caller. fwd (optional): a checkpoint body's
 * forward values, reused for the equations `policy` saves (behind a barrier if `barrier`).
 * Returns 0, or -1 with a message. */
static int jvp_eqns(kl_ad *a, const kl_program *pg, int *pmap, int *tmap, const int *fwd, int policy, int barrier) {
  for (int k = 0; k < pg->neqns && !a->failed; k++) {
    const kl_eqn *e = &pg->eqns[k];
    int xs[256], ts[256], ys[KL_MAX_OUTS], touts[KL_MAX_OUTS];
    if (e->nin > 256) return kl_ad_fail(a, "differentiation: equation with %d operands is not supported", e->nin);
    int any = 0;
    for (int i = 0; i < e->nin; i++) {
      xs[i] = pmap[e->ins[i]];
      ts[i] = tmap[e->ins[i]];
      any |= ts[i] >= 0;
    }
    if (any && is_call(e->prim)) {
      if (call_jvp(a, e, xs, ts, ys, touts)) return -1;
    } else {
      if (fwd && saveable(e, policy)) { /* a dot_general result kept from the forward pass */
        ys[0] = fwd[e->outs[0]];
        if (barrier) ys[0] = kl_ad_un(a, KL_P_OPTIMIZATION_BARRIER, ys[0]);
      }
      else if (kl_ad_emit(a, e->prim, xs, e->nin, &e->p, ys) < 0) return -1;
      if (!any) {
        for (int i = 0; i < e->nout; i++) pmap[e->outs[i]] = ys[i];
        continue;
      }
      if (jvp_rule(a, e, xs, ts, ys, touts)) return -1;
    }
    for (int i = 0; i < e->nout; i++) {
      pmap[e->outs[i]] = ys[i];
      tmap[e->outs[i]] = touts[i];
    }
  }
  return a->failed ? -1 : 0;
}

kl_program *kl_jvp(const kl_program *pg, const char *has_tangent, char **tags, char *err, size_t errlen) {
  return kl_jvp_ex(pg, has_tangent, tags, 0, err, errlen);
}

kl_program *kl_jvp_ex(const kl_program *pg, const char *has_tangent, char **tags, int remat, char *err,
                      size_t errlen) {
  kl_ad a = {.pg = kl_program_new(), .err = err, .errlen = errlen, .remat = remat};
  int *pmap = new_map(pg), *tmap = new_map(pg);
  for (int i = 0; i < pg->ninputs; i++) pmap[pg->inputs[i]] = kl_program_add_input(a.pg, &pg->vals[pg->inputs[i]].aval);
  kl_ad_lit(&a, 0, KL_F32); /* grows the tag array */
  for (int i = 0; i < pg->ninputs; i++) {
    const kl_aval *av = &pg->vals[pg->inputs[i]].aval;
    if (!has_tangent[i] || !kl_dtype_is_float(av->dtype)) continue;
    int t = kl_program_add_input(a.pg, av);
    tmap[pg->inputs[i]] = t;
    kl_ad_lit(&a, 0, av->dtype); /* grows the tag array past t */
    a.tangent[t] = KL_TAG_TANGENT;
  }
  jvp_eqns(&a, pg, pmap, tmap, NULL, 0, 0);
  if (!a.failed) {
    int *outs = malloc(sizeof(int) * (2 * (size_t)pg->noutputs + 1));
    if (!outs) abort();
    for (int i = 0; i < pg->noutputs; i++) outs[i] = pmap[pg->outputs[i]];
    for (int i = 0; i < pg->noutputs && !a.failed; i++) {
      int t = tmap[pg->outputs[i]];
      outs[pg->noutputs + i] = t >= 0 ? t : kl_ad_zeros(&a, &pg->vals[pg->outputs[i]].aval);
    }
    kl_program_set_outputs(a.pg, outs, 2 * pg->noutputs);
    free(outs);
  }
  free(pmap);
  free(tmap);
  if (a.failed) {
    kl_program_free(a.pg);
    free(a.tangent);
    return NULL;
  }
  if (tags) *tags = a.tangent;
  else free(a.tangent);
  return a.pg;
}
