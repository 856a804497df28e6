/* ad_build.c: small builder used by the autodiff passes to write equations with tags. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ad.h"

int kl_ad_fail(kl_ad *a, const char *fmt, ...) {
  if (!a->failed) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->err, a->errlen, fmt, ap);
    va_end(ap);
  }
  a->failed = 1;
  return -1;
}

const kl_aval *kl_ad_aval(kl_ad *a, int v) { return &a->pg->vals[v].aval; }

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
    if (ins[i] < 0) return kl_ad_fail(a, "internal error: %s received a missing operand", kl_prim_get(p)->name);
  kl_params none;
  kl_params_init(&none);
  int nout;
  char kind;
  if (kl_program_add_eqn(a->pg, p, ins, nin, prm ? prm : &none, outs, &nout, a->err, a->errlen, &kind)) {
    a->failed = 1;
    return -1;
  }
  char t = 0;
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
  kl_params_init(&p);
  p.d = (int)t;
  p.f = v;
  p.i1 = (int64_t)v;
  int o[KL_MAX_OUTS];
  return kl_ad_emit(a, KL_P_CONST, NULL, 0, &p, o) < 0 ? -1 : o[0];
}

int kl_ad_zeros(kl_ad *a, const kl_aval *like) {
  kl_aval l = *like;
  int z = kl_ad_lit(a, 0, l.dtype);
  if (z < 0 || l.ndim == 0) return z;
  kl_params p;
  kl_params_init(&p);
  p.v[0] = l.dims;
  p.nv[0] = l.ndim;
  int o[KL_MAX_OUTS];
  return kl_ad_emit(a, KL_P_BROADCAST_IN_DIM, &z, 1, &p, o) < 0 ? -1 : o[0];
}

int kl_ad_add(kl_ad *a, int x, int y) {
  if (x < 0) return y;
  if (y < 0) return x;
  return kl_ad_bin(a, KL_P_ADD, x, y);
}

int kl_ad_sum_to(kl_ad *a, int x, const kl_aval *target) {
  const kl_aval *xa = kl_ad_aval(a, x);
  if (x < 0 || xa->ndim == target->ndim) return x;
  if (target->ndim != 0) return kl_ad_fail(a, "internal error: cannot sum %d-d cotangent to rank %d", xa->ndim, target->ndim);
  kl_params p;
  kl_params_init(&p);
  int64_t axes[KL_MAX_RANK];
  for (int i = 0; i < xa->ndim; i++) axes[i] = i;
  p.v[0] = axes;
  p.nv[0] = xa->ndim;
  int o[KL_MAX_OUTS];
  return kl_ad_emit(a, KL_P_REDUCE_SUM, &x, 1, &p, o) < 0 ? -1 : o[0];
}
