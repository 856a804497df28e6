/* runtime.h: devices, refcounted buffers that know when they are ready, executables made
 * of steps, and asynchronous execution. Knows nothing of the IR, MLIR or Python: a step
 * is a function over buffer pointers that codegen/ prepared. */
#ifndef KL_RUNTIME_H
#define KL_RUNTIME_H
#include <stddef.h>
#include <stdint.h>

typedef enum { KL_BUF_PENDING = 0, KL_BUF_READY = 1, KL_BUF_FAILED = 2 } kl_buf_state;
typedef enum { KL_DEV_CPU = 0, KL_DEV_CUDA = 1, KL_DEV_COUNT } kl_device_kind; /* runtime/device.h: their functions */
struct kl_event; /* a point in a device queue (runtime/cuda.c) */

typedef struct kl_buffer {
  int refcount;        /* atomic; starts at 1 for the creator */
  int state;           /* atomic kl_buf_state */
  void *data;          /* memory on `device` (host memory 64-byte aligned), owned (unless `owner` set) */
  size_t nbytes;
  void (*release)(void *owner); /* called instead of free(data) when the buffer wraps foreign memory */
  void *owner;
  char *error;         /* message when FAILED, owned */
  int device;          /* kl_device_kind: where `data` lives */
  int ordinal;         /* which device of that kind (simulated CPU devices all hold host memory) */
  int committed;       /* placed on `ordinal` by the user (device_put, a sharded or committed
                          computation's result): computations on it run there, their results
                          committed there too; uncommitted buffers go where they are used */
  struct kl_event *event; /* GPU buffers: the launch that writes them (NULL: ready), one ref */
  int shared;          /* also reachable by another library (DLPack, CUDA array interface) */
  int holders;         /* atomic; handles of the Python layer on it (launches hold references, not handles) */
  int writers;         /* atomic, CPU: launches queued that write it (a donated buffer can have several in
                          flight: only the last one's completion makes it READY) */
} kl_buffer;

/* Allocates a pending host buffer; NULL (with a message) if nbytes cannot be allocated. */
kl_buffer *kl_buf_new(size_t nbytes, char *err, size_t errlen);
/* The same on a device (KL_DEV_CUDA: device memory from the stream-ordered allocator, ready at
 * once in stream order). */
kl_buffer *kl_buf_new_on(int device, size_t nbytes, char *err, size_t errlen);
/* Wraps foreign host memory (ready at once); release(owner) runs when the last ref goes. */
kl_buffer *kl_buf_wrap(void *data, size_t nbytes, void (*release)(void *), void *owner);
void kl_buf_retain(kl_buffer *b);
void kl_buf_release(kl_buffer *b);
/* Blocks until b is ready or failed; returns its state. */
int kl_buf_wait(kl_buffer *b);
/* The same for at most `seconds` where the device can bound a wait (the CPU, CUDA): KL_BUF_PENDING when
 * the time ran out, so a waiter can look for Ctrl-C between waits. */
int kl_buf_wait_for(kl_buffer *b, double seconds);

/* Ctrl-C: a process-wide stop request. Loops check it each trip (the CPU's compiled loop drivers
 * read kl_rt_stop_flag() with a volatile load) and fail with "interrupted"; the waiter that saw
 * the KeyboardInterrupt requests the stop, waits for what it waited on, then clears it. */
void kl_rt_stop_request(void);
void kl_rt_stop_clear(void);
int kl_rt_stop_requested(void);
volatile int32_t *kl_rt_stop_flag(void);
/* 0, or -1 with KL_ERR_INTERRUPTED and "interrupted" in err while a stop is requested: what a
 * loop run by the host calls between trips. */
int kl_rt_stop_check(char *err, size_t errlen);
int kl_buf_is_ready(const kl_buffer *b);

/* One step of an executable: run(ctx, ptrs, lo, hi) over the parallel range [lo, hi) of
 * [0, extent). ptrs are the data pointers of `slots`, in the step's argument order. When
 * `partial_arg` >= 0 the step is a full reduction: each parallel chunk writes its own
 * private copy of argument `partial_arg`, merged afterwards with combine(). */
typedef struct {
  void (*run)(void *ctx, void **ptrs, int64_t lo, int64_t hi);
  void *ctx;           /* borrowed from the executable's owner */
  int *slots;          /* owned */
  int nslots;
  int64_t extent;      /* parallel range; 1 if the step is not parallel */
  int64_t cost;        /* elements touched, for the threading decision */
  int partial_arg;     /* -1, or the argument merged by combine */
  void (*combine)(void *ctx, void *dst, void *const *parts, int nparts);
  /* Library steps may fail: returns 0 or nonzero with a message. NULL: run() cannot fail. */
  int (*run_checked)(void *ctx, void **ptrs, char *err, size_t errlen);
  int on_host;         /* GPU executables: run_checked runs on host copies of the slots... */
  int host_nin;        /* ...of which the first host_nin are inputs (copied down), the rest outputs */
  int is_library;      /* GPU executables: a library call (cuBLAS) rather than a kernel launch */
  int synchronizes;    /* GPU executables: a loop whose host reads device memory (no CUDA graph) */
  int side_stream;     /* GPU executables: queued on the GPU's communication stream (NCCL collectives),
                          so that the work after it overlaps it until something reads its slots */
  int if_node;         /* GPU executables: a cond (or a loop holding one) that, in a captured graph,
                          becomes conditional nodes instead of reading its predicate */
  int64_t launches;    /* GPU executables: launches the step makes (a scan's: trips x its body's);
                          0 counts as 1 */
} kl_step;

/* A functional update the user wrote (dynamic_update_slice or scatter with a source location,
 * ir/loc.h) and whether it writes into its operand's buffer: for the copy log. */
typedef struct {
  int loc;           /* ir/loc.h id */
  const char *prim;  /* its primitive's name (static) */
  int in_place;      /* writes into its operand's buffer (a dying temporary's) */
  int operand_input; /* the executable's input it updates, or -1 */
  int output;        /* the executable's output it makes, or -1 */
  int donor_ok;      /* in place when the call donates that input (x->donor[output] == operand_input) */
  int why;           /* kl_copy_why (ir/loc.h) when it copies */
  size_t bytes;      /* the operand's */
  char type[64];     /* "float32[1024,8]" */
  int reported;      /* atomic: logged once already */
} kl_update;

typedef struct kl_exec {
  int device;         /* kl_device_kind the steps run on */
  int nslots;
  size_t *slot_bytes; /* owned; bytes per slot */
  int ninputs, noutputs;
  int *in_slots;      /* owned; slot of each input */
  int *out_slots;     /* owned; slot of each output (may repeat, may be an input slot) */
  int *live;          /* owned, made at the first launch (kl_exec_live), or NULL */
  void *temp_plan;    /* owned, made at the first launch (kl_exec_temp_plan), or NULL */
  int *donor;         /* owned, or NULL; per output, the input whose buffer it may be written into
                         (the input dead once the output's kernel runs, read there only at the
                         output's own index; same bytes), or -1: what donation can use */
  kl_step *steps;     /* owned */
  int nsteps;
  kl_update *updates; /* owned, or NULL: the user's updates among the steps (copy log) */
  int nupdates;
  int64_t cost;       /* total elements touched */
  int callbacks;      /* it calls host callbacks (debug.print, pure_callback, io_callback): on the
                         CPU its caller waits for it (kl_exec_wait_callbacks) */
  char *host_steps;   /* owned, or NULL: "prim dtype[dims]" per line of each step of a GPU
                         executable that runs on the host over copies (a round trip) */
  void *dev_state;    /* the device's own state for this executable (CUDA: its graph), freed by
                         the device's exec_state_free */
  void *owner;        /* compiled code and contexts, freed by destroy */
  void (*destroy)(void *owner);
  int refcount;       /* atomic */
  uint64_t group_warm; /* atomic: the GPUs (bits by ordinal) where an SPMD launch of x has queued every
                          step: later launches there skip the first's rendezvous around collectives
                          (collective.h's kl_coll_group_set_careful) */
  char name[64];       /* what profiles call it (jit's function, an eager primitive), or "" */
} kl_exec;

void kl_exec_retain(kl_exec *x);
/* When each slot is alive, made once: live[sl] is the first step that uses slot sl (-1 for an
 * input, there before the first step; INT_MAX when no step does), live[x->nslots + sl] the last
 * (INT_MAX for inputs and outputs, kept after the launch; -1 when no step does). Launches free a
 * temporary after its last step; a graph's arena shares memory between slots never alive at
 * once. NULL when out of host memory (then nothing is freed early). */
const int *kl_exec_live(kl_exec *x);
/* An arena for x's slots flagged in in_arena (NULL: every slot): each at an offset off[sl] where
 * no flagged slot alive during any of the same steps overlaps it (kl_exec_live), largest first,
 * each at the lowest offset that fits: the arena holds the program's peak, not the sum of its
 * values. Returns its bytes, or 0 when out of host memory. A CUDA graph lays out every slot so;
 * a CPU launch and a bound loop body their temporaries. */
size_t kl_exec_arena_plan(kl_exec *x, const char *in_arena, size_t *off);
/* x's temporaries (slots no input or output holds, used by a step) in one arena: in[sl] whether
 * slot sl is there, off[sl] its offset, bytes the arena's size (> 0). */
typedef struct {
  size_t bytes;
  size_t *off;
  char *in;
} kl_temp_plan;
/* Made at the first call and kept in x->temp_plan: the plan, or NULL when x has no temporaries
 * (or host memory ran out: then slot by slot). */
const kl_temp_plan *kl_exec_temp_plan(kl_exec *x);
void kl_exec_release(kl_exec *x);

/* Launches x on inputs (borrowed; each retained until done). Writes new output buffers (owned
 * by the caller) into outs. Returns before the work is done unless the work is tiny and the
 * device is idle. Returns 0, or -1 with a message if outputs cannot be allocated. */
int kl_exec_launch(kl_exec *x, kl_buffer **inputs, kl_buffer **outs, char *err, size_t errlen);
/* The same, output j written into preset[j] where that is not NULL (a donated input's buffer,
 * inputs[x->donor[j]], that nothing else holds: its old contents are gone afterwards). */
int kl_exec_launch_into(kl_exec *x, kl_buffer **inputs, kl_buffer *const *preset, kl_buffer **outs, char *err,
                        size_t errlen);

/* Where the participants of an SPMD launch sit in a group that spans processes (the processes
 * connected by collective_net.h; GPUs' collectives through NCCL communicators between them). */
typedef struct kl_span {
  int size;         /* ranks in the group, in every process */
  const int *ranks; /* per participant of this launch, its rank in the group */
  const int *procs; /* per rank, the process running it */
} kl_span;

/* An SPMD launch: x once per participant p < n, on device ordinal ordinals[p] of x's kind, over
 * inputs[p * x->ninputs ...], outputs into outs[p * x->noutputs ...] (committed to their
 * participant's device). The launches run concurrently (each simulated CPU device on a thread of
 * its own) and meet at their collectives (runtime/collective.h). span NULL: the group is the n
 * participants, ranks 0..n-1; else they are span->ranks of a group of span->size ranks over
 * several processes, the others run by the other processes' launches of the same program. 0, or
 * -1 with a message. */
int kl_exec_launch_group(kl_exec *x, int n, const int *ordinals, const kl_span *span, kl_buffer **inputs,
                         kl_buffer **outs, char *err, size_t errlen);

/* Waits until every launched piece of work is finished, on every available device. */
void kl_rt_synchronize(void);
/* After launching x: a CPU program with host callbacks has run them when this returns (waits for
 * the CPU queue), as JAX's CPU client does, so what they print is out, and the error one raises
 * is the call's, before the caller's next line; anything else returns at once. Blocks: call it
 * without holding a client lock that a callback needs (Python's GIL). */
void kl_exec_wait_callbacks(const kl_exec *x);
/* Threads the CPU device splits a step across (KILN_NUM_THREADS, else the cores). */
int kl_rt_num_threads(void);
/* An executable bound to memory for many runs (a loop's body), the device-neutral half (device.c):
 * every step's argument pointers (and sizes) for given inputs and outputs and per-slot
 * temporaries that the device fills in (tmp[slot] for each slot kl_binding_is_temp names);
 * outputs whose slot is an input's or another output's are copied after a run (late). */
typedef struct {
  const kl_exec *x;
  void **args;       /* every step's pointers, step after step */
  size_t *bytes;     /* and their sizes */
  int *first;        /* per step: where its pointers start */
  void **tmp, **at;  /* per slot: its temporary (NULL: an input's or output's); scratch */
  char *temp;        /* per slot: whether it needs a temporary */
  void **outs;       /* per output: its memory, then where the steps leave it */
  void **late_dst, **late_src;
  size_t *late_bytes;
  int nlate;
} kl_binding;
/* 0, or -1 (out of host memory, with a message; b freed). */
int kl_binding_init(kl_binding *b, const kl_exec *x, char *err, size_t errlen);
/* Whether slot sl of b's executable needs a temporary (no input or output is there). */
int kl_binding_is_temp(const kl_binding *b, int sl);
/* Points every step at in/out and the temporaries (again for other inputs and outputs). */
void kl_binding_point(kl_binding *b, void *const *in, void *const *out);
void kl_binding_free(kl_binding *b);
/* A device's bound executable: `size` zeroed bytes whose first member is a kl_binding, initialized
 * for x (malloc'd; free the binding with kl_binding_free, then the struct); NULL with a message. */
void *kl_binding_new(size_t size, const kl_exec *x, char *err, size_t errlen);
/* Step s's argument pointers. */
static inline void **kl_binding_args(const kl_binding *b, int s) { return b->args + b->first[s]; }
/* Bytes of x's temporaries (its slots of no input or output): what a binding allocates. */
size_t kl_exec_temp_bytes(const kl_exec *x);

/* Runs CPU executable x now, on this thread (a loop's condition or body inside a step): reads
 * in[0..ninputs), writes out[0..noutputs) (x's slot sizes) in place. An out[i] may be an in[j]
 * when x reads in[j] only in the step that writes out[i] (an update in place). 0, or -1 with a
 * message. */
int kl_cpu_exec_run(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen);
/* The same, bound once and run many times (a while loop's body for each parity of its carries):
 * kl_cpu_bind fixes every step's pointers and allocates the temporaries (NULL with a message),
 * kl_cpu_bound_run runs the steps (0, or -1 with a message), kl_cpu_unbind frees. x must outlive
 * the binding. */
typedef struct kl_cpu_bound kl_cpu_bound;
kl_cpu_bound *kl_cpu_bind(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen);
int kl_cpu_bound_run(const kl_cpu_bound *b, char *err, size_t errlen);
void kl_cpu_unbind(kl_cpu_bound *b);
/* Points a binding at other inputs and outputs (a scan's next slices), its temporaries kept. */
void kl_cpu_bound_retarget(kl_cpu_bound *b, void *const *in, void *const *out);
/* For a loop compiled around bound bodies (codegen/loop_cpu.c): step s's argument pointers;
 * output i's memory (*dst) and where the steps leave it (*src: dst, or a buffer copied into dst
 * after a run); running step s alone (0, or -1 with a message). */
void **kl_cpu_bound_args(const kl_cpu_bound *b, int s);
void kl_cpu_bound_output(const kl_cpu_bound *b, int i, void **dst, void **src);
int kl_cpu_bound_step(const kl_cpu_bound *b, int s, char *err, size_t errlen);
/* Below this many elements touched a CPU step runs on one thread: waking workers costs more. */
#define KL_CPU_PARALLEL_MIN_COST (1 << 16)
/* Runs fn(ctx, lo, hi) over parts of [0, n) on the CPU pool's threads, or over all of it in the
 * caller when the pool is busy or has one thread. */
void kl_rt_parallel_for(int64_t n, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx);

#endif
