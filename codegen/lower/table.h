/* table.h: the lowering registry's public face for the rest of kiln: the per-primitive fusion
 * traits that compile.c (and tests) pass to kl_plan_build. Depends on transforms/fuse.h only. */
#ifndef KL_LOWER_TABLE_H
#define KL_LOWER_TABLE_H
#include "../../transforms/fuse.h"

/* KL_NPRIMS entries, static (borrowed). */
const kl_fuse_traits *kl_lower_fuse_traits(void);
#endif
