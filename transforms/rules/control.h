/* control.h: what the control family's rule files share (control.c: forward mode, batching, the
 * table; control_reverse.c: reverse mode). Private to transforms/rules/. */
#ifndef KL_RULES_CONTROL_H
#define KL_RULES_CONTROL_H
#include "rules.h"

/* The operand split of a scan: consts, carries, xs (the body's inputs in that order); its results
 * are the carries then the ys. */
typedef struct {
  int nk, n, nx, ny;
} scan_split;

static inline scan_split split_of(const kl_eqn *e) {
  const int64_t *c = e->p.scan.counts.v;
  scan_split s = {(int)c[0], (int)c[1], (int)c[2], 0};
  s.ny = e->nout - s.n;
  return s;
}

/* The operand split of a cond: the predicate, then false consts, true consts, operands. */
typedef struct {
  int nf, nt, no;
} cond_split;

static inline cond_split cond_split_of(const kl_eqn *e) {
  const int64_t *c = e->p.cond.counts.v;
  return (cond_split){(int)c[0], (int)c[1], (int)c[2]};
}

/* Operand index (in e) of branch b's input i: its program takes (operands, own consts). */
static inline int branch_operand(cond_split s, int b, int i) {
  if (i < s.no) return 1 + s.nf + s.nt + i;
  return 1 + (b ? s.nf : 0) + (i - s.no);
}

/* Emits a scan of e's kind (length and direction from e; the direction flipped with `flip`)
 * over body with the given counts; the results go to res. Returns the number of results, or -1. */
int kl_ctl_emit_scan(kl_build *a, const kl_eqn *e, kl_program *body, int nk, int n, int nx, const int *ops, int flip,
                     int *res);
/* The JVP of a scan body into in's fresh program (control.c says its layout); the counts of the
 * new scan go to k3. 0 or -1. */
int kl_ctl_jvp_body(kl_build *in, const kl_program *body, scan_split s, const char *tc, const char *has, const char *tx,
                    char *yt, int64_t *k3);

/* ---- reverse mode (control_reverse.c) ---- */
/* JVP rules for reverse mode (the builder's remat set): the equations split into primal and linear ones. */
int kl_ctl_while_jvp_reverse(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts);
int kl_ctl_scan_jvp_reverse(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts);
/* Transpose rules (whole equations), and while_bwd's JVP (refused) and batching rules. */
int kl_ctl_while_lin_transpose(kl_tctx *c, const kl_eqn *e, int operand, int ct);
int kl_ctl_scan_transpose(kl_tctx *c, const kl_eqn *e, int operand, int ct);
int kl_ctl_cond_transpose(kl_tctx *c, const kl_eqn *e, int operand, int ct);
int kl_ctl_while_bwd_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts);
int kl_ctl_while_bwd_batch(kl_build *b, rule_args *r);
#endif
