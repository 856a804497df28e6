/* lapack.c: the LAPACK entry points of hostla.h (cholesky, lu,
 * triangular_solve, qr, eigh, eig, schur, svd): the row-major <-> column-major
 * bookkeeping around the Fortran routines that hostla.c found at run time
 * (hostla_lib.h). Must not depend on Python, MLIR or CUDA, nor link to any
 * LAPACK. */
#define _POSIX_C_SOURCE 200809L
#include "hostla_lib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Every routine is called through its Fortran entry point: all arguments by
 * reference, so one pointer type serves both precisions of a kind and both
 * integer widths (integers live in a `bint` written at the width the library
 * uses); complex routines that take extra real workspace (rwork) have their
 * own types. Character arguments are followed by their hidden lengths
 * (gfortran ABI); routines written in C ignore the extra arguments. */
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
typedef void (*gees_fn)(const char *, const char *, void *, void *, void *,
                        void *, void *, void *, void *, void *, void *, void *,
                        void *, void *, void *, size_t, size_t); /* also cgees */

/* kl_hostla_lib.fn's precision index of a dtype the LAPACK routines take, or -1. */
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

/* ------------------------------------------------- element-wise helpers */

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

/* ------------------------------------------------------- entry points */

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
  if (!kl_hostla_available())
    return fail(err, errlen, KL_ERR_INTERNAL, "%s: no BLAS/LAPACK library was found (tried "
                "$KILN_BLAS_LIB, libopenblas.so.0, libopenblas.so, "
                "libblas.so.3 + liblapack.so.3, libmkl_rt.so and NumPy's "
                "bundled OpenBLAS); install one (apt-get install libopenblas0) "
                "or point KILN_BLAS_LIB at one", who);
  for (int r = 0; r < R_COUNT; r++)
    if (((mask >> r) & 1) && !kl_hostla_lib.fn[p][r])
      return fail(err, errlen, KL_ERR_INTERNAL, "%s: the loaded library %s has no %c%s "
                  "routine (needed for %s); set KILN_LAPACK_LIB to a LAPACK library", who,
                  kl_hostla_lib.name, prec_letter[p], routine_names[r][p >> 1], dtype_label(t));
  for (int i = 1; i < ndims; i++) /* dims[0] is the batch, a C loop count */
    if (!fits(dims[i]))
      return fail(err, errlen, KL_ERR_INTERNAL, "%s: dimension %lld exceeds the 32-bit LAPACK "
                  "integer range of %s", who, (long long)dims[i], kl_hostla_lib.name);
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
    ((potrf_fn)kl_hostla_lib.fn[p][R_POTRF])("U", bi(&sn, n), lb, bi(&slda, n),
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
  void *ipiv = malloc((size_t)(k ? k : 1) * (size_t)(kl_hostla_lib.bits / 8));
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
      ((getrf_fn)kl_hostla_lib.fn[p][R_GETRF])(bi(&sm, m), bi(&sn, n), w, bi(&slda, m),
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
    ((trsm_fn)kl_hostla_lib.fn[p][R_TRSM])(
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
    ((geqrf_fn)kl_hostla_lib.fn[p][R_GEQRF])(bi(&sm, m), bi(&sn, n), w, bi(&slda, lda),
                                   tau, q1, bi(&slw, -1), bi(&sinfo, 0));
    ((orgqr_fn)kl_hostla_lib.fn[p][R_ORGQR])(bi(&sm, m), bi(&sn, qc), bi(&sk, k), qb,
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
    ((geqrf_fn)kl_hostla_lib.fn[p][R_GEQRF])(bi(&sm, m), bi(&sn, n), w, bi(&slda, lda),
                                   tau, work, bi(&slw, lwork), bi(&sinfo, 0));
    int64_t info = bget(&sinfo);
    if (info == 0) {
      memcpy(qb, w, (size_t)(m * k) * esz); /* reflectors: first k columns */
      ((orgqr_fn)kl_hostla_lib.fn[p][R_ORGQR])(bi(&sm, m), bi(&sn, qc), bi(&sk, k), qb,
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
    ((heevd_fn)kl_hostla_lib.fn[p][R_SYEVD])("V", uplo, bi(&sn, n), a, bi(&slda, n), w,
                                   work, bi(&slw, lwork), rwork,
                                   bi(&slrw, lrwork), iwork, bi(&sliw, liwork),
                                   info, 1, 1);
  else
    ((syevd_fn)kl_hostla_lib.fn[p][R_SYEVD])("V", uplo, bi(&sn, n), a, bi(&slda, n), w,
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
  iwork = malloc((size_t)liwork * (size_t)(kl_hostla_lib.bits / 8));
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
    ((geev_fn)kl_hostla_lib.fn[p][R_GEEV])("N", jobvr, bi(&sn, n), a, bi(&slda, n), w1,
                                 dummy, bi(&sone, 1), vr, bi(&sldvr, ldvr),
                                 work, bi(&slw, lwork), w2, info, 1, 1);
  else
    ((geev_fn)kl_hostla_lib.fn[p][R_GEEV])("N", jobvr, bi(&sn, n), a, bi(&slda, n), w1,
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

/* One gees call with no sorting (SELECT and BWORK are not referenced). Real
 * p: eigenvalues into w1 (real parts) and w2 (imaginary parts). Complex p:
 * eigenvalues into w1 (complex), w2 is the rwork of n reals. A workspace
 * query when lwork is -1. */
static void gees_call(int p, const char *jobvs, int64_t n, void *a, void *w1,
                      void *w2, void *vs, int64_t ldvs, void *work,
                      int64_t lwork, bint *info) {
  double bwork[1] = {0};
  bint sn, slda, ssdim, sldvs, slw;
  gees_fn f = (gees_fn)kl_hostla_lib.fn[p][R_GEES];
  if (p >> 1)
    f(jobvs, "N", NULL, bi(&sn, n), a, bi(&slda, n), bi(&ssdim, 0), w1, vs,
      bi(&sldvs, ldvs), work, bi(&slw, lwork), w2, bwork, info, 1, 1);
  else
    f(jobvs, "N", NULL, bi(&sn, n), a, bi(&slda, n), bi(&ssdim, 0), w1, w2,
      vs, bi(&sldvs, ldvs), work, bi(&slw, lwork), bwork, info, 1, 1);
}

/* gees on a column-major copy of a, so LAPACK factors a itself (not a^T) and
 * T and Z come back column-major: transposed into the row-major outputs.
 * Non-finite input is answered with NaN before LAPACK sees it: gebal rejects
 * NaN as an illegal argument, and xerbla would print about it. */
int kl_hostla_schur(kl_dtype t, int64_t batch, int64_t n, const void *a,
                    void *tout, void *z, char *err, size_t errlen) {
  const char *who = "kl_hostla_schur";
  int64_t dims[] = {batch, n, n * n};
  if (lapack_begin(t, who, 1u << R_GEES, dims, 3, err, errlen)) return 1;
  int p = prec_of(t), d = p & 1, cx = p >> 1;
  int64_t nc = 1 + cx;
  size_t esz = ESZ(p), rsz = RSZ(p), mat = (size_t)(n * n) * esz;
  if (batch == 0 || n == 0) return 0;
  const char *jobvs = z ? "V" : "N";
  /* w: eigenvalues, real parts (real a) or complex (complex a); w2: their
   * imaginary parts (real a) or rwork (complex a). Both discarded: the
   * eigenvalues are T's diagonal (blocks). */
  void *buf = malloc(mat), *vs = malloc(z ? mat : esz), *w = malloc((size_t)(n * nc) * rsz),
       *w2 = malloc((size_t)n * rsz), *work = NULL;
  int rc = 0;
  if (!buf || !vs || !w || !w2) goto oom;
  double wq[2] = {0, 0};
  bint sinfo;
  gees_call(p, jobvs, n, buf, w, w2, vs, z ? n : 1, wq, -1, &sinfo);
  int64_t lwork = lwork_from(wq, d, cx ? 2 * n : 3 * n); /* documented minimums */
  if (!fits(lwork)) {
    rc = fail(err, errlen, KL_ERR_INTERNAL, "%s: workspace exceeds the 32-bit LAPACK range "
              "(n=%lld)", who, (long long)n);
    goto out;
  }
  work = malloc((size_t)lwork * esz);
  if (!work) goto oom;
  for (int64_t bb = 0; bb < batch; bb++) {
    const char *ab = (const char *)a + bb * mat;
    char *to = (char *)tout + bb * mat, *zo = z ? (char *)z + bb * mat : NULL;
    int64_t info = 1;
    if (!has_nonfinite(ab, n * n * nc, d)) {
      transpose(ab, buf, n, n, esz);
      gees_call(p, jobvs, n, buf, w, w2, vs, z ? n : 1, work, lwork, &sinfo);
      info = bget(&sinfo);
    }
    if (info < 0) {
      rc = fail(err, errlen, KL_ERR_INTERNAL, "%s: %cgees rejected argument %lld", who,
                prec_letter[p], (long long)-info);
      goto out;
    }
    if (info != 0) { /* no convergence (or non-finite input): NaN, as JAX */
      fill_nan(to, n * n * nc, d);
      if (zo) fill_nan(zo, n * n * nc, d);
      continue;
    }
    transpose(buf, to, n, n, esz);
    if (zo) transpose(vs, zo, n, n, esz);
  }
  goto out;
oom:
  rc = fail(err, errlen, KL_ERR_NOMEM, "%s: out of memory (n=%lld)", who, (long long)n);
out:
  free(buf); free(vs); free(w); free(w2); free(work);
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
  void *f = kl_hostla_lib.fn[p][use_gesvd ? R_GESVD : R_GESDD];
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
  void *iwork = malloc((size_t)(8 * k) * (size_t)(kl_hostla_lib.bits / 8));
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
    if (!kl_hostla_lib.force_gesvd) {
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
