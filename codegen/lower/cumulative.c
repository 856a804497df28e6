/* cumulative.c: lowering of cumsum/cumprod/cummax/cummin: library steps (a host scan on the CPU,
 * a scan kernel on the GPU, whose walk argmax/argmin share). Depends on lower.h only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower.h"

/* ---- cumulative ops ---- */

static void run_cumulative(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *a = &c->avals[0];
  kl_dtype t = a->dtype;
  int64_t outer, n, inner;
  kl_lc_split_axis(a, (int)c->p.cumulative.axis, &outer, &n, &inner);
  int rev = c->p.cumulative.reverse != 0, fl = kl_dtype_is_float(t);
  const void *x = ptrs[0];
  void *y = ptrs[1];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t best = -1;
      double facc = 0;
      int64_t iacc = 0;
      for (int64_t s = 0; s < n; s++) {
        int64_t j = rev ? n - 1 - s : s, at = (o * n + j) * inner + in;
        if (c->prim == KL_P_CUMMAX || c->prim == KL_P_CUMMIN) {
          int better = best < 0;
          if (!better) {
            int r = kl_lc_cmp_elem(t, x, at, best);
            better = c->prim == KL_P_CUMMAX ? r > 0 : r < 0;
            if (fl && isnan(kl_lc_ldf(t, x, best))) better = 0; /* NaN sticks */
            if (fl && isnan(kl_lc_ldf(t, x, at))) better = 1;
          }
          if (better) best = at;
          if (fl) kl_lc_stf(t, y, at, kl_lc_ldf(t, x, best));
          else kl_lc_sti(t, y, at, kl_lc_ldi(t, x, best));
          continue;
        }
        if (fl) {
          double v = kl_lc_ldf(t, x, at);
          facc = s == 0 ? v : (c->prim == KL_P_CUMSUM ? facc + v : facc * v);
          kl_lc_stf(t, y, at, facc);
          facc = kl_lc_ldf(t, y, at); /* round to storage precision */
        } else {
          int64_t v = kl_lc_ldi(t, x, at);
          iacc = s == 0 ? v : (c->prim == KL_P_CUMSUM ? (int64_t)((uint64_t)iacc + (uint64_t)v) : (int64_t)((uint64_t)iacc * (uint64_t)v));
          kl_lc_sti(t, y, at, iacc);
          iacc = kl_lc_ldi(t, y, at);
        }
      }
    }
}

static int cpu_cumulative(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  (void)err, (void)errlen;
  run_cumulative(c, ptrs);
  return 0;
}

/* ---- GPU kernels: one thread per column (o, in) walks the axis in order, as the host routine
 * does (the first NaN wins and sticks); argmax/argmin (reduce.c) walk the same way ---- */

int kl_gpu_axis_walk(kg_move *m, int axis, int rev, int arg, const char *arith, int maxlike) {
  const kl_libcall *c = m->c;
  const kl_aval *x = &c->avals[0];
  kctx *k = &m->k;
  const kg_arg *args = m->args;
  const char *st = m->st;
  kl_dtype t = x->dtype;
  int fl = kl_dtype_is_float(t), un = kl_dtype_kind(t) != KL_KIND_INT && !fl;
  int64_t outer, n, inner;
  kl_lc_split_axis(x, axis, &outer, &n, &inner);
  int ok = n <= KL_GPU_MOVE_MAX_UPDATES && (fl ? t == KL_F32 || t == KL_F64 : 1) && (arg || t != KL_BOOL) && n > 0;
  if (!ok) return 0;
  kg_grid_loop(k, outer * inner, "%col");
  ssa ob, in, base, cn, first, v0, nan0, cinner;
  kg_index_op(k, "divui", "%col", inner, ob);
  kg_index_op(k, "remui", "%col", inner, in);
  kg_index_op(k, "muli", ob, n * inner, base);
  kg_update(k, "addi", base, in, "index");
  kk_const_index(k, inner, cinner);
  kk_const_index(k, n, cn);
  if (rev) kg_index_op(k, "addi", base, (n - 1) * inner, first);
  else snprintf(first, sizeof first, "%s", base);
  kk_line(k, "%s = memref.load %%m0[%s] : memref<%lldx%s>", kk_fresh(k, v0), first, (long long)args[0].dims[0], st);
  if (fl) kk_line(k, "%s = arith.cmpf uno, %s, %s : %s", kk_fresh(k, nan0), v0, v0, st);
  else kk_line(k, "%s = arith.constant false", kk_fresh(k, nan0));
  if (!arg) kk_line(k, "memref.store %s, %%m1[%s] : memref<%lldx%s>", v0, first, (long long)args[1].dims[0], st);
  /* loop state: best index (arg), accumulated value, done (arg: a NaN was taken) */
  kk_line(k, "%%bi, %%bv, %%dn = scf.for %%j = %%c1 to %s step %%c1 iter_args(%%pi = %%c0, %%pv = %s, %%pd = %s) -> (index, %s, i1) {",
          cn, v0, nan0, st);
  k->ind = "          ";
  ssa at, v, res;
  if (rev) {
    ssa s1, s2;
    kk_line(k, "%s = arith.subi %s, %%j : index", kk_fresh(k, s1), cn);
    kg_index_op(k, "subi", s1, 1, s1);
    kk_line(k, "%s = arith.muli %s, %s : index", kk_fresh(k, s2), s1, cinner);
    kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, at), base, s2);
  } else {
    ssa s2;
    kk_line(k, "%s = arith.muli %%j, %s : index", kk_fresh(k, s2), cinner);
    kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, at), base, s2);
  }
  kk_line(k, "%s = memref.load %%m0[%s] : memref<%lldx%s>", kk_fresh(k, v), at, (long long)args[0].dims[0], st);
  if (arith) {
    kk_line(k, "%s = arith.%s%s %%pv, %s : %s", kk_fresh(k, res), arith, fl ? "f" : "i", v, st);
    kk_line(k, "memref.store %s, %%m1[%s] : memref<%lldx%s>", res, at, (long long)args[1].dims[0], st);
    kk_line(k, "scf.yield %%j, %s, %%pd : index, %s, i1", res, st);
  } else {
    ssa vnan, better, nd, take_nan, cand, upd, bi, bv, dn, t1;
    if (fl) {
      kk_line(k, "%s = arith.cmpf uno, %s, %s : %s", kk_fresh(k, vnan), v, v, st);
      kk_line(k, "%s = arith.cmpf %s, %s, %%pv : %s", kk_fresh(k, better), maxlike ? "ogt" : "olt", v, st);
    } else {
      kk_line(k, "%s = arith.constant false", kk_fresh(k, vnan));
      kk_line(k, "%s = arith.cmpi %s, %s, %%pv : %s", kk_fresh(k, better),
              maxlike ? (un ? "ugt" : "sgt") : (un ? "ult" : "slt"), v, st);
    }
    /* a NaN already held sticks; a new NaN is taken; otherwise strictly better wins */
    kk_line(k, "%s = arith.constant true", kk_fresh(k, t1));
    kk_line(k, "%s = arith.xori %%pd, %s : i1", kk_fresh(k, nd), t1);
    kk_line(k, "%s = arith.andi %s, %s : i1", kk_fresh(k, take_nan), nd, vnan);
    kk_line(k, "%s = arith.andi %s, %s : i1", kk_fresh(k, cand), nd, better);
    kk_line(k, "%s = arith.ori %s, %s : i1", kk_fresh(k, upd), take_nan, cand);
    kk_line(k, "%s = arith.select %s, %%j, %%pi : index", kk_fresh(k, bi), upd);
    kk_line(k, "%s = arith.select %s, %s, %%pv : %s", kk_fresh(k, bv), upd, v, st);
    kk_line(k, "%s = arith.ori %%pd, %s : i1", kk_fresh(k, dn), take_nan);
    if (!arg) kk_line(k, "memref.store %s, %%m1[%s] : memref<%lldx%s>", bv, at, (long long)args[1].dims[0], st);
    kk_line(k, "scf.yield %s, %s, %s : index, %s, i1", bi, bv, dn, st);
  }
  k->ind = "        ";
  kk_line(k, "}");
  if (arg) {
    ssa r;
    const char *it = args[1].storage;
    kk_line(k, "%s = arith.index_cast %%bi : index to %s", kk_fresh(k, r), it);
    kk_line(k, "memref.store %s, %%m1[%%col] : memref<%lldx%s>", r, (long long)args[1].dims[0], it);
  }
  kg_close_loop(k);
  kg_finish(m, outer * inner);
  return 1;
}

static int gpu_cumulative(kg_move *m) {
  kl_prim p = m->c->prim;
  const char *arith = p == KL_P_CUMSUM ? "add" : p == KL_P_CUMPROD ? "mul" : NULL;
  return kl_gpu_axis_walk(m, (int)m->c->p.cumulative.axis, m->c->p.cumulative.reverse != 0, 0, arith, p == KL_P_CUMMAX);
}

const kl_lowering kl_lower_cumulative[] = {
    {KL_P_CUMSUM, .fuses = 0, .cpu_lib = cpu_cumulative, .gpu_kernel = gpu_cumulative},
    {KL_P_CUMPROD, .fuses = 0, .cpu_lib = cpu_cumulative, .gpu_kernel = gpu_cumulative},
    {KL_P_CUMMAX, .fuses = 0, .cpu_lib = cpu_cumulative, .gpu_kernel = gpu_cumulative},
    {KL_P_CUMMIN, .fuses = 0, .cpu_lib = cpu_cumulative, .gpu_kernel = gpu_cumulative},
};
const int kl_lower_cumulative_n = sizeof kl_lower_cumulative / sizeof *kl_lower_cumulative;
