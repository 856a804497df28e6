/* libcall.c: host routines behind library-call steps. Elements are moved generically:
 * floats are computed in double and rounded back to their storage type after every
 * operation (exact IEEE results for f32/f16/bf16 add and multiply), integers in 64 bits
 * with wrap-around on store. */
#include "libcall.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/hostla.h"

/* ---- scalar conversions ---- */

float kl_half_to_float(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
  if (e == 0) {
    if (!m) bits = s;
    else { /* subnormal: normalize */
      int sh = 0;
      while (!(m & 0x400)) { m <<= 1; sh++; }
      m &= 0x3ff;
      bits = s | ((uint32_t)(113 - sh) << 23) | (m << 13);
    }
  } else if (e == 31) bits = s | 0x7f800000u | (m << 13);
  else bits = s | ((e + 112) << 23) | (m << 13);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t kl_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t s = (x >> 16) & 0x8000;
  int32_t e = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  uint32_t m = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
  if (e >= 31) return (uint16_t)(s | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)s;
    m |= 0x800000;
    int sh = 14 - e;
    uint32_t r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(s | r);
  }
  uint32_t r = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return (uint16_t)(s | r);
}

float kl_bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t kl_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

/* ---- generic element access ---- */

static double ldf(kl_dtype t, const void *p, int64_t i) {
  switch (t) {
  case KL_F16: return kl_half_to_float(((const uint16_t *)p)[i]);
  case KL_BF16: return kl_bf16_to_float(((const uint16_t *)p)[i]);
  case KL_F32: return ((const float *)p)[i];
  case KL_F64: return ((const double *)p)[i];
  default: return 0;
  }
}

static void stf(kl_dtype t, void *p, int64_t i, double v) {
  switch (t) {
  case KL_F16: ((uint16_t *)p)[i] = kl_float_to_half((float)v); break;
  case KL_BF16: ((uint16_t *)p)[i] = kl_float_to_bf16((float)v); break;
  case KL_F32: ((float *)p)[i] = (float)v; break;
  case KL_F64: ((double *)p)[i] = v; break;
  default: break;
  }
}

static int64_t ldi(kl_dtype t, const void *p, int64_t i) {
  switch (t) {
  case KL_BOOL: case KL_U8: return ((const uint8_t *)p)[i];
  case KL_I8: return ((const int8_t *)p)[i];
  case KL_I16: return ((const int16_t *)p)[i];
  case KL_U16: return ((const uint16_t *)p)[i];
  case KL_I32: return ((const int32_t *)p)[i];
  case KL_U32: return ((const uint32_t *)p)[i];
  case KL_I64: case KL_U64: return ((const int64_t *)p)[i];
  default: return 0;
  }
}

static void sti(kl_dtype t, void *p, int64_t i, int64_t v) {
  switch (t) {
  case KL_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  case KL_U8: case KL_I8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case KL_I16: case KL_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
  case KL_I32: case KL_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
  case KL_I64: case KL_U64: ((int64_t *)p)[i] = v; break;
  default: break;
  }
}

static int is_uns(kl_dtype t) { return kl_dtype_kind(t) == KL_KIND_UINT || t == KL_BOOL; }

/* Order used by sort, argmax and cummax: floats with NaN above +inf (-0 equal to +0),
 * unsigned and signed integers by value. */
static int cmp_elem(kl_dtype t, const void *p, int64_t i, int64_t j) {
  if (kl_dtype_is_float(t)) {
    double a = ldf(t, p, i), b = ldf(t, p, j);
    int an = isnan(a), bn = isnan(b);
    if (an || bn) return an - bn;
    return (a > b) - (a < b); /* -0 == +0, as JAX and NumPy sort them */
  }
  if (is_uns(t)) {
    uint64_t a = (uint64_t)ldi(t, p, i), b = (uint64_t)ldi(t, p, j);
    if (t == KL_U64 || t == KL_BOOL || t == KL_U8 || t == KL_U16 || t == KL_U32) return (a > b) - (a < b);
  }
  int64_t a = ldi(t, p, i), b = ldi(t, p, j);
  return (a > b) - (a < b);
}

/* ---- contexts ---- */

kl_libcall *kl_libcall_new(const kl_program *pg, const kl_eqn *e) {
  kl_libcall *c = calloc(1, sizeof *c);
  if (!c) abort();
  c->prim = e->prim;
  c->p = e->p;
  for (const kl_param_field *f = kl_prim_get(e->prim)->fields; f && f->name; f++) {
    if (f->kind != KL_PF_IVEC) continue; /* sub-programs stay borrowed */
    kl_ivec *dst = kl_param_ptr(&c->p, f);
    const kl_ivec *src = kl_param_cptr(&e->p, f);
    dst->v = src->n ? malloc(sizeof(int64_t) * (size_t)src->n) : NULL;
    if (src->n) memcpy(dst->v, src->v, sizeof(int64_t) * (size_t)src->n);
  }
  c->nin = e->nin;
  c->nout = e->nout;
  for (int i = 0; i < e->nin && i < 64; i++) c->avals[i] = pg->vals[e->ins[i]].aval;
  for (int i = 0; i < e->nout; i++) c->avals[e->nin + i] = pg->vals[e->outs[i]].aval;
  return c;
}

void kl_libcall_free(kl_libcall *c) {
  if (!c) return;
  for (const kl_param_field *f = kl_prim_get(c->prim)->fields; f && f->name; f++)
    if (f->kind == KL_PF_IVEC) free(((kl_ivec *)kl_param_ptr(&c->p, f))->v);
  free(c);
}

/* Splits shape around axis: outer * n * inner. */
static void split_axis(const kl_aval *a, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= a->dims[i];
  *n = a->dims[axis];
  for (int i = axis + 1; i < a->ndim; i++) *inner *= a->dims[i];
}

/* ---- cumulative ops ---- */

static void run_cumulative(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *a = &c->avals[0];
  kl_dtype t = a->dtype;
  int64_t outer, n, inner;
  split_axis(a, (int)c->p.cumulative.axis, &outer, &n, &inner);
  int rev = c->p.cumulative.reverse != 0, fl = kl_dtype_is_float(t);
  const void *x = ptrs[0];
  void *y = ptrs[1];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t best = -1;
      double facc = 0;
      int64_t iacc = 0;
      for (int64_t s = 0; s < n; s++) {
        int64_t j = rev ? n - 1 - s : s, at = (o * n + j) * inner + in;
        if (c->prim == KL_P_CUMMAX || c->prim == KL_P_CUMMIN) {
          int better = best < 0;
          if (!better) {
            int r = cmp_elem(t, x, at, best);
            better = c->prim == KL_P_CUMMAX ? r > 0 : r < 0;
            if (fl && isnan(ldf(t, x, best))) better = 0; /* NaN sticks */
            if (fl && isnan(ldf(t, x, at))) better = 1;
          }
          if (better) best = at;
          if (fl) stf(t, y, at, ldf(t, x, best));
          else sti(t, y, at, ldi(t, x, best));
          continue;
        }
        if (fl) {
          double v = ldf(t, x, at);
          facc = s == 0 ? v : (c->prim == KL_P_CUMSUM ? facc + v : facc * v);
          stf(t, y, at, facc);
          facc = ldf(t, y, at); /* round to storage precision */
        } else {
          int64_t v = ldi(t, x, at);
          iacc = s == 0 ? v : (c->prim == KL_P_CUMSUM ? (int64_t)((uint64_t)iacc + (uint64_t)v) : (int64_t)((uint64_t)iacc * (uint64_t)v));
          sti(t, y, at, iacc);
          iacc = ldi(t, y, at);
        }
      }
    }
}

/* ---- argmax / argmin over one axis ---- */

static void run_argminmax(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *a = &c->avals[0];
  kl_dtype t = a->dtype;
  int64_t outer, n, inner;
  split_axis(a, (int)c->p.arg.axes.v[0], &outer, &n, &inner);
  kl_dtype it = c->avals[1].dtype;
  int mx = c->prim == KL_P_ARGMAX, fl = kl_dtype_is_float(t);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t best = 0, base = o * n * inner + in;
      for (int64_t j = 1; j < n; j++) {
        int64_t at = base + j * inner, bt = base + best * inner;
        if (fl && isnan(ldf(t, ptrs[0], bt))) break; /* first NaN wins */
        if (fl && isnan(ldf(t, ptrs[0], at))) { best = j; break; }
        int r = cmp_elem(t, ptrs[0], at, bt);
        if (fl && ldf(t, ptrs[0], at) == ldf(t, ptrs[0], bt)) r = 0; /* -0 == +0 */
        if (mx ? r > 0 : r < 0) best = j;
      }
      sti(it, ptrs[1], o * inner + in, best);
    }
}

/* ---- sort: stable merge sort of index rows by the key operands ---- */

typedef struct {
  const kl_libcall *c;
  void *const *ptrs;
  int64_t base, inner;
} sort_ctx;

static int sort_less(const sort_ctx *s, int64_t i, int64_t j) {
  for (int k = 0; k < s->c->p.sort.num_keys; k++) {
    int r = cmp_elem(s->c->avals[k].dtype, s->ptrs[k], s->base + i * s->inner, s->base + j * s->inner);
    if (r) return r < 0;
  }
  return 0;
}

static void merge_sort(const sort_ctx *s, int64_t *v, int64_t *tmp, int64_t n) {
  if (n < 2) return;
  int64_t h = n / 2;
  merge_sort(s, v, tmp, h);
  merge_sort(s, v + h, tmp, n - h);
  int64_t i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = sort_less(s, v[j], v[i]) ? v[j++] : v[i++];
  while (i < h) tmp[k++] = v[i++];
  while (j < n) tmp[k++] = v[j++];
  memcpy(v, tmp, sizeof(int64_t) * (size_t)n);
}

static void run_sort(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *a = &c->avals[0];
  int64_t outer, n, inner;
  split_axis(a, (int)c->p.sort.dimension, &outer, &n, &inner);
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)(n ? n : 1) * 2);
  if (!perm) abort();
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      sort_ctx s = {c, ptrs, o * n * inner + in, inner};
      for (int64_t j = 0; j < n; j++) perm[j] = j;
      merge_sort(&s, perm, perm + n, n);
      for (int k = 0; k < c->nin; k++) {
        size_t es = kl_dtype_size(c->avals[k].dtype);
        const char *src = ptrs[k];
        char *dst = ptrs[c->nin + k];
        for (int64_t j = 0; j < n; j++)
          memcpy(dst + (size_t)(s.base + j * inner) * es, src + (size_t)(s.base + perm[j] * inner) * es, es);
      }
    }
  free(perm);
}

/* ---- data movement: take, scatter, dynamic slices ---- */

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void run_take(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *x = &c->avals[0], *ix = &c->avals[1];
  int64_t outer, n, inner, m = kl_aval_size(ix);
  split_axis(x, (int)c->p.take.axis, &outer, &n, &inner);
  size_t es = kl_dtype_size(x->dtype), row = es * (size_t)inner;
  const char *src = ptrs[0];
  char *dst = ptrs[2];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < m; j++) {
      int64_t k = clamp64(ldi(ix->dtype, ptrs[1], j), 0, n - 1);
      if (is_uns(ix->dtype) && (uint64_t)ldi(ix->dtype, ptrs[1], j) >= (uint64_t)n) k = n - 1;
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
    double a = ldf(t, dst, di), b = ldf(t, src, si), r;
    switch (op) {
    case KL_SCATTER_ADD: r = a + b; break;
    case KL_SCATTER_MUL: r = a * b; break;
    case KL_SCATTER_MIN: r = (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b); break;
    default: r = (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b); break;
    }
    stf(t, dst, di, r);
    return;
  }
  int64_t a = ldi(t, dst, di), b = ldi(t, src, si), r;
  int lt = is_uns(t) ? (uint64_t)a < (uint64_t)b : a < b;
  switch (op) {
  case KL_SCATTER_ADD: r = (int64_t)((uint64_t)a + (uint64_t)b); break;
  case KL_SCATTER_MUL: r = (int64_t)((uint64_t)a * (uint64_t)b); break;
  case KL_SCATTER_MIN: r = lt ? a : b; break;
  default: r = lt ? b : a; break;
  }
  if (t == KL_BOOL && op == KL_SCATTER_ADD) r = a || b;
  if (t == KL_BOOL && op == KL_SCATTER_MUL) r = a && b;
  sti(t, dst, di, r);
}

static void run_scatter(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *x = &c->avals[0], *ix = &c->avals[1];
  int64_t outer, n, inner, m = kl_aval_size(ix);
  split_axis(x, (int)c->p.scatter.axis, &outer, &n, &inner);
  size_t es = kl_dtype_size(x->dtype);
  memcpy(ptrs[3], ptrs[0], es * (size_t)kl_aval_size(x));
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < m; j++) {
      int64_t k = ldi(ix->dtype, ptrs[1], j);
      if (k < 0 || k >= n || (is_uns(ix->dtype) && (uint64_t)k >= (uint64_t)n)) continue; /* dropped */
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
    start[i] = clamp64(ldi(ia->dtype, ptrs[first + i], 0), 0, x->dims[i] - box[i]);
  }
  void *out = ptrs[c->nin];
  if (update) {
    memcpy(out, ptrs[0], es * (size_t)kl_aval_size(x));
    copy_box(es, nd, x->dims, start, box, out, ptrs[1], 0);
  } else {
    copy_box(es, nd, x->dims, start, box, ptrs[0], out, 1);
  }
}

/* ---- dot_general: transpose operands into (batch, m, k) x (batch, k, n) and call gemm ---- */

static void permute_copy(size_t es, const kl_aval *a, const int *perm, const char *src, char *dst) {
  int nd = a->ndim;
  int64_t strides[KL_MAX_RANK], pd[KL_MAX_RANK], idx[KL_MAX_RANK] = {0}, total = kl_aval_size(a);
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; i--) { strides[i] = s; s *= a->dims[i]; }
  for (int i = 0; i < nd; i++) pd[i] = a->dims[perm[i]];
  for (int64_t j = 0; j < total; j++) {
    int64_t off = 0;
    for (int i = 0; i < nd; i++) off += idx[i] * strides[perm[i]];
    memcpy(dst + (size_t)j * es, src + (size_t)off * es, es);
    for (int i = nd - 1; i >= 0; i--) {
      if (++idx[i] < pd[i]) break;
      idx[i] = 0;
    }
  }
}

/* True when permuting a's dims by perm leaves the bytes in place: the dims of size > 1 keep
 * their relative order (size-1 dims can move freely). */
static int is_identity_for(const int *perm, const kl_aval *a) {
  int last = -1;
  for (int i = 0; i < a->ndim; i++) {
    if (a->dims[perm[i]] == 1) continue;
    if (perm[i] < last) return 0;
    last = perm[i];
  }
  return 1;
}

/* Orders side's dims as batch, then `mid` group, then `last` group. */
static void order_dims(const kl_aval *a, const int64_t *batch, int nb, const int64_t *contract, int nc, int contract_last,
                       int *perm, int64_t *free_size, int64_t *contract_size) {
  int k = 0;
  char used[KL_MAX_RANK] = {0};
  for (int i = 0; i < nb; i++) { perm[k++] = (int)batch[i]; used[batch[i]] = 1; }
  for (int i = 0; i < nc; i++) used[contract[i]] = 1;
  *free_size = 1;
  *contract_size = 1;
  for (int i = 0; i < nc; i++) *contract_size *= a->dims[contract[i]];
  if (!contract_last)
    for (int i = 0; i < nc; i++) perm[k++] = (int)contract[i];
  for (int i = 0; i < a->ndim; i++)
    if (!used[i]) { perm[k++] = i; *free_size *= a->dims[i]; }
  if (contract_last)
    for (int i = 0; i < nc; i++) perm[k++] = (int)contract[i];
}

static void convert_array(kl_dtype from, const void *src, kl_dtype to, void *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (kl_dtype_is_float(to)) stf(to, dst, i, kl_dtype_is_float(from) ? ldf(from, src, i) : (is_uns(from) ? (double)(uint64_t)ldi(from, src, i) : (double)ldi(from, src, i)));
    else sti(to, dst, i, kl_dtype_is_float(from) ? (int64_t)ldf(from, src, i) : ldi(from, src, i));
  }
}

int kl_libcall_dot_layout(const kl_libcall *c, int64_t *batch, int64_t *m, int64_t *n, int64_t *k, int *transl,
                          int *transr) {
  const kl_aval *l = &c->avals[0], *r = &c->avals[1], *o = &c->avals[2];
  const kl_params *p = &c->p;
  int lp[KL_MAX_RANK], rp[KL_MAX_RANK];
  int64_t k2;
  if (l->dtype != o->dtype || r->dtype != o->dtype) return 0;
  *batch = 1;
  for (int i = 0; i < p->dot.lhs_batch.n; i++) *batch *= l->dims[p->dot.lhs_batch.v[i]];
  *transl = *transr = 0;
  order_dims(l, p->dot.lhs_batch.v, p->dot.lhs_batch.n, p->dot.lhs_contracting.v, p->dot.lhs_contracting.n, 1, lp, m, k);
  if (!is_identity_for(lp, l)) {
    order_dims(l, p->dot.lhs_batch.v, p->dot.lhs_batch.n, p->dot.lhs_contracting.v, p->dot.lhs_contracting.n, 0, lp, m, k);
    if (!is_identity_for(lp, l)) return 0;
    *transl = 1;
  }
  order_dims(r, p->dot.rhs_batch.v, p->dot.rhs_batch.n, p->dot.rhs_contracting.v, p->dot.rhs_contracting.n, 0, rp, n, &k2);
  if (!is_identity_for(rp, r)) {
    order_dims(r, p->dot.rhs_batch.v, p->dot.rhs_batch.n, p->dot.rhs_contracting.v, p->dot.rhs_contracting.n, 1, rp, n, &k2);
    if (!is_identity_for(rp, r)) return 0;
    *transr = 1;
  }
  return 1;
}

static int run_dot(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  const kl_aval *l = &c->avals[0], *r = &c->avals[1], *o = &c->avals[2];
  const kl_params *p = &c->p;
  int lp[KL_MAX_RANK], rp[KL_MAX_RANK];
  int64_t m, k, n, k2, batch = 1;
  for (int i = 0; i < p->dot.lhs_batch.n; i++) batch *= l->dims[p->dot.lhs_batch.v[i]];
  /* lhs as (batch, m, k); rhs as (batch, k, n) or, transposed, (batch, n, k) */
  order_dims(l, p->dot.lhs_batch.v, p->dot.lhs_batch.n, p->dot.lhs_contracting.v, p->dot.lhs_contracting.n, 1, lp, &m, &k);
  int transl = 0;
  if (!is_identity_for(lp, l)) { /* maybe (batch, k, m) is the identity: use transa */
    int alt[KL_MAX_RANK];
    int64_t mm, kk;
    order_dims(l, p->dot.lhs_batch.v, p->dot.lhs_batch.n, p->dot.lhs_contracting.v, p->dot.lhs_contracting.n, 0, alt, &mm, &kk);
    if (is_identity_for(alt, l)) { memcpy(lp, alt, sizeof alt); transl = 1; }
  }
  order_dims(r, p->dot.rhs_batch.v, p->dot.rhs_batch.n, p->dot.rhs_contracting.v, p->dot.rhs_contracting.n, 0, rp, &n, &k2);
  int transr = 0;
  if (!is_identity_for(rp, r)) {
    int alt[KL_MAX_RANK];
    int64_t nn, kk;
    order_dims(r, p->dot.rhs_batch.v, p->dot.rhs_batch.n, p->dot.rhs_contracting.v, p->dot.rhs_contracting.n, 1, alt, &nn, &kk);
    if (is_identity_for(alt, r)) { memcpy(rp, alt, sizeof alt); transr = 1; }
  }
  kl_dtype t = o->dtype;
  size_t es = kl_dtype_size(t);
  const void *a = ptrs[0], *b = ptrs[1];
  void *ta = NULL, *tb = NULL;
  if (l->dtype != t || !is_identity_for(lp, l)) {
    size_t bytes = es * (size_t)kl_aval_size(l) + 1;
    void *conv = l->dtype != t ? malloc(bytes) : NULL;
    if (conv) convert_array(l->dtype, a, t, conv, kl_aval_size(l));
    if (!is_identity_for(lp, l)) {
      ta = malloc(bytes);
      kl_aval la = *l;
      la.dtype = t;
      permute_copy(es, &la, lp, conv ? conv : a, ta);
      free(conv);
    } else ta = conv;
    a = ta;
  }
  if (r->dtype != t || !is_identity_for(rp, r)) {
    size_t bytes = es * (size_t)kl_aval_size(r) + 1;
    void *conv = r->dtype != t ? malloc(bytes) : NULL;
    if (conv) convert_array(r->dtype, b, t, conv, kl_aval_size(r));
    if (!is_identity_for(rp, r)) {
      tb = malloc(bytes);
      kl_aval ra = *r;
      ra.dtype = t;
      permute_copy(es, &ra, rp, conv ? conv : b, tb);
      free(conv);
    } else tb = conv;
    b = tb;
  }
  int rc = kl_hostla_gemm(t, batch, m, n, k, a, m * k, transl, b, k * n, transr, ptrs[2], err, errlen);
  free(ta);
  free(tb);
  return rc;
}

/* ---- linalg ---- */

static int64_t batch_of(const kl_aval *a, int core) {
  int64_t b = 1;
  for (int i = 0; i < a->ndim - core; i++) b *= a->dims[i];
  return b;
}

static int run_linalg(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  const kl_aval *a = &c->avals[0];
  kl_dtype t = a->dtype;
  int r = a->ndim;
  int64_t batch = batch_of(a, 2), m = a->dims[r - 2], n = a->dims[r - 1];
  void *const *out = ptrs + c->nin;
  switch (c->prim) {
  case KL_P_CHOLESKY: return kl_hostla_cholesky(t, batch, n, ptrs[0], out[0], err, errlen);
  case KL_P_LU: return kl_hostla_lu(t, batch, m, n, ptrs[0], out[0], out[1], out[2], err, errlen);
  case KL_P_QR: return kl_hostla_qr(t, batch, m, n, ptrs[0], out[0], out[1], c->p.qr.full_matrices, err, errlen);
  case KL_P_EIGH: return kl_hostla_eigh(t, batch, n, ptrs[0], out[0], out[1], c->p.eigh.lower, err, errlen);
  case KL_P_SVD:
    if (!c->p.svd.compute_uv) return kl_hostla_svd(t, batch, m, n, ptrs[0], NULL, out[0], NULL, 0, 0, err, errlen);
    return kl_hostla_svd(t, batch, m, n, ptrs[0], out[0], out[1], out[2], c->p.svd.full_matrices, 1, err, errlen);
  case KL_P_TRIANGULAR_SOLVE: {
    const kl_aval *b = &c->avals[1];
    int64_t bm = b->dims[b->ndim - 2], bn = b->dims[b->ndim - 1], s = c->p.triangular_solve.left_side ? bm : bn;
    return kl_hostla_triangular_solve(t, batch_of(b, 2), bm, bn, ptrs[0], s * s, ptrs[1], out[0], c->p.triangular_solve.left_side,
                                      (c->p.triangular_solve.flags & KL_TRSV_LOWER) != 0, (c->p.triangular_solve.flags & KL_TRSV_TRANSPOSE_A) != 0,
                                      (c->p.triangular_solve.flags & KL_TRSV_UNIT_DIAGONAL) != 0, err, errlen);
  }
  default: snprintf(err, errlen, "%s: no library routine", kl_prim_get(c->prim)->name); return -1;
  }
}

int kl_libcall_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_libcall *c = ctx;
  for (int i = 0; i < c->nout; i++) /* nothing to do for empty outputs */
    if (kl_aval_size(&c->avals[c->nin + i]) == 0 && c->nout == 1 && c->prim != KL_P_CUSTOM_VJP_LIN) return 0;
  switch (c->prim) {
  case KL_P_CUMSUM: case KL_P_CUMPROD: case KL_P_CUMMAX: case KL_P_CUMMIN: run_cumulative(c, ptrs); return 0;
  case KL_P_ARGMAX: case KL_P_ARGMIN: run_argminmax(c, ptrs); return 0;
  case KL_P_SORT: run_sort(c, ptrs); return 0;
  case KL_P_TAKE: run_take(c, ptrs); return 0;
  case KL_P_SCATTER: run_scatter(c, ptrs); return 0;
  case KL_P_DYNAMIC_SLICE: run_dynamic_slice(c, ptrs, 0); return 0;
  case KL_P_DYNAMIC_UPDATE_SLICE: run_dynamic_slice(c, ptrs, 1); return 0;
  case KL_P_DOT_GENERAL: return run_dot(c, ptrs, err, errlen);
  case KL_P_CUSTOM_VJP_CALL: /* the outputs are the forward rule's outputs, passed through */
    for (int i = 0; i < c->nout; i++)
      memcpy(ptrs[c->nin + i], ptrs[i], kl_dtype_size(c->avals[i].dtype) * (size_t)kl_aval_size(&c->avals[i]));
    return 0;
  case KL_P_CUSTOM_VJP_LIN:
    snprintf(err, errlen, "forward-mode differentiation (jvp, jacfwd, linearize) of a custom_vjp function is not "
                          "supported (as in JAX); use reverse mode (grad, vjp, jacrev)");
    return -1;
  default: return run_linalg(c, ptrs, err, errlen);
  }
}

/* ---- full-reduction partials ---- */

void kl_reduce_combine(kl_prim reduce, kl_dtype t, void *dst, void *const *parts, int n, int64_t nelem) {
  for (int64_t e = 0; e < nelem; e++) {
    if (kl_dtype_is_float(t)) {
      double acc = ldf(t, parts[0], e);
      for (int i = 1; i < n; i++) {
        double v = ldf(t, parts[i], e);
        switch (reduce) {
        case KL_P_REDUCE_SUM: acc += v; break;
        case KL_P_REDUCE_PROD: acc *= v; break;
        case KL_P_REDUCE_MAX: acc = (isnan(acc) || isnan(v)) ? NAN : (v > acc ? v : acc); break;
        default: acc = (isnan(acc) || isnan(v)) ? NAN : (v < acc ? v : acc); break;
        }
        if (t != KL_F64) { stf(t, dst, e, acc); acc = ldf(t, dst, e); }
      }
      stf(t, dst, e, acc);
      continue;
    }
    int64_t acc = ldi(t, parts[0], e);
    int un = is_uns(t);
    for (int i = 1; i < n; i++) {
      int64_t v = ldi(t, parts[i], e);
      int lt = un ? (uint64_t)v < (uint64_t)acc : v < acc;
      switch (reduce) {
      case KL_P_REDUCE_SUM: acc = (int64_t)((uint64_t)acc + (uint64_t)v); break;
      case KL_P_REDUCE_PROD: acc = (int64_t)((uint64_t)acc * (uint64_t)v); break;
      case KL_P_REDUCE_MAX: acc = lt ? acc : v; break;
      case KL_P_REDUCE_MIN: acc = lt ? v : acc; break;
      case KL_P_REDUCE_AND: acc = acc & v; break;
      default: acc = acc | v; break;
      }
    }
    sti(t, dst, e, acc);
  }
}
