/* fuse.c: DCE and kernel planning. A value is materialized when it is a program input or
 * output, a reduction result, produced or consumed by a library call; everything else is
 * recomputed inside its consumers' loop nests (cheap elementwise work is worth redoing to
 * avoid a round trip through memory). */
#include "../ir/alloc.h"
#include "fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kl_inline_reads(const kl_fuse_traits *traits, const kl_program *pg, const kl_eqn *e) {
  return !traits[e->prim].fuses && traits[e->prim].inline_reads ? traits[e->prim].inline_reads(pg, e) : 0;
}

int kl_eqn_fusible(const kl_fuse_traits *traits, const kl_program *pg, const kl_eqn *e) {
  return traits[e->prim].fuses || kl_inline_reads(traits, pg, e);
}

/* Whether e runs for an effect: an effect callback, or an equation whose bodies hold one (a cond
 * or loop that prints): DCE keeps it, CSE never merges it. */
int kl_eqn_has_effect(const kl_eqn *e) {
  if (e->prim == KL_P_CALLBACK) return e->p.callback.effect;
  for (const kl_param_field *f = kl_prim_get(e->prim)->fields; f->name; f++) {
    if (f->kind != KL_PF_PROGRAM) continue;
    const kl_program *body = *(kl_program *const *)kl_param_cptr(&e->p, f);
    for (int k = 0; body && k < body->neqns; k++)
      if (kl_eqn_has_effect(&body->eqns[k])) return 1;
  }
  return 0;
}

void kl_dce(kl_program *pg) {
  char *live = kl_calloc((size_t)pg->nvals + 1, 1), *keep = kl_calloc((size_t)pg->neqns + 1, 1);
  if (!live || !keep) { /* out of memory: nothing changed; the pipeline reports pg->oom */
    pg->oom = 1;
    free(live);
    free(keep);
    return;
  }
  for (int i = 0; i < pg->noutputs; i++) live[pg->outputs[i]] = 1;
  for (int k = pg->neqns - 1; k >= 0; k--) {
    const kl_eqn *e = &pg->eqns[k];
    keep[k] = kl_eqn_has_effect(e); /* run for its effect */
    for (int i = 0; i < e->nout && !keep[k]; i++) keep[k] = live[e->outs[i]];
    if (keep[k])
      for (int i = 0; i < e->nin; i++) live[e->ins[i]] = 1;
  }
  int n = 0;
  for (int k = 0; k < pg->neqns; k++)
    if (keep[k]) {
      pg->eqns[n] = pg->eqns[k];
      for (int i = 0; i < pg->eqns[n].nout; i++) pg->vals[pg->eqns[n].outs[i]].producer = n;
      n++;
    }
  pg->neqns = n;
  free(live);
  free(keep);
}

/* ---- row kernels ----
 * softmax, log_softmax, layernorm: an elementwise result over shape S reads reductions of
 * S-shaped expressions over S's trailing dims, broadcast back along those dims. Such a kernel
 * computes the reductions itself, row by row (the row stays in cache), instead of reading them
 * from buffers written by separate passes. A reduction is absorbed when every expression that
 * reads it belongs to the kernel (its root or another absorbed reduction) and every read has the
 * row-broadcast form. */

enum { READ_FULL, READ_LEAD };

typedef struct {
  const kl_program *pg;
  const char *m;
  const char *absorbed;
  int64_t shape[KL_MAX_RANK]; /* S */
  int rank;
  int *hits;    /* per value: reads found from the current expression (1 bit per mode) */
  int bad;      /* a read of a reduction in an unsupported form was found */
  unsigned *seen_gen, *seen_bits; /* per value: the modes it was visited in during scan seen_gen */
  unsigned gen;                   /* the current scan */
  int *touched;                   /* the values with hits in the current scan (so that nothing */
  int ntouched;                   /* walks all the program's values per kernel) */
} row_scan;

/* Starts a scan: no reads found, nothing visited (an expression DAG is walked once per mode). */
static void scan_begin(row_scan *rs) {
  for (int i = 0; i < rs->ntouched; i++) rs->hits[rs->touched[i]] = 0;
  rs->ntouched = 0;
  rs->gen++;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static int same_dims(const kl_aval *a, const int64_t *d, int n) {
  if (a->ndim != n) return 0;
  for (int i = 0; i < n; i++)
    if (a->dims[i] != d[i]) return 0;
  return 1;
}

/* Records the materialized values read by the expression of v (mode: how v is indexed). */
static void scan_reads(row_scan *rs, int v, int mode, int lead) {
  const kl_value *val = &rs->pg->vals[v];
  unsigned bit = mode == READ_FULL ? 1u : mode == READ_LEAD ? 2u << lead : 1u << 30;
  if (rs->seen_gen[v] != rs->gen) rs->seen_gen[v] = rs->gen, rs->seen_bits[v] = 0;
  else if (rs->seen_bits[v] & bit) return; /* visited in this mode already: same reads */
  rs->seen_bits[v] |= bit;
  if (rs->m[v] || rs->absorbed[v] || val->producer < 0) {
    if (!rs->hits[v]) rs->touched[rs->ntouched++] = v;
    rs->hits[v] |= mode == READ_LEAD ? (2 << lead) : 1;
    return;
  }
  const kl_eqn *e = &rs->pg->eqns[val->producer];
  kl_form f = kl_prim_get(e->prim)->form;
  if (mode == READ_FULL && (kl_form_elementwise(f) || e->prim == KL_P_STOP_GRADIENT)) {
    for (int i = 0; i < e->nin; i++) {
      const kl_aval *a = &rs->pg->vals[e->ins[i]].aval;
      if (a->ndim == 0) continue; /* scalars are fine anywhere */
      scan_reads(rs, e->ins[i], READ_FULL, 0);
    }
    return;
  }
  if (mode == READ_FULL && e->prim == KL_P_BROADCAST_IN_DIM) {
    /* u of shape S[:k] (+ trailing 1s) spread along the trailing dims */
    const kl_aval *u = &rs->pg->vals[e->ins[0]].aval;
    int k = 0;
    while (k < u->ndim && k < rs->rank && u->dims[k] == rs->shape[k] && e->p.broadcast.broadcast_dimensions.v[k] == k) k++;
    int ok = k > 0 && k < rs->rank;
    for (int i = k; i < u->ndim && ok; i++) ok = u->dims[i] == 1;
    if (ok) {
      scan_reads(rs, e->ins[0], READ_LEAD, k);
      return;
    }
  }
  if (mode == READ_LEAD && (e->prim == KL_P_RESHAPE || e->prim == KL_P_STOP_GRADIENT || f == KL_FORM_CONVERT ||
                            f == KL_FORM_UNARY || f == KL_FORM_BINARY)) {
    /* still indexed by the leading dims only: reshapes adding/removing trailing 1s, elementwise */
    for (int i = 0; i < e->nin; i++) {
      const kl_aval *a = &rs->pg->vals[e->ins[i]].aval;
      if (a->ndim == 0) continue;
      int k = 0;
      while (k < a->ndim && k < rs->rank && a->dims[k] == rs->shape[k]) k++;
      int ok = k == lead;
      for (int j = k; j < a->ndim && ok; j++) ok = a->dims[j] == 1;
      if (!ok) {
        rs->bad = 1;
        return;
      }
      scan_reads(rs, e->ins[i], READ_LEAD, lead);
    }
    return;
  }
  /* anything else: every materialized value below is read in a form row kernels do not handle */
  for (int i = 0; i < e->nin; i++) scan_reads(rs, e->ins[i], mode == READ_LEAD ? 3 : READ_FULL + 4, 0);
}

/* Row kernels are an optimization: without memory for their bookkeeping (0 returned, -1 on
 * failure) the plan keeps every value they would have absorbed materialized instead. */
/* Whether k's stage list (KL_MAX_STAGES entries, -1 = none) holds eqn r. */
static int has_stage(const int *stages, int r) {
  for (int j = 0; j < KL_MAX_STAGES; j++)
    if (stages[j] == r) return 1;
  return 0;
}

/* Scans the expressions kernel k computes (its root's, or its reduction's input, and its
 * stages' inputs) into rs->hits. */
static void scan_kernel(row_scan *rs, const kl_program *pg, int k, const int *stages) {
  const kl_eqn *e = &pg->eqns[k];
  int isred = kl_prim_get(e->prim)->form == KL_FORM_REDUCE;
  const kl_aval *a = &pg->vals[isred ? e->ins[0] : e->outs[0]].aval;
  scan_begin(rs);
  rs->rank = a->ndim;
  memcpy(rs->shape, a->dims, sizeof(int64_t) * (size_t)a->ndim);
  if (isred) scan_reads(rs, e->ins[0], READ_FULL, 0);
  else
    for (int i = 0; i < e->nin; i++) scan_reads(rs, e->ins[i], READ_FULL, 0);
  for (int j = 0; j < KL_MAX_STAGES; j++)
    if (stages[j] >= 0) scan_reads(rs, pg->eqns[stages[j]].ins[0], READ_FULL, 0);
}

/* stages: KL_MAX_STAGES entries per equation, the row reductions a root equation's kernel
 * computes (-1: none). A reduction may be computed in several row kernels (each reads the row
 * anyway: softmax's max and sum feed both the probabilities and, in the gradient, the softmax
 * backward), as long as every kernel that reads it computes it; KILN_ROW_DUP=0 allows one. */
static int plan_rows(const kl_fuse_traits *traits, const kl_program *pg, char *m, char *absorbed, int *stages) {
  const char *dup_env = getenv("KILN_ROW_DUP");
  int dup = !(dup_env && *dup_env == '0');
  /* readers[v]: number of kernel expressions (roots and reduction inputs) reading v */
  int *readers = kl_calloc((size_t)pg->nvals + 1, sizeof(int));
  int *hits = kl_calloc((size_t)pg->nvals + 1, sizeof(int));
  int *count = kl_calloc((size_t)pg->nvals + 1, sizeof(int));
  int *lead_of = kl_calloc((size_t)pg->nvals + 1, sizeof(int));
  unsigned *seen = kl_calloc(2 * ((size_t)pg->nvals + 1), sizeof(unsigned));
  int *touched = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  int *counted = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1)); /* the values with count > 0 */
  if (!readers || !hits || !count || !lead_of || !seen || !touched || !counted) {
    free(touched);
    free(counted);
    free(seen);
    free(readers);
    free(hits);
    free(count);
    free(lead_of);
    return -1;
  }
  row_scan rs = {pg, m, absorbed, {0}, 0, hits, 0, seen, seen + pg->nvals + 1, 0, touched, 0};
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    kl_form f = kl_prim_get(e->prim)->form;
    if (!kl_eqn_fusible(traits, pg, e) || kl_inline_reads(traits, pg, e)) {
      for (int i = 0; i < e->nin; i++) readers[e->ins[i]] += 1000; /* library calls: never absorbed */
      if (kl_inline_reads(traits, pg, e)) {
        /* a small-contraction product computes its operands' expressions in its own kernel: the
         * reductions they read are never absorbed either (bug, issue 32: an outer product of
         * tanh(sum(x)) found the sum absorbed into another row kernel, and codegen failed) */
        scan_begin(&rs);
        for (int i = 0; i < e->nin; i++) {
          const kl_aval *a = &pg->vals[e->ins[i]].aval;
          rs.rank = a->ndim;
          memcpy(rs.shape, a->dims, sizeof(int64_t) * (size_t)a->ndim);
          scan_reads(&rs, e->ins[i], READ_FULL, 0);
        }
        for (int i = 0; i < rs.ntouched; i++) readers[touched[i]] += 1000;
      }
      continue;
    }
    if (!m[e->outs[0]] && f != KL_FORM_REDUCE) continue;
    int src = f == KL_FORM_REDUCE ? e->ins[0] : e->outs[0];
    scan_begin(&rs);
    const kl_aval *a = &pg->vals[src].aval;
    rs.rank = a->ndim;
    memcpy(rs.shape, a->dims, sizeof(int64_t) * (size_t)a->ndim);
    if (f == KL_FORM_REDUCE) scan_reads(&rs, src, READ_FULL, 0);
    else {
      const kl_value *val = &pg->vals[src];
      const kl_eqn *pe = &pg->eqns[val->producer];
      for (int i = 0; i < pe->nin; i++) scan_reads(&rs, pe->ins[i], pg->vals[pe->ins[i]].aval.ndim ? READ_FULL : READ_FULL, 0);
    }
    for (int i = 0; i < rs.ntouched; i++) readers[touched[i]]++;
  }
  for (int i = 0; i < pg->noutputs; i++) readers[pg->outputs[i]] += 1000;
  /* candidate roots, last first */
  for (int k = pg->neqns - 1; k >= 0; k--) {
    const kl_eqn *e = &pg->eqns[k];
    kl_form f = kl_prim_get(e->prim)->form;
    if (!kl_eqn_fusible(traits, pg, e) || f == KL_FORM_REDUCE || !m[e->outs[0]] || absorbed[e->outs[0]]) continue;
    /* the root's operands must be indexed like its result: an elementwise root (a transpose or
     * broadcast root would read a reduction along other dims than the row's; regression:
     * jit(jacfwd(lambda x: sin(x) * sum(x ** 2))) computed the transposed row's sum) */
    if (!kl_form_elementwise(f))
      continue;
    const kl_aval *S = &pg->vals[e->outs[0]].aval;
    if (S->ndim < 2) continue;
    int members[1 + KL_MAX_STAGES], nm = 0, row_k = -1;
    members[nm++] = k;
    for (int changed = 1; changed && nm < 1 + KL_MAX_STAGES;) {
      changed = 0;
      /* reads of every member, counted per value */
      int ncounted = 0, badv = 0;
      for (int j = 0; j < nm; j++) {
        const kl_eqn *me = &pg->eqns[members[j]];
        int isred = kl_prim_get(me->prim)->form == KL_FORM_REDUCE;
        scan_begin(&rs);
        rs.rank = S->ndim;
        memcpy(rs.shape, S->dims, sizeof(int64_t) * (size_t)S->ndim);
        rs.bad = 0;
        if (isred) scan_reads(&rs, me->ins[0], READ_FULL, 0);
        else {
          const kl_eqn *pe = me;
          for (int i = 0; i < pe->nin; i++) scan_reads(&rs, pe->ins[i], READ_FULL, 0);
        }
        badv |= rs.bad;
        for (int i = 0; i < rs.ntouched; i++) {
          int v = touched[i];
          if (!count[v]++) counted[ncounted++] = v;
          if (hits[v] & ~((1 << 20) - 2)) lead_of[v] = -1; /* read in a full or unsupported form */
          else if (lead_of[v] >= 0) lead_of[v] = hits[v];
        }
      }
      qsort(counted, (size_t)ncounted, sizeof(int), cmp_int); /* in program order, as before */
      for (int c = 0; c < ncounted && !badv && nm < 1 + KL_MAX_STAGES; c++) {
        int v = counted[c];
        if (!count[v] || lead_of[v] <= 0 || readers[v] >= 1000) continue;
        if (!dup && (absorbed[v] || count[v] != readers[v])) continue;
        const kl_value *val = &pg->vals[v];
        if (val->producer < 0 || has_stage(&stages[k * KL_MAX_STAGES], val->producer)) continue;
        const kl_eqn *re = &pg->eqns[val->producer];
        if (kl_prim_get(re->prim)->form != KL_FORM_REDUCE) continue;
        const kl_aval *x = &pg->vals[re->ins[0]].aval;
        if (!same_dims(x, S->dims, S->ndim)) continue;
        /* axes must be exactly the trailing dims k..n-1, read with lead k */
        const kl_ivec *axes = &re->p.reduce.axes;
        int kk = S->ndim - axes->n, ok = kk > 0;
        for (int i = 0; i < axes->n && ok; i++) {
          int found = 0;
          for (int j = 0; j < axes->n; j++) found |= axes->v[j] == kk + i;
          ok = found;
        }
        if (!ok || lead_of[v] != (2 << kk) || (row_k >= 0 && row_k != kk)) continue;
        row_k = kk;
        absorbed[v] = 1;
        m[v] = 0;
        stages[k * KL_MAX_STAGES + nm - 1] = val->producer;
        members[nm++] = val->producer;
        changed = 1;
      }
      for (int c = 0; c < ncounted; c++) count[counted[c]] = lead_of[counted[c]] = 0;
    }
  }
  /* Every kernel reading an absorbed reduction must compute it: one that does not (a kernel of
   * its own, a root that could not take it) gets it back from a buffer, until none is left. */
  for (int changed = 1; changed;) {
    changed = 0;
    for (int k = 0; k < pg->neqns; k++) {
      const kl_eqn *e = &pg->eqns[k];
      if (!kl_eqn_fusible(traits, pg, e) || kl_inline_reads(traits, pg, e) || !m[e->outs[0]] || absorbed[e->outs[0]])
        continue;
      scan_kernel(&rs, pg, k, &stages[k * KL_MAX_STAGES]);
      for (int i = 0; i < rs.ntouched; i++) {
        int v = touched[i];
        if (!absorbed[v] || has_stage(&stages[k * KL_MAX_STAGES], pg->vals[v].producer)) continue;
        absorbed[v] = 0;
        m[v] = 1;
        for (int q = 0; q < pg->neqns * KL_MAX_STAGES; q++)
          if (stages[q] == pg->vals[v].producer) stages[q] = -1;
        changed = 1;
      }
    }
  }
  free(readers);
  free(hits);
  free(count);
  free(lead_of);
  free(seen);
  free(touched);
  free(counted);
  return 0;
}

#define RECOMPUTE_BUDGET 24 /* KILN_RECOMPUTE_BUDGET overrides (experiments) */

static long recompute_budget(void) {
  static long b = -1;
  if (b < 0) {
    const char *e = getenv("KILN_RECOMPUTE_BUDGET");
    b = e && *e ? atol(e) : RECOMPUTE_BUDGET;
  }
  return b;
}
#define EXPR_LIMIT 256

/* Whether consumer e reads its operand v at the element it computes itself: elementwise forms
 * over v's shape (rank-0 operands are read the same everywhere), and reductions (their loop runs
 * over v's shape). */
#define KERNEL_MAX_READS 256

/* The distinct materialized values e's expression reads (through the values not materialized);
 * mark: scratch per value, stamp: a number no other call used. */
static int distinct_reads(const kl_program *pg, const char *m, const kl_eqn *e, int *mark, int stamp, int *stack) {
  int top = 0, n = 0;
  for (int i = 0; i < e->nin; i++)
    if (mark[e->ins[i]] != stamp) mark[e->ins[i]] = stamp, stack[top++] = e->ins[i];
  while (top) {
    int v = stack[--top], p = pg->vals[v].producer;
    if (m[v] || p < 0) {
      n++;
      continue;
    }
    const kl_eqn *q = &pg->eqns[p];
    for (int i = 0; i < q->nin; i++)
      if (mark[q->ins[i]] != stamp) mark[q->ins[i]] = stamp, stack[top++] = q->ins[i];
  }
  return n;
}

static int reads_in_place(const kl_program *pg, const kl_eqn *e, int v) {
  kl_form f = kl_prim_get(e->prim)->form;
  const kl_aval *a = &pg->vals[v].aval;
  if (f == KL_FORM_REDUCE) return 1;
  if (!kl_form_elementwise(f)) return 0;
  return a->ndim == 0 || same_dims(a, pg->vals[e->outs[0]].aval.dims, pg->vals[e->outs[0]].aval.ndim);
}

/* Whether consumer e of v is a row reduction of v (over trailing axes, keeping some). */
static int row_reduction_of(const kl_program *pg, const kl_eqn *e, int v) {
  if (kl_prim_get(e->prim)->form != KL_FORM_REDUCE || e->ins[0] != v) return 0;
  const kl_aval *x = &pg->vals[v].aval;
  const kl_ivec *axes = &e->p.reduce.axes;
  if (x->ndim < 2 || axes->n == 0 || axes->n >= x->ndim) return 0;
  for (int i = 0; i < axes->n; i++)
    if (axes->v[i] < x->ndim - axes->n) return 0; /* not a trailing suffix */
  return 1;
}

/* Whether v is the input of one row reduction and otherwise read in place by a few elementwise
 * consumers, as exp(x - max) is in softmax and in its gradient: row kernels compute it where it
 * is needed (the one absorbing the reduction keeps it for its root: its stash), which costs
 * less than writing and reading a buffer of the rows' size. */
static int row_stashed(const int *uses, const int *row_reads, const int *other_reads, int v) {
  return uses[v] >= 2 && uses[v] <= 4 && row_reads[v] == 1 && other_reads[v] == 0;
}

/* home[v]: the kernel (its root value) that computes v exactly once per element, when there is
 * one: v is materialized (its own home), or every consumer reads v in place and all of them are
 * computed in the same kernel. The kernel's emitter then computes v once and keeps it in a
 * register for all its uses (kk_emit_value memoizes per element), so a value with many consumers
 * costs nothing to leave unmaterialized. -1: v would be computed in several kernels or at several
 * elements (recomputation; the cost rule decides). */
static void plan_homes(const kl_program *pg, const char *m, int *home) {
  for (int v = 0; v < pg->nvals; v++) home[v] = m[v] ? v : -2; /* -2: no consumer seen yet */
  for (int i = 0; i < pg->noutputs; i++) home[pg->outputs[i]] = pg->outputs[i];
  for (int k = pg->neqns - 1; k >= 0; k--) {
    const kl_eqn *e = &pg->eqns[k];
    int h = e->nout == 1 ? home[e->outs[0]] : -1;
    if (e->nout == 1 && kl_prim_get(e->prim)->form == KL_FORM_REDUCE) h = e->outs[0];
    if (h == -2) h = -1; /* a dead value */
    for (int i = 0; i < e->nin; i++) {
      int v = e->ins[i];
      if (m[v]) continue;
      int hv = reads_in_place(pg, e, v) ? h : -1;
      home[v] = home[v] == -2 || home[v] == hv ? hv : -1;
    }
  }
}

int kl_plan_build(const kl_program *pg, kl_plan *plan, const kl_fuse_traits *traits) {
  const char *env = getenv("KILN_DISABLE_FUSION");
  int nofuse = env && env[0] == '1';
  plan->pg = pg;
  plan->buffer_of = NULL; /* set by the compiler afterwards (codegen/compile.c); kl_plan_free frees it */
  plan->nbuffer_of = 0;
  plan->materialized = kl_calloc((size_t)pg->nvals + 1, 1);
  plan->absorbed = kl_calloc((size_t)pg->nvals + 1, 1);
  plan->steps = kl_calloc((size_t)pg->neqns + 1, sizeof *plan->steps);
  int *uses = kl_calloc((size_t)pg->nvals + 1, sizeof(int)), *last = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  int *cost = kl_calloc((size_t)pg->nvals + 1, sizeof(int));
  int *stages = kl_malloc(sizeof(int) * KL_MAX_STAGES * ((size_t)pg->neqns + 1)); /* per root eqn: its row reductions */
  int *home = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  int *row_reads = kl_calloc((size_t)pg->nvals + 1, sizeof(int)); /* per value: row reductions reading it */
  int *other_reads = kl_calloc((size_t)pg->nvals + 1, sizeof(int)); /* ... and consumers not in place */
  if (!plan->materialized || !plan->absorbed || !plan->steps || !uses || !last || !cost || !stages || !home ||
      !row_reads || !other_reads) {
    free(row_reads);
    free(other_reads);
    free(home);
    free(uses);
    free(last);
    free(cost);
    free(stages);
    kl_plan_free(plan);
    return -1;
  }
  plan->nsteps = 0;
  char *m = plan->materialized;
  for (int i = 0; i < pg->ninputs; i++) m[pg->inputs[i]] = 1;
  for (int i = 0; i < pg->noutputs; i++) m[pg->outputs[i]] = 1;
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    kl_form f = kl_prim_get(e->prim)->form;
    if (!traits[e->prim].fuses) {
      /* a small-contraction product is computed inside its consumers (each output element is a
       * few multiply-adds over its operands, which are recomputed there too unless costly) */
      if (!kl_inline_reads(traits, pg, e)) {
        for (int i = 0; i < e->nin; i++) m[e->ins[i]] = 1;
        for (int i = 0; i < e->nout; i++) m[e->outs[i]] = 1;
      }
    }
    if (f == KL_FORM_REDUCE || nofuse)
      for (int i = 0; i < e->nout; i++) m[e->outs[i]] = 1;
  }
  /* Recomputing a value in each consumer is cheap only while the value is cheap: a value read by
   * several consumers (possibly at different indices, as in a stencil) is materialized once its
   * recomputation would cost more than RECOMPUTE_BUDGET extra ops, and any expression grows into
   * a buffer past EXPR_LIMIT ops, so kernels never grow exponentially with the program. */
  for (int v = 0; v < pg->nvals; v++) last[v] = -1;
  for (int k = 0; k < pg->neqns; k++)
    for (int i = 0; i < pg->eqns[k].nin; i++) {
      const kl_eqn *e = &pg->eqns[k];
      int v = e->ins[i];
      if (last[v] == k) continue;
      uses[v]++;
      last[v] = k;
      if (row_reduction_of(pg, e, v)) row_reads[v]++;
      else if (!reads_in_place(pg, e, v) || kl_prim_get(e->prim)->form == KL_FORM_REDUCE) other_reads[v]++;
    }
  /* Values computed once in a single kernel (home >= 0) are never recomputed, whatever their
   * number of uses, and never cut: a DAG of elementwise operations over one shape is one kernel.
   * Materializing a value can give values above it a home, so the decisions repeat (a few
   * rounds; the set of materialized values only grows). A first round (-1) materializes only
   * costly values that every consumer reads other than in place (slices of a threefry split:
   * each would recompute the whole expression), so that the values feeding them in place get
   * their home before the cost rule cuts them one by one. */
  for (int round = -1; round < 4 && !nofuse; round++) {
    plan_homes(pg, m, home);
    int changed = 0;
    memset(cost, 0, sizeof(int) * ((size_t)pg->nvals + 1));
    for (int k = 0; k < pg->neqns; k++) {
      const kl_eqn *e = &pg->eqns[k];
      if (!kl_eqn_fusible(traits, pg, e) || kl_prim_get(e->prim)->form == KL_FORM_REDUCE) continue;
      int small_k = kl_inline_reads(traits, pg, e), reads = small_k ? small_k : 1; /* operand reads per element */
      int c = small_k ? 2 * small_k : traits[e->prim].weight;
      if (e->prim == KL_P_BROADCAST_IN_DIM && pg->vals[e->ins[0]].aval.ndim == 0 &&
          (m[e->ins[0]] || (pg->vals[e->ins[0]].producer >= 0 && pg->eqns[pg->vals[e->ins[0]].producer].prim == KL_P_CONST))) {
        cost[e->outs[0]] = 0; /* a scalar everywhere: free in every consumer, however many (threefry's rotations) */
        continue;
      }
      for (int i = 0; i < e->nin; i++)
        if (!m[e->ins[i]] && home[e->ins[i]] < 0) c += reads * cost[e->ins[i]];
      for (int i = 0; i < e->nout; i++) {
        int v = e->outs[i];
        cost[v] = c > EXPR_LIMIT * 4 ? EXPR_LIMIT * 4 : c;
        if (m[v] || home[v] >= 0) continue;
        if (round < 0 ? uses[v] > 1 && other_reads[v] == uses[v] && (long)c * (uses[v] - 1) > recompute_budget()
                      : c > EXPR_LIMIT || (uses[v] > 1 && (long)c * (uses[v] - 1) > recompute_budget() &&
                                           !row_stashed(uses, row_reads, other_reads, v))) {
          m[v] = 1;
          cost[v] = 0;
          changed = 1;
        }
      }
    }
    if (!changed && round >= 0) break;
  }
  /* A kernel's arguments are bounded (the GPU takes at most 4 KB of kernel parameters): a value
   * whose expression would read more than KERNEL_MAX_READS buffers gets its widest operand
   * materialized, until it reads few enough. cost[] counts reads here: the sum over operands, an
   * upper bound, recounted exactly (distinct buffers) when it passes the limit. */
  if (!nofuse) {
    int *mark = kl_calloc((size_t)pg->nvals + 1, sizeof(int)), *stack = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
    int stamp = 0;
    for (int k = 0; mark && stack && k < pg->neqns; k++) {
      const kl_eqn *e = &pg->eqns[k];
      int reads = 0;
      for (int i = 0; i < e->nin; i++) reads += m[e->ins[i]] ? 1 : cost[e->ins[i]];
      if (reads > KERNEL_MAX_READS) reads = distinct_reads(pg, m, e, mark, ++stamp, stack);
      while (reads > KERNEL_MAX_READS) {
        int widest = -1;
        for (int i = 0; i < e->nin; i++)
          if (!m[e->ins[i]] && (widest < 0 || cost[e->ins[i]] > cost[widest])) widest = e->ins[i];
        if (widest < 0) break; /* reads of materialized values alone: the equation's own operands */
        m[widest] = 1;
        reads = distinct_reads(pg, m, e, mark, ++stamp, stack);
      }
      for (int i = 0; i < e->nout; i++) cost[e->outs[i]] = m[e->outs[i]] ? 1 : reads;
    }
    free(mark);
    free(stack);
  }
  if (getenv("KILN_DEBUG_PLAN"))
    for (int v = 0; v < pg->nvals; v++)
      if (m[v] && pg->vals[v].producer >= 0)
        fprintf(stderr, "plan: v%d %s uses %d cost %d home %d\n", v, kl_prim_get(pg->eqns[pg->vals[v].producer].prim)->name,
                uses[v], cost[v], home[v]);
  free(home);
  free(row_reads);
  free(other_reads);
  free(uses);
  free(last);
  free(cost);
  for (int k = 0; k < pg->neqns * KL_MAX_STAGES; k++) stages[k] = -1;
  if (!nofuse && plan_rows(traits, pg, m, plan->absorbed, stages)) {
    memset(plan->absorbed, 0, (size_t)pg->nvals + 1); /* no row kernels: nothing absorbed */
    for (int k = 0; k < pg->neqns * KL_MAX_STAGES; k++) stages[k] = -1;
  }
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    if (!kl_eqn_fusible(traits, pg, e)) {
      plan->steps[plan->nsteps++] = (kl_plan_step){KL_STEP_LIB, k, -1, 0, {0}, 0};
    } else if (m[e->outs[0]] && !plan->absorbed[e->outs[0]]) {
      kl_plan_step st = {KL_STEP_KERNEL, k, e->outs[0], 0, {0}, 0};
      for (int j = 0; j < KL_MAX_STAGES; j++) /* the root's reductions, in program order */
        if (stages[k * KL_MAX_STAGES + j] >= 0) st.stages[st.nstages++] = stages[k * KL_MAX_STAGES + j];
      qsort(st.stages, (size_t)st.nstages, sizeof(int), cmp_int);
      for (int j = 0; j < st.nstages; j++) {
        const kl_ivec *axes = &pg->eqns[st.stages[j]].p.reduce.axes;
        st.row_axis = (int)axes->v[0];
        for (int i = 1; i < axes->n; i++)
          if (axes->v[i] < st.row_axis) st.row_axis = (int)axes->v[i];
      }
      plan->steps[plan->nsteps++] = st;
    }
  }
  free(stages);
  return 0;
}

void kl_plan_free(kl_plan *plan) {
  free(plan->materialized);
  free(plan->absorbed);
  free(plan->steps);
  free(plan->buffer_of);
  memset(plan, 0, sizeof *plan);
}
