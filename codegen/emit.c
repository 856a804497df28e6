/* emit.c: fresh SSA names for MLIR text. */
#include "emit.h"
#include <stdio.h>

char *kl_emit_fresh(kl_emitter *e, char *buf) {
  snprintf(buf, 24, "%%t%d", e->next_id++);
  return buf;
}
