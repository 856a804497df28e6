/* fuse.h: dead-code elimination and fusion of a Program into kernels and library calls.
 * Fusion decides which values live in buffers ("materialized"); every other value is
 * recomputed inside the kernels that read it. Depends only on ir/. */
#ifndef KL_FUSE_H
#define KL_FUSE_H
#include "../ir/program.h"

typedef enum {
  KL_STEP_KERNEL, /* a generated loop nest computing value `root` */
  KL_STEP_LIB     /* one equation run by a library routine (BLAS, LAPACK, sort, ...) */
} kl_step_kind;

#define KL_MAX_STAGES 4

typedef struct {
  kl_step_kind kind;
  int eqn;  /* producing equation */
  int root; /* KERNEL: the value it writes */
  int nstages;                /* row kernels: reductions computed inside the kernel, per row */
  int stages[KL_MAX_STAGES];  /* their equations, in program order */
  int row_axis;               /* first dimension of the rows those reductions run over */
} kl_plan_step;

typedef struct {
  const kl_program *pg;   /* borrowed */
  char *materialized;     /* owned; per value id: 1 if it lives in a buffer */
  char *absorbed;         /* owned; per value id: 1 for a reduction computed inside a row kernel */
  kl_plan_step *steps;    /* owned; in execution order */
  int nsteps;
  int *buffer_of;         /* owned, or NULL: per value (the first nbuffer_of), the earlier value whose
                             buffer it is written into (the code generator's buffer reuse), -1 for
                             a buffer of its own */
  int nbuffer_of;
} kl_plan;

/* Replaces call equations (checkpoint, custom_jvp_call, custom_vjp_call) by their bodies, in
 * place; the compiler's first pass (transforms/inline.c). 0, or -1 with a message. */
int kl_inline_calls(kl_program *pg, char *err, size_t errlen);
/* Puts each equation whose primitive has a legalize rule in the form its lowering takes
 * (transforms/legalize.c: dot_general operands in GEMM form). 0, or -1 with a message. */
int kl_legalize(kl_program *pg, char *err, size_t errlen);
/* Joins psums of one dtype over the same mesh axes whose results are first read after the last of
 * them into one psum (transforms/combine.c), when KILN_COMBINE_COLLECTIVES=1 (an experiment).
 * 0, or -1 with a message. */
int kl_combine_collectives(kl_program *pg, char *err, size_t errlen);
/* The compiler's hoist pass (transforms/combine.c): each collective moves up to just after the
 * equation that computes the last of its operands (after the other collectives placed there, in
 * their order), so that on the GPU its NCCL call starts as soon as its operand exists and overlaps
 * the work after it (a data-parallel step's gradient all-reduces overlap the backward pass).
 * Every participant runs the same program, so they still meet in the same order. Then the
 * equations that wait for a collective's result move after those that need none, ordered by the
 * latest collective they wait for (KILN_SINK_WAITS=0: not), so that the last all-reduce overlaps
 * the work that does not wait for it. 0, or -1 with a message when out of memory. */
int kl_hoist_collectives(kl_program *pg, char *err, size_t errlen);
/* Whether equation e runs for an effect (an effect callback, in it or in its bodies). */
int kl_eqn_has_effect(const kl_eqn *e);
/* The complex pass (transforms/complex.c): complex values become real ones (parts, or packed as
 * real S + [2] at inputs, outputs, bodies' boundaries and library calls). */
int kl_complex_split(kl_program *pg, char *err, size_t errlen);
/* Redirects uses of equations that repeat an earlier one (same primitive, params, operands). */
void kl_cse(kl_program *pg);
/* Algebraic simplification (x*1, neg(neg x), identity reshapes...), exact to the bit; uses are
 * redirected and kl_dce drops the rest (transforms/simplify.c). */
void kl_simplify(kl_program *pg);
/* Makes input `pos` a constant splat of `value` for the passes above (0, or -1 if it cannot). */
int kl_simplify_bind_input(kl_program *pg, int pos, double value);
/* Removes equations whose results are unused (in place). */
void kl_dce(kl_program *pg);
/* What fusion needs to know of a primitive, from its lowering (codegen fills a table of
 * KL_NPRIMS of these from its rows: transforms/ does not look into codegen). */
typedef struct {
  char fuses;           /* 1: computed inside its consumers' kernels (not a library call) */
  unsigned char weight; /* rough cost of recomputing one element */
  /* For a library primitive (fuses = 0) whose small instances are computed inside kernels anyway
   * (a product with a short contraction): the operand reads per result element of instance e,
   * or 0 when e stays a library call. NULL: never. */
  int (*inline_reads)(const kl_program *pg, const kl_eqn *e);
} kl_fuse_traits;
/* Plans kernels for pg; traits: KL_NPRIMS entries, borrowed. KILN_DISABLE_FUSION=1 materializes
 * every value. */
/* 0, or -1 when out of memory (the plan is then empty; nothing to free). */
int kl_plan_build(const kl_program *pg, kl_plan *plan, const kl_fuse_traits *traits);
void kl_plan_free(kl_plan *plan);
/* The operand reads per element of a library equation computed inside kernels (its traits'
 * inline_reads), 0 for any other equation. */
int kl_inline_reads(const kl_fuse_traits *traits, const kl_program *pg, const kl_eqn *e);
/* traits[e->prim].fuses, or a small product. */
int kl_eqn_fusible(const kl_fuse_traits *traits, const kl_program *pg, const kl_eqn *e);
#endif
