/* table.c: the rule registry: kl_rule_get(prim) from the family tables of transforms/rules/,
 * built once (pthread_once) into one row per primitive. Depends only on ir/ and transforms/. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "rules.h"

static const kl_rule_row *const family_tables[KL_NFAMILIES] = {
    [KL_FAM_ELEMENTWISE] = kl_rules_elementwise, [KL_FAM_SHAPE] = kl_rules_shape,
    [KL_FAM_REDUCE] = kl_rules_reduce,           [KL_FAM_CUMULATIVE] = kl_rules_cumulative,
    [KL_FAM_SORT] = kl_rules_sort,               [KL_FAM_INDEX] = kl_rules_index,
    [KL_FAM_DOT] = kl_rules_dot,                 [KL_FAM_LINALG] = kl_rules_linalg,
    [KL_FAM_FFT] = kl_rules_fft,                 [KL_FAM_CALL] = kl_rules_call,
    [KL_FAM_CONV] = kl_rules_conv,
    [KL_FAM_ATTENTION] = kl_rules_attention,
    [KL_FAM_CALLBACK] = kl_rules_callback,
    [KL_FAM_CONTROL] = kl_rules_control,
    [KL_FAM_COLLECTIVE] = kl_rules_collective,
};

static kl_rule_row rows[KL_NPRIMS];
static pthread_once_t rows_once = PTHREAD_ONCE_INIT;

/* A row in the wrong family's table is a bug in the tables: caught at the first lookup. */
static void build_rows(void) {
  for (int p = 0; p < KL_NPRIMS; p++) rows[p] = (kl_rule_row){(kl_prim)p, NULL, NULL, NULL, NULL, NULL, NULL};
  for (int f = 0; f < KL_NFAMILIES; f++)
    for (const kl_rule_row *r = family_tables[f]; r->prim != KL_NPRIMS; r++) {
      if (kl_prim_get(r->prim)->family != (kl_family)f) {
        fprintf(stderr, "kiln: internal error: the rules of %s are in the %s table\n", kl_prim_get(r->prim)->name,
                kl_family_name((kl_family)f));
        abort();
      }
      rows[r->prim] = *r;
    }
}

const kl_rule_row *kl_rule_get(kl_prim p) {
  pthread_once(&rows_once, build_rows);
  return &rows[p];
}
