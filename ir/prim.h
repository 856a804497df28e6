/* prim.h: kiln's primitives: one table row each (name, family, params) plus the
 * shape/dtype rule. Rules for transformations live beside these in transforms/,
 * lowering in codegen/. Depends only on ir/. */
#ifndef KL_PRIM_H
#define KL_PRIM_H
#include <stdint.h>

#include "dtype.h"

#define KL_MAX_RANK 12

/* Abstract value: what is known about an array while tracing. */
typedef struct {
  int8_t ndim;               /* rank, 0..KL_MAX_RANK */
  uint8_t weak;              /* weakly typed (from a Python scalar) */
  kl_dtype dtype;            /* element type */
  int64_t dims[KL_MAX_RANK]; /* extents, row-major */
} kl_aval;

int64_t kl_aval_size(const kl_aval *a); /* number of elements */
int kl_aval_equal(const kl_aval *a, const kl_aval *b);

/* Primitive families: rows of the same family share rules. */
typedef enum {
  KL_FAM_UNARY,   /* elementwise, one operand */
  KL_FAM_BINARY,  /* elementwise, two operands of one dtype */
  KL_FAM_COMPARE, /* elementwise, two operands -> bool */
  KL_FAM_SELECT,  /* select_n(pred, on_false, on_true) */
  KL_FAM_CONVERT, /* convert_element_type */
  KL_FAM_CONST,   /* scalar literal */
  KL_FAM_IOTA,
  KL_FAM_SHAPE,   /* broadcast_in_dim reshape transpose rev slice pad concatenate */
  KL_FAM_REDUCE,  /* reduce_* over axes */
  KL_FAM_LIB      /* executed by a runtime routine (BLAS, LAPACK, sort...) */
} kl_family;

/* Operand dtypes a primitive accepts. */
typedef enum { KL_ACC_ANY, KL_ACC_NUM, KL_ACC_FLOAT, KL_ACC_INTBOOL, KL_ACC_INT } kl_accepts;

/* X(enum suffix, name, family, accepts, param spec). Param spec: "name:slot ..." with slots
 * v0..v3 (int vectors), i0 i1 (ints), f (double), d (dtype; -1 = unset). */
#define KL_PRIMS(X)                                                                        \
  X(NEG, "neg", UNARY, NUM, "") X(SIGN, "sign", UNARY, NUM, "")                             \
  X(FLOOR, "floor", UNARY, FLOAT, "") X(CEIL, "ceil", UNARY, FLOAT, "")                     \
  X(ROUND, "round", UNARY, FLOAT, "rounding_method:i0")                                     \
  X(IS_FINITE, "is_finite", UNARY, FLOAT, "")                                               \
  X(EXP, "exp", UNARY, FLOAT, "") X(EXP2, "exp2", UNARY, FLOAT, "")                         \
  X(LOG, "log", UNARY, FLOAT, "") X(LOG1P, "log1p", UNARY, FLOAT, "")                       \
  X(EXPM1, "expm1", UNARY, FLOAT, "") X(TANH, "tanh", UNARY, FLOAT, "")                     \
  X(LOGISTIC, "logistic", UNARY, FLOAT, "") X(SIN, "sin", UNARY, FLOAT, "")                 \
  X(COS, "cos", UNARY, FLOAT, "") X(TAN, "tan", UNARY, FLOAT, "")                           \
  X(ASIN, "asin", UNARY, FLOAT, "") X(ACOS, "acos", UNARY, FLOAT, "")                       \
  X(ATAN, "atan", UNARY, FLOAT, "") X(SINH, "sinh", UNARY, FLOAT, "")                       \
  X(COSH, "cosh", UNARY, FLOAT, "") X(ASINH, "asinh", UNARY, FLOAT, "")                     \
  X(ACOSH, "acosh", UNARY, FLOAT, "") X(ATANH, "atanh", UNARY, FLOAT, "")                   \
  X(SQRT, "sqrt", UNARY, FLOAT, "") X(RSQRT, "rsqrt", UNARY, FLOAT, "")                     \
  X(CBRT, "cbrt", UNARY, FLOAT, "") X(ABS, "abs", UNARY, NUM, "")                           \
  X(ERF, "erf", UNARY, FLOAT, "") X(ERFC, "erfc", UNARY, FLOAT, "")                         \
  X(ERF_INV, "erf_inv", UNARY, FLOAT, "") X(LGAMMA, "lgamma", UNARY, FLOAT, "")             \
  X(DIGAMMA, "digamma", UNARY, FLOAT, "") X(NOT, "not", UNARY, INTBOOL, "")                 \
  X(SQUARE, "square", UNARY, NUM, "") X(INTEGER_POW, "integer_pow", UNARY, NUM, "y:i0")     \
  X(STOP_GRADIENT, "stop_gradient", UNARY, ANY, "")                                         \
  X(OPTIMIZATION_BARRIER, "optimization_barrier", UNARY, ANY, "")                           \
  X(ADD, "add", BINARY, NUM, "") X(SUB, "sub", BINARY, NUM, "")                             \
  X(MUL, "mul", BINARY, NUM, "") X(DIV, "div", BINARY, NUM, "")                             \
  X(REM, "rem", BINARY, NUM, "") X(POW, "pow", BINARY, FLOAT, "")                           \
  X(MAX, "max", BINARY, ANY, "") X(MIN, "min", BINARY, ANY, "")                             \
  X(ATAN2, "atan2", BINARY, FLOAT, "") X(AND, "and", BINARY, INTBOOL, "")                   \
  X(OR, "or", BINARY, INTBOOL, "") X(XOR, "xor", BINARY, INTBOOL, "")                       \
  X(SHL, "shift_left", BINARY, INT, "")                                                     \
  X(SHR_LOGICAL, "shift_right_logical", BINARY, INT, "")                                    \
  X(SHR_ARITH, "shift_right_arithmetic", BINARY, INT, "")                                   \
  X(EQ, "eq", COMPARE, ANY, "") X(NE, "ne", COMPARE, ANY, "") X(LT, "lt", COMPARE, ANY, "") \
  X(LE, "le", COMPARE, ANY, "") X(GT, "gt", COMPARE, ANY, "") X(GE, "ge", COMPARE, ANY, "") \
  X(SELECT_N, "select_n", SELECT, ANY, "")                                                  \
  X(CONVERT, "convert_element_type", CONVERT, ANY, "new_dtype:d weak_type:i0")              \
  X(BITCAST, "bitcast_convert_type", CONVERT, ANY, "new_dtype:d")                          \
  X(CONST, "literal", CONST, ANY, "dtype:d weak_type:i0 int_value:i1 value:f")             \
  X(IOTA, "iota", IOTA, ANY, "dtype:d shape:v0 dimension:i0")                               \
  X(BROADCAST_IN_DIM, "broadcast_in_dim", SHAPE, ANY, "shape:v0 broadcast_dimensions:v1")   \
  X(RESHAPE, "reshape", SHAPE, ANY, "new_sizes:v0")                                         \
  X(TRANSPOSE, "transpose", SHAPE, ANY, "permutation:v0")                                   \
  X(REV, "rev", SHAPE, ANY, "dimensions:v0")                                                \
  X(SLICE, "slice", SHAPE, ANY, "start_indices:v0 limit_indices:v1 strides:v2")             \
  X(PAD, "pad", SHAPE, ANY, "low:v0 high:v1 interior:v2")                                   \
  X(CONCATENATE, "concatenate", SHAPE, ANY, "dimension:i0")                                 \
  X(REDUCE_SUM, "reduce_sum", REDUCE, NUM, "axes:v0")                                       \
  X(REDUCE_PROD, "reduce_prod", REDUCE, NUM, "axes:v0")                                     \
  X(REDUCE_MAX, "reduce_max", REDUCE, ANY, "axes:v0")                                       \
  X(REDUCE_MIN, "reduce_min", REDUCE, ANY, "axes:v0")                                       \
  X(REDUCE_AND, "reduce_and", REDUCE, INTBOOL, "axes:v0")                                   \
  X(REDUCE_OR, "reduce_or", REDUCE, INTBOOL, "axes:v0")                                     \
  X(ARGMAX, "argmax", LIB, ANY, "axes:v0 index_dtype:d")                                    \
  X(ARGMIN, "argmin", LIB, ANY, "axes:v0 index_dtype:d")                                    \
  X(CUMSUM, "cumsum", LIB, NUM, "axis:i0 reverse:i1")                                       \
  X(CUMPROD, "cumprod", LIB, NUM, "axis:i0 reverse:i1")                                     \
  X(CUMMAX, "cummax", LIB, ANY, "axis:i0 reverse:i1")                                       \
  X(CUMMIN, "cummin", LIB, ANY, "axis:i0 reverse:i1")                                       \
  X(SORT, "sort", LIB, ANY, "dimension:i0 num_keys:i1")                                     \
  X(DOT_GENERAL, "dot_general", LIB, ANY,                                                   \
    "lhs_contracting:v0 rhs_contracting:v1 lhs_batch:v2 rhs_batch:v3 precision:i0 "        \
    "preferred_element_type:d")                                                             \
  X(DYNAMIC_SLICE, "dynamic_slice", LIB, ANY, "slice_sizes:v0")                             \
  X(DYNAMIC_UPDATE_SLICE, "dynamic_update_slice", LIB, ANY, "")                             \
  X(TAKE, "take", LIB, ANY, "axis:i0")                                                      \
  X(SCATTER, "scatter", LIB, ANY, "axis:i0 op:i1")                                          \
  X(CHOLESKY, "cholesky", LIB, FLOAT, "")                                                   \
  X(QR, "qr", LIB, FLOAT, "full_matrices:i0")                                               \
  X(SVD, "svd", LIB, FLOAT, "full_matrices:i0 compute_uv:i1")                               \
  X(EIGH, "eigh", LIB, FLOAT, "lower:i0")                                                   \
  X(LU, "lu", LIB, FLOAT, "")                                                               \
  X(TRIANGULAR_SOLVE, "triangular_solve", LIB, FLOAT,                                       \
    "left_side:i0 flags:i1")                                                                \
  X(CUSTOM_VJP_CALL, "custom_vjp_call", LIB, ANY, "counts:v0 bwd:i0")                       \
  X(CUSTOM_VJP_LIN, "custom_vjp_lin", LIB, ANY, "counts:v0 bwd:i0")                         \
  X(CUSTOM_JVP_CALL, "custom_jvp_call", LIB, ANY, "counts:v0 fun:i0 jvp:i1")                  \
  X(CHECKPOINT, "checkpoint", LIB, ANY, "body:i0 policy:i1 prevent_cse:f")

typedef enum {
#define KL_PRIM_ENUM(e, n, f, a, s) KL_P_##e,
  KL_PRIMS(KL_PRIM_ENUM)
#undef KL_PRIM_ENUM
  KL_NPRIMS
} kl_prim;

/* Scatter combiners and triangular_solve flag bits. */
enum { KL_SCATTER_SET, KL_SCATTER_ADD, KL_SCATTER_MUL, KL_SCATTER_MIN, KL_SCATTER_MAX };
enum { KL_TRSV_LOWER = 1, KL_TRSV_TRANSPOSE_A = 2, KL_TRSV_UNIT_DIAGONAL = 4 };

/* Parameters of one equation; which slots a primitive uses is its param spec. */
typedef struct {
  int64_t *v[4]; /* int vectors (arena-owned in a Program) */
  int nv[4];     /* their lengths */
  int64_t i0, i1;
  double f;
  int d; /* a kl_dtype, or -1 */
} kl_params;

typedef struct {
  const char *name;
  kl_family family;
  kl_accepts accepts;
  const char *spec;
} kl_prim_info;

const kl_prim_info *kl_prim_get(kl_prim p);
int kl_prim_from_name(const char *name, kl_prim *out); /* 0 on success */
/* Slot of param `name` for p: 0..3 vectors, 4 i0, 5 i1, 6 f, 7 d; -1 if p has no such param. */
int kl_prim_param_slot(kl_prim p, const char *name);
void kl_params_init(kl_params *p);

/* Shape/dtype rule: fills outs[0..*nout). Returns 0, or -1 with a message naming the
 * primitive and the shapes at fault in err. err_kind gets 'T' (TypeError) or 'V' (ValueError). */
int kl_prim_infer(kl_prim p, const kl_aval *ins, int nin, const kl_params *params, kl_aval *outs,
                  int *nout, char *err, size_t errlen, char *err_kind);

#define KL_MAX_OUTS 8
#endif
