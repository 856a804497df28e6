/* combine.c: where collectives go. The hoist pass moves each up to just after its operands'
 * last producer, and the equations waiting for a collective's result down past the work that
 * needs none (kl_hoist_collectives, fuse.h). The combine pass (KILN_COMBINE_COLLECTIVES=1, an
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
  int *ins = kl_malloc(sizeof(int) * ((size_t)kl_program_max_operands(pg) + 1));
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

/* An equation's place in the hoisted order, compared field by field: after equation `anchor` (-1:
 * the program's start); then, among the equations that moved up to it, by the collective they
 * lead to (`serve`: its index; -1 for the anchor itself, which comes first); then in the original
 * order k; a collective takes its latest producer's place with after = 1 + its own index, so
 * that it comes right after that producer. */
typedef struct {
  int anchor, serve, k, after, eqn;
} place;

static int cmp_int(int a, int b) { return (a > b) - (a < b); }

static int place_cmp(const void *a, const void *b) {
  const place *x = a, *y = b;
  return x->anchor != y->anchor ? cmp_int(x->anchor, y->anchor)
         : x->serve != y->serve ? cmp_int(x->serve, y->serve)
         : x->k != y->k         ? cmp_int(x->k, y->k)
                                : cmp_int(x->after, y->after);
}

static int is_collective(const kl_eqn *e) { return kl_prim_get(e->prim)->family == KL_FAM_COLLECTIVE; }

#define LEAD_MAX 16 /* equations a collective's operand leads up with it, at most */

/* serve[k] = 1 + the first collective (in program order) that equation k moves up with, or 0:
 * back from a collective's operands through elementwise, shape and reduction equations, up to and
 * including the first contraction (a weight gradient's matmul and what scales or sums it), a few
 * at most, never past another collective. Computed as soon as their operands allow, a backward
 * pass's weight gradient and its all-reduce come before an activation gradient that another,
 * later collective waits for, and the all-reduce overlaps it. */
static void mark_leads(const kl_program *pg, int *serve) {
  int stack[LEAD_MAX];
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *c = &pg->eqns[k];
    if (!is_collective(c)) continue;
    int top = 0, taken = 0;
    for (int i = 0; i < c->nin && top < LEAD_MAX; i++) stack[top++] = pg->vals[c->ins[i]].producer;
    while (top > 0 && taken < LEAD_MAX) {
      int p = stack[--top];
      if (p < 0 || serve[p] || is_collective(&pg->eqns[p])) continue;
      const kl_eqn *e = &pg->eqns[p];
      kl_family f = kl_prim_get(e->prim)->family;
      if (f != KL_FAM_ELEMENTWISE && f != KL_FAM_SHAPE && f != KL_FAM_REDUCE && f != KL_FAM_DOT) continue;
      serve[p] = 1 + k;
      taken++;
      if (f == KL_FAM_DOT) continue; /* the contraction ends the lead */
      for (int i = 0; i < e->nin && top < LEAD_MAX; i++) stack[top++] = pg->vals[e->ins[i]].producer;
    }
  }
}

/* The places: an equation that moves up (serve) or a collective goes just after the latest of
 * its operands' producers' places (producers moved up too); any other stays where it is. */
static void places(const kl_program *pg, const int *serve, place *at) {
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    int coll = is_collective(e);
    at[k] = (place){k, -1, k, 0, k};
    if (!coll && !(serve && serve[k])) continue;
    place last = {-1, -1, -1, 0, -1};
    for (int i = 0; i < e->nin; i++) {
      int p = pg->vals[e->ins[i]].producer;
      if (p >= 0 && p < k && place_cmp(&at[p], &last) > 0) last = at[p];
    }
    if (coll) at[k] = (place){last.anchor, last.serve, last.k, 1 + k, k};
    else at[k] = (place){last.anchor, last.serve > serve[k] - 1 ? last.serve : serve[k] - 1, k, 0, k};
  }
}

/* The order qsort gives `at`; 0, or -1 where an equation would come before a producer of its
 * operands (then nothing is changed; by construction it does not happen). */
static int reorder(kl_program *pg, place *at, kl_eqn *eqns, int *pos) {
  int n = pg->neqns;
  qsort(at, (size_t)n, sizeof *at, place_cmp);
  for (int k = 0; k < n; k++) pos[at[k].eqn] = k;
  for (int k = 0; k < n; k++) {
    const kl_eqn *e = &pg->eqns[at[k].eqn];
    for (int i = 0; i < e->nin; i++) {
      int p = pg->vals[e->ins[i]].producer;
      if (p >= 0 && pos[p] >= k) return -1;
    }
  }
  for (int k = 0; k < n; k++) eqns[k] = pg->eqns[at[k].eqn];
  memcpy(pg->eqns, eqns, sizeof(kl_eqn) * (size_t)n);
  for (int k = 0; k < n; k++)
    for (int i = 0; i < pg->eqns[k].nout; i++) pg->vals[pg->eqns[k].outs[i]].producer = k;
  return 0;
}

/* The waits sink: keyed by the latest collective it depends on (its index in the hoisted order;
 * -1 for none), each equation moves after every equation of a lower key, the order otherwise kept.
 * Work that needs no collective's result comes before work that waits for one, and what waits for
 * a later collective after what waits for an earlier one: a data-parallel step's last all-reduce
 * then overlaps the updates of the parameters whose gradients arrived before it, instead of
 * blocking them. A dependency never has a higher key than its reader (a collective's readers have
 * at least its index, above its own key), so the sorted order is a valid one; effects keep their
 * order (each has at least the key of the effect before it). */
static void sink_waits(const kl_program *pg, place *at) {
  int last_effect = -1;
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    int key = -1;
    for (int i = 0; i < e->nin; i++) {
      int p = pg->vals[e->ins[i]].producer;
      if (p < 0 || p >= k) continue;
      if (at[p].anchor > key) key = at[p].anchor;
      if (kl_collective_communicates(pg->eqns[p].prim) && p > key) key = p;
    }
    if (kl_eqn_has_effect(e)) {
      if (last_effect > key) key = last_effect;
      last_effect = key;
    }
    at[k] = (place){key, -1, k, 0, k};
  }
}

int kl_hoist_collectives(kl_program *pg, char *err, size_t errlen) {
  int n = pg->neqns, any = 0;
  for (int k = 0; k < n; k++) any |= is_collective(&pg->eqns[k]);
  if (!any) return 0;
  place *at = kl_malloc(sizeof(place) * ((size_t)n + 1));
  kl_eqn *eqns = kl_malloc(sizeof(kl_eqn) * ((size_t)n + 1));
  int *pos = kl_malloc(sizeof(int) * ((size_t)n + 1));
  int *serve = kl_calloc((size_t)n + 1, sizeof(int));
  if (!at || !eqns || !pos || !serve) {
    free(at), free(eqns), free(pos), free(serve);
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass hoist");
  }
  const char *knob = getenv("KILN_HOIST_LEADS"); /* an A/B switch: 0 moves the collectives alone */
  if (!(knob && *knob == '0')) mark_leads(pg, serve);
  places(pg, serve, at);
  if (reorder(pg, at, eqns, pos)) {
    places(pg, NULL, at);
    reorder(pg, at, eqns, pos);
  }
  const char *sink = getenv("KILN_SINK_WAITS"); /* an A/B switch: 0 leaves the readers in place */
  if (!(sink && *sink == '0')) {
    sink_waits(pg, at);
    reorder(pg, at, eqns, pos); /* valid by construction; on -1 nothing changes */
  }
  free(at), free(eqns), free(pos), free(serve);
  return 0;
}
