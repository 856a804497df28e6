/* mathfn.h: transcendental functions written as straight-line arith/math MLIR ops.
 * math.exp/tanh/... lower to scalar libm calls that stop LLVM's loop vectorizer; these expansions use
 * only ops that lower to vectorizable LLVM instructions (arith.*, math.fma/absf/copysign/sqrt/floor/
 * ceil/roundeven), no calls and no control flow. Depends on emit.h only; knows nothing of kiln's IR. */
#ifndef KL_MATHFN_H
#define KL_MATHFN_H
#include "emit.h"

typedef enum {
  KL_MF_EXP, KL_MF_EXP2, KL_MF_EXPM1, KL_MF_LOG, KL_MF_LOG2, KL_MF_LOG10, KL_MF_LOG1P,
  KL_MF_TANH, KL_MF_LOGISTIC, KL_MF_ERF, KL_MF_ERFC, KL_MF_ERF_INV, KL_MF_SIN, KL_MF_COS, KL_MF_TAN,
  KL_MF_SINH, KL_MF_COSH, KL_MF_ASIN, KL_MF_ACOS, KL_MF_ATAN, KL_MF_ASINH, KL_MF_ACOSH, KL_MF_ATANH,
  KL_MF_CBRT, KL_MF_LGAMMA, KL_MF_DIGAMMA, KL_MF_COUNT_UNARY
} kl_mathfn;

typedef enum { KL_MF2_POW, KL_MF2_ATAN2, KL_MF2_COUNT } kl_mathfn2;

/* Emits ops computing fn(x) where x is an SSA value of scalar type ty ("f32" or "f64"); writes the
 * result's SSA name into out (>= 24 bytes) and returns out. The ops are appended to e->out, one per
 * line, each line prefixed with `indent`. Values are named with kl_emit_fresh(). Returns NULL (and
 * emits nothing) for an unknown fn or a ty other than f32/f64.
 * Accuracy (measured by tests/c/test_mathfn.c against long double libm): f32 within a few ulp,
 * f64 within ~1e-14 relative; erf_inv, lgamma and digamma within 1e-5 (f32) away from their zeros.
 * sin/cos/tan reduce with a 3-part Cody-Waite pi/2, and exactly (Payne-Hanek) beyond |x| = 1e5 (f32,
 * in f64) or 2^30 (f64, in 64-bit integers): both are accurate over their whole finite range. With
 * e->branches the exact one sits under an scf.if; without, both run and a select picks one, unless
 * e->rare_ok: then only the fast one runs and e->rare flags the elements the caller must redo with
 * branches (kernel.c's CPU loops, which stay vectorized). digamma returns NaN at the poles
 * (nonpositive integers), lgamma +inf there. */
char *kl_math_emit(kl_emitter *e, kl_mathfn fn, const char *x, const char *ty, const char *indent,
                   char *out);
/* Two-argument functions: pow(x, y) with the C99 special cases, atan2(y=x, x=y) -- note: the first
 * operand is atan2's y (numerator), as in C's atan2(y, x). */
char *kl_math_emit2(kl_emitter *e, kl_mathfn2 fn, const char *x, const char *y, const char *ty,
                    const char *indent, char *out);
/* Bits of kl_math_define_outlined's set past the math functions' (2 * KL_MF_COUNT_UNARY of them):
 * the exact trig reductions of f32 and f64 as functions of their own, which a rare path calls
 * where the emitter has defs. */
#define KL_MF_REDUCE_BIT(is64) (60 + (is64))
/* Appends to out the definitions of the helpers whose KL_MF_REDUCE_BIT is set in used. */
void kl_math_define_helpers(uint64_t used, kl_str *out);
/* Lower-case name ("exp", "erf_inv", ...); "?" for an out-of-range fn. Borrowed, static. */
const char *kl_math_name(kl_mathfn fn);
#endif
