/* conv.c: the conv family's params and shape rule: conv_general_dilated and its gradients with
 * respect to the input (conv_bwd_data, the transposed convolution) and the kernel
 * (conv_bwd_filter), in the one channels-last layout the libraries take (see kl_params.conv).
 * python/kiln/lax/conv.py maps any dimension_numbers to it. Depends only on ir/. */
#include "prims.h"

const kl_param_field kl_fields_conv[] = {
    KL_FIELD(conv, window_strides, IVEC),       KL_FIELD(conv, padding_lo, IVEC),
    KL_FIELD(conv, padding_hi, IVEC),           KL_FIELD(conv, rhs_dilation, IVEC),
    KL_FIELD(conv, spatial_shape, IVEC),        KL_FIELD(conv, feature_group_count, INT),
    KL_FIELD(conv, precision, INT32),           KL_FIELD(conv, preferred_element_type, DTYPE),
    {NULL, 0, 0}};

/* The params checked against spatial rank nd. */
static int check_params(kl_rule_err *e, const char *op, const kl_params *p, int nd) {
  const kl_ivec *v[] = {&p->conv.window_strides, &p->conv.padding_lo, &p->conv.padding_hi, &p->conv.rhs_dilation};
  static const char *const what[] = {"window_strides", "padding_lo", "padding_hi", "rhs_dilation"};
  static const int64_t least[] = {1, 0, 0, 1};
  char b[160];
  for (int i = 0; i < 4; i++) {
    if (v[i]->n != nd)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: %s needs %d entries (one per spatial axis), got %s", op, what[i], nd,
                          kl_rule_vec_str(v[i], b, sizeof b));
    for (int k = 0; k < nd; k++)
      if (v[i]->v[k] < least[i])
        return kl_rule_fail(e, KL_ERR_VALUE, "%s: %s must be at least %lld, got %s", op, what[i], (long long)least[i],
                            kl_rule_vec_str(v[i], b, sizeof b));
  }
  if (p->conv.feature_group_count < 1)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: feature_group_count must be positive, got %lld", op,
                        (long long)p->conv.feature_group_count);
  return 0;
}

int kl_infer_conv(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                  int *nout) {
  (void)nout;
  const char *op = kl_prim_get(prim)->name;
  char b1[160], b2[160], b3[160], b4[160];
  if (nin != 2) return kl_rule_fail(e, KL_ERR_VALUE, "%s: expects 2 operands, got %d", op, nin);
  const kl_aval *a = &ins[0], *b = &ins[1];
  if (kl_rule_check_accepts(e, prim, a) || kl_rule_check_accepts(e, prim, b)) return -1;
  if (a->dtype != b->dtype)
    return kl_rule_fail(e, KL_ERR_TYPE, "%s: operand dtypes differ: %s and %s (convert one first)", op,
                        kl_dtype_name(a->dtype), kl_dtype_name(b->dtype));
  int nd = p->conv.window_strides.n;
  if (nd < 1 || nd > 3)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: 1 to 3 spatial axes are supported, got %d", op, nd);
  if (check_params(e, op, p, nd)) return -1;
  if (a->ndim != nd + 2 || b->ndim != nd + 2)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: operands of rank %d expected (%d spatial axes), got %s and %s", op, nd + 2,
                        nd, kl_rule_shape_str(a, b1, sizeof b1), kl_rule_shape_str(b, b2, sizeof b2));
  int64_t G = p->conv.feature_group_count;
  const kl_ivec *st = &p->conv.window_strides, *lo = &p->conv.padding_lo, *hi = &p->conv.padding_hi,
                *dil = &p->conv.rhs_dilation, *sp = &p->conv.spatial_shape;
  /* name the three arrays of the convolution: x (N, S..., C), w (O, K..., I), y (N, S'..., O) */
  kl_aval x, w, y;
  if (prim != KL_P_CONV && sp->n != nd)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: spatial_shape needs %d entries, got %s", op, nd,
                        kl_rule_vec_str(sp, b1, sizeof b1));
  if (prim == KL_P_CONV) {
    x = *a, w = *b;
  } else if (prim == KL_P_CONV_BWD_DATA) {
    y = *a, w = *b;
    x = y;
    x.dims[nd + 1] = w.dims[nd + 1] * G;
    for (int i = 0; i < nd; i++) x.dims[1 + i] = sp->v[i];
  } else {
    x = *a, y = *b;
    w = x;
    w.dims[0] = y.dims[nd + 1];
    for (int i = 0; i < nd; i++) w.dims[1 + i] = sp->v[i];
    if (x.dims[nd + 1] % G)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: the input's %lld features are not a multiple of feature_group_count %lld",
                          op, (long long)x.dims[nd + 1], (long long)G);
    w.dims[nd + 1] = x.dims[nd + 1] / G;
  }
  if (x.dims[nd + 1] != w.dims[nd + 1] * G)
    return kl_rule_fail(e, KL_ERR_TYPE,
                        "%s: the input's %lld features must equal the kernel's input features %lld times "
                        "feature_group_count %lld (input %s, kernel %s, channels last)",
                        op, (long long)x.dims[nd + 1], (long long)w.dims[nd + 1], (long long)G,
                        kl_rule_shape_str(&x, b1, sizeof b1), kl_rule_shape_str(&w, b2, sizeof b2));
  if (w.dims[0] % G)
    return kl_rule_fail(e, KL_ERR_TYPE, "%s: the kernel's %lld output features are not a multiple of feature_group_count %lld",
                        op, (long long)w.dims[0], (long long)G);
  kl_aval want = x;
  want.dims[nd + 1] = w.dims[0];
  for (int i = 0; i < nd; i++) {
    if (w.dims[1 + i] < 1)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: the kernel %s has an empty spatial axis", op,
                          kl_rule_shape_str(&w, b1, sizeof b1));
    want.dims[1 + i] = kl_conv_out_extent(x.dims[1 + i], w.dims[1 + i], st->v[i], lo->v[i], hi->v[i], dil->v[i]);
    if (want.dims[1 + i] < 1)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: the padded input %s is smaller than the dilated kernel %s (axis %d)", op,
                          kl_rule_shape_str(&x, b1, sizeof b1), kl_rule_shape_str(&w, b2, sizeof b2), i + 1);
  }
  if (prim == KL_P_CONV) {
    y = want;
  } else if (!kl_rule_same_shape(&y, &want)) {
    return kl_rule_fail(e, KL_ERR_VALUE,
                        "%s: the output cotangent %s does not match the convolution of an input %s by a kernel %s "
                        "(expected %s)",
                        op, kl_rule_shape_str(&y, b1, sizeof b1), kl_rule_shape_str(&x, b2, sizeof b2),
                        kl_rule_shape_str(&w, b3, sizeof b3), kl_rule_shape_str(&want, b4, sizeof b4));
  }
  kl_aval r = prim == KL_P_CONV ? y : prim == KL_P_CONV_BWD_DATA ? x : w;
  r.weak = a->weak && b->weak;
  r.dtype = a->dtype;
  if (p->conv.preferred_element_type >= 0) {
    kl_dtype t = (kl_dtype)p->conv.preferred_element_type;
    if (!kl_dtype_is_float(t))
      return kl_rule_fail(e, KL_ERR_TYPE, "%s: preferred_element_type must be a floating dtype, got %s", op,
                          kl_dtype_name(t));
    r.dtype = t;
  }
  outs[0] = r;
  return 0;
}
