/* libcall.c: host routines behind library-call steps. Elements are moved generically:
 * floats are computed in double and rounded back to their storage type after every
 * operation (exact IEEE results for f32/f16/bf16 add and multiply), integers in 64 bits
 * with wrap-around on store. */
#include "libcall.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower/lower.h"
#include "../ir/alloc.h"

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

double kl_lc_ldf(kl_dtype t, const void *p, int64_t i) {
  switch (t) {
  case KL_F16: return kl_half_to_float(((const uint16_t *)p)[i]);
  case KL_BF16: return kl_bf16_to_float(((const uint16_t *)p)[i]);
  case KL_F32: return ((const float *)p)[i];
  case KL_F64: return ((const double *)p)[i];
  default: return 0;
  }
}

void kl_lc_stf(kl_dtype t, void *p, int64_t i, double v) {
  switch (t) {
  case KL_F16: ((uint16_t *)p)[i] = kl_float_to_half((float)v); break;
  case KL_BF16: ((uint16_t *)p)[i] = kl_float_to_bf16((float)v); break;
  case KL_F32: ((float *)p)[i] = (float)v; break;
  case KL_F64: ((double *)p)[i] = v; break;
  default: break;
  }
}

int64_t kl_lc_ldi(kl_dtype t, const void *p, int64_t i) {
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

void kl_lc_sti(kl_dtype t, void *p, int64_t i, int64_t v) {
  switch (t) {
  case KL_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  case KL_U8: case KL_I8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case KL_I16: case KL_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
  case KL_I32: case KL_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
  case KL_I64: case KL_U64: ((int64_t *)p)[i] = v; break;
  default: break;
  }
}

int kl_lc_is_uns(kl_dtype t) { return kl_dtype_kind(t) == KL_KIND_UINT || t == KL_BOOL; }

/* Order used by sort, argmax and cummax: floats with NaN above +inf (-0 equal to +0),
 * unsigned and signed integers by value. */
int kl_lc_cmp_elem(kl_dtype t, const void *p, int64_t i, int64_t j) {
  if (kl_dtype_is_float(t)) {
    double a = kl_lc_ldf(t, p, i), b = kl_lc_ldf(t, p, j);
    int an = isnan(a), bn = isnan(b);
    if (an || bn) return an - bn;
    return (a > b) - (a < b); /* -0 == +0, as JAX and NumPy sort them */
  }
  if (kl_lc_is_uns(t)) {
    uint64_t a = (uint64_t)kl_lc_ldi(t, p, i), b = (uint64_t)kl_lc_ldi(t, p, j);
    if (t == KL_U64 || t == KL_BOOL || t == KL_U8 || t == KL_U16 || t == KL_U32) return (a > b) - (a < b);
  }
  int64_t a = kl_lc_ldi(t, p, i), b = kl_lc_ldi(t, p, j);
  return (a > b) - (a < b);
}

/* ---- contexts ---- */

kl_libcall *kl_libcall_new(const kl_program *pg, const kl_eqn *e) {
  kl_libcall *c = kl_calloc(1, sizeof *c);
  if (!c) return NULL;
  c->prim = e->prim;
  c->p = e->p;
  for (const kl_param_field *f = kl_prim_get(e->prim)->fields; f && f->name; f++)
    if (f->kind == KL_PF_IVEC) ((kl_ivec *)kl_param_ptr(&c->p, f))->v = NULL; /* none owned yet */
  for (const kl_param_field *f = kl_prim_get(e->prim)->fields; f && f->name; f++) {
    if (f->kind != KL_PF_IVEC) continue; /* sub-programs stay borrowed */
    kl_ivec *dst = kl_param_ptr(&c->p, f);
    const kl_ivec *src = kl_param_cptr(&e->p, f);
    if (!src->n) continue;
    dst->v = kl_malloc(sizeof(int64_t) * (size_t)src->n);
    if (!dst->v) {
      kl_libcall_free(c);
      return NULL;
    }
    memcpy(dst->v, src->v, sizeof(int64_t) * (size_t)src->n);
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
void kl_lc_split_axis(const kl_aval *a, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= a->dims[i];
  *n = a->dims[axis];
  for (int i = axis + 1; i < a->ndim; i++) *inner *= a->dims[i];
}

int kl_libcall_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_libcall *c = ctx;
  const kl_lowering *lw = kl_lower_get(c->prim);
  for (int i = 0; i < c->nout; i++) /* nothing to do for empty outputs */
    if (kl_aval_size(&c->avals[c->nin + i]) == 0 && c->nout == 1 && !lw->unsupported) return 0;
  if (!lw->cpu_lib) return kl_lower_missing(c->prim, "CPU library", err, errlen);
  return lw->cpu_lib(c, ptrs, err, errlen);
}

/* ---- full-reduction partials ---- */

void kl_reduce_combine(kl_prim reduce, kl_dtype t, void *dst, void *const *parts, int n, int64_t nelem) {
  const kl_reduce_rule *r = kl_lower_get(reduce)->reduce;
  int fl = kl_dtype_is_float(t);
  if (!r || (fl ? !r->host_f : !r->host_i)) abort(); /* only reductions the dtype rules admit reach here */
  for (int64_t e = 0; e < nelem; e++) {
    if (fl) {
      double acc = kl_lc_ldf(t, parts[0], e);
      for (int i = 1; i < n; i++) {
        acc = r->host_f(acc, kl_lc_ldf(t, parts[i], e));
        if (t != KL_F64) { kl_lc_stf(t, dst, e, acc); acc = kl_lc_ldf(t, dst, e); }
      }
      kl_lc_stf(t, dst, e, acc);
      continue;
    }
    int64_t acc = kl_lc_ldi(t, parts[0], e);
    int un = kl_lc_is_uns(t);
    for (int i = 1; i < n; i++) acc = r->host_i(acc, kl_lc_ldi(t, parts[i], e), un);
    kl_lc_sti(t, dst, e, acc);
  }
}
