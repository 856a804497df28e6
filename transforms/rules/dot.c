/* dot.c: the transformation rules of dot_general: JVP (bilinear), transpose with respect to either
 * operand, batching. Depends only on ir/ and transforms/. */
#include "rules.h"

/* ---- JVP ------------------------------------------------------------------------------------- */

static int dot_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  int c1 = -1, c2 = -1;
  if (ts[0] >= 0) {
    int ins[2] = {ts[0], xs[1]};
    c1 = same_prim(a, e, ins, 2);
  }
  if (ts[1] >= 0) {
    int ins[2] = {xs[0], ts[1]};
    c2 = same_prim(a, e, ins, 2);
  }
  touts[0] = kl_build_add(a, c1, c2);
  return 0;
}

/* ---- transpose ------------------------------------------------------------------------------- */

/* dot_general transposed with respect to one operand (side 0: lhs, 1: rhs). */
static int dot_transpose(kl_tctx *c, const kl_eqn *e, int side, int ct) {
  const kl_aval *l = &c->j->vals[e->ins[0]].aval, *r = &c->j->vals[e->ins[1]].aval;
  const kl_aval *me = side ? r : l, *other = side ? l : r;
  const kl_ivec *lr_c[2] = {&e->p.dot.lhs_contracting, &e->p.dot.rhs_contracting};
  const kl_ivec *lr_b[2] = {&e->p.dot.lhs_batch, &e->p.dot.rhs_batch};
  const int64_t *mc = lr_c[side]->v, *oc = lr_c[1 - side]->v, *mb = lr_b[side]->v, *ob = lr_b[1 - side]->v;
  int nc = lr_c[0]->n, nb = lr_b[0]->n;
  /* free dims of each side in increasing order */
  int64_t mfree[KL_MAX_RANK], ofree[KL_MAX_RANK];
  int nmf = 0, nof = 0;
  for (int d = 0; d < me->ndim; d++) {
    int used = 0;
    for (int i = 0; i < nc; i++) used |= mc[i] == d;
    for (int i = 0; i < nb; i++) used |= mb[i] == d;
    if (!used) mfree[nmf++] = d;
  }
  for (int d = 0; d < other->ndim; d++) {
    int used = 0;
    for (int i = 0; i < nc; i++) used |= oc[i] == d;
    for (int i = 0; i < nb; i++) used |= ob[i] == d;
    if (!used) ofree[nof++] = d;
  }
  /* ct dims: [batch, lhs free, rhs free]; contract ct's "other free" dims with other's free dims */
  int64_t ct_other[KL_MAX_RANK], ct_batch[KL_MAX_RANK], ob_v[KL_MAX_RANK], of_v[KL_MAX_RANK];
  int64_t other_free_start = side ? nb : nb + (int64_t)nmf; /* where other's free dims sit in ct */
  for (int i = 0; i < nof; i++) {
    ct_other[i] = other_free_start + i;
    of_v[i] = ofree[i];
  }
  for (int i = 0; i < nb; i++) {
    ct_batch[i] = i;
    ob_v[i] = ob[i];
  }
  kl_params p;
  kl_params_init(&p, KL_P_DOT_GENERAL);
  p.dot.lhs_contracting = (kl_ivec){ct_other, nof};
  p.dot.rhs_contracting = (kl_ivec){of_v, nof};
  p.dot.lhs_batch = (kl_ivec){ct_batch, nb};
  p.dot.rhs_batch = (kl_ivec){ob_v, nb};
  p.dot.precision = e->p.dot.precision;
  /* with preferred_element_type the cotangent is wider than the operands: compute in its dtype
   * (kl_tr_accumulate() converts the result back) */
  int ins[2] = {ct, kl_build_convert(c->a, kl_tr_prim_of(c, e->ins[1 - side]), kl_build_aval(c->a, ct)->dtype)};
  /* result dims of dot(ct, other): [batch, my free (increasing), other's contracting dims (increasing)];
   * of dot(other, ct): [batch, other's contracting dims, my free]. other's contracting dim oc[i]
   * pairs with my contracting dim mc[i]. The order that lands in my layout needs no transpose
   * (x^T g for a weight gradient is dot(x, g), not transpose(dot(g, x))). */
  int64_t perm[KL_MAX_RANK], perm_b[KL_MAX_RANK];
  for (int i = 0; i < nb; i++) perm[mb[i]] = perm_b[mb[i]] = i;
  for (int i = 0; i < nmf; i++) {
    perm[mfree[i]] = nb + i;
    perm_b[mfree[i]] = nb + nc + i;
  }
  for (int i = 0; i < nc; i++) {
    int rank = 0;
    for (int j = 0; j < nc; j++) rank += oc[j] < oc[i];
    perm[mc[i]] = nb + nmf + rank;
    perm_b[mc[i]] = nb + rank;
  }
  int identity = 1, identity_b = 1;
  for (int d = 0; d < me->ndim; d++) {
    identity &= perm[d] == d;
    identity_b &= perm_b[d] == d;
  }
  if (!identity && identity_b) {
    int swapped[2] = {ins[1], ins[0]};
    p.dot.lhs_contracting.v = of_v;
    p.dot.rhs_contracting.v = ct_other;
    p.dot.lhs_batch.v = ob_v;
    p.dot.rhs_batch.v = ct_batch;
    return kl_build_op(c->a, KL_P_DOT_GENERAL, swapped, 2, &p);
  }
  int res = kl_build_op(c->a, KL_P_DOT_GENERAL, ins, 2, &p);
  if (res < 0) return -1;
  if (identity) return res;
  kl_params tp;
  kl_params_init(&tp, KL_P_TRANSPOSE);
  tp.transpose.permutation = (kl_ivec){perm, me->ndim};
  return kl_build_op(c->a, KL_P_TRANSPOSE, &res, 1, &tp);
}

/* ---- batching -------------------------------------------------------------------------------- */

/* dot_general: with both operands batched the batch axis becomes a leading batch dimension;
 * with one, it is a free dimension of that side, moved to the front of the result after. */
static int dot_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  kl_params p = e->p;
  int64_t lc[KL_MAX_RANK + 2], rc[KL_MAX_RANK + 2], lb[KL_MAX_RANK + 2], rb[KL_MAX_RANK + 2];
  int nc = e->p.dot.lhs_contracting.n, nb = e->p.dot.lhs_batch.n;
  int lhs = r->bs[0], rhs = r->bs[1];
  p.dot.lhs_contracting = kl_batch_shifted(lc, -1, &e->p.dot.lhs_contracting, lhs);
  p.dot.rhs_contracting = kl_batch_shifted(rc, -1, &e->p.dot.rhs_contracting, rhs);
  p.dot.lhs_batch = kl_batch_shifted(lb, lhs && rhs ? 0 : -1, &e->p.dot.lhs_batch, lhs);
  p.dot.rhs_batch = kl_batch_shifted(rb, lhs && rhs ? 0 : -1, &e->p.dot.rhs_batch, rhs);
  int y = kl_build_op(b, KL_P_DOT_GENERAL, r->xs, 2, &p);
  int at = 0; /* where the batch axis lands */
  if (lhs && !rhs) at = nb;
  else if (rhs && !lhs) at = nb + (src_in(r, 0)->ndim - nc - nb);
  r->ys[0] = kl_batch_move_axis(b, y, at, 0);
  return r->ys[0] < 0 ? -1 : 0;
}

/* ---- legalize ------------------------------------------------------------------------------- */

/* One operand in GEMM form: converted to t, and transposed when it is stored in neither GEMM
 * order (kl_dot_gemm_layout); *batch and *contract are renumbered into nb and nc to match. */
static int gemm_operand(kl_build *b, int x, kl_dtype t, kl_ivec *batch, kl_ivec *contract, int rhs, int64_t *nb,
                        int64_t *nc) {
  x = kl_build_convert(b, x, t);
  if (x < 0) return -1;
  kl_aval a = *kl_build_aval(b, x);
  int64_t perm[KL_MAX_RANK];
  int swapped = 0;
  if (kl_dot_gemm_layout(&a, batch, contract, rhs, perm, &swapped) >= 0) return x;
  int contract_first = rhs != swapped, nfree = a.ndim - batch->n - contract->n;
  for (int i = 0; i < batch->n; i++) nb[i] = i;
  for (int i = 0; i < contract->n; i++) nc[i] = batch->n + (contract_first ? 0 : nfree) + i;
  batch->v = nb;
  contract->v = nc;
  return kl_build_transpose(b, x, perm, a.ndim);
}

/* dot_general as BLAS and cuBLAS take it: (batch, m, k) by (batch, k, n) row-major, either
 * operand possibly transposed, operands of the result's dtype (or float16/bfloat16 operands of
 * a float32 result: kl_dot_mixed). An operand stored otherwise
 * (attention's bqhd,bkhd->bhqk: batch dims not leading; contracting dims between free ones;
 * another dtype than preferred_element_type) gets a transpose and a convert of its own, which
 * fusion computes together with the operand's producer; the result's layout never changes. */
static int dot_legalize(kl_build *b, const kl_eqn *e, const int *xs, int *ys) {
  const kl_params *p = &e->p;
  kl_aval l = *kl_build_aval(b, xs[0]), r = *kl_build_aval(b, xs[1]);
  kl_dtype t = p->dot.preferred_element_type >= 0 ? (kl_dtype)p->dot.preferred_element_type : l.dtype;
  kl_dtype c = kl_dot_compute_dtype(l.dtype, t);
  if (c != t) { /* computed in the operands' dtype, then converted (float -> int: after the product) */
    kl_eqn inner = *e; /* the product, legalized in turn */
    inner.p.dot.preferred_element_type = -1;
    int z, rc = dot_legalize(b, &inner, xs, &z);
    if (rc == 0) z = kl_build_op(b, KL_P_DOT_GENERAL, xs, 2, &inner.p);
    ys[0] = rc < 0 || z < 0 ? -1 : kl_build_convert(b, z, t);
    return ys[0] < 0 ? -1 : 1;
  }
  /* half-precision operands into a float32 result stay half: one mixed GEMM (tensor cores at
   * their half rate, half the operand bytes) instead of converted copies and a float32 product */
  kl_dtype in = l.dtype == r.dtype && kl_dot_mixed(l.dtype, t) ? l.dtype : t;
  if (l.dtype == in && r.dtype == in &&
      kl_dot_gemm_layout(&l, &p->dot.lhs_batch, &p->dot.lhs_contracting, 0, NULL, NULL) >= 0 &&
      kl_dot_gemm_layout(&r, &p->dot.rhs_batch, &p->dot.rhs_contracting, 1, NULL, NULL) >= 0)
    return 0;
  kl_params q = *p;
  int64_t lb[KL_MAX_RANK], lc[KL_MAX_RANK], rb[KL_MAX_RANK], rc[KL_MAX_RANK];
  int ins[2] = {gemm_operand(b, xs[0], in, &q.dot.lhs_batch, &q.dot.lhs_contracting, 0, lb, lc),
                gemm_operand(b, xs[1], in, &q.dot.rhs_batch, &q.dot.rhs_contracting, 1, rb, rc)};
  if (ins[0] < 0 || ins[1] < 0) return -1;
  ys[0] = kl_build_op(b, KL_P_DOT_GENERAL, ins, 2, &q); /* the builder copies q's dims */
  return ys[0] < 0 ? -1 : 1;
}

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_dot[] = {
    {KL_P_DOT_GENERAL, dot_jvp, dot_transpose, dot_batch, NULL, NULL, dot_legalize},
    KL_RULES_END};
