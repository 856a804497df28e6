/* fft.c: the transformation rules of the fft family. fft is linear: its JVP is the fft of the
 * tangent. Transposes (JAX's, with cotangents unconjugated): the DFT matrix is symmetric, so FFT
 * and IFFT are their own transposes; RFFT's is the real part of the FFT of the cotangent zero-padded
 * to the full length; IRFFT's is the conjugate of the RFFT of the cotangent, scaled by 1 / prod(n)
 * and doubled on the bins that stand for two (all but the zero and, for even n, the Nyquist bin).
 * Batching: the transformed axes are trailing, so the batch axis leads. Depends only on ir/ and
 * transforms/. */
#include <string.h>

#include "rules.h"

static int fft_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)xs, (void)ys;
  if (ts[0] >= 0) touts[0] = same_prim(a, e, (int *)&ts[0], 1);
  return 0;
}

static int fft_of(kl_build *a, int x, int type, const kl_ivec *n) {
  kl_params p;
  kl_params_init(&p, KL_P_FFT);
  p.fft.fft_type = type;
  p.fft.fft_lengths = *n;
  return kl_build_op(a, KL_P_FFT, &x, 1, &p);
}

static int fft_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  (void)i;
  kl_build *a = c->a;
  const kl_ivec *n = &e->p.fft.fft_lengths;
  int t = e->p.fft.fft_type;
  if (t == KL_FFT_FFT || t == KL_FFT_IFFT) return fft_of(a, ct, t, n);
  kl_aval ca = *kl_build_aval(a, ct);
  int last = ca.ndim - 1;
  int64_t len = n->v[n->n - 1], half = len / 2 + 1;
  if (t == KL_FFT_RFFT) { /* re(FFT(pad(ct, n))) */
    int z = kl_build_lit(a, 0, ca.dtype);
    int full = kl_ad_pad_axis(a, ct, z, last, 0, len - half);
    return kl_build_un(a, KL_P_REAL, fft_of(a, full, KL_FFT_FFT, n));
  }
  /* IRFFT: conj(RFFT(ct) * mask / prod(n)), mask 1 on bin 0 (and the Nyquist bin of an even n), else 2 */
  int x = fft_of(a, ct, KL_FFT_RFFT, n);
  kl_aval xa = *kl_build_aval(a, x);
  double scale = 1;
  for (int k = 0; k < n->n; k++) scale *= (double)n->v[k];
  int64_t m = xa.dims[xa.ndim - 1];
  int idx = kl_build_iota(a, KL_I32, &m, 1, 0);
  int edge = kl_build_bin(a, KL_P_EQ, idx, kl_build_ilit(a, 0, KL_I32));
  if (len % 2 == 0) edge = kl_build_bin(a, KL_P_OR, edge, kl_build_bin(a, KL_P_EQ, idx, kl_build_ilit(a, half - 1, KL_I32)));
  int w = kl_build_select(a, edge, kl_build_lit(a, 2 / scale, xa.dtype), kl_build_lit(a, 1 / scale, xa.dtype));
  int64_t along = xa.ndim - 1;
  w = kl_build_broadcast(a, w, xa.dims, xa.ndim, &along);
  return kl_build_un(a, KL_P_CONJ, kl_build_bin(a, KL_P_MUL, x, w));
}

static int fft_batch(kl_build *b, rule_args *r) { return kl_batch_all(b, r, &r->e->p); }

const kl_rule_row kl_rules_fft[] = {
    {KL_P_FFT, fft_jvp, fft_transpose, fft_batch, NULL, NULL, NULL},
    KL_RULES_END};
