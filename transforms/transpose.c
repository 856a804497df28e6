/* transpose.c: reverse mode. kl_vjp runs the JVP pass, keeps the primal equations, and walks
 * the tangent (linear) equations backwards, each through its primitive's transpose rule
 * (transforms/rules/<family>.c), accumulating cotangents. Only linear primitives need transpose
 * rules: every JVP rule writes its tangents with them. Depends only on ir/ and transforms/. */
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "rules/rules.h"
#include "transpose.h"

int kl_transpose_unsupported(kl_tctx *c, const kl_eqn *e) {
  return kl_build_fail(c->a, KL_ERR_UNSUPPORTED, "reverse-mode differentiation of %s is not supported yet by kiln", kl_prim_get(e->prim)->name);
}

void kl_tr_accumulate(kl_tctx *c, int jv, int contrib) {
  if (contrib < 0) return;
  kl_aval target = c->j->vals[jv].aval;
  contrib = kl_ad_sum_to(c->a, contrib, &target);
  if (contrib >= 0 && kl_build_aval(c->a, contrib)->dtype != target.dtype) {
    kl_params p;
    kl_params_init(&p, KL_P_CONVERT);
    p.convert.new_dtype = (int)target.dtype;
    contrib = kl_build_op(c->a, KL_P_CONVERT, &contrib, 1, &p);
  }
  c->ct[jv] = kl_build_add(c->a, c->ct[jv], contrib);
}

/* The V value of j's primal value jv. A checkpoint's recomputed values (KL_TAG_REMAT) are left
 * out of the forward part; the first use emits one here, with what it depends on, so the
 * recomputation sits in the backward pass next to its use. */
int kl_tr_prim_of(kl_tctx *c, int jv) {
  int top = 0;
  if (c->vmap[jv] >= 0 || c->a->failed) return c->vmap[jv];
  c->stack[top++] = jv;
  while (top > 0 && !c->a->failed) {
    int v = c->stack[top - 1], k = c->j->vals[v].producer;
    if (c->vmap[v] >= 0) {
      top--;
      continue;
    }
    if (k < 0) return kl_build_fail(c->a, KL_ERR_INTERNAL, "internal error: reverse mode found no value for %d", v);
    const kl_eqn *e = &c->j->eqns[k];
    int ready = 1;
    for (int i = 0; i < e->nin; i++) {
      if (c->vmap[e->ins[i]] >= 0) continue;
      if (top == c->capstack) {
        int *stack = kl_realloc(c->stack, sizeof(int) * 2 * (size_t)c->capstack);
        if (!stack) return kl_build_oom(c->a);
        c->stack = stack;
        c->capstack *= 2;
      }
      c->stack[top++] = e->ins[i];
      ready = 0;
    }
    if (!ready) continue;
    int *ins = kl_malloc(sizeof(int) * ((size_t)e->nin + 1)), outs[KL_MAX_OUTS];
    if (!ins) return kl_build_oom(c->a);
    for (int i = 0; i < e->nin; i++) ins[i] = c->vmap[e->ins[i]];
    int n = kl_build_emit(c->a, e->prim, ins, e->nin, &e->p, outs);
    free(ins);
    for (int i = 0; i < n; i++) c->vmap[e->outs[i]] = outs[i];
    top--;
  }
  return c->vmap[jv];
}

kl_program *kl_vjp(const kl_program *pg, const char *wants, char *err, size_t errlen) {
  return kl_vjp_ex(pg, wants, NULL, err, errlen);
}

kl_program *kl_vjp_ex(const kl_program *pg, const char *wants, const char *seeded, char *err, size_t errlen) {
  char *jtag = NULL;
  kl_program *j = kl_jvp_ex(pg, wants, &jtag, 1, err, errlen);
  if (!j) return NULL;
  kl_build a = {.pg = kl_program_new(), .err = err, .errlen = errlen, .tagged = 1};
  kl_tctx c = {.a = &a, .j = j, .jtag = jtag};
  c.vmap = kl_malloc(sizeof(int) * ((size_t)j->nvals + 1));
  c.ct = kl_malloc(sizeof(int) * ((size_t)j->nvals + 1));
  c.capstack = 64;
  c.stack = kl_malloc(sizeof(int) * (size_t)c.capstack);
  int *ct_in = kl_malloc(sizeof(int) * ((size_t)pg->noutputs + 1));
  if (!a.pg || !c.vmap || !c.ct || !c.stack || !ct_in) {
    free(c.vmap);
    free(c.ct);
    free(c.stack);
    free(ct_in);
    free(jtag);
    kl_program_free(j);
    kl_program_free(a.pg);
    kl_error(err, errlen, KL_ERR_NOMEM, "vjp: out of memory");
    return NULL;
  }
  for (int v = 0; v < j->nvals; v++) c.vmap[v] = c.ct[v] = -1;
  /* inputs: the primal inputs, then one cotangent per primal output */
  for (int i = 0; i < pg->ninputs; i++) c.vmap[j->inputs[i]] = kl_program_add_input(a.pg, &j->vals[j->inputs[i]].aval);
  for (int i = 0; i < pg->noutputs; i++) ct_in[i] = kl_program_add_input(a.pg, &pg->vals[pg->outputs[i]].aval);
  kl_build_lit(&a, 0, KL_F32); /* allocate the tag array */
  /* the primal part (recomputations wait for their first use, see prim_of) */
  for (int k = 0; k < j->neqns && !a.failed; k++) {
    const kl_eqn *e = &j->eqns[k];
    if (jtag[e->outs[0]]) continue;
    int small[256], outs[KL_MAX_OUTS];
    int *ins = e->nin <= 256 ? small : kl_malloc(sizeof(int) * (size_t)e->nin);
    if (!ins) {
      kl_build_oom(&a);
      break;
    }
    for (int i = 0; i < e->nin; i++) ins[i] = c.vmap[e->ins[i]];
    int rc = kl_build_emit(&a, e->prim, ins, e->nin, &e->p, outs);
    if (ins != small) free(ins);
    if (rc < 0) break;
    for (int i = 0; i < e->nout; i++) c.vmap[e->outs[i]] = outs[i];
  }
  /* seed: the cotangents of the tangent outputs */
  for (int i = 0; i < pg->noutputs && !a.failed; i++) {
    int tv = j->outputs[pg->noutputs + i];
    if (seeded && !seeded[i]) continue; /* a symbolic zero: nothing downstream of it is transposed */
    if ((jtag[tv] & KL_TAG_TANGENT) && kl_dtype_is_inexact(j->vals[tv].aval.dtype)) kl_tr_accumulate(&c, tv, ct_in[i]);
  }
  /* the linear part, backwards */
  for (int k = j->neqns - 1; k >= 0 && !a.failed; k--) {
    const kl_eqn *e = &j->eqns[k];
    if (!(jtag[e->outs[0]] & KL_TAG_TANGENT)) continue;
    kl_transpose_rule rule = kl_rule_get(e->prim)->transpose;
    if (kl_rule_whole(e->prim)) { /* one call for the whole equation, even without a cotangent */
      if (rule) rule(&c, e, -1, -1);
      else kl_transpose_unsupported(&c, e);
      continue;
    }
    int ct = c.ct[e->outs[0]];
    /* an empty cotangent is a symbolic zero: it contributes nothing (as JAX, whose gather of no
     * element sends no NaN back through the derivative of what it read) */
    if (ct < 0 || kl_aval_size(kl_build_aval(&a, ct)) == 0) continue;
    for (int i = 0; i < e->nin && !a.failed; i++) {
      if (!kl_tr_is_tangent(&c, e->ins[i])) continue;
      int contrib = rule ? rule(&c, e, i, ct) : kl_transpose_unsupported(&c, e);
      if (contrib < 0 && a.failed) break;
      kl_tr_accumulate(&c, e->ins[i], contrib);
    }
  }
  if (!a.failed) {
    int *outs = kl_malloc(sizeof(int) * ((size_t)pg->noutputs + (size_t)pg->ninputs + 1));
    int n = 0;
    if (!outs) kl_build_oom(&a);
    for (int i = 0; outs && i < pg->noutputs; i++) outs[n++] = kl_tr_prim_of(&c, j->outputs[i]);
    int tin = pg->ninputs; /* tangent inputs of j follow its primal inputs */
    for (int i = 0; outs && i < pg->ninputs && !a.failed; i++) {
      if (!wants[i]) continue;
      const kl_aval *av = &pg->vals[pg->inputs[i]].aval;
      int g = -1;
      if (kl_dtype_is_inexact(av->dtype)) g = c.ct[j->inputs[tin++]];
      outs[n++] = g >= 0 ? g : kl_build_zeros(&a, av);
    }
    if (outs && !a.failed) kl_program_set_outputs(a.pg, outs, n);
    free(outs);
    if (a.pg->oom && !a.failed) kl_build_oom(&a);
  }
  free(ct_in);
  free(c.vmap);
  free(c.ct);
  free(c.stack);
  free(jtag);
  kl_program_free(j);
  free(a.tags);
  if (a.failed) {
    kl_program_free(a.pg);
    return NULL;
  }
  return a.pg;
}
