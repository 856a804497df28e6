/* control_reverse.c: reverse mode through the control family (control.c holds the rest of its
 * rules and the table). The JVP pass for reverse mode splits each loop into primal and linear
 * equations, and the linear ones transpose:
 * - scan: partial evaluation of the body's JVP into a primal scan stacking residuals and a linear
 *   scan, which transposes into a scan running the other way;
 * - cond: the cond and a linear cond of the branches' JVPs, transposed branch by branch;
 * - while: the loop counting its trips and while_lin, which transposes into while_bwd (a
 *   checkpointed backward loop, codegen/loop.c).
 * Depends only on ir/ and transforms/. */
#include <stdlib.h>
#include <string.h>

#include "../../ir/alloc.h"
#include "control.h"

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

int kl_ctl_while_jvp_reverse(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
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
        if (kl_dtype_is_inexact(av->dtype)) ops[k++] = ts[at] >= 0 ? ts[at] : kl_build_zeros(a, av);
      }
    int64_t counts[2] = {nb, n};
    kl_params p;
    kl_params_init(&p, KL_P_WHILE_LIN);
    p.while_ad.counts = (kl_ivec){counts, 2};
    p.while_ad.body = e->p.while_.body;
    if (a->failed || kl_build_emit(a, KL_P_WHILE_LIN, ops, k, &p, res) < 0) goto done;
    for (int i = 0, f = 0; i < n; i++) touts[i] = kl_dtype_is_inexact(body->vals[body->inputs[i]].aval.dtype) ? res[f++] : -1;
  }
  rc = 0;
done:
  kl_program_free(cond2);
  kl_program_free(body2);
  free(ops);
  free(res);
  return a->failed ? -1 : rc;
}

/* kl_splice_vjp (rules.h): splices into in's program the VJP of `body` with respect to the inputs `wants` marks (those of
 * a float type): prim[i] is the value of body input i (a linear body's transpose takes zeros for
 * its linear inputs: their values do not matter), ct[j] the cotangent of output j, -1 for a
 * symbolic zero (never multiplied into anything). cts[i] receives the cotangent of each wanted
 * input i (-1 elsewhere). 0, or -1 (in failed). */
int kl_splice_vjp(kl_build *in, const kl_program *body, const char *wants, const int *prim, const int *ct, int *cts) {
  int nin = body->ninputs, nout = body->noutputs;
  char *seeded = kl_malloc((size_t)nout + 1);
  if (!seeded) return kl_build_oom(in);
  for (int j = 0; j < nout; j++) seeded[j] = ct[j] >= 0;
  kl_program *v = kl_vjp_ex(body, wants, seeded, in->err, in->errlen);
  free(seeded);
  int *vin = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1)), *vout = v ? kl_malloc(sizeof(int) * ((size_t)v->noutputs + 1)) : NULL;
  if (!v) in->failed = 1;
  else if (!vin || !vout) kl_build_oom(in);
  if (!in->failed) {
    memcpy(vin, prim, sizeof(int) * (size_t)nin);
    memcpy(vin + nin, ct, sizeof(int) * (size_t)nout);
    if (!kl_splice(in, v, vin, vout)) /* v's outputs: the body's outputs, then the wanted cotangents */
      for (int i = 0, w = nout; i < nin; i++) cts[i] = wants[i] ? vout[w++] : -1;
  }
  kl_program_free(v);
  free(vin);
  free(vout);
  return in->failed ? -1 : 0;
}

/* The program while_bwd runs backwards: the VJP of a while body over (carries, consts) ->
 * carries, as (carries, consts, float carries' cotangents, accumulators) -> (the float carries'
 * cotangents before the body, accumulators + the float consts' cotangents). Owned, or NULL. */
static kl_program *while_vjp_program(kl_build *a, const kl_program *body, int n, int nb) {
  int nin = n + nb, nf = 0, nfk = 0;
  char *want = kl_calloc((size_t)nin + 1, 1);
  int *vin = kl_malloc(sizeof(int) * (2 * (size_t)nin + 1)), *cts = kl_malloc(sizeof(int) * ((size_t)nin + 1));
  int *outs = kl_malloc(sizeof(int) * ((size_t)nin + 1));
  kl_program *vp = kl_program_new();
  if (!want || !vin || !cts || !outs || !vp) {
    kl_build_oom(a);
    goto fail;
  }
  for (int i = 0; i < nin; i++) {
    want[i] = kl_dtype_is_inexact(body->vals[body->inputs[i]].aval.dtype) != 0;
    if (want[i]) (i < n ? nf++ : nfk++);
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
  if (!in.failed && !kl_splice_vjp(&in, body, want, vin, vin + nin, cts)) {
    for (int i = 0, f = 0; i < n; i++)
      if (want[i]) outs[f++] = cts[i];
    for (int j = 0, q = 0; j < nb; j++)
      if (want[n + j]) acc[q] = kl_build_add(&in, acc[q], cts[n + j]), q++;
    if (!in.failed) kl_program_set_outputs(vp, outs, nf + nfk);
  }
  if (in.failed || vp->oom) {
    a->failed = 1;
    goto fail;
  }
  free(want);
  free(vin);
  free(cts);
  free(outs);
  return vp;
fail:
  free(want);
  free(vin);
  free(cts);
  free(outs);
  kl_program_free(vp);
  return NULL;
}

/* while_lin, transpose: while_bwd over the body and its VJP (while_vjp_program). With no
 * cotangent on any result (a dead loop) it contributes nothing, as a scan's (zero cotangents run
 * through the body would meet its residuals: 0 * inf is a NaN). */
int kl_ctl_while_lin_transpose(kl_tctx *c, const kl_eqn *e, int operand, int ct) {
  (void)operand, (void)ct;
  kl_build *a = c->a;
  int live = 0;
  for (int i = 0; i < e->nout && !live; i++) live = c->ct[e->outs[i]] >= 0;
  if (!live) return 0;
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
int kl_ctl_while_bwd_batch(kl_build *b, rule_args *r) {
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
    in_b[n + j] = r->bs[j] || kl_dtype_is_inexact(body->vals[body->inputs[n + j]].aval.dtype);
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

int kl_ctl_while_bwd_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)e, (void)xs, (void)ts, (void)ys, (void)touts;
  return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiating the reverse-mode derivative of a while_loop again (grad of grad, "
                       "jacfwd of grad, hessian) is not supported yet by kiln; for higher derivatives write the loop as "
                       "lax.scan or fori_loop with static bounds");
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

int kl_ctl_scan_jvp_reverse(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
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
  for (int i = 0; i < s.n; i++) has[i] = kl_dtype_is_inexact(body->vals[body->inputs[s.nk + i]].aval.dtype) != 0;
  for (int j = 0; j < s.nx; j++) tx[j] = ts[s.nk + s.n + j] >= 0;
  kl_build_set_tag(&jbb, 0, 0);
  if (kl_ctl_jvp_body(&jbb, body, s, tc, has, tx, yt, k3)) {
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
  ops = kl_malloc(sizeof(int) * (3 * (size_t)e->nin + (size_t)nv + (size_t)kl_program_max_operands(jb) + 4));
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
    int np = kl_ctl_emit_scan(a, e, pb, s.nk, s.n, s.nx, xs, 0, res);
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
    if (a->failed || kl_ctl_emit_scan(a, e, lbp, nuc + ntc, nt, nux + nucar + nres + ntx, ops, 0, r2) < 0) goto done;
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

/* Whether body input `input` reaches (through any equation, conservatively) an output o with
 * live[o]. 0, 1, or -1 out of memory. */
static int reaches_live(const kl_program *body, int input, const char *live) {
  char *mark = kl_calloc((size_t)body->nvals + 1, 1);
  if (!mark) return -1;
  mark[body->inputs[input]] = 1;
  for (int k = 0; k < body->neqns; k++) {
    const kl_eqn *q = &body->eqns[k];
    int any = 0;
    for (int i = 0; i < q->nin && !any; i++) any = mark[q->ins[i]];
    for (int o = 0; any && o < q->nout; o++) mark[q->outs[o]] = 1;
  }
  int hit = 0;
  for (int o = 0; o < body->noutputs && !hit; o++) hit = live[o] && mark[body->outputs[o]];
  free(mark);
  return hit;
}

/* Which outputs of a linear scan carry a cotangent that is not zero at some iteration (JAX's DCE
 * of a scan, a fixpoint over the carries): a y or carry whose outer cotangent is given, and a
 * carry whose value reaches such an output in the body. The cotangents of the others are zero
 * all along: the transpose leaves them out rather than multiplying zeros into the residuals
 * (0 * inf would be a NaN). Returns how many are live, or -1 out of memory. */
static int scan_live_outputs(kl_tctx *c, const kl_eqn *e, scan_split s, char *live) {
  const kl_program *body = e->p.scan.body;
  int nlive = 0, grew = 1;
  for (int o = 0; o < e->nout; o++) nlive += live[o] = c->ct[e->outs[o]] >= 0;
  while (grew) {
    grew = 0;
    for (int i = 0; i < s.n; i++) {
      if (live[i]) continue;
      int r = reaches_live(body, s.nk + i, live);
      if (r < 0) return -1;
      if (r) live[i] = 1, nlive++, grew = 1;
    }
  }
  return nlive;
}

/* scan, transpose: a linear scan (the linear part of reverse mode) is linear in its carries and in
 * the consts and xs tagged tangent; the rest are residuals. Its transpose is a scan the other way
 * whose carries are the live carries' cotangents (scan_live_outputs) plus an accumulator per
 * linear const, whose xs are the residual xs and the live ys' cotangents, and whose body is the
 * body's VJP with respect to the linear inputs, the dead outputs' cotangents symbolic zeros; its
 * ys are the linear xs' cotangents. With no live output it contributes nothing. */
int kl_ctl_scan_transpose(kl_tctx *c, const kl_eqn *e, int operand, int ct) {
  (void)operand, (void)ct; /* the whole equation at once */
  kl_build *a = c->a;
  scan_split s = split_of(e);
  const kl_program *body = e->p.scan.body;
  int nin = e->nin, nout = e->nout, rc = -1;
  char *lin = kl_calloc((size_t)nin + 1, 1), *live = kl_calloc((size_t)nout + 1, 1);
  int *vin = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1)), *ops = kl_malloc(sizeof(int) * (2 * (size_t)(nin + nout) + 1));
  int *tin = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1)), *touts = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1));
  int *res = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1));
  kl_program *tb = kl_program_new();
  if (!lin || !live || !vin || !ops || !tin || !touts || !res || !tb) {
    kl_build_oom(a);
    goto done;
  }
  int nlive = scan_live_outputs(c, e, s, live);
  if (nlive < 0) {
    kl_build_oom(a);
    goto done;
  }
  if (nlive == 0) { /* every cotangent is zero: so are the operands' */
    rc = 0;
    goto done;
  }
  int nlk = 0, nlc = 0, nly = 0;
  for (int i = 0; i < s.n; i++) nlc += live[i];
  for (int j = 0; j < s.ny; j++) nly += live[s.n + j];
  for (int i = 0; i < nin; i++) {
    const kl_aval *av = &body->vals[body->inputs[i]].aval;
    int carry = i >= s.nk && i < s.nk + s.n;
    lin[i] = carry || kl_tr_is_tangent(c, e->ins[i]);
    if (carry && !kl_dtype_is_inexact(av->dtype)) {
      kl_build_fail(a, KL_ERR_INTERNAL, "internal error: a linear scan with a %s carry", kl_dtype_name(av->dtype));
      goto done;
    }
    if (!kl_dtype_is_inexact(av->dtype) || (carry && !live[i - s.nk])) lin[i] = 0;
    if (lin[i] && i < s.nk) nlk++;
  }
  { /* the transposed body: (residual consts; live carry cotangents, const accumulators; residual
     * xs, live y cotangents) */
    kl_build in = {.pg = tb, .err = a->err, .errlen = a->errlen, .who = a->who};
    int *acc = tin; /* the accumulators' input ids */
    int nrk = 0, nrx = 0;
    for (int j = 0; j < s.nk; j++)
      if (!lin[j]) vin[j] = kl_program_add_input(tb, &body->vals[body->inputs[j]].aval), nrk++;
    for (int i = 0; i < s.n; i++) vin[nin + i] = live[i] ? kl_program_add_input(tb, &body->vals[body->outputs[i]].aval) : -1;
    for (int j = 0, q = 0; j < s.nk; j++)
      if (lin[j]) acc[q++] = kl_program_add_input(tb, &body->vals[body->inputs[j]].aval);
    for (int j = s.nk + s.n; j < nin; j++)
      if (!lin[j]) vin[j] = kl_program_add_input(tb, &body->vals[body->inputs[j]].aval), nrx++;
    for (int j = 0; j < s.ny; j++)
      vin[nin + s.n + j] = live[s.n + j] ? kl_program_add_input(tb, &body->vals[body->outputs[s.n + j]].aval) : -1;
    for (int i = 0; i < nin; i++)
      if (lin[i] || (i >= s.nk && i < s.nk + s.n)) vin[i] = kl_build_zeros(&in, &body->vals[body->inputs[i]].aval);
    int *cts = res; /* per body input: its cotangent in tb, or -1 */
    if (!in.failed && !kl_splice_vjp(&in, body, lin, vin, vin + nin, cts)) {
      int k = 0;
      for (int i = 0; i < s.n; i++)
        if (live[i]) touts[k++] = cts[s.nk + i];
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
      if (live[i]) ops[k++] = c->ct[o] >= 0 ? c->ct[o] : kl_build_zeros(a, &c->j->vals[o].aval);
    }
    for (int j = 0; j < s.nk; j++)
      if (lin[j]) ops[k++] = kl_build_zeros(a, &body->vals[body->inputs[j]].aval);
    for (int j = s.nk + s.n; j < nin; j++)
      if (!lin[j]) ops[k++] = kl_tr_prim_of(c, e->ins[j]);
    for (int j = 0; j < s.ny; j++)
      if (live[s.n + j]) ops[k++] = c->ct[e->outs[s.n + j]];
    if (a->failed || kl_ctl_emit_scan(a, e, tb, nrk, nlc + nlk, nrx + nly, ops, 1, res) < 0) goto done;
  }
  { /* the cotangents: of the live initial carries, the linear consts, the linear xs */
    int k = 0;
    for (int i = 0; i < s.n; i++)
      if (live[i] && kl_tr_is_tangent(c, e->ins[s.nk + i])) kl_tr_accumulate(c, e->ins[s.nk + i], res[k++]);
      else if (live[i]) k++;
    for (int j = 0; j < s.nk; j++)
      if (lin[j]) kl_tr_accumulate(c, e->ins[j], res[k++]);
    for (int j = s.nk + s.n; j < nin; j++)
      if (lin[j]) kl_tr_accumulate(c, e->ins[j], res[k++]);
  }
  rc = 0;
done:
  free(lin);
  free(live);
  free(vin);
  free(ops);
  free(tin);
  free(touts);
  free(res);
  kl_program_free(tb);
  return a->failed ? -1 : rc;
}

/* cond, transpose: a linear cond (reverse mode's) is linear in the operands and consts tagged
 * tangent. Its transpose is a cond on the same predicate whose branches are the branches' VJPs:
 * (residual operands, result cotangents, own residual consts) -> cotangents of the linear
 * operands, of the false branch's linear consts, of the true branch's (zeros in the other). A
 * result without a cotangent is a symbolic zero in the VJPs (no 0 * inf NaN); with none, the
 * cond contributes nothing. */
int kl_ctl_cond_transpose(kl_tctx *c, const kl_eqn *e, int operand, int ct) {
  (void)operand, (void)ct;
  kl_build *a = c->a;
  cond_split s = cond_split_of(e);
  const kl_program *br[2] = {e->p.cond.false_branch, e->p.cond.true_branch};
  int nin = e->nin, nout = e->nout, rc = -1, nlin = 0;
  char *lin = kl_calloc((size_t)nin + 1, 1), *want = kl_calloc((size_t)nin + 1, 1);
  int *ops = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1)), *res = kl_malloc(sizeof(int) * ((size_t)nin + 1));
  int *vin = kl_malloc(sizeof(int) * ((size_t)(nin + nout) + 1)), *outs = kl_malloc(sizeof(int) * ((size_t)nin + 1));
  kl_program *tb[2] = {NULL, NULL};
  if (!lin || !want || !ops || !res || !vin || !outs) {
    kl_build_oom(a);
    goto done;
  }
  for (int i = 1; i < nin; i++) nlin += lin[i] = kl_tr_is_tangent(c, e->ins[i]) && kl_dtype_is_inexact(c->j->vals[e->ins[i]].aval.dtype);
  int nct = 0; /* results with a cotangent; the others' are symbolic zeros in the branches' VJPs */
  for (int i = 0; i < nout; i++) nct += c->ct[e->outs[i]] >= 0;
  if (nct == 0) { /* every cotangent is zero: so are the operands' */
    rc = 0;
    goto done;
  }
  int nrf = 0, nrt = 0, nro = 0;
  for (int i = 0; i < s.nf; i++) nrf += !lin[1 + i];
  for (int i = 0; i < s.nt; i++) nrt += !lin[1 + s.nf + i];
  for (int i = 0; i < s.no; i++) nro += !lin[1 + s.nf + s.nt + i];
  for (int b = 0; b < 2; b++) {
    int nb_in = br[b]->ninputs;
    for (int i = 0; i < nb_in; i++) want[i] = lin[branch_operand(s, b, i)];
    if (!(tb[b] = kl_program_new())) {
      kl_build_oom(a);
      goto done;
    }
    kl_build in = {.pg = tb[b], .err = a->err, .errlen = a->errlen, .who = a->who};
    const int *bi = br[b]->inputs;
    for (int i = 0; i < s.no; i++)
      if (!want[i]) vin[i] = kl_program_add_input(tb[b], &br[b]->vals[bi[i]].aval);
    for (int i = 0; i < nout; i++)
      vin[nb_in + i] = c->ct[e->outs[i]] >= 0 ? kl_program_add_input(tb[b], &br[b]->vals[br[b]->outputs[i]].aval) : -1;
    for (int i = s.no; i < nb_in; i++)
      if (!want[i]) vin[i] = kl_program_add_input(tb[b], &br[b]->vals[bi[i]].aval);
    for (int i = 0; i < nb_in; i++)
      if (want[i]) vin[i] = kl_build_zeros(&in, &br[b]->vals[bi[i]].aval);
    int *ctv = res; /* per branch input: its cotangent, or -1 */
    if (!in.failed && !kl_splice_vjp(&in, br[b], want, vin, vin + nb_in, ctv)) {
      int k = 0;
      for (int i = 0; i < s.no; i++)
        if (want[i]) outs[k++] = ctv[i];
      for (int bb = 0; bb < 2; bb++) { /* false consts' cotangents, then true consts' */
        int n = bb ? s.nt : s.nf, from = bb ? 1 + s.nf : 1;
        for (int j = 0; j < n; j++)
          if (lin[from + j]) outs[k++] = bb == b ? ctv[s.no + j] : kl_build_zeros(&in, &c->j->vals[e->ins[from + j]].aval);
      }
      if (!in.failed) kl_program_set_outputs(tb[b], outs, k);
    }
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
    for (int i = 0; i < nout; i++)
      if (c->ct[e->outs[i]] >= 0) ops[k++] = c->ct[e->outs[i]];
    int64_t c3[3] = {nrf, nrt, nro + nct};
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
  free(outs);
  kl_program_free(tb[0]);
  kl_program_free(tb[1]);
  return a->failed ? -1 : rc;
}
