/* cpu.c: the CPU device (kl_device_cpu): host memory for buffers, a launch queue served by one
 * executor thread, and a small pool of workers that split a step's parallel range across the
 * cores. Knows nothing of other devices (they are reached through runtime/device.h), the IR,
 * MLIR or Python. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../ir/status.h"
#include "collective.h"
#include "collective_net.h"
#include "device.h"
#include "hostla.h"
#include "profile.h"

/* Waiting threads spin briefly before sleeping: work usually arrives (or completes) within
 * microseconds, and waking a sleeping thread costs tens of them. */
#define SPIN_ITERS 3000
#define POOL_YIELDS 200 /* pool threads then yield this often before sleeping (waking a sleeping
                            thread costs tens of microseconds on a virtual machine; a yielding one
                            gives its core to any thread that has work) */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ volatile("pause");
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

/* ---- buffers ---- */

static pthread_mutex_t ready_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cv = PTHREAD_COND_INITIALIZER;

/* Large blocks are kept after use and handed out again for the same size: fresh memory
 * from the kernel costs a page fault per 4 KiB, which dominates bandwidth-bound kernels. */
#define CACHE_MIN_BYTES (64u << 10)
#define CACHE_SLOTS 512
#define HUGE_MIN_BYTES (4u << 20)
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void *ptr;
  size_t size;
} cache[CACHE_SLOTS];
static size_t cache_bytes, cache_limit;

static size_t round_size(size_t n) {
  return n >= CACHE_MIN_BYTES ? (n + 4095) & ~(size_t)4095 : (n + 63) & ~(size_t)63;
}

static void *host_alloc(size_t n) {
  if (n >= CACHE_MIN_BYTES) {
    pthread_mutex_lock(&cache_mu);
    for (int i = 0; i < CACHE_SLOTS; i++)
      if (cache[i].ptr && cache[i].size == n) {
        void *p = cache[i].ptr;
        cache[i].ptr = NULL;
        cache_bytes -= n;
        pthread_mutex_unlock(&cache_mu);
        return p;
      }
    pthread_mutex_unlock(&cache_mu);
  }
  void *p = NULL;
  if (n >= HUGE_MIN_BYTES) { /* populated up front: one system call instead of a fault per page */
    p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
  }
  if (posix_memalign(&p, 64, n ? n : 64)) return NULL;
  return p;
}

/* Gives a block host_alloc made back to the system. */
static void host_release(void *p, size_t n) {
  if (n >= HUGE_MIN_BYTES) munmap(p, n);
  else free(p);
}

static void host_free(void *p, size_t n) {
  if (!p) return;
  if (n >= CACHE_MIN_BYTES) {
    pthread_mutex_lock(&cache_mu);
    if (!cache_limit) {
      const char *env = getenv("KILN_HOST_CACHE_MB");
      long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
      cache_limit = env ? (size_t)atol(env) << 20 : (size_t)pages * (size_t)psz / 8;
      if (!cache_limit) cache_limit = 1;
    }
    int slot = -1;
    for (int i = 0; i < CACHE_SLOTS && slot < 0; i++)
      if (!cache[i].ptr) slot = i;
    if (slot >= 0 && cache_bytes + n <= cache_limit) {
      cache[slot].ptr = p;
      cache[slot].size = n;
      cache_bytes += n;
      pthread_mutex_unlock(&cache_mu);
      return;
    }
    pthread_mutex_unlock(&cache_mu);
  }
  host_release(p, n);
}

static kl_mem_count counts;

static int cpu_alloc(size_t nbytes, void **ptr, char *err, size_t errlen) {
  size_t n = round_size(nbytes);
  if (n < nbytes || !(*ptr = host_alloc(n))) {
    kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory: cannot allocate a buffer of %zu bytes", nbytes);
    return -1;
  }
  kl_mem_count_alloc(&counts, n);
  return 0;
}

static void cpu_free(void *ptr, size_t nbytes) {
  if (!ptr) return;
  kl_mem_count_free(&counts, round_size(nbytes));
  host_free(ptr, round_size(nbytes));
}

/* What kl_buf_new_on(KL_DEV_CPU, ...) makes, without the table: every launch makes its outputs
 * and temporaries here. */
kl_buffer *kl_buf_new(size_t nbytes, char *err, size_t errlen) {
  kl_buffer *b = calloc(1, sizeof *b);
  if (!b || cpu_alloc(nbytes, &b->data, err, errlen)) {
    free(b);
    if (!b) kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory: cannot allocate a buffer of %zu bytes", nbytes);
    return NULL;
  }
  b->nbytes = nbytes;
  b->refcount = 1;
  return b;
}

static int cpu_is_ready(const kl_buffer *b) { return atomic_load((_Atomic int *)&b->state) != KL_BUF_PENDING; }

static void buf_set_state(kl_buffer *b, int state, const char *msg) {
  if (msg && !b->error) b->error = strdup(msg);
  pthread_mutex_lock(&ready_mu);
  atomic_store((_Atomic int *)&b->state, state);
  pthread_cond_broadcast(&ready_cv);
  pthread_mutex_unlock(&ready_mu);
}

/* One launch writing b is done: 1 when no other queued launch writes it (then it is ready), 0
 * while a later launch that took it as a donated output has still to run (a donated update loop
 * queues several; the earlier one's completion must not mark it ready under the later one). */
static int writes_done(kl_buffer *b) {
  int w = atomic_load((_Atomic int *)&b->writers);
  while (w > 0 && !atomic_compare_exchange_weak((_Atomic int *)&b->writers, &w, w - 1)) {
  }
  return w <= 1;
}

static int cpu_wait(kl_buffer *b) {
  for (int spin = 0; spin < 2000; spin++) { /* short: the waiter must not steal a core from the workers */
    int s = atomic_load((_Atomic int *)&b->state);
    if (s != KL_BUF_PENDING) return s;
  }
  pthread_mutex_lock(&ready_mu);
  while (atomic_load((_Atomic int *)&b->state) == KL_BUF_PENDING) pthread_cond_wait(&ready_cv, &ready_mu);
  pthread_mutex_unlock(&ready_mu);
  return b->state;
}

static int cpu_wait_for(kl_buffer *b, double seconds) {
  int s = atomic_load((_Atomic int *)&b->state);
  if (s != KL_BUF_PENDING) return s;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  long ns = until.tv_nsec + (long)(seconds * 1e9);
  until.tv_sec += ns / 1000000000L;
  until.tv_nsec = ns % 1000000000L;
  pthread_mutex_lock(&ready_mu);
  while (atomic_load((_Atomic int *)&b->state) == KL_BUF_PENDING)
    if (pthread_cond_timedwait(&ready_cv, &ready_mu, &until)) break; /* timed out */
  pthread_mutex_unlock(&ready_mu);
  return atomic_load((_Atomic int *)&b->state);
}

/* ---- worker pool: splits one step's range across threads ---- */

typedef struct {
  const kl_step *step;
  void **ptrs;   /* base argument pointers */
  void **parts;  /* private partial outputs, one per chunk (full reductions) */
  int64_t chunk; /* range per chunk */
  int nchunks;
  atomic_int next;    /* next chunk to take */
  atomic_int pending; /* chunks not yet finished */
  atomic_int active;  /* pool threads holding this job (it lives on its caller's stack) */
} pool_job;

static int nthreads;
static pthread_t *pool_threads;
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static pool_job *pool_cur;
static unsigned pool_gen;

static void run_chunk(pool_job *j, int c) {
  const kl_step *s = j->step;
  int64_t lo = c * j->chunk, hi = lo + j->chunk;
  if (hi > s->extent) hi = s->extent;
  if (s->partial_arg >= 0) { /* run_step keeps steps of more than 64 slots with partials serial */
    void *local[64];
    memcpy(local, j->ptrs, sizeof(void *) * (size_t)s->nslots);
    local[s->partial_arg] = j->parts[c];
    s->run(s->ctx, local, lo, hi);
  } else {
    s->run(s->ctx, j->ptrs, lo, hi);
  }
}

static void drain(pool_job *j) {
  int c;
  while ((c = atomic_fetch_add(&j->next, 1)) < j->nchunks) {
    run_chunk(j, c);
    atomic_fetch_sub(&j->pending, 1);
  }
}

static void *pool_main(void *arg) {
  (void)arg;
  unsigned seen = 0;
  for (;;) {
    for (int spin = 0; spin < SPIN_ITERS && __atomic_load_n(&pool_gen, __ATOMIC_ACQUIRE) == seen; spin++) cpu_relax();
    for (int y = 0; y < POOL_YIELDS && __atomic_load_n(&pool_gen, __ATOMIC_ACQUIRE) == seen; y++) sched_yield();
    pthread_mutex_lock(&pool_mu);
    while (pool_gen == seen) pthread_cond_wait(&pool_cv, &pool_mu);
    seen = pool_gen;
    pool_job *j = pool_cur;
    if (j) atomic_fetch_add(&j->active, 1);
    pthread_mutex_unlock(&pool_mu);
    if (j) {
      drain(j);
      atomic_fetch_sub(&j->active, 1);
    }
  }
  return NULL;
}

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_init(void) {
  const char *env = getenv("KILN_NUM_THREADS");
  long n = env ? atol(env) : sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  if (n > 64) n = 64;
  nthreads = (int)n;
  pool_threads = calloc((size_t)nthreads, sizeof *pool_threads);
  for (int i = 1; i < nthreads; i++) pthread_create(&pool_threads[i], NULL, pool_main, NULL);
}

int kl_rt_num_threads(void) {
  pthread_once(&pool_once, pool_init);
  return nthreads;
}

/* The pool runs one job at a time: kl_rt_parallel_for runs in its caller while a step uses it. */
static atomic_int pool_in_use;

typedef struct {
  void (*fn)(void *ctx, int64_t lo, int64_t hi);
  void *ctx;
} range_job;

static void range_run(void *ctx, void **ptrs, int64_t lo, int64_t hi) {
  (void)ptrs;
  const range_job *r = ctx;
  r->fn(r->ctx, lo, hi);
}

static void run_step(const kl_step *s, void **ptrs, size_t partial_bytes);
static void pool_run(const kl_step *s, void **ptrs, size_t partial_bytes, int n);

void kl_rt_parallel_for(int64_t n, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx) {
  range_job r = {fn, ctx};
  kl_step s = {.run = range_run, .ctx = &r, .extent = n, .cost = INT64_MAX, .partial_arg = -1};
  if (n > 0) run_step(&s, NULL, 0);
}


static void run_step(const kl_step *s, void **ptrs, size_t partial_bytes) {
  int n = kl_rt_num_threads();
  if (n > s->extent) n = (int)s->extent;
  int idle = 0;
  if (s->cost < KL_CPU_PARALLEL_MIN_COST || n <= 1 || !atomic_compare_exchange_strong(&pool_in_use, &idle, 1)) {
    s->run(s->ctx, ptrs, 0, s->extent); /* small, or the pool is busy (a GPU program's host step) */
    return;
  }
  pool_run(s, ptrs, partial_bytes, n);
  atomic_store(&pool_in_use, 0);
}

static void pool_run(const kl_step *s, void **ptrs, size_t partial_bytes, int n) {
  pool_job j;
  memset(&j, 0, sizeof j);
  j.step = s;
  j.ptrs = ptrs;
  j.nchunks = n;
  j.chunk = (s->extent + n - 1) / n;
  j.nchunks = (int)((s->extent + j.chunk - 1) / j.chunk);
  void *parts[64];
  if (s->partial_arg >= 0) {
    int got = s->nslots <= 64 ? 0 : -1; /* -1: too many slots for run_chunk's copy */
    while (got >= 0 && got < j.nchunks && (parts[got] = host_alloc(round_size(partial_bytes)))) got++;
    if (got < j.nchunks) { /* no memory for the partial results: one thread, straight into the output */
      for (int c = 0; c < got; c++) host_free(parts[c], round_size(partial_bytes));
      s->run(s->ctx, ptrs, 0, s->extent);
      return;
    }
    j.parts = parts;
  }
  atomic_store(&j.next, 0);
  atomic_store(&j.pending, j.nchunks);
  atomic_store(&j.active, 0);
  pthread_mutex_lock(&pool_mu);
  pool_cur = &j;
  __atomic_add_fetch(&pool_gen, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&pool_cv);
  pthread_mutex_unlock(&pool_mu);
  drain(&j);
  while (atomic_load(&j.pending) > 0) sched_yield();
  pthread_mutex_lock(&pool_mu);
  pool_cur = NULL;
  pthread_mutex_unlock(&pool_mu);
  /* a thread that took the job as the last chunks finished may still be in drain(): j is on
   * this stack, so wait for it to let go */
  while (atomic_load(&j.active) > 0) cpu_relax();
  if (s->partial_arg >= 0) {
    s->combine(s->ctx, ptrs[s->partial_arg], parts, j.nchunks);
    for (int c = 0; c < j.nchunks; c++) host_free(parts[c], round_size(partial_bytes));
  }
}

/* ---- launches and the executor thread ---- */

typedef struct launch {
  kl_exec *x;
  kl_buffer **bufs; /* per slot (inputs retained, outputs retained, temps owned) */
  size_t held;      /* bytes of the outputs it allocated */
  struct launch *next;
  /* an SPMD launch (kl_exec_launch_group) is one queue entry holding its participants' launches,
   * run concurrently, each on a thread of its own, when the entry's turn comes */
  struct launch **members; /* owned, or NULL */
  int nmembers;
  kl_coll_group *group;    /* one reference */
  int *ranks;              /* per member, its rank in the group (owned), or NULL: member p is rank p */
  const char *refused;     /* run nothing: its outputs fail with this message (or NULL) */
  uint64_t trace_id;       /* while a profile records: the launch (profile.h) that queued it, else 0 */
} launch;

static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static launch *q_head, *q_tail;
static int q_busy; /* executor is running a launch */
static pthread_once_t exec_once = PTHREAD_ONCE_INIT;

/* KILN_CPU_PROFILE=1: every step prints its time (for finding which kernel or library call
 * dominates a program). */
static void run_group(launch *l);

/* Step s of l's executable ran from t0 (profile.h's clock): printed (KILN_CPU_PROFILE=1) and/or
 * recorded as a profile's event. */
static __attribute__((noinline, cold)) void step_timed(int print, int record, const launch *l, int s, uint64_t t0) {
  const kl_step *st = &l->x->steps[s];
  uint64_t t1 = kl_prof_now();
  const char *what = st->run_checked ? "library call" : "kernel";
  if (print)
    fprintf(stderr, "kiln cpu profile: step %d/%d %s %lld elements: %.1f us\n", s, l->x->nsteps, what,
            (long long)st->cost, (double)(t1 - t0) * 1e-3);
  if (record) {
    char name[48];
    snprintf(name, sizeof name, "%s %d", what, s);
    kl_prof_add("cpu_step", name, t0, t1, l->trace_id, "\"elements\": %lld", (long long)st->cost);
  }
}

static void execute(launch *l) {
  if (l->members) {
    run_group(l);
    return;
  }
  static int profile = -1;
  if (profile < 0) profile = getenv("KILN_CPU_PROFILE") && *getenv("KILN_CPU_PROFILE") == '1';
  kl_exec *x = l->x;
  char err[512] = "";
  int failed = 0;
  uint64_t traced = kl_prof_begin(); /* a profile's execute and step events (profile.h) */
  int timed = profile | (traced != 0);
  const int *live = kl_exec_live(x), *last = live ? live + x->nslots : NULL; /* a temporary goes back after its last step */
  /* the temporaries in one arena laid out by their live ranges (one allocation per launch, the
   * program's peak rather than its sum); without a plan, each its own buffer, freed after its
   * last step */
  const kl_temp_plan *tp = l->refused ? NULL : kl_exec_temp_plan(x);
  kl_buffer *arena = tp ? kl_buf_new(tp->bytes, err, sizeof err) : NULL;
  if (tp && !arena) failed = 1;
  if (l->refused) {
    snprintf(err, sizeof err, "%s", l->refused);
    failed = 1;
  }
  for (int s = 0; s < x->nsteps && !failed; s++) {
    const kl_step *st = &x->steps[s];
    void *small[64];
    void **ptrs = st->nslots <= 64 ? small : malloc(sizeof(void *) * (size_t)st->nslots);
    if (!ptrs) {
      kl_error(err, sizeof err, KL_ERR_NOMEM, "out of host memory running a program");
      failed = 1;
      break;
    }
    for (int i = 0; i < st->nslots; i++) {
      if (arena && tp->in[st->slots[i]]) {
        ptrs[i] = (char *)arena->data + tp->off[st->slots[i]];
        continue;
      }
      kl_buffer *b = l->bufs[st->slots[i]];
      if (!b) {
        b = kl_buf_new(x->slot_bytes[st->slots[i]], err, sizeof err);
        if (!b) { failed = 1; break; }
        l->bufs[st->slots[i]] = b;
      }
      if (b->state == KL_BUF_FAILED) {
        snprintf(err, sizeof err, "%s", b->error ? b->error : "an input of this computation failed");
        failed = 1;
        break;
      }
      ptrs[i] = b->data;
    }
    if (!failed) {
      uint64_t t0 = timed ? kl_prof_now() : 0;
      if (st->run_checked) failed = st->run_checked(st->ctx, ptrs, err, sizeof err) != 0;
      else {
        size_t pb = st->partial_arg >= 0 ? x->slot_bytes[st->slots[st->partial_arg]] : 0;
        run_step(st, ptrs, pb);
      }
      if (timed) step_timed(profile, traced != 0, l, s, t0);
    }
    if (ptrs != small) free(ptrs);
    for (int i = 0; last && !failed && i < st->nslots; i++) {
      int sl = st->slots[i];
      if (last[sl] == s && l->bufs[sl]) {
        kl_buf_release(l->bufs[sl]);
        l->bufs[sl] = NULL;
      }
    }
  }
  int rank;
  kl_coll_group *grp = kl_coll_current(&rank);
  if (failed && grp) kl_coll_abort(grp, err); /* the others must not wait for this one at a collective */
  char small_out[256], *is_out = x->nslots <= 256 ? small_out : calloc((size_t)x->nslots, 1);
  if (is_out) {
    memset(is_out, 0, (size_t)x->nslots);
    for (int i = 0; i < x->noutputs; i++) is_out[x->out_slots[i]] = 1;
    for (int i = 0; i < x->ninputs; i++) is_out[x->in_slots[i]] = 0;
  }
  for (int i = 0; i < x->nslots; i++) {
    if (!l->bufs[i]) continue;
    int out = 0; /* without memory for the table: scanned per slot */
    if (is_out) out = is_out[i];
    else {
      for (int k = 0; k < x->noutputs; k++) out |= x->out_slots[k] == i;
      for (int k = 0; k < x->ninputs; k++) out &= x->in_slots[k] != i;
    }
    if (out && (writes_done(l->bufs[i]) || failed)) buf_set_state(l->bufs[i], failed ? KL_BUF_FAILED : KL_BUF_READY, failed ? err : NULL);
    kl_buf_release(l->bufs[i]);
  }
  if (is_out != small_out) free(is_out);
  kl_buf_release(arena);
  if (traced)
    kl_prof_add("execute", x->name[0] ? x->name : "program", traced, kl_prof_now(), l->trace_id,
                 "\"steps\": %d%s", x->nsteps, failed ? ", \"failed\": true" : "");
  free(l->bufs);
  kl_exec_release(x);
  free(l);
}

/* An executable bound to memory (kl_cpu_bind): the binding, its temporaries in one block. */
struct kl_cpu_bound {
  kl_binding b;
  char *block;
  size_t block_bytes;
};

void kl_cpu_unbind(kl_cpu_bound *c) {
  if (!c) return;
  if (c->block) cpu_free(c->block, c->block_bytes);
  kl_binding_free(&c->b);
  free(c);
}

kl_cpu_bound *kl_cpu_bind(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen) {
  kl_cpu_bound *c = kl_binding_new(sizeof *c, x, err, errlen); /* its binding first */
  if (!c) return NULL;
  const kl_temp_plan *tp = kl_exec_temp_plan(x); /* the temporaries in one arena */
  for (int sl = 0; !tp && sl < x->nslots; sl++)                  /* (or one after another) */
    if (kl_binding_is_temp(&c->b, sl)) c->block_bytes += round_size(x->slot_bytes[sl] ? x->slot_bytes[sl] : 1);
  if (tp) c->block_bytes = tp->bytes;
  if (c->block_bytes && cpu_alloc(c->block_bytes, (void **)&c->block, err, errlen)) {
    kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory (%zu bytes) running a loop body", c->block_bytes);
    c->block = NULL;
    kl_cpu_unbind(c);
    return NULL;
  }
  size_t off = 0;
  for (int sl = 0; sl < x->nslots; sl++)
    if (kl_binding_is_temp(&c->b, sl)) {
      c->b.tmp[sl] = c->block + (tp ? (tp->in[sl] ? tp->off[sl] : 0) : off); /* (not in the plan: no step uses it) */
      off += round_size(x->slot_bytes[sl] ? x->slot_bytes[sl] : 1);
    }
  kl_binding_point(&c->b, in, out);
  return c;
}

void kl_cpu_bound_retarget(kl_cpu_bound *c, void *const *in, void *const *out) { kl_binding_point(&c->b, in, out); }

void **kl_cpu_bound_args(const kl_cpu_bound *c, int s) { return kl_binding_args(&c->b, s); }

void kl_cpu_bound_output(const kl_cpu_bound *c, int i, void **dst, void **src) {
  *dst = c->b.outs[2 * i];
  *src = c->b.outs[2 * i + 1];
}

int kl_cpu_bound_step(const kl_cpu_bound *c, int s, char *err, size_t errlen) {
  const kl_exec *x = c->b.x;
  const kl_step *st = &x->steps[s];
  void **ptrs = kl_binding_args(&c->b, s);
  if (st->run_checked) return st->run_checked(st->ctx, ptrs, err, errlen) ? -1 : 0;
  run_step(st, ptrs, st->partial_arg >= 0 ? x->slot_bytes[st->slots[st->partial_arg]] : 0);
  return 0;
}

int kl_cpu_bound_run(const kl_cpu_bound *c, char *err, size_t errlen) {
  const kl_binding *b = &c->b;
  for (int s = 0; s < b->x->nsteps; s++)
    if (kl_cpu_bound_step(c, s, err, errlen)) return -1;
  for (int i = 0; i < b->nlate; i++) memcpy(b->late_dst[i], b->late_src[i], b->late_bytes[i]);
  return 0;
}

/* kl_cpu_exec_run (runtime.h): bound, run once, unbound. */
int kl_cpu_exec_run(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen) {
  kl_cpu_bound *b = kl_cpu_bind(x, in, out, err, errlen);
  if (!b) return -1;
  int rc = kl_cpu_bound_run(b, err, errlen);
  kl_cpu_unbind(b);
  return rc;
}

static int q_len; /* launches queued (atomic reads for spinning) */

/* Backpressure: a program called in a Python loop faster than the executor runs it would queue
 * without bound, each launch holding its outputs (10,000 updates of a 64 MiB array not donated:
 * 19.6 GB at the peak). A launch waits while the launches queued before it hold more than
 * this many bytes of outputs (KILN_CPU_QUEUE_MB, default 1/16 of the memory, at least 256 MiB). */
static size_t q_held;
static pthread_cond_t drain_cv = PTHREAD_COND_INITIALIZER;
/* > 0 while this thread runs a launch (the executor, a group member, or a caller running one
 * inline): it never waits for its own queue, and a host callback of that program may launch more
 * (a jitted function called inside a pure_callback): those run at once on this thread, as queued
 * behind the running program they would wait for it while it waits for them */
static _Thread_local int executing;

static void run_here(launch *l) {
  executing++;
  execute(l);
  executing--;
}

static size_t queue_limit(void) {
  static size_t limit;
  if (!limit) {
    const char *e = getenv("KILN_CPU_QUEUE_MB");
    size_t mem = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    limit = e && atol(e) > 0 ? (size_t)atol(e) << 20 : mem / 16 > ((size_t)256 << 20) ? mem / 16 : (size_t)256 << 20;
  }
  return limit;
}

static void *executor_main(void *arg) {
  (void)arg;
  for (;;) {
    for (int spin = 0; spin < SPIN_ITERS && !__atomic_load_n(&q_len, __ATOMIC_ACQUIRE); spin++) cpu_relax();
    pthread_mutex_lock(&q_mu);
    while (!q_head || q_busy) pthread_cond_wait(&q_cv, &q_mu);
    launch *l = q_head;
    q_head = l->next;
    if (!q_head) q_tail = NULL;
    __atomic_sub_fetch(&q_len, 1, __ATOMIC_RELEASE);
    q_busy = 1;
    pthread_mutex_unlock(&q_mu);
    size_t held = l->held;
    run_here(l);
    pthread_mutex_lock(&q_mu);
    q_busy = 0;
    __atomic_sub_fetch(&q_held, held, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&drain_cv);
    if (!q_head) pthread_cond_broadcast(&idle_cv);
    pthread_mutex_unlock(&q_mu);
  }
  return NULL;
}

static void exec_init(void) {
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_create(&t, &a, executor_main, NULL);
  pthread_attr_destroy(&a);
}

/* Work below this many elements runs in the caller when the device is idle. */
#define INLINE_MAX_COST 4096

/* Waits while the queue holds too many bytes of outputs (see queue_limit). */
static void backpressure(void) {
  if (!executing && __atomic_load_n(&q_held, __ATOMIC_RELAXED) > queue_limit()) { /* the queue holds too much: wait */
    pthread_mutex_lock(&q_mu);
    while (__atomic_load_n(&q_held, __ATOMIC_RELAXED) > queue_limit() && (q_head || q_busy)) pthread_cond_wait(&drain_cv, &q_mu);
    pthread_mutex_unlock(&q_mu);
  }
}

/* A launch of x over inputs with its outputs allocated (written to outs, one reference each for
 * the caller), not queued; NULL with a message. */
static launch *prepare(kl_exec *x, kl_buffer **inputs, kl_buffer *const *preset, kl_buffer **outs, char *err,
                       size_t errlen) {
  launch *l = calloc(1, sizeof *l);
  kl_buffer **bufs = calloc((size_t)x->nslots + 1, sizeof *bufs);
  if (!l || !bufs) {
    free(l);
    free(bufs);
    kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory launching a program");
    return NULL;
  }
  for (int i = 0; i < x->ninputs; i++) {
    if (bufs[x->in_slots[i]]) continue;
    bufs[x->in_slots[i]] = inputs[i];
    kl_buf_retain(inputs[i]);
  }
  for (int i = 0; preset && i < x->noutputs; i++) /* donated inputs' buffers, written again */
    if (preset[i] && !bufs[x->out_slots[i]]) {
      bufs[x->out_slots[i]] = preset[i];
      kl_buf_retain(preset[i]);
      atomic_fetch_add((_Atomic int *)&preset[i]->writers, 1);
      atomic_store((_Atomic int *)&preset[i]->state, KL_BUF_PENDING); /* ready again when this launch is done */
    }
  for (int i = 0; i < x->noutputs; i++) {
    int s = x->out_slots[i];
    if (!bufs[s]) {
      l->held += x->slot_bytes[s];
      bufs[s] = kl_buf_new(x->slot_bytes[s], err, errlen);
      if (bufs[s]) bufs[s]->writers = 1;
      if (!bufs[s]) {
        for (int k = 0; k < i; k++) kl_buf_release(outs[k]);
        for (int k = 0; k < x->nslots; k++) kl_buf_release(bufs[k]);
        free(bufs);
        free(l);
        return NULL;
      }
    }
    outs[i] = bufs[s];
    kl_buf_retain(bufs[s]);
  }
  kl_exec_retain(x);
  l->x = x;
  l->bufs = bufs;
  if (kl_prof_on()) l->trace_id = kl_prof_current_launch();
  return l;
}

/* Appends l to the executor's queue (q_mu held). */
static void enqueue_locked(launch *l) {
  pthread_once(&exec_once, exec_init);
  __atomic_add_fetch(&q_held, l->held, __ATOMIC_RELAXED);
  if (q_tail) q_tail->next = l;
  else q_head = l;
  q_tail = l;
  __atomic_add_fetch(&q_len, 1, __ATOMIC_RELEASE);
  pthread_cond_signal(&q_cv);
}

typedef struct {
  launch *l;
  kl_coll_group *group;
  int rank;
} member_run;

static void *member_main(void *arg) {
  member_run *m = arg;
  kl_coll_set_current(m->group, m->rank);
  run_here(m->l);
  kl_coll_finish(m->group); /* the others must not wait at a collective this one never reaches */
  kl_coll_set_current(NULL, 0);
  return NULL;
}

/* Runs a group's members concurrently: member 0 on this thread, each other on a thread of its own
 * (they wait for each other at collectives: a shared pool would starve). */
static void run_group(launch *l) {
  int n = l->nmembers;
  member_run *runs = calloc((size_t)n, sizeof *runs);
  pthread_t *threads = calloc((size_t)n, sizeof *threads);
  char *started = calloc((size_t)n, 1);
  if (!runs || !threads || !started) { /* out of host memory: no member runs */
    kl_coll_abort(l->group, "out of host memory starting a computation's devices");
    for (int p = 0; p < n; p++) {
      kl_coll_set_current(l->group, l->ranks ? l->ranks[p] : p);
      execute(l->members[p]); /* each fails at its first collective, marking its outputs failed */
    }
    kl_coll_set_current(NULL, 0);
  } else {
    for (int p = 0; p < n; p++) runs[p] = (member_run){l->members[p], l->group, l->ranks ? l->ranks[p] : p};
    for (int p = 1; p < n; p++) started[p] = pthread_create(&threads[p], NULL, member_main, &runs[p]) == 0;
    for (int p = 1; p < n; p++)
      if (!started[p]) kl_coll_abort(l->group, "cannot start a thread for a device of a computation"); /* the others would wait for it forever */
    member_main(&runs[0]);
    for (int p = 1; p < n; p++) {
      if (started[p]) pthread_join(threads[p], NULL);
      else member_main(&runs[p]); /* fails fast: the group is aborted */
    }
  }
  free(runs);
  free(threads);
  free(started);
  kl_coll_group_release(l->group);
  free(l->members);
  free(l->ranks);
  free(l);
}

static int cpu_launch_group(kl_exec *x, int n, const int *ordinals, const kl_span *span, kl_buffer **inputs,
                            kl_buffer **outs, char *err, size_t errlen) {
  (void)ordinals; /* simulated devices share the host */
  int me = span ? kl_net_span_process(span->size, span->procs, n, "devices", err, errlen) : 0;
  if (me < 0) return -1;
  backpressure();
  launch *g = calloc(1, sizeof *g);
  launch **members = calloc((size_t)n, sizeof *members);
  kl_coll_group *grp = span ? kl_coll_group_new_spanning(span->size, span->procs, me) : kl_coll_group_new(n);
  int *ranks = span ? malloc(sizeof(int) * (size_t)n) : NULL;
  if (ranks) memcpy(ranks, span->ranks, sizeof(int) * (size_t)n);
  int made = 0;
  if (!g || !members || !grp || (span && !ranks))
    kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory launching a program on %d devices", n);
  else
    for (; made < n; made++) {
      members[made] = prepare(x, inputs + (size_t)made * (size_t)x->ninputs, NULL, outs + (size_t)made * (size_t)x->noutputs, err, errlen);
      if (!members[made]) break;
      g->held += members[made]->held;
    }
  if (made < n) { /* undo: the prepared members run nothing, their outputs are released */
    for (int p = 0; p < made; p++) {
      for (int k = 0; k < x->noutputs; k++) kl_buf_release(outs[(size_t)p * (size_t)x->noutputs + k]);
      for (int k = 0; k < x->nslots; k++) kl_buf_release(members[p]->bufs[k]);
      free(members[p]->bufs);
      kl_exec_release(x);
      free(members[p]);
    }
    free(g);
    free(members);
    free(ranks);
    kl_coll_group_release(grp);
    return -1;
  }
  g->ranks = ranks;
  g->members = members;
  g->nmembers = n;
  g->group = grp;
  pthread_mutex_lock(&q_mu);
  enqueue_locked(g);
  pthread_mutex_unlock(&q_mu);
  return 0;
}

static int cpu_launch(kl_exec *x, kl_buffer **inputs, kl_buffer *const *preset, kl_buffer **outs, char *err,
                      size_t errlen) {
  backpressure();
  launch *l = prepare(x, inputs, preset, outs, err, errlen);
  if (!l) return -1;
  /* Inputs that are still pending are fine: the queue is in order, so their producers run first. */
  int inputs_ready = 1;
  for (int i = 0; i < x->ninputs && inputs_ready; i++) inputs_ready = cpu_is_ready(inputs[i]); /* all on the CPU */
  if (executing) { /* from a host callback of the running program: now, here (see `executing`) */
    if (!inputs_ready)
      l->refused = "a program launched inside a host callback reads an array still being computed by a "
                   "program queued behind the one making the callback (it would wait forever): compute "
                   "that array before the call, or pass it to the callback as an argument";
    run_here(l);
    return 0;
  }
  pthread_mutex_lock(&q_mu);
  int idle = !q_head && !q_busy;
  if (idle && inputs_ready && x->cost <= INLINE_MAX_COST) {
    q_busy = 1;
    pthread_mutex_unlock(&q_mu);
    run_here(l);
    pthread_mutex_lock(&q_mu);
    q_busy = 0;
    if (!q_head) pthread_cond_broadcast(&idle_cv);
    else pthread_cond_signal(&q_cv);
    pthread_mutex_unlock(&q_mu);
    return 0;
  }
  enqueue_locked(l);
  pthread_mutex_unlock(&q_mu);
  return 0;
}

static int cpu_synchronize(void) {
  if (executing) return 0; /* inside a host callback: what it launched ran already; the rest waits for it */
  pthread_mutex_lock(&q_mu);
  while (q_head || q_busy) pthread_cond_wait(&idle_cv, &q_mu);
  pthread_mutex_unlock(&q_mu);
  return 0;
}

/* ---- the rest of the device interface ---- */

static int cpu_available(char *why, size_t n) {
  (void)why;
  (void)n;
  return 1;
}

static void cpu_info(kl_device_info *info) {
  memset(info, 0, sizeof *info);
  snprintf(info->name, sizeof info->name, "cpu");
  info->total_mem = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
}

static void cpu_memory_stats(kl_mem_stats *s) {
  memset(s, 0, sizeof *s);
  kl_mem_count_read(&counts, s);
  s->bytes_limit = (long long)sysconf(_SC_PHYS_PAGES) * (long long)sysconf(_SC_PAGESIZE);
  pthread_mutex_lock(&cache_mu);
  s->pool_bytes = (long long)cache_bytes;
  pthread_mutex_unlock(&cache_mu);
}

static void cpu_reset_peak(void) { kl_mem_count_reset_peak(&counts); }

static void cpu_empty_cache(void) {
  pthread_mutex_lock(&cache_mu);
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (cache[i].ptr) {
      host_release(cache[i].ptr, cache[i].size);
      cache[i].ptr = NULL;
    }
  cache_bytes = 0;
  pthread_mutex_unlock(&cache_mu);
}

static int cpu_upload(void *dst, const void *src, size_t n, char *err, size_t errlen) {
  (void)err;
  (void)errlen;
  memcpy(dst, src, n);
  return 0;
}

static int cpu_read(void *dst, kl_buffer *b, char *err, size_t errlen) {
  if (cpu_wait(b) == KL_BUF_FAILED) {
    snprintf(err, errlen, "%s", b->error ? b->error : "the computation producing this array failed");
    return -1;
  }
  memcpy(dst, b->data, b->nbytes);
  return 0;
}

/* Host memory has no events: buffers never hold one. */
static void cpu_event_release(struct kl_event *e) { (void)e; }

static void *cpu_stream(void) { return NULL; }

static int cpu_stream_wait(void *stream, kl_buffer *b) {
  (void)stream;
  return cpu_wait(b) == KL_BUF_FAILED ? -1 : 0;
}

static int cpu_library_add_path(const char *path) { return kl_hostla_add_search_path(path); }

static int cpu_library(char *out, size_t n) {
  snprintf(out, n, "%s", kl_hostla_library());
  return 1;
}

const kl_device kl_device_cpu = {
    .name = "cpu",
    .kind = KL_DEV_CPU,
    .born_ready = 0,
    .available = cpu_available,
    .info = cpu_info,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memory_stats = cpu_memory_stats,
    .empty_cache = cpu_empty_cache,
    .reset_peak = cpu_reset_peak,
    .upload = cpu_upload,
    .read = cpu_read,
    .is_ready = cpu_is_ready,
    .wait = cpu_wait,
    .wait_for = cpu_wait_for,
    .event_release = cpu_event_release,
    .stream = cpu_stream,
    .stream_wait = cpu_stream_wait,
    .launch = cpu_launch,
    .launch_group = cpu_launch_group,
    .synchronize = cpu_synchronize,
    .library_add_path = cpu_library_add_path,
    .library = cpu_library,
};
