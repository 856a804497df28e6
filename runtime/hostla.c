/* hostla.c: host-side dense linear algebra (see hostla.h): a BLAS/LAPACK
 * found at run time with dlopen, the row-major <-> column-major bookkeeping
 * around it, and plain C kernels for the dtypes (and machines) it cannot
 * serve. Must not depend on Python, MLIR or CUDA, nor link to any BLAS. */
#define _POSIX_C_SOURCE 200809L
#include "hostla.h"
#include "runtime.h"

#include "../ir/status.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- errors */

/* The message and its status (ir/status.h); returns 1, the routines' failure code. */
static int fail(char *err, size_t errlen, kl_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kl_verror(err, errlen, status, fmt, ap);
  va_end(ap);
  return 1;
}

/* Local copies of dtype facts: ir/dtype.c is another module and may not be
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

static const char *dtype_label(kl_dtype t) {
  static const char *const names[KL_NDTYPES] = {
      "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
      "uint32", "uint64", "float16", "bfloat16", "float32", "float64", "complex64", "complex128"};
  return (unsigned)t < KL_NDTYPES ? names[t] : "invalid dtype";
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
typedef void (*trsm_fn)(const char *, const char *, const char *, const char *,
                        void *, void *, const void *, const void *, void *,
                        void *, void *, size_t, size_t, size_t, size_t);
typedef void (*potrf_fn)(const char *, void *, void *, void *, void *, size_t);
typedef void (*getrf_fn)(void *, void *, void *, void *, void *, void *);
typedef void (*geqrf_fn)(void *, void *, void *, void *, void *, void *,
                         void *, void *);
typedef void (*orgqr_fn)(void *, void *, void *, void *, void *, void *,
                         void *, void *, void *); /* also ungqr */
typedef void (*syevd_fn)(const char *, const char *, void *, void *, void *,
                         void *, void *, void *, void *, void *, void *,
                         size_t, size_t);
typedef void (*heevd_fn)(const char *, const char *, void *, void *, void *,
                         void *, void *, void *, void *, void *, void *,
                         void *, void *, size_t, size_t);
typedef void (*gesdd_fn)(const char *, void *, void *, void *, void *, void *,
                         void *, void *, void *, void *, void *, void *,
                         void *, void *, size_t);
typedef void (*cgesdd_fn)(const char *, void *, void *, void *, void *, void *,
                          void *, void *, void *, void *, void *, void *,
                          void *, void *, void *, size_t);
typedef void (*gesvd_fn)(const char *, const char *, void *, void *, void *,
                         void *, void *, void *, void *, void *, void *,
                         void *, void *, void *, size_t, size_t);
typedef void (*cgesvd_fn)(const char *, const char *, void *, void *, void *,
                          void *, void *, void *, void *, void *, void *,
                          void *, void *, void *, void *, size_t, size_t);
typedef void (*geev_fn)(const char *, const char *, void *, void *, void *,
                        void *, void *, void *, void *, void *, void *,
                        void *, void *, void *, size_t, size_t); /* also cgeev */
typedef int64_t (*isamax_fn)(void *, const void *, void *);

enum { R_GEMM, R_TRSM, R_POTRF, R_GETRF, R_GEQRF, R_ORGQR, R_SYEVD, R_GESDD,
       R_GESVD, R_GEEV, R_COUNT };
/* Precisions, the index of lib.fn: 0 s (f32), 1 d (f64), 2 c (c64), 3 z
 * (c128); bit 0 is double, bit 1 complex. */
enum { P_COUNT = 4 };
static const char prec_letter[P_COUNT + 1] = "sdcz";
/* Base names, [routine][complex]: the complex counterparts of the orthogonal
 * and symmetric routines are the unitary and Hermitian ones. */
static const char *const routine_names[R_COUNT][2] = {
    {"gemm", "gemm"},   {"trsm", "trsm"},   {"potrf", "potrf"},
    {"getrf", "getrf"}, {"geqrf", "geqrf"}, {"orgqr", "ungqr"},
    {"syevd", "heevd"}, {"gesdd", "gesdd"}, {"gesvd", "gesvd"},
    {"geev", "geev"}};
#define LAPACK_MASK                                                            \
  ((1u << R_POTRF) | (1u << R_GETRF) | (1u << R_GEQRF) | (1u << R_ORGQR) |     \
   (1u << R_SYEVD) | (1u << R_GESDD) | (1u << R_GESVD) | (1u << R_TRSM) |      \
   (1u << R_GEEV))

/* Symbol spellings: plain LP64 Fortran, OpenBLAS's INTERFACE64 suffix, and
 * NumPy's scipy-openblas (ILP64, prefixed so it can share a process with
 * another BLAS). The integer width is probed, not inferred from the name. */
static const struct { const char *prefix, *suffix; } schemes[] = {
    {"", "_"}, {"", "_64_"}, {"scipy_", "_64_"}, {"scipy_", "_"}};

static struct {
  int loaded;                /* a BLAS with sgemm and dgemm was found */
  int bits;                  /* 32 or 64: width of BLAS/LAPACK integers */
  void *fn[P_COUNT][R_COUNT]; /* [precision][routine]; NULL = missing */
  char name[512];            /* what was dlopen'ed, for kl_hostla_library */
  int force_gesvd;           /* KILN_SVD_DRIVER=gesvd: skip gesdd (debug) */
  void (*set_threads)(int);  /* OpenBLAS's thread control, or NULL */
  int (*get_threads)(void);
} lib;

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
    if (lib.loaded && !complete) break; /* keep the earlier BLAS-only find */
    memcpy(lib.fn, fn, sizeof fn);
    lib.bits = probe_bits(find_sym(h, hl, s, "isamax"), s);
    lib.loaded = 1;
    static const char *const setters[][2] = {{"openblas_set_num_threads", "openblas_get_num_threads"},
                                             {"scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"},
                                             {"openblas_set_num_threads64_", "openblas_get_num_threads64_"}};
    lib.set_threads = NULL;
    lib.get_threads = NULL;
    for (int i = 0; i < 3 && !lib.set_threads; i++) {
      *(void **)&lib.set_threads = dlsym(h, setters[i][0]);
      *(void **)&lib.get_threads = dlsym(h, setters[i][1]);
      if (!lib.get_threads) lib.set_threads = NULL;
    }
    if (lapack)
      snprintf(lib.name, sizeof lib.name, "%s + %s", blas, lapack);
    else
      snprintf(lib.name, sizeof lib.name, "%s", blas);
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
  snprintf(lib.name, sizeof lib.name, "none");
  const char *drv = getenv("KILN_SVD_DRIVER");
  lib.force_gesvd = drv && strcmp(drv, "gesvd") == 0;

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
  return lib.loaded;
}

const char *kl_hostla_library(void) {
  ensure_loaded();
  return lib.name;
}

int kl_hostla_index_bits(void) {
  ensure_loaded();
  return lib.loaded ? lib.bits : 0;
}

int kl_hostla_lapack_available(void) {
  ensure_loaded();
  if (!lib.loaded) return 0;
  for (int r = 0; r < R_COUNT; r++)
    if (((LAPACK_MASK >> r) & 1) && (!lib.fn[0][r] || !lib.fn[1][r]))
      return 0;
  return 1;
}

/* A BLAS/LAPACK integer argument, stored at the library's width. */
typedef union { int32_t i32; int64_t i64; } bint;

static void *bi(bint *slot, int64_t v) {
  if (lib.bits == 64) slot->i64 = v;
  else slot->i32 = (int32_t)v;
  return slot;
}

static int64_t bget(const bint *slot) {
  return lib.bits == 64 ? slot->i64 : slot->i32;
}

static int64_t bget_at(const void *arr, int64_t i) {
  return lib.bits == 64 ? ((const int64_t *)arr)[i]
                        : ((const int32_t *)arr)[i];
}

/* Whether v can be passed as a BLAS integer. */
static int fits(int64_t v) { return lib.bits == 64 || v <= INT32_MAX; }

/* ------------------------------------------------- element-wise helpers */

#define DEFINE_TRANSPOSE(NAME, T)                                              \
  static void NAME(const void *src_, void *dst_, int64_t rows,                 \
                   int64_t cols) {                                             \
    const T *src = src_;                                                       \
    T *dst = dst_;                                                             \
    for (int64_t r0 = 0; r0 < rows; r0 += 32)                                  \
      for (int64_t c0 = 0; c0 < cols; c0 += 32) {                              \
        int64_t r1 = r0 + 32 < rows ? r0 + 32 : rows;                          \
        int64_t c1 = c0 + 32 < cols ? c0 + 32 : cols;                          \
        for (int64_t r = r0; r < r1; r++)                                      \
          for (int64_t c = c0; c < c1; c++) dst[c * rows + r] = src[r * cols + c]; \
      }                                                                        \
  }
DEFINE_TRANSPOSE(transpose8, uint8_t)
DEFINE_TRANSPOSE(transpose16, uint16_t)
DEFINE_TRANSPOSE(transpose32, uint32_t)
DEFINE_TRANSPOSE(transpose64, uint64_t)
typedef struct { uint64_t half[2]; } bytes16; /* one complex128 */
DEFINE_TRANSPOSE(transpose128, bytes16)

/* dst (cols x rows) = transpose of src (rows x cols), both row-major; a plain
 * transpose for complex elements too (no conjugation). */
static void transpose(const void *src, void *dst, int64_t rows, int64_t cols,
                      size_t esz) {
  switch (esz) {
  case 1: transpose8(src, dst, rows, cols); break;
  case 2: transpose16(src, dst, rows, cols); break;
  case 4: transpose32(src, dst, rows, cols); break;
  case 8: transpose64(src, dst, rows, cols); break;
  default: transpose128(src, dst, rows, cols); break;
  }
}

static void fill_nan(void *p, int64_t count, int dbl) {
  for (int64_t i = 0; i < count; i++) {
    if (dbl) ((double *)p)[i] = NAN;
    else ((float *)p)[i] = NAN;
  }
}

static int has_nonfinite(const void *p, int64_t count, int dbl) {
  for (int64_t i = 0; i < count; i++)
    if (dbl ? !isfinite(((const double *)p)[i])
            : !isfinite(((const float *)p)[i]))
      return 1;
  return 0;
}

/* rows x cols matrix with ones on the diagonal; cx: complex elements. */
static void fill_eye(void *p, int64_t rows, int64_t cols, int dbl, int cx) {
  size_t esz = (size_t)(dbl ? 8 : 4) << cx;
  memset(p, 0, (size_t)(rows * cols) * esz);
  for (int64_t i = 0; i < rows && i < cols; i++) {
    if (dbl) ((double *)p)[(i * cols + i) << cx] = 1.0;
    else ((float *)p)[(i * cols + i) << cx] = 1.0f;
  }
}

/* Negates the imaginary parts of count interleaved complex elements. */
static void conjugate(void *p, int64_t count, int dbl) {
  for (int64_t i = 0; i < count; i++) {
    if (dbl) ((double *)p)[2 * i + 1] = -((double *)p)[2 * i + 1];
    else ((float *)p)[2 * i + 1] = -((float *)p)[2 * i + 1];
  }
}

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
  return (t == KL_F32 || t == KL_F64) && lib.loaded;
}

/* One BLAS product with explicit leading dimensions: rows [0, m) of row-major C (ldc) =
 * op(A) (lda) @ op(B) (ldb), through the column-major C^T = op(B)^T op(A)^T. */
static void gemm_ld(kl_dtype t, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, int transa,
                    const void *b, int64_t ldb, int transb, void *c, int64_t ldc) {
  int d = t == KL_F64;
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  bint sm, sn, sk, slda, sldb, sldc;
  ((gemm_fn)lib.fn[d][R_GEMM])(transb ? "T" : "N", transa ? "T" : "N", bi(&sm, n), bi(&sn, m), bi(&sk, k),
                               d ? (const void *)&one_d : (const void *)&one_f, b, bi(&sldb, ldb), a,
                               bi(&slda, lda), d ? (const void *)&zero_d : (const void *)&zero_f, c,
                               bi(&sldc, ldc), 1, 1);
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
  if (nt < 2 || !lib.set_threads || macs < 2097152.0 || macs > 536870912.0) return 0;
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
  int saved = lib.get_threads();
  if (saved > 1) lib.set_threads(1);
  kl_rt_parallel_for(batch * parts, gemm_units, &g);
  if (saved > 1) lib.set_threads(saved);
  return 1;
}

int kl_hostla_gemm(kl_dtype t, int64_t batch, int64_t m, int64_t n, int64_t k,
                   const void *a, int64_t a_bstride, int transa,
                   const void *b, int64_t b_bstride, int transb, void *c,
                   char *err, size_t errlen) {
  const char *who = "kl_hostla_gemm";
  size_t esz = elem_size(t);
  if (!esz) return fail(err, errlen, KL_ERR_INTERNAL, "%s: invalid dtype code %d", who, (int)t);
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
    memset(c, 0, (size_t)(batch * m * n) * esz);
    return 0;
  }
  ensure_loaded();
  int half = t == KL_F16 || t == KL_BF16;
  kl_dtype wt = half ? KL_F32 : t; /* the type the product runs in */
  if (blas_gemm_usable(wt) && !(fits(m) && fits(n) && fits(k)))
    return fail(err, errlen, KL_ERR_INTERNAL, "%s: dimensions m=%lld n=%lld k=%lld exceed the "
                "32-bit BLAS integer range of %s", who, (long long)m,
                (long long)n, (long long)k, lib.name);
  if (!half && blas_gemm_usable(t) && gemm_on_pool(t, batch, m, n, k, a, a_bstride, transa, b, b_bstride, transb, c))
    return 0;
  size_t wsz = elem_size(wt);
  int need_ta = transa && !blas_gemm_usable(wt);
  int need_tb = transb && !blas_gemm_usable(wt);
  void *ta = need_ta ? malloc((size_t)(m * k) * wsz) : NULL;
  void *tb = need_tb ? malloc((size_t)(k * n) * wsz) : NULL;
  float *fa = half ? malloc((size_t)(m * k) * 4) : NULL;
  float *fb = half ? malloc((size_t)(k * n) * 4) : NULL;
  float *fc = half ? malloc((size_t)(m * n) * 4) : NULL;
  int rc = 0;
  if ((need_ta && !ta) || (need_tb && !tb) || (half && (!fa || !fb || !fc))) {
    rc = fail(err, errlen, KL_ERR_NOMEM, "%s: out of memory for %s scratch (m=%lld n=%lld "
              "k=%lld)", who, dtype_label(t), (long long)m, (long long)n,
              (long long)k);
    goto out;
  }
  /* Small products run on one thread: OpenBLAS's threads cost more than they save below a few
   * million multiply-adds (a 10x100x150 product: 24 us threaded, 17 us single-threaded).
   * Library calls run one at a time, so switching the global setting is safe. */
  int saved_threads = 0;
  if ((double)batch * (double)m * (double)n * (double)k < 2097152.0 && lib.set_threads &&
      (saved_threads = lib.get_threads()) > 1)
    lib.set_threads(1);
  else
    saved_threads = 0;
  for (int64_t bb = 0; bb < batch; bb++) {
    const char *ab = (const char *)a + (size_t)(bb * a_bstride) * esz;
    const char *bp = (const char *)b + (size_t)(bb * b_bstride) * esz;
    char *cb = (char *)c + (size_t)(bb * m * n) * esz;
    if (!half) {
      gemm_one(t, m, n, k, ab, transa, bp, transb, cb, ta, tb);
      continue;
    }
    if (bb == 0 || a_bstride) half_to_f32(t, (const uint16_t *)ab, fa, m * k);
    if (bb == 0 || b_bstride) half_to_f32(t, (const uint16_t *)bp, fb, k * n);
    gemm_one(KL_F32, m, n, k, fa, transa, fb, transb, fc, ta, tb);
    f32_to_half(t, fc, (uint16_t *)cb, m * n);
  }
  if (saved_threads) lib.set_threads(saved_threads);
out:
  free(ta); free(tb); free(fa); free(fb); free(fc);
  return rc;
}

/* --------------------------------------------------------------- LAPACK */

/* lib.fn's precision index of a dtype the LAPACK routines take, or -1. */
static int prec_of(kl_dtype t) {
  switch (t) {
  case KL_F32: return 0;
  case KL_F64: return 1;
  case KL_C64: return 2;
  case KL_C128: return 3;
  default: return -1;
  }
}

/* Bytes of one real scalar, and of one element, of precision p. */
#define RSZ(p) ((size_t)((p) & 1 ? 8 : 4))
#define ESZ(p) (RSZ(p) << ((p) >> 1))

/* Checks shared by the LAPACK entry points: dtype, library, the routines in
 * `mask` at t's precision, and that each dimension in dims[] is >= 0 and
 * representable. */
static int lapack_begin(kl_dtype t, const char *who, unsigned mask,
                        const int64_t *dims, int ndims, char *err,
                        size_t errlen) {
  int p = prec_of(t);
  if (p < 0)
    return fail(err, errlen, KL_ERR_UNSUPPORTED, "%s: dtype %s is not supported; LAPACK routines "
                "take float32, float64, complex64 or complex128 (convert the input first)",
                who, dtype_label(t));
  for (int i = 0; i < ndims; i++)
    if (dims[i] < 0)
      return fail(err, errlen, KL_ERR_INTERNAL, "%s: negative dimension %lld", who,
                  (long long)dims[i]);
  ensure_loaded();
  if (!lib.loaded)
    return fail(err, errlen, KL_ERR_INTERNAL, "%s: no BLAS/LAPACK library was found (tried "
                "$KILN_BLAS_LIB, libopenblas.so.0, libopenblas.so, "
                "libblas.so.3 + liblapack.so.3, libmkl_rt.so and NumPy's "
                "bundled OpenBLAS); install one (apt-get install libopenblas0) "
                "or point KILN_BLAS_LIB at one", who);
  for (int r = 0; r < R_COUNT; r++)
    if (((mask >> r) & 1) && !lib.fn[p][r])
      return fail(err, errlen, KL_ERR_INTERNAL, "%s: the loaded library %s has no %c%s "
                  "routine (needed for %s); set KILN_LAPACK_LIB to a LAPACK library", who,
                  lib.name, prec_letter[p], routine_names[r][p >> 1], dtype_label(t));
  for (int i = 1; i < ndims; i++) /* dims[0] is the batch, a C loop count */
    if (!fits(dims[i]))
      return fail(err, errlen, KL_ERR_INTERNAL, "%s: dimension %lld exceeds the 32-bit LAPACK "
                  "integer range of %s", who, (long long)dims[i], lib.name);
  return 0;
}

/* Workspace size from a query's answer in work[0] (the real part, for a
 * complex work array); a little extra because single-precision answers
 * above 2^24 may have been rounded down. */
static int64_t lwork_from(const void *work0, int dbl, int64_t floor_) {
  double v = dbl ? *(const double *)work0 : (double)*(const float *)work0;
  int64_t w = (int64_t)(v * (1.0 + 1e-6)) + 1;
  return w > floor_ ? w : floor_;
}

/* l[b] = cholesky(a[b]). Row-major a read as column-major is a^T, whose
 * upper triangle is a's lower one; potrf('U') then leaves U with
 * U^H U = a^T, and U read back row-major is L = U^T. Real a: a^T = a, so
 * L L^T = a. Hermitian a: a^T = conj(a), so L L^H = U^T conj(U) =
 * conj(U^H U) = a. Either way the lower factor comes out in place, with no
 * transposition or conjugation. */
int kl_hostla_cholesky(kl_dtype t, int64_t batch, int64_t n, const void *a,
                       void *l, char *err, size_t errlen) {
  const char *who = "kl_hostla_cholesky";
  int64_t dims[] = {batch, n};
  if (lapack_begin(t, who, 1u << R_POTRF, dims, 2, err, errlen)) return 1;
  int p = prec_of(t), d = p & 1;
  int64_t nc = 1 + (p >> 1); /* real scalars per element */
  size_t esz = ESZ(p), mat = (size_t)(n * n) * esz;
  if (n == 0 || batch == 0) return 0;
  for (int64_t bb = 0; bb < batch; bb++) {
    char *lb = (char *)l + bb * mat;
    memcpy(lb, (const char *)a + bb * mat, mat);
    bint sn, slda, sinfo;
    ((potrf_fn)lib.fn[p][R_POTRF])("U", bi(&sn, n), lb, bi(&slda, n),
                                   bi(&sinfo, 0), 1);
    int64_t info = bget(&sinfo);
    if (info < 0 && !has_nonfinite((const char *)a + bb * mat, n * n * nc, d))
      return fail(err, errlen, KL_ERR_INTERNAL, "%s: %cpotrf rejected argument %lld", who,
                  prec_letter[p], (long long)-info);
    if (info != 0) { /* not positive definite: NaN, as JAX */
      fill_nan(lb, n * n * nc, d);
      continue;
    }
    for (int64_t i = 0; i + 1 < n; i++)
      memset(lb + (size_t)(i * n + i + 1) * esz, 0, (size_t)(n - i - 1) * esz);
  }
  return 0;
}

/* LU works on a column-major copy (pivoting is by rows, so the transposed
 * view would pivot the wrong way). */
int kl_hostla_lu(kl_dtype t, int64_t batch, int64_t m, int64_t n,
                 const void *a, void *lu, int32_t *pivots, int32_t *perm,
                 char *err, size_t errlen) {
  const char *who = "kl_hostla_lu";
  int64_t dims[] = {batch, m, n};
  if (lapack_begin(t, who, 1u << R_GETRF, dims, 3, err, errlen)) return 1;
  int p = prec_of(t);
  size_t esz = ESZ(p), mat = (size_t)(m * n) * esz;
  int64_t k = m < n ? m : n;
  void *w = malloc(mat ? mat : 1);
  void *ipiv = malloc((size_t)(k ? k : 1) * (size_t)(lib.bits / 8));
  int rc = 0;
  if (!w || !ipiv) {
    rc = fail(err, errlen, KL_ERR_NOMEM, "%s: out of memory (m=%lld n=%lld)", who,
              (long long)m, (long long)n);
    goto out;
  }
  for (int64_t bb = 0; bb < batch; bb++) {
    const char *ab = (const char *)a + bb * mat;
    char *lub = (char *)lu + bb * mat;
    if (k > 0) {
      transpose(ab, w, m, n, esz);
      bint sm, sn, slda, sinfo;
      ((getrf_fn)lib.fn[p][R_GETRF])(bi(&sm, m), bi(&sn, n), w, bi(&slda, m),
                                     ipiv, bi(&sinfo, 0));
      int64_t info = bget(&sinfo);
      if (info < 0) { /* info > 0 (exactly singular U) is a result */
        rc = fail(err, errlen, KL_ERR_INTERNAL, "%s: %cgetrf rejected argument %lld", who,
                  prec_letter[p], (long long)-info);
        goto out;
      }
      transpose(w, lub, n, m, esz);
    }
    int32_t *pv = pivots ? pivots + bb * k : NULL;
    for (int64_t i = 0; pv && i < k; i++) pv[i] = (int32_t)(bget_at(ipiv, i) - 1);
    if (perm) {
      int32_t *pm = perm + bb * m;
      for (int64_t i = 0; i < m; i++) pm[i] = (int32_t)i;
      for (int64_t i = 0; i < k; i++) {
        int64_t j = bget_at(ipiv, i) - 1;
        int32_t tmp = pm[i];
        pm[i] = pm[j];
        pm[j] = tmp;
      }
    }
  }
out:
  free(w);
  free(ipiv);
  return rc;
}

/* Row-major X (m x n) is column-major X^T, and a's buffer is column-major
 * a^T. Transposing op(a) x = b gives x^T op(a)^T = b^T: a right-side solve
 * on the buffer, same op flag, with lower/upper swapped (and the mirror for
 * the right-side case). So trsm runs on the caller's layout directly. Every
 * transpose here is a plain one, for complex a too, as transpose_a is: no
 * conjugation enters. */
int kl_hostla_triangular_solve(kl_dtype t, int64_t batch, int64_t m,
                               int64_t n, const void *a, int64_t a_bstride,
                               const void *b, void *out, int left_side,
                               int lower, int transpose_a, int unit_diagonal,
                               char *err, size_t errlen) {
  const char *who = "kl_hostla_triangular_solve";
  int64_t dims[] = {batch, m, n};
  if (lapack_begin(t, who, 1u << R_TRSM, dims, 3, err, errlen)) return 1;
  if (a_bstride < 0)
    return fail(err, errlen, KL_ERR_INTERNAL, "%s: negative a_bstride %lld", who,
                (long long)a_bstride);
  int p = prec_of(t), d = p & 1;
  size_t esz = ESZ(p), mat = (size_t)(m * n) * esz;
  int64_t s = left_side ? m : n;
  if (batch == 0 || m == 0 || n == 0) return 0;
  const double one_d[2] = {1.0, 0.0}; /* alpha; complex 1 + 0i for c, z */
  const float one_f[2] = {1.0f, 0.0f};
  for (int64_t bb = 0; bb < batch; bb++) {
    char *ob = (char *)out + bb * mat;
    memcpy(ob, (const char *)b + bb * mat, mat);
    bint sm, sn, slda, sldb;
    ((trsm_fn)lib.fn[p][R_TRSM])(
        left_side ? "R" : "L", lower ? "U" : "L", transpose_a ? "T" : "N",
        unit_diagonal ? "U" : "N", bi(&sm, n), bi(&sn, m),
        d ? (const void *)one_d : (const void *)one_f,
        (const char *)a + (size_t)(bb * a_bstride) * esz, bi(&slda, s), ob,
        bi(&sldb, n), 1, 1, 1, 1);
  }
  return 0;
}

/* QR on a column-major copy: geqrf leaves R in the upper triangle and the
 * Householder vectors below it; orgqr (ungqr for complex) expands those into
 * the first m or k columns of Q. */
int kl_hostla_qr(kl_dtype t, int64_t batch, int64_t m, int64_t n,
                 const void *a, void *q, void *r, int full_matrices,
                 char *err, size_t errlen) {
  const char *who = "kl_hostla_qr";
  int64_t k = m < n ? m : n;
  int64_t qc = full_matrices ? m : k, rr = full_matrices ? m : k;
  int64_t dims[] = {batch, m, n, m * (qc > n ? qc : n)};
  if (lapack_begin(t, who, (1u << R_GEQRF) | (1u << R_ORGQR), dims, 4, err,
                   errlen))
    return 1;
  int p = prec_of(t), d = p & 1, cx = p >> 1;
  int64_t nc = 1 + cx;
  size_t esz = ESZ(p);
  int64_t lda = m > 1 ? m : 1;
  void *w = malloc((size_t)(m * n) * esz + 1);
  void *qb = malloc((size_t)(m * qc) * esz + 1);
  void *tau = malloc((size_t)k * esz + 1);
  void *work = NULL;
  int64_t lwork = 1;
  int rc = 0;
  if (!w || !qb || !tau) goto oom;
  if (k > 0) { /* one workspace query for the whole batch */
    double q1[2] = {0, 0}, q2[2] = {0, 0}; /* room for one complex128 */
    bint sm, sn, sk, slda, slw, sinfo;
    ((geqrf_fn)lib.fn[p][R_GEQRF])(bi(&sm, m), bi(&sn, n), w, bi(&slda, lda),
                                   tau, q1, bi(&slw, -1), bi(&sinfo, 0));
    ((orgqr_fn)lib.fn[p][R_ORGQR])(bi(&sm, m), bi(&sn, qc), bi(&sk, k), qb,
                                   bi(&slda, lda), tau, q2, bi(&slw, -1),
                                   bi(&sinfo, 0));
    int64_t l1 = lwork_from(q1, d, n), l2 = lwork_from(q2, d, qc);
    lwork = l1 > l2 ? l1 : l2;
    if (!fits(lwork)) {
      rc = fail(err, errlen, KL_ERR_INTERNAL, "%s: workspace of %lld elements exceeds the "
                "32-bit LAPACK range", who, (long long)lwork);
      goto out;
    }
    work = malloc((size_t)lwork * esz);
    if (!work) goto oom;
  }
  for (int64_t bb = 0; bb < batch; bb++) {
    const char *ab = (const char *)a + (size_t)(bb * m * n) * esz;
    char *qo = (char *)q + (size_t)(bb * m * qc) * esz;
    char *ro = (char *)r + (size_t)(bb * rr * n) * esz;
    if (k == 0) {
      fill_eye(qo, m, qc, d, cx);
      memset(ro, 0, (size_t)(rr * n) * esz);
      continue;
    }
    transpose(ab, w, m, n, esz);
    bint sm, sn, sk, slda, slw, sinfo;
    ((geqrf_fn)lib.fn[p][R_GEQRF])(bi(&sm, m), bi(&sn, n), w, bi(&slda, lda),
                                   tau, work, bi(&slw, lwork), bi(&sinfo, 0));
    int64_t info = bget(&sinfo);
    if (info == 0) {
      memcpy(qb, w, (size_t)(m * k) * esz); /* reflectors: first k columns */
      ((orgqr_fn)lib.fn[p][R_ORGQR])(bi(&sm, m), bi(&sn, qc), bi(&sk, k), qb,
                                     bi(&slda, lda), tau, work,
                                     bi(&slw, lwork), bi(&sinfo, 0));
      info = bget(&sinfo);
    }
    if (info != 0) {
      if (!has_nonfinite(ab, m * n * nc, d)) {
        rc = fail(err, errlen, KL_ERR_INTERNAL, "%s: %cgeqrf/%c%s failed with info=%lld",
                  who, prec_letter[p], prec_letter[p], routine_names[R_ORGQR][cx],
                  (long long)info);
        goto out;
      }
      fill_nan(qo, m * qc * nc, d);
      fill_nan(ro, rr * n * nc, d);
      continue;
    }
    transpose(qb, qo, qc, m, esz);
    memset(ro, 0, (size_t)(rr * n) * esz);
    for (int64_t i = 0; i < rr; i++) /* R: w's upper triangle, row-major */
      for (int64_t j = i; j < n; j++)
        memcpy(ro + (size_t)(i * n + j) * esz, (const char *)w + (size_t)(i + j * m) * esz, esz);
  }
  goto out;
oom:
  rc = fail(err, errlen, KL_ERR_NOMEM, "%s: out of memory (m=%lld n=%lld)", who,
            (long long)m, (long long)n);
out:
  free(w); free(qb); free(tau); free(work);
  return rc;
}

/* One syevd (real p) or heevd (complex p) call with JOBZ='V'; rwork and
 * lrwork are heevd's only. A workspace query when lwork is -1. */
static void eigh_call(int p, const char *uplo, int64_t n, void *a, void *w,
                      void *work, int64_t lwork, void *rwork, int64_t lrwork,
                      void *iwork, int64_t liwork, bint *info) {
  bint sn, slda, slw, slrw, sliw;
  if (p >> 1)
    ((heevd_fn)lib.fn[p][R_SYEVD])("V", uplo, bi(&sn, n), a, bi(&slda, n), w,
                                   work, bi(&slw, lwork), rwork,
                                   bi(&slrw, lrwork), iwork, bi(&sliw, liwork),
                                   info, 1, 1);
  else
    ((syevd_fn)lib.fn[p][R_SYEVD])("V", uplo, bi(&sn, n), a, bi(&slda, n), w,
                                   work, bi(&slw, lwork), iwork,
                                   bi(&sliw, liwork), info, 1, 1);
}

/* syevd/heevd on a copy. The buffer read column-major is a^T, with a's lower
 * triangle as its upper one (hence uplo). Real a: a^T = a. Hermitian a:
 * a^T = conj(a), which has a's eigenvalues and the conjugates of its
 * eigenvectors, so the vectors are conjugated back. They come as column-major
 * columns and are transposed into row-major columns. */
int kl_hostla_eigh(kl_dtype t, int64_t batch, int64_t n, const void *a,
                   void *v, void *w, int lower, char *err, size_t errlen) {
  const char *who = "kl_hostla_eigh";
  int64_t dims[] = {batch, n, n * n};
  if (lapack_begin(t, who, 1u << R_SYEVD, dims, 3, err, errlen)) return 1;
  int p = prec_of(t), d = p & 1, cx = p >> 1;
  int64_t nc = 1 + cx;
  size_t esz = ESZ(p), rsz = RSZ(p), mat = (size_t)(n * n) * esz;
  if (batch == 0 || n == 0) return 0;
  const char *uplo = lower ? "U" : "L";
  void *buf = malloc(mat), *work = NULL, *rwork = NULL, *iwork = NULL;
  int rc = 0;
  if (!buf) goto oom;
  double wq[2] = {0, 0}, rwq = 0; /* work[0] (complex for heevd), rwork[0] */
  bint iwq, sinfo;
  memset(&iwq, 0, sizeof iwq);
  eigh_call(p, uplo, n, buf, w, wq, -1, &rwq, -1, &iwq, -1, &sinfo);
  /* documented minimums for JOBZ='V': syevd lwork 1 + 6n + 2n^2; heevd
   * lwork 2n + n^2 and lrwork 1 + 5n + 2n^2; liwork 3 + 5n for both */
  int64_t lwork = lwork_from(wq, d, cx ? 2 * n + n * n : 1 + 6 * n + 2 * n * n);
  int64_t lrwork = cx ? lwork_from(&rwq, d, 1 + 5 * n + 2 * n * n) : 0;
  int64_t liwork = bget(&iwq) > 3 + 5 * n ? bget(&iwq) : 3 + 5 * n;
  if (!fits(lwork) || !fits(liwork) || !fits(lrwork)) {
    rc = fail(err, errlen, KL_ERR_INTERNAL, "%s: workspace exceeds the 32-bit LAPACK range "
              "(n=%lld)", who, (long long)n);
    goto out;
  }
  work = malloc((size_t)lwork * esz);
  rwork = cx ? malloc((size_t)lrwork * rsz) : NULL;
  iwork = malloc((size_t)liwork * (size_t)(lib.bits / 8));
  if (!work || (cx && !rwork) || !iwork) goto oom;
  for (int64_t bb = 0; bb < batch; bb++) {
    const char *ab = (const char *)a + bb * mat;
    char *vo = (char *)v + bb * mat, *wo = (char *)w + (size_t)(bb * n) * rsz;
    memcpy(buf, ab, mat);
    eigh_call(p, uplo, n, buf, wo, work, lwork, rwork, lrwork, iwork, liwork,
              &sinfo);
    int64_t info = bget(&sinfo);
    if (info < 0 && !has_nonfinite(ab, n * n * nc, d)) {
      rc = fail(err, errlen, KL_ERR_INTERNAL, "%s: %c%s rejected argument %lld", who,
                prec_letter[p], routine_names[R_SYEVD][cx], (long long)-info);
      goto out;
    }
    if (info != 0) { /* no convergence (or NaN input): NaN, as JAX */
      fill_nan(vo, n * n * nc, d);
      fill_nan(wo, n, d);
      continue;
    }
    transpose(buf, vo, n, n, esz);
    if (cx) conjugate(vo, n * n, d);
  }
  goto out;
oom:
  rc = fail(err, errlen, KL_ERR_NOMEM, "%s: out of memory (n=%lld)", who, (long long)n);
out:
  free(buf); free(work); free(rwork); free(iwork);
  return rc;
}

/* One geev call (no left vectors). Real p: eigenvalues into w1 (real parts)
 * and w2 (imaginary parts). Complex p: eigenvalues into w1 (complex), w2 is
 * the rwork of 2n reals. A workspace query when lwork is -1. */
static void geev_call(int p, const char *jobvr, int64_t n, void *a, void *w1,
                      void *w2, void *vr, int64_t ldvr, void *work,
                      int64_t lwork, bint *info) {
  double dummy[2] = {0, 0}; /* VL, not referenced */
  bint sn, slda, sone, sldvr, slw;
  if (p >> 1)
    ((geev_fn)lib.fn[p][R_GEEV])("N", jobvr, bi(&sn, n), a, bi(&slda, n), w1,
                                 dummy, bi(&sone, 1), vr, bi(&sldvr, ldvr),
                                 work, bi(&slw, lwork), w2, info, 1, 1);
  else
    ((geev_fn)lib.fn[p][R_GEEV])("N", jobvr, bi(&sn, n), a, bi(&slda, n), w1,
                                 w2, dummy, bi(&sone, 1), vr, bi(&sldvr, ldvr),
                                 work, bi(&slw, lwork), info, 1, 1);
}

/* geev on a column-major copy of a (what numpy and JAX compute). Complex a:
 * eigenvalues w and right eigenvectors, the columns of VR, as they are. Real
 * a: eigenvalues wr + i wi, and a conjugate pair (wi[j] > 0) shares two
 * columns of VR: v_j = VR[:, j] + i VR[:, j+1] and v_j+1 = its conjugate.
 * w (n) and v (n x n, row-major) are interleaved complex. */
int kl_hostla_eig(kl_dtype t, int64_t batch, int64_t n, const void *a, void *w,
                  void *v, char *err, size_t errlen) {
  const char *who = "kl_hostla_eig";
  int64_t dims[] = {batch, n, n * n};
  if (lapack_begin(t, who, 1u << R_GEEV, dims, 3, err, errlen)) return 1;
  int p = prec_of(t), d = p & 1, cx = p >> 1;
  int64_t nc = 1 + cx;
  size_t esz = ESZ(p), rsz = RSZ(p), mat = (size_t)(n * n) * esz;
  if (batch == 0 || n == 0) return 0;
  const char *jobvr = v ? "V" : "N";
  /* wr, wi: real parts and imaginary parts (real a); wi is rwork (complex a) */
  void *buf = malloc(mat), *vr = malloc(v ? mat : esz), *wr = malloc((size_t)n * rsz),
       *wi = malloc((size_t)(n * nc) * rsz), *work = NULL;
  int rc = 0;
  if (!buf || !vr || !wr || !wi) goto oom;
  double wq[2] = {0, 0};
  bint sinfo;
  geev_call(p, jobvr, n, buf, cx ? w : wr, wi, vr, v ? n : 1, wq, -1, &sinfo);
  int64_t lwork = lwork_from(wq, d, cx ? 2 * n : v ? 4 * n : 3 * n);
  if (!fits(lwork)) {
    rc = fail(err, errlen, KL_ERR_INTERNAL, "%s: workspace exceeds the 32-bit LAPACK range "
              "(n=%lld)", who, (long long)n);
    goto out;
  }
  work = malloc((size_t)lwork * esz);
  if (!work) goto oom;
  for (int64_t bb = 0; bb < batch; bb++) {
    const char *ab = (const char *)a + bb * mat;
    char *wo = (char *)w + (size_t)(bb * n) * 2 * rsz;
    char *vo = v ? (char *)v + (size_t)(bb * n * n) * 2 * rsz : NULL;
    transpose(ab, buf, n, n, esz);
    geev_call(p, jobvr, n, buf, cx ? wo : wr, wi, vr, v ? n : 1, work, lwork,
              &sinfo);
    int64_t info = bget(&sinfo);
    if (info < 0 && !has_nonfinite(ab, n * n * nc, d)) {
      rc = fail(err, errlen, KL_ERR_INTERNAL, "%s: %cgeev rejected argument %lld", who,
                prec_letter[p], (long long)-info);
      goto out;
    }
    if (info != 0) { /* no convergence (or NaN input): NaN, as JAX */
      fill_nan(wo, 2 * n, d);
      if (vo) fill_nan(vo, 2 * n * n, d);
      continue;
    }
    if (cx) {
      if (vo) transpose(vr, vo, n, n, esz);
      continue;
    }
#define AT(p, i) (d ? ((const double *)(p))[i] : (double)((const float *)(p))[i])
#define PUT(p, i, x) (d ? (void)(((double *)(p))[i] = (x)) : (void)(((float *)(p))[i] = (float)(x)))
    for (int64_t j = 0; j < n; j++) {
      PUT(wo, 2 * j, AT(wr, j));
      PUT(wo, 2 * j + 1, AT(wi, j));
    }
    for (int64_t j = 0; vo && j < n; j++) {
      int pair = AT(wi, j) != 0 && j + 1 < n;
      for (int64_t r = 0; r < n; r++) {
        double re = AT(vr, r + j * n), im = pair ? AT(vr, r + (j + 1) * n) : 0;
        PUT(vo, 2 * (r * n + j), re);
        PUT(vo, 2 * (r * n + j) + 1, im);
        if (pair) {
          PUT(vo, 2 * (r * n + j + 1), re);
          PUT(vo, 2 * (r * n + j + 1) + 1, -im);
        }
      }
      j += pair;
    }
#undef AT
#undef PUT
  }
  goto out;
oom:
  rc = fail(err, errlen, KL_ERR_NOMEM, "%s: out of memory (n=%lld)", who, (long long)n);
out:
  free(buf); free(vr); free(wr); free(wi); free(work);
  return rc;
}

/* The buffer of row-major a (m x n) is column-major a^T (n x m). If
 * a^T = U' S V'^H then a = conj(V') S U'^T: LAPACK's VT' = V'^H (column-major,
 * ld = its row count) read row-major is (V'^H)^T = conj(V'), exactly u, and
 * its U' read row-major is U'^T, exactly vh (numpy's: the conjugate transpose
 * of v = conj(U')). For real a the conjugations are no-ops. So gesdd writes
 * straight into the outputs with m and n swapped. rwork: the complex drivers'
 * real workspace (unused for real p). */
static void svd_call(int p, int use_gesvd, const char *job, int64_t m,
                     int64_t n, void *abuf, void *s, void *u, void *vt,
                     int64_t ldvt_cols, void *work, int64_t lwork, void *rwork,
                     void *iwork, bint *info) {
  bint sm, sn, slda, sldu, sldvt, slw;
  int64_t lda = n > 1 ? n : 1, ldu = n > 1 ? n : 1;
  int64_t ldvt = ldvt_cols > 1 ? ldvt_cols : 1;
  void *f = lib.fn[p][use_gesvd ? R_GESVD : R_GESDD];
  if (use_gesvd && (p >> 1))
    ((cgesvd_fn)f)(job, job, bi(&sm, n), bi(&sn, m), abuf, bi(&slda, lda), s,
                   vt, bi(&sldu, ldu), u, bi(&sldvt, ldvt), work,
                   bi(&slw, lwork), rwork, info, 1, 1);
  else if (use_gesvd)
    ((gesvd_fn)f)(job, job, bi(&sm, n), bi(&sn, m), abuf, bi(&slda, lda), s,
                  vt, bi(&sldu, ldu), u, bi(&sldvt, ldvt), work,
                  bi(&slw, lwork), info, 1, 1);
  else if (p >> 1)
    ((cgesdd_fn)f)(job, bi(&sm, n), bi(&sn, m), abuf, bi(&slda, lda), s, vt,
                   bi(&sldu, ldu), u, bi(&sldvt, ldvt), work, bi(&slw, lwork),
                   rwork, iwork, info, 1);
  else
    ((gesdd_fn)f)(job, bi(&sm, n), bi(&sn, m), abuf, bi(&slda, lda), s, vt,
                  bi(&sldu, ldu), u, bi(&sldvt, ldvt), work, bi(&slw, lwork),
                  iwork, info, 1);
}

int kl_hostla_svd(kl_dtype t, int64_t batch, int64_t m, int64_t n,
                  const void *a, void *u, void *s, void *vt,
                  int full_matrices, int compute_uv, char *err,
                  size_t errlen) {
  const char *who = "kl_hostla_svd";
  int64_t k = m < n ? m : n, mx = m > n ? m : n;
  int64_t ucols = full_matrices ? m : k, vrows = full_matrices ? n : k;
  /* the real drivers' minimum; above the complex ones' (in elements) */
  int64_t wmin = compute_uv ? 4 * k * k + 7 * k + mx : 3 * k + (mx > 7 * k ? mx : 7 * k);
  int64_t dims[] = {batch, m, n, m * n, wmin};
  if (lapack_begin(t, who, (1u << R_GESDD) | (1u << R_GESVD), dims, 5, err,
                   errlen))
    return 1;
  if (compute_uv && (!u || !vt))
    return fail(err, errlen, KL_ERR_INTERNAL, "%s: compute_uv needs u and vt buffers", who);
  int p = prec_of(t), d = p & 1, cx = p >> 1;
  int64_t nc = 1 + cx;
  size_t esz = ESZ(p), rsz = RSZ(p), mat = (size_t)(m * n) * esz;
  const char *job = !compute_uv ? "N" : full_matrices ? "A" : "S";
  char *uo = u, *vto = vt;
  if (batch == 0) return 0;
  if (k == 0) {
    for (int64_t bb = 0; compute_uv && bb < batch; bb++) {
      fill_eye(uo + (size_t)(bb * m * ucols) * esz, m, ucols, d, cx);
      fill_eye(vto + (size_t)(bb * vrows * n) * esz, vrows, n, d, cx);
    }
    return 0;
  }
  /* complex rwork: gesdd needs 7k without vectors (LAPACK <= 3.6; 5k since),
   * max(5k^2 + 5k, 2 mx k + 2k^2 + k) with them; gesvd 5k */
  int64_t lrwork = !cx ? 0 : !compute_uv ? 7 * k : 5 * k * k + 5 * k;
  if (cx && compute_uv && 2 * mx * k + 2 * k * k + k > lrwork)
    lrwork = 2 * mx * k + 2 * k * k + k;
  double dummy[2] = {0, 0}; /* u/vt stand-in when they are not computed */
  void *abuf = malloc(mat), *work = NULL, *gwork = NULL;
  void *rwork = cx ? malloc((size_t)lrwork * rsz) : NULL;
  void *iwork = malloc((size_t)(8 * k) * (size_t)(lib.bits / 8));
  int64_t lwork = 1, glwork = 0;
  int rc = 0;
  bint info;
  if (!abuf || !iwork || (cx && !rwork)) goto oom;
  double wq[2] = {0, 0};
  svd_call(p, 0, job, m, n, abuf, s, compute_uv ? (void *)uo : dummy,
           compute_uv ? (void *)vto : dummy, ucols, wq, -1, rwork, iwork, &info);
  lwork = lwork_from(wq, d, wmin);
  if (!fits(lwork)) {
    rc = fail(err, errlen, KL_ERR_INTERNAL, "%s: workspace of %lld elements exceeds the "
              "32-bit LAPACK range", who, (long long)lwork);
    goto out;
  }
  work = malloc((size_t)lwork * esz);
  if (!work) goto oom;
  for (int64_t bb = 0; bb < batch; bb++) {
    const char *ab = (const char *)a + bb * mat;
    char *so = (char *)s + (size_t)(bb * k) * rsz;
    void *ub = compute_uv ? (void *)(uo + (size_t)(bb * m * ucols) * esz)
                          : (void *)dummy;
    void *vb = compute_uv ? (void *)(vto + (size_t)(bb * vrows * n) * esz)
                          : (void *)dummy;
    int64_t st = 1;
    if (!lib.force_gesvd) {
      memcpy(abuf, ab, mat);
      svd_call(p, 0, job, m, n, abuf, so, ub, vb, ucols, work, lwork, rwork,
               iwork, &info);
      st = bget(&info);
    }
    if (st > 0) { /* gesdd did not converge: try the QR-iteration driver */
      if (!gwork) {
        memset(wq, 0, sizeof wq);
        svd_call(p, 1, job, m, n, abuf, so, ub, vb, ucols, wq, -1, rwork,
                 NULL, &info);
        glwork = lwork_from(wq, d, 5 * k + mx);
        if (!fits(glwork) || !(gwork = malloc((size_t)glwork * esz))) {
          rc = fail(err, errlen, KL_ERR_NOMEM, "%s: cannot allocate the gesvd fallback "
                    "workspace", who);
          goto out;
        }
      }
      memcpy(abuf, ab, mat);
      svd_call(p, 1, job, m, n, abuf, so, ub, vb, ucols, gwork, glwork, rwork,
               NULL, &info);
      st = bget(&info);
    }
    if (st < 0 && !has_nonfinite(ab, m * n * nc, d)) {
      rc = fail(err, errlen, KL_ERR_INTERNAL, "%s: %cgesdd rejected argument %lld", who,
                prec_letter[p], (long long)-st);
      goto out;
    }
    if (st != 0) { /* NaN/inf input or no convergence: NaN, as JAX */
      fill_nan(so, k, d);
      if (compute_uv) {
        fill_nan(ub, m * ucols * nc, d);
        fill_nan(vb, vrows * n * nc, d);
      }
    }
  }
  goto out;
oom:
  rc = fail(err, errlen, KL_ERR_NOMEM, "%s: out of memory (m=%lld n=%lld)", who,
            (long long)m, (long long)n);
out:
  free(abuf); free(work); free(gwork); free(rwork); free(iwork);
  return rc;
}
