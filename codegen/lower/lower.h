/* lower.h: how each primitive is lowered, one row per primitive (the rows live at the end of
 * codegen/lower/<family>.c, kl_lower_get finds them): its element inside a fused kernel, whether
 * fusion may inline it, its recompute weight, its CPU library routine, its GPU kernel. Private to
 * codegen/; depends on ir/, transforms/fuse.h and the shared scalar emitter (kernel_internal.h). */
#ifndef KL_LOWER_H
#define KL_LOWER_H
#include "../kernel_internal.h"
#include "../libcall.h"

/* Computes value v (result of e) at index idx inside a fused kernel; out gets its SSA name.
 * Operands are computed through kk_emit_value. Returns out. */
typedef char *(*kl_scalar_fn)(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out);
/* A library step on the host: ptrs = input buffers then output buffers. 0, or nonzero with a
 * message. */
typedef int (*kl_cpu_lib_fn)(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen);

/* A reduction over axes, as the kernel drivers compute it: the combining arith op and the
 * identity, per kind of element type. */
enum { KL_RINIT_TYPE_MIN = 2, KL_RINIT_TYPE_MAX = 3 }; /* iinit/uinit markers beyond plain values */
typedef struct {
  const char *fop, *sop, *uop, *bop; /* arith op for float, signed, unsigned, bool elements */
  double finit;                      /* identity for floats */
  int sinit, uinit, binit;           /* identity for signed/unsigned/bool: -1, 0, 1 or KL_RINIT_* */
} kl_reduce_rule;

typedef struct {
  kl_prim prim;
  char fuses;                  /* 1: fusion may compute it inside its consumers' kernels (a dot
                                  fuses only when kl_small_dot says so, whatever this says) */
  unsigned char weight;        /* rough cost of recomputing one element (fusion's budget) */
  kl_scalar_fn scalar;         /* one element inside a fused kernel; NULL: never inside one */
  const kl_reduce_rule *reduce; /* reductions over axes (the drivers' loops compute them) */
  kl_cpu_lib_fn cpu_lib;       /* host routine of a library step; NULL: none */
  char gpu_kernel;             /* 1: on the GPU, a library step runs as kernels of its own
                                  (kl_kernel_emit_gpu_move); 0: a GPU library or the host routine */
} kl_lowering;

/* Each family's rows (codegen/lower/<family>.c). */
#define KL_LOWER_FAMILY(fam)                \
  extern const kl_lowering kl_lower_##fam[]; \
  extern const int kl_lower_##fam##_n;
KL_LOWER_FAMILY(elementwise)
KL_LOWER_FAMILY(shape)
KL_LOWER_FAMILY(reduce)
KL_LOWER_FAMILY(cumulative)
KL_LOWER_FAMILY(sort)
KL_LOWER_FAMILY(index)
KL_LOWER_FAMILY(dot)
KL_LOWER_FAMILY(linalg)
KL_LOWER_FAMILY(call)
#undef KL_LOWER_FAMILY

/* The row of p (borrowed, static); a primitive without one gets an all-NULL row. */
const kl_lowering *kl_lower_get(kl_prim p);
/* The one error for a missing lowering: "codegen: no <target> lowering for <prim>". Returns -1. */
int kl_lower_missing(kl_prim p, const char *target, char *err, size_t errlen);

/* Host element access for the CPU routines (codegen/libcall.c): floats through double, ints
 * through int64 (wrapping on store). */
double kl_lc_ldf(kl_dtype t, const void *p, int64_t i);
void kl_lc_stf(kl_dtype t, void *p, int64_t i, double v);
int64_t kl_lc_ldi(kl_dtype t, const void *p, int64_t i);
void kl_lc_sti(kl_dtype t, void *p, int64_t i, int64_t v);
int kl_lc_is_uns(kl_dtype t);
/* Order of sort, argmax and cummax: NaN above +inf, -0 equal to +0. */
int kl_lc_cmp_elem(kl_dtype t, const void *p, int64_t i, int64_t j);
/* Splits a's shape around axis: outer * n * inner. */
void kl_lc_split_axis(const kl_aval *a, int axis, int64_t *outer, int64_t *n, int64_t *inner);

/* Scalar helpers shared by the families (codegen/kernel.c). */
char *kk_round_low(kctx *k, kl_dtype t, char *v); /* rounds an f16/bf16 value held in f32 */
int kk_is_unsigned(kl_dtype t);                     /* unsigned ints and bool */
int kk_bits_of(const char *cty);                    /* bit width of an MLIR int/float type */
#endif
