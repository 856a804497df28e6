/* kernel.c: a fused kernel as an MLIR loop nest. Values that are not materialized are
 * recomputed at the index where a consumer needs them; index-moving primitives
 * (broadcast, transpose, slice, pad, ...) only rewrite the index. Each (value, index)
 * pair is emitted once per kernel. */
#include "kernel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "../ir/status.h"
#include "kernel_internal.h"
#include "lower/lower.h"
#include "lower/table.h"
#include "mathfn.h"


#define KL_SUM_BLOCK 1024 /* elements per float32 partial sum in blocked sums */


const char *kl_storage_type(kl_dtype t) {
  static const char *names[KL_NDTYPES] = {"i8", "i8", "i16", "i32", "i64", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64",
                                          /* complex values never reach kernels (transforms/complex.c): */
                                          "invalid", "invalid"};
  return names[t];
}

const char *kl_compute_type(kl_dtype t) {
  if (t == KL_BOOL) return "i1";
  if (t == KL_F16 || t == KL_BF16) return "f32";
  return kl_storage_type(t);
}

int kk_is_low_float(kl_dtype t) { return t == KL_F16 || t == KL_BF16; }
int kk_is_unsigned(kl_dtype t) { return kl_dtype_kind(t) == KL_KIND_UINT || t == KL_BOOL; }
int kk_bits_of(const char *cty) { return !strcmp(cty, "i1") ? 1 : atoi(cty + 1); }

void kk_line(kctx *k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kl_str_append(k->body, k->ind);
  kl_str_vprintf(k->body, fmt, ap);
  kl_str_append(k->body, "\n");
  va_end(ap);
}

char *kk_fresh(kctx *k, char *buf) { return kl_emit_fresh(&k->em, buf); }

int kk_kfail(kctx *k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kl_verror_once(&k->failed, k->err, k->errlen, KL_ERR_INTERNAL, fmt, ap);
  va_end(ap);
  return -1;
}

int kk_nomem(kctx *k) {
  if (!k->failed) kl_error(k->err, k->errlen, KL_ERR_NOMEM, "out of memory generating a kernel");
  k->failed = 1;
  return -1;
}

void kk_line_str(kctx *k, const kl_str *s) {
  if (s->failed || !s->data) kk_nomem(k);
  else kk_line(k, "%s", s->data);
}

void kk_append_text(kl_str *out, const kl_str *src) {
  if (src->failed) out->failed = 1; /* sticky: whoever consumes out reports it */
  else if (src->data) kl_str_append(out, src->data);
}

/* ---- constants ---- */

char *kk_const_index(kctx *k, int64_t v, char *out) {
  kk_fresh(k, out);
  kk_line(k, "%s = arith.constant %lld : index", out, (long long)v);
  return out;
}

/* A scalar constant of dtype t in compute type: ints from iv, floats from fv. */
char *kk_const_scalar(kctx *k, kl_dtype t, double fv, int64_t iv, char *out) {
  const char *cty = kl_compute_type(t);
  kk_fresh(k, out);
  if (t == KL_BOOL) {
    kk_line(k, "%s = arith.constant %s", out, iv ? "true" : "false");
  } else if (kl_dtype_is_int(t)) {
    kk_line(k, "%s = arith.constant %lld : %s", out, (long long)iv, cty);
  } else {
    if (kk_is_low_float(t)) { /* round the literal to the storage type first */
      ssa tmp;
      kk_fresh(k, tmp);
      if (isnan(fv)) kk_line(k, "%s = arith.constant 0x%s : %s", tmp, t == KL_F16 ? "7E00" : "7FC0", kl_storage_type(t));
      else if (isinf(fv)) kk_line(k, "%s = arith.constant 0x%s : %s", tmp, t == KL_F16 ? (fv > 0 ? "7C00" : "FC00") : (fv > 0 ? "7F80" : "FF80"), kl_storage_type(t));
      else kk_line(k, "%s = arith.constant %.17e : %s", tmp, fv, kl_storage_type(t));
      kk_line(k, "%s = arith.extf %s : %s to f32", out, tmp, kl_storage_type(t));
      return out;
    }
    if (isnan(fv)) kk_line(k, "%s = arith.constant 0x%s : %s", out, t == KL_F32 ? "7FC00000" : "7FF8000000000000", cty);
    else if (isinf(fv))
      kk_line(k, "%s = arith.constant 0x%s : %s", out,
           t == KL_F32 ? (fv > 0 ? "7F800000" : "FF800000") : (fv > 0 ? "7FF0000000000000" : "FFF0000000000000"), cty);
    else kk_line(k, "%s = arith.constant %.17e : %s", out, fv, cty);
  }
  return out;
}

/* Rounds a low-precision float held in f32 back to its storage precision. */
char *kk_round_low(kctx *k, kl_dtype t, char *v) {
  if (!kk_is_low_float(t)) return v;
  ssa a;
  kk_fresh(k, a);
  kk_line(k, "%s = arith.truncf %s : f32 to %s", a, v, kl_storage_type(t));
  kk_fresh(k, v);
  kk_line(k, "%s = arith.extf %s : %s to f32", v, a, kl_storage_type(t));
  return v;
}

/* ---- arguments and memo ---- */

/* The value whose buffer v is written into, following the plan's buffer reuse to its first. */
static int buffer_root(const kl_plan *plan, int v) {
  while (plan->buffer_of && v >= 0 && v < plan->nbuffer_of && plan->buffer_of[v] >= 0) v = plan->buffer_of[v];
  return v;
}

/* Values sharing one buffer (a result written over the temporary it is computed from) are one
 * argument: the kernel then reads and writes through one pointer, which LLVM's vectorizer sees
 * is the same (two pointers to the same memory would fail its overlap check at run time and
 * take the scalar loop), and which the GPU's noalias arguments then truly are. */
int kk_arg_find(const kctx *k, int v) {
  int r = buffer_root(k->plan, v);
  for (int i = 0; i < k->nargs; i++)
    if (k->args[i] == v || buffer_root(k->plan, k->args[i]) == r) return i;
  return -1;
}

int kk_arg_index(kctx *k, int v) {
  int found = kk_arg_find(k, v);
  if (found >= 0) return found;
  if (k->nargs == k->capargs) {
    int cap = k->capargs ? 2 * k->capargs : 8;
    int *p = kl_realloc(k->args, sizeof(int) * (size_t)cap);
    if (!p) {
      kk_nomem(k);
      return 0; /* only names an argument in text that is thrown away */
    }
    k->args = p;
    k->capargs = cap;
  }
  k->args[k->nargs] = v;
  return k->nargs++;
}

static char *memo_key(int v, ssa *idx, int n) {
  kl_str s;
  kl_str_init(&s);
  kl_str_printf(&s, "%d:", v);
  for (int i = 0; i < n; i++) kl_str_printf(&s, "%s,", idx[i]);
  if (s.failed) {
    kl_str_free(&s);
    return NULL;
  }
  return s.data;
}

static const char *memo_get(kctx *k, const char *key) {
  for (int i = 0; i < k->nmemo; i++)
    if (!strcmp(k->memo[i].key, key)) return k->memo[i].name;
  return NULL;
}

/* Takes key (owned). */
static void memo_put(kctx *k, char *key, const char *name) {
  if (k->nmemo == k->capmemo) {
    int cap = k->capmemo ? 2 * k->capmemo : 32;
    memo_entry *p = kl_realloc(k->memo, sizeof *k->memo * (size_t)cap);
    if (!p) {
      free(key);
      kk_nomem(k);
      return;
    }
    k->memo = p;
    k->capmemo = cap;
  }
  k->memo[k->nmemo].key = key;
  snprintf(k->memo[k->nmemo].name, sizeof(ssa), "%s", name);
  k->nmemo++;
}

int kk_memo_mark(const kctx *k) { return k->nmemo; }

void kk_memo_reset(kctx *k, int mark) {
  for (int i = mark; i < k->nmemo; i++) free(k->memo[i].key);
  if (mark < k->nmemo) k->nmemo = mark;
}

void kk_memref_type(kl_str *s, const kl_aval *a) {
  kl_str_append(s, "memref<");
  if (a->ndim == 0) kl_str_append(s, "1x");
  for (int i = 0; i < a->ndim; i++) kl_str_printf(s, "%lldx", (long long)a->dims[i]);
  kl_str_printf(s, "%s>", kl_storage_type(a->dtype));
}

void kk_index_list(kl_str *s, ssa *idx, int n, const char *zero) {
  kl_str_append(s, "[");
  if (n == 0) kl_str_append(s, zero);
  for (int i = 0; i < n; i++) kl_str_printf(s, i ? ", %s" : "%s", idx[i]);
  kl_str_append(s, "]");
}

/* Loads materialized value v at idx, converted to its compute type. */
char *kk_emit_load(kctx *k, int v, ssa *idx, char *out) {
  const kl_aval *a = &k->pg->vals[v].aval;
  int ai = kk_arg_index(k, v);
  kl_str s;
  kl_str_init(&s);
  ssa raw, zero;
  if (a->ndim == 0) kk_const_index(k, 0, zero);
  kk_fresh(k, raw);
  kl_str_printf(&s, "%s = memref.load %%m%d", raw, ai);
  kk_index_list(&s, idx, a->ndim, zero);
  kl_str_append(&s, " : ");
  kk_memref_type(&s, a);
  kk_line_str(k, &s);
  kl_str_free(&s);
  if (a->dtype == KL_BOOL) {
    ssa z;
    kk_fresh(k, z);
    kk_line(k, "%s = arith.constant 0 : i8", z);
    kk_fresh(k, out);
    kk_line(k, "%s = arith.cmpi ne, %s, %s : i8", out, raw, z);
  } else if (kk_is_low_float(a->dtype)) {
    kk_fresh(k, out);
    kk_line(k, "%s = arith.extf %s : %s to f32", out, raw, kl_storage_type(a->dtype));
  } else {
    snprintf(out, sizeof(ssa), "%s", raw);
  }
  return out;
}

char *kk_emit_value(kctx *k, int v, ssa *idx, char *out);

/* ---- index-moving primitives ---- */

void kk_delinearize(kctx *k, const char *lin, const int64_t *dims, int n, ssa *idx) {
  ssa rest;
  snprintf(rest, sizeof rest, "%s", lin);
  for (int i = n - 1; i >= 0; i--) {
    if (i == 0) {
      snprintf(idx[0], sizeof(ssa), "%s", rest);
      break;
    }
    ssa d, q;
    kk_const_index(k, dims[i], d);
    kk_line(k, "%s = arith.remui %s, %s : index", kk_fresh(k, idx[i]), rest, d);
    kk_line(k, "%s = arith.divui %s, %s : index", kk_fresh(k, q), rest, d);
    snprintf(rest, sizeof rest, "%s", q);
  }
}

void kk_memo_set(kctx *k, int v, ssa *idx, const char *name) {
  char *key = memo_key(v, idx, k->pg->vals[v].aval.ndim);
  if (!key) {
    kk_nomem(k);
    return;
  }
  memo_put(k, key, name);
}

char *kk_emit_value(kctx *k, int v, ssa *idx, char *out) {
  const kl_value *val = &k->pg->vals[v];
  int n = val->aval.ndim;
  char *key = memo_key(v, idx, n);
  if (!key) {
    kk_nomem(k);
    snprintf(out, sizeof(ssa), "%%oom");
    return out;
  }
  const char *hit = memo_get(k, key);
  if (hit) {
    free(key);
    snprintf(out, sizeof(ssa), "%s", hit);
    return out;
  }
  out[0] = 0;
  if (v == k->stash && k->stash_ready && n == k->pg->vals[k->root].aval.ndim) {
    int same = 1; /* only at the element the main loop is writing */
    for (int i = 0; i < n && same; i++) {
      char want[24];
      if (k->main_idx) snprintf(want, sizeof want, "%s", k->main_idx[i]);
      else snprintf(want, sizeof want, "%%i%d", i);
      same = !strcmp(idx[i], want);
    }
    if (same) {
      kk_emit_load(k, k->root, idx, out);
      memo_put(k, key, out);
      return out;
    }
  }
  for (int i = 0; i < k->nstage; i++)
    if (k->stage_val[i] == v) { /* a row reduction computed earlier in this row */
      free(key);
      snprintf(out, sizeof(ssa), "%s", k->stage_ssa[i]);
      return out;
    }
  if (k->plan->materialized[v] && v != k->root && !(k->recompute && k->recompute[v])) {
    kk_emit_load(k, v, idx, out);
    memo_put(k, key, out);
    return out;
  }
  const kl_eqn *e = &k->pg->eqns[val->producer];
  const kl_lowering *lw = kl_lower_get(e->prim);
  if (lw->scalar) lw->scalar(k, e, v, idx, out);
  else kk_kfail(k, "codegen: %s cannot be fused into a kernel", kl_prim_get(e->prim)->name);
  memo_put(k, key, out);
  return out;
}

/* ---- reductions ---- */

void kk_reduce_init(kctx *k, kl_prim p, kl_dtype t, char *out) {
  const kl_reduce_rule *r = kl_lower_get(p)->reduce;
  if (!r) return;
  int un = kk_is_unsigned(t), bits = kk_bits_of(kl_compute_type(t));
  int64_t imax = bits >= 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1, imin = -imax - 1;
  int init = t == KL_BOOL ? r->binit : un ? r->uinit : r->sinit;
  int64_t iv = init == KL_RINIT_TYPE_MIN ? imin : init == KL_RINIT_TYPE_MAX ? imax : init;
  kk_const_scalar(k, t, r->finit, iv, out);
}

const char *kk_reduce_op(kl_prim p, kl_dtype t) {
  const kl_reduce_rule *r = kl_lower_get(p)->reduce;
  if (!r) return "?";
  return kl_dtype_is_float(t) ? r->fop : t == KL_BOOL ? r->bop : kk_is_unsigned(t) ? r->uop : r->sop;
}

/* ---- the function ---- */

static void open_loop(kl_str *s, int depth, const char *iv, const char *lo, const char *hi) {
  for (int i = 0; i < depth; i++) kl_str_append(s, "  ");
  kl_str_printf(s, "scf.for %s = %s to %s step %%c1 {\n", iv, lo, hi);
}

void kk_emit_reinterpret(kl_str *out, const char *indent, int i, int ndim, const int64_t *dims, const char *storage) {
  char name[24];
  snprintf(name, sizeof name, "%%m%d", i);
  kk_emit_reinterpret_as(out, indent, name, i, ndim, dims, storage);
}

void kk_emit_reinterpret_as(kl_str *out, const char *indent, const char *name, int i, int ndim, const int64_t *dims,
                            const char *storage) {
  kl_str_printf(out, "%s%s = memref.reinterpret_cast %%a%d to offset: [0], sizes: [", indent, name, i);
  if (ndim == 0) kl_str_append(out, "1");
  for (int d = 0; d < ndim; d++) kl_str_printf(out, d ? ", %lld" : "%lld", (long long)dims[d]);
  kl_str_append(out, "], strides: [");
  if (ndim == 0) kl_str_append(out, "1");
  for (int d = 0; d < ndim; d++) {
    int64_t s = 1;
    for (int j = d + 1; j < ndim; j++) s *= dims[j];
    kl_str_printf(out, d ? ", %lld" : "%lld", (long long)s);
  }
  kl_str_printf(out, "] : memref<1x%s> to memref<", storage);
  if (ndim == 0) kl_str_append(out, "1x");
  for (int d = 0; d < ndim; d++) kl_str_printf(out, "%lldx", (long long)dims[d]);
  kl_str_printf(out, "%s>\n", storage);
}

/* Signature and prologue: void name(void **args, i64 lo, i64 hi). Each argument pointer is
 * loaded from the array and wrapped as a memref<1xT> descriptor, then reinterpreted with its
 * static shape (%m<i>), so generated code indexes with constants only. */
static void emit_prologue(kl_str *out, const kl_program *pg, const char *name, const int *args, int nargs) {
  kl_str_printf(out, "  func.func @%s(%%args: !llvm.ptr, %%lo: index, %%hi: index) {\n", name);
  kl_str_append(out, "    %c0 = arith.constant 0 : index\n    %c1 = arith.constant 1 : index\n");
  kl_str_append(out, "    %z64 = llvm.mlir.constant(0 : i64) : i64\n    %o64 = llvm.mlir.constant(1 : i64) : i64\n");
  for (int i = 0; i < nargs; i++) {
    const char *d = "!llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>";
    kl_str_printf(out, "    %%g%d = llvm.getelementptr %%args[%d] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n", i, i);
    kl_str_printf(out, "    %%p%d = llvm.load %%g%d : !llvm.ptr -> !llvm.ptr\n", i, i);
    kl_str_printf(out, "    %%u%d = llvm.mlir.undef : %s\n", i, d);
    kl_str_printf(out, "    %%v%d_0 = llvm.insertvalue %%p%d, %%u%d[0] : %s\n", i, i, i, d);
    kl_str_printf(out, "    %%v%d_1 = llvm.insertvalue %%p%d, %%v%d_0[1] : %s\n", i, i, i, d);
    kl_str_printf(out, "    %%v%d_2 = llvm.insertvalue %%z64, %%v%d_1[2] : %s\n", i, i, d);
    kl_str_printf(out, "    %%v%d_3 = llvm.insertvalue %%o64, %%v%d_2[3, 0] : %s\n", i, i, d);
    kl_str_printf(out, "    %%v%d_4 = llvm.insertvalue %%o64, %%v%d_3[4, 0] : %s\n", i, i, d);
    kl_str_printf(out, "    %%a%d = builtin.unrealized_conversion_cast %%v%d_4 : %s to memref<1x%s>\n", i, i, d,
                  kl_storage_type(pg->vals[args[i]].aval.dtype));
  }
  for (int i = 0; i < nargs; i++) {
    const kl_aval *a = &pg->vals[args[i]].aval;
    kk_emit_reinterpret(out, "    ", i, a->ndim, a->dims, kl_storage_type(a->dtype));
  }
}

void kk_store_value(kctx *k, kl_dtype t, const char *val, int arg, const kl_aval *a, ssa *idx, int n) {
  ssa sv;
  snprintf(sv, sizeof sv, "%s", val);
  if (t == KL_BOOL) kk_line(k, "%s = arith.extui %s : i1 to i8", kk_fresh(k, sv), val);
  else if (kk_is_low_float(t)) kk_line(k, "%s = arith.truncf %s : f32 to %s", kk_fresh(k, sv), val, kl_storage_type(t));
  kl_str st;
  kl_str_init(&st);
  kl_str_printf(&st, "memref.store %s, %%m%d", sv, arg);
  kk_index_list(&st, idx, n, "%c0");
  kl_str_append(&st, " : ");
  kk_memref_type(&st, a);
  kk_line_str(k, &st);
  kl_str_free(&st);
}

void kk_store_stash(kctx *k, const char *val, ssa *idx, int n) {
  const kl_aval *oa = &k->pg->vals[k->root].aval;
  kk_store_value(k, oa->dtype, val, kk_arg_index(k, k->root), oa, idx, n);
}

/* Emits, at the current position of k->body (inside the loops over the leading dims 0..rowk-1),
 * the reduction `r` over dims rowk..n-1 of the current row, and names its result (compute type)
 * in k->stage_ssa. Values computed inside the row loops are forgotten afterwards (memo scope). */
static void emit_stage(kctx *k, const kl_eqn *r, int rowk, int sid) {
  const kl_aval *x = &k->pg->vals[r->ins[0]].aval;
  kl_dtype rt = k->pg->vals[r->outs[0]].aval.dtype;
  const kl_reduce_rule *rr = kl_lower_get(r->prim)->reduce;
  int wide = rr->wide && kl_dtype_is_float(rt) && rt != KL_F64;
  int nanflag = kl_dtype_is_float(rt) && rr->nan_op;
  const char *acty = wide ? "f64" : kl_compute_type(rt);
  const char *outer_ind = k->ind;
  char inds[KL_MAX_RANK][64];
  ssa init, idx[KL_MAX_RANK];
  kk_reduce_init(k, r->prim, wide ? KL_F64 : rt, init);
  kk_line(k, "%%sf%d_init = arith.constant false", sid);
  for (int d = 0; d < x->ndim; d++) {
    if (d < rowk) snprintf(idx[d], sizeof(ssa), "%%i%d", d);
    else snprintf(idx[d], sizeof(ssa), "%%s%d_%d", sid, d);
  }
  for (int d = rowk; d < x->ndim; d++) {
    char prev[40], pflag[40];
    if (d == rowk) {
      snprintf(prev, sizeof prev, "%s", init);
      snprintf(pflag, sizeof pflag, "%%sf%d_init", sid);
    } else {
      snprintf(prev, sizeof prev, "%%sa%d_%d", sid, d - 1);
      snprintf(pflag, sizeof pflag, "%%sf%d_%d", sid, d - 1);
    }
    if (nanflag)
      kk_line(k, "%%sr%d_%d:2 = scf.for %s = %%c0 to %%n%d step %%c1 iter_args(%%sa%d_%d = %s, %%sf%d_%d = %s) -> (%s, i1) {",
           sid, d, idx[d], d, sid, d, prev, sid, d, pflag, acty);
    else if (wide && d == x->ndim - 1) { /* blocked sum, as in the main path */
      kk_line(k, "%%scb%d = arith.constant %d : index", sid, KL_SUM_BLOCK);
      kk_line(k, "%%sr%d_%d = scf.for %%sblk%d = %%c0 to %%n%d step %%scb%d iter_args(%%sa%d_%d = %s) -> (f64) {", sid, d, sid, d,
           sid, sid, d, prev);
      kk_line(k, "  %%sbe%d_0 = arith.addi %%sblk%d, %%scb%d : index", sid, sid, sid);
      kk_line(k, "  %%sbe%d = arith.minui %%sbe%d_0, %%n%d : index", sid, sid, d);
      kk_line(k, "  %%swz%d = arith.constant 0.0 : f32", sid);
      kk_line(k, "  %%sws%d = scf.for %s = %%sblk%d to %%sbe%d step %%c1 iter_args(%%swa%d = %%swz%d) -> (f32) {", sid, idx[d],
           sid, sid, sid, sid);
    } else
      kk_line(k, "%%sr%d_%d = scf.for %s = %%c0 to %%n%d step %%c1 iter_args(%%sa%d_%d = %s) -> (%s) {", sid, d, idx[d], d,
           sid, d, prev, acty);
    snprintf(inds[d], sizeof inds[d], "%s  ", k->ind);
    k->ind = inds[d];
  }
  int memo_mark = kk_memo_mark(k);
  ssa val, nv;
  kk_emit_value(k, r->ins[0], idx, val);
  if (k->stash == r->ins[0]) kk_store_stash(k, val, idx, x->ndim); /* the main loop reads them back */
  char acc[40], flag[40];
  snprintf(acc, sizeof acc, "%%sa%d_%d", sid, x->ndim - 1);
  snprintf(flag, sizeof flag, "%%sf%d_%d", sid, x->ndim - 1);
  const char *op = kk_reduce_op(r->prim, rt);
  if (nanflag) op = rr->nan_op;
  const char *fm = !strcmp(op, "addf") || !strcmp(op, "mulf") ? " fastmath<reassoc>" : nanflag ? " fastmath<nnan>" : "";
  if (wide) {
    kk_line(k, "%s = arith.addf %%swa%d, %s fastmath<reassoc> : f32", kk_fresh(k, nv), sid, val);
    kk_line(k, "scf.yield %s : f32", nv);
  } else
  kk_line(k, "%s = arith.%s %s, %s%s : %s", kk_fresh(k, nv), op, acc, val, fm, acty);
  if (wide) {
  } else if (nanflag) {
    ssa un, nf;
    kk_line(k, "%s = arith.cmpf uno, %s, %s : %s", kk_fresh(k, un), val, val, acty);
    kk_line(k, "%s = arith.ori %s, %s : i1", kk_fresh(k, nf), flag, un);
    kk_line(k, "scf.yield %s, %s : %s, i1", nv, nf, acty);
  } else kk_line(k, "scf.yield %s : %s", nv, acty);
  kk_memo_reset(k, memo_mark);
  for (int d = x->ndim - 1; d >= rowk; d--) {
    k->ind = d == rowk ? outer_ind : inds[d - 1];
    if (wide && d == x->ndim - 1) {
      kk_line(k, "  }");
      kk_line(k, "  %%swe%d = arith.extf %%sws%d : f32 to f64", sid, sid);
      kk_line(k, "  %%swn%d = arith.addf %%sa%d_%d, %%swe%d : f64", sid, sid, d, sid);
      kk_line(k, "  scf.yield %%swn%d : f64", sid);
    }
    kk_line(k, "}");
    if (d > rowk) {
      if (nanflag) kk_line(k, "scf.yield %%sr%d_%d#0, %%sr%d_%d#1 : %s, i1", sid, d, sid, d, acty);
      else kk_line(k, "scf.yield %%sr%d_%d : %s", sid, d, acty);
    }
  }
  ssa res;
  if (nanflag) {
    ssa nan;
    kk_const_scalar(k, rt, NAN, 0, nan);
    kk_line(k, "%s = arith.select %%sr%d_%d#1, %s, %%sr%d_%d#0 : %s", kk_fresh(k, val), sid, rowk, nan, sid, rowk, acty);
    snprintf(res, sizeof res, "%s", val);
  } else snprintf(res, sizeof res, "%%sr%d_%d", sid, rowk);
  if (wide) {
    kk_line(k, "%s = arith.truncf %s : f64 to f32", kk_fresh(k, val), res);
    snprintf(res, sizeof res, "%s", val);
  }
  kk_add_stage(k, r->outs[0], res);
}

void kk_add_stage(kctx *k, int v, const char *name) {
  k->stage_val[k->nstage] = v;
  snprintf(k->stage_ssa[k->nstage], sizeof(ssa), "%s", name);
  k->nstage++;
}

/* True when the kernel expression of `v` reads `target` at its own index (through elementwise
 * primitives only). */
int kk_expr_uses(const kl_program *pg, const kl_plan *plan, int v, int target) {
  if (v == target) return 1;
  const kl_value *val = &pg->vals[v];
  if (val->producer < 0 || (plan->materialized[v] && v != pg->eqns[val->producer].outs[0])) return 0;
  const kl_eqn *e = &pg->eqns[val->producer];
  kl_form f = kl_prim_get(e->prim)->form;
  if (!kl_form_elementwise(f)) return 0;
  for (int i = 0; i < e->nin; i++) {
    int u = e->ins[i];
    if (pg->vals[u].aval.ndim == 0 || (plan->materialized[u] && u != target)) continue;
    if (kk_expr_uses(pg, plan, u, target)) return 1;
  }
  return 0;
}

static int emit_column_reduce(const kl_plan *plan, int step, const char *name, kl_str *out, kl_kernel_info *info,
                              char *err, size_t errlen);

#define KL_TILE 32

/* True when the kernel expression of v reads something through a transpose that moves the
 * last dimension (so consecutive output elements read far-apart input elements). */
static int reads_transposed(const kl_program *pg, const kl_plan *plan, int v, char *seen) {
  if (seen[v]) return 0;
  seen[v] = 1;
  const kl_value *val = &pg->vals[v];
  if (val->producer < 0) return 0;
  const kl_eqn *e = &pg->eqns[val->producer];
  const kl_lowering *lw = kl_lower_get(e->prim);
  if (lw->strided && lw->strided(e)) return 1;
  for (int i = 0; i < e->nin; i++) {
    int u = e->ins[i];
    if (plan->materialized[u] || !kl_eqn_fusible(kl_lower_fuse_traits(), pg, &pg->eqns[val->producer])) continue;
    if (reads_transposed(pg, plan, u, seen)) return 1;
  }
  return 0;
}

/* Appends each line of text to out, indented by n spaces. */
static void append_indented(kl_str *out, const kl_str *text, int n) {
  const char *p = text->data;
  while (p && *p) {
    const char *nl = strchr(p, '\n');
    if (!nl) nl = p + strlen(p);
    kl_str_printf(out, "%*s%.*s\n", n, "", (int)(nl - p), p);
    p = *nl ? nl + 1 : nl;
  }
  if (text->failed) out->failed = 1;
}

/* Appends the lines storing v (compute type of rt) at target ("name[indices] : memref type"):
 * bools as i8, float16/bfloat16 narrowed from f32. keep (an i1 name or NULL): where it is true the
 * element keeps what memory holds; only (likewise): stores only where it is true. sfx ends the
 * names of the values it defines (two stores in one scope). */
static void store_lines(kl_str *s, kl_dtype rt, const char *v, const char *target, const char *keep, const char *only,
                        const char *sfx) {
  const char *ty = kl_compute_type(rt);
  char sv[32], sk[32];
  snprintf(sv, sizeof sv, "%%st%s", sfx);
  snprintf(sk, sizeof sk, "%%skeep%s", sfx);
  if (only) kl_str_printf(s, "scf.if %s {\n", only);
  if (rt == KL_BOOL) {
    kl_str_printf(s, "%s = arith.extui %s : i1 to i8\n", sv, v);
    v = sv;
    ty = "i8";
  } else if (kk_is_low_float(rt)) {
    kl_str_printf(s, "%s = arith.truncf %s : f32 to %s\n", sv, v, kl_storage_type(rt));
    v = sv;
    ty = kl_storage_type(rt);
  }
  if (keep) {
    kl_str_printf(s, "%%sold%s = memref.load %s\n", sfx, target);
    if (kk_is_low_float(rt)) { /* selected as bits: x86 has no bf16 select and would call __truncsfbf2 */
      kl_str_printf(s, "%%sobits%s = arith.bitcast %%sold%s : %s to i16\n", sfx, sfx, ty);
      kl_str_printf(s, "%%snbits%s = arith.bitcast %s : %s to i16\n", sfx, v, ty);
      kl_str_printf(s, "%%skbits%s = arith.select %s, %%sobits%s, %%snbits%s : i16\n", sfx, keep, sfx, sfx);
      kl_str_printf(s, "%s = arith.bitcast %%skbits%s : i16 to %s\n", sk, sfx, ty);
    } else kl_str_printf(s, "%s = arith.select %s, %%sold%s, %s : %s\n", sk, keep, sfx, v, ty);
    v = sk;
  }
  kl_str_printf(s, "memref.store %s, %s\n", v, target);
  if (only) kl_str_append(s, "}\n");
}

/* The kernel's value emitted again into b, with a fresh memo and the names going on from k's:
 * branches, rare_ok and defs as given. Its SSA name goes into val, its rare flag (or "") into rare. */
static void reemit(kctx *k, kl_str *b, int branches, int rare_ok, uint64_t *defs, int v, ssa *idx, char *val, char *rare) {
  kctx k2 = *k;
  k2.body = b;
  k2.em = (kl_emitter){.out = b, .next_id = k->em.next_id, .branches = branches, .rare_ok = rare_ok, .defs = defs};
  k2.memo = NULL;
  k2.nmemo = k2.capmemo = 0;
  memset(k2.mathuses, 0, sizeof k2.mathuses);
  kk_emit_value(&k2, v, idx, val);
  for (int i = 0; i < k2.nmemo; i++) free(k2.memo[i].key);
  free(k2.memo);
  if (k2.nargs != k->nargs && !k2.failed) kk_kfail(&k2, "internal error: a kernel's second body read other buffers");
  k->args = k2.args;
  k->nargs = k2.nargs;
  k->capargs = k2.capargs;
  k->em.next_id = k2.em.next_id;
  k->failed |= k2.failed;
  snprintf(rare, sizeof(ssa), "%s", k2.em.rare_mixed ? "" : k2.em.rare);
}

/* The loop nest of an elementwise kernel whose body flags (rare, an i1) the elements that need a
 * rare exact path its fast code left out (sin/cos/tan of huge arguments, codegen/mathfn.c): the
 * nest (vectorized) stores every element (store1 keeps a flagged element's old memory where the
 * output shares its buffer with an operand the second nest reads) and ORs the flags; if any was
 * up, a second nest with the exact body (body2, scalar, with branches) stores the elements it
 * flags (rare2). */
static void emit_rare_nest(kl_str *out, int nkept, const int *order, const kl_str *body, const char *rare,
                           const kl_str *store1, const kl_str *body2, const kl_str *store2) {
  kl_str_append(out, "    %rfalse = arith.constant false\n");
  for (int l = 0; l < nkept; l++) {
    char prev[24], hi[24];
    if (l) {
      snprintf(prev, sizeof prev, "%%rin%d", l - 1);
      snprintf(hi, sizeof hi, "%%n%d", l);
    } else {
      snprintf(prev, sizeof prev, "%%rfalse");
      snprintf(hi, sizeof hi, "%%hi");
    }
    kl_str_printf(out, "%*s%%rany%d = scf.for %%i%d = %s to %s step %%c1 iter_args(%%rin%d = %s) -> (i1) {\n", 4 + 2 * l, "", l,
                  order[l], l ? "%c0" : "%lo", hi, l, prev);
  }
  kk_append_text(out, body);
  append_indented(out, store1, 4 + 2 * nkept);
  if (nkept) kl_str_printf(out, "%*s%%rnew = arith.ori %%rin%d, %s : i1\n", 4 + 2 * nkept, "", nkept - 1, rare);
  else kl_str_printf(out, "    %%rnew = arith.ori %%rfalse, %s : i1\n", rare);
  if (nkept) kl_str_printf(out, "%*sscf.yield %%rnew : i1\n", 4 + 2 * nkept, "");
  for (int l = nkept - 1; l >= 0; l--) {
    kl_str_printf(out, "%*s}\n", 4 + 2 * l, "");
    if (l) kl_str_printf(out, "%*sscf.yield %%rany%d : i1\n", 2 + 2 * l, "", l);
  }
  kl_str_printf(out, "    scf.if %s {\n", nkept ? "%rany0" : "%rnew");
  for (int l = 0; l < nkept; l++) {
    char iv[24], n[24];
    snprintf(iv, sizeof iv, "%%i%d", order[l]);
    snprintf(n, sizeof n, "%%n%d", l);
    open_loop(out, 2 + l, iv, l ? "%c0" : "%lo", l ? n : "%hi");
  }
  kk_append_text(out, body2);
  append_indented(out, store2, 4 + 2 * nkept);
  for (int l = nkept - 1; l >= 0; l--) kl_str_printf(out, "%*s}\n", 4 + 2 * l, "");
  kl_str_append(out, "    }\n");
}

int kl_kernel_emit(const kl_plan *plan, int step, const char *name, kl_str *out, kl_kernel_info *info,
                   uint64_t *outlined, char *err, size_t errlen) {
  const kl_program *pg = plan->pg;
  const kl_plan_step *st = &plan->steps[step];
  const kl_eqn *e = &pg->eqns[st->eqn];
  const kl_aval *oa = &pg->vals[st->root].aval;
  int is_reduce = kl_prim_get(e->prim)->form == KL_FORM_REDUCE;
  const kl_aval *space = is_reduce ? &pg->vals[e->ins[0]].aval : oa; /* iteration space */
  /* An elementwise kernel whose result is a reshape of a computed value (a flattening before a
   * loss) iterates over that value's shape and stores in its own row-major order (the same
   * bytes): nested loops, so work that depends only on outer indices (log of a row's sum in
   * log_softmax) moves out of the inner loop instead of running at every element. */
  int emitted = is_reduce ? e->ins[0] : st->root;
  if (!is_reduce && !st->nstages) {
    int v = st->root;
    while (pg->vals[v].producer >= 0 && pg->eqns[pg->vals[v].producer].prim == KL_P_RESHAPE) {
      int u = pg->eqns[pg->vals[v].producer].ins[0];
      if (plan->materialized[u]) break;
      v = u;
    }
    if (v != st->root && pg->vals[v].aval.ndim > oa->ndim) {
      emitted = v;
      space = &pg->vals[v].aval;
    }
  }
  if (is_reduce && space->ndim >= 2 && e->p.reduce.axes.n > 0 && kl_aval_size(space) > 0) {
    int last_reduced = 0;
    for (int i = 0; i < e->p.reduce.axes.n; i++) last_reduced |= e->p.reduce.axes.v[i] == space->ndim - 1;
    if (!last_reduced) return emit_column_reduce(plan, step, name, out, info, err, errlen);
  }
  kl_str body, loops, store, target; /* store: the text of the result's store, at target */
  kl_str_init(&body);
  kl_str_init(&loops);
  kl_str_init(&store);
  kl_str_init(&target);
  kctx k = {.pg = pg, .plan = plan, .em = {.out = &body}, .body = &body, .err = err, .errlen = errlen, .root = is_reduce ? -1 : st->root, .stash = -1,
            .outlined = kl_aval_size(space) < 32768 ? outlined : NULL}; /* big arrays: inline (vectorized) math */
  char indent[64];
  memset(info, 0, sizeof *info);

  /* loop order: kept dims outermost, reduced dims inside (for a plain kernel all are kept) */
  int order[KL_MAX_RANK], nkept = 0, nred = 0, reduced[KL_MAX_RANK] = {0};
  if (is_reduce)
    for (int i = 0; i < e->p.reduce.axes.n; i++) reduced[e->p.reduce.axes.v[i]] = 1;
  for (int i = 0; i < space->ndim; i++)
    if (!reduced[i]) order[nkept++] = i;
  for (int i = 0; i < space->ndim; i++)
    if (reduced[i]) order[nkept + nred++] = i;
  int depth = space->ndim;
  ssa idx[KL_MAX_RANK];
  for (int i = 0; i < depth; i++) snprintf(idx[order[i]], sizeof(ssa), "%%i%d", order[i]);
  snprintf(indent, sizeof indent, "%*s", 4 + 2 * depth, "");
  k.ind = indent;

  info->cost = kl_aval_size(space);
  info->extent = depth ? space->dims[order[0]] : 1;
  info->full_reduce = is_reduce && nkept == 0;
  info->reduce = e->prim;

  kl_dtype rt = oa->dtype;
  /* float32/16 sums accumulate in float64: as accurate as a pairwise sum, and still vectorized */
  const kl_reduce_rule *rr = is_reduce ? kl_lower_get(e->prim)->reduce : NULL;
  int wide = rr && rr->wide && kl_dtype_is_float(rt) && rt != KL_F64;
  const char *rcty = wide ? "f64" : kl_compute_type(rt);
  ssa val, acc_name, init;
  kl_str ini;
  kl_str_init(&ini);
  if (is_reduce) { /* the accumulator's start value, outside the reduced loops */
    char ind2[64];
    snprintf(ind2, sizeof ind2, "%*s", 4 + 2 * nkept, "");
    if (nred) {
      k.body = &ini;
      k.ind = ind2;
    }
    kk_reduce_init(&k, e->prim, wide ? KL_F64 : rt, init);
    if (kl_dtype_is_float(rt) && rr->nan_op)
      kk_line(&k, "%%ffalse = arith.constant false");
    k.body = &body;
    k.ind = indent;
  }
  snprintf(acc_name, sizeof acc_name, "%%acc%d", nred ? nred - 1 : 0);
  kl_str pre; /* row kernels: the per-row reductions, between the leading and the row loops */
  kl_str_init(&pre);
  int rowk = st->nstages ? st->row_axis : -1;
  if (!is_reduce && st->nstages) {
    char ind3[64];
    snprintf(ind3, sizeof ind3, "%*s", 4 + 2 * rowk, "");
    k.body = &pre;
    k.em.out = &pre;
    k.ind = ind3;
    /* The last reduction's operand, when the output also uses it (softmax's exp(x - max)) and has
     * its dtype, is written into the output row by that stage and read back by the main loop. */
    const kl_eqn *last = &pg->eqns[st->stages[st->nstages - 1]];
    int cand = last->ins[0];
    if (pg->vals[cand].aval.dtype == oa->dtype && pg->vals[cand].aval.dtype != KL_BOOL && !plan->materialized[cand] &&
        kk_expr_uses(pg, plan, st->root, cand))
      k.stash = cand;
    for (int j = 0; j < st->nstages; j++) emit_stage(&k, &pg->eqns[st->stages[j]], rowk, j);
    k.stash_ready = k.stash >= 0;
    k.body = &body;
    k.em.out = &body;
    k.ind = indent;
  }
  k.em.rare_ok = !is_reduce && !st->nstages; /* an elementwise nest can rerun flagged elements */
  kk_emit_value(&k, emitted, idx, val);
  /* Blocked sums: float32 partial sums over blocks of KL_SUM_BLOCK elements (vectorized), added
   * into a float64 total per block: pairwise-like accuracy at float32 speed. */
  int blocked = wide && nred > 0;
  if (wide && !blocked) {
    ssa w;
    kk_line(&k, "%s = arith.extf %s : f32 to f64", kk_fresh(&k, w), val);
    snprintf(val, sizeof val, "%s", w);
  }
  /* Float max/min reduce with maxnum/minnum (which LLVM vectorizes) plus a NaN flag carried
   * beside the accumulator, since JAX's max/min propagate NaN. */
  int nanflag = rr && kl_dtype_is_float(rt) && rr->nan_op;
  char flag_name[32];
  snprintf(flag_name, sizeof flag_name, "%%flag%d", nred ? nred - 1 : 0);
  if (is_reduce) {
    ssa nv;
    const char *op = kk_reduce_op(e->prim, rt);
    if (nanflag) op = rr->nan_op;
    /* reassoc lets sums vectorize; nnan lets maxnum/minnum vectorize (NaNs are tracked by the flag) */
    const char *fm = !strcmp(op, "addf") || !strcmp(op, "mulf") ? " fastmath<reassoc>" : nanflag ? " fastmath<nnan>" : "";
    if (blocked) {
      kk_line(&k, "%s = arith.addf %%wacc, %s fastmath<reassoc> : f32", kk_fresh(&k, nv), val);
      kk_line(&k, "scf.yield %s : f32", nv);
    } else
    kk_line(&k, "%s = arith.%s %s, %s%s : %s", kk_fresh(&k, nv), op, nred ? acc_name : init, val, fm, rcty);
    if (blocked) {
    } else if (nanflag) {
      ssa un, nf;
      kk_line(&k, "%s = arith.cmpf uno, %s, %s : %s", kk_fresh(&k, un), val, val, rcty);
      kk_line(&k, "%s = arith.ori %s, %s : i1", kk_fresh(&k, nf), nred ? flag_name : "%ffalse", un);
      if (nred) kk_line(&k, "scf.yield %s, %s : %s, i1", nv, nf, rcty);
      else {
        ssa nan, fin;
        kk_const_scalar(&k, rt, NAN, 0, nan);
        kk_line(&k, "%s = arith.select %s, %s, %s : %s", kk_fresh(&k, fin), nf, nan, nv, rcty);
        snprintf(nv, sizeof nv, "%s", fin);
      }
    } else if (nred) kk_line(&k, "scf.yield %s : %s", nv, rcty);
    snprintf(val, sizeof val, "%s", nv);
  }
  int nread = k.nargs; /* the buffers the body reads: the output's may be one of them */
  int out_arg = kk_arg_index(&k, st->root);
  if (k.failed) goto fail;

  emit_prologue(out, pg, name, k.args, k.nargs);
  for (int i = 0; i < depth; i++) kl_str_printf(out, "    %%n%d = arith.constant %lld : index\n", i, (long long)space->dims[order[i]]);
  kl_aval stored = *oa; /* the result's memref as the kernel stores it */
  char out_name[24];
  snprintf(out_name, sizeof out_name, "%%m%d", out_arg);
  if (emitted != st->root && !is_reduce) {
    stored = *space;
    stored.dtype = oa->dtype;
    snprintf(out_name, sizeof out_name, "%%mo");
    kk_emit_reinterpret_as(out, "    ", out_name, out_arg, space->ndim, space->dims, kl_storage_type(oa->dtype));
  }

  /* where the result goes: "name[indices] : memref type" */
  kl_str_append(&target, out_name);
  if (stored.ndim == 0) kl_str_append(&target, "[%c0]");
  else {
    kl_str_append(&target, "[");
    int first = 1;
    for (int i = 0; i < space->ndim; i++)
      if (!reduced[i]) {
        kl_str_printf(&target, first ? "%s" : ", %s", idx[i]);
        first = 0;
      }
    kl_str_append(&target, "]");
  }
  kl_str_append(&target, " : ");
  kk_memref_type(&target, &stored);
  store_lines(&store, rt, val, target.data, NULL, NULL, ""); /* store text of the result (in registers -> memory) */

  /* loops: kept loops, then (for reductions) the init and reduced loops with iter_args. A 2-D
   * elementwise kernel reading an operand transposed walks 32x32 tiles, so both the rows it
   * writes and the columns it reads stay in cache (a.T + 1: one cache line per element
   * otherwise). */
  int lvl = 0;
  int tiled = !is_reduce && !st->nstages && nkept >= 2 && space->dims[order[nkept - 2]] > 32 &&
              space->dims[order[nkept - 1]] > 32; /* the last two dims in tiles; any before them in loops */
  if (tiled) {
    char *seen = kl_calloc((size_t)pg->nvals + 1, 1);
    if (!seen) {
      kk_nomem(&k);
      goto fail;
    }
    tiled = reads_transposed(pg, plan, st->root, seen);
    free(seen);
  }
  if (k.em.rare[0]) { /* elements flagged for a rare exact path: a second nest redoes them */
    ssa v2, rare2 = "";
    kl_str body2, store1, store2;
    kl_str_init(&body2);
    kl_str_init(&store1);
    kl_str_init(&store2);
    int usable = !tiled && !k.em.rare_mixed && k.em.rare_ind == indent && k.em.rare_region == 0;
    if (usable) reemit(&k, &body2, 1, 1, outlined, emitted, idx, v2, rare2); /* its exact paths called */
    if (!usable || !rare2[0]) { /* else one body that computes every path itself */
      kl_str_clear(&body);
      reemit(&k, &body, 0, 0, NULL, emitted, idx, val, rare2);
      kl_str_clear(&store);
      store_lines(&store, rt, val, target.data, NULL, NULL, "");
      usable = 0;
    } else {
      store_lines(&store1, rt, val, target.data, out_arg < nread ? k.em.rare : NULL, NULL, "");
      store_lines(&store2, rt, v2, target.data, NULL, rare2, "2");
      emit_rare_nest(out, nkept, order, &body, k.em.rare, &store1, &body2, &store2);
    }
    if (body2.failed || store1.failed || store2.failed) kk_nomem(&k);
    kl_str_free(&body2);
    kl_str_free(&store1);
    kl_str_free(&store2);
    if (k.failed) goto fail;
    if (usable) goto nest_done;
  }
  if (tiled) {
    int a = nkept - 2;
    for (; lvl < a; lvl++) {
      char iv[24], n[24];
      snprintf(iv, sizeof iv, "%%i%d", order[lvl]);
      snprintf(n, sizeof n, "%%n%d", lvl);
      open_loop(out, 2 + lvl, iv, lvl == 0 ? "%lo" : "%c0", lvl == 0 ? "%hi" : n);
    }
    char lo[24], hi[24];
    snprintf(lo, sizeof lo, "%s", a == 0 ? "%lo" : "%c0");
    if (a == 0) snprintf(hi, sizeof hi, "%%hi");
    else snprintf(hi, sizeof hi, "%%n%d", a);
    kl_str_printf(out, "    %%ctile = arith.constant %d : index\n", KL_TILE);
    kl_str_printf(out, "    scf.for %%ti = %s to %s step %%ctile {\n", lo, hi);
    kl_str_printf(out, "      %%tie0 = arith.addi %%ti, %%ctile : index\n      %%tie = arith.minui %%tie0, %s : index\n", hi);
    kl_str_printf(out, "      scf.for %%tj = %%c0 to %%n%d step %%ctile {\n", a + 1);
    kl_str_printf(out, "        %%tje0 = arith.addi %%tj, %%ctile : index\n        %%tje = arith.minui %%tje0, %%n%d : index\n",
                  a + 1);
    kl_str_printf(out, "        scf.for %%i%d = %%ti to %%tie step %%c1 {\n", order[a]);
    kl_str_printf(out, "          scf.for %%i%d = %%tj to %%tje step %%c1 {\n", order[a + 1]);
    lvl = nkept;
  }
  for (; lvl < nkept; lvl++) {
    char iv[24], n[24];
    if (lvl == rowk) kk_append_text(out, &pre);
    snprintf(iv, sizeof iv, "%%i%d", order[lvl]);
    snprintf(n, sizeof n, "%%n%d", lvl);
    open_loop(out, 2 + lvl, iv, lvl == 0 ? "%lo" : "%c0", lvl == 0 ? "%hi" : n);
  }
  if (is_reduce) {
    kk_append_text(out, &ini);
    for (int r = 0; r < nred; r++) {
      int d = nkept + r;
      char iv[24], n[24], prev[32];
      int outer_split = info->full_reduce && r == 0;
      snprintf(iv, sizeof iv, "%%i%d", order[d]);
      snprintf(n, sizeof n, "%%n%d", d);
      if (r == 0) snprintf(prev, sizeof prev, "%s", init);
      else snprintf(prev, sizeof prev, nanflag ? "%%acc%d#0" : "%%acc%d", r - 1);
      if (nanflag) {
        char pflag[32];
        if (r == 0) snprintf(pflag, sizeof pflag, "%%ffalse");
        else snprintf(pflag, sizeof pflag, "%%flag%d", r - 1);
        if (r > 0) snprintf(prev, sizeof prev, "%%acc%d", r - 1);
        kl_str_printf(out, "%*s%%r%d:2 = scf.for %s = %s to %s step %%c1 iter_args(%%acc%d = %s, %%flag%d = %s) -> (%s, i1) {\n",
                      4 + 2 * d, "", r, iv, outer_split ? "%lo" : "%c0", outer_split ? "%hi" : n, r, prev, r, pflag, rcty);
      } else if (blocked && r == nred - 1) {
        const char *lo = outer_split ? "%lo" : "%c0", *hi = outer_split ? "%hi" : n;
        kl_str_printf(out, "%*s%%cblk = arith.constant %d : index\n", 4 + 2 * d, "", KL_SUM_BLOCK);
        kl_str_printf(out, "%*s%%r%d = scf.for %%blk = %s to %s step %%cblk iter_args(%%acc%d = %s) -> (f64) {\n", 4 + 2 * d,
                      "", r, lo, hi, r, prev);
        kl_str_printf(out, "%*s%%bend0 = arith.addi %%blk, %%cblk : index\n", 6 + 2 * d, "");
        kl_str_printf(out, "%*s%%bend = arith.minui %%bend0, %s : index\n", 6 + 2 * d, "", hi);
        kl_str_printf(out, "%*s%%wzero = arith.constant 0.0 : f32\n", 6 + 2 * d, "");
        kl_str_printf(out, "%*s%%wsum = scf.for %s = %%blk to %%bend step %%c1 iter_args(%%wacc = %%wzero) -> (f32) {\n",
                      6 + 2 * d, "", iv);
      } else
      kl_str_printf(out, "%*s%%r%d = scf.for %s = %s to %s step %%c1 iter_args(%%acc%d = %s) -> (%s) {\n", 4 + 2 * d, "",
                    r, iv, outer_split ? "%lo" : "%c0", outer_split ? "%hi" : n, r, prev, rcty);
    }
  }
  kk_append_text(out, &body);
  if (is_reduce) {
    for (int r = nred - 1; r >= 0; r--) {
      int d = nkept + r;
      if (blocked && r == nred - 1) {
        kl_str_printf(out, "%*s}\n", 6 + 2 * d, "");
        kl_str_printf(out, "%*s%%wext = arith.extf %%wsum : f32 to f64\n", 6 + 2 * d, "");
        kl_str_printf(out, "%*s%%wnew = arith.addf %%acc%d, %%wext : f64\n", 6 + 2 * d, "", r);
        kl_str_printf(out, "%*sscf.yield %%wnew : f64\n", 6 + 2 * d, "");
      }
      kl_str_printf(out, "%*s}\n", 4 + 2 * d, "");
      if (r > 0 && nanflag) kl_str_printf(out, "%*sscf.yield %%r%d#0, %%r%d#1 : %s, i1\n", 4 + 2 * d - 2, "", r, r, rcty);
      else if (r > 0) kl_str_printf(out, "%*sscf.yield %%r%d : %s\n", 4 + 2 * d - 2, "", r, rcty);
    }
    if (nred) snprintf(val, sizeof val, "%%r0");
    /* re-emit the store with the final accumulator */
    kl_str_clear(&store);
    if (wide) {
      kl_str_printf(&store, "%%nar = arith.truncf %s : f64 to f32\n", val);
      snprintf(val, sizeof val, "%%nar");
    }
    if (nanflag && nred) {
      kctx k3 = k;
      k3.body = &store;
      k3.ind = "";
      ssa nan;
      kk_const_scalar(&k3, rt, NAN, 0, nan);
      kl_str_printf(&store, "%%fin = arith.select %%r0#1, %s, %%r0#0 : %s\n", nan, rcty);
      snprintf(val, sizeof val, "%%fin");
    }
    const char *v = val;
    if (rt == KL_BOOL) {
      kl_str_printf(&store, "%%st = arith.extui %s : i1 to i8\n", v);
      v = "%st";
    } else if (kk_is_low_float(rt)) {
      kl_str_printf(&store, "%%st = arith.truncf %s : f32 to %s\n", v, kl_storage_type(rt));
      v = "%st";
    }
    kl_str_printf(&store, "memref.store %s, %%m%d", v, out_arg);
    if (oa->ndim == 0) kl_str_append(&store, "[%c0]");
    else {
      kl_str_append(&store, "[");
      for (int i = 0; i < nkept; i++) kl_str_printf(&store, i ? ", %s" : "%s", idx[order[i]]);
      kl_str_append(&store, "]");
    }
    kl_str_append(&store, " : ");
    kk_memref_type(&store, oa);
    kl_str_append(&store, "\n");
  }
  /* indent the store lines */
  {
    char *s = store.data;
    while (s && *s) {
      char *nl = strchr(s, '\n');
      kl_str_printf(out, "%*s%.*s\n", 4 + 2 * nkept + (is_reduce ? 0 : 0), "", (int)(nl - s), s);
      s = nl + 1;
    }
  }
  for (lvl = nkept - 1; lvl >= 0; lvl--) kl_str_printf(out, "%*s}\n", 4 + 2 * lvl, "");
  if (tiled) kl_str_append(out, "    }\n    }\n");
nest_done:
  kl_str_append(out, "    return\n  }\n");
  if (store.failed || target.failed || out->failed || k.failed) {
    kk_nomem(&k);
    goto fail;
  }
  kl_str_free(&store);
  kl_str_free(&target);
  kl_str_free(&ini);
  kl_str_free(&pre);
  info->args = k.args;
  info->nargs = k.nargs;
  for (int i = 0; i < k.nmemo; i++) free(k.memo[i].key);
  free(k.memo);
  kl_str_free(&body);
  kl_str_free(&loops);
  return 0;
fail:
  kl_str_free(&store);
  kl_str_free(&target);
  kl_str_free(&ini);
  kl_str_free(&pre);
  for (int i = 0; i < k.nmemo; i++) free(k.memo[i].key);
  free(k.memo);
  free(k.args);
  kl_str_free(&body);
  kl_str_free(&loops);
  return -1;
}

/* A reduction whose innermost dimension is kept (sum over rows, mean over a batch): loops run in
 * memory order and each element is combined into its output element, so the innermost loop is
 * contiguous in both input and output and vectorizes. The first visit of an output element
 * starts from the reduction's initial value. When the outermost (split) dimension is reduced,
 * each thread accumulates into its own copy of the output, merged afterwards. */
static int emit_column_reduce(const kl_plan *plan, int step, const char *name, kl_str *out, kl_kernel_info *info,
                              char *err, size_t errlen) {
  const kl_program *pg = plan->pg;
  const kl_plan_step *st = &plan->steps[step];
  const kl_eqn *e = &pg->eqns[st->eqn];
  const kl_aval *oa = &pg->vals[st->root].aval, *space = &pg->vals[e->ins[0]].aval;
  int depth = space->ndim, reduced[KL_MAX_RANK] = {0};
  for (int i = 0; i < e->p.reduce.axes.n; i++) reduced[e->p.reduce.axes.v[i]] = 1;
  kl_str body;
  kl_str_init(&body);
  char indent[64];
  snprintf(indent, sizeof indent, "%*s", 4 + 2 * depth, "");
  kctx k = {.pg = pg, .plan = plan, .em = {.out = &body}, .body = &body, .ind = indent, .err = err, .errlen = errlen, .root = -1};
  memset(info, 0, sizeof *info);
  ssa idx[KL_MAX_RANK], kept[KL_MAX_RANK];
  int nkept = 0;
  for (int i = 0; i < depth; i++) {
    snprintf(idx[i], sizeof(ssa), "%%i%d", i);
    if (!reduced[i]) snprintf(kept[nkept++], sizeof(ssa), "%%i%d", i);
  }
  info->cost = kl_aval_size(space);
  info->extent = space->dims[0];
  info->full_reduce = reduced[0]; /* private outputs per thread, merged by the combiner */
  info->reduce = e->prim;
  kl_dtype rt = oa->dtype;
  const char *rcty = kl_compute_type(rt);
  ssa val, init, old, first, base, nv;
  kk_emit_value(&k, e->ins[0], idx, val);
  kk_emit_load(&k, st->root, kept, old);
  kk_reduce_init(&k, e->prim, rt, init);
  kk_line(&k, "%s = arith.constant true", kk_fresh(&k, first));
  for (int i = 0; i < depth; i++)
    if (reduced[i]) {
      ssa c, f2;
      kk_line(&k, "%s = arith.cmpi eq, %s, %s : index", kk_fresh(&k, c), idx[i], i == 0 ? "%lo" : "%c0");
      kk_line(&k, "%s = arith.andi %s, %s : i1", kk_fresh(&k, f2), first, c);
      snprintf(first, sizeof first, "%s", f2);
    }
  kk_line(&k, "%s = arith.select %s, %s, %s : %s", kk_fresh(&k, base), first, init, old, rcty);
  const char *op = kk_reduce_op(e->prim, rt); /* maximumf/minimumf propagate NaN elementwise */
  const char *fm = !strcmp(op, "addf") || !strcmp(op, "mulf") ? " fastmath<reassoc>" : "";
  kk_line(&k, "%s = arith.%s %s, %s%s : %s", kk_fresh(&k, nv), op, base, val, fm, rcty);
  int out_arg = kk_arg_index(&k, st->root);
  if (k.failed) {
    free(k.args);
    for (int i = 0; i < k.nmemo; i++) free(k.memo[i].key);
    free(k.memo);
    kl_str_free(&body);
    return -1;
  }
  kk_store_value(&k, rt, nv, out_arg, oa, kept, nkept);

  emit_prologue(out, pg, name, k.args, k.nargs);
  for (int i = 0; i < depth; i++) {
    char iv[24], n[24];
    snprintf(iv, sizeof iv, "%%i%d", i);
    snprintf(n, sizeof n, "%%n%d", i);
    kl_str_printf(out, "    %%n%d = arith.constant %lld : index\n", i, (long long)space->dims[i]);
  }
  for (int i = 0; i < depth; i++) {
    char iv[24], n[24];
    snprintf(iv, sizeof iv, "%%i%d", i);
    snprintf(n, sizeof n, "%%n%d", i);
    open_loop(out, 2 + i, iv, i == 0 ? "%lo" : "%c0", i == 0 ? "%hi" : n);
  }
  kk_append_text(out, &body);
  for (int i = depth - 1; i >= 0; i--) kl_str_printf(out, "%*s}\n", 4 + 2 * i, "");
  kl_str_append(out, "    return\n  }\n");
  if (out->failed || k.failed) {
    kk_nomem(&k);
    free(k.args);
    for (int i = 0; i < k.nmemo; i++) free(k.memo[i].key);
    free(k.memo);
    kl_str_free(&body);
    return -1;
  }
  info->args = k.args;
  info->nargs = k.nargs;
  for (int i = 0; i < k.nmemo; i++) free(k.memo[i].key);
  free(k.memo);
  kl_str_free(&body);
  return 0;
}
