/* call.c: the transformation rules of the call family (checkpoint, custom_jvp_call, custom_vjp_call,
 * custom_vjp_lin, custom_vmap_call): equations whose rules run the drivers again on the bodies they
 * hold (JVP inline, the user's bwd program replayed in reverse mode, batched bodies under vmap, the
 * user's batching rule asked for by handle). Depends only on ir/ and transforms/. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/alloc.h"
#include "../batching.h"
#include "rules.h"

/* ---- JVP ------------------------------------------------------------------------------------- */

/* custom_vjp: the outputs' tangents are custom_vjp_lin(outputs, residuals, consts, input tangents),
 * an opaque linear map whose transpose runs the user's bwd rule (transpose.c); the tangents of the
 * forward computation that produced the outputs are ignored, as the rule replaces them. */
static int custom_vjp_tangents(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, const int *ys, int *touts) {
  const int64_t *c = e->p.custom_vjp.counts.v;
  int64_t n_out = c[0], n_keep = c[1] + c[2], n_x = c[3];
  int any = 0;
  for (int64_t j = 0; j < n_x; j++) any |= ts[n_out + n_keep + j] >= 0;
  if (!any) return 0;
  int *ins = kl_malloc(sizeof(int) * (size_t)e->nin), outs[KL_MAX_OUTS];
  if (!ins) return kl_build_oom(a);
  for (int64_t i = 0; i < n_out; i++) ins[i] = ys[i];
  for (int64_t i = 0; i < n_keep; i++) ins[n_out + i] = xs[n_out + i];
  for (int64_t j = 0; j < n_x; j++) {
    int64_t at = n_out + n_keep + j;
    ins[at] = ts[at] >= 0 ? ts[at] : zeros_like(a, xs[at]);
  }
  int n = kl_build_emit(a, KL_P_CUSTOM_VJP_LIN, ins, e->nin, &e->p, outs);
  free(ins);
  if (n < 0) return -1;
  for (int i = 0; i < n; i++) touts[i] = is_float_val(a, outs[i]) ? outs[i] : -1;
  return 0;
}


/* custom_vjp_call: the forward rule's outputs, with the bwd rule as derivative. */
static int custom_vjp_call_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  for (int i = 0; i < e->nout; i++) ys[i] = xs[i];
  return custom_vjp_tangents(a, e, xs, ts, ys, touts);
}

/* custom_vjp_lin: what a forward-mode derivative of a custom_vjp function leaves. It is linear in
 * its input tangents (its last n_x operands), so its JVP in those is itself on their tangents: what
 * reverse mode through a loop needs (a linear scan body is transposed through its VJP,
 * control_reverse.c). A tangent of its other operands is a second derivative, which it refuses. */
static int custom_vjp_lin_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (kl_build_emit(a, e->prim, xs, e->nin, &e->p, ys) < 0) return -1;
  if (!is_float_val(a, ys[0])) return 0; /* int/bool results carry no tangent */
  const int64_t *c = e->p.custom_vjp.counts.v;
  int64_t fixed = c[0] + c[1] + c[2];
  int any = 0, other = 0;
  for (int64_t i = 0; i < e->nin; i++) {
    if (ts[i] < 0) continue;
    if (i < fixed) other = 1;
    else any = 1;
  }
  if (other || !any)
    return other ? kl_build_fail(a, KL_ERR_UNSUPPORTED, "forward-mode differentiation (jvp, jacfwd, linearize) of a custom_vjp "
                                 "function is not supported (as in JAX), so neither is differentiating it again; use "
                                 "reverse mode (grad, vjp, jacrev), or custom_jvp")
                 : 0;
  int *ins = kl_malloc(sizeof(int) * ((size_t)e->nin + 1)), outs[KL_MAX_OUTS];
  if (!ins) return kl_build_oom(a);
  for (int64_t i = 0; i < e->nin; i++) ins[i] = i < fixed ? xs[i] : ts[i] >= 0 ? ts[i] : zeros_like(a, xs[i]);
  int n = kl_build_emit(a, e->prim, ins, e->nin, &e->p, outs);
  free(ins);
  if (n < 0) return -1;
  for (int i = 0; i < n; i++) touts[i] = is_float_val(a, outs[i]) ? outs[i] : -1;
  return 0;
}

static const kl_program *body_of(kl_build *a, const kl_eqn *e, const kl_program *b) {
  if (!b) kl_build_fail(a, KL_ERR_INTERNAL, "internal error: %s has no body", kl_prim_get(e->prim)->name);
  return b;
}

/* The JVP of `body` inline on its inputs xs and their tangents ts (-1: none): its primal outputs
 * into ys (NULL: not wanted), its tangents into touts. 0, or -1 (a failed). */
static int inline_body_jvp(kl_build *a, const kl_program *body, const int *xs, const int *ts, int *ys, int *touts) {
  int *fp = kl_jvp_new_map(body), *ft = kl_jvp_new_map(body);
  int rc = fp && ft ? 0 : kl_build_oom(a);
  for (int i = 0; !rc && i < body->ninputs; i++) {
    fp[body->inputs[i]] = xs[i];
    ft[body->inputs[i]] = ts[i];
  }
  if (!rc) rc = kl_jvp_eqns(a, body, fp, ft, NULL, NULL, 0);
  for (int i = 0; !rc && i < body->noutputs; i++) {
    if (ys) ys[i] = fp[body->outputs[i]];
    touts[i] = ft[body->outputs[i]];
  }
  free(fp);
  free(ft);
  return rc;
}

/* checkpoint: in forward mode the body's JVP, inline. For reverse mode the body is emitted for its
 * outputs, then its JVP again on its inputs passed through optimization_barrier (so CSE cannot
 * merge the two), all tagged KL_TAG_REMAT: transpose.c emits those primal values in the backward
 * pass where they are needed, and nothing of the body but its outputs outlives the forward pass
 * (JAX's remat with policy nothing_saveable; dots_saveable reuses dot_general results). */
static int checkpoint_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  const kl_program *body = body_of(a, e, e->p.checkpoint.body);
  if (!body) return -1;
  if (!a->remat) return inline_body_jvp(a, body, xs, ts, ys, touts);
  /* the forward pass: the body for its outputs, no tangents */
  int *fp = kl_jvp_new_map(body), *ft = kl_jvp_new_map(body), *rp = kl_jvp_new_map(body), *rt = kl_jvp_new_map(body);
  int rc = fp && ft && rp && rt ? 0 : kl_build_oom(a);
  for (int i = 0; !rc && i < body->ninputs; i++) fp[body->inputs[i]] = xs[i];
  if (!rc) rc = kl_jvp_eqns(a, body, fp, ft, NULL, NULL, 0);
  if (!rc) {
    char saved = a->extra_tag;
    a->extra_tag |= KL_TAG_REMAT;
    for (int i = 0; i < body->ninputs; i++) {
      rp[body->inputs[i]] = e->p.checkpoint.prevent_cse ? kl_build_un(a, KL_P_OPTIMIZATION_BARRIER, xs[i]) : xs[i];
      rt[body->inputs[i]] = ts[i];
    }
    rc = kl_jvp_eqns(a, body, rp, rt, fp, &e->p, e->p.checkpoint.prevent_cse != 0);
    a->extra_tag = saved;
  }
  for (int i = 0; !rc && i < e->nout; i++) {
    ys[i] = fp[body->outputs[i]];
    touts[i] = rt[body->outputs[i]];
  }
  free(fp);
  free(ft);
  free(rp);
  free(rt);
  return rc;
}

/* custom_jvp_call: the rule's program, inline, on (inputs, their tangents (zeros where missing),
 * the rule's consts): its primal outputs replace the call's, its tangent outputs are the tangents.
 * The rule's equations are ordinary ones, so a later differentiation differentiates the rule
 * itself, as JAX does. */
static int custom_jvp_call_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  const kl_program *rule = body_of(a, e, e->p.custom_jvp.jvp);
  if (!rule) return -1;
  const int64_t *c = e->p.custom_jvp.counts.v;
  int64_t n_x = c[0], n_fc = c[1], n_rc = c[2];
  int *rp = kl_jvp_new_map(rule), *rt = kl_jvp_new_map(rule);
  if (!rp || !rt) {
    free(rp);
    free(rt);
    return kl_build_oom(a);
  }
  for (int64_t i = 0; i < n_x; i++) {
    rp[rule->inputs[i]] = xs[i];
    rp[rule->inputs[n_x + i]] = ts[i] >= 0 ? ts[i] : zeros_like(a, xs[i]);
  }
  for (int64_t k = 0; k < n_rc; k++) rp[rule->inputs[2 * n_x + k]] = xs[n_x + n_fc + k];
  int rc = kl_jvp_eqns(a, rule, rp, rt, NULL, NULL, 0);
  for (int i = 0; !rc && i < e->nout; i++) {
    ys[i] = rp[rule->outputs[i]];
    int t = rp[rule->outputs[e->nout + i]];
    /* a tangent output that does not depend on the tangents is zero (the rule must be linear) */
    touts[i] = t >= 0 && (!a->tagged || (a->tags[t] & KL_TAG_TANGENT)) && is_float_val(a, t) ? t : -1;
  }
  free(rp);
  free(rt);
  return rc;
}

/* custom_vmap_call: the call itself for the primal results (so a vmap that comes later still meets
 * the user's batching rule), and the JVP of its body for the tangents. */
static int custom_vmap_call_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  const kl_program *body = body_of(a, e, e->p.custom_vmap.body);
  if (!body || kl_build_emit(a, e->prim, xs, e->nin, &e->p, ys) < 0) return -1;
  return inline_body_jvp(a, body, xs, ts, NULL, touts);
}

/* ---- transpose ------------------------------------------------------------------------------- */

/* custom_vjp_lin: replays the registered bwd program on (residuals, output cotangents, consts)
 * and adds its results to the input tangents' cotangents. A custom_vjp_call met on tangents (a
 * JVP rule computing its tangent through a custom_vjp function: kiln's library primitives with a
 * transpose rule, bound on tangents under vmap) transposes the same way: a function linear in its
 * tangent operands has its bwd as transpose; its forward outputs (operands passed through) get none. */
static int custom_vjp_lin_transpose(kl_tctx *c, const kl_eqn *e, int operand, int ct) {
  (void)operand, (void)ct; /* the whole equation at once */
  kl_build *a = c->a;
  const int64_t *cnt = e->p.custom_vjp.counts.v;
  int64_t n_out = cnt[0], n_res = cnt[1], n_c = cnt[2], n_x = cnt[3];
  const kl_program *sub = e->p.custom_vjp.bwd;
  if (!sub || sub->ninputs != n_res + n_out + n_c || sub->noutputs != n_x) {
    kl_build_fail(a, KL_ERR_INTERNAL, "internal error: custom_vjp backward program does not match its call");
    return -1;
  }
  int *env = kl_malloc(sizeof(int) * ((size_t)sub->nvals + 1));
  if (!env) return kl_build_oom(a);
  for (int v = 0; v < sub->nvals; v++) env[v] = -1;
  for (int64_t i = 0; i < sub->ninputs; i++) {
    int val;
    if (i < n_res) val = kl_tr_prim_of(c, e->ins[n_out + i]);
    else if (i < n_res + n_out) {
      int o = e->outs[i - n_res];
      val = c->ct[o] >= 0 ? c->ct[o] : kl_build_zeros(a, &c->j->vals[o].aval);
    } else val = kl_tr_prim_of(c, e->ins[n_out + n_res + (i - n_res - n_out)]);
    env[sub->inputs[i]] = val;
  }
  for (int k = 0; k < sub->neqns && !a->failed; k++) {
    const kl_eqn *se = &sub->eqns[k];
    int *ins = kl_malloc(sizeof(int) * ((size_t)se->nin + 1)), outs[KL_MAX_OUTS];
    if (!ins) {
      kl_build_oom(a);
      break;
    }
    for (int i = 0; i < se->nin; i++) ins[i] = env[se->ins[i]];
    int n = kl_build_emit(a, se->prim, ins, se->nin, &se->p, outs);
    free(ins);
    for (int i = 0; i < n; i++) env[se->outs[i]] = outs[i];
  }
  for (int64_t j = 0; j < n_x && !a->failed; j++) {
    int xin = e->ins[n_out + n_res + n_c + j];
    if (kl_tr_is_tangent(c, xin)) kl_tr_accumulate(c, xin, env[sub->outputs[j]]);
  }
  free(env);
  return a->failed ? -1 : 0;
}

/* custom_jvp_call or custom_vmap_call on tangents (a JVP rule that calls such a function, or a
 * library primitive, on its tangents): linear in them, it transposes as its function does. */
static int call_body_transpose(kl_tctx *c, const kl_eqn *e, int operand, int ct) {
  (void)operand, (void)ct; /* the whole equation at once */
  kl_build *a = c->a;
  const kl_program *fun =
      body_of(a, e, e->prim == KL_P_CUSTOM_VMAP_CALL ? e->p.custom_vmap.body : e->p.custom_jvp.fun);
  if (!fun) return -1;
  int nin = fun->ninputs, nout = fun->noutputs, rc = -1;
  char *wants = kl_malloc((size_t)nin + 1);
  int *prim = kl_malloc(sizeof(int) * ((size_t)nin + 1)), *cts = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1));
  int *octs = cts ? cts + nin : NULL;
  if (!wants || !prim || !cts) {
    kl_build_oom(a);
    goto done;
  }
  int any = 0;
  for (int i = 0; i < nin; i++) {
    wants[i] = kl_tr_is_tangent(c, e->ins[i]) && kl_dtype_is_inexact(c->j->vals[e->ins[i]].aval.dtype);
    prim[i] = wants[i] ? kl_build_zeros(a, &c->j->vals[e->ins[i]].aval) : kl_tr_prim_of(c, e->ins[i]);
    any |= wants[i];
  }
  for (int j = 0; j < nout; j++) octs[j] = c->ct[e->outs[j]];
  if (!any || a->failed) {
    rc = a->failed ? -1 : 0;
    goto done;
  }
  if (!kl_splice_vjp(a, fun, wants, prim, octs, cts)) {
    for (int i = 0; i < nin; i++)
      if (wants[i] && cts[i] >= 0) kl_tr_accumulate(c, e->ins[i], cts[i]);
    rc = a->failed ? -1 : 0;
  }
done:
  free(wants);
  free(prim);
  free(cts);
  return rc;
}

/* ---- batching -------------------------------------------------------------------------------- */

/* kl_batch_out_flags (rules.h) */
int kl_batch_out_flags(kl_build *b, const kl_program *sub, const char *in_b, char *ob) {
  int *axes = kl_malloc(sizeof(int) * ((size_t)sub->ninputs + 1));
  if (!axes) return kl_build_oom(b), -1;
  for (int i = 0; i < sub->ninputs; i++) axes[i] = in_b[i] ? 0 : -1;
  memset(ob, 0, (size_t)sub->noutputs);
  kl_program *nb = kl_vmap(sub, axes, b->size, ob, b->err, b->errlen);
  free(axes);
  if (!nb) return b->failed = 1, -1;
  kl_program_free(nb);
  return 0;
}

/* kl_batch_carries (rules.h) */
int kl_batch_carries(kl_build *b, const kl_program *body, char *in_b, int at, int n, char *carries) {
  char *ob = kl_malloc((size_t)body->noutputs + 1);
  if (!ob) return kl_build_oom(b), -1;
  int rc = 0;
  for (int round = 0; round <= n; round++) { /* each round batches one more carry, or ends */
    memcpy(in_b + at, carries, (size_t)n);
    if ((rc = kl_batch_out_flags(b, body, in_b, ob))) break;
    int grew = 0;
    for (int i = 0; i < n; i++)
      if (ob[i] && !carries[i]) carries[i] = 1, grew = 1;
    if (!grew) break;
  }
  memcpy(in_b + at, carries, (size_t)n);
  free(ob);
  return rc;
}

/* kl_batch_subprog (rules.h) */
kl_program *kl_batch_subprog(kl_build *b, const kl_program *sub, const char *in_b, const char *want) {
  if (!sub) {
    kl_build_fail(b, KL_ERR_INTERNAL, "vmap: internal error: a call without its body");
    return NULL;
  }
  int *axes = kl_malloc(sizeof(int) * ((size_t)sub->ninputs + 1));
  char *ob = kl_calloc((size_t)sub->noutputs + 1, 1);
  int *outs = kl_malloc(sizeof(int) * ((size_t)sub->noutputs + 1));
  if (!axes || !ob || !outs) {
    free(axes);
    free(ob);
    free(outs);
    kl_build_oom(b);
    return NULL;
  }
  for (int i = 0; i < sub->ninputs; i++) axes[i] = in_b[i] ? 0 : -1;
  kl_program *nb = kl_vmap(sub, axes, b->size, ob, b->err, b->errlen), *done = NULL;
  if (!nb) b->failed = 1;
  else {
    kl_build inner = {.pg = nb, .err = b->err, .errlen = b->errlen, .who = b->who, .size = b->size};
    int64_t zero = 0;
    kl_params rs;
    kl_params_init(&rs, KL_P_REDUCE_SUM);
    rs.reduce.axes = (kl_ivec){&zero, 1};
    for (int i = 0; i < nb->noutputs; i++) {
      int o = nb->outputs[i];
      if (want[i] && !ob[i]) o = kl_batch_add_batch(&inner, o);
      else if (!want[i] && ob[i]) o = kl_build_op(&inner, KL_P_REDUCE_SUM, &o, 1, &rs);
      outs[i] = o;
    }
    if (inner.failed) {
      b->failed = 1;
      kl_program_free(nb);
    } else {
      kl_program_set_outputs(nb, outs, nb->noutputs);
      done = nb;
    }
  }
  free(axes);
  free(ob);
  free(outs);
  return done;
}

/* checkpoint, custom_jvp_call, custom_vjp_call: the same call on batched programs. Every result
 * is batched (as the pass expects of an equation with a batched operand); custom_vjp's bwd rule
 * returns cotangents batched like the inputs they belong to. */
static int call_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_params p = e->p;
  int n = e->nin, nw = 2 * e->nout + n;
  char *want = kl_malloc((size_t)nw + 1), *in_b = kl_malloc((size_t)n * 2 + 1);
  if (!want || !in_b) {
    free(want);
    free(in_b);
    return kl_build_oom(b);
  }
  memset(want, 1, (size_t)nw + 1);
  kl_program *made[2] = {NULL, NULL}; /* the batched bodies, owned until the equation holds them */
  switch (e->prim) {
  case KL_P_CHECKPOINT: p.checkpoint.body = made[0] = kl_batch_subprog(b, e->p.checkpoint.body, r->bs, want); break;
  case KL_P_CUSTOM_JVP_CALL: {
    const int64_t *c = e->p.custom_jvp.counts.v;
    int64_t n_x = c[0], n_fc = c[1], n_rc = c[2];
    p.custom_jvp.fun = made[0] = kl_batch_subprog(b, e->p.custom_jvp.fun, r->bs, want); /* (x, fun consts) */
    memcpy(in_b, r->bs, (size_t)n_x);              /* the rule: (x, tangents of x, rule consts) */
    memcpy(in_b + n_x, r->bs, (size_t)n_x);
    memcpy(in_b + 2 * n_x, r->bs + n_x + n_fc, (size_t)n_rc);
    if (!b->failed) p.custom_jvp.jvp = made[1] = kl_batch_subprog(b, e->p.custom_jvp.jvp, in_b, want);
    break;
  }
  default: { /* custom_vjp_call: (outputs, residuals, consts, inputs); bwd: (residuals, cts, consts) */
    const int64_t *c = e->p.custom_vjp.counts.v;
    int64_t n_out = c[0], n_res = c[1], n_c = c[2], n_x = c[3];
    for (int64_t i = 0; i < n_out; i++) r->xs[i] = kl_batch_as_batched(b, r->xs[i], r->bs[i]);
    memcpy(in_b, r->bs + n_out, (size_t)n_res);
    memset(in_b + n_res, 1, (size_t)n_out);
    memcpy(in_b + n_res + n_out, r->bs + n_out + n_res, (size_t)n_c);
    memcpy(want, r->bs + n_out + n_res + n_c, (size_t)n_x);
    p.custom_vjp.bwd = made[0] = kl_batch_subprog(b, e->p.custom_vjp.bwd, in_b, want);
    break;
  }
  }
  free(want);
  free(in_b);
  int rc = b->failed ? -1 : kl_build_emit(b, e->prim, r->xs, n, &p, r->ys) < 0 ? -1 : 0;
  kl_program_free(made[0]);
  kl_program_free(made[1]);
  return rc;
}

static _Atomic(kl_user_batch_fn) user_batch;

void kl_set_user_batch_fn(kl_user_batch_fn fn) { atomic_store(&user_batch, fn); }

/* custom_vmap_call: the program the user's rule gives for these operands, spliced in; results it
 * says are the same for every example stay unbatched (equinox's unvmap_any feeds a cond whose
 * predicate must stay one). */
static int custom_vmap_call_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_user_batch_fn fn = atomic_load(&user_batch);
  if (!fn) return kl_build_fail(b, KL_ERR_UNSUPPORTED, "vmap of custom_vmap_call: no batching-rule handler is installed");
  kl_aval *avals = kl_malloc(sizeof(kl_aval) * ((size_t)e->nin + 1));
  if (!avals) return kl_build_oom(b);
  for (int i = 0; i < e->nin; i++) avals[i] = *kl_build_aval(b, r->xs[i]);
  char ob[KL_MAX_OUTS] = {0};
  kl_program *pg = fn(e->p.custom_vmap.rule, e->nin, avals, r->bs, b->size, ob, b->err, b->errlen);
  free(avals);
  if (!pg) {
    b->failed = 1;
    return -1;
  }
  int rc;
  if (pg->ninputs != e->nin || pg->noutputs != e->nout)
    rc = kl_build_fail(b, KL_ERR_INTERNAL, "vmap: internal error: a batching rule's program takes %d operands and gives %d "
                       "results, the call has %d and %d", pg->ninputs, pg->noutputs, e->nin, e->nout);
  else rc = kl_splice(b, pg, r->xs, r->ys);
  for (int i = 0; i < e->nout; i++) r->ob[i] = ob[i];
  kl_program_free(pg);
  return rc || b->failed ? -1 : 0;
}

/* ---- inline (for code generation; inline.c) ------------------------------------------------- */

/* custom_vjp_call: its outputs are its first operands (the bwd rule matters only to AD). */
static int custom_vjp_call_inline(const kl_eqn *e, const kl_program **body) {
  (void)e;
  *body = NULL;
  return 0;
}

static int custom_jvp_call_inline(const kl_eqn *e, const kl_program **body) {
  *body = e->p.custom_jvp.fun;
  return *body ? 0 : -1;
}

static int checkpoint_inline(const kl_eqn *e, const kl_program **body) {
  *body = e->p.checkpoint.body;
  return *body ? 0 : -1;
}

static int custom_vmap_call_inline(const kl_eqn *e, const kl_program **body) {
  *body = e->p.custom_vmap.body;
  return *body ? 0 : -1;
}

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_call[] = {
    {KL_P_CUSTOM_VJP_CALL, custom_vjp_call_jvp, custom_vjp_lin_transpose, call_batch, NULL, custom_vjp_call_inline, NULL},
    {KL_P_CUSTOM_VJP_LIN, custom_vjp_lin_jvp, custom_vjp_lin_transpose, NULL, NULL, NULL, NULL},
    {KL_P_CUSTOM_JVP_CALL, custom_jvp_call_jvp, call_body_transpose, call_batch, NULL, custom_jvp_call_inline, NULL},
    {KL_P_CHECKPOINT, checkpoint_jvp, NULL, call_batch, NULL, checkpoint_inline, NULL},
    {KL_P_CUSTOM_VMAP_CALL, custom_vmap_call_jvp, call_body_transpose, custom_vmap_call_batch, NULL, custom_vmap_call_inline, NULL},
    KL_RULES_END};
