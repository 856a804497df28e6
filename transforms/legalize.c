/* legalize.c: the compiler's legalize pass: each equation whose primitive has a legalize rule
 * (transforms/rules/<family>.c) is put in the form its lowering takes; dot_general's rule, for
 * one, gives operands that BLAS/cuBLAS cannot take as stored a transpose and a convert of their
 * own, so that every product runs on the library with no host copy. Other equations are copied.
 * Depends only on ir/ and transforms/. */
#include <stdlib.h>

#include "../ir/alloc.h"
#include "build.h"
#include "fuse.h"
#include "rules/rules.h"

int kl_legalize(kl_program *pg, char *err, size_t errlen) {
  int any = 0;
  for (int k = 0; k < pg->neqns && !any; k++) any = kl_rule_get(pg->eqns[k].prim)->legalize != NULL;
  if (!any) return 0;
  kl_program *np = kl_program_new();
  int *map = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  int *outs = kl_malloc(sizeof(int) * ((size_t)pg->noutputs + 1));
  int *ins = kl_malloc(sizeof(int) * ((size_t)kl_program_max_operands(pg) + 1));
  kl_build b = {.pg = np, .err = err, .errlen = errlen, .who = "legalize: "};
  int rc = 0;
  if (!np || !map || !outs || !ins) {
    rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass legalize");
    goto done;
  }
  for (int i = 0; i < pg->ninputs; i++) map[pg->inputs[i]] = kl_program_add_input(np, &pg->vals[pg->inputs[i]].aval);
  for (int k = 0; k < pg->neqns && !rc; k++) {
    const kl_eqn *e = &pg->eqns[k];
    for (int i = 0; i < e->nin; i++) ins[i] = map[e->ins[i]];
    int o[KL_MAX_OUTS], no = 0;
    kl_legalize_rule rule = kl_rule_get(e->prim)->legalize;
    int done = rule ? rule(&b, e, ins, o) : 0;
    if (done < 0) rc = -1;
    else if (!done) rc = kl_program_add_eqn(np, e->prim, ins, e->nin, &e->p, o, &no, err, errlen);
    for (int i = 0; !rc && i < e->nout; i++) map[e->outs[i]] = o[i];
  }
  if (!rc) {
    for (int i = 0; i < pg->noutputs; i++) outs[i] = map[pg->outputs[i]];
    kl_program_set_outputs(np, outs, pg->noutputs);
    if (np->oom) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass legalize");
  }
  if (!rc) kl_program_swap(pg, np); /* pg keeps its address and references; np takes the old program away */
done:
  free(ins);
  free(outs);
  free(map);
  kl_program_free(np);
  return rc;
}
