/* cumulative.c: the transformation rules of the cumulative family (cumsum cumprod cummax cummin):
 * JVP (cumsum is linear; the others by recursive doubling), the transpose of cumsum, batching.
 * Depends only on ir/ and transforms/. */
#include <math.h>
#include <string.h>

#include "rules.h"

/* ---- JVP ------------------------------------------------------------------------------------- */

/* Tangent of an inclusive scan of x along `axis` with combiner comb (MUL, MAX, MIN): recursive
 * doubling on (primal, tangent) pairs, log2(n) rounds of shifts. Exact with zeros in a
 * product (no division), ties of max/min split as in the binary rule. In round s the first s
 * positions have no earlier element and pass through unchanged: combining them with the
 * identity padding would tie an -inf with max's -inf fill (halving its tangent) and drop a
 * NaN's tangent (bug, issue 32: cummax([nan, 1]) gave d/dx0 = 0, cummax([-inf, ...]) 1/2). */
static int scan_jvp(kl_build *a, kl_prim comb, int x, int t, int axis, int reverse) {
  kl_aval xa = *kl_build_aval(a, x);
  int64_t n = xa.dims[axis];
  double ident = comb == KL_P_MUL ? 1 : comb == KL_P_MAX ? -INFINITY : INFINITY;
  int fill_p = kl_build_lit(a, ident, xa.dtype), fill_t = kl_build_lit(a, 0, xa.dtype);
  int pos = kl_build_iota(a, KL_I32, xa.dims, xa.ndim, axis);
  int p = x;
  for (int64_t s = 1; s < n && !a->failed; s *= 2) {
    int64_t lo = reverse ? -s : s;
    int ps = kl_ad_pad_axis(a, p, fill_p, axis, lo, -lo), ts = kl_ad_pad_axis(a, t, fill_t, axis, lo, -lo);
    int pn = kl_build_bin(a, comb, ps, p);
    int ce = p, cl = ps; /* coefficients of the earlier (shifted) and later tangents */
    if (comb != KL_P_MUL) kl_jvp_binary_coefs(a, comb, ps, p, pn, &ce, &cl);
    int tn = add(a, mul(a, ts, ce), mul(a, t, cl));
    int has_earlier = reverse ? kl_build_bin(a, KL_P_LT, pos, kl_build_ilit(a, n - s, KL_I32))
                              : kl_build_bin(a, KL_P_GE, pos, kl_build_ilit(a, s, KL_I32));
    t = kl_build_select(a, has_earlier, t, tn);
    p = kl_build_select(a, has_earlier, p, pn);
  }
  return t;
}

static int cumsum_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)xs, (void)ys;
  if (ts[0] >= 0) touts[0] = same_prim(a, e, (int *)&ts[0], 1);
  return 0;
}

/* cumprod, cummax, cummin: the scan of the binary rule of mul, max, min. */
static int scan_rule_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  kl_prim comb = e->prim == KL_P_CUMPROD ? KL_P_MUL : e->prim == KL_P_CUMMAX ? KL_P_MAX : KL_P_MIN;
  if (ts[0] >= 0) touts[0] = scan_jvp(a, comb, xs[0], ts[0], (int)e->p.cumulative.axis, e->p.cumulative.reverse);
  return 0;
}

/* ---- transpose ------------------------------------------------------------------------------- */

/* cumsum: the cumsum of the cotangent in the other direction. */
static int cumsum_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  (void)i;
  kl_params p;
  memset(&p, 0, sizeof p);
  p.cumulative.axis = e->p.cumulative.axis;
  p.cumulative.reverse = !e->p.cumulative.reverse;
  return kl_build_op(c->a, KL_P_CUMSUM, &ct, 1, &p);
}

/* ---- batching -------------------------------------------------------------------------------- */

static int cumulative_batch(kl_build *b, rule_args *r) {
  kl_params p = r->e->p;
  p.cumulative.axis++;
  return kl_batch_all(b, r, &p);
}

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_cumulative[] = {
    {KL_P_CUMSUM, cumsum_jvp, cumsum_transpose, cumulative_batch, NULL, NULL, NULL},
    {KL_P_CUMPROD, scan_rule_jvp, NULL, cumulative_batch, NULL, NULL, NULL},
    {KL_P_CUMMAX, scan_rule_jvp, NULL, cumulative_batch, NULL, NULL, NULL},
    {KL_P_CUMMIN, scan_rule_jvp, NULL, cumulative_batch, NULL, NULL, NULL},
    KL_RULES_END};
