/* hostfft.c: the CPU FFT behind lax.fft (see hostfft.h). Mixed-radix
 * Stockham passes run on blocks of transforms side by side ("lanes", so every
 * inner loop is contiguous and vectorizes), Bluestein for lengths with a prime
 * factor above GENERIC_MAX, a four-step split for long lines, pthreads over
 * independent blocks. Depends on the C library and pthreads only.
 *
 * The kernels (hostfft_kernels.h) are compiled once per real type and
 * instruction set: this file includes them with R, KL_SFX, KL_VEC and
 * KL_TARGET defined. Inverse transforms run the forward kernels on (im, re):
 * swap(DFT(swap(x))) is the unscaled inverse DFT of x. */
#define _POSIX_C_SOURCE 200809L
#include "hostfft.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define KL_HAVE_AVX2 1 /* AVX2 kernels beside the generic ones, picked at run time */
#include <immintrin.h>
#endif

enum { PLAN_DIRECT, PLAN_BLUESTEIN, PLAN_FOURSTEP };
enum { AX_C2C, AX_R2C, AX_C2R };
enum {
  MAX_PASSES = 24,   /* a DIRECT length <= DIRECT_MAX has at most 14 factors */
  GENERIC_MAX = 31,  /* largest prime radix done by the O(r^2) pass */
  DIRECT_MAX = 16384, /* longer lengths split four-step */
  SPLIT_MIN = 2048,   /* a lone line from here on splits four-step too */
  MAX_THREADS = 64,
  CACHE_PLANS = 48   /* cache cap: plans kept ... */
};
#define CACHE_BYTES ((size_t)128 << 20) /* ... and their table memory */
#define LANE_BYTES ((size_t)1 << 20)    /* aim for lane scratch below this */
/* Reals per array of a lane block (four arrays: re, im and a second pair).
 * The pad keeps the arrays off each other's cache sets: rows * B is a power
 * of two more often than not. */
#define LANE_ARRAY(rows, B) ((size_t)(rows) * (size_t)(B) + 48)

typedef struct plan plan;
struct plan {
  int64_t n;             /* transform length */
  int dbl;               /* tables hold double (1) or float (0) pairs */
  int kind;              /* PLAN_DIRECT, PLAN_BLUESTEIN or PLAN_FOURSTEP */
  int lanes;             /* runs on lane blocks in scratch (exec) */
  int64_t rows;          /* lanes: scratch rows per lane that exec needs */
  int npass;             /* DIRECT: Stockham passes, in order */
  int radix[MAX_PASSES]; /* DIRECT: each pass's radix */
  void *tw[MAX_PASSES];  /* DIRECT: each pass's twiddles (owned) */
  void *half;            /* W_2n^k, k <= n/2: real transforms of 2n (owned) */
  int64_t m;             /* BLUESTEIN: convolution length (5-smooth) */
  void *chirp;           /* BLUESTEIN: exp(-pi i k^2/n), k < n (owned) */
  void *bhat;            /* BLUESTEIN: DFT of the conjugate chirp / m (owned) */
  int split;             /* n1.. below are set: FOURSTEP, and DIRECT plans
                            from SPLIT_MIN on (for lone lines) */
  int64_t n1, n2;        /* split: n = n1 * n2; n1-point columns first */
  void *tlo, *thi;       /* split: W_n^t = thi[t >> tshift] tlo[t & mask] */
  int tshift;            /* split: see tlo */
  plan *sub, *sub2;      /* BLUESTEIN: length m; split: n1, n2 (owned) */
  size_t bytes;          /* table memory, for the cache cap */
  int refs;              /* the cache's and callers' references (cache_mu) */
  plan *next;            /* cache list, most recently used first */
};

/* One pass of 1-D transforms along an axis, cut into blocks of B lanes. */
typedef struct axis_job {
  int op;           /* AX_C2C, AX_R2C (last axis) or AX_C2R (last axis) */
  const plan *pl;   /* the complex FFT per line: n, or n/2 for even real n */
  int64_t n;        /* length along the axis (the real length for R2C/C2R) */
  int64_t nc;       /* entries per line on the complex side: n or n/2+1 */
  int64_t inner;    /* complex elements between a line's entries (C2C) */
  int64_t outer;    /* line groups; lines = outer * inner */
  const void *src;  /* C2C, C2R: complex; R2C: real */
  void *dst;        /* C2C, R2C: complex (may equal src for C2C); C2R: real */
  int swap;         /* inverse: forward kernels on (im, re) */
  double scale;     /* applied on store */
  int64_t B;        /* lanes per block */
  int64_t sblocks;  /* blocks per line group (inner > 1) */
  int64_t nblocks;  /* blocks in all */
  int64_t rows;     /* scratch rows per lane */
} axis_job;

/* The kernels of one (real type, instruction set). */
typedef struct {
  /* Runs blocks [b0, b1) of a lane job; scratch: 4 LANE_ARRAY(rows, B) reals. */
  void (*blocks)(const axis_job *jb, int64_t b0, int64_t b1, void *scratch);
  /* Runs line `line` of a job whose plan is not a lane plan; -1 on OOM. */
  int (*big_line)(const axis_job *jb, int64_t line, int nthreads);
  /* One complex line, element j at in[j * is] (complex units); -1 on OOM. */
  int (*line)(const plan *pl, const void *in, ptrdiff_t is, void *out,
              ptrdiff_t os, int swap, double scale, int nthreads);
  int real_size; /* sizeof the real type */
} kernels;

/* ---------------------------------------------------------------- helpers */

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(err, errlen, "kl_host_fft: ");
    if (k >= 0 && (size_t)k < errlen) vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* 64-byte aligned block for lane scratch; free with free(). */
static void *scratch_alloc(size_t bytes) {
  return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

/* exp(-2 pi i k / n) to about an ulp: the angle is reduced to an octant with
 * integer arithmetic, so large n and k lose nothing to 2 pi k / n rounding. */
static void unit_root(int64_t k, int64_t n, double *re, double *im) {
  k %= n;
  if (k < 0) k += n;
  int64_t t = 8 * k, oct = t / n, r = t - oct * n;
  const double q = 0.78539816339744830961566084581987572; /* pi / 4 */
  double a = q * (double)((oct & 1) ? n - r : r) / (double)n;
  double c = cos(a), s = sin(a), x, y; /* (x, y) = (cos, sin) of 2 pi k/n */
  switch (oct) {
  case 0: x = c; y = s; break;
  case 1: x = s; y = c; break;
  case 2: x = -s; y = c; break;
  case 3: x = -c; y = s; break;
  case 4: x = -c; y = -s; break;
  case 5: x = -s; y = -c; break;
  case 6: x = s; y = -c; break;
  default: x = c; y = -s; break;
  }
  *re = x;
  *im = -y;
}

/* count complex entries of the plan's precision; NULL if out of memory. */
static void *table_new(plan *p, size_t count) {
  size_t bytes = count * 2 * (p->dbl ? sizeof(double) : sizeof(float));
  p->bytes += bytes;
  return malloc(bytes ? bytes : 1);
}

static void table_set(const plan *p, void *t, size_t i, double re, double im) {
  if (p->dbl) {
    ((double *)t)[2 * i] = re;
    ((double *)t)[2 * i + 1] = im;
  } else {
    ((float *)t)[2 * i] = (float)re;
    ((float *)t)[2 * i + 1] = (float)im;
  }
}

static int64_t largest_prime_factor(int64_t n) {
  int64_t best = 1;
  for (int64_t p = 2; p * p <= n; p++)
    while (n % p == 0) n /= p, best = p;
  return n > best ? n : best;
}

/* Smallest 2^a 3^b 5^c >= x. */
static int64_t smooth_at_least(int64_t x) {
  int64_t best = INT64_MAX;
  for (int64_t p5 = 1; p5 < 2 * x; p5 *= 5)
    for (int64_t p35 = p5; p35 < 2 * x; p35 *= 3) {
      int64_t v = p35;
      while (v < x) v *= 2;
      if (v < best) best = v;
    }
  return best;
}

/* The divisor of n nearest sqrt(n) from below (n's factors are small). */
static int64_t divisor_near_sqrt(int64_t n) {
  int64_t best = 1;
  for (int64_t d = 1; d * d <= n; d++)
    if (n % d == 0) best = d;
  return best;
}

/* ---------------------------------------------------------------- threads */

typedef struct {
  void (*fn)(void *, int); /* the work, given the context and a thread id */
  void *ctx;
  int tid;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  w->fn(w->ctx, w->tid);
  return NULL;
}

/* fn(ctx, t) for t < nthreads at once, the caller being thread 0. The work
 * must be handed out dynamically: a thread that cannot start leaves its share
 * to the others. */
static void parallel(int nthreads, void (*fn)(void *, int), void *ctx) {
  pthread_t th[MAX_THREADS];
  worker w[MAX_THREADS];
  int started = 0;
  for (int t = 1; t < nthreads && t < MAX_THREADS; t++) {
    w[t] = (worker){fn, ctx, t};
    if (pthread_create(&th[t], NULL, worker_main, &w[t])) break;
    started = t;
  }
  fn(ctx, 0);
  for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
}

static int max_threads(void) {
  const char *env = getenv("KILN_NUM_THREADS");
  long n = env ? atol(env) : sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

/* Per-thread lane scratch; NULL (all freed) if out of memory. */
static void **scratch_set(int nthreads, size_t bytes) {
  void **s = calloc((size_t)nthreads, sizeof *s);
  for (int t = 0; s && t < nthreads; t++)
    if (!(s[t] = scratch_alloc(bytes))) {
      for (int u = 0; u < t; u++) free(s[u]);
      free(s);
      s = NULL;
    }
  return s;
}

static void scratch_free(void **s, int nthreads) {
  for (int t = 0; s && t < nthreads; t++) free(s[t]);
  free(s);
}

/* Block scheduling shared by the lane workers. */
typedef struct {
  const axis_job *jb;  /* the pass (blocks) */
  const kernels *K;
  void **scratch;      /* per thread */
  atomic_llong next;   /* next unclaimed block */
  int64_t chunk;       /* blocks claimed at a time */
} blocks_ctx;

static void blocks_worker(void *arg, int tid) {
  blocks_ctx *c = arg;
  for (;;) {
    int64_t b0 = atomic_fetch_add(&c->next, c->chunk);
    if (b0 >= c->jb->nblocks) break;
    int64_t b1 = b0 + c->chunk < c->jb->nblocks ? b0 + c->chunk : c->jb->nblocks;
    c->K->blocks(c->jb, b0, b1, c->scratch[tid]);
  }
}

/* Four-step steps, shared by the template's workers. */
typedef struct {
  const plan *pl;     /* the FOURSTEP plan */
  const void *in;     /* line start; element j at in + j * is (complex) */
  ptrdiff_t is;
  void *out;
  ptrdiff_t os;
  int swap;           /* inverse */
  double scale;       /* applied in step 2 */
  int step;           /* 1: n1-point columns, 2: n2-point rows */
  int64_t B;          /* lanes per block */
  int64_t nblocks;
  int64_t rows;       /* scratch rows per lane */
  atomic_llong next;  /* next unclaimed block */
  void **scratch;     /* per thread */
} fs_ctx;

#if defined(__GNUC__)
#define KL_ALWAYS_INLINE __attribute__((always_inline))
#define KL_PREFETCH(p) __builtin_prefetch(p)
#else
#define KL_ALWAYS_INLINE
#define KL_PREFETCH(p) ((void)(p))
#endif

/* Asserts an inner loop carries no dependence: the rows a butterfly reads
 * and writes never overlap, which GCC cannot prove for runtime offsets. */
#if defined(__clang__)
/* (a loop clang then still cannot vectorize, under sanitizers, is no error) */
#pragma clang diagnostic ignored "-Wpass-failed"
#define KL_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define KL_IVDEP _Pragma("GCC ivdep")
#else
#define KL_IVDEP
#endif

#define KL_CAT2(a, b) a##_##b
#define KL_CAT(a, b) KL_CAT2(a, b)

#define KL_FFT_TEMPLATE
#define KL_VEC 0 /* SIMD tile width for hand-written transposes; 0: none */
#define R float
#define KL_SFX f32
#define KL_TARGET
#include "hostfft_kernels.h"
#undef R
#undef KL_SFX
#define R double
#define KL_SFX f64
#include "hostfft_kernels.h"
#undef R
#undef KL_SFX
#undef KL_TARGET
#undef KL_VEC

#ifdef KL_HAVE_AVX2
#if defined(__clang__)
#define KL_TARGET __attribute__((target("avx2,fma")))
#else
#define KL_TARGET __attribute__((target("avx2,fma"), optimize("fp-contract=fast")))
#endif
#define R float
#define KL_SFX f32_avx2
#define KL_VEC 8
#include "hostfft_kernels.h"
#undef R
#undef KL_SFX
#undef KL_VEC
#define R double
#define KL_SFX f64_avx2
#define KL_VEC 4
#include "hostfft_kernels.h"
#undef R
#undef KL_SFX
#undef KL_VEC
#undef KL_TARGET
#endif
#undef KL_FFT_TEMPLATE

static const kernels kernels_generic[2] = {
    {blocks_f32, big_line_f32, line_f32, (int)sizeof(float)},
    {blocks_f64, big_line_f64, line_f64, (int)sizeof(double)}};
#ifdef KL_HAVE_AVX2
static const kernels kernels_avx2[2] = {
    {blocks_f32_avx2, big_line_f32_avx2, line_f32_avx2, (int)sizeof(float)},
    {blocks_f64_avx2, big_line_f64_avx2, line_f64_avx2, (int)sizeof(double)}};
#endif

static const kernels *kernel_set;
static pthread_once_t kernel_once = PTHREAD_ONCE_INIT;

static void pick_kernels(void) {
  kernel_set = kernels_generic;
#ifdef KL_HAVE_AVX2
  const char *isa = getenv("KILN_FFT_ISA");
  __builtin_cpu_init();
  if (!(isa && strcmp(isa, "generic") == 0) && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"))
    kernel_set = kernels_avx2;
#endif
}

static const kernels *kernels_for(int dbl) {
  pthread_once(&kernel_once, pick_kernels);
  return &kernel_set[dbl ? 1 : 0];
}

/* ------------------------------------------------------------------ plans */

static void plan_free(plan *p) {
  if (!p) return;
  for (int i = 0; i < p->npass; i++) free(p->tw[i]);
  free(p->half);
  free(p->chirp);
  free(p->bhat);
  free(p->tlo);
  free(p->thi);
  plan_free(p->sub);
  plan_free(p->sub2);
  free(p);
}

static plan *plan_build(int64_t n, int dbl);

/* Stockham passes: radix 4 while it divides, then 2, 3, 5 and the other
 * primes. Pass k's table holds W_len^(p j), p < len/r, 1 <= j < r, for the
 * length len still to split; a generic radix appends cos/sin(2 pi jk/r). */
static int build_direct(plan *p) {
  int64_t rest = p->n, len = p->n;
  while (rest % 4 == 0) p->radix[p->npass++] = 4, rest /= 4;
  if (rest % 2 == 0) p->radix[p->npass++] = 2, rest /= 2;
  for (int64_t f = 3; rest > 1; f += 2)
    while (rest % f == 0) p->radix[p->npass++] = (int)f, rest /= f;
  for (int k = 0; k < p->npass; k++) {
    int64_t r = p->radix[k], m = len / r, h = (r - 1) / 2;
    int generic = r > 5;
    void *t = p->tw[k] = table_new(p, (size_t)((r - 1) * m + (generic ? h * h : 0)));
    if (!t) return -1;
    for (int64_t q = 0; q < m; q++)
      for (int64_t j = 1; j < r; j++) {
        double re, im;
        unit_root(q * j, len, &re, &im);
        table_set(p, t, (size_t)(q * (r - 1) + j - 1), re, im);
      }
    for (int64_t j = 1; generic && j <= h; j++)
      for (int64_t c = 1; c <= h; c++) {
        double re, im;
        unit_root(j * c, r, &re, &im);
        table_set(p, t, (size_t)((r - 1) * m + (j - 1) * h + c - 1), re, -im);
      }
    len = m;
  }
  p->lanes = 1;
  p->rows = p->n;
  return 0;
}

/* x_k = c_k sum_j (x_j c_j) conj(c_(k-j)) with c_t = exp(-pi i t^2 / n): a
 * cyclic convolution of length m >= 2n - 1, done by FFTs of length m. */
static int build_bluestein(plan *p) {
  int64_t n = p->n, m = p->m = smooth_at_least(2 * n - 1);
  if (!(p->sub = plan_build(m, p->dbl))) return -1;
  p->bytes += p->sub->bytes;
  p->lanes = p->sub->lanes;
  p->rows = m;
  if (!(p->chirp = table_new(p, (size_t)n)) || !(p->bhat = table_new(p, (size_t)m)))
    return -1;
  void *b = table_new(p, (size_t)m);
  p->bytes -= (size_t)m * 2 * (p->dbl ? sizeof(double) : sizeof(float));
  if (!b) return -1;
  memset(b, 0, (size_t)m * 2 * (p->dbl ? sizeof(double) : sizeof(float)));
  int64_t sq = 0; /* k^2 mod 2n */
  for (int64_t k = 0; k < n; k++) {
    if (k) sq = (sq + 2 * k - 1) % (2 * n);
    double re, im;
    unit_root(sq, 2 * n, &re, &im);
    table_set(p, p->chirp, (size_t)k, re, im);
    table_set(p, b, (size_t)k, re, -im);
    if (k) table_set(p, b, (size_t)(m - k), re, -im);
  }
  int rc = kernels_for(p->dbl)->line(p->sub, b, 1, p->bhat, 1, 0, 1.0 / (double)m, 1);
  free(b);
  return rc;
}

/* n = n1 * n2 with n1 near sqrt(n); twiddles W_n^t from two short tables. */
static int build_split(plan *p) {
  int64_t n = p->n;
  p->n1 = divisor_near_sqrt(n);
  p->n2 = n / p->n1;
  if (p->n2 > DIRECT_MAX) return -2;
  if (!(p->sub = plan_build(p->n1, p->dbl)) || !(p->sub2 = plan_build(p->n2, p->dbl)))
    return -1;
  p->bytes += p->sub->bytes + p->sub2->bytes;
  if (!p->sub->lanes || !p->sub2->lanes) return -2;
  while (((int64_t)1 << (2 * p->tshift)) < n) p->tshift++;
  int64_t lo = (int64_t)1 << p->tshift, hi = (n + lo - 1) / lo;
  if (!(p->tlo = table_new(p, (size_t)lo)) || !(p->thi = table_new(p, (size_t)hi)))
    return -1;
  for (int64_t i = 0; i < lo; i++) {
    double re, im;
    unit_root(i, n, &re, &im);
    table_set(p, p->tlo, (size_t)i, re, im);
  }
  for (int64_t i = 0; i < hi; i++) {
    double re, im;
    unit_root(i * lo, n, &re, &im);
    table_set(p, p->thi, (size_t)i, re, im);
  }
  p->split = 1;
  return 0;
}

/* A plan of length n, owned by the caller (plan_free); NULL if out of memory
 * or n is too long to split. */
static plan *plan_build(int64_t n, int dbl) {
  plan *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n;
  p->dbl = dbl;
  int rc;
  if (largest_prime_factor(n) > GENERIC_MAX) {
    p->kind = PLAN_BLUESTEIN;
    rc = build_bluestein(p);
  } else if (n <= DIRECT_MAX) {
    p->kind = PLAN_DIRECT;
    rc = build_direct(p);
    if (!rc && n >= SPLIT_MIN && divisor_near_sqrt(n) > 1) rc = build_split(p);
  } else {
    p->kind = PLAN_FOURSTEP;
    rc = build_split(p);
  }
  if (!rc && (p->half = table_new(p, (size_t)(n / 2 + 1))))
    for (int64_t k = 0; k <= n / 2; k++) {
      double re, im;
      unit_root(k, 2 * n, &re, &im);
      table_set(p, p->half, (size_t)k, re, im);
    }
  if (rc || !p->half) {
    plan_free(p);
    return NULL;
  }
  return p;
}

/* The cache: most recently used first, at most CACHE_PLANS plans and
 * CACHE_BYTES of tables. A plan leaves the list when evicted and is freed
 * once its last user releases it. */
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static plan *cache_head;

static void plan_release(plan *p) {
  if (!p) return;
  pthread_mutex_lock(&cache_mu);
  int last = --p->refs == 0;
  pthread_mutex_unlock(&cache_mu);
  if (last) plan_free(p);
}

static plan *cache_take(int64_t n, int dbl) {
  for (plan **pp = &cache_head; *pp; pp = &(*pp)->next)
    if ((*pp)->n == n && (*pp)->dbl == dbl) {
      plan *p = *pp;
      *pp = p->next;
      p->next = cache_head;
      cache_head = p;
      p->refs++;
      return p;
    }
  return NULL;
}

/* The plan for (n, dbl), with a reference for the caller (plan_release). */
static plan *plan_acquire(int64_t n, int dbl) {
  pthread_mutex_lock(&cache_mu);
  plan *p = cache_take(n, dbl);
  pthread_mutex_unlock(&cache_mu);
  if (p) return p;
  plan *fresh = plan_build(n, dbl); /* outside the lock: may take a while */
  if (!fresh) return NULL;
  plan *dead = NULL;
  pthread_mutex_lock(&cache_mu);
  if ((p = cache_take(n, dbl))) { /* another thread won the race */
    dead = fresh;
  } else if (fresh->bytes > CACHE_BYTES) { /* too big to keep */
    p = fresh;
    p->refs = 1;
  } else {
    p = fresh;
    p->refs = 2;
    p->next = cache_head;
    cache_head = p;
    size_t count = 0, bytes = 0;
    for (plan **pp = &cache_head; *pp;) {
      plan *q = *pp;
      count++;
      bytes += q->bytes;
      if (q != p && (count > CACHE_PLANS || bytes > CACHE_BYTES)) {
        *pp = q->next;
        count--;
        bytes -= q->bytes;
        if (--q->refs == 0) q->next = dead, dead = q;
      } else {
        pp = &q->next;
      }
    }
  }
  pthread_mutex_unlock(&cache_mu);
  while (dead) {
    plan *q = dead;
    dead = q->next;
    q->next = NULL;
    plan_free(q);
  }
  return p;
}

/* ------------------------------------------------------------- the driver */

/* One axis pass of a whole call, before it is cut per transform. */
typedef struct {
  axis_job job;        /* outer counts one transform; src/dst of transform 0 */
  size_t src_step;     /* bytes from one transform's src to the next */
  size_t dst_step;
} pass_desc;

/* Whole transforms handed out one at a time, every pass of each. */
typedef struct {
  const pass_desc *pass;
  int npass;
  const kernels *K;
  void **scratch;
  atomic_llong next;
  int64_t howmany;
} whole_ctx;

static void whole_worker(void *arg, int tid) {
  whole_ctx *c = arg;
  for (;;) {
    int64_t h = atomic_fetch_add(&c->next, 1);
    if (h >= c->howmany) break;
    for (int i = 0; i < c->npass; i++) {
      axis_job jb = c->pass[i].job;
      jb.src = (const char *)jb.src + (size_t)h * c->pass[i].src_step;
      jb.dst = (char *)jb.dst + (size_t)h * c->pass[i].dst_step;
      c->K->blocks(&jb, 0, jb.nblocks, c->scratch[tid]);
    }
  }
}

/* Lanes per block and the block count, once outer/inner/rows are known.
 * Lines that are rows (inner == 1) are transposed into the block, and a
 * small block stays in L1/L2; column blocks read `B` contiguous entries per
 * row, and longer pieces make better use of each memory access. */
static void job_cut(axis_job *jb, int real_size) {
  int64_t B = (jb->inner == 1 ? 32 : 128) / real_size;
  while (B > 2 && 4 * LANE_ARRAY(jb->rows, B) * (size_t)real_size > LANE_BYTES) B /= 2;
  int64_t lanes = jb->inner == 1 ? jb->outer : jb->inner;
  while (B > 1 && B / 2 >= lanes) B /= 2;
  jb->B = B;
  if (jb->inner == 1) {
    jb->sblocks = 1;
    jb->nblocks = (jb->outer + B - 1) / B;
  } else {
    jb->sblocks = (jb->inner + B - 1) / B;
    jb->nblocks = jb->outer * jb->sblocks;
  }
}

/* Runs one pass over all transforms (outer already multiplied by howmany). */
static int run_pass(axis_job *jb, const kernels *K, int nthreads) {
  const int64_t lines = jb->outer * jb->inner;
  if (!jb->pl->lanes || (jb->pl->split && lines < 8)) {
    for (int64_t line = 0; line < lines; line++)
      if (K->big_line(jb, line, nthreads)) return -1;
    return 0;
  }
  job_cut(jb, K->real_size);
  if (nthreads > jb->nblocks) nthreads = (int)jb->nblocks;
  void **s = scratch_set(nthreads, 4 * LANE_ARRAY(jb->rows, jb->B) * (size_t)K->real_size);
  if (!s) return -1;
  blocks_ctx c = {jb, K, s, 0, 1};
  atomic_init(&c.next, 0);
  c.chunk = jb->nblocks / (8 * nthreads) > 1 ? jb->nblocks / (8 * nthreads) : 1;
  if (nthreads > 1)
    parallel(nthreads, blocks_worker, &c);
  else
    K->blocks(jb, 0, jb->nblocks, s[0]);
  scratch_free(s, nthreads);
  return 0;
}

int kl_host_fft(kl_fft_kind kind, int dbl, int rank, const int64_t *n,
                int64_t howmany, const void *in, void *out, char *err,
                size_t errlen) {
  if (rank < 1 || rank > 3 || howmany < 0 || (unsigned)kind > KL_FFT_C2R)
    return fail(err, errlen, "bad arguments (kind %d, rank %d)", (int)kind, rank);
  int64_t cn[3], total = 1, ctotal = 1; /* cn: the complex array's shape */
  for (int i = 0; i < rank; i++) {
    if (n[i] < 1) return fail(err, errlen, "length %lld < 1", (long long)n[i]);
    cn[i] = n[i];
    total *= n[i];
  }
  int real = kind == KL_FFT_R2C || kind == KL_FFT_C2R;
  if (real) cn[rank - 1] = n[rank - 1] / 2 + 1;
  for (int i = 0; i < rank; i++) ctotal *= cn[i];
  if (howmany == 0) return 0;

  const kernels *K = kernels_for(dbl);
  const size_t rs = (size_t)K->real_size, csize = 2 * rs;
  int nthreads = (double)howmany * (double)total >= 32768.0 ? max_threads() : 1;
  int inverse = kind == KL_FFT_INV || kind == KL_FFT_C2R;
  double scale = inverse ? 1.0 / (double)total : 1.0;

  /* The passes: complex axes last to first (C2R: first to last, then the
   * real axis); the first reads `in`, the others work in place. */
  pass_desc pass[3];
  int npass = 0;
  void *tmp = NULL;
  if (kind == KL_FFT_C2R && rank > 1 &&
      !(tmp = malloc((size_t)(howmany * ctotal) * csize)))
    return fail(err, errlen, "out of memory");
  for (int k = 0; k < rank; k++) {
    int axis = kind == KL_FFT_C2R ? k : rank - 1 - k;
    pass_desc *pd = &pass[npass++];
    axis_job *jb = &pd->job;
    memset(pd, 0, sizeof *pd);
    int last = axis == rank - 1;
    jb->op = real && last ? (kind == KL_FFT_R2C ? AX_R2C : AX_C2R) : AX_C2C;
    jb->n = n[axis];
    jb->nc = cn[axis];
    jb->inner = 1;
    jb->outer = 1;
    for (int i = axis + 1; i < rank; i++) jb->inner *= cn[i];
    for (int i = 0; i < axis; i++) jb->outer *= cn[i];
    jb->swap = inverse;
    jb->scale = k == rank - 1 ? scale : 1.0;
    void *work = tmp ? tmp : out; /* where the complex intermediate lives */
    jb->src = k == 0 ? in : work;
    jb->dst = jb->op == AX_C2R ? out : work;
    pd->src_step = (size_t)(k == 0 && jb->op == AX_R2C ? total * (int64_t)rs : ctotal * (int64_t)csize);
    pd->dst_step = (size_t)(jb->op == AX_C2R ? total * (int64_t)rs : ctotal * (int64_t)csize);
    int64_t len = jb->op != AX_C2C && jb->n % 2 == 0 ? jb->n / 2 : jb->n;
    if (!(jb->pl = plan_acquire(len, dbl ? 1 : 0))) {
      npass--;
      for (int i = 0; i < npass; i++) plan_release((plan *)pass[i].job.pl);
      free(tmp);
      return fail(err, errlen, "out of memory (or length %lld too long)", (long long)len);
    }
    int64_t rows = jb->pl->rows > jb->nc ? jb->pl->rows : jb->nc;
    jb->rows = rows;
  }

  int rc = 0, whole = nthreads > 1 && rank > 1 && howmany >= 2 * nthreads;
  for (int i = 0; i < npass; i++) whole = whole && pass[i].job.pl->lanes;
  if (whole) {
    int64_t rows = 0;
    for (int i = 0; i < npass; i++) {
      job_cut(&pass[i].job, K->real_size);
      int64_t need = pass[i].job.rows * pass[i].job.B;
      rows = need > rows ? need : rows;
    }
    void **s = scratch_set(nthreads, 4 * LANE_ARRAY(rows, 1) * rs);
    if (!s) {
      rc = -1;
    } else {
      whole_ctx c = {pass, npass, K, s, 0, howmany};
      atomic_init(&c.next, 0);
      parallel(nthreads, whole_worker, &c);
      scratch_free(s, nthreads);
    }
  } else {
    for (int i = 0; i < npass && !rc; i++) {
      pass[i].job.outer *= howmany;
      rc = run_pass(&pass[i].job, K, nthreads);
    }
  }
  for (int i = 0; i < npass; i++) plan_release((plan *)pass[i].job.pl);
  free(tmp);
  return rc ? fail(err, errlen, "out of memory") : 0;
}
