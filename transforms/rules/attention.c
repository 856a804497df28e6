/* attention.c: the transformation rules of the attention family. Differentiation goes through the
 * custom_vjp that python/kiln/nn/attention.py wraps the forward primitive in (its backward is
 * dot_product_attention_bwd), so neither primitive has a JVP rule of its own, as cuDNN's fused
 * attention has none in JAX. Batching folds vmap's axis into the batch dimension every operand
 * and result leads with. Depends only on ir/ and transforms/. */
#include <string.h>

#include "rules.h"

/* x batched at axis 0, (V, B, ...) -> (V * B, ...), or back when `fold` is 0 (with v = V). */
static int fold_batch(kl_build *b, int x, int fold, int64_t v) {
  kl_aval a = kl_batch_aval(b, x);
  int64_t dims[KL_MAX_RANK + 1];
  if (fold) {
    dims[0] = a.dims[0] * a.dims[1];
    memcpy(dims + 1, a.dims + 2, sizeof(int64_t) * (size_t)(a.ndim - 2));
    return kl_build_reshape(b, x, dims, a.ndim - 1);
  }
  dims[0] = v;
  dims[1] = v ? a.dims[0] / v : 0;
  memcpy(dims + 2, a.dims + 1, sizeof(int64_t) * (size_t)(a.ndim - 1));
  return kl_build_reshape(b, x, dims, a.ndim + 1);
}

static int attention_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  int ins[6], outs[3];
  for (int i = 0; i < e->nin; i++) {
    ins[i] = fold_batch(b, kl_batch_as_batched(b, r->xs[i], r->bs[i]), 1, 0);
    if (ins[i] < 0) return -1;
  }
  int n = kl_build_emit(b, e->prim, ins, e->nin, &e->p, outs);
  if (n < 0) return -1;
  for (int i = 0; i < n; i++)
    if ((r->ys[i] = fold_batch(b, outs[i], 0, b->size)) < 0) return -1;
  return 0;
}

const kl_rule_row kl_rules_attention[] = {
    {KL_P_ATTENTION, NULL, NULL, attention_batch, NULL, NULL, NULL},
    {KL_P_ATTENTION_BWD, NULL, NULL, attention_batch, NULL, NULL, NULL},
    KL_RULES_END};
