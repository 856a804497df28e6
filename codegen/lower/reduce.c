/* reduce.c: lowering of the reduce family: reduce_<op> over axes runs in the kernel drivers'
 * loops (CPU and GPU) from the op and identity below; argmax/argmin are library steps.
 * Depends on lower.h only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower.h"

/* ---- argmax / argmin over one axis ---- */

static void run_argminmax(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *a = &c->avals[0];
  kl_dtype t = a->dtype;
  int64_t outer, n, inner;
  kl_lc_split_axis(a, (int)c->p.arg.axes.v[0], &outer, &n, &inner);
  kl_dtype it = c->avals[1].dtype;
  int mx = c->prim == KL_P_ARGMAX, fl = kl_dtype_is_float(t);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t best = 0, base = o * n * inner + in;
      for (int64_t j = 1; j < n; j++) {
        int64_t at = base + j * inner, bt = base + best * inner;
        if (fl && isnan(kl_lc_ldf(t, ptrs[0], bt))) break; /* first NaN wins */
        if (fl && isnan(kl_lc_ldf(t, ptrs[0], at))) { best = j; break; }
        int r = kl_lc_cmp_elem(t, ptrs[0], at, bt);
        if (fl && kl_lc_ldf(t, ptrs[0], at) == kl_lc_ldf(t, ptrs[0], bt)) r = 0; /* -0 == +0 */
        if (mx ? r > 0 : r < 0) best = j;
      }
      kl_lc_sti(it, ptrs[1], o * inner + in, best);
    }
}

static int cpu_argminmax(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  (void)err, (void)errlen;
  run_argminmax(c, ptrs);
  return 0;
}

/* On the GPU: the scans' walk along the axis (cumulative.c), keeping only the index. */
static int gpu_argminmax(kg_move *m) {
  return kl_gpu_axis_walk(m, (int)m->c->p.arg.axes.v[0], 0, 1, NULL, m->c->prim == KL_P_ARGMAX);
}

/* The host's combine of partial results (full reductions on several threads): ints wrap; float
 * max/min propagate NaN. */
static double fsum(double a, double v) { return a + v; }
static double fprod(double a, double v) { return a * v; }
static double fmax_nan(double a, double v) { return (isnan(a) || isnan(v)) ? NAN : (v > a ? v : a); }
static double fmin_nan(double a, double v) { return (isnan(a) || isnan(v)) ? NAN : (v < a ? v : a); }
static int lt(int64_t a, int64_t v, int un) { return un ? (uint64_t)v < (uint64_t)a : v < a; }
static int64_t isum(int64_t a, int64_t v, int un) { return (void)un, (int64_t)((uint64_t)a + (uint64_t)v); }
static int64_t iprod(int64_t a, int64_t v, int un) { return (void)un, (int64_t)((uint64_t)a * (uint64_t)v); }
static int64_t imax(int64_t a, int64_t v, int un) { return lt(a, v, un) ? a : v; }
static int64_t imin(int64_t a, int64_t v, int un) { return lt(a, v, un) ? v : a; }
static int64_t iand(int64_t a, int64_t v, int un) { return (void)un, a & v; }
static int64_t ior(int64_t a, int64_t v, int un) { return (void)un, a | v; }

static const kl_reduce_rule rsum = {"addf", "addi", "addi", "addi", 0, 0, 0, 0, .wide = 1, .host_f = fsum, .host_i = isum};
static const kl_reduce_rule rprod = {"mulf", "muli", "muli", "muli", 1, 1, 1, 1, .host_f = fprod, .host_i = iprod};
static const kl_reduce_rule rmax = {"maximumf", "maxsi", "maxui", "ori", -INFINITY, KL_RINIT_TYPE_MIN, 0, 0,
                                    .nan_op = "maxnumf", .nan_cmp = "ugt", .host_f = fmax_nan, .host_i = imax};
static const kl_reduce_rule rmin = {"minimumf", "minsi", "minui", "andi", INFINITY, KL_RINIT_TYPE_MAX, -1, 1,
                                    .nan_op = "minnumf", .nan_cmp = "ult", .host_f = fmin_nan, .host_i = imin};
static const kl_reduce_rule rand_ = {"andi", "andi", "andi", "andi", 0, -1, -1, 1, .host_i = iand};
static const kl_reduce_rule ror = {"ori", "ori", "ori", "ori", 0, 0, 0, 0, .host_i = ior};

const kl_lowering kl_lower_reduce[] = {
    {KL_P_REDUCE_SUM, .fuses = 1, .reduce = &rsum},
    {KL_P_REDUCE_PROD, .fuses = 1, .reduce = &rprod},
    {KL_P_REDUCE_MAX, .fuses = 1, .reduce = &rmax},
    {KL_P_REDUCE_MIN, .fuses = 1, .reduce = &rmin},
    {KL_P_REDUCE_AND, .fuses = 1, .reduce = &rand_},
    {KL_P_REDUCE_OR, .fuses = 1, .reduce = &ror},
    {KL_P_ARGMAX, .fuses = 0, .cpu_lib = cpu_argminmax, .gpu_kernel = gpu_argminmax},
    {KL_P_ARGMIN, .fuses = 0, .cpu_lib = cpu_argminmax, .gpu_kernel = gpu_argminmax},
};
const int kl_lower_reduce_n = sizeof kl_lower_reduce / sizeof *kl_lower_reduce;
