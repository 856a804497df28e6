/* attention.c: lowering of the attention family: a library step, kiln's host routine
 * (runtime/hostattn.h) on the CPU; on the GPU cuDNN's fused attention (compile_gpu.c), or the
 * host routine over copies where cuDNN cannot run the instance. Depends on lower.h only. */
#include "lower.h"

int kl_lower_attention_geom(const kl_libcall *c, kl_attn_geom *g) {
  if ((c->prim != KL_P_ATTENTION && c->prim != KL_P_ATTENTION_BWD) || c->nin < 3) return -1;
  const kl_aval *q = &c->avals[0], *k = &c->avals[1];
  if (q->ndim != 4 || k->ndim != 4 || k->dims[2] < 1) return -1;
  *g = (kl_attn_geom){.b = q->dims[0], .t = q->dims[1], .n = q->dims[2], .h = q->dims[3], .s = k->dims[1],
                      .kv = k->dims[2], .scale = c->p.attention.scale, .causal = c->p.attention.causal};
  return 0;
}

static int run_attention(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  kl_attn_geom g;
  if (kl_lower_attention_geom(c, &g)) return kl_lower_missing(c->prim, "CPU (not an attention step)", err, errlen);
  kl_dtype t = c->avals[0].dtype;
  if (c->prim == KL_P_ATTENTION) return kl_host_attention(t, &g, ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], err, errlen);
  return kl_host_attention_bwd(t, &g, ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7], ptrs[8],
                               err, errlen);
}

/* Multiply-adds: two products of [t, h] by [h, s] per query head (five for the gradient), halved
 * by a causal mask. */
static double attention_flops(const kl_program *pg, const kl_eqn *e) {
  const kl_aval *q = &pg->vals[e->ins[0]].aval, *k = &pg->vals[e->ins[1]].aval;
  double f = (double)q->dims[0] * (double)q->dims[1] * (double)q->dims[2] * (double)q->dims[3] * (double)k->dims[1];
  return f * (e->prim == KL_P_ATTENTION ? 2 : 5) * (e->p.attention.causal ? 0.5 : 1);
}

const kl_lowering kl_lower_attention[] = {
    {KL_P_ATTENTION, .fuses = 0, .cpu_lib = run_attention, .gpu_library = KL_GPU_LIB_ATTENTION, .flops = attention_flops},
    {KL_P_ATTENTION_BWD, .fuses = 0, .cpu_lib = run_attention, .gpu_library = KL_GPU_LIB_ATTENTION,
     .flops = attention_flops},
};
const int kl_lower_attention_n = sizeof kl_lower_attention / sizeof *kl_lower_attention;
