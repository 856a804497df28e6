/* cudnn_sdpa.h: fused scaled dot-product attention (flash attention), forward and backward, through
 * cuDNN 9's backend graph API (runtime/cudnn_sdpa.c). Half-precision q, k, v in (batch, head, seq,
 * dim) views of any strides whose last one is 1; grouped-query heads; JAX's top-left causal mask.
 * Knows nothing of the IR; reaches the GPU only through runtime/cuda.h. */
#ifndef KL_CUDNN_SDPA_H
#define KL_CUDNN_SDPA_H
#include <stddef.h>
#include <stdint.h>

#include "../ir/dtype.h"

typedef struct {
  int64_t b, hq, hkv, sq, skv, d; /* batch, query heads, key/value heads (hq % hkv == 0: GQA/MQA), lengths, head dim */
  kl_dtype dtype;                 /* KL_BF16 or KL_F16 (q, k, v, o, dO, dQ, dK, dV all this dtype) */
  int causal;                     /* JAX's is_causal: query i sees keys j <= i (top-left aligned) */
  float scale;                    /* logits = scale * q.k */
  /* element strides, in (batch, head, seq, dim) order, of q, k, v and o; dQ/dK/dV/dO use the
   * strides of q/k/v/o. JAX's [B, T, N, H] arrays are strides {T*N*H, H, N*H, 1}. */
  int64_t q_stride[4], k_stride[4], v_stride[4], o_stride[4];
} kl_sdpa_desc;

/* 1 when cuDNN (9.x, a version with the fused SDPA engines) is loaded and the calling thread's GPU
 * can run them (sm80+); else 0 with why. */
int kl_cudnn_sdpa_available(char *why, size_t n);
/* 0 when a forward and a backward plan can be built for d (built and cached now), else -1 with why
 * (cuDNN's own reason where it gives one). Called at compile time to choose this path. */
int kl_cudnn_sdpa_supported(const kl_sdpa_desc *d, char *why, size_t n);
/* o = softmax(scale * q k^T, masked) v; stats[b, hq, sq] float32 = the softmax's log-sum-exp per
 * query row (cuDNN's "Stats" tensor: max + log(sum exp)), contiguous. Queued on kiln's stream (the
 * thread's queue); every pointer is device memory aligned to 16 bytes (kiln's buffers are). 0, or
 * -1 with a message. */
int kl_cudnn_sdpa_fwd(const kl_sdpa_desc *d, const void *q, const void *k, const void *v, void *o, float *stats,
                      char *err, size_t errlen);
/* dq, dk, dv from q, k, v, o, do_ (the cotangent of o) and stats from the forward; the same rules. */
int kl_cudnn_sdpa_bwd(const kl_sdpa_desc *d, const void *q, const void *k, const void *v, const void *o,
                      const void *do_, const float *stats, void *dq, void *dk, void *dv, char *err, size_t errlen);
/* The work-area bytes the forward (bwd 0) or backward (bwd 1) plan of d needs, built if missing (the
 * backward's includes its float32 dQ accumulator and softmax-sum rows); -1 with a message when no
 * plan can be built. The work areas are managed inside for now (kept with each cached plan, as
 * runtime/cudnn.c does); kiln may pass its own temporaries later. */
int64_t kl_cudnn_sdpa_work_bytes(const kl_sdpa_desc *d, int bwd, char *err, size_t errlen);
#endif
