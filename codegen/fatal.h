/* fatal.h: LLVM's and MLIR's fatal errors turned into failed compiles. report_fatal_error ends the
 * process (exit or abort) once its handler returns; kiln's handler jumps back instead to the
 * innermost guard of the calling thread, so the compile fails with KL_ERR_INTERNAL naming what was
 * being compiled and the library keeps working. What the abandoned LLVM/MLIR calls held is leaked,
 * never freed (its state is unknown). Guards cover translation, passes and code generation only:
 * never a region holding LLVM's own locks (ORC's linking and lookups), where jumping out would
 * leave a lock taken. Outside any guard the handler names the last guarded work and returns.
 * Private to codegen/. */
#ifndef KL_FATAL_H
#define KL_FATAL_H
#include <setjmp.h>
#include <stddef.h>

typedef struct kl_fatal_guard {
  jmp_buf jb;
  const char *what;              /* what is being compiled, for messages (borrowed, outlives the guard) */
  struct kl_fatal_guard *outer;  /* the guard it hides, restored by kl_fatal_pop or the handler */
  char reason[512];              /* LLVM's message, once the handler jumped here */
} kl_fatal_guard;

/* Makes g the calling thread's innermost guard (installs the handler once per process). Follow it
 * at once with `if (setjmp(g.jb)) { ...landed: g is already popped, g.reason says why... }` in the
 * same function, and kl_fatal_pop(&g) when the guarded work returns normally. Locals assigned
 * after the setjmp must not be read on the landing path. */
void kl_fatal_push(kl_fatal_guard *g, const char *what);
void kl_fatal_pop(kl_fatal_guard *g);
/* Writes the message of a landed guard: "internal error: LLVM stopped with a fatal error while
 * compiling <what>: <reason>" and the KILN_DUMP hint. Returns -1. */
int kl_fatal_message(const kl_fatal_guard *g, char *err, size_t errlen);
#endif
