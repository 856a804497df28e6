/* test_rule_matrix.c: prints the primitive x rule matrix (shape rule, JVP, transpose where the
 * primitive is linear, batching, CPU lowering, GPU lowering, and the legalize rules code
 * generation applies first where a primitive has one) from the rule tables of
 * transforms/rules/ and codegen/lower/, and fails on a hole that is not listed below as
 * deliberately unsupported. A new primitive shows up here with its holes the day it is added.
 * Legend: y = a rule; - = not applicable; X = a hole (a failure unless listed);
 *         x = a listed, deliberate hole; GPU: L a GPU library (cuBLAS; small instances may fuse),
 *         K kiln's own kernels, h a host routine over copies. */
#include <string.h>

#include "../../codegen/lower/lower.h"
#include "../../transforms/rules/rules.h"
#include "check.h"

/* Primitives linear in (some of) their operands: reverse mode needs their transpose rule. */
static const kl_prim linear[] = {
    KL_P_NEG,         KL_P_ADD,        KL_P_SUB,         KL_P_MUL,           KL_P_DIV,
    KL_P_CONVERT,     KL_P_SELECT_N,   KL_P_REDUCE_SUM,  KL_P_BROADCAST_IN_DIM, KL_P_RESHAPE,
    KL_P_TRANSPOSE,   KL_P_REV,        KL_P_SLICE,       KL_P_PAD,           KL_P_CONCATENATE,
    KL_P_DOT_GENERAL, KL_P_CUMSUM,     KL_P_DYNAMIC_SLICE, KL_P_DYNAMIC_UPDATE_SLICE, KL_P_TAKE,
    KL_P_SCATTER,     KL_P_TRIANGULAR_SOLVE, KL_P_CUSTOM_VJP_LIN, KL_P_REAL, KL_P_IMAG,
    KL_P_CONJ,        KL_P_COMPLEX,    KL_P_FFT,         KL_P_CONV,          KL_P_CONV_BWD_DATA,
    KL_P_CONV_BWD_FILTER, KL_P_PSUM,     KL_P_ALL_GATHER,  KL_P_REDUCE_SCATTER, KL_P_PPERMUTE,
    KL_P_ALL_TO_ALL,  KL_P_PVARY,
};

/* Deliberate holes, each with its reason (the error it gives is a NotImplementedError). */
static const struct {
  kl_prim prim;
  const char *column;
  const char *why;
} deliberate[] = {
    {KL_P_CUSTOM_VJP_LIN, "cpu", "forward mode through custom_vjp is refused, as in JAX"},
    {KL_P_CUSTOM_VJP_LIN, "gpu", "forward mode through custom_vjp is refused, as in JAX"},
    {KL_P_CUSTOM_VJP_LIN, "batch", "forward mode through custom_vjp is refused, as in JAX"},
    {KL_P_WHILE_LIN, "jvp", "exists only between reverse mode's JVP and transpose passes"},
    {KL_P_WHILE_LIN, "batch", "exists only between reverse mode's JVP and transpose passes"},
    {KL_P_WHILE_LIN, "cpu", "exists only between reverse mode's JVP and transpose passes"},
    {KL_P_WHILE_LIN, "gpu", "exists only between reverse mode's JVP and transpose passes"},
    {KL_P_SCHUR, "jvp", "not differentiable, as in JAX"},
#define SPLIT "complex values become pairs of real ones before code generation (transforms/complex.c)"
    {KL_P_REAL, "cpu", SPLIT}, {KL_P_REAL, "gpu", SPLIT}, {KL_P_IMAG, "cpu", SPLIT}, {KL_P_IMAG, "gpu", SPLIT},
    {KL_P_CONJ, "cpu", SPLIT}, {KL_P_CONJ, "gpu", SPLIT}, {KL_P_COMPLEX, "cpu", SPLIT}, {KL_P_COMPLEX, "gpu", SPLIT},
#undef SPLIT
#define VJP "differentiated through the custom_vjp python/kiln/nn/attention.py wraps it in (as JAX's cuDNN attention)"
    {KL_P_ATTENTION, "jvp", VJP}, {KL_P_ATTENTION_BWD, "jvp", VJP},
#undef VJP
    {KL_P_PVARY, "cpu", "the identity on values: legalize drops it before code generation"},
    {KL_P_PVARY, "gpu", "the identity on values: legalize drops it before code generation"},
};

static int is_linear(kl_prim p) {
  for (size_t i = 0; i < sizeof linear / sizeof linear[0]; i++)
    if (linear[i] == p) return 1;
  return 0;
}

static int is_deliberate(kl_prim p, const char *column) {
  for (size_t i = 0; i < sizeof deliberate / sizeof deliberate[0]; i++)
    if (deliberate[i].prim == p && !strcmp(deliberate[i].column, column)) return 1;
  return 0;
}

/* One cell: prints its mark, counts a failure for an unlisted hole. */
static void cell(kl_prim p, const char *column, int applicable, char have) {
  char mark = !applicable ? '-' : have ? have : is_deliberate(p, column) ? 'x' : 'X';
  printf(" %6c", mark);
  CHECK(mark != 'X', "%s has no %s rule (add it to its family's files, or list it as deliberate here)",
        kl_prim_get(p)->name, column);
}

int main(void) {
  printf("%-24s %-12s %6s %6s %6s %6s %6s %6s %6s\n", "primitive", "family", "shape", "jvp", "trans", "batch", "cpu",
         "gpu", "legal");
  for (int i = 0; i < KL_NPRIMS; i++) {
    kl_prim p = (kl_prim)i;
    const kl_prim_info *pi = kl_prim_get(p);
    const kl_rule_row *r = kl_rule_get(p);
    const kl_lowering *l = kl_lower_get(p);
    int no_operands = pi->form == KL_FORM_CONST || pi->form == KL_FORM_IOTA;
    int inlined = r->inline_call != NULL; /* call equations become their bodies before codegen */
    int kernel_side = (l->scalar || l->reduce) && !l->unsupported;
    int host = (l->cpu_lib || l->loop) && !l->unsupported; /* a row that only names its error lowers nothing */
    printf("%-24s %-12s", pi->name, kl_family_name(pi->family));
    cell(p, "shape", 1, 'y'); /* every family has its rule (ir/prims/<family>.c) */
    cell(p, "jvp", 1, r->jvp ? 'y' : 0);
    cell(p, "transpose", is_linear(p), r->transpose ? 'y' : 0);
    cell(p, "batch", !no_operands, r->batch ? 'y' : 0);
    cell(p, "cpu", !inlined, kernel_side || host ? 'y' : 0);
    cell(p, "gpu", !inlined, l->gpu_library ? 'L' : kernel_side || l->gpu_kernel ? 'K' : host ? 'h' : 0);
    cell(p, "legalize", r->legalize != NULL, 'y'); /* optional: only primitives whose lowering needs a form */
    printf("\n");
  }
  for (size_t i = 0; i < sizeof deliberate / sizeof deliberate[0]; i++)
    printf("deliberate: %s %s: %s\n", kl_prim_get(deliberate[i].prim)->name, deliberate[i].column, deliberate[i].why);
  if (!failures) printf("test_rule_matrix: ok\n");
  return failures != 0;
}
