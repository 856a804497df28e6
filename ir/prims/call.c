/* call.c: the call family's params and shape rule: equations that own sub-programs and call
 * them: checkpoint (a body recomputed in the backward pass), custom_jvp_call (a function and its
 * JVP rule), custom_vjp_call / custom_vjp_lin (a function's outputs and its backward rule),
 * custom_vmap_call (a function whose batching rule is the user's: vmap asks for it by handle).
 * Depends only on ir/. */
#include "../program.h"
#include "prims.h"

const kl_param_field kl_fields_custom_vjp[] = {KL_FIELD(custom_vjp, counts, IVEC), KL_FIELD(custom_vjp, bwd, PROGRAM),
                                               {NULL, 0, 0}};
const kl_param_field kl_fields_custom_jvp[] = {KL_FIELD(custom_jvp, counts, IVEC), KL_FIELD(custom_jvp, fun, PROGRAM),
                                               KL_FIELD(custom_jvp, jvp, PROGRAM), {NULL, 0, 0}};
const kl_param_field kl_fields_custom_vmap[] = {KL_FIELD(custom_vmap, body, PROGRAM), KL_FIELD(custom_vmap, rule, INT),
                                                {NULL, 0, 0}};
const kl_param_field kl_fields_checkpoint[] = {KL_FIELD(checkpoint, body, PROGRAM), KL_FIELD(checkpoint, policy, INT32),
                                               KL_FIELD(checkpoint, names, IVEC),
                                               KL_FIELD(checkpoint, prevent_cse, INT32), {NULL, 0, 0}};

/* custom_vjp_call, custom_vjp_lin. Operands: outputs (or their templates) n_out, residuals n_res,
 * consts n_c, inputs n_x; results: the first n_out operands' avals (custom_vjp_call passes them
 * through). */
static int rule_custom_vjp(kl_rule_err *e, const char *name, const kl_aval *ins, int nin, const kl_params *p,
                           kl_aval *outs, int *nout) {
  const kl_ivec *c = &p->custom_vjp.counts;
  if (c->n != 4) return kl_rule_fail(e, KL_ERR_VALUE, "%s: counts must be (n_out, n_res, n_consts, n_x)", name);
  int64_t n_out = c->v[0], total = c->v[0] + c->v[1] + c->v[2] + c->v[3];
  if (n_out < 1 || n_out > KL_MAX_OUTS || total != nin)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: %lld outputs (at most %d) and %d operands do not match the counts", name,
                        (long long)n_out, KL_MAX_OUTS, nin);
  if (!p->custom_vjp.bwd) return kl_rule_fail(e, KL_ERR_VALUE, "%s: no backward program", name);
  for (int i = 0; i < n_out; i++) outs[i] = ins[i];
  *nout = (int)n_out;
  return 0;
}

/* checkpoint, custom_vmap_call, custom_jvp_call: the operands are the body's inputs (checkpoint, custom_vmap_call) or its leading
 * inputs (a custom_jvp function, whose rule takes the same inputs, their tangents and its own
 * consts); the results are the body's outputs. */
static int rule_body_call(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p,
                          kl_aval *outs, int *nout) {
  const char *name = kl_prim_get(prim)->name;
  char b1[160], b2[160];
  const kl_program *body = prim == KL_P_CHECKPOINT         ? p->checkpoint.body
                           : prim == KL_P_CUSTOM_VMAP_CALL ? p->custom_vmap.body
                                                           : p->custom_jvp.fun;
  int64_t n_body = nin;
  if (prim == KL_P_CUSTOM_JVP_CALL) {
    const kl_ivec *c = &p->custom_jvp.counts;
    if (c->n != 3 || c->v[0] + c->v[1] + c->v[2] != nin)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: counts must be (n_x, n_fun_consts, n_rule_consts) summing to %d operands", name, nin);
    n_body = c->v[0] + c->v[1];
    const kl_program *rule = p->custom_jvp.jvp;
    if (!rule || !body || rule->ninputs != 2 * c->v[0] + c->v[2] || rule->noutputs != 2 * body->noutputs)
      return kl_rule_fail(e, KL_ERR_VALUE, "%s: the jvp rule program does not match its function", name);
  }
  if (!body || body->ninputs != n_body)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: body program missing or taking %d inputs, not %lld", name,
                        body ? body->ninputs : -1, (long long)n_body);
  if (body->noutputs > KL_MAX_OUTS)
    return kl_rule_fail(e, KL_ERR_VALUE, "%s: %d results (at most %d)", name, body->noutputs, KL_MAX_OUTS);
  for (int64_t i = 0; i < n_body; i++) {
    const kl_aval *want = &body->vals[body->inputs[i]].aval;
    if (want->dtype != ins[i].dtype || !kl_rule_same_shape(want, &ins[i]))
      return kl_rule_fail(e, KL_ERR_TYPE, "%s: operand %lld is %s, the body expects %s", name, (long long)i,
                          kl_rule_shape_str(&ins[i], b1, sizeof b1), kl_rule_shape_str(want, b2, sizeof b2));
  }
  for (int i = 0; i < body->noutputs; i++) outs[i] = body->vals[body->outputs[i]].aval;
  *nout = body->noutputs;
  return 0;
}

int kl_infer_call(kl_rule_err *e, kl_prim prim, const kl_aval *ins, int nin, const kl_params *p, kl_aval *outs,
                  int *nout) {
  if (prim == KL_P_CUSTOM_VJP_CALL || prim == KL_P_CUSTOM_VJP_LIN)
    return rule_custom_vjp(e, kl_prim_get(prim)->name, ins, nin, p, outs, nout);
  return rule_body_call(e, prim, ins, nin, p, outs, nout);
}
