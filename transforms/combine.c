/* combine.c: where collectives go. The hoist pass moves each up to just after its operands'
 * last producer (kl_hoist_collectives, fuse.h). The combine pass (KILN_COMBINE_COLLECTIVES=1, an
 * experiment; off by default) joins psums of one dtype over the same mesh axes whose results are
 * first read after the last of them: one psum of their operands flattened and joined, its result
 * sliced back, at the last one's place (a data-parallel step's gradient psums: one NCCL all-reduce, or one
 * rendezvous of simulated devices, instead of one each). Depends only on ir/ and transforms/. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "ad.h"
#include "build.h"
#include "fuse.h"

/* Whether psum equations a and b may join: same dtype, same collective params. */
static int joinable(const kl_program *pg, const kl_eqn *a, const kl_eqn *b) {
  return pg->vals[a->ins[0]].aval.dtype == pg->vals[b->ins[0]].aval.dtype && kl_params_equal(KL_P_PSUM, &a->p, &b->p);
}

int kl_combine_collectives(kl_program *pg, char *err, size_t errlen) {
  const char *env = getenv("KILN_COMBINE_COLLECTIVES");
  if (!env || *env != '1') return 0;
  int n = pg->neqns, rc = 0, groups = 0;
  int *first_use = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1)), *group = kl_malloc(sizeof(int) * ((size_t)n + 1));
  int *at = kl_malloc(sizeof(int) * ((size_t)n + 1)); /* per equation: the group combined there, or -1 */
  if (!first_use || !group || !at) {
    free(first_use), free(group), free(at);
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass combine");
  }
  for (int v = 0; v < pg->nvals; v++) first_use[v] = INT_MAX;
  for (int i = 0; i < pg->noutputs; i++) first_use[pg->outputs[i]] = n;
  for (int k = n - 1; k >= 0; k--)
    for (int i = 0; i < pg->eqns[k].nin; i++) first_use[pg->eqns[k].ins[i]] = k;
  for (int k = 0; k < n; k++) group[k] = -1, at[k] = -1;
  /* greedy groups: each ungrouped psum with later joinable ones; a member stays only while its
   * result is first read after the group's last member */
  for (int k = 0; k < n; k++) {
    const kl_eqn *e = &pg->eqns[k];
    if (e->prim != KL_P_PSUM || group[k] >= 0 || e->nin != 1 || kl_aval_size(&pg->vals[e->ins[0]].aval) == 0) continue;
    int members[256], m = 0;
    for (int j = k; j < n && m < 256; j++) {
      const kl_eqn *f = &pg->eqns[j];
      if (f->prim == KL_P_PSUM && group[j] < 0 && f->nin == 1 && kl_aval_size(&pg->vals[f->ins[0]].aval) > 0 &&
          joinable(pg, e, f))
        members[m++] = j;
    }
    for (int changed = 1; changed && m > 1;) { /* drop members read before the last one runs */
      changed = 0;
      int last = members[m - 1], keep = 0;
      for (int i = 0; i < m; i++)
        if (members[i] == last || first_use[pg->eqns[members[i]].outs[0]] > last) members[keep++] = members[i];
        else changed = 1;
      m = keep;
    }
    if (m < 2) continue;
    for (int i = 0; i < m; i++) group[members[i]] = groups;
    at[members[m - 1]] = groups++;
  }
  if (!groups) goto out;
  kl_program *np = kl_program_new();
  int *map = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1)), *outs = kl_malloc(sizeof(int) * ((size_t)pg->noutputs + 1));
  int *ins = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  kl_build b = {.pg = np, .err = err, .errlen = errlen, .who = "combine: "};
  if (!np || !map || !outs || !ins) {
    rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass combine");
    goto done;
  }
  for (int i = 0; i < pg->ninputs; i++) map[pg->inputs[i]] = kl_program_add_input(np, &pg->vals[pg->inputs[i]].aval);
  for (int k = 0; k < n && !rc; k++) {
    const kl_eqn *e = &pg->eqns[k];
    if (group[k] >= 0 && at[k] < 0) continue; /* joins the group's psum at its last member */
    if (at[k] >= 0) {
      int g = at[k], parts[256], np_ = 0;
      int64_t sizes[256];
      for (int j = 0; j <= k; j++)
        if (group[j] == g) {
          const kl_aval *a = &pg->vals[pg->eqns[j].ins[0]].aval;
          sizes[np_] = kl_aval_size(a);
          parts[np_] = kl_build_reshape(&b, map[pg->eqns[j].ins[0]], &sizes[np_], 1);
          np_++;
        }
      kl_params cp;
      kl_params_init(&cp, KL_P_CONCATENATE);
      cp.concatenate.dimension = 0;
      int joined = kl_build_op(&b, KL_P_CONCATENATE, parts, np_, &cp);
      int summed = kl_build_op(&b, KL_P_PSUM, &joined, 1, &e->p);
      int64_t off = 0, q = 0;
      for (int j = 0; j <= k; j++)
        if (group[j] == g) {
          const kl_aval *o = &pg->vals[pg->eqns[j].outs[0]].aval;
          int piece = kl_ad_slice_axis(&b, summed, 0, off, off + sizes[q]);
          map[pg->eqns[j].outs[0]] = kl_build_reshape(&b, piece, o->dims, o->ndim);
          off += sizes[q++];
        }
      if (np->oom || summed < 0) rc = -1;
      continue;
    }
    int o[KL_MAX_OUTS], no = 0;
    for (int i = 0; i < e->nin; i++) ins[i] = map[e->ins[i]];
    rc = kl_program_add_eqn(np, e->prim, ins, e->nin, &e->p, o, &no, err, errlen);
    for (int i = 0; !rc && i < e->nout; i++) map[e->outs[i]] = o[i];
  }
  if (!rc) {
    for (int i = 0; i < pg->noutputs; i++) outs[i] = map[pg->outputs[i]];
    kl_program_set_outputs(np, outs, pg->noutputs);
    if (np->oom) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass combine");
  }
  if (!rc) kl_program_swap(pg, np);
done:
  free(map);
  free(outs);
  free(ins);
  kl_program_free(np);
out:
  free(first_use);
  free(group);
  free(at);
  return rc;
}

/* An equation's place in the hoisted order: after equation `anchor` (-1: the program's start),
 * collectives after the equation itself, then in their original order. */
typedef struct {
  int anchor, coll, k;
} place;

static int place_cmp(const void *a, const void *b) {
  const place *x = a, *y = b;
  return x->anchor != y->anchor ? (x->anchor > y->anchor) - (x->anchor < y->anchor)
         : x->coll != y->coll   ? x->coll - y->coll
                                : (x->k > y->k) - (x->k < y->k);
}

int kl_hoist_collectives(kl_program *pg, char *err, size_t errlen) {
  int n = pg->neqns, any = 0;
  for (int k = 0; k < n; k++) any |= kl_prim_get(pg->eqns[k].prim)->family == KL_FAM_COLLECTIVE;
  if (!any) return 0;
  place *at = kl_malloc(sizeof(place) * ((size_t)n + 1));
  kl_eqn *eqns = kl_malloc(sizeof(kl_eqn) * ((size_t)n + 1));
  if (!at || !eqns) {
    free(at), free(eqns);
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass hoist");
  }
  /* a collective's anchor: the latest anchor of its operands' producers (a collective's producer
   * moved up too); any other equation is its own */
  for (int k = 0; k < n; k++) {
    const kl_eqn *e = &pg->eqns[k];
    at[k] = (place){k, 0, k};
    if (kl_prim_get(e->prim)->family != KL_FAM_COLLECTIVE) continue;
    at[k] = (place){-1, 1, k};
    for (int i = 0; i < e->nin; i++) {
      int p = pg->vals[e->ins[i]].producer;
      if (p >= 0 && p < k && at[p].anchor > at[k].anchor) at[k].anchor = at[p].anchor;
    }
  }
  qsort(at, (size_t)n, sizeof *at, place_cmp);
  for (int k = 0; k < n; k++) eqns[k] = pg->eqns[at[k].k];
  memcpy(pg->eqns, eqns, sizeof(kl_eqn) * (size_t)n);
  for (int k = 0; k < n; k++)
    for (int i = 0; i < pg->eqns[k].nout; i++) pg->vals[pg->eqns[k].outs[i]].producer = k;
  free(at), free(eqns);
  return 0;
}
