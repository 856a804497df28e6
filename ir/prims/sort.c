/* sort.c: the sort family's params and shape rule: a stable sort of operands of one shape
 * along one axis, ordered by the leading num_keys operands. Depends only on ir/. */
#include "prims.h"

const kl_param_field kl_fields_sort[] = {KL_FIELD(sort, dimension, INT), KL_FIELD(sort, num_keys, INT),
                                     KL_FIELD(sort, random_keys, HINT), {NULL, 0, 0}};

int kl_infer_sort(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                  int *nout) {
  (void)prim;
  const kl_aval *x = &ins[0];
  char b1[160], b2[160];
  if (p->sort.dimension < 0 || p->sort.dimension >= x->ndim)
    return kl_rule_fail(e, KL_ERR_VALUE, "sort: dimension %lld out of range for %s", (long long)p->sort.dimension,
                        kl_rule_shape_str(x, b1, sizeof b1));
  if (p->sort.num_keys < 1 || p->sort.num_keys > nin)
    return kl_rule_fail(e, KL_ERR_VALUE, "sort: num_keys %lld must be between 1 and the number of operands %d",
                        (long long)p->sort.num_keys, nin);
  if (nin > KL_MAX_OUTS) return kl_rule_fail(e, KL_ERR_VALUE, "sort: %d operands (at most %d)", nin, KL_MAX_OUTS);
  for (int i = 0; i < nin; i++) {
    if (!kl_rule_same_shape(&ins[i], x))
      return kl_rule_fail(e, KL_ERR_VALUE, "sort: operands must share one shape, got %s and %s",
                          kl_rule_shape_str(x, b1, sizeof b1), kl_rule_shape_str(&ins[i], b2, sizeof b2));
    outs[i] = ins[i];
  }
  *nout = nin;
  return 0;
}
