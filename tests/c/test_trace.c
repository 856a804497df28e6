/* test_trace.c: unit tests of the trace state (tracer/): nesting and levels, binding to the
 * innermost trace, lifting outer values and constants (deduplicated by the client's key),
 * literal deduplication, leak detection (values of ended traces) and the concrete-value hook.
 * Usage: test_trace   (exit status 0 on success) */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../tracer/trace.h"

#include "check.h"

static kl_aval vec(kl_dtype t, int64_t n) {
  kl_aval a;
  memset(&a, 0, sizeof a);
  a.dtype = t;
  a.ndim = 1;
  a.dims[0] = n;
  return a;
}

static kl_operand val(kl_trace *t, int vid, uintptr_t key) {
  kl_operand o = {t, vid, NULL, key, NULL};
  return o;
}

static int bind2(kl_prim prim, kl_operand a, kl_operand b, kl_trace **into, int *out, int *bad) {
  kl_operand ins[2] = {a, b};
  kl_params p;
  kl_params_init(&p, prim);
  int outs[KL_MAX_OUTS], nout = 0, computed;
  char err[256];
  *bad = -1;
  int rc = kl_trace_bind(prim, &p, ins, 2, into, outs, &nout, &computed, bad, err, sizeof err);
  if (rc == KL_TRACE_OK) *out = outs[0];
  return rc;
}

static void test_nesting_and_lifting(void) {
  kl_trace_stack *s = kl_trace_stack_new();
  CHECK(kl_trace_depth(s) == 0 && kl_trace_current(s) == NULL, "empty stack");
  kl_trace *outer = kl_trace_push(s, 0);
  kl_trace *inner = kl_trace_push(s, 0);
  CHECK(kl_trace_level(outer) == 0 && kl_trace_level(inner) == 1, "levels 0 and 1");
  CHECK(kl_trace_current(s) == inner && kl_trace_depth(s) == 2, "inner is current");
  CHECK(kl_trace_pop(s, outer) == -1, "popping a trace that is not innermost is refused");

  kl_aval a = vec(KL_F32, 4);
  int x = kl_trace_new_input(outer, &a), y = kl_trace_new_input(inner, &a);
  kl_trace *into = NULL;
  int out = -1, bad;
  /* inner value + outer value: recorded in the inner trace, the outer value lifted once */
  CHECK(bind2(KL_P_ADD, val(inner, y, 1), val(outer, x, 2), &into, &out, &bad) == KL_TRACE_OK, "bind");
  CHECK(into == inner, "recorded into the innermost trace");
  CHECK(kl_trace_num_lifted(inner) == 1 && kl_trace_lifted_key(inner, 0) == 2, "outer value lifted, key kept");
  int out2;
  CHECK(bind2(KL_P_MUL, val(outer, x, 2), val(inner, out, 3), &into, &out2, &bad) == KL_TRACE_OK, "bind 2");
  CHECK(kl_trace_num_lifted(inner) == 1, "a second use of the same outer object is not lifted again");
  CHECK(kl_trace_program(inner)->ninputs == 2 && kl_trace_program(inner)->neqns == 2, "2 inputs, 2 equations");

  /* a constant: lifted with the aval the client gives, deduplicated by key */
  kl_aval c = vec(KL_F32, 4);
  kl_operand k = {NULL, 0, &c, 77, NULL};
  CHECK(bind2(KL_P_SUB, val(inner, y, 1), k, &into, &out2, &bad) == KL_TRACE_OK, "bind with a constant");
  CHECK(bind2(KL_P_SUB, k, val(inner, y, 1), &into, &out2, &bad) == KL_TRACE_OK, "bind with a constant again");
  CHECK(kl_trace_num_lifted(inner) == 2 && kl_trace_lifted_key(inner, 1) == 77, "constant lifted once");
  kl_operand notarray = {NULL, 0, NULL, 78, NULL};
  CHECK(bind2(KL_P_SUB, val(inner, y, 1), notarray, &into, &out2, &bad) == KL_TRACE_BAD_OPERAND && bad == 1,
        "an operand without aval cannot be lifted");
  CHECK(bind2(KL_P_SUB, k, k, &into, &out2, &bad) == KL_TRACE_NO_TRACE, "only constants: no trace");

  /* a shape error leaves a message */
  kl_aval b = vec(KL_F32, 5);
  int z = kl_trace_new_input(inner, &b);
  CHECK(bind2(KL_P_ADD, val(inner, y, 1), val(inner, z, 4), &into, &out2, &bad) == KL_TRACE_RULE_ERROR, "shapes");

  /* leak detection: after the inner trace ends its values are refused */
  CHECK(kl_trace_pop(s, inner) == 0 && !kl_trace_alive(inner), "inner ended");
  CHECK(kl_trace_current(s) == outer, "outer is current again");
  CHECK(bind2(KL_P_ADD, val(outer, x, 2), val(inner, y, 1), &into, &out2, &bad) == KL_TRACE_DEAD && bad == 1,
        "a value of an ended trace is refused, its operand named");
  int v;
  kl_operand leaked = val(inner, y, 1);
  CHECK(kl_trace_vid_of(outer, &leaked, &v) == KL_TRACE_DEAD, "vid_of a leaked value");
  kl_trace *again = kl_trace_push(s, 0);
  CHECK(kl_trace_level(again) == 1, "a new trace takes the freed level");
  CHECK(kl_trace_pop(s, again) == 0, "pop");

  /* the program can be taken; the trace then refuses equations */
  kl_program *pg = kl_trace_take_program(inner);
  CHECK(pg && pg->neqns == 4, "taken program has the 4 recorded equations (got %d)", pg ? pg->neqns : -1);
  CHECK(kl_trace_literal(inner, KL_F32, 1, 0, 2.0, 0.0, &v, NULL, 0) == KL_TRACE_DEAD, "no literal into a taken trace");
  kl_program_free(pg);
  kl_trace_release(inner);
  kl_trace_release(again);
  kl_trace_pop(s, outer);
  kl_trace_release(outer);
  kl_trace_stack_free(s);
}

static void test_literals(void) {
  kl_trace_stack *s = kl_trace_stack_new();
  kl_trace *t = kl_trace_push(s, 0);
  char err[256];
  int a, b, c, d, e, f;
  CHECK(kl_trace_literal(t, KL_F32, 1, 0, 2.0, 0.0, &a, err, sizeof err) == KL_TRACE_OK, "literal");
  kl_trace_literal(t, KL_F32, 1, 0, 2.0, 0.0, &b, err, sizeof err);
  kl_trace_literal(t, KL_F32, 0, 0, 2.0, 0.0, &c, err, sizeof err);
  kl_trace_literal(t, KL_F32, 1, 0, -0.0, 0.0, &d, err, sizeof err);
  kl_trace_literal(t, KL_F32, 1, 0, 0.0, 0.0, &e, err, sizeof err);
  kl_trace_literal(t, KL_I32, 1, 2, 0.0, 0.0, &f, err, sizeof err);
  CHECK(a == b, "the same literal is reused");
  CHECK(a != c, "weak and strong literals differ");
  CHECK(d != e, "0.0 and -0.0 differ");
  CHECK(f != a, "int 2 and float 2.0 differ");
  CHECK(kl_trace_program(t)->neqns == 5, "5 literal equations (got %d)", kl_trace_program(t)->neqns);
  kl_trace_pop(s, t);
  kl_trace_release(t);
  kl_trace_stack_free(s);
}

/* The hook of test_concrete: "computes" a value as the sum of the operands' numbers. */
typedef struct {
  int calls;
  double last;
} hook_ctx;

static int sum_hook(void *ctx, const kl_trace_eqn *e) {
  hook_ctx *h = ctx;
  h->calls++;
  h->last = 0;
  for (int i = 0; i < e->nin; i++) h->last += *(const double *)e->ins[i].value;
  return e->nout == 1 ? 0 : -1;
}

static void test_concrete(void) {
  kl_trace_stack *s = kl_trace_stack_new();
  hook_ctx h = {0, 0};
  kl_trace_stack_set_value_hook(s, sum_hook, &h);
  kl_trace *abstract = kl_trace_push(s, 0);
  kl_trace *t = kl_trace_push(s, 1);
  CHECK(kl_trace_is_concrete(t) && !kl_trace_is_concrete(abstract), "concrete flag");
  kl_aval a = vec(KL_F32, 3);
  double one = 1, two = 2;
  int x = kl_trace_new_input(t, &a), y = kl_trace_new_input(t, &a), w = kl_trace_new_input(abstract, &a);
  kl_operand ins[2] = {{t, x, NULL, 1, &one}, {t, y, NULL, 2, &two}};
  kl_params p;
  kl_params_init(&p, KL_P_ADD);
  kl_trace *into;
  int outs[KL_MAX_OUTS], nout, computed, bad;
  char err[256];
  CHECK(kl_trace_bind(KL_P_ADD, &p, ins, 2, &into, outs, &nout, &computed, &bad, err, sizeof err) == 0,
        "bind");
  CHECK(computed && h.calls == 1 && h.last == 3, "the hook computed the value");
  ins[1] = (kl_operand){abstract, w, NULL, 3, NULL};
  CHECK(kl_trace_bind(KL_P_ADD, &p, ins, 2, &into, outs, &nout, &computed, &bad, err, sizeof err) == 0,
        "bind with an abstract outer value");
  CHECK(!computed && h.calls == 1, "no value without values of every operand");
  kl_trace_pop(s, t);
  kl_trace_pop(s, abstract);
  kl_trace_release(t);
  kl_trace_release(abstract);
  kl_trace_stack_free(s);
}

int main(void) {
  test_nesting_and_lifting();
  test_literals();
  test_concrete();
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures != 0;
}
