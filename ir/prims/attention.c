/* attention.c: the attention family's params and shape rule: fused dot-product attention over
 * JAX's [batch, length, heads, head_dim] layout (python/kiln/nn/attention.py binds it) and its
 * gradient. Keys and values may have fewer heads than queries (grouped-query attention: query
 * head n reads key/value head n / (N / K)). Depends only on ir/. */
#include "prims.h"

const kl_param_field kl_fields_attention[] = {KL_FIELD(attention, scale, FLOAT), KL_FIELD(attention, causal, INT32),
                                              {NULL, 0, 0}};

/* q [B,T,N,H], k and v [B,S,K,H] of one float dtype with N % K == 0: 0, or -1 with the message. */
static int check_qkv(kl_rule_err *e, const char *op, const kl_aval *q, const kl_aval *k, const kl_aval *v) {
  char b1[160], b2[160], b3[160];
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: query, key and value must be [batch, length, heads, head_dim], got %s, %s, %s",
                        op, kl_rule_shape_str(q, b1, sizeof b1), kl_rule_shape_str(k, b2, sizeof b2),
                        kl_rule_shape_str(v, b3, sizeof b3));
  if (q->dtype != k->dtype || q->dtype != v->dtype || !kl_dtype_is_float(q->dtype))
    return kl_rule_fail(e, KL_ERR_TYPE, "%s: query, key and value must share one float dtype, got %s, %s, %s", op,
                        kl_dtype_name(q->dtype), kl_dtype_name(k->dtype), kl_dtype_name(v->dtype));
  if (!kl_rule_same_shape(k, v) || k->dims[0] != q->dims[0] || k->dims[3] != q->dims[3] || k->dims[2] < 1 ||
      q->dims[2] % k->dims[2])
    return kl_rule_fail(e, KL_ERR_VALUE,
                        "%s: key and value must be [batch, length, kv_heads, head_dim] with the query's batch and head_dim "
                        "and kv_heads dividing its heads, got query %s, key %s, value %s",
                        op, kl_rule_shape_str(q, b1, sizeof b1), kl_rule_shape_str(k, b2, sizeof b2),
                        kl_rule_shape_str(v, b3, sizeof b3));
  return 0;
}

int kl_infer_attention(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                       int *nout) {
  (void)p;
  int bwd = prim == KL_P_ATTENTION_BWD;
  const char *op = kl_prim_get(prim)->name;
  char b1[160], b2[160];
  if (nin != (bwd ? 6 : 3))
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: expects %d operands, got %d", op, bwd ? 6 : 3, nin);
  const kl_aval *q = &ins[0], *k = &ins[1], *v = &ins[2];
  if (check_qkv(e, op, q, k, v)) return -1;
  /* the softmax's log-sum-exp per query: float32 [B, N, T] */
  kl_aval lse = {.ndim = 3, .dtype = KL_F32, .dims = {q->dims[0], q->dims[2], q->dims[1]}};
  if (!bwd) {
    outs[0] = *q;
    outs[0].weak = 0;
    outs[1] = lse;
    *nout = 2;
    return 0;
  }
  for (int i = 3; i < 5; i++)
    if (!kl_rule_same_shape(&ins[i], q) || ins[i].dtype != q->dtype)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: the %s must be like the query %s, got %s", op,
                          i == 3 ? "output" : "output's cotangent", kl_rule_shape_str(q, b1, sizeof b1),
                          kl_rule_shape_str(&ins[i], b2, sizeof b2));
  if (!kl_rule_same_shape(&ins[5], &lse) || ins[5].dtype != KL_F32)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: the log-sum-exp must be float32 %s, got %s", op,
                        kl_rule_shape_str(&lse, b1, sizeof b1), kl_rule_shape_str(&ins[5], b2, sizeof b2));
  for (int i = 0; i < 3; i++) {
    outs[i] = ins[i];
    outs[i].weak = 0;
  }
  *nout = 3;
  return 0;
}
