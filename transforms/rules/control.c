/* control.c: the transformation rules of the control family (while, scan, cond): equations
 * whose bodies run as data decides. Their rules build new bodies with the drivers (the body's
 * JVP, its batched form, its transpose by reverse mode) and emit new equations: reverse mode
 * splits a scan into a primal scan stacking residuals and a linear scan that transposes into a
 * scan running the other way (kl_ctl_scan_jvp_reverse), a cond into the cond and a linear cond of the
 * branches' JVPs, a while into the loop counting its trips and while_lin, which transposes into
 * while_bwd. Depends only on ir/ and transforms/. */
#include <stdlib.h>
#include <string.h>

#include "../../ir/alloc.h"
#include "control.h"

/* Copies src's equations into b's program, src's inputs being the values ins; its outputs'
 * values go to outs. Returns 0, or -1 (b failed). */
int kl_splice(kl_build *b, const kl_program *src, const int *ins, int *outs) {
  int *map = kl_malloc(sizeof(int) * ((size_t)src->nvals + 1));
  int *args = kl_malloc(sizeof(int) * ((size_t)kl_program_max_operands(src) + 1));
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
  if (a->remat) return kl_ctl_while_jvp_reverse(a, e, xs, ts, ys, touts);
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
  for (int i = 0; i < n; i++) nt += has[i] = kl_dtype_is_inexact(body->vals[body->inputs[i]].aval.dtype) != 0;
  for (int j = 0; j < nb; j++) ntc += ts[nc + j] >= 0;
  { /* body2: (carries, their tangents, body consts, their tangents) -> (carries, tangents) */
    kl_build in = {.pg = body2, .err = a->err, .errlen = a->errlen, .who = a->who};
    for (int i = 0; i < n; i++) fp[body->inputs[i]] = kl_program_add_input(body2, &body->vals[body->inputs[i]].aval);
    for (int i = 0; i < n; i++)
      if (has[i]) ft[body->inputs[i]] = kl_program_add_input(body2, &body->vals[body->inputs[i]].aval);
    for (int j = 0; j < nb; j++) fp[body->inputs[n + j]] = kl_program_add_input(body2, &body->vals[body->inputs[n + j]].aval);
    for (int j = 0; j < nb; j++)
      if (ts[nc + j] >= 0) ft[body->inputs[n + j]] = kl_program_add_input(body2, &body->vals[body->inputs[n + j]].aval);
    if (!kl_jvp_eqns(&in, body, fp, ft, NULL, NULL, 0)) {
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
  { /* the carries the batch reaches (a fixed point over the body); if the condition then stays
     * the same for every example, the loop stays one loop over them, as JAX's (libraries rely
     * on an unbatched loop counter: equinox's checkpointed while loop) */
    char pb = 0;
    memcpy(want, r->bs + nc + nb, (size_t)n);
    memcpy(in_b + n, r->bs + nc, (size_t)nb);
    if (kl_batch_carries(b, e->p.while_.body, in_b, 0, n, want)) goto done;
    memcpy(in_b + n, r->bs, (size_t)nc);
    if (kl_batch_out_flags(b, e->p.while_.cond, in_b, &pb)) goto done;
    if (!pb) {
      char no = 0;
      if (!(cond_b = kl_batch_subprog(b, e->p.while_.cond, in_b, &no))) goto done;
      memcpy(in_b + n, r->bs + nc, (size_t)nb);
      if (!(body_b = kl_batch_subprog(b, e->p.while_.body, in_b, want))) goto done;
      for (int i = 0; i < n; i++) {
        if (want[i]) r->xs[nc + nb + i] = kl_batch_as_batched(b, r->xs[nc + nb + i], r->bs[nc + nb + i]);
        r->ob[i] = want[i];
      }
      kl_params p = e->p;
      p.while_.cond = cond_b;
      p.while_.body = body_b;
      rc = b->failed || kl_build_emit(b, KL_P_WHILE, r->xs, e->nin, &p, r->ys) < 0 ? -1 : 0;
      goto done;
    }
  }
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

/* Emits a scan of e's kind (length and direction from e; the direction flipped with `flip`) over body with the
 * given counts; the results go to res. Returns the number of results, or -1. */
int kl_ctl_emit_scan(kl_build *a, const kl_eqn *e, kl_program *body, int nk, int n, int nx, const int *ops, int flip,
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
int kl_ctl_jvp_body(kl_build *in, const kl_program *body, scan_split s, const char *tc, const char *has, const char *tx,
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
  if (kl_jvp_eqns(in, body, fp, ft, NULL, NULL, 0)) goto done;
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

/* scan, JVP. Forward mode: one scan over (carries, tangents of the float carries) whose body is
 * the body's JVP; tangents of consts and xs are extra consts and xs. Reverse mode (a->remat):
 * kl_ctl_scan_jvp_reverse's primal and linear scans. */
static int scan_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (a->remat) return kl_ctl_scan_jvp_reverse(a, e, xs, ts, ys, touts);
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
  for (int i = 0; i < s.n; i++) has[i] = kl_dtype_is_inexact(body->vals[body->inputs[s.nk + i]].aval.dtype) != 0;
  for (int j = 0; j < s.nx; j++) tx[j] = ts[s.nk + s.n + j] >= 0;
  {
    kl_build in = {.pg = jb, .err = a->err, .errlen = a->errlen, .who = a->who};
    if (kl_ctl_jvp_body(&in, body, s, tc, has, tx, yt, k3)) {
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
  if (a->failed || kl_ctl_emit_scan(a, e, jb, (int)k3[0], (int)k3[1], (int)k3[2], ops, 0, res) < 0) goto done;
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

/* scan, batching: the carries the batch reaches (a fixed point over the body; an unbatched
 * operand of one broadcast), batched xs with the batch at axis 1 (their axis 0 is the one
 * scanned), the body batched; batched ys come back with the batch at axis 1 and move it to 0. */
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
  memcpy(want, r->bs + s.nk, (size_t)s.n);
  if (kl_batch_carries(b, e->p.scan.body, in_b, s.nk, s.n, want)) goto done;
  if (kl_batch_out_flags(b, e->p.scan.body, in_b, want)) goto done; /* the carries' own, and the ys' */
  for (int i = 0; i < s.n; i++) {
    if (in_b[s.nk + i]) r->xs[s.nk + i] = kl_batch_as_batched(b, r->xs[s.nk + i], r->bs[s.nk + i]);
    want[i] = in_b[s.nk + i];
  }
  for (int j = s.nk + s.n; j < nin; j++)
    if (r->bs[j]) r->xs[j] = kl_batch_move_axis(b, r->xs[j], 0, 1);
  if (b->failed || !(bb = kl_batch_subprog(b, e->p.scan.body, in_b, want))) goto done;
  if (kl_ctl_emit_scan(b, e, bb, s.nk, s.n, s.nx, r->xs, 0, r->ys) < 0) goto done;
  for (int i = 0; i < e->nout; i++) r->ob[i] = want[i];
  for (int j = 0; j < s.ny; j++)
    if (want[s.n + j]) r->ys[s.n + j] = kl_batch_move_axis(b, r->ys[s.n + j], 1, 0);
  rc = 0;
done:
  free(in_b);
  free(want);
  kl_program_free(bb);
  return b->failed ? -1 : rc;
}

/* ---- cond ------------------------------------------------------------------------------------ */

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
  return kl_jvp_eqns(in, br, fp, ft, NULL, NULL, 0);
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
    tout[i] = kl_dtype_is_inexact(br[0]->vals[br[0]->outputs[i]].aval.dtype) &&
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

/* cond, batching. An unbatched predicate: the same cond over the batched branches, a result
 * batched where either branch batches it. A batched one: both branches run, batched, and each
 * result is selected per example (as JAX does). */
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
  memset(want, !!r->bs[0], (size_t)nout); /* an unbatched predicate: the results either branch batches */
  for (int k = 0; k < 2 && !r->bs[0]; k++) {
    char *ob = (char *)got; /* scratch */
    for (int i = 0; i < br[k]->ninputs; i++) in_b[i] = r->bs[branch_operand(s, k, i)];
    if (kl_batch_out_flags(b, br[k], in_b, ob)) goto done;
    for (int i = 0; i < nout; i++) want[i] |= ob[i];
  }
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < br[k]->ninputs; i++) in_b[i] = r->bs[branch_operand(s, k, i)];
    if (!(bb[k] = kl_batch_subprog(b, br[k], in_b, want))) goto done;
  }
  if (!r->bs[0]) {
    for (int i = 0; i < nout; i++) r->ob[i] = want[i];
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
    {KL_P_SCAN, scan_jvp, kl_ctl_scan_transpose, scan_batch, NULL, NULL, NULL},
    {KL_P_COND, cond_jvp, kl_ctl_cond_transpose, cond_batch, NULL, NULL, NULL},
    {KL_P_WHILE_LIN, NULL, kl_ctl_while_lin_transpose, NULL, NULL, NULL, NULL},
    {KL_P_WHILE_BWD, kl_ctl_while_bwd_jvp, NULL, kl_ctl_while_bwd_batch, NULL, NULL, NULL},
    KL_RULES_END};
