/* fft.c: lowering of the fft family: a library step, kiln's host FFT (runtime/hostfft.h) on the
 * CPU; on the GPU cuFFT (compile_gpu.c; KILN_CUFFT=0 runs the host routine instead)
 * or the host routine over copies. Operands arrive packed (transforms/complex.c): complex data is
 * interleaved real [..., 2]. Depends on lower.h only. */
#include "../../runtime/hostfft.h"
#include "lower.h"

int kl_lower_fft_layout(const kl_libcall *c, int *type, int *dbl, int64_t *howmany) {
  const kl_aval *x = &c->avals[0];
  const kl_ivec *n = &c->p.fft.fft_lengths;
  int t = c->p.fft.fft_type;
  if (!c->p.fft.packed) return -1; /* the complex pass always packs */
  int rank = x->ndim - (t == KL_FFT_RFFT ? 0 : 1); /* the operand's logical rank */
  *howmany = 1;
  for (int i = 0; i < rank - n->n; i++) *howmany *= x->dims[i];
  *type = t;
  *dbl = x->dtype == KL_F64;
  return 0;
}

static int run_fft(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  int t, dbl;
  int64_t howmany;
  if (kl_lower_fft_layout(c, &t, &dbl, &howmany)) return kl_lower_missing(c->prim, "unpacked complex", err, errlen);
  static const kl_fft_kind kinds[] = {KL_FFT_FWD, KL_FFT_INV, KL_FFT_R2C, KL_FFT_C2R};
  const kl_ivec *n = &c->p.fft.fft_lengths;
  return kl_host_fft(kinds[t], dbl, n->n, n->v, howmany, ptrs[0], ptrs[c->nin], err, errlen);
}

const kl_lowering kl_lower_fft[] = {
    {KL_P_FFT, .fuses = 0, .cpu_lib = run_fft, .gpu_library = KL_GPU_LIB_FFT},
};
const int kl_lower_fft_n = sizeof kl_lower_fft / sizeof *kl_lower_fft;
