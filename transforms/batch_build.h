/* batch_build.h: what vmap's driver (vmap.c) and the batching rules of transforms/rules/ share:
 * the pass state, what a rule sees, and the emitting helpers (batch_build.c). Private to
 * transforms/; depends only on ir/. */
#ifndef KL_BATCH_BUILD_H
#define KL_BATCH_BUILD_H
#include "../ir/status.h"
#include "batching.h"

/* Pass state: the program being built and the batch extent. */
typedef struct {
  kl_program *pg; /* the batched program (owned by kl_vmap until returned) */
  int64_t size;   /* batch extent B */
  char *err;      /* caller's message buffer */
  size_t errlen;
  int failed; /* set once; later emits are no-ops returning -1 */
} batcher;

/* What a rule sees: the source equation, its operands in the new program, which of them are
 * batched, and the source avals (the unbatched shapes). A rule writes e->nout batched results. */
typedef struct {
  const kl_eqn *e;
  const kl_program *src;
  int *xs;         /* operands (new program ids); rules may overwrite them */
  const char *bs;  /* per operand: batched */
  int *ys;         /* results */
} rule_args;

static inline const kl_aval *src_in(const rule_args *r, int i) { return &r->src->vals[r->e->ins[i]].aval; }
static inline const kl_aval *src_out(const rule_args *r, int i) { return &r->src->vals[r->e->outs[i]].aval; }

/* Sets the message and its status (first failure only) and b->failed; returns -1. */
int kl_batch_fail(batcher *b, kl_status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Copy of the aval of new-program value v (copied: emitting may move the value array). */
kl_aval kl_batch_aval(batcher *b, int v);
/* Appends one equation; returns its first output (all outputs in outs if given), or -1. */
int kl_batch_emit(batcher *b, kl_prim p, const int *ins, int nin, const kl_params *prm, int *outs);
int kl_batch_bin(batcher *b, kl_prim p, int x, int y);
int kl_batch_lit(batcher *b, int64_t v, kl_dtype t); /* rank-0 literal */
int kl_batch_convert(batcher *b, int x, kl_dtype t); /* x itself if it has dtype t */
int kl_batch_iota(batcher *b, kl_dtype t, const int64_t *shape, int n, int dim);
int kl_batch_reshape(batcher *b, int x, const int64_t *shape, int n);
int kl_batch_transpose(batcher *b, int x, const int64_t *perm, int n); /* x itself for the identity */
/* x broadcast to `shape` (rank n); x's axis i lands on axis dims[i]. */
int kl_batch_broadcast(batcher *b, int x, const int64_t *shape, int n, const int64_t *dims, int nd);
/* Moves axis `from` of x to position `to`, keeping the other axes in order. */
int kl_batch_move_axis(batcher *b, int x, int from, int to);
/* An unbatched value of shape S as the batched value of shape (B,)+S. */
int kl_batch_add_batch(batcher *b, int x);
int kl_batch_as_batched(batcher *b, int x, char is_batched);
/* out[0] = first (if first >= 0), then v[i] + add; out must hold v->n + 1 entries. */
kl_ivec kl_batch_shifted(int64_t *out, int64_t first, const kl_ivec *v, int64_t add);
/* The rule of primitives that map over leading axes: every operand brought to the batch, then
 * e's primitive with params p (e's own, or with the axes shifted past the batch axis). */
int kl_batch_all(batcher *b, rule_args *r, const kl_params *p);
#endif
