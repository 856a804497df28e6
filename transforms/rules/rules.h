/* rules.h: the transformation rules of one primitive (JVP, transpose, batching, simplify, inline)
 * as one table row, and the shorthands the family files (transforms/rules/<family>.c) share. The
 * drivers (jvp.c, transpose.c, vmap.c, simplify.c, inline.c, legalize.c) look a row up with kl_rule_get. Private to transforms/; depends only on ir/. */
#ifndef KL_RULES_H
#define KL_RULES_H
#include "../ad.h"
#include "../batch_build.h"
#include "../simplify.h"
#include "../transpose.h"

/* JVP rule: writes the tangents of e's outputs into touts (preset to -1, a zero tangent).
 * xs: e's operands in the new program, ts: their tangents (-1 = zero), ys: e's results, already
 * emitted by the driver; a rule of the call family emits the call's replacement itself and
 * writes ys. Called only when some operand has a tangent and (for one output) the result is
 * floating. Returns 0, or -1 with a message in a. */
typedef int (*kl_jvp_rule)(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts);
/* Transpose rule of a linear primitive: the cotangent of operand `operand` given the output
 * cotangent ct (-1 with a message on failure). A call-family rule is called once per equation with
 * operand -1 and ct -1, and accumulates the operands' cotangents itself (returns 0 or -1). */
typedef int (*kl_transpose_rule)(kl_tctx *c, const kl_eqn *e, int operand, int ct);
/* Batching rule: writes e->nout batched results (batch axis 0) into r->ys; 0, or -1 with a
 * message in b. Called only when some operand is batched. */
typedef int (*kl_batch_rule)(kl_build *b, rule_args *r);
/* Simplify rule: looks at e (one output, operands already redirected) and returns what it did
 * (KL_SIMP_KEEP, _REDIRECTED, _REWRITTEN; simplify.h). Exact: the result stays bit-identical. */
typedef int (*kl_simplify_rule)(kl_simp *s, kl_eqn *e);
/* Inline rule of a call primitive: what code generation replaces the call by. Sets *body to the
 * program to inline on the call's operands, or to NULL when the call's outputs are its first
 * operands; returns 0, or -1 when the body is missing. */
typedef int (*kl_inline_rule)(const kl_eqn *e, const kl_program **body);
/* Legalize rule (the compiler's legalize pass, transforms/legalize.c): puts e in the form its
 * lowering takes. xs: e's operands in the new program. Returns 0 when e is fine as it is (the
 * driver copies it), 1 after emitting its replacement with b and writing its results to ys, or
 * -1 with a message in b. */
typedef int (*kl_legalize_rule)(kl_build *b, const kl_eqn *e, const int *xs, int *ys);

/* One primitive's rules; a NULL rule is "not supported yet". */
typedef struct {
  kl_prim prim;
  kl_jvp_rule jvp;
  kl_transpose_rule transpose;
  kl_batch_rule batch;
  kl_simplify_rule simplify;
  kl_inline_rule inline_call;
  kl_legalize_rule legalize;
} kl_rule_row;

/* The family tables, each ending with KL_RULES_END. */
#define KL_RULES_END {KL_NPRIMS, NULL, NULL, NULL, NULL, NULL, NULL}
extern const kl_rule_row kl_rules_elementwise[], kl_rules_shape[], kl_rules_reduce[], kl_rules_cumulative[],
    kl_rules_sort[], kl_rules_index[], kl_rules_dot[], kl_rules_linalg[], kl_rules_fft[], kl_rules_conv[], kl_rules_attention[], kl_rules_callback[], kl_rules_call[],
    kl_rules_control[], kl_rules_collective[];

/* The row of p (borrowed, static); every field but prim is NULL for a primitive without rules. */
const kl_rule_row *kl_rule_get(kl_prim p);

/* The uniform messages of a missing rule ("differentiation of <prim> is not supported yet by
 * kiln", ...); each returns -1. */
int kl_jvp_unsupported(kl_build *a, const kl_eqn *e);
int kl_transpose_unsupported(kl_tctx *c, const kl_eqn *e);
int kl_batch_unsupported(kl_build *b, const kl_eqn *e);

/* JVP rule of primitives whose tangent is zero (integer-valued or piecewise constant). */
int kl_jvp_zero(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts);
/* Coefficients (da, db) of a binary elementwise primitive at (x, y) with result out; 0, or -2 if
 * there is none (elementwise.c; the scans of cumulative.c reuse them). */
int kl_jvp_binary_coefs(kl_build *a, kl_prim p, int x, int y, int out, int *da, int *db);

/* What the call family's rules run again (jvp.c): the JVP of pg's equations into a->pg, pmap/tmap
 * mapping pg's values to primal/tangent values (-1: none); fwd (optional): a checkpoint body's
 * forward values, reused for the equations `policy` (the checkpoint's params, or NULL) saves
 * (behind a barrier if `barrier`). 0 or -1. */
int kl_jvp_eqns(kl_build *a, const kl_program *pg, int *pmap, int *tmap, const int *fwd, const kl_params *policy,
                int barrier);
int *kl_jvp_new_map(const kl_program *pg); /* per value of pg: -1; owned by the caller */

/* ---- what the rules of equations with bodies share (call.c, control.c) ---- */
/* Copies src's equations into b's program, src's inputs being the values ins; its outputs' values
 * go to outs. 0, or -1 (b failed). */
int kl_splice(kl_build *b, const kl_program *src, const int *ins, int *outs);
/* Batches the body `sub` with input i batched (at axis 0) where in_b[i]; its output i comes back
 * batched where want[i] is 1 and unbatched where it is 0 (summed over the batch if it depended
 * on it: the cotangent of an input shared by all examples). Returns the batched program (owned),
 * or NULL with a message. */
kl_program *kl_batch_subprog(kl_build *b, const kl_program *sub, const char *in_b, const char *want);
/* Which outputs of `sub` depend on the batch when input i is batched where in_b[i]: ob[i] (one per
 * output). 0, or -1 (b failed). */
int kl_batch_out_flags(kl_build *b, const kl_program *sub, const char *in_b, char *ob);
/* The batched carries of a loop: carries[i] (in/out, n of them) grown to a fixed point of `body`,
 * whose inputs are laid out as in_b (carries at [at, at + n), the rest set by the caller) and whose
 * outputs begin with the n new carries. 0, or -1 (b failed). */
int kl_batch_carries(kl_build *b, const kl_program *body, char *in_b, int at, int n, char *carries);
/* Splices into in's program the VJP of `body` with respect to the inputs `wants` marks: prim[i] the
 * value of body input i (zeros will do for a linear body's linear inputs), ct[j] the cotangent of
 * output j (-1: a symbolic zero); cts[i] receives each wanted input's cotangent (-1 elsewhere).
 * 0, or -1 (in failed). (control_reverse.c) */
int kl_splice_vjp(kl_build *in, const kl_program *body, const char *wants, const int *prim, const int *ct, int *cts);
/* Equations with bodies (call and control families) take their JVP and transpose rules whole:
 * the rule sees every operand at once and emits the equation's replacement itself. */
static inline int kl_rule_whole(kl_prim p) {
  kl_family f = kl_prim_get(p)->family;
  return f == KL_FAM_CALL || f == KL_FAM_CONTROL;
}

/* ---- JVP shorthands: value ids of a->pg in and out, -1 once the builder failed ---- */
/* carries a tangent: real floating or complex */
static inline int is_float_val(kl_build *a, int v) { return v >= 0 && kl_dtype_is_inexact(kl_build_aval(a, v)->dtype); }
/* t broadcast up to the shape of `like` when t is rank-0 and like is not. */
static inline int fit(kl_build *a, int t, int like) { return kl_ad_broadcast_like(a, t, like); }
static inline int lit(kl_build *a, double v, int like) { return kl_build_lit(a, v, kl_build_aval(a, like)->dtype); }
static inline int mul(kl_build *a, int x, int y) { return kl_build_bin(a, KL_P_MUL, x, y); }
static inline int dv(kl_build *a, int x, int y) { return kl_build_bin(a, KL_P_DIV, x, y); }
static inline int sub(kl_build *a, int x, int y) { return kl_build_bin(a, KL_P_SUB, x, y); }
static inline int add(kl_build *a, int x, int y) { return kl_build_bin(a, KL_P_ADD, x, y); }
static inline int un(kl_build *a, kl_prim p, int x) { return kl_build_un(a, p, x); }
static inline int sq(kl_build *a, int x) { return mul(a, x, x); }
/* t * d, where d is a primal coefficient (or -1 for zero tangent). */
static inline int scale(kl_build *a, int t, int d) { return t < 0 ? -1 : mul(a, t, d); }
static inline int zeros_like(kl_build *a, int v) {
  kl_aval l = *kl_build_aval(a, v);
  return kl_build_zeros(a, &l);
}
/* e's primitive with e's params on other operands (the tangents of a linear primitive). */
static inline int same_prim(kl_build *a, const kl_eqn *e, int *ins, int nin) {
  int o[KL_MAX_OUTS];
  return kl_build_emit(a, e->prim, ins, nin, &e->p, o) < 0 ? -1 : o[0];
}
#endif
