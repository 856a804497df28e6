/* sort.c: the transformation rules of sort: JVP (the tangents gathered with the sorting
 * permutation), batching. Depends only on ir/ and transforms/. */
#include <string.h>

#include "rules.h"

/* ---- JVP ------------------------------------------------------------------------------------- */

/* sort: sort an iota along with the operands to get the permutation, then gather each
 * tangent with it. */
static int sort_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  int n = e->nin, dim = (int)e->p.sort.dimension, any = 0;
  for (int i = 0; i < n; i++) any |= ts[i] >= 0 && is_float_val(a, xs[i]);
  if (!any) return 0;
  if (n + 1 > KL_MAX_OUTS) return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiation of sort with %d operands is not supported yet by kiln", n);
  kl_aval xa = *kl_build_aval(a, xs[0]);
  int ins[KL_MAX_OUTS], outs[KL_MAX_OUTS];
  memcpy(ins, xs, sizeof(int) * (size_t)n);
  ins[n] = kl_build_iota(a, KL_I32, xa.dims, xa.ndim, dim);
  if (kl_build_emit(a, KL_P_SORT, ins, n + 1, &e->p, outs) < 0) return -1;
  for (int i = 0; i < n; i++)
    if (ts[i] >= 0 && is_float_val(a, xs[i])) touts[i] = kl_ad_take_along(a, ts[i], outs[n], dim);
  return 0;
}

/* ---- batching -------------------------------------------------------------------------------- */

static int sort_batch(kl_build *b, rule_args *r) {
  kl_params p = r->e->p;
  p.sort.dimension++;
  return kl_batch_all(b, r, &p);
}

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_sort[] = {
    {KL_P_SORT, sort_jvp, NULL, sort_batch, NULL, NULL, NULL},
    KL_RULES_END};
