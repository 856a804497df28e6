/* cupti.c: see cupti.h. CUPTI hands its records over in buffers this file gives it (request) and
 * gets back full (complete, on CUPTI's thread or inside a flush); each is read at once into a
 * store of kl_cupti_records under one lock. Kernel names are CUPTI's own (kiln's for kiln's
 * kernels, a library's for its kernels). Device times move into the host clock by one offset
 * measured at the start with cuptiGetTimestamp. */
#define _GNU_SOURCE
#include "cupti.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libfind.h"
#include "profile.h"

/* ---- the CUPTI values and record layouts kiln reads (cupti_activity.h). The fields read sit at
 * the same offsets in every record version since CUDA 11 (CUpti_ActivityKernel4..10,
 * CUpti_ActivityMemcpy5..6, CUpti_ActivityMemset4, CUpti_ActivityExternalCorrelation) ---- */
enum {
  KIND_MEMCPY = 1,
  KIND_MEMSET = 2,
  KIND_DRIVER = 4,
  KIND_RUNTIME = 5,
  KIND_CONCURRENT_KERNEL = 10,
  KIND_EXTERNAL_CORRELATION = 39,
  EXTERNAL_KIND_CUSTOM0 = 3,
  FLUSH_FORCED = 1,
  ERR_MULTIPLE_SUBSCRIBERS = 39,
};
enum { /* byte offsets in a record */
  KERNEL_START = 16, KERNEL_END = 24, KERNEL_DEVICE = 40, KERNEL_STREAM = 48, KERNEL_GRID = 52, KERNEL_BLOCK = 64,
  KERNEL_CORRELATION = 92, KERNEL_NAME = 104,
  COPY_KIND = 4, COPY_BYTES = 8, COPY_START = 16, COPY_END = 24, COPY_DEVICE = 32, COPY_STREAM = 40,
  COPY_CORRELATION = 44, /* memsets: the same, without a kind */
  EXTERNAL_KIND = 4, EXTERNAL_ID = 8, EXTERNAL_CORRELATION = 16,
};

typedef void (*request_fn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*complete_fn)(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);

static int (*p_enable)(int kind);
static int (*p_disable)(int kind);
static int (*p_register)(request_fn, complete_fn);
static int (*p_flush)(uint32_t flag);
static int (*p_next)(uint8_t *buffer, size_t valid, void **record);
static int (*p_timestamp)(uint64_t *ts);
static int (*p_push)(int kind, uint64_t id);
static int (*p_pop)(int kind, uint64_t *last);
static int (*p_dropped)(void *context, uint32_t stream, size_t *dropped);
static int (*p_result_string)(int result, const char **text);

/* ---- loading ---- */

static kl_libfind find = KL_LIBFIND_INIT;
static pthread_once_t open_once = PTHREAD_ONCE_INIT;
static void *lib;
static char open_why[512];

int kl_cupti_add_search_path(const char *path) { return kl_libfind_add(&find, path); }

const char *kl_cupti_library(void) { return lib ? find.path : ""; }

static void *try_open(const char *path) { return kl_libfind_open(&find, path); }

static void open_cupti(void) {
  void *h = NULL;
  const char *env = getenv("KILN_CUPTI_LIB");
  if (env && *env) h = try_open(env);
  static const char *const names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
  for (int i = 0; !h && i < 3; i++) h = try_open(names[i]);
  const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  static const char *const dirs[] = {"extras/CUPTI/lib64", "lib64", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"};
  for (int i = 0; !h && i < 3; i++)
    for (int d = 0; homes[i] && *homes[i] && !h && d < 4; d++)
      for (int v = 0; !h && v < 3; v++) {
        char p[700];
        snprintf(p, sizeof p, "%.500s/%s/%s", homes[i], dirs[d], names[v]);
        h = try_open(p);
      }
  for (int i = 0; !h && i < find.nextra; i++) h = try_open(find.extra[i]);
  if (!h) {
    snprintf(open_why, sizeof open_why, "libcupti not found (tried libcupti.so.13/.12 on the library path, "
                                        "$CUDA_HOME, /usr/local/cuda (extras/CUPTI/lib64, lib64) and the "
                                        "nvidia-cuda-cupti wheel; set KILN_CUPTI_LIB to its path)");
    return;
  }
  *(void **)&p_enable = dlsym(h, "cuptiActivityEnable");
  *(void **)&p_disable = dlsym(h, "cuptiActivityDisable");
  *(void **)&p_register = dlsym(h, "cuptiActivityRegisterCallbacks");
  *(void **)&p_flush = dlsym(h, "cuptiActivityFlushAll");
  *(void **)&p_next = dlsym(h, "cuptiActivityGetNextRecord");
  *(void **)&p_timestamp = dlsym(h, "cuptiGetTimestamp");
  *(void **)&p_push = dlsym(h, "cuptiActivityPushExternalCorrelationId"); /* optional: no launch tags */
  *(void **)&p_pop = dlsym(h, "cuptiActivityPopExternalCorrelationId");
  *(void **)&p_dropped = dlsym(h, "cuptiActivityGetNumDroppedRecords"); /* optional */
  *(void **)&p_result_string = dlsym(h, "cuptiGetResultString");         /* optional */
  if (!p_enable || !p_disable || !p_register || !p_flush || !p_next || !p_timestamp) {
    snprintf(open_why, sizeof open_why, "%.400s lacks CUPTI's activity API", find.path);
    return;
  }
  if (!p_push || !p_pop) p_push = NULL, p_pop = NULL;
  lib = h;
}

/* ---- the store ---- */

#define BUFFER_BYTES ((size_t)8 << 20)
#define MAX_RECORDS ((size_t)1 << 21)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* everything below */
static kl_cupti_record *records;
static size_t nrecords, cap, dropped;
typedef struct {
  uint32_t correlation;
  uint64_t launch;
} tag;
static tag *tags; /* CUPTI's correlation id -> kiln's launch, from external correlation records */
static size_t ntags, tags_cap;
static int64_t offset; /* host clock - CUPTI's clock, ns */

static atomic_int collecting;
static int registered;
/* (CUPTI writes external correlation records only for the API calls of a kind it records: DRIVER for
 * kiln's launches, RUNTIME for the libraries', cuBLAS's among them; those API records are dropped) */
static const int kinds[] = {KIND_CONCURRENT_KERNEL, KIND_MEMCPY,  KIND_MEMSET,
                            KIND_DRIVER,            KIND_RUNTIME, KIND_EXTERNAL_CORRELATION};
#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))
static int enabled[NKINDS];

static uint64_t rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static uint32_t rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static uint64_t to_host(uint64_t t) { return (uint64_t)((int64_t)t + offset); }

/* Reads one CUPTI record into the store (under mu). */
static void keep(const uint8_t *r) {
  uint32_t kind = rd32(r);
  if (kind == KIND_EXTERNAL_CORRELATION) {
    if (rd32(r + EXTERNAL_KIND) != EXTERNAL_KIND_CUSTOM0) return;
    if (ntags == tags_cap) {
      size_t c = tags_cap ? tags_cap * 2 : 4096;
      tag *t = realloc(tags, c * sizeof *t);
      if (!t) return;
      tags = t, tags_cap = c;
    }
    tags[ntags].correlation = rd32(r + EXTERNAL_CORRELATION);
    tags[ntags++].launch = rd64(r + EXTERNAL_ID);
    return;
  }
  if (kind != KIND_CONCURRENT_KERNEL && kind != KIND_MEMCPY && kind != KIND_MEMSET) return;
  int is_kernel = kind == KIND_CONCURRENT_KERNEL;
  uint64_t start = rd64(r + (is_kernel ? KERNEL_START : COPY_START)), end = rd64(r + (is_kernel ? KERNEL_END : COPY_END));
  if (!start || end < start) { /* (CUPTI leaves a record's times 0 when it could not take them) */
    dropped++;
    return;
  }
  if (nrecords == cap) {
    size_t c = cap ? cap * 2 : 4096;
    kl_cupti_record *n = nrecords < MAX_RECORDS ? realloc(records, c * sizeof *n) : NULL;
    if (!n) {
      dropped++;
      return;
    }
    records = n, cap = c;
  }
  kl_cupti_record *o = &records[nrecords++];
  memset(o, 0, sizeof *o);
  o->start = to_host(start), o->end = to_host(end);
  if (is_kernel) {
    o->kind = KL_CUPTI_KERNEL;
    o->device = rd32(r + KERNEL_DEVICE), o->stream = rd32(r + KERNEL_STREAM);
    o->correlation = rd32(r + KERNEL_CORRELATION);
    for (int i = 0; i < 3; i++) o->grid[i] = (int)rd32(r + KERNEL_GRID + 4 * i), o->block[i] = (int)rd32(r + KERNEL_BLOCK + 4 * i);
    const char *name;
    memcpy(&name, r + KERNEL_NAME, sizeof name);
    snprintf(o->name, sizeof o->name, "%s", name ? name : "kernel");
  } else {
    o->kind = kind == KIND_MEMCPY ? KL_CUPTI_MEMCPY : KL_CUPTI_MEMSET;
    o->copy_kind = kind == KIND_MEMCPY ? (int)r[COPY_KIND] : 0;
    o->bytes = rd64(r + COPY_BYTES);
    o->device = rd32(r + COPY_DEVICE), o->stream = rd32(r + COPY_STREAM);
    o->correlation = rd32(r + COPY_CORRELATION);
  }
}

static void on_request(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = aligned_alloc(8, BUFFER_BYTES); /* (NULL: CUPTI drops what it would have written) */
  *size = *buffer ? BUFFER_BYTES : 0;
  *max_records = 0;
}

static void on_complete(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  (void)size;
  pthread_mutex_lock(&mu);
  void *r = NULL;
  while (buffer && valid && p_next(buffer, valid, &r) == 0) keep(r);
  size_t lost = 0;
  if (p_dropped && !p_dropped(context, stream, &lost)) dropped += lost;
  pthread_mutex_unlock(&mu);
  free(buffer);
}

/* ---- collecting ---- */

static int fail(char *why, size_t whylen, const char *what, int rc) {
  const char *text = NULL;
  if (p_result_string && p_result_string(rc, &text)) text = NULL;
  if (rc == ERR_MULTIPLE_SUBSCRIBERS)
    snprintf(why, whylen, "%s: another profiler (Nsight Systems, nvprof, ...) owns CUPTI in this process", what);
  else
    snprintf(why, whylen, "%s failed (%s, CUPTI status %d; %.300s)", what, text ? text : "?", rc, find.path);
  return -1;
}

/* The host clock minus CUPTI's, from the closest-spaced of a few readings. */
static int64_t measure_offset(void) {
  int64_t best = 0;
  uint64_t gap = UINT64_MAX;
  for (int i = 0; i < 7; i++) {
    uint64_t c = 0, h0 = kl_prof_now();
    if (p_timestamp(&c)) continue;
    uint64_t h1 = kl_prof_now();
    if (h1 - h0 < gap) gap = h1 - h0, best = (int64_t)(h0 / 2 + h1 / 2) - (int64_t)c;
  }
  return best;
}

int kl_cupti_start(char *why, size_t whylen) {
  pthread_once(&open_once, open_cupti);
  if (!lib) {
    snprintf(why, whylen, "%s", open_why);
    return -1;
  }
  if (atomic_load(&collecting)) return 0;
  pthread_mutex_lock(&mu);
  free(records);
  free(tags);
  records = NULL, tags = NULL, nrecords = cap = dropped = ntags = tags_cap = 0;
  int rc = registered ? 0 : p_register(on_request, on_complete);
  if (!rc) registered = 1;
  offset = measure_offset();
  pthread_mutex_unlock(&mu);
  if (rc) return fail(why, whylen, "cuptiActivityRegisterCallbacks", rc);
  for (int k = 0; k < NKINDS; k++) {
    rc = p_enable(kinds[k]);
    enabled[k] = !rc;
    /* kernels are what collection is for; the rest may be missing (an older CUPTI) */
    if (rc && kinds[k] == KIND_CONCURRENT_KERNEL) return fail(why, whylen, "cuptiActivityEnable(CONCURRENT_KERNEL)", rc);
  }
  atomic_store(&collecting, 1);
  return 0;
}

void kl_cupti_stop(void) {
  if (!atomic_exchange(&collecting, 0)) return;
  for (int k = 0; k < NKINDS; k++)
    if (enabled[k]) p_disable(kinds[k]), enabled[k] = 0;
  p_flush(FLUSH_FORCED); /* what is left in CUPTI's buffers comes back through on_complete */
}

static int by_correlation(const void *a, const void *b) {
  uint32_t x = ((const tag *)a)->correlation, y = ((const tag *)b)->correlation;
  return x < y ? -1 : x > y;
}

/* ---- demangling kernel names (C++ libraries' kernels) through the C++ runtime kiln is linked with
 * (MLIR's), weakly: a program without one keeps the mangled names ---- */

extern char *__cxa_demangle(const char *name, char *out, size_t *len, int *status) __attribute__((weak));

static void demangle(char *name, size_t size) {
  static char *(*cxa)(const char *, char *, size_t *, int *);
  static int looked;
  if (name[0] != '_' || name[1] != 'Z') return;
  if (!looked) {
    cxa = __cxa_demangle;
    if (!cxa) *(void **)&cxa = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    looked = 1;
  }
  int status = -1;
  char *d = cxa ? cxa(name, NULL, NULL, &status) : NULL;
  if (d && !status) snprintf(name, size, "%s", d);
  free(d);
}

kl_cupti_record *kl_cupti_take(size_t *n, size_t *lost) {
  pthread_mutex_lock(&mu);
  kl_cupti_record *r = records;
  *n = nrecords, *lost = dropped;
  if (ntags) qsort(tags, ntags, sizeof *tags, by_correlation);
  for (size_t i = 0; i < nrecords; i++) {
    tag key = {r[i].correlation, 0}, *t = ntags ? bsearch(&key, tags, ntags, sizeof *tags, by_correlation) : NULL;
    r[i].launch = t ? t->launch : 0;
    if (r[i].kind == KL_CUPTI_KERNEL) demangle(r[i].name, sizeof r[i].name);
  }
  free(tags);
  records = NULL, tags = NULL, nrecords = cap = dropped = ntags = tags_cap = 0;
  pthread_mutex_unlock(&mu);
  return r;
}

int kl_cupti_push(uint64_t launch) {
  if (!atomic_load_explicit(&collecting, memory_order_relaxed) || !p_push) return 0;
  return !p_push(EXTERNAL_KIND_CUSTOM0, launch);
}

void kl_cupti_pop(int pushed) {
  uint64_t last = 0;
  if (pushed) p_pop(EXTERNAL_KIND_CUSTOM0, &last);
}
