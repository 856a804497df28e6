/* ad_build.c: small builder used by the autodiff passes to write equations with tags. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ad.h"

int kl_ad_fail(kl_ad *a, kl_status status, const char *fmt, ...) {
  if (!a->failed) {
    va_list ap;
    va_start(ap, fmt);
    kl_verror(a->err, a->errlen, status, fmt, ap);
    va_end(ap);
  }
  a->failed = 1;
  return -1;
}

const kl_aval *kl_ad_aval(kl_ad *a, int v) {
  static const kl_aval none; /* after a failure, -1 flows through the helpers harmlessly */
  return v >= 0 && v < a->pg->nvals ? &a->pg->vals[v].aval : &none;
}

static void set_tag(kl_ad *a, int v, char t) {
  if (v >= a->cap) {
    int c = a->cap ? a->cap : 64;
    while (c <= v) c *= 2;
    a->tangent = realloc(a->tangent, (size_t)c);
    if (!a->tangent) abort();
    memset(a->tangent + a->cap, 0, (size_t)(c - a->cap));
    a->cap = c;
  }
  a->tangent[v] = t;
}

int kl_ad_emit(kl_ad *a, kl_prim p, const int *ins, int nin, const kl_params *prm, int *outs) {
  if (a->failed) return -1;
  for (int i = 0; i < nin; i++)
    if (ins[i] < 0) return kl_ad_fail(a, KL_ERR_INTERNAL, "internal error: %s received a missing operand", kl_prim_get(p)->name);
  kl_params none;
  kl_params_init(&none, p);
  int nout;
  if (kl_program_add_eqn(a->pg, p, ins, nin, prm ? prm : &none, outs, &nout, a->err, a->errlen)) {
    a->failed = 1;
    return -1;
  }
  char t = a->extra_tag;
  for (int i = 0; i < nin; i++) t |= ins[i] < a->cap ? a->tangent[ins[i]] : 0;
  for (int i = 0; i < nout; i++) set_tag(a, outs[i], t);
  return nout;
}

int kl_ad_un(kl_ad *a, kl_prim p, int x) {
  int o[KL_MAX_OUTS];
  return kl_ad_emit(a, p, &x, 1, NULL, o) < 0 ? -1 : o[0];
}

int kl_ad_bin(kl_ad *a, kl_prim p, int x, int y) {
  int ins[2] = {x, y}, o[KL_MAX_OUTS];
  return kl_ad_emit(a, p, ins, 2, NULL, o) < 0 ? -1 : o[0];
}

int kl_ad_lit(kl_ad *a, double v, kl_dtype t) {
  kl_params p;
  kl_params_init(&p, KL_P_CONST);
  p.literal.dtype = (int)t;
  p.literal.value = v;
  p.literal.int_value = v == v && v > -9e18 && v < 9e18 ? (int64_t)v : 0; /* inf/nan only make sense as floats */
  int o[KL_MAX_OUTS];
  return kl_ad_emit(a, KL_P_CONST, NULL, 0, &p, o) < 0 ? -1 : o[0];
}

int kl_ad_zeros(kl_ad *a, const kl_aval *like) {
  kl_aval l = *like;
  int z = kl_ad_lit(a, 0, l.dtype);
  if (z < 0 || l.ndim == 0) return z;
  kl_params p;
  kl_params_init(&p, KL_P_BROADCAST_IN_DIM);
  p.broadcast.shape = (kl_ivec){l.dims, l.ndim};
  int o[KL_MAX_OUTS];
  return kl_ad_emit(a, KL_P_BROADCAST_IN_DIM, &z, 1, &p, o) < 0 ? -1 : o[0];
}

int kl_ad_add(kl_ad *a, int x, int y) {
  if (x < 0) return y;
  if (y < 0) return x;
  return kl_ad_bin(a, KL_P_ADD, x, y);
}

int kl_ad_sum_to(kl_ad *a, int x, const kl_aval *target) {
  if (x < 0) return x;
  int nd = kl_ad_aval(a, x)->ndim;
  if (nd == target->ndim) return x;
  if (target->ndim != 0) return kl_ad_fail(a, KL_ERR_INTERNAL, "internal error: cannot sum %d-d cotangent to rank %d", nd, target->ndim);
  int64_t axes[KL_MAX_RANK];
  for (int i = 0; i < nd; i++) axes[i] = i;
  return kl_ad_reduce_sum(a, x, axes, nd);
}

int kl_ad_op(kl_ad *a, kl_prim p, const int *ins, int nin, const kl_params *prm) {
  int o[KL_MAX_OUTS];
  return kl_ad_emit(a, p, ins, nin, prm, o) < 0 ? -1 : o[0];
}

int kl_ad_convert(kl_ad *a, int x, kl_dtype t) {
  if (x < 0 || kl_ad_aval(a, x)->dtype == t) return x;
  kl_params p;
  kl_params_init(&p, KL_P_CONVERT);
  p.convert.new_dtype = (int)t;
  return kl_ad_op(a, KL_P_CONVERT, &x, 1, &p);
}

int kl_ad_select(kl_ad *a, int pred, int on_false, int on_true) {
  int ins[3] = {pred, on_false, on_true};
  return kl_ad_op(a, KL_P_SELECT_N, ins, 3, NULL);
}

int kl_ad_broadcast(kl_ad *a, int x, const int64_t *shape, int ndim, const int64_t *dims) {
  kl_params p;
  kl_params_init(&p, KL_P_BROADCAST_IN_DIM);
  p.broadcast.shape = (kl_ivec){(int64_t *)shape, ndim};
  p.broadcast.broadcast_dimensions = (kl_ivec){(int64_t *)dims, x >= 0 ? kl_ad_aval(a, x)->ndim : 0};
  return kl_ad_op(a, KL_P_BROADCAST_IN_DIM, &x, 1, &p);
}

int kl_ad_broadcast_like(kl_ad *a, int x, int like) {
  if (x < 0) return x;
  kl_aval l = *kl_ad_aval(a, like);
  if (kl_ad_aval(a, x)->ndim == l.ndim) return x;
  return kl_ad_broadcast(a, x, l.dims, l.ndim, NULL);
}

int kl_ad_reshape(kl_ad *a, int x, const int64_t *shape, int ndim) {
  kl_aval xa = *kl_ad_aval(a, x);
  int same = xa.ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = xa.dims[d] == shape[d];
  if (x < 0 || same) return x;
  kl_params p;
  kl_params_init(&p, KL_P_RESHAPE);
  p.reshape.new_sizes = (kl_ivec){(int64_t *)shape, ndim};
  return kl_ad_op(a, KL_P_RESHAPE, &x, 1, &p);
}

int kl_ad_transpose(kl_ad *a, int x, const int64_t *perm) {
  if (x < 0) return x;
  int nd = kl_ad_aval(a, x)->ndim, identity = 1;
  for (int d = 0; d < nd; d++) identity &= perm[d] == d;
  if (identity) return x;
  kl_params p;
  kl_params_init(&p, KL_P_TRANSPOSE);
  p.transpose.permutation = (kl_ivec){(int64_t *)perm, nd};
  return kl_ad_op(a, KL_P_TRANSPOSE, &x, 1, &p);
}

int kl_ad_reduce_sum(kl_ad *a, int x, const int64_t *axes, int naxes) {
  kl_params p;
  kl_params_init(&p, KL_P_REDUCE_SUM);
  p.reduce.axes = (kl_ivec){(int64_t *)axes, naxes};
  return kl_ad_op(a, KL_P_REDUCE_SUM, &x, 1, &p);
}

int kl_ad_iota(kl_ad *a, kl_dtype t, const int64_t *shape, int ndim, int dim) {
  kl_params p;
  kl_params_init(&p, KL_P_IOTA);
  p.iota.dtype = (int)t;
  p.iota.shape = (kl_ivec){(int64_t *)shape, ndim};
  p.iota.dimension = dim;
  return kl_ad_op(a, KL_P_IOTA, NULL, 0, &p);
}

int kl_ad_pad_axis(kl_ad *a, int x, int fill, int axis, int64_t lo, int64_t hi) {
  if (x < 0) return x;
  int nd = kl_ad_aval(a, x)->ndim;
  int64_t l[KL_MAX_RANK] = {0}, h[KL_MAX_RANK] = {0}, in[KL_MAX_RANK] = {0};
  l[axis] = lo;
  h[axis] = hi;
  kl_params p;
  kl_params_init(&p, KL_P_PAD);
  p.pad.low = (kl_ivec){l, nd};
  p.pad.high = (kl_ivec){h, nd};
  p.pad.interior = (kl_ivec){in, nd};
  int ins[2] = {x, fill};
  return kl_ad_op(a, KL_P_PAD, ins, 2, &p);
}

int kl_ad_slice_axis(kl_ad *a, int x, int axis, int64_t start, int64_t limit) {
  if (x < 0) return x;
  kl_aval xa = *kl_ad_aval(a, x);
  int64_t st[KL_MAX_RANK] = {0}, lim[KL_MAX_RANK], one[KL_MAX_RANK];
  for (int d = 0; d < xa.ndim; d++) {
    lim[d] = xa.dims[d];
    one[d] = 1;
  }
  st[axis] = start;
  lim[axis] = limit;
  kl_params p;
  kl_params_init(&p, KL_P_SLICE);
  p.slice.start_indices = (kl_ivec){st, xa.ndim};
  p.slice.limit_indices = (kl_ivec){lim, xa.ndim};
  p.slice.strides = (kl_ivec){one, xa.ndim};
  return kl_ad_op(a, KL_P_SLICE, &x, 1, &p);
}

int kl_ad_mT(kl_ad *a, int x) {
  if (x < 0) return x;
  int nd = kl_ad_aval(a, x)->ndim;
  int64_t perm[KL_MAX_RANK];
  for (int d = 0; d < nd; d++) perm[d] = d;
  perm[nd - 2] = nd - 1;
  perm[nd - 1] = nd - 2;
  return kl_ad_transpose(a, x, perm);
}

int kl_ad_matmul(kl_ad *a, int x, int y) {
  if (x < 0 || y < 0) return -1;
  int nd = kl_ad_aval(a, x)->ndim;
  int64_t lc = nd - 1, rc = nd - 2, batch[KL_MAX_RANK];
  for (int d = 0; d < nd - 2; d++) batch[d] = d;
  kl_params p;
  kl_params_init(&p, KL_P_DOT_GENERAL);
  p.dot.lhs_contracting = (kl_ivec){&lc, 1};
  p.dot.rhs_contracting = (kl_ivec){&rc, 1};
  p.dot.lhs_batch = p.dot.rhs_batch = (kl_ivec){batch, nd - 2};
  p.dot.precision = 2; /* HIGHEST: derivatives keep full precision */
  int ins[2] = {x, y};
  return kl_ad_op(a, KL_P_DOT_GENERAL, ins, 2, &p);
}

/* row and column iotas of like's shape (int32) */
static void row_col(kl_ad *a, int like, int *row, int *col) {
  kl_aval l = *kl_ad_aval(a, like);
  *row = kl_ad_iota(a, KL_I32, l.dims, l.ndim, l.ndim - 2);
  *col = kl_ad_iota(a, KL_I32, l.dims, l.ndim, l.ndim - 1);
}

int kl_ad_tri(kl_ad *a, int like, int lower, int k) {
  int row, col;
  row_col(a, like, &row, &col);
  int shifted = kl_ad_bin(a, KL_P_ADD, row, kl_ad_lit(a, k, KL_I32));
  int m = lower ? kl_ad_bin(a, KL_P_LE, col, shifted) : kl_ad_bin(a, KL_P_GE, col, shifted);
  return kl_ad_convert(a, m, kl_ad_aval(a, like)->dtype);
}

int kl_ad_eye_bool(kl_ad *a, int like) {
  int row, col;
  row_col(a, like, &row, &col);
  return kl_ad_bin(a, KL_P_EQ, row, col);
}

int kl_ad_diag(kl_ad *a, int x) {
  int eye = kl_ad_convert(a, kl_ad_eye_bool(a, x), kl_ad_aval(a, x)->dtype);
  int64_t last = kl_ad_aval(a, x)->ndim - 1;
  return kl_ad_reduce_sum(a, kl_ad_bin(a, KL_P_MUL, x, eye), &last, 1);
}

int kl_ad_take_along(kl_ad *a, int t, int idx, int axis) {
  /* flatten t and gather with flat indices: idx along `axis`, the position itself elsewhere */
  kl_aval ta = *kl_ad_aval(a, t);
  int64_t n = kl_aval_size(&ta), stride[KL_MAX_RANK], s = 1;
  kl_dtype it = n > INT32_MAX ? KL_I64 : KL_I32;
  for (int d = ta.ndim - 1; d >= 0; d--) {
    stride[d] = s;
    s *= ta.dims[d];
  }
  int flat = -1;
  for (int d = 0; d < ta.ndim; d++) {
    if (d != axis && ta.dims[d] == 1) continue;
    int coord = d == axis ? kl_ad_convert(a, idx, it) : kl_ad_iota(a, it, ta.dims, ta.ndim, d);
    int term = stride[d] == 1 ? coord : kl_ad_bin(a, KL_P_MUL, coord, kl_ad_lit(a, (double)stride[d], it));
    flat = flat < 0 ? term : kl_ad_bin(a, KL_P_ADD, flat, term);
  }
  kl_params p;
  kl_params_init(&p, KL_P_TAKE);
  p.take.axis = 0;
  int ins[2] = {kl_ad_reshape(a, t, &n, 1), flat};
  return kl_ad_op(a, KL_P_TAKE, ins, 2, &p);
}
