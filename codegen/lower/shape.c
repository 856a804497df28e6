/* shape.c: lowering of the shape family (broadcast_in_dim, reshape, transpose, rev, slice, pad,
 * concatenate): inside a kernel each only rewrites the index its operand is computed at, on the
 * CPU and the GPU alike. Depends on the shared scalar emitter only. */
#include <stdio.h>
#include <string.h>

#include "lower.h"

/* Linear index of idx in shape dims (row-major). */
static char *linearize(kctx *k, ssa *idx, const int64_t *dims, int n, char *out) {
  if (n == 0) return kk_const_index(k, 0, out);
  snprintf(out, sizeof(ssa), "%s", idx[0]);
  for (int i = 1; i < n; i++) {
    ssa d, m, s;
    kk_const_index(k, dims[i], d);
    kk_line(k, "%s = arith.muli %s, %s : index", kk_fresh(k, m), out, d);
    kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, s), m, idx[i]);
    snprintf(out, sizeof(ssa), "%s", s);
  }
  return out;
}

static char *emit_reshape(kctx *k, int x, const kl_aval *in, const kl_aval *out_aval, ssa *idx, char *out) {
  ssa sub[KL_MAX_RANK];
  /* Shapes equal after dropping unit dimensions: map the non-unit indices directly. */
  int a = 0, b = 0, simple = 1;
  while (simple) {
    while (a < in->ndim && in->dims[a] == 1) a++;
    while (b < out_aval->ndim && out_aval->dims[b] == 1) b++;
    if (a == in->ndim || b == out_aval->ndim) {
      simple = a == in->ndim && b == out_aval->ndim;
      break;
    }
    if (in->dims[a] != out_aval->dims[b]) simple = 0;
    a++, b++;
  }
  if (simple) {
    ssa zero;
    kk_const_index(k, 0, zero);
    b = 0;
    for (a = 0; a < in->ndim; a++) {
      if (in->dims[a] == 1) {
        snprintf(sub[a], sizeof(ssa), "%s", zero);
        continue;
      }
      while (out_aval->dims[b] == 1) b++;
      snprintf(sub[a], sizeof(ssa), "%s", idx[b++]);
    }
  } else {
    ssa lin;
    linearize(k, idx, out_aval->dims, out_aval->ndim, lin);
    kk_delinearize(k, lin, in->dims, in->ndim, sub);
  }
  return kk_emit_value(k, x, sub, out);
}

static char *emit_pad(kctx *k, const kl_eqn *e, ssa *idx, char *out) {
  const kl_aval *in = &k->pg->vals[e->ins[0]].aval;
  kl_dtype t = in->dtype;
  ssa pv, sub[KL_MAX_RANK], ok;
  kk_emit_value(k, e->ins[1], NULL, pv);
  if (kl_aval_size(in) == 0) {
    snprintf(out, sizeof(ssa), "%s", pv);
    return out;
  }
  kk_line(k, "%s = arith.constant true", kk_fresh(k, ok));
  for (int d = 0; d < in->ndim; d++) {
    int64_t lo = e->p.pad.low.v[d], step = e->p.pad.interior.v[d] + 1, n = in->dims[d];
    ssa t0, lov, q, r, z, stp, nn, c1, c2, c3, a1, a2, a3, cl, cl2, nm1;
    /* t = i - lo; valid if t >= 0, t % step == 0, t / step < n; clamp for the load */
    kk_line(k, "%s = arith.index_cast %s : index to i64", kk_fresh(k, t0), idx[d]);
    kk_line(k, "%s = arith.constant %lld : i64", kk_fresh(k, lov), (long long)lo);
    ssa tt;
    kk_line(k, "%s = arith.subi %s, %s : i64", kk_fresh(k, tt), t0, lov);
    kk_line(k, "%s = arith.constant %lld : i64", kk_fresh(k, stp), (long long)step);
    kk_line(k, "%s = arith.constant 0 : i64", kk_fresh(k, z));
    kk_line(k, "%s = arith.constant %lld : i64", kk_fresh(k, nn), (long long)n);
    kk_line(k, "%s = arith.divsi %s, %s : i64", kk_fresh(k, q), tt, stp);
    kk_line(k, "%s = arith.remsi %s, %s : i64", kk_fresh(k, r), tt, stp);
    kk_line(k, "%s = arith.cmpi sge, %s, %s : i64", kk_fresh(k, c1), tt, z);
    kk_line(k, "%s = arith.cmpi eq, %s, %s : i64", kk_fresh(k, c2), r, z);
    kk_line(k, "%s = arith.cmpi slt, %s, %s : i64", kk_fresh(k, c3), q, nn);
    kk_line(k, "%s = arith.andi %s, %s : i1", kk_fresh(k, a1), c1, c2);
    kk_line(k, "%s = arith.andi %s, %s : i1", kk_fresh(k, a2), a1, c3);
    kk_line(k, "%s = arith.andi %s, %s : i1", kk_fresh(k, a3), ok, a2);
    snprintf(ok, sizeof ok, "%s", a3);
    kk_line(k, "%s = arith.constant %lld : i64", kk_fresh(k, nm1), (long long)(n - 1));
    kk_line(k, "%s = arith.maxsi %s, %s : i64", kk_fresh(k, cl), q, z);
    kk_line(k, "%s = arith.minsi %s, %s : i64", kk_fresh(k, cl2), cl, nm1);
    kk_line(k, "%s = arith.index_cast %s : i64 to index", kk_fresh(k, sub[d]), cl2);
  }
  ssa xv;
  if (!k->gpu) {
    /* CPU loops: the operand only where the element is inside it (a sum of pads, as a split's
     * gradient is, otherwise computes every operand at every element) */
    kk_line(k, "%s = scf.if %s -> (%s) {", kk_fresh(k, out), ok, kl_compute_type(t));
    int mark = kk_memo_mark(k), outer = k->em.region;
    k->em.region = ++k->em.nregions; /* (its ops are in the scf.if's block, at the same indentation) */
    kk_emit_value(k, e->ins[0], sub, xv);
    k->em.region = outer;
    kk_line(k, "  scf.yield %s : %s", xv, kl_compute_type(t));
    kk_memo_reset(k, mark);
    kk_line(k, "} else {");
    kk_line(k, "  scf.yield %s : %s", pv, kl_compute_type(t));
    kk_line(k, "}");
    return out;
  }
  kk_emit_value(k, e->ins[0], sub, xv);
  kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, out), ok, xv, pv, kl_compute_type(t));
  return out;
}

static char *emit_concat(kctx *k, const kl_eqn *e, ssa *idx, char *out) {
  int64_t d = e->p.concatenate.dimension, off = 0;
  const kl_aval *oa = &k->pg->vals[e->outs[0]].aval;
  const char *cty = kl_compute_type(oa->dtype);
  ssa acc = "";
  for (int j = 0; j < e->nin; j++) {
    const kl_aval *a = &k->pg->vals[e->ins[j]].aval;
    int64_t n = a->dims[d];
    if (n == 0) continue;
    ssa sub[KL_MAX_RANK], o, sh, cl, nm1, v;
    for (int i = 0; i < oa->ndim; i++) snprintf(sub[i], sizeof(ssa), "%s", idx[i]);
    kk_const_index(k, off, o);
    kk_const_index(k, n - 1, nm1);
    /* clamp idx - off into [0, n-1] (unsigned max trick is wrong for negatives: use select) */
    ssa ge, dif, z;
    kk_const_index(k, 0, z);
    kk_line(k, "%s = arith.cmpi uge, %s, %s : index", kk_fresh(k, ge), idx[d], o);
    kk_line(k, "%s = arith.subi %s, %s : index", kk_fresh(k, dif), idx[d], o);
    kk_line(k, "%s = arith.select %s, %s, %s : index", kk_fresh(k, sh), ge, dif, z);
    kk_line(k, "%s = arith.minui %s, %s : index", kk_fresh(k, cl), sh, nm1);
    snprintf(sub[d], sizeof(ssa), "%s", cl);
    kk_emit_value(k, e->ins[j], sub, v);
    if (!acc[0]) snprintf(acc, sizeof acc, "%s", v);
    else {
      ssa nacc;
      kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, nacc), ge, v, acc, cty);
      snprintf(acc, sizeof acc, "%s", nacc);
    }
    off += n;
  }
  snprintf(out, sizeof(ssa), "%s", acc);
  return out;
}

static char *scalar_broadcast(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  const kl_aval *in = &k->pg->vals[e->ins[0]].aval;
  ssa zero, sub[KL_MAX_RANK];
  (void)v;
  kk_const_index(k, 0, zero);
  for (int i = 0; i < in->ndim; i++)
    snprintf(sub[i], sizeof(ssa), "%s", in->dims[i] == 1 ? zero : idx[e->p.broadcast.broadcast_dimensions.v[i]]);
  return kk_emit_value(k, e->ins[0], sub, out);
}

static char *scalar_reshape(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  return emit_reshape(k, e->ins[0], &k->pg->vals[e->ins[0]].aval, &k->pg->vals[v].aval, idx, out);
}

static char *scalar_transpose(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  ssa sub[KL_MAX_RANK];
  for (int i = 0; i < k->pg->vals[v].aval.ndim; i++) snprintf(sub[e->p.transpose.permutation.v[i]], sizeof(ssa), "%s", idx[i]);
  return kk_emit_value(k, e->ins[0], sub, out);
}

static char *scalar_rev(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  const kl_aval *in = &k->pg->vals[e->ins[0]].aval;
  ssa sub[KL_MAX_RANK];
  for (int i = 0; i < k->pg->vals[v].aval.ndim; i++) snprintf(sub[i], sizeof(ssa), "%s", idx[i]);
  for (int j = 0; j < e->p.rev.dimensions.n; j++) {
    int d = (int)e->p.rev.dimensions.v[j];
    ssa m;
    kk_const_index(k, in->dims[d] - 1, m);
    kk_line(k, "%s = arith.subi %s, %s : index", kk_fresh(k, sub[d]), m, idx[d]);
  }
  return kk_emit_value(k, e->ins[0], sub, out);
}

static char *scalar_slice(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  ssa sub[KL_MAX_RANK];
  for (int i = 0; i < k->pg->vals[v].aval.ndim; i++) {
    int64_t st = e->p.slice.strides.n ? e->p.slice.strides.v[i] : 1, s0 = e->p.slice.start_indices.v[i];
    if (st == 1 && s0 == 0) {
      snprintf(sub[i], sizeof(ssa), "%s", idx[i]);
      continue;
    }
    ssa sc, oc, m;
    kk_const_index(k, st, sc);
    kk_const_index(k, s0, oc);
    kk_line(k, "%s = arith.muli %s, %s : index", kk_fresh(k, m), idx[i], sc);
    kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, sub[i]), m, oc);
  }
  return kk_emit_value(k, e->ins[0], sub, out);
}

static char *scalar_pad(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  (void)v;
  return emit_pad(k, e, idx, out);
}

static char *scalar_concat(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  (void)v;
  return emit_concat(k, e, idx, out);
}

/* A transpose that moves the last dimension reads far-apart elements for consecutive outputs. */
static int strided_transpose(const kl_eqn *e) {
  const kl_ivec *perm = &e->p.transpose.permutation;
  return perm->n >= 2 && perm->v[perm->n - 1] != perm->n - 1;
}

const kl_lowering kl_lower_shape[] = {
    {KL_P_BROADCAST_IN_DIM, .fuses = 1, .weight = 1, .scalar = scalar_broadcast},
    {KL_P_RESHAPE, .fuses = 1, .weight = 1, .scalar = scalar_reshape},
    {KL_P_TRANSPOSE, .fuses = 1, .weight = 1, .scalar = scalar_transpose, .strided = strided_transpose},
    {KL_P_REV, .fuses = 1, .weight = 1, .scalar = scalar_rev},
    {KL_P_SLICE, .fuses = 1, .weight = 1, .scalar = scalar_slice},
    {KL_P_PAD, .fuses = 1, .weight = 1, .scalar = scalar_pad},
    {KL_P_CONCATENATE, .fuses = 1, .weight = 1, .scalar = scalar_concat},
};
const int kl_lower_shape_n = sizeof kl_lower_shape / sizeof *kl_lower_shape;
