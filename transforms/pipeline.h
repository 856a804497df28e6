/* pipeline.h: the one named pass pipeline from a traced program to the program code generation
 * plans (jit, eager dispatch and the extension all go through it). It works on a copy, never on
 * the traced program; KILN_DUMP=dir writes the IR after every pass (make_jaxpr text);
 * KILN_DISABLE_<PASS>=1 turns an optional pass off. Depends only on ir/ and transforms/. */
#ifndef KL_PIPELINE_H
#define KL_PIPELINE_H
#include "../ir/program.h"

/* Which passes run: COMPILE for code generation (call equations inlined first), OPTIMIZE for a
 * program that stays a program (the derivative programs make_jaxpr shows). */
typedef enum { KL_PIPE_COMPILE, KL_PIPE_OPTIMIZE } kl_pipeline_kind;

/* Runs the pipeline on a copy of pg: returns the optimized copy (owned), or NULL with a message. */
kl_program *kl_pipeline_run(const kl_program *pg, kl_pipeline_kind kind, char *err, size_t errlen);
#endif
