/* libcall.h: library-call steps: equations that run as host routines over buffers
 * (dot_general through BLAS, LAPACK factorizations, sort, cumulative ops, gathers and
 * scatters), plus the combiner for parallel full reductions. Depends on ir/ and runtime/. */
#ifndef KL_LIBCALL_H
#define KL_LIBCALL_H
#include "../ir/program.h"

typedef struct {
  kl_prim prim;
  kl_params p;              /* vectors owned by this struct */
  int nin, nout;
  kl_aval avals[72];        /* inputs then outputs */
} kl_libcall;

/* Builds the context of equation e of pg (owned; free with kl_libcall_free), or NULL when out
 * of memory. */
kl_libcall *kl_libcall_new(const kl_program *pg, const kl_eqn *e);
void kl_libcall_free(kl_libcall *c);
/* Step entry: ptrs = input buffers then output buffers. 0 or nonzero with a message. */
int kl_libcall_run(void *ctx, void **ptrs, char *err, size_t errlen);

/* For a dot_general call: its product as batch x (m x k) . (k x n) over the operands' bytes as
 * they are (transl: lhs holds k x m; transr: rhs holds n x k). 1 when no copy or conversion is
 * needed, else 0. */
int kl_libcall_dot_layout(const kl_libcall *c, int64_t *batch, int64_t *m, int64_t *n, int64_t *k, int *transl,
                          int *transr);

/* Combines the per-thread partial results of a reduction: dst[e] = op(parts[0..n)[e]) for
 * every element e < nelem. */
void kl_reduce_combine(kl_prim reduce, kl_dtype t, void *dst, void *const *parts, int n, int64_t nelem);

/* Element conversions shared with the Python boundary. */
float kl_half_to_float(uint16_t h);
uint16_t kl_float_to_half(float f);
float kl_bf16_to_float(uint16_t h);
uint16_t kl_float_to_bf16(float f);
#endif
