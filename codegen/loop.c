/* loop.c: the control family's equations (while, scan, cond) as steps. Their bodies (already through
 * the pass pipeline, which runs inside bodies) are compiled for the step's device as executables
 * of their own; the step runs them from the host over device memory: a while step runs its
 * condition and body in turn until the condition is false (one read of the predicate per
 * iteration), a scan step runs its body `length` times on slices of its xs, writing its ys'
 * slices in place (no read at all), a cond step reads its predicate and runs the branch it names.
 * The carries live in two sets of buffers that trade places
 * each iteration. On a GPU the bodies' kernels are queued on kiln's stream: the data never
 * leaves the device. Depends on ir/, runtime/ and codegen's compile drivers (compile.h,
 * mlirctx.h); the device's own calls come in a kl_loop_target. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "../ir/status.h"
#include "../runtime/runtime.h"
#include "compile.h"
#include "loop.h"
#include "mlirctx.h"

struct kl_loop {
  const kl_loop_target *t;
  kl_exec *cond, *body; /* while: its condition and body; scan: body alone; cond: false, true branch */
  int nc, nb, n;        /* operands: while: cond consts, body consts, carries; scan: consts, carries, xs;
                           cond (after the predicate): false consts, true consts, operands */
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

/* Two sets of n carry buffers (set[0], set[1]), device memory; 0 or -1 with a message. */
static int carry_sets(const kl_loop *l, int n, void **set[2], char *err, size_t errlen) {
  for (int i = 0; i < n; i++)
    for (int k = 0; k < 2; k++)
      if (l->t->alloc(l->bytes[i] ? l->bytes[i] : 1, &set[k][i], err, errlen)) return -1;
  return 0;
}

static void free_sets(const kl_loop *l, int n, void **set[2]) {
  for (int i = 0; i < n; i++)
    for (int k = 0; k < 2; k++)
      if (set[k][i]) l->t->free(set[k][i], l->bytes[i] ? l->bytes[i] : 1);
}

/* ptrs: cond consts, body consts, initial carries, then the final carries (outputs). */
static int while_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_loop *l = ctx;
  int n = l->n, rc = 0, cur = 0;
  void **base = kl_calloc((size_t)(3 * n + l->nc + l->nb + 2), sizeof(void *)), *pred = NULL;
  if (!base) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a while loop");
  void **set[2] = {base, base + n}, **args = base + 2 * n; /* args: the current carries, then consts */
  rc = carry_sets(l, n, set, err, errlen);
  if (!rc) rc = l->t->alloc(1, &pred, err, errlen);
  for (int i = 0; i < n && !rc; i++) rc = l->t->copy(set[0][i], ptrs[l->nc + l->nb + i], l->bytes[i], err, errlen);
  while (!rc) {
    unsigned char go = 0;
    memcpy(args, set[cur], sizeof(void *) * (size_t)n); /* the programs take (carries, consts) */
    memcpy(args + n, ptrs, sizeof(void *) * (size_t)l->nc);
    if ((rc = l->t->run(l->cond, args, &pred, err, errlen)) || (rc = l->t->read(&go, pred, 1, err, errlen)) || !go) break;
    memcpy(args + n, ptrs + l->nc, sizeof(void *) * (size_t)l->nb);
    if ((rc = l->t->run(l->body, args, set[!cur], err, errlen))) break;
    cur = !cur; /* the new carries become the current ones */
  }
  for (int i = 0; i < n && !rc; i++) rc = l->t->copy(ptrs[l->nc + l->nb + n + i], set[cur][i], l->bytes[i], err, errlen);
  free_sets(l, n, set);
  if (pred) l->t->free(pred, 1);
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
  if (l->length > 1) rc = carry_sets(l, n, set, err, errlen); /* one iteration goes from init to final */
  memcpy(args, ptrs, sizeof(void *) * (size_t)nk);
  for (int64_t it = 0; it < l->length && !rc; it++) {
    int64_t t = l->reverse ? l->length - 1 - it : it;
    memcpy(args + nk, it ? set[(it - 1) & 1] : init, sizeof(void *) * (size_t)n);
    for (int j = 0; j < nx; j++) args[nk + n + j] = (char *)xs[j] + (size_t)t * l->xbytes[j];
    memcpy(outs, it == l->length - 1 ? final : set[it & 1], sizeof(void *) * (size_t)n);
    for (int j = 0; j < ny; j++) outs[n + j] = (char *)ys[j] + (size_t)t * l->bytes[n + j];
    rc = l->t->run(l->body, args, outs, err, errlen);
  }
  for (int i = 0; i < n && !rc && l->length == 0; i++) rc = l->t->copy(final[i], init[i], l->bytes[i], err, errlen);
  free_sets(l, n, set);
  free(base);
  return rc;
}

/* ptrs: the predicate, false consts, true consts, operands, then the results. The predicate is
 * read (one wait on a GPU), then the branch it names runs on (operands, its consts). */
static int cond_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_loop *l = ctx;
  int nf = l->nc, nt = l->nb, no = l->n, rc;
  unsigned char which = 0;
  if ((rc = l->t->read(&which, ptrs[0], 1, err, errlen))) return rc;
  void **args = kl_calloc((size_t)(no + nf + nt) + 1, sizeof(void *));
  if (!args) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a cond");
  memcpy(args, ptrs + 1 + nf + nt, sizeof(void *) * (size_t)no);
  if (which) memcpy(args + no, ptrs + 1 + nf, sizeof(void *) * (size_t)nt);
  else memcpy(args + no, ptrs + 1, sizeof(void *) * (size_t)nf);
  rc = l->t->run(which ? l->body : l->cond, args, ptrs + 1 + nf + nt + no, err, errlen);
  free(args);
  return rc;
}

static size_t aval_bytes(const kl_aval *a) { return kl_dtype_size(a->dtype) * (size_t)kl_aval_size(a); }

int kl_compile_loop_step(const kl_program *pg, const kl_eqn *e, const int *slot_of, const kl_loop_target *t, kl_step *st,
                         kl_loop **out, char *err, size_t errlen) {
  const kl_params *p = &e->p;
  kl_loop *l = kl_calloc(1, sizeof *l);
  int *slots = kl_malloc(sizeof(int) * (size_t)(e->nin + e->nout + 1));
  *out = NULL;
  if (!l || !slots || !(l->bytes = kl_calloc((size_t)e->nout + 1, sizeof(size_t))) ||
      !(l->xbytes = kl_calloc((size_t)e->nin + 1, sizeof(size_t)))) {
    kl_loop_free(l);
    free(slots);
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling a loop");
  }
  l->t = t;
  for (int i = 0; i < e->nout; i++) l->bytes[i] = aval_bytes(&pg->vals[e->outs[i]].aval);
  if (e->prim == KL_P_SCAN) {
    l->nc = (int)p->scan.counts.v[0];
    l->nb = (int)p->scan.counts.v[1];
    l->n = (int)p->scan.counts.v[2];
    l->ny = e->nout - l->nb;
    l->length = p->scan.length;
    l->reverse = p->scan.reverse;
    for (int j = 0; j < l->ny && l->length; j++) l->bytes[l->nb + j] /= (size_t)l->length;
    for (int j = 0; j < l->n && l->length; j++) l->xbytes[j] = aval_bytes(&pg->vals[e->ins[l->nc + l->nb + j]].aval) / (size_t)l->length;
  } else if (e->prim == KL_P_COND) {
    l->nc = (int)p->cond.counts.v[0];
    l->nb = (int)p->cond.counts.v[1];
    l->n = (int)p->cond.counts.v[2];
  } else {
    l->nc = (int)p->while_.counts.v[0];
    l->nb = (int)p->while_.counts.v[1];
    l->n = (int)p->while_.counts.v[2];
  }
  kl_program *first = e->prim == KL_P_WHILE ? p->while_.cond : e->prim == KL_P_COND ? p->cond.false_branch : NULL;
  kl_program *second = e->prim == KL_P_SCAN ? p->scan.body : e->prim == KL_P_COND ? p->cond.true_branch : p->while_.body;
  if ((first && !(l->cond = t->compile(first, err, errlen))) || !(l->body = t->compile(second, err, errlen))) {
    kl_loop_free(l);
    free(slots);
    return -1;
  }
  kl_host_step(e, slot_of, slots, l, e->prim == KL_P_SCAN ? scan_run : e->prim == KL_P_COND ? cond_run : while_run, st);
  *out = l;
  return 0;
}

/* ---- the CPU's target ---- */

static int cpu_alloc(size_t n, void **p, char *err, size_t errlen) {
  *p = kl_malloc(n);
  return *p ? 0 : kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory for a loop's carries (%zu bytes)", n);
}

static void cpu_free(void *p, size_t n) {
  (void)n;
  free(p);
}

static int cpu_copy(void *dst, const void *src, size_t n, char *err, size_t errlen) {
  (void)err, (void)errlen;
  memcpy(dst, src, n);
  return 0;
}

const kl_loop_target kl_loop_cpu = {kl_compile_cpu, kl_cpu_exec_run, cpu_alloc, cpu_free, cpu_copy, cpu_copy};
