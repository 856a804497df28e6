/* compile.h: Program -> executable for the CPU: fusion plan, one MLIR module with a function per
 * kernel, the CPU pass pipeline, ExecutionEngine, and library-call steps. The program has been
 * through the IR pass pipeline first (transforms/pipeline.h).
 * Depends on ir/, transforms/, runtime/ and the MLIR C API. */
#ifndef KL_COMPILE_H
#define KL_COMPILE_H
#include "../ir/program.h"
#include "../runtime/hostattn.h"
#include "../runtime/runtime.h"

/* Compiles pg (the output of kl_pipeline_run(..., KL_PIPE_COMPILE), borrowed, not modified).
 * donatable: per input, whether a call may donate it (jit's donate_argnums), or NULL for none:
 * an output that may take a donated input's buffer (x->donor) is left for it, the others may
 * take a dying temporary's. Returns an executable with refcount 1, or NULL with a message. */
kl_exec *kl_compile_cpu(kl_program *pg, const char *donatable, char *err, size_t errlen);

/* The same for the CUDA device (codegen/compile_gpu.c); NULL with a message without a GPU. */
kl_exec *kl_compile_gpu(kl_program *pg, const char *donatable, char *err, size_t errlen);
/* The PTX kiln generates for pg on compute capability cc (90 = sm_90), without a GPU: malloc'd
 * text ("" when pg needs no kernel), or NULL with a message. For tests and KILN_DUMP. */
char *kl_compile_gpu_ptx(kl_program *pg, int cc, char *err, size_t errlen);
/* Why cuDNN's fused attention cannot run an attention of shape g over dtype t on this GPU (the
 * plans are built and cached now): 0 when it can, else -1 with the reason in why. */
int kl_gpu_attention_why_not(kl_dtype t, const kl_attn_geom *g, char *why, size_t n);
/* GPU code counters: modules compiled, loaded from the disk cache, found in memory. */
void kl_gpu_compile_stats(long *compiled, long *disk_hits, long *memory_hits);
/* GPU programs captured as CUDA graphs, conds inside them queued as conditional nodes, and loops
 * launched as device-side loops. */
void kl_gpu_graph_stats(long *graphs, long *branches, long *loops);
/* The libdevice file GPU math calls into, or NULL (none found, KILN_LIBDEVICE=0, or it failed). */
const char *kl_gpu_libdevice(void);

/* Kernels that repeat (identical layers of a model): each kernel's MLIR text is compared, its
 * own name aside, with the distinct kernels written before it; a repeat is dropped from the
 * module and runs the earlier kernel's code. */
typedef struct {
  size_t *start, *end; /* text span of each distinct kernel in the module */
  uint64_t *hash;      /* its text's hash, names aside */
  char (*names)[32];   /* its name */
  int n, cap;
} kl_kernel_dedup;
/* Called after a kernel named `name` was appended to mod at offset `before`: returns the name of
 * an identical earlier kernel (borrowed; the new text is removed from mod), or NULL after
 * recording this one as distinct (or when out of memory for the record: then it is kept). */
const char *kl_kernel_dedup_add(kl_kernel_dedup *d, kl_str *mod, size_t before, const char *name);
void kl_kernel_dedup_free(kl_kernel_dedup *d);

/* Starts initializing MLIR and the JIT on a background thread (idempotent with compiles). */
void kl_compile_warmup_async(void);

/* With KILN_DUMP: writes x's memory plan (per slot: bytes, kind, the steps it lives through and
 * where it is freed, the donated input an output may take; the most temporary bytes alive at
 * once) as <seq>-memory-plan.txt. */
void kl_compile_dump_memory(kl_exec *x);

/* The copy log's part at compile time (ir/loc.h): reports each of x's updates that copies its
 * operand whatever the call (an update that only donation puts in place is checked at each
 * launch). 0, or -1 with a message (KL_ERR_COPY) when copies are forbidden. For a program the
 * user calls (a loop's body is reported by its loop, which knows which carries it updates in
 * place). */
int kl_compile_report_copies(const kl_exec *x, char *err, size_t errlen);

/* Seconds spent compiling so far in this process, and number of compiles (for tests). */
double kl_compile_seconds(void);
long kl_compile_count(void);
/* Host callbacks (the callback primitive: debug.callback, pure_callback): the client's function
 * that runs callback `id` on its operands in host memory (avals as the program has them, complex
 * ones packed as real [..., 2]) and writes its results; 0, or -1 with a message. A program with a
 * callback fails at launch while no function is set. Called from the runtime's worker threads. */
typedef int (*kl_callback_fn)(int64_t id, int nin, const kl_aval *in_avals, void *const *ins, int nout,
                              const kl_aval *out_avals, void *const *outs, char *err, size_t errlen);
void kl_set_callback_fn(kl_callback_fn fn);

#endif
