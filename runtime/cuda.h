/* cuda.h: what CUDA code needs beyond the device interface: raw device memory, kiln's stream,
 * PTX linking, modules, kernel launches, graphs and cuBLAS. Included only by runtime/cuda.c,
 * runtime/cuda_graph.c, runtime/cublas.c and codegen/compile_gpu.c; everything else reaches the
 * GPU through runtime/device.h (kl_device_get(KL_DEV_CUDA)). Knows nothing of MLIR or Python. */
#ifndef KL_CUDA_H
#define KL_CUDA_H
#include <stddef.h>
#include <stdint.h>

#include "../ir/dtype.h"
#include "device.h"
#include "hostconv.h"

/* The GPUs kiln drives at most (their ordinals are 0 to KL_CUDA_MAX_GPUS - 1). */
#define KL_CUDA_MAX_GPUS 16
/* Every GPU has its own context, streams, events and caches (set up when first used). The calling
 * thread's GPU (0 until told) is where its allocations, copies, kernels and library calls go:
 * kl_cuda_use sets it (ordinal < 0: unchanged) and returns the one before; kl_cuda_ordinal says
 * which it is; kl_cuda_count is how many GPUs there are (0 without one). kl_cuda_in_group: 1 while
 * the thread queues a participant of an SPMD launch (runtime/collective.h's group is current). */
int kl_cuda_use(int ordinal);
int kl_cuda_ordinal(void);
int kl_cuda_count(void);
int kl_cuda_in_group(void);
/* A count from environment variable `name`: dflt when unset or empty, 0 when negative (the GPU
 * runtime's tuning knobs; runtime/cuda.c). */
int kl_cuda_env_count(const char *name, int dflt);
/* How many multiprocessors the library product about to be queued should use: 0 for all of them,
 * fewer for the first one after a big collective queued on the side stream (runtime/cuda.c). */
int kl_cuda_gemm_sm_target(void);
/* Says that a library using CUDA's runtime API (NCCL) may have made another context current on
 * this thread: the next call makes the thread's GPU's current again. */
void kl_cuda_context_lost(void);
/* Copies height rows of width bytes, device to device on the thread's queue, rows spitch bytes
 * apart at src and dpitch apart at dst. 0, or -1 with a message. */
int kl_cuda_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, char *err,
                    size_t errlen);
/* Between the GPUs of this process (runtime/peer.c): whether GPUs a and b (set up here if need
 * be) reach each other's memory directly; an n-byte copy on the thread's queue from GPU
 * src_ordinal's memory to this GPU's (copy engines, peer to peer); n zeroed 32-bit words of
 * pinned host memory that every GPU reads and writes (kept for the process; NULL without); and,
 * on the thread's queue, setting such a word to v once the work before is done, and waiting until
 * it reaches v (compared cyclically: (int32_t)(word - v) >= 0). kl_cuda_comm_on_copy_engines says
 * that the collective being queued needs no multiprocessors left to it; kl_cuda_queue_capturing,
 * whether the thread's queue is being captured into a graph (a loop's body). 0, or -1 with a
 * message. */
int kl_cuda_can_reach(int a, int b);
int kl_cuda_copy_from(void *dst, const void *src, int src_ordinal, size_t n, char *err, size_t errlen);
uint32_t *kl_cuda_host_words(size_t n);
int kl_cuda_flag_set(uint32_t *word, uint32_t v, char *err, size_t errlen);
int kl_cuda_flag_wait(const uint32_t *word, uint32_t v, char *err, size_t errlen);
void kl_cuda_comm_on_copy_engines(void);
int kl_cuda_queue_capturing(void);
/* 1 if a GPU is usable; else 0 with the reason in why (KILN_PLATFORM=cpu, no driver...). */
int kl_cuda_available(char *why, size_t n);
/* Device memory (stream-ordered); freeing waits for the work queued before it. */
int kl_cuda_alloc(size_t nbytes, void **ptr, char *err, size_t errlen);
void kl_cuda_free(void *ptr, size_t nbytes);
/* Copies n bytes in stream order (dev flags: 1 = GPU). Device-to-host returns when done. */
int kl_cuda_copy(void *dst, int dst_dev, const void *src, int src_dev, size_t n, char *err, size_t errlen);
int kl_cuda_memset0(void *dst, size_t n);
int kl_cuda_is_device_pointer(const void *p);
/* kiln's stream on the thread's GPU (a CUstream), or NULL without a GPU. */
void *kl_cuda_stream(void);
/* A driver entry point by name (the _v2 version where one exists), or NULL. */
void *kl_cuda_driver_symbol(const char *name);

/* CUDA graphs (runtime/cuda_graph.c). 1 while an executable is being captured (library calls
 * must then not allocate or synchronize). */
int kl_cuda_capturing(void);
/* Launches x as its graph when it qualifies: 1 (bufs holds every slot of an input or output,
 * outputs written in stream order), 0 (run it step by step), -1 with a message. */
int kl_cuda_graph_launch(kl_exec *x, kl_buffer **bufs, char *err, size_t errlen);
/* Frees an executable's graph state (its dev_state). */
void kl_cuda_graph_free(void *state);
/* PTX -> device code (malloc'd *image) through the driver's JIT linker. */
int kl_cuda_link_ptx(const char *ptx, size_t len, void **image, size_t *image_len, char *err, size_t errlen);
int kl_cuda_module_load(const void *image, size_t len, void **module, char *err, size_t errlen);
int kl_cuda_function(void *module, const char *name, void **fn, char *err, size_t errlen);
/* Runs GPU executable x now (a loop's body inside a step): its steps are queued on kiln's stream,
 * reading in[0..ninputs) and writing out[0..noutputs), device memory of x's slot sizes; returns
 * without waiting for them. 0, or -1 with a message. */
int kl_cuda_exec_run(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen);
/* The same bound once and run many times (a loop's body for each set of carries): kl_cuda_bind
 * fixes the pointers and allocates the temporaries (NULL with a message), kl_cuda_bound_run
 * queues the steps (0, or -1 with a message), kl_cuda_unbind frees (in stream order). */
typedef struct kl_cuda_bound kl_cuda_bound;
kl_cuda_bound *kl_cuda_bind(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen);
int kl_cuda_bound_run(const kl_cuda_bound *b, char *err, size_t errlen);
void kl_cuda_unbind(kl_cuda_bound *b);
/* Points a binding at other inputs and outputs (a scan's next slices), its temporaries kept. */
void kl_cuda_bound_retarget(kl_cuda_bound *b, void *const *in, void *const *out);
/* Step s's argument pointers in a binding (as its run passes them). */
void **kl_cuda_bound_args(const kl_cuda_bound *b, int s);
/* A device-side while loop (CUDA conditional graph nodes, drivers of CUDA 12.3 or later): a graph
 * that, while the byte at pred is nonzero (checked first when the graph starts), runs body(ctx)
 * (which queues a trip's work on kiln's stream: the body, then the condition writing the byte
 * at pred) and then one kernel that makes the ncopies copies (at most KL_CUDA_WHILE_COPIES,
 * device to device: the new carries into the ones the next trip reads) and sets the condition.
 * With unroll > 1 and flags (two bytes of device memory, zeroed before each launch), each pass of
 * the loop node queues `unroll` trips (rounded up to even), a trip after the loop is done making
 * no copies (its body must then write only memory the copies read: no carry updated in place).
 * Built once over fixed memory; NULL (with a message) where the driver has no conditional nodes
 * or the body cannot be captured into one (then loop step by step). */
#define KL_CUDA_WHILE_COPIES 8
void *kl_cuda_while_graph(int (*body)(void *ctx, char *err, size_t errlen), void *ctx, const void *pred, int ncopies,
                          void *const *dst, void *const *src, const size_t *bytes, int unroll, void *flags, char *err,
                          size_t errlen);
int kl_cuda_while_graph_launch(void *g, char *err, size_t errlen);
void kl_cuda_while_graph_free(void *g);
/* A two-way branch inside a graph being captured (a cond in a scan taken whole): a kernel reads
 * the byte at pred, then two conditional IF nodes run branch(ctx, 0) (byte zero) or
 * branch(ctx, 1) (nonzero), each captured into its node's body graph. The branches must only
 * queue kernels and device copies on kiln's stream (bound beforehand: no allocation); the
 * capture goes on after both nodes. 0, or -1 with a message (the capture then fails). */
int kl_cuda_if_captured(const void *pred, int (*branch)(void *ctx, int which, char *err, size_t errlen), void *ctx,
                        char *err, size_t errlen);
/* Whether the driver has conditional graph nodes (CUDA 12.3 or later): 1, or 0 with why. */
int kl_cuda_has_conditionals(char *why, size_t n);
/* A scan run as a device-side while loop: queues the kernel that moves this trip's slices (out =
 * 0: stacked xs -> the body's staging buffers, before the body; 1: the staging buffers -> stacked
 * ys, then the trip counter advanced and the predicate written). state: device memory, the trip
 * counter (u64) then the predicate byte at offset 8; bases: device memory, the stacked arrays'
 * addresses (u64 each); slice k is bytes[k] bytes at index t (L-1-t when reverse). Nothing moves
 * once the counter reaches length. At most KL_CUDA_SCAN_SLICES slices. 0, or -1 with a message. */
#define KL_CUDA_SCAN_SLICES 8
/* The PTX of the kernels above (written once; ptxas checks it in tests/c/test_graph_ptx.c). */
const char *kl_cuda_graph_ptx(void);
/* Ctrl-C for the loops the device runs by itself: requested 1 asks their next trip to end the
 * loop; requested 0 withdraws the request and returns 1 if a loop ended because of it. */
int kl_cuda_loops_stop(int requested);
int kl_cuda_scan_move(int out, const void *state, int64_t length, int reverse, const void *bases, int n,
                      void *const *stage, const size_t *bytes, char *err, size_t errlen);
/* Graphs built (whole programs), branches queued as conditional nodes, and device-side loops
 * (while and scan graphs) launched, since the start. */
void kl_cuda_graph_stats(long *graphs, long *branches, long *loops);
/* For cuda_graph.c: the side stream of branches captured at nesting depth `depth` (0 to
 * KL_CUDA_IF_DEPTH - 1; NULL where none could be made); the stream that this thread's launches,
 * device copies, memsets and cuBLAS calls go to from now on (NULL: kiln's stream), returning the
 * one before; and that stream now. */
#define KL_CUDA_IF_DEPTH 16
void *kl_cuda_side_stream(int depth);
void *kl_cuda_queue_on(void *stream);
void *kl_cuda_queue_stream(void);
/* Launches fn(ptrs[0], ..., ptrs[n-1]) on grid x block threads (1-D), asynchronously. */
int kl_cuda_launch(void *fn, unsigned grid, unsigned block, void **ptrs, int nptrs, char *err, size_t errlen);

/* cuBLAS (runtime/cublas.c), opened on first use. */
int kl_cublas_add_search_path(const char *path);
int kl_cublas_available(char *reason, size_t n);
const char *kl_cublas_library(void);
/* Row-major batched product on kiln's stream (see runtime/hostla.h's kl_hostla_gemm for the
 * layout) of t operands into an ot result (ot == t, or float16/bfloat16 into float32); precision
 * 2 (HIGHEST) is full float32, lower ones may use TF32. */
int kl_cublas_gemm(kl_dtype t, kl_dtype ot, int precision, int64_t batch, int64_t m, int64_t n, int64_t k, const void *a, int transl,
                   const void *b, int transr, void *c, char *err, size_t errlen);
/* x[0..n) *= alpha on kiln's stream, n float32 (dbl 0) or float64 (dbl 1) values (complex as 2n). */
int kl_cublas_scal(int dbl, int64_t n, double alpha, void *x, char *err, size_t errlen);
/* For runtime/cusolver.c: a cuBLAS function by name (NULL when missing), and fn(handle, ctx) run
 * with cuBLAS's one handle on the stream this thread queues to, serialized with kiln's other
 * cuBLAS calls: fn's status (a cuBLAS status), or -1 with a message when cuBLAS is missing. */
void *kl_cublas_symbol(const char *name);
int kl_cublas_with_handle(int (*fn)(void *handle, void *ctx), void *ctx, char *err, size_t errlen);

/* cuFFT (runtime/cufft.c), opened on first use. kind: 0 FFT (C2C forward), 1 IFFT (C2C inverse, scaled by 1/prod(n)),
 * 2 RFFT (R2C), 3 IRFFT (C2R, scaled by 1/prod(n)); n: the real-space lengths of the last rank (1..3) axes of row-major
 * arrays, howmany transforms one after another; dbl: 0 single, 1 double; complex data interleaved. Queued on kiln's
 * stream; in and out are device pointers and never alias; in is preserved for every kind (C2R runs on a copy). Plans
 * are cached by shape; one run while a graph is captured is kept for the process. 0, or -1 with a message.
 * kl_cufft_available also needs cuBLAS (it scales the inverses). kl_cufft_add_search_path takes the library's path or
 * a folder holding it or the nvidia-cufft wheel (nvidia/cufft/lib). */
int kl_cufft_add_search_path(const char *path);
int kl_cufft_available(char *reason, size_t n);
const char *kl_cufft_library(void);
int kl_cufft_exec(int kind, int dbl, int rank, const int64_t *n, int64_t howmany, const void *in, void *out, char *err,
                  size_t errlen);

/* cuDNN (runtime/cudnn.c), opened on first use. One convolution in kiln's channels-last layout
 * (runtime/hostconv.h: geometry, kind, which operand is which; padding lo on both sides of each
 * axis: the conv family's legalize rule evens it) on kiln's stream; a, b and out are device
 * pointers; t float32/float64/float16/bfloat16; precision lax.Precision (float32 may use TF32
 * below HIGHEST). Descriptors, algorithm (cuDNN's heuristics, no benchmarking) and work area are
 * cached per shape; a plan first used while a graph is captured is kept for the process. 0, or -1
 * with a message. kl_cudnn_add_search_path takes the library's path or a folder holding it or
 * the nvidia-cudnn wheel (nvidia/cudnn/lib). */
int kl_cudnn_add_search_path(const char *path);
int kl_cudnn_available(char *reason, size_t n);
const char *kl_cudnn_library(void);
int kl_cudnn_conv(int kind, kl_dtype t, int precision, const kl_conv_geom *g, const void *a, const void *b, void *out,
                  char *err, size_t errlen);
#endif
