/* loop.h: the control family (while, scan, cond, while_bwd) as executable steps (loop.c). Private
 * to codegen/. */
#ifndef KL_LOOP_H
#define KL_LOOP_H
#include "../ir/program.h"
#include "../ir/str.h"
#include "../runtime/runtime.h"
#include "cpujit.h"

typedef struct kl_loop kl_loop;
struct kl_loop_slices;

/* What a loop step needs of its device: compiling its bodies, running one of them now (in the
 * device's order) over device memory, memory for the carries, copies within the device, and
 * reading device memory on the host (waiting for it). Memory functions: 0, or -1 with a message. */
typedef struct {
  kl_exec *(*compile)(kl_program *pg, char *err, size_t errlen);
  int (*run)(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen);
  int (*alloc)(size_t n, void **p, char *err, size_t errlen);
  void (*free)(void *p, size_t n);
  int (*copy)(void *dst, const void *src, size_t n, char *err, size_t errlen); /* device to device */
  int (*read)(void *host, const void *src, size_t n, char *err, size_t errlen); /* device to host */
  int (*zero)(void *dst, size_t n, char *err, size_t errlen);                   /* in the device's order */
  /* optional (NULL: loop.c keeps the arguments for run()): run() split into binding the memory
   * once and running many times (the CPU's) */
  void *(*bind)(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen);
  int (*bound_run)(const void *bound, char *err, size_t errlen);
  void (*unbind)(void *bound);
  /* optional (the CPU's): a while loop's condition and body, or a scan's body without xs or ys
   * (first NULL), compiled with one function that runs the whole loop over bound bodies
   * (*driver); drive() runs it: bound[] holds the bindings (while: condition and body for
   * carries set 0, then set 1; scan: per (carries read: init, set 0, set 1) x (written: set 0,
   * set 1, results), NULL where unused), *parity gets the set a while loop ends in. */
  int (*compile_loop)(kl_program *first, kl_program *body, int scan, const struct kl_loop_slices *sl, kl_exec **xfirst,
                      kl_exec **xbody, void **driver, char *err, size_t errlen);
  /* slices: a scan's per x then per y (its memory, its staging buffer or NULL), or NULL */
  int (*drive)(void *driver, int scan, const kl_exec *xfirst, const kl_exec *xbody, void *const *bound, int64_t length,
               void *const *slices, int nslices, int *parity, char *err, size_t errlen);
  /* optional (the GPU's): a while loop run on the device, as kl_cuda_while_graph (runtime/cuda.h) */
  void *(*while_graph)(int (*body)(void *ctx, char *err, size_t errlen), void *ctx, const void *pred, int ncopies,
                       void *const *dst, void *const *src, const size_t *bytes, int unroll, void *flags, char *err,
                       size_t errlen);
  int (*while_launch)(void *graph, char *err, size_t errlen);
  void (*while_free)(void *graph);
  /* optional, with bind: points a binding at other inputs and outputs (a scan's next slices) */
  void (*retarget)(void *bound, void *const *in, void *const *out);
  /* optional (the GPU's): whether a graph is being captured, and a cond's two branches queued
   * into it as conditional nodes, as kl_cuda_if_captured (runtime/cuda.h); has_if: whether the
   * driver can */
  int (*capturing)(void);
  int (*if_captured)(const void *pred, int (*branch)(void *ctx, int which, char *err, size_t errlen), void *ctx,
                     char *err, size_t errlen);
  int (*has_if)(void);
  /* optional (the GPU's): a scan run as a device-side while loop: host memory written to device
   * memory (in the device's order), and a trip's slices moved, as kl_cuda_scan_move */
  int (*upload)(void *dst, const void *host, size_t n, char *err, size_t errlen);
  int (*scan_move)(int out, const void *state, int64_t length, int reverse, const void *bases, int n, void *const *stage,
                   const size_t *bytes, char *err, size_t errlen);
  /* optional, with bind: step s's argument pointers in a binding */
  void **(*bound_args)(void *bound, int s);
} kl_loop_target;
extern const kl_loop_target kl_loop_cpu;

/* Fills st (its slots from slot_of) for while or scan equation e of pg: the bodies are compiled
 * for target t, the step runs the loop from the host. *out: what the step's ctx owns (free with
 * kl_loop_free once the executable goes). 0, or -1 with a message. */
int kl_compile_loop_step(const kl_program *pg, const kl_eqn *e, const int *slot_of, const kl_loop_target *t, kl_step *st,
                         kl_loop **out, char *err, size_t errlen);
void kl_loop_free(kl_loop *l);
/* For result j of a while or scan equation e: the operand holding that carry's initial value
 * when the loop keeps the carry in one buffer, its result's (the body updates it in place or
 * passes it through), else -1. Such a result may be given its initial value's buffer (a dying
 * temporary's, or a donated input's): the loop then starts in place instead of copying it in. */
int kl_loop_carry_init(const kl_eqn *e, int j);
/* A cond step's branch executables (false, true): 1, or 0 for any other step. */
int kl_loop_cond_branches(const kl_step *st, kl_exec **f, kl_exec **t);
/* Binds a cond step's two branches (t->bind) over the pointers ptrs the step runs with: a handle
 * (free with kl_loop_cond_unbind), native[0] and native[1] the false and true branch's bindings;
 * NULL with a message. */
void *kl_loop_cond_bind(const kl_step *st, void **ptrs, void **native, char *err, size_t errlen);
void kl_loop_cond_unbind(void *handle);
/* The same kept with the cond for later runs over the same pointers (small branches, a bounded
 * number of sets), with *plan, made once by make_plan (malloc'd; the cond frees it): 1, or 0 when
 * the cond keeps no more (bind for this run instead), -1 with a message. */
int kl_loop_cond_kept(const kl_step *st, void **ptrs, void **native, void ***plan,
                      void **(*make_plan)(const kl_step *st, void **ptrs, void *const *native), char *err, size_t errlen);
/* Elements a loop step touches, about (a while loop's trips guessed): its executable's cost, for
 * running small programs in the caller. */
int64_t kl_loop_cost(const kl_loop *l);
/* " (scan of 10 trips over a body of 2 steps, while over ...)" for KILN_LOG_COMPILES; "" for none. */
void kl_loops_describe(kl_loop *const *loops, int n, kl_str *out);

/* ---- CPU loops compiled whole (loop_cpu.c, compile.c) ---- */

/* One program of a compiled loop: its executable and, per step, the kernel function (KLPFX<i>)
 * the loop calls directly, or -1 for a step run through the runtime (a library call, a nested
 * loop, a kernel worth threads). */
typedef struct {
  const kl_exec *x;
  const int *fn;
  const struct kl_loop_slices *sl; /* a scan body's slices of xs and ys, or NULL */
} kl_loop_shape;
/* A scan over xs or ys compiled whole: its body's inputs are (nk consts, n carries, nx x slices),
 * its outputs (n carries, ny y slices); per trip t (from the end when reverse) the driver points
 * the body at slice t of each x and y, or copies it through the binding's staging buffer when
 * staged (a slice whose size is not a multiple of 16 bytes). */
/* Kernels assume 16-byte aligned buffers (vector loads): a slice of stacked xs or ys whose size
 * is not a multiple of 16 bytes is copied through a staging buffer of its own. */
static inline int kl_loop_staged(size_t slice_bytes) { return slice_bytes % 16 != 0; }
typedef struct kl_loop_slices {
  int nk, n, nx, ny, reverse;
  const size_t *xbytes, *ybytes; /* bytes per slice */
} kl_loop_slices;
/* Which slice slot `slot` of scan body x holds, when the driver points it per trip: q for x q,
 * nx + q for y q (unstaged ones only: a staged slice lives in the binding's staging buffer);
 * -1 for any other slot (and for any slot without slices, sl NULL). */
int kl_loop_slice_of(const kl_exec *x, const kl_loop_slices *sl, int slot);
/* Appends to mod the MLIR function `name` (a kl_kernel_fn: the table of drive()'s pointers, 0,
 * the trip count) that runs a while loop (scan = 0: sh[0] the condition, sh[1] the body) or a
 * scan (sh[0] the body). */
void kl_loop_driver_emit(int scan, const kl_loop_shape *sh, const char *name, kl_str *mod);
/* compile.c: the programs and the driver in one module (sl: a scan's slices, or NULL). 0, or -1
 * with a message. */
/* compile.c: a step a compiled loop calls directly (a kernel small enough for one thread): its
 * function (once its module is compiled), else NULL; and whether a cond step's branches are all
 * such steps (the driver then calls them itself: KL_LOOP_COND among a loop shape's fn). */
kl_kernel_fn kl_cpu_direct_fn(const kl_step *st);
int kl_cpu_cond_direct(const kl_step *st);
#define KL_LOOP_COND (-2)
int kl_compile_cpu_loop(kl_program *first, kl_program *body, int scan, const kl_loop_slices *sl, kl_exec **xfirst,
                        kl_exec **xbody, kl_kernel_fn *driver, char *err, size_t errlen);
#endif
