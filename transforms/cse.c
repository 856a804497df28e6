/* cse.c: common-subexpression elimination. Two equations with the same primitive, params and
 * operands compute the same values (every primitive is pure), so later uses of the second one's
 * results are redirected to the first's. Runs before DCE, which then drops the duplicates. */
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "fuse.h"

static uint64_t mix(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

static uint64_t eqn_hash(const kl_eqn *e) {
  uint64_t h = 0xcbf29ce484222325ULL;
  h = mix(h, &e->prim, sizeof e->prim);
  h = mix(h, e->ins, sizeof(int) * (size_t)e->nin);
  return kl_params_hash(h, e->prim, &e->p);
}

static int eqn_same(const kl_eqn *a, const kl_eqn *b) {
  if (a->prim != b->prim || a->nin != b->nin || a->nout != b->nout) return 0;
  if (memcmp(a->ins, b->ins, sizeof(int) * (size_t)a->nin)) return 0;
  return kl_params_equal(a->prim, &a->p, &b->p);
}

void kl_cse(kl_program *pg) {
  int *repl = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  size_t cap = 16;
  while (cap < (size_t)pg->neqns * 2) cap *= 2;
  int *table = kl_malloc(sizeof(int) * cap); /* equation index, or -1 */
  if (!repl || !table) { /* out of memory: nothing changed; the pipeline reports pg->oom */
    pg->oom = 1;
    free(repl);
    free(table);
    return;
  }
  for (int v = 0; v < pg->nvals; v++) repl[v] = v;
  for (size_t i = 0; i < cap; i++) table[i] = -1;
  for (int k = 0; k < pg->neqns; k++) {
    kl_eqn *e = &pg->eqns[k];
    for (int i = 0; i < e->nin; i++) e->ins[i] = repl[e->ins[i]];
    if (kl_eqn_has_effect(e)) continue; /* each call of an effect happens */
    size_t slot = (size_t)eqn_hash(e) & (cap - 1);
    while (table[slot] >= 0 && !eqn_same(&pg->eqns[table[slot]], e)) slot = (slot + 1) & (cap - 1);
    if (table[slot] < 0) table[slot] = k;
    else {
      const kl_eqn *first = &pg->eqns[table[slot]];
      for (int i = 0; i < e->nout; i++) repl[e->outs[i]] = first->outs[i];
    }
  }
  for (int i = 0; i < pg->noutputs; i++) pg->outputs[i] = repl[pg->outputs[i]];
  free(repl);
  free(table);
}
