/* transpose.h: the state of reverse mode's backward walk (transpose.c), shared with the transpose
 * rules of transforms/rules/. Private to transforms/; depends only on ir/. */
#ifndef KL_TRANSPOSE_H
#define KL_TRANSPOSE_H
#include "ad.h"

/* The backward walk over a JVP program j, building the VJP program V. */
typedef struct {
  kl_build *a;          /* the program being built (V) */
  const kl_program *j; /* the JVP program */
  const char *jtag;  /* tags of j's values (KL_TAG_*) */
  int *vmap;         /* j primal value -> V value */
  int *ct;           /* j value -> V cotangent value, -1 = zero */
  int *stack, capstack; /* kl_tr_prim_of's work list */
} kl_tctx;

/* The V value of j's primal value jv, emitting a checkpoint's recomputation at its first use. */
int kl_tr_prim_of(kl_tctx *c, int jv);
/* Adds contrib (-1: zero) to the cotangent of j's value jv, summed and converted to jv's aval. */
void kl_tr_accumulate(kl_tctx *c, int jv, int contrib);
static inline int kl_tr_is_tangent(kl_tctx *c, int jv) { return c->jtag[jv] & KL_TAG_TANGENT; }
#endif
