/* linalg.c: lowering of the linalg family (cholesky, qr, svd, eigh, lu, triangular_solve):
 * library steps through LAPACK (host) or cuSOLVER (kl_lower_solver_layout describes a step to
 * runtime/cusolver.c). Depends on lower.h only. */
#include <stdio.h>

#include "../../runtime/hostla.h"
#include "lower.h"

/* ---- linalg ---- */

static int64_t batch_of(const kl_aval *a, int core) {
  int64_t b = 1;
  for (int i = 0; i < a->ndim - core; i++) b *= a->dims[i];
  return b;
}

/* An operand as the routine takes it: packed complex ([..., 2] real, bit 0 of `packed`) unpacked. */
static kl_aval logical(const kl_libcall *c, int i, int packed) {
  kl_aval a = c->avals[i];
  if (packed & 1) {
    a.ndim--;
    a.dtype = kl_dtype_complex_of(a.dtype);
  }
  return a;
}

static int packed_flag(const kl_libcall *c) {
  switch (c->prim) {
  case KL_P_CHOLESKY: case KL_P_LU: case KL_P_SCHUR: return c->p.linalg.packed;
  case KL_P_QR: return c->p.qr.packed;
  case KL_P_SVD: return c->p.svd.packed;
  case KL_P_EIGH: return c->p.eigh.packed;
  case KL_P_EIG: return c->p.eig.packed;
  case KL_P_TRIANGULAR_SOLVE: return c->p.triangular_solve.packed;
  default: return 0;
  }
}

static int run_linalg(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  int packed = packed_flag(c);
  kl_aval av = logical(c, 0, packed), bv = c->nin > 1 ? logical(c, 1, packed) : av;
  const kl_aval *a = &av;
  kl_dtype t = a->dtype;
  int r = a->ndim;
  int64_t batch = batch_of(a, 2), m = a->dims[r - 2], n = a->dims[r - 1];
  void *const *out = ptrs + c->nin;
  switch (c->prim) {
  case KL_P_CHOLESKY: return kl_hostla_cholesky(t, batch, n, ptrs[0], out[0], err, errlen);
  case KL_P_LU: return kl_hostla_lu(t, batch, m, n, ptrs[0], out[0], out[1], out[2], err, errlen);
  case KL_P_QR: return kl_hostla_qr(t, batch, m, n, ptrs[0], out[0], out[1], c->p.qr.full_matrices, err, errlen);
  case KL_P_EIGH: return kl_hostla_eigh(t, batch, n, ptrs[0], out[0], out[1], c->p.eigh.lower, err, errlen);
  case KL_P_SCHUR: return kl_hostla_schur(t, batch, n, ptrs[0], out[0], out[1], err, errlen);
  case KL_P_EIG: /* packed by the complex pass: interleaved complex results */
    if (!c->p.eig.packed) return kl_lower_missing(c->prim, "unpacked complex", err, errlen);
    return kl_hostla_eig(t, batch, n, ptrs[0], out[0], c->p.eig.vectors ? out[1] : NULL, err, errlen);
  case KL_P_SVD:
    if (!c->p.svd.compute_uv) return kl_hostla_svd(t, batch, m, n, ptrs[0], NULL, out[0], NULL, 0, 0, err, errlen);
    return kl_hostla_svd(t, batch, m, n, ptrs[0], out[0], out[1], out[2], c->p.svd.full_matrices, 1, err, errlen);
  case KL_P_TRIANGULAR_SOLVE: {
    const kl_aval *b = &bv;
    int64_t bm = b->dims[b->ndim - 2], bn = b->dims[b->ndim - 1], s = c->p.triangular_solve.left_side ? bm : bn;
    return kl_hostla_triangular_solve(t, batch_of(b, 2), bm, bn, ptrs[0], s * s, ptrs[1], out[0], c->p.triangular_solve.left_side,
                                      (c->p.triangular_solve.flags & KL_TRSV_LOWER) != 0, (c->p.triangular_solve.flags & KL_TRSV_TRANSPOSE_A) != 0,
                                      (c->p.triangular_solve.flags & KL_TRSV_UNIT_DIAGONAL) != 0, err, errlen);
  }
  default: return kl_lower_missing(c->prim, "CPU library", err, errlen);
  }
}

int kl_lower_solver_layout(const kl_libcall *c, kl_solver_call *s) {
  int packed = packed_flag(c);
  kl_aval av = logical(c, 0, packed), bv = c->nin > 1 ? logical(c, 1, packed) : av;
  const kl_aval *a = c->prim == KL_P_TRIANGULAR_SOLVE ? &bv : &av; /* the shape that sizes the call */
  if (a->ndim < 2) return -1;
  *s = (kl_solver_call){.t = a->dtype, .batch = batch_of(a, 2), .m = a->dims[a->ndim - 2], .n = a->dims[a->ndim - 1]};
  switch (c->prim) {
  case KL_P_CHOLESKY: s->op = KL_SOLVER_CHOLESKY; break;
  case KL_P_LU: s->op = KL_SOLVER_LU; break;
  case KL_P_QR:
    s->op = KL_SOLVER_QR;
    s->full_matrices = c->p.qr.full_matrices;
    break;
  case KL_P_EIGH:
    s->op = KL_SOLVER_EIGH;
    s->lower = c->p.eigh.lower;
    break;
  case KL_P_SVD:
    s->op = KL_SOLVER_SVD;
    s->full_matrices = c->p.svd.full_matrices;
    s->compute_uv = c->p.svd.compute_uv;
    break;
  case KL_P_TRIANGULAR_SOLVE:
    if (batch_of(&av, 2) != s->batch) return -1; /* a broadcast over b's batch: the host routine */
    s->op = KL_SOLVER_TRSM;
    s->left_side = c->p.triangular_solve.left_side;
    s->lower = (c->p.triangular_solve.flags & KL_TRSV_LOWER) != 0;
    s->transpose_a = (c->p.triangular_solve.flags & KL_TRSV_TRANSPOSE_A) != 0;
    s->unit_diagonal = (c->p.triangular_solve.flags & KL_TRSV_UNIT_DIAGONAL) != 0;
    break;
  default: return -1; /* eig, schur: no GPU routine (cuSOLVER's geev is recent and slow); the host */
  }
  return kl_cusolver_check(s);
}

#define SOLVER .gpu_library = KL_GPU_LIB_SOLVER
const kl_lowering kl_lower_linalg[] = {
    {KL_P_CHOLESKY, .fuses = 0, .cpu_lib = run_linalg, SOLVER}, {KL_P_QR, .fuses = 0, .cpu_lib = run_linalg, SOLVER},
    {KL_P_SVD, .fuses = 0, .cpu_lib = run_linalg, SOLVER},      {KL_P_EIGH, .fuses = 0, .cpu_lib = run_linalg, SOLVER},
    {KL_P_LU, .fuses = 0, .cpu_lib = run_linalg, SOLVER},
    {KL_P_TRIANGULAR_SOLVE, .fuses = 0, .cpu_lib = run_linalg, SOLVER},
    {KL_P_EIG, .fuses = 0, .cpu_lib = run_linalg},      {KL_P_SCHUR, .fuses = 0, .cpu_lib = run_linalg},
};
const int kl_lower_linalg_n = sizeof kl_lower_linalg / sizeof *kl_lower_linalg;
