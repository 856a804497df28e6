/* test_hostla.c: checks runtime/hostla against references computed here in
 * double (or exact integer) arithmetic: gemm in every dtype against a naive
 * triple loop, each LAPACK routine by reconstruction, in float32, float64,
 * complex64 and complex128. Runs itself a second time with KILN_BLAS_LIB=none
 * to cover the built-in C kernels, and a third with KILN_SVD_DRIVER=gesvd to
 * cover the SVD fallback driver.
 * Usage: test_hostla [--no-blas | --gesvd]   (exit status 0 on success)
 * Env: KILN_HOSTLA_NO_CHILD=1 skips the re-runs, KILN_HOSTLA_NO_BENCH=1 the
 * sgemm timing. */
#define _POSIX_C_SOURCE 200809L
#include "../../runtime/hostla.h"

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

/* splitmix64, fixed seed: failures reproduce. */
static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next_u64(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double uniform(void) { /* [-1, 1) */
  return (double)(next_u64() >> 11) * 0x1p-52 - 1.0;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) { fprintf(stderr, "test: out of memory\n"); exit(2); }
  return p;
}

/* --------------------------------------------- dtype access (reference) */

static size_t esize(kl_dtype t) {
  switch (t) {
  case KL_BOOL: case KL_I8: case KL_U8: return 1;
  case KL_I16: case KL_U16: case KL_F16: case KL_BF16: return 2;
  case KL_I32: case KL_U32: case KL_F32: return 4;
  default: return 8;
  }
}

/* Half formats decoded with ldexp, independently of the library's bit
 * tricks. */
static double f16_value(uint16_t h) {
  int e = (h >> 10) & 31, mant = h & 1023;
  double v = e == 0 ? ldexp(mant, -24)
           : e == 31 ? (mant ? NAN : INFINITY)
                     : ldexp(1024 + mant, e - 25);
  return (h & 0x8000) ? -v : v;
}
static double bf16_value(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
/* Encodes a value exactly representable in f16 (normal or subnormal). */
static uint16_t f16_exact(double v) {
  uint16_t sign = v < 0 ? 0x8000 : 0;
  v = fabs(v);
  if (v == 0) return sign;
  int e;
  double fr = frexp(v, &e); /* v = fr * 2^e, fr in [0.5, 1) */
  if (e - 1 < -14) return (uint16_t)(sign | (uint16_t)ldexp(v, 24));
  return (uint16_t)(sign | ((e - 1 + 15) << 10) |
                    (uint16_t)((fr * 2 - 1) * 1024));
}
static uint16_t bf16_exact(double v) {
  float f = (float)v;
  uint32_t bits;
  memcpy(&bits, &f, 4);
  return (uint16_t)(bits >> 16);
}

static double get_f(kl_dtype t, const void *p, int64_t i) {
  switch (t) {
  case KL_F32: return ((const float *)p)[i];
  case KL_F64: return ((const double *)p)[i];
  case KL_F16: return f16_value(((const uint16_t *)p)[i]);
  default: return bf16_value(((const uint16_t *)p)[i]);
  }
}

static uint64_t get_bits(kl_dtype t, const void *p, int64_t i) {
  switch (t) {
  case KL_BOOL: case KL_U8: return ((const uint8_t *)p)[i];
  case KL_I8: return (uint64_t)(int64_t)((const int8_t *)p)[i];
  case KL_I16: return (uint64_t)(int64_t)((const int16_t *)p)[i];
  case KL_U16: return ((const uint16_t *)p)[i];
  case KL_I32: return (uint64_t)(int64_t)((const int32_t *)p)[i];
  case KL_U32: return ((const uint32_t *)p)[i];
  default: return ((const uint64_t *)p)[i];
  }
}

static int is_float(kl_dtype t) {
  return t == KL_F16 || t == KL_BF16 || t == KL_F32 || t == KL_F64;
}

static void fill_random(kl_dtype t, void *p, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    uint64_t r = next_u64();
    switch (t) {
    case KL_F32: ((float *)p)[i] = (float)uniform(); break;
    case KL_F64: ((double *)p)[i] = uniform(); break;
    /* k/64 with |k| <= 128 is exact in both half formats */
    case KL_F16: ((uint16_t *)p)[i] = f16_exact((double)((int)(r % 257) - 128) / 64); break;
    case KL_BF16: ((uint16_t *)p)[i] = bf16_exact((double)((int)(r % 257) - 128) / 64); break;
    case KL_BOOL: ((uint8_t *)p)[i] = (r % 10) < 3; break;
    default: memcpy((char *)p + (size_t)i * esize(t), &r, esize(t)); break;
    }
  }
}

/* ------------------------------------------------------------------ gemm */

static const char *tname(kl_dtype t) {
  static const char *n[] = {"bool", "i8", "i16", "i32", "i64", "u8", "u16",
                            "u32", "u64", "f16", "bf16", "f32", "f64"};
  return n[t];
}

static void check_gemm(kl_dtype t, int64_t batch, int64_t m, int64_t n,
                       int64_t k, int transa, int transb, int bcast) {
  size_t es = esize(t);
  int64_t as = bcast == 1 ? 0 : m * k, bs = bcast == 2 ? 0 : k * n;
  int64_t na = (as ? batch : 1) * m * k, nb = (bs ? batch : 1) * k * n;
  void *a = xmalloc((size_t)na * es), *b = xmalloc((size_t)nb * es);
  void *c = xmalloc((size_t)(batch * m * n) * es);
  fill_random(t, a, na);
  fill_random(t, b, nb);
  memset(c, 0xAB, (size_t)(batch * m * n) * es); /* garbage must be overwritten */
  char err[256] = "";
  int rc = kl_hostla_gemm(t, batch, m, n, k, a, as, transa, b, bs, transb, c,
                          err, sizeof err);
  CHECK(rc == 0, "gemm %s rc=%d: %s", tname(t), rc, err);
  double unit = t == KL_F64 ? 0x1p-53 : 0x1p-24;
  double out_unit = t == KL_F16 ? 0x1p-11 : t == KL_BF16 ? 0x1p-8 : 0;
  int bad = 0;
  for (int64_t bb = 0; bb < batch && !bad && rc == 0; bb++)
    for (int64_t i = 0; i < m && !bad; i++)
      for (int64_t j = 0; j < n && !bad; j++) {
        double ref = 0, mag = 0;
        uint64_t iref = 0;
        for (int64_t p = 0; p < k; p++) {
          int64_t ia = bb * as + (transa ? p * m + i : i * k + p);
          int64_t ib = bb * bs + (transb ? j * k + p : p * n + j);
          if (is_float(t)) {
            double x = get_f(t, a, ia) * get_f(t, b, ib);
            ref += x;
            mag += fabs(x);
          } else if (t == KL_BOOL) {
            iref |= (get_bits(t, a, ia) && get_bits(t, b, ib));
          } else {
            iref += get_bits(t, a, ia) * get_bits(t, b, ib);
          }
        }
        int64_t ic = (bb * m + i) * n + j;
        if (is_float(t)) {
          double got = get_f(t, c, ic);
          double tol = out_unit * fabs(ref) * 1.001 + (k + 2) * unit * mag;
          if (!(fabs(got - ref) <= tol)) {
            bad = 1;
            CHECK(0, "gemm %s b=%lld m=%lld n=%lld k=%lld ta=%d tb=%d bc=%d "
                  "at (%lld,%lld,%lld): got %.17g want %.17g", tname(t),
                  (long long)batch, (long long)m, (long long)n, (long long)k,
                  transa, transb, bcast, (long long)bb, (long long)i,
                  (long long)j, got, ref);
          }
        } else {
          uint64_t mask = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
          uint64_t got = get_bits(t, c, ic) & mask;
          if (got != (iref & mask)) {
            bad = 1;
            CHECK(0, "gemm %s b=%lld m=%lld n=%lld k=%lld ta=%d tb=%d bc=%d "
                  "at (%lld,%lld,%lld): got %llu want %llu", tname(t),
                  (long long)batch, (long long)m, (long long)n, (long long)k,
                  transa, transb, bcast, (long long)bb, (long long)i,
                  (long long)j, (unsigned long long)got,
                  (unsigned long long)(iref & mask));
          }
        }
      }
  free(a); free(b); free(c);
}

static void test_gemm(void) {
  static const kl_dtype types[] = {KL_F32, KL_F64, KL_F16, KL_BF16, KL_I32,
                                   KL_I8, KL_U16, KL_I64, KL_U32, KL_BOOL};
  static const int64_t shapes[][4] = {
      {1, 1, 1, 1}, {3, 5, 7, 4}, {2, 17, 1, 33}, {2, 1, 9, 5},
      {2, 70, 260, 140}, /* crosses the C kernel's blocks in every loop */
      {2, 3, 4, 0}, {2, 0, 3, 4}, {0, 3, 3, 3}};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
      for (int tr = 0; tr < 4; tr++)
        for (int bc = 0; bc < 3; bc++)
          check_gemm(types[ti], shapes[si][0], shapes[si][1], shapes[si][2],
                     shapes[si][3], tr & 1, tr >> 1, bc);
}

/* Output rounding of the half types: sums chosen to land on ties, an
 * overflow, and a subnormal tie. Row of A times column of B, k = 2. */
static void test_half_rounding(void) {
  struct { kl_dtype t; double a0, a1, b0, b1; uint16_t want; } cases[] = {
      {KL_F16, 1, 1, 1, 0x1p-11, 0x3c00},           /* tie -> even (1.0) */
      {KL_F16, 1, 1, 1 + 0x1p-10, 0x1p-11, 0x3c02},  /* tie -> even, up */
      {KL_F16, 1, 1, 65504, 16, 0x7c00},             /* 65520 -> inf */
      {KL_F16, 1, 1, 65504, 8, 0x7bff},              /* stays finite */
      {KL_F16, 0x1p-12, 0, 0x1p-13, 0, 0x0000},      /* 2^-25: tie -> 0 */
      {KL_F16, 0x1p-12, 0, 3 * 0x1p-13, 0, 0x0002},  /* 1.5*2^-24 -> 2^-23 */
      {KL_F16, -1, 1, 1, -0x1p-11, 0xbc00},          /* sign kept */
      {KL_BF16, 1, 1, 1, 0x1p-8, 0x3f80},
      {KL_BF16, 1, 1, 1 + 0x1p-7, 0x1p-8, 0x3f82},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kl_dtype t = cases[i].t;
    uint16_t (*enc)(double) = t == KL_F16 ? f16_exact : bf16_exact;
    uint16_t a[2] = {enc(cases[i].a0), enc(cases[i].a1)};
    uint16_t b[2] = {enc(cases[i].b0), enc(cases[i].b1)}, c = 0x1234;
    char err[256] = "";
    int rc = kl_hostla_gemm(t, 1, 1, 1, 2, a, 0, 0, b, 0, 0, &c, err,
                            sizeof err);
    CHECK(rc == 0 && c == cases[i].want, "half rounding case %zu: got 0x%04x "
          "want 0x%04x (%s)", i, c, cases[i].want, err);
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Informational timing; KILN_HOSTLA_NO_BENCH=1 skips it (valgrind runs). */
static void bench_sgemm(int64_t n, int reps) {
  if (getenv("KILN_HOSTLA_NO_BENCH")) return;
  float *a = xmalloc((size_t)(n * n) * 4), *b = xmalloc((size_t)(n * n) * 4),
        *c = xmalloc((size_t)(n * n) * 4);
  fill_random(KL_F32, a, n * n);
  fill_random(KL_F32, b, n * n);
  double best = 1e30;
  char err[256];
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    int rc = kl_hostla_gemm(KL_F32, 1, n, n, n, a, 0, 0, b, 0, 0, c, err,
                            sizeof err);
    double dt = now() - t0;
    CHECK(rc == 0, "bench gemm: %s", err);
    if (dt < best) best = dt;
  }
  printf("sgemm %lld^3 via %s: %.1f GFLOP/s (best of %d, %.1f ms)\n",
         (long long)n, kl_hostla_library(), 2.0 * n * n * n / best * 1e-9,
         reps, best * 1e3);
  free(a); free(b); free(c);
}

/* --------------------------------------------------------------- LAPACK */

/* The LAPACK tests run at four precisions p, in the library's order: 0 f32,
 * 1 f64, 2 c64, 3 c128 (bit 0: double, bit 1: complex). References are
 * computed in double complex; real inputs have zero imaginary parts, so the
 * same identities (with ^H) check both kinds. */
typedef double _Complex cplx;
static const kl_dtype ptype[4] = {KL_F32, KL_F64, KL_C64, KL_C128};
static const char *const pname[4] = {"f32", "f64", "c64", "c128"};

static size_t psize(int p) { return (size_t)(p & 1 ? 8 : 4) << (p >> 1); }
static size_t rsize(int p) { return p & 1 ? 8 : 4; }

static double rget(int d, const void *p, int64_t i) {
  return d ? ((const double *)p)[i] : ((const float *)p)[i];
}
static void rset(int d, void *p, int64_t i, double v) {
  if (d) ((double *)p)[i] = v;
  else ((float *)p)[i] = (float)v;
}
/* Element i of an array of precision p. */
static cplx eget(int p, const void *x, int64_t i) {
  if (p < 2) return rget(p & 1, x, i);
  return CMPLX(rget(p & 1, x, 2 * i), rget(p & 1, x, 2 * i + 1));
}
static void eset(int p, void *x, int64_t i, cplx v) {
  if (p < 2) {
    rset(p & 1, x, i, creal(v));
    return;
  }
  rset(p & 1, x, 2 * i, creal(v));
  rset(p & 1, x, 2 * i + 1, cimag(v));
}
/* Stores v and returns what was stored (v rounded to p): the reference. */
static cplx estore(int p, void *x, int64_t i, cplx v) {
  eset(p, x, i, v);
  return eget(p, x, i);
}
/* Uniform in [-1, 1), in both parts for complex p. */
static cplx erandom(int p) {
  double re = uniform();
  return p < 2 ? re : CMPLX(re, uniform());
}
/* What must not be read: NaN in every part. */
static const cplx poison = CMPLX(NAN, NAN);

/* max that keeps NaN (fmax would drop it and hide a NaN result). */
static double amax(double e, double x) {
  return isnan(x) || isnan(e) ? INFINITY : x > e ? x : e;
}
/* Relative tolerance for residuals of O(dim) operations on O(1) data; a
 * complex product is four real ones. */
static double tol_for(int p, int64_t dim) {
  return 64.0 * (p & 1 ? 0x1p-52 : 0x1p-23) * (double)(dim > 1 ? dim : 1) *
         (p >> 1 ? 2 : 1);
}

/* max |Q^H Q - I| over a rows x cols row-major Q (column orthonormality). */
static double orth_err_cols(int p, const void *q, int64_t rows, int64_t cols) {
  double e = 0;
  for (int64_t i = 0; i < cols; i++)
    for (int64_t j = 0; j < cols; j++) {
      cplx s = 0;
      for (int64_t r = 0; r < rows; r++)
        s += conj(eget(p, q, r * cols + i)) * eget(p, q, r * cols + j);
      e = amax(e, cabs(s - (i == j)));
    }
  return e;
}
/* max |V V^H - I| (row orthonormality). */
static double orth_err_rows(int p, const void *v, int64_t rows, int64_t cols) {
  double e = 0;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < rows; j++) {
      cplx s = 0;
      for (int64_t c = 0; c < cols; c++)
        s += eget(p, v, i * cols + c) * conj(eget(p, v, j * cols + c));
      e = amax(e, cabs(s - (i == j)));
    }
  return e;
}

/* Imaginary part given to a complex diagonal that the routine must treat as
 * zero (Hermitian input: LAPACK reads only the real part). */
static double junk_imag(int p) { return p >> 1 ? 0.25 : 0.0; }

static void test_cholesky(int p) {
  kl_dtype t = ptype[p];
  size_t es = psize(p);
  static const int64_t ns[] = {1, 4, 33};
  for (size_t ni = 0; ni < 3; ni++) {
    int64_t n = ns[ni], batch = 3, nn = n * n;
    cplx *her = xmalloc((size_t)(batch * nn) * sizeof(cplx));
    void *a = xmalloc((size_t)(batch * nn) * es), *l = xmalloc((size_t)(batch * nn) * es);
    cplx *mm = xmalloc((size_t)nn * sizeof(cplx));
    for (int64_t bb = 0; bb < batch; bb++) {
      for (int64_t i = 0; i < nn; i++) mm[i] = erandom(p);
      for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++) { /* a = mm mm^H + n I */
          cplx s = i == j ? (double)n : 0;
          for (int64_t q = 0; q < n; q++) s += mm[i * n + q] * conj(mm[j * n + q]);
          if (i == j) s = creal(s);
          if (bb == 1) s = i == j ? -1.0 : 0.0; /* not positive definite */
          /* only the lower triangle may be read: poison the upper one */
          cplx x = estore(p, a, bb * nn + i * n + j, s);
          her[bb * nn + i * n + j] = x;
          her[bb * nn + j * n + i] = conj(x);
          if (i != j) eset(p, a, bb * nn + j * n + i, poison);
          else eset(p, a, bb * nn + i * n + i, CMPLX(creal(x), junk_imag(p)));
        }
    }
    char err[256] = "";
    int rc = kl_hostla_cholesky(t, batch, n, a, l, err, sizeof err);
    CHECK(rc == 0, "cholesky %s n=%lld: %s", pname[p], (long long)n, err);
    for (int64_t bb = 0; bb < batch && rc == 0; bb++) {
      const char *lb = (const char *)l + (size_t)(bb * nn) * es;
      if (bb == 1) {
        int all_nan = 1;
        for (int64_t i = 0; i < nn; i++) all_nan &= isnan(creal(eget(p, lb, i)));
        CHECK(all_nan, "cholesky %s of a non-PD matrix must be all NaN (n=%lld)",
              pname[p], (long long)n);
        continue;
      }
      double e = 0, scale = 0;
      for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
          if (j > i) CHECK(eget(p, lb, i * n + j) == 0, "cholesky: upper not zero");
          cplx s = 0;
          for (int64_t q = 0; q < n; q++)
            s += eget(p, lb, i * n + q) * conj(eget(p, lb, j * n + q));
          e = amax(e, cabs(s - her[bb * nn + i * n + j]));
          scale = amax(scale, cabs(her[bb * nn + i * n + j]));
        }
      CHECK(e <= tol_for(p, n) * scale, "cholesky %s n=%lld b=%lld: |LL^H-A|=%g",
            pname[p], (long long)n, (long long)bb, e);
    }
    free(her); free(a); free(l); free(mm);
  }
}

static void test_lu(int p) {
  kl_dtype t = ptype[p];
  size_t es = psize(p);
  static const int64_t shapes[][2] = {{1, 1}, {5, 5}, {7, 3}, {3, 7},
                                      {1, 6}, {6, 1}, {40, 40}};
  /* partial pivoting picks the largest |re| + |im| (i?amax), so |L| is at most
   * 1 for real and sqrt(2) for complex entries */
  double lbound = p >> 1 ? sqrt(2.0) * (1 + 1e-6) : 1.0;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int64_t m = shapes[si][0], n = shapes[si][1], k = m < n ? m : n, batch = 3;
    void *a = xmalloc((size_t)(batch * m * n) * es), *lu = xmalloc((size_t)(batch * m * n) * es);
    int32_t *piv = xmalloc((size_t)(batch * k) * 4), *perm = xmalloc((size_t)(batch * m) * 4);
    for (int64_t i = 0; i < batch * m * n; i++) eset(p, a, i, erandom(p));
    if (m > 1) /* entry 2 singular: row 1 equals row 0 */
      for (int64_t j = 0; j < n; j++)
        eset(p, a, 2 * m * n + n + j, eget(p, a, 2 * m * n + j));
    char err[256] = "";
    int rc = kl_hostla_lu(t, batch, m, n, a, lu, piv, perm, err, sizeof err);
    CHECK(rc == 0, "lu %s %lldx%lld: %s", pname[p], (long long)m, (long long)n, err);
    for (int64_t bb = 0; bb < batch && rc == 0; bb++) {
      const char *ab = (const char *)a + (size_t)(bb * m * n) * es;
      const char *lb = (const char *)lu + (size_t)(bb * m * n) * es;
      int32_t want[64];
      for (int64_t i = 0; i < m; i++) want[i] = (int32_t)i;
      for (int64_t i = 0; i < k; i++) {
        int32_t pv = piv[bb * k + i];
        CHECK(pv >= i && pv < m, "lu pivot %d out of range at %lld", pv, (long long)i);
        if (pv < i || pv >= m) break;
        int32_t tmp = want[i]; want[i] = want[pv]; want[pv] = tmp;
      }
      for (int64_t i = 0; i < m; i++)
        CHECK(perm[bb * m + i] == want[i], "lu perm disagrees with pivots");
      double e = 0, lmax = 0;
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          cplx s = 0;
          for (int64_t q = 0; q < k && q <= i && q <= j; q++) {
            cplx lv = q == i ? 1.0 : eget(p, lb, i * n + q);
            if (q < i) lmax = amax(lmax, cabs(lv));
            s += lv * eget(p, lb, q * n + j);
          }
          e = amax(e, cabs(s - eget(p, ab, perm[bb * m + i] * n + j)));
        }
      CHECK(e <= tol_for(p, n), "lu %s %lldx%lld b=%lld: |A[perm]-LU|=%g", pname[p],
            (long long)m, (long long)n, (long long)bb, e);
      CHECK(lmax <= lbound, "lu %s: partial pivoting must keep |L| <= %g (got %g)", pname[p],
            lbound, lmax);
    }
    free(a); free(lu); free(piv); free(perm);
  }
}

/* transpose_a is a plain transpose for complex a too (lax.linalg's
 * conjugate_a=False): the reference applies no conjugation. */
static void test_triangular_solve(int p) {
  kl_dtype t = ptype[p];
  size_t es = psize(p);
  static const int64_t shapes[][2] = {{4, 3}, {1, 5}, {6, 1}, {20, 20}};
  for (size_t si = 0; si < 4; si++)
    for (int flags = 0; flags < 32; flags++) {
      int left = flags & 1, lower = (flags >> 1) & 1, trans = (flags >> 2) & 1,
          unit = (flags >> 3) & 1, bcast = (flags >> 4) & 1;
      int64_t m = shapes[si][0], n = shapes[si][1], s = left ? m : n, batch = 2;
      int64_t astride = bcast ? 0 : s * s;
      void *a = xmalloc((size_t)(batch * s * s) * es);
      void *b = xmalloc((size_t)(batch * m * n) * es), *x = xmalloc((size_t)(batch * m * n) * es);
      cplx *eff = xmalloc((size_t)(batch * s * s) * sizeof(cplx)); /* op(a) as used */
      for (int64_t bb = 0; bb < batch; bb++)
        for (int64_t i = 0; i < s; i++)
          for (int64_t j = 0; j < s; j++) {
            int in_tri = lower ? j <= i : j >= i;
            cplx v = erandom(p);
            v = i == j ? CMPLX(2 + fabs(creal(v)), cimag(v)) : v / (double)s;
            /* what must not be read is NaN */
            if (!in_tri || (i == j && unit)) eset(p, a, bb * s * s + i * s + j, poison);
            else v = estore(p, a, bb * s * s + i * s + j, v);
            cplx used = !in_tri ? 0 : (i == j && unit) ? 1 : v;
            eff[bb * s * s + (trans ? j * s + i : i * s + j)] = used;
          }
      for (int64_t i = 0; i < batch * m * n; i++) eset(p, b, i, erandom(p));
      char err[256] = "";
      int rc = kl_hostla_triangular_solve(t, batch, m, n, a, astride, b, x,
                                          left, lower, trans, unit, err, sizeof err);
      CHECK(rc == 0, "triangular_solve %s: %s", pname[p], err);
      for (int64_t bb = 0; bb < batch && rc == 0; bb++) {
        const cplx *ea = eff + (bcast ? 0 : bb * s * s);
        const char *xb = (const char *)x + (size_t)(bb * m * n) * es;
        const char *bv = (const char *)b + (size_t)(bb * m * n) * es;
        double e = 0, xm = 0;
        for (int64_t i = 0; i < m * n; i++) xm = amax(xm, cabs(eget(p, xb, i)));
        for (int64_t i = 0; i < m; i++)
          for (int64_t j = 0; j < n; j++) {
            cplx r = 0;
            if (left)
              for (int64_t q = 0; q < m; q++) r += ea[i * m + q] * eget(p, xb, q * n + j);
            else
              for (int64_t q = 0; q < n; q++) r += eget(p, xb, i * n + q) * ea[q * n + j];
            e = amax(e, cabs(r - eget(p, bv, i * n + j)));
          }
        CHECK(isfinite(xm) && e <= tol_for(p, s) * (3 * xm + 1), "triangular_solve %s m=%lld "
              "n=%lld left=%d lower=%d trans=%d unit=%d bcast=%d: residual %g", pname[p],
              (long long)m, (long long)n, left, lower, trans, unit, bcast, e);
      }
      free(a); free(b); free(x); free(eff);
    }
}

static void test_qr(int p) {
  kl_dtype t = ptype[p];
  size_t es = psize(p);
  static const int64_t shapes[][2] = {{1, 1}, {5, 3}, {3, 5}, {6, 6}, {1, 4},
                                      {4, 1}, {30, 20}, {0, 3}, {3, 0}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int full = 0; full < 2; full++) {
      int64_t m = shapes[si][0], n = shapes[si][1], k = m < n ? m : n, batch = 2;
      int64_t qc = full ? m : k, rr = full ? m : k;
      void *a = xmalloc((size_t)(batch * m * n) * es);
      void *q = xmalloc((size_t)(batch * m * qc) * es), *r = xmalloc((size_t)(batch * rr * n) * es);
      for (int64_t i = 0; i < batch * m * n; i++) eset(p, a, i, erandom(p));
      char err[256] = "";
      int rc = kl_hostla_qr(t, batch, m, n, a, q, r, full, err, sizeof err);
      CHECK(rc == 0, "qr %s: %s", pname[p], err);
      for (int64_t bb = 0; bb < batch && rc == 0; bb++) {
        const char *ab = (const char *)a + (size_t)(bb * m * n) * es;
        const char *qb = (const char *)q + (size_t)(bb * m * qc) * es;
        const char *rb = (const char *)r + (size_t)(bb * rr * n) * es;
        double e = 0;
        for (int64_t i = 0; i < rr; i++)
          for (int64_t j = 0; j < i && j < n; j++)
            CHECK(eget(p, rb, i * n + j) == 0, "qr %s: R not upper triangular", pname[p]);
        for (int64_t i = 0; i < m; i++)
          for (int64_t j = 0; j < n; j++) {
            cplx s = 0;
            for (int64_t c = 0; c < rr; c++) s += eget(p, qb, i * qc + c) * eget(p, rb, c * n + j);
            e = amax(e, cabs(s - eget(p, ab, i * n + j)));
          }
        double o = orth_err_cols(p, qb, m, qc);
        CHECK(e <= tol_for(p, m + n) && o <= tol_for(p, m),
              "qr %s %lldx%lld full=%d: |QR-A|=%g |Q^HQ-I|=%g", pname[p], (long long)m,
              (long long)n, full, e, o);
      }
      free(a); free(q); free(r);
    }
}

static void test_eigh(int p) {
  kl_dtype t = ptype[p];
  size_t es = psize(p), rs = rsize(p);
  static const int64_t ns[] = {1, 2, 5, 30};
  for (size_t ni = 0; ni < 4; ni++)
    for (int lower = 0; lower < 2; lower++) {
      int64_t n = ns[ni], nn = n * n, batch = 3;
      cplx *her = xmalloc((size_t)(batch * nn) * sizeof(cplx));
      void *a = xmalloc((size_t)(batch * nn) * es), *v = xmalloc((size_t)(batch * nn) * es);
      void *w = xmalloc((size_t)(batch * n) * rs); /* real eigenvalues */
      for (int64_t bb = 0; bb < batch; bb++)
        for (int64_t i = 0; i < n; i++)
          for (int64_t j = 0; j <= i; j++) {
            cplx x = erandom(p);
            if (i == j) x = creal(x);
            /* the triangle not named by `lower` must not be read */
            int64_t at = bb * nn + (lower ? i * n + j : j * n + i);
            x = estore(p, a, at, lower ? x : conj(x));
            if (!lower) x = conj(x);
            her[bb * nn + i * n + j] = x;
            her[bb * nn + j * n + i] = conj(x);
            if (i != j) eset(p, a, bb * nn + (lower ? j * n + i : i * n + j), poison);
            else eset(p, a, at, CMPLX(creal(x), junk_imag(p)));
          }
      char err[256] = "";
      int rc = kl_hostla_eigh(t, batch, n, a, v, w, lower, err, sizeof err);
      CHECK(rc == 0, "eigh %s: %s", pname[p], err);
      for (int64_t bb = 0; bb < batch && rc == 0; bb++) {
        const char *vb = (const char *)v + (size_t)(bb * nn) * es;
        const char *wb = (const char *)w + (size_t)(bb * n) * rs;
        double e = 0;
        for (int64_t i = 0; i + 1 < n; i++)
          CHECK(rget(p & 1, wb, i) <= rget(p & 1, wb, i + 1), "eigh %s: w not ascending",
                pname[p]);
        for (int64_t i = 0; i < n; i++)
          for (int64_t j = 0; j < n; j++) {
            cplx s = 0;
            for (int64_t q = 0; q < n; q++) s += her[bb * nn + i * n + q] * eget(p, vb, q * n + j);
            e = amax(e, cabs(s - eget(p, vb, i * n + j) * rget(p & 1, wb, j)));
          }
        double o = orth_err_cols(p, vb, n, n);
        CHECK(e <= tol_for(p, n) && o <= tol_for(p, n),
              "eigh %s n=%lld lower=%d: |AV-VW|=%g |V^HV-I|=%g", pname[p], (long long)n,
              lower, e, o);
      }
      free(her); free(a); free(v); free(w);
    }
}

/* General eigenproblem: A v_j = w_j v_j and |v_j| = 1, for real input (whose
 * conjugate pairs the library unpacks) and complex input. */
static void test_eig(int p) {
  kl_dtype t = ptype[p];
  int pc = p | 2; /* the complex precision of w and v */
  size_t es = psize(p), cs = psize(pc);
  static const int64_t ns[] = {1, 2, 5, 30};
  for (size_t ni = 0; ni < 4; ni++) {
    int64_t n = ns[ni], nn = n * n, batch = 2;
    void *a = xmalloc((size_t)(batch * nn) * es), *v = xmalloc((size_t)(batch * nn) * cs);
    void *w = xmalloc((size_t)(batch * n) * cs), *w2 = xmalloc((size_t)(batch * n) * cs);
    for (int64_t i = 0; i < batch * nn; i++) eset(p, a, i, erandom(p));
    char err[256] = "";
    int rc = kl_hostla_eig(t, batch, n, a, w, v, err, sizeof err);
    CHECK(rc == 0, "eig %s: %s", pname[p], err);
    rc |= kl_hostla_eig(t, batch, n, a, w2, NULL, err, sizeof err);
    CHECK(rc == 0, "eig %s (no vectors): %s", pname[p], err);
    for (int64_t bb = 0; bb < batch && rc == 0; bb++) {
      const char *ab = (const char *)a + (size_t)(bb * nn) * es;
      const char *vb = (const char *)v + (size_t)(bb * nn) * cs;
      const char *wb = (const char *)w + (size_t)(bb * n) * cs;
      const char *w2b = (const char *)w2 + (size_t)(bb * n) * cs;
      double e = 0, unit = 0, anorm = 0, far = 0;
      for (int64_t i = 0; i < n; i++) {
        double row = 0;
        for (int64_t j = 0; j < n; j++) row += cabs(eget(p, ab, i * n + j));
        anorm = amax(anorm, row);
      }
      for (int64_t j = 0; j < n; j++) {
        double norm2 = 0;
        for (int64_t i = 0; i < n; i++) {
          cplx s = 0;
          for (int64_t q = 0; q < n; q++) s += eget(p, ab, i * n + q) * eget(pc, vb, q * n + j);
          e = amax(e, cabs(s - eget(pc, vb, i * n + j) * eget(pc, wb, j)));
          norm2 += creal(eget(pc, vb, i * n + j) * conj(eget(pc, vb, i * n + j)));
        }
        unit = amax(unit, fabs(norm2 - 1));
        /* the eigenvalues alone: the same set (the order is LAPACK's) */
        double nearest = INFINITY;
        for (int64_t i = 0; i < n; i++) {
          double dist = cabs(eget(pc, w2b, j) - eget(pc, wb, i));
          if (dist < nearest) nearest = dist;
        }
        far = amax(far, nearest);
      }
      CHECK(e <= tol_for(p, n) * anorm && unit <= tol_for(p, n) && far <= sqrt(tol_for(p, n)) * anorm,
            "eig %s n=%lld: |Av-vw|=%g ||v|-1|=%g eigvals-only differ by %g (|A|=%g)", pname[p],
            (long long)n, e, unit, far, anorm);
    }
    free(a); free(v); free(w); free(w2);
  }
}

/* Schur: A = Z T Z^H with Z unitary, T upper triangular (complex) or in real
 * Schur form (real: below the diagonal only the subdiagonal entries of 2 x 2
 * blocks, each block standardized: equal diagonal, off-diagonal entries of
 * opposite sign), on random matrices in a batch of 3; without Z, the same
 * T up to a unitary similarity (equal Frobenius norm). */
static void test_schur(int p) {
  kl_dtype t = ptype[p];
  size_t es = psize(p);
  static const int64_t ns[] = {1, 2, 5, 30};
  for (size_t ni = 0; ni < 4; ni++) {
    int64_t n = ns[ni], nn = n * n, batch = 3, blocks = 0;
    void *a = xmalloc((size_t)(batch * nn) * es), *tt = xmalloc((size_t)(batch * nn) * es);
    void *z = xmalloc((size_t)(batch * nn) * es), *t2 = xmalloc((size_t)(batch * nn) * es);
    for (int64_t i = 0; i < batch * nn; i++) eset(p, a, i, erandom(p));
    if (n == 2) { /* eigenvalues 1 +- i sqrt(6): a 2 x 2 block for real t */
      static const double rot[4] = {1, -2, 3, 1};
      for (int64_t i = 0; i < 4; i++) eset(p, a, i, rot[i]);
    }
    char err[256] = "";
    int rc = kl_hostla_schur(t, batch, n, a, tt, z, err, sizeof err);
    CHECK(rc == 0, "schur %s: %s", pname[p], err);
    rc |= kl_hostla_schur(t, batch, n, a, t2, NULL, err, sizeof err);
    CHECK(rc == 0, "schur %s (no vectors): %s", pname[p], err);
    for (int64_t bb = 0; bb < batch && rc == 0; bb++) {
      const char *ab = (const char *)a + (size_t)(bb * nn) * es;
      const char *tb = (const char *)tt + (size_t)(bb * nn) * es;
      const char *zb = (const char *)z + (size_t)(bb * nn) * es;
      const char *t2b = (const char *)t2 + (size_t)(bb * nn) * es;
      double anorm = 0, afro = 0, tfro = 0, e = 0, shape = 0;
      for (int64_t i = 0; i < n; i++) {
        double row = 0;
        for (int64_t j = 0; j < n; j++) {
          row += cabs(eget(p, ab, i * n + j));
          afro += pow(cabs(eget(p, ab, i * n + j)), 2);
          tfro += pow(cabs(eget(p, t2b, i * n + j)), 2);
        }
        anorm = amax(anorm, row);
      }
#define T_AT(i, j) eget(p, tb, (i) * n + (j))
      for (int64_t j = 0; j < n; j++)
        for (int64_t i = j + 1; i < n; i++) {
          if (T_AT(i, j) == 0) continue;
          /* a nonzero below the diagonal: real t, subdiagonal, a standardized
           * 2 x 2 block that overlaps no other */
          int ok = p < 2 && i == j + 1 && (j == 0 || T_AT(j, j - 1) == 0) &&
                   (i + 1 == n || T_AT(i + 1, i) == 0) &&
                   creal(T_AT(j, j + 1)) * creal(T_AT(i, j)) < 0;
          shape = amax(shape, ok ? cabs(T_AT(j, j) - T_AT(i, i)) : INFINITY);
          blocks += ok;
        }
      for (int64_t i = 0; i < n; i++) /* Z T Z^H - A */
        for (int64_t j = 0; j < n; j++) {
          cplx s = 0;
          for (int64_t q = 0; q < n; q++)
            for (int64_t r = 0; r < n; r++)
              s += eget(p, zb, i * n + r) * T_AT(r, q) * conj(eget(p, zb, j * n + q));
          e = amax(e, cabs(s - eget(p, ab, i * n + j)));
        }
#undef T_AT
      double o = orth_err_cols(p, zb, n, n), fro = fabs(sqrt(tfro) - sqrt(afro));
      CHECK(e <= tol_for(p, n) * anorm && o <= tol_for(p, n) && shape <= tol_for(p, n) * anorm &&
                fro <= tol_for(p, n) * sqrt(afro),
            "schur %s n=%lld: |ZTZ^H-A|=%g |Z^HZ-I|=%g shape %g |T_noZ|-|A| %g (|A|=%g)",
            pname[p], (long long)n, e, o, shape, fro, anorm);
    }
    /* random real matrices of order 30 have complex eigenvalues: the 2 x 2
     * blocks are exercised, not only the triangular case */
    CHECK(p >= 2 || n < 30 || blocks > 0, "schur %s n=30: no 2x2 block in the batch", pname[p]);
    CHECK(p >= 2 || n != 2 || blocks >= 1, "schur %s n=2: the complex pair is not a block", pname[p]);
    free(a); free(tt); free(z); free(t2);
  }
  /* a NaN in one batch entry: that entry's T and Z are NaN, the others are
   * computed (1 x 1: T = a, Z = 1), and the call succeeds */
  double a[6], tv[6], zv[6];
  static const double vals[3] = {2.0, NAN, 0.5};
  for (int i = 0; i < 3; i++) eset(p, a, i, vals[i]);
  char err[256] = "";
  int rc = kl_hostla_schur(t, 3, 1, a, tv, zv, err, sizeof err);
  CHECK(rc == 0 && eget(p, tv, 0) == 2.0 && eget(p, zv, 0) == 1.0 && isnan(creal(eget(p, tv, 1))) &&
            isnan(creal(eget(p, zv, 1))) && eget(p, tv, 2) == 0.5 && eget(p, zv, 2) == 1.0,
        "schur %s of NaN input: rc=%d %s", pname[p], rc, err);
}

static void test_svd(int p) {
  kl_dtype t = ptype[p];
  size_t es = psize(p), rs = rsize(p);
  int d = p & 1;
  static const int64_t shapes[][2] = {{1, 1}, {5, 3}, {3, 5}, {6, 6}, {1, 4},
                                      {4, 1}, {30, 20}, {0, 3}, {3, 0}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int full = 0; full < 2; full++) {
      int64_t m = shapes[si][0], n = shapes[si][1], k = m < n ? m : n, batch = 2;
      int64_t uc = full ? m : k, vr = full ? n : k;
      void *a = xmalloc((size_t)(batch * m * n) * es), *s = xmalloc((size_t)(batch * k) * rs);
      void *s2 = xmalloc((size_t)(batch * k) * rs);
      void *u = xmalloc((size_t)(batch * m * uc) * es), *vt = xmalloc((size_t)(batch * vr * n) * es);
      for (int64_t i = 0; i < batch * m * n; i++) eset(p, a, i, erandom(p));
      char err[256] = "";
      int rc = kl_hostla_svd(t, batch, m, n, a, u, s, vt, full, 1, err, sizeof err);
      CHECK(rc == 0, "svd %s: %s", pname[p], err);
      rc |= kl_hostla_svd(t, batch, m, n, a, NULL, s2, NULL, full, 0, err, sizeof err);
      CHECK(rc == 0, "svd %s (no uv): %s", pname[p], err);
      for (int64_t bb = 0; bb < batch && rc == 0; bb++) {
        const char *ab = (const char *)a + (size_t)(bb * m * n) * es;
        const char *sb = (const char *)s + (size_t)(bb * k) * rs;
        const char *ub = (const char *)u + (size_t)(bb * m * uc) * es;
        const char *vb = (const char *)vt + (size_t)(bb * vr * n) * es;
        for (int64_t i = 0; i < k; i++) {
          CHECK(rget(d, sb, i) >= 0 && (i == 0 || rget(d, sb, i) <= rget(d, sb, i - 1)),
                "svd %s: s not descending/non-negative", pname[p]);
          CHECK(fabs(rget(d, sb, i) - rget(d, (const char *)s2 + (size_t)(bb * k) * rs, i))
                    <= tol_for(p, m + n), "svd %s: s differs without uv", pname[p]);
        }
        double e = 0;
        for (int64_t i = 0; i < m; i++)
          for (int64_t j = 0; j < n; j++) {
            cplx x = 0;
            for (int64_t c = 0; c < k; c++)
              x += eget(p, ub, i * uc + c) * rget(d, sb, c) * eget(p, vb, c * n + j);
            e = amax(e, cabs(x - eget(p, ab, i * n + j)));
          }
        double ou = orth_err_cols(p, ub, m, uc), ov = orth_err_rows(p, vb, vr, n);
        CHECK(e <= tol_for(p, m + n) && ou <= tol_for(p, m + n) && ov <= tol_for(p, m + n),
              "svd %s %lldx%lld full=%d: |USVh-A|=%g |U^HU-I|=%g |VhVh^H-I|=%g", pname[p],
              (long long)m, (long long)n, full, e, ou, ov);
      }
      free(a); free(s); free(s2); free(u); free(vt);
    }
  /* a NaN input is a NaN result, not an error (gesdd rejects it as "bad
   * argument"; that must not surface) */
  double a[6] = {1, 2, NAN, 4, 5, 6};
  double av[12], s[2], u[8], vt[18];
  for (int i = 0; i < 6; i++) eset(p, av, i, a[i]);
  char err[256] = "";
  int rc = kl_hostla_svd(t, 1, 2, 3, av, u, s, vt, 1, 1, err, sizeof err);
  CHECK(rc == 0 && isnan(rget(d, s, 0)), "svd %s of NaN input: rc=%d %s", pname[p], rc, err);
}

static void test_errors(void) {
  char err[256] = "";
  float a[4] = {1, 0, 0, 1}, l[4];
  uint16_t h[4] = {0};
  int rc = kl_hostla_cholesky(KL_F16, 1, 2, h, h, err, sizeof err);
  CHECK(rc != 0 && strstr(err, "kl_hostla_cholesky") && strstr(err, "float16") &&
            strstr(err, "float32") && strstr(err, "complex64"),
        "cholesky of f16 must name the dtypes: %s", err);
  rc = kl_hostla_gemm(KL_F32, 1, -1, 2, 2, a, 0, 0, a, 0, 0, l, err, sizeof err);
  CHECK(rc != 0 && strstr(err, "kl_hostla_gemm"), "negative m: %s", err);
  rc = kl_hostla_svd(KL_F32, 1, 2, 2, a, NULL, l, NULL, 0, 1, err, sizeof err);
  CHECK(rc != 0 && strstr(err, "kl_hostla_svd"), "svd without u buffer: %s", err);
}

/* ----------------------------------------------------------------- main */

/* Runs this program again with one flag (a fresh process: the library
 * search happens once per process). */
static void run_child(const char *argv0, const char *flag) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", argv0, flag, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0, "the %s run failed", flag);
}

int main(int argc, char **argv) {
  int no_blas = argc > 1 && strcmp(argv[1], "--no-blas") == 0;
  int gesvd = argc > 1 && strcmp(argv[1], "--gesvd") == 0;
  if (no_blas) setenv("KILN_BLAS_LIB", "none", 1);
  if (gesvd) {
    setenv("KILN_SVD_DRIVER", "gesvd", 1);
    for (int p = 0; p < 4; p++) test_svd(p);
    printf("test_hostla --gesvd: %s (%d failures)\n",
           failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
  }
  else kl_hostla_add_search_path("/nonexistent/libnothing.so");
  printf("hostla: library %s, %d-bit integers, lapack %s\n",
         kl_hostla_library(), kl_hostla_index_bits(),
         kl_hostla_lapack_available() ? "yes" : "no");
  CHECK(kl_hostla_add_search_path("/x.so") == -1,
        "add_search_path after the search must be refused");
  test_gemm();
  test_half_rounding();
  test_errors();
  if (no_blas) {
    CHECK(!kl_hostla_available() && strcmp(kl_hostla_library(), "none") == 0,
          "KILN_BLAS_LIB=none must disable the BLAS");
    char err[256] = "";
    double a = 4, l;
    int rc = kl_hostla_cholesky(KL_F64, 1, 1, &a, &l, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "no BLAS/LAPACK"), "no-BLAS cholesky: %s", err);
    bench_sgemm(512, 2);
  } else {
    CHECK(kl_hostla_available(), "no BLAS found (install libopenblas0)");
    for (int p = 0; p < 4; p++) { /* f32, f64, c64, c128 */
      test_cholesky(p);
      test_lu(p);
      test_triangular_solve(p);
      test_qr(p);
      test_eigh(p);
      test_eig(p);
      test_schur(p);
      test_svd(p);
    }
    bench_sgemm(1024, 3);
    if (!getenv("KILN_HOSTLA_NO_CHILD")) {
      run_child(argv[0], "--no-blas"); /* the C kernels */
      run_child(argv[0], "--gesvd");   /* the SVD fallback driver */
    }
  }
  printf("test_hostla%s: %s (%d failures)\n", no_blas ? " --no-blas" : "",
         failures ? "FAILED" : "ok", failures);
  return failures ? 1 : 0;
}
