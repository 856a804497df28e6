/* cumulative.c: the cumulative family's params and shape rule: cumsum, cumprod, cummax,
 * cummin (inclusive scans along one axis, optionally from the end). Depends only on ir/. */
#include "prims.h"

const kl_param_field kl_fields_cumulative[] = {KL_FIELD(cumulative, axis, INT), KL_FIELD(cumulative, reverse, INT32),
                                               {NULL, 0, 0}};

int kl_infer_cumulative(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p,
                        kl_aval *outs, int *nout) {
  (void)nin;
  (void)nout;
  const kl_aval *x = &ins[0];
  char b1[160];
  outs[0] = *x;
  if (kl_rule_check_accepts(e, prim, x)) return -1;
  if (p->cumulative.axis < 0 || p->cumulative.axis >= x->ndim)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: axis %lld out of range for %s", kl_prim_get(prim)->name,
                        (long long)p->cumulative.axis, kl_rule_shape_str(x, b1, sizeof b1));
  return 0;
}
