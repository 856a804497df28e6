/* vmap.c: batching of a Program (kiln.vmap). Each value of the source program is either
 * batched (it differs per example) or not; a batched value always carries the batch dimension
 * at axis 0, so every rule below only has to shift its primitive's axis parameters by one and
 * bring unbatched operands up to the batch where the primitive needs matching shapes.
 * Rules are grouped by family in the order of prim.h. Depends only on ir/. */
#include "batching.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Pass state: the program being built and the batch extent. */
typedef struct {
  kl_program *pg; /* the batched program (owned by kl_vmap until returned) */
  int64_t size;   /* batch extent B */
  char *err;      /* caller's message buffer */
  size_t errlen;
  int failed; /* set once; later emits are no-ops returning -1 */
} batcher;

static int bfail(batcher *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bfail(batcher *b, const char *fmt, ...) {
  if (!b->failed) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, b->errlen, fmt, ap);
    va_end(ap);
  }
  b->failed = 1;
  return -1;
}

/* Copy of the aval of new-program value v (copied: emitting may move the value array). */
static kl_aval aval_of(batcher *b, int v) { return b->pg->vals[v].aval; }

/* ---- emitting ---- */

/* Appends one equation; returns its first output (all outputs in outs if given), or -1. */
static int emit(batcher *b, kl_prim p, const int *ins, int nin, const kl_params *prm, int *outs) {
  if (b->failed) return -1;
  for (int i = 0; i < nin; i++)
    if (ins[i] < 0) return bfail(b, "vmap: internal error: %s received a missing operand", kl_prim_get(p)->name);
  kl_params none;
  kl_params_init(&none, p);
  int o[KL_MAX_OUTS], nout;
  char kind;
  if (kl_program_add_eqn(b->pg, p, ins, nin, prm ? prm : &none, o, &nout, b->err, b->errlen, &kind)) {
    b->failed = 1;
    return -1;
  }
  if (outs) memcpy(outs, o, sizeof(int) * (size_t)nout);
  return o[0];
}

static int bin(batcher *b, kl_prim p, int x, int y) {
  int ins[2] = {x, y};
  return emit(b, p, ins, 2, NULL, NULL);
}

static int lit(batcher *b, int64_t v, kl_dtype t) {
  kl_params p;
  kl_params_init(&p, KL_P_CONST);
  p.literal.dtype = (int)t;
  p.literal.value = (double)v;
  p.literal.int_value = v;
  return emit(b, KL_P_CONST, NULL, 0, &p, NULL);
}

static int convert(batcher *b, int x, kl_dtype t) {
  if (x < 0 || aval_of(b, x).dtype == t) return x;
  kl_params p;
  kl_params_init(&p, KL_P_CONVERT);
  p.convert.new_dtype = (int)t;
  return emit(b, KL_P_CONVERT, &x, 1, &p, NULL);
}

static int iota(batcher *b, kl_dtype t, const int64_t *shape, int n, int dim) {
  kl_params p;
  kl_params_init(&p, KL_P_IOTA);
  p.iota.dtype = (int)t;
  p.iota.shape = (kl_ivec){(int64_t *)shape, n};
  p.iota.dimension = dim;
  return emit(b, KL_P_IOTA, NULL, 0, &p, NULL);
}

static int reshape(batcher *b, int x, const int64_t *shape, int n) {
  kl_params p;
  kl_params_init(&p, KL_P_RESHAPE);
  p.reshape.new_sizes = (kl_ivec){(int64_t *)shape, n};
  return emit(b, KL_P_RESHAPE, &x, 1, &p, NULL);
}

static int transpose(batcher *b, int x, const int64_t *perm, int n) {
  int ident = 1;
  for (int i = 0; i < n; i++) ident &= perm[i] == i;
  if (ident || x < 0) return x;
  kl_params p;
  kl_params_init(&p, KL_P_TRANSPOSE);
  p.transpose.permutation = (kl_ivec){(int64_t *)perm, n};
  return emit(b, KL_P_TRANSPOSE, &x, 1, &p, NULL);
}

/* x broadcast to `shape` (rank n); x's axis i lands on axis dims[i]. */
static int broadcast(batcher *b, int x, const int64_t *shape, int n, const int64_t *dims, int nd) {
  kl_params p;
  kl_params_init(&p, KL_P_BROADCAST_IN_DIM);
  p.broadcast.shape = (kl_ivec){(int64_t *)shape, n};
  p.broadcast.broadcast_dimensions = (kl_ivec){(int64_t *)dims, nd};
  return emit(b, KL_P_BROADCAST_IN_DIM, &x, 1, &p, NULL);
}

/* Moves axis `from` of x to position `to`, keeping the other axes in order. */
static int move_axis(batcher *b, int x, int from, int to) {
  if (x < 0 || from == to) return x;
  int n = aval_of(b, x).ndim;
  int64_t perm[KL_MAX_RANK + 2];
  int k = 0;
  for (int i = 0; i < n; i++)
    if (i != from) perm[k++] = i;
  memmove(perm + to + 1, perm + to, sizeof(int64_t) * (size_t)(n - 1 - to));
  perm[to] = from;
  return transpose(b, x, perm, n);
}

/* An unbatched value of shape S as the batched value of shape (B,)+S. */
static int add_batch(batcher *b, int x) {
  if (x < 0) return x;
  kl_aval a = aval_of(b, x);
  if (a.ndim + 1 > KL_MAX_RANK)
    return bfail(b, "vmap: batching a rank-%d value exceeds kiln's maximum rank %d", a.ndim, KL_MAX_RANK);
  int64_t shape[KL_MAX_RANK + 2], dims[KL_MAX_RANK + 2];
  shape[0] = b->size;
  for (int i = 0; i < a.ndim; i++) {
    shape[i + 1] = a.dims[i];
    dims[i] = i + 1;
  }
  return broadcast(b, x, shape, a.ndim + 1, dims, a.ndim);
}

static int as_batched(batcher *b, int x, char is_batched) { return is_batched ? x : add_batch(b, x); }

/* out[0] = first (if first >= 0), then v[i] + add. Returns the length written. */
static kl_ivec shifted(int64_t *out, int64_t first, const kl_ivec *v, int64_t add) {
  int k = 0;
  if (first >= 0) out[k++] = first;
  for (int i = 0; i < v->n; i++) out[k++] = v->v[i] + add;
  return (kl_ivec){out, k};
}

/* ---- rules ---- */

/* What a rule sees: the source equation, its operands in the new program, which of them are
 * batched, and the source avals (the unbatched shapes). A rule writes e->nout batched results. */
typedef struct {
  const kl_eqn *e;
  const kl_program *src;
  int *xs;         /* operands (new program ids); rules may overwrite them */
  const char *bs;  /* per operand: batched */
  int *ys;         /* results */
} rule_args;

static const kl_aval *src_in(const rule_args *r, int i) { return &r->src->vals[r->e->ins[i]].aval; }
static const kl_aval *src_out(const rule_args *r, int i) { return &r->src->vals[r->e->outs[i]].aval; }

/* Elementwise (unary, binary, compare, select, convert): operands share the output's shape except
 * rank-0 ones, which broadcast by themselves. An unbatched rank-0 operand can stay as it is; any
 * other operand must become (B,)+S. */
static int rule_elementwise(batcher *b, rule_args *r) {
  const kl_aval *oa = src_out(r, 0);
  int64_t shape[KL_MAX_RANK + 2], zero = 0;
  if (oa->ndim + 1 > KL_MAX_RANK)
    return bfail(b, "vmap of %s: batching a rank-%d value exceeds kiln's maximum rank %d", kl_prim_get(r->e->prim)->name, oa->ndim, KL_MAX_RANK);
  shape[0] = b->size;
  memcpy(shape + 1, oa->dims, sizeof(int64_t) * (size_t)oa->ndim);
  for (int i = 0; i < r->e->nin; i++) {
    int rank = src_in(r, i)->ndim;
    if (r->bs[i] && rank == 0 && oa->ndim > 0) r->xs[i] = broadcast(b, r->xs[i], shape, oa->ndim + 1, &zero, 1);
    else if (!r->bs[i] && rank > 0) r->xs[i] = add_batch(b, r->xs[i]);
  }
  r->ys[0] = emit(b, r->e->prim, r->xs, r->e->nin, &r->e->p, NULL);
  return r->ys[0] < 0 ? -1 : 0;
}

/* pad with a batched padding value: pad with any scalar, then overwrite the padding positions
 * (found by padding a mask the same way) with the per-example value. */
static int pad_batched_value(batcher *b, rule_args *r, const kl_params *shifted_cfg) {
  const kl_aval *xa = src_in(r, 0), *oa = src_out(r, 0);
  kl_aval x = *xa;
  int filler = lit(b, 0, x.dtype);
  int ins[2] = {as_batched(b, r->xs[0], r->bs[0]), filler};
  int padded = emit(b, KL_P_PAD, ins, 2, shifted_cfg, NULL);
  int inner = lit(b, 0, KL_BOOL);
  int mask_in = x.ndim ? broadcast(b, inner, x.dims, x.ndim, NULL, 0) : inner;
  int mins[2] = {mask_in, lit(b, 1, KL_BOOL)};
  int mask = emit(b, KL_P_PAD, mins, 2, &r->e->p, NULL);
  int64_t shape[KL_MAX_RANK + 2], dims[KL_MAX_RANK + 2], zero = 0;
  shape[0] = b->size;
  for (int i = 0; i < oa->ndim; i++) {
    shape[i + 1] = oa->dims[i];
    dims[i] = i + 1;
  }
  int bmask = broadcast(b, mask, shape, oa->ndim + 1, dims, oa->ndim);
  int bval = broadcast(b, r->xs[1], shape, oa->ndim + 1, &zero, 1);
  int sel[3] = {bmask, padded, bval};
  r->ys[0] = emit(b, KL_P_SELECT_N, sel, 3, NULL, NULL);
  return r->ys[0] < 0 ? -1 : 0;
}

static int rule_shape(batcher *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_params p = e->p;
  int64_t v0[KL_MAX_RANK + 2], v1[KL_MAX_RANK + 2], v2[KL_MAX_RANK + 2];
  int x = r->xs[0];
  switch (e->prim) {
  case KL_P_BROADCAST_IN_DIM:
    p.broadcast.shape = shifted(v0, b->size, &e->p.broadcast.shape, 0);
    p.broadcast.broadcast_dimensions = shifted(v1, 0, &e->p.broadcast.broadcast_dimensions, 1);
    break;
  case KL_P_RESHAPE: p.reshape.new_sizes = shifted(v0, b->size, &e->p.reshape.new_sizes, 0); break;
  case KL_P_TRANSPOSE: p.transpose.permutation = shifted(v0, 0, &e->p.transpose.permutation, 1); break;
  case KL_P_REV: p.rev.dimensions = shifted(v0, -1, &e->p.rev.dimensions, 1); break;
  case KL_P_SLICE:
    p.slice.start_indices = shifted(v0, 0, &e->p.slice.start_indices, 0);
    p.slice.limit_indices = shifted(v1, b->size, &e->p.slice.limit_indices, 0);
    if (e->p.slice.strides.n) p.slice.strides = shifted(v2, 1, &e->p.slice.strides, 0);
    break;
  case KL_P_PAD: {
    p.pad.low = shifted(v0, 0, &e->p.pad.low, 0);
    p.pad.high = shifted(v1, 0, &e->p.pad.high, 0);
    p.pad.interior = shifted(v2, 0, &e->p.pad.interior, 0);
    if (r->bs[1]) return pad_batched_value(b, r, &p);
    int ins[2] = {x, r->xs[1]};
    r->ys[0] = emit(b, KL_P_PAD, ins, 2, &p, NULL);
    return r->ys[0] < 0 ? -1 : 0;
  }
  case KL_P_CONCATENATE:
    for (int i = 0; i < e->nin; i++) r->xs[i] = as_batched(b, r->xs[i], r->bs[i]);
    p.concatenate.dimension = e->p.concatenate.dimension + 1;
    r->ys[0] = emit(b, e->prim, r->xs, e->nin, &p, NULL);
    return r->ys[0] < 0 ? -1 : 0;
  default: return bfail(b, "vmap of %s is not supported yet", kl_prim_get(e->prim)->name);
  }
  r->ys[0] = emit(b, e->prim, &x, 1, &p, NULL);
  return r->ys[0] < 0 ? -1 : 0;
}

/* Reductions and argmax/argmin (axes), cumulative ops and sort (one axis; sort brings every
 * operand to the batch). */
static int rule_axes(batcher *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_params p = e->p;
  int64_t v0[KL_MAX_RANK + 2];
  switch (kl_prim_get(e->prim)->family) {
  case KL_FAM_CUMULATIVE: p.cumulative.axis++; break;
  case KL_FAM_SORT: p.sort.dimension++; break;
  default:
    if (e->prim == KL_P_ARGMAX || e->prim == KL_P_ARGMIN) p.arg.axes = shifted(v0, -1, &e->p.arg.axes, 1);
    else p.reduce.axes = shifted(v0, -1, &e->p.reduce.axes, 1);
  }
  for (int i = 0; i < e->nin; i++) r->xs[i] = as_batched(b, r->xs[i], r->bs[i]);
  return emit(b, e->prim, r->xs, e->nin, &p, r->ys) < 0 ? -1 : 0;
}

/* dot_general: with both operands batched the batch axis becomes a leading batch dimension;
 * with one, it is a free dimension of that side, moved to the front of the result after. */
static int rule_dot(batcher *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_params p = e->p;
  int64_t lc[KL_MAX_RANK + 2], rc[KL_MAX_RANK + 2], lb[KL_MAX_RANK + 2], rb[KL_MAX_RANK + 2];
  int nc = e->p.dot.lhs_contracting.n, nb = e->p.dot.lhs_batch.n;
  int lhs = r->bs[0], rhs = r->bs[1];
  p.dot.lhs_contracting = shifted(lc, -1, &e->p.dot.lhs_contracting, lhs);
  p.dot.rhs_contracting = shifted(rc, -1, &e->p.dot.rhs_contracting, rhs);
  p.dot.lhs_batch = shifted(lb, lhs && rhs ? 0 : -1, &e->p.dot.lhs_batch, lhs);
  p.dot.rhs_batch = shifted(rb, lhs && rhs ? 0 : -1, &e->p.dot.rhs_batch, rhs);
  int y = emit(b, KL_P_DOT_GENERAL, r->xs, 2, &p, NULL);
  int at = 0; /* where the batch axis lands */
  if (lhs && !rhs) at = nb;
  else if (rhs && !lhs) at = nb + (src_in(r, 0)->ndim - nc - nb);
  r->ys[0] = move_axis(b, y, at, 0);
  return r->ys[0] < 0 ? -1 : 0;
}

/* The dtype used for flattened indices over `total` elements, wide enough to hold every value
 * of the user's index dtype `given` too (so no user index wraps around into range). */
static kl_dtype index_dtype(int64_t total, kl_dtype given) {
  int narrow = total <= INT32_MAX && (kl_dtype_kind(given) == KL_KIND_INT ? kl_dtype_size(given) <= 4 : kl_dtype_size(given) <= 2);
  return narrow ? KL_I32 : KL_I64;
}

/* Flat positions, shape (B,)+win, of the window of extents `win` starting at the per-example
 * `starts` (rank-0 each, batched as (B,) where bs says so) inside an array of shape (B,)+X laid
 * out row-major; each start is clamped so the window fits, as dynamic_slice does. */
static int window_positions(batcher *b, const kl_aval *X, const int64_t *win, const int *starts, const char *bs, kl_dtype t) {
  int n = X->ndim;
  int64_t shape[KL_MAX_RANK + 2], zero = 0, stride = kl_aval_size(X);
  shape[0] = b->size;
  memcpy(shape + 1, win, sizeof(int64_t) * (size_t)n);
  int acc = bin(b, KL_P_MUL, iota(b, t, shape, n + 1, 0), lit(b, stride, t));
  for (int d = 0; d < n; d++) {
    stride /= X->dims[d] ? X->dims[d] : 1;
    int s = convert(b, starts[d], t);
    s = bin(b, KL_P_MAX, bin(b, KL_P_MIN, s, lit(b, X->dims[d] - win[d], t)), lit(b, 0, t));
    int sb = broadcast(b, s, shape, n + 1, &zero, bs[d] ? 1 : 0);
    int pos = bin(b, KL_P_ADD, sb, iota(b, t, shape, n + 1, d + 1));
    if (stride != 1) pos = bin(b, KL_P_MUL, pos, lit(b, stride, t));
    acc = bin(b, KL_P_ADD, acc, pos);
  }
  return acc;
}

static int flatten(batcher *b, int x) {
  int64_t n = kl_aval_size(&b->pg->vals[x].aval);
  return reshape(b, x, &n, 1);
}

static int any_batched(const char *bs, int from, int to) {
  for (int i = from; i < to; i++)
    if (bs[i]) return 1;
  return 0;
}

/* dynamic_slice(x, *starts) and dynamic_update_slice(x, update, *starts). With unbatched starts
 * the batch axis is sliced whole (start 0); with batched starts every example has its own window,
 * computed as a gather (take) or scatter on the flattened batch. */
static int rule_dynamic(batcher *b, rule_args *r) {
  const kl_eqn *e = r->e;
  int upd = e->prim == KL_P_DYNAMIC_UPDATE_SLICE;
  int first = upd ? 2 : 1;
  kl_aval X = *src_in(r, 0);
  int64_t win[KL_MAX_RANK + 2];
  memcpy(win, upd ? src_in(r, 1)->dims : e->p.dynamic_slice.slice_sizes.v, sizeof(int64_t) * (size_t)X.ndim);
  int x = as_batched(b, r->xs[0], r->bs[0]);
  int u = upd ? as_batched(b, r->xs[1], r->bs[1]) : -1;
  if (!any_batched(r->bs, first, e->nin)) {
    int *ins = malloc(sizeof(int) * ((size_t)e->nin + 1));
    if (!ins) abort();
    kl_dtype t = X.ndim ? b->pg->vals[r->xs[first]].aval.dtype : KL_I32;
    ins[0] = x;
    if (upd) ins[1] = u;
    ins[first] = lit(b, 0, t);
    memcpy(ins + first + 1, r->xs + first, sizeof(int) * (size_t)(e->nin - first));
    kl_params p = e->p;
    int64_t v0[KL_MAX_RANK + 2];
    if (!upd) p.dynamic_slice.slice_sizes = shifted(v0, b->size, &e->p.dynamic_slice.slice_sizes, 0);
    r->ys[0] = emit(b, e->prim, ins, e->nin + 1, &p, NULL);
    free(ins);
    return r->ys[0] < 0 ? -1 : 0;
  }
  kl_dtype t = KL_I32;
  for (int i = first; i < e->nin; i++)
    if (index_dtype(b->size * kl_aval_size(&X), b->pg->vals[r->xs[i]].aval.dtype) == KL_I64) t = KL_I64;
  int pos = window_positions(b, &X, win, r->xs + first, r->bs + first, t);
  int flat = flatten(b, x);
  int64_t shape[KL_MAX_RANK + 2];
  shape[0] = b->size;
  memcpy(shape + 1, X.dims, sizeof(int64_t) * (size_t)X.ndim);
  kl_params p;
  kl_params_init(&p, upd ? KL_P_SCATTER : KL_P_TAKE); /* axis 0 */
  if (!upd) {
    int ins[2] = {flat, pos};
    r->ys[0] = emit(b, KL_P_TAKE, ins, 2, &p, NULL);
  } else {
    p.scatter.op = KL_SCATTER_SET;
    int ins[3] = {flat, pos, u};
    r->ys[0] = reshape(b, emit(b, KL_P_SCATTER, ins, 3, &p, NULL), shape, X.ndim + 1);
  }
  return r->ys[0] < 0 ? -1 : 0;
}

/* For take/scatter with batched indices on a batched operand (B,)+X along axis a: the operand
 * with the batch and axis a merged into one leading axis (B*X_a, pre..., post...), and indices
 * into it, shape (B,)+I: b*X_a + idx. Out-of-range indices are clamped first (take), or sent past
 * the end so the scatter drops them (scatter). */
static int merged_operand(batcher *b, int x, const kl_aval *X, int a) {
  int xt = move_axis(b, x, a + 1, 1);
  int64_t shape[KL_MAX_RANK + 2];
  int k = 0;
  shape[k++] = b->size * X->dims[a];
  for (int i = 0; i < X->ndim; i++)
    if (i != a) shape[k++] = X->dims[i];
  return reshape(b, xt, shape, k);
}

static int merged_indices(batcher *b, int idx, const kl_aval *X, int a, int drop_oob) {
  int64_t ext = X->dims[a];
  kl_aval ia = aval_of(b, idx);
  kl_dtype t = index_dtype(b->size * ext + 1, ia.dtype);
  idx = convert(b, idx, t);
  int base = bin(b, KL_P_MUL, iota(b, t, ia.dims, ia.ndim, 0), lit(b, ext, t));
  if (!drop_oob) {
    idx = bin(b, KL_P_MAX, bin(b, KL_P_MIN, idx, lit(b, ext > 0 ? ext - 1 : 0, t)), lit(b, 0, t));
    return bin(b, KL_P_ADD, base, idx);
  }
  int ok = bin(b, KL_P_AND, bin(b, KL_P_GE, idx, lit(b, 0, t)), bin(b, KL_P_LT, idx, lit(b, ext, t)));
  int sel[3] = {ok, lit(b, b->size * ext, t), bin(b, KL_P_ADD, base, idx)};
  return emit(b, KL_P_SELECT_N, sel, 3, NULL, NULL);
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
static int rule_take(batcher *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_aval X = *src_in(r, 0);
  int m = src_in(r, 1)->ndim, a = (int)e->p.take.axis;
  kl_params p = e->p;
  if (!r->bs[1]) {
    p.take.axis = a + 1;
    r->ys[0] = emit(b, KL_P_TAKE, r->xs, 2, &p, NULL);
  } else if (!r->bs[0]) {
    r->ys[0] = move_axis(b, emit(b, KL_P_TAKE, r->xs, 2, &p, NULL), a, 0);
  } else {
    int xm = merged_operand(b, r->xs[0], &X, a);
    int idx = merged_indices(b, r->xs[1], &X, a, 0);
    p.take.axis = 0;
    int ins[2] = {xm, idx};
    int y = emit(b, KL_P_TAKE, ins, 2, &p, NULL); /* (B, I..., pre..., post...) */
    int64_t perm[KL_MAX_RANK + 2];
    int n = 0;
    perm[n++] = 0;
    for (int i = 0; i < a; i++) perm[n++] = 1 + m + i;
    for (int i = 0; i < m; i++) perm[n++] = 1 + i;
    for (int i = a + 1; i < X.ndim; i++) perm[n++] = m + i;
    r->ys[0] = transpose(b, y, perm, n);
  }
  return r->ys[0] < 0 ? -1 : 0;
}

/* scatter(x, idx, updates, axis a, op). */
static int rule_scatter(batcher *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_aval X = *src_in(r, 0);
  int m = src_in(r, 1)->ndim, a = (int)e->p.scatter.axis;
  kl_params p = e->p;
  int x = as_batched(b, r->xs[0], r->bs[0]), u = as_batched(b, r->xs[2], r->bs[2]);
  if (!r->bs[1]) {
    p.scatter.axis = a + 1;
    int ins[3] = {x, r->xs[1], u};
    r->ys[0] = emit(b, KL_P_SCATTER, ins, 3, &p, NULL);
    return r->ys[0] < 0 ? -1 : 0;
  }
  int xm = merged_operand(b, x, &X, a);
  int idx = merged_indices(b, r->xs[1], &X, a, 1);
  int64_t perm[KL_MAX_RANK + 2];
  int n = swap_groups(perm, a, m); /* (B, pre, I, post) -> (B, I, pre, post) */
  for (int i = 1 + a + m; i < X.ndim + m; i++) perm[n++] = i;
  int ut = transpose(b, u, perm, n);
  p.scatter.axis = 0;
  int ins[3] = {xm, idx, ut};
  int y = emit(b, KL_P_SCATTER, ins, 3, &p, NULL); /* (B*X_a, pre, post) */
  int64_t shape[KL_MAX_RANK + 2];
  int k = 0;
  shape[k++] = b->size;
  shape[k++] = X.dims[a];
  for (int i = 0; i < X.ndim; i++)
    if (i != a) shape[k++] = X.dims[i];
  r->ys[0] = move_axis(b, reshape(b, y, shape, k), 1, a + 1);
  return r->ys[0] < 0 ? -1 : 0;
}

/* Linear algebra already maps over leading batch dimensions. */
static int rule_linalg(batcher *b, rule_args *r) {
  for (int i = 0; i < r->e->nin; i++) r->xs[i] = as_batched(b, r->xs[i], r->bs[i]);
  return emit(b, r->e->prim, r->xs, r->e->nin, &r->e->p, r->ys) < 0 ? -1 : 0;
}

/* ---- call equations: batched bodies ---- */

/* Batches the body `sub` with input i batched (at axis 0) where in_b[i]; its output i comes back
 * batched where want[i] is 1 and unbatched where it is 0 (summed over the batch if it depended
 * on it: the cotangent of an input shared by all examples). Returns the batched program (owned),
 * or NULL with a message. */
static kl_program *batch_subprog(batcher *b, const kl_program *sub, const char *in_b, const char *want) {
  if (!sub) {
    bfail(b, "vmap: internal error: a call without its body");
    return NULL;
  }
  int *axes = malloc(sizeof(int) * ((size_t)sub->ninputs + 1));
  char *ob = calloc((size_t)sub->noutputs + 1, 1);
  int *outs = malloc(sizeof(int) * ((size_t)sub->noutputs + 1));
  if (!axes || !ob || !outs) abort();
  for (int i = 0; i < sub->ninputs; i++) axes[i] = in_b[i] ? 0 : -1;
  kl_program *nb = kl_vmap(sub, axes, b->size, ob, b->err, b->errlen), *done = NULL;
  if (!nb) b->failed = 1;
  else {
    batcher inner = {.pg = nb, .size = b->size, .err = b->err, .errlen = b->errlen};
    int64_t zero = 0;
    kl_params rs;
    kl_params_init(&rs, KL_P_REDUCE_SUM);
    rs.reduce.axes = (kl_ivec){&zero, 1};
    for (int i = 0; i < nb->noutputs; i++) {
      int o = nb->outputs[i];
      if (want[i] && !ob[i]) o = add_batch(&inner, o);
      else if (!want[i] && ob[i]) o = emit(&inner, KL_P_REDUCE_SUM, &o, 1, &rs, NULL);
      outs[i] = o;
    }
    if (inner.failed) {
      b->failed = 1;
      kl_program_free(nb);
    } else {
      kl_program_set_outputs(nb, outs, nb->noutputs);
      done = nb;
    }
  }
  free(axes);
  free(ob);
  free(outs);
  return done;
}

/* checkpoint, custom_jvp_call, custom_vjp_call: the same call on batched programs. Every result
 * is batched (as the pass expects of an equation with a batched operand); custom_vjp's bwd rule
 * returns cotangents batched like the inputs they belong to. */
static int rule_call(batcher *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_params p = e->p;
  int n = e->nin, nw = 2 * e->nout + n;
  char *want = malloc((size_t)nw + 1), *in_b = malloc((size_t)n * 2 + 1);
  if (!want || !in_b) abort();
  memset(want, 1, (size_t)nw + 1);
  kl_program *made[2] = {NULL, NULL}; /* the batched bodies, owned until the equation holds them */
  switch (e->prim) {
  case KL_P_CHECKPOINT: p.checkpoint.body = made[0] = batch_subprog(b, e->p.checkpoint.body, r->bs, want); break;
  case KL_P_CUSTOM_JVP_CALL: {
    const int64_t *c = e->p.custom_jvp.counts.v;
    int64_t n_x = c[0], n_fc = c[1], n_rc = c[2];
    p.custom_jvp.fun = made[0] = batch_subprog(b, e->p.custom_jvp.fun, r->bs, want); /* (x, fun consts) */
    memcpy(in_b, r->bs, (size_t)n_x);              /* the rule: (x, tangents of x, rule consts) */
    memcpy(in_b + n_x, r->bs, (size_t)n_x);
    memcpy(in_b + 2 * n_x, r->bs + n_x + n_fc, (size_t)n_rc);
    if (!b->failed) p.custom_jvp.jvp = made[1] = batch_subprog(b, e->p.custom_jvp.jvp, in_b, want);
    break;
  }
  default: { /* custom_vjp_call: (outputs, residuals, consts, inputs); bwd: (residuals, cts, consts) */
    const int64_t *c = e->p.custom_vjp.counts.v;
    int64_t n_out = c[0], n_res = c[1], n_c = c[2], n_x = c[3];
    for (int64_t i = 0; i < n_out; i++) r->xs[i] = as_batched(b, r->xs[i], r->bs[i]);
    memcpy(in_b, r->bs + n_out, (size_t)n_res);
    memset(in_b + n_res, 1, (size_t)n_out);
    memcpy(in_b + n_res + n_out, r->bs + n_out + n_res, (size_t)n_c);
    memcpy(want, r->bs + n_out + n_res + n_c, (size_t)n_x);
    p.custom_vjp.bwd = made[0] = batch_subprog(b, e->p.custom_vjp.bwd, in_b, want);
    break;
  }
  }
  free(want);
  free(in_b);
  int rc = b->failed ? -1 : emit(b, e->prim, r->xs, n, &p, r->ys) < 0 ? -1 : 0;
  kl_program_free(made[0]);
  kl_program_free(made[1]);
  return rc;
}

static int batch_rule(batcher *b, rule_args *r) {
  kl_prim p = r->e->prim;
  if (kl_prim_get(p)->family == KL_FAM_SHAPE) return rule_shape(b, r);
  switch (kl_prim_get(p)->form) {
  case KL_FORM_UNARY: case KL_FORM_BINARY: case KL_FORM_COMPARE: case KL_FORM_SELECT: case KL_FORM_CONVERT:
    return rule_elementwise(b, r);
  case KL_FORM_REDUCE: return rule_axes(b, r);
  case KL_FORM_CONST: case KL_FORM_IOTA: break; /* have no operands: never batched */
  case KL_FORM_NONE:
    switch (p) {
    case KL_P_ARGMAX: case KL_P_ARGMIN: case KL_P_CUMSUM: case KL_P_CUMPROD: case KL_P_CUMMAX:
    case KL_P_CUMMIN: case KL_P_SORT:
      return rule_axes(b, r);
    case KL_P_DOT_GENERAL: return rule_dot(b, r);
    case KL_P_DYNAMIC_SLICE: case KL_P_DYNAMIC_UPDATE_SLICE: return rule_dynamic(b, r);
    case KL_P_TAKE: return rule_take(b, r);
    case KL_P_SCATTER: return rule_scatter(b, r);
    case KL_P_CHOLESKY: case KL_P_QR: case KL_P_SVD: case KL_P_EIGH: case KL_P_LU:
    case KL_P_TRIANGULAR_SOLVE:
      return rule_linalg(b, r);
    case KL_P_CHECKPOINT: case KL_P_CUSTOM_JVP_CALL: case KL_P_CUSTOM_VJP_CALL: return rule_call(b, r);
    default: break;
    }
    break;
  }
  return bfail(b, "vmap of %s is not supported yet", kl_prim_get(p)->name);
}

/* ---- the pass ---- */

kl_program *kl_vmap(const kl_program *pg, const int *in_axes, int64_t size, char *out_batched, char *err,
                    size_t errlen) {
  batcher b = {.pg = kl_program_new(), .size = size, .err = err, .errlen = errlen};
  int *vmap_of = malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  char *batched = calloc((size_t)pg->nvals + 1, 1);
  if (!vmap_of || !batched) abort();
  if (size < 0) bfail(&b, "vmap: negative batch size %lld", (long long)size);
  for (int i = 0; i < pg->ninputs && !b.failed; i++) {
    kl_aval a = pg->vals[pg->inputs[i]].aval;
    int ax = in_axes[i];
    if (ax >= 0) {
      if (ax > a.ndim) {
        bfail(&b, "vmap: in_axes entry %d is out of range for input %d of rank %d", ax, i, a.ndim);
        break;
      }
      if (a.ndim + 1 > KL_MAX_RANK) {
        bfail(&b, "vmap: batching a rank-%d input exceeds kiln's maximum rank %d", a.ndim, KL_MAX_RANK);
        break;
      }
      memmove(a.dims + ax + 1, a.dims + ax, sizeof(int64_t) * (size_t)(a.ndim - ax));
      a.dims[ax] = size;
      a.ndim++;
      batched[pg->inputs[i]] = 1;
    }
    vmap_of[pg->inputs[i]] = kl_program_add_input(b.pg, &a);
  }
  /* the batch axis of every batched input goes to the front, once all inputs exist */
  for (int i = 0; i < pg->ninputs && !b.failed; i++)
    if (in_axes[i] > 0) vmap_of[pg->inputs[i]] = move_axis(&b, vmap_of[pg->inputs[i]], in_axes[i], 0);
  int cap = 16;
  int *xs = malloc(sizeof(int) * (size_t)cap);
  char *bs = malloc((size_t)cap);
  if (!xs || !bs) abort();
  for (int k = 0; k < pg->neqns && !b.failed; k++) {
    const kl_eqn *e = &pg->eqns[k];
    if (e->nin > cap) {
      cap = e->nin;
      xs = realloc(xs, sizeof(int) * (size_t)cap);
      bs = realloc(bs, (size_t)cap);
      if (!xs || !bs) abort();
    }
    int any = 0, ys[KL_MAX_OUTS];
    for (int i = 0; i < e->nin; i++) {
      xs[i] = vmap_of[e->ins[i]];
      bs[i] = batched[e->ins[i]];
      any |= bs[i];
    }
    if (!any) { /* the same for every example: copied as it is */
      if (emit(&b, e->prim, xs, e->nin, &e->p, ys) < 0) break;
    } else {
      rule_args r = {.e = e, .src = pg, .xs = xs, .bs = bs, .ys = ys};
      if (batch_rule(&b, &r)) break;
    }
    for (int i = 0; i < e->nout; i++) {
      vmap_of[e->outs[i]] = ys[i];
      batched[e->outs[i]] = (char)any;
    }
  }
  free(xs);
  free(bs);
  if (!b.failed) {
    int *outs = malloc(sizeof(int) * ((size_t)pg->noutputs + 1));
    if (!outs) abort();
    for (int i = 0; i < pg->noutputs; i++) {
      outs[i] = vmap_of[pg->outputs[i]];
      out_batched[i] = batched[pg->outputs[i]];
    }
    kl_program_set_outputs(b.pg, outs, pg->noutputs);
    free(outs);
  }
  free(vmap_of);
  free(batched);
  if (b.failed) {
    kl_program_free(b.pg);
    return NULL;
  }
  return b.pg;
}
