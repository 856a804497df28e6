/* vmap.c: batching of a Program (kiln.vmap). Each value of the source program is either
 * batched (it differs per example) or not; a batched value always carries the batch dimension
 * at axis 0, so every batching rule (transforms/rules/<family>.c, found with kl_rule_get) only has
 * to shift its primitive's axis parameters by one and bring unbatched operands up to the batch
 * where the primitive needs matching shapes. Depends only on ir/ and transforms/. */
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "batch_build.h"
#include "rules/rules.h"

int kl_batch_unsupported(kl_build *b, const kl_eqn *e) {
  return kl_build_fail(b, KL_ERR_UNSUPPORTED, "vmap of %s is not supported yet", kl_prim_get(e->prim)->name);
}

/* ---- the pass ---- */

kl_program *kl_vmap(const kl_program *pg, const int *in_axes, int64_t size, char *out_batched, char *err,
                    size_t errlen) {
  kl_build b = {.pg = kl_program_new(), .err = err, .errlen = errlen, .who = "vmap: ", .size = size};
  int *vmap_of = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  char *batched = kl_calloc((size_t)pg->nvals + 1, 1);
  int cap = 16, *xs = kl_malloc(sizeof(int) * (size_t)cap), *outs = kl_malloc(sizeof(int) * ((size_t)pg->noutputs + 1));
  char *bs = kl_malloc((size_t)cap);
  if (!b.pg || !vmap_of || !batched || !xs || !bs || !outs) {
    kl_program_free(b.pg);
    free(vmap_of);
    free(batched);
    free(xs);
    free(bs);
    free(outs);
    kl_error(err, errlen, KL_ERR_NOMEM, "vmap: out of memory");
    return NULL;
  }
  if (size < 0) kl_build_fail(&b, KL_ERR_VALUE, "vmap: negative batch size %lld", (long long)size);
  for (int i = 0; i < pg->ninputs && !b.failed; i++) {
    kl_aval a = pg->vals[pg->inputs[i]].aval;
    int ax = in_axes[i];
    if (ax >= 0) {
      if (ax > a.ndim) {
        kl_build_fail(&b, KL_ERR_VALUE, "vmap: in_axes entry %d is out of range for input %d of rank %d", ax, i, a.ndim);
        break;
      }
      if (a.ndim + 1 > KL_MAX_RANK) {
        kl_build_fail(&b, KL_ERR_VALUE, "vmap: batching a rank-%d input exceeds kiln's maximum rank %d", a.ndim, KL_MAX_RANK);
        break;
      }
      memmove(a.dims + ax + 1, a.dims + ax, sizeof(int64_t) * (size_t)(a.ndim - ax));
      a.dims[ax] = size;
      a.ndim++;
      batched[pg->inputs[i]] = 1;
    }
    vmap_of[pg->inputs[i]] = kl_program_add_input(b.pg, &a);
  }
  /* the batch axis of every batched input goes to the front, once all inputs exist */
  for (int i = 0; i < pg->ninputs && !b.failed; i++)
    if (in_axes[i] > 0) vmap_of[pg->inputs[i]] = kl_batch_move_axis(&b, vmap_of[pg->inputs[i]], in_axes[i], 0);
  for (int k = 0; k < pg->neqns && !b.failed; k++) {
    const kl_eqn *e = &pg->eqns[k];
    if (e->nin > cap) {
      int *xs2 = kl_realloc(xs, sizeof(int) * (size_t)e->nin);
      if (xs2) xs = xs2;
      char *bs2 = xs2 ? kl_realloc(bs, (size_t)e->nin) : NULL;
      if (bs2) bs = bs2;
      if (!xs2 || !bs2) {
        kl_build_oom(&b);
        break;
      }
      cap = e->nin;
    }
    int any = 0, ys[KL_MAX_OUTS];
    char ob[KL_MAX_OUTS];
    memset(ob, 1, sizeof ob);
    for (int i = 0; i < e->nin; i++) {
      xs[i] = vmap_of[e->ins[i]];
      bs[i] = batched[e->ins[i]];
      any |= bs[i];
    }
    if (!any) { /* the same for every example: copied as it is */
      if (kl_build_emit(&b, e->prim, xs, e->nin, &e->p, ys) < 0) break;
    } else {
      rule_args r = {.e = e, .src = pg, .xs = xs, .bs = bs, .ys = ys, .ob = ob};
      kl_batch_rule rule = kl_rule_get(e->prim)->batch;
      if (rule ? rule(&b, &r) : kl_batch_unsupported(&b, e)) break;
    }
    for (int i = 0; i < e->nout; i++) {
      vmap_of[e->outs[i]] = ys[i];
      batched[e->outs[i]] = (char)(any && ob[i]);
    }
  }
  free(xs);
  free(bs);
  if (!b.failed) {
    for (int i = 0; i < pg->noutputs; i++) {
      outs[i] = vmap_of[pg->outputs[i]];
      out_batched[i] = batched[pg->outputs[i]];
    }
    kl_program_set_outputs(b.pg, outs, pg->noutputs);
    if (b.pg->oom) kl_build_oom(&b);
  }
  free(outs);
  free(vmap_of);
  free(batched);
  if (b.failed) {
    kl_program_free(b.pg);
    return NULL;
  }
  return b.pg;
}
