/* linalg.c: the linalg family's params and shape rule: cholesky, qr, svd, eigh, lu and
 * triangular_solve on (batches of) float32/float64 matrices. Depends only on ir/. */
#include "prims.h"

#include <string.h>

/* `packed` (set by the complex pass): complex results are real arrays with a trailing axis of 2,
 * and so are the operands when bit 0 is set (KL_PACKED_*); the rules below see them unpacked. */
const kl_param_field kl_fields_linalg[] = {KL_FIELD(linalg, packed, INT32), {NULL, 0, 0}};
const kl_param_field kl_fields_qr[] = {KL_FIELD(qr, full_matrices, INT32), KL_FIELD(qr, packed, INT32), {NULL, 0, 0}};
const kl_param_field kl_fields_svd[] = {KL_FIELD(svd, full_matrices, INT32), KL_FIELD(svd, compute_uv, INT32),
                                        KL_FIELD(svd, packed, INT32), {NULL, 0, 0}};
const kl_param_field kl_fields_eigh[] = {KL_FIELD(eigh, lower, INT32), KL_FIELD(eigh, packed, INT32), {NULL, 0, 0}};
const kl_param_field kl_fields_eig[] = {KL_FIELD(eig, vectors, INT32), KL_FIELD(eig, packed, INT32), {NULL, 0, 0}};
const kl_param_field kl_fields_triangular_solve[] = {KL_FIELD(triangular_solve, left_side, INT32),
                                                     KL_FIELD(triangular_solve, flags, INT32),
                                                     KL_FIELD(triangular_solve, packed, INT32), {NULL, 0, 0}};

static int is_linalg_dtype(kl_dtype t) { return t == KL_F32 || t == KL_F64 || t == KL_C64 || t == KL_C128; }

static int need_matrix(kl_rule_err *e, const char *op, const kl_aval *x, int square) {
  char b1[160];
  if (x->ndim < 2)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: expects a matrix or a batch of matrices (rank >= 2), got %s", op,
                        kl_rule_shape_str(x, b1, sizeof b1));
  if (square && x->dims[x->ndim - 1] != x->dims[x->ndim - 2])
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: expects square matrices, got %s", op, kl_rule_shape_str(x, b1, sizeof b1));
  return 0;
}

static int rule_triangular_solve(kl_rule_err *e, const kl_aval *ins, int nin, const kl_params *p, kl_aval *out) {
  const kl_aval *a = &ins[0], *b = &ins[1];
  char b1[160], b2[160];
  if (nin != 2) return kl_rule_fail(e, KL_ERR_VALUE, "triangular_solve: expects a and b");
  if (need_matrix(e, "triangular_solve", a, 1) || need_matrix(e, "triangular_solve", b, 0)) return -1;
  if (a->dtype != b->dtype || !is_linalg_dtype(a->dtype))
    return kl_rule_fail(e, KL_ERR_TYPE, "triangular_solve: a and b must share a dtype float32, float64, complex64 or "
                        "complex128, got %s and %s",
                        kl_dtype_name(a->dtype), kl_dtype_name(b->dtype));
  int left = p->triangular_solve.left_side;
  int64_t k = a->dims[a->ndim - 1], want = left ? b->dims[b->ndim - 2] : b->dims[b->ndim - 1];
  int ok = a->ndim == b->ndim && k == want;
  for (int i = 0; ok && i < a->ndim - 2; i++) ok = a->dims[i] == b->dims[i];
  if (!ok)
    return kl_rule_fail(e, KL_ERR_VALUE, "triangular_solve: a %s does not fit b %s (left_side=%d)",
                        kl_rule_shape_str(a, b1, sizeof b1), kl_rule_shape_str(b, b2, sizeof b2), left);
  *out = *b;
  return 0;
}

static int infer(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                 int *nout) {
  const char *name = kl_prim_get(prim)->name;
  const kl_aval *x = &ins[0];
  if (prim == KL_P_TRIANGULAR_SOLVE) return rule_triangular_solve(e, ins, nin, p, outs);
  if (kl_rule_check_accepts(e, prim, x)) return -1;
  if (!is_linalg_dtype(x->dtype))
    return kl_rule_fail(e, KL_ERR_TYPE, "%s: supports float32, float64, complex64 and complex128, got %s", name,
                        kl_dtype_name(x->dtype));
  if (need_matrix(e, name, x, prim == KL_P_CHOLESKY || prim == KL_P_EIGH || prim == KL_P_EIG || prim == KL_P_SCHUR))
    return -1;
  int r = x->ndim;
  int64_t m = x->dims[r - 2], n = x->dims[r - 1], k = m < n ? m : n;
  for (int i = 0; i < KL_FEW_OUTS; i++) outs[i] = *x;
  switch (prim) {
  case KL_P_EIGH: /* (v, w): w real */
    *nout = 2;
    outs[1].ndim = (int8_t)(r - 1);
    outs[1].dtype = kl_dtype_real_part(x->dtype);
    return 0;
  case KL_P_EIG: /* (w) or (w, v), complex */
    *nout = p->eig.vectors ? 2 : 1;
    for (int i = 0; i < *nout; i++) {
      outs[i].dtype = kl_dtype_complex_of(x->dtype);
      outs[i].weak = 0;
    }
    outs[0].ndim = (int8_t)(r - 1);
    return 0;
  case KL_P_SCHUR: /* (t, z): a = z t z^H */
    *nout = 2;
    return 0;
  case KL_P_LU: /* (lu, pivots, permutation) */
    *nout = 3;
    outs[1].ndim = outs[2].ndim = (int8_t)(r - 1);
    outs[1].dims[r - 2] = k;
    outs[2].dims[r - 2] = m;
    outs[1].dtype = outs[2].dtype = KL_I32;
    outs[1].weak = outs[2].weak = 0;
    return 0;
  case KL_P_QR: /* (q, r) */
    *nout = 2;
    outs[0].dims[r - 1] = p->qr.full_matrices ? m : k;
    outs[1].dims[r - 2] = p->qr.full_matrices ? m : k;
    return 0;
  case KL_P_SVD: { /* (u, s, vt) or s */
    kl_aval s = *x;
    s.ndim = (int8_t)(r - 1);
    s.dims[r - 2] = k;
    s.dtype = kl_dtype_real_part(x->dtype); /* singular values are real */
    if (!p->svd.compute_uv) {
      outs[0] = s;
      return 0;
    }
    *nout = 3;
    outs[0].dims[r - 1] = p->svd.full_matrices ? m : k;
    outs[1] = s;
    outs[2].dims[r - 2] = p->svd.full_matrices ? n : k;
    return 0;
  }
  default: return 0; /* cholesky: one result shaped like its operand */
  }
}

/* The packed field of p, or NULL (a field named "packed" in the row's list). */
static int packed_of(kl_prim prim, const kl_params *p) {
  for (const kl_param_field *f = kl_prim_get(prim)->fields; f->name; f++)
    if (!strcmp(f->name, "packed")) return *(const int *)kl_param_cptr(p, f);
  return 0;
}

int kl_infer_linalg(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                    int *nout) {
  int pk = packed_of(prim, p);
  if (!pk) return infer(e, prim, ins, nin, p, outs, nout);
  /* packed: complex results are real [..., 2], and so are the operands when bit 0 is set (eig of a
   * real matrix has complex results only) */
  kl_aval un[4];
  char b1[160];
  for (int i = 0; i < nin && i < 4; i++) {
    un[i] = ins[i];
    if (!(pk & 1)) continue;
    if (un[i].ndim < 1 || un[i].dims[un[i].ndim - 1] != 2 || !kl_dtype_is_float(un[i].dtype))
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: a packed complex operand is real [..., 2], got %s",
                          kl_prim_get(prim)->name, kl_rule_shape_str(&ins[i], b1, sizeof b1));
    un[i].ndim--;
    un[i].dtype = kl_dtype_complex_of(un[i].dtype);
  }
  if (infer(e, prim, un, nin, p, outs, nout)) return -1;
  for (int i = 0; i < *nout; i++) {
    if (!kl_dtype_is_complex(outs[i].dtype)) continue;
    if (outs[i].ndim >= KL_MAX_RANK) return kl_rule_fail(e, KL_ERR_VALUE, "%s: rank exceeds %d", kl_prim_get(prim)->name, KL_MAX_RANK);
    outs[i].dtype = kl_dtype_real_part(outs[i].dtype);
    outs[i].dims[outs[i].ndim++] = 2;
  }
  return 0;
}
