/* batch_build.c: the emitting helpers of vmap (batch_build.h), shared by the driver (vmap.c) and
 * the batching rules of transforms/rules/. Depends only on ir/. */
#include "batch_build.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kl_batch_fail(batcher *b, kl_status status, const char *fmt, ...) {
  if (!b->failed) {
    va_list ap;
    va_start(ap, fmt);
    kl_verror(b->err, b->errlen, status, fmt, ap);
    va_end(ap);
  }
  b->failed = 1;
  return -1;
}

/* Copy of the aval of new-program value v (copied: emitting may move the value array). */
kl_aval kl_batch_aval(batcher *b, int v) { return b->pg->vals[v].aval; }

/* ---- emitting ---- */

/* Appends one equation; returns its first output (all outputs in outs if given), or -1. */
int kl_batch_emit(batcher *b, kl_prim p, const int *ins, int nin, const kl_params *prm, int *outs) {
  if (b->failed) return -1;
  for (int i = 0; i < nin; i++)
    if (ins[i] < 0) return kl_batch_fail(b, KL_ERR_INTERNAL, "vmap: internal error: %s received a missing operand", kl_prim_get(p)->name);
  kl_params none;
  kl_params_init(&none, p);
  int o[KL_MAX_OUTS], nout;
  if (kl_program_add_eqn(b->pg, p, ins, nin, prm ? prm : &none, o, &nout, b->err, b->errlen)) {
    b->failed = 1;
    return -1;
  }
  if (outs) memcpy(outs, o, sizeof(int) * (size_t)nout);
  return o[0];
}

int kl_batch_bin(batcher *b, kl_prim p, int x, int y) {
  int ins[2] = {x, y};
  return kl_batch_emit(b, p, ins, 2, NULL, NULL);
}

int kl_batch_lit(batcher *b, int64_t v, kl_dtype t) {
  kl_params p;
  kl_params_init(&p, KL_P_CONST);
  p.literal.dtype = (int)t;
  p.literal.value = (double)v;
  p.literal.int_value = v;
  return kl_batch_emit(b, KL_P_CONST, NULL, 0, &p, NULL);
}

int kl_batch_convert(batcher *b, int x, kl_dtype t) {
  if (x < 0 || kl_batch_aval(b, x).dtype == t) return x;
  kl_params p;
  kl_params_init(&p, KL_P_CONVERT);
  p.convert.new_dtype = (int)t;
  return kl_batch_emit(b, KL_P_CONVERT, &x, 1, &p, NULL);
}

int kl_batch_iota(batcher *b, kl_dtype t, const int64_t *shape, int n, int dim) {
  kl_params p;
  kl_params_init(&p, KL_P_IOTA);
  p.iota.dtype = (int)t;
  p.iota.shape = (kl_ivec){(int64_t *)shape, n};
  p.iota.dimension = dim;
  return kl_batch_emit(b, KL_P_IOTA, NULL, 0, &p, NULL);
}

int kl_batch_reshape(batcher *b, int x, const int64_t *shape, int n) {
  kl_params p;
  kl_params_init(&p, KL_P_RESHAPE);
  p.reshape.new_sizes = (kl_ivec){(int64_t *)shape, n};
  return kl_batch_emit(b, KL_P_RESHAPE, &x, 1, &p, NULL);
}

int kl_batch_transpose(batcher *b, int x, const int64_t *perm, int n) {
  int ident = 1;
  for (int i = 0; i < n; i++) ident &= perm[i] == i;
  if (ident || x < 0) return x;
  kl_params p;
  kl_params_init(&p, KL_P_TRANSPOSE);
  p.transpose.permutation = (kl_ivec){(int64_t *)perm, n};
  return kl_batch_emit(b, KL_P_TRANSPOSE, &x, 1, &p, NULL);
}

/* x broadcast to `shape` (rank n); x's axis i lands on axis dims[i]. */
int kl_batch_broadcast(batcher *b, int x, const int64_t *shape, int n, const int64_t *dims, int nd) {
  kl_params p;
  kl_params_init(&p, KL_P_BROADCAST_IN_DIM);
  p.broadcast.shape = (kl_ivec){(int64_t *)shape, n};
  p.broadcast.broadcast_dimensions = (kl_ivec){(int64_t *)dims, nd};
  return kl_batch_emit(b, KL_P_BROADCAST_IN_DIM, &x, 1, &p, NULL);
}

/* Moves axis `from` of x to position `to`, keeping the other axes in order. */
int kl_batch_move_axis(batcher *b, int x, int from, int to) {
  if (x < 0 || from == to) return x;
  int n = kl_batch_aval(b, x).ndim;
  int64_t perm[KL_MAX_RANK + 2];
  int k = 0;
  for (int i = 0; i < n; i++)
    if (i != from) perm[k++] = i;
  memmove(perm + to + 1, perm + to, sizeof(int64_t) * (size_t)(n - 1 - to));
  perm[to] = from;
  return kl_batch_transpose(b, x, perm, n);
}

/* An unbatched value of shape S as the batched value of shape (B,)+S. */
int kl_batch_add_batch(batcher *b, int x) {
  if (x < 0) return x;
  kl_aval a = kl_batch_aval(b, x);
  if (a.ndim + 1 > KL_MAX_RANK)
    return kl_batch_fail(b, KL_ERR_VALUE, "vmap: batching a rank-%d value exceeds kiln's maximum rank %d", a.ndim, KL_MAX_RANK);
  int64_t shape[KL_MAX_RANK + 2], dims[KL_MAX_RANK + 2];
  shape[0] = b->size;
  for (int i = 0; i < a.ndim; i++) {
    shape[i + 1] = a.dims[i];
    dims[i] = i + 1;
  }
  return kl_batch_broadcast(b, x, shape, a.ndim + 1, dims, a.ndim);
}

int kl_batch_as_batched(batcher *b, int x, char is_batched) { return is_batched ? x : kl_batch_add_batch(b, x); }

/* out[0] = first (if first >= 0), then v[i] + add. Returns the length written. */
kl_ivec kl_batch_shifted(int64_t *out, int64_t first, const kl_ivec *v, int64_t add) {
  int k = 0;
  if (first >= 0) out[k++] = first;
  for (int i = 0; i < v->n; i++) out[k++] = v->v[i] + add;
  return (kl_ivec){out, k};
}

int kl_batch_all(batcher *b, rule_args *r, const kl_params *p) {
  for (int i = 0; i < r->e->nin; i++) r->xs[i] = kl_batch_as_batched(b, r->xs[i], r->bs[i]);
  return kl_batch_emit(b, r->e->prim, r->xs, r->e->nin, p, r->ys) < 0 ? -1 : 0;
}
