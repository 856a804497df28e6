/* loop.c: the control family's equations (while, scan) as steps. Their bodies (already through
 * the pass pipeline, which runs inside bodies) are compiled for the CPU; a while step runs its
 * condition and body in turn on the host until the condition is false, a scan step runs its body
 * `length` times on slices of its xs, writing its ys' slices in place; the carries live in two
 * sets of buffers that trade places each iteration. On a GPU the step is a host step over copies of its operands (kl_step.on_host),
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
  kl_exec *cond, *body; /* cond: NULL for a scan */
  int nc, nb, n;        /* while operands: cond consts, body consts, carries; scan: consts, carries, xs */
  int ny;               /* scan: the stacked ys */
  int64_t length;       /* scan: iterations */
  int reverse;          /* scan: from the last slice */
  size_t *bytes;        /* per result: a carry's bytes; a y's bytes per slice (scan) */
  size_t *xbytes;       /* scan: per x, its bytes per slice */
};

void kl_loop_free(kl_loop *l) {
  if (!l) return;
  if (l->cond) kl_exec_release(l->cond);
  if (l->body) kl_exec_release(l->body);
  free(l->bytes);
  free(l->xbytes);
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

/* ptrs: consts, initial carries, xs, then the final carries and the ys (outputs). Iteration i
 * reads the carries of i - 1 (the initial ones first) and writes the next set; the last writes
 * the final carries. */
static int scan_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_loop *l = ctx;
  int nk = l->nc, n = l->nb, nx = l->n, ny = l->ny, rc = 0;
  void **base = kl_calloc((size_t)(2 * (nk + n + nx + n + ny) + 2 * n + 2), sizeof(void *));
  if (!base) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a scan");
  void **args = base, **outs = args + nk + n + nx, **set[2] = {outs + n + ny, outs + n + ny + n};
  void **init = ptrs + nk, **xs = init + n, **final = xs + nx, **ys = final + n;
  for (int i = 0; i < n && !rc; i++)
    for (int k = 0; k < 2 && !rc; k++)
      if (!(set[k][i] = kl_malloc(l->bytes[i] ? l->bytes[i] : 1)))
        rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory for a scan's carries");
  memcpy(args, ptrs, sizeof(void *) * (size_t)nk);
  for (int64_t it = 0; it < l->length && !rc; it++) {
    int64_t t = l->reverse ? l->length - 1 - it : it;
    memcpy(args + nk, it ? set[(it - 1) & 1] : init, sizeof(void *) * (size_t)n);
    for (int j = 0; j < nx; j++) args[nk + n + j] = (char *)xs[j] + (size_t)t * l->xbytes[j];
    memcpy(outs, it == l->length - 1 ? final : set[it & 1], sizeof(void *) * (size_t)n);
    for (int j = 0; j < ny; j++) outs[n + j] = (char *)ys[j] + (size_t)t * l->bytes[n + j];
    rc = kl_cpu_exec_run(l->body, args, outs, err, errlen);
  }
  for (int i = 0; i < n; i++) {
    if (!rc && l->length == 0) memcpy(final[i], init[i], l->bytes[i]);
    free(set[0][i]);
    free(set[1][i]);
  }
  free(base);
  return rc;
}

static size_t aval_bytes(const kl_aval *a) { return kl_dtype_size(a->dtype) * (size_t)kl_aval_size(a); }

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
  for (int i = 0; i < e->nout; i++) l->bytes[i] = aval_bytes(&pg->vals[e->outs[i]].aval);
  if (e->prim == KL_P_SCAN) {
    l->nc = (int)p->scan.counts.v[0];
    l->nb = (int)p->scan.counts.v[1];
    l->n = (int)p->scan.counts.v[2];
    l->ny = e->nout - l->nb;
    l->length = p->scan.length;
    l->reverse = p->scan.reverse;
    for (int j = 0; j < l->ny; j++) l->bytes[l->nb + j] = l->length ? l->bytes[l->nb + j] / (size_t)l->length : 0;
    if (!(l->xbytes = kl_calloc((size_t)l->n + 1, sizeof(size_t)))) {
      kl_loop_free(l);
      free(slots);
      return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling a scan");
    }
    for (int j = 0; j < l->n; j++)
      l->xbytes[j] = l->length ? aval_bytes(&pg->vals[e->ins[l->nc + l->nb + j]].aval) / (size_t)l->length : 0;
  } else {
    l->nc = (int)p->while_.counts.v[0];
    l->nb = (int)p->while_.counts.v[1];
    l->n = (int)p->while_.counts.v[2];
  }
  if ((e->prim == KL_P_WHILE && !(l->cond = kl_compile_cpu(p->while_.cond, err, errlen))) ||
      !(l->body = kl_compile_cpu(e->prim == KL_P_SCAN ? p->scan.body : p->while_.body, err, errlen))) {
    kl_loop_free(l);
    free(slots);
    return -1;
  }
  kl_host_step(e, slot_of, slots, l, e->prim == KL_P_SCAN ? scan_run : loop_run, st);
  *out = l;
  return 0;
}
