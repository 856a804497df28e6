/* control.c: the control family's params and shape rules: equations whose bodies run a number
 * of times decided by data or by a count: while (a condition and a body run until the condition
 * is false), scan (a body run `length` times over slices of its xs, stacking its ys) and cond
 * (one of two branches, as a predicate says).
 * Depends only on ir/. */
#include "../program.h"
#include "prims.h"

const kl_param_field kl_fields_while_[] = {KL_FIELD(while_, counts, IVEC), KL_FIELD(while_, cond, PROGRAM),
                                           KL_FIELD(while_, body, PROGRAM), {NULL, 0, 0}};
const kl_param_field kl_fields_scan[] = {KL_FIELD(scan, counts, IVEC),   KL_FIELD(scan, length, INT),
                                         KL_FIELD(scan, reverse, INT32), KL_FIELD(scan, body, PROGRAM),
                                         {NULL, 0, 0}};
const kl_param_field kl_fields_while_ad[] = {KL_FIELD(while_ad, counts, IVEC), KL_FIELD(while_ad, body, PROGRAM),
                                             KL_FIELD(while_ad, vjp, PROGRAM), {NULL, 0, 0}};
const kl_param_field kl_fields_cond[] = {KL_FIELD(cond, counts, IVEC), KL_FIELD(cond, false_branch, PROGRAM),
                                         KL_FIELD(cond, true_branch, PROGRAM), {NULL, 0, 0}};

static int counts3(kl_rule_err *e, const char *name, const char *what, const kl_ivec *c, int nin) {
  if (c->n != 3 || c->v[0] < 0 || c->v[1] < 0 || c->v[2] < 0 || c->v[0] + c->v[1] + c->v[2] != nin)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: counts must be %s summing to %d operands", name, what, nin);
  return 0;
}

static int same_type(const kl_aval *a, const kl_aval *b) { return a->dtype == b->dtype && kl_rule_same_shape(a, b); }

/* while: operands cond consts, body consts, carries (counts); results: the carries' avals. cond
 * maps (carries, cond consts) to a bool scalar, body (carries, body consts) to new carries of the
 * same types. */
static int rule_while(kl_rule_err *e, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs, int *nout) {
  const kl_ivec *c = &p->while_.counts;
  char b1[160], b2[160];
  if (counts3(e, "while", "(n_cond_consts, n_body_consts, n_carries)", c, nin)) return -1;
  int64_t nc = c->v[0], nb = c->v[1], n = c->v[2];
  const kl_program *cond = p->while_.cond, *body = p->while_.body;
  if (n > KL_MAX_OUTS) return kl_rule_fail(e, KL_ERR_VALUE, "while: %lld carries (at most %d)", (long long)n, KL_MAX_OUTS);
  if (!cond || cond->ninputs != nc + n || cond->noutputs != 1)
    return kl_rule_fail(e, KL_ERR_VALUE, "while: the condition program must take %lld inputs and return one value",
                        (long long)(nc + n));
  const kl_aval *pa = &cond->vals[cond->outputs[0]].aval;
  if (pa->dtype != KL_BOOL || pa->ndim != 0)
    return kl_rule_fail(e, KL_ERR_TYPE, "while: the condition must return a boolean scalar, got %s",
                        kl_rule_shape_str(pa, b1, sizeof b1));
  if (!body || body->ninputs != nb + n || body->noutputs != n)
    return kl_rule_fail(e, KL_ERR_VALUE, "while: the body program must take %lld inputs and return %lld carries",
                        (long long)(nb + n), (long long)n);
  for (int64_t i = 0; i < nc + nb; i++) { /* the programs take (carries, their consts) */
    const kl_aval *want = i < nc ? &cond->vals[cond->inputs[n + i]].aval : &body->vals[body->inputs[n + i - nc]].aval;
    if (!same_type(want, &ins[i]))
      return kl_rule_fail(e, KL_ERR_TYPE, "while: operand %lld is %s, its program expects %s", (long long)i,
                          kl_rule_shape_str(&ins[i], b1, sizeof b1), kl_rule_shape_str(want, b2, sizeof b2));
  }
  for (int64_t i = 0; i < n; i++) {
    const kl_aval *in = &ins[nc + nb + i], *cin = &cond->vals[cond->inputs[i]].aval,
                  *bin = &body->vals[body->inputs[i]].aval, *out = &body->vals[body->outputs[i]].aval;
    if (!same_type(cin, in) || !same_type(bin, in) || !same_type(out, in))
      return kl_rule_fail(e, KL_ERR_TYPE, "while: carry %lld is %s, the body returns %s", (long long)i,
                          kl_rule_shape_str(in, b1, sizeof b1), kl_rule_shape_str(out, b2, sizeof b2));
    outs[i] = *in;
  }
  *nout = (int)n;
  return 0;
}

/* scan: operands consts, initial carries, xs (counts), each x with leading extent `length`;
 * results: the final carries, then each y stacked along a new leading axis of `length`. The body
 * maps (consts, carries, x slices) to (carries of the same types, y slices). */
static int rule_scan(kl_rule_err *e, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs, int *nout) {
  const kl_ivec *c = &p->scan.counts;
  const kl_program *body = p->scan.body;
  char b1[160], b2[160];
  if (counts3(e, "scan", "(n_consts, n_carries, n_xs)", c, nin)) return -1;
  int64_t nk = c->v[0], n = c->v[1], len = p->scan.length;
  if (len < 0) return kl_rule_fail(e, KL_ERR_VALUE, "scan: length must be >= 0, got %lld", (long long)len);
  if (!body || body->ninputs != nin || body->noutputs < n)
    return kl_rule_fail(e, KL_ERR_VALUE, "scan: the body program must take %d inputs and return at least %lld carries", nin,
                        (long long)n);
  if (body->noutputs > KL_MAX_OUTS)
    return kl_rule_fail(e, KL_ERR_VALUE, "scan: %d carries and ys (at most %d)", body->noutputs, KL_MAX_OUTS);
  for (int64_t i = 0; i < nin; i++) {
    kl_aval want = body->vals[body->inputs[i]].aval, got = ins[i];
    if (i >= nk + n) { /* an x: the body sees one slice */
      if (got.ndim < 1 || got.dims[0] != len)
        return kl_rule_fail(e, KL_ERR_TYPE, "scan: x %lld is %s, it needs a leading axis of length %lld",
                            (long long)(i - nk - n), kl_rule_shape_str(&got, b1, sizeof b1), (long long)len);
      got.ndim--;
      for (int d = 0; d < got.ndim; d++) got.dims[d] = got.dims[d + 1];
    }
    if (!same_type(&want, &got))
      return kl_rule_fail(e, KL_ERR_TYPE, "scan: operand %lld is %s, the body expects %s", (long long)i,
                          kl_rule_shape_str(&got, b1, sizeof b1), kl_rule_shape_str(&want, b2, sizeof b2));
  }
  for (int64_t i = 0; i < n; i++) {
    const kl_aval *in = &ins[nk + i], *out = &body->vals[body->outputs[i]].aval;
    if (!same_type(out, in))
      return kl_rule_fail(e, KL_ERR_TYPE, "scan: carry %lld is %s, the body returns %s", (long long)i,
                          kl_rule_shape_str(in, b1, sizeof b1), kl_rule_shape_str(out, b2, sizeof b2));
    outs[i] = *in;
  }
  for (int i = (int)n; i < body->noutputs; i++) {
    const kl_aval *y = &body->vals[body->outputs[i]].aval;
    if (y->ndim >= KL_MAX_RANK) return kl_rule_fail(e, KL_ERR_VALUE, "scan: y %lld has rank %d, stacked it would exceed %d",
                                                    (long long)(i - n), y->ndim, KL_MAX_RANK);
    outs[i] = *y;
    outs[i].ndim++;
    outs[i].dims[0] = len;
    for (int d = 0; d < y->ndim; d++) outs[i].dims[d + 1] = y->dims[d];
  }
  *nout = body->noutputs;
  return 0;
}

/* cond: operands the predicate (a bool scalar), false consts, true consts, operands; each branch
 * maps (operands, its consts) to results of the same types, which are the equation's. */
static int rule_cond(kl_rule_err *e, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs, int *nout) {
  const kl_ivec *c = &p->cond.counts;
  char b1[160], b2[160];
  if (nin < 1 || counts3(e, "cond", "(n_false_consts, n_true_consts, n_operands)", c, nin - 1)) return -1;
  if (ins[0].dtype != KL_BOOL || ins[0].ndim != 0)
    return kl_rule_fail(e, KL_ERR_TYPE, "cond: the predicate must be a boolean scalar, got %s", kl_rule_shape_str(&ins[0], b1, sizeof b1));
  int64_t nf = c->v[0], nt = c->v[1], no = c->v[2];
  const kl_program *br[2] = {p->cond.false_branch, p->cond.true_branch};
  const int64_t own[2] = {nf, nt}, at[2] = {1, 1 + nf};
  for (int b = 0; b < 2; b++) {
    if (!br[b] || br[b]->ninputs != no + own[b] || br[b]->noutputs != br[0]->noutputs)
      return kl_rule_fail(e, KL_ERR_VALUE, "cond: the %s branch must take %lld inputs and return %d results",
                          b ? "true" : "false", (long long)(no + own[b]), br[0] ? br[0]->noutputs : 0);
    for (int64_t i = 0; i < no + own[b]; i++) {
      const kl_aval *want = &br[b]->vals[br[b]->inputs[i]].aval, *got = i < no ? &ins[1 + nf + nt + i] : &ins[at[b] + i - no];
      if (!same_type(want, got))
        return kl_rule_fail(e, KL_ERR_TYPE, "cond: the %s branch's input %lld is %s, it expects %s", b ? "true" : "false",
                            (long long)i, kl_rule_shape_str(got, b1, sizeof b1), kl_rule_shape_str(want, b2, sizeof b2));
    }
  }
  if (br[0]->noutputs > KL_MAX_OUTS) return kl_rule_fail(e, KL_ERR_VALUE, "cond: %d results (at most %d)", br[0]->noutputs, KL_MAX_OUTS);
  for (int i = 0; i < br[0]->noutputs; i++) {
    const kl_aval *f = &br[0]->vals[br[0]->outputs[i]].aval, *t = &br[1]->vals[br[1]->outputs[i]].aval;
    if (!same_type(f, t))
      return kl_rule_fail(e, KL_ERR_TYPE, "cond: result %d is %s in the false branch and %s in the true one", i,
                          kl_rule_shape_str(f, b1, sizeof b1), kl_rule_shape_str(t, b2, sizeof b2));
    outs[i] = *f; /* the false branch's type, weak type included (JAX's: branch 0's) */
  }
  *nout = br[0]->noutputs;
  return 0;
}

/* while_lin, while_bwd (see prim.h). */
static int rule_while_ad(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                         int *nout) {
  const char *name = kl_prim_get(prim)->name;
  const kl_ivec *c = &p->while_ad.counts;
  const kl_program *body = p->while_ad.body;
  char b1[160], b2[160];
  if (c->n != 2 || c->v[0] < 0 || c->v[1] < 0) return kl_rule_fail(e, KL_ERR_VALUE, "%s: counts must be (n_body_consts, n_carries)", name);
  int nb = (int)c->v[0], n = (int)c->v[1], nfc = 0, nfk = 0;
  if (!body || body->ninputs != n + nb || body->noutputs != n)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: the body must take %d inputs and return %d carries", name, n + nb, n);
  /* tangents travel for the inexact (float and complex) carries and consts, as the JVP emits them */
  for (int i = 0; i < n; i++) nfc += kl_dtype_is_inexact(body->vals[body->inputs[i]].aval.dtype) != 0;
  for (int j = 0; j < nb; j++) nfk += kl_dtype_is_inexact(body->vals[body->inputs[n + j]].aval.dtype) != 0;
  int want_in = nb + n + 1 + (prim == KL_P_WHILE_LIN ? nfc + nfk : nfc);
  if (nin != want_in) return kl_rule_fail(e, KL_ERR_VALUE, "%s: %d operands, expected %d", name, nin, want_in);
  if (prim == KL_P_WHILE_BWD && !p->while_ad.vjp) return kl_rule_fail(e, KL_ERR_VALUE, "%s: no vjp program", name);
  for (int i = 0; i < nb + n; i++) {
    const kl_aval *want = &body->vals[body->inputs[i < nb ? n + i : i - nb]].aval;
    if (!same_type(want, &ins[i]))
      return kl_rule_fail(e, KL_ERR_TYPE, "%s: operand %d is %s, the body expects %s", name, i,
                          kl_rule_shape_str(&ins[i], b1, sizeof b1), kl_rule_shape_str(want, b2, sizeof b2));
  }
  if (ins[nb + n].dtype != KL_I32 || ins[nb + n].ndim != 0)
    return kl_rule_fail(e, KL_ERR_TYPE, "%s: the trip count must be int32[], got %s", name, kl_rule_shape_str(&ins[nb + n], b1, sizeof b1));
  if (nfc + (prim == KL_P_WHILE_BWD ? nfk : 0) > KL_MAX_OUTS)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: %d results (at most %d)", name, nfc + nfk, KL_MAX_OUTS);
  int k = 0;
  for (int i = 0; i < n; i++)
    if (kl_dtype_is_inexact(body->vals[body->inputs[i]].aval.dtype)) outs[k++] = body->vals[body->inputs[i]].aval;
  for (int j = 0; prim == KL_P_WHILE_BWD && j < nb; j++)
    if (kl_dtype_is_inexact(body->vals[body->inputs[n + j]].aval.dtype)) outs[k++] = body->vals[body->inputs[n + j]].aval;
  *nout = k;
  return 0;
}

int kl_infer_control(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                     int *nout) {
  if (prim == KL_P_SCAN) return rule_scan(e, ins, nin, p, outs, nout);
  if (prim == KL_P_COND) return rule_cond(e, ins, nin, p, outs, nout);
  if (prim == KL_P_WHILE_LIN || prim == KL_P_WHILE_BWD) return rule_while_ad(e, prim, ins, nin, p, outs, nout);
  return rule_while(e, ins, nin, p, outs, nout);
}
