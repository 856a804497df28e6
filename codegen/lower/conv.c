/* conv.c: lowering of the conv family: a library step, kiln's host convolution
 * (runtime/hostconv.h: im2col + BLAS) on the CPU; on the GPU cuDNN (compile_gpu.c;
 * KILN_CUDNN=0 runs the host routine over copies instead). Operands arrive legalized
 * (transforms/rules/conv.c): of the result's dtype, padded evenly. Depends on lower.h only. */
#include "../../runtime/hostconv.h"
#include "lower.h"

int kl_lower_conv_geom(const kl_libcall *c, kl_conv_geom *g, int *kind) {
  const kl_params *p = &c->p;
  int nd = p->conv.window_strides.n;
  /* x (N, S..., C), w (O, K..., I), y (N, S'..., O): which of the avals (inputs, then the output) is which */
  const kl_aval *x, *w, *y;
  if (c->prim == KL_P_CONV) x = &c->avals[0], w = &c->avals[1], y = &c->avals[2], *kind = KL_HOSTCONV_FWD;
  else if (c->prim == KL_P_CONV_BWD_DATA) y = &c->avals[0], w = &c->avals[1], x = &c->avals[2], *kind = KL_HOSTCONV_BWD_DATA;
  else if (c->prim == KL_P_CONV_BWD_FILTER) x = &c->avals[0], y = &c->avals[1], w = &c->avals[2], *kind = KL_HOSTCONV_BWD_FILTER;
  else return -1;
  if (nd < 1 || nd > 3 || c->nin != 2 || c->avals[0].dtype != c->avals[2].dtype || c->avals[1].dtype != c->avals[2].dtype)
    return -1;
  *g = (kl_conv_geom){.nd = nd, .n = x->dims[0], .c = x->dims[nd + 1], .o = w->dims[0], .g = p->conv.feature_group_count};
  for (int i = 0; i < nd; i++) {
    g->in[i] = x->dims[1 + i];
    g->k[i] = w->dims[1 + i];
    g->out[i] = y->dims[1 + i];
    g->stride[i] = p->conv.window_strides.v[i];
    g->lo[i] = p->conv.padding_lo.v[i];
    g->dil[i] = p->conv.rhs_dilation.v[i];
  }
  return 0;
}

static int run_conv(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  kl_conv_geom g;
  int kind;
  if (kl_lower_conv_geom(c, &g, &kind)) return kl_lower_missing(c->prim, "CPU (operands not legalized)", err, errlen);
  return kl_host_conv((kl_hostconv_kind)kind, c->avals[2].dtype, &g, ptrs[0], ptrs[1], ptrs[2], err, errlen);
}

/* Multiply-adds: one per output element, kernel tap and input channel of its group. */
static double conv_flops(const kl_program *pg, const kl_eqn *e) {
  int nd = e->p.conv.window_strides.n;
  const kl_aval *a = &pg->vals[e->ins[0]].aval, *b = &pg->vals[e->ins[1]].aval, *o = &pg->vals[e->outs[0]].aval;
  const kl_aval *w = e->prim == KL_P_CONV_BWD_FILTER ? o : b, *y = e->prim == KL_P_CONV ? o : e->prim == KL_P_CONV_BWD_DATA ? a : b;
  double f = 1;
  for (int i = 0; i < nd + 2; i++) f *= (double)w->dims[i]; /* O, the taps, I */
  for (int i = 0; i < nd + 1; i++) f *= (double)y->dims[i]; /* N and the output positions */
  return f;
}

const kl_lowering kl_lower_conv[] = {
    {KL_P_CONV, .fuses = 0, .cpu_lib = run_conv, .gpu_library = KL_GPU_LIB_CONV, .flops = conv_flops},
    {KL_P_CONV_BWD_DATA, .fuses = 0, .cpu_lib = run_conv, .gpu_library = KL_GPU_LIB_CONV, .flops = conv_flops},
    {KL_P_CONV_BWD_FILTER, .fuses = 0, .cpu_lib = run_conv, .gpu_library = KL_GPU_LIB_CONV, .flops = conv_flops},
};
const int kl_lower_conv_n = sizeof kl_lower_conv / sizeof *kl_lower_conv;
