/* dot.c: the transformation rules of dot_general: JVP (bilinear), transpose with respect to either
 * operand, batching. Depends only on ir/ and transforms/. */
#include "rules.h"

/* ---- JVP ------------------------------------------------------------------------------------- */

static int dot_jvp(kl_ad *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  int c1 = -1, c2 = -1;
  if (ts[0] >= 0) {
    int ins[2] = {ts[0], xs[1]};
    c1 = same_prim(a, e, ins, 2);
  }
  if (ts[1] >= 0) {
    int ins[2] = {xs[0], ts[1]};
    c2 = same_prim(a, e, ins, 2);
  }
  touts[0] = kl_ad_add(a, c1, c2);
  return 0;
}

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_dot[] = {
    {KL_P_DOT_GENERAL, dot_jvp, NULL, NULL},
    KL_RULES_END};
