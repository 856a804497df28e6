/* prims.h: what the family files of ir/prims/ share: the error context of shape rules and the
 * checks every family uses. Private to ir/. */
#ifndef KL_IR_PRIMS_H
#define KL_IR_PRIMS_H
#include <stddef.h>

#include "../prim.h"
#include "../status.h"

/* Where a shape rule writes its message (the status goes through kl_error, ir/status.h). */
typedef struct {
  char *buf;
  size_t len;
} kl_rule_err;

/* A family's shape/dtype rule: fills outs[0..*nout) (*nout is 1 on entry). */
typedef int (*kl_infer_fn)(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                           kl_aval *outs, int *nout);

int kl_infer_elementwise(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                         kl_aval *outs, int *nout);
int kl_infer_shape(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                   kl_aval *outs, int *nout);
int kl_infer_reduce(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                    kl_aval *outs, int *nout);
int kl_infer_cumulative(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                        kl_aval *outs, int *nout);
int kl_infer_sort(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                  kl_aval *outs, int *nout);
int kl_infer_index(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                   kl_aval *outs, int *nout);
int kl_infer_dot(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                 kl_aval *outs, int *nout);
int kl_infer_linalg(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                    kl_aval *outs, int *nout);
int kl_infer_fft(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                 kl_aval *outs, int *nout);
int kl_infer_conv(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                  kl_aval *outs, int *nout);
int kl_infer_attention(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                       kl_aval *outs, int *nout);
int kl_infer_callback(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                      kl_aval *outs, int *nout);
int kl_infer_call(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                  kl_aval *outs, int *nout);
int kl_infer_control(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                     kl_aval *outs, int *nout);
int kl_infer_collective(kl_rule_err *e, kl_prim p, const kl_aval *ins, int nin, const kl_params *params,
                        kl_aval *outs, int *nout);

/* Writes the message with its status (KL_ERR_TYPE or KL_ERR_VALUE), returns -1. */
int kl_rule_fail(kl_rule_err *e, kl_status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "float32[2,3]" and "(1, 2)" into buf; return buf. */
const char *kl_rule_shape_str(const kl_aval *a, char *buf, size_t n);
const char *kl_rule_vec_str(const kl_ivec *v, char *buf, size_t n);
/* The checks: 0 when fine, else -1 with the message set. */
int kl_rule_check_accepts(kl_rule_err *e, kl_prim p, const kl_aval *a);
int kl_rule_check_axes(kl_rule_err *e, const char *op, const char *what, const kl_ivec *axes, int ndim,
                       int allow_dup);
int kl_rule_check_rank(kl_rule_err *e, const char *op, int ndim);
int kl_rule_same_shape(const kl_aval *a, const kl_aval *b);

#define KL_FIELD(s, f, kind) {#f, KL_PF_##kind, offsetof(kl_params, s.f)}
#endif
