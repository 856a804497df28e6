/* index.c: lowering of the index family (dynamic_slice, dynamic_update_slice, take, scatter):
 * library steps (host loops on the CPU, gather/scatter kernels on the GPU).
 * Depends on lower.h only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower.h"

/* ---- data movement: take, scatter, dynamic slices ---- */

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void run_take(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *x = &c->avals[0], *ix = &c->avals[1];
  int64_t outer, n, inner, m = kl_aval_size(ix);
  kl_lc_split_axis(x, (int)c->p.take.axis, &outer, &n, &inner);
  size_t es = kl_dtype_size(x->dtype), row = es * (size_t)inner;
  const char *src = ptrs[0];
  char *dst = ptrs[2];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < m; j++) {
      int64_t k = clamp64(kl_lc_ldi(ix->dtype, ptrs[1], j), 0, n - 1);
      if (kl_lc_is_uns(ix->dtype) && (uint64_t)kl_lc_ldi(ix->dtype, ptrs[1], j) >= (uint64_t)n) k = n - 1;
      memcpy(dst + (size_t)(o * m + j) * row, src + (size_t)(o * n + k) * row, row);
    }
}

static void combine_at(kl_dtype t, int op, void *dst, int64_t di, const void *src, int64_t si) {
  if (op == KL_SCATTER_SET) {
    size_t es = kl_dtype_size(t);
    memcpy((char *)dst + (size_t)di * es, (const char *)src + (size_t)si * es, es);
    return;
  }
  if (kl_dtype_is_float(t)) {
    double a = kl_lc_ldf(t, dst, di), b = kl_lc_ldf(t, src, si), r;
    switch (op) {
    case KL_SCATTER_ADD: r = a + b; break;
    case KL_SCATTER_MUL: r = a * b; break;
    case KL_SCATTER_MIN: r = (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b); break;
    default: r = (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b); break;
    }
    kl_lc_stf(t, dst, di, r);
    return;
  }
  int64_t a = kl_lc_ldi(t, dst, di), b = kl_lc_ldi(t, src, si), r;
  int lt = kl_lc_is_uns(t) ? (uint64_t)a < (uint64_t)b : a < b;
  switch (op) {
  case KL_SCATTER_ADD: r = (int64_t)((uint64_t)a + (uint64_t)b); break;
  case KL_SCATTER_MUL: r = (int64_t)((uint64_t)a * (uint64_t)b); break;
  case KL_SCATTER_MIN: r = lt ? a : b; break;
  default: r = lt ? b : a; break;
  }
  if (t == KL_BOOL && op == KL_SCATTER_ADD) r = a || b;
  if (t == KL_BOOL && op == KL_SCATTER_MUL) r = a && b;
  kl_lc_sti(t, dst, di, r);
}

static void run_scatter(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *x = &c->avals[0], *ix = &c->avals[1];
  int64_t outer, n, inner, m = kl_aval_size(ix);
  kl_lc_split_axis(x, (int)c->p.scatter.axis, &outer, &n, &inner);
  size_t es = kl_dtype_size(x->dtype);
  memcpy(ptrs[3], ptrs[0], es * (size_t)kl_aval_size(x));
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < m; j++) {
      int64_t k = kl_lc_ldi(ix->dtype, ptrs[1], j);
      if (k < 0 || k >= n || (kl_lc_is_uns(ix->dtype) && (uint64_t)k >= (uint64_t)n)) continue; /* dropped */
      for (int64_t in = 0; in < inner; in++)
        combine_at(x->dtype, c->p.scatter.op, ptrs[3], (o * n + k) * inner + in, ptrs[2], (o * m + j) * inner + in);
    }
}

/* Copies the box of `box` extents between an array of shape dims at offset start (array
 * side) and a dense box; to_box selects the direction. */
static void copy_box(size_t es, int nd, const int64_t *dims, const int64_t *start, const int64_t *box, char *arr,
                     char *dense, int to_box) {
  int64_t total = 1;
  for (int i = 0; i < nd; i++) total *= box[i];
  if (total == 0) return;
  int64_t rowlen = nd ? box[nd - 1] : 1;
  int64_t idx[KL_MAX_RANK] = {0};
  for (int64_t r = 0; r < total / rowlen; r++) {
    int64_t off = 0;
    for (int i = 0; i < nd; i++) off = off * dims[i] + (start[i] + idx[i]);
    char *ap = arr + (size_t)off * es, *dp = dense + (size_t)(r * rowlen) * es;
    if (to_box) memcpy(dp, ap, es * (size_t)rowlen);
    else memcpy(ap, dp, es * (size_t)rowlen);
    for (int i = nd - 2; i >= 0; i--) {
      if (++idx[i] < box[i]) break;
      idx[i] = 0;
    }
  }
}

static void run_dynamic_slice(const kl_libcall *c, void *const *ptrs, int update) {
  const kl_aval *x = &c->avals[0];
  int nd = x->ndim, first = update ? 2 : 1;
  int64_t start[KL_MAX_RANK], box[KL_MAX_RANK];
  size_t es = kl_dtype_size(x->dtype);
  for (int i = 0; i < nd; i++) {
    box[i] = update ? c->avals[1].dims[i] : c->p.dynamic_slice.slice_sizes.v[i];
    const kl_aval *ia = &c->avals[first + i];
    start[i] = clamp64(kl_lc_ldi(ia->dtype, ptrs[first + i], 0), 0, x->dims[i] - box[i]);
  }
  void *out = ptrs[c->nin];
  if (update) {
    memcpy(out, ptrs[0], es * (size_t)kl_aval_size(x));
    copy_box(es, nd, x->dims, start, box, out, ptrs[1], 0);
  } else {
    copy_box(es, nd, x->dims, start, box, ptrs[0], out, 1);
  }
}

static int cpu_take(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  (void)err, (void)errlen;
  run_take(c, ptrs);
  return 0;
}

static int cpu_scatter(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  (void)err, (void)errlen;
  run_scatter(c, ptrs);
  return 0;
}

static int cpu_dynamic_slice(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  (void)err, (void)errlen;
  run_dynamic_slice(c, ptrs, c->prim == KL_P_DYNAMIC_UPDATE_SLICE);
  return 0;
}

const kl_lowering kl_lower_index[] = {
    {KL_P_DYNAMIC_SLICE, .fuses = 0, .cpu_lib = cpu_dynamic_slice, .gpu_kernel = 1},
    {KL_P_DYNAMIC_UPDATE_SLICE, .fuses = 0, .cpu_lib = cpu_dynamic_slice, .gpu_kernel = 1},
    {KL_P_TAKE, .fuses = 0, .cpu_lib = cpu_take, .gpu_kernel = 1},
    {KL_P_SCATTER, .fuses = 0, .cpu_lib = cpu_scatter, .gpu_kernel = 1},
};
const int kl_lower_index_n = sizeof kl_lower_index / sizeof *kl_lower_index;
