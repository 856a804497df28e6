/* loop.h: the control family (while, scan, cond, while_bwd) as executable steps (loop.c). Private
 * to codegen/. */
#ifndef KL_LOOP_H
#define KL_LOOP_H
#include "../ir/program.h"
#include "../ir/str.h"
#include "../runtime/runtime.h"

typedef struct kl_loop kl_loop;

/* What a loop step needs of its device: compiling its bodies, running one of them now (in the
 * device's order) over device memory, memory for the carries, copies within the device, and
 * reading device memory on the host (waiting for it). Memory functions: 0, or -1 with a message. */
typedef struct {
  kl_exec *(*compile)(kl_program *pg, char *err, size_t errlen);
  int (*run)(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen);
  int (*alloc)(size_t n, void **p, char *err, size_t errlen);
  void (*free)(void *p, size_t n);
  int (*copy)(void *dst, const void *src, size_t n, char *err, size_t errlen); /* device to device */
  int (*read)(void *host, const void *src, size_t n, char *err, size_t errlen); /* device to host */
  int (*zero)(void *dst, size_t n, char *err, size_t errlen);                   /* in the device's order */
  /* optional (NULL: loop.c keeps the arguments for run()): run() split into binding the memory
   * once and running many times (the CPU's) */
  void *(*bind)(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen);
  int (*bound_run)(const void *bound, char *err, size_t errlen);
  void (*unbind)(void *bound);
} kl_loop_target;
extern const kl_loop_target kl_loop_cpu;

/* Fills st (its slots from slot_of) for while or scan equation e of pg: the bodies are compiled
 * for target t, the step runs the loop from the host. *out: what the step's ctx owns (free with
 * kl_loop_free once the executable goes). 0, or -1 with a message. */
int kl_compile_loop_step(const kl_program *pg, const kl_eqn *e, const int *slot_of, const kl_loop_target *t, kl_step *st,
                         kl_loop **out, char *err, size_t errlen);
void kl_loop_free(kl_loop *l);
/* " (scan of 10 trips over a body of 2 steps, while over ...)" for KILN_LOG_COMPILES; "" for none. */
void kl_loops_describe(kl_loop *const *loops, int n, kl_str *out);
#endif
