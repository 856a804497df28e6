/* dot.c: lowering of dot_general: BLAS/cuBLAS through a library step, or, for the small
 * contractions fusion keeps inside kernels (small_dot), an unrolled sum of products.
 * Depends on the shared scalar emitter, libcall.h and runtime/hostla.h only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/hostla.h"
#include "../../ir/alloc.h"
#include "../../ir/status.h"
#include "lower.h"

/* A product with a small contraction at output index idx (dims: lhs free, then rhs free):
 * sum over the contracted index c of lhs[.., c, ..] * rhs[.., c, ..], unrolled. */
static char *emit_small_dot(kctx *k, const kl_eqn *e, ssa *idx, char *out) {
  const kl_aval *l = &k->pg->vals[e->ins[0]].aval, *r = &k->pg->vals[e->ins[1]].aval;
  const char *ty = kl_compute_type(k->pg->vals[e->outs[0]].aval.dtype);
  int lc[KL_MAX_RANK], rc[KL_MAX_RANK]; /* position in the contraction list, or -1 */
  for (int d = 0; d < KL_MAX_RANK; d++) lc[d] = rc[d] = -1;
  for (int i = 0; i < e->p.dot.lhs_contracting.n; i++) lc[e->p.dot.lhs_contracting.v[i]] = i, rc[e->p.dot.rhs_contracting.v[i]] = i;
  int64_t cdims[KL_MAX_RANK], kdim = 1;
  for (int i = 0; i < e->p.dot.lhs_contracting.n; i++) kdim *= cdims[i] = l->dims[e->p.dot.lhs_contracting.v[i]];
  ssa acc;
  acc[0] = 0;
  for (int64_t c = 0; c < kdim; c++) {
    ssa ci[KL_MAX_RANK], li[KL_MAX_RANK], ri[KL_MAX_RANK], a, b, p;
    int64_t rest = c;
    for (int i = e->p.dot.lhs_contracting.n - 1; i >= 0; i--) {
      kk_const_index(k, rest % cdims[i], ci[i]);
      rest /= cdims[i];
    }
    int o = 0;
    for (int d = 0; d < l->ndim; d++) memcpy(li[d], lc[d] >= 0 ? ci[lc[d]] : idx[o++], sizeof(ssa));
    for (int d = 0; d < r->ndim; d++) memcpy(ri[d], rc[d] >= 0 ? ci[rc[d]] : idx[o++], sizeof(ssa));
    kk_emit_value(k, e->ins[0], li, a);
    kk_emit_value(k, e->ins[1], ri, b);
    kk_line(k, "%s = arith.mulf %s, %s : %s", kk_fresh(k, p), a, b, ty);
    if (!acc[0]) memcpy(acc, p, sizeof(ssa));
    else {
      ssa s;
      kk_line(k, "%s = arith.addf %s, %s : %s", kk_fresh(k, s), acc, p, ty);
      memcpy(acc, s, sizeof(ssa));
    }
  }
  snprintf(out, sizeof(ssa), "%s", acc);
  return out;
}

/* Products contracting at most this many elements (float32/64, no batch dims) are computed inside
 * kernels instead of calling BLAS/cuBLAS: the k = 10 products of a classifier layer's gradient
 * write and re-read a whole activation-sized buffer otherwise. */
#define SMALL_DOT_K 16

/* The contraction size of such a product (the operand reads per element), 0 when e is not one. */
static int small_dot(const kl_program *pg, const kl_eqn *e) {
  if (e->p.dot.lhs_batch.n || e->p.dot.rhs_batch.n) return 0;
  kl_dtype t = pg->vals[e->outs[0]].aval.dtype;
  if ((t != KL_F32 && t != KL_F64) || pg->vals[e->ins[0]].aval.dtype != t || pg->vals[e->ins[1]].aval.dtype != t) return 0;
  int64_t kdim = 1;
  for (int i = 0; i < e->p.dot.lhs_contracting.n; i++) kdim *= pg->vals[e->ins[0]].aval.dims[e->p.dot.lhs_contracting.v[i]];
  return kdim >= 1 && kdim <= SMALL_DOT_K ? (int)kdim : 0;
}

static char *scalar_dot(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  (void)v;
  if (!small_dot(k->pg, e)) {
    kk_kfail(k, "codegen: %s cannot be fused into a kernel", kl_prim_get(e->prim)->name);
    return out;
  }
  return emit_small_dot(k, e, idx, out);
}

/* ---- dot_general: transpose operands into (batch, m, k) x (batch, k, n) and call gemm ---- */

static void permute_copy(size_t es, const kl_aval *a, const int *perm, const char *src, char *dst) {
  int nd = a->ndim;
  int64_t strides[KL_MAX_RANK], pd[KL_MAX_RANK], idx[KL_MAX_RANK] = {0}, total = kl_aval_size(a);
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; i--) { strides[i] = s; s *= a->dims[i]; }
  for (int i = 0; i < nd; i++) pd[i] = a->dims[perm[i]];
  for (int64_t j = 0; j < total; j++) {
    int64_t off = 0;
    for (int i = 0; i < nd; i++) off += idx[i] * strides[perm[i]];
    memcpy(dst + (size_t)j * es, src + (size_t)off * es, es);
    for (int i = nd - 1; i >= 0; i--) {
      if (++idx[i] < pd[i]) break;
      idx[i] = 0;
    }
  }
}

/* True when permuting a's dims by perm leaves the bytes in place: the dims of size > 1 keep
 * their relative order (size-1 dims can move freely). */
static int is_identity_for(const int *perm, const kl_aval *a) {
  int last = -1;
  for (int i = 0; i < a->ndim; i++) {
    if (a->dims[perm[i]] == 1) continue;
    if (perm[i] < last) return 0;
    last = perm[i];
  }
  return 1;
}

/* Orders side's dims as batch, then `mid` group, then `last` group. */
static void order_dims(const kl_aval *a, const int64_t *batch, int nb, const int64_t *contract, int nc, int contract_last,
                       int *perm, int64_t *free_size, int64_t *contract_size) {
  int k = 0;
  char used[KL_MAX_RANK] = {0};
  for (int i = 0; i < nb; i++) { perm[k++] = (int)batch[i]; used[batch[i]] = 1; }
  for (int i = 0; i < nc; i++) used[contract[i]] = 1;
  *free_size = 1;
  *contract_size = 1;
  for (int i = 0; i < nc; i++) *contract_size *= a->dims[contract[i]];
  if (!contract_last)
    for (int i = 0; i < nc; i++) perm[k++] = (int)contract[i];
  for (int i = 0; i < a->ndim; i++)
    if (!used[i]) { perm[k++] = i; *free_size *= a->dims[i]; }
  if (contract_last)
    for (int i = 0; i < nc; i++) perm[k++] = (int)contract[i];
}

static void convert_array(kl_dtype from, const void *src, kl_dtype to, void *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (kl_dtype_is_float(to)) kl_lc_stf(to, dst, i, kl_dtype_is_float(from) ? kl_lc_ldf(from, src, i) : (kl_lc_is_uns(from) ? (double)(uint64_t)kl_lc_ldi(from, src, i) : (double)kl_lc_ldi(from, src, i)));
    else kl_lc_sti(to, dst, i, kl_dtype_is_float(from) ? (int64_t)kl_lc_ldf(from, src, i) : kl_lc_ldi(from, src, i));
  }
}

int kl_libcall_dot_layout(const kl_libcall *c, int64_t *batch, int64_t *m, int64_t *n, int64_t *k, int *transl,
                          int *transr) {
  const kl_aval *l = &c->avals[0], *r = &c->avals[1], *o = &c->avals[2];
  const kl_params *p = &c->p;
  int lp[KL_MAX_RANK], rp[KL_MAX_RANK];
  int64_t k2;
  if (l->dtype != o->dtype || r->dtype != o->dtype) return 0;
  *batch = 1;
  for (int i = 0; i < p->dot.lhs_batch.n; i++) *batch *= l->dims[p->dot.lhs_batch.v[i]];
  *transl = *transr = 0;
  order_dims(l, p->dot.lhs_batch.v, p->dot.lhs_batch.n, p->dot.lhs_contracting.v, p->dot.lhs_contracting.n, 1, lp, m, k);
  if (!is_identity_for(lp, l)) {
    order_dims(l, p->dot.lhs_batch.v, p->dot.lhs_batch.n, p->dot.lhs_contracting.v, p->dot.lhs_contracting.n, 0, lp, m, k);
    if (!is_identity_for(lp, l)) return 0;
    *transl = 1;
  }
  order_dims(r, p->dot.rhs_batch.v, p->dot.rhs_batch.n, p->dot.rhs_contracting.v, p->dot.rhs_contracting.n, 0, rp, n, &k2);
  if (!is_identity_for(rp, r)) {
    order_dims(r, p->dot.rhs_batch.v, p->dot.rhs_batch.n, p->dot.rhs_contracting.v, p->dot.rhs_contracting.n, 1, rp, n, &k2);
    if (!is_identity_for(rp, r)) return 0;
    *transr = 1;
  }
  return 1;
}

static int run_dot(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  const kl_aval *l = &c->avals[0], *r = &c->avals[1], *o = &c->avals[2];
  const kl_params *p = &c->p;
  int lp[KL_MAX_RANK], rp[KL_MAX_RANK];
  int64_t m, k, n, k2, batch = 1;
  for (int i = 0; i < p->dot.lhs_batch.n; i++) batch *= l->dims[p->dot.lhs_batch.v[i]];
  /* lhs as (batch, m, k); rhs as (batch, k, n) or, transposed, (batch, n, k) */
  order_dims(l, p->dot.lhs_batch.v, p->dot.lhs_batch.n, p->dot.lhs_contracting.v, p->dot.lhs_contracting.n, 1, lp, &m, &k);
  int transl = 0;
  if (!is_identity_for(lp, l)) { /* maybe (batch, k, m) is the identity: use transa */
    int alt[KL_MAX_RANK];
    int64_t mm, kk;
    order_dims(l, p->dot.lhs_batch.v, p->dot.lhs_batch.n, p->dot.lhs_contracting.v, p->dot.lhs_contracting.n, 0, alt, &mm, &kk);
    if (is_identity_for(alt, l)) { memcpy(lp, alt, sizeof alt); transl = 1; }
  }
  order_dims(r, p->dot.rhs_batch.v, p->dot.rhs_batch.n, p->dot.rhs_contracting.v, p->dot.rhs_contracting.n, 0, rp, &n, &k2);
  int transr = 0;
  if (!is_identity_for(rp, r)) {
    int alt[KL_MAX_RANK];
    int64_t nn, kk;
    order_dims(r, p->dot.rhs_batch.v, p->dot.rhs_batch.n, p->dot.rhs_contracting.v, p->dot.rhs_contracting.n, 1, alt, &nn, &kk);
    if (is_identity_for(alt, r)) { memcpy(rp, alt, sizeof alt); transr = 1; }
  }
  kl_dtype t = o->dtype;
  size_t es = kl_dtype_size(t);
  const void *a = ptrs[0], *b = ptrs[1];
  void *ta = NULL, *tb = NULL;
  if (l->dtype != t || !is_identity_for(lp, l)) {
    size_t bytes = es * (size_t)kl_aval_size(l) + 1;
    void *conv = l->dtype != t ? kl_malloc(bytes) : NULL;
    if (l->dtype != t && !conv) goto nomem;
    if (conv) convert_array(l->dtype, a, t, conv, kl_aval_size(l));
    if (!is_identity_for(lp, l)) {
      ta = kl_malloc(bytes);
      if (!ta) {
        free(conv);
        goto nomem;
      }
      kl_aval la = *l;
      la.dtype = t;
      permute_copy(es, &la, lp, conv ? conv : a, ta);
      free(conv);
    } else ta = conv;
    a = ta;
  }
  if (r->dtype != t || !is_identity_for(rp, r)) {
    size_t bytes = es * (size_t)kl_aval_size(r) + 1;
    void *conv = r->dtype != t ? kl_malloc(bytes) : NULL;
    if (r->dtype != t && !conv) goto nomem;
    if (conv) convert_array(r->dtype, b, t, conv, kl_aval_size(r));
    if (!is_identity_for(rp, r)) {
      tb = kl_malloc(bytes);
      if (!tb) {
        free(conv);
        goto nomem;
      }
      kl_aval ra = *r;
      ra.dtype = t;
      permute_copy(es, &ra, rp, conv ? conv : b, tb);
      free(conv);
    } else tb = conv;
    b = tb;
  }
  int rc = kl_hostla_gemm(t, batch, m, n, k, a, m * k, transl, b, k * n, transr, ptrs[2], err, errlen);
  free(ta);
  free(tb);
  return rc;
nomem:
  free(ta);
  free(tb);
  return kl_error(err, errlen, KL_ERR_NOMEM, "dot_general: out of memory for a converted or transposed operand");
}


/* On the GPU, products cuBLAS has no routine for (integer and bool elements): one thread per
 * output element sums over k in the element type (ints wrap; bools: or of ands). Floats return 0:
 * cuBLAS runs them. The dot_layout pass has put the operands in GEMM form. */
static int gpu_dot(kg_move *m) {
  const kl_libcall *c = m->c;
  kl_dtype t = c->avals[2].dtype;
  int64_t batch, mm, n, kd;
  int tl, tr;
  if (kl_dtype_is_float(t) || !kl_libcall_dot_layout(c, &batch, &mm, &n, &kd, &tl, &tr)) return 0;
  kctx *k = &m->k;
  const char *st = m->args[2].storage;
  int bl = t == KL_BOOL;
  long long d0 = (long long)m->args[0].dims[0], d1 = (long long)m->args[1].dims[0], d2 = (long long)m->args[2].dims[0];
  ssa bi, rem, i, j, lbase, rbase, lstep, rstep, lpos, rpos, ck, zero, acc, a, b, p, s;
  kg_grid_loop(k, batch * mm * n, "%o");
  kg_index_op(k, "divui", "%o", mm * n, bi);
  kg_index_op(k, "remui", "%o", mm * n, rem);
  kg_index_op(k, "divui", rem, n, i);
  kg_index_op(k, "remui", rem, n, j);
  /* lhs element (i, kk) at lbase + kk * lstep, rhs element (kk, j) at rbase + kk * rstep */
  kg_index_op(k, "muli", bi, mm * kd, lbase);
  if (tl) kg_update(k, "addi", lbase, i, "index");
  else {
    ssa t1;
    kg_index_op(k, "muli", i, kd, t1);
    kg_update(k, "addi", lbase, t1, "index");
  }
  kg_index_op(k, "muli", bi, kd * n, rbase);
  if (tr) {
    ssa t1;
    kg_index_op(k, "muli", j, kd, t1);
    kg_update(k, "addi", rbase, t1, "index");
  } else kg_update(k, "addi", rbase, j, "index");
  kk_const_index(k, tl ? mm : 1, lstep);
  kk_const_index(k, tr ? 1 : n, rstep);
  kk_const_index(k, kd, ck);
  kk_line(k, "%s = arith.constant 0 : %s", kk_fresh(k, zero), st);
  kk_line(k, "%s = scf.for %%kk = %%c0 to %s step %%c1 iter_args(%%acc = %s) -> (%s) {", kk_fresh(k, acc), ck, zero, st);
  k->ind = "          ";
  kk_line(k, "%s = arith.muli %%kk, %s : index", kk_fresh(k, lpos), lstep);
  kg_update(k, "addi", lpos, lbase, "index");
  kk_line(k, "%s = arith.muli %%kk, %s : index", kk_fresh(k, rpos), rstep);
  kg_update(k, "addi", rpos, rbase, "index");
  kk_line(k, "%s = memref.load %%m0[%s] : memref<%lldx%s>", kk_fresh(k, a), lpos, d0, st);
  kk_line(k, "%s = memref.load %%m1[%s] : memref<%lldx%s>", kk_fresh(k, b), rpos, d1, st);
  kk_line(k, "%s = arith.%s %s, %s : %s", kk_fresh(k, p), bl ? "andi" : "muli", a, b, st);
  kk_line(k, "%s = arith.%s %%acc, %s : %s", kk_fresh(k, s), bl ? "ori" : "addi", p, st);
  kk_line(k, "scf.yield %s : %s", s, st);
  k->ind = "        ";
  kk_line(k, "}");
  kk_line(k, "memref.store %s, %%m2[%%o] : memref<%lldx%s>", acc, d2, st);
  kg_close_loop(k);
  kg_finish(m, batch * mm * n);
  return 1;
}

/* Multiply-adds of a product: small ones run inline rather than asynchronously. */
static double dot_flops(const kl_program *pg, const kl_eqn *e) {
  int64_t kdim = 1;
  for (int i = 0; i < e->p.dot.lhs_contracting.n; i++) kdim *= pg->vals[e->ins[0]].aval.dims[e->p.dot.lhs_contracting.v[i]];
  return (double)kl_aval_size(&pg->vals[e->outs[0]].aval) * (double)kdim;
}

const kl_lowering kl_lower_dot[] = {
    /* fuses = 0: only small products are computed inside kernels (inline_reads) */
    {KL_P_DOT_GENERAL, .fuses = 0, .inline_reads = small_dot, .scalar = scalar_dot, .cpu_lib = run_dot, .gpu_kernel = gpu_dot,
     .gpu_library = KL_GPU_LIB_GEMM,
     .flops = dot_flops},
};
const int kl_lower_dot_n = sizeof kl_lower_dot / sizeof *kl_lower_dot;
