/* cuda_graph.c: GPU executables as CUDA graphs. A program of many small steps (a transformer's
 * training step: hundreds of kernels and cuBLAS calls) spends its time in the host's launch calls,
 * several microseconds each, not on the GPU. Such an executable is captured once into a CUDA graph
 * over an arena of its own, one fixed address per slot, and each call copies its inputs into the
 * arena, launches the graph and copies its outputs out into new buffers: three kinds of calls
 * instead of one per step. The copies cost device bandwidth, so a program qualifies when they are
 * cheap against the launches they save (KILN_GPU_GRAPH_MIN_STEPS: the fewest steps, 0 turns graphs
 * off). Programs with host steps run step by step. Reaches the driver through runtime/cuda.h. */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/loc.h"
#include "../ir/program.h"
#include "../ir/status.h"
#include "cuda.h"

typedef void *CUgraph, *CUgraphExec;
static int (*p_cuStreamBeginCapture)(void *, int);
static int (*p_cuStreamEndCapture)(void *, CUgraph *);
static int (*p_cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
static int (*p_cuGraphLaunch)(CUgraphExec, void *);
static int (*p_cuGraphDestroy)(CUgraph);
static int (*p_cuGraphExecDestroy)(CUgraphExec);
enum { CAPTURE_THREAD_LOCAL = 1 };

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded;

static void load_symbols(void) {
  *(void **)&p_cuStreamBeginCapture = kl_cuda_driver_symbol("cuStreamBeginCapture");
  *(void **)&p_cuStreamEndCapture = kl_cuda_driver_symbol("cuStreamEndCapture");
  *(void **)&p_cuGraphInstantiateWithFlags = kl_cuda_driver_symbol("cuGraphInstantiateWithFlags");
  *(void **)&p_cuGraphLaunch = kl_cuda_driver_symbol("cuGraphLaunch");
  *(void **)&p_cuGraphDestroy = kl_cuda_driver_symbol("cuGraphDestroy");
  *(void **)&p_cuGraphExecDestroy = kl_cuda_driver_symbol("cuGraphExecDestroy");
  loaded = p_cuStreamBeginCapture && p_cuStreamEndCapture && p_cuGraphInstantiateWithFlags && p_cuGraphLaunch &&
           p_cuGraphDestroy && p_cuGraphExecDestroy;
}

/* 1 when the driver has graphs (optional: without them launches go step by step). */
static int load(void) {
  pthread_once(&load_once, load_symbols);
  return loaded;
}

typedef struct {
  CUgraphExec exec;
  void *arena;
  size_t arena_bytes;
  size_t *off; /* per slot: its offset in the arena */
  int state;   /* 0: not tried yet, 1: ready, -1: this program runs step by step */
  pthread_mutex_t mu; /* one call at a time enqueues its copies and launch (the arena is shared) */
} gpu_graph;

static atomic_int capturing;
static atomic_long n_graphs, n_branches, n_loops;

void kl_cuda_graph_stats(long *graphs, long *branches, long *loops) {
  *graphs = atomic_load(&n_graphs);
  *branches = atomic_load(&n_branches);
  *loops = atomic_load(&n_loops);
}
int kl_cuda_capturing(void) { return atomic_load(&capturing); }

void kl_cuda_graph_free(void *p) {
  gpu_graph *g = p;
  if (!g) return;
  if (g->exec && load()) p_cuGraphExecDestroy(g->exec);
  if (g->arena) kl_cuda_free(g->arena, g->arena_bytes);
  pthread_mutex_destroy(&g->mu);
  free(g->off);
  free(g);
}

static int graph_min_steps(void) {
  static int n = -1;
  if (n < 0) n = kl_cuda_env_count("KILN_GPU_GRAPH_MIN_STEPS", 32);
  return n;
}

/* Launches an executable makes: a scan step's are its trips times its body's. */
static double launches_of(const kl_exec *x) {
  double n = 0;
  for (int i = 0; i < x->nsteps; i++) n += x->steps[i].launches > 1 ? (double)x->steps[i].launches : 1;
  return n;
}

/* a longer scan is not worth capturing whole (nor its memory): KILN_GPU_GRAPH_MAX_LAUNCHES */
static double graph_max_launches(void) {
  static double n = -1;
  if (n < 0) {
    const char *e = getenv("KILN_GPU_GRAPH_MAX_LAUNCHES");
    n = e && *e && atof(e) > 0 ? atof(e) : 50000;
  }
  return n;
}

/* Whether x should run as a graph: enough launches (a scan's whole loop is captured, its trips
 * unrolled in the graph), none on the host or reading device memory, not too many, and the
 * graph's extra device work cheaper than the host time it saves. Step by step, a call takes the
 * longer of its launches (about 5 us of host time each) and its device work (at least the bytes
 * its steps touch at 2.5 TB/s); as a graph, the device work plus the input/output copies. A model's
 * training step (hundreds of parameters in and out, milliseconds of products) keeps its launches
 * hidden behind the device's work, and would only gain the copies (GPT-2 small: ~900 copies,
 * 3 GB a step). */
static int graph_wanted(const kl_exec *x) {
  int min = graph_min_steps();
  double n = launches_of(x);
  if (!min || n < min || n > graph_max_launches() || !load()) {
    if (n > graph_max_launches() && getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") >= '1')
      fprintf(stderr, "kiln: a GPU program of %.0f launches runs step by step (a graph takes at most %.0f)\n", n,
              graph_max_launches());
    return 0;
  }
  double io = 0;
  for (int i = 0; i < x->nsteps; i++)
    if (x->steps[i].on_host || x->steps[i].synchronizes) {
      if (getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") >= '1')
        fprintf(stderr, "kiln: a GPU program of %d steps runs step by step: step %d %s\n", x->nsteps, i,
                x->steps[i].on_host ? "runs on the host" : "reads device memory back (a loop's condition)");
      return 0;
    }
  for (int i = 0; i < x->ninputs; i++) io += (double)x->slot_bytes[x->in_slots[i]];
  for (int i = 0; i < x->noutputs; i++) io += (double)x->slot_bytes[x->out_slots[i]];
  double work = 0; /* bytes the steps read and write (a scan's slots counted once: a lower bound) */
  for (int i = 0; i < x->nsteps; i++)
    for (int j = 0; j < x->steps[i].nslots; j++) work += (double)x->slot_bytes[x->steps[i].slots[j]];
  int wanted = (io + work) / 2.5e12 < n * 5e-6;
  if (!wanted && getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") >= '1')
    fprintf(stderr, "kiln: a GPU program of %.0f launches runs step by step: its device work (%.3g MB) hides the "
            "launches, and a graph would add %.3g MB of copies\n", n, work / 1e6, io / 1e6);
  return wanted;
}

/* KILN_DUMP: the arena's layout (<seq>-gpu-arena.txt): each slot's offset, bytes and steps. */
static void arena_dump(kl_exec *x, const size_t *off, size_t total) {
  const int *live = kl_exec_live(x);
  kl_str t;
  kl_str_init(&t);
  kl_str_printf(&t, "graph arena: %zu bytes for %d slots (their sum: ", total, x->nslots);
  size_t sum = 0;
  for (int sl = 0; sl < x->nslots; sl++) sum += x->slot_bytes[sl];
  kl_str_printf(&t, "%zu bytes)\nslot         offset          bytes  steps\n", sum);
  for (int sl = 0; live && sl < x->nslots; sl++) {
    kl_str_printf(&t, "%4d %14zu %14zu  ", sl, off[sl], x->slot_bytes[sl]);
    if (live[sl] == INT_MAX) kl_str_append(&t, "unused\n");
    else if (live[sl] < 0) kl_str_append(&t, "input\n");
    else if (live[x->nslots + sl] == INT_MAX) kl_str_printf(&t, "%d..end (output)\n", live[sl]);
    else kl_str_printf(&t, "%d..%d\n", live[sl], live[x->nslots + sl]);
  }
  if (!t.failed) kl_dump("gpu-arena.txt", t.data);
  kl_str_free(&t);
}

/* Captures x's steps over a new arena: 0, or -1 (the program then runs step by step). */
static int graph_build(kl_exec *x, gpu_graph *g) {
  char err[256];
  g->off = malloc(sizeof(size_t) * ((size_t)x->nslots + 1));
  if (!g->off) return -1;
  size_t total = kl_exec_arena_plan(x, NULL, g->off);
  if (!total) return -1;
  if (kl_dump_enabled()) arena_dump(x, g->off, total);
  if (kl_cuda_alloc(total, &g->arena, err, sizeof err)) return -1;
  g->arena_bytes = total;
  void *small[64];
  int rc = 0;
  atomic_store(&capturing, 1);
  void *stream = kl_cuda_stream();
  if (p_cuStreamBeginCapture(stream, CAPTURE_THREAD_LOCAL)) {
    atomic_store(&capturing, 0);
    return -1;
  }
  for (int s = 0; s < x->nsteps && !rc; s++) {
    const kl_step *st = &x->steps[s];
    void **ptrs = st->nslots <= 64 ? small : malloc(sizeof(void *) * (size_t)st->nslots);
    if (!ptrs) {
      rc = -1;
      break;
    }
    for (int i = 0; i < st->nslots; i++) ptrs[i] = (char *)g->arena + g->off[st->slots[i]];
    rc = st->run_checked(st->ctx, ptrs, err, sizeof err);
    if (ptrs != small) free(ptrs);
  }
  CUgraph graph = NULL;
  int r = p_cuStreamEndCapture(stream, &graph); /* always ends the capture */
  atomic_store(&capturing, 0);
  int ri = !rc && !r && graph ? p_cuGraphInstantiateWithFlags(&g->exec, graph, 0) : -1;
  if (!ri) {
    rc = 0;
    atomic_fetch_add(&n_graphs, 1);
  } else {
    if (getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") >= '1')
      fprintf(stderr, "kiln: a GPU program of %d steps runs step by step: its graph %s (CUDA error %d%s%s)\n", x->nsteps,
              rc ? "could not be captured" : r ? "capture failed" : "did not instantiate", rc ? 0 : r ? r : ri,
              rc ? ": " : "", rc ? err : "");
    rc = -1;
  }
  if (graph) p_cuGraphDestroy(graph);
  return rc;
}

/* The copy log (kiln_log_copies): a graph's calls copy their inputs and outputs through its arena. */
static void copies_note(const kl_exec *x) {
  double bytes = 0;
  int n = 0;
  for (int i = 0; i < x->ninputs; i++) bytes += (double)x->slot_bytes[x->in_slots[i]], n += x->slot_bytes[x->in_slots[i]] > 0;
  for (int i = 0; i < x->noutputs; i++) bytes += (double)x->slot_bytes[x->out_slots[i]], n += x->slot_bytes[x->out_slots[i]] > 0;
  fprintf(stderr, "kiln: copy: a GPU program of %d steps runs as a CUDA graph: each call makes %d device-to-device copies "
          "(%.1f MiB) of its inputs and outputs through the graph's memory (KILN_GPU_GRAPH_MIN_STEPS=0 runs it step by "
          "step, without them)\n", x->nsteps, n, bytes / (1 << 20));
}

/* Launches x as its graph when it qualifies: 1 (bufs holds every slot of an input or output,
 * outputs written in stream order), 0 (run it step by step), -1 with a message. */
int kl_cuda_graph_launch(kl_exec *x, kl_buffer **bufs, char *err, size_t errlen) {
  gpu_graph *g = x->dev_state;
  if (!g) {
    if (!graph_min_steps() || launches_of(x) < graph_min_steps()) return 0; /* graphs off, or a small program */
    g = calloc(1, sizeof *g);
    if (!g) return 0;
    pthread_mutex_init(&g->mu, NULL);
    if (!graph_wanted(x)) g->state = -1; /* decided once, not on every call */
    /* two threads launching the same new executable: one keeps its state, the other's goes */
    void *expected = NULL;
    if (!atomic_compare_exchange_strong((_Atomic(void *) *)&x->dev_state, &expected, g)) {
      pthread_mutex_destroy(&g->mu);
      free(g);
      g = expected;
    }
  }
  static pthread_mutex_t build_mu = PTHREAD_MUTEX_INITIALIZER;
  if (g->state == 0) {
    pthread_mutex_lock(&build_mu);
    if (g->state == 0) {
      g->state = graph_build(x, g) ? -1 : 1;
      if (g->state > 0 && (kl_copies_mode() & KL_COPIES_LOG)) copies_note(x);
    }
    pthread_mutex_unlock(&build_mu);
  }
  if (g->state < 0) return 0;
  /* copies in, the graph, copies out: enqueued by one call at a time, so that another thread's
   * inputs never land in the arena between them */
  int rc = 1;
  pthread_mutex_lock(&g->mu);
  for (int i = 0; i < x->ninputs && rc > 0; i++) {
    int sl = x->in_slots[i];
    if (x->slot_bytes[sl] && kl_cuda_copy((char *)g->arena + g->off[sl], 1, bufs[sl]->data, 1, x->slot_bytes[sl], err, errlen))
      rc = -1;
  }
  int r = rc > 0 ? p_cuGraphLaunch(g->exec, kl_cuda_stream()) : 0;
  if (r) rc = -1, snprintf(err, errlen, "launching a GPU program's graph failed (CUDA error %d)", r);
  for (int i = 0; i < x->noutputs && rc > 0; i++) {
    int sl = x->out_slots[i], skip = 0;
    for (int j = 0; j < x->ninputs; j++) skip |= x->in_slots[j] == sl; /* an input passed through */
    for (int k = 0; k < i; k++) skip |= x->out_slots[k] == sl;       /* an output listed twice */
    if (skip) continue;
    /* a new buffer, or the one preset for it (a donated input's, copied in above) */
    if (!bufs[sl] && !(bufs[sl] = kl_buf_new_on(KL_DEV_CUDA, x->slot_bytes[sl], err, errlen))) rc = -1;
    else if (x->slot_bytes[sl] &&
             kl_cuda_copy(bufs[sl]->data, 1, (char *)g->arena + g->off[sl], 1, x->slot_bytes[sl], err, errlen))
      rc = -1;
  }
  pthread_mutex_unlock(&g->mu);
  return rc;
}

/* ---- device-side while loops: conditional graph nodes ----
 * The graph: a kernel that sets the loop's condition handle from the predicate byte, then a
 * WHILE node whose body graph is captured from the caller's body(): the loop's work, then the
 * same setting kernel. The driver resolves cudaGraphSetConditional when it loads the kernel (no
 * device runtime library to link). Driver entry points of CUDA 12.3: cuGraphConditionalHandleCreate,
 * cuStreamBeginCaptureToGraph, cuGraphAddNode_v2 (with edge data). */
typedef void *CUgraphNode;
typedef unsigned long long CUgraphConditionalHandle;
static int (*p_cuGraphCreate)(CUgraph *, unsigned);
static int (*p_cuGraphConditionalHandleCreate)(CUgraphConditionalHandle *, CUgraph, void *, unsigned, unsigned);
static int (*p_cuStreamBeginCaptureToGraph)(void *, CUgraph, const CUgraphNode *, const void *, size_t, int);
static int (*p_cuGraphAddNode_v2)(CUgraphNode *, CUgraph, const CUgraphNode *, const void *, size_t, void *);
static int (*p_cuGraphGetNodes)(CUgraph, CUgraphNode *, size_t *);
static int (*p_cuCtxGetCurrent)(void **);
static int (*p_cuGraphInstantiateWithParams)(CUgraphExec *, CUgraph, void *);
static int (*p_cuGraphNodeGetType)(CUgraphNode, int *);
static int (*p_cuStreamGetCaptureInfo_v3)(void *, int *, unsigned long long *, CUgraph *, const CUgraphNode **,
                                          const void **, size_t *);
static int (*p_cuStreamUpdateCaptureDependencies_v2)(void *, CUgraphNode *, const void *, size_t, unsigned);
enum { NODE_EMPTY = 5, NODE_CONDITIONAL = 13, COND_IF = 0, COND_WHILE = 1, NODE_PARAMS_BYTES = 256, CAPTURE_ACTIVE = 1, SET_DEPS = 1 };

/* The kernel that ends each trip: copies up to KL_CUDA_WHILE_COPIES carries (16 bytes per thread
 * and step, the tail bytes by thread 0), then thread 0 sets the loop's condition from the
 * predicate byte. Parameters: the handle, the predicate, then (dst, src, bytes) per copy. */
static char next_ptx[65536];

/* A scan's trip on the device (kl_cuda_scan_move): one block moves up to KL_CUDA_SCAN_SLICES
 * slices between the stacked xs/ys and the body's fixed staging buffers, at index t (the trip
 * counter, state[0]) or L-1-t (reverse); nothing once t >= L. The out kernel then advances the
 * counter and writes the predicate byte (state[8]): whether another trip follows. Parameters:
 * the state, L, reverse, the table of stacked bases (device memory, u64 each), the count, then
 * per slice its staging buffer and its bytes. */
static char *write_scan_ptx(char *p, char *end, int out) {
  const char *nm = out ? "kl_scan_out" : "kl_scan_in";
  p += snprintf(p, (size_t)(end - p), ".visible .entry %s(.param .u64 st, .param .u64 len, .param .u64 rev, .param .u64 tab, .param .u64 cnt", nm);
  for (int k = 0; k < KL_CUDA_SCAN_SLICES; k++) p += snprintf(p, (size_t)(end - p), ", .param .u64 s%d, .param .u64 b%d", k, k);
  p += snprintf(p, (size_t)(end - p),
                ")\n{\n  .reg .pred %%p<8>;\n  .reg .b16 %%c;\n  .reg .b32 %%r<4>;\n  .reg .b32 %%v<4>;\n  .reg .b64 %%rd<32>;\n"
                "  ld.param.u64 %%rd1, [st];\n  cvta.to.global.u64 %%rd1, %%rd1;\n  ld.global.u64 %%rd2, [%%rd1];\n"
                "  ld.param.u64 %%rd3, [len];\n  setp.ge.u64 %%p1, %%rd2, %%rd3;\n  @%%p1 bra L_ret;\n"
                "  ld.param.u64 %%rd4, [rev];\n  setp.ne.u64 %%p2, %%rd4, 0;\n  sub.u64 %%rd5, %%rd3, %%rd2;\n"
                "  sub.u64 %%rd5, %%rd5, 1;\n  selp.u64 %%rd6, %%rd5, %%rd2, %%p2;\n"
                "  ld.param.u64 %%rd7, [tab];\n  cvta.to.global.u64 %%rd7, %%rd7;\n  ld.param.u64 %%rd8, [cnt];\n"
                "  mov.u32 %%r1, %%tid.x;\n  cvt.u64.u32 %%rd9, %%r1;\n  mov.u32 %%r2, %%ntid.x;\n  cvt.u64.u32 %%rd10, %%r2;\n");
  for (int k = 0; k < KL_CUDA_SCAN_SLICES; k++) {
    /* rd11: the staging buffer, rd12: bytes, rd14: the slice; copy from rd20 to rd21 */
    p += snprintf(p, (size_t)(end - p),
                  "  setp.le.u64 %%p3, %%rd8, %d;\n  @%%p3 bra L_moved;\n"
                  "  ld.param.u64 %%rd11, [s%d];\n  cvta.to.global.u64 %%rd11, %%rd11;\n  ld.param.u64 %%rd12, [b%d];\n"
                  "  ld.global.u64 %%rd13, [%%rd7+%d];\n  cvta.to.global.u64 %%rd13, %%rd13;\n"
                  "  mad.lo.u64 %%rd14, %%rd6, %%rd12, %%rd13;\n"
                  "  mov.u64 %%rd20, %s;\n  mov.u64 %%rd21, %s;\n"
                  "  and.b64 %%rd15, %%rd12, 15;\n  setp.ne.u64 %%p4, %%rd15, 0;\n  mov.u64 %%rd16, %%rd9;\n"
                  "  @%%p4 bra L%d_byte;\n  shr.u64 %%rd17, %%rd12, 4;\n"
                  "L%d_vec:\n  setp.ge.u64 %%p5, %%rd16, %%rd17;\n  @%%p5 bra L%d_end;\n"
                  "  shl.b64 %%rd18, %%rd16, 4;\n  add.u64 %%rd22, %%rd20, %%rd18;\n  add.u64 %%rd23, %%rd21, %%rd18;\n"
                  "  ld.global.v4.u32 {%%v0, %%v1, %%v2, %%v3}, [%%rd22];\n  st.global.v4.u32 [%%rd23], {%%v0, %%v1, %%v2, %%v3};\n"
                  "  add.u64 %%rd16, %%rd16, %%rd10;\n  bra L%d_vec;\n"
                  "L%d_byte:\n  setp.ge.u64 %%p5, %%rd16, %%rd12;\n  @%%p5 bra L%d_end;\n"
                  "  add.u64 %%rd22, %%rd20, %%rd16;\n  add.u64 %%rd23, %%rd21, %%rd16;\n"
                  "  ld.global.u8 %%c, [%%rd22];\n  st.global.u8 [%%rd23], %%c;\n  add.u64 %%rd16, %%rd16, %%rd10;\n  bra L%d_byte;\n"
                  "L%d_end:\n",
                  k, k, k, 8 * k, out ? "%rd11" : "%rd14", out ? "%rd14" : "%rd11", k, k, k, k, k, k, k, k);
  }
  p += snprintf(p, (size_t)(end - p), "L_moved:\n");
  if (out)
    p += snprintf(p, (size_t)(end - p),
                  "  bar.sync 0;\n  setp.ne.u64 %%p6, %%rd9, 0;\n  @%%p6 bra L_ret;\n"
                  "  add.u64 %%rd24, %%rd2, 1;\n  st.global.u64 [%%rd1], %%rd24;\n"
                  "  setp.lt.u64 %%p7, %%rd24, %%rd3;\n  selp.u16 %%c, 1, 0, %%p7;\n  st.global.u8 [%%rd1+8], %%c;\n");
  p += snprintf(p, (size_t)(end - p), "L_ret:\n  ret;\n}\n");
  return p;
}

static void write_next_ptx(void) {
  char *p = next_ptx, *end = next_ptx + sizeof next_ptx;
  p += snprintf(p, (size_t)(end - p),
                ".version 7.8\n.target sm_70\n.address_size 64\n"
                ".extern .func cudaGraphSetConditional(.param .b64 h, .param .b32 v);\n"
                ".visible .entry kl_while_next(.param .u64 h, .param .u64 pred, .param .u64 flags, .param .u64 rd,"
                " .param .u64 wr, .param .u64 stop");
  for (int k = 0; k < KL_CUDA_WHILE_COPIES; k++)
    p += snprintf(p, (size_t)(end - p), ", .param .u64 d%d, .param .u64 s%d, .param .u64 b%d", k, k, k);
  p += snprintf(p, (size_t)(end - p),
                ")\n{\n  .reg .pred %%p<8>;\n  .reg .pred %%q<2>;\n  .reg .b16 %%c;\n  .reg .b16 %%d;\n  .reg .b16 %%e;\n"
                "  .reg .b32 %%r<8>;\n  .reg .b32 %%s<2>;\n  .reg .b32 %%v<4>;\n  .reg .b64 %%rd<20>;\n"
                "  mov.u32 %%r1, %%ctaid.x;\n  mov.u32 %%r2, %%ntid.x;\n  mov.u32 %%r3, %%tid.x;\n  mov.u32 %%r4, %%nctaid.x;\n"
                "  mad.lo.u32 %%r5, %%r1, %%r2, %%r3;\n  mul.lo.u32 %%r6, %%r4, %%r2;\n"
                "  cvt.u64.u32 %%rd1, %%r5;\n  cvt.u64.u32 %%rd2, %%r6;\n"
                /* d: whether the loop was already done (the flag a trip reads; 0 without flags) */
                "  mov.u16 %%d, 0;\n  ld.param.u64 %%rd13, [flags];\n  setp.eq.u64 %%p5, %%rd13, 0;\n  @%%p5 bra L_read;\n"
                "  cvta.to.global.u64 %%rd13, %%rd13;\n  ld.param.u64 %%rd14, [rd];\n  add.u64 %%rd15, %%rd13, %%rd14;\n"
                "  ld.global.u8 %%d, [%%rd15];\n"
                "L_read:\n  setp.ne.s16 %%p6, %%d, 0;\n  @%%p6 bra L_copied;\n");
  for (int k = 0; k < KL_CUDA_WHILE_COPIES; k++)
    p += snprintf(p, (size_t)(end - p),
                  "  ld.param.u64 %%rd3, [d%d];\n  ld.param.u64 %%rd4, [s%d];\n  ld.param.u64 %%rd5, [b%d];\n"
                  "  cvta.to.global.u64 %%rd3, %%rd3;\n  cvta.to.global.u64 %%rd4, %%rd4;\n"
                  "  shr.u64 %%rd6, %%rd5, 4;\n  mov.u64 %%rd7, %%rd1;\n"
                  "L%d_vec:\n  setp.ge.u64 %%p1, %%rd7, %%rd6;\n  @%%p1 bra L%d_tail;\n"
                  "  shl.b64 %%rd8, %%rd7, 4;\n  add.u64 %%rd9, %%rd4, %%rd8;\n  add.u64 %%rd10, %%rd3, %%rd8;\n"
                  "  ld.global.v4.u32 {%%v0, %%v1, %%v2, %%v3}, [%%rd9];\n  st.global.v4.u32 [%%rd10], {%%v0, %%v1, %%v2, %%v3};\n"
                  "  add.u64 %%rd7, %%rd7, %%rd2;\n  bra L%d_vec;\n"
                  "L%d_tail:\n  setp.ne.u64 %%p2, %%rd1, 0;\n  @%%p2 bra L%d_end;\n  shl.b64 %%rd7, %%rd6, 4;\n"
                  "L%d_byte:\n  setp.ge.u64 %%p1, %%rd7, %%rd5;\n  @%%p1 bra L%d_end;\n"
                  "  add.u64 %%rd9, %%rd4, %%rd7;\n  add.u64 %%rd10, %%rd3, %%rd7;\n"
                  "  ld.global.u8 %%c, [%%rd9];\n  st.global.u8 [%%rd10], %%c;\n  add.u64 %%rd7, %%rd7, 1;\n  bra L%d_byte;\n"
                  "L%d_end:\n",
                  k, k, k, k, k, k, k, k, k, k, k, k);
  snprintf(p, (size_t)(end - p),
           "L_copied:\n  setp.ne.u64 %%p2, %%rd1, 0;\n  @%%p2 bra L_done;\n"
           "  ld.param.u64 %%rd11, [h];\n  ld.param.u64 %%rd12, [pred];\n  cvta.to.global.u64 %%rd12, %%rd12;\n"
           "  ld.global.u8 %%c, [%%rd12];\n  setp.ne.s16 %%p3, %%c, 0;\n"
           /* going on: the predicate holds and the loop was not done; done, with flags, recorded */
           "  not.pred %%p7, %%p6;\n  and.pred %%p3, %%p3, %%p7;\n"
           /* and no stop is requested (Ctrl-C, a host-mapped word): a loop that ends for it says so */
           "  ld.param.u64 %%rd18, [stop];\n  setp.eq.u64 %%q0, %%rd18, 0;\n  @%%q0 bra L_go;\n"
           "  ld.volatile.global.u32 %%s0, [%%rd18];\n  setp.ne.u32 %%q1, %%s0, 0;\n  and.pred %%q1, %%q1, %%p3;\n"
           "  mov.u32 %%s1, 1;\n  @%%q1 st.volatile.global.u32 [%%rd18+4], %%s1;\n"
           "  not.pred %%q1, %%q1;\n  and.pred %%p3, %%p3, %%q1;\n"
           "L_go:\n  selp.u32 %%r7, 1, 0, %%p3;\n"
           "  @%%p5 bra L_set;\n  selp.u16 %%e, 0, 1, %%p3;\n  ld.param.u64 %%rd16, [wr];\n  add.u64 %%rd17, %%rd13, %%rd16;\n"
           "  st.global.u8 [%%rd17], %%e;\n"
           "L_set:\n"
           "  {\n  .param .b64 p0;\n  .param .b32 p1;\n  st.param.b64 [p0], %%rd11;\n  st.param.b32 [p1], %%r7;\n"
           "  call.uni cudaGraphSetConditional, (p0, p1);\n  }\n"
           "L_done:\n  ret;\n}\n"
           /* a two-way branch: handle h0 set when the predicate byte is zero, h1 when it is not */
           ".visible .entry kl_if_set(.param .u64 h0, .param .u64 h1, .param .u64 pred)\n{\n"
           "  .reg .pred %%p;\n  .reg .b16 %%c;\n  .reg .b32 %%r<2>;\n  .reg .b64 %%rd<4>;\n"
           "  ld.param.u64 %%rd1, [pred];\n  cvta.to.global.u64 %%rd1, %%rd1;\n  ld.global.u8 %%c, [%%rd1];\n"
           "  setp.ne.s16 %%p, %%c, 0;\n  selp.u32 %%r0, 0, 1, %%p;\n  selp.u32 %%r1, 1, 0, %%p;\n"
           "  ld.param.u64 %%rd2, [h0];\n  ld.param.u64 %%rd3, [h1];\n"
           "  {\n  .param .b64 p0;\n  .param .b32 p1;\n  st.param.b64 [p0], %%rd2;\n  st.param.b32 [p1], %%r0;\n"
           "  call.uni cudaGraphSetConditional, (p0, p1);\n  }\n"
           "  {\n  .param .b64 p0;\n  .param .b32 p1;\n  st.param.b64 [p0], %%rd3;\n  st.param.b32 [p1], %%r1;\n"
           "  call.uni cudaGraphSetConditional, (p0, p1);\n  }\n  ret;\n}\n");
  p += strlen(p);
  for (int out = 0; out < 2; out++) p = write_scan_ptx(p, end, out);
}

const char *kl_cuda_graph_ptx(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, write_next_ptx);
  return next_ptx;
}

static pthread_once_t while_once = PTHREAD_ONCE_INIT;
static void *set_fn, *if_fn, *scan_fn[2];
static char while_why[200];
/* Ctrl-C for loops the device runs without the host (loop nodes): word 0 is the stop request,
 * written by the host; word 1 is set by a loop that ended because of it. Host-mapped memory, so
 * the trips of a running loop see the request; NULL where it could not be allocated (the loops
 * then run to their end). */
static uint32_t *_Atomic stop_words;

int kl_cuda_loops_stop(int requested) {
  uint32_t *w = atomic_load(&stop_words);
  if (!w) return 0;
  __atomic_store_n(&w[0], requested ? 1u : 0u, __ATOMIC_SEQ_CST);
  return requested ? 0 : __atomic_exchange_n(&w[1], 0u, __ATOMIC_SEQ_CST) != 0;
}

static void while_load(void) {
  if (!load()) {
    snprintf(while_why, sizeof while_why, "the driver has no CUDA graphs");
    return;
  }
  *(void **)&p_cuGraphCreate = kl_cuda_driver_symbol("cuGraphCreate");
  *(void **)&p_cuGraphConditionalHandleCreate = kl_cuda_driver_symbol("cuGraphConditionalHandleCreate");
  *(void **)&p_cuStreamBeginCaptureToGraph = kl_cuda_driver_symbol("cuStreamBeginCaptureToGraph");
  *(void **)&p_cuGraphAddNode_v2 = kl_cuda_driver_symbol("cuGraphAddNode_v2");
  *(void **)&p_cuGraphGetNodes = kl_cuda_driver_symbol("cuGraphGetNodes");
  *(void **)&p_cuCtxGetCurrent = kl_cuda_driver_symbol("cuCtxGetCurrent");
  *(void **)&p_cuGraphInstantiateWithParams = kl_cuda_driver_symbol("cuGraphInstantiateWithParams"); /* optional */
  *(void **)&p_cuGraphNodeGetType = kl_cuda_driver_symbol("cuGraphNodeGetType");                     /* optional */
  *(void **)&p_cuStreamGetCaptureInfo_v3 = kl_cuda_driver_symbol("cuStreamGetCaptureInfo_v3"); /* for branches */
  *(void **)&p_cuStreamUpdateCaptureDependencies_v2 = kl_cuda_driver_symbol("cuStreamUpdateCaptureDependencies_v2");
  if (!p_cuGraphCreate || !p_cuGraphConditionalHandleCreate || !p_cuStreamBeginCaptureToGraph || !p_cuGraphAddNode_v2 ||
      !p_cuGraphGetNodes || !p_cuCtxGetCurrent) {
    snprintf(while_why, sizeof while_why, "the driver has no conditional graph nodes (CUDA 12.3 or later has)");
    return;
  }
  void *image = NULL, *mod = NULL;
  size_t n = 0;
  char err[256];
  const char *ptx = kl_cuda_graph_ptx();
  if (kl_cuda_link_ptx(ptx, strlen(ptx) + 1, &image, &n, err, sizeof err) || kl_cuda_module_load(image, n, &mod, err, sizeof err) ||
      kl_cuda_function(mod, "kl_while_next", &set_fn, err, sizeof err) ||
      kl_cuda_function(mod, "kl_if_set", &if_fn, err, sizeof err) ||
      kl_cuda_function(mod, "kl_scan_in", &scan_fn[0], err, sizeof err) ||
      kl_cuda_function(mod, "kl_scan_out", &scan_fn[1], err, sizeof err)) {
    set_fn = if_fn = scan_fn[0] = scan_fn[1] = NULL;
    snprintf(while_why, sizeof while_why, "the condition-setting kernel did not load: %.150s", err);
  }
  free(image);
  if (set_fn) atomic_store(&stop_words, kl_cuda_host_words(2));
}

typedef struct {
  CUgraphExec exec;
} while_graph;

void kl_cuda_while_graph_free(void *p) {
  while_graph *g = p;
  if (!g) return;
  if (g->exec) p_cuGraphExecDestroy(g->exec);
  free(g);
}

/* Captures into graph `into` (an empty graph) what f(ctx) queues: 0, or -1. */
static int capture_into(CUgraph into, int (*f)(void *, char *, size_t), void *ctx, char *err, size_t errlen) {
  void *stream = kl_cuda_stream();
  if (p_cuStreamBeginCaptureToGraph(stream, into, NULL, NULL, 0, CAPTURE_THREAD_LOCAL))
    return kl_error(err, errlen, KL_ERR_INTERNAL, "could not capture a while loop's body");
  atomic_store(&capturing, 1);
  int rc = f(ctx, err, errlen);
  CUgraph out = NULL;
  int r = p_cuStreamEndCapture(stream, &out); /* always ends the capture */
  atomic_store(&capturing, 0);
  if (!rc && r) rc = kl_error(err, errlen, KL_ERR_INTERNAL, "capturing a while loop's body failed (CUDA error %d)", r);
  return rc;
}

typedef struct {
  int (*body)(void *, char *, size_t); /* queues a trip's body and condition */
  void *ctx;                           /* body's */
  CUgraphConditionalHandle h;          /* the loop node's condition */
  const void *pred;                    /* the condition's byte (device memory) */
  int ncopies;                         /* copies at each trip's end: dst[k] <- src[k], bytes[k] */
  void *const *dst, *const *src;
  const size_t *bytes;
  int unroll;  /* trips per pass of the loop node */
  void *flags; /* with unroll > 1: two device bytes, whether the loop is done */
} while_parts;

/* The trip's end: the copies (none for the first check), the condition set. */
/* With flags (unrolled trips), a trip reads whether the loop was done from one byte and writes
 * it to the other: the first check writes byte 1 (byte 0 is zeroed before each launch), trip j
 * of a pass reads byte (j + 1) % 2 and writes byte j % 2 (the unroll is even, so passes chain). */
static int queue_next(while_parts *w, int copies, int rd, int wr, char *err, size_t errlen) {
  enum { FIXED = 6 };
  void *args[FIXED + 3 * KL_CUDA_WHILE_COPIES];
  memset(args, 0, sizeof args);
  args[0] = (void *)(uintptr_t)w->h;
  args[1] = (void *)w->pred;
  args[2] = w->unroll > 1 ? w->flags : NULL;
  args[3] = (void *)(uintptr_t)rd;
  args[4] = (void *)(uintptr_t)wr;
  args[5] = atomic_load(&stop_words);
  size_t most = 0;
  for (int k = 0; k < (copies ? w->ncopies : 0); k++) {
    args[FIXED + 3 * k] = w->dst[k];
    args[FIXED + 1 + 3 * k] = w->src[k];
    args[FIXED + 2 + 3 * k] = (void *)(uintptr_t)w->bytes[k];
    if (w->bytes[k] > most) most = w->bytes[k];
  }
  size_t blocks = (most / 16 + 255) / 256;
  blocks = blocks < 1 ? 1 : blocks > 1024 ? 1024 : blocks;
  return kl_cuda_launch(set_fn, (unsigned)blocks, copies ? 256 : 1, args, FIXED + 3 * KL_CUDA_WHILE_COPIES, err, errlen);
}

static int queue_first(void *p, char *err, size_t errlen) { return queue_next(p, 0, 0, 1, err, errlen); }

static int queue_trips(void *p, char *err, size_t errlen) {
  while_parts *w = p;
  for (int j = 0; j < w->unroll; j++)
    if (w->body(w->ctx, err, errlen) || queue_next(w, 1, (j + 1) % 2, j % 2, err, errlen)) return -1;
  return 0;
}

void *kl_cuda_while_graph(int (*body)(void *ctx, char *err, size_t errlen), void *ctx, const void *pred, int ncopies,
                          void *const *dst, void *const *src, const size_t *bytes, int unroll, void *flags, char *err,
                          size_t errlen) {
  pthread_once(&while_once, while_load);
  if (!set_fn) {
    kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s", while_why);
    return NULL;
  }
  CUgraph graph = NULL;
  void *cu_ctx = NULL;
  while_parts w = {body, ctx, 0, pred, ncopies, dst, src, bytes, unroll > 1 && flags ? unroll + unroll % 2 : 1, flags};
  if (ncopies > KL_CUDA_WHILE_COPIES) {
    kl_error(err, errlen, KL_ERR_UNSUPPORTED, "a while loop of %d carries copied per trip (at most %d)", ncopies,
             KL_CUDA_WHILE_COPIES);
    return NULL;
  }
  while_graph *g = calloc(1, sizeof *g);
  int rc = g ? 0 : kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory building a while loop's graph");
  if (!rc && (p_cuCtxGetCurrent(&cu_ctx) || p_cuGraphCreate(&graph, 0) ||
              p_cuGraphConditionalHandleCreate(&w.h, graph, cu_ctx, 0, 0)))
    rc = kl_error(err, errlen, KL_ERR_INTERNAL, "could not create a while loop's graph");
  if (!rc) rc = capture_into(graph, queue_first, &w, err, errlen); /* the first check */
  CUgraphNode first = NULL;
  size_t n = 1;
  if (!rc && (p_cuGraphGetNodes(graph, &first, &n) || n != 1))
    rc = kl_error(err, errlen, KL_ERR_INTERNAL, "a while loop's graph has %zu nodes before its loop", n);
  unsigned char params[NODE_PARAMS_BYTES];
  memset(params, 0, sizeof params);
  if (!rc) {
    int type = NODE_CONDITIONAL, ctype = COND_WHILE;
    unsigned size = 1;
    memcpy(params, &type, sizeof type);
    memcpy(params + 16, &w.h, sizeof w.h);       /* conditional.handle */
    memcpy(params + 24, &ctype, sizeof ctype);   /* conditional.type */
    memcpy(params + 28, &size, sizeof size);     /* conditional.size */
    memcpy(params + 40, &cu_ctx, sizeof cu_ctx); /* conditional.ctx */
    CUgraphNode node = NULL;
    if (p_cuGraphAddNode_v2(&node, graph, &first, NULL, 1, params))
      rc = kl_error(err, errlen, KL_ERR_INTERNAL, "could not add a while node to a graph");
  }
  CUgraph *bodies = NULL;
  if (!rc) memcpy(&bodies, params + 32, sizeof bodies); /* conditional.phGraph_out */
  if (!rc && !bodies) rc = kl_error(err, errlen, KL_ERR_INTERNAL, "the driver gave a while node no body graph");
  if (!rc) rc = capture_into(bodies[0], queue_trips, &w, err, errlen);
  int r = 0;
  if (!rc && (r = p_cuGraphInstantiateWithFlags(&g->exec, graph, 0))) {
    /* why, where the driver says: the instantiation result and the type of the node at fault */
    struct {
      unsigned long long flags;
      void *upload_stream;
      CUgraphNode err_node;
      int result;
    } ip = {0, NULL, NULL, 0};
    int type = -1;
    CUgraphExec x = NULL;
    if (p_cuGraphInstantiateWithParams && !p_cuGraphInstantiateWithParams(&x, graph, &ip)) {
      g->exec = x; /* it went through this time */
      r = 0;
    }
    if (r && ip.err_node && p_cuGraphNodeGetType) p_cuGraphNodeGetType(ip.err_node, &type);
    if (r)
      rc = kl_error(err, errlen, KL_ERR_INTERNAL,
                    "a while loop's graph did not instantiate (CUDA error %d, instantiate result %d, node type %d)", r,
                    ip.result, type);
  }
  if (graph) p_cuGraphDestroy(graph);
  if (rc) {
    kl_cuda_while_graph_free(g);
    return NULL;
  }
  return g;
}

int kl_cuda_while_graph_launch(void *p, char *err, size_t errlen) {
  while_graph *g = p;
  atomic_fetch_add(&n_loops, 1);
  int r = p_cuGraphLaunch(g->exec, kl_cuda_stream());
  return r ? kl_error(err, errlen, KL_ERR_INTERNAL, "launching a while loop's graph failed (CUDA error %d)", r) : 0;
}

/* ---- two-way branches inside a captured graph: conditional IF nodes ---- */

int kl_cuda_has_conditionals(char *why, size_t n) {
  pthread_once(&while_once, while_load);
  int ok = set_fn && if_fn && p_cuStreamGetCaptureInfo_v3 && p_cuStreamUpdateCaptureDependencies_v2 &&
           kl_cuda_side_stream(0);
  if (!ok && why) snprintf(why, n, "%s", while_why[0] ? while_why : "the driver cannot add nodes to a capture (CUDA 12.3)");
  return ok;
}

/* The nodes the capture on `stream` goes on from: their count (at most `max`, copied into deps),
 * the graph into *graph; -1 when the stream is not capturing. */
static int capture_deps(void *stream, CUgraph *graph, CUgraphNode *deps, int max) {
  int status = 0;
  unsigned long long id = 0;
  const CUgraphNode *d = NULL;
  const void *edges = NULL;
  size_t n = 0;
  if (p_cuStreamGetCaptureInfo_v3(stream, &status, &id, graph, &d, &edges, &n) || status != CAPTURE_ACTIVE ||
      n > (size_t)max)
    return -1;
  for (size_t i = 0; i < n; i++) deps[i] = d[i];
  return (int)n;
}

/* How deep this thread is in branches being captured: a branch's own conds go one deeper. */
static _Thread_local int if_depth;

int kl_cuda_if_captured(const void *pred, int (*branch)(void *ctx, int which, char *err, size_t errlen), void *ctx,
                        char *err, size_t errlen) {
  char why[200];
  if (!kl_cuda_has_conditionals(why, sizeof why)) return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s", why);
  void *stream = kl_cuda_queue_stream(), *side = kl_cuda_side_stream(if_depth), *cu_ctx = NULL;
  if (!side)
    return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "conds nested more than %d deep in a captured graph", KL_CUDA_IF_DEPTH);
  CUgraph graph = NULL;
  CUgraphNode deps[64], nodes[2] = {NULL, NULL};
  CUgraphConditionalHandle h[2] = {0, 0};
  if (capture_deps(stream, &graph, deps, 64) < 0 || p_cuCtxGetCurrent(&cu_ctx) ||
      p_cuGraphConditionalHandleCreate(&h[0], graph, cu_ctx, 0, 0) ||
      p_cuGraphConditionalHandleCreate(&h[1], graph, cu_ctx, 0, 0))
    return kl_error(err, errlen, KL_ERR_INTERNAL, "could not make a branch's condition in a captured graph");
  void *args[3] = {(void *)(uintptr_t)h[0], (void *)(uintptr_t)h[1], (void *)pred};
  if (kl_cuda_launch(if_fn, 1, 1, args, 3, err, errlen)) return -1;
  int nd = capture_deps(stream, &graph, deps, 64); /* the setting kernel */
  if (nd < 0) return kl_error(err, errlen, KL_ERR_INTERNAL, "a captured graph's branch lost its capture");
  int rc = 0;
  for (int b = 0; b < 2 && !rc; b++) {
    unsigned char params[NODE_PARAMS_BYTES];
    memset(params, 0, sizeof params);
    int type = NODE_CONDITIONAL, ctype = COND_IF;
    unsigned size = 1;
    memcpy(params, &type, sizeof type);
    memcpy(params + 16, &h[b], sizeof h[b]);     /* conditional.handle */
    memcpy(params + 24, &ctype, sizeof ctype);   /* conditional.type */
    memcpy(params + 28, &size, sizeof size);     /* conditional.size */
    memcpy(params + 40, &cu_ctx, sizeof cu_ctx); /* conditional.ctx */
    CUgraph *body = NULL;
    if (p_cuGraphAddNode_v2(&nodes[b], graph, deps, NULL, (size_t)nd, params)) {
      rc = kl_error(err, errlen, KL_ERR_INTERNAL, "could not add a branch's node to a captured graph");
      break;
    }
    memcpy(&body, params + 32, sizeof body); /* conditional.phGraph_out */
    if (!body || p_cuStreamBeginCaptureToGraph(side, body[0], NULL, NULL, 0, CAPTURE_THREAD_LOCAL)) {
      rc = kl_error(err, errlen, KL_ERR_INTERNAL, "could not capture a branch into its node");
      break;
    }
    void *outer = kl_cuda_queue_on(side);
    if_depth++;
    rc = branch(ctx, b, err, errlen);
    if_depth--;
    kl_cuda_queue_on(outer);
    CUgraph out = NULL;
    int r = p_cuStreamEndCapture(side, &out); /* always ends the capture */
    if (!rc && r) rc = kl_error(err, errlen, KL_ERR_INTERNAL, "capturing a branch failed (CUDA error %d)", r);
    size_t n = 0;
    if (!rc && !p_cuGraphGetNodes(body[0], NULL, &n) && !n) { /* a branch that queues nothing: one empty node */
      unsigned char empty[NODE_PARAMS_BYTES];
      memset(empty, 0, sizeof empty);
      int etype = NODE_EMPTY;
      memcpy(empty, &etype, sizeof etype);
      CUgraphNode e = NULL;
      if (p_cuGraphAddNode_v2(&e, body[0], NULL, NULL, 0, empty))
        rc = kl_error(err, errlen, KL_ERR_INTERNAL, "could not add an empty branch to a captured graph");
    }
  }
  if (!rc && p_cuStreamUpdateCaptureDependencies_v2(stream, nodes, NULL, 2, SET_DEPS))
    rc = kl_error(err, errlen, KL_ERR_INTERNAL, "could not join a branch's nodes to the captured graph");
  if (!rc) atomic_fetch_add(&n_branches, 1);
  return rc;
}

/* ---- a scan's trips on the device ---- */

int kl_cuda_scan_move(int out, const void *state, int64_t length, int reverse, const void *bases, int n,
                      void *const *stage, const size_t *bytes, char *err, size_t errlen) {
  pthread_once(&while_once, while_load);
  if (!scan_fn[out]) return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s", while_why);
  if (n > KL_CUDA_SCAN_SLICES)
    return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "a scan of %d slices moved per trip (at most %d)", n, KL_CUDA_SCAN_SLICES);
  void *args[5 + 2 * KL_CUDA_SCAN_SLICES];
  memset(args, 0, sizeof args);
  args[0] = (void *)state;
  args[1] = (void *)(uintptr_t)length;
  args[2] = (void *)(uintptr_t)(reverse != 0);
  args[3] = (void *)bases;
  args[4] = (void *)(uintptr_t)n;
  for (int k = 0; k < n; k++) {
    args[5 + 2 * k] = stage[k];
    args[6 + 2 * k] = (void *)(uintptr_t)bytes[k];
  }
  return kl_cuda_launch(scan_fn[out], 1, 256, args, 5 + 2 * KL_CUDA_SCAN_SLICES, err, errlen);
}
