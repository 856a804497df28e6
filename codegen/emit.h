/* emit.h: growable text buffer and fresh-name source for writing MLIR text.
 * Used by every code generator in codegen/; knows nothing about the IR. */
#ifndef KL_EMIT_H
#define KL_EMIT_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "../ir/str.h"

/* An emitter writes SSA ops into `out`; fresh() names values %t<N>. */
typedef struct {
  kl_str *out;
  int next_id;
  int branches; /* 1: may emit scf.if around a rarely taken path (a GPU thread's scalar code);
                   0: straight-line selects only (a CPU loop that must vectorize) */
  int rare_ok;  /* 1: the caller reruns the elements that need a rare path (kernel.c's CPU loops):
                   with branches 0 the path is left out, and either way its need is ORed into rare */
  char rare[24];        /* i1 SSA name: this element needs the rare path ("" while none did) */
  const char *rare_ind; /* the indentation of the ops that defined rare (its block, for the caller) */
  int rare_mixed;       /* 1: needs were noted at several indentations or regions, so rare is unusable */
  int region;           /* the scf region ops go into now: 0 the kernel's body, else an id from nregions */
  int nregions;         /* regions opened so far (an emitter opening one takes ++nregions, restores region) */
  int rare_region;      /* the region of the ops that defined rare */
  uint64_t *defs; /* NULL, or the module's out-of-line functions (kl_math_define_outlined's bits):
                     a rare path under scf.if then calls its helper rather than inlining it */
} kl_emitter;

/* Writes a fresh SSA name ("%t17") into buf (>= 24 bytes) and returns buf. */
char *kl_emit_fresh(kl_emitter *e, char *buf);
#endif
