/* program.c: building, printing, verifying and hashing Programs. */
#include "program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *grow(void *p, int *cap, int need, size_t elem) {
  if (need <= *cap) return p;
  int c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *q = realloc(p, (size_t)c * elem);
  if (!q) abort();
  *cap = c;
  return q;
}

kl_program *kl_program_new(void) {
  kl_program *pg = calloc(1, sizeof *pg);
  if (!pg) abort();
  kl_arena_init(&pg->arena);
  return pg;
}

void kl_program_free(kl_program *pg) {
  if (!pg) return;
  kl_arena_free(&pg->arena);
  free(pg->vals);
  free(pg->eqns);
  free(pg->inputs);
  free(pg);
}

static int new_value(kl_program *pg, const kl_aval *a, int producer) {
  pg->vals = grow(pg->vals, &pg->capvals, pg->nvals + 1, sizeof *pg->vals);
  pg->vals[pg->nvals].aval = *a;
  pg->vals[pg->nvals].producer = producer;
  return pg->nvals++;
}

int kl_program_add_input(kl_program *pg, const kl_aval *aval) {
  int id = new_value(pg, aval, -1);
  pg->inputs = grow(pg->inputs, &pg->capinputs, pg->ninputs + 1, sizeof *pg->inputs);
  pg->inputs[pg->ninputs++] = id;
  return id;
}

void kl_params_copy(kl_program *pg, kl_params *dst, const kl_params *src) {
  *dst = *src;
  for (int i = 0; i < 4; i++)
    dst->v[i] = src->nv[i] ? kl_arena_dup(&pg->arena, src->v[i], sizeof(int64_t) * (size_t)src->nv[i]) : NULL;
}

int kl_program_add_eqn(kl_program *pg, kl_prim prim, const int *ins, int nin, const kl_params *p,
                       int *outs, int *nout, char *err, size_t errlen, char *err_kind) {
  kl_aval in_avals[64], out_avals[KL_MAX_OUTS];
  kl_aval *iv = nin <= 64 ? in_avals : malloc(sizeof(kl_aval) * (size_t)nin);
  if (!iv) abort();
  memset(iv, 0, sizeof(kl_aval)); /* rank-0 prims read nothing; keeps the compiler's analysis quiet */
  for (int i = 0; i < nin; i++) {
    if (ins[i] < 0 || ins[i] >= pg->nvals) {
      snprintf(err, errlen, "%s: operand %d refers to an unknown value", kl_prim_get(prim)->name, i);
      *err_kind = 'V';
      if (iv != in_avals) free(iv);
      return -1;
    }
    iv[i] = pg->vals[ins[i]].aval;
  }
  int rc = kl_prim_infer(prim, nin ? iv : NULL, nin, p, out_avals, nout, err, errlen, err_kind);
  if (iv != in_avals) free(iv);
  if (rc) return rc;
  pg->eqns = grow(pg->eqns, &pg->capeqns, pg->neqns + 1, sizeof *pg->eqns);
  kl_eqn *e = &pg->eqns[pg->neqns];
  e->prim = prim;
  e->nin = nin;
  e->nout = *nout;
  e->ins = kl_arena_dup(&pg->arena, ins, sizeof(int) * (size_t)nin);
  e->outs = kl_arena_alloc(&pg->arena, sizeof(int) * (size_t)*nout);
  kl_params_copy(pg, &e->p, p);
  for (int i = 0; i < *nout; i++) outs[i] = e->outs[i] = new_value(pg, &out_avals[i], pg->neqns);
  pg->neqns++;
  return 0;
}

void kl_program_set_outputs(kl_program *pg, const int *outs, int n) {
  pg->outputs = kl_arena_dup(&pg->arena, outs, sizeof(int) * (size_t)n);
  pg->noutputs = n;
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

static void print_params(kl_str *s, const kl_eqn *e) {
  const char *spec = kl_prim_get(e->prim)->spec;
  int first = 1;
  while (*spec) {
    char name[64];
    const char *colon = strchr(spec, ':');
    if (!colon) break;
    size_t n = (size_t)(colon - spec);
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, spec, n);
    name[n] = 0;
    const char *slot = colon + 1;
    kl_str_append(s, first ? "[" : " ");
    first = 0;
    kl_str_printf(s, "%s=", name);
    if (slot[0] == 'v') {
      int k = slot[1] - '0';
      kl_str_append(s, "(");
      for (int i = 0; i < e->p.nv[k]; i++) kl_str_printf(s, i ? ", %lld" : "%lld", (long long)e->p.v[k][i]);
      kl_str_append(s, e->p.nv[k] == 1 ? ",)" : ")");
    } else if (slot[0] == 'i') {
      kl_str_printf(s, "%lld", (long long)(slot[1] == '0' ? e->p.i0 : e->p.i1));
    } else if (slot[0] == 'f') {
      kl_str_printf(s, "%.17g", e->p.f);
    } else if (slot[0] == 'd') {
      kl_str_append(s, e->p.d >= 0 ? kl_dtype_name((kl_dtype)e->p.d) : "None");
    }
    spec = slot;
    while (*spec && *spec != ' ') spec++;
    while (*spec == ' ') spec++;
  }
  if (!first) kl_str_append(s, "]");
}

void kl_program_print(const kl_program *pg, kl_str *s) {
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
    kl_str_append(s, "    ");
    for (int i = 0; i < e->nout; i++) {
      print_name(s, e->outs[i]);
      kl_str_append(s, ":");
      print_aval(s, &pg->vals[e->outs[i]].aval);
      kl_str_append(s, " ");
    }
    kl_str_printf(s, "= %s", kl_prim_get(e->prim)->name);
    print_params(s, e);
    for (int i = 0; i < e->nin; i++) {
      kl_str_append(s, " ");
      print_name(s, e->ins[i]);
    }
    kl_str_append(s, "\n");
  }
  kl_str_append(s, "  in (");
  for (int i = 0; i < pg->noutputs; i++) {
    if (i) kl_str_append(s, ", ");
    print_name(s, pg->outputs[i]);
  }
  kl_str_append(s, pg->noutputs == 1 ? ",) }" : ") }");
}

/* ---- verification ---- */

int kl_program_verify(const kl_program *pg, char *err, size_t errlen) {
  char *defined = calloc((size_t)pg->nvals + 1, 1);
  if (!defined) abort();
  int rc = 0;
  for (int i = 0; i < pg->ninputs; i++) defined[pg->inputs[i]] = 1;
  for (int k = 0; k < pg->neqns && !rc; k++) {
    const kl_eqn *e = &pg->eqns[k];
    kl_aval small[64], outs[KL_MAX_OUTS];
    kl_aval *ins = e->nin > 64 ? malloc(sizeof(kl_aval) * (size_t)e->nin) : small;
    int nout;
    char kind;
    if (!ins) abort();
    for (int i = 0; i < e->nin && !rc; i++) {
      if (e->ins[i] < 0 || e->ins[i] >= pg->nvals || !defined[e->ins[i]]) {
        snprintf(err, errlen, "verify: equation %d (%s) uses value %d before it is defined", k, kl_prim_get(e->prim)->name, e->ins[i]);
        rc = -1;
      } else ins[i] = pg->vals[e->ins[i]].aval;
    }
    if (!rc && kl_prim_infer(e->prim, ins, e->nin, &e->p, outs, &nout, err, errlen, &kind)) rc = -1;
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
    if (ins != small) free(ins);
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

uint64_t kl_program_hash(const kl_program *pg) {
  uint64_t h = 0xcbf29ce484222325ULL;
  int *canon = malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  if (!canon) abort();
  int next = 0;
  for (int i = 0; i < pg->ninputs; i++) {
    canon[pg->inputs[i]] = next++;
    h = mix_aval(h, &pg->vals[pg->inputs[i]].aval);
  }
  for (int k = 0; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    int prim = (int)e->prim;
    h = mix(h, &prim, sizeof prim);
    for (int i = 0; i < e->nin; i++) h = mix(h, &canon[e->ins[i]], sizeof(int));
    for (int i = 0; i < 4; i++) {
      h = mix(h, &e->p.nv[i], sizeof(int));
      if (e->p.nv[i]) h = mix(h, e->p.v[i], sizeof(int64_t) * (size_t)e->p.nv[i]);
    }
    h = mix(h, &e->p.i0, sizeof e->p.i0);
    h = mix(h, &e->p.i1, sizeof e->p.i1);
    h = mix(h, &e->p.f, sizeof e->p.f);
    h = mix(h, &e->p.d, sizeof e->p.d);
    for (int i = 0; i < e->nout; i++) {
      canon[e->outs[i]] = next++;
      h = mix_aval(h, &pg->vals[e->outs[i]].aval);
    }
  }
  for (int i = 0; i < pg->noutputs; i++) h = mix(h, &canon[pg->outputs[i]], sizeof(int));
  free(canon);
  return h;
}
