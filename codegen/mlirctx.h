/* mlirctx.h: the process's MLIR context and helpers shared by the CPU (compile.c) and GPU
 * (compile_gpu.c) drivers. Private to codegen/. */
#ifndef KL_MLIRCTX_H
#define KL_MLIRCTX_H
#include <mlir-c/Diagnostics.h>
#include <mlir-c/IR.h>

#include "../ir/str.h"

/* Locks and returns the (initialized) context; every MLIR call happens under this lock. */
MlirContext kl_mlir_lock(void);
void kl_mlir_unlock(void);
/* Runs pass pipeline `pipeline` (text) on m, with the lock held: 0; 1 when a pass failed (its
 * diagnostics went to the context's handler); -1 with the message in err when the pipeline
 * does not parse or memory runs out. */
int kl_mlir_run_pipeline(MlirModule m, const char *pipeline, char *err, size_t errlen);
/* Diagnostic handler / string callback appending to a kl_str (user). */
MlirLogicalResult kl_mlir_on_diag(MlirDiagnostic d, void *user);
void kl_mlir_collect_text(MlirStringRef s, void *user);
/* Writes text to $KILN_DUMP/<seq>-<what> when KILN_DUMP is set. */
void kl_codegen_dump(const char *what, const char *text);
/* Replaces every "KLPFX" in text with prefix. */
void kl_codegen_set_prefix(kl_str *text, const char *prefix);
#include "../runtime/runtime.h"
#include "../transforms/fuse.h"
#include "libcall.h"
/* Shared start of both drivers: inline calls, simplify, CSE, DCE, plan; an executable with a slot
 * per materialized value (room for extra_slots more), inputs and outputs mapped; *slot_of
 * (malloc'd) maps value ids to slots; donatable as kl_compile_cpu's. NULL with a message on
 * failure. */
kl_exec *kl_compile_prepare(kl_program *pg, kl_plan *plan, int **slot_of, int extra_slots, const char *donatable, char *err,
                            size_t errlen);
/* Fills st as the library call of equation e (*lc: its context, owned by the caller). */
int kl_compile_lib_step(const kl_program *pg, const kl_eqn *e, const int *slot_of, kl_step *st, kl_libcall **lc, char *err,
                        size_t errlen);
/* Fills st as a step run on the host by run(ctx, operand then result pointers), its slots (the
 * array `slots`, taken) those of e's operands and results. */
void kl_host_step(const kl_eqn *e, const int *slot_of, int *slots, void *ctx,
                  int (*run)(void *ctx, void **ptrs, char *err, size_t errlen), kl_step *st);
/* Adds a compilation to the counters behind kl_compile_seconds/kl_compile_count. */
void kl_compile_note(double seconds);
#endif
