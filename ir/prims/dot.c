/* dot.c: the dot family's params and shape rule: dot_general (contracting and batch dimensions
 * paired between the operands; the result is batch, lhs free, rhs free). Depends only on ir/. */
#include <string.h>

#include "prims.h"

const kl_param_field kl_fields_dot[] = {
    KL_FIELD(dot, lhs_contracting, IVEC), KL_FIELD(dot, rhs_contracting, IVEC), KL_FIELD(dot, lhs_batch, IVEC),
    KL_FIELD(dot, rhs_batch, IVEC),       KL_FIELD(dot, precision, INT32),      KL_FIELD(dot, preferred_element_type, DTYPE),
    {NULL, 0, 0}};

/* Bits of a dtype as JAX's _bit_width counts them: 1 for bool, a complex type's real part's. */
static int bit_width(kl_dtype t) {
  if (t == KL_BOOL) return 1;
  return (int)kl_dtype_size(kl_dtype_real_part(t)) * 8;
}

kl_dtype kl_dot_compute_dtype(kl_dtype o, kl_dtype t) {
  if (o == t || o == KL_BOOL) return t;
  if (kl_dtype_is_int(o)) {
    if (kl_dtype_is_int(t)) return bit_width(t) >= bit_width(o) ? t : o;
    return t == KL_BOOL ? o : t;
  }
  /* a float or complex product; float16 into bfloat16 computes in bfloat16 too (XLA's result) */
  if (kl_dtype_is_inexact(t) && kl_dtype_is_complex(t) >= kl_dtype_is_complex(o) && bit_width(t) > bit_width(o)) return t;
  return o == KL_F16 && t == KL_BF16 ? t : o;
}

int kl_dot_mixed(kl_dtype o, kl_dtype t) { return (o == KL_F16 || o == KL_BF16) && t == KL_F32; }

int kl_infer_dot(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                 int *nout) {
  (void)prim;
  (void)nout;
  const kl_aval *l = &ins[0], *r = &ins[1];
  const kl_ivec *lc = &p->dot.lhs_contracting, *rc = &p->dot.rhs_contracting, *lb = &p->dot.lhs_batch,
                *rb = &p->dot.rhs_batch;
  char b1[160], b2[160];
  if (nin != 2) return kl_rule_fail(e, KL_ERR_VALUE, "dot_general: expects 2 operands, got %d", nin);
  if (lc->n != rc->n || lb->n != rb->n)
    return kl_rule_fail(e, KL_ERR_VALUE, "dot_general: contracting/batch dimension lists differ in length");
  if (kl_rule_check_axes(e, "dot_general", "lhs dimensions", lc, l->ndim, 0) ||
      kl_rule_check_axes(e, "dot_general", "rhs dimensions", rc, r->ndim, 0) ||
      kl_rule_check_axes(e, "dot_general", "lhs batch", lb, l->ndim, 0) ||
      kl_rule_check_axes(e, "dot_general", "rhs batch", rb, r->ndim, 0))
    return -1;
  if (l->dtype != r->dtype)
    return kl_rule_fail(e, KL_ERR_TYPE, "dot_general: operand dtypes differ: %s and %s", kl_dtype_name(l->dtype),
                        kl_dtype_name(r->dtype));
  for (int i = 0; i < lc->n; i++)
    if (l->dims[lc->v[i]] != r->dims[rc->v[i]])
      return kl_rule_fail(e, KL_ERR_TYPE, "dot_general: contracting dimensions differ in size: lhs %s dim %lld vs rhs %s dim %lld",
                          kl_rule_shape_str(l, b1, sizeof b1), (long long)lc->v[i], kl_rule_shape_str(r, b2, sizeof b2),
                          (long long)rc->v[i]);
  for (int i = 0; i < lb->n; i++)
    if (l->dims[lb->v[i]] != r->dims[rb->v[i]])
      return kl_rule_fail(e, KL_ERR_TYPE, "dot_general: batch dimensions differ in size: lhs %s vs rhs %s",
                          kl_rule_shape_str(l, b1, sizeof b1), kl_rule_shape_str(r, b2, sizeof b2));
  kl_aval *out = &outs[0];
  *out = *l;
  out->weak = l->weak && r->weak;
  if (p->dot.preferred_element_type >= 0) {
    kl_dtype t = (kl_dtype)p->dot.preferred_element_type;
    /* JAX's (XLA's MaybeUpcast) check: only a float product may narrow */
    if (!kl_dtype_is_float(l->dtype) && t != l->dtype && bit_width(t) < bit_width(l->dtype))
      return kl_rule_fail(e, KL_ERR_TYPE, "dot_general: `preferred_element_type` must not be narrower than the original type, "
                          "got preferred_element_type of %s for result type of %s", kl_dtype_name(t), kl_dtype_name(l->dtype));
    out->dtype = t;
  }
  out->ndim = 0;
  for (int i = 0; i < lb->n; i++) out->dims[out->ndim++] = l->dims[lb->v[i]];
  for (int side = 0; side < 2; side++) {
    const kl_aval *a = side ? r : l;
    const kl_ivec *con = side ? rc : lc, *bat = side ? rb : lb;
    for (int i = 0; i < a->ndim; i++) {
      int used = 0;
      for (int k = 0; k < con->n; k++) used |= con->v[k] == i;
      for (int k = 0; k < bat->n; k++) used |= bat->v[k] == i;
      if (!used) {
        if (out->ndim >= KL_MAX_RANK) return kl_rule_check_rank(e, "dot_general", out->ndim + 1);
        out->dims[out->ndim++] = a->dims[i];
      }
    }
  }
  return 0;
}

/* True when permuting a's dims by perm leaves the bytes in place (the dims of size > 1 keep
 * their relative order; size-1 dims may move). */
static int in_place(const int64_t *perm, const kl_aval *a) {
  int64_t last = -1;
  for (int i = 0; i < a->ndim; i++) {
    if (a->dims[perm[i]] == 1) continue;
    if (perm[i] < last) return 0;
    last = perm[i];
  }
  return 1;
}

/* The order batch, then the free dims (ascending), then the contracting dims, each list in its
 * own order; contract_first puts the contracting dims before the free ones. */
static void gemm_order(const kl_aval *a, const kl_ivec *batch, const kl_ivec *contract, int contract_first,
                       int64_t *perm) {
  char used[KL_MAX_RANK] = {0};
  int k = 0;
  for (int i = 0; i < batch->n; i++) perm[k++] = batch->v[i], used[batch->v[i]] = 1;
  for (int i = 0; i < contract->n; i++) used[contract->v[i]] = 1;
  if (contract_first)
    for (int i = 0; i < contract->n; i++) perm[k++] = contract->v[i];
  for (int d = 0; d < a->ndim; d++)
    if (!used[d]) perm[k++] = d;
  if (!contract_first)
    for (int i = 0; i < contract->n; i++) perm[k++] = contract->v[i];
}

int kl_dot_gemm_layout(const kl_aval *a, const kl_ivec *batch, const kl_ivec *contract, int rhs, int64_t *perm,
                       int *transposed) {
  int64_t canon[KL_MAX_RANK], swapped[KL_MAX_RANK];
  gemm_order(a, batch, contract, rhs, canon);
  if (in_place(canon, a)) return 0;
  gemm_order(a, batch, contract, !rhs, swapped);
  if (in_place(swapped, a)) return 1;
  int swap = a->ndim && canon[a->ndim - 1] != a->ndim - 1 && swapped[a->ndim - 1] == a->ndim - 1;
  if (perm) memcpy(perm, swap ? swapped : canon, sizeof canon);
  if (transposed) *transposed = swap;
  return -1;
}
