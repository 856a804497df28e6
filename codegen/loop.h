/* loop.h: the control family (while, scan) as executable steps (loop.c). Private to codegen/. */
#ifndef KL_LOOP_H
#define KL_LOOP_H
#include "../ir/program.h"
#include "../runtime/runtime.h"

typedef struct kl_loop kl_loop;

/* Fills st (its slots from slot_of) for while or scan equation e of pg: the bodies are
 * compiled for the CPU, the step runs the loop on the host. *out: what the step's ctx owns
 * (free with kl_loop_free once the executable goes). 0, or -1 with a message. */
int kl_compile_loop_step(const kl_program *pg, const kl_eqn *e, const int *slot_of, kl_step *st, kl_loop **out,
                         char *err, size_t errlen);
void kl_loop_free(kl_loop *l);
#endif
