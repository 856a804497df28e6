/* emit.h: growable text buffer and fresh-name source for writing MLIR text.
 * Used by every code generator in codegen/; knows nothing about the IR. */
#ifndef KL_EMIT_H
#define KL_EMIT_H
#include <stdarg.h>
#include <stddef.h>

#include "../ir/str.h"

/* An emitter writes SSA ops into `out`; fresh() names values %t<N>. */
typedef struct {
  kl_str *out;
  int next_id;
  int branches; /* 1: may emit scf.if around a rarely taken path (a GPU thread's scalar code);
                   0: straight-line selects only (a CPU loop that must vectorize) */
} kl_emitter;

/* Writes a fresh SSA name ("%t17") into buf (>= 24 bytes) and returns buf. */
char *kl_emit_fresh(kl_emitter *e, char *buf);
#endif
