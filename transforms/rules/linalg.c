/* linalg.c: the transformation rules of the linalg family (cholesky qr svd eigh lu
 * triangular_solve; matrices are the last two dims, leading dims batch): JVP, the transpose of
 * triangular_solve in b, batching. Depends only on ir/ and transforms/. */
#include <string.h>

#include "rules.h"

/* ---- JVP ------------------------------------------------------------------------------------- */

static int trsolve(kl_build *a, int m, int b, int left, int flags) {
  if (b < 0) return -1;
  kl_params p;
  kl_params_init(&p, KL_P_TRIANGULAR_SOLVE);
  p.triangular_solve.left_side = left;
  p.triangular_solve.flags = flags;
  int ins[2] = {m, b};
  return kl_build_op(a, KL_P_TRIANGULAR_SOLVE, ins, 2, &p);
}

/* The symmetric matrix a factorization reading only one triangle of its input sees. */
static int sym_from_tri(kl_build *a, int t, int lower) {
  int tri = mul(a, t, kl_ad_tri(a, t, lower, 0)), strict = mul(a, t, kl_ad_tri(a, t, lower, lower ? -1 : 1));
  return add(a, tri, kl_ad_mT(a, strict));
}

/* m broadcast along rows (row = 1: m[..., j] at [..., i, j]) or columns into `like`'s shape. */
static int spread(kl_build *a, int v, int like, int row) {
  kl_aval l = *kl_build_aval(a, like);
  int64_t dims[KL_MAX_RANK];
  for (int d = 0; d < l.ndim - 2; d++) dims[d] = d;
  dims[l.ndim - 2] = row ? l.ndim - 1 : l.ndim - 2;
  return kl_build_broadcast(a, v, l.dims, l.ndim, dims);
}

/* F[i, j] = 1 / d[i, j] off the diagonal, 0 on it. */
static int off_diag_inverse(kl_build *a, int d) {
  int eye = kl_ad_eye_bool(a, d);
  int one = kl_ad_broadcast_like(a, lit(a, 1, d), d), zero = zeros_like(a, d);
  return kl_build_select(a, eye, dv(a, one, kl_build_select(a, eye, d, one)), zero);
}

/* L' = L phi(L^-1 A' L^-T), phi: the lower triangle with the diagonal halved. */
static int cholesky_tangent(kl_build *a, int t, int l) {
  int da = sym_from_tri(a, t, 1);
  int x = trsolve(a, l, trsolve(a, l, da, 0, KL_TRSV_LOWER | KL_TRSV_TRANSPOSE_A), 1, KL_TRSV_LOWER);
  int eye = kl_build_convert(a, kl_ad_eye_bool(a, l), kl_build_aval(a, l)->dtype);
  int phi = add(a, kl_ad_tri(a, l, 1, -1), mul(a, eye, lit(a, 0.5, l)));
  return kl_ad_matmul(a, l, mul(a, x, phi));
}

/* op(A) X = B (left) or X op(A) = B: X' = op(A)^-1 (B' - op(A') X), or (B' - X op(A')) op(A)^-1;
 * A' restricted to the triangle the solve reads. */
static int triangular_solve_tangent(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int x) {
  int left = e->p.triangular_solve.left_side, flags = e->p.triangular_solve.flags, lower = flags & KL_TRSV_LOWER;
  int res = trsolve(a, xs[0], ts[1], left, flags);
  if (ts[0] >= 0) {
    int k = flags & KL_TRSV_UNIT_DIAGONAL ? (lower ? -1 : 1) : 0;
    int da = mul(a, ts[0], kl_ad_tri(a, xs[0], lower, k));
    if (flags & KL_TRSV_TRANSPOSE_A) da = kl_ad_mT(a, da);
    int prod = left ? kl_ad_matmul(a, da, x) : kl_ad_matmul(a, x, da);
    res = kl_build_add(a, res, un(a, KL_P_NEG, trsolve(a, xs[0], prod, left, flags)));
  }
  return res;
}

/* P A = L U (A m x n, k = min(m, n)): with L padded to m x m and U to n x n by identity blocks,
 * L^-1 P A' U^-1 = L^-1 L' + U' U^-1 splits into its strict lower and upper parts (JAX's rule). */
static int lu_tangent(kl_build *a, int x, int t, int lu, int perm) {
  kl_aval xa = *kl_build_aval(a, x);
  int nd = xa.ndim;
  int64_t m = xa.dims[nd - 2], n = xa.dims[nd - 1], k = m < n ? m : n;
  int64_t bd[KL_MAX_RANK];
  for (int d = 0; d < nd - 1; d++) bd[d] = d;
  int pt = kl_ad_take_along(a, t, kl_build_broadcast(a, perm, xa.dims, nd, bd), nd - 2);
  int zero = lit(a, 0, x);
  /* L: the strict lower part of lu's first k columns, padded with zero columns, plus I (m x m) */
  int lk = kl_ad_slice_axis(a, lu, nd - 1, 0, k);
  int l = kl_ad_pad_axis(a, mul(a, lk, kl_ad_tri(a, lk, 1, -1)), zero, nd - 1, 0, m - k);
  l = add(a, l, kl_build_convert(a, kl_ad_eye_bool(a, l), xa.dtype));
  /* U: the upper part of lu's first k rows, padded with zero rows, plus I on rows k.. (n x n) */
  int uk = kl_ad_slice_axis(a, lu, nd - 2, 0, k);
  int u = kl_ad_pad_axis(a, mul(a, uk, kl_ad_tri(a, uk, 0, 0)), zero, nd - 2, 0, n - k);
  if (n > k) {
    int eye = kl_build_convert(a, kl_ad_eye_bool(a, u), xa.dtype);
    int64_t ud[KL_MAX_RANK];
    memcpy(ud, kl_build_aval(a, u)->dims, sizeof(int64_t) * (size_t)nd);
    int low_rows = kl_build_convert(a, kl_build_bin(a, KL_P_GE, kl_build_iota(a, KL_I32, ud, nd, nd - 2),
                                             kl_build_broadcast(a, kl_build_lit(a, (double)k, KL_I32), ud, nd, NULL)),
                                 xa.dtype);
    u = add(a, u, mul(a, eye, low_rows));
  }
  int lau = trsolve(a, u, trsolve(a, l, pt, 1, KL_TRSV_LOWER | KL_TRSV_UNIT_DIAGONAL), 0, 0);
  return add(a, kl_ad_matmul(a, l, mul(a, lau, kl_ad_tri(a, lau, 1, -1))),
             kl_ad_matmul(a, mul(a, lau, kl_ad_tri(a, lau, 0, 0)), u));
}

/* Reduced QR of a tall (m >= n) matrix. */
static int qr_tangents(kl_build *a, const kl_eqn *e, int x, int t, int q, int r, int *touts) {
  kl_aval xa = *kl_build_aval(a, x);
  int64_t m = xa.dims[xa.ndim - 2], n = xa.dims[xa.ndim - 1];
  if (m < n || (e->p.qr.full_matrices && m != n))
    return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiation of qr is not supported yet by kiln for a %lld x %lld matrix%s "
                         "(supported: m >= n with full_matrices=False, or square)",
                      (long long)m, (long long)n, e->p.qr.full_matrices ? " with full_matrices=True" : "");
  int dx_rinv = trsolve(a, r, t, 0, 0);
  int qt = kl_ad_matmul(a, kl_ad_mT(a, q), dx_rinv);
  int low = mul(a, qt, kl_ad_tri(a, qt, 1, -1));
  int om = sub(a, low, kl_ad_mT(a, low)); /* antisymmetric */
  touts[0] = add(a, kl_ad_matmul(a, q, sub(a, om, qt)), dx_rinv);
  touts[1] = kl_ad_matmul(a, sub(a, qt, om), r);
  return 0;
}

/* A = V diag(w) V^T: w' = diag(V^T A' V), V' = V (F * V^T A' V), F_ij = 1 / (w_j - w_i). */
static int eigh_tangents(kl_build *a, const kl_eqn *e, int t, int v, int w, int *touts) {
  int vav = kl_ad_matmul(a, kl_ad_mT(a, v), kl_ad_matmul(a, sym_from_tri(a, t, e->p.eigh.lower), v));
  int f = off_diag_inverse(a, sub(a, spread(a, w, vav, 1), spread(a, w, vav, 0)));
  touts[0] = kl_ad_matmul(a, v, mul(a, f, vav));
  touts[1] = kl_ad_diag(a, vav);
  return 0;
}

/* SVD A = U diag(s) V^T (reduced, or square). */
static int svd_tangents(kl_build *a, const kl_eqn *e, int x, int t, const int *ys, int *touts) {
  kl_aval xa = *kl_build_aval(a, x);
  int64_t m = xa.dims[xa.ndim - 2], n = xa.dims[xa.ndim - 1];
  int full = e->p.svd.full_matrices, uv = e->p.svd.compute_uv;
  if (uv && full && m != n)
    return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiation of svd with full_matrices=True of a non-square matrix (%lld x %lld) "
                         "is not supported yet by kiln; use full_matrices=False", (long long)m, (long long)n);
  int u = ys[0], s = ys[1], vt = ys[2];
  if (!uv) {
    kl_params p = e->p;
    p.svd.full_matrices = 0;
    p.svd.compute_uv = 1;
    int o[KL_MAX_OUTS];
    if (kl_build_emit(a, KL_P_SVD, &x, 1, &p, o) < 0) return -1;
    u = o[0], s = o[1], vt = o[2];
  }
  int v = kl_ad_mT(a, vt), ut = kl_ad_mT(a, u);
  int ds = kl_ad_matmul(a, ut, kl_ad_matmul(a, t, v));
  touts[uv ? 1 : 0] = kl_ad_diag(a, ds);
  if (!uv) return 0;
  int srow = spread(a, s, ds, 1), scol = spread(a, s, ds, 0);
  int f = off_diag_inverse(a, sub(a, sq(a, srow), sq(a, scol)));
  int dss = mul(a, ds, srow), sds = mul(a, scol, ds);
  int du = kl_ad_matmul(a, u, mul(a, f, add(a, dss, kl_ad_mT(a, dss))));
  int dvv = kl_ad_matmul(a, v, mul(a, f, add(a, sds, kl_ad_mT(a, sds))));
  if (m != n) { /* the part of A' outside the span of the thin factors */
    int sz = kl_build_convert(a, kl_build_bin(a, KL_P_EQ, s, lit(a, 0, s)), xa.dtype);
    int sinv = sub(a, dv(a, lit(a, 1, s), add(a, s, sz)), sz);
    if (m > n) {
      int dav = kl_ad_matmul(a, t, v);
      int rest = sub(a, dav, kl_ad_matmul(a, u, kl_ad_matmul(a, ut, dav)));
      du = add(a, du, mul(a, rest, spread(a, sinv, rest, 1)));
    } else {
      int dau = kl_ad_matmul(a, kl_ad_mT(a, t), u);
      int rest = sub(a, dau, kl_ad_matmul(a, v, kl_ad_matmul(a, vt, dau)));
      dvv = add(a, dvv, mul(a, rest, spread(a, sinv, rest, 1)));
    }
  }
  touts[0] = du;
  touts[2] = kl_ad_mT(a, dvv);
  return 0;
}

/* cholesky, qr, eigh and svd's rules are written for real matrices (transposes where complex ones
 * need conjugate transposes): complex operands are refused until they are derived. lu's and
 * triangular_solve's are holomorphic and take complex matrices as they are. */
static int complex_refused(kl_build *a, const kl_eqn *e, int x) {
  if (!kl_dtype_is_complex(kl_build_aval(a, x)->dtype)) return 0;
  return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiation of %s of complex matrices is not supported yet by kiln",
                       kl_prim_get(e->prim)->name);
}

static int cholesky_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (complex_refused(a, e, xs[0])) return -1;
  touts[0] = cholesky_tangent(a, ts[0], ys[0]);
  return 0;
}

static int triangular_solve_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  touts[0] = triangular_solve_tangent(a, e, xs, ts, ys[0]);
  return 0;
}

static int lu_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)e; /* holomorphic (no conjugate in it): complex matrices too */
  touts[0] = lu_tangent(a, xs[0], ts[0], ys[0], ys[2]);
  return 0;
}

static int qr_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (complex_refused(a, e, xs[0])) return -1;
  return qr_tangents(a, e, xs[0], ts[0], ys[0], ys[1], touts);
}

static int eigh_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (complex_refused(a, e, xs[0])) return -1;
  return eigh_tangents(a, e, ts[0], ys[0], ys[1], touts);
}

/* x solving v x = b (v square, b a matrix stack): v's LU, b's rows permuted, two triangular solves. */
static int lu_solve(kl_build *a, int v, int b) {
  int o[KL_MAX_OUTS];
  if (kl_build_emit(a, KL_P_LU, &v, 1, NULL, o) < 0) return -1;
  int lu = o[0], perm = o[2];
  kl_aval ba = *kl_build_aval(a, b);
  int nd = ba.ndim;
  int64_t bd[KL_MAX_RANK];
  for (int d = 0; d < nd - 1; d++) bd[d] = d;
  int pb = kl_ad_take_along(a, b, kl_build_broadcast(a, perm, ba.dims, nd, bd), nd - 2);
  return trsolve(a, lu, trsolve(a, lu, pb, 1, KL_TRSV_LOWER | KL_TRSV_UNIT_DIAGONAL), 1, 0);
}

/* Eigenvalues only, as JAX (eq. 4.60 of arXiv:1701.00392): dw = diag(v^-1 da v), with v the right
 * eigenvectors (computed again when the primal did not ask for them). Eigenvectors' derivatives
 * raise, as in JAX. */
static int eig_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  if (e->p.eig.vectors)
    return kl_build_fail(a, KL_ERR_UNSUPPORTED, "differentiation of eig's eigenvectors is not supported (as in JAX, "
                         "only the eigenvalues: use eigvals, or compute the eigenvectors under stop_gradient)");
  kl_params p;
  kl_params_init(&p, KL_P_EIG);
  p.eig.vectors = 1;
  int o[KL_MAX_OUTS];
  if (kl_build_emit(a, KL_P_EIG, &xs[0], 1, &p, o) < 0) return -1;
  int v = o[1];
  int da = kl_build_convert(a, ts[0], kl_build_aval(a, v)->dtype);
  touts[0] = kl_ad_diag(a, kl_ad_matmul(a, lu_solve(a, v, da), v));
  return 0;
}

static int svd_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (complex_refused(a, e, xs[0])) return -1;
  return svd_tangents(a, e, xs[0], ts[0], ys, touts);
}

/* ---- transpose ------------------------------------------------------------------------------- */

/* triangular_solve is linear in b: solve with op(A)^T on the same side. */
static int triangular_solve_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  if (i != 1) return kl_transpose_unsupported(c, e);
  kl_params p;
  memset(&p, 0, sizeof p);
  p.triangular_solve.left_side = e->p.triangular_solve.left_side;
  p.triangular_solve.flags = e->p.triangular_solve.flags ^ KL_TRSV_TRANSPOSE_A;
  return kl_build_op(c->a, KL_P_TRIANGULAR_SOLVE, (int[]){kl_tr_prim_of(c, e->ins[0]), ct}, 2, &p);
}

/* ---- batching -------------------------------------------------------------------------------- */

/* Linear algebra already maps over leading batch dimensions. */
static int linalg_batch(kl_build *b, rule_args *r) { return kl_batch_all(b, r, &r->e->p); }

/* ---- the table ------------------------------------------------------------------------------- */

const kl_rule_row kl_rules_linalg[] = {
    {KL_P_CHOLESKY, cholesky_jvp, NULL, linalg_batch, NULL, NULL, NULL},
    {KL_P_QR, qr_jvp, NULL, linalg_batch, NULL, NULL, NULL},
    {KL_P_SVD, svd_jvp, NULL, linalg_batch, NULL, NULL, NULL},
    {KL_P_EIGH, eigh_jvp, NULL, linalg_batch, NULL, NULL, NULL},
    {KL_P_LU, lu_jvp, NULL, linalg_batch, NULL, NULL, NULL},
    {KL_P_EIG, eig_jvp, NULL, linalg_batch, NULL, NULL, NULL},
    {KL_P_SCHUR, NULL, NULL, linalg_batch, NULL, NULL, NULL},
    {KL_P_TRIANGULAR_SOLVE, triangular_solve_jvp, triangular_solve_transpose, linalg_batch, NULL, NULL, NULL},
    KL_RULES_END};
