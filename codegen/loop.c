/* loop.c: the while equation as a step. Its condition and body programs (already through the
 * pass pipeline, which runs inside bodies) are compiled for the CPU; the step runs them in turn
 * on the host until the condition is false, the carries in two sets of buffers that trade places
 * each iteration. On a GPU the step is a host step over copies of its operands (kl_step.on_host),
 * named by KILN_LOG_COMPILES like every other. Depends on ir/, runtime/ and codegen's compile
 * drivers (compile.h, mlirctx.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "../ir/status.h"
#include "../runtime/runtime.h"
#include "compile.h"
#include "mlirctx.h"
#include "loop.h"

struct kl_loop {
  kl_exec *cond, *body;
  int nc, nb, n;  /* operands: cond consts, body consts, carries */
  size_t *bytes;  /* per carry */
};

void kl_loop_free(kl_loop *l) {
  if (!l) return;
  if (l->cond) kl_exec_release(l->cond);
  if (l->body) kl_exec_release(l->body);
  free(l->bytes);
  free(l);
}

/* ptrs: cond consts, body consts, initial carries, then the final carries (outputs). */
static int loop_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_loop *l = ctx;
  int n = l->n, rc = 0;
  void **base = kl_calloc((size_t)(3 * n + l->nc + l->nb + 2), sizeof(void *));
  if (!base) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a while loop");
  void **cur = base, **nxt = base + n, **args = base + 2 * n; /* args: the current carries, then consts */
  for (int i = 0; i < n && !rc; i++) {
    cur[i] = kl_malloc(l->bytes[i] ? l->bytes[i] : 1);
    nxt[i] = kl_malloc(l->bytes[i] ? l->bytes[i] : 1);
    if (!cur[i] || !nxt[i]) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory for a while loop's carries");
    else memcpy(cur[i], ptrs[l->nc + l->nb + i], l->bytes[i]);
  }
  while (!rc) {
    unsigned char go = 0;
    void *pred = &go;
    memcpy(args, cur, sizeof(void *) * (size_t)n); /* the programs take (carries, consts) */
    memcpy(args + n, ptrs, sizeof(void *) * (size_t)l->nc);
    if ((rc = kl_cpu_exec_run(l->cond, args, &pred, err, errlen)) || !go) break;
    memcpy(args + n, ptrs + l->nc, sizeof(void *) * (size_t)l->nb);
    if ((rc = kl_cpu_exec_run(l->body, args, nxt, err, errlen))) break;
    void **t = cur; /* the new carries become the current ones */
    cur = nxt;
    nxt = t;
  }
  for (int i = 0; i < n; i++) {
    if (!rc) memcpy(ptrs[l->nc + l->nb + n + i], cur[i], l->bytes[i]);
    free(cur[i]);
    free(nxt[i]);
  }
  free(base);
  return rc;
}

int kl_compile_loop_step(const kl_program *pg, const kl_eqn *e, const int *slot_of, kl_step *st, kl_loop **out,
                         char *err, size_t errlen) {
  const kl_params *p = &e->p;
  kl_loop *l = kl_calloc(1, sizeof *l);
  int *slots = kl_malloc(sizeof(int) * (size_t)(e->nin + e->nout + 1));
  *out = NULL;
  if (!l || !slots || !(l->bytes = kl_calloc((size_t)e->nout + 1, sizeof(size_t)))) {
    kl_loop_free(l);
    free(slots);
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling a while loop");
  }
  l->nc = (int)p->while_.counts.v[0];
  l->nb = (int)p->while_.counts.v[1];
  l->n = (int)p->while_.counts.v[2];
  for (int i = 0; i < e->nout; i++)
    l->bytes[i] = kl_dtype_size(pg->vals[e->outs[i]].aval.dtype) * (size_t)kl_aval_size(&pg->vals[e->outs[i]].aval);
  if (!(l->cond = kl_compile_cpu(p->while_.cond, err, errlen)) || !(l->body = kl_compile_cpu(p->while_.body, err, errlen))) {
    kl_loop_free(l);
    free(slots);
    return -1;
  }
  kl_host_step(e, slot_of, slots, l, loop_run, st);
  *out = l;
  return 0;
}
