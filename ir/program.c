/* program.c: building, printing, verifying and hashing Programs, and what params need from a
 * Program (copying into its arena, owning bodies). Depends only on ir/. */
#include "program.h"

#include "alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes room for `need` elements of *p; 0, or -1 (and pg->oom) with *p unchanged. */
static int grow(kl_program *pg, void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return 0;
  int c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *q = kl_realloc(*p, (size_t)c * elem);
  if (!q) {
    pg->oom = 1;
    return -1;
  }
  *p = q;
  *cap = c;
  return 0;
}

/* A copy of n bytes in pg's arena; NULL (and pg->oom) when out of memory. */
static void *arena_dup(kl_program *pg, const void *p, size_t n) {
  void *q = kl_arena_dup(&pg->arena, p, n);
  if (!q) pg->oom = 1;
  return q;
}

int kl_program_max_operands(const kl_program *pg) {
  int most = 0;
  for (int k = 0; k < pg->neqns; k++)
    if (pg->eqns[k].nin > most) most = pg->eqns[k].nin;
  return most;
}

kl_program *kl_program_new(void) {
  kl_program *pg = kl_calloc(1, sizeof *pg);
  if (!pg) return NULL;
  pg->refcount = 1;
  kl_arena_init(&pg->arena);
  return pg;
}

void kl_program_retain(kl_program *pg) { __atomic_add_fetch(&pg->refcount, 1, __ATOMIC_RELAXED); }

void kl_program_free(kl_program *pg) {
  if (!pg || __atomic_sub_fetch(&pg->refcount, 1, __ATOMIC_ACQ_REL)) return;
  for (int i = 0; i < pg->nbodies; i++) kl_program_free(pg->bodies[i]);
  free(pg->bodies);
  kl_arena_free(&pg->arena);
  free(pg->vals);
  free(pg->eqns);
  free(pg->inputs);
  free(pg);
}

static int new_value(kl_program *pg, const kl_aval *a, int producer) {
  if (grow(pg, (void **)&pg->vals, &pg->capvals, pg->nvals + 1, sizeof *pg->vals)) return -1;
  pg->vals[pg->nvals].aval = *a;
  pg->vals[pg->nvals].producer = producer;
  return pg->nvals++;
}

int kl_program_add_input(kl_program *pg, const kl_aval *aval) {
  if (pg->oom || grow(pg, (void **)&pg->inputs, &pg->capinputs, pg->ninputs + 1, sizeof *pg->inputs)) return -1;
  int id = new_value(pg, aval, -1);
  if (id < 0) return -1;
  pg->inputs[pg->ninputs++] = id;
  return id;
}

int kl_params_copy(kl_program *pg, kl_prim prim, kl_params *dst, const kl_params *src) {
  *dst = *src;
  for (const kl_param_field *f = kl_prim_get(prim)->fields; f->name; f++) {
    if (f->kind == KL_PF_IVEC) {
      kl_ivec *v = kl_param_ptr(dst, f);
      if (!v->n) v->v = NULL;
      else if (!(v->v = arena_dup(pg, v->v, sizeof(int64_t) * (size_t)v->n))) return -1;
    } else if (f->kind == KL_PF_PROGRAM) {
      kl_program *body = *(kl_program **)kl_param_ptr(dst, f);
      if (!body) continue;
      if (grow(pg, (void **)&pg->bodies, &pg->capbodies, pg->nbodies + 1, sizeof *pg->bodies)) return -1;
      kl_program_retain(body);
      pg->bodies[pg->nbodies++] = body;
    }
  }
  return 0;
}

static int out_of_memory(char *err, size_t errlen) {
  return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory while building a program");
}

int kl_program_add_eqn(kl_program *pg, kl_prim prim, const int *ins, int nin, const kl_params *p,
                       int *outs, int *nout, char *err, size_t errlen) {
  if (pg->oom) return out_of_memory(err, errlen);
  kl_aval in_avals[64], out_small[KL_FEW_OUTS];
  kl_aval *iv = nin <= 64 ? in_avals : kl_malloc(sizeof(kl_aval) * (size_t)nin);
  kl_aval *out_avals = kl_prim_many_outs(prim) ? kl_malloc(sizeof(kl_aval) * KL_MAX_OUTS) : out_small;
  if (!iv || !out_avals) {
    if (iv != in_avals) free(iv);
    if (out_avals != out_small) free(out_avals);
    pg->oom = 1;
    return out_of_memory(err, errlen);
  }
  memset(iv, 0, sizeof(kl_aval)); /* rank-0 prims read nothing; keeps the compiler's analysis quiet */
  for (int i = 0; i < nin; i++) {
    if (ins[i] < 0 || ins[i] >= pg->nvals) {
      kl_error(err, errlen, KL_ERR_VALUE, "%s: operand %d refers to an unknown value", kl_prim_get(prim)->name, i);
      if (iv != in_avals) free(iv);
      return -1;
    }
    iv[i] = pg->vals[ins[i]].aval;
  }
  int rc = kl_prim_infer(prim, nin ? iv : NULL, nin, p, out_avals, nout, err, errlen);
  if (iv != in_avals) free(iv);
  /* room first, so that a failure leaves the program as it was (only pg->oom set) */
  if (!rc && (grow(pg, (void **)&pg->eqns, &pg->capeqns, pg->neqns + 1, sizeof *pg->eqns) ||
              grow(pg, (void **)&pg->vals, &pg->capvals, pg->nvals + *nout, sizeof *pg->vals)))
    rc = out_of_memory(err, errlen);
  kl_eqn *e = rc ? NULL : &pg->eqns[pg->neqns];
  if (e) {
    e->prim = prim;
    e->nin = nin;
    e->nout = *nout;
    e->ins = arena_dup(pg, ins, sizeof(int) * (size_t)nin);
    e->outs = kl_arena_alloc(&pg->arena, sizeof(int) * (size_t)*nout);
    if (!e->ins || !e->outs || kl_params_copy(pg, prim, &e->p, p)) rc = out_of_memory(err, errlen);
  }
  for (int i = 0; !rc && i < *nout; i++) outs[i] = e->outs[i] = new_value(pg, &out_avals[i], pg->neqns);
  if (!rc) pg->neqns++;
  if (out_avals != out_small) free(out_avals);
  return rc;
}

kl_program *kl_program_copy(const kl_program *src) {
  kl_program *pg = kl_program_new();
  if (!pg) return NULL;
  if (grow(pg, (void **)&pg->vals, &pg->capvals, src->nvals, sizeof *pg->vals) ||
      grow(pg, (void **)&pg->inputs, &pg->capinputs, src->ninputs, sizeof *pg->inputs) ||
      grow(pg, (void **)&pg->eqns, &pg->capeqns, src->neqns, sizeof *pg->eqns)) {
    kl_program_free(pg);
    return NULL;
  }
  if (src->nvals) memcpy(pg->vals, src->vals, sizeof *pg->vals * (size_t)src->nvals);
  pg->nvals = src->nvals;
  if (src->ninputs) memcpy(pg->inputs, src->inputs, sizeof *pg->inputs * (size_t)src->ninputs);
  pg->ninputs = src->ninputs;
  for (int k = 0; k < src->neqns; k++) {
    const kl_eqn *e = &src->eqns[k];
    kl_eqn *d = &pg->eqns[k];
    *d = *e;
    memset(&d->p, 0, sizeof d->p);
    pg->neqns = k + 1; /* counted before its params hold references, so freeing releases them */
    d->ins = arena_dup(pg, e->ins, sizeof(int) * (size_t)e->nin);
    d->outs = arena_dup(pg, e->outs, sizeof(int) * (size_t)e->nout);
    if (!d->ins || !d->outs || kl_params_copy(pg, e->prim, &d->p, &e->p)) break;
  }
  kl_program_set_outputs(pg, src->outputs, src->noutputs);
  if (pg->oom) {
    kl_program_free(pg);
    return NULL;
  }
  return pg;
}

/* Whether pg or a body in it calls a host callback: an effect one (debug.print), or any. */
static int has_callback(const kl_program *pg, int effects_only) {
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    if (e->prim == KL_P_CALLBACK && (!effects_only || e->p.callback.effect == 1)) return 1;
    for (const kl_param_field *f = kl_prim_get(e->prim)->fields; f->name; f++)
      if (f->kind == KL_PF_PROGRAM) {
        const kl_program *body = *(kl_program *const *)kl_param_cptr(&e->p, f);
        if (body && has_callback(body, effects_only)) return 1;
      }
  }
  return 0;
}

int kl_program_has_effects(const kl_program *pg) { return has_callback(pg, 1); }

int kl_program_has_callbacks(const kl_program *pg) { return has_callback(pg, 0); }

kl_program *kl_program_without_effects(const kl_program *src) {
  kl_program *pg = kl_program_copy(src);
  for (int k = 0; pg && k < pg->neqns; k++) {
    kl_eqn *e = &pg->eqns[k];
    if (e->prim == KL_P_CALLBACK && e->p.callback.effect == 1) { /* its token: a literal nothing reads */
      kl_dtype t = pg->vals[e->outs[0]].aval.dtype;
      kl_params_init(&e->p, KL_P_CONST);
      e->p.literal.dtype = (int)t;
      e->prim = KL_P_CONST;
      e->nin = 0;
      continue;
    }
    for (const kl_param_field *f = kl_prim_get(e->prim)->fields; f->name; f++) {
      if (f->kind != KL_PF_PROGRAM) continue;
      kl_program **slot = kl_param_ptr(&e->p, f), *body = *slot, *quiet;
      if (!body || !kl_program_has_effects(body)) continue;
      if (!(quiet = kl_program_without_effects(body)) ||
          grow(pg, (void **)&pg->bodies, &pg->capbodies, pg->nbodies + 1, sizeof *pg->bodies)) {
        kl_program_free(quiet);
        kl_program_free(pg);
        return NULL;
      }
      pg->bodies[pg->nbodies++] = quiet; /* pg's reference (the old body's stays in the list) */
      *slot = quiet;
    }
  }
  return pg;
}

void kl_program_set_outputs(kl_program *pg, const int *outs, int n) {
  int *o = arena_dup(pg, outs, sizeof(int) * (size_t)n);
  if (!o) return; /* pg->oom is set: every later use of pg reports it */
  pg->outputs = o;
  pg->noutputs = n;
}

/* ---- dumping ---- */

int kl_dump_enabled(void) {
  const char *dir = getenv("KILN_DUMP");
  return dir && *dir;
}

void kl_dump(const char *what, const char *text) {
  const char *dir = getenv("KILN_DUMP");
  if (!dir || !*dir) return;
  static long seq;
  char path[1024];
  snprintf(path, sizeof path, "%s/%05ld-%s", dir, __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED), what);
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* ---- printing ---- */

static void print_aval(kl_str *s, const kl_aval *a) {
  kl_str_printf(s, "%s[", kl_dtype_short(a->dtype));
  for (int i = 0; i < a->ndim; i++) kl_str_printf(s, i ? ",%lld" : "%lld", (long long)a->dims[i]);
  kl_str_append(s, a->weak ? "]{weak}" : "]");
}

/* Value names a, b, ..., z, ba, bb, ... as jaxprs print them. */
static void print_name(kl_str *s, int id) {
  char buf[16];
  int n = 0;
  do {
    buf[n++] = (char)('a' + id % 26);
    id /= 26;
  } while (id);
  while (n) kl_str_printf(s, "%c", buf[--n]);
}

static void print_program(kl_str *s, const kl_program *pg, int indent);

void kl_params_print(kl_str *s, kl_prim prim, const kl_params *p, int indent) {
  int first = 1;
  for (const kl_param_field *f = kl_prim_get(prim)->fields; f->name; f++) {
    const void *at = kl_param_cptr(p, f);
    if (f->kind == KL_PF_LOC || f->kind == KL_PF_HINT) continue; /* not part of what it computes */
    if (f->kind == KL_PF_FLOAT_NZ) {
      double z = 0.0;
      if (!memcmp(at, &z, sizeof z)) continue;
    }
    kl_str_printf(s, "%s%s=", first ? "[" : " ", f->name);
    first = 0;
    switch (f->kind) {
    case KL_PF_INT: kl_str_printf(s, "%lld", (long long)*(const int64_t *)at); break;
    case KL_PF_INT32: kl_str_printf(s, "%d", *(const int *)at); break;
    case KL_PF_FLOAT: case KL_PF_FLOAT_NZ: kl_str_printf(s, "%.17g", *(const double *)at); break;
    case KL_PF_DTYPE: {
      int d = *(const int *)at;
      kl_str_append(s, d >= 0 ? kl_dtype_name((kl_dtype)d) : "None");
      break;
    }
    case KL_PF_IVEC: {
      const kl_ivec *v = at;
      kl_str_append(s, "(");
      for (int i = 0; i < v->n; i++) kl_str_printf(s, i ? ", %lld" : "%lld", (long long)v->v[i]);
      kl_str_append(s, v->n == 1 ? ",)" : ")");
      break;
    }
    case KL_PF_PROGRAM: {
      const kl_program *body = *(kl_program *const *)at;
      if (body) print_program(s, body, indent + 4);
      else kl_str_append(s, "None");
      break;
    }
    case KL_PF_LOC: case KL_PF_HINT: break;
    }
  }
  if (!first) kl_str_append(s, "]");
}

static void print_program(kl_str *s, const kl_program *pg, int indent) {
  kl_str_append(s, "{ lambda ; ");
  for (int i = 0; i < pg->ninputs; i++) {
    print_name(s, pg->inputs[i]);
    kl_str_append(s, ":");
    print_aval(s, &pg->vals[pg->inputs[i]].aval);
    kl_str_append(s, " ");
  }
  kl_str_append(s, ". let\n");
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    kl_str_printf(s, "%*s", indent + 4, "");
    for (int i = 0; i < e->nout; i++) {
      print_name(s, e->outs[i]);
      kl_str_append(s, ":");
      print_aval(s, &pg->vals[e->outs[i]].aval);
      kl_str_append(s, " ");
    }
    kl_str_printf(s, "= %s", kl_prim_get(e->prim)->name);
    kl_params_print(s, e->prim, &e->p, indent);
    for (int i = 0; i < e->nin; i++) {
      kl_str_append(s, " ");
      print_name(s, e->ins[i]);
    }
    kl_str_append(s, "\n");
  }
  kl_str_printf(s, "%*sin (", indent + 2, "");
  for (int i = 0; i < pg->noutputs; i++) {
    if (i) kl_str_append(s, ", ");
    print_name(s, pg->outputs[i]);
  }
  kl_str_append(s, pg->noutputs == 1 ? ",) }" : ") }");
}

void kl_program_print(const kl_program *pg, kl_str *s) { print_program(s, pg, 0); }

/* ---- verification ---- */

int kl_program_verify(const kl_program *pg, char *err, size_t errlen) {
  char *defined = kl_calloc((size_t)pg->nvals + 1, 1);
  if (!defined) return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory verifying a program");
  int rc = 0;
  for (int i = 0; i < pg->ninputs; i++) defined[pg->inputs[i]] = 1;
  for (int k = 0; k < pg->neqns && !rc; k++) {
    const kl_eqn *e = &pg->eqns[k];
    kl_aval small[64], out_small[KL_FEW_OUTS];
    kl_aval *ins = e->nin > 64 ? kl_malloc(sizeof(kl_aval) * (size_t)e->nin) : small;
    kl_aval *outs = kl_prim_many_outs(e->prim) ? kl_malloc(sizeof(kl_aval) * KL_MAX_OUTS) : out_small;
    int nout = 0;
    if (!ins || !outs) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory verifying a program");
    for (int i = 0; i < e->nin && !rc; i++) {
      if (e->ins[i] < 0 || e->ins[i] >= pg->nvals || !defined[e->ins[i]]) {
        snprintf(err, errlen, "verify: equation %d (%s) uses value %d before it is defined", k, kl_prim_get(e->prim)->name, e->ins[i]);
        rc = -1;
      } else ins[i] = pg->vals[e->ins[i]].aval;
    }
    if (!rc && kl_prim_infer(e->prim, ins, e->nin, &e->p, outs, &nout, err, errlen)) rc = -1;
    for (const kl_param_field *f = kl_prim_get(e->prim)->fields; !rc && f->name; f++) {
      const kl_program *body = f->kind == KL_PF_PROGRAM ? *(kl_program *const *)kl_param_cptr(&e->p, f) : NULL;
      if (body && kl_program_verify(body, err, errlen)) rc = -1;
    }
    if (!rc && nout != e->nout) {
      snprintf(err, errlen, "verify: equation %d (%s) has %d outputs, rule says %d", k, kl_prim_get(e->prim)->name, e->nout, nout);
      rc = -1;
    }
    for (int i = 0; i < nout && !rc; i++) {
      if (!kl_aval_equal(&outs[i], &pg->vals[e->outs[i]].aval)) {
        snprintf(err, errlen, "verify: equation %d (%s) output %d has the wrong type", k, kl_prim_get(e->prim)->name, i);
        rc = -1;
      } else defined[e->outs[i]] = 1;
    }
    if (ins && ins != small) free(ins);
    if (outs && outs != out_small) free(outs);
  }
  for (int i = 0; i < pg->noutputs && !rc; i++)
    if (!defined[pg->outputs[i]]) {
      snprintf(err, errlen, "verify: output %d is never defined", i);
      rc = -1;
    }
  free(defined);
  return rc;
}

/* ---- hashing (FNV-1a over a canonical numbering) ---- */

static uint64_t mix(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

static uint64_t mix_aval(uint64_t h, const kl_aval *a) {
  h = mix(h, &a->ndim, 1);
  h = mix(h, &a->weak, 1);
  int d = (int)a->dtype;
  h = mix(h, &d, sizeof d);
  return mix(h, a->dims, sizeof(int64_t) * (size_t)a->ndim);
}

/* The canonical number of value v: its rank in definition order, or v itself when there was no
 * memory for the numbering (equal programs may then hash differently: a cache miss, never a
 * false match). */
#define CANON(v) (canon ? canon[v] : (v))

uint64_t kl_program_hash(const kl_program *pg) {
  uint64_t h = 0xcbf29ce484222325ULL;
  int *canon = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  int next = 0;
  for (int i = 0; i < pg->ninputs; i++) {
    if (canon) canon[pg->inputs[i]] = next++;
    h = mix_aval(h, &pg->vals[pg->inputs[i]].aval);
  }
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    int prim = (int)e->prim;
    h = mix(h, &prim, sizeof prim);
    for (int i = 0; i < e->nin; i++) {
      int c = CANON(e->ins[i]);
      h = mix(h, &c, sizeof c);
    }
    h = kl_params_hash(h, e->prim, &e->p);
    for (int i = 0; i < e->nout; i++) {
      if (canon) canon[e->outs[i]] = next++;
      h = mix_aval(h, &pg->vals[e->outs[i]].aval);
    }
  }
  for (int i = 0; i < pg->noutputs; i++) {
    int c = CANON(pg->outputs[i]);
    h = mix(h, &c, sizeof c);
  }
  free(canon);
  return h;
}

uint64_t kl_params_hash(uint64_t h, kl_prim prim, const kl_params *p) {
  for (const kl_param_field *f = kl_prim_get(prim)->fields; f->name; f++) {
    const void *at = kl_param_cptr(p, f);
    switch (f->kind) {
    case KL_PF_INT: h = mix(h, at, sizeof(int64_t)); break;
    case KL_PF_INT32: case KL_PF_DTYPE: case KL_PF_LOC: case KL_PF_HINT: h = mix(h, at, sizeof(int)); break;
    case KL_PF_FLOAT: case KL_PF_FLOAT_NZ: h = mix(h, at, sizeof(double)); break;
    case KL_PF_IVEC: {
      const kl_ivec *v = at;
      h = mix(h, &v->n, sizeof v->n);
      if (v->n) h = mix(h, v->v, sizeof(int64_t) * (size_t)v->n);
      break;
    }
    case KL_PF_PROGRAM: {
      const kl_program *body = *(kl_program *const *)at;
      uint64_t bh = body ? kl_program_hash(body) : 0;
      h = mix(h, &bh, sizeof bh);
      break;
    }
    }
  }
  return h;
}

int kl_params_equal(kl_prim prim, const kl_params *a, const kl_params *b) {
  for (const kl_param_field *f = kl_prim_get(prim)->fields; f->name; f++) {
    const void *x = kl_param_cptr(a, f), *y = kl_param_cptr(b, f);
    switch (f->kind) {
    case KL_PF_INT: if (memcmp(x, y, sizeof(int64_t))) return 0; break;
    case KL_PF_INT32: case KL_PF_DTYPE: case KL_PF_LOC: case KL_PF_HINT: if (memcmp(x, y, sizeof(int))) return 0; break;
    case KL_PF_FLOAT: case KL_PF_FLOAT_NZ: if (memcmp(x, y, sizeof(double))) return 0; break; /* bitwise: -0.0 is not 0.0 */
    case KL_PF_IVEC: {
      const kl_ivec *u = x, *v = y;
      if (u->n != v->n || (u->n && memcmp(u->v, v->v, sizeof(int64_t) * (size_t)u->n))) return 0;
      break;
    }
    case KL_PF_PROGRAM: {
      const kl_program *u = *(kl_program *const *)x, *v = *(kl_program *const *)y;
      if (u != v && (!u || !v || u->neqns != v->neqns || kl_program_hash(u) != kl_program_hash(v))) return 0;
      break;
    }
    }
  }
  return 1;
}

void kl_program_swap(kl_program *a, kl_program *b) {
  kl_program tmp = *a;
  *a = *b;
  *b = tmp;
  int rc = a->refcount;
  a->refcount = b->refcount;
  b->refcount = rc;
}
