/* reduce.c: the reduce family's params and shape rule: reduce_<op> over axes and
 * argmax/argmin along one axis. Depends only on ir/. */
#include "prims.h"

const kl_param_field kl_fields_reduce[] = {KL_FIELD(reduce, axes, IVEC), {NULL, 0, 0}};
const kl_param_field kl_fields_arg[] = {KL_FIELD(arg, axes, IVEC), KL_FIELD(arg, index_dtype, DTYPE), {NULL, 0, 0}};

/* The operand's shape without `axes`. (reduce.axes and arg.axes share their place.) */
static int reduced(kl_rule_err *e, kl_prim prim, const kl_aval *x, const kl_ivec *axes, kl_aval *out) {
  if (kl_rule_check_accepts(e, prim, x) || kl_rule_check_axes(e, kl_prim_get(prim)->name, "axes", axes, x->ndim, 0))
    return -1;
  *out = *x;
  out->ndim = 0;
  for (int i = 0; i < x->ndim; i++) {
    int gone = 0;
    for (int k = 0; k < axes->n; k++) gone |= axes->v[k] == i;
    if (!gone) out->dims[out->ndim++] = x->dims[i];
  }
  return 0;
}

int kl_infer_reduce(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                    int *nout) {
  (void)nin;
  (void)nout;
  const char *name = kl_prim_get(prim)->name;
  const kl_aval *x = &ins[0];
  char b1[160];
  if (kl_prim_get(prim)->form == KL_FORM_REDUCE) return reduced(e, prim, x, &p->reduce.axes, outs);
  /* argmax, argmin */
  if (p->arg.axes.n != 1) return kl_rule_fail(e, KL_ERR_VALUE, "%s: expects exactly one axis", name);
  if (reduced(e, prim, x, &p->arg.axes, outs)) return -1;
  int64_t axis = p->arg.axes.v[0];
  if (x->dims[axis] == 0)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: axis %lld of %s has size 0", name, (long long)axis, kl_rule_shape_str(x, b1, sizeof b1));
  if (p->arg.index_dtype != KL_I32 && p->arg.index_dtype != KL_I64)
    return kl_rule_fail(e, KL_ERR_TYPE, "%s: index_dtype must be int32 or int64", name);
  outs[0].dtype = (kl_dtype)p->arg.index_dtype;
  outs[0].weak = 0;
  return 0;
}
