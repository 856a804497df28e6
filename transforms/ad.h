/* ad.h: automatic differentiation as program-to-program passes (JAX's design: one JVP rule
 * per primitive; reverse mode = JVP + splitting into primal and linear parts + transposing the
 * linear part). Depends only on ir/. */
#ifndef KL_AD_H
#define KL_AD_H
#include "../ir/program.h"
#include "../ir/status.h"
#include "build.h"

/* Value tags: KL_TAG_TANGENT marks values linear in the tangents; KL_TAG_REMAT marks values of a
 * checkpointed region's recomputation, which reverse mode emits in the backward pass, where they
 * are used, instead of keeping them from the forward pass. Primal values carry neither. */
enum { KL_TAG_TANGENT = 1, KL_TAG_REMAT = 2 };

/* The AD passes build with kl_build (build.h) with `tagged` set; these compound helpers are theirs.
 * Operands are value ids of a->pg; each returns the new value id, or -1 once the builder failed. */
int kl_ad_sum_to(kl_build *a, int x, const kl_aval *target); /* undo rank-0 broadcasting */
int kl_ad_broadcast_like(kl_build *a, int x, int like);     /* rank-0 x to like's shape */
/* pad x along `axis` by lo/hi (negative crops) with the rank-0 value `fill` */
int kl_ad_pad_axis(kl_build *a, int x, int fill, int axis, int64_t lo, int64_t hi);
int kl_ad_slice_axis(kl_build *a, int x, int axis, int64_t start, int64_t limit);
/* Matrices are the last two dims, leading dims are batch dims. */
int kl_ad_mT(kl_build *a, int x);            /* swap the last two dims */
int kl_ad_matmul(kl_build *a, int x, int y); /* batched x @ y */
/* float mask shaped like `like` (a matrix stack): 1 where col - row <= k (lower) or >= k (upper) */
int kl_ad_tri(kl_build *a, int like, int lower, int k);
int kl_ad_eye_bool(kl_build *a, int like); /* row == col, bool, shaped like `like` */
int kl_ad_diag(kl_build *a, int x);        /* the diagonal of a square matrix stack */
/* r[..., i, ...] = t[..., idx[..., i, ...], ...] along axis (take_along_axis); idx shaped as t */
int kl_ad_take_along(kl_build *a, int t, int idx, int axis);

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
/* kl_vjp where the cotangent of output i is a symbolic zero unless seeded[i] (NULL: all seeded):
 * its input is still there but ignored, so no 0 * inf of a residual turns into a NaN (JAX's
 * ad.Zero). The control family's transposes pass the zero cotangents of loop outputs this way. */
kl_program *kl_vjp_ex(const kl_program *pg, const char *wants, const char *seeded, char *err, size_t errlen);
#endif
