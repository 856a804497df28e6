/* hostla.h: dense linear algebra on host memory for the CPU runtime: batched
 * matmul (through a BLAS when one can be found) and the LAPACK factorizations
 * behind kiln.lax.linalg. The BLAS/LAPACK is opened at run time with dlopen,
 * so kiln links against none. Depends on ir/dtype.h and the C library only.
 *
 * Conventions for every entry point:
 *  - arrays are row-major, contiguous, host memory, with a leading batch
 *    dimension: argument X of shape (batch, r, c) holds batch * r * c
 *    elements, entry b starting at element b * r * c (unless a *_bstride says
 *    otherwise);
 *  - outputs are caller-allocated and fully written (no aliasing with inputs);
 *  - the return value is 0 on success, nonzero on failure with a message that
 *    names the routine written into err (err may be NULL; errlen its size).
 *  - numerical failures that JAX reports as values (a matrix that is not
 *    positive definite, an eigensolver that does not converge) fill that batch
 *    entry with NaN instead of failing.
 *
 * Library search (first that provides sgemm and dgemm wins; once per process):
 *  1. $KILN_BLAS_LIB (a path or soname; "none" disables the BLAS and selects
 *     the built-in C kernels; LAPACK symbols missing from it are looked up in
 *     $KILN_LAPACK_LIB, if set),
 *  2. libopenblas.so.0, 3. libopenblas.so, 4. libblas.so.3 + liblapack.so.3,
 *  5. libmkl_rt.so.2, libmkl_rt.so,
 *  6. the paths given to kl_hostla_add_search_path, in call order (Python adds
 *     NumPy's bundled scipy-openblas there).
 * Symbol names tried per library: plain Fortran (sgemm_), OpenBLAS 64-bit
 * suffix (sgemm_64_), scipy-openblas (scipy_sgemm_64_, scipy_sgemm_); the
 * LAPACK integer width (32 or 64 bits) is probed by a call, not guessed.
 * The complex routines (c*, z*) are looked up under the same scheme; a library
 * without them still serves every real call, and complex calls fail with a
 * message naming the missing routine; likewise a library without gees serves
 * everything but kl_hostla_schur. */
#ifndef KL_HOSTLA_H
#define KL_HOSTLA_H
#include <stddef.h>
#include <stdint.h>
#include "../ir/dtype.h"

/* Adds a candidate library path, tried after the standard names. Must be
 * called before the first use of any other kl_hostla_ function; returns 0 if
 * recorded, -1 if the library search already ran (or out of memory). The
 * string is copied. Thread-safe. */
int kl_hostla_add_search_path(const char *path);

/* 1 if a BLAS was loaded (triggers the search), else 0. */
int kl_hostla_available(void);

/* Name of the loaded library as it was opened (borrowed, static lifetime), or
 * "none" when the built-in kernels are in use. */
const char *kl_hostla_library(void);

/* Integer width of the loaded BLAS/LAPACK ABI: 32, 64, or 0 when none. */
int kl_hostla_index_bits(void);

/* 1 if the loaded library also provides the real (s, d) LAPACK routines used
 * here; the complex ones (c, z) are checked per call. */
int kl_hostla_lapack_available(void);

/* C[b] = op(A[b]) @ op(B[b]) for b < batch; op(X) = X^T when trans* != 0.
 * op(A) is m x k (A stored k x m when transa), op(B) is k x n (B stored
 * n x k when transb), C is (batch, m, n). a_bstride / b_bstride: elements
 * between consecutive batch entries of A / B; 0 broadcasts one matrix.
 * Every dtype is supported: f32/f64 through the BLAS (or a blocked C kernel
 * without one), f16/bf16 through f32 with round-to-nearest-even on output,
 * integers wrap modulo 2^bits, bool computes OR of ANDs. */
int kl_hostla_gemm(kl_dtype t, int64_t batch, int64_t m, int64_t n, int64_t k,
                   const void *a, int64_t a_bstride, int transa,
                   const void *b, int64_t b_bstride, int transb, void *c,
                   char *err, size_t errlen);
/* The same with C of dtype ot: ot == t, or float16/bfloat16 operands (t) into a float32 C (the
 * float32 product stored as it is). */
int kl_hostla_gemm_to(kl_dtype t, kl_dtype ot, int64_t batch, int64_t m, int64_t n, int64_t k,
                      const void *a, int64_t a_bstride, int transa,
                      const void *b, int64_t b_bstride, int transb, void *c,
                      char *err, size_t errlen);

/* For routines that split their own work over kiln's CPU pool (runtime/hostconv.c): one
 * product on the calling thread, with leading dimensions and accumulation, f32 or f64 only:
 * rows [0, m) of row-major C (ldc) = op(A) (lda) @ op(B) (ldb) + beta * C (beta 0: C is only
 * written). Through the BLAS when there is one (bracket pool work with serial_begin/end so that
 * the BLAS does not start threads of its own), else a plain C loop. */
int kl_hostla_gemm_ld(kl_dtype t, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, int transa,
                      const void *b, int64_t ldb, int transb, double beta, void *c, int64_t ldc, char *err,
                      size_t errlen);
/* Makes the BLAS single-threaded; returns what to hand back to kl_hostla_blas_serial_end. */
int kl_hostla_blas_serial_begin(void);
void kl_hostla_blas_serial_end(int saved);
/* float16/bfloat16 (t) <-> float32, n elements, rounding to nearest even. */
void kl_hostla_half_to_f32(kl_dtype t, const void *src, float *dst, int64_t n);
void kl_hostla_f32_to_half(kl_dtype t, const float *src, void *dst, int64_t n);

/* The LAPACK routines below accept KL_F32, KL_F64, KL_C64 and KL_C128 (numpy's
 * layout: interleaved real, imaginary pairs). Every array argument and output
 * has the element type t, except eigh's w and svd's s, which are real: of
 * kl_dtype_real_part(t) (float32 for complex64, float64 for complex128), and
 * lu's int32 pivots/perm. For complex t, "transpose" below is the plain
 * transpose and ^H the conjugate transpose. */

/* a: (batch, n, n) symmetric (Hermitian) positive definite; only its lower
 * triangle is read (for complex t, and the imaginary parts of its diagonal are
 * taken as zero). l: (batch, n, n) lower Cholesky factor (l @ l^H = a), upper
 * triangle zeroed; all NaN for an entry that is not positive definite. */
int kl_hostla_cholesky(kl_dtype t, int64_t batch, int64_t n, const void *a,
                       void *l, char *err, size_t errlen);

/* LU with partial pivoting, as jax.lax.linalg.lu. a: (batch, m, n).
 * lu: (batch, m, n), unit-lower L below the diagonal and U on and above it.
 * pivots: (batch, min(m, n)), 0-based row swapped with row i at step i.
 * perm: (batch, m), a[perm] == L @ U (perm may be NULL). A singular matrix
 * is not an error (U then has a zero on its diagonal). */
int kl_hostla_lu(kl_dtype t, int64_t batch, int64_t m, int64_t n,
                 const void *a, void *lu, int32_t *pivots, int32_t *perm,
                 char *err, size_t errlen);

/* Triangular solve, as jax.lax.linalg.triangular_solve with conjugate_a
 * false. a: (batch, s, s) with s = left_side ? m : n, entry b at element
 * b * a_bstride (0 broadcasts); only the triangle named by lower is read, and
 * not its diagonal when unit_diagonal. b, out: (batch, m, n).
 * left_side: op(a) @ out = b; else out @ op(a) = b; op = transpose if
 * transpose_a (the plain transpose for complex t, never conjugated). */
int kl_hostla_triangular_solve(kl_dtype t, int64_t batch, int64_t m,
                               int64_t n, const void *a, int64_t a_bstride,
                               const void *b, void *out, int left_side,
                               int lower, int transpose_a, int unit_diagonal,
                               char *err, size_t errlen);

/* Householder QR. a: (batch, m, n); with k = min(m, n):
 * full_matrices: q (batch, m, m), r (batch, m, n);
 * otherwise      q (batch, m, k), r (batch, k, n).
 * q has orthonormal columns (q^H q = I), r is upper triangular (zeros
 * below), q @ r = a. */
int kl_hostla_qr(kl_dtype t, int64_t batch, int64_t m, int64_t n,
                 const void *a, void *q, void *r, int full_matrices,
                 char *err, size_t errlen);

/* Eigendecomposition of general n x n matrices (LAPACK geev). a: (batch, n,
 * n) of t; w: (batch, n) eigenvalues, complex of t's precision (complex64 for
 * float32 and complex64, complex128 for float64 and complex128); v, when not
 * NULL: (batch, n, n) of that complex type, the right eigenvectors as its
 * columns (a @ v = v @ diag(w)), each of unit norm with its largest
 * component real, as LAPACK gives them. */
int kl_hostla_eig(kl_dtype t, int64_t batch, int64_t n, const void *a, void *w,
                  void *v, char *err, size_t errlen);

/* Schur decomposition (LAPACK gees, eigenvalues not sorted), as
 * jax.lax.linalg.schur: a = z @ tout @ z^H. a, tout and z: (batch, n, n) of
 * t. Complex t: tout upper triangular, the eigenvalues on its diagonal. Real
 * t: tout in real Schur form, upper quasi-triangular: a complex conjugate
 * pair of eigenvalues is a 2 x 2 diagonal block (equal diagonal entries,
 * off-diagonal ones of opposite sign), the only nonzeros below the diagonal.
 * z: unitary (orthogonal for real t), the Schur vectors as its columns; may
 * be NULL when they are not wanted. An entry whose input is not finite, or
 * where the QR algorithm does not converge, comes out all NaN. */
int kl_hostla_schur(kl_dtype t, int64_t batch, int64_t n, const void *a,
                    void *tout, void *z, char *err, size_t errlen);

/* Symmetric (Hermitian) eigendecomposition (divide and conquer, syevd /
 * heevd). a: (batch, n, n); only its lower (lower != 0) or upper triangle is
 * read (for complex t, and the imaginary parts of its diagonal are taken as
 * zero). w: (batch, n) eigenvalues ascending, REAL: of kl_dtype_real_part(t);
 * v: (batch, n, n) of t with the eigenvectors as columns (a @ v = v @ diag(w),
 * v^H v = I). */
int kl_hostla_eigh(kl_dtype t, int64_t batch, int64_t n, const void *a,
                   void *v, void *w, int lower, char *err, size_t errlen);

/* Singular value decomposition, a = u @ diag(s) @ vt, s descending, as
 * numpy.linalg.svd: vt is v^H (the conjugate transpose for complex t).
 * a: (batch, m, n), k = min(m, n), s: (batch, k), REAL: of
 * kl_dtype_real_part(t); u and vt of t.
 * compute_uv and full_matrices: u (batch, m, m), vt (batch, n, n);
 * compute_uv only:              u (batch, m, k), vt (batch, k, n);
 * no compute_uv: u and vt are not touched (may be NULL).
 * Uses gesdd and falls back to gesvd for an entry where gesdd fails
 * (KILN_SVD_DRIVER=gesvd, read once at load, forces gesvd everywhere). */
int kl_hostla_svd(kl_dtype t, int64_t batch, int64_t m, int64_t n,
                  const void *a, void *u, void *s, void *vt,
                  int full_matrices, int compute_uv, char *err, size_t errlen);

#endif
