/* build.c: the one program builder (build.h) of jvp, transpose, vmap and simplify: emitting with
 * the first failure kept and optional value tags, and the shorthands every pass uses. Depends
 * only on ir/. */
#include "../ir/alloc.h"
#include "build.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kl_build_fail(kl_build *b, kl_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kl_verror_once(&b->failed, b->err, b->errlen, status, fmt, ap);
  va_end(ap);
  return -1;
}

int kl_build_oom(kl_build *b) {
  if (b->pg) b->pg->oom = 1;
  return kl_build_fail(b, KL_ERR_NOMEM, "%sout of memory", b->who ? b->who : "");
}

const kl_aval *kl_build_aval(kl_build *b, int v) {
  static const kl_aval none; /* after a failure, -1 flows through the helpers harmlessly */
  return v >= 0 && v < b->pg->nvals ? &b->pg->vals[v].aval : &none;
}

void kl_build_set_tag(kl_build *b, int v, char t) {
  if (v >= b->cap) {
    int c = b->cap ? b->cap : 64;
    while (c <= v) c *= 2;
    char *tags = kl_realloc(b->tags, (size_t)c);
    if (!tags) {
      kl_build_oom(b);
      return;
    }
    b->tags = tags;
    memset(b->tags + b->cap, 0, (size_t)(c - b->cap));
    b->cap = c;
  }
  b->tags[v] = t;
}

int kl_build_emit(kl_build *b, kl_prim p, const int *ins, int nin, const kl_params *prm, int *outs) {
  if (b->failed) return -1;
  if (b->pg->oom) return kl_build_oom(b);
  for (int i = 0; i < nin; i++)
    if (ins[i] < 0)
      return kl_build_fail(b, KL_ERR_INTERNAL, "%sinternal error: %s received a missing operand", b->who ? b->who : "",
                           kl_prim_get(p)->name);
  kl_params none;
  kl_params_init(&none, p);
  int o[KL_MAX_OUTS], nout;
  if (kl_program_add_eqn(b->pg, p, ins, nin, prm ? prm : &none, o, &nout, b->err, b->errlen)) {
    b->failed = 1;
    return -1;
  }
  if (outs) memcpy(outs, o, sizeof(int) * (size_t)nout);
  if (b->tagged) {
    char t = b->extra_tag;
    for (int i = 0; i < nin; i++) t |= ins[i] < b->cap ? b->tags[ins[i]] : 0;
    for (int i = 0; i < nout; i++) kl_build_set_tag(b, o[i], t);
  }
  return nout;
}

int kl_build_op(kl_build *b, kl_prim p, const int *ins, int nin, const kl_params *prm) {
  int o[KL_MAX_OUTS];
  return kl_build_emit(b, p, ins, nin, prm, o) < 0 ? -1 : o[0];
}

int kl_build_un(kl_build *b, kl_prim p, int x) { return kl_build_op(b, p, &x, 1, NULL); }

int kl_build_bin(kl_build *b, kl_prim p, int x, int y) {
  int ins[2] = {x, y};
  return kl_build_op(b, p, ins, 2, NULL);
}

static int literal(kl_build *b, double v, int64_t iv, kl_dtype t) {
  kl_params p;
  kl_params_init(&p, KL_P_CONST);
  p.literal.dtype = (int)t;
  p.literal.value = v;
  p.literal.int_value = iv;
  return kl_build_op(b, KL_P_CONST, NULL, 0, &p);
}

int kl_build_lit(kl_build *b, double v, kl_dtype t) {
  return literal(b, v, v == v && v > -9e18 && v < 9e18 ? (int64_t)v : 0, t); /* inf/nan only make sense as floats */
}

int kl_build_ilit(kl_build *b, int64_t v, kl_dtype t) { return literal(b, (double)v, v, t); }

int kl_build_zeros(kl_build *b, const kl_aval *like) {
  kl_aval l = *like;
  int z = kl_build_lit(b, 0, l.dtype);
  if (z < 0 || l.ndim == 0) return z;
  return kl_build_broadcast(b, z, l.dims, l.ndim, NULL);
}

int kl_build_add(kl_build *b, int x, int y) {
  if (x < 0) return y;
  if (y < 0) return x;
  return kl_build_bin(b, KL_P_ADD, x, y);
}

int kl_build_convert(kl_build *b, int x, kl_dtype t) {
  if (x < 0 || kl_build_aval(b, x)->dtype == t) return x;
  kl_params p;
  kl_params_init(&p, KL_P_CONVERT);
  p.convert.new_dtype = (int)t;
  return kl_build_op(b, KL_P_CONVERT, &x, 1, &p);
}

int kl_build_select(kl_build *b, int pred, int on_false, int on_true) {
  int ins[3] = {pred, on_false, on_true};
  return kl_build_op(b, KL_P_SELECT_N, ins, 3, NULL);
}

int kl_build_broadcast(kl_build *b, int x, const int64_t *shape, int n, const int64_t *dims) {
  kl_params p;
  kl_params_init(&p, KL_P_BROADCAST_IN_DIM);
  p.broadcast.shape = (kl_ivec){(int64_t *)shape, n};
  p.broadcast.broadcast_dimensions = (kl_ivec){(int64_t *)dims, x >= 0 ? kl_build_aval(b, x)->ndim : 0};
  return kl_build_op(b, KL_P_BROADCAST_IN_DIM, &x, 1, &p);
}

int kl_build_reshape_new(kl_build *b, int x, const int64_t *shape, int n) {
  kl_params p;
  kl_params_init(&p, KL_P_RESHAPE);
  p.reshape.new_sizes = (kl_ivec){(int64_t *)shape, n};
  return kl_build_op(b, KL_P_RESHAPE, &x, 1, &p);
}

int kl_build_reshape(kl_build *b, int x, const int64_t *shape, int n) {
  const kl_aval *xa = kl_build_aval(b, x);
  int same = xa->ndim == n;
  for (int d = 0; same && d < n; d++) same = xa->dims[d] == shape[d];
  if (x < 0 || same) return x;
  return kl_build_reshape_new(b, x, shape, n);
}

int kl_build_transpose(kl_build *b, int x, const int64_t *perm, int n) {
  int identity = 1;
  for (int d = 0; d < n; d++) identity &= perm[d] == d;
  if (identity || x < 0) return x;
  kl_params p;
  kl_params_init(&p, KL_P_TRANSPOSE);
  p.transpose.permutation = (kl_ivec){(int64_t *)perm, n};
  return kl_build_op(b, KL_P_TRANSPOSE, &x, 1, &p);
}

int kl_build_reduce_sum(kl_build *b, int x, const int64_t *axes, int naxes) {
  kl_params p;
  kl_params_init(&p, KL_P_REDUCE_SUM);
  p.reduce.axes = (kl_ivec){(int64_t *)axes, naxes};
  return kl_build_op(b, KL_P_REDUCE_SUM, &x, 1, &p);
}

int kl_build_iota(kl_build *b, kl_dtype t, const int64_t *shape, int n, int dim) {
  kl_params p;
  kl_params_init(&p, KL_P_IOTA);
  p.iota.dtype = (int)t;
  p.iota.shape = (kl_ivec){(int64_t *)shape, n};
  p.iota.dimension = dim;
  return kl_build_op(b, KL_P_IOTA, NULL, 0, &p);
}
