/* call.c: lowering of the call family. checkpoint and custom_jvp_call are inlined before
 * codegen; custom_vjp_call passes its forward outputs through, custom_vjp_lin (forward mode
 * of a custom_vjp function) is an error at run time, as in JAX. Depends on lower.h only. */
#include <stdio.h>
#include <string.h>

#include "lower.h"

static int cpu_vjp_call(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  (void)err, (void)errlen;
  for (int i = 0; i < c->nout; i++)
    memcpy(ptrs[c->nin + i], ptrs[i], kl_dtype_size(c->avals[i].dtype) * (size_t)kl_aval_size(&c->avals[i]));
  return 0;
}

static const char vjp_lin_error[] = "forward-mode differentiation (jvp, jacfwd, linearize) of a custom_vjp function is not "
                                    "supported (as in JAX); use reverse mode (grad, vjp, jacrev)";

static int cpu_vjp_lin(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  (void)c, (void)ptrs;
  kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s", vjp_lin_error);
  return -1;
}

const kl_lowering kl_lower_call[] = {
    {KL_P_CUSTOM_VJP_CALL, .fuses = 0, .cpu_lib = cpu_vjp_call},
    {KL_P_CUSTOM_VJP_LIN, .fuses = 0, .cpu_lib = cpu_vjp_lin, .unsupported = vjp_lin_error},
};
const int kl_lower_call_n = sizeof kl_lower_call / sizeof *kl_lower_call;
