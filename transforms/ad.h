/* ad.h: automatic differentiation as program-to-program passes (JAX's design: one JVP rule
 * per primitive; reverse mode = JVP + splitting into primal and linear parts + transposing the
 * linear part). Depends only on ir/. */
#ifndef KL_AD_H
#define KL_AD_H
#include "../ir/program.h"

/* Builder state shared by the passes: the program being built, and a tag per value saying
 * whether it is linear in the tangents (1) or a primal value (0). */
typedef struct {
  kl_program *pg; /* owned by the caller */
  char *tangent;  /* owned; per value id */
  int cap;
  char *err;
  size_t errlen;
  int failed;
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
int kl_ad_fail(kl_ad *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const kl_aval *kl_ad_aval(kl_ad *a, int v);

/* JVP of pg: inputs (primal inputs..., one tangent per input i with has_tangent[i] and a float
 * dtype), outputs (primal outputs..., one tangent per output). Returns an owned program, or NULL
 * with a message ("jvp of <prim> is not supported yet"). tags (optional, owned by the caller)
 * receives the tangent tag per value. */
kl_program *kl_jvp(const kl_program *pg, const char *has_tangent, char **tags, char *err, size_t errlen);

/* VJP of pg: inputs (primal inputs..., one cotangent per output), outputs (primal outputs...,
 * one cotangent per input i with wants[i]). Owned program or NULL with a message. */
kl_program *kl_vjp(const kl_program *pg, const char *wants, char *err, size_t errlen);
#endif
