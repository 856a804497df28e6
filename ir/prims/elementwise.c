/* elementwise.c: the elementwise family's params and shape/dtype rule: math and logic on
 * operands of one shape (rank-0 operands broadcast), comparisons, select_n, conversions,
 * literals and iota. Depends only on ir/. */
#include "prims.h"

#include <string.h>

const kl_param_field kl_fields_round[] = {KL_FIELD(round, rounding_method, INT), {NULL, 0, 0}};
const kl_param_field kl_fields_integer_pow[] = {KL_FIELD(integer_pow, y, INT), {NULL, 0, 0}};
const kl_param_field kl_fields_name[] = {KL_FIELD(name, id, INT), {NULL, 0, 0}};
const kl_param_field kl_fields_convert[] = {KL_FIELD(convert, new_dtype, DTYPE), KL_FIELD(convert, weak_type, INT32),
                                            {NULL, 0, 0}};
const kl_param_field kl_fields_bitcast[] = {KL_FIELD(convert, new_dtype, DTYPE), {NULL, 0, 0}};
const kl_param_field kl_fields_literal[] = {KL_FIELD(literal, dtype, DTYPE), KL_FIELD(literal, weak_type, INT32),
                                            KL_FIELD(literal, int_value, INT), KL_FIELD(literal, value, FLOAT),
                                            KL_FIELD(literal, imag, FLOAT_NZ), {NULL, 0, 0}};
const kl_param_field kl_fields_iota[] = {KL_FIELD(iota, dtype, DTYPE), KL_FIELD(iota, shape, IVEC),
                                         KL_FIELD(iota, dimension, INT), {NULL, 0, 0}};

/* unary, binary and comparison primitives */
static int rule_math(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *out) {
  const kl_prim_info *pi = kl_prim_get(prim);
  char b1[160], b2[160];
  for (int i = 0; i < nin; i++)
    if (kl_rule_check_accepts(e, prim, &ins[i])) return -1;
  /* Operands share one shape, except that rank-0 operands broadcast (as in jax.lax). */
  const kl_aval *shape = &ins[0];
  for (int i = 1; i < nin; i++)
    if (ins[i].ndim > shape->ndim) shape = &ins[i];
  for (int i = 1; i < nin; i++) {
    if (ins[i].ndim && !kl_rule_same_shape(shape, &ins[i]))
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: operand shapes must be equal, got %s and %s (broadcast explicitly)",
                          pi->name, kl_rule_shape_str(shape, b1, sizeof b1), kl_rule_shape_str(&ins[i], b2, sizeof b2));
    if (ins[0].dtype != ins[i].dtype)
      return kl_rule_fail(e, KL_ERR_TYPE, "%s: operand dtypes must be equal, got %s and %s (convert one first)",
                          pi->name, kl_dtype_name(ins[0].dtype), kl_dtype_name(ins[i].dtype));
  }
  if (ins[0].ndim && !kl_rule_same_shape(shape, &ins[0]))
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: operand shapes must be equal, got %s and %s (broadcast explicitly)",
                        pi->name, kl_rule_shape_str(&ins[0], b1, sizeof b1), kl_rule_shape_str(shape, b2, sizeof b2));
  *out = *shape;
  out->dtype = ins[0].dtype;
  out->weak = 1;
  for (int i = 0; i < nin; i++) out->weak &= ins[i].weak;
  /* A comparison's bool keeps the operands' weak type, as JAX's (all operands weak: int8 array >= 1.5
   * compares two weak float32 and gives a weak bool; bug, issue 32: it was never weak). */
  if (pi->form == KL_FORM_COMPARE || prim == KL_P_IS_FINITE) out->dtype = KL_BOOL;
  if (prim == KL_P_ABS || prim == KL_P_REAL || prim == KL_P_IMAG) out->dtype = kl_dtype_real_part(ins[0].dtype);
  if (prim == KL_P_COMPLEX) {
    if (ins[0].dtype != KL_F32 && ins[0].dtype != KL_F64)
      return kl_rule_fail(e, KL_ERR_TYPE, "complex: operands must be float32 or float64, got %s",
                          kl_dtype_name(ins[0].dtype));
    out->dtype = kl_dtype_complex_of(ins[0].dtype);
  }
  if (prim == KL_P_INTEGER_POW && kl_dtype_is_int(ins[0].dtype) && p->integer_pow.y < 0)
    return kl_rule_fail(e, KL_ERR_TYPE, "integer_pow: negative exponent %lld on integer dtype %s",
                        (long long)p->integer_pow.y, kl_dtype_name(ins[0].dtype));
  return 0;
}

static int rule_select(kl_rule_err *e, const kl_aval *ins, kl_aval *out) {
  char b1[160], b2[160];
  if (ins[0].dtype != KL_BOOL && ins[0].dtype != KL_I32)
    return kl_rule_fail(e, KL_ERR_TYPE, "select_n: predicate must be bool or int32, got %s", kl_dtype_name(ins[0].dtype));
  const kl_aval *shape = &ins[0];
  for (int i = 1; i < 3; i++)
    if (ins[i].ndim > shape->ndim) shape = &ins[i];
  if (ins[1].dtype != ins[2].dtype)
    return kl_rule_fail(e, KL_ERR_TYPE, "select_n: cases must have equal dtypes, got %s and %s",
                        kl_rule_shape_str(&ins[1], b1, sizeof b1), kl_rule_shape_str(&ins[2], b2, sizeof b2));
  for (int i = 0; i < 3; i++)
    if (ins[i].ndim && !kl_rule_same_shape(&ins[i], shape))
      return kl_rule_fail(e, KL_ERR_VALUE, "select_n: operand shapes must be equal or scalar, got %s and %s",
                          kl_rule_shape_str(&ins[i], b1, sizeof b1), kl_rule_shape_str(shape, b2, sizeof b2));
  *out = *shape;
  out->dtype = ins[1].dtype;
  out->weak = ins[1].weak && ins[2].weak;
  return 0;
}

static int valid_dtype(int d) { return d >= 0 && d < KL_NDTYPES; }

static int rule_convert(kl_rule_err *e, kl_prim prim, const kl_aval *x, const kl_params *p, kl_aval *out) {
  if (!valid_dtype(p->convert.new_dtype)) return kl_rule_fail(e, KL_ERR_TYPE, "%s: invalid new_dtype", kl_prim_get(prim)->name);
  kl_dtype from = x->dtype, to = (kl_dtype)p->convert.new_dtype;
  *out = *x;
  out->dtype = to;
  if (prim == KL_P_BITCAST) { /* same width (lax.bitcast_convert_type changes widths around this) */
    int odd = from == KL_BOOL || to == KL_BOOL || kl_dtype_is_complex(from) || kl_dtype_is_complex(to);
    if (odd && from != to)
      return kl_rule_fail(e, KL_ERR_TYPE, "bitcast_convert_type: bool and complex values reinterpret only as their "
                                          "own dtype (got %s to %s), as in JAX", kl_dtype_name(from), kl_dtype_name(to));
    if (kl_dtype_size(from) != kl_dtype_size(to))
      return kl_rule_fail(e, KL_ERR_TYPE, "bitcast_convert_type: %s and %s differ in width; the primitive reinterprets "
                                          "same-width types", kl_dtype_name(from), kl_dtype_name(to));
    out->weak = 0;
    return 0;
  }
  out->weak = (uint8_t)(p->convert.weak_type != 0);
  return 0;
}

static int rule_iota(kl_rule_err *e, const kl_params *p, kl_aval *out) {
  const kl_ivec *shape = &p->iota.shape;
  if (!valid_dtype(p->iota.dtype)) return kl_rule_fail(e, KL_ERR_TYPE, "iota: invalid dtype");
  if (kl_rule_check_rank(e, "iota", shape->n)) return -1;
  if (p->iota.dimension < 0 || p->iota.dimension >= shape->n)
    return kl_rule_fail(e, KL_ERR_VALUE, "iota: dimension %lld out of range for rank %d", (long long)p->iota.dimension, shape->n);
  memset(out, 0, sizeof *out);
  out->dtype = (kl_dtype)p->iota.dtype;
  out->ndim = (int8_t)shape->n;
  for (int i = 0; i < shape->n; i++) {
    if (shape->v[i] < 0) return kl_rule_fail(e, KL_ERR_VALUE, "iota: negative dimension %lld", (long long)shape->v[i]);
    out->dims[i] = shape->v[i];
  }
  return 0;
}

int kl_infer_elementwise(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p,
                         kl_aval *outs, int *nout) {
  (void)nout;
  switch (kl_prim_get(prim)->form) {
  case KL_FORM_SELECT: return rule_select(e, ins, outs);
  case KL_FORM_CONVERT: return rule_convert(e, prim, &ins[0], p, outs);
  case KL_FORM_CONST:
    if (!valid_dtype(p->literal.dtype)) return kl_rule_fail(e, KL_ERR_TYPE, "literal: invalid dtype");
    memset(outs, 0, sizeof *outs);
    outs[0].dtype = (kl_dtype)p->literal.dtype;
    outs[0].weak = (uint8_t)(p->literal.weak_type != 0);
    return 0;
  case KL_FORM_IOTA: return rule_iota(e, p, outs);
  default: return rule_math(e, prim, ins, nin, p, outs);
  }
}
