/* lower.h: how each primitive is lowered, one row per primitive (the rows live at the end of
 * codegen/lower/<family>.c, kl_lower_get finds them): its element inside a fused kernel, whether
 * fusion may inline it, its recompute weight, its CPU library routine, its GPU kernel. Private to
 * codegen/; depends on ir/, transforms/fuse.h and the shared scalar emitter (kernel_internal.h). */
#ifndef KL_LOWER_H
#define KL_LOWER_H
#include "../kernel_internal.h"
#include "../libcall.h"
#include "../../runtime/hostattn.h"
#include "../../runtime/hostconv.h"
#include "../../runtime/cusolver.h"
#include "../../runtime/gpusort.h"

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
  const char *fop, *sop, *uop, *bop; /* arith op for float, signed, unsigned, bool elements (bools
                                        travelling as i32 on the GPU use bop too) */
  double finit;                      /* identity for floats */
  int sinit, uinit, binit;           /* identity for signed/unsigned/bool: -1, 0, 1 or KL_RINIT_* */
  char wide;                         /* float32/16 accumulate in float64 on the CPU (sums) */
  const char *nan_op;  /* float max/min propagate NaN: the CPU's vectorizable op beside a NaN flag
                          (maxnumf), NULL: fop as is */
  const char *nan_cmp; /* ... and the GPU's arith.cmpf predicate that picks v over acc (ugt) */
  double (*host_f)(double acc, double v);          /* the host's combine of partials, floats */
  int64_t (*host_i)(int64_t acc, int64_t v, int un); /* ... ints and bools (un: unsigned) */
} kl_reduce_rule;

/* A library step whose GPU kernels a family writes (kernel_gpu.c sets it up and closes each
 * kernel): arguments are flat memrefs %m<i>, inputs then the one output. */
typedef struct {
  int ndim;
  int64_t dims[KL_MAX_RANK];
  const char *storage; /* MLIR element type in memory */
  int readonly;
} kg_arg;
typedef struct {
  const kl_libcall *c;
  kctx k;              /* k.body is the kernel being written */
  kl_str body;
  kg_arg args[16];     /* the flat arguments */
  int nargs, oi;       /* number of arguments, the output's index */
  const char *st;      /* storage type of argument 0 */
  const char *name;    /* the first kernel's name; the second is <name>_s */
  kl_str *out;         /* the module text the kernels are appended to */
  unsigned *grid;      /* grid size of each kernel written */
  int nk;              /* kernels written so far */
  int in_place;        /* KL_GPU_IN_PLACE_* (codegen/kernel.h): the kernels over an output that is
                          operand 0's buffer */
} kg_move;
/* Writes the kernels of library step m->c (kg_finish closes each); returns how many, or 0 (before
 * writing any) when this instance stays a host routine. */
typedef int (*kl_gpu_kernel_fn)(kg_move *m);
#define KL_GPU_MOVE_MAX_UPDATES 8192 /* walks of more elements per thread stay on the host */
#define KL_GPU_MOVE_ATOMIC_MIN 1024  /* scatter-adds of more updates use atomics */

/* Library kinds a step can run as on the GPU instead of its host routine. */
typedef enum {
  KL_GPU_LIB_NONE,
  KL_GPU_LIB_GEMM, /* cuBLAS (batched) gemm */
  KL_GPU_LIB_FFT,  /* cuFFT (kl_lower_fft_layout) */
  KL_GPU_LIB_CONV, /* cuDNN (kl_lower_conv_geom) */
  KL_GPU_LIB_SOLVER, /* cuSOLVER / cuBLAS linear algebra (kl_lower_solver_layout) */
  KL_GPU_LIB_SORT,   /* kiln's radix sort kernels, runtime/gpusort.c (kl_lower_sort_layout) */
  KL_GPU_LIB_COLLECTIVE, /* NCCL between the GPUs of an SPMD launch (kl_lower_collective_gpu) */
  KL_GPU_LIB_ATTENTION   /* cuDNN's fused attention (kl_lower_attention_geom) */
} kl_gpu_library;
/* An fft step as a library takes it: its lax.FftType, precision and the number of transforms
 * (the transformed axes are c->p.fft.fft_lengths). 0, or -1 when the step is not packed. */
int kl_lower_fft_layout(const kl_libcall *c, int *type, int *dbl, int64_t *howmany);
/* A conv step as a library takes it: its geometry (runtime/hostconv.h) and kind
 * (kl_hostconv_kind). 0, or -1 when the step is not legalized (operand dtypes differ). */
int kl_lower_conv_geom(const kl_libcall *c, kl_conv_geom *g, int *kind);
/* An attention step's shape (runtime/hostattn.h): 0, or -1 when the operands are not attention's. */
int kl_lower_attention_geom(const kl_libcall *c, kl_attn_geom *g);
/* A linalg step as runtime/cusolver.c takes it (operands and results as the host routine's). 0, or
 * -1 when the GPU library does not run it (eig, schur, empty or oversized matrices, ...). */
int kl_lower_solver_layout(const kl_libcall *c, kl_solver_call *s);
/* A sort step (equation e of pg, its libcall c) as runtime/gpusort.c takes it: the split around
 * the sorted axis, the dtypes, and which operands are iotas along it (their outputs come from the
 * permutation). 0, or -1 when the GPU kernels do not run it (then the host routine does). */
int kl_lower_sort_layout(const kl_program *pg, const kl_eqn *e, const kl_libcall *c, kl_gpusort_call *g);

typedef struct {
  kl_prim prim;
  char fuses;                  /* 1: fusion may compute it inside its consumers' kernels */
  /* a library primitive's instances computed inside kernels all the same: operand reads per
   * element of e, or 0 (fusion's kl_fuse_traits.inline_reads); NULL: none */
  int (*inline_reads)(const kl_program *pg, const kl_eqn *e);
  unsigned char weight;        /* rough cost of recomputing one element (fusion's budget) */
  kl_scalar_fn scalar;         /* one element inside a fused kernel; NULL: never inside one */
  const kl_reduce_rule *reduce; /* reductions over axes (the drivers' loops compute them) */
  kl_cpu_lib_fn cpu_lib;       /* host routine of a library step; NULL: none */
  kl_gpu_kernel_fn gpu_kernel; /* on the GPU, a library step runs as these kernels of its own
                                  (kl_kernel_emit_gpu_move); NULL: a GPU library or the host */
  kl_gpu_library gpu_library;  /* the GPU library that can run the step */
  /* multiply-adds of a library step whose small instances are not worth running asynchronously;
   * NULL: none such */
  double (*flops)(const kl_program *pg, const kl_eqn *e);
  /* 1 when an element reads its operand far from its own position along the last axis (the CPU
   * driver then tiles the loops); NULL: never */
  int (*strided)(const kl_eqn *e);
  const char *unsupported;     /* the step cannot run: the error compiling it reports */
  char loop;                   /* a loop over sub-programs: its step is built by codegen/loop.c (on
                                  the host, its bodies compiled for the CPU) */
  char updates;                /* 1: a functional update of operand 0 (dynamic_update_slice,
                                  scatter): given operand 0's buffer as its result's, it writes
                                  only what changes (buffer reuse, donation, loop carries) */
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
KL_LOWER_FAMILY(fft)
KL_LOWER_FAMILY(conv)
KL_LOWER_FAMILY(attention)
KL_LOWER_FAMILY(callback)
KL_LOWER_FAMILY(call)
KL_LOWER_FAMILY(control)
KL_LOWER_FAMILY(collective)
#undef KL_LOWER_FAMILY

/* The row of p (borrowed, static); a primitive without one gets an all-NULL row. */
const kl_lowering *kl_lower_get(kl_prim p);
/* The one error for a missing lowering: "codegen: no <target> lowering for <prim>". Returns -1. */
int kl_lower_missing(kl_prim p, const char *target, char *err, size_t errlen);
/* A collective step on the GPU (codegen/lower/collective.c): the participant's part through NCCL
 * on its GPU's stream (runtime/nccl.h), ptrs as the CPU step's (operand, result). 0, or -1. */
int kl_lower_collective_gpu(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen);

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

/* GPU helpers for the families' kernels (codegen/kernel_gpu.c). */
void kg_finish(kg_move *m, int64_t work);  /* closes m's current kernel, grid-stride over work */
void kg_grid_loop(kctx *k, int64_t total, const char *iv); /* scf.for iv = gid to total step grid */
void kg_close_loop(kctx *k);
void kg_update(kctx *k, const char *op, char *acc, const char *b, const char *ty); /* acc op= b */
void kg_index_op(kctx *k, const char *op, const char *a, int64_t b, char *out);  /* a op const */
/* Element pos of flat index argument i, sign- or zero-extended to i64. */
void kg_load_index64(kctx *k, int i, const char *pos, const kg_arg *a, kl_dtype t, char *out);
void kg_clamp_index(kctx *k, const char *v, kl_dtype t, int64_t hi, char *out); /* to index */
/* out = acc (reduce) v in type ty; float max/min propagate NaN. */
char *kg_combine(kctx *k, kl_prim reduce, kl_dtype t, const char *ty, const char *acc, const char *v, char *out);
/* One thread per column walks axis in order (codegen/lower/cumulative.c): arith "add"/"mul"
 * scans, else compares keep the max (maxlike) or min, NaN sticking; arg: only the index. */
int kl_gpu_axis_walk(kg_move *m, int axis, int rev, int arg, const char *arith, int maxlike);

/* Scalar helpers shared by the families (codegen/kernel.c). */
char *kk_round_low(kctx *k, kl_dtype t, char *v); /* rounds an f16/bf16 value held in f32 */
int kk_is_unsigned(kl_dtype t);                     /* unsigned ints and bool */
int kk_bits_of(const char *cty);                    /* bit width of an MLIR int/float type */
#endif
