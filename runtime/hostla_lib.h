/* hostla_lib.h: PRIVATE to runtime/hostla.c and runtime/lapack.c; include it
 * nowhere else (the public API is hostla.h). What both halves share: the
 * BLAS/LAPACK that hostla.c opens and lapack.c calls, its integer width, and
 * the few helpers both need. Depends on hostla.h, ir/status.h and the C
 * library only. */
#ifndef KL_HOSTLA_LIB_H
#define KL_HOSTLA_LIB_H
#include "hostla.h"

#include "../ir/status.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* The message and its status (ir/status.h); returns 1, the routines' failure code. */
static inline int fail(char *err, size_t errlen, kl_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kl_verror(err, errlen, status, fmt, ap);
  va_end(ap);
  return 1;
}

/* A local copy of the dtype names: ir/dtype.c is another module and may not be
 * linked into every client of these files. */
static inline const char *dtype_label(kl_dtype t) {
  static const char *const names[KL_NDTYPES] = {
      "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
      "uint32", "uint64", "float16", "bfloat16", "float32", "float64", "complex64", "complex128"};
  return (unsigned)t < KL_NDTYPES ? names[t] : "invalid dtype";
}

/* ------------------------------------------------------------- routines */

/* The routines looked up, the second index of kl_hostla_lib.fn. */
enum { R_GEMM, R_TRSM, R_POTRF, R_GETRF, R_GEQRF, R_ORGQR, R_SYEVD, R_GESDD,
       R_GESVD, R_GEEV, R_GEES, R_COUNT };
/* Precisions, the first index of kl_hostla_lib.fn: 0 s (f32), 1 d (f64), 2 c
 * (c64), 3 z (c128); bit 0 is double, bit 1 complex. */
enum { P_COUNT = 4 };
static const char prec_letter[P_COUNT + 1] = "sdcz";
/* Base names, [routine][complex]: the complex counterparts of the orthogonal
 * and symmetric routines are the unitary and Hermitian ones. */
static const char *const routine_names[R_COUNT][2] = {
    {"gemm", "gemm"},   {"trsm", "trsm"},   {"potrf", "potrf"},
    {"getrf", "getrf"}, {"geqrf", "geqrf"}, {"orgqr", "ungqr"},
    {"syevd", "heevd"}, {"gesdd", "gesdd"}, {"gesvd", "gesvd"},
    {"geev", "geev"},   {"gees", "gees"}};

/* The library found by the search in hostla.c: written once, under its
 * pthread_once, before any kl_hostla_ entry point reads it (each calls
 * kl_hostla_available() or an equivalent first); read-only afterwards. */
typedef struct {
  int loaded;                 /* a BLAS with sgemm and dgemm was found */
  int bits;                   /* 32 or 64: width of BLAS/LAPACK integers */
  void *fn[P_COUNT][R_COUNT]; /* [precision][routine]; NULL = missing */
  char name[512];             /* what was dlopen'ed, for kl_hostla_library */
  int force_gesvd;            /* KILN_SVD_DRIVER=gesvd: skip gesdd (debug) */
  void (*set_threads)(int);   /* OpenBLAS's thread control, or NULL */
  int (*get_threads)(void);
} kl_hostla_state;

extern kl_hostla_state kl_hostla_lib; /* defined in hostla.c */

/* A BLAS/LAPACK integer argument, stored at the library's width. */
typedef union { int32_t i32; int64_t i64; } bint;

static inline void *bi(bint *slot, int64_t v) {
  if (kl_hostla_lib.bits == 64) slot->i64 = v;
  else slot->i32 = (int32_t)v;
  return slot;
}

static inline int64_t bget(const bint *slot) {
  return kl_hostla_lib.bits == 64 ? slot->i64 : slot->i32;
}

static inline int64_t bget_at(const void *arr, int64_t i) {
  return kl_hostla_lib.bits == 64 ? ((const int64_t *)arr)[i]
                                  : ((const int32_t *)arr)[i];
}

/* Whether v can be passed as a BLAS integer. */
static inline int fits(int64_t v) { return kl_hostla_lib.bits == 64 || v <= INT32_MAX; }

/* ------------------------------------------------------------ transpose */

#define DEFINE_TRANSPOSE(NAME, T)                                              \
  static inline void NAME(const void *src_, void *dst_, int64_t rows,          \
                          int64_t cols) {                                      \
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
#undef DEFINE_TRANSPOSE

/* dst (cols x rows) = transpose of src (rows x cols), both row-major; a plain
 * transpose for complex elements too (no conjugation). */
static inline void transpose(const void *src, void *dst, int64_t rows, int64_t cols,
                             size_t esz) {
  switch (esz) {
  case 1: transpose8(src, dst, rows, cols); break;
  case 2: transpose16(src, dst, rows, cols); break;
  case 4: transpose32(src, dst, rows, cols); break;
  case 8: transpose64(src, dst, rows, cols); break;
  default: transpose128(src, dst, rows, cols); break;
  }
}

#endif
