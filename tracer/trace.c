/* trace.c: the trace stack, binding equations to the innermost trace, lifting outer values and
 * constants as extra inputs, literal deduplication, leak detection, the concrete-value hook.
 * Depends only on ir/ (no Python, no MLIR). */
#include "trace.h"

#include "../ir/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a small open-addressing map: 128-bit key -> value id ---- */

typedef struct {
  uint64_t k1, k2; /* the key; slot empty when vid < 0 */
  int vid;
} map_slot;

typedef struct {
  map_slot *slots; /* owned; cap a power of two, or NULL while empty */
  int cap, n;
} vid_map;

static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t h = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2));
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 29);
}

static int map_get(const vid_map *m, uint64_t k1, uint64_t k2) {
  if (!m->cap) return -1;
  for (uint64_t i = mix(k1, k2) & (uint64_t)(m->cap - 1);; i = (i + 1) & (uint64_t)(m->cap - 1)) {
    const map_slot *s = &m->slots[i];
    if (s->vid < 0) return -1;
    if (s->k1 == k1 && s->k2 == k2) return s->vid;
  }
}

static int map_put(vid_map *m, uint64_t k1, uint64_t k2, int vid);

/* Doubles the table; 0, or -1 (unchanged) when out of memory. */
static int map_grow(vid_map *m) {
  vid_map old = *m;
  int cap = old.cap ? old.cap * 2 : 16;
  map_slot *slots = kl_malloc(sizeof(map_slot) * (size_t)cap);
  if (!slots) return -1;
  m->cap = cap;
  m->n = 0;
  m->slots = slots;
  for (int i = 0; i < m->cap; i++) m->slots[i].vid = -1;
  for (int i = 0; i < old.cap; i++)
    if (old.slots[i].vid >= 0) map_put(m, old.slots[i].k1, old.slots[i].k2, old.slots[i].vid);
  free(old.slots);
  return 0;
}

static int map_put(vid_map *m, uint64_t k1, uint64_t k2, int vid) {
  if (2 * (m->n + 1) > m->cap && map_grow(m)) return -1;
  uint64_t i = mix(k1, k2) & (uint64_t)(m->cap - 1);
  while (m->slots[i].vid >= 0) i = (i + 1) & (uint64_t)(m->cap - 1);
  m->slots[i].k1 = k1;
  m->slots[i].k2 = k2;
  m->slots[i].vid = vid;
  m->n++;
  return 0;
}

/* ---- traces ---- */

struct kl_trace {
  kl_program *pg;              /* owned, or NULL once taken */
  int level;                   /* depth of the stack below it when pushed */
  int alive;                   /* on its stack; 0 once popped */
  int concrete;                /* values are computed as equations are recorded */
  int refs;                    /* the stack's (while alive) and the client's */
  kl_trace_value_fn value_fn;  /* the concrete-value hook, or NULL */
  void *value_ctx;             /* its context (borrowed) */
  void *client;                /* the client's pointer (borrowed) */
  uintptr_t *lifted;           /* owned: client keys of the extra inputs, in input order */
  int nlifted, caplifted;
  vid_map lifted_vids;         /* key -> the extra input's value id */
  vid_map literal_vids;        /* (value bits, dtype/weak) -> the literal's value id */
};

struct kl_trace_stack {
  kl_trace **items; /* owned array of live traces (one reference each), innermost last */
  int n, cap;
  kl_trace_value_fn value_fn;
  void *value_ctx;
};

/* Makes room for `need` entries of `size` bytes in *items; 0, or -1 when out of memory. */
static int reserve(void **items, int *cap, int need, size_t size) {
  if (need <= *cap) return 0;
  int c = *cap ? 2 * *cap : 8;
  void *q = kl_realloc(*items, size * (size_t)c);
  if (!q) return -1;
  *items = q;
  *cap = c;
  return 0;
}

kl_trace_stack *kl_trace_stack_new(void) { return kl_calloc(1, sizeof(kl_trace_stack)); }

void kl_trace_stack_free(kl_trace_stack *s) {
  if (!s) return;
  while (s->n) {
    kl_trace *t = s->items[--s->n];
    t->alive = 0;
    kl_trace_release(t);
  }
  free(s->items);
  free(s);
}

void kl_trace_stack_set_value_hook(kl_trace_stack *s, kl_trace_value_fn fn, void *ctx) {
  s->value_fn = fn;
  s->value_ctx = ctx;
}

int kl_trace_depth(const kl_trace_stack *s) { return s->n; }

kl_trace *kl_trace_current(const kl_trace_stack *s) { return s->n ? s->items[s->n - 1] : NULL; }

kl_trace *kl_trace_push(kl_trace_stack *s, int concrete) {
  kl_trace *t = kl_calloc(1, sizeof *t);
  if (!t || !(t->pg = kl_program_new()) || reserve((void **)&s->items, &s->cap, s->n + 1, sizeof(kl_trace *))) {
    if (t) kl_program_free(t->pg);
    free(t);
    return NULL;
  }
  t->level = s->n;
  t->alive = 1;
  t->concrete = concrete != 0;
  t->refs = 2;
  t->value_fn = s->value_fn;
  t->value_ctx = s->value_ctx;
  s->items[s->n++] = t;
  return t;
}

int kl_trace_pop(kl_trace_stack *s, kl_trace *t) {
  if (!s->n || s->items[s->n - 1] != t) return -1;
  s->n--;
  t->alive = 0;
  kl_trace_release(t);
  return 0;
}

void kl_trace_retain(kl_trace *t) { t->refs++; }

void kl_trace_release(kl_trace *t) {
  if (!t || --t->refs > 0) return;
  kl_program_free(t->pg);
  free(t->lifted);
  free(t->lifted_vids.slots);
  free(t->literal_vids.slots);
  free(t);
}

int kl_trace_alive(const kl_trace *t) { return t->alive; }
int kl_trace_level(const kl_trace *t) { return t->level; }
int kl_trace_is_concrete(const kl_trace *t) { return t->concrete; }
kl_program *kl_trace_program(const kl_trace *t) { return t->pg; }
void kl_trace_set_client(kl_trace *t, void *client) { t->client = client; }
void *kl_trace_client(const kl_trace *t) { return t->client; }

kl_program *kl_trace_take_program(kl_trace *t) {
  kl_program *pg = t->pg;
  t->pg = NULL;
  return pg;
}

int kl_trace_new_input(kl_trace *t, const kl_aval *aval) { return t->pg ? kl_program_add_input(t->pg, aval) : -1; }

int kl_trace_num_lifted(const kl_trace *t) { return t->nlifted; }
uintptr_t kl_trace_lifted_key(const kl_trace *t, int i) { return t->lifted[i]; }

/* The params of a `literal` equation (the CONST row of KL_PRIMS): the one place this file knows
 * a primitive's param layout. */
static void literal_params(kl_params *p, kl_dtype dtype, int weak, int64_t ival, double fval, double fimag) {
  kl_params_init(p, KL_P_CONST);
  p->literal.dtype = (int)dtype;
  p->literal.weak_type = weak != 0;
  if (kl_dtype_kind(dtype) == KL_KIND_FLOAT) p->literal.value = fval;
  else if (kl_dtype_is_complex(dtype)) p->literal.value = fval, p->literal.imag = fimag;
  else p->literal.int_value = ival;
}

static int out_of_memory(kl_trace *t, char *err, size_t errlen) {
  if (t->pg) t->pg->oom = 1;
  kl_error(err, errlen, KL_ERR_NOMEM, "out of memory while tracing");
  return KL_TRACE_NOMEM;
}

int kl_trace_literal(kl_trace *t, kl_dtype dtype, int weak, int64_t ival, double fval, double fimag, int *vid,
                     char *err, size_t errlen) {
  if (!t->pg) return KL_TRACE_DEAD;
  int shared = !kl_dtype_is_complex(dtype); /* complex literals (two doubles) are not looked up */
  uint64_t bits;
  if (kl_dtype_kind(dtype) == KL_KIND_FLOAT) memcpy(&bits, &fval, sizeof bits);
  else bits = (uint64_t)ival;
  uint64_t k2 = (uint64_t)dtype | (uint64_t)(weak != 0) << 8;
  int v = shared ? map_get(&t->literal_vids, bits, k2) : -1;
  if (v >= 0) {
    *vid = v;
    return KL_TRACE_OK;
  }
  kl_params p;
  literal_params(&p, dtype, weak, ival, fval, fimag);
  int outs[KL_MAX_OUTS], nout;
  if (kl_program_add_eqn(t->pg, KL_P_CONST, NULL, 0, &p, outs, &nout, err, errlen)) return KL_TRACE_RULE_ERROR;
  if (shared && map_put(&t->literal_vids, bits, k2, outs[0])) return out_of_memory(t, err, errlen);
  *vid = outs[0];
  return KL_TRACE_OK;
}

int kl_trace_vid_of(kl_trace *t, const kl_operand *x, int *vid) {
  if (!t->pg || (x->trace && !x->trace->alive)) return KL_TRACE_DEAD;
  if (x->trace == t) {
    *vid = x->vid;
    return KL_TRACE_OK;
  }
  /* A constant, or a value of an enclosing trace (a closure in a nested transformation): it
   * enters t as an extra input, once per client object. */
  int v = map_get(&t->lifted_vids, (uint64_t)x->key, 0);
  if (v >= 0) {
    *vid = v;
    return KL_TRACE_OK;
  }
  const kl_aval *aval = x->trace ? (x->trace->pg ? &x->trace->pg->vals[x->vid].aval : NULL) : x->aval;
  if (!aval) return x->trace ? KL_TRACE_DEAD : KL_TRACE_BAD_OPERAND;
  /* room first: a failure leaves the maps and the program consistent (pg->oom at worst) */
  if (reserve((void **)&t->lifted, &t->caplifted, t->nlifted + 1, sizeof(uintptr_t)) ||
      (v = kl_program_add_input(t->pg, aval)) < 0 || map_put(&t->lifted_vids, (uint64_t)x->key, 0, v)) {
    t->pg->oom = 1;
    return KL_TRACE_NOMEM;
  }
  t->lifted[t->nlifted++] = x->key;
  *vid = v;
  return KL_TRACE_OK;
}

int kl_trace_bind(kl_prim prim, const kl_params *p, const kl_operand *ins, int nin, kl_trace **into, int *outs,
                  int *nout, int *computed, int *bad, char *err, size_t errlen) {
  return kl_trace_bind_in(NULL, prim, p, ins, nin, into, outs, nout, computed, bad, err, errlen);
}

int kl_trace_bind_in(kl_trace *t, kl_prim prim, const kl_params *p, const kl_operand *ins, int nin, kl_trace **into,
                     int *outs, int *nout, int *computed, int *bad, char *err, size_t errlen) {
  if (t && !t->alive) t = NULL;
  *computed = 0;
  for (int i = 0; i < nin; i++) {
    kl_trace *u = ins[i].trace;
    if (!u) continue;
    if (!u->alive) {
      *bad = i;
      return KL_TRACE_DEAD;
    }
    if (!t || u->level > t->level) t = u;
  }
  if (!t) return KL_TRACE_NO_TRACE;
  *into = t;
  int small[16] = {0};
  int *vids = nin <= 16 ? small : kl_malloc(sizeof(int) * (size_t)nin);
  if (!vids) return out_of_memory(t, err, errlen);
  int rc = KL_TRACE_OK, have_values = 1;
  for (int i = 0; i < nin && rc == KL_TRACE_OK; i++) {
    rc = kl_trace_vid_of(t, &ins[i], &vids[i]);
    if (rc) *bad = i;
    have_values &= ins[i].value != NULL;
  }
  if (rc == KL_TRACE_OK && kl_program_add_eqn(t->pg, prim, vids, nin, p, outs, nout, err, errlen))
    rc = KL_TRACE_RULE_ERROR;
  if (vids != small) free(vids);
  if (rc) return rc;
  if (t->concrete && have_values && t->value_fn) {
    kl_trace_eqn e = {t, prim, p, ins, nin, outs, *nout};
    if (t->value_fn(t->value_ctx, &e)) return KL_TRACE_HOOK_ERROR;
    *computed = 1;
  }
  return KL_TRACE_OK;
}
