/* table.c: the lowering registry, built once from the families' rows, and the traits fusion
 * reads from it (transforms/ cannot see codegen, so codegen hands them to kl_plan_build).
 * Depends only on codegen/lower/lower.h. */
#include "lower.h"
#include "table.h"

#include <pthread.h>
#include <stdio.h>

static kl_lowering rows[KL_NPRIMS];
static kl_fuse_traits traits[KL_NPRIMS];
static pthread_once_t built = PTHREAD_ONCE_INIT;

static void add_family(const kl_lowering *fam, int n) {
  for (int i = 0; i < n; i++) rows[fam[i].prim] = fam[i];
}

static void build(void) {
  for (int p = 0; p < KL_NPRIMS; p++) rows[p].prim = (kl_prim)p;
  add_family(kl_lower_elementwise, kl_lower_elementwise_n);
  add_family(kl_lower_shape, kl_lower_shape_n);
  add_family(kl_lower_reduce, kl_lower_reduce_n);
  add_family(kl_lower_cumulative, kl_lower_cumulative_n);
  add_family(kl_lower_sort, kl_lower_sort_n);
  add_family(kl_lower_index, kl_lower_index_n);
  add_family(kl_lower_dot, kl_lower_dot_n);
  add_family(kl_lower_linalg, kl_lower_linalg_n);
  add_family(kl_lower_fft, kl_lower_fft_n);
  add_family(kl_lower_conv, kl_lower_conv_n);
  add_family(kl_lower_attention, kl_lower_attention_n);
  add_family(kl_lower_callback, kl_lower_callback_n);
  add_family(kl_lower_call, kl_lower_call_n);
  add_family(kl_lower_control, kl_lower_control_n);
  add_family(kl_lower_collective, kl_lower_collective_n);
  for (int p = 0; p < KL_NPRIMS; p++)
    traits[p] = (kl_fuse_traits){rows[p].fuses, rows[p].weight ? rows[p].weight : 1, rows[p].inline_reads};
}

const kl_lowering *kl_lower_get(kl_prim p) {
  pthread_once(&built, build);
  return &rows[p];
}

const kl_fuse_traits *kl_lower_fuse_traits(void) {
  pthread_once(&built, build);
  return traits;
}

int kl_lower_missing(kl_prim p, const char *target, char *err, size_t errlen) {
  kl_error(err, errlen, KL_ERR_UNSUPPORTED, "codegen: no %s lowering for %s", target, kl_prim_get(p)->name);
  return -1;
}
