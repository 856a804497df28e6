/* program.h: kiln's IR. A Program is a list of equations `outs = prim[params](ins)` over
 * typed SSA values, with explicit inputs and outputs. Printer, verifier and structural
 * hash live in program.c. Depends only on ir/. */
#ifndef KL_PROGRAM_H
#define KL_PROGRAM_H
#include <stdint.h>

#include "arena.h"
#include "prim.h"
#include "status.h"
#include "str.h"

typedef struct {
  kl_aval aval;
  int producer; /* index of the producing equation, or -1 for a program input */
} kl_value;

typedef struct {
  kl_prim prim;
  int nin, nout;
  int *ins;    /* value ids, arena-owned */
  int *outs;   /* value ids, arena-owned */
  kl_params p; /* vectors arena-owned */
} kl_eqn;

typedef struct kl_program {
  int refcount;   /* atomic; kl_program_new gives 1, equations holding it as a body add theirs */
  kl_arena arena;
  kl_value *vals; /* owned growable array */
  int nvals, capvals;
  kl_eqn *eqns; /* owned growable array, in dependency order */
  int neqns, capeqns;
  int *inputs; /* value ids */
  int ninputs, capinputs;
  int *outputs; /* value ids */
  int noutputs;
  struct kl_program **bodies; /* owned references: the sub-programs the equations' params hold */
  int nbodies, capbodies;
  int oom; /* an allocation failed while building: the program is incomplete, and every later
              kl_program_add_* fails with KL_ERR_NOMEM (check it where a built program is used) */
} kl_program;

kl_program *kl_program_new(void);   /* owned; free with kl_program_free; NULL when out of memory */
/* Drops one reference; the last frees the program and releases its equations' bodies. */
void kl_program_free(kl_program *pg);
/* Adds a reference (a program held as an equation's body is never changed again). */
void kl_program_retain(kl_program *pg);
/* A deep copy (owned), or NULL when out of memory: the passes work on one, never on the traced
 * program. Bodies are shared. */
kl_program *kl_program_copy(const kl_program *pg);
/* A copy of pg whose effect callbacks (debug.print, debug.callback; in its bodies too) are gone,
 * their tokens literals: a program run again for values only (a vjp's backward after its forward
 * ran them). NULL when out of memory. */
kl_program *kl_program_without_effects(const kl_program *pg);
/* Whether pg (or a body of it) holds an effect callback. */
int kl_program_has_effects(const kl_program *pg);
/* Whether pg or a body in it calls any host callback (pure_callback too). */
int kl_program_has_callbacks(const kl_program *pg);
/* Exchanges a's and b's contents, each keeping its own address and reference count (a pass
 * that rebuilds a program in b puts the result in place this way). */
void kl_program_swap(kl_program *a, kl_program *b);
int kl_program_add_input(kl_program *pg, const kl_aval *aval); /* the value id, or -1 (pg->oom) */
/* The most operands any equation of pg has (the room a pass needs to gather one's operands: an
 * equation may name a value several times, so it can exceed nvals). */
int kl_program_max_operands(const kl_program *pg);

/* Appends an equation after checking it with the primitive's rule. On success returns 0 and
 * writes the new value ids into outs (KL_MAX_OUTS room) and their count into *nout. On a user
 * error returns -1 with a message in err and its status (ir/status.h); the program is unchanged. */
int kl_program_add_eqn(kl_program *pg, kl_prim prim, const int *ins, int nin, const kl_params *p,
                       int *outs, int *nout, char *err, size_t errlen);
void kl_program_set_outputs(kl_program *pg, const int *outs, int n);

/* Text form, as make_jaxpr shows it. */
void kl_program_print(const kl_program *pg, kl_str *out);
/* Checks SSA order and re-runs every shape rule. 0 if well formed, else -1 with a message. */
int kl_program_verify(const kl_program *pg, char *err, size_t errlen);
/* Structural hash: equal for programs that differ only in value numbering. */
uint64_t kl_program_hash(const kl_program *pg);
/* Copy of params of primitive prim owned by pg: vectors into its arena, bodies retained.
 * 0, or -1 when out of memory (pg->oom). */
int kl_params_copy(kl_program *pg, kl_prim prim, kl_params *dst, const kl_params *src);
/* Params by their named fields: printed as make_jaxpr shows them ("[axes=(0,) ...]", bodies as
 * nested programs), mixed into a structural hash, compared (bodies by structure). */
void kl_params_print(kl_str *out, kl_prim prim, const kl_params *p, int indent);
uint64_t kl_params_hash(uint64_t h, kl_prim prim, const kl_params *p);
int kl_params_equal(kl_prim prim, const kl_params *a, const kl_params *b);

/* KILN_DUMP=dir: writes text to dir/<sequence>-<what> (IR after each pass, MLIR, PTX); nothing
 * when unset. */
int kl_dump_enabled(void);
void kl_dump(const char *what, const char *text);
#endif
