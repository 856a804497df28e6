/* dtype.c: per-dtype facts, table-driven. */
#include "dtype.h"
#include <string.h>

static const struct {
  const char *name, *short_name;
  size_t size;
  kl_kind kind;
} dtypes[KL_NDTYPES] = {
    [KL_BOOL] = {"bool", "bool", 1, KL_KIND_BOOL},
    [KL_I8] = {"int8", "i8", 1, KL_KIND_INT},
    [KL_I16] = {"int16", "i16", 2, KL_KIND_INT},
    [KL_I32] = {"int32", "i32", 4, KL_KIND_INT},
    [KL_I64] = {"int64", "i64", 8, KL_KIND_INT},
    [KL_U8] = {"uint8", "u8", 1, KL_KIND_UINT},
    [KL_U16] = {"uint16", "u16", 2, KL_KIND_UINT},
    [KL_U32] = {"uint32", "u32", 4, KL_KIND_UINT},
    [KL_U64] = {"uint64", "u64", 8, KL_KIND_UINT},
    [KL_F16] = {"float16", "f16", 2, KL_KIND_FLOAT},
    [KL_BF16] = {"bfloat16", "bf16", 2, KL_KIND_FLOAT},
    [KL_F32] = {"float32", "f32", 4, KL_KIND_FLOAT},
    [KL_F64] = {"float64", "f64", 8, KL_KIND_FLOAT},
    [KL_C64] = {"complex64", "c64", 8, KL_KIND_COMPLEX},
    [KL_C128] = {"complex128", "c128", 16, KL_KIND_COMPLEX},
};

size_t kl_dtype_size(kl_dtype t) { return dtypes[t].size; }
kl_kind kl_dtype_kind(kl_dtype t) { return dtypes[t].kind; }
const char *kl_dtype_name(kl_dtype t) { return dtypes[t].name; }
const char *kl_dtype_short(kl_dtype t) { return dtypes[t].short_name; }

int kl_dtype_from_name(const char *name, kl_dtype *out) {
  for (int i = 0; i < KL_NDTYPES; i++)
    if (!strcmp(name, dtypes[i].name) || !strcmp(name, dtypes[i].short_name)) {
      *out = (kl_dtype)i;
      return 0;
    }
  return -1;
}
