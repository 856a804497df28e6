/* dtype.h: kiln's element types and their facts (size, kind, names).
 * Pure data; depends on nothing but the C library. */
#ifndef KL_DTYPE_H
#define KL_DTYPE_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
  KL_BOOL = 0,
  KL_I8, KL_I16, KL_I32, KL_I64,
  KL_U8, KL_U16, KL_U32, KL_U64,
  KL_F16, KL_BF16, KL_F32, KL_F64,
  KL_C64, KL_C128, /* complex: interleaved (real, imaginary) pairs of f32 / f64 */
  KL_NDTYPES
} kl_dtype;

typedef enum { KL_KIND_BOOL, KL_KIND_INT, KL_KIND_UINT, KL_KIND_FLOAT, KL_KIND_COMPLEX } kl_kind;

size_t kl_dtype_size(kl_dtype t);        /* bytes per element */
kl_kind kl_dtype_kind(kl_dtype t);
const char *kl_dtype_name(kl_dtype t);   /* numpy name: "float32", "bfloat16" */
const char *kl_dtype_short(kl_dtype t);  /* IR name: "f32", "bf16", "i32", "u8", "bool" */
int kl_dtype_from_name(const char *name, kl_dtype *out); /* 0 on success */
static inline int kl_dtype_is_float(kl_dtype t) { return kl_dtype_kind(t) == KL_KIND_FLOAT; }
static inline int kl_dtype_is_complex(kl_dtype t) { return kl_dtype_kind(t) == KL_KIND_COMPLEX; }
/* real floating or complex: what carries a tangent */
static inline int kl_dtype_is_inexact(kl_dtype t) {
  return kl_dtype_kind(t) == KL_KIND_FLOAT || kl_dtype_kind(t) == KL_KIND_COMPLEX;
}
/* float32 <-> complex64, float64 <-> complex128 (other dtypes map to themselves) */
static inline kl_dtype kl_dtype_real_part(kl_dtype t) { return t == KL_C64 ? KL_F32 : t == KL_C128 ? KL_F64 : t; }
static inline kl_dtype kl_dtype_complex_of(kl_dtype t) { return t == KL_F64 ? KL_C128 : t == KL_F32 ? KL_C64 : t; }
static inline int kl_dtype_is_int(kl_dtype t) {
  return kl_dtype_kind(t) == KL_KIND_INT || kl_dtype_kind(t) == KL_KIND_UINT;
}
#endif
