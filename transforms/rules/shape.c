/* shape.c: the transformation rules of the shape family (broadcast_in_dim reshape transpose rev
 * slice pad concatenate): all linear, so their JVP applies the primitive to the tangents and their
 * transpose undoes the data movement; batching shifts the axis params by one. Depends only on ir/
 * and transforms/. */
#include <string.h>

#include "rules.h"

/* ---- JVP ------------------------------------------------------------------------------------- */

/* pad: linear in (operand, padding value) together. */
static int pad_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  if (ts[0] < 0 && ts[1] < 0) return 0;
  int ins[2] = {ts[0] >= 0 ? ts[0] : zeros_like(a, xs[0]), ts[1] >= 0 ? ts[1] : lit(a, 0, xs[1])};
  touts[0] = same_prim(a, e, ins, 2);
  return 0;
}

/* The others: the same primitive on the tangents (zeros where an operand has none). */
static int shape_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  int any = 0, ins[256];
  if (e->nin > 256) return kl_ad_fail(a, "differentiation of %s with %d operands is not supported yet", kl_prim_get(e->prim)->name, e->nin);
  for (int i = 0; i < e->nin; i++) any |= ts[i] >= 0;
  if (!any) return 0;
  for (int i = 0; i < e->nin; i++) ins[i] = ts[i] >= 0 ? ts[i] : zeros_like(a, xs[i]);
  touts[0] = same_prim(a, e, ins, e->nin);
  return 0;
}

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_shape[] = {
    {KL_P_BROADCAST_IN_DIM, shape_jvp, NULL, NULL},
    {KL_P_RESHAPE, shape_jvp, NULL, NULL},
    {KL_P_TRANSPOSE, shape_jvp, NULL, NULL},
    {KL_P_REV, shape_jvp, NULL, NULL},
    {KL_P_SLICE, shape_jvp, NULL, NULL},
    {KL_P_PAD, pad_jvp, NULL, NULL},
    {KL_P_CONCATENATE, shape_jvp, NULL, NULL},
    KL_RULES_END};
