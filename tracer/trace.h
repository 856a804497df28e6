/* trace.h: kiln's trace state in C. A trace stack holds the traces being built, innermost last;
 * each trace owns the Program (ir/program.h) its equations go to. Binding an equation picks the
 * innermost trace among its operands, lifts values of enclosing traces and constants into it as
 * extra inputs, and (concrete tracing) asks the client to compute the values as the equation is
 * recorded. Depends only on ir/: no Python objects (the client names its objects by opaque keys
 * and values), no MLIR. */
#ifndef KL_TRACE_H
#define KL_TRACE_H
#include <stddef.h>
#include <stdint.h>

#include "../ir/program.h"

typedef struct kl_trace kl_trace;
typedef struct kl_trace_stack kl_trace_stack;

/* Results of binding and lifting. Errors other than KL_TRACE_RULE_ERROR leave the programs
 * unchanged, except for constants already lifted (they stay extra inputs, unused). */
typedef enum {
  KL_TRACE_OK = 0,
  KL_TRACE_DEAD = -1,        /* an operand belongs to a trace that ended (a leaked tracer) */
  KL_TRACE_NO_TRACE = -2,    /* no operand belongs to a trace: nothing to record into */
  KL_TRACE_BAD_OPERAND = -3, /* an operand is neither a traced value nor a liftable constant */
  KL_TRACE_RULE_ERROR = -4,  /* the primitive's shape/dtype rule refused: message in err */
  KL_TRACE_HOOK_ERROR = -5,  /* the client's value hook failed (the client has its error) */
  KL_TRACE_NOMEM = -6        /* out of memory (ir/alloc.h): status KL_ERR_NOMEM; the trace's program is
                                marked broken (pg->oom), the stack stays usable */
} kl_trace_status;

/* One operand as the client describes it; every pointer is borrowed for the call. */
typedef struct {
  kl_trace *trace;     /* the trace whose value it is, or NULL for a constant */
  int vid;             /* its value id in trace's program (when trace != NULL) */
  const kl_aval *aval; /* a constant's aval (trace == NULL); NULL: not an array, cannot be lifted */
  uintptr_t key;       /* the client's id of the object: lifting is deduplicated by it */
  void *value;         /* the client's concrete value, or NULL (abstract) */
} kl_operand;

/* An equation just recorded into a concrete trace, handed to the value hook. */
typedef struct {
  kl_trace *trace;         /* where it was recorded */
  kl_prim prim;            /* its primitive */
  const kl_params *params; /* its params */
  const kl_operand *ins;   /* the operands as the client gave them (each with a value) */
  int nin;
  const int *outs; /* the new value ids */
  int nout;
} kl_trace_eqn;

/* The concrete-value hook: computes the values of e->outs from e->ins[i].value; the client keeps
 * them where it wants (ctx). Returns 0, or -1 (bind then returns KL_TRACE_HOOK_ERROR). */
typedef int (*kl_trace_value_fn)(void *ctx, const kl_trace_eqn *e);

/* ---- the stack ---- */

kl_trace_stack *kl_trace_stack_new(void); /* owned; free with kl_trace_stack_free; NULL: out of memory */
/* Frees the stack; traces still on it end (become dead) and lose the stack's reference. */
void kl_trace_stack_free(kl_trace_stack *s);
/* The hook and its context (borrowed) given to traces pushed from now on; fn NULL: none. */
void kl_trace_stack_set_value_hook(kl_trace_stack *s, kl_trace_value_fn fn, void *ctx);
int kl_trace_depth(const kl_trace_stack *s);          /* number of live traces */
kl_trace *kl_trace_current(const kl_trace_stack *s); /* innermost live trace (borrowed), or NULL */

/* Starts a trace one level deeper than the current one, with an empty program. concrete: the
 * value hook runs for each equation whose operands all have values. Returns the trace with one
 * reference for the caller (release it with kl_trace_release); the stack holds another while
 * the trace is live. */
kl_trace *kl_trace_push(kl_trace_stack *s, int concrete);
/* Ends trace t, which must be the innermost: it is dead from now on (binding its values returns
 * KL_TRACE_DEAD), its program stays until taken or freed. Returns 0, or -1 if t is not the
 * innermost live trace (nothing changes). */
int kl_trace_pop(kl_trace_stack *s, kl_trace *t);

/* ---- one trace ---- */

void kl_trace_retain(kl_trace *t);
void kl_trace_release(kl_trace *t); /* frees t (and its program, unless taken) at the last one */
int kl_trace_alive(const kl_trace *t);
int kl_trace_level(const kl_trace *t);       /* 0 for the outermost */
int kl_trace_is_concrete(const kl_trace *t);
/* An opaque pointer the client attaches to t (its handle object; borrowed, never freed here). */
void kl_trace_set_client(kl_trace *t, void *client);
void *kl_trace_client(const kl_trace *t); /* NULL until set */
/* The program being built (borrowed; lives as long as t), or NULL once taken. */
kl_program *kl_trace_program(const kl_trace *t);
/* Hands the program to the caller (owned; free with kl_program_free); t keeps no program:
 * binding into it or lifting into it returns KL_TRACE_DEAD afterwards. NULL if already taken. */
kl_program *kl_trace_take_program(kl_trace *t);

/* A new program input of the given aval (an argument of the traced function); its value id.
 * -1 when t has no program (taken). */
int kl_trace_new_input(kl_trace *t, const kl_aval *aval);

/* The value id of a scalar literal in t: one `literal` equation per distinct (dtype, weak,
 * value), reused afterwards. Integer and bool dtypes take ival, float dtypes fval (compared bit
 * for bit: 0.0 and -0.0 differ, NaN matches NaN). Returns KL_TRACE_OK with *vid, KL_TRACE_DEAD
 * for a dead trace, or KL_TRACE_RULE_ERROR with a message in err. */
int kl_trace_literal(kl_trace *t, kl_dtype dtype, int weak, int64_t ival, double fval, double fimag, int *vid, char *err,
                     size_t errlen);

/* The value id standing for operand x in t: x's own id for a value of t; for a value of an
 * enclosing live trace or a constant, an extra input of t, added on first use of x->key and
 * reused afterwards. KL_TRACE_DEAD: x is a value of a dead trace (or t is dead);
 * KL_TRACE_BAD_OPERAND: a constant without aval. */
int kl_trace_vid_of(kl_trace *t, const kl_operand *x, int *vid);

/* Extra inputs lifted into t so far, in input order: their count, and the client key of the
 * i-th (the object whose value the caller must pass for that input). */
int kl_trace_num_lifted(const kl_trace *t);
uintptr_t kl_trace_lifted_key(const kl_trace *t, int i);

/* Records `outs = prim[p](ins)` into the innermost trace among the operands' traces (*into,
 * borrowed; set once that trace is known, also when a later step fails), lifting the other operands into it (kl_trace_vid_of). Checks first that no operand
 * belongs to a dead trace (*bad = its index). On success writes the new value ids to outs
 * (KL_MAX_OUTS room) and their count to *nout; if that trace is concrete and every operand has
 * a value, the value hook runs before bind returns and *computed is set to 1, else 0.
 * Failures: KL_TRACE_DEAD (*bad), KL_TRACE_NO_TRACE, KL_TRACE_BAD_OPERAND (*bad),
 * KL_TRACE_RULE_ERROR (err, and its status: ir/status.h),
 * KL_TRACE_HOOK_ERROR (the equation stays recorded). */
int kl_trace_bind(kl_prim prim, const kl_params *p, const kl_operand *ins, int nin, kl_trace **into, int *outs,
                  int *nout, int *computed, int *bad, char *err, size_t errlen);
/* The same, for an equation that goes into trace `t` when no operand names one (iota under
 * jit: staged out as JAX does, not computed and captured as a constant). */
int kl_trace_bind_in(kl_trace *t, kl_prim prim, const kl_params *p, const kl_operand *ins, int nin, kl_trace **into,
                     int *outs, int *nout, int *computed, int *bad, char *err, size_t errlen);
#endif
