/* cuda.c: the CUDA device. The driver (libcuda.so.1) is opened at run time, so kiln builds
 * without a CUDA toolkit and runs on machines without a GPU. Every GPU of the machine gets its
 * own state (struct gpu: primary context, non-blocking stream, copy stream, events, small-block
 * cache), set up when first used; the thread's current GPU (kl_cuda_use) picks it, and its context
 * is made current only when it changes (one GPU: never after the first call). Memory from the
 * stream-ordered allocator; every launch records a pooled event that the buffers it writes wait on. Implements the
 * device interface (kl_device_cuda, runtime/device.h) and the CUDA-only calls of runtime/cuda.h.
 * Knows nothing of the IR, MLIR, Python or the other devices. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../ir/status.h"
#include "collective.h"
#include "collective_net.h"
#include "cuda.h"
#include "cupti.h"
#include "cusolver.h"
#include "nccl.h"

/* ---- the few driver types and constants kiln uses (values from the driver ABI) ---- */
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUstream, *CUevent, *CUmodule, *CUfunction, *CUmemoryPool, *CUlinkState;
typedef unsigned long long CUdeviceptr;
enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_READY = 600,
  ATTR_CC_MAJOR = 75,
  ATTR_CC_MINOR = 76,
  ATTR_SMS = 16,
  ATTR_POOLS = 115,
  POOL_RELEASE_THRESHOLD = 4,
  POOL_RESERVED_MEM_CURRENT = 5,
  POOL_USED_MEM_CURRENT = 7,
  GRAPH_MEM_USED_CURRENT = 0,
  GRAPH_MEM_USED_HIGH = 1,
  GRAPH_MEM_RESERVED_CURRENT = 2,
  STREAM_NON_BLOCKING = 1,
  EVENT_DISABLE_TIMING = 2,
  JIT_ERROR_LOG_BUFFER = 5,
  JIT_ERROR_LOG_BUFFER_SIZE = 6,
  JIT_INPUT_PTX = 1,
  POINTER_ATTR_MEMORY_TYPE = 2,
  MEMORYTYPE_DEVICE = 2,
};

#define CU_FUNCS(X)                                                                                         \
  X(cuInit, (unsigned))                                                                                     \
  X(cuDriverGetVersion, (int *))                                                                            \
  X(cuDeviceGetCount, (int *))                                                                              \
  X(cuDeviceGet, (CUdevice *, int))                                                                         \
  X(cuDeviceGetName, (char *, int, CUdevice))                                                               \
  X(cuDeviceGetAttribute, (int *, int, CUdevice))                                                           \
  X(cuDeviceTotalMem, (size_t *, CUdevice))                                                                 \
  X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                                      \
  X(cuCtxSetCurrent, (CUcontext))                                                                           \
  X(cuCtxGetCurrent, (CUcontext *))                                                                         \
  X(cuStreamCreate, (CUstream *, unsigned))                                                                 \
  X(cuStreamCreateWithPriority, (CUstream *, unsigned, int))                                                \
  X(cuCtxGetStreamPriorityRange, (int *, int *))                                                            \
  X(cuStreamSynchronize, (CUstream))                                                                        \
  X(cuStreamWaitEvent, (CUstream, CUevent, unsigned))                                                       \
  X(cuEventCreate, (CUevent *, unsigned))                                                                   \
  X(cuEventDestroy, (CUevent))                                                                              \
  X(cuEventRecord, (CUevent, CUstream))                                                                     \
  X(cuEventQuery, (CUevent))                                                                                \
  X(cuEventSynchronize, (CUevent))                                                                          \
  X(cuDeviceGetDefaultMemPool, (CUmemoryPool *, CUdevice))                                                  \
  X(cuMemPoolSetAttribute, (CUmemoryPool, int, void *))                                                     \
  X(cuMemPoolGetAttribute, (CUmemoryPool, int, void *))                                                     \
  X(cuMemPoolTrimTo, (CUmemoryPool, size_t))                                                                \
  X(cuDeviceGetGraphMemAttribute, (CUdevice, int, void *))                                                  \
  X(cuDeviceGraphMemTrim, (CUdevice))                                                                       \
  X(cuDeviceSetGraphMemAttribute, (CUdevice, int, void *))                                                  \
  X(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))                                                     \
  X(cuMemFreeAsync, (CUdeviceptr, CUstream))                                                                \
  X(cuMemGetInfo, (size_t *, size_t *))                                                                     \
  X(cuMemAllocHost, (void **, size_t))                                                                      \
  X(cuMemcpyHtoDAsync, (CUdeviceptr, const void *, size_t, CUstream))                                       \
  X(cuMemcpyDtoHAsync, (void *, CUdeviceptr, size_t, CUstream))                                             \
  X(cuMemcpyDtoDAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                                        \
  X(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))                                        \
  X(cuModuleLoadDataEx, (CUmodule *, const void *, unsigned, int *, void **))                               \
  X(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))                                            \
  X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,      \
                     CUstream, void **, void **))                                                           \
  X(cuLinkCreate, (unsigned, int *, void **, CUlinkState *))                                                \
  X(cuLinkAddData, (CUlinkState, int, void *, size_t, const char *, unsigned, int *, void **))             \
  X(cuLinkComplete, (CUlinkState, void **, size_t *))                                                       \
  X(cuLinkDestroy, (CUlinkState))                                                                           \
  X(cuPointerGetAttribute, (void *, int, CUdeviceptr))                                                      \
  X(cuGetErrorString, (CUresult, const char **))                                                           \
  X(cuMemcpyPeerAsync, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream))                  \
  X(cuMemcpy2DAsync, (const void *, CUstream))                                                              \
  X(cuDeviceCanAccessPeer, (int *, CUdevice, CUdevice))                                                     \
  X(cuMemPoolSetAccess, (CUmemoryPool, const void *, size_t))                                                \
  X(cuMemHostAlloc, (void **, size_t, unsigned))                                                            \
  X(cuStreamIsCapturing, (CUstream, int *))                                                                 \
  X(cuStreamWaitValue32, (CUstream, CUdeviceptr, uint32_t, unsigned))                                       \
  X(cuStreamWriteValue32, (CUstream, CUdeviceptr, uint32_t, unsigned))

#define DECLARE(name, args) static CUresult(*p_##name) args;
CU_FUNCS(DECLARE)
#undef DECLARE


static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int cuda_ok;          /* 1 once device 0, its context and stream exist */
static char init_error[256]; /* why not, otherwise */
static int driver_version;

/* Small blocks are kept after use and handed out again for the same size (kl_cuda_alloc). */
#define SMALL_MAX (1u << 20)
#define SMALL_SLOTS 256

/* One GPU's state, set up when first used (gpu_setup; device 0 at initialization). */
typedef struct gpu {
  int ready;                   /* atomic: set up */
  CUdevice dev;
  CUcontext ctx;               /* its primary context */
  CUstream stream;             /* kiln's queue on it */
  CUstream copy_stream;        /* host reads: waits on the one event a buffer needs, not the queue */
  CUstream comm_stream;        /* collectives (NCCL), overlapping the queue's later work; made on first use */
  int cc_major, cc_minor, num_sms;
  char name[128];
  size_t total_mem;
  kl_mem_count counts;         /* what kl_cuda_alloc gave out (outside graphs' own memory) */
  pthread_mutex_t small_mu;    /* the cache of small freed blocks */
  struct { CUdeviceptr p; size_t n; } small[SMALL_SLOTS];
  int nsmall;
  struct kl_event *ev_current, *ev_free, *ev_all; /* under ev_mu: events are created in its context */
  pthread_mutex_t after_mu;    /* after_queued's event */
  CUevent after_ev;
} gpu;
static gpu gpus[KL_CUDA_MAX_GPUS];
static int ngpus;            /* GPUs kiln may use (cuDeviceGetCount, at most KL_CUDA_MAX_GPUS) */
static pthread_mutex_t setup_mu = PTHREAD_MUTEX_INITIALIZER;
/* The calling thread's GPU (kl_cuda_use), and the GPU whose context is current on it (-1: none). */
static _Thread_local int ord;
static _Thread_local int ctx_ord = -1;
#define G (&gpus[ord])
#define stream0 (gpus[ord].stream)
/* While a conditional node's branch is captured (cuda_graph.c), the work it queues goes to a side
 * stream capturing into the node's body graph; stream0 is capturing the enclosing graph. */
static _Thread_local CUstream side;
/* While a collective is queued on the GPU's communication stream (comm_step), its work, and the
 * memory it allocates and frees, go there. */
static _Thread_local CUstream comm_q;
static CUstream cur(void) { return side ? side : comm_q ? comm_q : stream0; }

static const char *cu_msg(CUresult r) {
  const char *s = NULL;
  if (p_cuGetErrorString && p_cuGetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
  return "unknown CUDA error";
}

static void *driver_lib; /* the opened driver, for symbols other files look up */

static void *sym(void *lib, const char *name) {
  char v2[96];
  snprintf(v2, sizeof v2, "%s_v2", name);
  void *p = dlsym(lib, v2); /* the versioned entry point where one exists (cuMemGetInfo_v2, ...) */
  return p ? p : dlsym(lib, name);
}

/* Sets GPU k up (its primary context, streams, facts, pool), once; its context is left current on
 * the calling thread (ctx_ord says so). 0, or -1 with the reason in why. */
static int gpu_setup(int k, char *why, size_t n) {
  gpu *g = &gpus[k];
  if (atomic_load((_Atomic int *)&g->ready)) return 0;
  pthread_mutex_lock(&setup_mu);
  CUresult r = CUDA_SUCCESS;
  int pools = 0, rc = 0;
  if (!g->ready) {
    if ((r = p_cuDeviceGet(&g->dev, k)) || (r = p_cuDevicePrimaryCtxRetain(&g->ctx, g->dev)) || (r = p_cuCtxSetCurrent(g->ctx)) ||
        (r = p_cuStreamCreate(&g->stream, STREAM_NON_BLOCKING)) || (r = p_cuStreamCreate(&g->copy_stream, STREAM_NON_BLOCKING)) ||
        (r = p_cuDeviceGetAttribute(&g->cc_major, ATTR_CC_MAJOR, g->dev)) ||
        (r = p_cuDeviceGetAttribute(&g->cc_minor, ATTR_CC_MINOR, g->dev)) ||
        (r = p_cuDeviceGetAttribute(&g->num_sms, ATTR_SMS, g->dev)) ||
        (r = p_cuDeviceGetAttribute(&pools, ATTR_POOLS, g->dev)) || (r = p_cuDeviceGetName(g->name, sizeof g->name, g->dev)) ||
        (r = p_cuDeviceTotalMem(&g->total_mem, g->dev))) {
      snprintf(why, n, "CUDA device %d could not be set up (%s)", k, cu_msg(r));
      rc = -1;
    } else if (!pools) {
      snprintf(why, n, "CUDA device %d has no stream-ordered allocator (driver too old)", k);
      rc = -1;
    } else {
      ctx_ord = k;
      pthread_mutex_init(&g->small_mu, NULL);
      pthread_mutex_init(&g->after_mu, NULL);
      /* Keep freed memory in the pool: returning it to the driver at every synchronization makes
       * the next allocation slow. */
      CUmemoryPool pool;
      if (!p_cuDeviceGetDefaultMemPool(&pool, g->dev)) {
        uint64_t keep = UINT64_MAX;
        p_cuMemPoolSetAttribute(pool, POOL_RELEASE_THRESHOLD, &keep);
        /* Kernels and copies on the GPUs set up so far may touch its memory, and it theirs, where
         * the hardware lets them (peer access; without it transfers go through the host). */
        for (int j = 0; j < ngpus; j++) {
          int can = 0;
          if (j == k || !gpus[j].ready) continue;
          CUmemoryPool other;
          struct { int type, id, flags; } acc = {1 /* device */, j, 3 /* read-write */};
          if (!p_cuDeviceCanAccessPeer(&can, gpus[j].dev, g->dev) && can) p_cuMemPoolSetAccess(pool, &acc, 1);
          acc.id = k;
          if (!p_cuDeviceCanAccessPeer(&can, g->dev, gpus[j].dev) && can && !p_cuDeviceGetDefaultMemPool(&other, gpus[j].dev))
            p_cuMemPoolSetAccess(other, &acc, 1);
        }
      }
      atomic_store((_Atomic int *)&g->ready, 1);
    }
  }
  pthread_mutex_unlock(&setup_mu);
  return rc;
}

static void cuda_init(void) {
  const char *plat = getenv("KILN_PLATFORM");
  if (plat && !strcmp(plat, "cpu")) {
    snprintf(init_error, sizeof init_error, "KILN_PLATFORM=cpu");
    return;
  }
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(init_error, sizeof init_error, "no CUDA driver (libcuda.so.1 not found)");
    return;
  }
#define LOAD(name, args)                                                                \
  if (!(*(void **)&p_##name = sym(lib, #name))) {                                      \
    snprintf(init_error, sizeof init_error, "the CUDA driver lacks %s (too old)", #name); \
    return;                                                                             \
  }
  CU_FUNCS(LOAD)
#undef LOAD
  driver_lib = lib;
  CUresult r;
  int n = 0;
  if ((r = p_cuInit(0)) || (r = p_cuDeviceGetCount(&n)) || n == 0) {
    snprintf(init_error, sizeof init_error, "no usable CUDA device (%s)", r ? cu_msg(r) : "device count is 0");
    return;
  }
  ngpus = n < KL_CUDA_MAX_GPUS ? n : KL_CUDA_MAX_GPUS;
  if (gpu_setup(0, init_error, sizeof init_error)) return;
  if ((r = p_cuDriverGetVersion(&driver_version))) {
    snprintf(init_error, sizeof init_error, "CUDA driver version unknown (%s)", cu_msg(r));
    return;
  }
  cuda_ok = 1;
}

/* Makes the thread's GPU's context current (set up on first use); 0, or -1 (no GPU, or that GPU
 * could not be set up: gpu_error says why). */
static _Thread_local char gpu_error[256];
static int switch_context(void) {
  if (gpu_setup(ord, gpu_error, sizeof gpu_error)) return -1;
  if (p_cuCtxSetCurrent(gpus[ord].ctx)) {
    snprintf(gpu_error, sizeof gpu_error, "CUDA device %d: its context could not be made current", ord);
    return -1;
  }
  ctx_ord = ord;
  return 0;
}

/* The thread's GPU's context must be current on every thread that calls the driver: a compare
 * while it stays the same GPU, and a look at the driver's current context, which another library
 * of the process may have changed on this thread (JAX or PyTorch making another GPU's current:
 * kiln's launches then failed with "invalid resource handle"). */
static inline int enter(void) {
  pthread_once(&init_once, cuda_init);
  if (!cuda_ok) return -1;
  if (ctx_ord != ord) return switch_context();
  CUcontext c = NULL;
  if (p_cuCtxGetCurrent(&c) || c != gpus[ord].ctx) return switch_context();
  return 0;
}

int kl_cuda_count(void) { return enter() ? 0 : ngpus; }
int kl_cuda_ordinal(void) { return ord; }
int kl_cuda_use(int ordinal) {
  int old = ord;
  if (ordinal >= 0 && ordinal < KL_CUDA_MAX_GPUS) ord = ordinal;
  return old;
}

int kl_cuda_available(char *why, size_t n) {
  if (enter()) {
    if (why) snprintf(why, n, "%s", init_error);
    return 0;
  }
  return 1;
}

static void cuda_info(kl_device_info *info) {
  memset(info, 0, sizeof *info);
  if (enter()) return;
  snprintf(info->name, sizeof info->name, "%s", G->name);
  info->cc_major = G->cc_major;
  info->cc_minor = G->cc_minor;
  info->num_sms = G->num_sms;
  info->total_mem = G->total_mem;
  info->driver_version = driver_version;
}

/* ---- events: a point in the stream that buffers wait on ----
 * Launches do not record an event each (cuEventRecord costs about a microsecond): the buffers
 * written since the last recorded point share one unrecorded event, recorded when someone first
 * asks about it. Recorded later, it also covers launches queued after theirs, so a waiter may
 * wait for a little more than it needs, never less. */

struct kl_event {
  CUevent ev;
  int refs;          /* atomic; buffers holding it, plus 1 while it is the current one */
  int recorded;      /* under ev_mu */
  int done;          /* atomic: known complete */
  int ord;           /* the GPU whose stream it is recorded on */
  struct kl_event *next_free;
  struct kl_event *next_all; /* every event of its GPU (gpu.ev_all), for Ctrl-C */
  unsigned stop_epoch;       /* under ev_mu: the stop request it was pending at (cuda_stop) */
  int interrupted;           /* atomic: a loop ended early for Ctrl-C while it was pending */
};
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;

static void event_release_locked(struct kl_event *e) {
  if (--e->refs) return;
  e->next_free = gpus[e->ord].ev_free;
  gpus[e->ord].ev_free = e;
}

static void event_release(struct kl_event *e) {
  if (!e) return;
  pthread_mutex_lock(&ev_mu);
  event_release_locked(e);
  pthread_mutex_unlock(&ev_mu);
}

/* The event the outputs of the launch being queued wait on (one reference for the caller). */
static struct kl_event *event_for_launch(char *err, size_t errlen) {
  pthread_mutex_lock(&ev_mu);
  struct kl_event *e = G->ev_current;
  if (!e) {
    e = G->ev_free;
    if (e) G->ev_free = e->next_free;
    else {
      e = calloc(1, sizeof *e);
      if (!e) {
        pthread_mutex_unlock(&ev_mu);
        kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory for a GPU event");
        return NULL;
      }
      CUresult r = p_cuEventCreate(&e->ev, EVENT_DISABLE_TIMING);
      if (r) {
        free(e);
        pthread_mutex_unlock(&ev_mu);
        snprintf(err, errlen, "cuEventCreate failed: %s", cu_msg(r));
        return NULL;
      }
      e->next_all = G->ev_all;
      G->ev_all = e;
    }
    e->refs = 1; /* the "current" reference */
    e->recorded = 0;
    e->done = 0;
    e->stop_epoch = 0;
    atomic_store((_Atomic int *)&e->interrupted, 0);
    e->ord = ord;
    G->ev_current = e;
  }
  e->refs++;
  pthread_mutex_unlock(&ev_mu);
  return e;
}

static void ensure_recorded(struct kl_event *e) {
  pthread_mutex_lock(&ev_mu);
  if (!e->recorded) {
    p_cuEventRecord(e->ev, gpus[e->ord].stream);
    e->recorded = 1;
    if (gpus[e->ord].ev_current == e) {
      gpus[e->ord].ev_current = NULL;
      event_release_locked(e);
    }
  }
  pthread_mutex_unlock(&ev_mu);
}

static int event_query(struct kl_event *e) {
  if (!e || atomic_load((_Atomic int *)&e->done)) return 1;
  enter();
  ensure_recorded(e);
  if (p_cuEventQuery(e->ev) == CUDA_SUCCESS) {
    atomic_store((_Atomic int *)&e->done, 1);
    return 1;
  }
  return 0;
}

static void event_wait(struct kl_event *e) {
  if (event_query(e)) return;
  p_cuEventSynchronize(e->ev);
  atomic_store((_Atomic int *)&e->done, 1);
}

/* Ctrl-C (kl_device.stop). At the request, the events of work still queued are noted; at the
 * clear, if a loop the device ran by itself ended early for it, they are marked interrupted: what
 * that work wrote may be partial, and their buffers fail (settled()). */
static unsigned stop_epoch; /* under ev_mu */

static void cuda_stop(int requested) {
  if (!cuda_ok || enter()) return; /* nothing ran on a GPU */
  if (!requested && !kl_cuda_loops_stop(0)) return;
  pthread_mutex_lock(&ev_mu);
  if (requested) stop_epoch++;
  for (int k = 0; k < ngpus; k++)
    for (struct kl_event *e = gpus[k].ev_all; e; e = e->next_all) {
      if (!e->refs) continue;
      if (!requested && e->stop_epoch == stop_epoch) atomic_store((_Atomic int *)&e->interrupted, 1);
      else if (requested && !atomic_load((_Atomic int *)&e->done) && (!e->recorded || p_cuEventQuery(e->ev) != CUDA_SUCCESS))
        e->stop_epoch = stop_epoch;
    }
  pthread_mutex_unlock(&ev_mu);
  if (requested) kl_cuda_loops_stop(1);
}

/* b's state once its event is done: failed where a loop of its work ended early for Ctrl-C. */
static int settled(kl_buffer *b) {
  if (b->event && atomic_load((_Atomic int *)&b->event->interrupted) && b->state != KL_BUF_FAILED) {
    free(b->error);
    b->error = strdup("interrupted: a loop stopped at Ctrl-C (KeyboardInterrupt) before this array was complete");
    b->state = KL_BUF_FAILED;
  }
  return b->state;
}

static int cuda_is_ready(const kl_buffer *b) {
  if (!event_query(b->event)) return 0;
  settled((kl_buffer *)b);
  return 1;
}

/* At most `seconds` (so the caller can look for Ctrl-C): the event is queried back to back for
 * the first 200 us (most waits are short), then every 100 us, which bounds the added latency of
 * a long wait at 100 us and its cost at a query per wake-up. */
static int cuda_wait_for(kl_buffer *b, double seconds) {
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    if (event_query(b->event)) return settled(b);
    clock_gettime(CLOCK_MONOTONIC, &now);
    double waited = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
    if (waited >= seconds) return KL_BUF_PENDING;
    if (waited > 2e-4) nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
  }
}

static int cuda_wait(kl_buffer *b) {
  event_wait(b->event);
  return settled(b);
}

/* ---- memory ---- */

/* Small blocks are kept after use and handed out again for the same size: the allocator's
 * calls cost about a microsecond each, a tenth of a small launch. Reuse is safe because every
 * use of a block is ordered on its GPU's one stream (a cache per GPU). */
#define counts (G->counts)
#define small_mu (G->small_mu)
#define small (G->small)
#define nsmall (G->nsmall)

static void flush_small(void) {
  pthread_mutex_lock(&small_mu);
  for (int i = 0; i < nsmall; i++) p_cuMemFreeAsync(small[i].p, stream0);
  nsmall = 0;
  pthread_mutex_unlock(&small_mu);
}

int kl_cuda_alloc(size_t nbytes, void **ptr, char *err, size_t errlen) {
  if (enter()) {
    snprintf(err, errlen, "no GPU: %s", cuda_ok ? gpu_error : init_error);
    return -1;
  }
  if (side) /* the branch of a conditional node: its graph holds no allocations (bound beforehand) */
    return kl_error(err, errlen, KL_ERR_INTERNAL, "GPU memory allocated while a conditional branch is captured");
  CUdeviceptr p = 0;
  size_t n = nbytes ? (nbytes + 255) & ~(size_t)255 : 256;
  /* while a graph is captured, memory comes from (and goes back to) the graph's own nodes: a
   * cached block would be baked into the graph and handed out again */
  if (n <= SMALL_MAX && !kl_cuda_capturing() && !comm_q) {
    pthread_mutex_lock(&small_mu);
    for (int i = nsmall - 1; i >= 0 && !p; i--)
      if (small[i].n == n) {
        p = small[i].p;
        small[i] = small[--nsmall];
      }
    pthread_mutex_unlock(&small_mu);
  }
  CUresult r = p ? CUDA_SUCCESS : p_cuMemAllocAsync(&p, n, comm_q ? comm_q : stream0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) { /* freed blocks may still be queued or cached: release, retry */
    flush_small();
    p_cuStreamSynchronize(stream0);
    r = p_cuMemAllocAsync(&p, n, comm_q ? comm_q : stream0);
  }
  if (r) {
    size_t fr = 0, tot = 0;
    p_cuMemGetInfo(&fr, &tot);
    kl_error(err, errlen, KL_ERR_NOMEM, "out of GPU memory: cannot allocate %zu bytes (%.1f MiB) on %s (%.1f of %.1f MiB free): %s",
             nbytes, nbytes / 1048576.0, G->name, fr / 1048576.0, tot / 1048576.0, cu_msg(r));
    return -1;
  }
  kl_mem_count_alloc(&counts, n);
  *ptr = (void *)(uintptr_t)p;
  return 0;
}

void kl_cuda_free(void *ptr, size_t nbytes) {
  if (!ptr || enter()) return;
  size_t n = nbytes ? (nbytes + 255) & ~(size_t)255 : 256;
  kl_mem_count_free(&counts, n);
  if (comm_q) { /* after the collective's work, on its stream (the small cache serves the queue) */
    p_cuMemFreeAsync((CUdeviceptr)(uintptr_t)ptr, comm_q);
    return;
  }
  if (n <= SMALL_MAX && !kl_cuda_capturing()) {
    pthread_mutex_lock(&small_mu);
    int kept = nsmall < SMALL_SLOTS;
    if (kept) {
      small[nsmall].p = (CUdeviceptr)(uintptr_t)ptr;
      small[nsmall++].n = n;
    }
    pthread_mutex_unlock(&small_mu);
    if (kept) return;
  }
  p_cuMemFreeAsync((CUdeviceptr)(uintptr_t)ptr, stream0); /* after the work queued before it */
}

/* kiln's allocations plus the memory CUDA graphs hold for their temporaries (the driver's
 * count: a graph's peak is added to kiln's, so the peak is an upper bound). */
static void cuda_memory_stats(kl_mem_stats *s) {
  memset(s, 0, sizeof *s);
  if (enter()) return;
  kl_mem_count_read(&counts, s);
  s->bytes_limit = (long long)G->total_mem;
  CUmemoryPool pool;
  uint64_t reserved = 0, used = 0, g_used = 0, g_high = 0, g_reserved = 0;
  if (!p_cuDeviceGetDefaultMemPool(&pool, G->dev)) {
    p_cuMemPoolGetAttribute(pool, POOL_RESERVED_MEM_CURRENT, &reserved);
    p_cuMemPoolGetAttribute(pool, POOL_USED_MEM_CURRENT, &used);
  }
  p_cuDeviceGetGraphMemAttribute(G->dev, GRAPH_MEM_USED_CURRENT, &g_used);
  p_cuDeviceGetGraphMemAttribute(G->dev, GRAPH_MEM_USED_HIGH, &g_high);
  p_cuDeviceGetGraphMemAttribute(G->dev, GRAPH_MEM_RESERVED_CURRENT, &g_reserved);
  s->bytes_in_use += (long long)g_used;
  s->peak_bytes_in_use += (long long)g_high;
  pthread_mutex_lock(&small_mu);
  for (int i = 0; i < nsmall; i++) s->pool_bytes += (long long)small[i].n;
  pthread_mutex_unlock(&small_mu);
  s->pool_bytes += (long long)(reserved > used ? reserved - used : 0) + (long long)(g_reserved > g_used ? g_reserved - g_used : 0);
}

static void cuda_reset_peak(void) {
  if (enter()) return;
  kl_mem_count_reset_peak(&counts);
  uint64_t zero = 0;
  p_cuDeviceSetGraphMemAttribute(G->dev, GRAPH_MEM_USED_HIGH, &zero);
}

static void cuda_empty_cache(void) {
  if (enter()) return;
  flush_small();
  p_cuStreamSynchronize(stream0);
  CUmemoryPool pool;
  if (!p_cuDeviceGetDefaultMemPool(&pool, G->dev)) p_cuMemPoolTrimTo(pool, 0);
  p_cuDeviceGraphMemTrim(G->dev);
}

#undef counts
#undef small_mu
#undef small
#undef nsmall

/* ---- pinned staging for large host transfers ----
 * The DMA engines copy from page-locked memory at the link's speed (about 55 GB/s on the
 * reference H100) but from ordinary memory through the driver's own staging at 7-15 GB/s.
 * Large transfers go through two page-locked chunks instead, filled and drained by several
 * threads at once while the other chunk is in flight. */

#define STAGE_MIN ((size_t)8 << 20)    /* smaller transfers go directly */
#define STAGE_CHUNK ((size_t)16 << 20)
#define COPY_THREADS 8

static pthread_mutex_t stage_mu = PTHREAD_MUTEX_INITIALIZER; /* one staged transfer at a time */
static pthread_once_t stage_once = PTHREAD_ONCE_INIT;
static char *stage_buf[2];
static CUevent stage_ev[2];
static int stage_ok;

static struct { /* the copying threads: each takes its slice of the current memcpy */
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  unsigned gen;
  char *dst;
  const char *src;
  size_t n;
  int parts, pending;
} cw = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL, NULL, 0, 1, 0};

static void slice(int part, int parts, size_t n, size_t *lo, size_t *hi) {
  *lo = (n / (size_t)parts * (size_t)part) & ~(size_t)63;
  *hi = part == parts - 1 ? n : (n / (size_t)parts * (size_t)(part + 1)) & ~(size_t)63;
}

static void *copy_worker(void *arg) {
  int part = (int)(intptr_t)arg;
  unsigned seen = 0;
  for (;;) {
    pthread_mutex_lock(&cw.mu);
    while (cw.gen == seen) pthread_cond_wait(&cw.go, &cw.mu);
    seen = cw.gen;
    char *dst = cw.dst;
    const char *src = cw.src;
    size_t lo, hi;
    slice(part, cw.parts, cw.n, &lo, &hi);
    pthread_mutex_unlock(&cw.mu);
    memcpy(dst + lo, src + lo, hi - lo);
    pthread_mutex_lock(&cw.mu);
    if (--cw.pending == 0) pthread_cond_signal(&cw.done);
    pthread_mutex_unlock(&cw.mu);
  }
  return NULL;
}

static void par_memcpy(void *dst, const void *src, size_t n) {
  if (cw.parts == 1) {
    memcpy(dst, src, n);
    return;
  }
  pthread_mutex_lock(&cw.mu);
  cw.dst = dst;
  cw.src = src;
  cw.n = n;
  cw.pending = cw.parts - 1;
  cw.gen++;
  pthread_cond_broadcast(&cw.go);
  pthread_mutex_unlock(&cw.mu);
  size_t lo, hi;
  slice(0, cw.parts, n, &lo, &hi);
  memcpy((char *)dst + lo, (const char *)src + lo, hi - lo);
  pthread_mutex_lock(&cw.mu);
  while (cw.pending) pthread_cond_wait(&cw.done, &cw.mu);
  pthread_mutex_unlock(&cw.mu);
}

static void stage_init(void) {
  for (int i = 0; i < 2; i++)
    if (p_cuMemAllocHost((void **)&stage_buf[i], STAGE_CHUNK) || p_cuEventCreate(&stage_ev[i], EVENT_DISABLE_TIMING)) return;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int parts = cpus >= COPY_THREADS ? COPY_THREADS : cpus > 1 ? (int)cpus : 1;
  for (int i = 1; i < parts; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, copy_worker, (void *)(intptr_t)i)) break;
    pthread_detach(t);
    cw.parts = i + 1;
  }
  stage_ok = 1;
}

static int staging(size_t n) {
  if (n < STAGE_MIN || ord) return 0; /* the chunks and their events are GPU 0's (its context's) */
  pthread_once(&stage_once, stage_init);
  return stage_ok;
}

/* Host to device through the chunks; returns once the source has been read (not the DMA). */
static CUresult staged_htod(CUdeviceptr dst, const char *src, size_t n) {
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&stage_mu);
  for (size_t off = 0, k = 0; off < n && !r; off += STAGE_CHUNK, k ^= 1) {
    size_t len = n - off < STAGE_CHUNK ? n - off : STAGE_CHUNK;
    if ((r = p_cuEventSynchronize(stage_ev[k]))) break; /* the chunk's previous DMA is done */
    par_memcpy(stage_buf[k], src + off, len);
    if (!(r = p_cuMemcpyHtoDAsync(dst + off, stage_buf[k], len, stream0))) r = p_cuEventRecord(stage_ev[k], stream0);
  }
  pthread_mutex_unlock(&stage_mu);
  return r;
}

/* Device to host on `stream` through the chunks: chunk i+1 is in flight while chunk i drains. */
static CUresult staged_dtoh(char *dst, CUdeviceptr src, size_t n, CUstream stream) {
  CUresult r = CUDA_SUCCESS;
  size_t nch = (n + STAGE_CHUNK - 1) / STAGE_CHUNK;
  pthread_mutex_lock(&stage_mu);
  for (int k = 0; k < 2 && !r; k++) r = p_cuEventSynchronize(stage_ev[k]); /* free from earlier uploads */
  for (size_t i = 0; i <= nch && !r; i++) {
    if (i < nch) {
      size_t off = i * STAGE_CHUNK, len = n - off < STAGE_CHUNK ? n - off : STAGE_CHUNK;
      if (!(r = p_cuMemcpyDtoHAsync(stage_buf[i & 1], src + off, len, stream))) r = p_cuEventRecord(stage_ev[i & 1], stream);
    }
    if (i > 0 && !r) {
      size_t off = (i - 1) * STAGE_CHUNK, len = n - off < STAGE_CHUNK ? n - off : STAGE_CHUNK;
      if (!(r = p_cuEventSynchronize(stage_ev[(i - 1) & 1]))) par_memcpy(dst + off, stage_buf[(i - 1) & 1], len);
    }
  }
  pthread_mutex_unlock(&stage_mu);
  return r;
}

int kl_cuda_copy(void *dst, int dst_dev, const void *src, int src_dev, size_t n, char *err, size_t errlen) {
  if (enter()) {
    snprintf(err, errlen, "no GPU: %s", cuda_ok ? gpu_error : init_error);
    return -1;
  }
  if (!n) return 0;
  CUresult r;
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)(dst_dev ? dst : src);
  if (dst_dev && src_dev) r = p_cuMemcpyDtoDAsync(d, (CUdeviceptr)(uintptr_t)src, n, cur());
  else if (dst_dev) r = staging(n) ? staged_htod(d, src, n) : p_cuMemcpyHtoDAsync(d, src, n, stream0);
  else if (staging(n)) r = staged_dtoh(dst, d, n, stream0);
  else if (!(r = p_cuMemcpyDtoHAsync(dst, d, n, stream0))) r = p_cuStreamSynchronize(stream0);
  if (r) {
    snprintf(err, errlen, "GPU copy of %zu bytes failed: %s", n, cu_msg(r));
    return -1;
  }
  /* host-to-device returns once the source is staged: the caller may reuse it */
  return 0;
}

/* Makes stream s wait for everything queued on kiln's stream so far: what a buffer without an
 * event needs (an upload's buffer: its copy may still be on its way when cuMemcpyHtoDAsync
 * returns). */
static CUresult after_queued(CUstream s) {
  pthread_mutex_lock(&G->after_mu);
  CUresult r = G->after_ev ? CUDA_SUCCESS : p_cuEventCreate(&G->after_ev, EVENT_DISABLE_TIMING);
  if (!r) r = p_cuEventRecord(G->after_ev, stream0);
  if (!r) r = p_cuStreamWaitEvent(s, G->after_ev, 0);
  pthread_mutex_unlock(&G->after_mu);
  return r;
}

/* Copies n bytes of a GPU buffer to the host once event e (its producer) is done, without
 * waiting for work queued after it; returns when the bytes are there. */
static int read_after(void *dst, const void *src, size_t n, struct kl_event *e, char *err, size_t errlen) {
  if (enter()) {
    snprintf(err, errlen, "no GPU: %s", cuda_ok ? gpu_error : init_error);
    return -1;
  }
  CUstream copy_stream = G->copy_stream;
  CUresult r = e ? (event_query(e) ? CUDA_SUCCESS : p_cuStreamWaitEvent(copy_stream, e->ev, 0))
                 : after_queued(copy_stream);
  if (!r && n && staging(n)) r = staged_dtoh(dst, (CUdeviceptr)(uintptr_t)src, n, copy_stream);
  else {
    if (!r && n) r = p_cuMemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, n, copy_stream);
    if (!r) r = p_cuStreamSynchronize(copy_stream);
  }
  if (r) {
    snprintf(err, errlen, "GPU read of %zu bytes failed: %s", n, cu_msg(r));
    return -1;
  }
  return 0;
}

int kl_cuda_memset0(void *dst, size_t n) {
  if (enter()) return -1;
  return p_cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst, 0, n, cur()) ? -1 : 0;
}

static int cuda_read(void *dst, kl_buffer *b, char *err, size_t errlen) {
  int old = kl_cuda_use(b->ordinal); /* read on the GPU that holds it */
  int rc = read_after(dst, b->data, b->nbytes, b->event, err, errlen);
  kl_cuda_use(old);
  if (!rc && settled(b) == KL_BUF_FAILED) rc = kl_error(err, errlen, KL_ERR_INTERRUPTED, "%s", b->error ? b->error : "interrupted");
  return rc;
}

static int cuda_upload(void *dst, const void *src, size_t n, char *err, size_t errlen) {
  return kl_cuda_copy(dst, 1, src, 0, n, err, errlen);
}

static int cuda_synchronize(void) {
  if (enter()) return 0;
  int rc = 0;
  for (int k = 0; k < ngpus; k++)
    if (atomic_load((_Atomic int *)&gpus[k].ready)) rc |= p_cuStreamSynchronize(gpus[k].stream) ? -1 : 0;
  return rc;
}

int kl_cuda_is_device_pointer(const void *p) {
  if (enter()) return 0;
  unsigned int type = 0;
  if (p_cuPointerGetAttribute(&type, POINTER_ATTR_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p)) return 0;
  return type == MEMORYTYPE_DEVICE;
}

void *kl_cuda_stream(void) { return enter() ? NULL : stream0; }

/* Side streams by nesting depth: a branch captured inside a branch being captured needs a
 * stream of its own. Made when first asked for, kept for the process. */
static CUstream side_streams[KL_CUDA_IF_DEPTH];
static pthread_mutex_t side_mu = PTHREAD_MUTEX_INITIALIZER;
void *kl_cuda_side_stream(int depth) {
  if (enter() || depth < 0 || depth >= KL_CUDA_IF_DEPTH) return NULL;
  pthread_mutex_lock(&side_mu);
  if (!side_streams[depth] && p_cuStreamCreate(&side_streams[depth], STREAM_NON_BLOCKING)) side_streams[depth] = NULL;
  CUstream s = side_streams[depth];
  pthread_mutex_unlock(&side_mu);
  return s;
}
void *kl_cuda_queue_on(void *stream) {
  CUstream old = side;
  side = stream;
  return old;
}
void *kl_cuda_queue_stream(void) { return enter() ? NULL : cur(); }

void *kl_cuda_driver_symbol(const char *name) { return enter() || !driver_lib ? NULL : sym(driver_lib, name); }

static int cuda_stream_wait(void *stream, kl_buffer *b) {
  struct kl_event *e = b->event;
  if (enter()) return 0;
  if (!e) return (CUstream)stream == stream0 ? 0 : after_queued((CUstream)stream) ? -1 : 0; /* an upload's */
  if (event_query(e)) return 0;
  return p_cuStreamWaitEvent((CUstream)stream, e->ev, 0) ? -1 : 0;
}

/* ---- modules and launches ---- */

/* The driver's JIT options that capture its error log. */
typedef struct {
  char log[4096];
  int opts[2];
  void *vals[2];
} jit_log;

static void jit_log_init(jit_log *l) {
  l->log[0] = 0;
  l->opts[0] = JIT_ERROR_LOG_BUFFER;
  l->opts[1] = JIT_ERROR_LOG_BUFFER_SIZE;
  l->vals[0] = l->log;
  l->vals[1] = (void *)(uintptr_t)sizeof l->log;
}

int kl_cuda_link_ptx(const char *ptx, size_t len, void **image, size_t *image_len, char *err, size_t errlen) {
  if (enter()) {
    snprintf(err, errlen, "no GPU: %s", cuda_ok ? gpu_error : init_error);
    return -1;
  }
  jit_log jl;
  jit_log_init(&jl);
  CUlinkState ls;
  CUresult r = p_cuLinkCreate(2, jl.opts, jl.vals, &ls);
  if (r) {
    snprintf(err, errlen, "cuLinkCreate failed: %s", cu_msg(r));
    return -1;
  }
  void *cubin = NULL;
  size_t n = 0;
  r = p_cuLinkAddData(ls, JIT_INPUT_PTX, (void *)ptx, len, "kiln", 0, NULL, NULL);
  if (!r) r = p_cuLinkComplete(ls, &cubin, &n);
  if (r) {
    snprintf(err, errlen, "the CUDA driver rejected kiln's PTX (%s): %.3000s", cu_msg(r), jl.log);
    p_cuLinkDestroy(ls);
    return -1;
  }
  *image = malloc(n);
  if (!*image) {
    p_cuLinkDestroy(ls);
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory for a GPU module image of %zu bytes", n);
  }
  memcpy(*image, cubin, n); /* the linker owns cubin until destroyed */
  *image_len = n;
  p_cuLinkDestroy(ls);
  return 0;
}

/* A module is loaded into each GPU's context where it first runs: kiln's handles stand for it on
 * every GPU (the image is kept for the others when there are several), and a function's handle
 * keeps the CUfunction of each GPU, looked up on first launch there. */
typedef struct kfunc {
  struct kmodule *m;
  char name[128];
  CUfunction fn[KL_CUDA_MAX_GPUS];
  struct kfunc *next;
} kfunc;
typedef struct kmodule {
  void *image;                     /* owned, for loading into the other GPUs (NULL with one GPU) */
  CUmodule mod[KL_CUDA_MAX_GPUS];
  kfunc *funcs;                    /* the handles given out, once per name */
  pthread_mutex_t mu;
} kmodule;

static CUresult load_image(const void *image, CUmodule *m, jit_log *jl) {
  jit_log_init(jl);
  return p_cuModuleLoadDataEx(m, image, 2, jl->opts, jl->vals);
}

int kl_cuda_module_load(const void *image, size_t len, void **module, char *err, size_t errlen) {
  if (enter()) {
    snprintf(err, errlen, "no GPU: %s", cuda_ok ? gpu_error : init_error);
    return -1;
  }
  kmodule *km = calloc(1, sizeof *km);
  if (!km) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory loading a GPU module");
  if (ngpus > 1) {
    size_t n = len;
    if (!(km->image = malloc(n ? n : 1))) {
      free(km);
      return kl_error(err, errlen, KL_ERR_NOMEM, "cannot keep a GPU module's image for the other GPUs");
    }
    memcpy(km->image, image, n);
  }
  jit_log jl;
  CUresult r = load_image(image, &km->mod[ord], &jl);
  if (r) {
    free(km->image);
    free(km);
    snprintf(err, errlen, "cannot load a GPU module (%s): %.3000s", cu_msg(r), jl.log);
    return -1;
  }
  pthread_mutex_init(&km->mu, NULL);
  *module = km;
  return 0;
}

/* f's CUfunction on the thread's GPU, the module loaded there first if need be; NULL with a message. */
static CUfunction function_here(kfunc *f, char *err, size_t errlen) {
  kmodule *km = f->m;
  CUresult r = CUDA_SUCCESS;
  jit_log jl;
  jl.log[0] = 0;
  pthread_mutex_lock(&km->mu);
  if (!km->mod[ord]) r = km->image ? load_image(km->image, &km->mod[ord], &jl) : (CUresult)1;
  if (!r && !f->fn[ord]) r = p_cuModuleGetFunction(&f->fn[ord], km->mod[ord], f->name);
  pthread_mutex_unlock(&km->mu);
  if (r) {
    snprintf(err, errlen, "GPU kernel %s could not be loaded on GPU %d (%s): %.2000s", f->name, ord,
             km->image ? cu_msg(r) : "its module's image was not kept", jl.log);
    return NULL;
  }
  return f->fn[ord];
}

int kl_cuda_function(void *module, const char *name, void **fn, char *err, size_t errlen) {
  kmodule *km = module;
  if (enter()) {
    snprintf(err, errlen, "no GPU: %s", cuda_ok ? gpu_error : init_error);
    return -1;
  }
  pthread_mutex_lock(&km->mu);
  kfunc *f = km->funcs;
  while (f && strcmp(f->name, name)) f = f->next;
  if (!f && strlen(name) < sizeof f->name && (f = calloc(1, sizeof *f))) {
    f->m = km;
    snprintf(f->name, sizeof f->name, "%s", name);
    f->next = km->funcs;
    km->funcs = f;
  }
  pthread_mutex_unlock(&km->mu);
  if (!f) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory for GPU kernel %s", name);
  if (!function_here(f, err, errlen)) return -1;
  *fn = f;
  return 0;
}

int kl_cuda_launch(void *fn, unsigned grid, unsigned block, void **ptrs, int nptrs, char *err, size_t errlen) {
  kfunc *f = fn;
  CUfunction h = f->fn[ord];
  if (!h && !(h = function_here(f, err, errlen))) return -1;
  void *params_small[64];
  void **params = nptrs <= 64 ? params_small : malloc(sizeof(void *) * (size_t)nptrs);
  if (!params) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory launching a GPU kernel");
  for (int i = 0; i < nptrs; i++) params[i] = &ptrs[i]; /* each parameter is one device pointer */
  CUresult r = p_cuLaunchKernel(h, grid, 1, 1, block, 1, 1, 0, cur(), params, NULL);
  if (params != params_small) free(params);
  if (r) {
    snprintf(err, errlen, "GPU kernel launch (grid %u, block %u) failed: %s", grid, block, cu_msg(r));
    return -1;
  }
  return 0;
}

/* ---- between GPUs ---- */

int kl_cuda_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, char *err,
                    size_t errlen) {
  struct { /* CUDA_MEMCPY2D, as the driver ABI lays it out */
    size_t src_x, src_y;
    int src_type;
    const void *src_host;
    CUdeviceptr src_dev;
    void *src_array;
    size_t src_pitch, dst_x, dst_y;
    int dst_type;
    void *dst_host;
    CUdeviceptr dst_dev;
    void *dst_array;
    size_t dst_pitch, width, height;
  } c;
  if (enter()) {
    snprintf(err, errlen, "no GPU: %s", cuda_ok ? gpu_error : init_error);
    return -1;
  }
  if (!width || !height) return 0;
  memset(&c, 0, sizeof c);
  c.src_type = c.dst_type = MEMORYTYPE_DEVICE;
  c.src_dev = (CUdeviceptr)(uintptr_t)src;
  c.dst_dev = (CUdeviceptr)(uintptr_t)dst;
  c.src_pitch = spitch;
  c.dst_pitch = dpitch;
  c.width = width;
  c.height = height;
  CUresult r = p_cuMemcpy2DAsync(&c, cur());
  if (r) return kl_error(err, errlen, KL_ERR_INTERNAL, "GPU strided copy (%zu rows of %zu bytes) failed: %s", height,
                         width, cu_msg(r));
  return 0;
}

/* For runtime/peer.c. */
int kl_cuda_can_reach(int a, int b) {
  int ab = 0, ba = 0, old = ord, up;
  if (enter() || a < 0 || b < 0 || a >= ngpus || b >= ngpus || a == b) return 0;
  ord = a, up = !enter(); /* both set up (by whichever thread asks first: the answer is the same) */
  ord = b, up = up && !enter();
  ord = old;
  if (enter() || !up) return 0;
  return !p_cuDeviceCanAccessPeer(&ab, gpus[a].dev, gpus[b].dev) && ab &&
         !p_cuDeviceCanAccessPeer(&ba, gpus[b].dev, gpus[a].dev) && ba;
}

int kl_cuda_copy_from(void *dst, const void *src, int src_ordinal, size_t n, char *err, size_t errlen) {
  if (src_ordinal < 0 || src_ordinal >= ngpus || !gpus[src_ordinal].ready)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "a copy from GPU %d, which is not set up", src_ordinal);
  CUresult r = n ? p_cuMemcpyPeerAsync((CUdeviceptr)(uintptr_t)dst, G->ctx, (CUdeviceptr)(uintptr_t)src,
                                       gpus[src_ordinal].ctx, n, cur())
                 : CUDA_SUCCESS;
  if (r) return kl_error(err, errlen, KL_ERR_INTERNAL, "GPU copy of %zu bytes between GPUs failed: %s", n, cu_msg(r));
  return 0;
}

int kl_cuda_queue_capturing(void) {
  int status = 0;
  return !enter() && !p_cuStreamIsCapturing(cur(), &status) && status != 0;
}

uint32_t *kl_cuda_host_words(size_t n) {
  void *p = NULL;
  if (enter() || p_cuMemHostAlloc(&p, n * sizeof(uint32_t), 1 /* portable */ | 2 /* device-mapped */)) return NULL;
  memset(p, 0, n * sizeof(uint32_t));
  return p;
}

int kl_cuda_flag_set(uint32_t *word, uint32_t v, char *err, size_t errlen) {
  CUresult r = p_cuStreamWriteValue32(cur(), (CUdeviceptr)(uintptr_t)word, v, 0 /* after the work before it */);
  if (r) return kl_error(err, errlen, KL_ERR_INTERNAL, "cuStreamWriteValue32 failed: %s", cu_msg(r));
  return 0;
}

int kl_cuda_flag_wait(const uint32_t *word, uint32_t v, char *err, size_t errlen) {
  CUresult r = p_cuStreamWaitValue32(cur(), (CUdeviceptr)(uintptr_t)word, v, 0 /* GEQ, cyclically */);
  if (r) return kl_error(err, errlen, KL_ERR_INTERNAL, "cuStreamWaitValue32 failed: %s", cu_msg(r));
  return 0;
}

/* Copies src's bytes into dst (same size, GPUs dst->ordinal and src->ordinal) and returns once
 * they are there: the copy waits for src's producer, and nothing queued later on either GPU needs
 * to wait for it. Peer to peer where the driver can (it goes through the host by itself where the
 * GPUs cannot reach each other), else through host memory. */
static int cuda_copy_buffer(kl_buffer *dst, kl_buffer *src, char *err, size_t errlen) {
  if (kl_buf_wait(src) == KL_BUF_FAILED)
    return kl_error(err, errlen, KL_ERR_VALUE, "%s", src->error ? src->error : "the computation producing this array failed");
  int old = kl_cuda_use(src->ordinal), rc = 0;
  if (!enter() && !src->event) p_cuStreamSynchronize(stream0); /* an upload's buffer: its copy may be in flight */
  kl_cuda_use(dst->ordinal);
  if (enter()) {
    kl_cuda_use(old);
    return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "GPU %d: %s", dst->ordinal, gpu_error);
  }
  CUresult r = p_cuMemcpyPeerAsync((CUdeviceptr)(uintptr_t)dst->data, gpus[dst->ordinal].ctx, (CUdeviceptr)(uintptr_t)src->data,
                                   gpus[src->ordinal].ctx, src->nbytes, stream0);
  if (!r) r = p_cuStreamSynchronize(stream0);
  if (r) { /* through the host */
    void *h = malloc(src->nbytes ? src->nbytes : 1);
    if (!h) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory copying %zu bytes between GPUs", src->nbytes);
    if (!rc) rc = cuda_read(h, src, err, errlen);
    kl_cuda_use(dst->ordinal);
    if (!rc) rc = kl_cuda_copy(dst->data, 1, h, 0, src->nbytes, err, errlen);
    if (!rc && !enter() && p_cuStreamSynchronize(stream0))
      rc = kl_error(err, errlen, KL_ERR_INTERNAL, "copy between GPUs %d and %d failed", src->ordinal, dst->ordinal);
    free(h);
  }
  kl_cuda_use(old);
  return rc;
}

/* ---- launching an executable ---- */

/* Runs a host step of a GPU executable: its inputs come down, its outputs go up. */
static int run_host_step(const kl_step *st, void **dptrs, const size_t *bytes, char *err, size_t errlen) {
  void *small[64];
  void **h = st->nslots <= 64 ? small : malloc(sizeof(void *) * (size_t)st->nslots);
  if (!h) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a host step");
  int rc = 0, n = 0;
  for (; n < st->nslots; n++) {
    h[n] = malloc(bytes[n] ? bytes[n] : 1);
    if (!h[n]) {
      kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory staging %zu bytes for a library call", bytes[n]);
      rc = -1;
      break;
    }
  }
  for (int i = 0; !rc && i < st->host_nin; i++) rc = kl_cuda_copy(h[i], 0, dptrs[i], 1, bytes[i], err, errlen);
  if (!rc && p_cuStreamSynchronize(stream0)) {
    snprintf(err, errlen, "GPU synchronization failed before a library call");
    rc = -1;
  }
  if (!rc) rc = st->run_checked(st->ctx, h, err, errlen);
  for (int i = st->host_nin; !rc && i < st->nslots; i++) rc = kl_cuda_copy(dptrs[i], 1, h[i], 0, bytes[i], err, errlen);
  for (int i = 0; i < n; i++) free(h[i]);
  if (h != small) free(h);
  return rc;
}

/* An executable bound to device memory (kl_cuda_bind): the binding, its temporaries in one
 * arena laid out by their live ranges (kl_exec_temp_plan), or one allocation each without a
 * plan. */
struct kl_cuda_bound {
  kl_binding b;
  void *block;
  size_t block_bytes;
};

void kl_cuda_unbind(kl_cuda_bound *c) {
  if (!c) return;
  if (c->block) kl_cuda_free(c->block, c->block_bytes);
  for (int sl = 0; !c->block && c->b.tmp && sl < c->b.x->nslots; sl++)
    if (c->b.tmp[sl]) kl_cuda_free(c->b.tmp[sl], c->b.x->slot_bytes[sl]);
  kl_binding_free(&c->b);
  free(c);
}

kl_cuda_bound *kl_cuda_bind(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen) {
  kl_cuda_bound *c = kl_binding_new(sizeof *c, x, err, errlen); /* its binding first */
  if (!c) return NULL;
  const kl_temp_plan *tp = kl_exec_temp_plan(x);
  if (tp && kl_cuda_alloc(tp->bytes, &c->block, err, errlen)) {
    kl_cuda_unbind(c);
    return NULL;
  }
  c->block_bytes = tp ? tp->bytes : 0;
  for (int sl = 0; sl < x->nslots; sl++) {
    if (!kl_binding_is_temp(&c->b, sl)) continue;
    if (tp) c->b.tmp[sl] = (char *)c->block + (tp->in[sl] ? tp->off[sl] : 0); /* (not in the plan: no step uses it) */
    else if (kl_cuda_alloc(x->slot_bytes[sl], &c->b.tmp[sl], err, errlen)) {
      kl_cuda_unbind(c);
      return NULL;
    }
  }
  kl_binding_point(&c->b, in, out);
  return c;
}

void kl_cuda_bound_retarget(kl_cuda_bound *c, void *const *in, void *const *out) { kl_binding_point(&c->b, in, out); }
void **kl_cuda_bound_args(const kl_cuda_bound *c, int s) { return kl_binding_args(&c->b, s); }

int kl_cuda_bound_run(const kl_cuda_bound *c, char *err, size_t errlen) {
  const kl_binding *b = &c->b;
  const kl_exec *x = b->x;
  for (int s = 0; s < x->nsteps; s++) {
    const kl_step *st = &x->steps[s];
    void **ptrs = kl_binding_args(b, s);
    if (st->on_host ? run_host_step(st, ptrs, b->bytes + b->first[s], err, errlen) : st->run_checked(st->ctx, ptrs, err, errlen))
      return -1;
  }
  for (int i = 0; i < b->nlate; i++)
    if (kl_cuda_copy(b->late_dst[i], 1, b->late_src[i], 1, b->late_bytes[i], err, errlen)) return -1;
  return 0;
}

/* kl_cuda_exec_run (cuda.h): bound, queued, unbound (the temporaries go back in stream order). */
int kl_cuda_exec_run(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen) {
  kl_cuda_bound *b = kl_cuda_bind(x, in, out, err, errlen);
  if (!b) return -1;
  int rc = kl_cuda_bound_run(b, err, errlen);
  kl_cuda_unbind(b);
  return rc;
}

static _Thread_local int in_group; /* this thread runs a participant of an SPMD launch */

#define BIG_LAUNCH_COST (1 << 20) /* elements: launches that get event boundaries of their own */

/* KILN_GPU_PROFILE=1: every step runs synchronized and prints its time (slow; for finding
 * which kernel or library call dominates a program). */
static double sync_now(void) {
  struct timespec ts;
  p_cuStreamSynchronize(stream0);
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* KILN_GPU_PROFILE=2: host time per launch split into buffer allocation, kernel launches,
 * library calls and the rest, printed every 20 launches of programs of 20 or more steps. */
static _Thread_local struct { /* per thread: each participant of an SPMD launch reports its own */
  double alloc, kern, lib, total, comm, comm_call; /* of lib: the side-stream collectives, and their NCCL calls */
  long steps, kerns, libs, launches, comms;
} hp;

/* Collectives on the side stream (kl_step.side_stream): each waits for the queue's work before it
 * (an event), then runs on the GPU's comm_stream while the queue goes on; pend[slot] is the event
 * after the last collective touching the slot, which the queue waits for before its next use of
 * the slot (and before freeing it: such slots are freed at the launch's end). */
typedef struct {
  CUevent *pend; /* per slot, or NULL */
  CUevent *ev;   /* every event made, destroyed at the end */
  int nev, capev;
} comm_state;

static int comm_event(comm_state *cm, CUevent *e, char *err, size_t errlen) {
  if (cm->nev == cm->capev) {
    int cap = cm->capev ? 2 * cm->capev : 16;
    CUevent *ev = realloc(cm->ev, sizeof *ev * (size_t)cap);
    if (!ev) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory queueing a collective");
    cm->ev = ev, cm->capev = cap;
  }
  CUresult r = p_cuEventCreate(e, EVENT_DISABLE_TIMING);
  if (r) return kl_error(err, errlen, KL_ERR_INTERNAL, "cuEventCreate failed: %s", cu_msg(r));
  cm->ev[cm->nev++] = *e;
  return 0;
}

/* The library product queued next after a big collective on the side stream leaves it room:
 * cuBLAS's big products keep every multiprocessor to the end (one block a multiprocessor looping
 * over tiles), so an all-reduce queued just before one started only at its last tiles, its peer
 * GPU's all-reduce spinning meanwhile (a data-parallel MLP's 64 MB gradient all-reduce ran 250 us
 * late). KILN_NCCL_SM_RESERVE: how many multiprocessors (default 24, NCCL's channels on an NVLink
 * H100 pair; 0: none); collectives of at least BIG_COMM bytes. */
#define BIG_COMM (4u << 20)
static _Thread_local int comm_room; /* a big collective was queued: the next product leaves room */
static _Thread_local int comm_sm_free; /* the collective being queued runs on copy engines: no room needed */

void kl_cuda_comm_on_copy_engines(void) { comm_sm_free = 1; }

int kl_cuda_env_count(const char *name, int dflt) {
  const char *e = getenv(name);
  int n = e && *e ? atoi(e) : dflt;
  return n < 0 ? 0 : n;
}

static int sm_reserve(void) {
  static int r = -1;
  if (r < 0) r = kl_cuda_env_count("KILN_NCCL_SM_RESERVE", 24);
  return r;
}

int kl_cuda_gemm_sm_target(void) {
  if (!comm_room || enter()) return 0;
  comm_room = 0;
  int left = G->num_sms - sm_reserve();
  return !sm_reserve() ? 0 : left >= G->num_sms / 2 ? left : G->num_sms / 2;
}

/* KILN_NCCL_PRIORITY=0: the collectives' stream at the default priority (an A/B switch). */
static int low_comm_priority(void) {
  const char *e = getenv("KILN_NCCL_PRIORITY");
  return e && *e == '0';
}

static int comm_step(comm_state *cm, const kl_exec *x, const kl_step *st, void **ptrs, char *err, size_t errlen, int hprof) {
  CUresult r = CUDA_SUCCESS;
  double t0 = hprof ? wall_now() : 0, t1 = 0;
  if (!G->comm_stream) {
    /* the highest priority: a collective's blocks are scheduled before more of the queue's
     * whenever a multiprocessor frees up (as PyTorch's NCCL streams may be). Measured on a data-
     * parallel MLP step over two H100s: the same as the default priority, within noise; cuBLAS's
     * big products hold every multiprocessor until their last tiles either way. */
    int least = 0, greatest = 0;
    if (p_cuCtxGetStreamPriorityRange(&least, &greatest) || low_comm_priority()) greatest = 0;
    if ((r = p_cuStreamCreateWithPriority(&G->comm_stream, STREAM_NON_BLOCKING, greatest)))
      return kl_error(err, errlen, KL_ERR_INTERNAL, "cuStreamCreate failed: %s", cu_msg(r));
  }
  if (!cm->pend && !(cm->pend = calloc((size_t)x->nslots, sizeof *cm->pend)))
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory queueing a collective");
  CUevent before, after;
  if (comm_event(cm, &before, err, errlen)) return -1;
  if ((r = p_cuEventRecord(before, stream0)) || (r = p_cuStreamWaitEvent(G->comm_stream, before, 0)))
    return kl_error(err, errlen, KL_ERR_INTERNAL, "ordering a collective after the queue failed: %s", cu_msg(r));
  comm_q = G->comm_stream;
  comm_sm_free = 0;
  if (hprof) t1 = wall_now();
  int rc = st->run_checked(st->ctx, ptrs, err, errlen);
  comm_q = NULL;
  if (hprof) hp.comm_call += wall_now() - t1, hp.comms++;
  if (rc) return -1;
  if (comm_event(cm, &after, err, errlen)) return -1;
  if ((r = p_cuEventRecord(after, G->comm_stream)))
    return kl_error(err, errlen, KL_ERR_INTERNAL, "cuEventRecord failed: %s", cu_msg(r));
  size_t bytes = 0;
  for (int i = 0; i < st->nslots; i++) {
    cm->pend[st->slots[i]] = after;
    bytes += x->slot_bytes[st->slots[i]];
  }
  if (bytes >= 2 * (size_t)BIG_COMM && !comm_sm_free) comm_room = 1; /* (operand and result) */
  if (hprof) hp.comm += wall_now() - t0;
  return 0;
}

static void comm_join(comm_state *cm) {
  comm_room = 0;
  if (cm->nev) p_cuStreamWaitEvent(stream0, cm->ev[cm->nev - 1], 0); /* the comm stream is in order: its last event covers all */
  for (int i = 0; i < cm->nev; i++) p_cuEventDestroy(cm->ev[i]);
  cm->nev = 0;
  if (cm->pend) free(cm->pend);
  cm->pend = NULL;
}

static int cuda_launch_exec(kl_exec *x, kl_buffer **inputs, kl_buffer *const *preset, kl_buffer **outs, char *err,
                            size_t errlen) {
  static int profile = -1;
  if (profile < 0) profile = getenv("KILN_GPU_PROFILE") && *getenv("KILN_GPU_PROFILE") == '1' ? 1
                             : getenv("KILN_GPU_PROFILE") && *getenv("KILN_GPU_PROFILE") == '2' ? 2 : 0;
  int hprof = profile == 2 && x->nsteps >= 20;
  double h0 = hprof ? wall_now() : 0;
  if (enter()) {
    snprintf(err, errlen, "no GPU: %s", cuda_ok ? gpu_error : init_error);
    return -1;
  }
  kl_buffer *small[32];
  kl_buffer **bufs = x->nslots <= 32 ? small : malloc(sizeof *bufs * (size_t)x->nslots);
  if (!bufs) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory launching a GPU program");
  memset(bufs, 0, sizeof *bufs * (size_t)x->nslots);
  int rc = 0;
  comm_state cm = {0};
  for (int i = 0; i < x->ninputs; i++) {
    kl_buffer *b = inputs[i];
    if (b->device != KL_DEV_CUDA) {
      snprintf(err, errlen, "internal error: input %d of a GPU program is not on the GPU", i);
      rc = -1;
      goto done;
    }
    if (settled(b) == KL_BUF_FAILED) {
      snprintf(err, errlen, "%s", b->error ? b->error : "an input of this computation failed");
      rc = -1;
      goto done;
    }
    if (!bufs[x->in_slots[i]]) {
      if (ngpus > 1 && b->ordinal != ord) { /* an uncommitted operand on another GPU: brought here */
        kl_buffer *moved = kl_buf_new_on(KL_DEV_CUDA, b->nbytes, err, errlen);
        if (!moved || cuda_copy_buffer(moved, b, err, errlen)) {
          kl_buf_release(moved);
          rc = -1;
          goto done;
        }
        bufs[x->in_slots[i]] = moved;
        continue;
      }
      bufs[x->in_slots[i]] = b;
      kl_buf_retain(b);
    }
  }
  for (int i = 0; preset && !rc && i < x->noutputs; i++) /* donated inputs' buffers, written again */
    if (preset[i] && !bufs[x->out_slots[i]]) {
      bufs[x->out_slots[i]] = preset[i];
      kl_buf_retain(preset[i]);
    }
  /* A large launch starts a new event: buffers written before it never wait for it (small
   * launches share one event, recorded on demand, so a read waits at most for small work). */
  if (x->cost >= BIG_LAUNCH_COST) {
    pthread_mutex_lock(&ev_mu);
    struct kl_event *cur = G->ev_current;
    pthread_mutex_unlock(&ev_mu);
    if (cur) ensure_recorded(cur);
  }
  /* graphs are built in GPU 0's context, and not around an SPMD launch's collectives */
  int graphed = rc || ord || in_group ? 0 : kl_cuda_graph_launch(x, bufs, err, errlen);
  if (graphed < 0) rc = -1;
  const int *live = graphed ? NULL : kl_exec_live(x), *last = live ? live + x->nslots : NULL; /* freed after the last step */
  for (int s = 0; s < x->nsteps && !rc && !graphed; s++) {
    const kl_step *st = &x->steps[s];
    if (cm.pend) /* a slot a collective still reads or writes on the side stream: the queue waits for it here */
      for (int i = 0; i < st->nslots && !st->side_stream; i++)
        if (cm.pend[st->slots[i]]) {
          p_cuStreamWaitEvent(stream0, cm.pend[st->slots[i]], 0);
          cm.pend[st->slots[i]] = NULL;
        }
    void *psmall[64];
    size_t bsmall[64];
    void **ptrs = st->nslots <= 64 ? psmall : malloc(sizeof(void *) * (size_t)st->nslots);
    size_t *bytes = st->nslots <= 64 ? bsmall : malloc(sizeof(size_t) * (size_t)st->nslots);
    if (!ptrs || !bytes) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory launching a GPU program");
    double a0 = hprof ? wall_now() : 0;
    for (int i = 0; !rc && i < st->nslots; i++) {
      int sl = st->slots[i];
      if (!bufs[sl] && !(bufs[sl] = kl_buf_new_on(KL_DEV_CUDA, x->slot_bytes[sl], err, errlen))) rc = -1;
      else {
        ptrs[i] = bufs[sl]->data;
        bytes[i] = x->slot_bytes[sl];
      }
    }
    double t0 = profile == 1 ? sync_now() : hprof ? wall_now() : 0;
    if (hprof) hp.alloc += t0 - a0;
    if (!rc && st->side_stream && !side) rc = comm_step(&cm, x, st, ptrs, err, errlen, hprof);
    else if (!rc) rc = st->on_host ? run_host_step(st, ptrs, bytes, err, errlen) : st->run_checked(st->ctx, ptrs, err, errlen);
    if (hprof) {
      int k = !st->is_library;
      double t1 = wall_now();
      if (k) hp.kern += t1 - t0, hp.kerns++;
      else hp.lib += t1 - t0, hp.libs++;
      hp.steps++;
    }
    if (profile == 1)
      fprintf(stderr, "kiln gpu profile: step %d/%d %s: %.1f us\n", s, x->nsteps, st->on_host ? "host library call" : "device",
              (sync_now() - t0) * 1e6);
    if (ptrs && ptrs != psmall) free(ptrs);
    if (bytes && bytes != bsmall) free(bytes);
    for (int i = 0; last && !rc && i < st->nslots; i++) { /* freed in stream order: after the step's work */
      int sl = st->slots[i];
      if (last[sl] == s && bufs[sl]) {
        if (cm.pend && cm.pend[sl]) continue; /* a collective still reads it: freed at the end, after it */
        kl_buf_release(bufs[sl]);
        bufs[sl] = NULL;
      }
    }
  }
  if (cm.nev) comm_join(&cm); /* the queue waits for every collective before the outputs' event */
  /* outputs that are inputs, or values nobody wrote (size 0), still need a buffer */
  for (int i = 0; i < x->noutputs && !rc; i++) {
    int sl = x->out_slots[i];
    if (!bufs[sl] && !(bufs[sl] = kl_buf_new_on(KL_DEV_CUDA, x->slot_bytes[sl], err, errlen))) rc = -1;
  }
  struct kl_event *ev = rc ? NULL : event_for_launch(err, errlen);
  if (!rc && !ev) rc = -1;
  if (!rc) pthread_mutex_lock(&ev_mu); /* one lock for every output's event */
  for (int i = 0; i < x->noutputs && !rc; i++) {
    kl_buffer *b = bufs[x->out_slots[i]];
    int is_input = 0;
    for (int j = 0; j < x->ninputs; j++) is_input |= x->in_slots[j] == x->out_slots[i];
    if (!is_input && b->event != ev) {
      if (b->event) event_release_locked(b->event);
      ev->refs++;
      b->event = ev;
    }
    kl_buf_retain(b);
    outs[i] = b;
  }
  if (!rc) pthread_mutex_unlock(&ev_mu);
  if (ev) {
    if (x->cost >= BIG_LAUNCH_COST) ensure_recorded(ev); /* and later small launches do not extend it */
    event_release(ev);
  }
done:
  if (cm.nev) comm_join(&cm);
  free(cm.pend);
  free(cm.ev);
  for (int i = 0; i < x->nslots; i++) kl_buf_release(bufs[i]); /* temporaries are freed in stream order */
  if (bufs != small) free(bufs);
  if (hprof) {
    hp.total += wall_now() - h0;
    if (++hp.launches % 20 == 0) {
      fprintf(stderr, "kiln gpu host profile: %ld launches, per launch %.1f us: allocation %.1f, %ld kernels %.1f, %ld library calls %.1f "
              "(of which %ld side-stream collectives %.1f: their calls %.1f), other %.1f\n",
              hp.launches, hp.total / hp.launches * 1e6, hp.alloc / hp.launches * 1e6, hp.kerns / hp.launches,
              hp.kern / hp.launches * 1e6, hp.libs / hp.launches, hp.lib / hp.launches * 1e6, hp.comms / hp.launches,
              hp.comm / hp.launches * 1e6, hp.comm_call / hp.launches * 1e6,
              (hp.total - hp.alloc - hp.kern - hp.lib) / hp.launches * 1e6);
      memset(&hp, 0, sizeof hp);
    }
  }
  return rc;
}

/* ---- SPMD launches: one executable on several GPUs ----
 * Each participant is queued by a thread of its own, its GPU current there, so that NCCL's calls
 * (one communicator per GPU of the set, ncclCommInitAll) are issued concurrently as NCCL requires
 * of one rank per thread, and a collective inside a loop body needs nothing special. The threads
 * only queue work: the launch returns once every participant's steps are queued (host steps and
 * host collectives excepted, which run as they come). */
typedef struct {
  kl_exec *x;
  kl_buffer **in, **out;
  int ordinal, rank, rc, status;
  kl_coll_group *grp;
  int finished; /* queued to a worker: set under its lock once run */
  char err[512];
} participant;

static void *run_participant(void *arg) {
  participant *p = arg;
  int old = kl_cuda_use(p->ordinal);
  kl_coll_set_current(p->grp, p->rank);
  in_group = 1;
  p->rc = cuda_launch_exec(p->x, p->in, NULL, p->out, p->err, sizeof p->err);
  if (p->rc) p->status = kl_status_last();
  if (p->rc) kl_coll_abort(p->grp, p->err); /* the others must not wait for it at a host rendezvous */
  kl_coll_finish(p->grp);
  in_group = 0;
  kl_coll_set_current(NULL, 0);
  kl_cuda_use(old);
  return NULL;
}

/* Long-lived participant threads, one a GPU: a launch hands its participants after the first to
 * them rather than to new threads, so that per-thread state (the CUDA runtime's, the libraries'
 * behind cuBLAS calls) stays warm from launch to launch. A new thread a launch costs each of those
 * calls tens of microseconds. A worker already busy (two launches at once from two threads, or a
 * participant's host callback launching again) is not waited for: that participant gets a thread
 * of its own, as before. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  participant *job; /* handed over, not yet taken */
  int busy;         /* a participant handed over and not finished */
  pid_t pid;        /* the process the thread runs in (0: none started; a fork's child starts its own) */
} worker;
static worker workers[KL_CUDA_MAX_GPUS];
static pthread_mutex_t workers_mu = PTHREAD_MUTEX_INITIALIZER;

static void *worker_main(void *arg) {
  worker *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->job) pthread_cond_wait(&w->go, &w->mu);
    participant *p = w->job;
    w->job = NULL;
    pthread_mutex_unlock(&w->mu);
    run_participant(p);
    pthread_mutex_lock(&w->mu);
    p->finished = 1;
    w->busy = 0;
    pthread_cond_broadcast(&w->done);
  }
  return NULL;
}

/* Hands p to its GPU's worker (started on first use): 1, or 0 when the worker is busy or cannot start. */
static int worker_take(participant *p) {
  worker *w = &workers[p->ordinal];
  pthread_mutex_lock(&workers_mu);
  if (w->pid != getpid()) { /* first use in this process */
    pthread_t t;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->go, NULL);
    pthread_cond_init(&w->done, NULL);
    w->job = NULL;
    w->busy = 0;
    w->pid = 0;
    if (!pthread_create(&t, NULL, worker_main, w)) {
      pthread_detach(t);
      w->pid = getpid();
    }
  }
  int ok = w->pid == getpid();
  pthread_mutex_unlock(&workers_mu);
  if (!ok) return 0;
  pthread_mutex_lock(&w->mu);
  ok = !w->busy;
  if (ok) {
    w->busy = 1;
    p->finished = 0;
    w->job = p;
    pthread_cond_signal(&w->go);
  }
  pthread_mutex_unlock(&w->mu);
  return ok;
}

static void worker_wait(participant *p) {
  worker *w = &workers[p->ordinal];
  pthread_mutex_lock(&w->mu);
  while (!p->finished) pthread_cond_wait(&w->done, &w->mu);
  pthread_mutex_unlock(&w->mu);
}

static int cuda_launch_group(kl_exec *x, int n, const int *ordinals, const kl_span *span, kl_buffer **inputs,
                             kl_buffer **outs, char *err, size_t errlen) {
  int me = span ? kl_net_span_process(span->size, span->procs, n, "GPUs", err, errlen) : 0, total = span ? span->size : n;
  if (me < 0) return -1;
  if (enter()) {
    snprintf(err, errlen, "no GPU: %s", cuda_ok ? gpu_error : init_error);
    return -1;
  }
  for (int p = 0; p < n; p++)
    if (ordinals[p] < 0 || ordinals[p] >= ngpus)
      return kl_error(err, errlen, KL_ERR_VALUE, "an SPMD launch on GPU %d, but this machine has %d GPUs", ordinals[p], ngpus);
  participant *ps = calloc((size_t)n, sizeof *ps);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  /* a group spanning processes: its ranks are global, the GPUs of other processes' ranks unknown here (-1) */
  kl_coll_group *grp = span ? kl_coll_group_new_spanning(span->size, span->procs, me) : kl_coll_group_new(n);
  int *gords = malloc(sizeof(int) * (size_t)total);
  for (int r = 0; gords && r < total; r++) gords[r] = span ? -1 : ordinals[r];
  for (int p = 0; gords && span && p < n; p++) gords[span->ranks[p]] = ordinals[p];
  if (!ps || !th || !grp || !gords || kl_coll_group_set_ordinals(grp, gords)) {
    free(gords);
    free(ps);
    free(th);
    kl_coll_group_release(grp);
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory launching a program on %d GPUs", n);
  }
  int rc = 0;
  for (int p = 0; p < n; p++) {
    ps[p] = (participant){x, inputs + (size_t)p * (size_t)x->ninputs, outs + (size_t)p * (size_t)x->noutputs, ordinals[p],
                          span ? span->ranks[p] : p, 0, 0, grp, 0, ""};
  }
  free(gords);
  uint64_t mask = 0; /* (ordinals < KL_CUDA_MAX_GPUS) */
  for (int p = 0; p < n; p++) mask |= (uint64_t)1 << ordinals[p];
  int careful = (__atomic_load_n(&x->group_warm, __ATOMIC_ACQUIRE) & mask) != mask;
  kl_coll_group_set_careful(grp, careful);
  const char *wk = getenv("KILN_GPU_WORKERS"); /* an A/B switch: 0 starts a thread a participant a launch */
  int no_workers = wk && *wk == '0';
  int started = 1; /* participant 0 runs on this thread; the others on their GPU's worker, or a thread of their own */
  char *own = calloc((size_t)n, 1);
  for (; own && started < n; started++)
    if (!(no_workers ? 0 : worker_take(&ps[started])) && !(own[started] = !pthread_create(&th[started], NULL, run_participant, &ps[started])))
      break;
  if (started < n) { /* no thread: the rest cannot meet the others; abort the group */
    kl_coll_abort(grp, NULL);
    rc = kl_error(err, errlen, KL_ERR_NOMEM, "cannot start a thread for participant %d of an SPMD launch", started);
  }
  run_participant(&ps[0]);
  for (int p = 1; p < started; p++) {
    if (own[p]) pthread_join(th[p], NULL);
    else worker_wait(&ps[p]);
  }
  free(own);
  for (int p = 0; p < started && !rc; p++)
    if (ps[p].rc) rc = kl_error(err, errlen, ps[p].status ? ps[p].status : KL_ERR_INTERNAL, "GPU %d: %s", ordinals[p], ps[p].err);
  if (!rc && careful) __atomic_fetch_or(&x->group_warm, mask, __ATOMIC_RELEASE);
  if (rc) /* outputs of the participants that did launch are dropped */
    for (int p = 0; p < started; p++)
      if (!ps[p].rc)
        for (int k = 0; k < x->noutputs; k++) kl_buf_release(ps[p].out[k]);
  free(ps);
  free(th);
  kl_coll_group_release(grp);
  return rc;
}

static int cuda_use_ordinal(int ordinal) { return kl_cuda_use(ordinal); }

static int cuda_copy_between(kl_buffer *dst, kl_buffer *src, char *err, size_t errlen) {
  return cuda_copy_buffer(dst, src, err, errlen);
}

int kl_cuda_in_group(void) { return in_group; }
void kl_cuda_context_lost(void) { ctx_ord = -1; }

/* ---- the device interface ---- */

/* A library python/ found (a wheel's): cuDNN's to cuDNN, a libnccl to runtime/nccl.c, a libcusolver to runtime/cusolver.c, anything
 * else to cuBLAS's search, and cuSOLVER also looks beside a libcublas (the nvidia-cu13 wheel holds both
 * in one folder). */
static int cuda_library_add_path(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (strstr(path, "cudnn")) return kl_cudnn_add_search_path(path) ? 0 : -1;
  if (strstr(base, "libnccl")) return kl_nccl_add_search_path(path) ? 0 : -1;
  if (strstr(base, "cusolver")) return kl_cusolver_add_search_path(path) ? 0 : -1;
  if (strstr(base, "libcupti")) return kl_cupti_add_search_path(path) ? 0 : -1;
  kl_cusolver_add_search_path(path);
  return kl_cublas_add_search_path(path) ? 0 : -1;
}

static int cuda_library(char *out, size_t n) {
  int ok = kl_cublas_available(out, n);
  if (ok) snprintf(out, n, "%s", kl_cublas_library());
  return ok;
}

const kl_device kl_device_cuda = {
    .name = "cuda",
    .kind = KL_DEV_CUDA,
    .born_ready = 1,
    .available = kl_cuda_available,
    .info = cuda_info,
    .alloc = kl_cuda_alloc,
    .free = kl_cuda_free,
    .memory_stats = cuda_memory_stats,
    .empty_cache = cuda_empty_cache,
    .reset_peak = cuda_reset_peak,
    .upload = cuda_upload,
    .read = cuda_read,
    .is_ready = cuda_is_ready,
    .wait = cuda_wait,
    .wait_for = cuda_wait_for,
    .stop = cuda_stop,
    .event_release = event_release,
    .exec_state_free = kl_cuda_graph_free,
    .stream = kl_cuda_stream,
    .stream_wait = cuda_stream_wait,
    .launch = cuda_launch_exec,
    .launch_group = cuda_launch_group,
    .use_ordinal = cuda_use_ordinal,
    .copy = cuda_copy_between,
    .count = kl_cuda_count,
    .synchronize = cuda_synchronize,
    .library_add_path = cuda_library_add_path,
    .library = cuda_library,
};
