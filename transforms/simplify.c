/* simplify.c: algebraic simplification of a Program, in place. Each rule either redirects the
 * uses of an equation's result to an equal value already in the program (as kl_cse does) or
 * rewrites the equation into a cheaper one with the same result aval; kl_dce then drops what
 * became dead. Every rule keeps the program's outputs bit-identical, -0.0 and NaN included;
 * the comment on each rule says why it is exact (and what is deliberately left alone).
 * KILN_DISABLE_SIMPLIFY=1 turns both entry points into no-ops (to bisect a suspected bug).
 * Depends only on ir/. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"
#include "fuse.h"

typedef struct {
  kl_program *pg; /* borrowed */
  int *repl;      /* owned; per value id: the value its uses now read */
  char *dep;      /* owned; per value id: 1 if it depends on a program input */
} simp;

enum { KEEP, REDIRECTED, REWRITTEN };

static const kl_eqn *producer(const kl_program *pg, int v) {
  int k = pg->vals[v].producer;
  return k < 0 ? NULL : &pg->eqns[k];
}

static const kl_aval *aval_of(const kl_program *pg, int v) { return &pg->vals[v].aval; }

/* Ops that move or replicate elements without changing them: a splat stays a splat. */
static int value_preserving_shape_op(kl_prim p) {
  return p == KL_P_BROADCAST_IN_DIM || p == KL_P_RESHAPE || p == KL_P_TRANSPOSE || p == KL_P_REV;
}

/* The rank-0 literal whose value fills every element of v, or -1 when v is not such a splat. */
static int splat_root(const kl_program *pg, int v) {
  for (;;) {
    const kl_eqn *e = producer(pg, v);
    if (!e) return -1;
    if (e->prim == KL_P_CONST) return v;
    if (!value_preserving_shape_op(e->prim)) return -1;
    v = e->ins[0];
  }
}

/* Value classes of a splat, tested exactly (bit patterns matter for floats: -0.0 vs +0.0). */
typedef enum { SPLAT_ONE, SPLAT_ZERO_INT, SPLAT_POS_ZERO_FLOAT, SPLAT_NEG_ZERO_FLOAT } splat_kind;

static int splat_is(const kl_program *pg, int v, splat_kind kind) {
  int r = splat_root(pg, v);
  if (r < 0) return 0;
  const kl_params *p = &producer(pg, r)->p;
  kl_dtype t = (kl_dtype)p->literal.dtype;
  int fl = kl_dtype_is_float(t);
  double f = p->literal.value;
  switch (kind) {
  case SPLAT_ONE: return fl ? f == 1.0 : p->literal.int_value == 1;
  case SPLAT_ZERO_INT: return kl_dtype_is_int(t) && p->literal.int_value == 0;
  case SPLAT_POS_ZERO_FLOAT: return fl && f == 0.0 && !signbit(f);
  case SPLAT_NEG_ZERO_FLOAT: return fl && f == 0.0 && signbit(f);
  }
  return 0;
}

/* Integer splat value of a bool/int literal splat (a select_n predicate); 0 if not one. */
static int splat_int(const kl_program *pg, int v, int64_t *out) {
  int r = splat_root(pg, v);
  if (r < 0) return 0;
  const kl_params *p = &producer(pg, r)->p;
  if (kl_dtype_is_float((kl_dtype)p->literal.dtype)) return 0;
  *out = p->literal.int_value;
  return 1;
}

static int64_t *arena_vec(kl_program *pg, int n) {
  return n ? kl_arena_alloc(&pg->arena, sizeof(int64_t) * (size_t)n) : NULL;
}

/* Rewrites e in place into broadcast_in_dim(x, e's result shape, dims) (dims may be NULL for a
 * rank-0 x). The caller has checked that the result aval is unchanged. */
static int rewrite_broadcast(simp *s, kl_eqn *e, int x, const int64_t *dims) {
  const kl_aval *out = aval_of(s->pg, e->outs[0]);
  const kl_aval *xa = aval_of(s->pg, x);
  kl_params p;
  kl_params_init(&p, KL_P_BROADCAST_IN_DIM);
  p.broadcast.shape = (kl_ivec){arena_vec(s->pg, out->ndim), out->ndim};
  for (int i = 0; i < out->ndim; i++) p.broadcast.shape.v[i] = out->dims[i];
  p.broadcast.broadcast_dimensions = (kl_ivec){arena_vec(s->pg, xa->ndim), xa->ndim};
  for (int i = 0; i < xa->ndim; i++) p.broadcast.broadcast_dimensions.v[i] = dims[i];
  e->prim = KL_P_BROADCAST_IN_DIM;
  e->nin = 1;
  e->ins[0] = x;
  e->p = p;
  return REWRITTEN;
}

/* e's result equals x's values, possibly broadcast from rank 0 or with a different weak flag.
 * Redirects when the avals are equal; otherwise rewrites e into the one cheap op that restores
 * the aval (convert_element_type for the weak flag alone, broadcast_in_dim for a rank-0 x of
 * the same weak type); keeps e when neither fits. Exact: the element values are x's. */
static int forward(simp *s, kl_eqn *e, int x) {
  const kl_aval *out = aval_of(s->pg, e->outs[0]);
  const kl_aval *xa = aval_of(s->pg, x);
  if (kl_aval_equal(out, xa)) {
    s->repl[e->outs[0]] = x;
    return REDIRECTED;
  }
  if (xa->dtype != out->dtype) return KEEP;
  kl_aval same_weak = *xa;
  same_weak.weak = out->weak;
  if (kl_aval_equal(out, &same_weak)) {
    if (e->prim == KL_P_CONVERT && e->ins[0] == x) return KEEP; /* already that op */
    kl_params p;
    kl_params_init(&p, KL_P_CONVERT);
    p.convert.new_dtype = out->dtype;
    p.convert.weak_type = out->weak;
    e->prim = KL_P_CONVERT;
    e->nin = 1;
    e->ins[0] = x;
    e->p = p;
    return REWRITTEN;
  }
  if (xa->ndim == 0 && xa->weak == out->weak) {
    if (e->prim == KL_P_BROADCAST_IN_DIM && e->ins[0] == x) return KEEP;
    return rewrite_broadcast(s, e, x, NULL);
  }
  return KEEP;
}

/* Identity elements of the binary arithmetic ops. x*1, 1*x, x/1: exact for every dtype (IEEE
 * multiplication and division by 1 return x, signed zeros, infinities and NaNs included).
 * Integers: x+0, 0+x, x-0 exact (wrapping arithmetic). Floats: x+0.0 is NOT exact
 * (-0.0 + +0.0 = +0.0), but x+(-0.0), (-0.0)+x and x-(+0.0) are, so only those fire.
 * x*0 for integers is 0 (no NaN/inf); never for floats, where 0*inf and 0*NaN are NaN. */
static int rule_binary(simp *s, kl_eqn *e) {
  const kl_program *pg = s->pg;
  int x = e->ins[0], y = e->ins[1];
  kl_dtype t = aval_of(pg, x)->dtype;
  int fl = kl_dtype_is_float(t);
  switch (e->prim) {
  case KL_P_MUL:
    if (splat_is(pg, y, SPLAT_ONE)) return forward(s, e, x);
    if (splat_is(pg, x, SPLAT_ONE)) return forward(s, e, y);
    if (!fl) {
      int z = splat_is(pg, y, SPLAT_ZERO_INT) ? y : splat_is(pg, x, SPLAT_ZERO_INT) ? x : -1;
      if (z < 0) return KEEP;
      int r = forward(s, e, z);
      if (r != KEEP) return r;
      return forward(s, e, splat_root(pg, z));
    }
    return KEEP;
  case KL_P_DIV: return splat_is(pg, y, SPLAT_ONE) ? forward(s, e, x) : KEEP;
  case KL_P_ADD: {
    splat_kind zero = fl ? SPLAT_NEG_ZERO_FLOAT : SPLAT_ZERO_INT;
    if (splat_is(pg, y, zero)) return forward(s, e, x);
    if (splat_is(pg, x, zero)) return forward(s, e, y);
    return KEEP;
  }
  case KL_P_SUB: /* 0 - x is not x; (-0.0) - x is not bitwise neg(x) for NaN, so left alone */
    return splat_is(pg, y, fl ? SPLAT_POS_ZERO_FLOAT : SPLAT_ZERO_INT) ? forward(s, e, x) : KEEP;
  default: return KEEP;
  }
}

/* neg(neg(x)) = x: negation flips the sign bit (floats) or negates modulo 2^n (integers), so
 * twice is the identity, NaN payloads included. integer_pow[y=1](x) = x. */
static int rule_unary(simp *s, kl_eqn *e) {
  int x = e->ins[0];
  if (e->prim == KL_P_NEG) {
    const kl_eqn *pe = producer(s->pg, x);
    return pe && pe->prim == KL_P_NEG ? forward(s, e, pe->ins[0]) : KEEP;
  }
  if (e->prim == KL_P_INTEGER_POW && e->p.integer_pow.y == 1) return forward(s, e, x);
  /* stop_gradient is the identity on values; it only matters to a later differentiation of
   * the program (it may be inlined into an outer grad), so it goes only where its operand does
   * not depend on any input: no derivative can flow through it then. */
  if (e->prim == KL_P_STOP_GRADIENT && !s->dep[x]) return forward(s, e, x);
  return KEEP;
}

static int is_identity_perm(const int64_t *perm, int n) {
  for (int i = 0; i < n; i++)
    if (perm[i] != i) return 0;
  return 1;
}

/* Structural ops that leave their operand unchanged, and chains of them that compose into one.
 * All exact: they only move elements. */
static int rule_shape(simp *s, kl_eqn *e) {
  kl_program *pg = s->pg;
  int x = e->ins[0];
  const kl_aval *xa = aval_of(pg, x), *out = aval_of(pg, e->outs[0]);
  const kl_eqn *pe = producer(pg, x);
  const kl_params *p = &e->p;
  int same = kl_aval_equal(xa, out);
  switch (e->prim) {
  case KL_P_BROADCAST_IN_DIM: case KL_P_RESHAPE:
    /* equal avals: the broadcast dims are then 0..n-1 with equal extents; reshape is row-major */
    if (same) return forward(s, e, x);
    break;
  case KL_P_TRANSPOSE:
    if (is_identity_perm(p->transpose.permutation.v, p->transpose.permutation.n)) return forward(s, e, x);
    break;
  case KL_P_REV: {
    int moves = 0;
    for (int i = 0; i < p->rev.dimensions.n; i++) moves |= xa->dims[p->rev.dimensions.v[i]] > 1;
    if (!moves) return forward(s, e, x);
    break;
  }
  case KL_P_SLICE: {
    int whole = 1;
    for (int i = 0; i < xa->ndim; i++)
      whole &= p->slice.start_indices.v[i] == 0 && p->slice.limit_indices.v[i] == xa->dims[i] &&
               (!p->slice.strides.n || p->slice.strides.v[i] == 1 || xa->dims[i] <= 1);
    return whole && same ? forward(s, e, x) : KEEP;
  }
  case KL_P_PAD: {
    int none = 1;
    for (int i = 0; i < xa->ndim; i++)
      none &= !p->pad.low.v[i] && !p->pad.high.v[i] && (!p->pad.interior.v[i] || xa->dims[i] <= 1);
    return none && same ? forward(s, e, x) : KEEP;
  }
  case KL_P_CONCATENATE: return e->nin == 1 ? forward(s, e, x) : KEEP;
  default: return KEEP;
  }
  if (!pe) return KEEP;
  /* a replicated scalar stays a replicated scalar: broadcast it straight to the final shape */
  if (pe->prim == KL_P_BROADCAST_IN_DIM && aval_of(pg, pe->ins[0])->ndim == 0)
    return rewrite_broadcast(s, e, pe->ins[0], NULL);
  if (pe->prim != e->prim) return KEEP;
  int y = pe->ins[0];
  if (e->prim == KL_P_RESHAPE) { /* row-major order is unchanged by either step */
    e->ins[0] = y;
    return REWRITTEN;
  }
  if (e->prim == KL_P_TRANSPOSE) { /* out[j] = mid[p2[j]] = y[p1[p2[j]]] */
    const kl_ivec *p2 = &p->transpose.permutation;
    int64_t *q = arena_vec(pg, p2->n);
    for (int j = 0; j < p2->n; j++) q[j] = pe->p.transpose.permutation.v[p2->v[j]];
    e->p.transpose.permutation.v = q;
    e->ins[0] = y;
    return REWRITTEN;
  }
  /* broadcast_in_dim of broadcast_in_dim: y's dim i lands on mid's d1[i], which lands on
   * out's d2[d1[i]]; extents stay 1 or equal, so the composed broadcast is valid and equal. */
  const kl_aval *ya = aval_of(pg, y);
  int64_t dims[KL_MAX_RANK];
  for (int i = 0; i < ya->ndim; i++) dims[i] = p->broadcast.broadcast_dimensions.v[pe->p.broadcast.broadcast_dimensions.v[i]];
  return rewrite_broadcast(s, e, y, dims);
}

/* select_n(p, a, b): a literal predicate picks its case (0 -> a, 1 -> b; an int32 predicate
 * with any other value is left alone); equal cases give that case. */
static int rule_select(simp *s, kl_eqn *e) {
  int64_t which;
  if (e->ins[1] == e->ins[2]) return forward(s, e, e->ins[1]);
  if (splat_int(s->pg, e->ins[0], &which) && (which == 0 || which == 1)) return forward(s, e, e->ins[1 + which]);
  return KEEP;
}

static int simplify_eqn(simp *s, kl_eqn *e) {
  if (e->nout != 1) return KEEP;
  if (kl_prim_get(e->prim)->family == KL_FAM_SHAPE) return rule_shape(s, e);
  switch (kl_prim_get(e->prim)->form) {
  case KL_FORM_BINARY: return rule_binary(s, e);
  case KL_FORM_UNARY: return rule_unary(s, e);
  case KL_FORM_SELECT: return rule_select(s, e);
  case KL_FORM_CONVERT: /* to its own dtype and weak type: nothing to do */
    return kl_aval_equal(aval_of(s->pg, e->ins[0]), aval_of(s->pg, e->outs[0])) ? forward(s, e, e->ins[0]) : KEEP;
  default: return KEEP;
  }
}

/* One pass in program order: operands are redirected before their equation is looked at, so a
 * chain (neg(neg(x * 1))) collapses in one go. A rewritten equation is looked at again. */
static int disabled(void) {
  const char *v = getenv("KILN_DISABLE_SIMPLIFY");
  return v && *v && *v != '0';
}

void kl_simplify(kl_program *pg) {
  if (disabled()) return;
  simp s = {pg, malloc(sizeof(int) * ((size_t)pg->nvals + 1)), calloc((size_t)pg->nvals + 1, 1)};
  if (!s.repl || !s.dep) abort();
  for (int v = 0; v < pg->nvals; v++) s.repl[v] = v;
  for (int i = 0; i < pg->ninputs; i++) s.dep[pg->inputs[i]] = 1;
  for (int k = 0; k < pg->neqns; k++) {
    kl_eqn *e = &pg->eqns[k];
    for (int i = 0; i < e->nin; i++) e->ins[i] = s.repl[e->ins[i]];
    for (int round = 0; round < 8 && simplify_eqn(&s, e) == REWRITTEN; round++) {
    }
    char d = 0;
    for (int i = 0; i < e->nin; i++) d |= s.dep[e->ins[i]];
    for (int i = 0; i < e->nout; i++) s.dep[e->outs[i]] = d;
  }
  for (int i = 0; i < pg->noutputs; i++) pg->outputs[i] = s.repl[pg->outputs[i]];
  free(s.repl);
  free(s.dep);
}

/* Replaces program input `pos` by a constant: every use of it reads a splat of `value` (a
 * rank-0 literal of the input's dtype and weak type, broadcast to its shape) placed at the
 * front of the program. The input stays in the input list, unused, so callers pass the same
 * arguments. Used for grad's output cotangent, which is always 1. Returns 0, or -1 when pos is
 * out of range or the dtype has no literal (bool). */
int kl_simplify_bind_input(kl_program *pg, int pos, double value) {
  if (pos < 0 || pos >= pg->ninputs) return -1;
  if (disabled()) return 0;
  int in = pg->inputs[pos];
  kl_aval a = pg->vals[in].aval;
  if (a.dtype == KL_BOOL) return -1;
  kl_params p;
  kl_params_init(&p, KL_P_CONST);
  p.literal.dtype = a.dtype;
  p.literal.weak_type = a.weak;
  if (kl_dtype_is_float(a.dtype)) p.literal.value = value;
  else p.literal.int_value = (int64_t)value;
  char err[256];
  kl_build b = {.pg = pg, .err = err, .errlen = sizeof err};
  int n0 = pg->neqns, v = kl_build_op(&b, KL_P_CONST, NULL, 0, &p);
  if (a.ndim) v = kl_build_broadcast(&b, v, a.dims, a.ndim, NULL);
  if (v < 0) return -1;
  /* rotate the new equations (they read nothing from the program) to the front */
  int k = pg->neqns - n0;
  kl_eqn added[2];
  memcpy(added, &pg->eqns[n0], sizeof(kl_eqn) * (size_t)k);
  memmove(&pg->eqns[k], &pg->eqns[0], sizeof(kl_eqn) * (size_t)n0);
  memcpy(pg->eqns, added, sizeof(kl_eqn) * (size_t)k);
  for (int j = 0; j < pg->neqns; j++)
    for (int i = 0; i < pg->eqns[j].nout; i++) pg->vals[pg->eqns[j].outs[i]].producer = j;
  for (int j = k; j < pg->neqns; j++)
    for (int i = 0; i < pg->eqns[j].nin; i++)
      if (pg->eqns[j].ins[i] == in) pg->eqns[j].ins[i] = v;
  for (int i = 0; i < pg->noutputs; i++)
    if (pg->outputs[i] == in) pg->outputs[i] = v;
  return 0;
}
