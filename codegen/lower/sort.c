/* sort.c: lowering of sort: a library step, a stable merge sort on the host, or on the GPU
 * runtime/gpusort.c's radix sort kernels (kl_lower_sort_layout says how they take a step).
 * Depends on lower.h only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/alloc.h"
#include "../../ir/status.h"
#include "lower.h"

/* ---- sort: stable merge sort of index rows by the key operands ---- */

typedef struct {
  const kl_libcall *c;
  void *const *ptrs;
  int64_t base, inner;
} sort_ctx;

static int sort_less(const sort_ctx *s, int64_t i, int64_t j) {
  for (int k = 0; k < s->c->p.sort.num_keys; k++) {
    int r = kl_lc_cmp_elem(s->c->avals[k].dtype, s->ptrs[k], s->base + i * s->inner, s->base + j * s->inner);
    if (r) return r < 0;
  }
  return 0;
}

static void merge_sort(const sort_ctx *s, int64_t *v, int64_t *tmp, int64_t n) {
  if (n < 2) return;
  int64_t h = n / 2;
  merge_sort(s, v, tmp, h);
  merge_sort(s, v + h, tmp, n - h);
  int64_t i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = sort_less(s, v[j], v[i]) ? v[j++] : v[i++];
  while (i < h) tmp[k++] = v[i++];
  while (j < n) tmp[k++] = v[j++];
  memcpy(v, tmp, sizeof(int64_t) * (size_t)n);
}

static int run_sort(const kl_libcall *c, void *const *ptrs) {
  const kl_aval *a = &c->avals[0];
  int64_t outer, n, inner;
  kl_lc_split_axis(a, (int)c->p.sort.dimension, &outer, &n, &inner);
  int64_t *perm = kl_malloc(sizeof(int64_t) * (size_t)(n ? n : 1) * 2);
  if (!perm) return -1;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      sort_ctx s = {c, ptrs, o * n * inner + in, inner};
      for (int64_t j = 0; j < n; j++) perm[j] = j;
      merge_sort(&s, perm, perm + n, n);
      for (int k = 0; k < c->nin; k++) {
        size_t es = kl_dtype_size(c->avals[k].dtype);
        const char *src = ptrs[k];
        char *dst = ptrs[c->nin + k];
        for (int64_t j = 0; j < n; j++)
          memcpy(dst + (size_t)(s.base + j * inner) * es, src + (size_t)(s.base + perm[j] * inner) * es, es);
      }
    }
  free(perm);
  return 0;
}

static int cpu_sort(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  if (run_sort(c, ptrs)) return kl_error(err, errlen, KL_ERR_NOMEM, "sort: out of memory for the permutation");
  return 0;
}

/* ---- the GPU kernels' view of a step ---- */

int kl_lower_sort_layout(const kl_program *pg, const kl_eqn *e, const kl_libcall *c, kl_gpusort_call *g) {
  memset(g, 0, sizeof *g);
  if (c->nin > KL_GPUSORT_MAX_OPERANDS) return -1;
  int dim = (int)c->p.sort.dimension;
  g->nin = c->nin;
  g->num_keys = (int32_t)c->p.sort.num_keys;
  kl_lc_split_axis(&c->avals[0], dim, &g->outer, &g->n, &g->inner);
  const char *knob = getenv("KILN_GPU_SORT_TILE"); /* an experiment knob: 8 items a thread, not 16 */
  g->tile_items = knob && atoi(knob) == 8 ? 8 : 16;
  const char *lb = getenv("KILN_GPU_SORT_LOOKBACK"); /* an A/B switch: 0 sorts by a histogram and a scan a pass */
  g->scan_passes = lb && *lb == '0';
  const char *rk = getenv("KILN_GPU_SORT_RUNS"); /* an A/B switch: 0 ignores the random-keys hint */
  g->random_keys = c->p.sort.random_keys && !(rk && *rk == '0');
  if (pg && e) { /* whether anything reads the sorted keys */
    int v = e->outs[0], used = 0;
    for (int i = 0; !used && i < pg->noutputs; i++) used = pg->outputs[i] == v;
    for (int q = 0; !used && q < pg->neqns; q++)
      for (int k = 0; !used && k < pg->eqns[q].nin; k++) used = pg->eqns[q].ins[k] == v;
    g->keys_unused = !used;
  }
  for (int k = 0; k < c->nin; k++) {
    g->dtype[k] = (int32_t)c->avals[k].dtype;
    /* an integer iota along the axis (argsort's): its output is the permutation itself */
    int prod = pg && e ? pg->vals[e->ins[k]].producer : -1;
    const kl_eqn *pe = prod >= 0 ? &pg->eqns[prod] : NULL;
    g->iota[k] = pe && pe->prim == KL_P_IOTA && pe->p.iota.dimension == dim && kl_dtype_is_int(c->avals[k].dtype) &&
                 kl_aval_same_shape(&pg->vals[e->ins[k]].aval, &c->avals[0]);
  }
  return kl_gpusort_check(g);
}

const kl_lowering kl_lower_sort[] = {
    {KL_P_SORT, .fuses = 0, .cpu_lib = cpu_sort, .gpu_library = KL_GPU_LIB_SORT},
};
const int kl_lower_sort_n = sizeof kl_lower_sort / sizeof *kl_lower_sort;
