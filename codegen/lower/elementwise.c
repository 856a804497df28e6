/* elementwise.c: lowering of the elementwise family (math, comparisons, select, conversions,
 * literals, iota): one element from its operands' elements, on the CPU and the GPU alike (the GPU
 * may call libdevice for math). Depends on the shared scalar emitter only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mathfn.h"
#include "../kernel.h"
#include "lower.h"


static const struct {
  kl_prim prim;
  kl_mathfn fn;
} math_unary[] = {
    {KL_P_EXP, KL_MF_EXP}, {KL_P_EXP2, KL_MF_EXP2}, {KL_P_EXPM1, KL_MF_EXPM1}, {KL_P_LOG, KL_MF_LOG},
    {KL_P_LOG1P, KL_MF_LOG1P}, {KL_P_TANH, KL_MF_TANH}, {KL_P_LOGISTIC, KL_MF_LOGISTIC}, {KL_P_ERF, KL_MF_ERF},
    {KL_P_ERFC, KL_MF_ERFC}, {KL_P_ERF_INV, KL_MF_ERF_INV}, {KL_P_SIN, KL_MF_SIN}, {KL_P_COS, KL_MF_COS},
    {KL_P_TAN, KL_MF_TAN}, {KL_P_SINH, KL_MF_SINH}, {KL_P_COSH, KL_MF_COSH}, {KL_P_ASIN, KL_MF_ASIN},
    {KL_P_ACOS, KL_MF_ACOS}, {KL_P_ATAN, KL_MF_ATAN}, {KL_P_ASINH, KL_MF_ASINH}, {KL_P_ACOSH, KL_MF_ACOSH},
    {KL_P_ATANH, KL_MF_ATANH}, {KL_P_CBRT, KL_MF_CBRT}, {KL_P_LGAMMA, KL_MF_LGAMMA}, {KL_P_DIGAMMA, KL_MF_DIGAMMA},
};

/* libdevice's names of the math functions (kl_mathfn order, then pow and atan2); NULL: kiln's own. */
static const char *const nv_names[KL_MF_COUNT_UNARY + KL_MF2_COUNT] = {
    [KL_MF_EXP] = "exp", [KL_MF_EXP2] = "exp2", [KL_MF_EXPM1] = "expm1", [KL_MF_LOG] = "log", [KL_MF_LOG2] = "log2",
    [KL_MF_LOG10] = "log10", [KL_MF_LOG1P] = "log1p", [KL_MF_TANH] = "tanh", [KL_MF_ERF] = "erf", [KL_MF_ERFC] = "erfc",
    [KL_MF_ERF_INV] = "erfinv", [KL_MF_SIN] = "sin", [KL_MF_COS] = "cos", [KL_MF_TAN] = "tan", [KL_MF_SINH] = "sinh",
    [KL_MF_COSH] = "cosh", [KL_MF_ASIN] = "asin", [KL_MF_ACOS] = "acos", [KL_MF_ATAN] = "atan", [KL_MF_ASINH] = "asinh",
    [KL_MF_ACOSH] = "acosh", [KL_MF_ATANH] = "atanh", [KL_MF_CBRT] = "cbrt", [KL_MF_LGAMMA] = "lgamma",
    [KL_MF_COUNT_UNARY + KL_MF2_POW] = "pow", [KL_MF_COUNT_UNARY + KL_MF2_ATAN2] = "atan2"};

/* Emits a call of libdevice function f (index into nv_names) for f32/f64 operands; NULL when
 * libdevice is not in use or lacks f. */
static char *libdevice_call(kctx *k, int f, const char *cty, const char *x, const char *y, char *out) {
  int is64 = !strcmp(cty, "f64");
  if (!k->libdevice || !nv_names[f] || (!is64 && strcmp(cty, "f32"))) return NULL;
  *k->libdevice |= (uint64_t)1 << (2 * f + is64);
  if (y)
    kk_line(k, "%s = llvm.call @__nv_%s%s(%s, %s) : (%s, %s) -> %s", kk_fresh(k, out), nv_names[f], is64 ? "" : "f", x, y,
            cty, cty, cty);
  else
    kk_line(k, "%s = llvm.call @__nv_%s%s(%s) : (%s) -> %s", kk_fresh(k, out), nv_names[f], is64 ? "" : "f", x, cty, cty);
  return out;
}

void kl_libdevice_declare(uint64_t used, kl_str *out) {
  for (int f = 0; f < KL_MF_COUNT_UNARY + KL_MF2_COUNT; f++)
    for (int is64 = 0; is64 < 2; is64++) {
      if (!(used >> (2 * f + is64) & 1)) continue;
      const char *ty = is64 ? "f64" : "f32";
      if (f >= KL_MF_COUNT_UNARY)
        kl_str_printf(out, "    llvm.func @__nv_%s%s(%s, %s) -> %s\n", nv_names[f], is64 ? "" : "f", ty, ty, ty);
      else
        kl_str_printf(out, "    llvm.func @__nv_%s%s(%s) -> %s\n", nv_names[f], is64 ? "" : "f", ty, ty);
    }
}

/* A kernel over few elements that uses a math function many times (a long unrolled chain of
 * tanh: thousands of inlined polynomial ops, most of its compile time) calls it out of line
 * past its first OUTLINE_AFTER uses; the module defines each such function once, named with the
 * module's symbol prefix (KLPFX, as its kernels are) so that modules never share a symbol. */
#define OUTLINE_AFTER 8

static char *outlined_call(kctx *k, int f, const char *cty, const char *x, char *out) {
  int is64 = !strcmp(cty, "f64");
  if (!k->outlined || f >= KL_MF_COUNT_UNARY || (!is64 && strcmp(cty, "f32")) || ++k->mathuses[f] <= OUTLINE_AFTER)
    return NULL;
  *k->outlined |= (uint64_t)1 << (2 * f + is64);
  kk_line(k, "%s = func.call @KLPFXmf_%s_%s(%s) : (%s) -> %s", kk_fresh(k, out), kl_math_name((kl_mathfn)f), cty, x, cty, cty);
  return out;
}

void kl_math_define_outlined(uint64_t used, kl_str *out) {
  for (int f = 0; f < KL_MF_COUNT_UNARY; f++)
    for (int is64 = 0; is64 < 2; is64++) {
      if (!(used >> (2 * f + is64) & 1)) continue;
      const char *ty = is64 ? "f64" : "f32";
      kl_str_printf(out, "  func.func @KLPFXmf_%s_%s(%%x: %s) -> %s attributes {passthrough = [\"noinline\"]} {\n",
                    kl_math_name((kl_mathfn)f), ty, ty, ty);
      kl_emitter em = {.out = out};
      char r[32];
      kl_math_emit(&em, (kl_mathfn)f, "%x", ty, "    ", r);
      kl_str_printf(out, "    return %s : %s\n  }\n", r, ty);
    }
  kl_math_define_helpers(used, out);
}

static char *emit_unary(kctx *k, const kl_eqn *e, kl_dtype t, const char *x, char *out) {
  const char *cty = kl_compute_type(t);
  int fl = kl_dtype_is_float(t);
  for (size_t i = 0; i < sizeof math_unary / sizeof *math_unary; i++)
    if (math_unary[i].prim == e->prim) {
      if (!libdevice_call(k, math_unary[i].fn, cty, x, NULL, out) && !outlined_call(k, math_unary[i].fn, cty, x, out))
        kl_math_emit(&k->em, math_unary[i].fn, x, cty, k->ind, out);
      return out;
    }
  ssa a, b, c;
  switch (e->prim) {
  case KL_P_NEG:
    kk_fresh(k, out);
    if (fl) kk_line(k, "%s = arith.negf %s : %s", out, x, cty);
    else {
      kk_const_scalar(k, t, 0, 0, a);
      kk_line(k, "%s = arith.subi %s, %s : %s", out, a, x, cty);
    }
    return out;
  case KL_P_ABS:
    kk_fresh(k, out);
    if (fl) kk_line(k, "%s = math.absf %s : %s", out, x, cty);
    else if (kk_is_unsigned(t)) snprintf(out, sizeof(ssa), "%s", x);
    else kk_line(k, "%s = math.absi %s : %s", out, x, cty);
    return out;
  case KL_P_SIGN:
    kk_const_scalar(k, t, 0, 0, a);
    kk_const_scalar(k, t, 1, 1, b);
    if (fl) {
      ssa m1, gt, lt, s1;
      kk_const_scalar(k, t, -1, -1, m1);
      kk_line(k, "%s = arith.cmpf ogt, %s, %s : %s", kk_fresh(k, gt), x, a, cty);
      kk_line(k, "%s = arith.cmpf olt, %s, %s : %s", kk_fresh(k, lt), x, a, cty);
      kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, s1), lt, m1, x, cty);
      kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, out), gt, b, s1, cty);
    } else if (kk_is_unsigned(t)) {
      kk_line(k, "%s = arith.cmpi ne, %s, %s : %s", kk_fresh(k, c), x, a, cty);
      kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, out), c, b, a, cty);
    } else {
      ssa m1, gt, lt, s1;
      kk_const_scalar(k, t, -1, -1, m1);
      kk_line(k, "%s = arith.cmpi sgt, %s, %s : %s", kk_fresh(k, gt), x, a, cty);
      kk_line(k, "%s = arith.cmpi slt, %s, %s : %s", kk_fresh(k, lt), x, a, cty);
      kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, s1), lt, m1, a, cty);
      kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, out), gt, b, s1, cty);
    }
    return out;
  case KL_P_FLOOR: kk_line(k, "%s = math.floor %s : %s", kk_fresh(k, out), x, cty); return out;
  case KL_P_CEIL: kk_line(k, "%s = math.ceil %s : %s", kk_fresh(k, out), x, cty); return out;
  case KL_P_ROUND:
    kk_line(k, "%s = math.%s %s : %s", kk_fresh(k, out), e->p.round.rounding_method ? "roundeven" : "round", x, cty);
    return out;
  case KL_P_IS_FINITE:
    kk_const_scalar(k, t, INFINITY, 0, a);
    kk_line(k, "%s = math.absf %s : %s", kk_fresh(k, b), x, cty);
    kk_line(k, "%s = arith.cmpf olt, %s, %s : %s", kk_fresh(k, out), b, a, cty);
    return out;
  case KL_P_SQRT: kk_line(k, "%s = math.sqrt %s : %s", kk_fresh(k, out), x, cty); return out;
  case KL_P_RSQRT:
    kk_line(k, "%s = math.sqrt %s : %s", kk_fresh(k, a), x, cty);
    kk_const_scalar(k, t, 1, 1, b);
    kk_line(k, "%s = arith.divf %s, %s : %s", kk_fresh(k, out), b, a, cty);
    return out;
  case KL_P_NOT:
    if (t == KL_BOOL) kk_line(k, "%s = arith.constant true", kk_fresh(k, a));
    else kk_line(k, "%s = arith.constant -1 : %s", kk_fresh(k, a), cty);
    kk_line(k, "%s = arith.xori %s, %s : %s", kk_fresh(k, out), x, a, cty);
    return out;
  case KL_P_SQUARE:
    kk_line(k, "%s = arith.mul%s %s, %s : %s", kk_fresh(k, out), fl ? "f" : "i", x, x, cty);
    return out;
  case KL_P_STOP_GRADIENT: case KL_P_OPTIMIZATION_BARRIER: case KL_P_NAME: snprintf(out, sizeof(ssa), "%s", x); return out;
  case KL_P_INTEGER_POW: {
    int64_t y = e->p.integer_pow.y, n = y < 0 ? -y : y;
    ssa acc, base;
    kk_const_scalar(k, t, 1, 1, acc);
    snprintf(base, sizeof base, "%s", x);
    while (n) {
      if (n & 1) {
        ssa nacc;
        kk_line(k, "%s = arith.mul%s %s, %s : %s", kk_fresh(k, nacc), fl ? "f" : "i", acc, base, cty);
        memcpy(acc, nacc, sizeof acc);
      }
      n >>= 1;
      if (n) {
        ssa nb;
        kk_line(k, "%s = arith.mul%s %s, %s : %s", kk_fresh(k, nb), fl ? "f" : "i", base, base, cty);
        memcpy(base, nb, sizeof base);
      }
    }
    if (y < 0) {
      kk_const_scalar(k, t, 1, 1, a);
      kk_line(k, "%s = arith.divf %s, %s : %s", kk_fresh(k, out), a, acc, cty);
    } else snprintf(out, sizeof(ssa), "%s", acc);
    return out;
  }
  default: kk_kfail(k, "codegen: no lowering for unary %s", kl_prim_get(e->prim)->name); return out;
  }
}

/* Integer division and remainder with XLA's answers where C's are undefined:
 * x / 0 = -1 (all ones), x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0. */
static char *emit_int_divrem(kctx *k, kl_dtype t, int rem, const char *x, const char *y, char *out) {
  const char *cty = kl_compute_type(t);
  ssa z, one, isz, safe, q;
  kk_const_scalar(k, t, 0, 0, z);
  kk_const_scalar(k, t, 1, 1, one);
  kk_line(k, "%s = arith.cmpi eq, %s, %s : %s", kk_fresh(k, isz), y, z, cty);
  kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, safe), isz, one, y, cty);
  if (!kk_is_unsigned(t)) { /* y == -1 -> use 1 and negate (wrapping) to avoid the INT_MIN trap */
    ssa m1, ism1, safe2, r0, neg;
    kk_const_scalar(k, t, -1, -1, m1);
    kk_line(k, "%s = arith.cmpi eq, %s, %s : %s", kk_fresh(k, ism1), y, m1, cty);
    kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, safe2), ism1, one, safe, cty);
    kk_line(k, "%s = arith.%s %s, %s : %s", kk_fresh(k, r0), rem ? "remsi" : "divsi", x, safe2, cty);
    if (rem) kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, q), ism1, z, r0, cty);
    else {
      kk_line(k, "%s = arith.subi %s, %s : %s", kk_fresh(k, neg), z, r0, cty);
      kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, q), ism1, neg, r0, cty);
    }
  } else {
    kk_line(k, "%s = arith.%s %s, %s : %s", kk_fresh(k, q), rem ? "remui" : "divui", x, safe, cty);
  }
  if (rem) kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, out), isz, x, q, cty);
  else {
    ssa m1;
    kk_const_scalar(k, t, -1, -1, m1);
    kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, out), isz, m1, q, cty);
  }
  return out;
}

static char *emit_shift(kctx *k, kl_prim p, kl_dtype t, const char *x, const char *y, char *out) {
  const char *cty = kl_compute_type(t);
  int bits = kk_bits_of(cty);
  ssa nb, over, r, fill;
  kk_const_scalar(k, t, 0, bits, nb);
  kk_line(k, "%s = arith.cmpi uge, %s, %s : %s", kk_fresh(k, over), y, nb, cty); /* negative counts too */
  const char *op = p == KL_P_SHL ? "shli" : p == KL_P_SHR_LOGICAL ? "shrui" : "shrsi";
  if (p == KL_P_SHR_ARITH) {
    ssa m, ys;
    kk_const_scalar(k, t, 0, bits - 1, m);
    kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, ys), over, m, y, cty);
    kk_line(k, "%s = arith.shrsi %s, %s : %s", kk_fresh(k, out), x, ys, cty);
    return out;
  }
  kk_line(k, "%s = arith.%s %s, %s : %s", kk_fresh(k, r), op, x, y, cty);
  kk_const_scalar(k, t, 0, 0, fill);
  kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, out), over, fill, r, cty);
  return out;
}

static char *emit_binary(kctx *k, const kl_eqn *e, kl_dtype t, const char *x, const char *y, char *out) {
  const char *cty = kl_compute_type(t);
  int fl = kl_dtype_is_float(t), un = kk_is_unsigned(t);
  const char *op = NULL;
  switch (e->prim) {
  case KL_P_ADD: op = fl ? "addf" : "addi"; break;
  case KL_P_SUB: op = fl ? "subf" : "subi"; break;
  case KL_P_MUL: op = fl ? "mulf" : "muli"; break;
  case KL_P_DIV: if (!fl) return emit_int_divrem(k, t, 0, x, y, out); op = "divf"; break;
  case KL_P_REM: if (!fl) return emit_int_divrem(k, t, 1, x, y, out); op = "remf"; break;
  case KL_P_MAX: op = fl ? "maximumf" : t == KL_BOOL ? "ori" : un ? "maxui" : "maxsi"; break;
  case KL_P_MIN: op = fl ? "minimumf" : t == KL_BOOL ? "andi" : un ? "minui" : "minsi"; break;
  case KL_P_AND: op = "andi"; break;
  case KL_P_OR: op = "ori"; break;
  case KL_P_XOR: op = "xori"; break;
  case KL_P_POW:
    if (libdevice_call(k, KL_MF_COUNT_UNARY + KL_MF2_POW, cty, x, y, out)) return out;
    return kl_math_emit2(&k->em, KL_MF2_POW, x, y, cty, k->ind, out);
  case KL_P_ATAN2:
    if (libdevice_call(k, KL_MF_COUNT_UNARY + KL_MF2_ATAN2, cty, x, y, out)) return out;
    return kl_math_emit2(&k->em, KL_MF2_ATAN2, x, y, cty, k->ind, out);
  case KL_P_SHL: case KL_P_SHR_LOGICAL: case KL_P_SHR_ARITH: return emit_shift(k, e->prim, t, x, y, out);
  default: kk_kfail(k, "codegen: no lowering for binary %s", kl_prim_get(e->prim)->name); return out;
  }
  kk_line(k, "%s = arith.%s %s, %s : %s", kk_fresh(k, out), op, x, y, cty);
  return out;
}

static char *emit_compare(kctx *k, const kl_eqn *e, kl_dtype t, const char *x, const char *y, char *out) {
  static const char *fpred[] = {"oeq", "une", "olt", "ole", "ogt", "oge"};
  static const char *spred[] = {"eq", "ne", "slt", "sle", "sgt", "sge"};
  static const char *upred[] = {"eq", "ne", "ult", "ule", "ugt", "uge"};
  int i = (int)(e->prim - KL_P_EQ);
  const char *cty = kl_compute_type(t);
  if (kl_dtype_is_float(t)) kk_line(k, "%s = arith.cmpf %s, %s, %s : %s", kk_fresh(k, out), fpred[i], x, y, cty);
  else kk_line(k, "%s = arith.cmpi %s, %s, %s : %s", kk_fresh(k, out), kk_is_unsigned(t) ? upred[i] : spred[i], x, y, cty);
  return out;
}

static char *emit_convert(kctx *k, kl_dtype from, kl_dtype to, const char *x, char *out) {
  const char *fc = kl_compute_type(from), *tc = kl_compute_type(to);
  int ff = kl_dtype_is_float(from), tf = kl_dtype_is_float(to);
  int fb = kk_bits_of(fc), tb = kk_bits_of(tc);
  ssa a, b;
  if (ff && tf) {
    if (fb == tb) snprintf(out, sizeof(ssa), "%s", x);
    else kk_line(k, "%s = arith.%s %s : %s to %s", kk_fresh(k, out), fb < tb ? "extf" : "truncf", x, fc, tc);
    return kk_round_low(k, to, out);
  }
  if (!ff && tf) {
    kk_line(k, "%s = arith.%s %s : %s to %s", kk_fresh(k, out), kk_is_unsigned(from) ? "uitofp" : "sitofp", x, fc, tc);
    return kk_round_low(k, to, out);
  }
  if (ff && to == KL_BOOL) {
    kk_const_scalar(k, from, 0, 0, a);
    kk_line(k, "%s = arith.cmpf une, %s, %s : %s", kk_fresh(k, out), x, a, fc);
    return out;
  }
  if (ff) { /* float -> int: NaN gives 0, out-of-range values saturate to the type's limits */
    ssa lo, hi, hiv_c, c1, c2, isn, over, z, mx, r, r2;
    int un = kk_is_unsigned(to);
    kl_dtype ct = !strcmp(fc, "f64") ? KL_F64 : KL_F32; /* constants in the compute type, not rounded to f16 */
    double lov = un ? 0.0 : -ldexp(1.0, tb - 1), hiv = un ? ldexp(1.0, tb) : ldexp(1.0, tb - 1);
    double hic = ct == KL_F32 ? (double)nextafterf((float)hiv, 0.0f) : nextafter(hiv, 0.0);
    kk_const_scalar(k, ct, lov, 0, lo);
    kk_const_scalar(k, ct, hic, 0, hi);
    kk_const_scalar(k, ct, hiv, 0, hiv_c);
    kk_line(k, "%s = arith.maximumf %s, %s : %s", kk_fresh(k, c1), x, lo, fc);
    kk_line(k, "%s = arith.minimumf %s, %s : %s", kk_fresh(k, c2), c1, hi, fc);
    kk_line(k, "%s = arith.%s %s : %s to %s", kk_fresh(k, r), un ? "fptoui" : "fptosi", c2, fc, tc);
    kk_line(k, "%s = arith.cmpf oge, %s, %s : %s", kk_fresh(k, over), x, hiv_c, fc);
    kk_const_scalar(k, to, 0, un ? -1 : (tb >= 64 ? INT64_MAX : ((int64_t)1 << (tb - 1)) - 1), mx);
    kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, r2), over, mx, r, tc);
    kk_line(k, "%s = arith.cmpf uno, %s, %s : %s", kk_fresh(k, isn), x, x, fc);
    kk_const_scalar(k, to, 0, 0, z);
    kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, out), isn, z, r2, tc);
    return out;
  }
  if (to == KL_BOOL) {
    kk_const_scalar(k, from, 0, 0, a);
    kk_line(k, "%s = arith.cmpi ne, %s, %s : %s", kk_fresh(k, out), x, a, fc);
    return out;
  }
  if (fb == tb) snprintf(out, sizeof(ssa), "%s", x);
  else if (fb < tb) kk_line(k, "%s = arith.%s %s : %s to %s", kk_fresh(k, out), kk_is_unsigned(from) ? "extui" : "extsi", x, fc, tc);
  else kk_line(k, "%s = arith.trunci %s : %s to %s", kk_fresh(k, out), x, fc, tc);
  (void)b;
  return out;
}

static char *emit_iota(kctx *k, const kl_eqn *e, kl_dtype t, ssa *idx, char *out) {
  const char *i = idx[e->p.iota.dimension];
  ssa c;
  if (kl_dtype_is_float(t)) {
    kk_line(k, "%s = arith.index_cast %s : index to i64", kk_fresh(k, c), i);
    kk_line(k, "%s = arith.sitofp %s : i64 to %s", kk_fresh(k, out), c, kl_compute_type(t));
    return kk_round_low(k, t, out);
  }
  if (t == KL_BOOL) {
    ssa z;
    kk_const_index(k, 0, z);
    kk_line(k, "%s = arith.cmpi ne, %s, %s : index", kk_fresh(k, out), i, z);
    return out;
  }
  kk_line(k, "%s = arith.index_cast %s : index to %s", kk_fresh(k, out), i, kl_compute_type(t));
  return out;
}

/* ---- one element, per operand form ---- */

#define OPIDX(j) (k->pg->vals[e->ins[j]].aval.ndim ? idx : NULL) /* rank-0 operands broadcast */

static char *scalar_unary(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  ssa a;
  kk_emit_value(k, e->ins[0], idx, a);
  emit_unary(k, e, k->pg->vals[e->ins[0]].aval.dtype, a, out);
  if (e->prim != KL_P_IS_FINITE) kk_round_low(k, k->pg->vals[v].aval.dtype, out);
  return out;
}

static char *scalar_binary(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  kl_dtype t = k->pg->vals[v].aval.dtype;
  ssa a, b;
  kk_emit_value(k, e->ins[0], OPIDX(0), a);
  kk_emit_value(k, e->ins[1], OPIDX(1), b);
  emit_binary(k, e, t, a, b, out);
  return kk_round_low(k, t, out);
}

static char *scalar_compare(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  ssa a, b;
  (void)v;
  kk_emit_value(k, e->ins[0], OPIDX(0), a);
  kk_emit_value(k, e->ins[1], OPIDX(1), b);
  return emit_compare(k, e, k->pg->vals[e->ins[0]].aval.dtype, a, b, out);
}

static char *scalar_select(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  const kl_aval *pa = &k->pg->vals[e->ins[0]].aval;
  ssa a, b, c;
  kk_emit_value(k, e->ins[0], pa->ndim ? idx : NULL, c);
  if (pa->dtype != KL_BOOL) {
    ssa z, nc;
    kk_line(k, "%s = arith.constant 0 : i32", kk_fresh(k, z));
    kk_line(k, "%s = arith.cmpi ne, %s, %s : i32", kk_fresh(k, nc), c, z);
    snprintf(c, sizeof c, "%s", nc);
  }
  kk_emit_value(k, e->ins[1], OPIDX(1), a);
  kk_emit_value(k, e->ins[2], OPIDX(2), b);
  kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, out), c, b, a, kl_compute_type(k->pg->vals[v].aval.dtype));
  return out;
}

static char *scalar_convert(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  ssa a;
  kk_emit_value(k, e->ins[0], idx, a);
  return emit_convert(k, k->pg->vals[e->ins[0]].aval.dtype, k->pg->vals[v].aval.dtype, a, out);
}

/* Reinterprets the stored bits: float16/bfloat16, computed on as f32, go back to their 16 bits
 * first (exact: the value is one of theirs) and come out of them after. */
static char *scalar_bitcast(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  kl_dtype t = k->pg->vals[v].aval.dtype, from = k->pg->vals[e->ins[0]].aval.dtype;
  ssa a, narrow, cast;
  kk_emit_value(k, e->ins[0], idx, a);
  if (!kk_is_low_float(from) && !kk_is_low_float(t)) {
    if (!strcmp(kl_compute_type(from), kl_compute_type(t))) snprintf(out, sizeof(ssa), "%s", a);
    else kk_line(k, "%s = arith.bitcast %s : %s to %s", kk_fresh(k, out), a, kl_compute_type(from), kl_compute_type(t));
    return out;
  }
  const char *fs = kl_storage_type(from), *ts = kl_storage_type(t);
  if (from == KL_BF16) {
    /* bfloat16 is the top half of its f32: take those bits, not truncf, whose bf16 lowering turns
     * every NaN into 0x7fc0 (bug, issue 32: bitcast of -NaN gave 0x7fc0, JAX 0xffc0) */
    ssa wide, sixteen, top, bits;
    kk_line(k, "%s = arith.bitcast %s : f32 to i32", kk_fresh(k, wide), a);
    kk_line(k, "%s = arith.constant 16 : i32", kk_fresh(k, sixteen));
    kk_line(k, "%s = arith.shrui %s, %s : i32", kk_fresh(k, top), wide, sixteen);
    kk_line(k, "%s = arith.trunci %s : i32 to i16", kk_fresh(k, bits), top);
    kk_line(k, "%s = arith.bitcast %s : i16 to %s", kk_fresh(k, narrow), bits, fs);
  } else if (kk_is_low_float(from)) kk_line(k, "%s = arith.truncf %s : f32 to %s", kk_fresh(k, narrow), a, fs);
  else snprintf(narrow, sizeof(ssa), "%s", a);
  if (strcmp(fs, ts)) kk_line(k, "%s = arith.bitcast %s : %s to %s", kk_fresh(k, cast), narrow, fs, ts);
  else snprintf(cast, sizeof(ssa), "%s", narrow);
  if (kk_is_low_float(t)) kk_line(k, "%s = arith.extf %s : %s to f32", kk_fresh(k, out), cast, ts);
  else snprintf(out, sizeof(ssa), "%s", cast);
  return out;
}

static char *scalar_const(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  (void)idx;
  return kk_const_scalar(k, k->pg->vals[v].aval.dtype, e->p.literal.value, e->p.literal.int_value, out);
}

static char *scalar_iota(kctx *k, const kl_eqn *e, int v, ssa *idx, char *out) {
  return emit_iota(k, e, k->pg->vals[v].aval.dtype, idx, out);
}

/* weight: 1 for a few arith ops, 10 for a transcendental (a polynomial of ~10-30 ops), 20 for
 * pow/atan2 */
#define U(p, w) {KL_P_##p, .fuses = 1, .weight = w, .scalar = scalar_unary}
#define B(p, w) {KL_P_##p, .fuses = 1, .weight = w, .scalar = scalar_binary}
#define C(p) {KL_P_##p, .fuses = 1, .weight = 1, .scalar = scalar_compare}
const kl_lowering kl_lower_elementwise[] = {
    U(NEG, 1), U(SIGN, 1), U(FLOOR, 1), U(CEIL, 1), U(ROUND, 1), U(IS_FINITE, 1), U(EXP, 10), U(EXP2, 10),
    U(LOG, 10), U(LOG1P, 10), U(EXPM1, 10), U(TANH, 10), U(LOGISTIC, 10), U(SIN, 10), U(COS, 10), U(TAN, 10),
    U(ASIN, 10), U(ACOS, 10), U(ATAN, 10), U(SINH, 10), U(COSH, 10), U(ASINH, 10), U(ACOSH, 10), U(ATANH, 10),
    U(SQRT, 1), U(RSQRT, 10), U(CBRT, 10), U(ABS, 1), U(ERF, 10), U(ERFC, 10), U(ERF_INV, 10), U(LGAMMA, 10),
    U(DIGAMMA, 10), U(NOT, 1), U(SQUARE, 1), U(INTEGER_POW, 10), U(STOP_GRADIENT, 1), U(OPTIMIZATION_BARRIER, 1),
    U(NAME, 1),
    B(ADD, 1), B(SUB, 1), B(MUL, 1), B(DIV, 3), B(REM, 3), B(POW, 20), B(MAX, 1), B(MIN, 1), B(ATAN2, 20), B(AND, 1),
    B(OR, 1), B(XOR, 1), B(SHL, 1), B(SHR_LOGICAL, 1), B(SHR_ARITH, 1),
    C(EQ), C(NE), C(LT), C(LE), C(GT), C(GE),
    {KL_P_SELECT_N, .fuses = 1, .weight = 1, .scalar = scalar_select},
    {KL_P_CONVERT, .fuses = 1, .weight = 1, .scalar = scalar_convert},
    {KL_P_BITCAST, .fuses = 1, .weight = 1, .scalar = scalar_bitcast},
    {KL_P_CONST, .fuses = 1, .weight = 1, .scalar = scalar_const},
    {KL_P_IOTA, .fuses = 1, .weight = 1, .scalar = scalar_iota},
};
const int kl_lower_elementwise_n = sizeof kl_lower_elementwise / sizeof *kl_lower_elementwise;
