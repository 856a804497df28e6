/* shape.c: the transformation rules of the shape family (broadcast_in_dim reshape transpose rev
 * slice pad concatenate): all linear, so their JVP applies the primitive to the tangents and their
 * transpose undoes the data movement; batching shifts the axis params by one; simplification
 * drops the no-op ones and composes chains. Depends only on ir/
 * and transforms/. */
#include <string.h>

#include "rules.h"

/* ---- JVP ------------------------------------------------------------------------------------- */

/* pad: linear in (operand, padding value) together. */
static int pad_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  if (ts[0] < 0 && ts[1] < 0) return 0;
  int ins[2] = {ts[0] >= 0 ? ts[0] : zeros_like(a, xs[0]), ts[1] >= 0 ? ts[1] : lit(a, 0, xs[1])};
  touts[0] = same_prim(a, e, ins, 2);
  return 0;
}

/* The others: the same primitive on the tangents (zeros where an operand has none). */
static int shape_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  int any = 0, ins[256];
  if (e->nin > 256) return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiation of %s with %d operands is not supported yet", kl_prim_get(e->prim)->name, e->nin);
  for (int i = 0; i < e->nin; i++) any |= ts[i] >= 0;
  if (!any) return 0;
  for (int i = 0; i < e->nin; i++) ins[i] = ts[i] >= 0 ? ts[i] : zeros_like(a, xs[i]);
  touts[0] = same_prim(a, e, ins, e->nin);
  return 0;
}

/* ---- transpose ------------------------------------------------------------------------------- */

/* The three int-vector params of slice (start, limit, strides) and pad (low, high, interior). */
static int emit_box(kl_build *a, kl_prim prim, int x, const int64_t *v0, const int64_t *v1, const int64_t *v2, int n) {
  kl_params p;
  kl_params_init(&p, prim);
  kl_ivec a0 = {(int64_t *)v0, n}, a1 = {(int64_t *)v1, n}, a2 = {(int64_t *)v2, n};
  if (prim == KL_P_SLICE) {
    p.slice.start_indices = a0;
    p.slice.limit_indices = a1;
    p.slice.strides = a2;
    return kl_build_op(a, KL_P_SLICE, &x, 1, &p);
  }
  p.pad.low = a0;
  p.pad.high = a1;
  p.pad.interior = a2;
  int ins[2] = {x, kl_build_lit(a, 0, kl_build_aval(a, x)->dtype)}; /* pad with zeros */
  return kl_build_op(a, KL_P_PAD, ins, 2, &p);
}

static int broadcast_in_dim_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_build *a = c->a;
  const kl_aval *xa = &c->j->vals[e->ins[i]].aval;
  const kl_aval *ya = &c->j->vals[e->outs[0]].aval;
  kl_params p; /* zeroed; filled with the member of what is emitted */
  memset(&p, 0, sizeof p);
  /* sum over the new dims and the stretched size-1 dims, then reshape to the operand */
  int64_t axes[KL_MAX_RANK];
  int na = 0;
  for (int d = 0; d < ya->ndim; d++) {
    int src = -1;
    for (int k = 0; k < e->p.broadcast.broadcast_dimensions.n; k++)
      if (e->p.broadcast.broadcast_dimensions.v[k] == d) src = k;
    if (src < 0 || (xa->dims[src] == 1 && ya->dims[d] != 1)) axes[na++] = d;
  }
  int s = ct;
  if (na) {
    p.reduce.axes = (kl_ivec){axes, na};
    s = kl_build_op(a, KL_P_REDUCE_SUM, &ct, 1, &p);
  }
  kl_aval x = *xa;
  if (kl_build_aval(a, s)->ndim == x.ndim) return s;
  kl_params_init(&p, KL_P_RESHAPE);
  p.reshape.new_sizes = (kl_ivec){x.dims, x.ndim};
  return kl_build_op(a, KL_P_RESHAPE, &s, 1, &p);
}

static int reshape_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_build *a = c->a;
  const kl_aval *xa = &c->j->vals[e->ins[i]].aval;
  kl_params p; /* zeroed; filled with the member of what is emitted */
  memset(&p, 0, sizeof p);
  kl_aval x = *xa;
  p.reshape.new_sizes = (kl_ivec){x.dims, x.ndim};
  return kl_build_op(a, KL_P_RESHAPE, &ct, 1, &p);
}

static int transpose_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  (void)i;
  kl_build *a = c->a;
  kl_params p; /* zeroed; filled with the member of what is emitted */
  memset(&p, 0, sizeof p);
  int64_t inv[KL_MAX_RANK];
  const kl_ivec *perm = &e->p.transpose.permutation;
  for (int d = 0; d < perm->n; d++) inv[perm->v[d]] = d;
  p.transpose.permutation = (kl_ivec){inv, perm->n};
  return kl_build_op(a, KL_P_TRANSPOSE, &ct, 1, &p);
}

static int rev_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  (void)i;
  kl_build *a = c->a;
  return kl_build_op(a, KL_P_REV, &ct, 1, &e->p);
}

/* slice: pad the cotangent back with zeros. */
static int slice_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_build *a = c->a;
  const kl_aval *xa = &c->j->vals[e->ins[i]].aval;
  const kl_aval *ya = &c->j->vals[e->outs[0]].aval;
  int64_t lo[KL_MAX_RANK], hi[KL_MAX_RANK], in[KL_MAX_RANK];
  for (int d = 0; d < xa->ndim; d++) {
    int64_t st = e->p.slice.strides.n ? e->p.slice.strides.v[d] : 1, n = ya->dims[d];
    lo[d] = e->p.slice.start_indices.v[d];
    in[d] = st - 1;
    int64_t covered = n ? lo[d] + (n - 1) * st + 1 : lo[d];
    hi[d] = xa->dims[d] - covered;
  }
  return emit_box(a, KL_P_PAD, ct, lo, hi, in, xa->ndim);
}

static int pad_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_build *a = c->a;
  const kl_aval *xa = &c->j->vals[e->ins[i]].aval;
  const kl_aval *ya = &c->j->vals[e->outs[0]].aval;
  kl_params p; /* zeroed; filled with the member of what is emitted */
  memset(&p, 0, sizeof p);
  if (i == 1) { /* padding value: the sum over the padding positions, which pad(0, 1) marks */
    int ins[2] = {kl_build_zeros(a, &c->j->vals[e->ins[0]].aval), kl_build_lit(a, 1, ya->dtype)};
    int m = kl_build_bin(a, KL_P_MUL, ct, kl_build_op(a, KL_P_PAD, ins, 2, &e->p));
    int64_t axes[KL_MAX_RANK];
    for (int d = 0; d < ya->ndim; d++) axes[d] = d;
    p.reduce.axes = (kl_ivec){axes, ya->ndim};
    return kl_build_op(a, KL_P_REDUCE_SUM, &m, 1, &p);
  }
  /* operand: undo negative padding with zero padding, then take the strided slice */
  int64_t lo2[KL_MAX_RANK], hi2[KL_MAX_RANK], zero[KL_MAX_RANK], st[KL_MAX_RANK], lim[KL_MAX_RANK];
  int need = 0;
  for (int d = 0; d < xa->ndim; d++) {
    int64_t lo = e->p.pad.low.v[d], hi = e->p.pad.high.v[d];
    lo2[d] = lo < 0 ? -lo : 0;
    hi2[d] = hi < 0 ? -hi : 0;
    zero[d] = 0;
    need |= lo2[d] || hi2[d];
  }
  int src = need ? emit_box(a, KL_P_PAD, ct, lo2, hi2, zero, xa->ndim) : ct;
  int64_t start[KL_MAX_RANK];
  for (int d = 0; d < xa->ndim; d++) {
    start[d] = e->p.pad.low.v[d] > 0 ? e->p.pad.low.v[d] : 0;
    st[d] = e->p.pad.interior.v[d] + 1;
    lim[d] = xa->dims[d] ? start[d] + (xa->dims[d] - 1) * st[d] + 1 : start[d];
  }
  return emit_box(a, KL_P_SLICE, src, start, lim, st, xa->ndim);
}

static int concatenate_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_build *a = c->a;
  const kl_aval *xa = &c->j->vals[e->ins[i]].aval;
  const kl_aval *ya = &c->j->vals[e->outs[0]].aval;
  int64_t off = 0, d = e->p.concatenate.dimension;
  for (int k = 0; k < i; k++) off += c->j->vals[e->ins[k]].aval.dims[d];
  int64_t start[KL_MAX_RANK] = {0}, lim[KL_MAX_RANK], st[KL_MAX_RANK];
  for (int k = 0; k < ya->ndim; k++) {
    lim[k] = ya->dims[k];
    st[k] = 1;
  }
  start[d] = off;
  lim[d] = off + xa->dims[d];
  return emit_box(a, KL_P_SLICE, ct, start, lim, st, ya->ndim);
}

/* ---- batching -------------------------------------------------------------------------------- */

/* pad with a batched padding value: pad with any scalar, then overwrite the padding positions
 * (found by padding a mask the same way) with the per-example value. */
static int pad_batched_value(kl_build *b, rule_args *r, const kl_params *shifted_cfg) {
  const kl_aval *xa = src_in(r, 0), *oa = src_out(r, 0);
  kl_aval x = *xa;
  int filler = kl_build_ilit(b, 0, x.dtype);
  int ins[2] = {kl_batch_as_batched(b, r->xs[0], r->bs[0]), filler};
  int padded = kl_build_op(b, KL_P_PAD, ins, 2, shifted_cfg);
  int inner = kl_build_ilit(b, 0, KL_BOOL);
  int mask_in = x.ndim ? kl_build_broadcast(b, inner, x.dims, x.ndim, NULL) : inner;
  int mins[2] = {mask_in, kl_build_ilit(b, 1, KL_BOOL)};
  int mask = kl_build_op(b, KL_P_PAD, mins, 2, &r->e->p);
  int64_t shape[KL_MAX_RANK + 2], dims[KL_MAX_RANK + 2], zero = 0;
  shape[0] = b->size;
  for (int i = 0; i < oa->ndim; i++) {
    shape[i + 1] = oa->dims[i];
    dims[i] = i + 1;
  }
  int bmask = kl_build_broadcast(b, mask, shape, oa->ndim + 1, dims);
  int bval = kl_build_broadcast(b, r->xs[1], shape, oa->ndim + 1, &zero);
  int sel[3] = {bmask, padded, bval};
  r->ys[0] = kl_build_op(b, KL_P_SELECT_N, sel, 3, NULL);
  return r->ys[0] < 0 ? -1 : 0;
}

static int shape_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_params p = e->p;
  int64_t v0[KL_MAX_RANK + 2], v1[KL_MAX_RANK + 2], v2[KL_MAX_RANK + 2];
  int x = r->xs[0];
  switch (e->prim) {
  case KL_P_BROADCAST_IN_DIM:
    p.broadcast.shape = kl_batch_shifted(v0, b->size, &e->p.broadcast.shape, 0);
    p.broadcast.broadcast_dimensions = kl_batch_shifted(v1, 0, &e->p.broadcast.broadcast_dimensions, 1);
    break;
  case KL_P_RESHAPE: p.reshape.new_sizes = kl_batch_shifted(v0, b->size, &e->p.reshape.new_sizes, 0); break;
  case KL_P_TRANSPOSE: p.transpose.permutation = kl_batch_shifted(v0, 0, &e->p.transpose.permutation, 1); break;
  case KL_P_REV: p.rev.dimensions = kl_batch_shifted(v0, -1, &e->p.rev.dimensions, 1); break;
  case KL_P_SLICE:
    p.slice.start_indices = kl_batch_shifted(v0, 0, &e->p.slice.start_indices, 0);
    p.slice.limit_indices = kl_batch_shifted(v1, b->size, &e->p.slice.limit_indices, 0);
    if (e->p.slice.strides.n) p.slice.strides = kl_batch_shifted(v2, 1, &e->p.slice.strides, 0);
    break;
  case KL_P_PAD: {
    p.pad.low = kl_batch_shifted(v0, 0, &e->p.pad.low, 0);
    p.pad.high = kl_batch_shifted(v1, 0, &e->p.pad.high, 0);
    p.pad.interior = kl_batch_shifted(v2, 0, &e->p.pad.interior, 0);
    if (r->bs[1]) return pad_batched_value(b, r, &p);
    int ins[2] = {x, r->xs[1]};
    r->ys[0] = kl_build_op(b, KL_P_PAD, ins, 2, &p);
    return r->ys[0] < 0 ? -1 : 0;
  }
  case KL_P_CONCATENATE:
    for (int i = 0; i < e->nin; i++) r->xs[i] = kl_batch_as_batched(b, r->xs[i], r->bs[i]);
    p.concatenate.dimension = e->p.concatenate.dimension + 1;
    r->ys[0] = kl_build_op(b, e->prim, r->xs, e->nin, &p);
    return r->ys[0] < 0 ? -1 : 0;
  default: return kl_batch_unsupported(b, e);
  }
  r->ys[0] = kl_build_op(b, e->prim, &x, 1, &p);
  return r->ys[0] < 0 ? -1 : 0;
}

/* ---- simplify (simplify.h): structural ops that leave their operand unchanged, and chains of
 * them that compose into one; all exact, they only move elements ------------------------------ */

static const kl_aval *simp_aval(kl_simp *s, int v) { return &s->pg->vals[v].aval; }

/* The operand's producer when e can fold into it, or NULL; a replicated scalar stays a
 * replicated scalar, so e over broadcast_in_dim of a rank-0 value becomes one broadcast to the
 * final shape (*done then holds the outcome). */
static const kl_eqn *fold_source(kl_simp *s, kl_eqn *e, int *done) {
  const kl_eqn *pe = kl_simp_producer(s->pg, e->ins[0]);
  *done = -1;
  if (!pe) return NULL;
  if (pe->prim == KL_P_BROADCAST_IN_DIM && simp_aval(s, pe->ins[0])->ndim == 0) {
    *done = kl_simp_rewrite_broadcast(s, e, pe->ins[0], NULL);
    return NULL;
  }
  return pe->prim == e->prim ? pe : NULL;
}

/* broadcast_in_dim of broadcast_in_dim: y's dim i lands on mid's d1[i], which lands on out's
 * d2[d1[i]]; extents stay 1 or equal, so the composed broadcast is valid and equal. */
static int compose_broadcasts(kl_simp *s, kl_eqn *e, const kl_eqn *pe) {
  int y = pe->ins[0];
  const kl_aval *ya = simp_aval(s, y);
  int64_t dims[KL_MAX_RANK];
  for (int i = 0; i < ya->ndim; i++) dims[i] = e->p.broadcast.broadcast_dimensions.v[pe->p.broadcast.broadcast_dimensions.v[i]];
  return kl_simp_rewrite_broadcast(s, e, y, dims);
}

/* equal avals: the broadcast dims are then 0..n-1 with equal extents */
static int broadcast_in_dim_simplify(kl_simp *s, kl_eqn *e) {
  if (kl_aval_equal(simp_aval(s, e->ins[0]), simp_aval(s, e->outs[0]))) return kl_simp_forward(s, e, e->ins[0]);
  int done;
  const kl_eqn *pe = fold_source(s, e, &done);
  return pe ? compose_broadcasts(s, e, pe) : done >= 0 ? done : KL_SIMP_KEEP;
}

/* reshape is row-major: equal avals change nothing, and a reshape of a reshape is one */
static int reshape_simplify(kl_simp *s, kl_eqn *e) {
  if (kl_aval_equal(simp_aval(s, e->ins[0]), simp_aval(s, e->outs[0]))) return kl_simp_forward(s, e, e->ins[0]);
  int done;
  const kl_eqn *pe = fold_source(s, e, &done);
  if (!pe) return done >= 0 ? done : KL_SIMP_KEEP;
  e->ins[0] = pe->ins[0];
  return KL_SIMP_REWRITTEN;
}

static int transpose_simplify(kl_simp *s, kl_eqn *e) {
  const kl_ivec *p2 = &e->p.transpose.permutation;
  int identity = 1;
  for (int i = 0; i < p2->n; i++) identity &= p2->v[i] == i;
  if (identity) return kl_simp_forward(s, e, e->ins[0]);
  int done;
  const kl_eqn *pe = fold_source(s, e, &done);
  if (!pe) return done >= 0 ? done : KL_SIMP_KEEP;
  int64_t *q = kl_simp_arena_vec(s->pg, p2->n); /* out[j] = mid[p2[j]] = y[p1[p2[j]]] */
  if (!q) return KL_SIMP_KEEP;                   /* out of memory: pg->oom is set */
  for (int j = 0; j < p2->n; j++) q[j] = pe->p.transpose.permutation.v[p2->v[j]];
  e->p.transpose.permutation.v = q;
  e->ins[0] = pe->ins[0];
  return KL_SIMP_REWRITTEN;
}

/* Reversing only extent-1 axes moves nothing; rev of rev reverses the axes reversed an odd
 * number of times (none: the operand itself). Regression: rev of rev was composed as if it were
 * a broadcast, reading rev's params as broadcast_in_dim's, and crashed
 * (jit(lambda x: jnp.flip(jnp.flip(x, 0), 0))). */
static int rev_simplify(kl_simp *s, kl_eqn *e) {
  const kl_aval *xa = simp_aval(s, e->ins[0]);
  int moves = 0;
  for (int i = 0; i < e->p.rev.dimensions.n; i++) moves |= xa->dims[e->p.rev.dimensions.v[i]] > 1;
  if (!moves) return kl_simp_forward(s, e, e->ins[0]);
  int done;
  const kl_eqn *pe = fold_source(s, e, &done);
  if (!pe) return done >= 0 ? done : KL_SIMP_KEEP;
  char flipped[KL_MAX_RANK] = {0};
  for (int i = 0; i < e->p.rev.dimensions.n; i++) flipped[e->p.rev.dimensions.v[i]] ^= 1;
  for (int i = 0; i < pe->p.rev.dimensions.n; i++) flipped[pe->p.rev.dimensions.v[i]] ^= 1;
  int n = 0;
  for (int d = 0; d < xa->ndim; d++) n += flipped[d];
  if (!n) return kl_simp_forward(s, e, pe->ins[0]);
  int64_t *dims = kl_simp_arena_vec(s->pg, n);
  if (!dims) return KL_SIMP_KEEP; /* out of memory: the program is marked, and e stays as it is */
  n = 0;
  for (int d = 0; d < xa->ndim; d++)
    if (flipped[d]) dims[n++] = d;
  e->p.rev.dimensions = (kl_ivec){dims, n};
  e->ins[0] = pe->ins[0];
  return KL_SIMP_REWRITTEN;
}

static int slice_simplify(kl_simp *s, kl_eqn *e) {
  const kl_aval *xa = simp_aval(s, e->ins[0]);
  const kl_params *p = &e->p;
  int whole = 1;
  for (int i = 0; i < xa->ndim; i++)
    whole &= p->slice.start_indices.v[i] == 0 && p->slice.limit_indices.v[i] == xa->dims[i] &&
             (!p->slice.strides.n || p->slice.strides.v[i] == 1 || xa->dims[i] <= 1);
  return whole && kl_aval_equal(xa, simp_aval(s, e->outs[0])) ? kl_simp_forward(s, e, e->ins[0]) : KL_SIMP_KEEP;
}

static int pad_simplify(kl_simp *s, kl_eqn *e) {
  const kl_aval *xa = simp_aval(s, e->ins[0]);
  const kl_params *p = &e->p;
  int none = 1;
  for (int i = 0; i < xa->ndim; i++)
    none &= !p->pad.low.v[i] && !p->pad.high.v[i] && (!p->pad.interior.v[i] || xa->dims[i] <= 1);
  return none && kl_aval_equal(xa, simp_aval(s, e->outs[0])) ? kl_simp_forward(s, e, e->ins[0]) : KL_SIMP_KEEP;
}

static int concatenate_simplify(kl_simp *s, kl_eqn *e) { return e->nin == 1 ? kl_simp_forward(s, e, e->ins[0]) : KL_SIMP_KEEP; }

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_shape[] = {
    {KL_P_BROADCAST_IN_DIM, shape_jvp, broadcast_in_dim_transpose, shape_batch, broadcast_in_dim_simplify, NULL, NULL},
    {KL_P_RESHAPE, shape_jvp, reshape_transpose, shape_batch, reshape_simplify, NULL, NULL},
    {KL_P_TRANSPOSE, shape_jvp, transpose_transpose, shape_batch, transpose_simplify, NULL, NULL},
    {KL_P_REV, shape_jvp, rev_transpose, shape_batch, rev_simplify, NULL, NULL},
    {KL_P_SLICE, shape_jvp, slice_transpose, shape_batch, slice_simplify, NULL, NULL},
    {KL_P_PAD, pad_jvp, pad_transpose, shape_batch, pad_simplify, NULL, NULL},
    {KL_P_CONCATENATE, shape_jvp, concatenate_transpose, shape_batch, concatenate_simplify, NULL, NULL},
    KL_RULES_END};
