/* callback.c: the transformation rules of the callback family. An effect callback (debug.callback,
 * debug.print) has no tangent; a pure callback is not differentiable (JAX: wrap it in custom_jvp).
 * Batching follows the callback's vmap_method: sequential calls it once per batch element (as JAX
 * calls debug callbacks), expand_dims once with the batch as a leading axis (unbatched operands
 * given a leading 1), broadcast_all once with every operand batched. Depends only on ir/ and
 * transforms/. */
#include <stdlib.h>
#include <string.h>

#include "../../ir/alloc.h"
#include "rules.h"

static int callback_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)xs, (void)ys, (void)touts, (void)ts;
  if (e->p.callback.effect == 1) return 0; /* the primal call is emitted by the driver; nothing to differentiate */
  if (e->p.callback.effect == 2)
    return kl_build_fail(a, KL_ERR_VALUE, "io_callback is not differentiable: define its derivative with "
                         "custom_jvp or custom_vjp around the call (as in JAX)");
  return kl_build_fail(a, KL_ERR_UNSUPPORTED,
                       "pure_callback is not differentiable: define its derivative with custom_jvp or custom_vjp around "
                       "the call (as in JAX)");
}

/* x's batch element i (x batched on axis 0). */
static int element(kl_build *b, int x, int64_t i) {
  kl_aval a = kl_batch_aval(b, x);
  int s = kl_ad_slice_axis(b, x, 0, i, i + 1);
  return kl_build_reshape(b, s, a.dims + 1, a.ndim - 1);
}

/* The results' types with a leading batch axis of b->size. */
static kl_params batched_params(kl_build *b, const kl_params *p, int64_t *ranks, int64_t *dims) {
  kl_params q = *p;
  int at = 0, nd = 0;
  for (int i = 0; i < p->callback.out_ranks.n; i++) {
    ranks[i] = p->callback.out_ranks.v[i] + 1;
    dims[nd++] = b->size;
    for (int d = 0; d < p->callback.out_ranks.v[i]; d++) dims[nd++] = p->callback.out_dims.v[at++];
  }
  q.callback.out_ranks = (kl_ivec){ranks, p->callback.out_ranks.n};
  q.callback.out_dims = (kl_ivec){dims, nd};
  return q;
}

static int callback_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  const kl_params *p = &e->p;
  int nin = e->nin, rc = 0;
  if (p->callback.effect == 2 && p->callback.vmap_method < 0)
    return kl_build_fail(b, KL_ERR_VALUE, "vmap of an ordered io_callback: its calls would run once per batch "
                         "element, which JAX refuses too; pass ordered=False to io_callback");
  if (!p->callback.effect && p->callback.vmap_method < 0)
    return kl_build_fail(b, KL_ERR_UNSUPPORTED, "vmap of pure_callback needs its vmap_method: pass vmap_method="
                         "'sequential', 'expand_dims' or 'broadcast_all' to pure_callback (as in JAX)");
  int *ins = kl_malloc(sizeof(int) * ((size_t)nin + 1));
  if (!ins) return kl_build_oom(b);
  if (p->callback.effect || p->callback.vmap_method == KL_VMAP_SEQUENTIAL) {
    /* one call per element, in order; the results stacked */
    int outs[KL_MAX_OUTS], first = 1;
    int *acc = kl_calloc((size_t)e->nout + 1, sizeof(int));
    if (!acc) {
      free(ins);
      return kl_build_oom(b);
    }
    for (int64_t i = 0; i < b->size && !rc; i++) {
      for (int j = 0; j < nin; j++) ins[j] = r->bs[j] ? element(b, r->xs[j], i) : r->xs[j];
      if (kl_build_emit(b, e->prim, ins, nin, p, outs) < 0) {
        rc = -1;
        break;
      }
      for (int k = 0; k < e->nout; k++) {
        kl_aval oa = kl_batch_aval(b, outs[k]);
        int64_t shape[KL_MAX_RANK + 1];
        shape[0] = 1;
        memcpy(shape + 1, oa.dims, sizeof(int64_t) * (size_t)oa.ndim);
        int one = kl_build_reshape(b, outs[k], shape, oa.ndim + 1);
        if (first) acc[k] = one;
        else {
          kl_params c;
          kl_params_init(&c, KL_P_CONCATENATE);
          c.concatenate.dimension = 0;
          acc[k] = kl_build_op(b, KL_P_CONCATENATE, (int[]){acc[k], one}, 2, &c);
        }
      }
      first = 0;
    }
    for (int k = 0; k < e->nout && !rc; k++) r->ys[k] = acc[k];
    free(acc);
    free(ins);
    return rc || b->failed ? -1 : 0;
  }
  /* one call over the whole batch */
  for (int j = 0; j < nin; j++) {
    if (r->bs[j]) ins[j] = r->xs[j];
    else if (p->callback.vmap_method == KL_VMAP_BROADCAST_ALL) ins[j] = kl_batch_add_batch(b, r->xs[j]);
    else { /* expand_dims: a leading axis of 1 */
      kl_aval a = kl_batch_aval(b, r->xs[j]);
      int64_t shape[KL_MAX_RANK + 1];
      shape[0] = 1;
      memcpy(shape + 1, a.dims, sizeof(int64_t) * (size_t)a.ndim);
      ins[j] = kl_build_reshape(b, r->xs[j], shape, a.ndim + 1);
    }
  }
  int64_t ranks[KL_MAX_OUTS], dims[KL_MAX_OUTS * (KL_MAX_RANK + 1)];
  if (p->callback.out_dims.n + p->callback.out_ranks.n > (int)(sizeof dims / sizeof dims[0])) {
    free(ins);
    return kl_build_fail(b, KL_ERR_VALUE, "vmap of callback: too many result dimensions");
  }
  kl_params q = batched_params(b, p, ranks, dims);
  rc = kl_build_emit(b, e->prim, ins, nin, &q, r->ys) < 0 ? -1 : 0;
  free(ins);
  return rc;
}

const kl_rule_row kl_rules_callback[] = {
    {KL_P_CALLBACK, callback_jvp, NULL, callback_batch, NULL, NULL, NULL},
    KL_RULES_END};
