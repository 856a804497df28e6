/* simplify.c: algebraic simplification of a Program, in place. Each rule either redirects the
 * uses of an equation's result to an equal value already in the program (as kl_cse does) or
 * rewrites the equation into a cheaper one with the same result aval; kl_dce then drops what
 * became dead. Every rule keeps the program's outputs bit-identical, -0.0 and NaN included;
 * the comment on each rule says why it is exact (and what is deliberately left alone). The rules
 * are the simplify column of the primitives' rule rows (transforms/rules/<family>.c); this file
 * is the driver and the helpers they share (simplify.h). KILN_DISABLE_SIMPLIFY=1 turns both
 * entry points into no-ops (to bisect a suspected bug). Depends only on ir/ and transforms/. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "build.h"
#include "fuse.h"
#include "rules/rules.h"
#include "simplify.h"

static const kl_aval *aval_of(const kl_program *pg, int v) { return &pg->vals[v].aval; }

const kl_eqn *kl_simp_producer(const kl_program *pg, int v) {
  int k = pg->vals[v].producer;
  return k < 0 ? NULL : &pg->eqns[k];
}

/* Ops that move or replicate elements without changing them: a splat stays a splat. */
static int value_preserving_shape_op(kl_prim p) {
  return p == KL_P_BROADCAST_IN_DIM || p == KL_P_RESHAPE || p == KL_P_TRANSPOSE || p == KL_P_REV;
}

int kl_simp_splat_root(const kl_program *pg, int v) {
  for (;;) {
    const kl_eqn *e = kl_simp_producer(pg, v);
    if (!e) return -1;
    if (e->prim == KL_P_CONST) return v;
    if (!value_preserving_shape_op(e->prim)) return -1;
    v = e->ins[0];
  }
}

int kl_simp_splat_is(const kl_program *pg, int v, kl_splat_kind kind) {
  int r = kl_simp_splat_root(pg, v);
  if (r < 0) return 0;
  const kl_params *p = &kl_simp_producer(pg, r)->p;
  kl_dtype t = (kl_dtype)p->literal.dtype;
  int fl = kl_dtype_is_float(t);
  double f = p->literal.value;
  switch (kind) {
  case KL_SPLAT_ONE:
    if (kl_dtype_is_complex(t)) return f == 1.0 && p->literal.imag == 0.0;
    return fl ? f == 1.0 : p->literal.int_value == 1;
  case KL_SPLAT_ZERO_INT: return kl_dtype_is_int(t) && p->literal.int_value == 0;
  case KL_SPLAT_POS_ZERO_FLOAT: return fl && f == 0.0 && !signbit(f);
  case KL_SPLAT_NEG_ZERO_FLOAT: return fl && f == 0.0 && signbit(f);
  }
  return 0;
}

int kl_simp_splat_int(const kl_program *pg, int v, int64_t *out) {
  int r = kl_simp_splat_root(pg, v);
  if (r < 0) return 0;
  const kl_params *p = &kl_simp_producer(pg, r)->p;
  if (!kl_dtype_is_int((kl_dtype)p->literal.dtype) && p->literal.dtype != KL_BOOL) return 0;
  *out = p->literal.int_value;
  return 1;
}

int64_t *kl_simp_arena_vec(kl_program *pg, int n) {
  int64_t *v = n ? kl_arena_alloc(&pg->arena, sizeof(int64_t) * (size_t)n) : NULL;
  if (n && !v) pg->oom = 1;
  return v;
}

int kl_simp_rewrite_broadcast(kl_simp *s, kl_eqn *e, int x, const int64_t *dims) {
  const kl_aval *out = aval_of(s->pg, e->outs[0]);
  const kl_aval *xa = aval_of(s->pg, x);
  kl_params p;
  kl_params_init(&p, KL_P_BROADCAST_IN_DIM);
  p.broadcast.shape = (kl_ivec){kl_simp_arena_vec(s->pg, out->ndim), out->ndim};
  p.broadcast.broadcast_dimensions = (kl_ivec){kl_simp_arena_vec(s->pg, xa->ndim), xa->ndim};
  if ((out->ndim && !p.broadcast.shape.v) || (xa->ndim && !p.broadcast.broadcast_dimensions.v))
    return KL_SIMP_KEEP; /* out of memory: pg->oom is set, e stays as it is */
  for (int i = 0; i < out->ndim; i++) p.broadcast.shape.v[i] = out->dims[i];
  for (int i = 0; i < xa->ndim; i++) p.broadcast.broadcast_dimensions.v[i] = dims[i];
  e->prim = KL_P_BROADCAST_IN_DIM;
  e->nin = 1;
  e->ins[0] = x;
  e->p = p;
  return KL_SIMP_REWRITTEN;
}

/* Redirects when the avals are equal; otherwise rewrites e into the one cheap op that restores
 * the aval (convert_element_type for the weak flag alone, broadcast_in_dim for a rank-0 x of
 * the same weak type); keeps e when neither fits. Exact: the element values are x's. */
int kl_simp_forward(kl_simp *s, kl_eqn *e, int x) {
  const kl_aval *out = aval_of(s->pg, e->outs[0]);
  const kl_aval *xa = aval_of(s->pg, x);
  if (kl_aval_equal(out, xa)) {
    s->repl[e->outs[0]] = x;
    return KL_SIMP_REDIRECTED;
  }
  if (xa->dtype != out->dtype) return KL_SIMP_KEEP;
  kl_aval same_weak = *xa;
  same_weak.weak = out->weak;
  if (kl_aval_equal(out, &same_weak)) {
    if (e->prim == KL_P_CONVERT && e->ins[0] == x) return KL_SIMP_KEEP; /* already that op */
    kl_params p;
    kl_params_init(&p, KL_P_CONVERT);
    p.convert.new_dtype = out->dtype;
    p.convert.weak_type = out->weak;
    e->prim = KL_P_CONVERT;
    e->nin = 1;
    e->ins[0] = x;
    e->p = p;
    return KL_SIMP_REWRITTEN;
  }
  if (xa->ndim == 0 && xa->weak == out->weak) {
    if (e->prim == KL_P_BROADCAST_IN_DIM && e->ins[0] == x) return KL_SIMP_KEEP;
    return kl_simp_rewrite_broadcast(s, e, x, NULL);
  }
  return KL_SIMP_KEEP;
}

/* The rules are the simplify column of the rule rows (transforms/rules/<family>.c). */
static int simplify_eqn(kl_simp *s, kl_eqn *e) {
  if (e->nout != 1) return KL_SIMP_KEEP;
  kl_simplify_rule rule = kl_rule_get(e->prim)->simplify;
  return rule ? rule(s, e) : KL_SIMP_KEEP;
}

/* One pass in program order: operands are redirected before their equation is looked at, so a
 * chain (neg(neg(x * 1))) collapses in one go. A rewritten equation is looked at again. */
static int disabled(void) {
  const char *v = getenv("KILN_DISABLE_SIMPLIFY");
  return v && *v && *v != '0';
}

void kl_simplify(kl_program *pg) {
  if (disabled()) return;
  kl_simp s = {pg, kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1)), kl_calloc((size_t)pg->nvals + 1, 1)};
  if (!s.repl || !s.dep) { /* out of memory: nothing changed; the pipeline reports pg->oom */
    pg->oom = 1;
    free(s.repl);
    free(s.dep);
    return;
  }
  for (int v = 0; v < pg->nvals; v++) s.repl[v] = v;
  for (int i = 0; i < pg->ninputs; i++) s.dep[pg->inputs[i]] = 1;
  for (int k = 0; k < pg->neqns; k++) {
    kl_eqn *e = &pg->eqns[k];
    for (int i = 0; i < e->nin; i++) e->ins[i] = s.repl[e->ins[i]];
    for (int round = 0; round < 8 && simplify_eqn(&s, e) == KL_SIMP_REWRITTEN; round++) {
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
  if (kl_dtype_is_inexact(a.dtype)) p.literal.value = value;
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
