/* inline.c: replaces call equations by what they compute, for code generation: a checkpoint's
 * body, a custom_jvp function's body, and custom_vjp_call's passed-through operands. The
 * differentiation passes must still see the calls (their rules are in jvp.c), so only the
 * compiler runs this, first. What each call becomes is its rule row's inline_call
 * (transforms/rules/call.c). Depends only on ir/ and transforms/. */
#include <stdio.h>
#include <stdlib.h>

#include "../ir/alloc.h"
#include "fuse.h"
#include "rules/rules.h"

/* The call primitives are those with an inline rule (transforms/rules/call.c). */
static kl_inline_rule inline_rule(kl_prim p) { return kl_rule_get(p)->inline_call; }

/* Copies src's equations into dst; map: src value id -> dst value id (inputs set by the caller).
 * Returns 0, or -1 with a message (a body that no longer fits its call: an internal error). */
static int copy_into(kl_program *dst, const kl_program *src, int *map, char *err, size_t errlen) {
  for (int k = 0; k < src->neqns; k++) {
    const kl_eqn *e = &src->eqns[k];
    int *ins = kl_malloc(sizeof(int) * ((size_t)e->nin + 1)), outs[KL_MAX_OUTS], nout;
    if (!ins) return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory inlining calls");
    for (int i = 0; i < e->nin; i++) ins[i] = map[e->ins[i]];
    int rc = 0;
    kl_inline_rule inl = inline_rule(e->prim);
    const kl_program *body = NULL;
    if (inl && inl(e, &body)) {
      kl_error(err, errlen, KL_ERR_INTERNAL, "internal error: %s body is missing", kl_prim_get(e->prim)->name);
      free(ins);
      return -1;
    }
    if (inl && !body) {
      for (int i = 0; i < e->nout; i++) map[e->outs[i]] = ins[i];
    } else if (inl) {
      int *sub = kl_malloc(sizeof(int) * ((size_t)body->nvals + 1));
      if (!sub) {
        free(ins);
        return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory inlining calls");
      }
      for (int i = 0; i < body->ninputs; i++) sub[body->inputs[i]] = ins[i];
      rc = copy_into(dst, body, sub, err, errlen);
      for (int i = 0; !rc && i < e->nout; i++) map[e->outs[i]] = sub[body->outputs[i]];
      free(sub);
    } else {
      rc = kl_program_add_eqn(dst, e->prim, ins, e->nin, &e->p, outs, &nout, err, errlen);
      for (int i = 0; !rc && i < nout; i++) map[e->outs[i]] = outs[i];
    }
    free(ins);
    if (rc) return -1;
  }
  return 0;
}

int kl_inline_calls(kl_program *pg, char *err, size_t errlen) {
  int any = 0;
  for (int k = 0; k < pg->neqns && !any; k++) any = inline_rule(pg->eqns[k].prim) != NULL;
  if (!any) return 0;
  kl_program *np = kl_program_new();
  int *map = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  int *outs = kl_malloc(sizeof(int) * ((size_t)pg->noutputs + 1));
  if (!np || !map || !outs) {
    kl_program_free(np);
    free(map);
    free(outs);
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory inlining calls");
  }
  for (int i = 0; i < pg->ninputs; i++) map[pg->inputs[i]] = kl_program_add_input(np, &pg->vals[pg->inputs[i]].aval);
  int rc = copy_into(np, pg, map, err, errlen);
  if (!rc) {
    for (int i = 0; i < pg->noutputs; i++) outs[i] = map[pg->outputs[i]];
    kl_program_set_outputs(np, outs, pg->noutputs);
    if (np->oom) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory inlining calls");
  }
  free(outs);
  if (!rc) kl_program_swap(pg, np); /* pg keeps its address (and its references), np takes the old program away */
  free(map);
  kl_program_free(np);
  return rc;
}
