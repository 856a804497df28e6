/* kernel_internal.h: the element emitter of kernel.c, shared by the CPU loop-nest driver
 * (kernel.c) and the GPU driver (kernel_gpu.c). Private to codegen/. */
#ifndef KL_KERNEL_INTERNAL_H
#define KL_KERNEL_INTERNAL_H
#include "kernel.h"

typedef char ssa[24];

typedef struct {
  char *key;
  ssa name;
} memo_entry;

typedef struct {
  const kl_program *pg;
  const kl_plan *plan;
  kl_emitter em;
  kl_str *body;   /* loop-body text */
  const char *ind; /* indentation of body lines */
  int *args;       /* materialized values read, in argument order */
  int nargs, capargs;
  memo_entry *memo;
  int nmemo, capmemo;
  char *err;
  size_t errlen;
  int failed;
  int root; /* the value this kernel writes: computed, never loaded */
  int stage_val[KL_MAX_STAGES]; /* row kernels: absorbed reductions ... */
  ssa stage_ssa[KL_MAX_STAGES]; /* ... and the SSA names of their per-row results */
  int nstage;
  int stash;       /* row kernels: a value the last stage also stores into the output row... */
  int stash_ready; /* ...which the main loop then reloads instead of recomputing */
  char *recompute;     /* GPU row kernels in registers: per value, 1 to compute a buffer's value
                          from the kernel's other reads rather than load it (or NULL) */
  const ssa *main_idx; /* the main loop's index names (NULL: %i0, %i1, ...) */
  int gpu;             /* a GPU kernel (threads, not loops, walk the elements) */
  uint64_t *libdevice; /* GPU with libdevice: math calls __nv_* and sets kl_libdevice_bit()s */
  uint64_t *outlined;  /* CPU kernels over few elements: math past the first few uses of a function
                          calls it out of line (codegen/lower/elementwise.c sets bits, the module
                          defines each function once: kl_math_define_outlined) */
  unsigned short mathuses[64]; /* uses so far of each math function in this kernel */
} kctx;

/* Stores val (compute type of t) into argument arg (aval a) at idx[0..n): bools as i8, f16/bf16
 * narrowed from f32. */
void kk_store_value(kctx *k, kl_dtype t, const char *val, int arg, const kl_aval *a, ssa *idx, int n);
/* Appends one indented line of MLIR to k->body. */
void kk_line(kctx *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A fresh SSA name in buf. */
char *kk_fresh(kctx *k, char *buf);
/* Records an out-of-memory failure (KL_ERR_NOMEM) unless one is recorded already; returns -1. */
int kk_nomem(kctx *k);
/* kk_line(k, "%s", s->data), or kk_nomem when s ran out of memory. */
void kk_line_str(kctx *k, const kl_str *s);
/* Appends src's text to out; a src that ran out of memory marks out failed (ir/str.h). */
void kk_append_text(kl_str *out, const kl_str *src);
/* Records a failure message; returns -1. */
int kk_kfail(kctx *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *kk_const_index(kctx *k, int64_t v, char *out);
/* A scalar constant of dtype t in its compute type: ints from iv, floats from fv. */
char *kk_const_scalar(kctx *k, kl_dtype t, double fv, int64_t iv, char *out);
/* Argument position of materialized value v (added on first use). */
int kk_arg_index(kctx *k, int v);
/* The same without adding one: -1 when v (or a value sharing its buffer) is not an argument. */
int kk_arg_find(const kctx *k, int v);
/* Loads materialized value v at idx, in its compute type. */
char *kk_emit_load(kctx *k, int v, ssa *idx, char *out);
/* Records that value v at index idx is already the SSA value `name` (kk_emit_value returns it). */
void kk_memo_set(kctx *k, int v, ssa *idx, const char *name);
/* The element memo's size, and forgetting what was added since (values computed inside a
 * region, which code after the region cannot use). */
int kk_memo_mark(const kctx *k);
void kk_memo_reset(kctx *k, int mark);
/* Row kernels: records that row reduction value v of the current row is the SSA value `name`. */
void kk_add_stage(kctx *k, int v, const char *name);
/* Computes value v at index idx (memoized per kernel scope). */
char *kk_emit_value(kctx *k, int v, ssa *idx, char *out);
void kk_memref_type(kl_str *s, const kl_aval *a);
/* Row kernels: stores val, the stash value at idx (rank n), into the output row (k->root). */
void kk_store_stash(kctx *k, const char *val, ssa *idx, int n);
/* `%m<i> = memref.reinterpret_cast %a<i>` from memref<1xT> to the static row-major shape dims. */
void kk_emit_reinterpret(kl_str *out, const char *indent, int i, int ndim, const int64_t *dims, const char *storage);
/* The same, named `name` (a kernel storing its result in another static shape). */
void kk_emit_reinterpret_as(kl_str *out, const char *indent, const char *name, int i, int ndim, const int64_t *dims,
                            const char *storage);
void kk_index_list(kl_str *s, ssa *idx, int n, const char *zero);
void kk_reduce_init(kctx *k, kl_prim p, kl_dtype t, char *out);
const char *kk_reduce_op(kl_prim p, kl_dtype t);
int kk_is_low_float(kl_dtype t);
/* Splits linear index lin over dims[0..n) into idx[0..n). */
void kk_delinearize(kctx *k, const char *lin, const int64_t *dims, int n, ssa *idx);
/* True when the kernel expression of v reads target at its own index (elementwise only). */
int kk_expr_uses(const kl_program *pg, const kl_plan *plan, int v, int target);
#endif
