/* jvp.c: forward-mode differentiation of a Program. Every equation is copied, then its JVP rule
 * writes the tangent of its outputs as linear functions of the input tangents, with primal
 * values as coefficients. A missing tangent (-1) is a symbolic zero. Rules live in one switch,
 * grouped by family, beside the shape/dtype rules' order in prim.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ad.h"

static int is_float_val(kl_ad *a, int v) { return v >= 0 && kl_dtype_is_float(kl_ad_aval(a, v)->dtype); }

/* t broadcast up to the shape of `like` when t is rank-0 and like is not. */
static int fit(kl_ad *a, int t, int like) {
  if (t < 0) return t;
  const kl_aval *ta = kl_ad_aval(a, t), *la = kl_ad_aval(a, like);
  if (ta->ndim == la->ndim) return t;
  kl_params p;
  kl_params_init(&p);
  kl_aval l = *la;
  p.v[0] = l.dims;
  p.nv[0] = l.ndim;
  int o[KL_MAX_OUTS];
  return kl_ad_emit(a, KL_P_BROADCAST_IN_DIM, &t, 1, &p, o) < 0 ? -1 : o[0];
}

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
  case KL_P_SQUARE: return mul(a, lit(a, 2, x), x);
  default: return -2; /* no rule */
  }
}

static int integer_pow_coef(kl_ad *a, const kl_eqn *e, int x) {
  int64_t n = e->p.i0;
  if (n == 0) return -1;
  if (n == 1) return lit(a, 1, x);
  kl_params p;
  kl_params_init(&p);
  p.i0 = n - 1;
  int o[KL_MAX_OUTS];
  if (kl_ad_emit(a, KL_P_INTEGER_POW, &x, 1, &p, o) < 0) return -1;
  return mul(a, lit(a, (double)n, x), o[0]);
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
  kl_params b;
  kl_params_init(&b);
  int64_t dims[KL_MAX_RANK];
  int nd = 0;
  for (int i = 0; i < xl.ndim; i++) {
    int red = 0;
    for (int k = 0; k < e->p.nv[0]; k++) red |= e->p.v[0][k] == i;
    if (!red) dims[nd++] = i;
  }
  b.v[0] = xl.dims;
  b.nv[0] = xl.ndim;
  b.v[1] = dims;
  b.nv[1] = nd;
  int o[KL_MAX_OUTS];
  if (kl_ad_emit(a, KL_P_BROADCAST_IN_DIM, &y, 1, &b, o) < 0) return -1;
  int mask = kl_ad_bin(a, KL_P_EQ, x, o[0]);
  kl_params cv;
  kl_params_init(&cv);
  cv.d = (int)xl.dtype;
  if (kl_ad_emit(a, KL_P_CONVERT, &mask, 1, &cv, o) < 0) return -1;
  int maskf = o[0];
  kl_params rs;
  kl_params_init(&rs);
  rs.v[0] = e->p.v[0];
  rs.nv[0] = e->p.nv[0];
  if (kl_ad_emit(a, KL_P_REDUCE_SUM, &maskf, 1, &rs, o) < 0) return -1;
  int count = o[0];
  int tm = mul(a, t, maskf);
  if (kl_ad_emit(a, KL_P_REDUCE_SUM, &tm, 1, &rs, o) < 0) return -1;
  return dv(a, o[0], count);
}

/* Writes the tangents of e's outputs into touts (-1 = zero). xs/ys: e's operands and results
 * in the new program; ts: operand tangents. Returns 0, or -1 with a message. */
static int jvp_rule(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, const int *ys, int *touts) {
  const kl_prim_info *pi = kl_prim_get(e->prim);
  for (int i = 0; i < e->nout; i++) touts[i] = -1;
  int y = ys[0];
  if (!is_float_val(a, y) && e->prim != KL_P_SORT && pi->family != KL_FAM_LIB) return 0; /* int/bool: no tangent */
  switch (pi->family) {
  case KL_FAM_CONST: case KL_FAM_IOTA: case KL_FAM_COMPARE: return 0;
  case KL_FAM_UNARY: {
    int t = ts[0], x = xs[0];
    if (t < 0) return 0;
    switch (e->prim) {
    case KL_P_NEG: touts[0] = un(a, KL_P_NEG, t); return 0;
    case KL_P_SIGN: case KL_P_FLOOR: case KL_P_CEIL: case KL_P_ROUND: case KL_P_IS_FINITE: case KL_P_STOP_GRADIENT: case KL_P_NOT: return 0;
    case KL_P_INTEGER_POW: touts[0] = scale(a, t, integer_pow_coef(a, e, x)); return 0;
    default: break;
    }
    int d = unary_coef(a, e->prim, x, y);
    if (d == -2) return kl_ad_fail(a, "differentiation of %s is not supported yet by kiln", pi->name);
    touts[0] = scale(a, t, d);
    return 0;
  }
  case KL_FAM_BINARY: {
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
  case KL_FAM_SELECT: {
    if (ts[1] < 0 && ts[2] < 0) return 0;
    int c0 = ts[1] >= 0 ? fit(a, ts[1], y) : zeros_like(a, y);
    int c1 = ts[2] >= 0 ? fit(a, ts[2], y) : zeros_like(a, y);
    int ins[3] = {xs[0], c0, c1};
    touts[0] = same_prim(a, e, ins, 3);
    return 0;
  }
  case KL_FAM_CONVERT:
    if (ts[0] < 0 || !is_float_val(a, xs[0])) return 0;
    touts[0] = same_prim(a, e, (int *)&ts[0], 1);
    return 0;
  case KL_FAM_SHAPE: {
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
  case KL_FAM_REDUCE:
    if (ts[0] < 0) return 0;
    if (e->prim == KL_P_REDUCE_SUM) touts[0] = same_prim(a, e, (int *)&ts[0], 1);
    else if (e->prim == KL_P_REDUCE_MAX || e->prim == KL_P_REDUCE_MIN) touts[0] = reduce_extreme(a, e, xs[0], y, ts[0]);
    else return kl_ad_fail(a, "differentiation of %s is not supported yet by kiln", pi->name);
    return 0;
  case KL_FAM_LIB:
    switch (e->prim) {
    case KL_P_ARGMAX: case KL_P_ARGMIN: return 0;
    case KL_P_CUMSUM:
      if (ts[0] >= 0) touts[0] = same_prim(a, e, (int *)&ts[0], 1);
      return 0;
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
      if (e->p.i1 != KL_SCATTER_SET && e->p.i1 != KL_SCATTER_ADD) break;
      if (ts[0] < 0 && ts[2] < 0) return 0;
      {
        int ins[3] = {ts[0] >= 0 ? ts[0] : zeros_like(a, xs[0]), xs[1], ts[2] >= 0 ? ts[2] : zeros_like(a, xs[2])};
        touts[0] = same_prim(a, e, ins, 3);
      }
      return 0;
    default: break;
    }
    for (int i = 0; i < e->nin; i++)
      if (ts[i] >= 0) return kl_ad_fail(a, "differentiation of %s is not supported yet by kiln", pi->name);
    return 0;
  }
  return kl_ad_fail(a, "differentiation of %s is not supported yet by kiln", pi->name);
}

kl_program *kl_jvp(const kl_program *pg, const char *has_tangent, char **tags, char *err, size_t errlen) {
  kl_ad a = {.pg = kl_program_new(), .err = err, .errlen = errlen};
  int *pmap = malloc(sizeof(int) * ((size_t)pg->nvals + 1)), *tmap = malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  if (!pmap || !tmap) abort();
  for (int v = 0; v < pg->nvals; v++) pmap[v] = tmap[v] = -1;
  for (int i = 0; i < pg->ninputs; i++) pmap[pg->inputs[i]] = kl_program_add_input(a.pg, &pg->vals[pg->inputs[i]].aval);
  for (int i = 0; i < pg->ninputs; i++) {
    const kl_aval *av = &pg->vals[pg->inputs[i]].aval;
    if (!has_tangent[i] || !kl_dtype_is_float(av->dtype)) continue;
    int t = kl_program_add_input(a.pg, av);
    tmap[pg->inputs[i]] = t;
    /* tag the tangent input */
    int lit_dummy = kl_ad_lit(&a, 0, av->dtype); /* grows the tag array */
    (void)lit_dummy;
    a.tangent[t] = 1;
  }
  for (int k = 0; k < pg->neqns && !a.failed; k++) {
    const kl_eqn *e = &pg->eqns[k];
    int xs[256], ts[256], ys[KL_MAX_OUTS], touts[KL_MAX_OUTS];
    if (e->nin > 256) {
      kl_ad_fail(&a, "differentiation: equation with %d operands is not supported", e->nin);
      break;
    }
    int any = 0;
    for (int i = 0; i < e->nin; i++) {
      xs[i] = pmap[e->ins[i]];
      ts[i] = tmap[e->ins[i]];
      any |= ts[i] >= 0;
    }
    if (kl_ad_emit(&a, e->prim, xs, e->nin, &e->p, ys) < 0) break;
    for (int i = 0; i < e->nout; i++) pmap[e->outs[i]] = ys[i];
    if (!any) continue;
    if (jvp_rule(&a, e, xs, ts, ys, touts)) break;
    for (int i = 0; i < e->nout; i++) tmap[e->outs[i]] = touts[i];
  }
  if (!a.failed) {
    int *outs = malloc(sizeof(int) * (2 * (size_t)pg->noutputs + 1));
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
