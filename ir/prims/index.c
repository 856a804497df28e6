/* index.c: the index family's params and shape rule: dynamic_slice, dynamic_update_slice (start
 * indices are operands, clamped), take (gather along one axis, indices clamped) and scatter
 * (updates along one axis, out-of-range ones dropped). Depends only on ir/. */
#include "prims.h"

const kl_param_field kl_fields_dynamic_slice[] = {KL_FIELD(dynamic_slice, slice_sizes, IVEC), {NULL, 0, 0}};
const kl_param_field kl_fields_take[] = {KL_FIELD(take, axis, INT), {NULL, 0, 0}};
const kl_param_field kl_fields_scatter[] = {KL_FIELD(scatter, axis, INT), KL_FIELD(scatter, op, INT32), KL_FIELD(scatter, loc, LOC),
                                            {NULL, 0, 0}};
const kl_param_field kl_fields_update[] = {KL_FIELD(update, loc, LOC), {NULL, 0, 0}};

static int rule_dynamic_slice(kl_rule_err *e, const kl_aval *ins, int nin, const kl_params *p, kl_aval *out) {
  const kl_aval *x = &ins[0];
  const kl_ivec *sizes = &p->dynamic_slice.slice_sizes;
  char b1[160];
  if (nin != 1 + x->ndim || sizes->n != x->ndim)
    return kl_rule_fail(e, KL_ERR_VALUE, "dynamic_slice: needs one start index and one slice size per dimension of %s",
                        kl_rule_shape_str(x, b1, sizeof b1));
  for (int i = 0; i < x->ndim; i++) {
    if (ins[1 + i].ndim != 0 || !kl_dtype_is_int(ins[1 + i].dtype))
      return kl_rule_fail(e, KL_ERR_TYPE, "dynamic_slice: start indices must be integer scalars");
    if (sizes->v[i] < 0 || sizes->v[i] > x->dims[i])
      return kl_rule_fail(e, KL_ERR_VALUE, "dynamic_slice: slice size %lld does not fit dimension %d of %s",
                          (long long)sizes->v[i], i, kl_rule_shape_str(x, b1, sizeof b1));
    out->dims[i] = sizes->v[i];
  }
  return 0;
}

static int rule_dynamic_update_slice(kl_rule_err *e, const kl_aval *ins, int nin) {
  const kl_aval *x = &ins[0];
  char b1[160], b2[160];
  if (nin != 2 + x->ndim || ins[1].ndim != x->ndim || ins[1].dtype != x->dtype)
    return kl_rule_fail(e, KL_ERR_VALUE, "dynamic_update_slice: update %s must match the rank and dtype of %s, with one start index per dimension",
                        kl_rule_shape_str(&ins[1], b2, sizeof b2), kl_rule_shape_str(x, b1, sizeof b1));
  for (int i = 0; i < x->ndim; i++) {
    if (ins[2 + i].ndim != 0 || !kl_dtype_is_int(ins[2 + i].dtype))
      return kl_rule_fail(e, KL_ERR_TYPE, "dynamic_update_slice: start indices must be integer scalars");
    if (ins[1].dims[i] > x->dims[i])
      return kl_rule_fail(e, KL_ERR_VALUE, "dynamic_update_slice: update %s larger than operand %s",
                          kl_rule_shape_str(&ins[1], b2, sizeof b2), kl_rule_shape_str(x, b1, sizeof b1));
  }
  return 0;
}

/* take's result: x's shape with axis replaced by the indices' shape. */
static int rule_take(kl_rule_err *e, const kl_aval *x, const kl_aval *idx, int64_t axis, kl_aval *out) {
  char b1[160];
  if (!kl_dtype_is_int(idx->dtype)) return kl_rule_fail(e, KL_ERR_TYPE, "take: indices must be an integer array");
  if (axis < 0 || axis >= x->ndim)
    return kl_rule_fail(e, KL_ERR_VALUE, "take: axis %lld out of range for %s", (long long)axis, kl_rule_shape_str(x, b1, sizeof b1));
  if (x->ndim - 1 + idx->ndim > KL_MAX_RANK) return kl_rule_check_rank(e, "take", x->ndim - 1 + idx->ndim);
  if (x->dims[axis] == 0 && kl_aval_size(idx) > 0)
    return kl_rule_fail(e, KL_ERR_VALUE, "take: cannot index axis %lld of size 0 in %s", (long long)axis,
                        kl_rule_shape_str(x, b1, sizeof b1));
  *out = *x;
  out->ndim = 0;
  for (int i = 0; i < axis; i++) out->dims[out->ndim++] = x->dims[i];
  for (int i = 0; i < idx->ndim; i++) out->dims[out->ndim++] = idx->dims[i];
  for (int i = (int)axis + 1; i < x->ndim; i++) out->dims[out->ndim++] = x->dims[i];
  return 0;
}

static int rule_scatter(kl_rule_err *e, const kl_aval *ins, int nin, const kl_params *p) {
  char b1[160], b2[160];
  kl_aval want;
  if (nin != 3) return kl_rule_fail(e, KL_ERR_VALUE, "scatter: expects operand, indices and updates");
  if (rule_take(e, &ins[0], &ins[1], p->scatter.axis, &want)) return -1;
  if (!kl_rule_same_shape(&want, &ins[2]) || ins[2].dtype != ins[0].dtype)
    return kl_rule_fail(e, KL_ERR_VALUE, "scatter: updates %s must have shape and dtype %s",
                        kl_rule_shape_str(&ins[2], b2, sizeof b2), kl_rule_shape_str(&want, b1, sizeof b1));
  if (p->scatter.op < KL_SCATTER_SET || p->scatter.op > KL_SCATTER_MAX)
    return kl_rule_fail(e, KL_ERR_VALUE, "scatter: unknown combiner %d", p->scatter.op);
  return 0;
}

int kl_infer_index(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                   int *nout) {
  (void)nout;
  outs[0] = ins[0];
  switch (prim) {
  case KL_P_DYNAMIC_SLICE: return rule_dynamic_slice(e, ins, nin, p, outs);
  case KL_P_DYNAMIC_UPDATE_SLICE: /* strongly typed even from weak operands, as JAX's */
    outs[0].weak = 0;
    return rule_dynamic_update_slice(e, ins, nin);
  case KL_P_TAKE:
    if (nin != 2) return kl_rule_fail(e, KL_ERR_TYPE, "take: indices must be an integer array");
    return rule_take(e, &ins[0], &ins[1], p->take.axis, outs);
  case KL_P_SCATTER: return rule_scatter(e, ins, nin, p);
  default: return kl_rule_fail(e, KL_ERR_VALUE, "%s: not an index primitive", kl_prim_get(prim)->name);
  }
}
