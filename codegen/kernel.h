/* kernel.h: writes one fused kernel (a KERNEL step of a plan) as an MLIR func over
 * memrefs. Target-neutral loop nest; the CPU pipeline vectorizes it. Depends on ir/,
 * transforms/fuse.h and codegen/emit.h. */
#ifndef KL_KERNEL_H
#define KL_KERNEL_H
#include "../transforms/fuse.h"
#include "emit.h"
#include "libcall.h"
#include <stdint.h>

typedef struct {
  int *args;        /* owned; value ids of the buffers the kernel reads, then its output last */
  int nargs;
  int64_t extent;   /* parallel range of the outermost loop */
  int64_t cost;     /* iteration-space elements */
  int full_reduce;  /* 1: the output is a scalar partial over [lo, hi) (combine afterwards) */
  kl_prim reduce;   /* the reduction primitive when full_reduce */
} kl_kernel_info;

/* Appends `func.func @<name>(...)` computing plan step `step` to out. Returns 0, or -1 with
 * a message when a construct cannot be generated. */
/* outlined: NULL, or the module's set of out-of-line math functions (kernels over few elements
 * call long chains of transcendental functions out of line; the caller defines the functions
 * whose bits are set with kl_math_define_outlined). */
int kl_kernel_emit(const kl_plan *plan, int step, const char *name, kl_str *out, kl_kernel_info *info,
                   uint64_t *outlined, char *err, size_t errlen);
/* Appends to a CPU module the definitions of the out-of-line math functions in `used`. */
void kl_math_define_outlined(uint64_t used, kl_str *out);
/* The GPU form of a kernel step (codegen/kernel_gpu.c). */
typedef struct {
  int *args;          /* owned; value ids read, then the output last */
  int nargs;
  unsigned grid, block; /* 1-D launch shape */
  int64_t partials;   /* > 0: a full reduction in two kernels: `name` takes the values read plus a
                         scratch buffer of `partials` elements (type kl_gpu_partial_type), and
                         `name`_f reduces that buffer into the output */
  kl_dtype partial_dtype;
} kl_gpu_kernel_info;

/* Appends `gpu.func @<name>` (and `@<name>_f` for two-kernel reductions) computing plan step
 * `step`. Returns 0, or -1 with a message. */
int kl_kernel_emit_gpu(const kl_plan *plan, int step, const char *name, kl_str *out, kl_gpu_kernel_info *info,
                       uint64_t *libdevice, char *err, size_t errlen);
/* libdevice: with libdevice non-NULL, math functions that libdevice has are calls to its __nv_*
 * functions, and *libdevice collects which; kl_libdevice_declare writes their declarations
 * (llvm.func lines, for the gpu.module) for a module that is then linked with libdevice. */
void kl_libdevice_declare(uint64_t used, kl_str *out);
/* Library equations (take, dynamic_slice, dynamic_update_slice, scatter, argmax/argmin,
 * cumulative ops) as GPU kernels over the library call's arguments (inputs, then the output): appends
 * gpu.func @<name>, and @<name>_s after it for a scatter's update pass. Returns the number of
 * kernels (1 or 2) with their grid and block sizes, or 0 when the equation stays a host call.
 * *in_place says what the kernels do when the output is operand 0's buffer (a loop's carry
 * updated in place): KL_GPU_IN_PLACE_SAME (run as written), _SKIP_FIRST (the first kernel only
 * copies operand 0: skip it), _SECOND (the second kernel replaces the first, not a second pass). */
enum { KL_GPU_IN_PLACE_SAME, KL_GPU_IN_PLACE_SKIP_FIRST, KL_GPU_IN_PLACE_SECOND };
int kl_kernel_emit_gpu_move(const kl_libcall *c, const char *name, kl_str *out, unsigned *grid, unsigned *block,
                            int *in_place, char *err, size_t errlen);
/* Element size in bytes of a two-kernel reduction's partial results. */
int kl_gpu_partial_size(kl_dtype t);

/* MLIR types of a dtype in memory and in registers. */
const char *kl_storage_type(kl_dtype t);
const char *kl_compute_type(kl_dtype t);
#endif
