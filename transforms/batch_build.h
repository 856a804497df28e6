/* batch_build.h: what vmap's driver (vmap.c) and the batching rules of transforms/rules/ share:
 * the pass state, what a rule sees, and the emitting helpers (batch_build.c). Private to
 * transforms/; depends only on ir/. */
#ifndef KL_BATCH_BUILD_H
#define KL_BATCH_BUILD_H
#include "../ir/status.h"
#include "build.h"
#include "batching.h"

/* What a rule sees: the source equation, its operands in the new program, which of them are
 * batched, and the source avals (the unbatched shapes). A rule writes e->nout batched results;
 * one whose result i is the same for every example may leave it unbatched and clear ob[i]
 * (preset to 1 by the pass; custom_vmap_call's user rules do). */
typedef struct {
  const kl_eqn *e;
  const kl_program *src;
  int *xs;         /* operands (new program ids); rules may overwrite them */
  const char *bs;  /* per operand: batched */
  int *ys;         /* results */
  char *ob;        /* per result: batched (KL_MAX_OUTS entries, preset to 1) */
} rule_args;

static inline const kl_aval *src_in(const rule_args *r, int i) { return &r->src->vals[r->e->ins[i]].aval; }
static inline const kl_aval *src_out(const rule_args *r, int i) { return &r->src->vals[r->e->outs[i]].aval; }

/* vmap builds with kl_build (build.h) with `size` set (and `who` = "vmap: "); these helpers are its own. */
/* Copy of the aval of new-program value v (copied: emitting may move the value array). */
static inline kl_aval kl_batch_aval(kl_build *b, int v) { return *kl_build_aval(b, v); }
/* Moves axis `from` of x to position `to`, keeping the other axes in order. */
int kl_batch_move_axis(kl_build *b, int x, int from, int to);
/* An unbatched value of shape S as the batched value of shape (B,)+S. */
int kl_batch_add_batch(kl_build *b, int x);
int kl_batch_as_batched(kl_build *b, int x, char is_batched);
/* out[0] = first (if first >= 0), then v[i] + add; out must hold v->n + 1 entries. */
kl_ivec kl_batch_shifted(int64_t *out, int64_t first, const kl_ivec *v, int64_t add);
/* The rule of primitives that map over leading axes: every operand brought to the batch, then
 * e's primitive with params p (e's own, or with the axes shifted past the batch axis). */
int kl_batch_all(kl_build *b, rule_args *r, const kl_params *p);
#endif
