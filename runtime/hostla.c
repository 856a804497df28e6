/* hostla.c: host-side dense linear algebra (see hostla.h), its BLAS half: the
 * search for a BLAS/LAPACK opened at run time with dlopen, batched gemm
 * through it, and plain C kernels for the dtypes (and machines) it cannot
 * serve. The LAPACK entry points are in lapack.c; what the two share is in
 * hostla_lib.h. Must not depend on Python, MLIR or CUDA, nor link to any BLAS. */
#define _POSIX_C_SOURCE 200809L
#include "hostla_lib.h"
#include "runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A local copy of dtype sizes: ir/dtype.c is another module and may not be
 * linked into every client of this file. */
static size_t elem_size(kl_dtype t) {
  switch (t) {
  case KL_BOOL: case KL_I8: case KL_U8: return 1;
  case KL_I16: case KL_U16: case KL_F16: case KL_BF16: return 2;
  case KL_I32: case KL_U32: case KL_F32: return 4;
  case KL_I64: case KL_U64: case KL_F64: return 8;
  default: return 0;
  }
}

/* ------------------------------------------------------- library loading */

/* Every routine is called through its Fortran entry point: all arguments by
 * reference, so one pointer type serves both precisions of a kind and both
 * integer widths (integers live in a `bint` written at the width the library
 * uses); complex routines that take extra real workspace (rwork) have their
 * own types. Character arguments are followed by their hidden lengths
 * (gfortran ABI); routines written in C ignore the extra arguments. */
typedef void (*gemm_fn)(const char *, const char *, void *, void *, void *,
                        const void *, const void *, void *, const void *,
                        void *, const void *, void *, void *, size_t, size_t);
typedef int64_t (*isamax_fn)(void *, const void *, void *);

/* The real routines a library must have to end the search (a complete
 * LAPACK). The complex ones are not required: without them only complex calls
 * fail (lapack_begin in lapack.c says why); neither is gees, so a library
 * without it still serves everything but kl_hostla_schur. */
#define LAPACK_MASK                                                            \
  ((1u << R_POTRF) | (1u << R_GETRF) | (1u << R_GEQRF) | (1u << R_ORGQR) |     \
   (1u << R_SYEVD) | (1u << R_GESDD) | (1u << R_GESVD) | (1u << R_TRSM) |      \
   (1u << R_GEEV))

/* Symbol spellings: plain LP64 Fortran, OpenBLAS's INTERFACE64 suffix, and
 * NumPy's scipy-openblas (ILP64, prefixed so it can share a process with
 * another BLAS). The integer width is probed, not inferred from the name. */
static const struct { const char *prefix, *suffix; } schemes[] = {
    {"", "_"}, {"", "_64_"}, {"scipy_", "_64_"}, {"scipy_", "_"}};

kl_hostla_state kl_hostla_lib; /* see hostla_lib.h */

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t paths_mu = PTHREAD_MUTEX_INITIALIZER;
static char **extra_paths; /* owned; freed once the search has run */
static size_t n_extra;
static int search_started; /* guarded by paths_mu */

int kl_hostla_add_search_path(const char *path) {
  int rc = -1;
  pthread_mutex_lock(&paths_mu);
  if (!search_started && path) {
    char *copy = strdup(path);
    char **grown = copy ? realloc(extra_paths, (n_extra + 1) * sizeof *grown)
                        : NULL;
    if (grown) {
      extra_paths = grown;
      extra_paths[n_extra++] = copy;
      rc = 0;
    } else {
      free(copy);
    }
  }
  pthread_mutex_unlock(&paths_mu);
  return rc;
}

static void *find_sym(void *h1, void *h2, int scheme, const char *base) {
  char buf[96];
  snprintf(buf, sizeof buf, "%s%s%s", schemes[scheme].prefix, base,
           schemes[scheme].suffix);
  void *p = h1 ? dlsym(h1, buf) : NULL;
  if (!p && h2) p = dlsym(h2, buf);
  return p;
}

/* Integer width by experiment: isamax with n stored as the 64-bit value
 * 0xffffffff00000003. An LP64 library reads the low word (little endian),
 * n = 3, and answers 3; an ILP64 one sees n < 0 and answers 0. */
static int probe_bits(void *isamax, int scheme) {
  if (!isamax) return strstr(schemes[scheme].suffix, "64") ? 64 : 32;
  uint64_t n = 0xffffffff00000003ull, inc = 1;
  float x[3] = {1.0f, 2.0f, 3.0f};
  int64_t r = ((isamax_fn)isamax)(&n, x, &inc);
  return (int32_t)r == 3 ? 32 : 64;
}

/* Opens blas (and lapack, if given) and fills lib when sgemm and dgemm
 * resolve under some scheme. Returns 2 with LAPACK complete, 1 with the BLAS
 * only, 0 (handles closed) when unusable. Does not overwrite a previously
 * accepted BLAS-only library unless this one is complete. */
static int try_library(const char *blas, const char *lapack) {
  void *h = dlopen(blas, RTLD_NOW | RTLD_LOCAL);
  if (!h) return 0;
  void *hl = lapack ? dlopen(lapack, RTLD_NOW | RTLD_LOCAL) : NULL;
  for (int s = 0; s < (int)(sizeof schemes / sizeof schemes[0]); s++) {
    if (!find_sym(h, NULL, s, "sgemm") || !find_sym(h, NULL, s, "dgemm"))
      continue;
    void *fn[P_COUNT][R_COUNT];
    int complete = 1; /* over the real routines: without the complex ones,
                         only complex calls fail (lapack_begin says why) */
    for (int p = 0; p < P_COUNT; p++)
      for (int r = 0; r < R_COUNT; r++) {
        char base[32];
        snprintf(base, sizeof base, "%c%s", prec_letter[p],
                 routine_names[r][p >> 1]);
        fn[p][r] = find_sym(h, hl, s, base);
        if (!fn[p][r] && p < 2 && ((LAPACK_MASK >> r) & 1)) complete = 0;
      }
    if (kl_hostla_lib.loaded && !complete) break; /* keep the earlier BLAS-only find */
    memcpy(kl_hostla_lib.fn, fn, sizeof fn);
    kl_hostla_lib.bits = probe_bits(find_sym(h, hl, s, "isamax"), s);
    kl_hostla_lib.loaded = 1;
    static const char *const setters[][2] = {{"openblas_set_num_threads", "openblas_get_num_threads"},
                                             {"scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"},
                                             {"openblas_set_num_threads64_", "openblas_get_num_threads64_"}};
    kl_hostla_lib.set_threads = NULL;
    kl_hostla_lib.get_threads = NULL;
    for (int i = 0; i < 3 && !kl_hostla_lib.set_threads; i++) {
      *(void **)&kl_hostla_lib.set_threads = dlsym(h, setters[i][0]);
      *(void **)&kl_hostla_lib.get_threads = dlsym(h, setters[i][1]);
      if (!kl_hostla_lib.get_threads) kl_hostla_lib.set_threads = NULL;
    }
    if (lapack)
      snprintf(kl_hostla_lib.name, sizeof kl_hostla_lib.name, "%s + %s", blas, lapack);
    else
      snprintf(kl_hostla_lib.name, sizeof kl_hostla_lib.name, "%s", blas);
    return complete ? 2 : 1;
  }
  dlclose(h);
  if (hl) dlclose(hl);
  return 0;
}

static void load_library(void) {
  pthread_mutex_lock(&paths_mu);
  search_started = 1;
  pthread_mutex_unlock(&paths_mu);
  snprintf(kl_hostla_lib.name, sizeof kl_hostla_lib.name, "none");
  const char *drv = getenv("KILN_SVD_DRIVER");
  kl_hostla_lib.force_gesvd = drv && strcmp(drv, "gesvd") == 0;

  const char *env = getenv("KILN_BLAS_LIB");
  int found = 0;
  if (env && strcmp(env, "none") == 0) goto done;
  if (env && *env) {
    found = try_library(env, getenv("KILN_LAPACK_LIB"));
    if (!found)
      fprintf(stderr, "kiln: KILN_BLAS_LIB=%s could not be opened or has no "
              "sgemm/dgemm; searching the default libraries\n", env);
  }
  static const char *const standard[][2] = {
      {"libopenblas.so.0", NULL}, {"libopenblas.so", NULL},
      {"libblas.so.3", "liblapack.so.3"}, {"libmkl_rt.so.2", NULL},
      {"libmkl_rt.so", NULL}};
  for (size_t i = 0; found < 2 && i < sizeof standard / sizeof standard[0];
       i++) {
    int r = try_library(standard[i][0], standard[i][1]);
    if (r > found) found = r;
  }
  for (size_t i = 0; found < 2 && i < n_extra; i++) {
    int r = try_library(extra_paths[i], NULL);
    if (r > found) found = r;
  }
done:
  for (size_t i = 0; i < n_extra; i++) free(extra_paths[i]);
  free(extra_paths);
  extra_paths = NULL;
  n_extra = 0;
}

static void ensure_loaded(void) { pthread_once(&load_once, load_library); }

int kl_hostla_available(void) {
  ensure_loaded();
  return kl_hostla_lib.loaded;
}

const char *kl_hostla_library(void) {
  ensure_loaded();
  return kl_hostla_lib.name;
}

int kl_hostla_index_bits(void) {
  ensure_loaded();
  return kl_hostla_lib.loaded ? kl_hostla_lib.bits : 0;
}

int kl_hostla_lapack_available(void) {
  ensure_loaded();
  if (!kl_hostla_lib.loaded) return 0;
  for (int r = 0; r < R_COUNT; r++)
    if (((LAPACK_MASK >> r) & 1) && (!kl_hostla_lib.fn[0][r] || !kl_hostla_lib.fn[1][r]))
      return 0;
  return 1;
}


/* ------------------------------------------------- element-wise helpers */

/* f16/bf16 <-> f32, round to nearest even, NaN stays NaN (quiet). */
static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu,
           mant = h & 0x3ffu, bits;
  float f;
  if (e == 0) { /* zero or subnormal: mant * 2^-24 is exact in float */
    f = (float)mant * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  if (e == 31) bits = sign | 0x7f800000u | (mant << 13);
  else bits = sign | ((e + 112) << 23) | (mant << 13);
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: inf */
  if (ax < 0x38800000u) { /* below 2^-14: half subnormal; 0.5f has ulp 2^-24,
                              so the FPU's own rounding gives the result */
    float v;
    memcpy(&v, &ax, 4);
    v += 0.5f;
    uint32_t vb;
    memcpy(&vb, &v, 4);
    return (uint16_t)(sign | (vb - 0x3f000000u));
  }
  ax -= 112u << 23; /* rebias exponent 127 -> 15 */
  ax += 0xfffu + ((ax >> 13) & 1u);
  return (uint16_t)(sign | (ax >> 13));
}

static float bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static void half_to_f32(kl_dtype t, const uint16_t *src, float *dst,
                        int64_t count) {
  if (t == KL_F16)
    for (int64_t i = 0; i < count; i++) dst[i] = f16_to_f32(src[i]);
  else
    for (int64_t i = 0; i < count; i++) dst[i] = bf16_to_f32(src[i]);
}

static void f32_to_half(kl_dtype t, const float *src, uint16_t *dst,
                        int64_t count) {
  if (t == KL_F16)
    for (int64_t i = 0; i < count; i++) dst[i] = f32_to_f16(src[i]);
  else
    for (int64_t i = 0; i < count; i++) dst[i] = f32_to_bf16(src[i]);
}

/* ------------------------------------------------------------ C kernels */

/* C (m x n) = A (m x k) @ B (k x n), row-major, contiguous. Products are
 * formed in ACC: unsigned types for the integers, so they wrap modulo 2^bits
 * exactly as two's complement does, with no signed overflow. Loop order
 * i-p-j keeps the inner loop streaming over rows of B and C (vectorizable);
 * the blocks keep a panel of B in L2 and a stretch of C's row in L1. */
enum { BLK_M = 64, BLK_K = 128, BLK_N = 256 };
#define DEFINE_MATMUL(NAME, T, ACC)                                            \
  static void NAME(int64_t m, int64_t n, int64_t k, const void *a_,            \
                   const void *b_, void *c_) {                                 \
    const T *a = a_, *b = b_;                                                  \
    T *c = c_;                                                                 \
    memset(c, 0, (size_t)(m * n) * sizeof(T));                                 \
    for (int64_t i0 = 0; i0 < m; i0 += BLK_M)                                  \
      for (int64_t p0 = 0; p0 < k; p0 += BLK_K)                                \
        for (int64_t j0 = 0; j0 < n; j0 += BLK_N) {                            \
          int64_t i1 = i0 + BLK_M < m ? i0 + BLK_M : m;                        \
          int64_t p1 = p0 + BLK_K < k ? p0 + BLK_K : k;                        \
          int64_t j1 = j0 + BLK_N < n ? j0 + BLK_N : n;                        \
          for (int64_t i = i0; i < i1; i++) {                                  \
            T *crow = c + i * n;                                               \
            for (int64_t p = p0; p < p1; p++) {                                \
              ACC av = (ACC)a[i * k + p];                                      \
              const T *brow = b + p * n;                                       \
              for (int64_t j = j0; j < j1; j++)                                \
                crow[j] = (T)((ACC)crow[j] + av * (ACC)brow[j]);               \
            }                                                                  \
          }                                                                    \
        }                                                                      \
  }
DEFINE_MATMUL(matmul_u8, uint8_t, unsigned)
DEFINE_MATMUL(matmul_u16, uint16_t, unsigned)
DEFINE_MATMUL(matmul_u32, uint32_t, uint32_t)
DEFINE_MATMUL(matmul_u64, uint64_t, uint64_t)
DEFINE_MATMUL(matmul_f32, float, float)
DEFINE_MATMUL(matmul_f64, double, double)

/* Boolean matmul: C[i,j] = OR_p (A[i,p] AND B[p,j]); any nonzero byte is
 * true, results are 0 or 1. */
static void matmul_bool(int64_t m, int64_t n, int64_t k, const void *a_,
                        const void *b_, void *c_) {
  const uint8_t *a = a_, *b = b_;
  uint8_t *c = c_;
  memset(c, 0, (size_t)(m * n));
  for (int64_t p0 = 0; p0 < k; p0 += BLK_K)
    for (int64_t i = 0; i < m; i++) {
      int64_t p1 = p0 + BLK_K < k ? p0 + BLK_K : k;
      uint8_t *crow = c + i * n;
      for (int64_t p = p0; p < p1; p++) {
        if (!a[i * k + p]) continue;
        const uint8_t *brow = b + p * n;
        for (int64_t j = 0; j < n; j++) crow[j] |= (uint8_t)(brow[j] != 0);
      }
    }
}

typedef void (*matmul_fn)(int64_t, int64_t, int64_t, const void *,
                          const void *, void *);

static matmul_fn matmul_kernel(kl_dtype t) {
  switch (t) {
  case KL_BOOL: return matmul_bool;
  case KL_I8: case KL_U8: return matmul_u8;
  case KL_I16: case KL_U16: return matmul_u16;
  case KL_I32: case KL_U32: return matmul_u32;
  case KL_I64: case KL_U64: return matmul_u64;
  case KL_F32: return matmul_f32;
  case KL_F64: return matmul_f64;
  default: return NULL; /* f16/bf16 go through f32 */
  }
}

/* ----------------------------------------------------------------- gemm */

static int blas_gemm_usable(kl_dtype t) {
  return (t == KL_F32 || t == KL_F64) && kl_hostla_lib.loaded;
}

/* One BLAS product with explicit leading dimensions: rows [0, m) of row-major C (ldc) =
 * op(A) (lda) @ op(B) (ldb), through the column-major C^T = op(B)^T op(A)^T. */
static void gemm_ld_beta(kl_dtype t, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, int transa,
                         const void *b, int64_t ldb, int transb, double beta, void *c, int64_t ldc) {
  int d = t == KL_F64;
  const double one_d = 1.0, zero_d = beta;
  const float one_f = 1.0f, zero_f = (float)beta;
  bint sm, sn, sk, slda, sldb, sldc;
  void *f = kl_hostla_lib.fn[d][R_GEMM];
  ((gemm_fn)f)(transb ? "T" : "N", transa ? "T" : "N", bi(&sm, n), bi(&sn, m), bi(&sk, k),
               d ? (const void *)&one_d : (const void *)&one_f, b, bi(&sldb, ldb), a,
               bi(&slda, lda), d ? (const void *)&zero_d : (const void *)&zero_f, c,
               bi(&sldc, ldc), 1, 1);
}

static void gemm_ld(kl_dtype t, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, int transa,
                    const void *b, int64_t ldb, int transb, void *c, int64_t ldc) {
  gemm_ld_beta(t, m, n, k, a, lda, transa, b, ldb, transb, 0.0, c, ldc);
}

/* One product C = op(A) @ op(B), m, n, k > 0, in a dtype matmul_kernel
 * serves. ta/tb: scratch of m*k / k*n elements, needed (and only used) when
 * the C kernel runs with transa / transb. Row-major C is column-major C^T,
 * and C^T = op(B)^T op(A)^T, so the BLAS gets B first with the same flags. */
static void gemm_one(kl_dtype t, int64_t m, int64_t n, int64_t k,
                     const void *a, int transa, const void *b, int transb,
                     void *c, void *ta, void *tb) {
  if (blas_gemm_usable(t)) {
    gemm_ld(t, m, n, k, a, transa ? m : k, transa, b, transb ? k : n, transb, c, n);
    return;
  }
  size_t esz = elem_size(t);
  if (transa) { transpose(a, ta, k, m, esz); a = ta; }
  if (transb) { transpose(b, tb, n, k, esz); b = tb; }
  matmul_kernel(t)(m, n, k, a, b, c);
}

/* A batch of products split into units (batch elements, or blocks of rows of C) that the CPU
 * pool's threads compute with a single-threaded BLAS each. */
typedef struct {
  kl_dtype t;
  int64_t m, n, k, a_bstride, b_bstride, parts, rows; /* rows: of C per unit (or columns, by_cols) */
  int by_cols;
  const char *a, *b;
  char *c;
  int transa, transb;
  size_t esz;
} gemm_split;

static void gemm_units(void *ctx, int64_t lo, int64_t hi) {
  const gemm_split *g = ctx;
  for (int64_t u = lo; u < hi; u++) {
    int64_t bb = u / g->parts, r0 = (u % g->parts) * g->rows, r1 = r0 + g->rows;
    if (r1 > (g->by_cols ? g->n : g->m)) r1 = g->by_cols ? g->n : g->m;
    if (r0 >= r1) continue;
    const char *a = g->a + (size_t)(bb * g->a_bstride) * g->esz;
    const char *b = g->b + (size_t)(bb * g->b_bstride) * g->esz;
    char *c = g->c + (size_t)(bb * g->m * g->n) * g->esz;
    int64_t lda = g->transa ? g->m : g->k, ldb = g->transb ? g->k : g->n;
    if (g->by_cols) /* columns r0..r1 of C: the same columns of op(B) */
      gemm_ld(g->t, g->m, r1 - r0, g->k, a, lda, g->transa, b + (size_t)(g->transb ? r0 * g->k : r0) * g->esz, ldb,
              g->transb, c + (size_t)r0 * g->esz, g->n);
    else /* rows r0..r1 of C: the same rows of op(A) */
      gemm_ld(g->t, r1 - r0, g->n, g->k, a + (size_t)(g->transa ? r0 : r0 * g->k) * g->esz, lda, g->transa, b, ldb,
              g->transb, c + (size_t)(r0 * g->n) * g->esz, g->n);
  }
}

/* Medium products run on kiln's CPU pool, each thread with a single-threaded BLAS on its own
 * rows or batch elements: OpenBLAS's own threads wake per call and then spin in sched_yield,
 * taking cores from the kernels that run between products (a transformer step on 2 cores spent
 * 17% of its time there). Large products keep the BLAS's threading (its packed operands are
 * shared between its threads). */
static int gemm_on_pool(kl_dtype t, int64_t batch, int64_t m, int64_t n, int64_t k, const void *a,
                        int64_t a_bstride, int transa, const void *b, int64_t b_bstride, int transb, void *c) {
  static int off = -1; /* KILN_BLAS_POOL=0: the BLAS's own threads for every product (comparisons) */
  if (off < 0) off = getenv("KILN_BLAS_POOL") && *getenv("KILN_BLAS_POOL") == '0';
  int nt = off ? 1 : kl_rt_num_threads();
  double macs = (double)batch * (double)m * (double)n * (double)k;
  if (nt < 2 || !kl_hostla_lib.set_threads || macs < 2097152.0 || macs > 536870912.0) return 0;
  /* each unit packs its share of one operand and all of the other: split the rows of C when
   * op(B) is the smaller operand, its columns otherwise */
  int by_cols = n > m;
  /* up to 4 units per thread (blocks of at least 32): a thread that wakes late still finds work,
   * rather than the caller computing everything alone */
  int64_t len = by_cols ? n : m, parts = batch >= 4 * nt ? 1 : (4 * nt + batch - 1) / batch;
  if (parts > len / 32) parts = len / 32 > 1 ? len / 32 : 1;
  if (batch * parts < 2) return 0;
  gemm_split g = {t, m, n, k, a_bstride, b_bstride, parts, (len + parts - 1) / parts, by_cols, a, b, c, transa,
                  transb, elem_size(t)};
  int saved = kl_hostla_lib.get_threads();
  if (saved > 1) kl_hostla_lib.set_threads(1);
  kl_rt_parallel_for(batch * parts, gemm_units, &g);
  if (saved > 1) kl_hostla_lib.set_threads(saved);
  return 1;
}

int kl_hostla_gemm(kl_dtype t, int64_t batch, int64_t m, int64_t n, int64_t k,
                   const void *a, int64_t a_bstride, int transa,
                   const void *b, int64_t b_bstride, int transb, void *c,
                   char *err, size_t errlen) {
  return kl_hostla_gemm_to(t, t, batch, m, n, k, a, a_bstride, transa, b, b_bstride, transb, c, err, errlen);
}

int kl_hostla_gemm_to(kl_dtype t, kl_dtype ot, int64_t batch, int64_t m, int64_t n, int64_t k,
                      const void *a, int64_t a_bstride, int transa,
                      const void *b, int64_t b_bstride, int transb, void *c,
                      char *err, size_t errlen) {
  const char *who = "kl_hostla_gemm";
  size_t esz = elem_size(t);
  if (!esz) return fail(err, errlen, KL_ERR_INTERNAL, "%s: invalid dtype code %d", who, (int)t);
  int to_f32 = ot != t; /* float16/bfloat16 operands, float32 result */
  if (to_f32 && !((t == KL_F16 || t == KL_BF16) && ot == KL_F32))
    return fail(err, errlen, KL_ERR_INTERNAL, "%s: %s operands into a %s result", who, dtype_label(t), dtype_label(ot));
  size_t osz = elem_size(ot);
  if (batch < 0 || m < 0 || n < 0 || k < 0 || a_bstride < 0 || b_bstride < 0)
    return fail(err, errlen, KL_ERR_INTERNAL,
                "%s: negative size (batch=%lld m=%lld n=%lld k=%lld "
                "a_bstride=%lld b_bstride=%lld)", who, (long long)batch,
                (long long)m, (long long)n, (long long)k,
                (long long)a_bstride, (long long)b_bstride);
  if (batch == 0 || m == 0 || n == 0) return 0;
  if (!c || (k > 0 && (!a || !b)))
    return fail(err, errlen, KL_ERR_INTERNAL, "%s: NULL array pointer", who);
  if (k == 0) { /* empty sum: all zeros (false, 0, +0.0 share the bits) */
    memset(c, 0, (size_t)(batch * m * n) * osz);
    return 0;
  }
  ensure_loaded();
  int half = t == KL_F16 || t == KL_BF16;
  kl_dtype wt = half ? KL_F32 : t; /* the type the product runs in */
  if (blas_gemm_usable(wt) && !(fits(m) && fits(n) && fits(k)))
    return fail(err, errlen, KL_ERR_INTERNAL, "%s: dimensions m=%lld n=%lld k=%lld exceed the "
                "32-bit BLAS integer range of %s", who, (long long)m,
                (long long)n, (long long)k, kl_hostla_lib.name);
  if (!half && blas_gemm_usable(t) && gemm_on_pool(t, batch, m, n, k, a, a_bstride, transa, b, b_bstride, transb, c))
    return 0;
  size_t wsz = elem_size(wt);
  int need_ta = transa && !blas_gemm_usable(wt);
  int need_tb = transb && !blas_gemm_usable(wt);
  void *ta = need_ta ? malloc((size_t)(m * k) * wsz) : NULL;
  void *tb = need_tb ? malloc((size_t)(k * n) * wsz) : NULL;
  float *fa = half ? malloc((size_t)(m * k) * 4) : NULL;
  float *fb = half ? malloc((size_t)(k * n) * 4) : NULL;
  float *fc = half && !to_f32 ? malloc((size_t)(m * n) * 4) : NULL;
  int rc = 0;
  if ((need_ta && !ta) || (need_tb && !tb) || (half && (!fa || !fb || (!to_f32 && !fc)))) {
    rc = fail(err, errlen, KL_ERR_NOMEM, "%s: out of memory for %s scratch (m=%lld n=%lld "
              "k=%lld)", who, dtype_label(t), (long long)m, (long long)n,
              (long long)k);
    goto out;
  }
  /* Small products run on one thread: OpenBLAS's threads cost more than they save below a few
   * million multiply-adds (a 10x100x150 product: 24 us threaded, 17 us single-threaded).
   * Library calls run one at a time, so switching the global setting is safe. */
  int saved_threads = 0;
  if ((double)batch * (double)m * (double)n * (double)k < 2097152.0 && kl_hostla_lib.set_threads &&
      (saved_threads = kl_hostla_lib.get_threads()) > 1)
    kl_hostla_lib.set_threads(1);
  else
    saved_threads = 0;
  for (int64_t bb = 0; bb < batch; bb++) {
    const char *ab = (const char *)a + (size_t)(bb * a_bstride) * esz;
    const char *bp = (const char *)b + (size_t)(bb * b_bstride) * esz;
    char *cb = (char *)c + (size_t)(bb * m * n) * osz;
    if (!half) {
      gemm_one(t, m, n, k, ab, transa, bp, transb, cb, ta, tb);
      continue;
    }
    if (bb == 0 || a_bstride) half_to_f32(t, (const uint16_t *)ab, fa, m * k);
    if (bb == 0 || b_bstride) half_to_f32(t, (const uint16_t *)bp, fb, k * n);
    gemm_one(KL_F32, m, n, k, fa, transa, fb, transb, to_f32 ? (float *)cb : fc, ta, tb);
    if (!to_f32) f32_to_half(t, fc, (uint16_t *)cb, m * n);
  }
  if (saved_threads) kl_hostla_lib.set_threads(saved_threads);
out:
  free(ta); free(tb); free(fa); free(fb); free(fc);
  return rc;
}

/* ----------------------------------------------- products of other routines (hostconv.c) */

#define DEFINE_GEMM_LD_C(NAME, T)                                                                        \
  static void NAME(int64_t m, int64_t n, int64_t k, const T *a, int64_t lda, int transa, const T *b,     \
                   int64_t ldb, int transb, double beta, T *c, int64_t ldc) {                            \
    for (int64_t i = 0; i < m; i++) {                                                                    \
      T *crow = c + i * ldc;                                                                             \
      for (int64_t j = 0; j < n; j++) crow[j] = beta == 0 ? (T)0 : (T)(beta * crow[j]);                  \
      for (int64_t p = 0; p < k; p++) {                                                                  \
        T av = transa ? a[p * lda + i] : a[i * lda + p];                                                 \
        if (transb)                                                                                      \
          for (int64_t j = 0; j < n; j++) crow[j] += av * b[j * ldb + p];                                \
        else                                                                                             \
          for (int64_t j = 0; j < n; j++) crow[j] += av * b[p * ldb + j];                                \
      }                                                                                                  \
    }                                                                                                    \
  }
DEFINE_GEMM_LD_C(gemm_ld_c_f32, float)
DEFINE_GEMM_LD_C(gemm_ld_c_f64, double)
#undef DEFINE_GEMM_LD_C

int kl_hostla_gemm_ld(kl_dtype t, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, int transa,
                      const void *b, int64_t ldb, int transb, double beta, void *c, int64_t ldc, char *err,
                      size_t errlen) {
  if (t != KL_F32 && t != KL_F64)
    return fail(err, errlen, KL_ERR_INTERNAL, "kl_hostla_gemm_ld: float32 or float64 only, got %s", dtype_label(t));
  if (m <= 0 || n <= 0) return 0;
  ensure_loaded();
  if (k > 0 && blas_gemm_usable(t)) {
    if (!(fits(m) && fits(n) && fits(k) && fits(lda) && fits(ldb) && fits(ldc)))
      return fail(err, errlen, KL_ERR_INTERNAL, "kl_hostla_gemm_ld: m=%lld n=%lld k=%lld exceed the 32-bit BLAS "
                  "integer range of %s", (long long)m, (long long)n, (long long)k, kl_hostla_lib.name);
    gemm_ld_beta(t, m, n, k, a, lda, transa, b, ldb, transb, beta, c, ldc);
  } else if (t == KL_F32) {
    gemm_ld_c_f32(m, n, k, a, lda, transa, b, ldb, transb, beta, c, ldc);
  } else {
    gemm_ld_c_f64(m, n, k, a, lda, transa, b, ldb, transb, beta, c, ldc);
  }
  return 0;
}

int kl_hostla_blas_serial_begin(void) {
  ensure_loaded();
  int saved = kl_hostla_lib.set_threads ? kl_hostla_lib.get_threads() : 0;
  if (saved > 1) kl_hostla_lib.set_threads(1);
  return saved;
}

void kl_hostla_blas_serial_end(int saved) {
  if (saved > 1 && kl_hostla_lib.set_threads) kl_hostla_lib.set_threads(saved);
}

void kl_hostla_half_to_f32(kl_dtype t, const void *src, float *dst, int64_t n) { half_to_f32(t, src, dst, n); }
void kl_hostla_f32_to_half(kl_dtype t, const float *src, void *dst, int64_t n) { f32_to_half(t, src, dst, n); }
