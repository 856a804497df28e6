/* cufft.c: batched FFTs on the GPU through cuFFT, opened at run time (libcufft.so.12, .11 or .13
 * from the system, CUDA_HOME, /usr/local/cuda, or paths python/ registers such as the
 * nvidia-cufft wheel). Plans cached by shape, queued on kiln's stream, inverses scaled through
 * runtime/cublas.c. Knows nothing of the IR, and reaches the GPU only through runtime/cuda.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/status.h"
#include "cuda.h"
#include "libfind.h"
#include "profile.h"

typedef int cufftHandle;
enum { T_C2C = 0x29, T_R2C = 0x2a, T_C2R = 0x2c, T_Z2Z = 0x69, T_D2Z = 0x6a, T_Z2D = 0x6c, FORWARD = -1, INVERSE = 1,
       CAPTURE_RELAXED = 2 };

static int (*p_create)(cufftHandle *);
static int (*p_set_auto_alloc)(cufftHandle, int);
static int (*p_make_plan)(cufftHandle, int, long long *, long long *, long long, long long, long long *, long long,
                          long long, int, long long, size_t *);
static int (*p_set_work_area)(cufftHandle, void *);
static int (*p_set_stream)(cufftHandle, void *);
static int (*p_exec)(cufftHandle, void *, void *, int);
static int (*p_destroy)(cufftHandle);
/* the driver's, for plans made while a graph is captured (see make_plan) */
static int (*p_exchange_capture_mode)(int *);
static int (*p_mem_alloc)(unsigned long long *, size_t);

/* The four kinds of kl_cufft_exec: cuFFT's transform type (single, double), its direction, and
 * which side is real (0 neither, 1 input, 2 output: that side's last axis is n, the other's
 * n/2+1). Inverses are scaled by 1/prod(n) afterwards: cuFFT does not scale. */
static const struct {
  const char *name;
  int type[2], dir, real_side, scaled;
} kinds[4] = {
    {"fft", {T_C2C, T_Z2Z}, FORWARD, 0, 0},
    {"ifft", {T_C2C, T_Z2Z}, INVERSE, 0, 1},
    {"rfft", {T_R2C, T_D2Z}, FORWARD, 1, 0},
    {"irfft", {T_C2R, T_Z2D}, INVERSE, 2, 1},
};
enum { IRFFT = 3 };

/* A cached plan: its key, cuFFT's handle and the device block it runs in. */
typedef struct {
  int kind, dbl, rank;          /* key: kinds[] index, double precision, number of axes */
  int64_t n[3], howmany;        /* key: real-space lengths (n[rank..2] zero), transforms per call */
  cufftHandle h;                /* cuFFT's plan, made with auto allocation off: its work area is block */
  void *block;                  /* device memory: the work area, then (irfft) a copy of the input */
  size_t work_bytes, bytes;     /* the work area's size (256-aligned) and the block's */
  int pinned;                   /* run while a graph was captured: the graph holds block and h, kept */
  int from_driver;              /* block from cuMemAlloc (made under capture), never freed */
  unsigned long long last_used; /* for eviction, least recently used first */
} plan;

#define MAX_PLANS 64 /* slots; at most KEEP_PLANS of them not pinned once a call returns */
#define KEEP_PLANS 16
static plan plans[MAX_PLANS];
static int nplans;
static unsigned long long clock_now;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int tried, ready;
static char why[512];
static kl_libfind find = KL_LIBFIND_INIT; /* registered candidates, the path opened */

/* A candidate library file, or a folder to look in (a site-packages, a CUDA lib folder). */
int kl_cufft_add_search_path(const char *path) {
  return kl_libfind_add(&find, path);
}

static void *try_open(const char *path) { return kl_libfind_open(&find, path); }

/* libcufft.so.12 (CUDA 12.x and 13.x ship cuFFT 11.x and 12.x), .11, then .13, in dir. */
static const int versions[] = {12, 11, 13};
static void *try_folder(const char *dir, const char *sub) {
  void *h = NULL;
  for (int v = 0; !h && v < 3; v++) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%slibcufft.so.%d", dir, sub, versions[v]);
    h = try_open(p);
  }
  return h;
}

static void open_cufft(void) {
  tried = 1;
  void *h = NULL;
  const char *env = getenv("KILN_CUFFT_LIB"); /* an explicit choice wins over what the system has */
  if (env && *env) h = try_open(env);
  for (int v = 0; !h && v < 3; v++) {
    char name[32];
    snprintf(name, sizeof name, "libcufft.so.%d", versions[v]);
    h = try_open(name);
  }
  if (!h) h = try_open("libcufft.so");
  const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  for (int i = 0; !h && i < 3; i++)
    if (homes[i] && *homes[i] && !(h = try_folder(homes[i], "lib64/"))) h = try_folder(homes[i], "targets/x86_64-linux/lib/");
  /* a registered path: the library itself, or a folder holding it or the nvidia-cufft wheel */
  const char *wheel_subs[] = {"", "nvidia/cufft/lib/", "nvidia/cu13/lib/"};
  for (int i = 0; !h && i < find.nextra; i++) {
    h = try_open(find.extra[i]);
    for (int s = 0; !h && s < 3; s++) h = try_folder(find.extra[i], wheel_subs[s]);
  }
  if (!h) {
    snprintf(why, sizeof why, "cuFFT not found (tried libcufft.so.12/.11/.13, $CUDA_HOME, /usr/local/cuda and the "
                              "nvidia-cufft wheel; set KILN_CUFFT_LIB to its path)");
    return;
  }
  *(void **)&p_create = dlsym(h, "cufftCreate");
  *(void **)&p_set_auto_alloc = dlsym(h, "cufftSetAutoAllocation");
  *(void **)&p_make_plan = dlsym(h, "cufftMakePlanMany64");
  *(void **)&p_set_work_area = dlsym(h, "cufftSetWorkArea");
  *(void **)&p_set_stream = dlsym(h, "cufftSetStream");
  *(void **)&p_exec = dlsym(h, "cufftXtExec");
  *(void **)&p_destroy = dlsym(h, "cufftDestroy");
  if (!p_create || !p_set_auto_alloc || !p_make_plan || !p_set_work_area || !p_set_stream || !p_exec || !p_destroy) {
    snprintf(why, sizeof why, "%.400s lacks the cuFFT functions kiln needs", find.path);
    return;
  }
  *(void **)&p_exchange_capture_mode = kl_cuda_driver_symbol("cuThreadExchangeStreamCaptureMode");
  *(void **)&p_mem_alloc = kl_cuda_driver_symbol("cuMemAlloc");
  ready = 1;
}

/* 1 when FFTs can run on the GPU: cuFFT found and cuBLAS too (it scales the inverses). */
int kl_cufft_available(char *reason, size_t n) {
  pthread_mutex_lock(&mu);
  if (!tried && kl_cuda_available(NULL, 0)) open_cufft();
  int ok = ready;
  pthread_mutex_unlock(&mu);
  char blas_why[256];
  if (ok && !kl_cublas_available(blas_why, sizeof blas_why)) {
    if (reason) snprintf(reason, n, "cuFFT's inverse transforms are scaled through cuBLAS: %s", blas_why);
    return 0;
  }
  if (!ok && reason) snprintf(reason, n, "%s", why[0] ? why : "no GPU");
  return ok;
}

const char *kl_cufft_library(void) { return ready ? find.path : ""; }

/* cuFFT's name for status r ("CUFFT_ALLOC_FAILED"), or its number in buf for one newer than this list. */
static const char *result_name(int r, char *buf, size_t len) {
  static const char *names[] = {"CUFFT_SUCCESS", "CUFFT_INVALID_PLAN", "CUFFT_ALLOC_FAILED", "CUFFT_INVALID_TYPE",
                                "CUFFT_INVALID_VALUE", "CUFFT_INTERNAL_ERROR", "CUFFT_EXEC_FAILED",
                                "CUFFT_SETUP_FAILED", "CUFFT_INVALID_SIZE", "CUFFT_UNALIGNED_DATA",
                                "CUFFT_INCOMPLETE_PARAMETER_LIST", "CUFFT_INVALID_DEVICE", "CUFFT_PARSE_ERROR",
                                "CUFFT_NO_WORKSPACE", "CUFFT_NOT_IMPLEMENTED", "CUFFT_LICENSE_ERROR",
                                "CUFFT_NOT_SUPPORTED", "CUFFT_MISSING_DEPENDENCY", "CUFFT_NVRTC_FAILURE",
                                "CUFFT_NVJITLINK_FAILURE", "CUFFT_NVSHMEM_FAILURE"};
  if (r >= 0 && r < (int)(sizeof names / sizeof names[0])) return names[r];
  snprintf(buf, len, "cuFFT status %d", r);
  return buf;
}

/* "rfft of 64x[512,512] float32", for messages. */
static const char *describe(char *buf, size_t len, int kind, int dbl, int rank, const int64_t *n, int64_t howmany) {
  int at = snprintf(buf, len, "%s of %lldx[", kinds[kind].name, (long long)howmany);
  for (int i = 0; i < rank && at > 0 && (size_t)at < len; i++)
    at += snprintf(buf + at, len - at, "%s%lld", i ? "," : "", (long long)n[i]);
  if (at > 0 && (size_t)at < len) snprintf(buf + at, len - at, "] %s", dbl ? "float64" : "float32");
  return buf;
}

/* Bytes one call reads (side 0) or writes (side 1): the real side holds prod(n) reals, a complex
 * one prod(n) complex values, or n[-1]/2+1 along its last axis opposite a real side. */
static size_t side_bytes(int kind, int dbl, int rank, const int64_t *n, int64_t howmany, int side) {
  int real = kinds[kind].real_side == side + 1;
  int64_t count = howmany;
  for (int i = 0; i < rank; i++) count *= i == rank - 1 && kinds[kind].real_side && !real ? n[i] / 2 + 1 : n[i];
  return (size_t)count * (dbl ? 8 : 4) * (real ? 1 : 2);
}

/* Frees a plan (caller holds mu, and no graph is being captured: cuFFT's destroy frees memory
 * synchronously, which a capturing thread may not, and kl_cuda_free would be captured). The
 * block goes back in stream order, after the transforms queued with it. */
static void drop(plan *p) {
  p_destroy(p->h);
  if (p->block && !p->from_driver) kl_cuda_free(p->block, p->bytes);
  *p = plans[--nplans];
}

/* Makes p's cuFFT plan and block (its key filled in). Outside capture the block comes from
 * kiln's stream-ordered allocator. While a graph is captured on this thread (capturing), the
 * planner's own allocations and uploads and our block are not work of that graph: the thread's
 * capture mode is relaxed while they run, the block comes from cuMemAlloc (outside any graph and
 * outside kiln's counts) and the plan is pinned by the caller, so a plan first met inside a
 * captured loop or branch still works (at the price of memory kept for the process). */
static int make_plan(plan *p, int capturing, char *err, size_t errlen) {
  char shape[160], code[32];
  long long n[3] = {p->n[0], p->n[1], p->n[2]};
  int mode = CAPTURE_RELAXED, relaxed = capturing && p_exchange_capture_mode && !p_exchange_capture_mode(&mode);
  size_t work = 0;
  int rc = p_create(&p->h);
  if (rc) {
    if (relaxed) p_exchange_capture_mode(&mode);
    describe(shape, sizeof shape, p->kind, p->dbl, p->rank, p->n, p->howmany);
    return kl_error(err, errlen, KL_ERR_INTERNAL, "cuFFT: plan for %s failed: %s", shape, result_name(rc, code, sizeof code));
  }
  rc = p_set_auto_alloc(p->h, 0);
  if (!rc)
    rc = p_make_plan(p->h, p->rank, n, NULL, 1, 0, NULL, 1, 0, kinds[p->kind].type[p->dbl], (long long)p->howmany, &work);
  int failed_alloc = 0;
  char aerr[256] = "";
  if (!rc) {
    p->work_bytes = (work + 255) & ~(size_t)255;
    p->bytes = p->work_bytes + (p->kind == IRFFT ? side_bytes(p->kind, p->dbl, p->rank, p->n, p->howmany, 0) : 0);
    p->block = NULL;
    p->from_driver = capturing;
    if (p->bytes && capturing) {
      unsigned long long d = 0;
      failed_alloc = !p_mem_alloc || p_mem_alloc(&d, p->bytes);
      if (failed_alloc) snprintf(aerr, sizeof aerr, "cuMemAlloc of %zu bytes failed", p->bytes);
      p->block = (void *)(uintptr_t)d;
    } else if (p->bytes) {
      failed_alloc = kl_cuda_alloc(p->bytes, &p->block, aerr, sizeof aerr) != 0;
    }
    if (!failed_alloc && work) rc = p_set_work_area(p->h, p->block);
  }
  if (rc || failed_alloc) { /* (a block from cuMemAlloc is lost here: cuFFT refusing its work area is rare) */
    p_destroy(p->h);
    if (p->block && !p->from_driver) kl_cuda_free(p->block, p->bytes);
    if (relaxed) p_exchange_capture_mode(&mode);
    describe(shape, sizeof shape, p->kind, p->dbl, p->rank, p->n, p->howmany);
    if (failed_alloc)
      return kl_error(err, errlen, KL_ERR_NOMEM, "cuFFT: work area for %s: %s", shape, aerr);
    return kl_error(err, errlen, KL_ERR_INTERNAL, "cuFFT: plan for %s failed: %s", shape, result_name(rc, code, sizeof code));
  }
  if (relaxed) p_exchange_capture_mode(&mode);
  return 0;
}

/* The cached plan for a key, made if missing (caller holds mu); NULL with a message. Eviction
 * only happens outside capture (see drop); pinned plans are never evicted. */
static plan *find_plan(int kind, int dbl, int rank, const int64_t *n, int64_t howmany, int capturing, char *err,
                       size_t errlen) {
  plan key = {.kind = kind, .dbl = dbl, .rank = rank, .howmany = howmany};
  for (int i = 0; i < rank; i++) key.n[i] = n[i];
  for (int i = 0; i < nplans; i++) {
    plan *p = &plans[i];
    if (p->kind == kind && p->dbl == dbl && p->rank == rank && p->howmany == howmany && !memcmp(p->n, key.n, sizeof key.n)) {
      p->last_used = ++clock_now;
      return p;
    }
  }
  for (;;) { /* room for one more, the least recently used unpinned plans going first */
    int unpinned = 0, lru = -1;
    for (int i = 0; i < nplans; i++)
      if (!plans[i].pinned) {
        unpinned++;
        if (lru < 0 || plans[i].last_used < plans[lru].last_used) lru = i;
      }
    if (capturing || lru < 0 || (unpinned < KEEP_PLANS && nplans < MAX_PLANS)) break;
    drop(&plans[lru]);
  }
  if (nplans == MAX_PLANS) {
    char shape[160];
    describe(shape, sizeof shape, kind, dbl, rank, n, howmany);
    kl_error(err, errlen, KL_ERR_UNSUPPORTED, "cuFFT: no room for a plan for %s: %d FFT shapes in use by captured graphs",
             shape, MAX_PLANS);
    return NULL;
  }
  if (make_plan(&key, capturing, err, errlen)) return NULL;
  key.last_used = ++clock_now;
  plans[nplans] = key;
  return &plans[nplans++];
}

/* Queues one batched transform (see cuda.h). The input is preserved for every kind: cuFFT's
 * complex-to-real transforms overwrite their input, so irfft runs on a copy in the plan's block.
 * Serialized by mu, as each plan has one work area; the calls only enqueue work. */
int kl_cufft_exec(int kind, int dbl, int rank, const int64_t *n, int64_t howmany, const void *in, void *out, char *err,
                  size_t errlen) {
  char shape[160], code[32];
  if (kind < 0 || kind > 3 || dbl < 0 || dbl > 1 || rank < 1 || rank > 3 || howmany < 0)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "internal error: cuFFT kind %d, dbl %d, rank %d, %lld transforms", kind,
                    dbl, rank, (long long)howmany);
  for (int i = 0; i < rank; i++)
    if (n[i] < 1)
      return kl_error(err, errlen, KL_ERR_VALUE, "cuFFT: %s has an axis of length %lld",
                      describe(shape, sizeof shape, kind, dbl, rank, n, howmany), (long long)n[i]);
  if (!kl_cufft_available(err, errlen)) return -1;
  if (howmany == 0) return 0;
  /* a branch being captured into a conditional node queues on a stream of its own */
  void *q = kl_cuda_queue_stream(), *stream = q ? q : kl_cuda_stream();
  int capturing = kl_cuda_capturing() || stream != kl_cuda_stream();
  pthread_mutex_lock(&mu);
  plan *p = find_plan(kind, dbl, rank, n, howmany, capturing, err, errlen);
  if (!p) {
    pthread_mutex_unlock(&mu);
    return -1;
  }
  if (capturing) p->pinned = 1; /* the graph holds the plan's tables and block from now on */
  const void *src = in;
  int rc = 0;
  if (kind == IRFFT) {
    src = (char *)p->block + p->work_bytes;
    if (kl_cuda_copy((void *)src, 1, in, 1, side_bytes(kind, dbl, rank, n, howmany, 0), err, errlen)) {
      pthread_mutex_unlock(&mu);
      return -1;
    }
  }
  rc = p_set_stream(p->h, stream);
  uint64_t t0 = kl_prof_begin();
  if (!rc) rc = p_exec(p->h, (void *)src, out, kinds[kind].dir);
  KL_PROF_END(t0, "library", "cufftXtExec", "\"call\": \"%s\"", describe(shape, sizeof shape, kind, dbl, rank, n, howmany));
  pthread_mutex_unlock(&mu);
  if (rc)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "cuFFT: %s failed: %s",
                    describe(shape, sizeof shape, kind, dbl, rank, n, howmany), result_name(rc, code, sizeof code));
  if (!kinds[kind].scaled) return 0;
  double size = 1;
  for (int i = 0; i < rank; i++) size *= (double)n[i];
  int64_t reals = (int64_t)(side_bytes(kind, dbl, rank, n, howmany, 1) / (dbl ? 8 : 4));
  return kl_cublas_scal(dbl, reals, 1.0 / size, out, err, errlen);
}
