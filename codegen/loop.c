/* loop.c: the control family's equations (while, scan, cond) as steps. Their bodies (already through
 * the pass pipeline, which runs inside bodies) are compiled for the step's device as executables
 * of their own and bound to memory once per set of carries; the carries live in two sets of
 * buffers that trade places each iteration (one buffer for a carry updated in place or passed
 * through). From the host: a while step runs its condition and body in turn until the condition
 * is false (one read of the predicate per iteration), a scan step runs its body `length` times on
 * slices of its xs, writing its ys' slices in place (no read at all), a cond step reads its
 * predicate and runs the branch it names. Where the target can, the loop runs without the host
 * per trip: the CPU compiles a while or scan whole (t->compile_loop, loop_cpu.c), the GPU runs a
 * while loop as a graph with a device-side loop node (t->while_graph, over memory the loop keeps).
 * On a GPU the bodies' kernels are queued on kiln's stream: the data never leaves the device.
 * Depends on ir/, runtime/ and codegen's compile drivers (compile.h, mlirctx.h); the device's own
 * calls come in a kl_loop_target. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "../ir/loc.h"
#include "lower/lower.h"
#include "../ir/status.h"
#include "../runtime/runtime.h"
#include "compile.h"
#include "loop.h"
#include "mlirctx.h"

struct kl_loop {
  const kl_loop_target *t;
  kl_prim prim;         /* while, scan, cond or while_bwd */
  kl_exec *cond, *body; /* while: its condition and body; scan: body alone; cond: false, true branch;
                           while_bwd: the body's VJP, the body */
  int nc, nb, n;        /* operands: while: cond consts, body consts, carries; scan: consts, carries, xs;
                           cond (after the predicate): false consts, true consts, operands;
                           while_bwd: body consts, carries, float carries (cotangents) */
  int ny;               /* scan: the stacked ys; while_bwd: float consts (cotangents) */
  int64_t length;       /* scan: iterations */
  int reverse;          /* scan: from the last slice */
  size_t *bytes;        /* per result: a carry's bytes; a y's bytes per slice (scan) */
  size_t *xbytes;       /* scan: per x, its bytes per slice; while_bwd: per carry, its bytes */
  char *alias;          /* while, scan: per carry, updated in place (see in_place) */
  void *driver;         /* the loop compiled whole (t->compile_loop), or NULL */
  kl_loop_slices sl;    /* scan: its slices, for the driver */
  struct dev_while *dw; /* while: run on the device (t->while_graph), or NULL */
  struct dev_scan *ds;  /* scan: may run on the device (t->scan_move), or NULL */
  struct bound_body *branch[2]; /* cond: each branch bound at its first run, pointed at each run's memory */
  pthread_mutex_t branch_mu;    /* cond: one run at a time uses them (another binds its own) */
  char keep[2];                 /* cond: whether a branch's binding is kept (small temporaries) */
  int if_node;                  /* cond: in a captured graph, conditional nodes (kernels, library calls and such
                                   conds alone in the branches) */
  int if_depth;                 /* cond with if_node: 1 + the deepest such cond in its branches */
  struct prepared *prep;        /* cond: branches bound before a device loop's capture, per set of pointers */
  int nprep;
  struct scan_keep *sk;         /* scan compiled whole on the CPU: what runs keep, or NULL */
  pthread_mutex_t sk_mu;        /* one run at a time uses it (another allocates its own) */
};

/* What a scan keeps from run to run (small ones, compiled whole, on the CPU: a scan nested in
 * another loop runs once per outer trip): its carry buffers (those not updated in place or
 * passed through), staging buffers and bindings, retargeted at each run's memory. */
typedef struct scan_keep {
  void **set[2];             /* per carry, two buffers (NULL: the run's result buffer) */
  void **stage;              /* per x, then per y: a staging buffer, or NULL */
  struct bound_body *bound[3][3];
  int ready;
} scan_keep;
#define SCAN_KEEP_MAX_BYTES ((size_t)4 << 20)
#define SCAN_WHOLE_MAX_SLICES 64 /* xs and ys of a scan compiled whole */

static void dev_while_free(kl_loop *l);
static void dev_scan_free(kl_loop *l);

static int prepare_conds(const kl_loop_target *t, const struct bound_body *b, char *err, size_t errlen);
static int is_cond_step(const kl_step *st);

/* A cond's two branches bound for one set of the step's pointers, ahead of the capture of a
 * device loop's body (no memory can be allocated inside a conditional node's body graph). */
typedef struct prepared {
  void **key; /* the step's pointers */
  struct bound_body *b[2];
  void **plan; /* a CPU loop driver's plan for them (kl_loop_cond_kept), or NULL */
} prepared;
typedef struct bound_body bound_body;
static void body_unbind(bound_body *b);
#define LOOP_GUESSED_TRIPS 65536 /* a while loop's cost, in trips of its body, for scheduling: its trips are unknown, so it is taken to be long and runs on the executor thread, never inline in the caller (which holds the GIL: Ctrl-C and other threads would wait for it) */
#define KL_LOOP_KERNEL_COPIES 8 /* copies the GPU's trip-ending kernel makes (KL_CUDA_WHILE_COPIES) */
#define KL_LOOP_SCAN_SLICES 8   /* x or y slices the GPU's slice movers take (KL_CUDA_SCAN_SLICES) */
#define KL_LOOP_IF_DEPTH 16     /* conds nested as conditional nodes, at most (KL_CUDA_IF_DEPTH) */

void kl_loop_free(kl_loop *l) {
  if (!l) return;
  dev_while_free(l);
  dev_scan_free(l);
  if (l->prim == KL_P_COND) {
    body_unbind(l->branch[0]);
    body_unbind(l->branch[1]);
    for (int i = 0; i < l->nprep; i++) {
      body_unbind(l->prep[i].b[0]);
      body_unbind(l->prep[i].b[1]);
      free(l->prep[i].key);
      free(l->prep[i].plan);
    }
    free(l->prep);
    pthread_mutex_destroy(&l->branch_mu);
  }
  if (l->sk) {
    scan_keep *k = l->sk;
    for (int r = 0; r < 9; r++) body_unbind(k->bound[r / 3][r % 3]);
    for (int i = 0; k->set[0] && i < l->nb; i++)
      for (int j = 0; j < 2; j++)
        if (k->set[j][i]) l->t->free(k->set[j][i], l->bytes[i] ? l->bytes[i] : 1);
    for (int j = 0; k->stage && j < l->n + l->ny; j++)
      if (k->stage[j]) l->t->free(k->stage[j], j < l->n ? l->xbytes[j] : l->bytes[l->nb + j - l->n]);
    free(k->set[0]);
    free(k);
    pthread_mutex_destroy(&l->sk_mu);
  }
  if (l->cond) kl_exec_release(l->cond);
  if (l->body) kl_exec_release(l->body);
  free(l->bytes);
  free(l->xbytes);
  free(l->alias);
  free(l);
}

/* Whether the body updates carry j in place (1): its output is made by a dynamic_update_slice or
 * scatter of its input, and every other read of the input is one that update depends on (so it
 * runs before the update writes): the output may then be written into the input's buffer (the
 * update writes only what changes); or passes it through unchanged (2). Such a carry lives in
 * one buffer, the loop's result, instead of two that trade places:
 * `fori_loop(0, n, lambda i, z: z.at[i].set(v), z)` copies nothing per iteration, nor does a
 * loop that carries a weight matrix along. */
static int in_place(const kl_program *body, int in_at, int out_at) {
  int v = body->inputs[in_at], o = body->outputs[out_at], prod = body->vals[o].producer, ok = 1;
  if (o == v) return 2; /* passed through: the carry never changes, one buffer holds it */
  if (prod < 0) return 0;
  const kl_eqn *e = &body->eqns[prod];
  if (!kl_lower_get(e->prim)->updates || e->ins[0] != v) return 0;
  for (int i = 0; i < body->noutputs; i++) ok &= body->outputs[i] != v; /* the old value must not outlive it */
  char *before = kl_calloc((size_t)body->neqns + 1, 1); /* the update's ancestors */
  int *stack = kl_malloc(sizeof(int) * ((size_t)body->neqns + 1)), top = 0;
  if (!before || !stack) {
    free(before);
    free(stack);
    return 0;
  }
  stack[top++] = prod;
  while (top) {
    const kl_eqn *q = &body->eqns[stack[--top]];
    for (int i = q == e ? 1 : 0; i < q->nin; i++) {
      int p = body->vals[q->ins[i]].producer;
      if (p >= 0 && !before[p]) before[p] = 1, stack[top++] = p;
    }
  }
  for (int k = 0; k < body->neqns && ok; k++) {
    if (k == prod) {
      for (int i = 1; i < e->nin; i++) ok &= e->ins[i] != v;
      continue;
    }
    for (int i = 0; i < body->eqns[k].nin; i++) ok &= body->eqns[k].ins[i] != v || before[k];
  }
  free(before);
  free(stack);
  return ok;
}

/* The copy log's part for a loop (ir/loc.h): each of the user's updates in its bodies that does
 * not write into its operand's buffer. A while's or scan's update of a carry is in place when
 * the loop keeps that carry in one buffer (alias 1: the body's result for the carry is that
 * update of the carry's input); any other copies once per trip. A cond branch's updates of its
 * operands copy (a branch's results are new buffers). 0, or -1 with a message when forbidden. */
static int report_copies(const kl_loop *l, char *err, size_t errlen) {
  if (!kl_copies_mode()) return 0;
  int cond = l->prim == KL_P_COND, scan = l->prim == KL_P_SCAN;
  for (int k = 0; k < 2; k++) {
    const kl_exec *x = k ? l->body : l->cond;
    if (!x || (!k && !cond)) continue; /* a while's condition computes no carry */
    for (int i = 0; i < x->nupdates; i++) {
      const kl_update *u = &x->updates[i];
      if (u->in_place) continue;
      int carry = -1, why = u->why; /* the carry whose input it updates */
      if (!cond && l->prim != KL_P_WHILE_BWD && u->operand_input >= 0) {
        int c = scan ? u->operand_input - l->nc : u->operand_input, nb = scan ? l->nb : l->n;
        carry = c >= 0 && c < nb ? c : -1;
        why = carry >= 0 ? KL_COPY_CARRY : KL_COPY_LOOP_INPUT;
      } else if (u->operand_input >= 0) why = cond ? KL_COPY_BRANCH : KL_COPY_LOOP_INPUT;
      if (carry >= 0 && u->output == carry && l->alias[carry] == 1) continue;
      if (kl_copy_report(u->loc, u->prim, u->type, u->bytes, (kl_copy_why)why, !cond, err, errlen)) return -1;
    }
  }
  return 0;
}

int kl_loop_carry_init(const kl_eqn *e, int j) {
  const kl_params *p = &e->p;
  if (e->prim == KL_P_SCAN) {
    int nc = (int)p->scan.counts.v[0], nb = (int)p->scan.counts.v[1];
    return j < nb && in_place(p->scan.body, nc + j, j) ? nc + j : -1;
  }
  if (e->prim == KL_P_WHILE) {
    int nc = (int)p->while_.counts.v[0] + (int)p->while_.counts.v[1], n = (int)p->while_.counts.v[2];
    return j < n && in_place(p->while_.body, j, j) ? nc + j : -1;
  }
  return -1;
}

/* Two sets of n carry buffers (set[0], set[1]), device memory, but for the carries updated in
 * place: `result`'s buffer in both. 0 or -1 with a message. */
static int carry_sets(const kl_loop *l, int n, void **set[2], void **result, char *err, size_t errlen) {
  for (int i = 0; i < n; i++)
    for (int k = 0; k < 2; k++) {
      if (l->alias[i]) set[k][i] = result[i];
      else if (l->t->alloc(l->bytes[i] ? l->bytes[i] : 1, &set[k][i], err, errlen)) return -1;
    }
  return 0;
}

static void free_sets(const kl_loop *l, int n, void **set[2]) {
  for (int i = 0; i < n; i++)
    for (int k = 0; k < 2; k++)
      if (set[k][i] && !l->alias[i]) l->t->free(set[k][i], l->bytes[i] ? l->bytes[i] : 1);
}

/* A body bound to memory for many runs: the target's own binding where it has one (the CPU's:
 * pointers fixed, temporaries allocated once), else the arguments kept for its run(). */
struct bound_body {
  const kl_loop_target *t;
  kl_exec *x;
  void *native;     /* t->bind's, or NULL */
  void **in, **out; /* without a native binding */
};

static void body_unbind(bound_body *b) {
  if (!b) return;
  if (b->native) b->t->unbind(b->native);
  free(b->in);
  free(b);
}

static bound_body *body_bind(const kl_loop_target *t, kl_exec *x, void *const *in, void *const *out, char *err,
                             size_t errlen) {
  bound_body *b = kl_calloc(1, sizeof *b);
  if (!b) {
    kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory binding a loop body");
    return NULL;
  }
  b->t = t;
  b->x = x;
  if (t->bind) {
    if (!(b->native = t->bind(x, in, out, err, errlen))) {
      body_unbind(b);
      return NULL;
    }
    return b;
  }
  if (!(b->in = kl_malloc(sizeof(void *) * ((size_t)(x->ninputs + x->noutputs) + 1)))) {
    body_unbind(b);
    kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory binding a loop body");
    return NULL;
  }
  b->out = b->in + x->ninputs;
  memcpy(b->in, in, sizeof(void *) * (size_t)x->ninputs);
  memcpy(b->out, out, sizeof(void *) * (size_t)x->noutputs);
  return b;
}

static int body_run(const bound_body *b, char *err, size_t errlen) {
  return b->native ? b->t->bound_run(b->native, err, errlen) : b->t->run(b->x, b->in, b->out, err, errlen);
}

#define DEV_WHILE_MAX_BYTES ((size_t)256 << 20)
#define DEV_WHILE_UNROLL 4
#define DEV_WHILE_UNROLL_MAX_COST (1 << 18) /* elements the body and condition touch */
#define DEV_WHILE_UNROLL_TINY 4096         /* below: twice the trips per pass */
#define DEV_WHILE_UNALIAS_BYTES ((size_t)1 << 20) /* in-place carries given second buffers to unroll */

/* The carries of a loop run on the device (a while loop's, a scan's) and the graph of its trips:
 * read from a, written to b, b copied back into a by each trip's last kernel; one buffer for a
 * carry passed through, or updated in place (unless the loop is small: then second buffers, so
 * that its trips can unroll: a pass of the loop node costs more than the copy). */
typedef struct {
  int n;        /* carries */
  int64_t cost; /* elements a trip touches */
  int unalias;  /* in-place carries get second buffers */
  void **a, **b;
  void **cdst, **csrc; /* the copies of b into a, the device's kernel's first */
  size_t *cbytes;
  int ncopies;
  void *flags; /* unrolled passes: two bytes, whether the loop is done (zeroed per run) */
  void *graph;
} dev_carries;

static void carries_plan(const kl_loop *l, int n, int64_t cost, dev_carries *c) {
  c->n = n;
  c->cost = cost;
  /* (never while the copy log is on: a carry updated in place then stays so on every trip) */
  c->unalias = cost < DEV_WHILE_UNROLL_MAX_COST && !getenv("KILN_GPU_WHILE_NO_UNROLL") && !kl_copies_mode();
  size_t inplace = 0;
  for (int i = 0, copies = 0; i < n; i++) {
    copies += l->bytes[i] && l->alias[i] != 2;
    inplace += l->alias[i] == 1 ? l->bytes[i] : 0;
    c->unalias &= copies <= KL_LOOP_KERNEL_COPIES && inplace <= DEV_WHILE_UNALIAS_BYTES;
  }
}

static int carries_shared(const kl_loop *l, const dev_carries *c, int i) {
  return l->alias[i] == 2 || (l->alias[i] && !c->unalias);
}

/* The device memory the carries take. */
static size_t carries_bytes(const kl_loop *l, const dev_carries *c) {
  size_t total = 0;
  for (int i = 0; i < c->n; i++) total += (carries_shared(l, c, i) ? 1 : 2) * l->bytes[i];
  return total;
}

static int carries_alloc(const kl_loop *l, dev_carries *c, char *err, size_t errlen) {
  int rc = (c->a = kl_calloc(2 * (size_t)c->n + 1, sizeof(void *))) ? 0 : kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory");
  if (!rc) c->b = c->a + c->n;
  for (int i = 0; i < c->n && !rc; i++) {
    rc = l->t->alloc(l->bytes[i] ? l->bytes[i] : 1, &c->a[i], err, errlen);
    if (!rc) {
      if (carries_shared(l, c, i)) c->b[i] = c->a[i];
      else rc = l->t->alloc(l->bytes[i] ? l->bytes[i] : 1, &c->b[i], err, errlen);
    }
  }
  return rc;
}

/* The copies of b into a, then the graph: trip(l) queued once per trip (unrolled: a small trip
 * whose carries all trade buffers runs DEV_WHILE_UNROLL trips per pass of the loop node, trips
 * after the loop is done computing into the second buffers and copying nothing), the loop going
 * on while the byte at pred is nonzero. 0, or -1 with a message. */
static int carries_graph(kl_loop *l, dev_carries *c, int (*trip)(void *, char *, size_t), void *pred, char *err,
                         size_t errlen) {
  const kl_loop_target *t = l->t;
  int n = c->n, rc = 0;
  if (!(c->cdst = kl_calloc(2 * (size_t)n + 1, sizeof(void *))) || !(c->cbytes = kl_calloc((size_t)n + 1, sizeof(size_t))))
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory");
  c->csrc = c->cdst + n;
  for (int i = 0; i < n; i++) {
    if (c->b[i] == c->a[i] || !l->bytes[i]) continue;
    c->cdst[c->ncopies] = c->a[i];
    c->csrc[c->ncopies] = c->b[i];
    c->cbytes[c->ncopies++] = l->bytes[i];
  }
  int unroll = 1;
  if (c->ncopies <= KL_LOOP_KERNEL_COPIES && c->cost < DEV_WHILE_UNROLL_MAX_COST && !getenv("KILN_GPU_WHILE_NO_UNROLL")) {
    unroll = c->cost < DEV_WHILE_UNROLL_TINY ? 2 * DEV_WHILE_UNROLL : DEV_WHILE_UNROLL;
    for (int i = 0; i < n; i++)
      if (l->bytes[i] && c->b[i] == c->a[i] && l->alias[i] == 1) unroll = 1; /* written in place: a trip after the stop would */
  }
  if (unroll > 1) rc = t->alloc(2, &c->flags, err, errlen);
  if (!rc) {
    int k = c->ncopies < KL_LOOP_KERNEL_COPIES ? c->ncopies : KL_LOOP_KERNEL_COPIES;
    if (!(c->graph = t->while_graph(trip, l, pred, k, c->cdst, c->csrc, c->cbytes, unroll, c->flags, err, errlen))) rc = -1;
  }
  return rc;
}

/* The copies a trip makes itself (beyond the trip-ending kernel's). */
static int carries_extra_copies(const kl_loop *l, const dev_carries *c, char *err, size_t errlen) {
  for (int k = KL_LOOP_KERNEL_COPIES; k < c->ncopies; k++)
    if (l->t->copy(c->cdst[k], c->csrc[k], c->cbytes[k], err, errlen)) return -1;
  return 0;
}

static void carries_free(const kl_loop *l, dev_carries *c) {
  if (c->graph) l->t->while_free(c->graph);
  for (int i = 0; c->a && i < c->n; i++) {
    if (c->a[i]) l->t->free(c->a[i], l->bytes[i] ? l->bytes[i] : 1);
    if (c->b[i] && c->b[i] != c->a[i]) l->t->free(c->b[i], l->bytes[i] ? l->bytes[i] : 1);
  }
  if (c->flags) l->t->free(c->flags, 2);
  free(c->a);
  free(c->cdst);
  free(c->cbytes);
  memset(c, 0, sizeof *c);
}

/* A while loop run on the device (t->while_graph: a graph whose loop node runs the body and the
 * condition until the condition is false, with no host in between): its own memory for the
 * carries (a; the body writes b, copied back into a, except the carries it updates in place),
 * copies of the consts, the predicate, the condition and body bound over them, and the graph.
 * Built at the first run; where it cannot be (a driver without conditional nodes, a body that
 * cannot be captured), the loop runs from the host for good. The memory stays with the
 * executable. */
typedef struct dev_while {
  int state; /* 0: not tried, 1: built, -1: the host runs the loop */
  dev_carries c;
  void **k; /* consts (cond's, then body's) */
  size_t *kbytes;
  void *pred;
  bound_body *cond, *cond_b, *body; /* the condition over a (the first check) and over b */
  pthread_mutex_t mu;               /* one run at a time over the loop's memory */
} dev_while;

static void dev_while_release(kl_loop *l) {
  dev_while *d = l->dw;
  carries_free(l, &d->c);
  body_unbind(d->cond);
  body_unbind(d->cond_b);
  body_unbind(d->body);
  d->cond = d->cond_b = d->body = NULL;
  for (int j = 0; d->k && j < l->nc + l->nb; j++)
    if (d->k[j]) l->t->free(d->k[j], d->kbytes[j] ? d->kbytes[j] : 1);
  if (d->pred) l->t->free(d->pred, 1);
  free(d->k);
  free(d->kbytes);
  d->k = NULL;
  d->kbytes = NULL;
  d->pred = NULL;
}

static void dev_while_free(kl_loop *l) {
  if (!l->dw) return;
  dev_while_release(l);
  pthread_mutex_destroy(&l->dw->mu);
  free(l->dw);
  l->dw = NULL;
}

/* A trip of the graph's loop: the body (a -> b), the condition over b, the copies of b into a
 * that the device's trip-ending kernel does not make. */
static int dev_while_body(void *ctx, char *err, size_t errlen) {
  const kl_loop *l = ctx;
  dev_while *d = l->dw;
  if (body_run(d->body, err, errlen) || body_run(d->cond_b, err, errlen)) return -1;
  return carries_extra_copies(l, &d->c, err, errlen);
}

static int dev_while_build(kl_loop *l) {
  dev_while *d = l->dw;
  const kl_loop_target *t = l->t;
  int n = l->n, nk = l->nc + l->nb, rc = 0;
  char err[256] = "out of host memory";
  d->k = kl_calloc((size_t)nk + 1, sizeof(void *));
  d->kbytes = kl_calloc((size_t)nk + 1, sizeof(size_t));
  void **args = kl_calloc((size_t)(n + nk) + 1, sizeof(void *));
  if (!d->k || !d->kbytes || !args) rc = -1;
  carries_plan(l, n, l->body->cost + l->cond->cost, &d->c);
  size_t total = carries_bytes(l, &d->c); /* the loop's own memory: at most DEV_WHILE_MAX_BYTES, else the host loops */
  for (int j = 0; j < nk && !rc; j++) { /* each const's bytes: the condition's, then the body's */
    const kl_exec *x = j < l->nc ? l->cond : l->body;
    total += d->kbytes[j] = x->slot_bytes[x->in_slots[n + (j < l->nc ? j : j - l->nc)]];
  }
  if (!rc && total > DEV_WHILE_MAX_BYTES) {
    snprintf(err, sizeof err, "its carries and consts (%zu bytes) are too large to copy", total);
    rc = -1;
  }
  if (!rc) rc = carries_alloc(l, &d->c, err, sizeof err);
  for (int j = 0; j < nk && !rc; j++) rc = t->alloc(d->kbytes[j] ? d->kbytes[j] : 1, &d->k[j], err, sizeof err);
  if (!rc) rc = t->alloc(1, &d->pred, err, sizeof err);
  if (!rc) {
    memcpy(args, d->c.a, sizeof(void *) * (size_t)n);
    memcpy(args + n, d->k, sizeof(void *) * (size_t)l->nc);
    if (!(d->cond = body_bind(t, l->cond, args, &d->pred, err, sizeof err))) rc = -1;
    memcpy(args, d->c.b, sizeof(void *) * (size_t)n);
    if (!rc && !(d->cond_b = body_bind(t, l->cond, args, &d->pred, err, sizeof err))) rc = -1;
    memcpy(args, d->c.a, sizeof(void *) * (size_t)n);
    memcpy(args + n, d->k + l->nc, sizeof(void *) * (size_t)l->nb);
    if (!rc && !(d->body = body_bind(t, l->body, args, d->c.b, err, sizeof err))) rc = -1;
    for (int k = 0; k < 3 && !rc; k++) rc = prepare_conds(t, k == 0 ? d->cond : k == 1 ? d->cond_b : d->body, err, sizeof err);
  }
  if (!rc) rc = carries_graph(l, &d->c, dev_while_body, d->pred, err, sizeof err);
  free(args);
  if (rc) {
    if (getenv("KILN_LOG_COMPILES")) fprintf(stderr, "kiln: a while loop runs from the host: %s\n", err);
    dev_while_release(l);
  }
  return rc;
}

/* ptrs as while_run's: the consts and initial carries copied in, the first check, the graph,
 * the final carries copied out, all in the device's order (nothing waits). 1 when it ran, 0 when
 * the loop must run from the host, -1 with a message. */
static int dev_while_run(const kl_loop *cl, void **ptrs, char *err, size_t errlen) {
  kl_loop *l = (kl_loop *)cl;
  dev_while *d = l->dw;
  const kl_loop_target *t = l->t;
  int n = l->n, nk = l->nc + l->nb, rc = 0;
  pthread_mutex_lock(&d->mu);
  if (!d->state) d->state = dev_while_build(l) ? -1 : 1;
  if (d->state < 0) {
    pthread_mutex_unlock(&d->mu);
    return 0;
  }
  for (int j = 0; j < nk && !rc; j++) rc = t->copy(d->k[j], ptrs[j], d->kbytes[j], err, errlen);
  for (int i = 0; i < n && !rc; i++) rc = t->copy(d->c.a[i], ptrs[nk + i], l->bytes[i], err, errlen);
  if (!rc) rc = body_run(d->cond, err, errlen);
  if (!rc && d->c.flags) rc = t->zero(d->c.flags, 2, err, errlen);
  if (!rc) rc = t->while_launch(d->c.graph, err, errlen);
  for (int i = 0; i < n && !rc; i++) rc = t->copy(ptrs[nk + n + i], d->c.a[i], l->bytes[i], err, errlen);
  pthread_mutex_unlock(&d->mu);
  return rc ? -1 : 1;
}

/* ptrs: cond consts, body consts, initial carries, then the final carries (outputs). The
 * condition and the body are bound once for each set of carries they read. */
static int while_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_loop *l = ctx;
  const kl_loop_target *t = l->t;
  if (l->dw) {
    int r = dev_while_run(l, ptrs, err, errlen);
    if (r) return r < 0 ? -1 : 0;
  }
  int n = l->n, rc = 0, cur = 0;
  void **base = kl_calloc((size_t)(3 * n + l->nc + l->nb + 2), sizeof(void *)), *pred = NULL;
  bound_body *bound[4] = {NULL, NULL, NULL, NULL}; /* per set of carries: the condition, the body */
  if (!base) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a while loop");
  void **set[2] = {base, base + n}, **args = base + 2 * n; /* args: the carries, then consts */
  rc = carry_sets(l, n, set, ptrs + l->nc + l->nb + n, err, errlen);
  if (!rc) rc = t->alloc(1, &pred, err, errlen);
  for (int i = 0; i < n && !rc; i++) /* (a carry kept in place may start in its initial value's buffer) */
    if (set[0][i] != ptrs[l->nc + l->nb + i]) rc = t->copy(set[0][i], ptrs[l->nc + l->nb + i], l->bytes[i], err, errlen);
  for (int p = 0; p < 2 && !rc; p++) { /* the programs take (carries, consts) */
    memcpy(args, set[p], sizeof(void *) * (size_t)n);
    memcpy(args + n, ptrs, sizeof(void *) * (size_t)l->nc);
    if (!(bound[2 * p] = body_bind(t, l->cond, args, &pred, err, errlen))) rc = -1;
    memcpy(args + n, ptrs + l->nc, sizeof(void *) * (size_t)l->nb);
    if (!rc && !(bound[2 * p + 1] = body_bind(t, l->body, args, set[!p], err, errlen))) rc = -1;
  }
  if (!rc && l->driver) {
    void *native[4];
    for (int k = 0; k < 4; k++) native[k] = bound[k]->native;
    rc = t->drive(l->driver, 0, l->cond, l->body, native, 0, NULL, 0, &cur, err, errlen);
  }
  while (!rc && !l->driver) {
    unsigned char go = 0;
    if ((rc = kl_rt_stop_check(err, errlen)) || (rc = body_run(bound[2 * cur], err, errlen)) || (rc = t->read(&go, pred, 1, err, errlen)) || !go) break;
    if ((rc = body_run(bound[2 * cur + 1], err, errlen))) break;
    cur = !cur; /* the new carries become the current ones */
  }
  for (int i = 0; i < n && !rc; i++)
    if (!l->alias[i]) rc = t->copy(ptrs[l->nc + l->nb + n + i], set[cur][i], l->bytes[i], err, errlen);
  for (int k = 0; k < 4; k++) body_unbind(bound[k]);
  free_sets(l, n, set);
  if (pred) t->free(pred, 1);
  free(base);
  return rc;
}

/* A scan run on the device (the GPU's, outside a captured graph: a scan too long for one, or in
 * a program that is not one): the same loop node as a while loop's, over memory the loop keeps
 * (carries a -> b, consts, a staging buffer per x and per y slice, the state: the trip counter,
 * the predicate byte, the stacked xs' and ys' addresses). A trip: a kernel moves slice t of each
 * x into its staging buffer, the body runs over the fixed buffers, a kernel moves each y's
 * staging buffer into slice t and advances the counter, the trip-ending kernel copies b into a
 * and sets the condition (t < length). No host work per trip. */
typedef struct dev_scan {
  int state; /* 0: not tried, 1: built, -1: the host runs the loop */
  dev_carries c;
  void **k, **st;         /* consts (nc), staging (nx, then ny) */
  size_t *kbytes, sbytes; /* consts' bytes; the state's */
  void *dstate;           /* device: counter (u64), predicate (byte 8), bases from byte 16 */
  uint64_t *host;         /* the state each run uploads */
  bound_body *body;
  pthread_mutex_t mu;
} dev_scan;

#define DEV_SCAN_MIN_TRIPS 64 /* shorter scans run from the host (a launch costs about as much) */

static void dev_scan_release(kl_loop *l) {
  dev_scan *d = l->ds;
  carries_free(l, &d->c);
  body_unbind(d->body);
  for (int j = 0; d->k && j < l->nc; j++)
    if (d->k[j]) l->t->free(d->k[j], d->kbytes[j] ? d->kbytes[j] : 1);
  for (int j = 0; d->st && j < l->n + l->ny; j++) {
    size_t b = j < l->n ? l->xbytes[j] : l->bytes[l->nb + j - l->n];
    if (d->st[j]) l->t->free(d->st[j], b ? b : 1);
  }
  if (d->dstate) l->t->free(d->dstate, d->sbytes);
  free(d->k);
  free(d->kbytes);
  free(d->host);
  d->k = d->st = NULL;
  d->kbytes = NULL;
  d->host = NULL;
  d->dstate = NULL;
  d->body = NULL; /* the state and the mutex stay */
}

static void dev_scan_free(kl_loop *l) {
  if (!l->ds) return;
  dev_scan_release(l);
  pthread_mutex_destroy(&l->ds->mu);
  free(l->ds);
  l->ds = NULL;
}

static int dev_scan_body(void *ctx, char *err, size_t errlen) {
  const kl_loop *l = ctx;
  dev_scan *d = l->ds;
  char *bases = (char *)d->dstate + 16;
  if (l->n && l->t->scan_move(0, d->dstate, l->length, l->reverse, bases, l->n, d->st, l->xbytes, err, errlen)) return -1;
  if (body_run(d->body, err, errlen)) return -1;
  if (l->t->scan_move(1, d->dstate, l->length, l->reverse, bases + 8 * l->n, l->ny, d->st + l->n, l->bytes + l->nb, err,
                      errlen))
    return -1;
  return carries_extra_copies(l, &d->c, err, errlen);
}

static int dev_scan_build(kl_loop *l) {
  dev_scan *d = l->ds;
  const kl_loop_target *t = l->t;
  int n = l->nb, nk = l->nc, ns = l->n + l->ny, rc = 0;
  char err[256] = "out of host memory";
  d->k = kl_calloc((size_t)nk + (size_t)ns + 1, sizeof(void *));
  d->kbytes = kl_calloc((size_t)nk + 1, sizeof(size_t));
  d->sbytes = 16 + 8 * (size_t)ns;
  d->host = kl_calloc(2 + (size_t)ns, sizeof(uint64_t));
  void **args = kl_calloc((size_t)(nk + 2 * n + ns) + 1, sizeof(void *)); /* consts, a, xs; then b, ys */
  if (!d->k || !d->kbytes || !d->host || !args) rc = -1;
  if (!rc) d->st = d->k + nk;
  carries_plan(l, n, l->body->cost, &d->c);
  size_t total = carries_bytes(l, &d->c);
  for (int j = 0; j < nk && !rc; j++) total += d->kbytes[j] = l->body->slot_bytes[l->body->in_slots[j]];
  for (int j = 0; j < ns && !rc; j++) total += j < l->n ? l->xbytes[j] : l->bytes[n + j - l->n];
  if (!rc && total > DEV_WHILE_MAX_BYTES) {
    snprintf(err, sizeof err, "its carries, consts and slices (%zu bytes) are too large to copy", total);
    rc = -1;
  }
  if (!rc) rc = carries_alloc(l, &d->c, err, sizeof err);
  for (int j = 0; j < nk && !rc; j++) rc = t->alloc(d->kbytes[j] ? d->kbytes[j] : 1, &d->k[j], err, sizeof err);
  for (int j = 0; j < ns && !rc; j++) {
    size_t b = j < l->n ? l->xbytes[j] : l->bytes[n + j - l->n];
    rc = t->alloc(b ? b : 1, &d->st[j], err, sizeof err);
  }
  if (!rc) rc = t->alloc(d->sbytes, &d->dstate, err, sizeof err);
  if (!rc) { /* the body over (consts, a, x staging) -> (b, y staging) */
    memcpy(args, d->k, sizeof(void *) * (size_t)nk);
    memcpy(args + nk, d->c.a, sizeof(void *) * (size_t)n);
    memcpy(args + nk + n, d->st, sizeof(void *) * (size_t)l->n);
    void **outs = args + nk + n + l->n;
    memcpy(outs, d->c.b, sizeof(void *) * (size_t)n);
    memcpy(outs + n, d->st + l->n, sizeof(void *) * (size_t)l->ny);
    void *small[64], **o = n + l->ny <= 64 ? small : kl_malloc(sizeof(void *) * (size_t)(n + l->ny + 1));
    if (!o) rc = -1;
    else {
      memcpy(o, outs, sizeof(void *) * (size_t)(n + l->ny));
      if (!(d->body = body_bind(t, l->body, args, o, err, sizeof err))) rc = -1;
      else rc = prepare_conds(t, d->body, err, sizeof err);
      if (o != small) free(o);
    }
  }
  /* unrolled as a while loop's: trips after the last copy nothing and move no slice */
  if (!rc) rc = carries_graph(l, &d->c, dev_scan_body, (char *)d->dstate + 8, err, sizeof err);
  free(args);
  if (rc) {
    if (getenv("KILN_LOG_COMPILES")) fprintf(stderr, "kiln: a scan runs from the host: %s\n", err);
    dev_scan_release(l);
  }
  return rc;
}

/* ptrs as scan_run's: the state uploaded, the consts and initial carries copied in, the graph,
 * the final carries copied out, all in the device's order. 1 when it ran, 0 when the scan must
 * run from the host, -1 with a message. */
static int dev_scan_run(const kl_loop *cl, void **ptrs, char *err, size_t errlen) {
  kl_loop *l = (kl_loop *)cl;
  dev_scan *d = l->ds;
  const kl_loop_target *t = l->t;
  int n = l->nb, nk = l->nc, nx = l->n, ny = l->ny, rc = 0;
  void **init = ptrs + nk, **xs = init + n, **final = xs + nx, **ys = final + n;
  pthread_mutex_lock(&d->mu);
  if (!d->state) d->state = dev_scan_build(l) ? -1 : 1;
  if (d->state < 0) {
    pthread_mutex_unlock(&d->mu);
    return 0;
  }
  d->host[0] = 0;
  d->host[1] = 1; /* the predicate byte (little-endian): a first trip (length >= 1) */
  for (int j = 0; j < nx; j++) d->host[2 + j] = (uint64_t)(uintptr_t)xs[j];
  for (int j = 0; j < ny; j++) d->host[2 + nx + j] = (uint64_t)(uintptr_t)ys[j];
  rc = t->upload(d->dstate, d->host, d->sbytes, err, errlen);
  for (int j = 0; j < nk && !rc; j++) rc = t->copy(d->k[j], ptrs[j], d->kbytes[j], err, errlen);
  for (int i = 0; i < n && !rc; i++) rc = t->copy(d->c.a[i], init[i], l->bytes[i], err, errlen);
  if (!rc && d->c.flags) rc = t->zero(d->c.flags, 2, err, errlen);
  if (!rc) rc = t->while_launch(d->c.graph, err, errlen);
  for (int i = 0; i < n && !rc; i++) rc = t->copy(final[i], d->c.a[i], l->bytes[i], err, errlen);
  pthread_mutex_unlock(&d->mu);
  return rc ? -1 : 1;
}

static int scan_keep_fill(const kl_loop *l, scan_keep *kp, char *err, size_t errlen);

/* ptrs: consts, initial carries, xs, then the final carries and the ys (outputs). Iteration i
 * reads the carries of i - 1 (the initial ones first) and writes the next set; the last writes
 * the final carries. */
static int scan_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_loop *l = ctx;
  if (l->ds && l->length >= DEV_SCAN_MIN_TRIPS && !(l->t->capturing && l->t->capturing())) {
    int r = dev_scan_run(l, ptrs, err, errlen);
    if (r) return r < 0 ? -1 : 0;
  }
  int nk = l->nc, n = l->nb, nx = l->n, ny = l->ny, rc = 0;
  size_t nbase = (size_t)(2 * (nk + n + nx + n + ny) + 2 * n + nx + ny + 2);
  void *small[128], **base = nbase <= 128 ? small : kl_malloc(nbase * sizeof(void *));
  if (!base) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a scan");
  memset(base, 0, nbase * sizeof(void *));
  void **args = base, **outs = args + nk + n + nx, **set[2] = {outs + n + ny, outs + n + ny + n};
  void **stage = set[1] + n; /* per x, then per y: its staging buffer, or NULL */
  void **init = ptrs + nk, **xs = init + n, **final = xs + nx, **ys = final + n;
  scan_keep *kp = l->sk && !pthread_mutex_trylock(&((kl_loop *)l)->sk_mu) ? l->sk : NULL;
  if (kp && !kp->ready && (rc = scan_keep_fill(l, kp, err, errlen))) {
    pthread_mutex_unlock(&((kl_loop *)l)->sk_mu);
    kp = NULL;
    rc = 0; /* no memory to keep: this run allocates its own */
  }
  if (kp) {
    for (int i = 0; i < n; i++)
      for (int k = 0; k < 2; k++) set[k][i] = kp->set[k][i] ? kp->set[k][i] : final[i];
    memcpy(stage, kp->stage, sizeof(void *) * (size_t)(nx + ny));
  } else {
    if (l->length > 1) rc = carry_sets(l, n, set, final, err, errlen); /* one iteration goes from init to final */
    for (int j = 0; j < nx + ny && !rc; j++) {
      size_t b = j < nx ? l->xbytes[j] : l->bytes[n + j - nx];
      if (kl_loop_staged(b)) rc = l->t->alloc(b, &stage[j], err, errlen);
    }
  }
  memcpy(args, ptrs, sizeof(void *) * (size_t)nk);
  /* a scan without xs or ys (a fori_loop) reads and writes only carries: its body is bound once
   * per (carries read, carries written): init, set 0 or 1 -> set 0, set 1 or the results */
  bound_body *local[3][3] = {{NULL}}, *(*bound)[3] = kp ? kp->bound : local;
  char pointed[3][3] = {{0}}; /* a kept binding retargeted at this run's memory */
  int fixed = nx == 0 && ny == 0, whole = l->driver && l->length > 0;
  /* the bindings by (carries read, written): made (or a kept one pointed at this run's memory)
   * as the trips need them; a loop compiled whole needs those of the first three trips and the
   * last, and points its slices per trip itself (slice 0 or the staging buffer here) */
  for (int64_t it = 0; (fixed || whole) && it < l->length && !rc; it++) {
    int r = it ? 1 + (int)((it - 1) & 1) : 0, w = it == l->length - 1 ? 2 : (int)(it & 1);
    if (!bound[r][w] || !pointed[r][w]) {
      memcpy(args + nk, r ? set[r - 1] : init, sizeof(void *) * (size_t)n);
      for (int j = 0; j < nx; j++) args[nk + n + j] = stage[j] ? stage[j] : xs[j];
      memcpy(outs, w == 2 ? final : set[w], sizeof(void *) * (size_t)n);
      for (int j = 0; j < ny; j++) outs[n + j] = stage[nx + j] ? stage[nx + j] : ys[j];
      if (bound[r][w]) l->t->retarget(bound[r][w]->native, args, outs);
      else if (!(bound[r][w] = body_bind(l->t, l->body, args, outs, err, errlen))) rc = -1;
      pointed[r][w] = 1;
    }
    if (whole && it == 2 && l->length - 2 > it) it = l->length - 2;
    else if (!rc && !whole && !(rc = kl_rt_stop_check(err, errlen))) rc = body_run(bound[r][w], err, errlen);
  }
  if (whole && !rc) {
    void *sl[2 * SCAN_WHOLE_MAX_SLICES + 1], *native[9]; /* slices_pointable's bound */
    for (int j = 0; j < nx + ny; j++) { /* each slice's memory and staging buffer */
      sl[2 * j] = j < nx ? xs[j] : ys[j - nx];
      sl[2 * j + 1] = stage[j];
    }
    for (int k = 0; k < 9 && !rc; k++) native[k] = bound[k / 3][k % 3] ? bound[k / 3][k % 3]->native : NULL;
    if (!rc) rc = l->t->drive(l->driver, 1, NULL, l->body, native, l->length, sl, nx + ny, NULL, err, errlen);
  }
  for (int64_t it = 0; !fixed && !l->driver && it < l->length && !rc && !(rc = kl_rt_stop_check(err, errlen)); it++) {
    int64_t t = l->reverse ? l->length - 1 - it : it;
    memcpy(args + nk, it ? set[(it - 1) & 1] : init, sizeof(void *) * (size_t)n);
    for (int j = 0; j < nx && !rc; j++) {
      void *at = (char *)xs[j] + (size_t)t * l->xbytes[j];
      args[nk + n + j] = stage[j] ? stage[j] : at;
      if (stage[j]) rc = l->t->copy(stage[j], at, l->xbytes[j], err, errlen);
    }
    memcpy(outs, it == l->length - 1 ? final : set[it & 1], sizeof(void *) * (size_t)n);
    for (int j = 0; j < ny; j++) outs[n + j] = stage[nx + j] ? stage[nx + j] : (char *)ys[j] + (size_t)t * l->bytes[n + j];
    if (!rc && l->t->retarget && l->t->bind) { /* one binding per (carries read, written), pointed at each trip's slices */
      int r = it ? 1 + (int)((it - 1) & 1) : 0, w = it == l->length - 1 ? 2 : (int)(it & 1);
      if (bound[r][w]) l->t->retarget(bound[r][w]->native, args, outs);
      else if (!(bound[r][w] = body_bind(l->t, l->body, args, outs, err, errlen))) rc = -1;
      if (!rc) rc = body_run(bound[r][w], err, errlen);
    } else if (!rc)
      rc = l->t->run(l->body, args, outs, err, errlen);
    for (int j = 0; j < ny && !rc; j++)
      if (stage[nx + j]) rc = l->t->copy((char *)ys[j] + (size_t)t * l->bytes[n + j], stage[nx + j], l->bytes[n + j], err, errlen);
  }
  for (int i = 0; i < n && !rc && l->length == 0; i++)
    if (final[i] != init[i]) rc = l->t->copy(final[i], init[i], l->bytes[i], err, errlen);
  if (kp) {
    pthread_mutex_unlock(&((kl_loop *)l)->sk_mu);
    if (base != small) free(base);
    return rc;
  }
  for (int r = 0; r < 3; r++)
    for (int w = 0; w < 3; w++) body_unbind(bound[r][w]);
  for (int j = 0; j < nx + ny; j++)
    if (stage[j]) l->t->free(stage[j], j < nx ? l->xbytes[j] : l->bytes[n + j - nx]);
  free_sets(l, n, set);
  if (base != small) free(base);
  return rc;
}

/* The buffers a kept scan reuses: 0, or -1 (then kp stays unready). */
static int scan_keep_fill(const kl_loop *l, scan_keep *kp, char *err, size_t errlen) {
  int n = l->nb, ns = l->n + l->ny, rc = 0;
  kp->set[0] = kl_calloc(2 * (size_t)n + (size_t)ns + 1, sizeof(void *));
  if (!kp->set[0]) return -1;
  kp->set[1] = kp->set[0] + n;
  kp->stage = kp->set[1] + n;
  for (int i = 0; i < n && !rc; i++)
    for (int k = 0; k < 2 && !rc && !l->alias[i]; k++) rc = l->t->alloc(l->bytes[i] ? l->bytes[i] : 1, &kp->set[k][i], err, errlen);
  for (int j = 0; j < ns && !rc; j++) {
    size_t b = j < l->n ? l->xbytes[j] : l->bytes[n + j - l->n];
    if (kl_loop_staged(b)) rc = l->t->alloc(b, &kp->stage[j], err, errlen);
  }
  if (rc) {
    for (int i = 0; i < n; i++)
      for (int k = 0; k < 2; k++)
        if (kp->set[k][i]) l->t->free(kp->set[k][i], l->bytes[i] ? l->bytes[i] : 1);
    for (int j = 0; j < ns; j++)
      if (kp->stage[j]) l->t->free(kp->stage[j], j < l->n ? l->xbytes[j] : l->bytes[n + j - l->n]);
    free(kp->set[0]);
    memset(kp, 0, sizeof *kp);
    return -1;
  }
  kp->ready = 1;
  return 0;
}

#define COND_KEEP_TEMP_BYTES ((size_t)4 << 20) /* a branch's temporaries kept while its program lives */

/* ptrs: the predicate, false consts, true consts, operands, then the results. The predicate is
 * read (one wait on a GPU), then the branch it names runs on (operands, its consts). */
typedef struct {
  bound_body *b[2];
} cond_parts;

static int cond_branch(void *p, int which, char *err, size_t errlen) {
  return body_run(((cond_parts *)p)->b[which], err, errlen);
}

/* Binds both branches of cond l over the step's pointers ptrs into b[2]: 0, or -1 with a message. */
static int cond_bind_both(const kl_loop *l, void **ptrs, bound_body **b, char *err, size_t errlen) {
  int nf = l->nc, nt = l->nb, no = l->n, rc = 0;
  void *small[32], **args = no + nf + nt <= 32 ? small : kl_calloc((size_t)(no + nf + nt) + 1, sizeof(void *));
  if (!args) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a cond");
  void **outs = ptrs + 1 + nf + nt + no;
  memcpy(args, ptrs + 1 + nf + nt, sizeof(void *) * (size_t)no);
  for (int k = 0; k < 2 && !rc; k++) {
    if (k) memcpy(args + no, ptrs + 1 + nf, sizeof(void *) * (size_t)nt);
    else memcpy(args + no, ptrs + 1, sizeof(void *) * (size_t)nf);
    if (!(b[k] = body_bind(l->t, k ? l->body : l->cond, args, outs, err, errlen))) rc = -1;
  }
  if (args != small) free(args);
  return rc;
}

static size_t cond_nptrs(const kl_loop *l) { return 1 + (size_t)(l->nc + l->nb + l->n + l->cond->noutputs); }

/* The branches prepared for exactly these pointers, or -1. Under branch_mu. */
static int prepared_for(const kl_loop *l, void **ptrs) {
  for (int i = 0; i < l->nprep; i++)
    if (!memcmp(l->prep[i].key, ptrs, sizeof(void *) * cond_nptrs(l))) return i;
  return -1;
}

/* Before a device loop's body is captured: binds the branches of cond l for the pointers its
 * step will run with. 0, or -1 with a message. */
static int cond_prepare(kl_loop *l, void **ptrs, char *err, size_t errlen) {
  int rc = 0;
  pthread_mutex_lock(&l->branch_mu);
  if (prepared_for(l, ptrs) < 0) {
    prepared *p = kl_realloc(l->prep, sizeof *p * (size_t)(l->nprep + 1));
    if (!p) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory preparing a cond");
    else {
      l->prep = p;
      p = &l->prep[l->nprep];
      memset(p, 0, sizeof *p);
      if (!(p->key = kl_malloc(sizeof(void *) * cond_nptrs(l))))
        rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory preparing a cond");
      else if (!(rc = cond_bind_both(l, ptrs, p->b, err, errlen))) {
        for (int k = 0; k < 2 && !rc; k++) rc = prepare_conds(l->t, p->b[k], err, errlen); /* conds in branches */
        if (!rc) {
          memcpy(p->key, ptrs, sizeof(void *) * cond_nptrs(l));
          l->nprep++;
        }
      }
      if (rc) {
        body_unbind(p->b[0]);
        body_unbind(p->b[1]);
        free(p->key);
      }
    }
  }
  pthread_mutex_unlock(&l->branch_mu);
  return rc;
}

/* Prepares every cond step of a bound body (a device loop's, before its capture). */
static int prepare_conds(const kl_loop_target *t, const bound_body *b, char *err, size_t errlen) {
  for (int s = 0; s < b->x->nsteps; s++) {
    const kl_step *st = &b->x->steps[s];
    if (!st->if_node || !is_cond_step(st)) continue;
    if (!t->bound_args || !b->native) return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "a cond that cannot be prepared");
    if (cond_prepare(st->ctx, t->bound_args(b->native, s), err, errlen)) return -1;
  }
  return 0;
}

/* Conds inside the branches of a cond being captured, bound for this capture alone before it
 * starts (a branch's capture may not allocate): this thread's list, looked up by the inner
 * conds' own captures, emptied by the outermost one. */
typedef struct pending {
  const kl_loop *l;
  void **key;
  bound_body *b[2];
} pending;
static _Thread_local pending *pend;
static _Thread_local int npend, cappend;

static int pending_for(const kl_loop *l, void **ptrs) {
  for (int i = 0; i < npend; i++)
    if (pend[i].l == l && !memcmp(pend[i].key, ptrs, sizeof(void *) * cond_nptrs(l))) return i;
  return -1;
}

static void pending_pop(int mark) {
  for (; npend > mark; npend--) {
    body_unbind(pend[npend - 1].b[0]);
    body_unbind(pend[npend - 1].b[1]);
    free(pend[npend - 1].key);
  }
  if (!npend) {
    free(pend);
    pend = NULL;
    cappend = 0;
  }
}

/* Binds the conds in bound body b (and theirs) not prepared for their pointers onto the list. */
static int bind_nested(const kl_loop_target *t, const bound_body *b, char *err, size_t errlen) {
  for (int s = 0; s < b->x->nsteps; s++) {
    const kl_step *st = &b->x->steps[s];
    if (!st->if_node || !is_cond_step(st)) continue;
    if (!t->bound_args || !b->native) return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "a cond that cannot be prepared");
    kl_loop *l = st->ctx;
    void **ptrs = t->bound_args(b->native, s);
    pthread_mutex_lock(&l->branch_mu);
    int have = prepared_for(l, ptrs) >= 0;
    pthread_mutex_unlock(&l->branch_mu);
    if (have || pending_for(l, ptrs) >= 0) continue;
    if (npend == cappend) {
      int cap = cappend ? 2 * cappend : 8;
      pending *p = kl_realloc(pend, sizeof *p * (size_t)cap);
      if (!p) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory binding nested conds");
      pend = p;
      cappend = cap;
    }
    pending *p = &pend[npend];
    memset(p, 0, sizeof *p);
    p->l = l;
    if (!(p->key = kl_malloc(sizeof(void *) * cond_nptrs(l))))
      return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory binding nested conds");
    memcpy(p->key, ptrs, sizeof(void *) * cond_nptrs(l));
    if (cond_bind_both(l, ptrs, p->b, err, errlen)) {
      body_unbind(p->b[0]);
      body_unbind(p->b[1]);
      free(p->key);
      return -1;
    }
    npend++;
    for (int k = 0; k < 2; k++)
      if (bind_nested(t, p->b[k], err, errlen)) return -1;
  }
  return 0;
}

/* A cond in a graph being captured (its step's if_node): both branches bound (prepared before a
 * device loop's capture, bound by an enclosing cond's capture, else bound now with the conds
 * inside them: their temporaries from the graph's memory), queued as the two conditional nodes
 * of t->if_captured. */
static int cond_captured(const kl_loop *l, void **ptrs, char *err, size_t errlen) {
  cond_parts q = {{NULL, NULL}};
  kl_loop *ml = (kl_loop *)l;
  pthread_mutex_lock(&ml->branch_mu);
  int i = prepared_for(l, ptrs);
  if (i >= 0) {
    q.b[0] = l->prep[i].b[0];
    q.b[1] = l->prep[i].b[1];
  }
  pthread_mutex_unlock(&ml->branch_mu);
  int j = i >= 0 ? -1 : pending_for(l, ptrs), mark = npend, rc = 0;
  if (j >= 0) {
    q.b[0] = pend[j].b[0];
    q.b[1] = pend[j].b[1];
  } else if (i < 0) {
    rc = cond_bind_both(l, ptrs, q.b, err, errlen);
    for (int k = 0; k < 2 && !rc; k++) rc = bind_nested(l->t, q.b[k], err, errlen);
  }
  if (!rc) rc = l->t->if_captured(ptrs[0], cond_branch, &q, err, errlen);
  if (i < 0 && j < 0) {
    for (int k = 0; k < 2; k++) body_unbind(q.b[k]);
    pending_pop(mark);
  }
  return rc;
}

static int cond_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_loop *l = ctx;
  int nf = l->nc, nt = l->nb, no = l->n, rc;
  unsigned char which = 0;
  if (l->if_node && l->t->capturing && l->t->capturing()) return cond_captured(l, ptrs, err, errlen);
  if ((rc = l->t->read(&which, ptrs[0], 1, err, errlen))) return rc;
  void *small[32], **args = no + nf + nt <= 32 ? small : kl_calloc((size_t)(no + nf + nt) + 1, sizeof(void *));
  if (!args) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a cond");
  memcpy(args, ptrs + 1 + nf + nt, sizeof(void *) * (size_t)no);
  if (which) memcpy(args + no, ptrs + 1 + nf, sizeof(void *) * (size_t)nt);
  else memcpy(args + no, ptrs + 1, sizeof(void *) * (size_t)nf);
  kl_exec *x = which ? l->body : l->cond;
  void **outs = ptrs + 1 + nf + nt + no;
  kl_loop *ml = (kl_loop *)l;
  if (l->keep[which != 0] && !pthread_mutex_trylock(&ml->branch_mu)) {
    bound_body **b = &ml->branch[which != 0]; /* its temporaries kept from run to run */
    if (*b) l->t->retarget((*b)->native, args, outs);
    else if (!(*b = body_bind(l->t, x, args, outs, err, errlen))) rc = -1;
    if (!rc) rc = body_run(*b, err, errlen);
    pthread_mutex_unlock(&ml->branch_mu);
  } else
    rc = l->t->run(x, args, outs, err, errlen);
  if (args != small) free(args);
  return rc;
}

/* while_bwd (transforms/rules/control.c says what it computes). ptrs: body consts, initial
 * carries, the trip count T, the final float carries' cotangents, then the initial float carries'
 * cotangents and the float consts'. Checkpoints every s = ceil(sqrt(T)) iterations (the first is
 * the initial carries themselves), then per segment, last first: the segment's carries recomputed
 * from its checkpoint, and the body's VJP (l->cond) over them backwards. About 2 sqrt(T) carries
 * of memory; the body runs about 2T times, its VJP T times. */
static int while_bwd_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_loop *l = ctx;
  const kl_loop_target *t = l->t;
  int nb = l->nc, n = l->nb, nf = l->n, nfk = l->ny, rc = 0;
  int32_t trips = 0;
  void **consts = ptrs, **init = ptrs + nb, *trip_at = ptrs[nb + n], **ct_out = ptrs + nb + n + 1;
  void **ct_in = ct_out + nf, **acc_out = ct_in + nf;
  if ((rc = t->read(&trips, trip_at, sizeof trips, err, errlen))) return rc;
  if (trips <= 0) {
    for (int i = 0; i < nf && !rc; i++) rc = t->copy(ct_in[i], ct_out[i], l->bytes[i], err, errlen);
    for (int q = 0; q < nfk && !rc; q++) rc = t->zero(acc_out[q], l->bytes[nf + q], err, errlen);
    return rc;
  }
  int64_t T = trips, s = 1;
  while (s * s < T) s++;
  int64_t nseg = (T + s - 1) / s;
  /* tape: nseg checkpoints (the first is init), seg: s carries of a segment (the first is its
   * checkpoint), two sets of cotangents and accumulators */
  void **tape = kl_calloc((size_t)(nseg * n) + 1, sizeof(void *)), **seg = kl_calloc((size_t)(s * n) + 1, sizeof(void *));
  void **cts = kl_calloc(2 * (size_t)(nf + nfk) + 1, sizeof(void *));
  void **args = kl_calloc((size_t)(n + nb + nf + nfk) + 1, sizeof(void *)), **outs = kl_calloc((size_t)(nf + nfk) + 1, sizeof(void *));
  if (!tape || !seg || !cts || !args || !outs) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a while loop's gradient");
  for (int i = 0; i < n && !rc; i++) {
    tape[i] = init[i];
    for (int64_t j = 1; j < nseg && !rc; j++) rc = t->alloc(l->xbytes[i] ? l->xbytes[i] : 1, &tape[j * n + i], err, errlen);
    for (int64_t m = 1; m < s && !rc; m++) rc = t->alloc(l->xbytes[i] ? l->xbytes[i] : 1, &seg[m * n + i], err, errlen);
  }
  for (int k = 0; k < 2 * (nf + nfk) && !rc; k++) {
    size_t b = l->bytes[k % (nf + nfk)];
    rc = t->alloc(b ? b : 1, &cts[k], err, errlen);
  }
  /* the checkpoints: the body from init, writing every s-th carry set into the tape */
  void **cur = init, **scratch[2] = {&seg[n], &seg[(s > 2 ? 2 : 1) * n]}; /* between checkpoints */
  int which = 0;
  for (int64_t k = 0; k < (nseg - 1) * s && !rc; k++) {
    void **nxt = (k + 1) % s == 0 ? &tape[((k + 1) / s) * n] : scratch[which];
    if ((k + 1) % s) which ^= 1;
    memcpy(args, cur, sizeof(void *) * (size_t)n);
    memcpy(args + n, consts, sizeof(void *) * (size_t)nb);
    rc = t->run(l->body, args, nxt, err, errlen);
    cur = nxt;
  }
  /* backwards, segment by segment */
  void **ct = ct_out, **acc = NULL;
  int flip = 0;
  for (int q = 0; q < nfk && !rc; q++) rc = t->zero(cts[nf + q], l->bytes[nf + q], err, errlen);
  acc = cts + nf;
  for (int64_t j = nseg - 1; j >= 0 && !rc; j--) {
    int64_t start = j * s, len = T - start < s ? T - start : s;
    memcpy(seg, &tape[j * n], sizeof(void *) * (size_t)n);
    for (int64_t m = 1; m < len && !rc; m++) {
      memcpy(args, &seg[(m - 1) * n], sizeof(void *) * (size_t)n);
      memcpy(args + n, consts, sizeof(void *) * (size_t)nb);
      rc = t->run(l->body, args, &seg[m * n], err, errlen);
    }
    for (int64_t m = len - 1; m >= 0 && !rc; m--) {
      void **dst = cts + (flip ? 0 : nf + nfk);
      memcpy(args, &seg[m * n], sizeof(void *) * (size_t)n);
      memcpy(args + n, consts, sizeof(void *) * (size_t)nb);
      memcpy(args + n + nb, ct, sizeof(void *) * (size_t)nf);
      memcpy(args + n + nb + nf, acc, sizeof(void *) * (size_t)nfk);
      if (j == 0 && m == 0) { /* the last: into the results */
        memcpy(outs, ct_in, sizeof(void *) * (size_t)nf);
        memcpy(outs + nf, acc_out, sizeof(void *) * (size_t)nfk);
      } else {
        memcpy(outs, dst, sizeof(void *) * (size_t)(nf + nfk));
      }
      rc = t->run(l->cond, args, outs, err, errlen);
      ct = dst;
      acc = dst + nf;
      flip = !flip;
    }
  }
  for (int i = 0; tape && seg && i < n; i++) {
    for (int64_t j = 1; j < nseg; j++)
      if (tape[j * n + i]) t->free(tape[j * n + i], l->xbytes[i] ? l->xbytes[i] : 1);
    for (int64_t m = 1; m < s; m++)
      if (seg[m * n + i]) t->free(seg[m * n + i], l->xbytes[i] ? l->xbytes[i] : 1);
  }
  for (int k = 0; cts && k < 2 * (nf + nfk); k++)
    if (cts[k]) t->free(cts[k], l->bytes[k % (nf + nfk)] ? l->bytes[k % (nf + nfk)] : 1);
  free(tape);
  free(seg);
  free(cts);
  free(args);
  free(outs);
  return rc;
}

static size_t aval_bytes(const kl_aval *a) { return kl_dtype_size(a->dtype) * (size_t)kl_aval_size(a); }

/* Whether a scan body's slices can be pointed at per trip by a compiled loop: no x slice is also
 * an output, no y slice is an input or another output (those are copies the driver does not
 * make). */
static int slices_pointable(const kl_program *body, int nk, int n, int nx, int ny) {
  if (nx + ny > SCAN_WHOLE_MAX_SLICES) return 0;
  for (int j = 0; j < nx; j++)
    for (int o = 0; o < body->noutputs; o++)
      if (body->outputs[o] == body->inputs[nk + n + j]) return 0;
  for (int j = 0; j < ny; j++) {
    int v = body->outputs[n + j];
    for (int i = 0; i < body->ninputs; i++)
      if (body->inputs[i] == v) return 0;
    for (int o = 0; o < body->noutputs; o++)
      if (o != n + j && body->outputs[o] == v) return 0;
  }
  return 1;
}

static int is_cond_step(const kl_step *st) { return st->run_checked == cond_run; }

static int is_loop_step(const kl_step *st) {
  return st->run_checked == scan_run || st->run_checked == cond_run || st->run_checked == while_run ||
         st->run_checked == while_bwd_run;
}

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
  l->prim = e->prim;
  if (!(l->alias = kl_calloc((size_t)e->nout + 1, 1))) {
    kl_loop_free(l);
    free(slots);
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling a loop");
  }
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
    for (int j = 0; j < l->nb; j++) l->alias[j] = (char)in_place(p->scan.body, l->nc + j, j);
  } else if (e->prim == KL_P_WHILE_BWD) {
    const kl_program *body = p->while_ad.body;
    l->nc = (int)p->while_ad.counts.v[0];
    l->nb = (int)p->while_ad.counts.v[1];
    for (int i = 0; i < l->nb; i++) {
      const kl_aval *av = &body->vals[body->inputs[i]].aval;
      l->xbytes[i] = aval_bytes(av);
      l->n += kl_dtype_is_inexact(av->dtype) != 0; /* the carries with cotangents: float and complex */
    }
    l->ny = e->nout - l->n;
  } else if (e->prim == KL_P_COND) {
    pthread_mutex_init(&l->branch_mu, NULL);
    l->nc = (int)p->cond.counts.v[0];
    l->nb = (int)p->cond.counts.v[1];
    l->n = (int)p->cond.counts.v[2];
  } else {
    l->nc = (int)p->while_.counts.v[0];
    l->nb = (int)p->while_.counts.v[1];
    l->n = (int)p->while_.counts.v[2];
    for (int j = 0; j < l->n; j++) l->alias[j] = (char)in_place(p->while_.body, j, j);
  }
  kl_program *first = e->prim == KL_P_WHILE ? p->while_.cond : e->prim == KL_P_COND ? p->cond.false_branch
                      : e->prim == KL_P_WHILE_BWD ? p->while_ad.vjp : NULL;
  kl_program *second = e->prim == KL_P_SCAN ? p->scan.body : e->prim == KL_P_COND ? p->cond.true_branch
                       : e->prim == KL_P_WHILE_BWD ? p->while_ad.body : p->while_.body;
  int whole = t->compile_loop && !getenv("KILN_CPU_HOST_LOOPS") &&
              (e->prim == KL_P_WHILE || (e->prim == KL_P_SCAN && slices_pointable(p->scan.body, l->nc, l->nb, l->n, l->ny)));
  if (e->prim == KL_P_SCAN)
    l->sl = (kl_loop_slices){l->nc, l->nb, l->n, l->ny, l->reverse, l->xbytes, l->bytes + l->nb};
  if (whole) {
    if (t->compile_loop(first, second, e->prim == KL_P_SCAN, e->prim == KL_P_SCAN && (l->n || l->ny) ? &l->sl : NULL,
                        &l->cond, &l->body, &l->driver, err, errlen)) {
      kl_loop_free(l);
      free(slots);
      return -1;
    }
  } else if ((first && !(l->cond = t->compile(first, err, errlen))) || !(l->body = t->compile(second, err, errlen))) {
    kl_loop_free(l);
    free(slots);
    return -1;
  }
  if (report_copies(l, err, errlen)) { /* forbidden copies */
    kl_loop_free(l);
    free(slots);
    return -1;
  }
  if (e->prim == KL_P_WHILE && t->while_graph && !getenv("KILN_GPU_HOST_WHILE")) {
    int hosted = 0; /* bodies with steps on the host, or loops of their own, loop from the host */
    for (int k = 0; k < 2; k++) {
      const kl_exec *x = k ? l->body : l->cond;
      for (int s = 0; s < x->nsteps; s++) /* a cond step of kernels alone is prepared (prepare_conds) */
        hosted |= x->steps[s].on_host || x->steps[s].synchronizes ||
                  (x->steps[s].if_node && !is_cond_step(&x->steps[s]));
    }
    if (!hosted && (l->dw = kl_calloc(1, sizeof *l->dw))) pthread_mutex_init(&l->dw->mu, NULL);
  }
  if (e->prim == KL_P_SCAN && l->driver && t == &kl_loop_cpu) { /* small ones keep their memory (a nested scan) */
    size_t keep = 0;
    for (int i = 0; i < l->nb; i++) keep += 2 * l->bytes[i];
    for (int j = 0; j < l->n + l->ny; j++) keep += j < l->n ? l->xbytes[j] : l->bytes[l->nb + j - l->n];
    keep += kl_exec_temp_bytes(l->body) * 6; /* up to six bindings' temporaries */
    if (keep <= SCAN_KEEP_MAX_BYTES && (l->sk = kl_calloc(1, sizeof *l->sk))) pthread_mutex_init(&l->sk_mu, NULL);
  }
  for (int k = 0; k < 2 && e->prim == KL_P_COND; k++)
    l->keep[k] = t->bind && t->retarget && kl_exec_temp_bytes(k ? l->body : l->cond) <= COND_KEEP_TEMP_BYTES;
  int (*run)(void *, void **, char *, size_t) = e->prim == KL_P_SCAN ? scan_run : e->prim == KL_P_COND ? cond_run
                                                : e->prim == KL_P_WHILE_BWD ? while_bwd_run : while_run;
  kl_host_step(e, slot_of, slots, l, run, st);
  if (e->prim == KL_P_SCAN) { /* a GPU graph may capture it whole, unless its body reads back */
    st->launches = l->length * (l->body->nsteps ? l->body->nsteps : 1);
    for (int i = 0; i < l->body->nsteps; i++) {
      st->synchronizes |= l->body->steps[i].synchronizes || l->body->steps[i].on_host;
      st->if_node |= l->body->steps[i].if_node;
    }
  }
  if (e->prim == KL_P_SCAN && t->scan_move && t->while_graph && t->upload && !getenv("KILN_GPU_HOST_SCAN") &&
      l->n <= KL_LOOP_SCAN_SLICES && l->ny <= KL_LOOP_SCAN_SLICES && l->length >= DEV_SCAN_MIN_TRIPS) {
    int plain = 1; /* a body of kernels and library calls: its trips can be a device loop's */
    for (int s = 0; s < l->body->nsteps; s++)
      plain &= !l->body->steps[s].on_host && !l->body->steps[s].synchronizes &&
               (!is_loop_step(&l->body->steps[s]) || (l->body->steps[s].if_node && is_cond_step(&l->body->steps[s])));
    if (plain && (l->ds = kl_calloc(1, sizeof *l->ds))) pthread_mutex_init(&l->ds->mu, NULL);
  }
  if (e->prim == KL_P_COND && t->if_captured && t->has_if && t->has_if()) { /* conditional nodes */
    int plain = 1, depth = 1; /* kernels, library calls (cuBLAS) and conds that are such nodes themselves */
    for (int k = 0; k < 2; k++) {
      const kl_exec *x = k ? l->body : l->cond;
      for (int s = 0; s < x->nsteps; s++) {
        const kl_step *b = &x->steps[s];
        int inner = b->if_node && is_cond_step(b);
        plain &= !b->on_host && !b->synchronizes && (!is_loop_step(b) || inner);
        if (inner && ((const kl_loop *)b->ctx)->if_depth + 1 > depth) depth = ((const kl_loop *)b->ctx)->if_depth + 1;
      }
    }
    plain &= depth <= KL_LOOP_IF_DEPTH;
    st->if_node = l->if_node = plain;
    l->if_depth = plain ? depth : 0;
    st->launches = 2; /* the setting kernel and the taken branch's, at least */
  }
  *out = l;
  return 0;
}

int kl_loop_cond_branches(const kl_step *st, kl_exec **f, kl_exec **t) {
  if (!is_cond_step(st)) return 0;
  const kl_loop *l = st->ctx;
  *f = l->cond;
  *t = l->body;
  return 1;
}

void *kl_loop_cond_bind(const kl_step *st, void **ptrs, void **native, char *err, size_t errlen) {
  bound_body **b = kl_calloc(2, sizeof *b);
  if (!b) {
    kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory binding a cond");
    return NULL;
  }
  if (cond_bind_both(st->ctx, ptrs, b, err, errlen) || !b[0]->native || !b[1]->native) {
    if (b[0] && b[1] && (!b[0]->native || !b[1]->native)) kl_error(err, errlen, KL_ERR_INTERNAL, "a cond's branches bound without a native binding");
    kl_loop_cond_unbind(b);
    return NULL;
  }
  native[0] = b[0]->native;
  native[1] = b[1]->native;
  return b;
}

#define COND_KEPT_MAX 64                        /* sets of pointers a cond keeps its branches bound for */
#define COND_KEPT_TEMP_BYTES ((size_t)64 << 10) /* per branch binding, at most */

int kl_loop_cond_kept(const kl_step *st, void **ptrs, void **native, void ***plan,
                      void **(*make_plan)(const kl_step *st, void **ptrs, void *const *native), char *err, size_t errlen) {
  kl_loop *l = st->ctx;
  int rc = 1;
  pthread_mutex_lock(&l->branch_mu);
  int i = prepared_for(l, ptrs);
  if (i >= 0 && l->prep[i].plan) { /* the common case: kept from an earlier run */
    native[0] = l->prep[i].b[0]->native;
    native[1] = l->prep[i].b[1]->native;
    *plan = l->prep[i].plan;
    pthread_mutex_unlock(&l->branch_mu);
    return 1;
  }
  if (i < 0 && (l->nprep >= COND_KEPT_MAX || kl_exec_temp_bytes(l->cond) > COND_KEPT_TEMP_BYTES ||
                kl_exec_temp_bytes(l->body) > COND_KEPT_TEMP_BYTES))
    rc = 0;
  pthread_mutex_unlock(&l->branch_mu);
  if (i < 0 && rc && cond_prepare(l, ptrs, err, errlen)) return -1;
  if (!rc) return 0;
  pthread_mutex_lock(&l->branch_mu);
  i = prepared_for(l, ptrs);
  prepared *p = i >= 0 ? &l->prep[i] : NULL;
  if (p) {
    native[0] = p->b[0]->native;
    native[1] = p->b[1]->native;
    if (!p->plan && !(p->plan = make_plan(st, ptrs, native)))
      rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a loop");
    *plan = p->plan;
  } else
    rc = kl_error(err, errlen, KL_ERR_INTERNAL, "a cond's prepared branches went missing");
  pthread_mutex_unlock(&l->branch_mu);
  return rc;
}

void kl_loop_cond_unbind(void *handle) {
  bound_body **b = handle;
  if (!b) return;
  body_unbind(b[0]);
  body_unbind(b[1]);
  free(b);
}

int64_t kl_loop_cost(const kl_loop *l) {
  int64_t body = l->body->cost > 0 ? l->body->cost : 1, first = l->cond && l->cond->cost > 0 ? l->cond->cost : 1;
  if (l->prim == KL_P_SCAN) return l->length > INT64_MAX / 4 / body ? INT64_MAX / 4 : l->length * body;
  if (l->prim == KL_P_COND) return body > first ? body : first;
  return LOOP_GUESSED_TRIPS * (body + first); /* while, while_bwd: trips unknown */
}

void kl_loops_describe(kl_loop *const *loops, int n, kl_str *out) {
  for (int i = 0; i < n; i++) {
    const kl_loop *l = loops[i];
    kl_str_printf(out, "%s%s", i ? ", " : " (", kl_prim_get(l->prim)->name);
    if (l->prim == KL_P_SCAN) kl_str_printf(out, " of %lld trips", (long long)l->length);
    if (l->prim == KL_P_COND) kl_str_printf(out, " of branches of %d and %d steps", l->cond->nsteps, l->body->nsteps);
    else kl_str_printf(out, " over a body of %d steps", l->body->nsteps);
    if (l->driver) kl_str_printf(out, ", compiled whole");
    else if (l->dw) kl_str_printf(out, ", on the device where the driver can");
    if (i == n - 1) kl_str_printf(out, ")");
  }
}
