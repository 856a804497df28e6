/* cumulative.c: lowering of cumsum/cumprod/cummax/cummin: library steps (a host scan on the CPU,
 * a scan kernel on the GPU). Depends on lower.h only. */
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

const kl_lowering kl_lower_cumulative[] = {
    {KL_P_CUMSUM, .fuses = 0, .cpu_lib = cpu_cumulative, .gpu_kernel = 1},
    {KL_P_CUMPROD, .fuses = 0, .cpu_lib = cpu_cumulative, .gpu_kernel = 1},
    {KL_P_CUMMAX, .fuses = 0, .cpu_lib = cpu_cumulative, .gpu_kernel = 1},
    {KL_P_CUMMIN, .fuses = 0, .cpu_lib = cpu_cumulative, .gpu_kernel = 1},
};
const int kl_lower_cumulative_n = sizeof kl_lower_cumulative / sizeof *kl_lower_cumulative;
