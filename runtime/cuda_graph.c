/* cuda_graph.c: GPU executables as CUDA graphs. A program of many small steps (a transformer's
 * training step: hundreds of kernels and cuBLAS calls) spends its time in the host's launch calls,
 * several microseconds each, not on the GPU. Such an executable is captured once into a CUDA graph
 * over an arena of its own, one fixed address per slot, and each call copies its inputs into the
 * arena, launches the graph and copies its outputs out into new buffers: three kinds of calls
 * instead of one per step. The copies cost device bandwidth, so a program qualifies when they are
 * cheap against the launches they save (KILN_GPU_GRAPH_MIN_STEPS: the fewest steps, 0 turns graphs
 * off). Programs with host steps run step by step. Reaches the driver through runtime/cuda.h. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  if (n < 0) {
    const char *e = getenv("KILN_GPU_GRAPH_MIN_STEPS");
    n = e && *e ? atoi(e) : 32;
    if (n < 0) n = 0;
  }
  return n;
}

/* Launches an executable makes: a scan step's are its trips times its body's. */
static double launches_of(const kl_exec *x) {
  double n = 0;
  for (int i = 0; i < x->nsteps; i++) n += x->steps[i].launches > 1 ? (double)x->steps[i].launches : 1;
  return n;
}

#define GRAPH_MAX_LAUNCHES 50000 /* a longer scan is not worth capturing whole (nor its memory) */

/* Whether x should run as a graph: enough launches (a scan's whole loop is captured, its trips
 * unrolled in the graph), none on the host or reading device memory, not too many, and
 * input/output copies cheaper than the launches saved (about 5 us of host time per launch against
 * 2.5 TB/s). */
static int graph_wanted(const kl_exec *x) {
  int min = graph_min_steps();
  double n = launches_of(x);
  if (!min || n < min || n > GRAPH_MAX_LAUNCHES || !load()) return 0;
  double io = 0;
  for (int i = 0; i < x->nsteps; i++)
    if (x->steps[i].on_host || x->steps[i].synchronizes) return 0;
  for (int i = 0; i < x->ninputs; i++) io += (double)x->slot_bytes[x->in_slots[i]];
  for (int i = 0; i < x->noutputs; i++) io += (double)x->slot_bytes[x->out_slots[i]];
  return io / 2.5e12 < n * 5e-6;
}

/* Captures x's steps over a new arena: 0, or -1 (the program then runs step by step). */
static int graph_build(kl_exec *x, gpu_graph *g) {
  char err[256];
  g->off = malloc(sizeof(size_t) * ((size_t)x->nslots + 1));
  if (!g->off) return -1;
  size_t total = 0;
  for (int i = 0; i < x->nslots; i++) {
    g->off[i] = total;
    total += x->slot_bytes[i] ? (x->slot_bytes[i] + 255) & ~(size_t)255 : 256;
  }
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
  if (!rc && !r && graph && !p_cuGraphInstantiateWithFlags(&g->exec, graph, 0)) rc = 0;
  else rc = -1;
  if (graph) p_cuGraphDestroy(graph);
  return rc;
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
    if (g->state == 0) g->state = graph_build(x, g) ? -1 : 1;
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
    int sl = x->out_slots[i];
    if (bufs[sl]) continue; /* an input passed through, or an output listed twice */
    if (!(bufs[sl] = kl_buf_new_on(KL_DEV_CUDA, x->slot_bytes[sl], err, errlen))) rc = -1;
    else if (x->slot_bytes[sl] &&
             kl_cuda_copy(bufs[sl]->data, 1, (char *)g->arena + g->off[sl], 1, x->slot_bytes[sl], err, errlen))
      rc = -1;
  }
  pthread_mutex_unlock(&g->mu);
  return rc;
}
