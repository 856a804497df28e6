/* collective.c: the collective family's params and shape rule: operations across the participants
 * of an SPMD launch over a mesh (shard_map, pmap): psum pmax pmin (all-reduce), all_gather,
 * reduce_scatter (psum_scatter), ppermute, all_to_all (tiled), axis_index, and pvary (the identity on
 * values: marks a value the same on every participant as varying over axes, for check_vma's
 * differentiation; legalize drops it). Every participant runs
 * the same program on its own shard; a collective's group is fixed by the mesh axes it runs over
 * (and by JAX's axis_index_groups, which split the participants along them into groups of one size).
 * Also the group arithmetic the lowerings share. Depends only on ir/. */
#include "prims.h"

#include <string.h>

const kl_param_field kl_fields_collective[] = {
    KL_FIELD(collective, mesh_shape, IVEC), KL_FIELD(collective, axes, IVEC),  KL_FIELD(collective, axis, INT),
    KL_FIELD(collective, concat_axis, INT), KL_FIELD(collective, tiled, INT32), KL_FIELD(collective, perm, IVEC),
    KL_FIELD(collective, invariant, INT32), KL_FIELD(collective, groups, IVEC), KL_FIELD(collective, group_size, INT),
    KL_FIELD(collective, frame, INT), {NULL, 0, 0}};

int64_t kl_collective_mesh_size(const kl_params *p) {
  int64_t n = 1;
  for (int i = 0; i < p->collective.mesh_shape.n; i++) n *= p->collective.mesh_shape.v[i];
  return n;
}

int kl_collective_communicates(kl_prim prim) {
  return kl_prim_get(prim)->family == KL_FAM_COLLECTIVE && prim != KL_P_AXIS_INDEX && prim != KL_P_PVARY;
}

/* The participants along `axes` (A: the product of mesh_shape over them). */
static int64_t axes_size(const kl_params *p) {
  int64_t g = 1;
  for (int i = 0; i < p->collective.axes.n; i++) g *= p->collective.mesh_shape.v[p->collective.axes.v[i]];
  return g;
}

int64_t kl_collective_group_size(const kl_params *p) {
  return p->collective.groups.n ? p->collective.group_size : axes_size(p);
}

/* The participant at position q along axes whose other coordinates are coord's. */
static int64_t member_at(const kl_params *p, const int64_t *coord, int64_t q) {
  const kl_ivec *ms = &p->collective.mesh_shape, *ax = &p->collective.axes;
  int64_t c[KL_MAX_RANK];
  memcpy(c, coord, sizeof(int64_t) * (size_t)ms->n);
  for (int i = ax->n - 1; i >= 0; i--) {
    c[ax->v[i]] = q % ms->v[ax->v[i]];
    q /= ms->v[ax->v[i]];
  }
  int64_t m = 0;
  for (int d = 0; d < ms->n; d++) m = m * ms->v[d] + c[d];
  return m;
}

int64_t kl_collective_group(const kl_params *p, int64_t rank, int64_t *members) {
  const kl_ivec *ms = &p->collective.mesh_shape, *ax = &p->collective.axes, *gr = &p->collective.groups;
  int64_t coord[KL_MAX_RANK], r = rank;
  if (ms->n > KL_MAX_RANK || rank < 0 || rank >= kl_collective_mesh_size(p)) return -1;
  for (int d = ms->n - 1; d >= 0; d--) { /* row-major coordinates */
    coord[d] = r % ms->v[d];
    r /= ms->v[d];
  }
  int64_t pos = 0, g = kl_collective_group_size(p);
  for (int i = 0; i < ax->n; i++) pos = pos * ms->v[ax->v[i]] + coord[ax->v[i]];
  if (gr->n) { /* index groups: the one listing pos, in its order */
    int at = 0;
    while (at < gr->n && gr->v[at] != pos) at++;
    if (at == gr->n || g < 1) return -1;
    int first = at - (int)(at % g);
    for (int64_t k = 0; members && k < g; k++) members[k] = member_at(p, coord, gr->v[first + k]);
    return at - first;
  }
  for (int64_t k = 0; members && k < g; k++) members[k] = member_at(p, coord, k);
  return pos;
}

static int check_axis(kl_rule_err *e, const char *op, const char *what, int64_t a, int ndim) {
  if (a < 0 || a >= ndim)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: %s %lld is out of range for an operand of rank %d", op, what,
                        (long long)a, ndim);
  return 0;
}

int kl_infer_collective(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                        int *nout) {
  (void)nout;
  const char *op = kl_prim_get(prim)->name;
  const kl_ivec *ms = &p->collective.mesh_shape, *ax = &p->collective.axes;
  char b1[160];
  if (ms->n < 1 || ms->n > KL_MAX_RANK) return kl_rule_fail(e, KL_ERR_VALUE, "%s: a mesh has 1 to %d axes", op, KL_MAX_RANK);
  for (int i = 0; i < ms->n; i++)
    if (ms->v[i] < 1) return kl_rule_fail(e, KL_ERR_VALUE, "%s: mesh extents must be positive", op);
  for (int i = 0; i < ax->n; i++)
    if (ax->v[i] < 0 || ax->v[i] >= ms->n || (i && ax->v[i] <= ax->v[i - 1]))
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: axes %s must be increasing mesh axes of a mesh of %d axes", op,
                          kl_rule_vec_str(ax, b1, sizeof b1), ms->n);
  const kl_ivec *gr = &p->collective.groups;
  if (gr->n) {
    int64_t a = axes_size(p), gs = p->collective.group_size;
    if (prim == KL_P_AXIS_INDEX || prim == KL_P_PPERMUTE) /* (pvary keeps them for its transpose) */
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: takes no axis_index_groups", op);
    if (gr->n != a || gs < 1 || a % gs)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: axis_index_groups must be groups of one size covering the %lld positions "
                          "along the axes, got %d entries in groups of %lld", op, (long long)a, gr->n, (long long)gs);
    for (int i = 0; i < gr->n; i++) {
      if (gr->v[i] < 0 || gr->v[i] >= a)
        return kl_rule_fail(e, KL_ERR_VALUE, "%s: axis_index_groups entry %lld is out of range for %lld positions", op,
                            (long long)gr->v[i], (long long)a);
      for (int j = 0; j < i; j++)
        if (gr->v[j] == gr->v[i])
          return kl_rule_fail(e, KL_ERR_VALUE, "%s: axis_index_groups names position %lld twice", op, (long long)gr->v[i]);
    }
  } else if (p->collective.group_size)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: group_size without axis_index_groups", op);
  int64_t g = kl_collective_group_size(p);
  if (prim == KL_P_AXIS_INDEX) {
    if (nin) return kl_rule_fail(e, KL_ERR_VALUE, "axis_index: takes no operands");
    memset(outs, 0, sizeof *outs);
    outs[0].dtype = KL_I32;
    return 0;
  }
  if (nin != 1) return kl_rule_fail(e, KL_ERR_VALUE, "%s: expects one operand, got %d", op, nin);
  const kl_aval *x = &ins[0];
  if (kl_rule_check_accepts(e, prim, x)) return -1;
  kl_aval y = *x;
  int64_t a = p->collective.axis;
  switch (prim) {
  case KL_P_ALL_GATHER:
    if (p->collective.tiled) {
      if (check_axis(e, op, "axis", a, x->ndim)) return -1;
      y.dims[a] *= g;
    } else {
      if (check_axis(e, op, "axis", a, x->ndim + 1) || kl_rule_check_rank(e, op, x->ndim + 1)) return -1;
      memmove(y.dims + a + 1, y.dims + a, sizeof(int64_t) * (size_t)(x->ndim - a));
      y.dims[a] = g;
      y.ndim++;
    }
    break;
  case KL_P_REDUCE_SCATTER:
    if (check_axis(e, op, "scatter_dimension", a, x->ndim)) return -1;
    if (p->collective.tiled ? x->dims[a] % g : x->dims[a] != g)
      return kl_rule_fail(e, KL_ERR_VALUE, "psum_scatter: the operand %s's dimension %lld (%lld) must %s the group size %lld",
                          kl_rule_shape_str(x, b1, sizeof b1), (long long)a, (long long)x->dims[a],
                          p->collective.tiled ? "be a multiple of" : "equal (tiled=False)", (long long)g);
    if (p->collective.tiled) y.dims[a] /= g;
    else {
      memmove(y.dims + a, y.dims + a + 1, sizeof(int64_t) * (size_t)(x->ndim - a - 1));
      y.ndim--;
    }
    break;
  case KL_P_ALL_TO_ALL: {
    int64_t c = p->collective.concat_axis;
    if (check_axis(e, op, "split_axis", a, x->ndim) || check_axis(e, op, "concat_axis", c, x->ndim)) return -1;
    if (x->dims[a] % g)
      return kl_rule_fail(e, KL_ERR_VALUE, "all_to_all: the operand %s's split_axis %lld (%lld) must be a multiple of the "
                          "group size %lld", kl_rule_shape_str(x, b1, sizeof b1), (long long)a, (long long)x->dims[a],
                          (long long)g);
    y.dims[a] /= g;
    y.dims[c] *= g;
    break;
  }
  case KL_P_PPERMUTE: {
    const kl_ivec *pm = &p->collective.perm;
    if (pm->n % 2) return kl_rule_fail(e, KL_ERR_VALUE, "ppermute: perm must be (source, destination) pairs");
    for (int i = 0; i < pm->n; i++) {
      if (pm->v[i] < 0 || pm->v[i] >= g)
        return kl_rule_fail(e, KL_ERR_VALUE, "ppermute: perm entry %lld is out of range for a group of %lld",
                            (long long)pm->v[i], (long long)g);
      for (int j = i % 2; j < i; j += 2)
        if (pm->v[j] == pm->v[i])
          return kl_rule_fail(e, KL_ERR_VALUE, "ppermute: perm names %s %lld twice", i % 2 ? "destination" : "source",
                              (long long)pm->v[i]);
    }
    break;
  }
  default: break; /* psum pmax pmin pvary: the operand's type */
  }
  y.weak = x->weak;
  outs[0] = y;
  return 0;
}
