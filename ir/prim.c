/* prim.c: the primitive table (KL_PRIMS), lookups, params initialisation, and the entry of the
 * shape/dtype rules, which live in ir/prims/<family>.c (one rule per family, the primitive a
 * parameter). Depends only on ir/. */
#include "prim.h"
#include "prims/prims.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const kl_prim_info prims[KL_NPRIMS] = {
#define KL_PRIM_ROW(e, n, f, o, a, s) [KL_P_##e] = {n, KL_FAM_##f, KL_FORM_##o, KL_ACC_##a, kl_fields_##s},
    KL_PRIMS(KL_PRIM_ROW)
#undef KL_PRIM_ROW
};

static const char *const family_names[KL_NFAMILIES] = {
    [KL_FAM_ELEMENTWISE] = "elementwise", [KL_FAM_SHAPE] = "shape", [KL_FAM_REDUCE] = "reduce",
    [KL_FAM_CUMULATIVE] = "cumulative",   [KL_FAM_SORT] = "sort",   [KL_FAM_INDEX] = "index",
    [KL_FAM_DOT] = "dot",                 [KL_FAM_LINALG] = "linalg", [KL_FAM_CALL] = "call",
    [KL_FAM_FFT] = "fft", [KL_FAM_CONV] = "conv", [KL_FAM_ATTENTION] = "attention", [KL_FAM_CALLBACK] = "callback",
    [KL_FAM_CONTROL] = "control", [KL_FAM_COLLECTIVE] = "collective",
};

static const kl_infer_fn family_rules[KL_NFAMILIES] = {
    [KL_FAM_ELEMENTWISE] = kl_infer_elementwise, [KL_FAM_SHAPE] = kl_infer_shape,
    [KL_FAM_REDUCE] = kl_infer_reduce,           [KL_FAM_CUMULATIVE] = kl_infer_cumulative,
    [KL_FAM_SORT] = kl_infer_sort,               [KL_FAM_INDEX] = kl_infer_index,
    [KL_FAM_DOT] = kl_infer_dot,                 [KL_FAM_LINALG] = kl_infer_linalg,
    [KL_FAM_FFT] = kl_infer_fft, [KL_FAM_CONV] = kl_infer_conv,
    [KL_FAM_ATTENTION] = kl_infer_attention, [KL_FAM_CALLBACK] = kl_infer_callback,
    [KL_FAM_CALL] = kl_infer_call,               [KL_FAM_CONTROL] = kl_infer_control,
    [KL_FAM_COLLECTIVE] = kl_infer_collective,
};

/* Operands each form takes; -1: one or more. */
static const int form_arity[] = {
    [KL_FORM_NONE] = -1,   [KL_FORM_UNARY] = 1,   [KL_FORM_BINARY] = 2, [KL_FORM_COMPARE] = 2,
    [KL_FORM_SELECT] = 3,  [KL_FORM_CONVERT] = 1, [KL_FORM_CONST] = 0,  [KL_FORM_IOTA] = 0,
    [KL_FORM_REDUCE] = 1,
};

const kl_param_field kl_fields_none[] = {{NULL, 0, 0}};

const kl_prim_info *kl_prim_get(kl_prim p) { return &prims[p]; }

const char *kl_family_name(kl_family f) { return family_names[f]; }

int kl_prim_from_name(const char *name, kl_prim *out) {
  for (int i = 0; i < KL_NPRIMS; i++)
    if (!strcmp(prims[i].name, name)) {
      *out = (kl_prim)i;
      return 0;
    }
  return -1;
}

const kl_param_field *kl_prim_param(kl_prim p, const char *name) {
  for (const kl_param_field *f = prims[p].fields; f->name; f++)
    if (!strcmp(f->name, name)) return f;
  return NULL;
}

void kl_params_init(kl_params *params, kl_prim p) {
  memset(params, 0, sizeof *params);
  for (const kl_param_field *f = prims[p].fields; f->name; f++)
    if (f->kind == KL_PF_DTYPE) *(int *)kl_param_ptr(params, f) = -1;
}

int64_t kl_aval_size(const kl_aval *a) {
  int64_t n = 1;
  for (int i = 0; i < a->ndim; i++) n *= a->dims[i];
  return n;
}

int64_t kl_aval_nbytes(const kl_aval *a) {
  int64_t n = (int64_t)kl_dtype_size(a->dtype);
  for (int i = 0; i < a->ndim; i++) {
    if (a->dims[i] < 0) return -1;
    if (__builtin_mul_overflow(n, a->dims[i], &n)) return -1;
  }
  return n;
}

int kl_aval_same_shape(const kl_aval *a, const kl_aval *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

int kl_aval_equal(const kl_aval *a, const kl_aval *b) {
  return a->dtype == b->dtype && a->weak == b->weak && kl_aval_same_shape(a, b);
}

/* ---- what the family rules share ---- */

int kl_rule_fail(kl_rule_err *e, kl_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kl_verror(e->buf, e->len, status, fmt, ap);
  va_end(ap);
  return -1;
}

const char *kl_rule_shape_str(const kl_aval *a, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", kl_dtype_name(a->dtype));
  for (int i = 0; i < a->ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)a->dims[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

const char *kl_rule_vec_str(const kl_ivec *v, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < v->n && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)v->v[i]);
  if (k < n) snprintf(buf + k, n - k, v->n == 1 ? ",)" : ")");
  return buf;
}

static int accepts(kl_accepts acc, kl_dtype t) {
  if (acc == KL_ACC_ANY) return 1;
  if (acc == KL_ACC_NUM) return t != KL_BOOL;
  if (acc == KL_ACC_FLOAT) return kl_dtype_is_float(t);
  if (acc == KL_ACC_INEXACT) return kl_dtype_is_float(t) || kl_dtype_is_complex(t);
  if (acc == KL_ACC_COMPLEX) return kl_dtype_is_complex(t);
  if (acc == KL_ACC_REAL) return !kl_dtype_is_complex(t);
  if (acc == KL_ACC_REALNUM) return t != KL_BOOL && !kl_dtype_is_complex(t);
  if (acc == KL_ACC_INTBOOL) return t == KL_BOOL || kl_dtype_is_int(t);
  return kl_dtype_is_int(t); /* KL_ACC_INT */
}

static const char *const accepts_text[] = {
    [KL_ACC_ANY] = "any dtype", [KL_ACC_NUM] = "a numeric (non-bool) dtype",
    [KL_ACC_FLOAT] = "a real floating dtype", [KL_ACC_INEXACT] = "a floating or complex dtype",
    [KL_ACC_COMPLEX] = "a complex dtype", [KL_ACC_REAL] = "a non-complex dtype",
    [KL_ACC_REALNUM] = "a real numeric (non-bool, non-complex) dtype", [KL_ACC_INTBOOL] = "an integer or bool dtype",
    [KL_ACC_INT] = "an integer dtype",
};

int kl_rule_check_accepts(kl_rule_err *e, kl_prim p, const kl_aval *a) {
  const kl_prim_info *pi = &prims[p];
  if (accepts(pi->accepts, a->dtype)) return 0;
  return kl_rule_fail(e, KL_ERR_TYPE, "%s requires %s, got %s%s", pi->name, accepts_text[pi->accepts],
                      kl_dtype_name(a->dtype),
                      pi->accepts == KL_ACC_FLOAT ? "; convert the operand to a float dtype first" : "");
}

int kl_rule_same_shape(const kl_aval *a, const kl_aval *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

int kl_rule_check_axes(kl_rule_err *e, const char *op, const char *what, const kl_ivec *axes, int ndim,
                       int allow_dup) {
  char seen[KL_MAX_RANK] = {0};
  for (int i = 0; i < axes->n; i++) {
    int64_t a = axes->v[i];
    if (a < 0 || a >= ndim)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: %s entry %lld is out of range for an operand of rank %d", op, what,
                          (long long)a, ndim);
    if (seen[a] && !allow_dup)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: %s contains %lld more than once", op, what, (long long)a);
    seen[a] = 1;
  }
  return 0;
}

int kl_rule_check_rank(kl_rule_err *e, const char *op, int ndim) {
  if (ndim > KL_MAX_RANK || ndim < 0)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: rank %d exceeds kiln's maximum rank %d", op, ndim, KL_MAX_RANK);
  return 0;
}

int kl_prim_infer(kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                  int *nout, char *err, size_t errlen) {
  kl_rule_err e = {err, errlen};
  const kl_prim_info *pi = &prims[prim];
  int want = form_arity[pi->form];
  if (want >= 0 && nin != want) return kl_rule_fail(&e, KL_ERR_VALUE, "%s: expects %d operand(s), got %d", pi->name, want, nin);
  /* a scan may have none (its body makes its ys), a callback too (debug.print of a constant), and
   * axis_index */
  if (want < 0 && nin < 1 && pi->family != KL_FAM_CONTROL && pi->family != KL_FAM_CALLBACK && prim != KL_P_AXIS_INDEX)
    return kl_rule_fail(&e, KL_ERR_VALUE, "%s: expects at least one operand", pi->name);
  *nout = 1;
  if (family_rules[pi->family](&e, prim, ins, nin, p, outs, nout)) return -1;
  for (int i = 0; i < *nout; i++)
    if (kl_aval_nbytes(&outs[i]) < 0) {
      char buf[160];
      return kl_rule_fail(&e, KL_ERR_VALUE, "%s: the result %s is larger than any buffer can be (2^63 bytes or more)",
                          pi->name, kl_rule_shape_str(&outs[i], buf, sizeof buf));
    }
  return 0;
}
