/* transpose.c: reverse mode. kl_vjp runs the JVP pass, keeps the primal equations, and walks
 * the tangent (linear) equations backwards, each through its primitive's transpose rule,
 * accumulating cotangents. Only linear primitives need transpose rules: every JVP rule writes
 * its tangents with them. */
#include <stdlib.h>
#include <string.h>

#include "ad.h"

typedef struct {
  kl_ad *a;          /* the program being built (V) */
  const kl_program *j; /* the JVP program */
  const char *jtag;  /* tags of j's values (KL_TAG_*) */
  int *vmap;         /* j primal value -> V value */
  int *ct;           /* j value -> V cotangent value, -1 = zero */
  int *stack, capstack; /* prim_of's work list */
} tctx;

static int emit1(kl_ad *a, kl_prim p, const int *ins, int nin, const kl_params *prm) {
  int o[KL_MAX_OUTS];
  return kl_ad_emit(a, p, ins, nin, prm, o) < 0 ? -1 : o[0];
}

/* The three int-vector params of slice (start, limit, strides) and pad (low, high, interior). */
static int emit_box(kl_ad *a, kl_prim prim, int x, const int64_t *v0, const int64_t *v1, const int64_t *v2, int n) {
  kl_params p;
  kl_params_init(&p, prim);
  kl_ivec a0 = {(int64_t *)v0, n}, a1 = {(int64_t *)v1, n}, a2 = {(int64_t *)v2, n};
  if (prim == KL_P_SLICE) {
    p.slice.start_indices = a0;
    p.slice.limit_indices = a1;
    p.slice.strides = a2;
    return emit1(a, KL_P_SLICE, &x, 1, &p);
  }
  p.pad.low = a0;
  p.pad.high = a1;
  p.pad.interior = a2;
  int ins[2] = {x, kl_ad_lit(a, 0, kl_ad_aval(a, x)->dtype)}; /* pad with zeros */
  return emit1(a, KL_P_PAD, ins, 2, &p);
}

static void accumulate(tctx *c, int jv, int contrib) {
  if (contrib < 0) return;
  kl_aval target = c->j->vals[jv].aval;
  contrib = kl_ad_sum_to(c->a, contrib, &target);
  if (contrib >= 0 && kl_ad_aval(c->a, contrib)->dtype != target.dtype) {
    kl_params p;
    kl_params_init(&p, KL_P_CONVERT);
    p.convert.new_dtype = (int)target.dtype;
    contrib = emit1(c->a, KL_P_CONVERT, &contrib, 1, &p);
  }
  c->ct[jv] = kl_ad_add(c->a, c->ct[jv], contrib);
}

static int is_t(tctx *c, int jv) { return c->jtag[jv] & KL_TAG_TANGENT; }

/* The V value of j's primal value jv. A checkpoint's recomputed values (KL_TAG_REMAT) are left
 * out of the forward part; the first use emits one here, with what it depends on, so the
 * recomputation sits in the backward pass next to its use. */
static int prim_of(tctx *c, int jv) {
  int top = 0;
  if (c->vmap[jv] >= 0 || c->a->failed) return c->vmap[jv];
  c->stack[top++] = jv;
  while (top > 0 && !c->a->failed) {
    int v = c->stack[top - 1], k = c->j->vals[v].producer;
    if (c->vmap[v] >= 0) {
      top--;
      continue;
    }
    if (k < 0) return kl_ad_fail(c->a, "internal error: reverse mode found no value for %d", v);
    const kl_eqn *e = &c->j->eqns[k];
    int ready = 1;
    for (int i = 0; i < e->nin; i++) {
      if (c->vmap[e->ins[i]] >= 0) continue;
      if (top == c->capstack) {
        c->capstack *= 2;
        c->stack = realloc(c->stack, sizeof(int) * (size_t)c->capstack);
        if (!c->stack) abort();
      }
      c->stack[top++] = e->ins[i];
      ready = 0;
    }
    if (!ready) continue;
    int *ins = malloc(sizeof(int) * ((size_t)e->nin + 1)), outs[KL_MAX_OUTS];
    if (!ins) abort();
    for (int i = 0; i < e->nin; i++) ins[i] = c->vmap[e->ins[i]];
    int n = kl_ad_emit(c->a, e->prim, ins, e->nin, &e->p, outs);
    free(ins);
    for (int i = 0; i < n; i++) c->vmap[e->outs[i]] = outs[i];
    top--;
  }
  return c->vmap[jv];
}

/* dot_general transposed with respect to one operand (side 0: lhs, 1: rhs). */
static int transpose_dot(tctx *c, const kl_eqn *e, int side, int ct) {
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
   * (accumulate() converts the result back) */
  int ins[2] = {ct, kl_ad_convert(c->a, prim_of(c, e->ins[1 - side]), kl_ad_aval(c->a, ct)->dtype)};
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
    return emit1(c->a, KL_P_DOT_GENERAL, swapped, 2, &p);
  }
  int res = emit1(c->a, KL_P_DOT_GENERAL, ins, 2, &p);
  if (res < 0) return -1;
  if (identity) return res;
  kl_params tp;
  kl_params_init(&tp, KL_P_TRANSPOSE);
  tp.transpose.permutation = (kl_ivec){perm, me->ndim};
  return emit1(c->a, KL_P_TRANSPOSE, &res, 1, &tp);
}

/* Cotangent for operand i of linear equation e given the output cotangent ct. */
static int transpose_rule(tctx *c, const kl_eqn *e, int i, int ct) {
  kl_ad *a = c->a;
  const kl_prim_info *pi = kl_prim_get(e->prim);
  const kl_aval *xa = &c->j->vals[e->ins[i]].aval;
  const kl_aval *ya = &c->j->vals[e->outs[0]].aval;
  kl_params p; /* zeroed; each case fills the member of what it emits */
  memset(&p, 0, sizeof p);
  switch (e->prim) {
  case KL_P_ADD: return ct;
  case KL_P_SUB: return i == 0 ? ct : kl_ad_un(a, KL_P_NEG, ct);
  case KL_P_NEG: return kl_ad_un(a, KL_P_NEG, ct);
  case KL_P_MUL: return kl_ad_bin(a, KL_P_MUL, ct, prim_of(c, e->ins[1 - i]));
  case KL_P_DIV:
    if (i == 1) break;
    return kl_ad_bin(a, KL_P_DIV, ct, prim_of(c, e->ins[1]));
  case KL_P_CONVERT: {
    p.convert.new_dtype = (int)xa->dtype;
    return emit1(a, KL_P_CONVERT, &ct, 1, &p);
  }
  case KL_P_SELECT_N: {
    if (i == 0) break;
    int z = kl_ad_zeros(a, ya);
    int ins[3] = {prim_of(c, e->ins[0]), i == 1 ? ct : z, i == 1 ? z : ct};
    return emit1(a, KL_P_SELECT_N, ins, 3, NULL);
  }
  case KL_P_REDUCE_SUM: {
    int64_t dims[KL_MAX_RANK];
    int nd = 0;
    for (int d = 0; d < xa->ndim; d++) {
      int red = 0;
      for (int k = 0; k < e->p.reduce.axes.n; k++) red |= e->p.reduce.axes.v[k] == d;
      if (!red) dims[nd++] = d;
    }
    kl_aval x = *xa;
    p.broadcast.shape = (kl_ivec){x.dims, x.ndim};
    p.broadcast.broadcast_dimensions = (kl_ivec){dims, nd};
    return emit1(a, KL_P_BROADCAST_IN_DIM, &ct, 1, &p);
  }
  case KL_P_BROADCAST_IN_DIM: {
    /* sum over the new dims and the stretched size-1 dims, then reshape to the operand */
    int64_t axes[KL_MAX_RANK];
    int na = 0;
    for (int d = 0; d < ya->ndim; d++) {
      int src = -1;
      for (int k = 0; k < e->p.broadcast.broadcast_dimensions.n; k++)
        if (e->p.broadcast.broadcast_dimensions.v[k] == d) src = k;
      if (src < 0 || (xa->dims[src] == 1 && ya->dims[d] != 1)) axes[na++] = d;
    }
    int s = ct;
    if (na) {
      p.reduce.axes = (kl_ivec){axes, na};
      s = emit1(a, KL_P_REDUCE_SUM, &ct, 1, &p);
    }
    kl_aval x = *xa;
    if (kl_ad_aval(a, s)->ndim == x.ndim) return s;
    kl_params_init(&p, KL_P_RESHAPE);
    p.reshape.new_sizes = (kl_ivec){x.dims, x.ndim};
    return emit1(a, KL_P_RESHAPE, &s, 1, &p);
  }
  case KL_P_RESHAPE: {
    kl_aval x = *xa;
    p.reshape.new_sizes = (kl_ivec){x.dims, x.ndim};
    return emit1(a, KL_P_RESHAPE, &ct, 1, &p);
  }
  case KL_P_TRANSPOSE: {
    int64_t inv[KL_MAX_RANK];
    const kl_ivec *perm = &e->p.transpose.permutation;
    for (int d = 0; d < perm->n; d++) inv[perm->v[d]] = d;
    p.transpose.permutation = (kl_ivec){inv, perm->n};
    return emit1(a, KL_P_TRANSPOSE, &ct, 1, &p);
  }
  case KL_P_REV: return emit1(a, KL_P_REV, &ct, 1, &e->p);
  case KL_P_SLICE: { /* pad the cotangent back with zeros */
    int64_t lo[KL_MAX_RANK], hi[KL_MAX_RANK], in[KL_MAX_RANK];
    for (int d = 0; d < xa->ndim; d++) {
      int64_t st = e->p.slice.strides.n ? e->p.slice.strides.v[d] : 1, n = ya->dims[d];
      lo[d] = e->p.slice.start_indices.v[d];
      in[d] = st - 1;
      int64_t covered = n ? lo[d] + (n - 1) * st + 1 : lo[d];
      hi[d] = xa->dims[d] - covered;
    }
    return emit_box(a, KL_P_PAD, ct, lo, hi, in, xa->ndim);
  }
  case KL_P_PAD: {
    if (i == 1) { /* padding value: the sum over the padding positions, which pad(0, 1) marks */
      int ins[2] = {kl_ad_zeros(a, &c->j->vals[e->ins[0]].aval), kl_ad_lit(a, 1, ya->dtype)};
      int m = kl_ad_bin(a, KL_P_MUL, ct, emit1(a, KL_P_PAD, ins, 2, &e->p));
      int64_t axes[KL_MAX_RANK];
      for (int d = 0; d < ya->ndim; d++) axes[d] = d;
      p.reduce.axes = (kl_ivec){axes, ya->ndim};
      return emit1(a, KL_P_REDUCE_SUM, &m, 1, &p);
    }
    /* operand: undo negative padding with zero padding, then take the strided slice */
    int64_t lo2[KL_MAX_RANK], hi2[KL_MAX_RANK], zero[KL_MAX_RANK], st[KL_MAX_RANK], lim[KL_MAX_RANK];
    int need = 0;
    for (int d = 0; d < xa->ndim; d++) {
      int64_t lo = e->p.pad.low.v[d], hi = e->p.pad.high.v[d];
      lo2[d] = lo < 0 ? -lo : 0;
      hi2[d] = hi < 0 ? -hi : 0;
      zero[d] = 0;
      need |= lo2[d] || hi2[d];
    }
    int src = need ? emit_box(a, KL_P_PAD, ct, lo2, hi2, zero, xa->ndim) : ct;
    int64_t start[KL_MAX_RANK];
    for (int d = 0; d < xa->ndim; d++) {
      start[d] = e->p.pad.low.v[d] > 0 ? e->p.pad.low.v[d] : 0;
      st[d] = e->p.pad.interior.v[d] + 1;
      lim[d] = xa->dims[d] ? start[d] + (xa->dims[d] - 1) * st[d] + 1 : start[d];
    }
    return emit_box(a, KL_P_SLICE, src, start, lim, st, xa->ndim);
  }
  case KL_P_CONCATENATE: {
    int64_t off = 0, d = e->p.concatenate.dimension;
    for (int k = 0; k < i; k++) off += c->j->vals[e->ins[k]].aval.dims[d];
    int64_t start[KL_MAX_RANK] = {0}, lim[KL_MAX_RANK], st[KL_MAX_RANK];
    for (int k = 0; k < ya->ndim; k++) {
      lim[k] = ya->dims[k];
      st[k] = 1;
    }
    start[d] = off;
    lim[d] = off + xa->dims[d];
    return emit_box(a, KL_P_SLICE, ct, start, lim, st, ya->ndim);
  }
  case KL_P_DOT_GENERAL: return transpose_dot(c, e, i, ct);
  case KL_P_CUMSUM: {
    p.cumulative.axis = e->p.cumulative.axis;
    p.cumulative.reverse = !e->p.cumulative.reverse;
    return emit1(a, KL_P_CUMSUM, &ct, 1, &p);
  }
  case KL_P_DYNAMIC_SLICE: {
    if (i != 0) break;
    int ins[64];
    if (e->nin + 1 > 64) break;
    ins[0] = kl_ad_zeros(a, xa);
    ins[1] = ct;
    for (int k = 1; k < e->nin; k++) ins[k + 1] = prim_of(c, e->ins[k]);
    return emit1(a, KL_P_DYNAMIC_UPDATE_SLICE, ins, e->nin + 1, NULL);
  }
  case KL_P_DYNAMIC_UPDATE_SLICE: {
    int ins[64];
    if (e->nin > 64) break;
    if (i == 0) {
      ins[0] = ct;
      ins[1] = kl_ad_zeros(a, &c->j->vals[e->ins[1]].aval);
      for (int k = 2; k < e->nin; k++) ins[k] = prim_of(c, e->ins[k]);
      return emit1(a, KL_P_DYNAMIC_UPDATE_SLICE, ins, e->nin, NULL);
    }
    if (i == 1) {
      ins[0] = ct;
      for (int k = 2; k < e->nin; k++) ins[k - 1] = prim_of(c, e->ins[k]);
      kl_aval u = c->j->vals[e->ins[1]].aval;
      p.dynamic_slice.slice_sizes = (kl_ivec){u.dims, u.ndim};
      return emit1(a, KL_P_DYNAMIC_SLICE, ins, e->nin - 1, &p);
    }
    break;
  }
  case KL_P_TAKE: { /* scatter-add back, at the clamped positions take read from */
    if (i != 0) break;
    int idx = prim_of(c, e->ins[1]);
    kl_dtype it = kl_ad_aval(a, idx)->dtype;
    idx = kl_ad_bin(a, KL_P_MIN, idx, kl_ad_lit(a, (double)(xa->dims[e->p.take.axis] - 1), it));
    int ins[3] = {kl_ad_zeros(a, xa), idx, ct};
    p.scatter.axis = e->p.take.axis;
    p.scatter.op = KL_SCATTER_ADD;
    return emit1(a, KL_P_SCATTER, ins, 3, &p);
  }
  case KL_P_SCATTER: { /* the JVP writes only scatter-adds; it masks dropped updates itself */
    if (i == 1 || e->p.scatter.op != KL_SCATTER_ADD) break;
    if (i == 0) return ct;
    int ins[2] = {ct, prim_of(c, e->ins[1])};
    p.take.axis = e->p.scatter.axis;
    return emit1(a, KL_P_TAKE, ins, 2, &p);
  }
  case KL_P_TRIANGULAR_SOLVE: /* linear in b: solve with op(A)^T on the same side */
    if (i != 1) break;
    p.triangular_solve.left_side = e->p.triangular_solve.left_side;
    p.triangular_solve.flags = e->p.triangular_solve.flags ^ KL_TRSV_TRANSPOSE_A;
    return emit1(a, KL_P_TRIANGULAR_SOLVE, (int[]){prim_of(c, e->ins[0]), ct}, 2, &p);
  default: break;
  }
  return kl_ad_fail(a, "reverse-mode differentiation of %s is not supported yet by kiln", pi->name);
}

/* custom_vjp_lin: replays the registered bwd program on (residuals, output cotangents, consts)
 * and adds its results to the input tangents' cotangents. */
static void transpose_custom(tctx *c, const kl_eqn *e) {
  kl_ad *a = c->a;
  const int64_t *cnt = e->p.custom_vjp.counts.v;
  int64_t n_out = cnt[0], n_res = cnt[1], n_c = cnt[2], n_x = cnt[3];
  const kl_program *sub = e->p.custom_vjp.bwd;
  if (!sub || sub->ninputs != n_res + n_out + n_c || sub->noutputs != n_x) {
    kl_ad_fail(a, "internal error: custom_vjp backward program does not match its call");
    return;
  }
  int *env = malloc(sizeof(int) * ((size_t)sub->nvals + 1));
  if (!env) abort();
  for (int v = 0; v < sub->nvals; v++) env[v] = -1;
  for (int64_t i = 0; i < sub->ninputs; i++) {
    int val;
    if (i < n_res) val = prim_of(c, e->ins[n_out + i]);
    else if (i < n_res + n_out) {
      int o = e->outs[i - n_res];
      val = c->ct[o] >= 0 ? c->ct[o] : kl_ad_zeros(a, &c->j->vals[o].aval);
    } else val = prim_of(c, e->ins[n_out + n_res + (i - n_res - n_out)]);
    env[sub->inputs[i]] = val;
  }
  for (int k = 0; k < sub->neqns && !a->failed; k++) {
    const kl_eqn *se = &sub->eqns[k];
    int *ins = malloc(sizeof(int) * ((size_t)se->nin + 1)), outs[KL_MAX_OUTS];
    if (!ins) abort();
    for (int i = 0; i < se->nin; i++) ins[i] = env[se->ins[i]];
    int n = kl_ad_emit(a, se->prim, ins, se->nin, &se->p, outs);
    free(ins);
    for (int i = 0; i < n; i++) env[se->outs[i]] = outs[i];
  }
  for (int64_t j = 0; j < n_x && !a->failed; j++) {
    int xin = e->ins[n_out + n_res + n_c + j];
    if (is_t(c, xin)) accumulate(c, xin, env[sub->outputs[j]]);
  }
  free(env);
}

kl_program *kl_vjp(const kl_program *pg, const char *wants, char *err, size_t errlen) {
  char *jtag = NULL;
  kl_program *j = kl_jvp_ex(pg, wants, &jtag, 1, err, errlen);
  if (!j) return NULL;
  kl_ad a = {.pg = kl_program_new(), .err = err, .errlen = errlen};
  tctx c = {.a = &a, .j = j, .jtag = jtag};
  c.vmap = malloc(sizeof(int) * ((size_t)j->nvals + 1));
  c.ct = malloc(sizeof(int) * ((size_t)j->nvals + 1));
  c.capstack = 64;
  c.stack = malloc(sizeof(int) * (size_t)c.capstack);
  if (!c.vmap || !c.ct || !c.stack) abort();
  for (int v = 0; v < j->nvals; v++) c.vmap[v] = c.ct[v] = -1;
  /* inputs: the primal inputs, then one cotangent per primal output */
  for (int i = 0; i < pg->ninputs; i++) c.vmap[j->inputs[i]] = kl_program_add_input(a.pg, &j->vals[j->inputs[i]].aval);
  int *ct_in = malloc(sizeof(int) * ((size_t)pg->noutputs + 1));
  for (int i = 0; i < pg->noutputs; i++) ct_in[i] = kl_program_add_input(a.pg, &pg->vals[pg->outputs[i]].aval);
  kl_ad_lit(&a, 0, KL_F32); /* allocate the tag array */
  /* the primal part (recomputations wait for their first use, see prim_of) */
  for (int k = 0; k < j->neqns && !a.failed; k++) {
    const kl_eqn *e = &j->eqns[k];
    if (jtag[e->outs[0]]) continue;
    int small[256], outs[KL_MAX_OUTS];
    int *ins = e->nin <= 256 ? small : malloc(sizeof(int) * (size_t)e->nin);
    if (!ins) abort();
    for (int i = 0; i < e->nin; i++) ins[i] = c.vmap[e->ins[i]];
    int rc = kl_ad_emit(&a, e->prim, ins, e->nin, &e->p, outs);
    if (ins != small) free(ins);
    if (rc < 0) break;
    for (int i = 0; i < e->nout; i++) c.vmap[e->outs[i]] = outs[i];
  }
  /* seed: the cotangents of the tangent outputs */
  for (int i = 0; i < pg->noutputs && !a.failed; i++) {
    int tv = j->outputs[pg->noutputs + i];
    if ((jtag[tv] & KL_TAG_TANGENT) && kl_dtype_is_float(j->vals[tv].aval.dtype)) accumulate(&c, tv, ct_in[i]);
  }
  /* the linear part, backwards */
  for (int k = j->neqns - 1; k >= 0 && !a.failed; k--) {
    const kl_eqn *e = &j->eqns[k];
    if (!(jtag[e->outs[0]] & KL_TAG_TANGENT)) continue;
    if (e->prim == KL_P_CUSTOM_VJP_LIN) {
      transpose_custom(&c, e);
      continue;
    }
    int ct = c.ct[e->outs[0]];
    if (ct < 0) continue;
    for (int i = 0; i < e->nin && !a.failed; i++) {
      if (!is_t(&c, e->ins[i])) continue;
      int contrib = transpose_rule(&c, e, i, ct);
      if (contrib < 0 && a.failed) break;
      accumulate(&c, e->ins[i], contrib);
    }
  }
  if (!a.failed) {
    int *outs = malloc(sizeof(int) * ((size_t)pg->noutputs + (size_t)pg->ninputs + 1));
    int n = 0;
    for (int i = 0; i < pg->noutputs; i++) outs[n++] = prim_of(&c, j->outputs[i]);
    int tin = pg->ninputs; /* tangent inputs of j follow its primal inputs */
    for (int i = 0; i < pg->ninputs && !a.failed; i++) {
      if (!wants[i]) continue;
      const kl_aval *av = &pg->vals[pg->inputs[i]].aval;
      int g = -1;
      if (kl_dtype_is_float(av->dtype)) g = c.ct[j->inputs[tin++]];
      outs[n++] = g >= 0 ? g : kl_ad_zeros(&a, av);
    }
    kl_program_set_outputs(a.pg, outs, n);
    free(outs);
  }
  free(ct_in);
  free(c.vmap);
  free(c.ct);
  free(c.stack);
  free(jtag);
  kl_program_free(j);
  free(a.tangent);
  if (a.failed) {
    kl_program_free(a.pg);
    return NULL;
  }
  return a.pg;
}
