/* hostfft.c: the CPU FFT behind lax.fft (see hostfft.h). Mixed-radix
 * Stockham passes run on blocks of transforms side by side ("lanes", so every
 * inner loop is contiguous and vectorizes), Bluestein for lengths with a prime
 * factor above GENERIC_MAX, a four-step split for long lines, pthreads over
 * independent blocks. Depends on the C library and pthreads only.
 *
 * The kernels after the KL_FFT_TEMPLATE marker are compiled once per real
 * type and instruction set: this file includes itself with R, KL_SFX and
 * KL_TARGET defined. Inverse transforms run the forward kernels on (im, re):
 * swap(DFT(swap(x))) is the unscaled inverse DFT of x. */
#ifndef KL_FFT_TEMPLATE
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

enum { PLAN_DIRECT, PLAN_BLUESTEIN, PLAN_FOURSTEP };
enum { AX_C2C, AX_R2C, AX_C2R };
enum {
  MAX_PASSES = 24,   /* a DIRECT length <= DIRECT_MAX has at most 14 factors */
  GENERIC_MAX = 31,  /* largest prime radix done by the O(r^2) pass */
  DIRECT_MAX = 16384, /* longer lengths split four-step */
  MAX_THREADS = 64,
  CACHE_PLANS = 48   /* cache cap: plans kept ... */
};
#define CACHE_BYTES ((size_t)256 << 20) /* ... and their table memory */
#define LANE_BYTES ((size_t)1 << 20)    /* aim for lane scratch below this */

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
  int64_t n1, n2;        /* FOURSTEP: n = n1 * n2; n1-point columns first */
  void *tlo, *thi;       /* FOURSTEP: W_n^t = thi[t >> tshift] tlo[t & mask] */
  int tshift;            /* FOURSTEP: see tlo */
  plan *sub, *sub2;      /* BLUESTEIN: length m; FOURSTEP: n1, n2 (owned) */
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
  /* Runs blocks [b0, b1) of a lane job; scratch: 4 * rows * B reals. */
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
#else
#define KL_ALWAYS_INLINE
#endif

/* Asserts an inner loop carries no dependence: the rows a butterfly reads
 * and writes never overlap, which GCC cannot prove for runtime offsets. */
#if defined(__clang__)
#define KL_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define KL_IVDEP _Pragma("GCC ivdep")
#else
#define KL_IVDEP
#endif

#define KL_CAT2(a, b) a##_##b
#define KL_CAT(a, b) KL_CAT2(a, b)

#define KL_FFT_TEMPLATE
#define R float
#define KL_SFX f32
#define KL_TARGET
#include "hostfft.c"
#undef R
#undef KL_SFX
#define R double
#define KL_SFX f64
#include "hostfft.c"
#undef R
#undef KL_SFX
#undef KL_TARGET

#if defined(__x86_64__) && defined(__GNUC__)
#define KL_HAVE_AVX2 1
#if defined(__clang__)
#define KL_TARGET __attribute__((target("avx2,fma")))
#else
#define KL_TARGET __attribute__((target("avx2,fma"), optimize("fp-contract=fast")))
#endif
#define R float
#define KL_SFX f32_avx2
#include "hostfft.c"
#undef R
#undef KL_SFX
#define R double
#define KL_SFX f64_avx2
#include "hostfft.c"
#undef R
#undef KL_SFX
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
static int build_fourstep(plan *p) {
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
  p->rows = p->sub->rows > p->sub2->rows ? p->sub->rows : p->sub2->rows;
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
  } else {
    p->kind = PLAN_FOURSTEP;
    rc = build_fourstep(p);
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

/* Lanes per block and the block count, once outer/inner/rows are known. */
static void job_cut(axis_job *jb, int real_size) {
  int64_t B = real_size == 4 ? 16 : 8;
  while (B > 2 && (size_t)(4 * jb->rows * B * real_size) > LANE_BYTES) B /= 2;
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
  if (!jb->pl->lanes) {
    for (int64_t line = 0; line < jb->outer * jb->inner; line++)
      if (K->big_line(jb, line, nthreads)) return -1;
    return 0;
  }
  job_cut(jb, K->real_size);
  if (nthreads > jb->nblocks) nthreads = (int)jb->nblocks;
  void **s = scratch_set(nthreads, (size_t)(4 * jb->rows * jb->B * K->real_size));
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
    void **s = scratch_set(nthreads, (size_t)(4 * rows) * rs);
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

#else /* KL_FFT_TEMPLATE: kernels for one real type R and instruction set */

#define F(name) KL_CAT(name, KL_SFX)
#define KFN static KL_TARGET
/* (xr, xi) *= (wr, wi) */
#define CMUL(xr, xi, wr, wi)                                                   \
  do {                                                                         \
    R t_ = (xr) * (wr) - (xi) * (wi);                                          \
    (xi) = (xr) * (wi) + (xi) * (wr);                                          \
    (xr) = t_;                                                                 \
  } while (0)

/* Stockham passes. The lane block holds `len` rows of `run0` reals (one per
 * lane); a pass with m = len / r groups reads x[(q + s (p + j m)) run0 + i]
 * and writes y[(q + s (r p + k)) run0 + i]: for fixed p and j every q and
 * lane i form one contiguous run of s * run0 = `run` reals. */
/* Butterflies over one run; `twid` is a constant at every call, so each
 * pass gets a loop without twiddles (its last pass, m == 1) and one with. */
#define BFN static inline KL_ALWAYS_INLINE KL_TARGET void
BFN F(bf2)(size_t run, size_t st, const R *restrict xr, const R *restrict xi,
           R *restrict yr, R *restrict yi, const R *w, const int twid) {
  KL_IVDEP
  for (size_t i = 0; i < run; i++) {
    R ar = xr[i], ai = xi[i], br = xr[st + i], bi = xi[st + i];
    yr[i] = ar + br;
    yi[i] = ai + bi;
    R dr = ar - br, di = ai - bi;
    if (twid) CMUL(dr, di, w[0], w[1]);
    yr[run + i] = dr;
    yi[run + i] = di;
  }
}

BFN F(bf3)(size_t run, size_t st, const R *restrict xr, const R *restrict xi,
           R *restrict yr, R *restrict yi, const R *w, const int twid) {
  const R h = (R)0.866025403784438646763723170752936183; /* sin(pi/3) */
  KL_IVDEP
  for (size_t i = 0; i < run; i++) {
    R a0r = xr[i], a0i = xi[i], a1r = xr[st + i], a1i = xi[st + i];
    R a2r = xr[2 * st + i], a2i = xi[2 * st + i];
    R sr = a1r + a2r, si = a1i + a2i, dr = (a1r - a2r) * h, di = (a1i - a2i) * h;
    R mr = a0r - (R)0.5 * sr, mi = a0i - (R)0.5 * si;
    R c1r = mr + di, c1i = mi - dr, c2r = mr - di, c2i = mi + dr;
    yr[i] = a0r + sr;
    yi[i] = a0i + si;
    if (twid) {
      CMUL(c1r, c1i, w[0], w[1]);
      CMUL(c2r, c2i, w[2], w[3]);
    }
    yr[run + i] = c1r;
    yi[run + i] = c1i;
    yr[2 * run + i] = c2r;
    yi[2 * run + i] = c2i;
  }
}

BFN F(bf4)(size_t run, size_t st, const R *restrict xr, const R *restrict xi,
           R *restrict yr, R *restrict yi, const R *w, const int twid) {
  KL_IVDEP
  for (size_t i = 0; i < run; i++) {
    R a0r = xr[i], a0i = xi[i], a1r = xr[st + i], a1i = xi[st + i];
    R a2r = xr[2 * st + i], a2i = xi[2 * st + i], a3r = xr[3 * st + i], a3i = xi[3 * st + i];
    R t0r = a0r + a2r, t0i = a0i + a2i, t1r = a0r - a2r, t1i = a0i - a2i;
    R t2r = a1r + a3r, t2i = a1i + a3i, t3r = a1i - a3i, t3i = a3r - a1r;
    R c1r = t1r + t3r, c1i = t1i + t3i, c2r = t0r - t2r, c2i = t0i - t2i;
    R c3r = t1r - t3r, c3i = t1i - t3i;
    yr[i] = t0r + t2r;
    yi[i] = t0i + t2i;
    if (twid) {
      CMUL(c1r, c1i, w[0], w[1]);
      CMUL(c2r, c2i, w[2], w[3]);
      CMUL(c3r, c3i, w[4], w[5]);
    }
    yr[run + i] = c1r;
    yi[run + i] = c1i;
    yr[2 * run + i] = c2r;
    yi[2 * run + i] = c2i;
    yr[3 * run + i] = c3r;
    yi[3 * run + i] = c3i;
  }
}

BFN F(bf5)(size_t run, size_t st, const R *restrict xr, const R *restrict xi,
           R *restrict yr, R *restrict yi, const R *w, const int twid) {
  const R c1 = (R)0.309016994374947424102293417182819059;  /* cos(2pi/5) */
  const R c2 = (R)-0.809016994374947424102293417182819059; /* cos(4pi/5) */
  const R s1 = (R)0.951056516295153572116439333379382143;  /* sin(2pi/5) */
  const R s2 = (R)0.587785252292473129168705954639072769;  /* sin(4pi/5) */
  KL_IVDEP
  for (size_t i = 0; i < run; i++) {
    R a0r = xr[i], a0i = xi[i], a1r = xr[st + i], a1i = xi[st + i];
    R a2r = xr[2 * st + i], a2i = xi[2 * st + i], a3r = xr[3 * st + i], a3i = xi[3 * st + i];
    R a4r = xr[4 * st + i], a4i = xi[4 * st + i];
    R s1r = a1r + a4r, s1i = a1i + a4i, d1r = a1r - a4r, d1i = a1i - a4i;
    R s2r = a2r + a3r, s2i = a2i + a3i, d2r = a2r - a3r, d2i = a2i - a3i;
    R A1r = a0r + c1 * s1r + c2 * s2r, A1i = a0i + c1 * s1i + c2 * s2i;
    R A2r = a0r + c2 * s1r + c1 * s2r, A2i = a0i + c2 * s1i + c1 * s2i;
    R B1r = s1 * d1r + s2 * d2r, B1i = s1 * d1i + s2 * d2i;
    R B2r = s2 * d1r - s1 * d2r, B2i = s2 * d1i - s1 * d2i;
    R o1r = A1r + B1i, o1i = A1i - B1r, o4r = A1r - B1i, o4i = A1i + B1r;
    R o2r = A2r + B2i, o2i = A2i - B2r, o3r = A2r - B2i, o3i = A2i + B2r;
    yr[i] = a0r + s1r + s2r;
    yi[i] = a0i + s1i + s2i;
    if (twid) {
      CMUL(o1r, o1i, w[0], w[1]);
      CMUL(o2r, o2i, w[2], w[3]);
      CMUL(o3r, o3i, w[4], w[5]);
      CMUL(o4r, o4i, w[6], w[7]);
    }
    yr[run + i] = o1r;
    yi[run + i] = o1i;
    yr[2 * run + i] = o2r;
    yi[2 * run + i] = o2i;
    yr[3 * run + i] = o3r;
    yi[3 * run + i] = o3i;
    yr[4 * run + i] = o4r;
    yi[4 * run + i] = o4i;
  }
}

/* One radix-r pass (r = 2..5) of m groups: group p reads rows p + j m and
 * writes rows r p + k (rows of `run` reals), twiddled by tw[p (r-1) + k-1]. */
#define DEFINE_PASS(r)                                                         \
  KFN void F(pass##r)(size_t m, size_t run, const R *restrict tw,              \
                      const R *restrict xr, const R *restrict xi,              \
                      R *restrict yr, R *restrict yi) {                        \
    const size_t st = m * run;                                                 \
    if (m == 1) F(bf##r)(run, st, xr, xi, yr, yi, tw, 0);                      \
    for (size_t p = 0; m > 1 && p < m; p++)                                    \
      F(bf##r)(run, st, xr + p * run, xi + p * run, yr + r * p * run,          \
               yi + r * p * run, tw + 2 * (r - 1) * p, 1);                     \
  }
DEFINE_PASS(2)
DEFINE_PASS(3)
DEFINE_PASS(4)
DEFINE_PASS(5)
#undef DEFINE_PASS
#undef BFN

/* Any odd prime r: c_k = A_k - i B_k and c_(r-k) = A_k + i B_k, with
 * A_k = a_0 + sum_j (a_j + a_(r-j)) cos(2 pi jk/r) and
 * B_k = sum_j (a_j - a_(r-j)) sin(2 pi jk/r); A_k and B_k are summed in
 * y_k and y_(r-k) first. */
KFN void F(passg)(size_t r, size_t m, size_t run, const R *restrict tw,
                  const R *restrict xr, const R *restrict xi,
                  R *restrict yr, R *restrict yi) {
  const size_t st = m * run, h = (r - 1) / 2;
  const R *cs = tw + 2 * (r - 1) * m;
  for (size_t p = 0; p < m; p++) {
    const R *w = tw + 2 * (r - 1) * p;
    const size_t a = p * run, o = r * p * run;
    for (size_t i = 0; i < run; i++) yr[o + i] = xr[a + i], yi[o + i] = xi[a + i];
    for (size_t k = 1; k <= h; k++)
      for (size_t i = 0; i < run; i++) {
        yr[o + k * run + i] = xr[a + i], yi[o + k * run + i] = xi[a + i];
        yr[o + (r - k) * run + i] = 0, yi[o + (r - k) * run + i] = 0;
      }
    for (size_t j = 1; j <= h; j++) {
      const size_t u = a + j * st, v = a + (r - j) * st;
      for (size_t i = 0; i < run; i++)
        yr[o + i] += xr[u + i] + xr[v + i], yi[o + i] += xi[u + i] + xi[v + i];
      for (size_t k = 1; k <= h; k++) {
        const R c = cs[2 * ((j - 1) * h + k - 1)], s = cs[2 * ((j - 1) * h + k - 1) + 1];
        const size_t ya = o + k * run, yb = o + (r - k) * run;
        for (size_t i = 0; i < run; i++) {
          yr[ya + i] += (xr[u + i] + xr[v + i]) * c;
          yi[ya + i] += (xi[u + i] + xi[v + i]) * c;
          yr[yb + i] += (xr[u + i] - xr[v + i]) * s;
          yi[yb + i] += (xi[u + i] - xi[v + i]) * s;
        }
      }
    }
    for (size_t k = 1; k <= h; k++) {
      const size_t ya = o + k * run, yb = o + (r - k) * run;
      const R war = w[2 * (k - 1)], wai = w[2 * (k - 1) + 1];
      const R wbr = w[2 * (r - k - 1)], wbi = w[2 * (r - k - 1) + 1];
      for (size_t i = 0; i < run; i++) {
        R Ar = yr[ya + i], Ai = yi[ya + i], Br = yr[yb + i], Bi = yi[yb + i];
        R ur = Ar + Bi, ui = Ai - Br, vr = Ar - Bi, vi = Ai + Br;
        CMUL(ur, ui, war, wai);
        CMUL(vr, vi, wbr, wbi);
        yr[ya + i] = ur, yi[ya + i] = ui, yr[yb + i] = vr, yi[yb + i] = vi;
      }
    }
  }
}

KFN int F(exec)(const plan *pl, R *const *buf, size_t B);

/* Bluestein on a lane block: rows 0..n-1 of pair 0 in, rows 0..n-1 of the
 * returned pair out (rows up to m are used). */
KFN int F(bluestein_lanes)(const plan *pl, R *const *buf, size_t B) {
  const size_t n = (size_t)pl->n, m = (size_t)pl->m;
  const R *c = pl->chirp, *bh = pl->bhat;
  R *xr = buf[0], *xi = buf[1];
  for (size_t j = 0; j < n; j++)
    for (size_t b = 0; b < B; b++) CMUL(xr[j * B + b], xi[j * B + b], c[2 * j], c[2 * j + 1]);
  memset(xr + n * B, 0, (m - n) * B * sizeof(R));
  memset(xi + n * B, 0, (m - n) * B * sizeof(R));
  int p = F(exec)(pl->sub, buf, B);
  R *zr = buf[2 * p], *zi = buf[2 * p + 1];
  for (size_t k = 0; k < m; k++)
    for (size_t b = 0; b < B; b++) CMUL(zr[k * B + b], zi[k * B + b], bh[2 * k], bh[2 * k + 1]);
  R *sw[4] = {buf[2 * p + 1], buf[2 * p], buf[3 - 2 * p], buf[2 - 2 * p]};
  p = F(exec)(pl->sub, sw, B) ? 1 - p : p; /* the inverse, on (im, re) */
  zr = buf[2 * p], zi = buf[2 * p + 1];
  for (size_t j = 0; j < n; j++)
    for (size_t b = 0; b < B; b++) CMUL(zr[j * B + b], zi[j * B + b], c[2 * j], c[2 * j + 1]);
  return p;
}

/* Forward DFT of B lanes: row j of lane b at buf[0][j B + b] (re) and
 * buf[1][j B + b] (im); buf[2], buf[3] are the second pair. Returns the pair
 * (0 or 1) that holds the result. */
KFN int F(exec)(const plan *pl, R *const *buf, size_t B) {
  if (pl->kind == PLAN_BLUESTEIN) return F(bluestein_lanes)(pl, buf, B);
  int cur = 0;
  size_t len = (size_t)pl->n, s = 1;
  for (int k = 0; k < pl->npass; k++) {
    const size_t r = (size_t)pl->radix[k], m = len / r, run = s * B;
    const R *tw = pl->tw[k];
    R *xr = buf[2 * cur], *xi = buf[2 * cur + 1], *yr = buf[2 - 2 * cur], *yi = buf[3 - 2 * cur];
    switch (r) {
    case 2: F(pass2)(m, run, tw, xr, xi, yr, yi); break;
    case 3: F(pass3)(m, run, tw, xr, xi, yr, yi); break;
    case 4: F(pass4)(m, run, tw, xr, xi, yr, yi); break;
    case 5: F(pass5)(m, run, tw, xr, xi, yr, yi); break;
    default: F(passg)(r, m, run, tw, xr, xi, yr, yi); break;
    }
    cur = 1 - cur;
    len = m;
    s *= r;
  }
  return cur;
}

/* Complex interleaved src, entry j of lane b at src[2 (j js + b bs)], into
 * the lane block (row stride B). */
KFN void F(gather_c)(const R *restrict src, ptrdiff_t js, ptrdiff_t bs,
                     size_t n, size_t B, R *restrict re, R *restrict im) {
  if (bs == 1 || B == 1)
    for (size_t j = 0; j < n; j++) {
      const R *s = src + 2 * (ptrdiff_t)j * js;
      for (size_t b = 0; b < B; b++) re[j * B + b] = s[2 * b], im[j * B + b] = s[2 * b + 1];
    }
  else
    for (size_t b = 0; b < B; b++) {
      const R *s = src + 2 * (ptrdiff_t)b * bs;
      for (size_t j = 0; j < n; j++)
        re[j * B + b] = s[2 * (ptrdiff_t)j * js], im[j * B + b] = s[2 * (ptrdiff_t)j * js + 1];
    }
}

KFN void F(scatter_c)(R *restrict dst, ptrdiff_t js, ptrdiff_t bs, size_t n,
                      size_t B, const R *restrict re, const R *restrict im,
                      R scale) {
  if (bs == 1 || B == 1)
    for (size_t j = 0; j < n; j++) {
      R *d = dst + 2 * (ptrdiff_t)j * js;
      if (scale != 1)
        for (size_t b = 0; b < B; b++) d[2 * b] = re[j * B + b] * scale, d[2 * b + 1] = im[j * B + b] * scale;
      else
        for (size_t b = 0; b < B; b++) d[2 * b] = re[j * B + b], d[2 * b + 1] = im[j * B + b];
    }
  else
    for (size_t b = 0; b < B; b++) {
      R *d = dst + 2 * (ptrdiff_t)b * bs;
      for (size_t j = 0; j < n; j++)
        d[2 * (ptrdiff_t)j * js] = re[j * B + b] * scale, d[2 * (ptrdiff_t)j * js + 1] = im[j * B + b] * scale;
    }
}

/* Real lines (entry j of lane b at src[j + b bs]) as complex with im = 0. */
KFN void F(gather_r)(const R *restrict src, ptrdiff_t bs, size_t n, size_t B,
                     R *restrict re, R *restrict im) {
  for (size_t b = 0; b < B; b++)
    for (size_t j = 0; j < n; j++) re[j * B + b] = src[(ptrdiff_t)b * bs + (ptrdiff_t)j];
  memset(im, 0, n * B * sizeof(R));
}

KFN void F(scatter_r)(R *restrict dst, ptrdiff_t bs, size_t n, size_t B,
                      const R *restrict re, R scale) {
  for (size_t b = 0; b < B; b++)
    for (size_t j = 0; j < n; j++) dst[(ptrdiff_t)b * bs + (ptrdiff_t)j] = re[j * B + b] * scale;
}

/* In place, entry (k, b) at re/im[k rs + b]: Z (M entries), the DFT of
 * z_j = x_2j + i x_2j+1, becomes X_0..X_M, the half spectrum of the real x:
 * X_k = E_k + W_2M^k O_k, X_(M-k) = conj(E_k - W_2M^k O_k), with
 * E_k = (Z_k + conj Z_(M-k)) / 2, O_k = (Z_k - conj Z_(M-k)) / 2i. */
KFN void F(r2c_post)(R *re, R *im, size_t rs, size_t M, size_t nb, const R *half) {
  for (size_t b = 0; b < nb; b++) {
    R zr = re[b], zi = im[b];
    re[b] = zr + zi, im[b] = 0, re[M * rs + b] = zr - zi, im[M * rs + b] = 0;
  }
  for (size_t k = 1; 2 * k <= M; k++) {
    const R wr = half[2 * k], wi = half[2 * k + 1];
    R *ar = re + k * rs, *ai = im + k * rs, *br = re + (M - k) * rs, *bi = im + (M - k) * rs;
    for (size_t b = 0; b < nb; b++) {
      R zkr = ar[b], zki = ai[b], zmr = br[b], zmi = bi[b];
      R er = (zkr + zmr) * (R)0.5, ei = (zki - zmi) * (R)0.5;
      R pr = (zki + zmi) * (R)0.5, pi = (zmr - zkr) * (R)0.5;
      CMUL(pr, pi, wr, wi);
      ar[b] = er + pr, ai[b] = ei + pi, br[b] = er - pr, bi[b] = pi - ei;
    }
  }
}

/* The inverse of r2c_post up to a factor 2 (the imaginary parts of X_0 and
 * X_M ignored): Z_k = E_k + i Q_k, Z_(M-k) = conj(E_k - i Q_k), with
 * E_k = X_k + conj X_(M-k), Q_k = (X_k - conj X_(M-k)) conj(W_2M^k). */
KFN void F(c2r_pre)(R *re, R *im, size_t rs, size_t M, size_t nb, const R *half) {
  for (size_t b = 0; b < nb; b++) {
    R x0 = re[b], xm = re[M * rs + b];
    re[b] = x0 + xm, im[b] = x0 - xm;
  }
  for (size_t k = 1; 2 * k <= M; k++) {
    const R wr = half[2 * k], wi = -half[2 * k + 1];
    R *ar = re + k * rs, *ai = im + k * rs, *br = re + (M - k) * rs, *bi = im + (M - k) * rs;
    for (size_t b = 0; b < nb; b++) {
      R xkr = ar[b], xki = ai[b], xmr = br[b], xmi = bi[b];
      R er = xkr + xmr, ei = xki - xmi, qr = xkr - xmr, qi = xki + xmi;
      CMUL(qr, qi, wr, wi);
      ar[b] = er - qi, ai[b] = ei + qr, br[b] = er + qi, bi[b] = qr - ei;
    }
  }
}

/* Rows nc..n-1 from the Hermitian symmetry X_k = conj X_(n-k). */
KFN void F(herm_fill)(R *re, R *im, size_t rs, size_t n, size_t nc, size_t nb) {
  for (size_t k = nc; k < n; k++)
    for (size_t b = 0; b < nb; b++)
      re[k * rs + b] = re[(n - k) * rs + b], im[k * rs + b] = -im[(n - k) * rs + b];
}

KFN void F(blocks)(const axis_job *jb, int64_t b0, int64_t b1, void *scratch) {
  const plan *pl = jb->pl;
  const size_t B = (size_t)jb->B, rows = (size_t)jb->rows;
  R *r0 = scratch, *i0 = r0 + rows * B, *r1 = i0 + rows * B, *i1 = r1 + rows * B;
  R *bf[4] = {r0, i0, r1, i1}, *sw[4] = {i0, r0, i1, r1};
  R *const *run = jb->swap ? sw : bf;
  const R scale = (R)jb->scale;
  const int64_t n = jb->n, nc = jb->nc, S = jb->inner, M = n / 2;
  const R *src = jb->src;
  R *dst = jb->dst;
  for (int64_t blk = b0; blk < b1; blk++) {
    int64_t first, nb;
    if (S == 1) {
      first = blk * (int64_t)B;
      nb = jb->outer - first < (int64_t)B ? jb->outer - first : (int64_t)B;
    } else {
      int64_t s0 = blk % jb->sblocks * (int64_t)B;
      first = blk / jb->sblocks * n * S + s0;
      nb = S - s0 < (int64_t)B ? S - s0 : (int64_t)B;
    }
    int p;
    if (jb->op == AX_C2C) {
      ptrdiff_t js = S == 1 ? 1 : S, bs = S == 1 ? n : 1, off = 2 * (S == 1 ? first * n : first);
      F(gather_c)(src + off, js, bs, (size_t)n, (size_t)nb, r0, i0);
      p = F(exec)(pl, run, (size_t)nb);
      F(scatter_c)(dst + off, js, bs, (size_t)n, (size_t)nb, bf[2 * p], bf[2 * p + 1], scale);
    } else if (jb->op == AX_R2C && n % 2 == 0) {
      F(gather_c)(src + first * n, 1, M, (size_t)M, (size_t)nb, r0, i0);
      p = F(exec)(pl, run, (size_t)nb);
      F(r2c_post)(bf[2 * p], bf[2 * p + 1], (size_t)nb, (size_t)M, (size_t)nb, pl->half);
      F(scatter_c)(dst + 2 * first * nc, 1, nc, (size_t)nc, (size_t)nb, bf[2 * p], bf[2 * p + 1], scale);
    } else if (jb->op == AX_R2C) {
      F(gather_r)(src + first * n, n, (size_t)n, (size_t)nb, r0, i0);
      p = F(exec)(pl, run, (size_t)nb);
      F(scatter_c)(dst + 2 * first * nc, 1, nc, (size_t)nc, (size_t)nb, bf[2 * p], bf[2 * p + 1], scale);
    } else if (n % 2 == 0) { /* C2R */
      F(gather_c)(src + 2 * first * nc, 1, nc, (size_t)nc, (size_t)nb, r0, i0);
      F(c2r_pre)(r0, i0, (size_t)nb, (size_t)M, (size_t)nb, pl->half);
      p = F(exec)(pl, run, (size_t)nb);
      F(scatter_c)(dst + first * n, 1, M, (size_t)M, (size_t)nb, bf[2 * p], bf[2 * p + 1], scale);
    } else {
      F(gather_c)(src + 2 * first * nc, 1, nc, (size_t)nc, (size_t)nb, r0, i0);
      F(herm_fill)(r0, i0, (size_t)nb, (size_t)n, (size_t)nc, (size_t)nb);
      p = F(exec)(pl, run, (size_t)nb);
      F(scatter_r)(dst + first * n, n, (size_t)n, (size_t)nb, bf[2 * p], scale);
    }
  }
}

/* ------------------------------------------------------ long lines */

/* Multiplies lane b, row k1 by W_n^((n2_0 + b) k1). */
KFN void F(fs_twiddle)(const plan *pl, R *re, R *im, size_t rows, size_t nb, int64_t n2_0) {
  const R *lo = pl->tlo, *hi = pl->thi;
  const int sh = pl->tshift;
  const int64_t mask = ((int64_t)1 << sh) - 1, n = pl->n;
  for (size_t b = 0; b < nb; b++) {
    int64_t step = n2_0 + (int64_t)b, t = 0;
    for (size_t k = 1; k < rows; k++) {
      t += step;
      if (t >= n) t -= n;
      const R *h = hi + 2 * (t >> sh), *l = lo + 2 * (t & mask);
      CMUL(re[k * nb + b], im[k * nb + b], h[0] * l[0] - h[1] * l[1], h[0] * l[1] + h[1] * l[0]);
    }
  }
}

/* X[k1 + n1 k2] = sum_n2 W_n2^(n2 k2) W_n^(n2 k1) sum_n1 W_n1^(n1 k1) x[n2 + n2 n1]:
 * step 1 writes the twiddled column DFTs transposed (out[n2 n1 + k1]), step 2
 * transforms those in place along n2. Lanes are contiguous in both. */
KFN void F(fs_worker)(void *arg, int tid) {
  fs_ctx *c = arg;
  const plan *pl = c->pl;
  const size_t B = (size_t)c->B, rows = (size_t)c->rows;
  R *r0 = c->scratch[tid], *i0 = r0 + rows * B, *r1 = i0 + rows * B, *i1 = r1 + rows * B;
  R *bf[4] = {r0, i0, r1, i1}, *sw[4] = {i0, r0, i1, r1};
  R *const *run = c->swap ? sw : bf;
  const int64_t n1 = pl->n1, n2 = pl->n2;
  const ptrdiff_t is = c->is, os = c->os;
  const R *in = c->in;
  R *out = c->out;
  for (;;) {
    int64_t blk = atomic_fetch_add(&c->next, 1);
    if (blk >= c->nblocks) break;
    int64_t first = blk * (int64_t)B, lanes = c->step == 1 ? n2 : n1;
    size_t nb = (size_t)(lanes - first < (int64_t)B ? lanes - first : (int64_t)B);
    int p;
    if (c->step == 1) {
      F(gather_c)(in + 2 * first * is, n2 * is, is, (size_t)n1, nb, r0, i0);
      p = F(exec)(pl->sub, run, nb);
      R *zr = bf[2 * p], *zi = bf[2 * p + 1];
      if (c->swap)
        F(fs_twiddle)(pl, zi, zr, (size_t)n1, nb, first);
      else
        F(fs_twiddle)(pl, zr, zi, (size_t)n1, nb, first);
      F(scatter_c)(out + 2 * first * n1 * os, os, n1 * os, (size_t)n1, nb, zr, zi, 1);
    } else {
      F(gather_c)(out + 2 * first * os, n1 * os, os, (size_t)n2, nb, r0, i0);
      p = F(exec)(pl->sub2, run, nb);
      F(scatter_c)(out + 2 * first * os, n1 * os, os, (size_t)n2, nb, bf[2 * p], bf[2 * p + 1], (R)c->scale);
    }
  }
}

KFN int F(fourstep)(const plan *pl, const R *in, ptrdiff_t is, R *out,
                    ptrdiff_t os, int swap, double scale, int nthreads) {
  fs_ctx c = {pl, in, is, out, os, swap, scale, 1, 8, 0, 0, 0, NULL};
  c.rows = pl->rows;
  while (c.B > 2 && (size_t)(4 * c.rows * c.B) * sizeof(R) > LANE_BYTES) c.B /= 2;
  int64_t most = (pl->n1 > pl->n2 ? pl->n1 : pl->n2) / c.B + 1;
  if (nthreads > most) nthreads = (int)most;
  if (!(c.scratch = scratch_set(nthreads, (size_t)(4 * c.rows * c.B) * sizeof(R)))) return -1;
  for (c.step = 1; c.step <= 2; c.step++) {
    c.nblocks = ((c.step == 1 ? pl->n2 : pl->n1) + c.B - 1) / c.B;
    atomic_store(&c.next, 0);
    parallel(nthreads, F(fs_worker), &c);
  }
  scratch_free(c.scratch, nthreads);
  return 0;
}

KFN int F(line)(const plan *pl, const void *vin, ptrdiff_t is, void *vout,
                ptrdiff_t os, int swap, double scale, int nthreads);

/* Bluestein for one line too long for a lane block. */
KFN int F(bluestein_line)(const plan *pl, const R *in, ptrdiff_t is, R *out,
                          ptrdiff_t os, int swap, double scale, int nthreads) {
  const size_t n = (size_t)pl->n, m = (size_t)pl->m;
  const R *c = pl->chirp, *bh = pl->bhat;
  R *t = malloc(4 * m * sizeof(R)), *u = t + 2 * m;
  if (!t) return -1;
  const int sr = swap ? 1 : 0; /* where the real part lives */
  for (size_t j = 0; j < n; j++) {
    R xr = in[2 * (ptrdiff_t)j * is + sr], xi = in[2 * (ptrdiff_t)j * is + 1 - sr];
    CMUL(xr, xi, c[2 * j], c[2 * j + 1]);
    t[2 * j] = xr, t[2 * j + 1] = xi;
  }
  memset(t + 2 * n, 0, 2 * (m - n) * sizeof(R));
  int rc = F(line)(pl->sub, t, 1, u, 1, 0, 1, nthreads);
  for (size_t k = 0; !rc && k < m; k++) CMUL(u[2 * k], u[2 * k + 1], bh[2 * k], bh[2 * k + 1]);
  if (!rc) rc = F(line)(pl->sub, u, 1, t, 1, 1, 1, nthreads);
  for (size_t k = 0; !rc && k < n; k++) {
    R yr = t[2 * k], yi = t[2 * k + 1];
    CMUL(yr, yi, c[2 * k], c[2 * k + 1]);
    out[2 * (ptrdiff_t)k * os + sr] = yr * (R)scale;
    out[2 * (ptrdiff_t)k * os + 1 - sr] = yi * (R)scale;
  }
  free(t);
  return rc;
}

/* One complex line of any plan: element j at in[2 j is], out[2 j os]. */
KFN int F(line)(const plan *pl, const void *vin, ptrdiff_t is, void *vout,
                ptrdiff_t os, int swap, double scale, int nthreads) {
  const R *in = vin;
  R *out = vout;
  if (pl->kind == PLAN_FOURSTEP) return F(fourstep)(pl, in, is, out, os, swap, scale, nthreads);
  if (!pl->lanes) return F(bluestein_line)(pl, in, is, out, os, swap, scale, nthreads);
  const size_t rows = (size_t)pl->rows;
  R *s = scratch_alloc(4 * rows * sizeof(R));
  if (!s) return -1;
  R *bf[4] = {s, s + rows, s + 2 * rows, s + 3 * rows}, *sw[4] = {bf[1], bf[0], bf[3], bf[2]};
  F(gather_c)(in, is, 1, (size_t)pl->n, 1, bf[0], bf[1]);
  int p = F(exec)(pl, swap ? sw : bf, 1);
  F(scatter_c)(out, os, 1, (size_t)pl->n, 1, bf[2 * p], bf[2 * p + 1], (R)scale);
  free(s);
  return 0;
}

/* Line `line` of a pass whose plan is too long for a lane block. */
KFN int F(big_line)(const axis_job *jb, int64_t line, int nthreads) {
  const plan *pl = jb->pl;
  const int64_t n = jb->n, nc = jb->nc, M = n / 2;
  const R *src = jb->src;
  R *dst = jb->dst;
  if (jb->op == AX_C2C) {
    int64_t S = jb->inner, off = 2 * (line / S * n * S + line % S);
    return F(line)(pl, src + off, S, dst + off, S, jb->swap, jb->scale, nthreads);
  }
  if (jb->op == AX_R2C && n % 2 == 0) {
    R *o = dst + 2 * line * nc;
    if (F(line)(pl, src + line * n, 1, o, 1, 0, 1, nthreads)) return -1;
    F(r2c_post)(o, o + 1, 2, (size_t)M, 1, pl->half);
    return 0;
  }
  size_t len = (size_t)(jb->op == AX_C2R && n % 2 == 0 ? nc : 2 * n);
  R *t = malloc(2 * len * sizeof(R)), *u = t + (len / 2) * 2;
  if (!t) return -1;
  int rc;
  if (jb->op == AX_R2C) { /* odd: a full complex transform */
    for (int64_t j = 0; j < n; j++) t[2 * j] = src[line * n + j], t[2 * j + 1] = 0;
    if (!(rc = F(line)(pl, t, 1, u, 1, 0, 1, nthreads)))
      memcpy(dst + 2 * line * nc, u, (size_t)(2 * nc) * sizeof(R));
  } else if (n % 2 == 0) {
    memcpy(t, src + 2 * line * nc, (size_t)(2 * nc) * sizeof(R));
    F(c2r_pre)(t, t + 1, 2, (size_t)M, 1, pl->half);
    rc = F(line)(pl, t, 1, dst + line * n, 1, 1, jb->scale, nthreads);
  } else {
    memcpy(t, src + 2 * line * nc, (size_t)(2 * nc) * sizeof(R));
    F(herm_fill)(t, t + 1, 2, (size_t)n, (size_t)nc, 1);
    if (!(rc = F(line)(pl, t, 1, u, 1, 1, 1, nthreads)))
      for (int64_t j = 0; j < n; j++) dst[line * n + j] = u[2 * j] * (R)jb->scale;
  }
  free(t);
  return rc;
}

#undef F
#undef KFN
#undef CMUL
#endif /* KL_FFT_TEMPLATE */
