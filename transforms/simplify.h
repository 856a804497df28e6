/* simplify.h: what simplify's driver (simplify.c) shares with the simplify rules of
 * transforms/rules/<family>.c: the pass state, the rules' outcomes, and the helpers that redirect
 * or rewrite an equation and recognise splat literals. Private to transforms/; depends only on ir/. */
#ifndef KL_SIMPLIFY_H
#define KL_SIMPLIFY_H
#include "../ir/program.h"

typedef struct {
  kl_program *pg; /* borrowed */
  int *repl;      /* owned; per value id: the value its uses now read */
  char *dep;      /* owned; per value id: 1 if it depends on a program input */
} kl_simp;

/* What a simplify rule did to its equation: nothing, redirected the uses of its result to an
 * equal value (s->repl), or rewrote it in place into a cheaper equation with the same aval. */
enum { KL_SIMP_KEEP, KL_SIMP_REDIRECTED, KL_SIMP_REWRITTEN };

/* Value classes of a splat, tested exactly (bit patterns matter for floats: -0.0 vs +0.0). */
typedef enum { KL_SPLAT_ONE, KL_SPLAT_ZERO_INT, KL_SPLAT_POS_ZERO_FLOAT, KL_SPLAT_NEG_ZERO_FLOAT } kl_splat_kind;

/* The equation producing v, or NULL for a program input (borrowed). */
const kl_eqn *kl_simp_producer(const kl_program *pg, int v);
/* The rank-0 literal whose value fills every element of v, or -1 when v is not such a splat. */
int kl_simp_splat_root(const kl_program *pg, int v);
int kl_simp_splat_is(const kl_program *pg, int v, kl_splat_kind kind);
/* Integer splat value of a bool/int literal splat (a select_n predicate); 0 if not one. */
int kl_simp_splat_int(const kl_program *pg, int v, int64_t *out);
/* n int64s in pg's arena (NULL for n = 0). */
int64_t *kl_simp_arena_vec(kl_program *pg, int n);
/* Rewrites e in place into broadcast_in_dim(x, e's result shape, dims) (dims may be NULL for a
 * rank-0 x). The caller has checked that the result aval is unchanged. */
int kl_simp_rewrite_broadcast(kl_simp *s, kl_eqn *e, int x, const int64_t *dims);
/* e's result equals x's values, possibly broadcast from rank 0 or with a different weak flag:
 * redirects, or rewrites e into the one cheap op that restores the aval, or keeps e. */
int kl_simp_forward(kl_simp *s, kl_eqn *e, int x);
#endif
