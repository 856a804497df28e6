/* collective.c: the transformation rules of the collective family, JAX's rules for shard_map's
 * "unmapped" semantics (a program's value differs per participant; a gradient is that of the sum
 * over participants): psum, all_gather, reduce_scatter, ppermute and all_to_all are linear, their
 * JVP the collective of the tangent; transposes: psum -> psum (check_vma's invariant psum <->
 * pvary, JAX's typed rules), all_gather <-> reduce_scatter (same axis, tiled; the invariant
 * all_gather -> this participant's slice), ppermute -> ppermute with the pairs reversed,
 * all_to_all -> all_to_all with split and concat axes swapped. pmax/pmin: the tangent of the participants holding the extreme,
 * averaged over ties. axis_index has no operand. Batching (vmap inside a shard_map body, over an
 * axis no collective names): the batch axis leads, the dimensions named by params shift by one.
 * Depends only on ir/ and transforms/. */
#include "rules.h"

static int collective_of(kl_build *a, kl_prim p, int x, const kl_params *src) {
  kl_params q = *src;
  return kl_build_op(a, p, &x, 1, &q);
}

static int linear_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)xs, (void)ys;
  if (ts[0] >= 0) touts[0] = same_prim(a, e, (int *)&ts[0], 1);
  return 0;
}

/* pmax/pmin: psum(t * [x == y]) / psum([x == y]). */
static int extreme_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  if (ts[0] < 0) return 0;
  kl_dtype t = kl_build_aval(a, ys[0])->dtype;
  int hit = kl_build_convert(a, kl_build_bin(a, KL_P_EQ, xs[0], ys[0]), t);
  int num = collective_of(a, KL_P_PSUM, mul(a, ts[0], hit), &e->p);
  int den = collective_of(a, KL_P_PSUM, hit, &e->p);
  touts[0] = dv(a, num, den);
  return 0;
}

/* psum -> psum ("unmapped"); check_vma's invariant psum -> pvary, whose transpose is the
 * invariant psum again (JAX's psum_invariant and pvary). */
static int psum_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  (void)i;
  return collective_of(c->a, e->p.collective.invariant ? KL_P_PVARY : KL_P_PSUM, ct, &e->p);
}

static int pvary_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  (void)i;
  kl_params q = e->p;
  q.collective.invariant = 1;
  return kl_build_op(c->a, KL_P_PSUM, &ct, 1, &q);
}

/* pvary is the identity on values: compiled programs read its operand. */
static int pvary_legalize(kl_build *b, const kl_eqn *e, const int *xs, int *ys) {
  (void)b, (void)e;
  ys[0] = xs[0];
  return 1;
}

/* psum/pmax/pmin over a group of one participant (every named axis of extent 1: a data-parallel
 * step on one device) are the identity: compiled programs read the operand, with no copy. */
static int reduce_legalize(kl_build *b, const kl_eqn *e, const int *xs, int *ys) {
  (void)b;
  if (kl_collective_group_size(&e->p) != 1) return 0;
  ys[0] = xs[0];
  return 1;
}

/* all_gather -> reduce_scatter; the invariant one (check_vma's all_gather(to="invarying"), the
 * same cotangent on every participant) -> this participant's piece of it (JAX's dynamic_slice). */
static int all_gather_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  if (!e->p.collective.invariant) return collective_of(c->a, KL_P_REDUCE_SCATTER, ct, &e->p);
  kl_build *a = c->a;
  const kl_aval *x = &c->j->vals[e->ins[i]].aval;
  kl_aval piece = *kl_build_aval(a, ct); /* the gathered shape, the gathered axis cut to one piece */
  int64_t ax = e->p.collective.axis;
  int tiled = e->p.collective.tiled, ins[KL_MAX_RANK + 1];
  piece.dims[ax] = tiled ? x->dims[ax] : 1;
  kl_params q = e->p; /* this participant's position along the axes (no index groups with it) */
  q.collective.invariant = 0;
  q.collective.groups = (kl_ivec){NULL, 0};
  q.collective.group_size = 0;
  int pos = kl_build_op(a, KL_P_AXIS_INDEX, NULL, 0, &q), zero = kl_build_ilit(a, 0, KL_I32);
  ins[0] = ct;
  for (int d = 0; d < piece.ndim; d++)
    ins[1 + d] = d != ax ? zero : tiled ? kl_build_bin(a, KL_P_MUL, pos, kl_build_ilit(a, piece.dims[ax], KL_I32)) : pos;
  kl_params p;
  kl_params_init(&p, KL_P_DYNAMIC_SLICE);
  p.dynamic_slice.slice_sizes = (kl_ivec){piece.dims, piece.ndim};
  return kl_build_reshape(a, kl_build_op(a, KL_P_DYNAMIC_SLICE, ins, 1 + piece.ndim, &p), x->dims, x->ndim);
}

static int reduce_scatter_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  (void)i;
  return collective_of(c->a, KL_P_ALL_GATHER, ct, &e->p);
}

static int ppermute_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  (void)i;
  kl_params q = e->p;
  int64_t pairs[2 * 1024];
  const kl_ivec *pm = &e->p.collective.perm;
  if (pm->n > (int)(sizeof pairs / sizeof pairs[0]))
    return kl_build_fail(c->a, KL_ERR_VALUE, "transpose of ppermute: more than 1024 pairs");
  for (int k = 0; k < pm->n; k += 2) pairs[k] = pm->v[k + 1], pairs[k + 1] = pm->v[k];
  q.collective.perm = (kl_ivec){pairs, pm->n};
  return kl_build_op(c->a, KL_P_PPERMUTE, &ct, 1, &q);
}

static int all_to_all_transpose(kl_tctx *c, const kl_eqn *e, int i, int ct) {
  (void)i;
  kl_params q = e->p;
  q.collective.axis = e->p.collective.concat_axis;
  q.collective.concat_axis = e->p.collective.axis;
  return kl_build_op(c->a, KL_P_ALL_TO_ALL, &ct, 1, &q);
}

/* The operand is batched on axis 0 (a collective has one): the dimensions the params name move
 * up by one. */
static int collective_batch(kl_build *b, rule_args *r) {
  kl_params q = r->e->p;
  q.collective.axis += 1;
  q.collective.concat_axis += 1;
  r->ys[0] = kl_build_op(b, r->e->prim, &r->xs[0], 1, &q);
  return r->ys[0] < 0 ? -1 : 0;
}

const kl_rule_row kl_rules_collective[] = {
    {KL_P_PSUM, linear_jvp, psum_transpose, collective_batch, NULL, NULL, reduce_legalize},
    {KL_P_PMAX, extreme_jvp, NULL, collective_batch, NULL, NULL, reduce_legalize},
    {KL_P_PMIN, extreme_jvp, NULL, collective_batch, NULL, NULL, reduce_legalize},
    {KL_P_ALL_GATHER, linear_jvp, all_gather_transpose, collective_batch, NULL, NULL, NULL},
    {KL_P_REDUCE_SCATTER, linear_jvp, reduce_scatter_transpose, collective_batch, NULL, NULL, NULL},
    {KL_P_PPERMUTE, linear_jvp, ppermute_transpose, collective_batch, NULL, NULL, NULL},
    {KL_P_ALL_TO_ALL, linear_jvp, all_to_all_transpose, collective_batch, NULL, NULL, NULL},
    {KL_P_AXIS_INDEX, kl_jvp_zero, NULL, collective_batch, NULL, NULL, NULL},
    {KL_P_PVARY, linear_jvp, pvary_transpose, collective_batch, NULL, NULL, pvary_legalize},
    KL_RULES_END};
