/* dot_layout.c: puts every dot_general in the form a GEMM library takes, for code generation.
 * BLAS and cuBLAS multiply (batch, m, k) by (batch, k, n) matrices stored row-major, either
 * operand possibly transposed (k before m, n before k); a product whose batch dimensions are not
 * leading, whose contracting dimensions sit between free ones, or whose operands have another
 * dtype than its result (preferred_element_type) does not fit. This pass gives such an operand a
 * transpose (and a convert) equation of its own, which fusion then computes in a kernel together
 * with the operand's producer, and renumbers the product's dimensions to match: the product
 * itself then runs on the library, on the device, with no host copy. The result's layout never
 * changes (dot_general's output is batch, lhs free, rhs free in any case).
 * Depends only on ir/ and transforms/. */
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "build.h"
#include "fuse.h"

/* True when permuting a's dims by perm leaves the bytes in place (the dims of size > 1 keep
 * their relative order; size-1 dims may move). */
static int in_place(const int64_t *perm, const kl_aval *a) {
  int64_t last = -1;
  for (int i = 0; i < a->ndim; i++) {
    if (a->dims[perm[i]] == 1) continue;
    if (perm[i] < last) return 0;
    last = perm[i];
  }
  return 1;
}

/* The order batch, then the free dims (ascending), then the contracting dims, each list in its
 * own order; contract_first puts the contracting dims before the free ones. */
static void gemm_order(const kl_aval *a, const kl_ivec *batch, const kl_ivec *contract, int contract_first, int64_t *perm) {
  char used[KL_MAX_RANK] = {0};
  int k = 0;
  for (int i = 0; i < batch->n; i++) perm[k++] = batch->v[i], used[batch->v[i]] = 1;
  for (int i = 0; i < contract->n; i++) used[contract->v[i]] = 1;
  if (contract_first)
    for (int i = 0; i < contract->n; i++) perm[k++] = contract->v[i];
  for (int d = 0; d < a->ndim; d++)
    if (!used[d]) perm[k++] = d;
  if (!contract_first)
    for (int i = 0; i < contract->n; i++) perm[k++] = contract->v[i];
}

/* Whether operand a (batch and contracting dims as given) is stored as a GEMM operand: its
 * canonical order (lhs: free then contracting; rhs: contracting then free) or the transposed one
 * leaves the bytes where they are. */
static int fits(const kl_aval *a, const kl_ivec *batch, const kl_ivec *contract, int rhs) {
  int64_t perm[KL_MAX_RANK];
  gemm_order(a, batch, contract, rhs, perm);
  if (in_place(perm, a)) return 1;
  gemm_order(a, batch, contract, !rhs, perm);
  return in_place(perm, a);
}

static int needs_layout(const kl_program *pg, const kl_eqn *e) {
  if (e->prim != KL_P_DOT_GENERAL) return 0;
  const kl_aval *l = &pg->vals[e->ins[0]].aval, *r = &pg->vals[e->ins[1]].aval;
  kl_dtype t = pg->vals[e->outs[0]].aval.dtype;
  const kl_params *p = &e->p;
  return l->dtype != t || r->dtype != t || !fits(l, &p->dot.lhs_batch, &p->dot.lhs_contracting, 0) ||
         !fits(r, &p->dot.rhs_batch, &p->dot.rhs_contracting, 1);
}

/* One operand of e in GEMM form: converted to t, and transposed to batch, free, contracting (lhs)
 * or batch, contracting, free (rhs) when it does not fit; *batch and *contract get the dims'
 * new numbers (in the arrays given). Returns the new value, or -1 once the builder failed. */
static int legal_operand(kl_build *b, int x, kl_dtype t, kl_ivec *batch, kl_ivec *contract, int rhs, int64_t *nb,
                         int64_t *nc) {
  x = kl_build_convert(b, x, t);
  if (x < 0) return -1;
  kl_aval a = *kl_build_aval(b, x);
  if (fits(&a, batch, contract, rhs)) return x;
  /* of the two orders a GEMM takes, the one keeping the last axis last when there is one: the
   * transpose then moves rows, reading and writing memory in order */
  int64_t perm[KL_MAX_RANK];
  int contract_first = rhs;
  gemm_order(&a, batch, contract, contract_first, perm);
  if (a.ndim && perm[a.ndim - 1] != a.ndim - 1) {
    int64_t alt[KL_MAX_RANK];
    gemm_order(&a, batch, contract, !contract_first, alt);
    if (alt[a.ndim - 1] == a.ndim - 1) memcpy(perm, alt, sizeof perm), contract_first = !contract_first;
  }
  int nfree = a.ndim - batch->n - contract->n;
  for (int i = 0; i < batch->n; i++) nb[i] = i;
  for (int i = 0; i < contract->n; i++) nc[i] = batch->n + (contract_first ? 0 : nfree) + i;
  batch->v = nb;
  contract->v = nc;
  return kl_build_transpose(b, x, perm, a.ndim);
}

int kl_dot_layout(kl_program *pg, char *err, size_t errlen) {
  int any = 0;
  for (int k = 0; k < pg->neqns && !any; k++) any = needs_layout(pg, &pg->eqns[k]);
  if (!any) return 0;
  kl_program *np = kl_program_new();
  int *map = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  int *outs = kl_malloc(sizeof(int) * ((size_t)pg->noutputs + 1));
  int *ins = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  kl_build b = {.pg = np, .err = err, .errlen = errlen, .who = "dot_layout: "};
  int rc = 0;
  if (!np || !map || !outs || !ins) {
    rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass dot_layout");
    goto done;
  }
  for (int i = 0; i < pg->ninputs; i++) map[pg->inputs[i]] = kl_program_add_input(np, &pg->vals[pg->inputs[i]].aval);
  for (int k = 0; k < pg->neqns && !rc; k++) {
    const kl_eqn *e = &pg->eqns[k];
    for (int i = 0; i < e->nin; i++) ins[i] = map[e->ins[i]];
    int o[KL_MAX_OUTS], no;
    if (needs_layout(pg, e)) {
      kl_params p = e->p;
      kl_dtype t = pg->vals[e->outs[0]].aval.dtype;
      int64_t lb[KL_MAX_RANK], lc[KL_MAX_RANK], rb[KL_MAX_RANK], rcn[KL_MAX_RANK];
      ins[0] = legal_operand(&b, ins[0], t, &p.dot.lhs_batch, &p.dot.lhs_contracting, 0, lb, lc);
      ins[1] = legal_operand(&b, ins[1], t, &p.dot.rhs_batch, &p.dot.rhs_contracting, 1, rb, rcn);
      if (ins[0] < 0 || ins[1] < 0) rc = -1;
      else rc = kl_program_add_eqn(np, e->prim, ins, 2, &p, o, &no, err, errlen); /* copies the new dims */
    } else {
      rc = kl_program_add_eqn(np, e->prim, ins, e->nin, &e->p, o, &no, err, errlen);
    }
    for (int i = 0; !rc && i < e->nout; i++) map[e->outs[i]] = o[i];
  }
  if (!rc) {
    for (int i = 0; i < pg->noutputs; i++) outs[i] = map[pg->outputs[i]];
    kl_program_set_outputs(np, outs, pg->noutputs);
    if (np->oom) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass dot_layout");
  }
  if (!rc) { /* pg keeps its address and references; np takes the old program away */
    kl_program tmp = *pg;
    *pg = *np;
    *np = tmp;
    np->refcount = pg->refcount;
    pg->refcount = tmp.refcount;
  }
done:
  free(ins);
  free(outs);
  free(map);
  kl_program_free(np);
  return rc;
}
