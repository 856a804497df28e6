/* fft.c: the fft family's params and shape rule: lax.fft over the trailing len(fft_lengths)
 * (1 to 3) axes. FFT and IFFT map complex to complex of the same shape; RFFT maps a real signal
 * to its half spectrum (last axis n // 2 + 1); IRFFT the half spectrum back to the real signal.
 * After the complex pass (`packed`), complex operands and results are real arrays with a
 * trailing axis of 2. Depends only on ir/. */
#include "prims.h"

const kl_param_field kl_fields_fft[] = {KL_FIELD(fft, fft_type, INT32), KL_FIELD(fft, fft_lengths, IVEC),
                                        KL_FIELD(fft, packed, INT32), {NULL, 0, 0}};

static const char *const names[] = {"fft", "ifft", "rfft", "irfft"};

int kl_infer_fft(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                 int *nout) {
  (void)nin, (void)nout;
  const kl_aval *x = &ins[0];
  const kl_ivec *n = &p->fft.fft_lengths;
  int t = p->fft.fft_type, packed = p->fft.packed != 0;
  char b1[160], b2[160];
  if (t < KL_FFT_FFT || t > KL_FFT_IRFFT) return kl_rule_fail(e, KL_ERR_VALUE, "fft: invalid fft_type %d", t);
  if (n->n < 1 || n->n > 3)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: fft_lengths must name 1 to 3 axes, got %s", names[t],
                        kl_rule_vec_str(n, b1, sizeof b1));
  for (int i = 0; i < n->n; i++)
    if (n->v[i] < 1)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: fft_lengths must be positive, got %s", names[t],
                          kl_rule_vec_str(n, b1, sizeof b1));
  if (kl_rule_check_accepts(e, prim, x)) return -1;
  int real_in = t == KL_FFT_RFFT, real_out = t == KL_FFT_IRFFT;
  /* the operand's logical view: shape and whether it is complex */
  kl_aval v = *x;
  if (packed && !real_in) {
    if (v.ndim < 1 || v.dims[v.ndim - 1] != 2 || !kl_dtype_is_float(v.dtype))
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: a packed complex operand is real [..., 2], got %s", names[t],
                          kl_rule_shape_str(x, b1, sizeof b1));
    v.ndim--;
    v.dtype = kl_dtype_complex_of(v.dtype);
  }
  if (real_in ? !(v.dtype == KL_F32 || v.dtype == KL_F64) : !kl_dtype_is_complex(v.dtype))
    return kl_rule_fail(e, KL_ERR_TYPE, "%s: the operand must be %s, got %s", names[t],
                        real_in ? "float32 or float64" : "complex64 or complex128", kl_dtype_name(v.dtype));
  if (v.ndim < n->n)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: the operand %s has fewer axes than fft_lengths %s", names[t],
                        kl_rule_shape_str(&v, b1, sizeof b1), kl_rule_vec_str(n, b2, sizeof b2));
  int lead = v.ndim - n->n;
  for (int i = 0; i < n->n; i++) {
    int64_t want = n->v[i];
    if (real_out && i == n->n - 1) want = want / 2 + 1;
    if (v.dims[lead + i] != want)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: the operand %s does not end in the axes fft_lengths %s ask for%s",
                          names[t], kl_rule_shape_str(&v, b1, sizeof b1), kl_rule_vec_str(n, b2, sizeof b2),
                          real_out ? " (the last one n // 2 + 1 long)" : "");
  }
  kl_aval y = v;
  y.weak = 0;
  if (real_in) {
    y.dtype = kl_dtype_complex_of(v.dtype);
    y.dims[y.ndim - 1] = n->v[n->n - 1] / 2 + 1;
  } else if (real_out) {
    y.dtype = kl_dtype_real_part(v.dtype);
    y.dims[y.ndim - 1] = n->v[n->n - 1];
  }
  if (packed && !real_out) { /* the result packed too */
    y.dtype = kl_dtype_real_part(y.dtype);
    y.dims[y.ndim++] = 2;
  }
  if (y.ndim > KL_MAX_RANK) return kl_rule_fail(e, KL_ERR_VALUE, "%s: the result's rank exceeds %d", names[t], KL_MAX_RANK);
  outs[0] = y;
  return 0;
}
