/* ad.h: automatic differentiation as program-to-program passes (JAX's design: one JVP rule
 * per primitive; reverse mode = JVP + splitting into primal and linear parts + transposing the
 * linear part). Depends only on ir/. */
#ifndef KL_AD_H
#define KL_AD_H
#include "../ir/program.h"
#include "../ir/status.h"

/* Value tags: KL_TAG_TANGENT marks values linear in the tangents; KL_TAG_REMAT marks values of a
 * checkpointed region's recomputation, which reverse mode emits in the backward pass, where they
 * are used, instead of keeping them from the forward pass. Primal values carry neither. */
enum { KL_TAG_TANGENT = 1, KL_TAG_REMAT = 2 };

/* Builder state shared by the passes: the program being built, and the tags of its values. */
typedef struct {
  kl_program *pg; /* owned by the caller */
  char *tangent;  /* owned; per value id: its tags */
  int cap;
  char *err;
  size_t errlen;
  int failed;
  char extra_tag; /* or-ed into the tags of every value emitted (KL_TAG_REMAT while recomputing) */
  int remat;      /* building a JVP for reverse mode: checkpointed regions recompute their primals */
} kl_ad;

/* Emits one equation; returns the number of outputs written to outs, or -1 (message in err).
 * Outputs are tangent if any input is. */
int kl_ad_emit(kl_ad *a, kl_prim p, const int *ins, int nin, const kl_params *prm, int *outs);
int kl_ad_un(kl_ad *a, kl_prim p, int x);
int kl_ad_bin(kl_ad *a, kl_prim p, int x, int y);
int kl_ad_lit(kl_ad *a, double v, kl_dtype t); /* rank-0 literal */
int kl_ad_zeros(kl_ad *a, const kl_aval *like);
int kl_ad_add(kl_ad *a, int x, int y); /* -1 is zero */
int kl_ad_sum_to(kl_ad *a, int x, const kl_aval *target); /* undo rank-0 broadcasting */
/* Sets the message and its status (ir/status.h) on the first failure, and a->failed; returns -1. */
int kl_ad_fail(kl_ad *a, kl_status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const kl_aval *kl_ad_aval(kl_ad *a, int v); /* borrowed: invalid after the next emit */

/* Shorthands used by the rules; each returns the new value id, or -1 once the builder failed.
 * Operands are value ids of a->pg; a rule passes -1 only where a helper says so. */
int kl_ad_op(kl_ad *a, kl_prim p, const int *ins, int nin, const kl_params *prm); /* first output */
int kl_ad_convert(kl_ad *a, int x, kl_dtype t);
int kl_ad_select(kl_ad *a, int pred, int on_false, int on_true);
int kl_ad_broadcast(kl_ad *a, int x, const int64_t *shape, int ndim, const int64_t *dims);
int kl_ad_broadcast_like(kl_ad *a, int x, int like); /* rank-0 x to like's shape */
int kl_ad_reshape(kl_ad *a, int x, const int64_t *shape, int ndim);
int kl_ad_transpose(kl_ad *a, int x, const int64_t *perm);
int kl_ad_reduce_sum(kl_ad *a, int x, const int64_t *axes, int naxes);
int kl_ad_iota(kl_ad *a, kl_dtype t, const int64_t *shape, int ndim, int dim);
/* pad x along `axis` by lo/hi (negative crops) with the rank-0 value `fill` */
int kl_ad_pad_axis(kl_ad *a, int x, int fill, int axis, int64_t lo, int64_t hi);
int kl_ad_slice_axis(kl_ad *a, int x, int axis, int64_t start, int64_t limit);
/* Matrices are the last two dims, leading dims are batch dims. */
int kl_ad_mT(kl_ad *a, int x);            /* swap the last two dims */
int kl_ad_matmul(kl_ad *a, int x, int y); /* batched x @ y */
/* float mask shaped like `like` (a matrix stack): 1 where col - row <= k (lower) or >= k (upper) */
int kl_ad_tri(kl_ad *a, int like, int lower, int k);
int kl_ad_eye_bool(kl_ad *a, int like); /* row == col, bool, shaped like `like` */
int kl_ad_diag(kl_ad *a, int x);        /* the diagonal of a square matrix stack */
/* r[..., i, ...] = t[..., idx[..., i, ...], ...] along axis (take_along_axis); idx shaped as t */
int kl_ad_take_along(kl_ad *a, int t, int idx, int axis);

/* JVP of pg: inputs (primal inputs..., one tangent per input i with has_tangent[i] and a float
 * dtype), outputs (primal outputs..., one tangent per output). Returns an owned program, or NULL
 * with a message ("jvp of <prim> is not supported yet"). tags (optional, owned by the caller)
 * receives the tangent tag per value. */
kl_program *kl_jvp(const kl_program *pg, const char *has_tangent, char **tags, char *err, size_t errlen);
/* kl_jvp for reverse mode (remat = 1): each checkpoint equation's body is emitted twice, once
 * for its outputs and once, from its inputs passed through optimization_barrier and tagged
 * KL_TAG_REMAT, for the primal values its tangents need. */
kl_program *kl_jvp_ex(const kl_program *pg, const char *has_tangent, char **tags, int remat, char *err,
                      size_t errlen);

/* VJP of pg: inputs (primal inputs..., one cotangent per output), outputs (primal outputs...,
 * one cotangent per input i with wants[i]). Owned program or NULL with a message. */
kl_program *kl_vjp(const kl_program *pg, const char *wants, char *err, size_t errlen);
#endif
