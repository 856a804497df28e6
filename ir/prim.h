/* prim.h: kiln's primitives. KL_PRIMS is the one list of them (name, family, operand form,
 * accepted dtypes, param struct); each family's named param structs are below, and its shape/dtype
 * rule lives in ir/prims/<family>.c. Transformation rules live in transforms/rules/<family>.c,
 * lowering in codegen/lower/<family>.c. Depends only on ir/. */
#ifndef KL_PRIM_H
#define KL_PRIM_H
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#define KL_MAX_RANK 12
#define KL_MAX_OUTS 1024 /* results of one equation (a loop's carries and ys) */
#define KL_FEW_OUTS 8    /* results of an equation outside the families kl_prim_many_outs names */

/* Abstract value: what is known about an array while tracing. */
typedef struct {
  int8_t ndim;               /* rank, 0..KL_MAX_RANK */
  uint8_t weak;              /* weakly typed (from a Python scalar) */
  kl_dtype dtype;            /* element type */
  int64_t dims[KL_MAX_RANK]; /* extents, row-major */
} kl_aval;

int64_t kl_aval_size(const kl_aval *a); /* number of elements */
/* bytes of a buffer of a's shape and dtype; -1 when a dimension is negative or the count overflows int64 */
int64_t kl_aval_nbytes(const kl_aval *a);
int kl_aval_equal(const kl_aval *a, const kl_aval *b);
int kl_aval_same_shape(const kl_aval *a, const kl_aval *b); /* dims alone */

/* Primitive families: each has one file per layer, named after it (ir/prims/, transforms/rules/,
 * codegen/lower/). */
typedef enum {
  KL_FAM_ELEMENTWISE, /* math, comparisons, select, convert, literals, iota */
  KL_FAM_SHAPE,       /* broadcast_in_dim reshape transpose rev slice pad concatenate */
  KL_FAM_REDUCE,      /* reduce_* over axes, argmax/argmin */
  KL_FAM_CUMULATIVE,  /* cumsum cumprod cummax cummin */
  KL_FAM_SORT,
  KL_FAM_INDEX,       /* dynamic_slice dynamic_update_slice take scatter */
  KL_FAM_DOT,         /* dot_general */
  KL_FAM_LINALG,      /* cholesky qr svd eigh lu triangular_solve */
  KL_FAM_FFT,         /* fft (complex and real transforms over trailing axes) */
  KL_FAM_CONV,        /* conv_general_dilated and its two gradients (channels-last library convolutions) */
  KL_FAM_ATTENTION,   /* fused dot-product attention and its gradient (flash attention: cuDNN, kiln's own) */
  KL_FAM_CALLBACK,    /* host callbacks: debug.callback/print, pure_callback */
  KL_FAM_CALL,        /* equations that call sub-programs: checkpoint, custom_jvp/vjp, custom_vmap */
  KL_FAM_CONTROL,     /* sub-programs run as data decides: while, scan, cond */
  KL_FAM_COLLECTIVE,  /* across the devices of a mesh: psum pmax pmin all_gather reduce_scatter ppermute
                         all_to_all axis_index */
  KL_NFAMILIES
} kl_family;

/* Operand form, an IR fact the passes share: how an elementwise primitive takes its operands,
 * or that a primitive is a plain reduction over axes. */
typedef enum {
  KL_FORM_NONE,    /* none of the below */
  KL_FORM_UNARY,   /* elementwise, one operand */
  KL_FORM_BINARY,  /* elementwise, two operands of one dtype */
  KL_FORM_COMPARE, /* elementwise, two operands -> bool */
  KL_FORM_SELECT,  /* select_n(pred, on_false, on_true) */
  KL_FORM_CONVERT, /* one operand, a new dtype */
  KL_FORM_CONST,   /* scalar literal, no operand */
  KL_FORM_IOTA,    /* index array, no operand */
  KL_FORM_REDUCE   /* reduce_<op> over axes */
} kl_form;

/* Whether f computes each element from its operands' elements at the same index. */
static inline int kl_form_elementwise(kl_form f) {
  return f == KL_FORM_UNARY || f == KL_FORM_BINARY || f == KL_FORM_COMPARE || f == KL_FORM_SELECT || f == KL_FORM_CONVERT;
}

/* Operand dtypes a primitive accepts. */
typedef enum {
  KL_ACC_ANY,     /* every dtype */
  KL_ACC_NUM,     /* not bool */
  KL_ACC_FLOAT,   /* real floating */
  KL_ACC_INEXACT, /* real floating or complex */
  KL_ACC_COMPLEX, /* complex */
  KL_ACC_REAL,    /* not complex (ordered: comparisons, max, sort) */
  KL_ACC_REALNUM, /* neither bool nor complex */
  KL_ACC_INTBOOL,
  KL_ACC_INT
} kl_accepts;

/* X(enum suffix, name, family, form, accepts, param struct): the param struct names the row's
 * field list (kl_fields_<name>, in ir/prims/<family>.c) and its member of kl_params. */
#define KL_PRIMS(X)                                                                \
  X(NEG, "neg", ELEMENTWISE, UNARY, NUM, none)                                     \
  X(SIGN, "sign", ELEMENTWISE, UNARY, NUM, none)                                   \
  X(FLOOR, "floor", ELEMENTWISE, UNARY, FLOAT, none)                               \
  X(CEIL, "ceil", ELEMENTWISE, UNARY, FLOAT, none)                                 \
  X(ROUND, "round", ELEMENTWISE, UNARY, FLOAT, round)                              \
  X(IS_FINITE, "is_finite", ELEMENTWISE, UNARY, FLOAT, none)                       \
  X(EXP, "exp", ELEMENTWISE, UNARY, INEXACT, none)                                   \
  X(EXP2, "exp2", ELEMENTWISE, UNARY, INEXACT, none)                                 \
  X(LOG, "log", ELEMENTWISE, UNARY, INEXACT, none)                                   \
  X(LOG1P, "log1p", ELEMENTWISE, UNARY, INEXACT, none)                               \
  X(EXPM1, "expm1", ELEMENTWISE, UNARY, INEXACT, none)                               \
  X(TANH, "tanh", ELEMENTWISE, UNARY, INEXACT, none)                                 \
  X(LOGISTIC, "logistic", ELEMENTWISE, UNARY, INEXACT, none)                         \
  X(SIN, "sin", ELEMENTWISE, UNARY, INEXACT, none)                                   \
  X(COS, "cos", ELEMENTWISE, UNARY, INEXACT, none)                                   \
  X(TAN, "tan", ELEMENTWISE, UNARY, INEXACT, none)                                   \
  X(ASIN, "asin", ELEMENTWISE, UNARY, INEXACT, none)                                 \
  X(ACOS, "acos", ELEMENTWISE, UNARY, INEXACT, none)                                 \
  X(ATAN, "atan", ELEMENTWISE, UNARY, INEXACT, none)                                 \
  X(SINH, "sinh", ELEMENTWISE, UNARY, INEXACT, none)                                 \
  X(COSH, "cosh", ELEMENTWISE, UNARY, INEXACT, none)                                 \
  X(ASINH, "asinh", ELEMENTWISE, UNARY, INEXACT, none)                               \
  X(ACOSH, "acosh", ELEMENTWISE, UNARY, INEXACT, none)                               \
  X(ATANH, "atanh", ELEMENTWISE, UNARY, INEXACT, none)                               \
  X(SQRT, "sqrt", ELEMENTWISE, UNARY, INEXACT, none)                                 \
  X(RSQRT, "rsqrt", ELEMENTWISE, UNARY, INEXACT, none)                               \
  X(CBRT, "cbrt", ELEMENTWISE, UNARY, FLOAT, none)                                 \
  X(ABS, "abs", ELEMENTWISE, UNARY, NUM, none)                                     \
  X(ERF, "erf", ELEMENTWISE, UNARY, FLOAT, none)                                   \
  X(ERFC, "erfc", ELEMENTWISE, UNARY, FLOAT, none)                                 \
  X(ERF_INV, "erf_inv", ELEMENTWISE, UNARY, FLOAT, none)                           \
  X(LGAMMA, "lgamma", ELEMENTWISE, UNARY, FLOAT, none)                             \
  X(DIGAMMA, "digamma", ELEMENTWISE, UNARY, FLOAT, none)                           \
  X(NOT, "not", ELEMENTWISE, UNARY, INTBOOL, none)                                 \
  X(REAL, "real", ELEMENTWISE, UNARY, COMPLEX, none)                               \
  X(IMAG, "imag", ELEMENTWISE, UNARY, COMPLEX, none)                               \
  X(CONJ, "conj", ELEMENTWISE, UNARY, COMPLEX, none)                               \
  X(SQUARE, "square", ELEMENTWISE, UNARY, NUM, none)                               \
  X(INTEGER_POW, "integer_pow", ELEMENTWISE, UNARY, NUM, integer_pow)              \
  X(STOP_GRADIENT, "stop_gradient", ELEMENTWISE, UNARY, ANY, none)                 \
  X(OPTIMIZATION_BARRIER, "optimization_barrier", ELEMENTWISE, UNARY, ANY, none)   \
  X(NAME, "name", ELEMENTWISE, UNARY, ANY, name)                                   \
  X(ADD, "add", ELEMENTWISE, BINARY, NUM, none)                                    \
  X(SUB, "sub", ELEMENTWISE, BINARY, NUM, none)                                    \
  X(MUL, "mul", ELEMENTWISE, BINARY, NUM, none)                                    \
  X(DIV, "div", ELEMENTWISE, BINARY, NUM, none)                                    \
  X(REM, "rem", ELEMENTWISE, BINARY, REALNUM, none)                                    \
  X(POW, "pow", ELEMENTWISE, BINARY, INEXACT, none)                                  \
  X(MAX, "max", ELEMENTWISE, BINARY, ANY, none)                                    \
  X(MIN, "min", ELEMENTWISE, BINARY, ANY, none)                                    \
  X(ATAN2, "atan2", ELEMENTWISE, BINARY, INEXACT, none)                            \
  X(COMPLEX, "complex", ELEMENTWISE, BINARY, FLOAT, none)                          \
  X(AND, "and", ELEMENTWISE, BINARY, INTBOOL, none)                                \
  X(OR, "or", ELEMENTWISE, BINARY, INTBOOL, none)                                  \
  X(XOR, "xor", ELEMENTWISE, BINARY, INTBOOL, none)                                \
  X(SHL, "shift_left", ELEMENTWISE, BINARY, INT, none)                             \
  X(SHR_LOGICAL, "shift_right_logical", ELEMENTWISE, BINARY, INT, none)            \
  X(SHR_ARITH, "shift_right_arithmetic", ELEMENTWISE, BINARY, INT, none)           \
  X(EQ, "eq", ELEMENTWISE, COMPARE, ANY, none)                                     \
  X(NE, "ne", ELEMENTWISE, COMPARE, ANY, none)                                     \
  X(LT, "lt", ELEMENTWISE, COMPARE, REAL, none)                                     \
  X(LE, "le", ELEMENTWISE, COMPARE, REAL, none)                                     \
  X(GT, "gt", ELEMENTWISE, COMPARE, REAL, none)                                     \
  X(GE, "ge", ELEMENTWISE, COMPARE, REAL, none)                                     \
  X(SELECT_N, "select_n", ELEMENTWISE, SELECT, ANY, none)                          \
  X(CONVERT, "convert_element_type", ELEMENTWISE, CONVERT, ANY, convert)           \
  X(BITCAST, "bitcast_convert_type", ELEMENTWISE, CONVERT, ANY, bitcast)           \
  X(CONST, "literal", ELEMENTWISE, CONST, ANY, literal)                            \
  X(IOTA, "iota", ELEMENTWISE, IOTA, ANY, iota)                                    \
  X(BROADCAST_IN_DIM, "broadcast_in_dim", SHAPE, NONE, ANY, broadcast)             \
  X(RESHAPE, "reshape", SHAPE, NONE, ANY, reshape)                                 \
  X(TRANSPOSE, "transpose", SHAPE, NONE, ANY, transpose)                           \
  X(REV, "rev", SHAPE, NONE, ANY, rev)                                             \
  X(SLICE, "slice", SHAPE, NONE, ANY, slice)                                       \
  X(PAD, "pad", SHAPE, NONE, ANY, pad)                                             \
  X(CONCATENATE, "concatenate", SHAPE, NONE, ANY, concatenate)                     \
  X(REDUCE_SUM, "reduce_sum", REDUCE, REDUCE, NUM, reduce)                         \
  X(REDUCE_PROD, "reduce_prod", REDUCE, REDUCE, NUM, reduce)                       \
  X(REDUCE_MAX, "reduce_max", REDUCE, REDUCE, ANY, reduce)                         \
  X(REDUCE_MIN, "reduce_min", REDUCE, REDUCE, ANY, reduce)                         \
  X(REDUCE_AND, "reduce_and", REDUCE, REDUCE, INTBOOL, reduce)                     \
  X(REDUCE_OR, "reduce_or", REDUCE, REDUCE, INTBOOL, reduce)                       \
  X(ARGMAX, "argmax", REDUCE, NONE, REAL, arg)                                      \
  X(ARGMIN, "argmin", REDUCE, NONE, REAL, arg)                                      \
  X(CUMSUM, "cumsum", CUMULATIVE, NONE, NUM, cumulative)                           \
  X(CUMPROD, "cumprod", CUMULATIVE, NONE, NUM, cumulative)                         \
  X(CUMMAX, "cummax", CUMULATIVE, NONE, ANY, cumulative)                           \
  X(CUMMIN, "cummin", CUMULATIVE, NONE, ANY, cumulative)                           \
  X(SORT, "sort", SORT, NONE, ANY, sort)                                           \
  X(DOT_GENERAL, "dot_general", DOT, NONE, ANY, dot)                               \
  X(DYNAMIC_SLICE, "dynamic_slice", INDEX, NONE, ANY, dynamic_slice)               \
  X(DYNAMIC_UPDATE_SLICE, "dynamic_update_slice", INDEX, NONE, ANY, update)        \
  X(TAKE, "take", INDEX, NONE, ANY, take)                                          \
  X(SCATTER, "scatter", INDEX, NONE, ANY, scatter)                                 \
  X(CHOLESKY, "cholesky", LINALG, NONE, INEXACT, linalg)                           \
  X(QR, "qr", LINALG, NONE, INEXACT, qr)                                           \
  X(SVD, "svd", LINALG, NONE, INEXACT, svd)                                        \
  X(EIGH, "eigh", LINALG, NONE, INEXACT, eigh)                                     \
  X(LU, "lu", LINALG, NONE, INEXACT, linalg)                                       \
  X(EIG, "eig", LINALG, NONE, INEXACT, eig)                                        \
  X(SCHUR, "schur", LINALG, NONE, INEXACT, linalg)                                  \
  X(TRIANGULAR_SOLVE, "triangular_solve", LINALG, NONE, INEXACT, triangular_solve) \
  X(FFT, "fft", FFT, NONE, INEXACT, fft)                                            \
  X(CONV, "conv_general_dilated", CONV, NONE, FLOAT, conv)                         \
  X(CONV_BWD_DATA, "conv_bwd_data", CONV, NONE, FLOAT, conv)                       \
  X(CONV_BWD_FILTER, "conv_bwd_filter", CONV, NONE, FLOAT, conv)                   \
  X(ATTENTION, "dot_product_attention_fwd", ATTENTION, NONE, FLOAT, attention)      \
  X(ATTENTION_BWD, "dot_product_attention_bwd", ATTENTION, NONE, FLOAT, attention)  \
  X(CALLBACK, "callback", CALLBACK, NONE, ANY, callback)                            \
  X(CUSTOM_VJP_CALL, "custom_vjp_call", CALL, NONE, ANY, custom_vjp)               \
  X(CUSTOM_VJP_LIN, "custom_vjp_lin", CALL, NONE, ANY, custom_vjp)                 \
  X(CUSTOM_JVP_CALL, "custom_jvp_call", CALL, NONE, ANY, custom_jvp)               \
  X(CHECKPOINT, "checkpoint", CALL, NONE, ANY, checkpoint)                        \
  X(CUSTOM_VMAP_CALL, "custom_vmap_call", CALL, NONE, ANY, custom_vmap)            \
  X(WHILE, "while", CONTROL, NONE, ANY, while_)                                    \
  X(SCAN, "scan", CONTROL, NONE, ANY, scan)                                        \
  X(COND, "cond", CONTROL, NONE, ANY, cond)                                        \
  X(WHILE_LIN, "while_lin", CONTROL, NONE, ANY, while_ad)                          \
  X(WHILE_BWD, "while_bwd", CONTROL, NONE, ANY, while_ad)                         \
  X(PSUM, "psum", COLLECTIVE, NONE, NUM, collective)                               \
  X(PMAX, "pmax", COLLECTIVE, NONE, REAL, collective)                              \
  X(PMIN, "pmin", COLLECTIVE, NONE, REAL, collective)                              \
  X(ALL_GATHER, "all_gather", COLLECTIVE, NONE, ANY, collective)                   \
  X(REDUCE_SCATTER, "reduce_scatter", COLLECTIVE, NONE, NUM, collective)           \
  X(PPERMUTE, "ppermute", COLLECTIVE, NONE, ANY, collective)                       \
  X(ALL_TO_ALL, "all_to_all", COLLECTIVE, NONE, ANY, collective)                   \
  X(AXIS_INDEX, "axis_index", COLLECTIVE, NONE, ANY, collective)                   \
  X(PVARY, "pvary", COLLECTIVE, NONE, ANY, collective)

typedef enum {
#define KL_PRIM_ENUM(e, n, f, o, a, s) KL_P_##e,
  KL_PRIMS(KL_PRIM_ENUM)
#undef KL_PRIM_ENUM
  KL_NPRIMS
} kl_prim;

/* Scatter combiners and triangular_solve flag bits. */
enum { KL_SCATTER_SET, KL_SCATTER_ADD, KL_SCATTER_MUL, KL_SCATTER_MIN, KL_SCATTER_MAX };
enum { KL_TRSV_LOWER = 1, KL_TRSV_TRANSPOSE_A = 2, KL_TRSV_UNIT_DIAGONAL = 4 };
/* callback vmap methods (jax.pure_callback's vmap_method) */
enum { KL_VMAP_SEQUENTIAL = 0, KL_VMAP_EXPAND_DIMS = 1, KL_VMAP_BROADCAST_ALL = 2 };
/* fft types, in lax.FftType's order (IFFT and IRFFT are scaled by 1 / prod(fft_lengths)) */
enum { KL_FFT_FFT = 0, KL_FFT_IFFT = 1, KL_FFT_RFFT = 2, KL_FFT_IRFFT = 3 };
/* A convolution's output extent along one spatial axis: input n, kernel k dilated by dil, padded
 * lo + hi, every stride-th window (0 or less: no window fits). */
static inline int64_t kl_conv_out_extent(int64_t n, int64_t k, int64_t stride, int64_t lo, int64_t hi, int64_t dil) {
  int64_t span = n + lo + hi - ((k - 1) * dil + 1);
  return span < 0 ? 0 : span / stride + 1;
}
/* checkpoint policies: which results a recomputation reuses from the forward pass. */
enum { KL_REMAT_NOTHING = 0, KL_REMAT_DOTS = 1, KL_REMAT_DOTS_NO_BATCH = 2, /* bits, or-ed by save_from_both_policies */
       KL_REMAT_NAMES = 4,        /* values named (checkpoint_name) by one of checkpoint.names */
       KL_REMAT_OTHER_NAMES = 8 }; /* named values whose name is not one of checkpoint.names */

/* An integer vector parameter (axes, shapes, paddings): arena-owned in a Program's equation,
 * borrowed elsewhere. */
typedef struct {
  int64_t *v; /* n entries */
  int n;
} kl_ivec;

struct kl_program; /* ir/program.h */

/* Parameters of one equation: the member named by its KL_PRIMS row. Dtype fields hold a
 * kl_dtype, or -1 for "none". Program fields hold a reference: a Program owns the bodies of
 * its equations (kl_params_copy retains them, freeing the Program releases them). */
typedef struct {
  union {
    /* ---- elementwise (ir/prims/elementwise.c) ---- */
    struct {
      int64_t rounding_method; /* 0: half away from zero, 1: half to even (lax.RoundingMethod) */
    } round;
    struct {
      int64_t y; /* the integer exponent */
    } integer_pow;
    struct {
      int64_t id; /* the name checkpoint_name gave a value (python/kiln/_src/custom.py numbers them) */
    } name;       /* the identity, naming its operand for checkpoint policies (save_only_these_names) */
    struct {
      int new_dtype; /* the result dtype */
      int weak_type; /* the result is weakly typed (convert_element_type only) */
    } convert;       /* convert_element_type, bitcast_convert_type */
    struct {
      int dtype;         /* the literal's dtype */
      int weak_type;     /* from a Python scalar */
      int64_t int_value; /* the value of an integer or bool literal */
      double value;      /* the value of a floating literal (a complex one's real part) */
      double imag;       /* a complex literal's imaginary part */
    } literal;
    struct {
      int dtype;         /* result dtype */
      kl_ivec shape;     /* result shape */
      int64_t dimension; /* the axis that counts */
    } iota;
    /* ---- shape (ir/prims/shape.c) ---- */
    struct {
      kl_ivec shape;                /* the result shape */
      kl_ivec broadcast_dimensions; /* result axis of each operand axis, increasing */
    } broadcast;
    struct {
      kl_ivec new_sizes; /* the result shape, same element count */
    } reshape;
    struct {
      kl_ivec permutation; /* result axis i is operand axis permutation[i] */
    } transpose;
    struct {
      kl_ivec dimensions; /* the axes reversed */
    } rev;
    struct {
      kl_ivec start_indices, limit_indices; /* per axis, [start, limit) */
      kl_ivec strides;                      /* per axis, or empty for all ones */
    } slice;
    struct {
      kl_ivec low, high; /* per axis, padding before/after (negative crops) */
      kl_ivec interior;  /* per axis, padding between elements (>= 0) */
    } pad;
    struct {
      int64_t dimension; /* the axis the operands are joined along */
    } concatenate;
    /* ---- reduce (ir/prims/reduce.c) ---- */
    struct {
      kl_ivec axes; /* the axes reduced away */
    } reduce;
    struct {
      kl_ivec axes;    /* exactly one axis */
      int index_dtype; /* int32 or int64 */
    } arg;             /* argmax, argmin */
    /* ---- cumulative (ir/prims/cumulative.c) ---- */
    struct {
      int64_t axis; /* the axis scanned */
      int reverse;  /* scan from the end */
    } cumulative;
    /* ---- sort (ir/prims/sort.c) ---- */
    struct {
      int64_t dimension; /* the axis sorted */
      int64_t num_keys;  /* leading operands compared lexicographically; the rest follow */
      int random_keys;   /* a hint: the one key holds independent uniform random bits (a shuffle's) */
    } sort;
    /* ---- dot (ir/prims/dot.c) ---- */
    struct {
      kl_ivec lhs_contracting, rhs_contracting; /* axes summed over, paired */
      kl_ivec lhs_batch, rhs_batch;             /* axes batched over, paired; lead the result */
      int precision;                            /* lax.Precision: 0 DEFAULT, 1 HIGH, 2 HIGHEST */
      int preferred_element_type;               /* result dtype, or -1: the operands' */
    } dot;
    /* ---- index (ir/prims/index.c) ---- */
    struct {
      kl_ivec slice_sizes; /* per axis; starts are operands, clamped into range */
    } dynamic_slice;
    struct {
      int64_t axis; /* the axis indexed (indices are clamped) */
    } take;
    struct {
      int loc; /* the user's source line (ir/loc.h), for the copy log; 0: none */
    } update;  /* dynamic_update_slice */
    struct {
      int64_t axis; /* the axis indexed (out-of-range updates are dropped) */
      int op;       /* KL_SCATTER_*: how an update combines with the operand */
      int loc;      /* as update.loc */
    } scatter;
    /* ---- linalg (ir/prims/linalg.c) ---- */
    /* linalg: `packed` is set by the complex pass: complex operands and results are real [..., 2] */
    struct {
      int packed;
    } linalg; /* cholesky, lu, schur */
    struct {
      int full_matrices; /* q is m x m (else m x k) */
      int packed;
    } qr;
    struct {
      int full_matrices; /* u, vt square (else thin) */
      int compute_uv;    /* results (u, s, vt); else s alone */
      int packed;
    } svd;
    struct {
      int lower; /* read the lower triangle */
      int packed;
    } eigh;
    struct {
      int vectors; /* results (w, v): right eigenvectors too; else w alone */
      int packed;  /* set by the complex pass: the complex results are real [..., 2] */
    } eig;
    struct {
      int left_side; /* solve a x = b (else x a = b) */
      int flags;     /* KL_TRSV_* bits */
      int packed;
    } triangular_solve;
    /* ---- fft (ir/prims/fft.c) ---- */
    struct {
      int fft_type;        /* KL_FFT_*: lax.FftType's FFT, IFFT, RFFT, IRFFT */
      kl_ivec fft_lengths; /* the transformed trailing axes' lengths (the real signal's for RFFT/IRFFT) */
      int packed;          /* set by the complex pass: complex operands and results are real [..., 2] */
    } fft;
    /* ---- conv (ir/prims/conv.c) ---- */
    /* One layout for every library (channels last): input (N, S..., C), kernel (O, K..., I),
     * output (N, S'..., O), with C = G * I and O a multiple of G = feature_group_count. conv maps
     * (input, kernel) -> output; conv_bwd_data (output cotangent, kernel) -> input cotangent;
     * conv_bwd_filter (input, output cotangent) -> kernel cotangent. The spatial rank is
     * window_strides.n (1 to 3); every vector has that many entries. */
    struct {
      kl_ivec window_strides;      /* per spatial axis, >= 1 */
      kl_ivec padding_lo, padding_hi; /* per spatial axis, zeros added before/after (>= 0) */
      kl_ivec rhs_dilation;        /* per spatial axis, the kernel's dilation (>= 1) */
      kl_ivec spatial_shape;       /* conv_bwd_data: the input's spatial dims S; conv_bwd_filter: the
                                      kernel's K (neither follows from the operands); conv: unused */
      int64_t feature_group_count; /* G >= 1 */
      int precision;               /* lax.Precision, as dot_general's */
      int preferred_element_type;  /* result dtype, or -1: the operands' (legalize converts them) */
    } conv;
    /* ---- attention (ir/prims/attention.c) ---- */
    /* softmax(scale * q k^T, masked) v over JAX's [B, T, N, H] layout, fused (no [T, S] matrix in
     * memory). dot_product_attention_fwd (q [B,T,N,H], k and v [B,S,K,H], N a multiple of K: grouped
     * heads) -> (o [B,T,N,H], lse float32 [B,N,T], the softmax's log-sum-exp per query);
     * dot_product_attention_bwd (q, k, v, o, do, lse) -> (dq, dk, dv). */
    struct {
      double scale; /* the logits' factor */
      int causal;   /* query i sees keys j <= i (JAX's is_causal) */
    } attention;
    /* ---- callback (ir/prims/callback.c) ---- */
    struct {
      int64_t id;         /* the host function, a key of the client's registry (python/kiln/_src/callback.py) */
      int effect;         /* run for its effect (debug.callback, debug.print): kept by DCE, never merged by CSE;
                             its one result is an int32[] token nothing reads */
      int vmap_method;    /* KL_VMAP_*: how vmap calls it; -1: vmap raises (pure_callback without one) */
      kl_ivec out_dtypes; /* per result: its kl_dtype */
      kl_ivec out_ranks;  /* per result: its rank */
      kl_ivec out_dims;   /* the results' dims, one after another */
      int packed;         /* set by the complex pass: complex operands and results are real [..., 2] */
    } callback;
    /* ---- call (ir/prims/call.c) ---- */
    struct {
      kl_ivec counts;          /* (n_out, n_res, n_consts, n_x): how the operands split */
      struct kl_program *bwd;  /* the backward rule: (residuals, consts, cotangents) -> x cotangents */
    } custom_vjp;              /* custom_vjp_call, custom_vjp_lin */
    struct {
      kl_ivec counts;          /* (n_x, n_fun_consts, n_rule_consts) */
      struct kl_program *fun;  /* (x, fun consts) -> outputs */
      struct kl_program *jvp;  /* (x, x tangents, rule consts) -> (outputs, output tangents) */
    } custom_jvp;
    struct {
      struct kl_program *body; /* the function recomputed in the backward pass */
      int policy;              /* KL_REMAT_* bits: what the forward pass may keep */
      kl_ivec names;           /* the name ids KL_REMAT_NAMES / _OTHER_NAMES refer to */
      int prevent_cse;         /* keep CSE from merging the recomputation with the forward pass */
    } checkpoint;
    struct {
      struct kl_program *body; /* (x, consts) -> outputs: what the call computes, example by example */
      int64_t rule;            /* the batching rule vmap asks for (kl_set_user_batch_fn's handle) */
    } custom_vmap;             /* a function or library primitive with a user batching rule */
    /* ---- control (ir/prims/control.c) ---- */
    struct {
      kl_ivec counts;          /* (n_cond_consts, n_body_consts, n_carries): how the operands split */
      struct kl_program *cond; /* (carries, cond consts) -> bool[]: whether to run the body again */
      struct kl_program *body; /* (carries, body consts) -> carries */
    } while_;
    struct {
      kl_ivec counts;          /* (n_consts, n_carries, n_xs): how the operands split */
      int64_t length;          /* iterations: the leading extent of every x and y */
      int reverse;             /* iterate from the last slice to the first */
      struct kl_program *body; /* (consts, carries, x slices) -> (carries, y slices) */
    } scan;
    struct {
      kl_ivec counts;                  /* (n_false_consts, n_true_consts, n_operands) */
      struct kl_program *false_branch; /* (operands, false consts) -> results */
      struct kl_program *true_branch;  /* (operands, true consts) -> the same types */
    } cond;
    /* Reverse mode through while: its linear part (while_lin, which only transposes) and that
     * transposed (while_bwd). Operands: body consts, initial carries, the trip count (int32[]),
     * then while_lin: tangents of the float carries and float consts; while_bwd: cotangents of
     * the final float carries. Results: while_lin: tangents of the final float carries;
     * while_bwd: cotangents of the initial float carries and of the float consts. */
    struct {
      kl_ivec counts;          /* (n_body_consts, n_carries) */
      struct kl_program *body; /* (carries, body consts) -> carries: the loop's body */
      struct kl_program *vjp;  /* while_bwd: (carries, body consts, float carries' cotangents,
                                  accumulators) -> (the carries' cotangents before the body,
                                  accumulators + the float consts' cotangents) */
    } while_ad;
    /* ---- collective (ir/prims/collective.c) ---- */
    /* Every participant of an SPMD launch over a mesh runs the same program; a collective runs
     * over the mesh axes `axes`: its group is the participants that share their coordinates on
     * the other axes, ordered row-major over `axes` (JAX's axis_index). The group size G is the
     * product of mesh_shape over axes. */
    struct {
      kl_ivec mesh_shape;  /* the extent of every mesh axis, in the mesh's order (participant p's
                              coordinates are p unraveled row-major over it) */
      kl_ivec axes;        /* the mesh axes the collective runs over, increasing */
      int64_t axis;        /* all_gather: the dimension gathered along (inserted when untiled);
                              reduce_scatter: the dimension scattered; all_to_all: split_axis */
      int64_t concat_axis; /* all_to_all: the dimension the received chunks are joined along */
      int tiled;           /* all_gather / reduce_scatter: chunks joined along `axis` (else stacked on a
                              new axis / the axis of extent G removed); all_to_all is always tiled */
      kl_ivec perm;        /* ppermute: (source, destination) pairs of group positions, flattened */
      int invariant;       /* psum: shard_map's check_vma typing (JAX's psum_invariant): the result is
                              the same on every participant of the group and the transpose is pvary;
                              0: "unmapped" semantics, the transpose a psum */
      kl_ivec groups;      /* JAX's axis_index_groups (psum pmax pmin all_gather reduce_scatter
                              all_to_all), flattened: the positions along `axes` (0 .. A-1, each once),
                              group_size at a time; the group is then the participants whose
                              positions share this one's index group, ordered as listed. Empty: the
                              whole group along `axes` */
      int64_t group_size;  /* with groups: the size of each index group (0 without) */
      int64_t frame;       /* 0: over the axes of a mesh; k > 0: over the batch axis of the k-th vmap
                              with an axis_name being traced (mesh_shape its size, axes (0,)), which
                              replays the program on the batch (python/kiln/_src/batching.py); never
                              compiled */
    } collective;
  };
} kl_params;

/* How a param field is stored, printed, hashed and set from Python. */
typedef enum {
  KL_PF_INT,     /* int64_t */
  KL_PF_INT32,   /* int (flags, small enums, booleans) */
  KL_PF_DTYPE,   /* int: a kl_dtype or -1 */
  KL_PF_FLOAT,   /* double */
  KL_PF_FLOAT_NZ, /* double, printed only when it is not +0 (a complex literal's imaginary part) */
  KL_PF_IVEC,    /* kl_ivec */
  KL_PF_PROGRAM, /* struct kl_program *, a reference */
  KL_PF_LOC,     /* int: a source location (ir/loc.h), 0 for none; hashed and compared, never printed */
  KL_PF_HINT     /* int: a fact about the operands a lowering may use (how, not what, it computes); hashed and
                    compared, never printed */
} kl_param_kind;

/* One named field of a param struct; a row's list ends with a NULL name. */
typedef struct {
  const char *name;
  kl_param_kind kind;
  size_t offset; /* offsetof(kl_params, <struct>.<field>) */
} kl_param_field;

typedef struct {
  const char *name;
  kl_family family;
  kl_form form;
  kl_accepts accepts;
  const kl_param_field *fields; /* the row's named params, NULL-name terminated */
} kl_prim_info;

/* Field lists, defined in the family files. */
#define KL_FIELDS_DECL(e, n, f, o, a, s) extern const kl_param_field kl_fields_##s[];
KL_PRIMS(KL_FIELDS_DECL)
#undef KL_FIELDS_DECL

const kl_prim_info *kl_prim_get(kl_prim p);
/* Whether p may have more than KL_FEW_OUTS results (up to KL_MAX_OUTS): equations with bodies,
 * sort over many operands. */
static inline int kl_prim_many_outs(kl_prim p) {
  kl_family f = kl_prim_get(p)->family;
  return f == KL_FAM_CALL || f == KL_FAM_CONTROL || f == KL_FAM_SORT || f == KL_FAM_CALLBACK;
}
const char *kl_family_name(kl_family f); /* "elementwise", "shape", ...: the family's file name */
int kl_prim_from_name(const char *name, kl_prim *out); /* 0 on success */
/* The field of p named `name`, or NULL if p has no such param. */
const kl_param_field *kl_prim_param(kl_prim p, const char *name);
/* Zeroes p and sets p's dtype fields to -1 (none). */
void kl_params_init(kl_params *params, kl_prim p);
/* Field access by descriptor (generic printing, hashing, copying, Python). */
static inline void *kl_param_ptr(kl_params *p, const kl_param_field *f) { return (char *)p + f->offset; }
static inline const void *kl_param_cptr(const kl_params *p, const kl_param_field *f) {
  return (const char *)p + f->offset;
}

/* Shape/dtype rule: fills outs[0..*nout). Returns 0, or -1 with a message naming the
 * primitive and the shapes at fault in err, and status KL_ERR_TYPE or KL_ERR_VALUE (ir/status.h). */
int kl_prim_infer(kl_prim p, const kl_aval *ins, int nin, const kl_params *params, kl_aval *outs,
                  int *nout, char *err, size_t errlen);

/* How a dot_general operand a (its batch and contracting dims as given) is stored, as GEMM
 * libraries see it: 0 in the canonical order (batch, then lhs: free, contracting; rhs:
 * contracting, free), 1 in the transposed one (free and contracting swapped), -1 in neither. In
 * that case perm (KL_MAX_RANK entries, may be NULL) gets the order to transpose a into: the one
 * of the two that keeps a's last axis last when there is one (the copy then moves whole rows),
 * and *transposed says which (ir/prims/dot.c). */
int kl_dot_gemm_layout(const kl_aval *a, const kl_ivec *batch, const kl_ivec *contract, int rhs, int64_t *perm,
                       int *transposed);
/* The dtype a dot_general of operands of dtype o with preferred_element_type t computes in, JAX's
 * (XLA's) results: t where o converts into it exactly (bool into anything; an integer into a wider
 * integer, a float or a complex; a float into a wider float or complex; float16 into bfloat16), else
 * o, the product then
 * converted to t (a float product truncated to an integer, a complex one's real part taken).
 * (ir/prims/dot.c) */
kl_dtype kl_dot_compute_dtype(kl_dtype o, kl_dtype t);
/* Whether a product of operands of dtype o into a result of dtype t runs as one mixed-precision
 * GEMM (float16/bfloat16 operands, float32 result: the operands stay in their dtype, as cuBLAS
 * and XLA take them) rather than on operands converted to t. (ir/prims/dot.c) */
int kl_dot_mixed(kl_dtype o, kl_dtype t);
/* A collective's group size: the product of mesh_shape over axes, or group_size with index
 * groups (ir/prims/collective.c). */
int64_t kl_collective_group_size(const kl_params *p);
/* Whether a collective primitive exchanges data between participants (axis_index and pvary do
 * not: nothing waits for them). */
int kl_collective_communicates(kl_prim prim);
/* The mesh's participants (the product of mesh_shape). */
int64_t kl_collective_mesh_size(const kl_params *p);
/* Participant `rank`'s position in its group of a collective with params p (its axis_index), and
 * when members is not NULL the participants of that group in group order (G entries). -1 when rank
 * is not in the mesh. */
int64_t kl_collective_group(const kl_params *p, int64_t rank, int64_t *members);
#endif
