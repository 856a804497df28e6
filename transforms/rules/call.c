/* call.c: the transformation rules of the call family (checkpoint, custom_jvp_call, custom_vjp_call,
 * custom_vjp_lin): equations whose rules run the drivers again on the bodies they hold (JVP inline,
 * the user's bwd program replayed in reverse mode, batched bodies under vmap). Depends only on ir/
 * and transforms/. */
#include <stdlib.h>
#include <string.h>

#include "../../ir/alloc.h"
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

/* custom_vjp_lin: what a forward-mode derivative of a custom_vjp function leaves. */
static int custom_vjp_lin_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ts, (void)touts;
  if (kl_build_emit(a, e->prim, xs, e->nin, &e->p, ys) < 0) return -1;
  if (!is_float_val(a, ys[0])) return 0; /* int/bool results carry no tangent */
  return kl_build_fail(a, KL_ERR_UNSUPPORTED, "forward-mode differentiation (jvp, jacfwd, linearize) of a custom_vjp function is not "
                       "supported (as in JAX), so neither is differentiating it again; use reverse mode (grad, "
                       "vjp, jacrev), or custom_jvp");
}

static const kl_program *body_of(kl_build *a, const kl_eqn *e, const kl_program *b) {
  if (!b) kl_build_fail(a, KL_ERR_INTERNAL, "internal error: %s has no body", kl_prim_get(e->prim)->name);
  return b;
}

/* checkpoint: in forward mode the body's JVP, inline. For reverse mode the body is emitted for its
 * outputs, then its JVP again on its inputs passed through optimization_barrier (so CSE cannot
 * merge the two), all tagged KL_TAG_REMAT: transpose.c emits those primal values in the backward
 * pass where they are needed, and nothing of the body but its outputs outlives the forward pass
 * (JAX's remat with policy nothing_saveable; dots_saveable reuses dot_general results). */
static int checkpoint_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  const kl_program *body = body_of(a, e, e->p.checkpoint.body);
  if (!body) return -1;
  int *fp = kl_jvp_new_map(body), *ft = kl_jvp_new_map(body), *rp = NULL, *rt = NULL;
  if (!fp || !ft) {
    free(fp);
    free(ft);
    return kl_build_oom(a);
  }
  for (int i = 0; i < body->ninputs; i++) {
    fp[body->inputs[i]] = xs[i];
    if (!a->remat) ft[body->inputs[i]] = ts[i];
  }
  int rc = kl_jvp_eqns(a, body, fp, ft, NULL, 0, 0);
  if (!rc && a->remat) {
    rp = kl_jvp_new_map(body);
    rt = kl_jvp_new_map(body);
    if (!rp || !rt) {
      free(fp);
      free(ft);
      free(rp);
      free(rt);
      return kl_build_oom(a);
    }
    char saved = a->extra_tag;
    a->extra_tag |= KL_TAG_REMAT;
    for (int i = 0; i < body->ninputs; i++) {
      rp[body->inputs[i]] = e->p.checkpoint.prevent_cse ? kl_build_un(a, KL_P_OPTIMIZATION_BARRIER, xs[i]) : xs[i];
      rt[body->inputs[i]] = ts[i];
    }
    rc = kl_jvp_eqns(a, body, rp, rt, fp, e->p.checkpoint.policy, e->p.checkpoint.prevent_cse != 0);
    a->extra_tag = saved;
  }
  for (int i = 0; !rc && i < e->nout; i++) {
    ys[i] = fp[body->outputs[i]];
    touts[i] = (a->remat ? rt : ft)[body->outputs[i]];
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
  int rc = kl_jvp_eqns(a, rule, rp, rt, NULL, 0, 0);
  for (int i = 0; !rc && i < e->nout; i++) {
    ys[i] = rp[rule->outputs[i]];
    int t = rp[rule->outputs[e->nout + i]];
    /* a tangent output that does not depend on the tangents is zero (the rule must be linear) */
    touts[i] = t >= 0 && (a->tags[t] & KL_TAG_TANGENT) && is_float_val(a, t) ? t : -1;
  }
  free(rp);
  free(rt);
  return rc;
}

/* ---- transpose ------------------------------------------------------------------------------- */

/* custom_vjp_lin: replays the registered bwd program on (residuals, output cotangents, consts)
 * and adds its results to the input tangents' cotangents. */
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

/* ---- batching -------------------------------------------------------------------------------- */

/* Batches the body `sub` with input i batched (at axis 0) where in_b[i]; its output i comes back
 * batched where want[i] is 1 and unbatched where it is 0 (summed over the batch if it depended
 * on it: the cotangent of an input shared by all examples). Returns the batched program (owned),
 * or NULL with a message. */
static kl_program *batch_subprog(kl_build *b, const kl_program *sub, const char *in_b, const char *want) {
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
  case KL_P_CHECKPOINT: p.checkpoint.body = made[0] = batch_subprog(b, e->p.checkpoint.body, r->bs, want); break;
  case KL_P_CUSTOM_JVP_CALL: {
    const int64_t *c = e->p.custom_jvp.counts.v;
    int64_t n_x = c[0], n_fc = c[1], n_rc = c[2];
    p.custom_jvp.fun = made[0] = batch_subprog(b, e->p.custom_jvp.fun, r->bs, want); /* (x, fun consts) */
    memcpy(in_b, r->bs, (size_t)n_x);              /* the rule: (x, tangents of x, rule consts) */
    memcpy(in_b + n_x, r->bs, (size_t)n_x);
    memcpy(in_b + 2 * n_x, r->bs + n_x + n_fc, (size_t)n_rc);
    if (!b->failed) p.custom_jvp.jvp = made[1] = batch_subprog(b, e->p.custom_jvp.jvp, in_b, want);
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
    p.custom_vjp.bwd = made[0] = batch_subprog(b, e->p.custom_vjp.bwd, in_b, want);
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

/* Copies src's equations into b's program, src's inputs being the values ins; its outputs'
 * values go to outs. Returns 0, or -1 (b failed). */
static int splice(kl_build *b, const kl_program *src, const int *ins, int *outs) {
  int *map = kl_malloc(sizeof(int) * ((size_t)src->nvals + 1));
  int *args = kl_malloc(sizeof(int) * ((size_t)src->nvals + 1)); /* no equation has more operands */
  if (!map || !args) {
    free(map);
    free(args);
    return kl_build_oom(b);
  }
  for (int i = 0; i < src->ninputs; i++) map[src->inputs[i]] = ins[i];
  for (int k = 0; k < src->neqns && !b->failed; k++) {
    const kl_eqn *e = &src->eqns[k];
    int res[KL_MAX_OUTS];
    for (int i = 0; i < e->nin; i++) args[i] = map[e->ins[i]];
    if (kl_build_emit(b, e->prim, args, e->nin, &e->p, res) < 0) break;
    for (int i = 0; i < e->nout; i++) map[e->outs[i]] = res[i];
  }
  for (int i = 0; !b->failed && i < src->noutputs; i++) outs[i] = map[src->outputs[i]];
  free(map);
  free(args);
  return b->failed ? -1 : 0;
}

/* while, forward mode: a while over (carries, tangents of the float carries) whose body is the
 * body's JVP; tangents of the body's consts are extra consts, the condition ignores tangents.
 * A float carry without a tangent starts from zeros (the body may give it one). */
static int while_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  const int64_t *c = e->p.while_.counts.v;
  int nc = (int)c[0], nb = (int)c[1], n = (int)c[2], nt = 0, ntc = 0;
  const kl_program *cond = e->p.while_.cond, *body = e->p.while_.body;
  char *has = kl_calloc((size_t)n + 1, 1);
  int *fp = kl_jvp_new_map(body), *ft = kl_jvp_new_map(body);
  int *ops = kl_malloc(sizeof(int) * ((size_t)(2 * (nc + nb + n)) + 2));
  int *outs = kl_malloc(sizeof(int) * ((size_t)(2 * n) + 2)), *cin = kl_malloc(sizeof(int) * ((size_t)(n + nc) + 1));
  kl_program *body2 = kl_program_new(), *cond2 = kl_program_new();
  int rc = -1;
  if (!has || !fp || !ft || !ops || !outs || !cin || !body2 || !cond2) {
    kl_build_oom(a);
    goto done;
  }
  for (int i = 0; i < n; i++) nt += has[i] = kl_dtype_is_float(body->vals[body->inputs[i]].aval.dtype) != 0;
  for (int j = 0; j < nb; j++) ntc += ts[nc + j] >= 0;
  { /* body2: (carries, their tangents, body consts, their tangents) -> (carries, tangents) */
    kl_build in = {.pg = body2, .err = a->err, .errlen = a->errlen, .who = a->who};
    for (int i = 0; i < n; i++) fp[body->inputs[i]] = kl_program_add_input(body2, &body->vals[body->inputs[i]].aval);
    for (int i = 0; i < n; i++)
      if (has[i]) ft[body->inputs[i]] = kl_program_add_input(body2, &body->vals[body->inputs[i]].aval);
    for (int j = 0; j < nb; j++) fp[body->inputs[n + j]] = kl_program_add_input(body2, &body->vals[body->inputs[n + j]].aval);
    for (int j = 0; j < nb; j++)
      if (ts[nc + j] >= 0) ft[body->inputs[n + j]] = kl_program_add_input(body2, &body->vals[body->inputs[n + j]].aval);
    if (!kl_jvp_eqns(&in, body, fp, ft, NULL, 0, 0)) {
      int k = 0;
      for (int i = 0; i < n; i++) outs[k++] = fp[body->outputs[i]];
      for (int i = 0; i < n; i++)
        if (has[i]) {
          int t = ft[body->outputs[i]];
          outs[k++] = t >= 0 ? t : kl_build_zeros(&in, &body->vals[body->outputs[i]].aval);
        }
      if (!in.failed) kl_program_set_outputs(body2, outs, k);
    }
    if (in.failed || body2->oom) {
      a->failed = 1;
      goto done;
    }
  }
  { /* cond2: (carries, their tangents, cond consts) -> cond(carries, cond consts) */
    kl_build in = {.pg = cond2, .err = a->err, .errlen = a->errlen, .who = a->who};
    for (int i = 0; i < n; i++) cin[i] = kl_program_add_input(cond2, &cond->vals[cond->inputs[i]].aval);
    for (int i = 0; i < n; i++)
      if (has[i]) kl_program_add_input(cond2, &cond->vals[cond->inputs[i]].aval);
    for (int j = 0; j < nc; j++) cin[n + j] = kl_program_add_input(cond2, &cond->vals[cond->inputs[n + j]].aval);
    int pred;
    if (!splice(&in, cond, cin, &pred)) kl_program_set_outputs(cond2, &pred, 1);
    if (in.failed || cond2->oom) {
      a->failed = 1;
      goto done;
    }
  }
  { /* the equation: cond consts; body consts and their tangents; carries and their tangents */
    int k = 0;
    for (int j = 0; j < nc + nb; j++) ops[k++] = xs[j];
    for (int j = 0; j < nb; j++)
      if (ts[nc + j] >= 0) ops[k++] = ts[nc + j];
    for (int i = 0; i < n; i++) ops[k++] = xs[nc + nb + i];
    for (int i = 0; i < n; i++)
      if (has[i]) ops[k++] = ts[nc + nb + i] >= 0 ? ts[nc + nb + i] : kl_build_zeros(a, &body->vals[body->inputs[i]].aval);
    int64_t counts[3] = {nc, nb + ntc, n + nt};
    kl_params p = e->p;
    p.while_.counts = (kl_ivec){counts, 3};
    p.while_.cond = cond2;
    p.while_.body = body2;
    int res[KL_MAX_OUTS];
    if (n + nt > KL_MAX_OUTS) {
      kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiation of while: %d carries and tangents (at most %d)", n + nt,
                    KL_MAX_OUTS);
      goto done;
    }
    if (a->failed || kl_build_emit(a, KL_P_WHILE, ops, k, &p, res) < 0) goto done;
    for (int i = 0, t = n; i < n; i++) {
      ys[i] = res[i];
      touts[i] = has[i] ? res[t++] : -1;
    }
    rc = 0;
  }
done:
  free(has);
  free(fp);
  free(ft);
  free(ops);
  free(outs);
  free(cin);
  kl_program_free(body2);
  kl_program_free(cond2);
  return a->failed ? -1 : rc;
}

/* while: every carry batched; the loop runs while the condition holds for any example, and an
 * example whose condition is false keeps its carries (the body's results are selected per
 * example), as JAX batches it. The new body computes the batched condition itself, so its consts
 * are the body's and then the condition's. */
static int while_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  const int64_t *c = e->p.while_.counts.v;
  int nc = (int)c[0], nb = (int)c[1], n = (int)c[2];
  char *in_b = kl_malloc((size_t)(n + nc + nb) + 1), *want = kl_malloc((size_t)n + 2);
  int *ins = kl_malloc(sizeof(int) * ((size_t)(n + nb) + 2)), *xs2 = NULL; /* body2's carries, body consts */
  kl_program *cond_b = NULL, *body_b = NULL, *body2 = NULL;
  int rc = -1;
  if (!in_b || !want || !ins) goto oom;
  for (int i = 0; i < n; i++) r->xs[nc + nb + i] = kl_batch_as_batched(b, r->xs[nc + nb + i], r->bs[nc + nb + i]);
  memset(want, 1, (size_t)n + 1);
  memset(in_b, 1, (size_t)n); /* the programs take (carries, consts) */
  memcpy(in_b + n, r->bs, (size_t)nc);
  if (!(cond_b = batch_subprog(b, e->p.while_.cond, in_b, want))) goto done;
  memcpy(in_b + n, r->bs + nc, (size_t)nb);
  if (!(body_b = batch_subprog(b, e->p.while_.body, in_b, want))) goto done;
  { /* the condition: any example's */
    kl_build inner = {.pg = cond_b, .err = b->err, .errlen = b->errlen, .who = b->who, .size = b->size};
    int64_t zero = 0;
    kl_params rp;
    kl_params_init(&rp, KL_P_REDUCE_OR);
    rp.reduce.axes = (kl_ivec){&zero, 1};
    int per = cond_b->outputs[0];
    int any = kl_build_op(&inner, KL_P_REDUCE_OR, &per, 1, &rp);
    if (inner.failed) {
      b->failed = 1;
      goto done;
    }
    kl_program_set_outputs(cond_b, &any, 1);
  }
  if (!(body2 = kl_program_new())) goto oom;
  { /* the body: (carries, body consts, cond consts) -> select(cond, body(carries), carries) */
    kl_build inner = {.pg = body2, .err = b->err, .errlen = b->errlen, .who = b->who, .size = b->size};
    int *carries = ins, *bargs = ins + n;
    for (int i = 0; i < n; i++) carries[i] = kl_program_add_input(body2, &body_b->vals[body_b->inputs[i]].aval);
    for (int i = 0; i < nb; i++) bargs[i] = kl_program_add_input(body2, &body_b->vals[body_b->inputs[n + i]].aval);
    int *cin = kl_malloc(sizeof(int) * ((size_t)(n + nc) + 1)), *bin = kl_malloc(sizeof(int) * ((size_t)(n + nb) + 1));
    int *nxt = kl_malloc(sizeof(int) * ((size_t)n + 1));
    if (!cin || !bin || !nxt) {
      free(cin);
      free(bin);
      free(nxt);
      goto oom;
    }
    memcpy(cin, carries, sizeof(int) * (size_t)n);
    for (int i = 0; i < nc; i++) cin[n + i] = kl_program_add_input(body2, &cond_b->vals[cond_b->inputs[n + i]].aval);
    memcpy(bin, carries, sizeof(int) * (size_t)n);
    memcpy(bin + n, bargs, sizeof(int) * (size_t)nb);
    int pred = -1;
    /* the per-example condition: the operand of the any() just added to cond_b */
    const kl_eqn *last = &cond_b->eqns[cond_b->neqns - 1];
    int per = last->ins[0], got[KL_MAX_OUTS];
    kl_program *cond_only = kl_program_copy(cond_b);
    if (!cond_only) {
      free(cin);
      free(bin);
      free(nxt);
      goto oom;
    }
    kl_program_set_outputs(cond_only, &per, 1);
    if (!splice(&inner, cond_only, cin, got)) pred = got[0];
    kl_program_free(cond_only);
    if (pred >= 0 && !splice(&inner, body_b, bin, nxt)) {
      for (int i = 0; i < n && !inner.failed; i++) {
        kl_aval a = body2->vals[carries[i]].aval; /* a copy: building grows body2->vals */
        int64_t dim0 = 0;
        int pb = kl_build_broadcast(&inner, pred, a.dims, a.ndim, &dim0);
        int sel[3] = {pb, carries[i], nxt[i]};
        nxt[i] = kl_build_op(&inner, KL_P_SELECT_N, sel, 3, NULL);
      }
    }
    if (!inner.failed) kl_program_set_outputs(body2, nxt, n);
    free(cin);
    free(bin);
    free(nxt);
    if (inner.failed || body2->oom) {
      b->failed = 1;
      goto done;
    }
  }
  { /* the equation: cond consts, body consts then cond consts again, carries */
    int nin = nc + nb + nc + n;
    xs2 = kl_malloc(sizeof(int) * ((size_t)nin + 1));
    if (!xs2) goto oom;
    memcpy(xs2, r->xs, sizeof(int) * (size_t)(nc + nb));
    memcpy(xs2 + nc + nb, r->xs, sizeof(int) * (size_t)nc);
    memcpy(xs2 + nc + nb + nc, r->xs + nc + nb, sizeof(int) * (size_t)n);
    int64_t counts[3] = {nc, nb + nc, n};
    kl_params p = e->p;
    p.while_.counts = (kl_ivec){counts, 3};
    p.while_.cond = cond_b;
    p.while_.body = body2;
    rc = kl_build_emit(b, KL_P_WHILE, xs2, nin, &p, r->ys) < 0 ? -1 : 0;
  }
  goto done;
oom:
  kl_build_oom(b);
done:
  free(in_b);
  free(want);
  free(ins);
  free(xs2);
  kl_program_free(cond_b);
  kl_program_free(body_b);
  kl_program_free(body2);
  return b->failed ? -1 : rc;
}

/* ---- the table ------------------------------------------------------------------------------- */

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

const kl_rule_row kl_rules_call[] = {
    {KL_P_CUSTOM_VJP_CALL, custom_vjp_call_jvp, NULL, call_batch, NULL, custom_vjp_call_inline, NULL},
    {KL_P_CUSTOM_VJP_LIN, custom_vjp_lin_jvp, custom_vjp_lin_transpose, NULL, NULL, NULL, NULL},
    {KL_P_CUSTOM_JVP_CALL, custom_jvp_call_jvp, NULL, call_batch, NULL, custom_jvp_call_inline, NULL},
    {KL_P_CHECKPOINT, checkpoint_jvp, NULL, call_batch, NULL, checkpoint_inline, NULL},
    {KL_P_WHILE, while_jvp, NULL, while_batch, NULL, NULL, NULL},
    KL_RULES_END};
