/* jvp.c: forward-mode differentiation of a Program. Every equation is copied, then its JVP rule
 * (transforms/rules/<family>.c, found with kl_rule_get) writes the tangent of its outputs as linear
 * functions of the input tangents, with primal values as coefficients. A missing tangent (-1) is a
 * symbolic zero. A primitive without a rule fails with "differentiation of <prim> is not supported
 * yet", NotImplementedError in Python. Depends only on ir/ and transforms/. */
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "ad.h"
#include "rules/rules.h"

int kl_jvp_unsupported(kl_build *a, const kl_eqn *e) {
  return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiation of %s is not supported yet by kiln", kl_prim_get(e->prim)->name);
}

int kl_jvp_zero(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)a, (void)e, (void)xs, (void)ts, (void)ys, (void)touts;
  return 0;
}

int *kl_jvp_new_map(const kl_program *pg) {
  int *m = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  if (m)
    for (int v = 0; v < pg->nvals; v++) m[v] = -1;
  return m;
}

/* Whether a checkpoint with params pol (NULL: none) keeps e's result from the forward pass. */
static int saveable(const kl_eqn *e, const kl_params *pol) {
  int bits = pol ? pol->checkpoint.policy : 0;
  if (e->prim == KL_P_DOT_GENERAL)
    return (bits & KL_REMAT_DOTS) || ((bits & KL_REMAT_DOTS_NO_BATCH) && e->p.dot.lhs_batch.n == 0);
  if (e->prim != KL_P_NAME || !(bits & (KL_REMAT_NAMES | KL_REMAT_OTHER_NAMES))) return 0;
  int listed = 0;
  for (int i = 0; i < pol->checkpoint.names.n; i++) listed |= pol->checkpoint.names.v[i] == e->p.name.id;
  return listed ? (bits & KL_REMAT_NAMES) != 0 : (bits & KL_REMAT_OTHER_NAMES) != 0;
}

/* The tangents of e's outputs into touts (-1 = zero), ys already emitted. */
static int jvp_rule(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (e->nout == 1 && !is_float_val(a, ys[0])) return 0; /* int/bool results carry no tangent */
  kl_jvp_rule rule = kl_rule_get(e->prim)->jvp;
  return rule ? rule(a, e, xs, ts, ys, touts) : kl_jvp_unsupported(a, e);
}

/* One equation of kl_jvp_eqns; xs, ts: room for e's operands and their tangents. */
static int jvp_eqn(kl_build *a, const kl_eqn *e, int *pmap, int *tmap, const int *fwd, const kl_params *policy,
                   int barrier, int *xs,
                   int *ts) {
  int ys[KL_MAX_OUTS], touts[KL_MAX_OUTS], any = 0;
  for (int i = 0; i < e->nin; i++) {
    xs[i] = pmap[e->ins[i]];
    ts[i] = tmap[e->ins[i]];
    any |= ts[i] >= 0;
  }
  for (int i = 0; i < e->nout; i++) touts[i] = -1;
  if (any && kl_rule_whole(e->prim)) {
    kl_jvp_rule rule = kl_rule_get(e->prim)->jvp;
    if (rule ? rule(a, e, xs, ts, ys, touts) : kl_jvp_unsupported(a, e)) return -1;
  } else {
    if (fwd && saveable(e, policy)) { /* a result the policy keeps from the forward pass */
      ys[0] = fwd[e->outs[0]];
      if (barrier) ys[0] = kl_build_un(a, KL_P_OPTIMIZATION_BARRIER, ys[0]);
    } else if (kl_build_emit(a, e->prim, xs, e->nin, &e->p, ys) < 0)
      return -1;
    if (!any) {
      for (int i = 0; i < e->nout; i++) pmap[e->outs[i]] = ys[i];
      return 0;
    }
    if (jvp_rule(a, e, xs, ts, ys, touts)) return -1;
  }
  for (int i = 0; i < e->nout; i++) {
    pmap[e->outs[i]] = ys[i];
    tmap[e->outs[i]] = touts[i];
  }
  return 0;
}

/* kl_jvp_eqns (rules.h). A call equation with some input tangent is consumed by its rule (the
 * outputs come from the rule's equations), so enclosing differentiations see what the rule
 * computed, as in JAX. */
int kl_jvp_eqns(kl_build *a, const kl_program *pg, int *pmap, int *tmap, const int *fwd, const kl_params *policy,
                int barrier) {
  int small[2 * 64];
  for (int k = 0; k < pg->neqns && !a->failed; k++) {
    const kl_eqn *e = &pg->eqns[k];
    int *xs = e->nin <= 64 ? small : kl_malloc(sizeof(int) * 2 * (size_t)e->nin);
    if (!xs) return kl_build_oom(a);
    int rc = jvp_eqn(a, e, pmap, tmap, fwd, policy, barrier, xs, xs + (e->nin <= 64 ? 64 : e->nin));
    if (xs != small) free(xs);
    if (rc) return -1;
  }
  return a->failed ? -1 : 0;
}

kl_program *kl_jvp(const kl_program *pg, const char *has_tangent, char **tags, char *err, size_t errlen) {
  return kl_jvp_ex(pg, has_tangent, tags, 0, err, errlen);
}

kl_program *kl_jvp_ex(const kl_program *pg, const char *has_tangent, char **tags, int remat, char *err,
                      size_t errlen) {
  kl_build a = {.pg = kl_program_new(), .err = err, .errlen = errlen, .tagged = 1, .remat = remat};
  int *pmap = kl_jvp_new_map(pg), *tmap = kl_jvp_new_map(pg);
  if (!a.pg || !pmap || !tmap) {
    kl_program_free(a.pg);
    free(pmap);
    free(tmap);
    kl_error(err, errlen, KL_ERR_NOMEM, "jvp: out of memory");
    return NULL;
  }
  for (int i = 0; i < pg->ninputs; i++) pmap[pg->inputs[i]] = kl_program_add_input(a.pg, &pg->vals[pg->inputs[i]].aval);
  kl_build_lit(&a, 0, KL_F32); /* grows the tag array */
  for (int i = 0; i < pg->ninputs; i++) {
    const kl_aval *av = &pg->vals[pg->inputs[i]].aval;
    if (!has_tangent[i] || !kl_dtype_is_inexact(av->dtype)) continue;
    int t = kl_program_add_input(a.pg, av);
    tmap[pg->inputs[i]] = t;
    kl_build_lit(&a, 0, av->dtype); /* grows the tag array past t */
    if (t >= 0 && t < a.cap) a.tags[t] = KL_TAG_TANGENT; /* else the builder has failed */
  }
  kl_jvp_eqns(&a, pg, pmap, tmap, NULL, NULL, 0);
  if (!a.failed) {
    int *outs = kl_malloc(sizeof(int) * (2 * (size_t)pg->noutputs + 1));
    if (!outs) kl_build_oom(&a);
    for (int i = 0; outs && i < pg->noutputs; i++) outs[i] = pmap[pg->outputs[i]];
    for (int i = 0; outs && i < pg->noutputs && !a.failed; i++) {
      int t = tmap[pg->outputs[i]];
      outs[pg->noutputs + i] = t >= 0 ? t : kl_build_zeros(&a, &pg->vals[pg->outputs[i]].aval);
    }
    if (outs && !a.failed) kl_program_set_outputs(a.pg, outs, 2 * pg->noutputs);
    free(outs);
    if (a.pg->oom && !a.failed) kl_build_oom(&a);
  }
  free(pmap);
  free(tmap);
  if (a.failed) {
    kl_program_free(a.pg);
    free(a.tags);
    return NULL;
  }
  if (tags) *tags = a.tags;
  else free(a.tags);
  return a.pg;
}
