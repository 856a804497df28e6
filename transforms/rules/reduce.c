/* reduce.c: the transformation rules of the reduce family (reduce_* over axes, argmax/argmin):
 * JVP, the transpose of reduce_sum, batching, and argmax/argmin legalized as a packed
 * max-reduction. Depends only on ir/ and transforms/. */
#include <math.h>
#include <string.h>

#include "rules.h"

/* ---- JVP ------------------------------------------------------------------------------------- */

/* Reduce max/min: the tangent at the arg-extreme positions, averaged over ties. */
static int reduce_extreme(kl_build *a, const kl_eqn *e, int x, int y, int t) {
  const kl_aval *xa = kl_build_aval(a, x);
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
  if (kl_build_emit(a, KL_P_BROADCAST_IN_DIM, &y, 1, &b, o) < 0) return -1;
  int mask = kl_build_bin(a, KL_P_EQ, x, o[0]);
  kl_params cv;
  kl_params_init(&cv, KL_P_CONVERT);
  cv.convert.new_dtype = (int)xl.dtype;
  if (kl_build_emit(a, KL_P_CONVERT, &mask, 1, &cv, o) < 0) return -1;
  int maskf = o[0];
  kl_params rs;
  kl_params_init(&rs, KL_P_REDUCE_SUM);
  rs.reduce.axes = *axes;
  if (kl_build_emit(a, KL_P_REDUCE_SUM, &maskf, 1, &rs, o) < 0) return -1;
  int count = o[0];
  int tm = mul(a, t, maskf);
  if (kl_build_emit(a, KL_P_REDUCE_SUM, &tm, 1, &rs, o) < 0) return -1;
  return dv(a, o[0], count);
}

/* reduce_prod: sum_i t_i * prod_{j != i} x_j, the products from exclusive cumprods both ways
 * (exact with zeros). The reduced axes are moved last and flattened into one. */
static int reduce_prod_tangent(kl_build *a, const kl_eqn *e, int x, int t) {
  kl_aval xa = *kl_build_aval(a, x);
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
  int xr = kl_build_reshape(a, kl_build_transpose(a, x, perm, xa.ndim), shape, nk + 1);
  int tr = kl_build_reshape(a, kl_build_transpose(a, t, perm, xa.ndim), shape, nk + 1);
  kl_params cp;
  kl_params_init(&cp, KL_P_CUMPROD);
  cp.cumulative.axis = nk;
  int fwd = kl_build_op(a, KL_P_CUMPROD, &xr, 1, &cp);
  cp.cumulative.reverse = 1;
  int bwd = kl_build_op(a, KL_P_CUMPROD, &xr, 1, &cp);
  int one = lit(a, 1, x);
  int others = mul(a, kl_ad_pad_axis(a, fwd, one, nk, 1, -1), kl_ad_pad_axis(a, bwd, one, nk, -1, 1));
  int64_t last = nk;
  return kl_build_reduce_sum(a, mul(a, tr, others), &last, 1);
}

static int reduce_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  int y = ys[0];
  if (ts[0] < 0) return 0;
  switch (e->prim) {
  case KL_P_REDUCE_SUM: touts[0] = same_prim(a, e, (int *)&ts[0], 1); return 0;
  case KL_P_REDUCE_MAX: case KL_P_REDUCE_MIN: touts[0] = reduce_extreme(a, e, xs[0], y, ts[0]); return 0;
  case KL_P_REDUCE_PROD: touts[0] = reduce_prod_tangent(a, e, xs[0], ts[0]); return 0;
  default: return kl_jvp_unsupported(a, e);
  }
}

/* ---- transpose ------------------------------------------------------------------------------- */

/* reduce_sum: broadcast the cotangent back over the reduced axes. */
static int reduce_sum_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_build *a = c->a;
  const kl_aval *xa = &c->j->vals[e->ins[i]].aval;
  kl_params p;
  memset(&p, 0, sizeof p);
  int64_t dims[KL_MAX_RANK];
  int nd = 0;
  for (int d = 0; d < xa->ndim; d++) {
    int red = 0;
    for (int k = 0; k < e->p.reduce.axes.n; k++) red |= e->p.reduce.axes.v[k] == d;
    if (!red) dims[nd++] = d;
  }
  kl_aval x = *xa;
  p.broadcast.shape = (kl_ivec){x.dims, x.ndim};
  p.broadcast.broadcast_dimensions = (kl_ivec){dims, nd};
  return kl_build_op(a, KL_P_BROADCAST_IN_DIM, &ct, 1, &p);
}

/* ---- batching -------------------------------------------------------------------------------- */

static int reduce_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_params p = e->p;
  int64_t v0[KL_MAX_RANK + 2];
  if (e->prim == KL_P_ARGMAX || e->prim == KL_P_ARGMIN) p.arg.axes = kl_batch_shifted(v0, -1, &e->p.arg.axes, 1);
  else p.reduce.axes = kl_batch_shifted(v0, -1, &e->p.reduce.axes, 1);
  return kl_batch_all(b, r, &p);
}

/* ---- legalize -------------------------------------------------------------------------------- */

/* v (an integer literal of dtype t) broadcast to shape like's. */
static int full(kl_build *b, int64_t v, kl_dtype t, const kl_aval *like) {
  int x = kl_build_ilit(b, v, t);
  return x < 0 || like->ndim == 0 ? x : kl_build_broadcast(b, x, like->dims, like->ndim, NULL);
}

/* argmax/argmin of operands of 32 bits or fewer as one max-reduction, which fuses with the
 * operand's producer (a categorical draw's 10^9 Gumbel samples are never stored): each element
 * becomes the uint64 (key << 32) | ~index, key an order-preserving uint32 of the value (negated
 * for argmin; NaN above all, as the library step's walk: the first NaN wins; -0 equal to +0), so
 * the largest is the first position of the extreme value. Wider operands keep the library step. */
static int arg_legalize(kl_build *b, const kl_eqn *e, const int *xs, int *ys) {
  const kl_aval xv = *kl_build_aval(b, xs[0]), *xa = &xv; /* a copy: building moves the program's values */
  kl_dtype t = xa->dtype;
  int axis = (int)e->p.arg.axes.v[0], fl = t == KL_F32 || t == KL_F16 || t == KL_BF16;
  int sg = t == KL_I8 || t == KL_I16 || t == KL_I32, un = t == KL_BOOL || t == KL_U8 || t == KL_U16 || t == KL_U32;
  if ((!fl && !sg && !un) || xa->dims[axis] == 0 || xa->dims[axis] >= ((int64_t)1 << 32)) return 0;
  kl_aval like = *xa;
  kl_params p;
  int x = xs[0], key, nan = -1;
  if (fl) {
    x = kl_build_convert(b, x, KL_F32);
    like.dtype = KL_F32;
    int zero = kl_build_zeros(b, &like);
    x = kl_build_select(b, kl_build_bin(b, KL_P_EQ, x, zero), x, zero); /* -0 as +0 */
    nan = kl_build_bin(b, KL_P_NE, x, x);
    kl_params_init(&p, KL_P_BITCAST);
    p.convert.new_dtype = KL_U32;
    int bits = kl_build_op(b, KL_P_BITCAST, &x, 1, &p);
    int neg = kl_build_bin(b, KL_P_NE, kl_build_bin(b, KL_P_SHR_LOGICAL, bits, full(b, 31, KL_U32, &like)),
                           full(b, 0, KL_U32, &like));
    key = kl_build_select(b, neg, kl_build_bin(b, KL_P_OR, bits, full(b, 0x80000000, KL_U32, &like)),
                          kl_build_un(b, KL_P_NOT, bits));
  } else if (sg) {
    x = kl_build_convert(b, x, KL_I32);
    kl_params_init(&p, KL_P_BITCAST);
    p.convert.new_dtype = KL_U32;
    key = kl_build_bin(b, KL_P_XOR, kl_build_op(b, KL_P_BITCAST, &x, 1, &p), full(b, 0x80000000, KL_U32, &like));
  } else {
    key = kl_build_convert(b, x, KL_U32);
  }
  if (e->prim == KL_P_ARGMIN) key = kl_build_un(b, KL_P_NOT, key);
  if (nan >= 0) key = kl_build_select(b, nan, key, full(b, 0xFFFFFFFF, KL_U32, &like));
  int idx = kl_build_un(b, KL_P_NOT, kl_build_iota(b, KL_U32, xa->dims, xa->ndim, axis));
  int packed = kl_build_bin(b, KL_P_OR, kl_build_bin(b, KL_P_SHL, kl_build_convert(b, key, KL_U64), full(b, 32, KL_U64, &like)),
                            kl_build_convert(b, idx, KL_U64));
  kl_params_init(&p, KL_P_REDUCE_MAX);
  int64_t ax = axis;
  p.reduce.axes = (kl_ivec){&ax, 1};
  int m = kl_build_op(b, KL_P_REDUCE_MAX, &packed, 1, &p);
  ys[0] = kl_build_convert(b, kl_build_un(b, KL_P_NOT, kl_build_convert(b, m, KL_U32)), (kl_dtype)e->p.arg.index_dtype);
  return ys[0] < 0 ? -1 : 1;
}

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_reduce[] = {
    {KL_P_REDUCE_SUM, reduce_jvp, reduce_sum_transpose, reduce_batch, NULL, NULL, NULL},
    {KL_P_REDUCE_PROD, reduce_jvp, NULL, reduce_batch, NULL, NULL, NULL},
    {KL_P_REDUCE_MAX, reduce_jvp, NULL, reduce_batch, NULL, NULL, NULL},
    {KL_P_REDUCE_MIN, reduce_jvp, NULL, reduce_batch, NULL, NULL, NULL},
    {KL_P_REDUCE_AND, reduce_jvp, NULL, reduce_batch, NULL, NULL, NULL}, /* bool: never reached by a tangent */
    {KL_P_REDUCE_OR, reduce_jvp, NULL, reduce_batch, NULL, NULL, NULL},
    {KL_P_ARGMAX, kl_jvp_zero, NULL, reduce_batch, NULL, NULL, arg_legalize},
    {KL_P_ARGMIN, kl_jvp_zero, NULL, reduce_batch, NULL, NULL, arg_legalize},
    KL_RULES_END};
