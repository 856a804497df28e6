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
/* Diagnostic handler / string callback appending to a kl_str (user). */
MlirLogicalResult kl_mlir_on_diag(MlirDiagnostic d, void *user);
void kl_mlir_collect_text(MlirStringRef s, void *user);
/* Writes text to $KILN_DUMP/<seq>-<what> when KILN_DUMP is set. */
void kl_codegen_dump(const char *what, const char *text);
/* Replaces every "KLPFX" in text with prefix. */
void kl_codegen_set_prefix(kl_str *text, const char *prefix);
/* Adds a compilation to the counters behind kl_compile_seconds/kl_compile_count. */
void kl_compile_note(double seconds);
#endif
