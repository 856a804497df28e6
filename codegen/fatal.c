/* fatal.c: the process's LLVM fatal-error handler and the per-thread guards it jumps back to
 * (fatal.h). Depends on LLVM's C API only. */
#include "fatal.h"

#include <llvm-c/ErrorHandling.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../ir/status.h"

static _Thread_local kl_fatal_guard *innermost;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

static void on_fatal(const char *reason) {
  kl_fatal_guard *g = innermost;
  if (!g) {
    fprintf(stderr, "kiln: LLVM fatal error outside a guarded compile (the process ends): %s\n"
                    "kiln: set KILN_DUMP=<dir> to save the kernels' MLIR, and report it\n", reason ? reason : "");
    return;
  }
  snprintf(g->reason, sizeof g->reason, "%s", reason ? reason : "(no message)");
  innermost = g->outer;
  longjmp(g->jb, 1);
}

static void install(void) { LLVMInstallFatalErrorHandler(on_fatal); }

void kl_fatal_push(kl_fatal_guard *g, const char *what) {
  pthread_once(&installed, install);
  g->what = what;
  g->reason[0] = 0;
  g->outer = innermost;
  innermost = g;
}

void kl_fatal_pop(kl_fatal_guard *g) {
  if (innermost == g) innermost = g->outer;
}

int kl_fatal_message(const kl_fatal_guard *g, char *err, size_t errlen) {
  kl_error(err, errlen, KL_ERR_INTERNAL,
           "internal error: LLVM stopped with a fatal error while compiling %s: %s (set KILN_DUMP=<dir> to save the "
           "kernels' MLIR and LLVM IR, and report it; kiln keeps working)",
           g->what ? g->what : "kernels", g->reason);
  return -1;
}
