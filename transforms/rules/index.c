/* index.c: the transformation rules of the index family (dynamic_slice dynamic_update_slice take
 * scatter): JVP, transpose (gathers and scatter-adds undo each other), batching (per-example
 * windows and indices become gathers/scatters on the flattened batch). Depends only on ir/ and
 * transforms/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"

/* ---- JVP ------------------------------------------------------------------------------------- */

/* dynamic_slice, take: linear in the operand, the indices as they are. */
static int gather_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  if (ts[0] >= 0) {
    int ins[64];
    if (e->nin > 64) return kl_ad_fail(a, "differentiation of %s: too many operands", kl_prim_get(e->prim)->name);
    memcpy(ins, xs, sizeof(int) * (size_t)e->nin);
    ins[0] = ts[0];
    touts[0] = same_prim(a, e, ins, e->nin);
  }
  return 0;
}

static int dynamic_update_slice_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  if (ts[0] < 0 && ts[1] < 0) return 0;
  int ins[64];
  if (e->nin > 64) return kl_ad_fail(a, "differentiation of %s: too many operands", kl_prim_get(e->prim)->name);
  memcpy(ins, xs, sizeof(int) * (size_t)e->nin);
  ins[0] = ts[0] >= 0 ? ts[0] : zeros_like(a, xs[0]);
  ins[1] = ts[1] >= 0 ? ts[1] : zeros_like(a, xs[1]);
  touts[0] = same_prim(a, e, ins, e->nin);
  return 0;
}

/* All scatters differentiate to one linear scatter-add: out' = scatter_add(tx * cx, idx, tu * cu)
 * with primal coefficients cx (operand) and cu (updates; zero for dropped out-of-bounds
 * updates, and for `set`, for the updates that lost to a duplicate index). */
static int scatter_tangent(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int y) {
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

static int scatter_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (ts[0] >= 0 || ts[2] >= 0) touts[0] = scatter_tangent(a, e, xs, ts, ys[0]);
  return 0;
}

/* ---- transpose ------------------------------------------------------------------------------- */

static int index_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_ad *a = c->a;
  const kl_aval *xa = &c->j->vals[e->ins[i]].aval;
  kl_params p; /* zeroed; each case fills the member of what it emits */
  memset(&p, 0, sizeof p);
  switch (e->prim) {
  case KL_P_DYNAMIC_SLICE: {
    if (i != 0) break;
    int ins[64];
    if (e->nin + 1 > 64) break;
    ins[0] = kl_ad_zeros(a, xa);
    ins[1] = ct;
    for (int k = 1; k < e->nin; k++) ins[k + 1] = kl_tr_prim_of(c, e->ins[k]);
    return kl_tr_emit1(a, KL_P_DYNAMIC_UPDATE_SLICE, ins, e->nin + 1, NULL);
  }
  case KL_P_DYNAMIC_UPDATE_SLICE: {
    int ins[64];
    if (e->nin > 64) break;
    if (i == 0) {
      ins[0] = ct;
      ins[1] = kl_ad_zeros(a, &c->j->vals[e->ins[1]].aval);
      for (int k = 2; k < e->nin; k++) ins[k] = kl_tr_prim_of(c, e->ins[k]);
      return kl_tr_emit1(a, KL_P_DYNAMIC_UPDATE_SLICE, ins, e->nin, NULL);
    }
    if (i == 1) {
      ins[0] = ct;
      for (int k = 2; k < e->nin; k++) ins[k - 1] = kl_tr_prim_of(c, e->ins[k]);
      kl_aval u = c->j->vals[e->ins[1]].aval;
      p.dynamic_slice.slice_sizes = (kl_ivec){u.dims, u.ndim};
      return kl_tr_emit1(a, KL_P_DYNAMIC_SLICE, ins, e->nin - 1, &p);
    }
    break;
  }
  case KL_P_TAKE: { /* scatter-add back, at the clamped positions take read from */
    if (i != 0) break;
    int idx = kl_tr_prim_of(c, e->ins[1]);
    kl_dtype it = kl_ad_aval(a, idx)->dtype;
    idx = kl_ad_bin(a, KL_P_MIN, idx, kl_ad_lit(a, (double)(xa->dims[e->p.take.axis] - 1), it));
    int ins[3] = {kl_ad_zeros(a, xa), idx, ct};
    p.scatter.axis = e->p.take.axis;
    p.scatter.op = KL_SCATTER_ADD;
    return kl_tr_emit1(a, KL_P_SCATTER, ins, 3, &p);
  }
  case KL_P_SCATTER: { /* the JVP writes only scatter-adds; it masks dropped updates itself */
    if (i == 1 || e->p.scatter.op != KL_SCATTER_ADD) break;
    if (i == 0) return ct;
    int ins[2] = {ct, kl_tr_prim_of(c, e->ins[1])};
    p.take.axis = e->p.scatter.axis;
    return kl_tr_emit1(a, KL_P_TAKE, ins, 2, &p);
  }
  default: break;
  }
  return kl_transpose_unsupported(c, e);
}

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_index[] = {
    {KL_P_DYNAMIC_SLICE, gather_jvp, index_transpose, NULL},
    {KL_P_DYNAMIC_UPDATE_SLICE, dynamic_update_slice_jvp, index_transpose, NULL},
    {KL_P_TAKE, gather_jvp, index_transpose, NULL},
    {KL_P_SCATTER, scatter_jvp, index_transpose, NULL},
    KL_RULES_END};
