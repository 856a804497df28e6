/* cusolver.h: dense linear algebra on the GPU (runtime/cusolver.c): cholesky, lu, qr, eigh, svd
 * and triangular_solve on batches of row-major matrices in device memory, through cuSOLVER and
 * cuBLAS opened at run time, queued on kiln's stream with no host round trip. The same contracts
 * as the host routines of runtime/hostla.h (layouts, pivots, NaN results). Depends on ir/dtype.h
 * only; codegen/ fills a kl_solver_call from a linalg step. */
#ifndef KL_CUSOLVER_H
#define KL_CUSOLVER_H
#include <stddef.h>
#include <stdint.h>

#include "../ir/dtype.h"

/* The operations (one per linalg primitive the GPU runs). */
typedef enum { KL_SOLVER_CHOLESKY, KL_SOLVER_LU, KL_SOLVER_QR, KL_SOLVER_EIGH, KL_SOLVER_SVD, KL_SOLVER_TRSM } kl_solver_op;

/* One step's work. t: float32, float64, complex64 or complex128 (interleaved). Each matrix is
 * m x n (cholesky, eigh: n x n; trsm: m x n is b, a is s x s with s = m when left_side, else n),
 * batch of them one after another. Operands and results as kl_hostla_* take them:
 *   cholesky  in a            out l (lower; NaN where a is not positive definite)
 *   lu        in a            out lu, pivots (int32, k = min(m,n), 0-based), permutation (int32, m)
 *   qr        in a            out q (m x (full ? m : k)), r ((full ? m : k) x n)
 *   eigh      in a            out v (eigenvectors as columns), w (ascending, real); NaN on failure
 *   svd       in a            out u, s, vt (compute_uv) or s; s descending and real; NaN on failure
 *   trsm      in a, b         out x with op(a) x = b (left_side) or x op(a) = b */
typedef struct {
  kl_solver_op op;
  kl_dtype t;
  int64_t batch, m, n;
  int full_matrices, compute_uv; /* qr, svd */
  int lower;                     /* eigh: read a's lower triangle; trsm: a is lower triangular */
  int left_side, transpose_a, unit_diagonal; /* trsm */
} kl_solver_call;

/* A candidate path: libcusolver itself, or a folder holding it or the nvidia-cusolver wheel. */
int kl_cusolver_add_search_path(const char *path);
/* 1 when cuSOLVER (and the cuBLAS it leans on, and the helper kernels) can run; else 0 with why. */
int kl_cusolver_available(char *reason, size_t n);
const char *kl_cusolver_library(void);
/* Whether c is a call these routines take (dtype, sizes within cuSOLVER's int range, nothing
 * empty); 0 yes, -1 no (the step stays a host routine). */
int kl_cusolver_check(const kl_solver_call *c);
/* The routine that runs c ("potrfBatched", "syevd"...), for KILN_LOG_COMPILES. */
const char *kl_cusolver_routine(const kl_solver_call *c);
/* Whether c's routine may be captured into a CUDA graph (0: the executable runs step by step). */
int kl_cusolver_capturable(const kl_solver_call *c);
/* Queues c on kiln's stream: in[] and out[] are device pointers (inputs preserved). Work areas
 * are cached per shape; one first met while a graph is captured is kept for the process. 0, or -1
 * with a message (never for what the data holds: failures become NaN results, as on the host). */
int kl_cusolver_run(const kl_solver_call *c, void *const *in, void *const *out, char *err, size_t errlen);
/* The helper kernels' PTX (tests/c assembles it with ptxas). */
const char *kl_cusolver_ptx(void);
#endif
