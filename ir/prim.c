/* prim.c: the primitive table and every primitive's shape/dtype rule.
 * Rules are grouped by family so one rule serves every row of a family. */
#include "prim.h"
#include "subprog.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const kl_prim_info prims[KL_NPRIMS] = {
#define KL_PRIM_ROW(e, n, f, a, s) [KL_P_##e] = {n, KL_FAM_##f, KL_ACC_##a, s},
    KL_PRIMS(KL_PRIM_ROW)
#undef KL_PRIM_ROW
};

const kl_prim_info *kl_prim_get(kl_prim p) { return &prims[p]; }

int kl_prim_from_name(const char *name, kl_prim *out) {
  for (int i = 0; i < KL_NPRIMS; i++)
    if (!strcmp(prims[i].name, name)) {
      *out = (kl_prim)i;
      return 0;
    }
  return -1;
}

int kl_prim_param_slot(kl_prim p, const char *name) {
  const char *s = prims[p].spec;
  size_t n = strlen(name);
  while (*s) {
    while (*s == ' ') s++;
    const char *colon = strchr(s, ':');
    if (!colon) break;
    if ((size_t)(colon - s) == n && !strncmp(s, name, n)) {
      const char *slot = colon + 1;
      if (slot[0] == 'v') return slot[1] - '0';
      if (slot[0] == 'i') return 4 + (slot[1] - '0');
      if (slot[0] == 'f') return 6;
      if (slot[0] == 'd') return 7;
    }
    s = colon;
    while (*s && *s != ' ') s++;
  }
  return -1;
}

void kl_params_init(kl_params *p) {
  memset(p, 0, sizeof *p);
  p->d = -1;
}

int64_t kl_aval_size(const kl_aval *a) {
  int64_t n = 1;
  for (int i = 0; i < a->ndim; i++) n *= a->dims[i];
  return n;
}

int kl_aval_equal(const kl_aval *a, const kl_aval *b) {
  if (a->ndim != b->ndim || a->dtype != b->dtype || a->weak != b->weak) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* ---- error text helpers ---- */

typedef struct {
  char *buf;
  size_t len;
  char *kind;
} errctx;

static int fail(errctx *e, char kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(errctx *e, char kind, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->buf, e->len, fmt, ap);
  va_end(ap);
  *e->kind = kind;
  return -1;
}

static const char *shape_str(const kl_aval *a, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", kl_dtype_name(a->dtype));
  for (int i = 0; i < a->ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)a->dims[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

static const char *vec_str(const int64_t *v, int nv, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "(");
  for (int i = 0; i < nv && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)v[i]);
  if (k < n) snprintf(buf + k, n - k, nv == 1 ? ",)" : ")");
  return buf;
}

static int accepts(kl_accepts acc, kl_dtype t) {
  switch (acc) {
  case KL_ACC_ANY: return 1;
  case KL_ACC_NUM: return t != KL_BOOL;
  case KL_ACC_FLOAT: return kl_dtype_is_float(t);
  case KL_ACC_INTBOOL: return !kl_dtype_is_float(t);
  case KL_ACC_INT: return kl_dtype_is_int(t);
  }
  return 0;
}

static const char *accepts_text(kl_accepts acc) {
  switch (acc) {
  case KL_ACC_NUM: return "a numeric (non-bool) dtype";
  case KL_ACC_FLOAT: return "a floating dtype";
  case KL_ACC_INTBOOL: return "an integer or bool dtype";
  case KL_ACC_INT: return "an integer dtype";
  default: return "any dtype";
  }
}

static int check_accepts(errctx *e, const kl_prim_info *pi, const kl_aval *a) {
  if (accepts(pi->accepts, a->dtype)) return 0;
  return fail(e, 'T', "%s requires %s, got %s%s", pi->name, accepts_text(pi->accepts),
              kl_dtype_name(a->dtype),
              pi->accepts == KL_ACC_FLOAT ? "; convert the operand to a float dtype first" : "");
}

static int same_shape(const kl_aval *a, const kl_aval *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

static int check_axis_list(errctx *e, const char *op, const char *what, const int64_t *v, int nv,
                           int ndim, int allow_dup) {
  char seen[KL_MAX_RANK] = {0};
  for (int i = 0; i < nv; i++) {
    if (v[i] < 0 || v[i] >= ndim)
      return fail(e, 'V', "%s: %s entry %lld is out of range for an operand of rank %d", op, what,
                  (long long)v[i], ndim);
    if (seen[v[i]] && !allow_dup)
      return fail(e, 'V', "%s: %s contains %lld more than once", op, what, (long long)v[i]);
    seen[v[i]] = 1;
  }
  return 0;
}

static int check_rank(errctx *e, const char *op, int ndim) {
  if (ndim > KL_MAX_RANK || ndim < 0)
    return fail(e, 'V', "%s: rank %d exceeds kiln's maximum rank %d", op, ndim, KL_MAX_RANK);
  return 0;
}

/* ---- family rules ---- */

static int rule_elementwise(errctx *e, const kl_prim_info *pi, const kl_aval *ins, int nin,
                            const kl_params *p, kl_aval *out) {
  char b1[160], b2[160];
  for (int i = 0; i < nin; i++)
    if (check_accepts(e, pi, &ins[i])) return -1;
  /* Operands share one shape, except that rank-0 operands broadcast (as in jax.lax). */
  const kl_aval *shape = &ins[0];
  for (int i = 1; i < nin; i++)
    if (ins[i].ndim > shape->ndim) shape = &ins[i];
  for (int i = 1; i < nin; i++) {
    if (ins[i].ndim && !same_shape(shape, &ins[i]))
      return fail(e, 'V', "%s: operand shapes must be equal, got %s and %s (broadcast explicitly)",
                  pi->name, shape_str(shape, b1, sizeof b1), shape_str(&ins[i], b2, sizeof b2));
    if (ins[0].dtype != ins[i].dtype)
      return fail(e, 'T', "%s: operand dtypes must be equal, got %s and %s (convert one first)",
                  pi->name, kl_dtype_name(ins[0].dtype), kl_dtype_name(ins[i].dtype));
  }
  if (ins[0].ndim && !same_shape(shape, &ins[0]))
    return fail(e, 'V', "%s: operand shapes must be equal, got %s and %s (broadcast explicitly)",
                pi->name, shape_str(&ins[0], b1, sizeof b1), shape_str(shape, b2, sizeof b2));
  *out = *shape;
  out->dtype = ins[0].dtype;
  out->weak = 1;
  for (int i = 0; i < nin; i++) out->weak &= ins[i].weak;
  if (pi->family == KL_FAM_COMPARE) {
    out->dtype = KL_BOOL;
    out->weak = 0;
  }
  if (pi->family == KL_FAM_UNARY && !strcmp(pi->name, "is_finite")) {
    out->dtype = KL_BOOL;
    out->weak = 0;
  }
  if (!strcmp(pi->name, "integer_pow") && kl_dtype_is_int(ins[0].dtype) && p->i0 < 0)
    return fail(e, 'T', "integer_pow: negative exponent %lld on integer dtype %s",
                (long long)p->i0, kl_dtype_name(ins[0].dtype));
  return 0;
}

static int rule_select(errctx *e, const kl_aval *ins, int nin, kl_aval *out) {
  char b1[160], b2[160];
  if (nin != 3) return fail(e, 'V', "select_n: expects a predicate and two cases, got %d operands", nin);
  if (ins[0].dtype != KL_BOOL && ins[0].dtype != KL_I32)
    return fail(e, 'T', "select_n: predicate must be bool or int32, got %s", kl_dtype_name(ins[0].dtype));
  const kl_aval *shape = &ins[0];
  for (int i = 1; i < 3; i++)
    if (ins[i].ndim > shape->ndim) shape = &ins[i];
  if (ins[1].dtype != ins[2].dtype)
    return fail(e, 'T', "select_n: cases must have equal dtypes, got %s and %s",
                shape_str(&ins[1], b1, sizeof b1), shape_str(&ins[2], b2, sizeof b2));
  for (int i = 0; i < 3; i++)
    if (ins[i].ndim && !same_shape(&ins[i], shape))
      return fail(e, 'V', "select_n: operand shapes must be equal or scalar, got %s and %s",
                  shape_str(&ins[i], b1, sizeof b1), shape_str(shape, b2, sizeof b2));
  *out = *shape;
  out->dtype = ins[1].dtype;
  out->weak = ins[1].weak && ins[2].weak;
  return 0;
}

static int rule_shape(errctx *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p,
                      kl_aval *out) {
  const char *op = prims[prim].name;
  const kl_aval *x = &ins[0];
  char b1[160], b2[256];
  *out = *x;
  switch (prim) {
  case KL_P_BROADCAST_IN_DIM: {
    if (check_rank(e, op, p->nv[0])) return -1;
    if (p->nv[1] != x->ndim)
      return fail(e, 'V', "broadcast_in_dim: broadcast_dimensions %s must have one entry per operand dimension (operand %s)",
                  vec_str(p->v[1], p->nv[1], b2, sizeof b2), shape_str(x, b1, sizeof b1));
    for (int i = 0; i < p->nv[1]; i++) {
      int64_t d = p->v[1][i];
      if (d < 0 || d >= p->nv[0] || (i && d <= p->v[1][i - 1]))
        return fail(e, 'V', "broadcast_in_dim: broadcast_dimensions %s must be strictly increasing and below the target rank %d",
                    vec_str(p->v[1], p->nv[1], b2, sizeof b2), p->nv[0]);
      if (x->dims[i] != 1 && x->dims[i] != p->v[0][d])
        return fail(e, 'V', "broadcast_in_dim: operand %s cannot be broadcast to shape %s",
                    shape_str(x, b1, sizeof b1), vec_str(p->v[0], p->nv[0], b2, sizeof b2));
    }
    out->ndim = (int8_t)p->nv[0];
    for (int i = 0; i < p->nv[0]; i++) {
      if (p->v[0][i] < 0) return fail(e, 'V', "broadcast_in_dim: negative dimension in shape %s", vec_str(p->v[0], p->nv[0], b2, sizeof b2));
      out->dims[i] = p->v[0][i];
    }
    return 0;
  }
  case KL_P_RESHAPE: {
    if (check_rank(e, op, p->nv[0])) return -1;
    int64_t n = 1;
    for (int i = 0; i < p->nv[0]; i++) {
      if (p->v[0][i] < 0) return fail(e, 'V', "reshape: negative dimension in new_sizes %s", vec_str(p->v[0], p->nv[0], b2, sizeof b2));
      n *= p->v[0][i];
    }
    if (n != kl_aval_size(x))
      return fail(e, 'V', "reshape: cannot reshape array of shape %s (size %lld) into shape %s (size %lld)",
                  shape_str(x, b1, sizeof b1), (long long)kl_aval_size(x),
                  vec_str(p->v[0], p->nv[0], b2, sizeof b2), (long long)n);
    out->ndim = (int8_t)p->nv[0];
    for (int i = 0; i < p->nv[0]; i++) out->dims[i] = p->v[0][i];
    return 0;
  }
  case KL_P_TRANSPOSE: {
    if (p->nv[0] != x->ndim || check_axis_list(e, op, "permutation", p->v[0], p->nv[0], x->ndim, 0))
      return p->nv[0] != x->ndim
                 ? fail(e, 'V', "transpose: permutation %s is not a permutation of the %d axes of %s",
                        vec_str(p->v[0], p->nv[0], b2, sizeof b2), x->ndim, shape_str(x, b1, sizeof b1))
                 : -1;
    for (int i = 0; i < x->ndim; i++) out->dims[i] = x->dims[p->v[0][i]];
    return 0;
  }
  case KL_P_REV: return check_axis_list(e, op, "dimensions", p->v[0], p->nv[0], x->ndim, 0);
  case KL_P_SLICE: {
    if (p->nv[0] != x->ndim || p->nv[1] != x->ndim || (p->nv[2] && p->nv[2] != x->ndim))
      return fail(e, 'V', "slice: start/limit/strides need one entry per dimension of %s", shape_str(x, b1, sizeof b1));
    for (int i = 0; i < x->ndim; i++) {
      int64_t s = p->v[0][i], l = p->v[1][i], st = p->nv[2] ? p->v[2][i] : 1;
      if (s < 0 || l > x->dims[i] || s > l || st < 1)
        return fail(e, 'V', "slice: invalid range [%lld:%lld:%lld] for dimension %d of %s", (long long)s,
                    (long long)l, (long long)st, i, shape_str(x, b1, sizeof b1));
      out->dims[i] = l > s ? (l - s + st - 1) / st : 0;
    }
    return 0;
  }
  case KL_P_PAD: {
    if (nin != 2 || ins[1].ndim != 0 || ins[1].dtype != x->dtype)
      return fail(e, 'T', "pad: padding value must be a scalar of the operand's dtype %s", kl_dtype_name(x->dtype));
    if (p->nv[0] != x->ndim || p->nv[1] != x->ndim || p->nv[2] != x->ndim)
      return fail(e, 'V', "pad: padding_config needs one (low, high, interior) per dimension of %s", shape_str(x, b1, sizeof b1));
    for (int i = 0; i < x->ndim; i++) {
      if (p->v[2][i] < 0) return fail(e, 'V', "pad: negative interior padding on dimension %d", i);
      int64_t core = x->dims[i] ? x->dims[i] + (x->dims[i] - 1) * p->v[2][i] : 0;
      out->dims[i] = p->v[0][i] + core + p->v[1][i];
      if (out->dims[i] < 0) return fail(e, 'V', "pad: dimension %d of %s would become negative", i, shape_str(x, b1, sizeof b1));
    }
    out->weak = x->weak;
    return 0;
  }
  case KL_P_CONCATENATE: {
    int64_t d = p->i0;
    if (d < 0 || d >= x->ndim) return fail(e, 'V', "concatenate: dimension %lld out of range for rank %d", (long long)d, x->ndim);
    out->dims[d] = 0;
    for (int k = 0; k < nin; k++) {
      const kl_aval *y = &ins[k];
      int ok = y->ndim == x->ndim && y->dtype == x->dtype;
      for (int i = 0; ok && i < x->ndim; i++) ok = i == d || y->dims[i] == x->dims[i];
      if (!ok)
        return fail(e, 'V', "concatenate: operands %s and %s differ outside dimension %lld (or in dtype)",
                    shape_str(x, b1, sizeof b1), shape_str(y, b2, sizeof b2), (long long)d);
      out->dims[d] += y->dims[d];
      out->weak &= y->weak;
    }
    return 0;
  }
  default: return fail(e, 'V', "%s: not a shape primitive", op);
  }
}

static int rule_reduce(errctx *e, const kl_prim_info *pi, const kl_aval *x, const kl_params *p, kl_aval *out) {
  if (check_accepts(e, pi, x) || check_axis_list(e, pi->name, "axes", p->v[0], p->nv[0], x->ndim, 0)) return -1;
  *out = *x;
  out->ndim = 0;
  for (int i = 0; i < x->ndim; i++) {
    int reduced = 0;
    for (int k = 0; k < p->nv[0]; k++) reduced |= p->v[0][k] == i;
    if (!reduced) out->dims[out->ndim++] = x->dims[i];
  }
  return 0;
}

static int dot_general_rule(errctx *e, const kl_aval *l, const kl_aval *r, const kl_params *p, kl_aval *out) {
  char b1[160], b2[160];
  if (p->nv[0] != p->nv[1] || p->nv[2] != p->nv[3])
    return fail(e, 'V', "dot_general: contracting/batch dimension lists differ in length");
  if (check_axis_list(e, "dot_general", "lhs dimensions", p->v[0], p->nv[0], l->ndim, 0) ||
      check_axis_list(e, "dot_general", "rhs dimensions", p->v[1], p->nv[1], r->ndim, 0) ||
      check_axis_list(e, "dot_general", "lhs batch", p->v[2], p->nv[2], l->ndim, 0) ||
      check_axis_list(e, "dot_general", "rhs batch", p->v[3], p->nv[3], r->ndim, 0))
    return -1;
  if (l->dtype != r->dtype)
    return fail(e, 'T', "dot_general: operand dtypes differ: %s and %s", kl_dtype_name(l->dtype), kl_dtype_name(r->dtype));
  for (int i = 0; i < p->nv[0]; i++)
    if (l->dims[p->v[0][i]] != r->dims[p->v[1][i]])
      return fail(e, 'T', "dot_general: contracting dimensions differ in size: lhs %s dim %lld vs rhs %s dim %lld",
                  shape_str(l, b1, sizeof b1), (long long)p->v[0][i], shape_str(r, b2, sizeof b2), (long long)p->v[1][i]);
  for (int i = 0; i < p->nv[2]; i++)
    if (l->dims[p->v[2][i]] != r->dims[p->v[3][i]])
      return fail(e, 'T', "dot_general: batch dimensions differ in size: lhs %s vs rhs %s", shape_str(l, b1, sizeof b1), shape_str(r, b2, sizeof b2));
  *out = *l;
  out->weak = l->weak && r->weak;
  if (p->d >= 0) out->dtype = (kl_dtype)p->d;
  out->ndim = 0;
  for (int i = 0; i < p->nv[2]; i++) out->dims[out->ndim++] = l->dims[p->v[2][i]];
  for (int side = 0; side < 2; side++) {
    const kl_aval *a = side ? r : l;
    for (int i = 0; i < a->ndim; i++) {
      int used = 0;
      for (int k = 0; k < p->nv[side]; k++) used |= p->v[side][k] == i;
      for (int k = 0; k < p->nv[2 + side]; k++) used |= p->v[2 + side][k] == i;
      if (!used) {
        if (out->ndim >= KL_MAX_RANK) return check_rank(e, "dot_general", out->ndim + 1);
        out->dims[out->ndim++] = a->dims[i];
      }
    }
  }
  return 0;
}

static int need_matrix(errctx *e, const char *op, const kl_aval *x, int square) {
  char b1[160];
  if (x->ndim < 2) return fail(e, 'V', "%s: expects a matrix or a batch of matrices (rank >= 2), got %s", op, shape_str(x, b1, sizeof b1));
  if (square && x->dims[x->ndim - 1] != x->dims[x->ndim - 2])
    return fail(e, 'V', "%s: expects square matrices, got %s", op, shape_str(x, b1, sizeof b1));
  return 0;
}

static int rule_lib(errctx *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs, int *nout) {
  const kl_prim_info *pi = &prims[prim];
  const kl_aval *x = &ins[0];
  char b1[160], b2[160];
  *nout = 1;
  outs[0] = *x;
  switch (prim) {
  case KL_P_ARGMAX:
  case KL_P_ARGMIN:
    if (p->nv[0] != 1) return fail(e, 'V', "%s: expects exactly one axis", pi->name);
    if (rule_reduce(e, pi, x, p, &outs[0])) return -1;
    if (x->dims[p->v[0][0]] == 0) return fail(e, 'V', "%s: axis %lld of %s has size 0", pi->name, (long long)p->v[0][0], shape_str(x, b1, sizeof b1));
    if (p->d != KL_I32 && p->d != KL_I64) return fail(e, 'T', "%s: index_dtype must be int32 or int64", pi->name);
    outs[0].dtype = (kl_dtype)p->d;
    outs[0].weak = 0;
    return 0;
  case KL_P_CUMSUM: case KL_P_CUMPROD: case KL_P_CUMMAX: case KL_P_CUMMIN:
    if (check_accepts(e, pi, x)) return -1;
    if (p->i0 < 0 || p->i0 >= x->ndim) return fail(e, 'V', "%s: axis %lld out of range for %s", pi->name, (long long)p->i0, shape_str(x, b1, sizeof b1));
    return 0;
  case KL_P_SORT:
    if (p->i0 < 0 || p->i0 >= x->ndim) return fail(e, 'V', "sort: dimension %lld out of range for %s", (long long)p->i0, shape_str(x, b1, sizeof b1));
    if (p->i1 < 1 || p->i1 > nin) return fail(e, 'V', "sort: num_keys %lld must be between 1 and the number of operands %d", (long long)p->i1, nin);
    for (int i = 0; i < nin; i++) {
      if (!same_shape(&ins[i], x)) return fail(e, 'V', "sort: operands must share one shape, got %s and %s", shape_str(x, b1, sizeof b1), shape_str(&ins[i], b2, sizeof b2));
      outs[i] = ins[i];
    }
    *nout = nin;
    return 0;
  case KL_P_DOT_GENERAL: return dot_general_rule(e, &ins[0], &ins[1], p, &outs[0]);
  case KL_P_DYNAMIC_SLICE:
    if (nin != 1 + x->ndim || p->nv[0] != x->ndim)
      return fail(e, 'V', "dynamic_slice: needs one start index and one slice size per dimension of %s", shape_str(x, b1, sizeof b1));
    for (int i = 0; i < x->ndim; i++) {
      if (ins[1 + i].ndim != 0 || !kl_dtype_is_int(ins[1 + i].dtype)) return fail(e, 'T', "dynamic_slice: start indices must be integer scalars");
      if (p->v[0][i] < 0 || p->v[0][i] > x->dims[i]) return fail(e, 'V', "dynamic_slice: slice size %lld does not fit dimension %d of %s", (long long)p->v[0][i], i, shape_str(x, b1, sizeof b1));
      outs[0].dims[i] = p->v[0][i];
    }
    return 0;
  case KL_P_DYNAMIC_UPDATE_SLICE:
    if (nin != 2 + x->ndim || ins[1].ndim != x->ndim || ins[1].dtype != x->dtype)
      return fail(e, 'V', "dynamic_update_slice: update %s must match the rank and dtype of %s, with one start index per dimension",
                  shape_str(&ins[1], b2, sizeof b2), shape_str(x, b1, sizeof b1));
    for (int i = 0; i < x->ndim; i++) {
      if (ins[2 + i].ndim != 0 || !kl_dtype_is_int(ins[2 + i].dtype)) return fail(e, 'T', "dynamic_update_slice: start indices must be integer scalars");
      if (ins[1].dims[i] > x->dims[i]) return fail(e, 'V', "dynamic_update_slice: update %s larger than operand %s", shape_str(&ins[1], b2, sizeof b2), shape_str(x, b1, sizeof b1));
    }
    return 0;
  case KL_P_TAKE: {
    const kl_aval *idx = &ins[1];
    if (nin != 2 || !kl_dtype_is_int(idx->dtype)) return fail(e, 'T', "take: indices must be an integer array");
    if (p->i0 < 0 || p->i0 >= x->ndim) return fail(e, 'V', "take: axis %lld out of range for %s", (long long)p->i0, shape_str(x, b1, sizeof b1));
    if (x->ndim - 1 + idx->ndim > KL_MAX_RANK) return check_rank(e, "take", x->ndim - 1 + idx->ndim);
    if (x->dims[p->i0] == 0 && kl_aval_size(idx) > 0) return fail(e, 'V', "take: cannot index axis %lld of size 0 in %s", (long long)p->i0, shape_str(x, b1, sizeof b1));
    outs[0].ndim = 0;
    for (int i = 0; i < p->i0; i++) outs[0].dims[outs[0].ndim++] = x->dims[i];
    for (int i = 0; i < idx->ndim; i++) outs[0].dims[outs[0].ndim++] = idx->dims[i];
    for (int i = (int)p->i0 + 1; i < x->ndim; i++) outs[0].dims[outs[0].ndim++] = x->dims[i];
    return 0;
  }
  case KL_P_SCATTER: {
    kl_params tp = *p;
    kl_aval want;
    int n1;
    if (nin != 3) return fail(e, 'V', "scatter: expects operand, indices and updates");
    if (rule_lib(e, KL_P_TAKE, ins, 2, &tp, &want, &n1)) return -1;
    if (!same_shape(&want, &ins[2]) || ins[2].dtype != x->dtype)
      return fail(e, 'V', "scatter: updates %s must have shape and dtype %s", shape_str(&ins[2], b2, sizeof b2), shape_str(&want, b1, sizeof b1));
    if (p->i1 < KL_SCATTER_SET || p->i1 > KL_SCATTER_MAX) return fail(e, 'V', "scatter: unknown combiner %lld", (long long)p->i1);
    return 0;
  }
  case KL_P_CHOLESKY: case KL_P_LU: case KL_P_EIGH: case KL_P_QR: case KL_P_SVD: {
    if (check_accepts(e, pi, x)) return -1;
    if (x->dtype != KL_F32 && x->dtype != KL_F64)
      return fail(e, 'T', "%s: supports float32 and float64, got %s", pi->name, kl_dtype_name(x->dtype));
    if (need_matrix(e, pi->name, x, prim == KL_P_CHOLESKY || prim == KL_P_EIGH)) return -1;
    int r = x->ndim;
    int64_t m = x->dims[r - 2], n = x->dims[r - 1], k = m < n ? m : n;
    for (int i = 0; i < KL_MAX_OUTS; i++) outs[i] = *x;
    if (prim == KL_P_EIGH) { /* (v, w) */
      *nout = 2;
      outs[1].ndim = (int8_t)(r - 1);
    } else if (prim == KL_P_LU) { /* (lu, pivots, permutation) */
      *nout = 3;
      outs[1].ndim = outs[2].ndim = (int8_t)(r - 1);
      outs[1].dims[r - 2] = k;
      outs[2].dims[r - 2] = m;
      outs[1].dtype = outs[2].dtype = KL_I32;
      outs[1].weak = outs[2].weak = 0;
    } else if (prim == KL_P_QR) { /* (q, r) */
      *nout = 2;
      outs[0].dims[r - 1] = p->i0 ? m : k;
      outs[1].dims[r - 2] = p->i0 ? m : k;
    } else if (prim == KL_P_SVD) { /* (u, s, vt) or s */
      kl_aval s = *x;
      s.ndim = (int8_t)(r - 1);
      s.dims[r - 2] = k;
      if (!p->i1) { *nout = 1; outs[0] = s; return 0; }
      *nout = 3;
      outs[0].dims[r - 1] = p->i0 ? m : k;
      outs[1] = s;
      outs[2].dims[r - 2] = p->i0 ? n : k;
    }
    return 0;
  }
  case KL_P_TRIANGULAR_SOLVE: {
    const kl_aval *a = &ins[0], *b = &ins[1];
    if (nin != 2 || need_matrix(e, "triangular_solve", a, 1) || need_matrix(e, "triangular_solve", b, 0)) return nin != 2 ? fail(e, 'V', "triangular_solve: expects a and b") : -1;
    if (a->dtype != b->dtype || (a->dtype != KL_F32 && a->dtype != KL_F64))
      return fail(e, 'T', "triangular_solve: a and b must share dtype float32 or float64, got %s and %s", kl_dtype_name(a->dtype), kl_dtype_name(b->dtype));
    int64_t k = a->dims[a->ndim - 1], want = p->i0 ? b->dims[b->ndim - 2] : b->dims[b->ndim - 1];
    int ok = a->ndim == b->ndim && k == want;
    for (int i = 0; ok && i < a->ndim - 2; i++) ok = a->dims[i] == b->dims[i];
    if (!ok) return fail(e, 'V', "triangular_solve: a %s does not fit b %s (left_side=%lld)", shape_str(a, b1, sizeof b1), shape_str(b, b2, sizeof b2), (long long)p->i0);
    outs[0] = *b;
    return 0;
  }
  case KL_P_CUSTOM_VJP_CALL: case KL_P_CUSTOM_VJP_LIN: {
    /* operands: outputs (or their templates) n_out, residuals n_res, consts n_c, inputs n_x;
     * results: the first n_out operands' avals (custom_vjp_call passes them through) */
    if (p->nv[0] != 4) return fail(e, 'V', "%s: counts must be (n_out, n_res, n_consts, n_x)", pi->name);
    int64_t n_out = p->v[0][0], total = p->v[0][0] + p->v[0][1] + p->v[0][2] + p->v[0][3];
    if (n_out < 1 || n_out > KL_MAX_OUTS || total != nin)
      return fail(e, 'V', "%s: %lld outputs (at most %d) and %d operands do not match the counts", pi->name,
                  (long long)n_out, KL_MAX_OUTS, nin);
    for (int i = 0; i < n_out; i++) outs[i] = ins[i];
    *nout = (int)n_out;
    return 0;
  }
  case KL_P_CHECKPOINT: case KL_P_CUSTOM_JVP_CALL: {
    /* calls: the operands are the body's inputs (checkpoint) or its leading inputs (a custom_jvp
     * function, whose rule takes the same inputs, their tangents and its own consts);
     * the results are the body's outputs */
    const kl_program *body = kl_subprog_get(p->i0);
    int64_t n_body = nin;
    if (prim == KL_P_CUSTOM_JVP_CALL) {
      if (p->nv[0] != 3 || p->v[0][0] + p->v[0][1] + p->v[0][2] != nin)
        return fail(e, 'V', "%s: counts must be (n_x, n_fun_consts, n_rule_consts) summing to %d operands", pi->name, nin);
      n_body = p->v[0][0] + p->v[0][1];
      const kl_program *rule = kl_subprog_get(p->i1);
      if (!rule || !body || rule->ninputs != 2 * p->v[0][0] + p->v[0][2] || rule->noutputs != 2 * body->noutputs)
        return fail(e, 'V', "%s: the jvp rule program %lld does not match its function", pi->name, (long long)p->i1);
    }
    if (!body || body->ninputs != n_body)
      return fail(e, 'V', "%s: body program %lld missing or taking %d inputs, not %lld", pi->name, (long long)p->i0,
                  body ? body->ninputs : -1, (long long)n_body);
    if (body->noutputs > KL_MAX_OUTS)
      return fail(e, 'V', "%s: %d results (at most %d)", pi->name, body->noutputs, KL_MAX_OUTS);
    for (int64_t i = 0; i < n_body; i++) {
      const kl_aval *want = &body->vals[body->inputs[i]].aval;
      if (want->dtype != ins[i].dtype || !same_shape(want, &ins[i]))
        return fail(e, 'T', "%s: operand %lld is %s, the body expects %s", pi->name, (long long)i,
                    shape_str(&ins[i], b1, sizeof b1), shape_str(want, b2, sizeof b2));
    }
    for (int i = 0; i < body->noutputs; i++) outs[i] = body->vals[body->outputs[i]].aval;
    *nout = body->noutputs;
    return 0;
  }
  default: return fail(e, 'V', "%s: no shape rule", pi->name);
  }
}

int kl_prim_infer(kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                  int *nout, char *err, size_t errlen, char *err_kind) {
  errctx e = {err, errlen, err_kind};
  const kl_prim_info *pi = &prims[prim];
  int want = -1; /* fixed arity, or -1 for variadic */
  switch (pi->family) {
  case KL_FAM_UNARY: case KL_FAM_CONVERT: case KL_FAM_REDUCE: want = 1; break;
  case KL_FAM_BINARY: case KL_FAM_COMPARE: want = 2; break;
  case KL_FAM_SELECT: want = 3; break;
  case KL_FAM_CONST: case KL_FAM_IOTA: want = 0; break;
  default: break;
  }
  if (want >= 0 && nin != want) return fail(&e, 'V', "%s: expects %d operand(s), got %d", pi->name, want, nin);
  if (want < 0 && nin < 1) return fail(&e, 'V', "%s: expects at least one operand", pi->name);
  *nout = 1;
  switch (pi->family) {
  case KL_FAM_UNARY: case KL_FAM_BINARY: case KL_FAM_COMPARE: return rule_elementwise(&e, pi, ins, nin, p, outs);
  case KL_FAM_SELECT: return rule_select(&e, ins, nin, outs);
  case KL_FAM_CONVERT:
    if (p->d < 0 || p->d >= KL_NDTYPES) return fail(&e, 'T', "%s: invalid new_dtype", pi->name);
    if (prim == KL_P_BITCAST) { /* same width; 32- and 64-bit types (and 8/16-bit integers) */
      kl_dtype from = ins[0].dtype, to = (kl_dtype)p->d;
      int low = from == KL_F16 || from == KL_BF16 || to == KL_F16 || to == KL_BF16 || from == KL_BOOL || to == KL_BOOL;
      if (kl_dtype_size(from) != kl_dtype_size(to) || (low && from != to))
        return fail(&e, 'T', "bitcast_convert_type: cannot reinterpret %s as %s (kiln supports same-width "
                             "integer and 32/64-bit float types)", kl_dtype_name(from), kl_dtype_name(to));
      outs[0] = ins[0];
      outs[0].dtype = to;
      outs[0].weak = 0;
      return 0;
    }
    outs[0] = ins[0];
    outs[0].dtype = (kl_dtype)p->d;
    outs[0].weak = (uint8_t)(p->i0 != 0);
    return 0;
  case KL_FAM_CONST:
    if (p->d < 0 || p->d >= KL_NDTYPES) return fail(&e, 'T', "literal: invalid dtype");
    memset(outs, 0, sizeof *outs);
    outs[0].dtype = (kl_dtype)p->d;
    outs[0].weak = (uint8_t)(p->i0 != 0);
    return 0;
  case KL_FAM_IOTA:
    if (p->d < 0 || p->d >= KL_NDTYPES) return fail(&e, 'T', "iota: invalid dtype");
    if (check_rank(&e, "iota", p->nv[0])) return -1;
    if (p->i0 < 0 || p->i0 >= p->nv[0]) return fail(&e, 'V', "iota: dimension %lld out of range for rank %d", (long long)p->i0, p->nv[0]);
    memset(outs, 0, sizeof *outs);
    outs[0].dtype = (kl_dtype)p->d;
    outs[0].ndim = (int8_t)p->nv[0];
    for (int i = 0; i < p->nv[0]; i++) {
      if (p->v[0][i] < 0) return fail(&e, 'V', "iota: negative dimension %lld", (long long)p->v[0][i]);
      outs[0].dims[i] = p->v[0][i];
    }
    return 0;
  case KL_FAM_SHAPE: return rule_shape(&e, prim, ins, nin, p, outs);
  case KL_FAM_REDUCE: return rule_reduce(&e, pi, ins, p, outs);
  case KL_FAM_LIB: return rule_lib(&e, prim, ins, nin, p, outs, nout);
  }
  return fail(&e, 'V', "%s: unknown family", pi->name);
}
