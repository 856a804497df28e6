/* batch_build.c: vmap's own helpers over the one program builder (build.c) (batch_build.h), shared by the driver (vmap.c) and
 * the batching rules of transforms/rules/. Depends only on ir/. */
#include "batch_build.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Moves axis `from` of x to position `to`, keeping the other axes in order. */
int kl_batch_move_axis(kl_build *b, int x, int from, int to) {
  if (x < 0 || from == to) return x;
  int n = kl_batch_aval(b, x).ndim;
  int64_t perm[KL_MAX_RANK + 2];
  int k = 0;
  for (int i = 0; i < n; i++)
    if (i != from) perm[k++] = i;
  memmove(perm + to + 1, perm + to, sizeof(int64_t) * (size_t)(n - 1 - to));
  perm[to] = from;
  return kl_build_transpose(b, x, perm, n);
}

/* An unbatched value of shape S as the batched value of shape (B,)+S. */
int kl_batch_add_batch(kl_build *b, int x) {
  if (x < 0) return x;
  kl_aval a = kl_batch_aval(b, x);
  if (a.ndim + 1 > KL_MAX_RANK)
    return kl_build_fail(b, KL_ERR_VALUE, "vmap: batching a rank-%d value exceeds kiln's maximum rank %d", a.ndim, KL_MAX_RANK);
  int64_t shape[KL_MAX_RANK + 2], dims[KL_MAX_RANK + 2];
  shape[0] = b->size;
  for (int i = 0; i < a.ndim; i++) {
    shape[i + 1] = a.dims[i];
    dims[i] = i + 1;
  }
  return kl_build_broadcast(b, x, shape, a.ndim + 1, dims);
}

int kl_batch_as_batched(kl_build *b, int x, char is_batched) { return is_batched ? x : kl_batch_add_batch(b, x); }

/* out[0] = first (if first >= 0), then v[i] + add. Returns the length written. */
kl_ivec kl_batch_shifted(int64_t *out, int64_t first, const kl_ivec *v, int64_t add) {
  int k = 0;
  if (first >= 0) out[k++] = first;
  for (int i = 0; i < v->n; i++) out[k++] = v->v[i] + add;
  return (kl_ivec){out, k};
}

int kl_batch_all(kl_build *b, rule_args *r, const kl_params *p) {
  for (int i = 0; i < r->e->nin; i++) r->xs[i] = kl_batch_as_batched(b, r->xs[i], r->bs[i]);
  return kl_build_emit(b, r->e->prim, r->xs, r->e->nin, p, r->ys) < 0 ? -1 : 0;
}
