/* fuse.c: DCE and kernel planning. A value is materialized when it is a program input or
 * output, a reduction result, produced or consumed by a library call; everything else is
 * recomputed inside its consumers' loop nests (cheap elementwise work is worth redoing to
 * avoid a round trip through memory). */
#include "fuse.h"

#include <stdlib.h>
#include <string.h>

int kl_prim_fusible(kl_prim p) {
  kl_family f = kl_prim_get(p)->family;
  return f != KL_FAM_LIB;
}

void kl_dce(kl_program *pg) {
  char *live = calloc((size_t)pg->nvals + 1, 1);
  if (!live) abort();
  for (int i = 0; i < pg->noutputs; i++) live[pg->outputs[i]] = 1;
  char *keep = calloc((size_t)pg->neqns + 1, 1);
  if (!keep) abort();
  for (int k = pg->neqns - 1; k >= 0; k--) {
    const kl_eqn *e = &pg->eqns[k];
    for (int i = 0; i < e->nout && !keep[k]; i++) keep[k] = live[e->outs[i]];
    if (keep[k])
      for (int i = 0; i < e->nin; i++) live[e->ins[i]] = 1;
  }
  int n = 0;
  for (int k = 0; k < pg->neqns; k++)
    if (keep[k]) {
      pg->eqns[n] = pg->eqns[k];
      for (int i = 0; i < pg->eqns[n].nout; i++) pg->vals[pg->eqns[n].outs[i]].producer = n;
      n++;
    }
  pg->neqns = n;
  free(live);
  free(keep);
}

void kl_plan_build(const kl_program *pg, kl_plan *plan) {
  const char *env = getenv("KILN_DISABLE_FUSION");
  int nofuse = env && env[0] == '1';
  plan->pg = pg;
  plan->materialized = calloc((size_t)pg->nvals + 1, 1);
  plan->steps = calloc((size_t)pg->neqns + 1, sizeof *plan->steps);
  if (!plan->materialized || !plan->steps) abort();
  plan->nsteps = 0;
  char *m = plan->materialized;
  for (int i = 0; i < pg->ninputs; i++) m[pg->inputs[i]] = 1;
  for (int i = 0; i < pg->noutputs; i++) m[pg->outputs[i]] = 1;
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    kl_family f = kl_prim_get(e->prim)->family;
    if (f == KL_FAM_LIB) {
      for (int i = 0; i < e->nin; i++) m[e->ins[i]] = 1;
      for (int i = 0; i < e->nout; i++) m[e->outs[i]] = 1;
    }
    if (f == KL_FAM_REDUCE || nofuse)
      for (int i = 0; i < e->nout; i++) m[e->outs[i]] = 1;
  }
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    if (!kl_prim_fusible(e->prim)) {
      plan->steps[plan->nsteps++] = (kl_plan_step){KL_STEP_LIB, k, -1};
    } else if (m[e->outs[0]]) {
      plan->steps[plan->nsteps++] = (kl_plan_step){KL_STEP_KERNEL, k, e->outs[0]};
    }
  }
}

void kl_plan_free(kl_plan *plan) {
  free(plan->materialized);
  free(plan->steps);
  memset(plan, 0, sizeof *plan);
}
