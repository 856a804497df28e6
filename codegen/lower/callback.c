/* callback.c: lowering of the callback family: a library step that calls the client's callback
 * function (kl_set_callback_fn, compile.h) on host memory; on the GPU over host copies (a host
 * step). An effect callback's token result is written 0 (io_callback's results are the function's). Depends on lower.h only. */
#include <stdatomic.h>
#include <stdint.h>

#include "../compile.h"
#include "lower.h"

static _Atomic(kl_callback_fn) hook;

void kl_set_callback_fn(kl_callback_fn fn) { atomic_store(&hook, fn); }

static int run_callback(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  kl_callback_fn fn = atomic_load(&hook);
  if (!fn) {
    kl_error(err, errlen, KL_ERR_INTERNAL, "callback: no host callback function is set (a program with a callback "
             "runs only inside its client, e.g. Python)");
    return -1;
  }
  int effect = c->p.callback.effect == 1; /* a token result (io_callback's, 2, are real) */
  if (effect) *(int32_t *)ptrs[c->nin] = 0; /* the token */
  return fn(c->p.callback.id, c->nin, c->avals, ptrs, effect ? 0 : c->nout, c->avals + c->nin, ptrs + c->nin, err,
            errlen);
}

const kl_lowering kl_lower_callback[] = {
    {KL_P_CALLBACK, .fuses = 0, .cpu_lib = run_callback},
};
const int kl_lower_callback_n = sizeof kl_lower_callback / sizeof *kl_lower_callback;
