/* control.c: the transformation rules of the control family (while, scan, cond): equations
 * whose bodies run as data decides. Their rules build new bodies with the drivers (the body's
 * JVP, its batched form, its transpose by reverse mode) and emit new equations: reverse mode
 * splits a scan into a primal scan stacking residuals and a linear scan that transposes into a
 * scan running the other way (scan_jvp_reverse), a cond into the cond and a linear cond of the
 * branches' JVPs, a while into the loop counting its trips and while_lin, which transposes into
 * while_bwd. Depends only on ir/ and transforms/. */
#include <stdlib.h>
#include <string.h>

#include "../../ir/alloc.h"
#include "rules.h"

/* Copies src's equations into b's program, src's inputs being the values ins; its outputs'
 * values go to outs. Returns 0, or -1 (b failed). */
int kl_splice(kl_build *b, const kl_program *src, const int *ins, int *outs) {
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

/* ---- while: reverse mode ---------------------------------------------------------------------- */
/* The JVP for reverse mode splits a while into the loop itself, counting its trips in an extra
 * carry, and while_lin, its linear part (the tangents carried through the body's JVP `trips`
 * times), which only ever transposes: into while_bwd, which runs the body again from the initial
 * carries keeping a checkpoint every ceil(sqrt(trips)) iterations, then walks the segments
 * backwards, each recomputed from its checkpoint, through the body's VJP (codegen/loop.c). Memory
 * grows with the square root of the trip count; JAX refuses this derivative. */

/* prog with an int32[] input after its first n (a trip counter carried by the loop); with
 * `count` it also returns the counter plus one (the body), else it ignores it (the condition). */
static kl_program *with_counter(kl_build *a, const kl_program *prog, int n, int count) {
  kl_program *pg = kl_program_new();
  int *ins = kl_malloc(sizeof(int) * ((size_t)prog->ninputs + 1)), *outs = kl_malloc(sizeof(int) * ((size_t)prog->noutputs + 2));
  if (!pg || !ins || !outs) {
    kl_program_free(pg);
    free(ins);
    free(outs);
    kl_build_oom(a);
    return NULL;
  }
  kl_build in = {.pg = pg, .err = a->err, .errlen = a->errlen, .who = a->who};
  kl_aval i32 = {.ndim = 0, .dtype = KL_I32};
  for (int i = 0; i < n; i++) ins[i] = kl_program_add_input(pg, &prog->vals[prog->inputs[i]].aval);
  int k = kl_program_add_input(pg, &i32);
  for (int i = n; i < prog->ninputs; i++) ins[i] = kl_program_add_input(pg, &prog->vals[prog->inputs[i]].aval);
  if (!kl_splice(&in, prog, ins, outs)) {
    int no = prog->noutputs;
    if (count) outs[no++] = kl_build_bin(&in, KL_P_ADD, k, kl_build_ilit(&in, 1, KL_I32));
    if (!in.failed) kl_program_set_outputs(pg, outs, no);
  }
  free(ins);
  free(outs);
  if (in.failed || pg->oom) {
    a->failed = 1;
    kl_program_free(pg);
    return NULL;
  }
  return pg;
}

static int while_jvp_reverse(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  const int64_t *c = e->p.while_.counts.v;
  int nc = (int)c[0], nb = (int)c[1], n = (int)c[2], rc = -1;
  const kl_program *body = e->p.while_.body;
  kl_program *cond2 = with_counter(a, e->p.while_.cond, n, 0), *body2 = with_counter(a, body, n, 1);
  int *ops = kl_malloc(sizeof(int) * (2 * (size_t)e->nin + 2)), *res = kl_malloc(sizeof(int) * ((size_t)n + 2));
  if (!cond2 || !body2 || !ops || !res) {
    if (!a->failed) kl_build_oom(a);
    goto done;
  }
  if (n + 1 > KL_MAX_OUTS) {
    kl_build_fail(a, KL_ERR_UNSUPPORTED, "reverse-mode differentiation of while: %d carries (at most %d)", n, KL_MAX_OUTS - 1);
    goto done;
  }
  { /* the loop, counting its trips */
    memcpy(ops, xs, sizeof(int) * (size_t)e->nin);
    ops[e->nin] = kl_build_ilit(a, 0, KL_I32);
    int64_t counts[3] = {nc, nb, n + 1};
    kl_params p = e->p;
    p.while_.counts = (kl_ivec){counts, 3};
    p.while_.cond = cond2;
    p.while_.body = body2;
    if (kl_build_emit(a, KL_P_WHILE, ops, e->nin + 1, &p, res) < 0) goto done;
    for (int i = 0; i < n; i++) ys[i] = res[i];
  }
  { /* while_lin: body consts, initial carries, trips, tangents of the float carries and consts */
    int k = 0;
    for (int j = 0; j < nb + n; j++) ops[k++] = xs[nc + j];
    ops[k++] = res[n];
    for (int pass = 0; pass < 2; pass++) /* the carries' tangents, then the consts' */
      for (int i = 0; i < (pass ? nb : n); i++) {
        int at = pass ? nc + i : nc + nb + i;
        const kl_aval *av = &body->vals[body->inputs[pass ? n + i : i]].aval;
        if (kl_dtype_is_float(av->dtype)) ops[k++] = ts[at] >= 0 ? ts[at] : kl_build_zeros(a, av);
      }
    int64_t counts[2] = {nb, n};
    kl_params p;
    kl_params_init(&p, KL_P_WHILE_LIN);
    p.while_ad.counts = (kl_ivec){counts, 2};
    p.while_ad.body = e->p.while_.body;
    if (a->failed || kl_build_emit(a, KL_P_WHILE_LIN, ops, k, &p, res) < 0) goto done;
    for (int i = 0, f = 0; i < n; i++) touts[i] = kl_dtype_is_float(body->vals[body->inputs[i]].aval.dtype) ? res[f++] : -1;
  }
  rc = 0;
done:
  kl_program_free(cond2);
  kl_program_free(body2);
  free(ops);
  free(res);
  return a->failed ? -1 : rc;
}

/* The program while_bwd runs backwards: the VJP of a while body over (carries, consts) ->
 * carries, as (carries, consts, float carries' cotangents, accumulators) -> (the float carries'
 * cotangents before the body, accumulators + the float consts' cotangents). Owned, or NULL. */
static kl_program *while_vjp_program(kl_build *a, const kl_program *body, int n, int nb) {
  int nin = n + nb, nf = 0, nfk = 0;
  char *want = kl_calloc((size_t)nin + 1, 1);
  int *vin = kl_malloc(sizeof(int) * (2 * (size_t)nin + 1)), *vout = NULL, *outs = kl_malloc(sizeof(int) * ((size_t)nin + 1));
  kl_program *v = NULL, *vp = kl_program_new();
  if (!want || !vin || !outs || !vp) {
    kl_build_oom(a);
    goto fail;
  }
  for (int i = 0; i < nin; i++) {
    want[i] = kl_dtype_is_float(body->vals[body->inputs[i]].aval.dtype) != 0;
    if (want[i]) (i < n ? nf++ : nfk++);
  }
  if (!(v = kl_vjp(body, want, a->err, a->errlen)) || !(vout = kl_malloc(sizeof(int) * ((size_t)v->noutputs + 1)))) {
    if (v) kl_build_oom(a);
    else a->failed = 1;
    goto fail;
  }
  kl_build in = {.pg = vp, .err = a->err, .errlen = a->errlen, .who = a->who};
  int *acc = outs + nf; /* scratch: the accumulators' input ids */
  for (int i = 0; i < nin; i++) vin[i] = kl_program_add_input(vp, &body->vals[body->inputs[i]].aval);
  for (int i = 0; i < n; i++)
    if (want[i]) vin[nin + i] = kl_program_add_input(vp, &body->vals[body->outputs[i]].aval);
  for (int j = 0, q = 0; j < nb; j++)
    if (want[n + j]) acc[q++] = kl_program_add_input(vp, &body->vals[body->inputs[n + j]].aval);
  for (int i = 0; i < n; i++)
    if (!want[i]) vin[nin + i] = kl_build_zeros(&in, &body->vals[body->outputs[i]].aval);
  if (!in.failed && !kl_splice(&in, v, vin, vout)) {
    for (int i = 0; i < nf; i++) outs[i] = vout[n + i];
    for (int q = 0; q < nfk; q++) acc[q] = kl_build_add(&in, acc[q], vout[n + nf + q]);
    if (!in.failed) kl_program_set_outputs(vp, outs, nf + nfk);
  }
  if (in.failed || vp->oom) {
    a->failed = 1;
    goto fail;
  }
  free(want);
  free(vin);
  free(vout);
  free(outs);
  kl_program_free(v);
  return vp;
fail:
  free(want);
  free(vin);
  free(vout);
  free(outs);
  kl_program_free(v);
  kl_program_free(vp);
  return NULL;
}

/* while_lin, transpose: while_bwd over the body and its VJP (while_vjp_program). */
static int while_lin_transpose(kl_tctx *c, const kl_eqn *e, int operand, int ct) {
  (void)operand, (void)ct;
  kl_build *a = c->a;
  const kl_program *body = e->p.while_ad.body;
  int nb = (int)e->p.while_ad.counts.v[0], n = (int)e->p.while_ad.counts.v[1], nf = e->nout, rc = -1;
  int *ops = kl_malloc(sizeof(int) * ((size_t)(nb + n + nf) + 2)), *res = kl_malloc(sizeof(int) * ((size_t)(n + nb) + 1));
  kl_program *vp = while_vjp_program(a, body, n, nb);
  if (!ops || !res || !vp) {
    if (!a->failed) kl_build_oom(a);
    goto done;
  }
  int k = 0, nres;
  for (int i = 0; i < nb + n + 1; i++) ops[k++] = kl_tr_prim_of(c, e->ins[i]);
  for (int i = 0; i < nf; i++) {
    int o = e->outs[i];
    ops[k++] = c->ct[o] >= 0 ? c->ct[o] : kl_build_zeros(a, &c->j->vals[o].aval);
  }
  kl_params p = e->p;
  p.while_ad.vjp = vp;
  if (a->failed || (nres = kl_build_emit(a, KL_P_WHILE_BWD, ops, k, &p, res)) < 0) goto done;
  for (int i = 0; i < nres; i++) {
    int in_at = nb + n + 1 + i; /* the tangent operand each result is the cotangent of */
    if (kl_tr_is_tangent(c, e->ins[in_at])) kl_tr_accumulate(c, e->ins[in_at], res[i]);
  }
  rc = 0;
done:
  free(ops);
  free(res);
  kl_program_free(vp);
  return a->failed ? -1 : rc;
}

/* while_bwd, batching: every carry and cotangent batched, the body batched. With per-example
 * trip counts the body freezes an example once its own count is reached (as the batched while
 * ran) and the loop runs the largest count: the body takes an extra carry (its per-example
 * iteration) and an extra const (the per-example counts). The VJP is rebuilt from that body. */
static int while_bwd_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  const kl_program *body = e->p.while_ad.body;
  int nb = (int)e->p.while_ad.counts.v[0], n = (int)e->p.while_ad.counts.v[1], nf = e->nin - nb - n - 1, rc = -1;
  int per = r->bs[nb + n]; /* trip counts per example */
  char *in_b = kl_malloc((size_t)(n + nb) + 1), *want = kl_malloc((size_t)n + 1);
  int *ops = kl_malloc(sizeof(int) * ((size_t)e->nin + 4)), *ins = kl_malloc(sizeof(int) * ((size_t)(n + nb) + 3));
  int *nxt = kl_malloc(sizeof(int) * ((size_t)n + 2));
  kl_program *bb = NULL, *b2 = NULL, *vp = NULL;
  if (!in_b || !want || !ops || !ins || !nxt) {
    kl_build_oom(b);
    goto done;
  }
  memset(in_b, 1, (size_t)n);
  for (int j = 0; j < nb; j++) /* a float const is batched too: its cotangent is per example */
    in_b[n + j] = r->bs[j] || kl_dtype_is_float(body->vals[body->inputs[n + j]].aval.dtype);
  memset(want, 1, (size_t)n);
  if (!(bb = kl_batch_subprog(b, body, in_b, want))) goto done;
  if (per) { /* bb wrapped: (carries, k, consts, counts) -> (select(k < counts, bb(carries), carries), k + 1) */
    if (!(b2 = kl_program_new())) {
      kl_build_oom(b);
      goto done;
    }
    kl_build in = {.pg = b2, .err = b->err, .errlen = b->errlen, .who = b->who, .size = b->size};
    kl_aval ki = {.ndim = 1, .dtype = KL_I32, .dims = {b->size}};
    for (int i = 0; i < n; i++) ins[i] = kl_program_add_input(b2, &bb->vals[bb->inputs[i]].aval);
    int k = kl_program_add_input(b2, &ki);
    for (int j = 0; j < nb; j++) ins[n + j] = kl_program_add_input(b2, &bb->vals[bb->inputs[n + j]].aval);
    int counts = kl_program_add_input(b2, &ki);
    if (!kl_splice(&in, bb, ins, nxt)) {
      int go = kl_build_bin(&in, KL_P_LT, k, counts);
      for (int i = 0; i < n && !in.failed; i++) {
        kl_aval av = *kl_build_aval(&in, ins[i]);
        int64_t dim0 = 0;
        nxt[i] = kl_build_select(&in, kl_build_broadcast(&in, go, av.dims, av.ndim, &dim0), ins[i], nxt[i]);
      }
      nxt[n] = kl_build_bin(&in, KL_P_ADD, k, kl_build_broadcast(&in, kl_build_ilit(&in, 1, KL_I32), ki.dims, 1, NULL));
      if (!in.failed) kl_program_set_outputs(b2, nxt, n + 1);
    }
    if (in.failed || b2->oom) {
      b->failed = 1;
      goto done;
    }
  }
  const kl_program *use = per ? b2 : bb;
  int nb2 = nb + per, n2 = n + per;
  if (!(vp = while_vjp_program(b, use, n2, nb2))) goto done;
  {
    int k = 0;
    for (int j = 0; j < nb; j++) ops[k++] = in_b[n + j] ? kl_batch_as_batched(b, r->xs[j], r->bs[j]) : r->xs[j];
    if (per) ops[k++] = r->xs[nb + n];
    for (int i = 0; i < n; i++) ops[k++] = kl_batch_as_batched(b, r->xs[nb + i], r->bs[nb + i]);
    if (per) {
      kl_aval ki = {.ndim = 1, .dtype = KL_I32, .dims = {b->size}};
      ops[k++] = kl_build_zeros(b, &ki);
      int64_t zero = 0;
      kl_params mx;
      kl_params_init(&mx, KL_P_REDUCE_MAX);
      mx.reduce.axes = (kl_ivec){&zero, 1};
      ops[k++] = kl_build_op(b, KL_P_REDUCE_MAX, &r->xs[nb + n], 1, &mx);
    } else ops[k++] = r->xs[nb + n];
    for (int i = 0; i < nf; i++) ops[k++] = kl_batch_as_batched(b, r->xs[nb + n + 1 + i], r->bs[nb + n + 1 + i]);
    int64_t counts[2] = {nb2, n2};
    kl_params p = e->p;
    p.while_ad.counts = (kl_ivec){counts, 2};
    p.while_ad.body = (kl_program *)use;
    p.while_ad.vjp = vp;
    if (b->failed || kl_build_emit(b, KL_P_WHILE_BWD, ops, k, &p, r->ys) < 0) goto done;
  }
  rc = 0;
done:
  free(in_b);
  free(want);
  free(ops);
  free(ins);
  free(nxt);
  kl_program_free(bb);
  kl_program_free(b2);
  kl_program_free(vp);
  return b->failed ? -1 : rc;
}

static int while_bwd_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)e, (void)xs, (void)ts, (void)ys, (void)touts;
  return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiating the reverse-mode derivative of a while_loop again (grad of grad, "
                       "jacfwd of grad, hessian) is not supported yet by kiln; for higher derivatives write the loop as "
                       "lax.scan or fori_loop with static bounds");
}

/* while, forward mode: a while over (carries, tangents of the float carries) whose body is the
 * body's JVP; tangents of the body's consts are extra consts, the condition ignores tangents.
 * A float carry without a tangent starts from zeros (the body may give it one). */
static int while_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (a->remat) return while_jvp_reverse(a, e, xs, ts, ys, touts);
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
    if (!kl_splice(&in, cond, cin, &pred)) kl_program_set_outputs(cond2, &pred, 1);
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
  if (!(cond_b = kl_batch_subprog(b, e->p.while_.cond, in_b, want))) goto done;
  memcpy(in_b + n, r->bs + nc, (size_t)nb);
  if (!(body_b = kl_batch_subprog(b, e->p.while_.body, in_b, want))) goto done;
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
    if (!kl_splice(&inner, cond_only, cin, got)) pred = got[0];
    kl_program_free(cond_only);
    if (pred >= 0 && !kl_splice(&inner, body_b, bin, nxt)) {
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

/* ---- scan ------------------------------------------------------------------------------------ */

/* The operand split of a scan: consts, carries, xs (the body's inputs in that order); its results
 * are the carries then the ys. */
typedef struct {
  int nk, n, nx, ny;
} scan_split;

static scan_split split_of(const kl_eqn *e) {
  const int64_t *c = e->p.scan.counts.v;
  scan_split s = {(int)c[0], (int)c[1], (int)c[2], 0};
  s.ny = e->nout - s.n;
  return s;
}

/* Emits a scan of e's kind (length, direction, unroll from e unless `flip`) over body with the
 * given counts; the results go to res. Returns the number of results, or -1. */
static int emit_scan(kl_build *a, const kl_eqn *e, kl_program *body, int nk, int n, int nx, const int *ops, int flip,
                     int *res) {
  int64_t counts[3] = {nk, n, nx};
  kl_params p = e->p;
  p.scan.counts = (kl_ivec){counts, 3};
  p.scan.body = body;
  if (flip) p.scan.reverse = !p.scan.reverse;
  if (body->noutputs > KL_MAX_OUTS)
    return kl_build_fail(a, KL_ERR_UNSUPPORTED, "scan: %d carries and ys after transformation (at most %d)",
                         body->noutputs, KL_MAX_OUTS);
  return kl_build_emit(a, KL_P_SCAN, ops, nk + n + nx, &p, res);
}

/* Builds the JVP of a scan body into `in` (a fresh program): inputs in scan order
 *   consts, const tangents (where tc[j]), carries, carry tangents (where has[i]), xs, x tangents
 *   (where tx[j]);
 * outputs: carries, carry tangents (where has[i]), ys, y tangents (where the body gives one;
 * yt[j] set). A tagged builder gets its tangent inputs tagged (reverse mode splits the result by
 * tags). Returns the counts of the new scan in k3 (consts, carries, xs), or -1. */
static int jvp_body(kl_build *in, const kl_program *body, scan_split s, const char *tc, const char *has, const char *tx,
                    char *yt, int64_t *k3) {
  int *fp = kl_jvp_new_map(body), *ft = kl_jvp_new_map(body), *outs = kl_malloc(sizeof(int) * (2 * (size_t)body->noutputs + 1));
  int rc = -1;
  if (!fp || !ft || !outs) {
    kl_build_oom(in);
    goto done;
  }
  const int *bi = body->inputs;
  kl_program *pg = in->pg;
#define BODY_AVAL(i) (&body->vals[bi[i]].aval)
  for (int j = 0; j < s.nk; j++) fp[bi[j]] = kl_program_add_input(pg, BODY_AVAL(j));
  for (int j = 0; j < s.nk; j++)
    if (tc[j]) ft[bi[j]] = kl_program_add_input(pg, BODY_AVAL(j));
  k3[0] = pg->ninputs;
  for (int i = 0; i < s.n; i++) fp[bi[s.nk + i]] = kl_program_add_input(pg, BODY_AVAL(s.nk + i));
  for (int i = 0; i < s.n; i++)
    if (has[i]) ft[bi[s.nk + i]] = kl_program_add_input(pg, BODY_AVAL(s.nk + i));
  k3[1] = pg->ninputs - k3[0];
  for (int j = 0; j < s.nx; j++) fp[bi[s.nk + s.n + j]] = kl_program_add_input(pg, BODY_AVAL(s.nk + s.n + j));
  for (int j = 0; j < s.nx; j++)
    if (tx[j]) ft[bi[s.nk + s.n + j]] = kl_program_add_input(pg, BODY_AVAL(s.nk + s.n + j));
  k3[2] = pg->ninputs - k3[0] - k3[1];
#undef BODY_AVAL
  for (int i = 0; in->tagged && i < body->ninputs; i++) { /* reverse mode splits the body by these */
    if (fp[bi[i]] >= 0) kl_build_set_tag(in, fp[bi[i]], 0);
    if (ft[bi[i]] >= 0) kl_build_set_tag(in, ft[bi[i]], KL_TAG_TANGENT);
  }
  if (kl_jvp_eqns(in, body, fp, ft, NULL, 0, 0)) goto done;
  int k = 0;
  for (int i = 0; i < s.n; i++) outs[k++] = fp[body->outputs[i]];
  for (int i = 0; i < s.n; i++)
    if (has[i]) {
      int t = ft[body->outputs[i]];
      outs[k++] = t >= 0 ? t : kl_build_zeros(in, &body->vals[body->outputs[i]].aval);
    }
  for (int j = 0; j < s.ny; j++) outs[k++] = fp[body->outputs[s.n + j]];
  for (int j = 0; j < s.ny; j++) {
    int t = ft[body->outputs[s.n + j]];
    yt[j] = t >= 0 && is_float_val(in, t);
    if (yt[j]) outs[k++] = t;
  }
  if (!in->failed) kl_program_set_outputs(pg, outs, k);
  rc = in->failed || pg->oom ? -1 : 0;
done:
  free(fp);
  free(ft);
  free(outs);
  return rc;
}

/* ---- scan, reverse mode: partial evaluation ----------------------------------------------------
 * The body's JVP (jb, tagged) splits into a primal body P, the body itself plus, as extra ys,
 * the residuals: the primal values the tangent equations read (stacked per iteration), and a
 * linear body L of the tangent equations over those residuals, which transposes with no primal
 * work left in it (as JAX does). A primal value L reads is not stacked when it is cheaper to have
 * again: a const or an x of the scan (passed as they are), a value made of constants alone, or a
 * value a checkpoint inside the body recomputes (KL_TAG_REMAT): those L recomputes, so
 * checkpointing a scan's body trades its residuals' memory for recomputation, as in JAX. */

typedef struct {
  const kl_program *jb;
  const char *tags;    /* jb's value tags */
  int ncap;            /* entries in tags */
  char *dep;           /* per jb value: depends on a jb input */
  char *need;          /* per jb value: L reads it: 1 a residual, 2 recomputed in L, 3 an input
                          of jb (a const, carry or x of the scan) */
  int *role;           /* per jb input value: its position among jb's inputs, or -1 */
} pe_state;

static int pe_tag(const pe_state *p, int v) { return v < p->ncap ? p->tags[v] : 0; }
static int pe_tangent(const pe_state *p, int v) { return pe_tag(p, v) & KL_TAG_TANGENT; }

/* Marks what L needs of primal value v (and, for a recomputed one, of its operands); each value
 * is queued once (need 4 while queued). */
static void pe_need(pe_state *p, int v, int *stack) {
  int top = 0;
  if (p->need[v] || pe_tangent(p, v)) return;
  p->need[v] = 4;
  stack[top++] = v;
  while (top) {
    int u = stack[--top], prod = p->jb->vals[u].producer;
    if (prod < 0) p->need[u] = 3;
    else if (p->dep[u] && !(pe_tag(p, u) & KL_TAG_REMAT)) p->need[u] = 1;
    else {
      p->need[u] = 2;
      const kl_eqn *q = &p->jb->eqns[prod];
      for (int i = 0; i < q->nin; i++)
        if (!p->need[q->ins[i]] && !pe_tangent(p, q->ins[i])) p->need[q->ins[i]] = 4, stack[top++] = q->ins[i];
    }
  }
}

/* L's value for jb's primal value v (emitting its recomputation in L when need[v] == 2). */
static int pe_get(kl_build *lb, const pe_state *p, int *lmap, int v) {
  if (lmap[v] >= 0 || lb->failed) return lmap[v];
  const kl_eqn *q = &p->jb->eqns[p->jb->vals[v].producer];
  int *ins = kl_malloc(sizeof(int) * ((size_t)q->nin + 1)), outs[KL_MAX_OUTS];
  if (!ins) return kl_build_oom(lb);
  for (int i = 0; i < q->nin; i++) ins[i] = pe_get(lb, p, lmap, q->ins[i]);
  int n = lb->failed ? -1 : kl_build_emit(lb, q->prim, ins, q->nin, &q->p, outs);
  free(ins);
  for (int i = 0; i < n; i++) lmap[q->outs[i]] = outs[i];
  return lmap[v];
}

static int scan_jvp_reverse(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  scan_split s = split_of(e);
  const kl_program *body = e->p.scan.body;
  int64_t k3[3];
  int rc = -1, nb_out = e->nout;
  char *flags = kl_calloc((size_t)(s.nk + s.n + s.nx + s.ny) + 1, 1);
  kl_program *jb = kl_program_new(), *pb = kl_program_new(), *lbp = kl_program_new();
  kl_build jbb = {.pg = jb, .err = a->err, .errlen = a->errlen, .who = a->who, .tagged = 1, .remat = 1};
  pe_state p = {0};
  int *stack = NULL, *pmap = NULL, *lmap = NULL, *outs = NULL, *ops = NULL, *res = NULL, *resid = NULL;
  if (!flags || !jb || !pb || !lbp) goto oom;
  char *tc = flags, *has = tc + s.nk, *tx = has + s.n, *yt = tx + s.nx;
  for (int j = 0; j < s.nk; j++) tc[j] = ts[j] >= 0;
  for (int i = 0; i < s.n; i++) has[i] = kl_dtype_is_float(body->vals[body->inputs[s.nk + i]].aval.dtype) != 0;
  for (int j = 0; j < s.nx; j++) tx[j] = ts[s.nk + s.n + j] >= 0;
  kl_build_set_tag(&jbb, 0, 0);
  if (jvp_body(&jbb, body, s, tc, has, tx, yt, k3)) {
    a->failed = 1;
    goto done;
  }
  int nv = jb->nvals, nt = 0, nyt = 0, ntc = 0, ntx = 0;
  for (int i = 0; i < s.n; i++) nt += has[i];
  for (int j = 0; j < s.ny; j++) nyt += yt[j];
  for (int j = 0; j < s.nk; j++) ntc += tc[j];
  for (int j = 0; j < s.nx; j++) ntx += tx[j];
  p.jb = jb;
  p.tags = jbb.tags;
  p.ncap = jbb.cap;
  p.dep = kl_calloc((size_t)nv + 1, 1);
  p.need = kl_calloc((size_t)nv + 1, 1);
  p.role = kl_malloc(sizeof(int) * ((size_t)nv + 1));
  stack = kl_malloc(sizeof(int) * ((size_t)nv + 1));
  pmap = kl_jvp_new_map(jb);
  lmap = kl_jvp_new_map(jb);
  outs = kl_malloc(sizeof(int) * ((size_t)nv + (size_t)jb->noutputs + 1));
  ops = kl_malloc(sizeof(int) * (3 * (size_t)e->nin + (size_t)nv + 4));
  res = kl_malloc(sizeof(int) * ((size_t)nv + 3 * (size_t)nb_out + 4));
  resid = kl_malloc(sizeof(int) * ((size_t)nv + 1));
  if (!p.dep || !p.need || !p.role || !stack || !pmap || !lmap || !outs || !ops || !res || !resid) goto oom;
  for (int v = 0; v < nv; v++) p.role[v] = -1;
  for (int i = 0; i < jb->ninputs; i++) {
    p.role[jb->inputs[i]] = i;
    p.dep[jb->inputs[i]] = 1;
  }
  for (int k = 0; k < jb->neqns; k++) {
    const kl_eqn *q = &jb->eqns[k];
    char d = 0;
    for (int i = 0; i < q->nin; i++) d |= p.dep[q->ins[i]];
    for (int i = 0; i < q->nout; i++) p.dep[q->outs[i]] = d;
  }
  /* what L reads: the primal operands of the tangent equations and the tangent outputs it gives */
  for (int k = 0; k < jb->neqns; k++) {
    const kl_eqn *q = &jb->eqns[k];
    if (!pe_tangent(&p, q->outs[0])) continue;
    for (int i = 0; i < q->nin; i++) pe_need(&p, q->ins[i], stack);
  }
  int tout0 = s.n, ty0 = s.n + nt + s.ny; /* jb's outputs: carries, their tangents, ys, theirs */
  for (int i = 0; i < nt; i++) pe_need(&p, jb->outputs[tout0 + i], stack);
  for (int j = 0; j < nyt; j++) pe_need(&p, jb->outputs[ty0 + j], stack);
  /* jb's inputs: c (nk), tc, carries (n), their tangents, xs (nx), theirs */
  const int *ji = jb->inputs;
  int at_c = 0, at_car = s.nk + ntc, at_x = at_car + s.n + nt;
  int nres = 0;
  for (int v = 0; v < nv; v++)
    if (p.need[v] == 1) resid[nres++] = v;
  { /* P: (c, carries, xs) -> (carries, ys, the carries L reads, the residuals) */
    kl_build in = {.pg = pb, .err = a->err, .errlen = a->errlen, .who = a->who};
    for (int j = 0; j < s.nk; j++) pmap[ji[at_c + j]] = kl_program_add_input(pb, &jb->vals[ji[at_c + j]].aval);
    for (int i = 0; i < s.n; i++) pmap[ji[at_car + i]] = kl_program_add_input(pb, &jb->vals[ji[at_car + i]].aval);
    for (int j = 0; j < s.nx; j++) pmap[ji[at_x + j]] = kl_program_add_input(pb, &jb->vals[ji[at_x + j]].aval);
    for (int k = 0; k < jb->neqns && !in.failed; k++) {
      const kl_eqn *q = &jb->eqns[k];
      if (pe_tangent(&p, q->outs[0])) continue;
      int *args = ops, got[KL_MAX_OUTS], ok = 1;
      for (int i = 0; i < q->nin; i++) ok &= (args[i] = pmap[q->ins[i]]) >= 0;
      if (!ok) continue; /* reads a tangent input's primal twin: not P's */
      int n = kl_build_emit(&in, q->prim, args, q->nin, &q->p, got);
      for (int i = 0; i < n; i++) pmap[q->outs[i]] = got[i];
    }
    int k = 0;
    for (int i = 0; i < s.n; i++) outs[k++] = pmap[jb->outputs[i]];
    for (int j = 0; j < s.ny; j++) outs[k++] = pmap[jb->outputs[s.n + nt + j]];
    for (int i = 0; i < s.n; i++)
      if (p.need[ji[at_car + i]] == 3) outs[k++] = pmap[ji[at_car + i]];
    for (int r = 0; r < nres; r++) outs[k++] = pmap[resid[r]];
    for (int i = 0; i < k; i++)
      if (outs[i] < 0 && !in.failed) kl_build_fail(&in, KL_ERR_INTERNAL, "internal error: reverse-mode scan lost a primal value");
    if (!in.failed) kl_program_set_outputs(pb, outs, k);
    if (in.failed || pb->oom) {
      a->failed = 1;
      goto done;
    }
  }
  int nuc = 0, nux = 0, nucar = 0; /* the consts, xs and carries L reads */
  { /* L: (used c, tc; carry tangents; used xs, used carries, residuals, tx) -> (carry tangents, y tangents) */
    kl_build lb = {.pg = lbp, .err = a->err, .errlen = a->errlen, .who = a->who};
    for (int j = 0; j < s.nk; j++)
      if (p.need[ji[at_c + j]] == 3) lmap[ji[at_c + j]] = kl_program_add_input(lbp, &jb->vals[ji[at_c + j]].aval), nuc++;
    for (int j = 0; j < ntc; j++) lmap[ji[s.nk + j]] = kl_program_add_input(lbp, &jb->vals[ji[s.nk + j]].aval);
    for (int i = 0; i < nt; i++) lmap[ji[at_car + s.n + i]] = kl_program_add_input(lbp, &jb->vals[ji[at_car + s.n + i]].aval);
    for (int j = 0; j < s.nx; j++)
      if (p.need[ji[at_x + j]] == 3) lmap[ji[at_x + j]] = kl_program_add_input(lbp, &jb->vals[ji[at_x + j]].aval), nux++;
    for (int i = 0; i < s.n; i++)
      if (p.need[ji[at_car + i]] == 3) lmap[ji[at_car + i]] = kl_program_add_input(lbp, &jb->vals[ji[at_car + i]].aval), nucar++;
    for (int r = 0; r < nres; r++) lmap[resid[r]] = kl_program_add_input(lbp, &jb->vals[resid[r]].aval);
    for (int j = 0; j < ntx; j++) lmap[ji[at_x + s.nx + j]] = kl_program_add_input(lbp, &jb->vals[ji[at_x + s.nx + j]].aval);
    for (int k = 0; k < jb->neqns && !lb.failed; k++) {
      const kl_eqn *q = &jb->eqns[k];
      if (!pe_tangent(&p, q->outs[0])) continue;
      int *args = ops, got[KL_MAX_OUTS];
      for (int i = 0; i < q->nin; i++) args[i] = pe_get(&lb, &p, lmap, q->ins[i]);
      int n = lb.failed ? -1 : kl_build_emit(&lb, q->prim, args, q->nin, &q->p, got);
      for (int i = 0; i < n; i++) lmap[q->outs[i]] = got[i];
    }
    int k = 0;
    for (int i = 0; i < nt; i++) outs[k++] = pe_get(&lb, &p, lmap, jb->outputs[tout0 + i]);
    for (int j = 0; j < nyt; j++) outs[k++] = pe_get(&lb, &p, lmap, jb->outputs[ty0 + j]);
    if (!lb.failed) kl_program_set_outputs(lbp, outs, k);
    if (lb.failed || lbp->oom) {
      a->failed = 1;
      goto done;
    }
  }
  { /* the primal scan, then the linear one */
    int np = emit_scan(a, e, pb, s.nk, s.n, s.nx, xs, 0, res);
    if (np < 0) goto done;
    for (int i = 0; i < nb_out; i++) ys[i] = res[i];
    const int *stacked = res + nb_out; /* the carries L reads, then the residuals */
    int k = 0;
    for (int j = 0; j < s.nk; j++)
      if (p.need[ji[at_c + j]] == 3) ops[k++] = xs[j];
    for (int j = 0; j < s.nk; j++)
      if (tc[j]) ops[k++] = ts[j];
    for (int i = 0; i < s.n; i++)
      if (has[i]) ops[k++] = ts[s.nk + i] >= 0 ? ts[s.nk + i] : kl_build_zeros(a, &body->vals[body->inputs[s.nk + i]].aval);
    for (int j = 0; j < s.nx; j++)
      if (p.need[ji[at_x + j]] == 3) ops[k++] = xs[s.nk + s.n + j];
    for (int i = 0; i < nucar + nres; i++) ops[k++] = stacked[i];
    for (int j = 0; j < s.nx; j++)
      if (tx[j]) ops[k++] = ts[s.nk + s.n + j];
    int *r2 = res + np;
    if (a->failed || emit_scan(a, e, lbp, nuc + ntc, nt, nux + nucar + nres + ntx, ops, 0, r2) < 0) goto done;
    int at = 0;
    for (int i = 0; i < s.n; i++) touts[i] = has[i] ? r2[at++] : -1;
    for (int j = 0; j < s.ny; j++) touts[s.n + j] = yt[j] ? r2[at++] : -1;
  }
  rc = 0;
  goto done;
oom:
  kl_build_oom(a);
done:
  free(flags);
  free(jbb.tags);
  free(p.dep);
  free(p.need);
  free(p.role);
  free(stack);
  free(pmap);
  free(lmap);
  free(outs);
  free(ops);
  free(res);
  free(resid);
  kl_program_free(jb);
  kl_program_free(pb);
  kl_program_free(lbp);
  return a->failed ? -1 : rc;
}

/* scan, JVP. Forward mode: one scan over (carries, tangents of the float carries) whose body is
 * the body's JVP; tangents of consts and xs are extra consts and xs. Reverse mode (a->remat):
 * scan_jvp_reverse's primal and linear scans. */
static int scan_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (a->remat) return scan_jvp_reverse(a, e, xs, ts, ys, touts);
  scan_split s = split_of(e);
  const kl_program *body = e->p.scan.body;
  int64_t k3[3];
  int rc = -1;
  char *flags = kl_calloc((size_t)(s.nk + s.n + s.nx + s.ny) + 1, 1);
  int *ops = kl_malloc(sizeof(int) * (2 * (size_t)e->nin + 2)), *res = kl_malloc(sizeof(int) * (2 * (size_t)e->nout + 2));
  kl_program *jb = kl_program_new();
  if (!flags || !ops || !res || !jb) {
    kl_build_oom(a);
    goto done;
  }
  char *tc = flags, *has = tc + s.nk, *tx = has + s.n, *yt = tx + s.nx;
  for (int j = 0; j < s.nk; j++) tc[j] = ts[j] >= 0;
  for (int i = 0; i < s.n; i++) has[i] = kl_dtype_is_float(body->vals[body->inputs[s.nk + i]].aval.dtype) != 0;
  for (int j = 0; j < s.nx; j++) tx[j] = ts[s.nk + s.n + j] >= 0;
  {
    kl_build in = {.pg = jb, .err = a->err, .errlen = a->errlen, .who = a->who};
    if (jvp_body(&in, body, s, tc, has, tx, yt, k3)) {
      a->failed = 1;
      goto done;
    }
  }
  int k = 0; /* consts and their tangents, carries and theirs, xs and theirs */
  for (int j = 0; j < s.nk; j++) ops[k++] = xs[j];
  for (int j = 0; j < s.nk; j++)
    if (tc[j]) ops[k++] = ts[j];
  for (int i = 0; i < s.n; i++) ops[k++] = xs[s.nk + i];
  for (int i = 0; i < s.n; i++)
    if (has[i]) ops[k++] = ts[s.nk + i] >= 0 ? ts[s.nk + i] : kl_build_zeros(a, &body->vals[body->inputs[s.nk + i]].aval);
  for (int j = 0; j < s.nx; j++) ops[k++] = xs[s.nk + s.n + j];
  for (int j = 0; j < s.nx; j++)
    if (tx[j]) ops[k++] = ts[s.nk + s.n + j];
  if (a->failed || emit_scan(a, e, jb, (int)k3[0], (int)k3[1], (int)k3[2], ops, 0, res) < 0) goto done;
  int at = 0; /* results: carries, their tangents, ys, theirs */
  for (int i = 0; i < s.n; i++) ys[i] = res[at++];
  for (int i = 0; i < s.n; i++) touts[i] = has[i] ? res[at++] : -1;
  for (int j = 0; j < s.ny; j++) ys[s.n + j] = res[at++];
  for (int j = 0; j < s.ny; j++) touts[s.n + j] = yt[j] ? res[at++] : -1;
  rc = 0;
done:
  free(flags);
  free(ops);
  free(res);
  kl_program_free(jb);
  return a->failed ? -1 : rc;
}

/* scan, transpose: a linear scan (the linear part of reverse mode) is linear in its carries and in
 * the consts and xs tagged tangent; the rest are residuals. Its transpose is a scan the other way
 * whose carries are the carries' cotangents plus an accumulator per linear const, whose xs are the
 * residual xs and the ys' cotangents, and whose body is the body's VJP with respect to the linear
 * inputs; its ys are the linear xs' cotangents. */
static int scan_transpose(kl_tctx *c, const kl_eqn *e, int operand, int ct) {
  (void)operand, (void)ct; /* the whole equation at once */
  kl_build *a = c->a;
  scan_split s = split_of(e);
  const kl_program *body = e->p.scan.body;
  int nin = e->nin, nout = e->nout, rc = -1;
  char *lin = kl_calloc((size_t)nin + 1, 1);
  int *vin = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1)), *vout = NULL, *ops = kl_malloc(sizeof(int) * (2 * (size_t)(nin + nout) + 1));
  int *tin = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1)), *touts = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1));
  int *res = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1));
  kl_program *vjp = NULL, *tb = kl_program_new();
  if (!lin || !vin || !ops || !tin || !touts || !res || !tb) {
    kl_build_oom(a);
    goto done;
  }
  int nlk = 0, nlx = 0, nwant = 0;
  for (int i = 0; i < nin; i++) {
    const kl_aval *av = &body->vals[body->inputs[i]].aval;
    int carry = i >= s.nk && i < s.nk + s.n;
    lin[i] = carry || kl_tr_is_tangent(c, e->ins[i]);
    if (carry && !kl_dtype_is_float(av->dtype)) {
      kl_build_fail(a, KL_ERR_INTERNAL, "internal error: a linear scan with a %s carry", kl_dtype_name(av->dtype));
      goto done;
    }
    if (!kl_dtype_is_float(av->dtype)) lin[i] = 0;
    nwant += lin[i];
    if (lin[i] && i < s.nk) nlk++;
    if (lin[i] && i >= s.nk + s.n) nlx++;
  }
  if (!(vjp = kl_vjp(body, lin, a->err, a->errlen))) {
    a->failed = 1;
    goto done;
  }
  if (!(vout = kl_malloc(sizeof(int) * ((size_t)vjp->noutputs + 1)))) {
    kl_build_oom(a);
    goto done;
  }
  { /* the transposed body: (residual consts; carry cotangents, const accumulators; residual xs, y cotangents) */
    kl_build in = {.pg = tb, .err = a->err, .errlen = a->errlen, .who = a->who};
    int *acc = tin; /* the accumulators' input ids */
    int nrk = 0, nrx = 0;
    for (int j = 0; j < s.nk; j++)
      if (!lin[j]) vin[j] = kl_program_add_input(tb, &body->vals[body->inputs[j]].aval), nrk++;
    for (int i = 0; i < s.n; i++) vin[nin + i] = kl_program_add_input(tb, &body->vals[body->outputs[i]].aval);
    for (int j = 0, q = 0; j < s.nk; j++)
      if (lin[j]) acc[q++] = kl_program_add_input(tb, &body->vals[body->inputs[j]].aval);
    for (int j = s.nk + s.n; j < nin; j++)
      if (!lin[j]) vin[j] = kl_program_add_input(tb, &body->vals[body->inputs[j]].aval), nrx++;
    for (int j = 0; j < s.ny; j++) vin[nin + s.n + j] = kl_program_add_input(tb, &body->vals[body->outputs[s.n + j]].aval);
    for (int i = 0; i < nin; i++)
      if (lin[i] || (i >= s.nk && i < s.nk + s.n)) vin[i] = kl_build_zeros(&in, &body->vals[body->inputs[i]].aval);
    if (!in.failed && !kl_splice(&in, vjp, vin, vout)) {
      int k = 0, w = nout; /* vjp's outputs: the body's outputs, then the wanted cotangents in order */
      int *cts = res;      /* per body input: its cotangent in tb, or -1 */
      for (int i = 0; i < nin; i++) cts[i] = lin[i] ? vout[w++] : -1;
      for (int i = 0; i < s.n; i++) touts[k++] = cts[s.nk + i];
      for (int j = 0, q = 0; j < s.nk; j++)
        if (lin[j]) touts[k++] = kl_build_add(&in, acc[q++], cts[j]);
      for (int j = s.nk + s.n; j < nin; j++)
        if (lin[j]) touts[k++] = cts[j];
      if (!in.failed) kl_program_set_outputs(tb, touts, k);
    }
    if (in.failed || tb->oom) {
      a->failed = 1;
      goto done;
    }
    /* the operands */
    int k = 0;
    for (int j = 0; j < s.nk; j++)
      if (!lin[j]) ops[k++] = kl_tr_prim_of(c, e->ins[j]);
    for (int i = 0; i < s.n; i++) {
      int o = e->outs[i];
      ops[k++] = c->ct[o] >= 0 ? c->ct[o] : kl_build_zeros(a, &c->j->vals[o].aval);
    }
    for (int j = 0; j < s.nk; j++)
      if (lin[j]) ops[k++] = kl_build_zeros(a, &body->vals[body->inputs[j]].aval);
    for (int j = s.nk + s.n; j < nin; j++)
      if (!lin[j]) ops[k++] = kl_tr_prim_of(c, e->ins[j]);
    for (int j = 0; j < s.ny; j++) {
      int o = e->outs[s.n + j];
      ops[k++] = c->ct[o] >= 0 ? c->ct[o] : kl_build_zeros(a, &c->j->vals[o].aval);
    }
    if (a->failed || emit_scan(a, e, tb, nrk, s.n + nlk, nrx + s.ny, ops, 1, res) < 0) goto done;
  }
  { /* the cotangents: of the initial carries, the linear consts, the linear xs */
    int k = 0;
    for (int i = 0; i < s.n; i++, k++)
      if (kl_tr_is_tangent(c, e->ins[s.nk + i])) kl_tr_accumulate(c, e->ins[s.nk + i], res[k]);
    for (int j = 0; j < s.nk; j++)
      if (lin[j]) kl_tr_accumulate(c, e->ins[j], res[k++]);
    for (int j = s.nk + s.n; j < nin; j++)
      if (lin[j]) kl_tr_accumulate(c, e->ins[j], res[k++]);
  }
  rc = 0;
done:
  free(lin);
  free(vin);
  free(vout);
  free(ops);
  free(tin);
  free(touts);
  free(res);
  kl_program_free(vjp);
  kl_program_free(tb);
  return a->failed ? -1 : rc;
}

/* scan, batching: every carry batched (an unbatched one broadcast), xs batched at axis 1 (their
 * axis 0 is the one scanned), the body batched; the stacked ys come back with the batch at axis 1
 * and move it to 0. */
static int scan_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  scan_split s = split_of(e);
  int nin = e->nin, rc = -1;
  char *in_b = kl_malloc((size_t)nin + 1), *want = kl_malloc((size_t)e->nout + 1);
  kl_program *bb = NULL;
  if (!in_b || !want) {
    kl_build_oom(b);
    goto done;
  }
  memcpy(in_b, r->bs, (size_t)nin);
  memset(in_b + s.nk, 1, (size_t)s.n);
  memset(want, 1, (size_t)e->nout);
  for (int i = 0; i < s.n; i++) r->xs[s.nk + i] = kl_batch_as_batched(b, r->xs[s.nk + i], r->bs[s.nk + i]);
  for (int j = s.nk + s.n; j < nin; j++)
    if (r->bs[j]) r->xs[j] = kl_batch_move_axis(b, r->xs[j], 0, 1);
  if (b->failed || !(bb = kl_batch_subprog(b, e->p.scan.body, in_b, want))) goto done;
  if (emit_scan(b, e, bb, s.nk, s.n, s.nx, r->xs, 0, r->ys) < 0) goto done;
  for (int j = 0; j < s.ny; j++) r->ys[s.n + j] = kl_batch_move_axis(b, r->ys[s.n + j], 1, 0);
  rc = 0;
done:
  free(in_b);
  free(want);
  kl_program_free(bb);
  return b->failed ? -1 : rc;
}

/* ---- cond ------------------------------------------------------------------------------------ */

/* The operand split of a cond: the predicate, then false consts, true consts, operands. */
typedef struct {
  int nf, nt, no;
} cond_split;

static cond_split cond_split_of(const kl_eqn *e) {
  const int64_t *c = e->p.cond.counts.v;
  return (cond_split){(int)c[0], (int)c[1], (int)c[2]};
}

/* Operand index (in e) of branch b's input i: its program takes (operands, own consts). */
static int branch_operand(cond_split s, int b, int i) {
  if (i < s.no) return 1 + s.nf + s.nt + i;
  return 1 + (b ? s.nf : 0) + (i - s.no);
}

/* The JVP of branch `br` into the fresh program of `in`: inputs (operands, their tangents where
 * has[operand], own consts, their tangents where has[...]), where `has` is indexed by e's
 * operands; the primal and tangent values of the branch's outputs go to fp/ft (maps over br). */
static int jvp_branch(kl_build *in, const kl_program *br, cond_split s, int b, const char *has, int *fp, int *ft) {
  const int *bi = br->inputs;
  int nown = br->ninputs - s.no;
  for (int i = 0; i < s.no; i++) fp[bi[i]] = kl_program_add_input(in->pg, &br->vals[bi[i]].aval);
  for (int i = 0; i < s.no; i++)
    if (has[branch_operand(s, b, i)]) ft[bi[i]] = kl_program_add_input(in->pg, &br->vals[bi[i]].aval);
  for (int i = 0; i < nown; i++) fp[bi[s.no + i]] = kl_program_add_input(in->pg, &br->vals[bi[s.no + i]].aval);
  for (int i = 0; i < nown; i++)
    if (has[branch_operand(s, b, s.no + i)]) ft[bi[s.no + i]] = kl_program_add_input(in->pg, &br->vals[bi[s.no + i]].aval);
  return kl_jvp_eqns(in, br, fp, ft, NULL, 0, 0);
}

/* cond, JVP: a cond of the branches' JVPs over (operands, tangents) and (consts, tangents); a
 * result has a tangent when either branch gives it one (the other's is zeros). Reverse mode
 * (a->remat) emits the cond itself, then a linear cond of the JVPs' tangent results alone. */
static int cond_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  cond_split s = cond_split_of(e);
  const kl_program *br[2] = {e->p.cond.false_branch, e->p.cond.true_branch};
  int nout = e->nout, lin = a->remat, rc = -1;
  char *has = kl_calloc((size_t)e->nin + (size_t)nout + 1, 1), *tout = has + e->nin;
  int *maps[4] = {kl_jvp_new_map(br[0]), kl_jvp_new_map(br[0]), kl_jvp_new_map(br[1]), kl_jvp_new_map(br[1])};
  int *outs = kl_malloc(sizeof(int) * (2 * (size_t)nout + 1)), *ops = kl_malloc(sizeof(int) * (2 * (size_t)e->nin + 1));
  int *res = kl_malloc(sizeof(int) * (2 * (size_t)nout + 1));
  kl_program *jb[2] = {kl_program_new(), kl_program_new()};
  kl_build in[2] = {{.pg = jb[0], .err = a->err, .errlen = a->errlen, .who = a->who},
                    {.pg = jb[1], .err = a->err, .errlen = a->errlen, .who = a->who}};
  if (!has || !maps[0] || !maps[1] || !maps[2] || !maps[3] || !outs || !ops || !res || !jb[0] || !jb[1]) {
    kl_build_oom(a);
    goto done;
  }
  for (int i = 1; i < e->nin; i++) has[i] = ts[i] >= 0;
  for (int b = 0; b < 2; b++)
    if (jvp_branch(&in[b], br[b], s, b, has, maps[2 * b], maps[2 * b + 1])) {
      a->failed = 1;
      goto done;
    }
  for (int i = 0; i < nout; i++)
    tout[i] = kl_dtype_is_float(br[0]->vals[br[0]->outputs[i]].aval.dtype) &&
              (maps[1][br[0]->outputs[i]] >= 0 || maps[3][br[1]->outputs[i]] >= 0);
  for (int b = 0; b < 2; b++) {
    int k = 0;
    if (!lin)
      for (int i = 0; i < nout; i++) outs[k++] = maps[2 * b][br[b]->outputs[i]];
    for (int i = 0; i < nout; i++)
      if (tout[i]) {
        int t = maps[2 * b + 1][br[b]->outputs[i]];
        outs[k++] = t >= 0 ? t : kl_build_zeros(&in[b], &br[b]->vals[br[b]->outputs[i]].aval);
      }
    if (!in[b].failed) kl_program_set_outputs(jb[b], outs, k);
    if (in[b].failed || jb[b]->oom) {
      a->failed = 1;
      goto done;
    }
  }
  if (lin && kl_build_emit(a, KL_P_COND, xs, e->nin, &e->p, ys) < 0) goto done;
  int k = 0, counts[3] = {0, 0, 0};
  ops[k++] = xs[0];
  for (int part = 0; part < 3; part++) { /* false consts, true consts, operands: each with its tangents */
    int from = part == 0 ? 1 : part == 1 ? 1 + s.nf : 1 + s.nf + s.nt, n = part == 0 ? s.nf : part == 1 ? s.nt : s.no;
    int start = k;
    for (int i = 0; i < n; i++) ops[k++] = xs[from + i];
    for (int i = 0; i < n; i++)
      if (has[from + i]) ops[k++] = ts[from + i];
    counts[part] = k - start;
  }
  {
    int64_t c3[3] = {counts[0], counts[1], counts[2]};
    kl_params p = e->p;
    p.cond.counts = (kl_ivec){c3, 3};
    p.cond.false_branch = jb[0];
    p.cond.true_branch = jb[1];
    if (kl_build_emit(a, KL_P_COND, ops, k, &p, res) < 0) goto done;
  }
  {
    int at = 0;
    if (!lin)
      for (int i = 0; i < nout; i++) ys[i] = res[at++];
    for (int i = 0; i < nout; i++) touts[i] = tout[i] ? res[at++] : -1;
  }
  rc = 0;
done:
  free(has);
  for (int i = 0; i < 4; i++) free(maps[i]);
  free(outs);
  free(ops);
  free(res);
  kl_program_free(jb[0]);
  kl_program_free(jb[1]);
  return a->failed ? -1 : rc;
}

/* cond, transpose: a linear cond (reverse mode's) is linear in the operands and consts tagged
 * tangent. Its transpose is a cond on the same predicate whose branches are the branches' VJPs:
 * (residual operands, result cotangents, own residual consts) -> cotangents of the linear
 * operands, of the false branch's linear consts, of the true branch's (zeros in the other). */
static int cond_transpose(kl_tctx *c, const kl_eqn *e, int operand, int ct) {
  (void)operand, (void)ct;
  kl_build *a = c->a;
  cond_split s = cond_split_of(e);
  const kl_program *br[2] = {e->p.cond.false_branch, e->p.cond.true_branch};
  int nin = e->nin, nout = e->nout, rc = -1, nlin = 0;
  char *lin = kl_calloc((size_t)nin + 1, 1), *want = kl_calloc((size_t)nin + 1, 1);
  int *ops = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1)), *res = kl_malloc(sizeof(int) * ((size_t)nin + 1));
  int *vin = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1)), *vout = NULL, *outs = kl_malloc(sizeof(int) * ((size_t)nin + 1));
  kl_program *tb[2] = {NULL, NULL};
  if (!lin || !want || !ops || !res || !vin || !outs) {
    kl_build_oom(a);
    goto done;
  }
  for (int i = 1; i < nin; i++) nlin += lin[i] = kl_tr_is_tangent(c, e->ins[i]) && kl_dtype_is_float(c->j->vals[e->ins[i]].aval.dtype);
  int nrf = 0, nrt = 0, nro = 0;
  for (int i = 0; i < s.nf; i++) nrf += !lin[1 + i];
  for (int i = 0; i < s.nt; i++) nrt += !lin[1 + s.nf + i];
  for (int i = 0; i < s.no; i++) nro += !lin[1 + s.nf + s.nt + i];
  for (int b = 0; b < 2; b++) {
    int nb_in = br[b]->ninputs;
    for (int i = 0; i < nb_in; i++) want[i] = lin[branch_operand(s, b, i)];
    kl_program *v = kl_vjp(br[b], want, a->err, a->errlen);
    if (!v || !(tb[b] = kl_program_new())) {
      kl_program_free(v);
      if (v) kl_build_oom(a);
      else a->failed = 1;
      goto done;
    }
    free(vout);
    if (!(vout = kl_malloc(sizeof(int) * ((size_t)v->noutputs + 1)))) {
      kl_program_free(v);
      kl_build_oom(a);
      goto done;
    }
    kl_build in = {.pg = tb[b], .err = a->err, .errlen = a->errlen, .who = a->who};
    const int *bi = br[b]->inputs;
    for (int i = 0; i < s.no; i++)
      if (!want[i]) vin[i] = kl_program_add_input(tb[b], &br[b]->vals[bi[i]].aval);
    for (int i = 0; i < nout; i++) vin[nb_in + i] = kl_program_add_input(tb[b], &br[b]->vals[br[b]->outputs[i]].aval);
    for (int i = s.no; i < nb_in; i++)
      if (!want[i]) vin[i] = kl_program_add_input(tb[b], &br[b]->vals[bi[i]].aval);
    for (int i = 0; i < nb_in; i++)
      if (want[i]) vin[i] = kl_build_zeros(&in, &br[b]->vals[bi[i]].aval);
    if (!in.failed && !kl_splice(&in, v, vin, vout)) {
      int k = 0, w = nout; /* v's outputs: the branch's results, then the wanted cotangents in order */
      int *ctv = res;      /* per branch input: its cotangent, or -1 */
      for (int i = 0; i < nb_in; i++) ctv[i] = want[i] ? vout[w++] : -1;
      for (int i = 0; i < s.no; i++)
        if (want[i]) outs[k++] = ctv[i];
      for (int bb = 0; bb < 2; bb++) { /* false consts' cotangents, then true consts' */
        int n = bb ? s.nt : s.nf, from = bb ? 1 + s.nf : 1;
        for (int j = 0; j < n; j++)
          if (lin[from + j]) outs[k++] = bb == b ? ctv[s.no + j] : kl_build_zeros(&in, &c->j->vals[e->ins[from + j]].aval);
      }
      if (!in.failed) kl_program_set_outputs(tb[b], outs, k);
    }
    kl_program_free(v);
    if (in.failed || tb[b]->oom) {
      a->failed = 1;
      goto done;
    }
  }
  {
    int k = 0;
    ops[k++] = kl_tr_prim_of(c, e->ins[0]);
    for (int i = 1; i < 1 + s.nf + s.nt; i++)
      if (!lin[i]) ops[k++] = kl_tr_prim_of(c, e->ins[i]);
    for (int i = 0; i < s.no; i++)
      if (!lin[1 + s.nf + s.nt + i]) ops[k++] = kl_tr_prim_of(c, e->ins[1 + s.nf + s.nt + i]);
    for (int i = 0; i < nout; i++) {
      int o = e->outs[i];
      ops[k++] = c->ct[o] >= 0 ? c->ct[o] : kl_build_zeros(a, &c->j->vals[o].aval);
    }
    int64_t c3[3] = {nrf, nrt, nro + nout};
    kl_params p = e->p;
    p.cond.counts = (kl_ivec){c3, 3};
    p.cond.false_branch = tb[0];
    p.cond.true_branch = tb[1];
    if (a->failed || kl_build_emit(a, KL_P_COND, ops, k, &p, res) < 0) goto done;
  }
  { /* the cotangents: linear operands, then false and true consts */
    int k = 0;
    for (int i = 0; i < s.no; i++)
      if (lin[1 + s.nf + s.nt + i]) kl_tr_accumulate(c, e->ins[1 + s.nf + s.nt + i], res[k++]);
    for (int i = 1; i < 1 + s.nf + s.nt; i++)
      if (lin[i]) kl_tr_accumulate(c, e->ins[i], res[k++]);
  }
  rc = 0;
done:
  free(lin);
  free(want);
  free(ops);
  free(res);
  free(vin);
  free(vout);
  free(outs);
  kl_program_free(tb[0]);
  kl_program_free(tb[1]);
  return a->failed ? -1 : rc;
}

/* cond, batching. An unbatched predicate: the same cond over the batched branches. A batched one:
 * both branches run, batched, and each result is selected per example (as JAX does). */
static int cond_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  cond_split s = cond_split_of(e);
  const kl_program *br[2] = {e->p.cond.false_branch, e->p.cond.true_branch};
  int nin = e->nin, nout = e->nout, rc = -1;
  char *in_b = kl_malloc((size_t)nin + 1), *want = kl_malloc((size_t)nout + 1);
  int *args = kl_malloc(sizeof(int) * ((size_t)nin + 1)), *got = kl_malloc(sizeof(int) * (2 * (size_t)nout + 1));
  kl_program *bb[2] = {NULL, NULL};
  if (!in_b || !want || !args || !got) {
    kl_build_oom(b);
    goto done;
  }
  memset(want, 1, (size_t)nout);
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < br[k]->ninputs; i++) in_b[i] = r->bs[branch_operand(s, k, i)];
    if (!(bb[k] = kl_batch_subprog(b, br[k], in_b, want))) goto done;
  }
  if (!r->bs[0]) {
    kl_params p = e->p;
    p.cond.false_branch = bb[0];
    p.cond.true_branch = bb[1];
    rc = kl_build_emit(b, KL_P_COND, r->xs, nin, &p, r->ys) < 0 ? -1 : 0;
    goto done;
  }
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < br[k]->ninputs; i++) args[i] = r->xs[branch_operand(s, k, i)];
    if (kl_splice(b, bb[k], args, got + k * nout)) goto done;
  }
  for (int i = 0; i < nout && !b->failed; i++) {
    kl_aval av = kl_batch_aval(b, got[i]);
    int64_t dim0 = 0;
    int pred = kl_build_broadcast(b, r->xs[0], av.dims, av.ndim, &dim0);
    r->ys[i] = kl_build_select(b, pred, got[i], got[nout + i]);
  }
  rc = b->failed ? -1 : 0;
done:
  free(in_b);
  free(want);
  free(args);
  free(got);
  kl_program_free(bb[0]);
  kl_program_free(bb[1]);
  return b->failed ? -1 : rc;
}

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_control[] = {
    {KL_P_WHILE, while_jvp, NULL, while_batch, NULL, NULL, NULL},
    {KL_P_SCAN, scan_jvp, scan_transpose, scan_batch, NULL, NULL, NULL},
    {KL_P_COND, cond_jvp, cond_transpose, cond_batch, NULL, NULL, NULL},
    {KL_P_WHILE_LIN, NULL, while_lin_transpose, NULL, NULL, NULL, NULL},
    {KL_P_WHILE_BWD, while_bwd_jvp, NULL, while_bwd_batch, NULL, NULL, NULL},
    KL_RULES_END};
