/* build.h: the one program builder of the transformation passes: jvp and transpose (ad.h), vmap
 * (batch_build.h) and simplify append equations through it, and AD's value tags ride along as an
 * optional per-value array. Private to transforms/; depends only on ir/. */
#ifndef KL_BUILD_H
#define KL_BUILD_H
#include "../ir/program.h"
#include "../ir/status.h"

/* Builder state: the program being built, the first failure, and the passes' own settings. */
typedef struct {
  kl_program *pg;  /* the program being built (owned by the pass until returned) */
  char *err;       /* caller's message buffer */
  size_t errlen;
  int failed;      /* set once; later emits are no-ops returning -1 */
  const char *who; /* prefix of internal-error messages ("vmap: "), or NULL */
  /* value tags (AD: KL_TAG_* of ad.h); off unless `tagged`: each emitted value gets the or of
   * its operands' tags and extra_tag */
  int tagged;
  char *tags;     /* owned; per value id: its tags */
  int cap;        /* entries allocated in tags */
  char extra_tag; /* or-ed into the tags of every value emitted (KL_TAG_REMAT while recomputing) */
  int remat;      /* jvp: building for reverse mode, checkpointed regions recompute their primals */
  int64_t size;   /* vmap: the batch extent B */
} kl_build;

/* Sets the message and its status (ir/status.h) on the first failure, and b->failed; returns -1. */
int kl_build_fail(kl_build *b, kl_status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The builder's out-of-memory failure (KL_ERR_NOMEM; marks the program); returns -1. */
int kl_build_oom(kl_build *b);
/* The aval of value v; borrowed: invalid after the next emit. A harmless empty aval for v < 0. */
const kl_aval *kl_build_aval(kl_build *b, int v);
/* Sets value v's tags (growing the array); for values not made by an emit (program inputs). */
void kl_build_set_tag(kl_build *b, int v, char t);

/* Appends one equation (prm NULL: the primitive's default params); returns the number of outputs,
 * written to outs if given, or -1 (message in b->err). A -1 operand is an internal error. */
int kl_build_emit(kl_build *b, kl_prim p, const int *ins, int nin, const kl_params *prm, int *outs);

/* Shorthands; each returns the new value id (the first output), or -1 once the builder failed. */
int kl_build_op(kl_build *b, kl_prim p, const int *ins, int nin, const kl_params *prm);
int kl_build_un(kl_build *b, kl_prim p, int x);
int kl_build_bin(kl_build *b, kl_prim p, int x, int y);
/* Rank-0 literals: of a double (int_value its truncation, 0 for inf/nan), of an int64. */
int kl_build_lit(kl_build *b, double v, kl_dtype t);
int kl_build_ilit(kl_build *b, int64_t v, kl_dtype t);
int kl_build_zeros(kl_build *b, const kl_aval *like);
int kl_build_add(kl_build *b, int x, int y); /* -1 is zero */
int kl_build_convert(kl_build *b, int x, kl_dtype t); /* x itself if it has dtype t */
int kl_build_select(kl_build *b, int pred, int on_false, int on_true);
/* x broadcast to `shape` (rank n); x's axis i lands on axis dims[i] (dims NULL for rank-0 x). */
int kl_build_broadcast(kl_build *b, int x, const int64_t *shape, int n, const int64_t *dims);
/* reshape: x itself when it already has the shape; reshape_new: always a new equation. */
int kl_build_reshape(kl_build *b, int x, const int64_t *shape, int n);
int kl_build_reshape_new(kl_build *b, int x, const int64_t *shape, int n);
int kl_build_transpose(kl_build *b, int x, const int64_t *perm, int n); /* x itself for the identity */
int kl_build_reduce_sum(kl_build *b, int x, const int64_t *axes, int naxes);
int kl_build_iota(kl_build *b, kl_dtype t, const int64_t *shape, int n, int dim);
#endif
