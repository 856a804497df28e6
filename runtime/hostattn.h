/* hostattn.h: fused dot-product attention on host memory (the attention family's host routine):
 * softmax(scale * q k^T, masked) v and its gradient, one query row at a time, with no [T, S]
 * matrix, accumulating in float64. The CPU's path for the fused primitive, and the GPU's where
 * cuDNN cannot run an instance. Depends on ir/dtype.h and the C library only. */
#ifndef KL_HOSTATTN_H
#define KL_HOSTATTN_H
#include <stddef.h>
#include <stdint.h>

#include "../ir/dtype.h"

/* The shape of one attention: q [b, t, n, h], k and v [b, s, kv, h] (n a multiple of kv: query
 * head i reads key/value head i / (n / kv)), contiguous row-major; lse float32 [b, n, t]. */
typedef struct {
  int64_t b, t, s, n, kv, h;
  double scale;
  int causal; /* query i sees keys j <= i */
} kl_attn_geom;

/* o = attention(q, k, v) and lse, the log-sum-exp of each query's masked logits (-inf for a query
 * that sees no key; its output row is zeros). Element type t: any float. 0, or nonzero with a
 * message in err. */
int kl_host_attention(kl_dtype t, const kl_attn_geom *g, const void *q, const void *k, const void *v, void *o,
                      float *lse, char *err, size_t errlen);
/* dq, dk, dv given the forward's o and lse and o's cotangent do_. */
int kl_host_attention_bwd(kl_dtype t, const kl_attn_geom *g, const void *q, const void *k, const void *v,
                          const void *o, const void *do_, const float *lse, void *dq, void *dk, void *dv, char *err,
                          size_t errlen);
#endif
