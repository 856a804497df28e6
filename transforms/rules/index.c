/* index.c: the transformation rules of the index family (dynamic_slice dynamic_update_slice take
 * scatter): JVP, transpose (gathers and scatter-adds undo each other), batching (per-example
 * windows and indices become gathers/scatters on the flattened batch). Depends only on ir/ and
 * transforms/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/alloc.h"
#include "rules.h"

/* ---- JVP ------------------------------------------------------------------------------------- */

/* dynamic_slice, take: linear in the operand, the indices as they are. */
static int gather_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  if (ts[0] >= 0) {
    int ins[64];
    if (e->nin > 64) return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiation of %s: too many operands", kl_prim_get(e->prim)->name);
    memcpy(ins, xs, sizeof(int) * (size_t)e->nin);
    ins[0] = ts[0];
    touts[0] = same_prim(a, e, ins, e->nin);
  }
  return 0;
}

static int dynamic_update_slice_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  if (ts[0] < 0 && ts[1] < 0) return 0;
  int ins[64];
  if (e->nin > 64) return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiation of %s: too many operands", kl_prim_get(e->prim)->name);
  memcpy(ins, xs, sizeof(int) * (size_t)e->nin);
  ins[0] = ts[0] >= 0 ? ts[0] : zeros_like(a, xs[0]);
  ins[1] = ts[1] >= 0 ? ts[1] : zeros_like(a, xs[1]);
  kl_params p = e->p;
  p.update.loc = 0; /* the tangent's update is kiln's, not the user's */
  int o[KL_MAX_OUTS];
  touts[0] = kl_build_emit(a, e->prim, ins, e->nin, &p, o) < 0 ? -1 : o[0];
  return 0;
}

/* All scatters differentiate to one linear scatter-add: out' = scatter_add(tx * cx, idx, tu * cu)
 * with primal coefficients cx (operand) and cu (updates; zero for dropped out-of-bounds
 * updates, and for `set`, for the updates that lost to a duplicate index). */
static int scatter_tangent(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int y) {
  int x = xs[0], idx = xs[1], u = xs[2], tx = ts[0], tu = ts[2], mode = e->p.scatter.op;
  int axis = (int)e->p.scatter.axis;
  kl_aval xa = *kl_build_aval(a, x), ua = *kl_build_aval(a, u), ia = *kl_build_aval(a, idx);
  kl_params sp = e->p, tp;
  sp.scatter.loc = 0; /* the tangent's scatters are kiln's, not the user's updates */
  kl_params_init(&tp, KL_P_TAKE);
  tp.take.axis = axis;
#define SCAT(m, opnd, upd) (sp.scatter.op = (m), kl_build_op(a, KL_P_SCATTER, (int[]){(opnd), idx, (upd)}, 3, &sp))
#define TAKE(v) kl_build_op(a, KL_P_TAKE, (int[]){(v), idx}, 2, &tp)
  int64_t bd[KL_MAX_RANK];
  for (int k = 0; k < ia.ndim; k++) bd[k] = axis + k;
  int inb_b = kl_build_bin(a, KL_P_LT, idx, kl_build_lit(a, (double)xa.dims[axis], ia.dtype));
  int inb_u = kl_build_broadcast(a, inb_b, ua.dims, ua.ndim, bd);
  int inb = kl_build_convert(a, inb_u, xa.dtype);
  int zx = kl_build_zeros(a, &xa), cx = -1, cu = -1, hitb = -1, winb = -1;
  switch (mode) {
  case KL_SCATTER_ADD: cu = inb; break;
  case KL_SCATTER_SET: {
    int hit = SCAT(KL_SCATTER_SET, zx, kl_build_broadcast(a, lit(a, 1, u), ua.dims, ua.ndim, NULL));
    /* the masks select (not multiply: in reverse mode a 0 coefficient would meet an infinite
     * cotangent, 0 * inf = NaN where JAX's scatter transpose writes zeros; bug, issue 32) */
    hitb = kl_build_bin(a, KL_P_NE, hit, lit(a, 0, x));
    int64_t total = kl_aval_size(&ua);
    int ids = kl_build_reshape(a, kl_build_iota(a, KL_I32, &total, 1, 0), ua.dims, ua.ndim);
    int none = kl_build_broadcast(a, kl_build_lit(a, -1, KL_I32), xa.dims, xa.ndim, NULL);
    winb = kl_build_bin(a, KL_P_EQ, TAKE(SCAT(KL_SCATTER_SET, none, ids)), ids);
    break;
  }
  case KL_SCATTER_MUL: {
    cx = SCAT(KL_SCATTER_MUL, kl_build_broadcast(a, lit(a, 1, x), xa.dims, xa.ndim, NULL), u);
    /* d/du_i = x * prod of the other updates at its position: x itself for a unique index,
     * y / u_i for a duplicated one (not exact when a duplicated update is 0) */
    kl_aval ca = xa; /* counts in the real dtype: complex numbers have no order to compare by */
    if (kl_dtype_is_complex(ca.dtype)) ca.dtype = kl_dtype_real_part(ca.dtype);
    int count = SCAT(KL_SCATTER_ADD, kl_build_zeros(a, &ca), kl_build_convert(a, inb, ca.dtype));
    int dup = kl_build_bin(a, KL_P_GT, TAKE(count), kl_build_lit(a, 1, ca.dtype));
    /* a dropped update's coefficient is 0 by selection, not by multiplying by 0: the operand it
     * would have read (clamped) may be inf or NaN */
    cu = kl_build_select(a, inb_u, kl_build_zeros(a, &ua), kl_build_select(a, dup, TAKE(x), dv(a, TAKE(y), u)));
    break;
  }
  case KL_SCATTER_MIN: case KL_SCATTER_MAX: {
    /* Ties share the tangent evenly (JAX's rule). A position no update reaches keeps its tangent
     * whatever its value (NaN != NaN must not make it 0/0), and a position whose result equals
     * none of its contenders (a NaN won) gets no tangent instead of 0/0. */
    int refs = SCAT(KL_SCATTER_ADD, zx, inb);
    int kept = kl_build_bin(a, KL_P_OR, kl_build_bin(a, KL_P_EQ, x, y), kl_build_bin(a, KL_P_EQ, refs, lit(a, 0, x)));
    int ex = kl_build_convert(a, kept, xa.dtype);
    int eu = mul(a, kl_build_convert(a, kl_build_bin(a, KL_P_EQ, u, TAKE(y)), xa.dtype), inb);
    int cnt = kl_build_bin(a, KL_P_MAX, add(a, ex, SCAT(KL_SCATTER_ADD, zx, eu)), lit(a, 1, x));
    cx = dv(a, ex, cnt);
    cu = dv(a, eu, TAKE(cnt));
    break;
  }
  default: return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiation of scatter mode %d is not supported yet by kiln", mode);
  }
  if (mode == KL_SCATTER_SET) { /* selections, linear in the tangents */
    int tx2 = tx < 0 ? zx : kl_build_select(a, hitb, tx, zx);
    if (tu < 0) return tx2;
    return SCAT(KL_SCATTER_ADD, tx2, kl_build_select(a, winb, kl_build_zeros(a, &ua), tu));
  }
  int tx2 = tx < 0 ? zx : cx < 0 ? tx : mul(a, tx, cx);
  if (tu < 0) return tx2;
  return SCAT(KL_SCATTER_ADD, tx2, mul(a, tu, cu));
#undef SCAT
#undef TAKE
}

static int scatter_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (ts[0] >= 0 || ts[2] >= 0) touts[0] = scatter_tangent(a, e, xs, ts, ys[0]);
  return 0;
}

/* ---- transpose ------------------------------------------------------------------------------- */

static int dynamic_slice_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_build *a = c->a;
  const kl_aval *xa = &c->j->vals[e->ins[i]].aval;
  if (i != 0) return kl_transpose_unsupported(c, e);
  int ins[64];
  if (e->nin + 1 > 64) return kl_transpose_unsupported(c, e);
  ins[0] = kl_build_zeros(a, xa);
  ins[1] = ct;
  for (int k = 1; k < e->nin; k++) ins[k + 1] = kl_tr_prim_of(c, e->ins[k]);
  return kl_build_op(a, KL_P_DYNAMIC_UPDATE_SLICE, ins, e->nin + 1, NULL);
}

static int dynamic_update_slice_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_build *a = c->a;
  kl_params p; /* zeroed; filled with the member of what is emitted */
  memset(&p, 0, sizeof p);
  int ins[64];
  if (e->nin > 64) return kl_transpose_unsupported(c, e);
  if (i == 0) {
    ins[0] = ct;
    ins[1] = kl_build_zeros(a, &c->j->vals[e->ins[1]].aval);
    for (int k = 2; k < e->nin; k++) ins[k] = kl_tr_prim_of(c, e->ins[k]);
    return kl_build_op(a, KL_P_DYNAMIC_UPDATE_SLICE, ins, e->nin, NULL);
  }
  if (i == 1) {
    ins[0] = ct;
    for (int k = 2; k < e->nin; k++) ins[k - 1] = kl_tr_prim_of(c, e->ins[k]);
    kl_aval u = c->j->vals[e->ins[1]].aval;
    p.dynamic_slice.slice_sizes = (kl_ivec){u.dims, u.ndim};
    return kl_build_op(a, KL_P_DYNAMIC_SLICE, ins, e->nin - 1, &p);
  }
  return kl_transpose_unsupported(c, e);
}

/* take: scatter-add back, at the clamped positions take read from. */
static int take_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_build *a = c->a;
  const kl_aval *xa = &c->j->vals[e->ins[i]].aval;
  kl_params p; /* zeroed; filled with the member of what is emitted */
  memset(&p, 0, sizeof p);
  if (i != 0) return kl_transpose_unsupported(c, e);
  int idx = kl_tr_prim_of(c, e->ins[1]);
  kl_dtype it = kl_build_aval(a, idx)->dtype;
  idx = kl_build_bin(a, KL_P_MIN, idx, kl_build_lit(a, (double)(xa->dims[e->p.take.axis] - 1), it));
  int ins[3] = {kl_build_zeros(a, xa), idx, ct};
  p.scatter.axis = e->p.take.axis;
  p.scatter.op = KL_SCATTER_ADD;
  return kl_build_op(a, KL_P_SCATTER, ins, 3, &p);
}

/* scatter-set, linear in (operand, updates) together (a library primitive's tangent rule that writes
 * tangents with .at[].set: equinox's buffers): the operand's cotangent is ct with the written
 * positions cleared; an update's is ct at its position if it is the update that stays there (not
 * dropped out of bounds, not overwritten by a later duplicate). */
static int scatter_set_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct, kl_params *tp) {
  kl_build *a = c->a;
  int idx = kl_tr_prim_of(c, e->ins[1]);
  const kl_aval *ua = &c->j->vals[e->ins[2]].aval, *xa = &c->j->vals[e->ins[0]].aval;
  kl_params sp = e->p;
  sp.scatter.loc = 0;
  if (i == 0) return kl_build_op(a, KL_P_SCATTER, (int[]){ct, idx, kl_build_zeros(a, ua)}, 3, &sp);
  int64_t total = kl_aval_size(ua);
  int ids = kl_build_reshape(a, kl_build_iota(a, KL_I32, &total, 1, 0), ua->dims, ua->ndim);
  int none = kl_build_broadcast(a, kl_build_lit(a, -1, KL_I32), xa->dims, xa->ndim, NULL);
  int stays = kl_build_op(a, KL_P_SCATTER, (int[]){none, idx, ids}, 3, &sp);
  int won = kl_build_bin(a, KL_P_EQ, kl_build_op(a, KL_P_TAKE, (int[]){stays, idx}, 2, tp), ids);
  int got = kl_build_op(a, KL_P_TAKE, (int[]){ct, idx}, 2, tp);
  return kl_build_select(a, won, kl_build_zeros(a, ua), got);
}

/* scatter: the JVP writes only scatter-adds; it masks dropped updates itself. */
static int scatter_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  kl_build *a = c->a;
  kl_params p; /* zeroed; filled with the member of what is emitted */
  memset(&p, 0, sizeof p);
  p.take.axis = e->p.scatter.axis;
  if (i != 1 && e->p.scatter.op == KL_SCATTER_SET) return scatter_set_transpose(c, e, i, ct, &p);
  if (i == 1 || e->p.scatter.op != KL_SCATTER_ADD) return kl_transpose_unsupported(c, e);
  if (i == 0) return ct;
  int ins[2] = {ct, kl_tr_prim_of(c, e->ins[1])};
  return kl_build_op(a, KL_P_TAKE, ins, 2, &p);
}

/* ---- batching -------------------------------------------------------------------------------- */

/* The dtype used for flattened indices over `total` elements, wide enough to hold every value
 * of the user's index dtype `given` too (so no user index wraps around into range). */
static kl_dtype index_dtype(int64_t total, kl_dtype given) {
  int narrow = total <= INT32_MAX && (kl_dtype_kind(given) == KL_KIND_INT ? kl_dtype_size(given) <= 4 : kl_dtype_size(given) <= 2);
  return narrow ? KL_I32 : KL_I64;
}

/* Flat positions, shape (B,)+win, of the window of extents `win` starting at the per-example
 * `starts` (rank-0 each, or (B,) where batched) inside an array of shape (B,)+X laid
 * out row-major; each start is clamped so the window fits, as dynamic_slice does. */
static int window_positions(kl_build *b, const kl_aval *X, const int64_t *win, const int *starts, kl_dtype t) {
  int n = X->ndim;
  int64_t shape[KL_MAX_RANK + 2], zero = 0, stride = kl_aval_size(X);
  shape[0] = b->size;
  memcpy(shape + 1, win, sizeof(int64_t) * (size_t)n);
  int acc = kl_build_bin(b, KL_P_MUL, kl_build_iota(b, t, shape, n + 1, 0), kl_build_ilit(b, stride, t));
  for (int d = 0; d < n; d++) {
    stride /= X->dims[d] ? X->dims[d] : 1;
    int s = kl_build_convert(b, starts[d], t);
    s = kl_build_bin(b, KL_P_MAX, kl_build_bin(b, KL_P_MIN, s, kl_build_ilit(b, X->dims[d] - win[d], t)), kl_build_ilit(b, 0, t));
    int sb = kl_build_broadcast(b, s, shape, n + 1, &zero);
    int pos = kl_build_bin(b, KL_P_ADD, sb, kl_build_iota(b, t, shape, n + 1, d + 1));
    if (stride != 1) pos = kl_build_bin(b, KL_P_MUL, pos, kl_build_ilit(b, stride, t));
    acc = kl_build_bin(b, KL_P_ADD, acc, pos);
  }
  return acc;
}

static int flatten(kl_build *b, int x) {
  int64_t n = kl_aval_size(&b->pg->vals[x].aval);
  return kl_build_reshape_new(b, x, &n, 1);
}

static int any_batched(const char *bs, int from, int to) {
  for (int i = from; i < to; i++)
    if (bs[i]) return 1;
  return 0;
}

/* dynamic_slice(x, *starts) and dynamic_update_slice(x, update, *starts). With unbatched starts
 * the batch axis is sliced whole (start 0); with batched starts every example has its own window,
 * computed as a gather (take) or scatter on the flattened batch. */
static int dynamic_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  int upd = e->prim == KL_P_DYNAMIC_UPDATE_SLICE;
  int first = upd ? 2 : 1;
  kl_aval X = *src_in(r, 0);
  int64_t win[KL_MAX_RANK + 2];
  memcpy(win, upd ? src_in(r, 1)->dims : e->p.dynamic_slice.slice_sizes.v, sizeof(int64_t) * (size_t)X.ndim);
  int x = kl_batch_as_batched(b, r->xs[0], r->bs[0]);
  int u = upd ? kl_batch_as_batched(b, r->xs[1], r->bs[1]) : -1;
  if (!any_batched(r->bs, first, e->nin)) {
    int *ins = kl_malloc(sizeof(int) * ((size_t)e->nin + 1));
    if (!ins) return kl_build_oom(b);
    kl_dtype t = X.ndim ? b->pg->vals[r->xs[first]].aval.dtype : KL_I32;
    ins[0] = x;
    if (upd) ins[1] = u;
    ins[first] = kl_build_ilit(b, 0, t);
    memcpy(ins + first + 1, r->xs + first, sizeof(int) * (size_t)(e->nin - first));
    kl_params p = e->p;
    int64_t v0[KL_MAX_RANK + 2];
    if (!upd) p.dynamic_slice.slice_sizes = kl_batch_shifted(v0, b->size, &e->p.dynamic_slice.slice_sizes, 0);
    r->ys[0] = kl_build_op(b, e->prim, ins, e->nin + 1, &p);
    free(ins);
    return r->ys[0] < 0 ? -1 : 0;
  }
  kl_dtype t = KL_I32;
  for (int i = first; i < e->nin; i++)
    if (index_dtype(b->size * kl_aval_size(&X), b->pg->vals[r->xs[i]].aval.dtype) == KL_I64) t = KL_I64;
  int pos = window_positions(b, &X, win, r->xs + first, t);
  int flat = flatten(b, x);
  int64_t shape[KL_MAX_RANK + 2];
  shape[0] = b->size;
  memcpy(shape + 1, X.dims, sizeof(int64_t) * (size_t)X.ndim);
  kl_params p;
  kl_params_init(&p, upd ? KL_P_SCATTER : KL_P_TAKE); /* axis 0 */
  if (!upd) {
    int ins[2] = {flat, pos};
    r->ys[0] = kl_build_op(b, KL_P_TAKE, ins, 2, &p);
  } else {
    p.scatter.op = KL_SCATTER_SET;
    p.scatter.loc = e->p.update.loc; /* still the user's update (the copy log names it) */
    int ins[3] = {flat, pos, u};
    r->ys[0] = kl_build_reshape_new(b, kl_build_op(b, KL_P_SCATTER, ins, 3, &p), shape, X.ndim + 1);
  }
  return r->ys[0] < 0 ? -1 : 0;
}

/* For take/scatter with batched indices on a batched operand (B,)+X along axis a: the operand
 * with the batch and axis a merged into one leading axis (B*X_a, pre..., post...), and indices
 * into it, shape (B,)+I: b*X_a + idx. Out-of-range indices are clamped first (take), or sent past
 * the end so the scatter drops them (scatter). */
static int merged_operand(kl_build *b, int x, const kl_aval *X, int a) {
  int xt = kl_batch_move_axis(b, x, a + 1, 1);
  int64_t shape[KL_MAX_RANK + 2];
  int k = 0;
  shape[k++] = b->size * X->dims[a];
  for (int i = 0; i < X->ndim; i++)
    if (i != a) shape[k++] = X->dims[i];
  return kl_build_reshape_new(b, xt, shape, k);
}

static int merged_indices(kl_build *b, int idx, const kl_aval *X, int a, int drop_oob) {
  int64_t ext = X->dims[a];
  kl_aval ia = kl_batch_aval(b, idx);
  kl_dtype t = index_dtype(b->size * ext + 1, ia.dtype);
  idx = kl_build_convert(b, idx, t);
  int base = kl_build_bin(b, KL_P_MUL, kl_build_iota(b, t, ia.dims, ia.ndim, 0), kl_build_ilit(b, ext, t));
  if (!drop_oob) {
    idx = kl_build_bin(b, KL_P_MAX, kl_build_bin(b, KL_P_MIN, idx, kl_build_ilit(b, ext > 0 ? ext - 1 : 0, t)), kl_build_ilit(b, 0, t));
    return kl_build_bin(b, KL_P_ADD, base, idx);
  }
  int ok = kl_build_bin(b, KL_P_AND, kl_build_bin(b, KL_P_GE, idx, kl_build_ilit(b, 0, t)), kl_build_bin(b, KL_P_LT, idx, kl_build_ilit(b, ext, t)));
  int sel[3] = {ok, kl_build_ilit(b, b->size * ext, t), kl_build_bin(b, KL_P_ADD, base, idx)};
  return kl_build_op(b, KL_P_SELECT_N, sel, 3, NULL);
}

/* Permutation taking (B, A..., C...) with na axes in A and nc in C to (B, C..., A...). */
static int swap_groups(int64_t *perm, int na, int nc) {
  int k = 0;
  perm[k++] = 0;
  for (int i = 0; i < nc; i++) perm[k++] = 1 + na + i;
  for (int i = 0; i < na; i++) perm[k++] = 1 + i;
  return k;
}

/* take(x, idx, axis a): result x[:a] + I + x[a+1:]. */
static int take_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_aval X = *src_in(r, 0);
  int m = src_in(r, 1)->ndim, a = (int)e->p.take.axis;
  kl_params p = e->p;
  if (!r->bs[1]) {
    p.take.axis = a + 1;
    r->ys[0] = kl_build_op(b, KL_P_TAKE, r->xs, 2, &p);
  } else if (!r->bs[0]) {
    r->ys[0] = kl_batch_move_axis(b, kl_build_op(b, KL_P_TAKE, r->xs, 2, &p), a, 0);
  } else {
    int xm = merged_operand(b, r->xs[0], &X, a);
    int idx = merged_indices(b, r->xs[1], &X, a, 0);
    p.take.axis = 0;
    int ins[2] = {xm, idx};
    int y = kl_build_op(b, KL_P_TAKE, ins, 2, &p); /* (B, I..., pre..., post...) */
    int64_t perm[KL_MAX_RANK + 2];
    int n = 0;
    perm[n++] = 0;
    for (int i = 0; i < a; i++) perm[n++] = 1 + m + i;
    for (int i = 0; i < m; i++) perm[n++] = 1 + i;
    for (int i = a + 1; i < X.ndim; i++) perm[n++] = m + i;
    r->ys[0] = kl_build_transpose(b, y, perm, n);
  }
  return r->ys[0] < 0 ? -1 : 0;
}

/* scatter(x, idx, updates, axis a, op). */
static int scatter_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_aval X = *src_in(r, 0);
  int m = src_in(r, 1)->ndim, a = (int)e->p.scatter.axis;
  kl_params p = e->p;
  int x = kl_batch_as_batched(b, r->xs[0], r->bs[0]), u = kl_batch_as_batched(b, r->xs[2], r->bs[2]);
  if (!r->bs[1]) {
    p.scatter.axis = a + 1;
    int ins[3] = {x, r->xs[1], u};
    r->ys[0] = kl_build_op(b, KL_P_SCATTER, ins, 3, &p);
    return r->ys[0] < 0 ? -1 : 0;
  }
  int xm = merged_operand(b, x, &X, a);
  int idx = merged_indices(b, r->xs[1], &X, a, 1);
  int64_t perm[KL_MAX_RANK + 2];
  int n = swap_groups(perm, a, m); /* (B, pre, I, post) -> (B, I, pre, post) */
  for (int i = 1 + a + m; i < X.ndim + m; i++) perm[n++] = i;
  int ut = kl_build_transpose(b, u, perm, n);
  p.scatter.axis = 0;
  int ins[3] = {xm, idx, ut};
  int y = kl_build_op(b, KL_P_SCATTER, ins, 3, &p); /* (B*X_a, pre, post) */
  int64_t shape[KL_MAX_RANK + 2];
  int k = 0;
  shape[k++] = b->size;
  shape[k++] = X.dims[a];
  for (int i = 0; i < X.ndim; i++)
    if (i != a) shape[k++] = X.dims[i];
  r->ys[0] = kl_batch_move_axis(b, kl_build_reshape_new(b, y, shape, k), 1, a + 1);
  return r->ys[0] < 0 ? -1 : 0;
}

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_index[] = {
    {KL_P_DYNAMIC_SLICE, gather_jvp, dynamic_slice_transpose, dynamic_batch, NULL, NULL, NULL},
    {KL_P_DYNAMIC_UPDATE_SLICE, dynamic_update_slice_jvp, dynamic_update_slice_transpose, dynamic_batch, NULL, NULL, NULL},
    {KL_P_TAKE, gather_jvp, take_transpose, take_batch, NULL, NULL, NULL},
    {KL_P_SCATTER, scatter_jvp, scatter_transpose, scatter_batch, NULL, NULL, NULL},
    KL_RULES_END};
