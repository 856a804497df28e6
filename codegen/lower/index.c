/* index.c: lowering of the index family (dynamic_slice, dynamic_update_slice, take, scatter):
 * library steps (host loops on the CPU, gather/scatter kernels on the GPU).
 * Depends on lower.h only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower.h"

/* ---- data movement: take, scatter, dynamic slices ---- */

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void run_take(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *x = &c->avals[0], *ix = &c->avals[1];
  int64_t outer, n, inner, m = kl_aval_size(ix);
  kl_lc_split_axis(x, (int)c->p.take.axis, &outer, &n, &inner);
  size_t es = kl_dtype_size(x->dtype), row = es * (size_t)inner;
  const char *src = ptrs[0];
  char *dst = ptrs[2];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < m; j++) {
      int64_t k = clamp64(kl_lc_ldi(ix->dtype, ptrs[1], j), 0, n - 1);
      if (kl_lc_is_uns(ix->dtype) && (uint64_t)kl_lc_ldi(ix->dtype, ptrs[1], j) >= (uint64_t)n) k = n - 1;
      memcpy(dst + (size_t)(o * m + j) * row, src + (size_t)(o * n + k) * row, row);
    }
}

static void combine_at(kl_dtype t, int op, void *dst, int64_t di, const void *src, int64_t si) {
  if (op == KL_SCATTER_SET) {
    size_t es = kl_dtype_size(t);
    memcpy((char *)dst + (size_t)di * es, (const char *)src + (size_t)si * es, es);
    return;
  }
  if (kl_dtype_is_float(t)) {
    double a = kl_lc_ldf(t, dst, di), b = kl_lc_ldf(t, src, si), r;
    switch (op) {
    case KL_SCATTER_ADD: r = a + b; break;
    case KL_SCATTER_MUL: r = a * b; break;
    case KL_SCATTER_MIN: r = (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b); break;
    default: r = (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b); break;
    }
    kl_lc_stf(t, dst, di, r);
    return;
  }
  int64_t a = kl_lc_ldi(t, dst, di), b = kl_lc_ldi(t, src, si), r;
  int lt = kl_lc_is_uns(t) ? (uint64_t)a < (uint64_t)b : a < b;
  switch (op) {
  case KL_SCATTER_ADD: r = (int64_t)((uint64_t)a + (uint64_t)b); break;
  case KL_SCATTER_MUL: r = (int64_t)((uint64_t)a * (uint64_t)b); break;
  case KL_SCATTER_MIN: r = lt ? a : b; break;
  default: r = lt ? b : a; break;
  }
  if (t == KL_BOOL && op == KL_SCATTER_ADD) r = a || b;
  if (t == KL_BOOL && op == KL_SCATTER_MUL) r = a && b;
  kl_lc_sti(t, dst, di, r);
}

static void run_scatter(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *x = &c->avals[0], *ix = &c->avals[1];
  int64_t outer, n, inner, m = kl_aval_size(ix);
  kl_lc_split_axis(x, (int)c->p.scatter.axis, &outer, &n, &inner);
  size_t es = kl_dtype_size(x->dtype);
  if (ptrs[3] != ptrs[0]) memcpy(ptrs[3], ptrs[0], es * (size_t)kl_aval_size(x)); /* else in place */
  if (c->p.scatter.op == KL_SCATTER_SET && outer == 1) { /* rows set whole (x.at[i].set(v) in a loop) */
    for (int64_t j = 0; j < m; j++) {
      int64_t k = kl_lc_ldi(ix->dtype, ptrs[1], j);
      if (k < 0 || k >= n || (kl_lc_is_uns(ix->dtype) && (uint64_t)k >= (uint64_t)n)) continue; /* dropped */
      memcpy((char *)ptrs[3] + (size_t)(k * inner) * es, (const char *)ptrs[2] + (size_t)(j * inner) * es, (size_t)inner * es);
    }
    return;
  }
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < m; j++) {
      int64_t k = kl_lc_ldi(ix->dtype, ptrs[1], j);
      if (k < 0 || k >= n || (kl_lc_is_uns(ix->dtype) && (uint64_t)k >= (uint64_t)n)) continue; /* dropped */
      for (int64_t in = 0; in < inner; in++)
        combine_at(x->dtype, c->p.scatter.op, ptrs[3], (o * n + k) * inner + in, ptrs[2], (o * m + j) * inner + in);
    }
}

/* Copies the box of `box` extents between an array of shape dims at offset start (array
 * side) and a dense box; to_box selects the direction. */
static void copy_box(size_t es, int nd, const int64_t *dims, const int64_t *start, const int64_t *box, char *arr,
                     char *dense, int to_box) {
  int64_t total = 1;
  for (int i = 0; i < nd; i++) total *= box[i];
  if (total == 0) return;
  int64_t rowlen = nd ? box[nd - 1] : 1;
  int64_t idx[KL_MAX_RANK] = {0};
  for (int64_t r = 0; r < total / rowlen; r++) {
    int64_t off = 0;
    for (int i = 0; i < nd; i++) off = off * dims[i] + (start[i] + idx[i]);
    char *ap = arr + (size_t)off * es, *dp = dense + (size_t)(r * rowlen) * es;
    if (to_box) memcpy(dp, ap, es * (size_t)rowlen);
    else memcpy(ap, dp, es * (size_t)rowlen);
    for (int i = nd - 2; i >= 0; i--) {
      if (++idx[i] < box[i]) break;
      idx[i] = 0;
    }
  }
}

static void run_dynamic_slice(const kl_libcall *c, void *const *ptrs, int update) {
  const kl_aval *x = &c->avals[0];
  int nd = x->ndim, first = update ? 2 : 1;
  int64_t start[KL_MAX_RANK], box[KL_MAX_RANK];
  size_t es = kl_dtype_size(x->dtype);
  for (int i = 0; i < nd; i++) {
    box[i] = update ? c->avals[1].dims[i] : c->p.dynamic_slice.slice_sizes.v[i];
    const kl_aval *ia = &c->avals[first + i];
    start[i] = clamp64(kl_lc_ldi(ia->dtype, ptrs[first + i], 0), 0, x->dims[i] - box[i]);
  }
  void *out = ptrs[c->nin];
  if (update) {
    if (out != ptrs[0]) memcpy(out, ptrs[0], es * (size_t)kl_aval_size(x)); /* else in place */
    copy_box(es, nd, x->dims, start, box, out, ptrs[1], 0);
  } else {
    copy_box(es, nd, x->dims, start, box, ptrs[0], out, 1);
  }
}

static int cpu_take(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  (void)err, (void)errlen;
  run_take(c, ptrs);
  return 0;
}

static int cpu_scatter(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  (void)err, (void)errlen;
  run_scatter(c, ptrs);
  return 0;
}

static int cpu_dynamic_slice(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  (void)err, (void)errlen;
  run_dynamic_slice(c, ptrs, c->prim == KL_P_DYNAMIC_UPDATE_SLICE);
  return 0;
}

/* ---- GPU kernels: one thread per output element (gathers, dynamic slices), one per column of
 * the result walking the updates in order (scatters: the last SET wins, as on the CPU) ---- */

/* out[o, j, in] = x[o, clamp(idx[j]), in] */
static int gpu_take(kg_move *mv) {
  const kl_libcall *c = mv->c;
  const kl_aval *x = &c->avals[0], *o = &c->avals[c->nin];
  kctx *k = &mv->k;
  const kg_arg *args = mv->args;
  const char *st = mv->st;
  int oi = mv->oi;
  ssa v;
  int64_t outer, n, inner;
  kl_lc_split_axis(x, (int)c->p.take.axis, &outer, &n, &inner);
  int64_t m = kl_aval_size(&c->avals[1]);
  ssa in, q, j, ob, kk, kc, r, src;
  kg_grid_loop(k, kl_aval_size(o), "%e");
  kg_index_op(k, "remui", "%e", inner, in);
  kg_index_op(k, "divui", "%e", inner, q);
  kg_index_op(k, "remui", q, m, j);
  kg_index_op(k, "divui", q, m, ob);
  kg_load_index64(k, 1, j, &args[1], c->avals[1].dtype, kk);
  kg_clamp_index(k, kk, c->avals[1].dtype, n - 1, kc);
  kg_index_op(k, "muli", ob, n, r);
  kg_update(k, "addi", r, kc, "index");
  kg_index_op(k, "muli", r, inner, src);
  kg_update(k, "addi", src, in, "index");
  kk_line(k, "%s = memref.load %%m0[%s] : memref<%lldx%s>", kk_fresh(k, v), src, (long long)args[0].dims[0], st);
  kk_line(k, "memref.store %s, %%m%d[%%e] : memref<%lldx%s>", v, oi, (long long)args[oi].dims[0], st);
  kg_close_loop(k);
  kg_finish(mv, kl_aval_size(o));
  return 1;
}

/* The clamped starts of a dynamic slice or update (operands first.. of c), so that the box fits. */
static void load_starts(kctx *k, const kl_libcall *c, const kg_arg *args, int first, const int64_t *box, ssa *start) {
  const kl_aval *x = &c->avals[0];
  for (int i = 0; i < x->ndim; i++) {
    ssa s;
    kg_load_index64(k, first + i, "%c0", &args[first + i], c->avals[first + i].dtype, s);
    kg_clamp_index(k, s, c->avals[first + i].dtype, x->dims[i] - box[i], start[i]);
  }
}

/* idx[0..nd) = the row-major position of linear index `e` in an array of dims. */
static void delinearize(kctx *k, const char *e, const int64_t *dims, int nd, ssa *idx) {
  ssa rest;
  snprintf(rest, sizeof rest, "%s", e);
  for (int i = nd - 1; i >= 0; i--) {
    if (i > 0) {
      kg_index_op(k, "remui", rest, dims[i], idx[i]);
      kg_index_op(k, "divui", rest, dims[i], rest);
    } else
      snprintf(idx[i], sizeof idx[i], "%s", rest);
  }
}

/* out = the linear index of start + idx in an array of dims. */
static void shifted_index(kctx *k, const int64_t *dims, int nd, ssa *idx, ssa *start, char *out) {
  kk_const_index(k, 0, out);
  for (int i = 0; i < nd; i++) {
    ssa a;
    kg_index_op(k, "muli", out, dims[i], out);
    kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, a), idx[i], start[i]);
    kg_update(k, "addi", out, a, "index");
  }
}

/* Starts clamp so that the box fits, as lax does. */
static int gpu_dynamic_slice(kg_move *mv) {
  const kl_libcall *c = mv->c;
  const kl_aval *x = &c->avals[0], *o = &c->avals[c->nin];
  kctx *k = &mv->k;
  const kg_arg *args = mv->args;
  const char *st = mv->st;
  int oi = mv->oi;
  ssa v;
  int upd = c->prim == KL_P_DYNAMIC_UPDATE_SLICE, first = upd ? 2 : 1, nd = x->ndim;
  int64_t box[KL_MAX_RANK];
  for (int i = 0; i < nd; i++) box[i] = upd ? c->avals[1].dims[i] : c->p.dynamic_slice.slice_sizes.v[i];
  ssa start[KL_MAX_RANK];
  load_starts(k, c, args, first, box, start);
  kg_grid_loop(k, kl_aval_size(o), "%e");
  ssa idx[KL_MAX_RANK];
  delinearize(k, "%e", upd ? x->dims : box, nd, idx); /* over the output's dims */
  if (!upd) { /* out[idx] = x[start + idx] */
    ssa src;
    shifted_index(k, x->dims, nd, idx, start, src);
    kk_line(k, "%s = memref.load %%m0[%s] : memref<%lldx%s>", kk_fresh(k, v), src, (long long)args[0].dims[0], st);
  } else { /* out[idx] = inside the box ? update[idx - start] : x[idx] */
    ssa inside, us;
    kk_line(k, "%s = arith.constant true", kk_fresh(k, inside));
    kk_const_index(k, 0, us);
    for (int i = 0; i < nd; i++) {
      ssa d, ge, lt, both, t;
      kk_line(k, "%s = arith.subi %s, %s : index", kk_fresh(k, d), idx[i], start[i]);
      kk_line(k, "%s = arith.cmpi sge, %s, %%c0 : index", kk_fresh(k, ge), d);
      kg_index_op(k, "cmpi slt,", d, box[i], lt);
      kk_line(k, "%s = arith.andi %s, %s : i1", kk_fresh(k, both), ge, lt);
      kg_update(k, "andi", inside, both, "i1");
      kg_index_op(k, "muli", us, box[i], t);
      kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, us), t, d);
    }
    kk_line(k, "%s = scf.if %s -> (%s) {", kk_fresh(k, v), inside, st);
    ssa a, b;
    kk_line(k, "  %s = memref.load %%m1[%s] : memref<%lldx%s>", kk_fresh(k, a), us, (long long)args[1].dims[0], st);
    kk_line(k, "  scf.yield %s : %s", a, st);
    kk_line(k, "} else {");
    kk_line(k, "  %s = memref.load %%m0[%%e] : memref<%lldx%s>", kk_fresh(k, b), (long long)args[0].dims[0], st);
    kk_line(k, "  scf.yield %s : %s", b, st);
    kk_line(k, "}");
  }
  kk_line(k, "memref.store %s, %%m%d[%%e] : memref<%lldx%s>", v, oi, (long long)args[oi].dims[0], st);
  kg_close_loop(k);
  kg_finish(mv, kl_aval_size(o));
  if (!upd) return 1;
  /* the update in place (name_s, instead of the above when out is x's buffer): one thread per
   * element of the box, out[start + idx] = update[idx] */
  int64_t nbox = kl_aval_size(&c->avals[1]);
  if (!nbox) return 1;
  load_starts(k, c, args, first, box, start); /* this kernel's own SSA values */
  kg_grid_loop(k, nbox, "%e");
  delinearize(k, "%e", box, nd, idx);
  ssa dst, u;
  shifted_index(k, x->dims, nd, idx, start, dst);
  kk_line(k, "%s = memref.load %%m1[%%e] : memref<%lldx%s>", kk_fresh(k, u), (long long)args[1].dims[0], st);
  kk_line(k, "memref.store %s, %%m%d[%s] : memref<%lldx%s>", u, oi, dst, (long long)args[oi].dims[0], st);
  kg_close_loop(k);
  kg_finish(mv, nbox);
  mv->in_place = KL_GPU_IN_PLACE_SECOND;
  return 2;
}

/* Kernel 1 copies x; kernel 2 applies the updates. */
static int gpu_scatter(kg_move *mv) {
  const kl_libcall *c = mv->c;
  const kl_aval *x = &c->avals[0], *o = &c->avals[c->nin];
  kctx *k = &mv->k;
  const kg_arg *args = mv->args;
  const char *st = mv->st;
  int oi = mv->oi;
  ssa v;
  int64_t outer, n, inner;
  kl_lc_split_axis(x, (int)c->p.scatter.axis, &outer, &n, &inner);
  int64_t m = kl_aval_size(&c->avals[1]);
  int op = c->p.scatter.op;
  kl_dtype t = x->dtype;
  static const kl_prim as_reduce[] = {KL_P_REDUCE_SUM, KL_P_REDUCE_SUM, KL_P_REDUCE_PROD, KL_P_REDUCE_MIN, KL_P_REDUCE_MAX};
  /* additions of 32/64-bit numbers: one thread per update, atomic adds (any order, as on JAX's
   * GPUs), when there are many updates, or when few columns would leave a thread per column
   * walking them all (an embedding's gradient: 128 columns of 512 updates each) */
  int atomic = op == KL_SCATTER_ADD && (m > KL_GPU_MOVE_ATOMIC_MIN || (m >= 8 && outer * inner < 16384)) &&
               (t == KL_F32 || t == KL_F64 || t == KL_I32 || t == KL_I64 || t == KL_U32 || t == KL_U64);
  if ((m > KL_GPU_MOVE_MAX_UPDATES && !atomic) || op < 0 || op > KL_SCATTER_MAX ||
      (op != KL_SCATTER_SET && (t == KL_BOOL || strcmp(st, kl_compute_type(t)))))
    return 0;
  /* kernel 1 (name): out = x; nothing to do when out is x's buffer */
  mv->in_place = KL_GPU_IN_PLACE_SKIP_FIRST;
  kg_grid_loop(k, kl_aval_size(x), "%e");
  kk_line(k, "%s = memref.load %%m0[%%e] : memref<%lldx%s>", kk_fresh(k, v), (long long)args[0].dims[0], st);
  kk_line(k, "memref.store %s, %%m%d[%%e] : memref<%lldx%s>", v, oi, (long long)args[oi].dims[0], st);
  kg_close_loop(k);
  kg_finish(mv, kl_aval_size(o));
  if (atomic) { /* kernel 2 (name_s): out[o, idx[j], in] += upd[o, j, in] for every update */
    ssa in, q, j, ob, k64, n64, ok, kk, pos, u, old;
    kg_grid_loop(k, outer * m * inner, "%e");
    kg_index_op(k, "remui", "%e", inner, in);
    kg_index_op(k, "divui", "%e", inner, q);
    kg_index_op(k, "remui", q, m, j);
    kg_index_op(k, "divui", q, m, ob);
    kg_load_index64(k, 1, j, &args[1], c->avals[1].dtype, k64);
    kk_line(k, "%s = arith.constant %lld : i64", kk_fresh(k, n64), (long long)n);
    kk_line(k, "%s = arith.cmpi ult, %s, %s : i64", kk_fresh(k, ok), k64, n64);
    kk_line(k, "scf.if %s {", ok);
    k->ind = "          ";
    kk_line(k, "%s = arith.index_cast %s : i64 to index", kk_fresh(k, kk), k64);
    kg_index_op(k, "muli", ob, n, pos);
    kg_update(k, "addi", pos, kk, "index");
    kg_index_op(k, "muli", pos, inner, pos);
    kg_update(k, "addi", pos, in, "index");
    kk_line(k, "%s = memref.load %%m2[%%e] : memref<%lldx%s>", kk_fresh(k, u), (long long)args[2].dims[0], st);
    kk_line(k, "%s = memref.atomic_rmw %s %s, %%m%d[%s] : (%s, memref<%lldx%s>) -> %s", kk_fresh(k, old),
            kl_dtype_is_float(t) ? "addf" : "addi", u, oi, pos, st, (long long)args[oi].dims[0], st, st);
    k->ind = "        ";
    kk_line(k, "}");
  } else { /* kernel 2 (name_s): one thread per column (o, in) applies the updates j = 0..m in order */
    kg_grid_loop(k, outer * inner, "%col");
    ssa ob, in, base, ub;
    kg_index_op(k, "divui", "%col", inner, ob);
    kg_index_op(k, "remui", "%col", inner, in);
    kg_index_op(k, "muli", ob, n * inner, base);
    kg_update(k, "addi", base, in, "index");
    kg_index_op(k, "muli", ob, m * inner, ub);
    kg_update(k, "addi", ub, in, "index");
    ssa cm;
    kk_const_index(k, m, cm);
    kk_line(k, "scf.for %%j = %%c0 to %s step %%c1 {", cm);
    k->ind = "          ";
    ssa k64, n64, ok, kk, pos, up, u;
    kg_load_index64(k, 1, "%j", &args[1], c->avals[1].dtype, k64);
    kk_line(k, "%s = arith.constant %lld : i64", kk_fresh(k, n64), (long long)n);
    kk_line(k, "%s = arith.cmpi ult, %s, %s : i64", kk_fresh(k, ok), k64, n64); /* negative: huge unsigned */
    kk_line(k, "scf.if %s {", ok);
    k->ind = "            ";
    kk_line(k, "%s = arith.index_cast %s : i64 to index", kk_fresh(k, kk), k64);
    kg_index_op(k, "muli", kk, inner, pos);
    kg_update(k, "addi", pos, base, "index");
    kg_index_op(k, "muli", "%j", inner, up);
    kg_update(k, "addi", up, ub, "index");
    kk_line(k, "%s = memref.load %%m2[%s] : memref<%lldx%s>", kk_fresh(k, u), up, (long long)args[2].dims[0], st);
    if (op != KL_SCATTER_SET) {
      ssa a, r;
      kk_line(k, "%s = memref.load %%m%d[%s] : memref<%lldx%s>", kk_fresh(k, a), oi, pos, (long long)args[oi].dims[0], st);
      kg_combine(k, as_reduce[op], t, st, a, u, r);
      snprintf(u, sizeof u, "%s", r);
    }
    kk_line(k, "memref.store %s, %%m%d[%s] : memref<%lldx%s>", u, oi, pos, (long long)args[oi].dims[0], st);
    k->ind = "          ";
    kk_line(k, "}");
    k->ind = "        ";
    kk_line(k, "}");
  }
  kg_close_loop(k);
  kg_finish(mv, atomic ? outer * m * inner : outer * inner);
  return 2;
}

const kl_lowering kl_lower_index[] = {
    {KL_P_DYNAMIC_SLICE, .fuses = 0, .cpu_lib = cpu_dynamic_slice, .gpu_kernel = gpu_dynamic_slice},
    {KL_P_DYNAMIC_UPDATE_SLICE, .fuses = 0, .cpu_lib = cpu_dynamic_slice, .gpu_kernel = gpu_dynamic_slice, .updates = 1},
    {KL_P_TAKE, .fuses = 0, .cpu_lib = cpu_take, .gpu_kernel = gpu_take},
    {KL_P_SCATTER, .fuses = 0, .cpu_lib = cpu_scatter, .gpu_kernel = gpu_scatter, .updates = 1},
};
const int kl_lower_index_n = sizeof kl_lower_index / sizeof *kl_lower_index;
