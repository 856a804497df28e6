/* subprog.h: programs referenced by equations (checkpoint bodies, custom_jvp functions and rules,
 * custom_vjp backward rules), by id. Registered programs live for the rest of the process.
 * Depends only on ir/. */
#ifndef KL_SUBPROG_H
#define KL_SUBPROG_H
#include "program.h"

int kl_subprog_add(kl_program *pg);            /* takes ownership; returns the id */
const kl_program *kl_subprog_get(int64_t id);  /* borrowed; NULL for an unknown id */
#endif
