/* ad_build.c: the compound helpers of the autodiff rules (matrix algebra, padding, slicing,
 * gathering) over the one program builder (build.c). Depends only on ir/ and transforms/build. */
#include <stdint.h>

#include "ad.h"

int kl_ad_sum_to(kl_build *a, int x, const kl_aval *target) {
  if (x < 0) return x;
  int nd = kl_build_aval(a, x)->ndim;
  if (nd == target->ndim) return x;
  if (target->ndim != 0) return kl_build_fail(a, KL_ERR_INTERNAL, "internal error: cannot sum %d-d cotangent to rank %d", nd, target->ndim);
  int64_t axes[KL_MAX_RANK];
  for (int i = 0; i < nd; i++) axes[i] = i;
  return kl_build_reduce_sum(a, x, axes, nd);
}

int kl_ad_broadcast_like(kl_build *a, int x, int like) {
  if (x < 0) return x;
  kl_aval l = *kl_build_aval(a, like);
  if (kl_build_aval(a, x)->ndim == l.ndim) return x;
  return kl_build_broadcast(a, x, l.dims, l.ndim, NULL);
}

int kl_ad_pad_axis(kl_build *a, int x, int fill, int axis, int64_t lo, int64_t hi) {
  if (x < 0) return x;
  int nd = kl_build_aval(a, x)->ndim;
  int64_t l[KL_MAX_RANK] = {0}, h[KL_MAX_RANK] = {0}, in[KL_MAX_RANK] = {0};
  l[axis] = lo;
  h[axis] = hi;
  kl_params p;
  kl_params_init(&p, KL_P_PAD);
  p.pad.low = (kl_ivec){l, nd};
  p.pad.high = (kl_ivec){h, nd};
  p.pad.interior = (kl_ivec){in, nd};
  int ins[2] = {x, fill};
  return kl_build_op(a, KL_P_PAD, ins, 2, &p);
}

int kl_ad_slice_axis(kl_build *a, int x, int axis, int64_t start, int64_t limit) {
  if (x < 0) return x;
  kl_aval xa = *kl_build_aval(a, x);
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
  return kl_build_op(a, KL_P_SLICE, &x, 1, &p);
}

int kl_ad_mT(kl_build *a, int x) {
  if (x < 0) return x;
  int nd = kl_build_aval(a, x)->ndim;
  int64_t perm[KL_MAX_RANK];
  for (int d = 0; d < nd; d++) perm[d] = d;
  perm[nd - 2] = nd - 1;
  perm[nd - 1] = nd - 2;
  return kl_build_transpose(a, x, perm, nd);
}

int kl_ad_matmul(kl_build *a, int x, int y) {
  if (x < 0 || y < 0) return -1;
  int nd = kl_build_aval(a, x)->ndim;
  int64_t lc = nd - 1, rc = nd - 2, batch[KL_MAX_RANK];
  for (int d = 0; d < nd - 2; d++) batch[d] = d;
  kl_params p;
  kl_params_init(&p, KL_P_DOT_GENERAL);
  p.dot.lhs_contracting = (kl_ivec){&lc, 1};
  p.dot.rhs_contracting = (kl_ivec){&rc, 1};
  p.dot.lhs_batch = p.dot.rhs_batch = (kl_ivec){batch, nd - 2};
  p.dot.precision = 2; /* HIGHEST: derivatives keep full precision */
  int ins[2] = {x, y};
  return kl_build_op(a, KL_P_DOT_GENERAL, ins, 2, &p);
}

/* row and column iotas of like's shape (int32) */
static void row_col(kl_build *a, int like, int *row, int *col) {
  kl_aval l = *kl_build_aval(a, like);
  *row = kl_build_iota(a, KL_I32, l.dims, l.ndim, l.ndim - 2);
  *col = kl_build_iota(a, KL_I32, l.dims, l.ndim, l.ndim - 1);
}

int kl_ad_tri(kl_build *a, int like, int lower, int k) {
  int row, col;
  row_col(a, like, &row, &col);
  int shifted = kl_build_bin(a, KL_P_ADD, row, kl_build_lit(a, k, KL_I32));
  int m = lower ? kl_build_bin(a, KL_P_LE, col, shifted) : kl_build_bin(a, KL_P_GE, col, shifted);
  return kl_build_convert(a, m, kl_build_aval(a, like)->dtype);
}

int kl_ad_eye_bool(kl_build *a, int like) {
  int row, col;
  row_col(a, like, &row, &col);
  return kl_build_bin(a, KL_P_EQ, row, col);
}

int kl_ad_diag(kl_build *a, int x) {
  int eye = kl_build_convert(a, kl_ad_eye_bool(a, x), kl_build_aval(a, x)->dtype);
  int64_t last = kl_build_aval(a, x)->ndim - 1;
  return kl_build_reduce_sum(a, kl_build_bin(a, KL_P_MUL, x, eye), &last, 1);
}

int kl_ad_take_along(kl_build *a, int t, int idx, int axis) {
  /* flatten t and gather with flat indices: idx along `axis`, the position itself elsewhere */
  kl_aval ta = *kl_build_aval(a, t);
  int64_t n = kl_aval_size(&ta), stride[KL_MAX_RANK], s = 1;
  kl_dtype it = n > INT32_MAX ? KL_I64 : KL_I32;
  for (int d = ta.ndim - 1; d >= 0; d--) {
    stride[d] = s;
    s *= ta.dims[d];
  }
  int flat = -1;
  for (int d = 0; d < ta.ndim; d++) {
    if (d != axis && ta.dims[d] == 1) continue;
    int coord = d == axis ? kl_build_convert(a, idx, it) : kl_build_iota(a, it, ta.dims, ta.ndim, d);
    int term = stride[d] == 1 ? coord : kl_build_bin(a, KL_P_MUL, coord, kl_build_lit(a, (double)stride[d], it));
    flat = flat < 0 ? term : kl_build_bin(a, KL_P_ADD, flat, term);
  }
  kl_params p;
  kl_params_init(&p, KL_P_TAKE);
  p.take.axis = 0;
  int ins[2] = {kl_build_reshape(a, t, &n, 1), flat};
  return kl_build_op(a, KL_P_TAKE, ins, 2, &p);
}
