/* program.h: kiln's IR. A Program is a list of equations `outs = prim[params](ins)` over
 * typed SSA values, with explicit inputs and outputs. Printer, verifier and structural
 * hash live in program.c. Depends only on ir/. */
#ifndef KL_PROGRAM_H
#define KL_PROGRAM_H
#include <stdint.h>

#include "arena.h"
#include "prim.h"
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

typedef struct {
  kl_arena arena;
  kl_value *vals; /* owned growable array */
  int nvals, capvals;
  kl_eqn *eqns; /* owned growable array, in dependency order */
  int neqns, capeqns;
  int *inputs; /* value ids */
  int ninputs, capinputs;
  int *outputs; /* value ids */
  int noutputs;
} kl_program;

kl_program *kl_program_new(void);   /* owned; free with kl_program_free */
void kl_program_free(kl_program *pg);
int kl_program_add_input(kl_program *pg, const kl_aval *aval); /* returns the value id */

/* Appends an equation after checking it with the primitive's rule. On success returns 0 and
 * writes the new value ids into outs (KL_MAX_OUTS room) and their count into *nout. On a user
 * error returns -1 with a message in err and 'T'/'V' in *err_kind; the program is unchanged. */
int kl_program_add_eqn(kl_program *pg, kl_prim prim, const int *ins, int nin, const kl_params *p,
                       int *outs, int *nout, char *err, size_t errlen, char *err_kind);
void kl_program_set_outputs(kl_program *pg, const int *outs, int n);

/* Text form, as make_jaxpr shows it. */
void kl_program_print(const kl_program *pg, kl_str *out);
/* Checks SSA order and re-runs every shape rule. 0 if well formed, else -1 with a message. */
int kl_program_verify(const kl_program *pg, char *err, size_t errlen);
/* Structural hash: equal for programs that differ only in value numbering. */
uint64_t kl_program_hash(const kl_program *pg);
/* Deep copy of params into pg's arena. */
void kl_params_copy(kl_program *pg, kl_params *dst, const kl_params *src);
#endif
