/* dot.c: lowering of dot_general: BLAS/cuBLAS through a library step, or, for the small
 * contractions fusion keeps inside kernels (small_dot), an unrolled sum of products.
 * Depends on the shared scalar emitter, libcall.h and runtime/hostla.h only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/hostla.h"
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

/* ---- dot_general: (batch, m, k) x (batch, k, n) through gemm ----
 * The legalize pass (transforms/rules/dot.c) has put every product in that form: operands of
 * the result's dtype (or half-precision operands of a float32 result, kl_dot_mixed), stored in
 * one of the two orders a GEMM takes (kl_dot_gemm_layout). */

/* The product of a's dims listed in axes (free: of those in neither list). */
static int64_t dims_product(const kl_aval *a, const kl_ivec *axes) {
  int64_t n = 1;
  for (int i = 0; i < axes->n; i++) n *= a->dims[axes->v[i]];
  return n;
}

static int64_t free_product(const kl_aval *a, const kl_ivec *batch, const kl_ivec *contract) {
  char used[KL_MAX_RANK] = {0};
  for (int i = 0; i < batch->n; i++) used[batch->v[i]] = 1;
  for (int i = 0; i < contract->n; i++) used[contract->v[i]] = 1;
  int64_t n = 1;
  for (int d = 0; d < a->ndim; d++)
    if (!used[d]) n *= a->dims[d];
  return n;
}

int kl_libcall_dot_layout(const kl_libcall *c, int64_t *batch, int64_t *m, int64_t *n, int64_t *k, int *transl,
                          int *transr) {
  const kl_aval *l = &c->avals[0], *r = &c->avals[1], *o = &c->avals[2];
  const kl_params *p = &c->p;
  if (l->dtype != r->dtype || (l->dtype != o->dtype && !kl_dot_mixed(l->dtype, o->dtype))) return 0;
  *transl = kl_dot_gemm_layout(l, &p->dot.lhs_batch, &p->dot.lhs_contracting, 0, NULL, NULL);
  *transr = kl_dot_gemm_layout(r, &p->dot.rhs_batch, &p->dot.rhs_contracting, 1, NULL, NULL);
  if (*transl < 0 || *transr < 0) return 0;
  *batch = dims_product(l, &p->dot.lhs_batch);
  *k = dims_product(l, &p->dot.lhs_contracting);
  *m = free_product(l, &p->dot.lhs_batch, &p->dot.lhs_contracting);
  *n = free_product(r, &p->dot.rhs_batch, &p->dot.rhs_contracting);
  return 1;
}

static int run_dot(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  int64_t batch, m, n, k;
  int transl, transr;
  if (!kl_libcall_dot_layout(c, &batch, &m, &n, &k, &transl, &transr))
    return kl_error(err, errlen, KL_ERR_INTERNAL, "internal error: dot_general reached code generation without "
                    "being put in GEMM form (the legalize pass)");
  return kl_hostla_gemm_to(c->avals[0].dtype, c->avals[2].dtype, batch, m, n, k, ptrs[0], m * k, transl, ptrs[1], k * n,
                           transr, ptrs[2], err, errlen);
}


/* On the GPU, products cuBLAS has no routine for (integer and bool elements): one thread per
 * output element sums over k in the element type (ints wrap; bools: or of ands). Floats return 0:
 * cuBLAS runs them. The legalize pass has put the operands in GEMM form. */
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
