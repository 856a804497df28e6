/* callback.c: the callback family's params and shape rule: a host function called on its operands
 * (jax.debug.callback / debug.print, jax.pure_callback). The results' types are params (the host
 * function promises them); an effect callback (effect 1) has one int32[] token result that nothing reads; an
 * io_callback (effect 2) runs for its effect and has the declared results.
 * After the complex pass (`packed`), complex operands and results are real [..., 2]. Depends only
 * on ir/. */
#include "prims.h"

#include <string.h>

const kl_param_field kl_fields_callback[] = {
    KL_FIELD(callback, id, INT),           KL_FIELD(callback, effect, INT32),   KL_FIELD(callback, vmap_method, INT32),
    KL_FIELD(callback, out_dtypes, IVEC),  KL_FIELD(callback, out_ranks, IVEC), KL_FIELD(callback, out_dims, IVEC),
    KL_FIELD(callback, packed, INT32),     {NULL, 0, 0}};

int kl_infer_callback(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                      int *nout) {
  (void)prim, (void)ins, (void)nin;
  const kl_ivec *dt = &p->callback.out_dtypes, *rk = &p->callback.out_ranks, *dims = &p->callback.out_dims;
  if (p->callback.effect == 1) {
    if (dt->n) return kl_rule_fail(e, KL_ERR_VALUE, "callback: an effect callback has no results");
    memset(outs, 0, sizeof *outs);
    outs[0].dtype = KL_I32;
    *nout = 1;
    return 0;
  }
  if (dt->n < 1 || dt->n > KL_MAX_OUTS || rk->n != dt->n)
    return kl_rule_fail(e, KL_ERR_VALUE, "callback: expects 1 to %d results with a dtype and a rank each", KL_MAX_OUTS);
  int at = 0;
  for (int i = 0; i < dt->n; i++) {
    if (dt->v[i] < 0 || dt->v[i] >= KL_NDTYPES) return kl_rule_fail(e, KL_ERR_TYPE, "callback: invalid result dtype");
    int r = (int)rk->v[i] + (p->callback.packed && kl_dtype_is_complex((kl_dtype)dt->v[i]));
    if (rk->v[i] < 0 || r > KL_MAX_RANK || at + rk->v[i] > dims->n)
      return kl_rule_fail(e, KL_ERR_VALUE, "callback: result %d's rank does not fit its dims", i);
    memset(&outs[i], 0, sizeof outs[i]);
    outs[i].dtype = (kl_dtype)dt->v[i];
    outs[i].ndim = (int8_t)rk->v[i];
    for (int d = 0; d < rk->v[i]; d++) {
      if (dims->v[at] < 0) return kl_rule_fail(e, KL_ERR_VALUE, "callback: negative result dimension");
      outs[i].dims[d] = dims->v[at++];
    }
    if (p->callback.packed && kl_dtype_is_complex(outs[i].dtype)) { /* packed by the complex pass */
      outs[i].dtype = kl_dtype_real_part(outs[i].dtype);
      outs[i].dims[outs[i].ndim++] = 2;
    }
  }
  if (at != dims->n) return kl_rule_fail(e, KL_ERR_VALUE, "callback: %d result dims left over", dims->n - at);
  *nout = dt->n;
  return 0;
}
