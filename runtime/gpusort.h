/* gpusort.h: the sort primitive on the GPU (runtime/gpusort.c): a stable LSD radix sort of rows
 * of operands in device memory, lexicographic over the leading num_keys operands, the others
 * permuted alongside, queued on kiln's stream with no host round trip. The order is the host
 * routine's (codegen/lower/sort.c, as lax.sort): NaN above +inf and all NaNs equal, -0 equal to
 * +0, ties in their original order. Depends on ir/dtype.h only; codegen/ fills a kl_gpusort_call
 * from a sort step. */
#ifndef KL_GPUSORT_H
#define KL_GPUSORT_H
#include <stddef.h>
#include <stdint.h>

#include "../ir/dtype.h"

#define KL_GPUSORT_MAX_OPERANDS 16 /* sorts of more operands stay on the host */

/* One sort step. Every operand has one shape, outer x n x inner around the sorted axis (row-major);
 * the rows are the outer * inner lines along it. Outputs have the inputs' dtypes and shape.
 * iota[k]: operand k is known to hold its index along the axis (an integer broadcasted_iota over
 * it: argsort's): its output is written from the permutation and its input never read. */
typedef struct {
  int32_t nin, num_keys;
  int64_t outer, n, inner;
  int32_t dtype[KL_GPUSORT_MAX_OPERANDS]; /* kl_dtype of each operand */
  int32_t iota[KL_GPUSORT_MAX_OPERANDS];
  int32_t tile_items; /* items a thread of the tiled passes: 16 (or 0), or 8 (an experiment) */
  int32_t scan_passes; /* 1: tiled passes by a histogram and a scan each, not onesweep (an A/B switch) */
  int32_t random_keys; /* the one key holds uniform random bits (a shuffle's): a 32-bit unsigned key with one
                          4-byte value may sort by its high 24 bits, then finish inside runs of equal ones
                          (ks_runs), short for such keys; any keys still sort right, long runs slowly */
  int32_t keys_unused; /* nothing reads operand 0's output (a shuffle's keys): ks_runs leaves it unwritten */
} kl_gpusort_call;

/* Whether these kernels take c (real dtypes, at most KL_GPUSORT_MAX_OPERANDS operands, fewer
 * than 2^31 elements): 0 yes, -1 no (the step stays a host routine). */
int kl_gpusort_check(const kl_gpusort_call *c);
/* Bytes of device scratch memory a run of c needs (> 0). */
size_t kl_gpusort_scratch_bytes(const kl_gpusort_call *c);
/* Kernel launches a run of c makes (CUDA graph heuristics, KILN_LOG_COMPILES). */
int kl_gpusort_launches(const kl_gpusort_call *c);
/* "radix 4 passes, 1 row of 16777216" for KILN_LOG_COMPILES; buf returned. */
const char *kl_gpusort_describe(const kl_gpusort_call *c, char *buf, size_t n);
/* 1 when the kernels can run (a GPU, the module loaded); else 0 with why. */
int kl_gpusort_available(char *why, size_t n);
/* Queues c on the stream this thread queues to: in[] and out[] are device pointers (inputs
 * preserved, outputs distinct from them), scratch kl_gpusort_scratch_bytes(c) bytes of device
 * memory. Allocates nothing (graph capture is fine). 0, or -1 with a message. */
int kl_gpusort_run(const kl_gpusort_call *c, void *const *in, void *const *out, void *scratch, char *err, size_t errlen);

/* The same over any launcher (tests run the kernels on a PTX interpreter): launch(ctx, kernel
 * name, grid, block, args, nargs) queues one kernel, every argument 64 bits; 0 or nonzero. */
typedef int (*kl_gpusort_launcher)(void *ctx, const char *kernel, unsigned grid, unsigned block, const uint64_t *args,
                                   int nargs);
int kl_gpusort_run_with(const kl_gpusort_call *c, void *const *in, void *const *out, void *scratch,
                        kl_gpusort_launcher launch, void *ctx, char *err, size_t errlen);
/* The kernels' PTX (runtime/gpusort_ptx.c), written once, owned by the module (tests/c assembles
 * it with ptxas); NULL when out of memory. */
const char *kl_gpusort_ptx(void);
#endif
