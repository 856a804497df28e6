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

#define RECOMPUTE_BUDGET 24
#define EXPR_LIMIT 256

/* Rough cost of recomputing one element of a primitive's result. */
static int op_weight(kl_prim p) {
  switch (kl_prim_get(p)->family) {
  case KL_FAM_CONST: case KL_FAM_IOTA: case KL_FAM_SHAPE: case KL_FAM_CONVERT: return 1;
  case KL_FAM_UNARY:
    switch (p) {
    case KL_P_NEG: case KL_P_ABS: case KL_P_SIGN: case KL_P_FLOOR: case KL_P_CEIL: case KL_P_ROUND: case KL_P_NOT:
    case KL_P_SQUARE: case KL_P_STOP_GRADIENT: case KL_P_IS_FINITE: case KL_P_SQRT: return 1;
    default: return 10; /* transcendental: a polynomial of ~10-30 ops */
    }
  case KL_FAM_BINARY: return p == KL_P_POW || p == KL_P_ATAN2 ? 20 : p == KL_P_DIV || p == KL_P_REM ? 3 : 1;
  default: return 1;
  }
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
  /* Recomputing a value in each consumer is cheap only while the value is cheap: a value read by
   * several consumers (possibly at different indices, as in a stencil) is materialized once its
   * recomputation would cost more than RECOMPUTE_BUDGET extra ops, and any expression grows into
   * a buffer past EXPR_LIMIT ops, so kernels never grow exponentially with the program. */
  int *uses = calloc((size_t)pg->nvals + 1, sizeof(int)), *last = malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  int *cost = calloc((size_t)pg->nvals + 1, sizeof(int));
  if (!uses || !last || !cost) abort();
  for (int v = 0; v < pg->nvals; v++) last[v] = -1;
  for (int k = 0; k < pg->neqns; k++)
    for (int i = 0; i < pg->eqns[k].nin; i++) {
      int v = pg->eqns[k].ins[i];
      if (last[v] != k) uses[v]++;
      last[v] = k;
    }
  for (int k = 0; k < pg->neqns && !nofuse; k++) {
    const kl_eqn *e = &pg->eqns[k];
    if (!kl_prim_fusible(e->prim) || kl_prim_get(e->prim)->family == KL_FAM_REDUCE) continue;
    int c = op_weight(e->prim);
    for (int i = 0; i < e->nin; i++)
      if (!m[e->ins[i]]) c += cost[e->ins[i]];
    for (int i = 0; i < e->nout; i++) {
      int v = e->outs[i];
      cost[v] = c > EXPR_LIMIT * 4 ? EXPR_LIMIT * 4 : c;
      if (m[v]) continue;
      if (c > EXPR_LIMIT || (uses[v] > 1 && (long)c * (uses[v] - 1) > RECOMPUTE_BUDGET)) {
        m[v] = 1;
        cost[v] = 0;
      }
    }
  }
  free(uses);
  free(last);
  free(cost);
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
