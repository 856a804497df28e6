/* shape.c: the shape family's params and shape rule: broadcast_in_dim, reshape, transpose, rev,
 * slice, pad, concatenate (they move elements, never compute them). Depends only on ir/. */
#include "prims.h"

const kl_param_field kl_fields_broadcast[] = {KL_FIELD(broadcast, shape, IVEC),
                                              KL_FIELD(broadcast, broadcast_dimensions, IVEC), {NULL, 0, 0}};
const kl_param_field kl_fields_reshape[] = {KL_FIELD(reshape, new_sizes, IVEC), {NULL, 0, 0}};
const kl_param_field kl_fields_transpose[] = {KL_FIELD(transpose, permutation, IVEC), {NULL, 0, 0}};
const kl_param_field kl_fields_rev[] = {KL_FIELD(rev, dimensions, IVEC), {NULL, 0, 0}};
const kl_param_field kl_fields_slice[] = {KL_FIELD(slice, start_indices, IVEC), KL_FIELD(slice, limit_indices, IVEC),
                                          KL_FIELD(slice, strides, IVEC), {NULL, 0, 0}};
const kl_param_field kl_fields_pad[] = {KL_FIELD(pad, low, IVEC), KL_FIELD(pad, high, IVEC),
                                        KL_FIELD(pad, interior, IVEC), {NULL, 0, 0}};
const kl_param_field kl_fields_concatenate[] = {KL_FIELD(concatenate, dimension, INT), {NULL, 0, 0}};

static int rule_broadcast(kl_rule_err *e, const kl_aval *x, const kl_params *p, kl_aval *out) {
  const kl_ivec *shape = &p->broadcast.shape, *bd = &p->broadcast.broadcast_dimensions;
  char b1[160], b2[256];
  if (kl_rule_check_rank(e, "broadcast_in_dim", shape->n)) return -1;
  if (bd->n != x->ndim)
    return kl_rule_fail(e, KL_ERR_VALUE, "broadcast_in_dim: broadcast_dimensions %s must have one entry per operand dimension (operand %s)",
                        kl_rule_vec_str(bd, b2, sizeof b2), kl_rule_shape_str(x, b1, sizeof b1));
  for (int i = 0; i < bd->n; i++) {
    int64_t d = bd->v[i];
    if (d < 0 || d >= shape->n || (i && d <= bd->v[i - 1]))
      return kl_rule_fail(e, KL_ERR_VALUE, "broadcast_in_dim: broadcast_dimensions %s must be strictly increasing and below the target rank %d",
                          kl_rule_vec_str(bd, b2, sizeof b2), shape->n);
    if (x->dims[i] != 1 && x->dims[i] != shape->v[d])
      return kl_rule_fail(e, KL_ERR_VALUE, "broadcast_in_dim: operand %s cannot be broadcast to shape %s",
                          kl_rule_shape_str(x, b1, sizeof b1), kl_rule_vec_str(shape, b2, sizeof b2));
  }
  out->ndim = (int8_t)shape->n;
  for (int i = 0; i < shape->n; i++) {
    if (shape->v[i] < 0)
      return kl_rule_fail(e, KL_ERR_VALUE, "broadcast_in_dim: negative dimension in shape %s", kl_rule_vec_str(shape, b2, sizeof b2));
    out->dims[i] = shape->v[i];
  }
  return 0;
}

static int rule_reshape(kl_rule_err *e, const kl_aval *x, const kl_params *p, kl_aval *out) {
  const kl_ivec *ns = &p->reshape.new_sizes;
  char b1[160], b2[256];
  if (kl_rule_check_rank(e, "reshape", ns->n)) return -1;
  int64_t n = 1;
  for (int i = 0; i < ns->n; i++) {
    if (ns->v[i] < 0) return kl_rule_fail(e, KL_ERR_VALUE, "reshape: negative dimension in new_sizes %s", kl_rule_vec_str(ns, b2, sizeof b2));
    n *= ns->v[i];
  }
  if (n != kl_aval_size(x))
    return kl_rule_fail(e, KL_ERR_VALUE, "reshape: cannot reshape array of shape %s (size %lld) into shape %s (size %lld)",
                        kl_rule_shape_str(x, b1, sizeof b1), (long long)kl_aval_size(x),
                        kl_rule_vec_str(ns, b2, sizeof b2), (long long)n);
  out->ndim = (int8_t)ns->n;
  for (int i = 0; i < ns->n; i++) out->dims[i] = ns->v[i];
  return 0;
}

static int rule_transpose(kl_rule_err *e, const kl_aval *x, const kl_params *p, kl_aval *out) {
  const kl_ivec *perm = &p->transpose.permutation;
  char b1[160], b2[256];
  if (perm->n != x->ndim)
    return kl_rule_fail(e, KL_ERR_VALUE, "transpose: permutation %s is not a permutation of the %d axes of %s",
                        kl_rule_vec_str(perm, b2, sizeof b2), x->ndim, kl_rule_shape_str(x, b1, sizeof b1));
  if (kl_rule_check_axes(e, "transpose", "permutation", perm, x->ndim, 0)) return -1;
  for (int i = 0; i < x->ndim; i++) out->dims[i] = x->dims[perm->v[i]];
  return 0;
}

static int rule_slice(kl_rule_err *e, const kl_aval *x, const kl_params *p, kl_aval *out) {
  const kl_ivec *start = &p->slice.start_indices, *limit = &p->slice.limit_indices, *strides = &p->slice.strides;
  char b1[160];
  if (start->n != x->ndim || limit->n != x->ndim || (strides->n && strides->n != x->ndim))
    return kl_rule_fail(e, KL_ERR_VALUE, "slice: start/limit/strides need one entry per dimension of %s", kl_rule_shape_str(x, b1, sizeof b1));
  for (int i = 0; i < x->ndim; i++) {
    int64_t s = start->v[i], l = limit->v[i], st = strides->n ? strides->v[i] : 1;
    if (s < 0 || l > x->dims[i] || s > l || st < 1)
      return kl_rule_fail(e, KL_ERR_VALUE, "slice: invalid range [%lld:%lld:%lld] for dimension %d of %s", (long long)s,
                          (long long)l, (long long)st, i, kl_rule_shape_str(x, b1, sizeof b1));
    out->dims[i] = l > s ? (l - s + st - 1) / st : 0;
  }
  return 0;
}

static int rule_pad(kl_rule_err *e, const kl_aval *ins, int nin, const kl_params *p, kl_aval *out) {
  const kl_aval *x = &ins[0];
  const kl_ivec *lo = &p->pad.low, *hi = &p->pad.high, *in = &p->pad.interior;
  char b1[160];
  if (nin != 2 || ins[1].ndim != 0 || ins[1].dtype != x->dtype)
    return kl_rule_fail(e, KL_ERR_TYPE, "pad: padding value must be a scalar of the operand's dtype %s", kl_dtype_name(x->dtype));
  if (lo->n != x->ndim || hi->n != x->ndim || in->n != x->ndim)
    return kl_rule_fail(e, KL_ERR_VALUE, "pad: padding_config needs one (low, high, interior) per dimension of %s",
                        kl_rule_shape_str(x, b1, sizeof b1));
  for (int i = 0; i < x->ndim; i++) {
    if (in->v[i] < 0) return kl_rule_fail(e, KL_ERR_VALUE, "pad: negative interior padding on dimension %d", i);
    int64_t core = x->dims[i] ? x->dims[i] + (x->dims[i] - 1) * in->v[i] : 0;
    out->dims[i] = lo->v[i] + core + hi->v[i];
    if (out->dims[i] < 0)
      return kl_rule_fail(e, KL_ERR_VALUE, "pad: dimension %d of %s would become negative", i, kl_rule_shape_str(x, b1, sizeof b1));
  }
  out->weak = x->weak;
  return 0;
}

static int rule_concatenate(kl_rule_err *e, const kl_aval *ins, int nin, const kl_params *p, kl_aval *out) {
  const kl_aval *x = &ins[0];
  int64_t d = p->concatenate.dimension;
  char b1[160], b2[256];
  if (d < 0 || d >= x->ndim)
    return kl_rule_fail(e, KL_ERR_VALUE, "concatenate: dimension %lld out of range for rank %d", (long long)d, x->ndim);
  out->dims[d] = 0;
  for (int k = 0; k < nin; k++) {
    const kl_aval *y = &ins[k];
    int ok = y->ndim == x->ndim && y->dtype == x->dtype;
    for (int i = 0; ok && i < x->ndim; i++) ok = i == d || y->dims[i] == x->dims[i];
    if (!ok)
      return kl_rule_fail(e, KL_ERR_VALUE, "concatenate: operands %s and %s differ outside dimension %lld (or in dtype)",
                          kl_rule_shape_str(x, b1, sizeof b1), kl_rule_shape_str(y, b2, sizeof b2), (long long)d);
    out->dims[d] += y->dims[d];
    out->weak &= y->weak;
  }
  return 0;
}

int kl_infer_shape(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                   int *nout) {
  (void)nout;
  outs[0] = ins[0];
  switch (prim) {
  case KL_P_BROADCAST_IN_DIM: return rule_broadcast(e, &ins[0], p, outs);
  case KL_P_RESHAPE: return rule_reshape(e, &ins[0], p, outs);
  case KL_P_TRANSPOSE: return rule_transpose(e, &ins[0], p, outs);
  case KL_P_REV: return kl_rule_check_axes(e, "rev", "dimensions", &p->rev.dimensions, ins[0].ndim, 0);
  case KL_P_SLICE: return rule_slice(e, &ins[0], p, outs);
  case KL_P_PAD: return rule_pad(e, ins, nin, p, outs);
  case KL_P_CONCATENATE: return rule_concatenate(e, ins, nin, p, outs);
  default: return kl_rule_fail(e, KL_ERR_VALUE, "%s: not a shape primitive", kl_prim_get(prim)->name);
  }
}
