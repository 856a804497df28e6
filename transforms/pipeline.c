/* pipeline.c: the named pass pipeline (see pipeline.h). Each pass is a row: its name (what
 * KILN_DUMP files and KILN_DISABLE_<NAME> switches are called), whether it may be turned off,
 * which pipelines run it, and the function. Depends only on ir/ and transforms/. */
#include "pipeline.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuse.h"

static int run_inline(kl_program *pg, char *err, size_t errlen) { return kl_inline_calls(pg, err, errlen); }

static int run_complex(kl_program *pg, char *err, size_t errlen) { return kl_complex_split(pg, err, errlen); }

static int run_legalize(kl_program *pg, char *err, size_t errlen) { return kl_legalize(pg, err, errlen); }

static int run_combine(kl_program *pg, char *err, size_t errlen) { return kl_combine_collectives(pg, err, errlen); }

static int run_hoist(kl_program *pg, char *err, size_t errlen) { return kl_hoist_collectives(pg, err, errlen); }

static int run_simplify(kl_program *pg, char *err, size_t errlen) {
  (void)err, (void)errlen;
  kl_simplify(pg);
  return 0;
}

static int run_cse(kl_program *pg, char *err, size_t errlen) {
  (void)err, (void)errlen;
  kl_cse(pg);
  return 0;
}

static int run_dce(kl_program *pg, char *err, size_t errlen) {
  (void)err, (void)errlen;
  kl_dce(pg);
  return 0;
}

enum { IN_COMPILE = 1 << KL_PIPE_COMPILE, IN_OPTIMIZE = 1 << KL_PIPE_OPTIMIZE };

static const struct {
  const char *name; /* lower case; KILN_DISABLE_<NAME> in upper case */
  int optional;     /* may be turned off (the result is still correct, only slower) */
  int pipelines;    /* IN_* bits */
  int (*run)(kl_program *pg, char *err, size_t errlen);
} passes[] = {
    {"inline", 0, IN_COMPILE, run_inline},                  /* call equations -> their bodies */
    {"complex", 0, IN_COMPILE, run_complex},                /* complex values -> real parts / packed pairs */
    {"legalize", 0, IN_COMPILE, run_legalize},              /* equations as their lowerings take them */
    {"combine", 1, IN_COMPILE, run_combine},                 /* psums joined (KILN_COMBINE_COLLECTIVES=1 only) */
    {"simplify", 1, IN_COMPILE | IN_OPTIMIZE, run_simplify}, /* algebraic identities, forwarding */
    {"cse", 1, IN_COMPILE | IN_OPTIMIZE, run_cse},           /* equal equations computed once */
    {"dce", 1, IN_COMPILE | IN_OPTIMIZE, run_dce},           /* unused equations dropped */
    {"hoist", 1, IN_COMPILE, run_hoist},                     /* collectives as early as their operands allow */
};
#define NPASSES ((int)(sizeof passes / sizeof passes[0]))

static int disabled(const char *name) {
  char var[64] = "KILN_DISABLE_";
  size_t k = 13;
  for (const char *c = name; *c && k + 1 < sizeof var; c++) var[k++] = (char)toupper((unsigned char)*c);
  var[k] = 0;
  const char *v = getenv(var);
  return v && *v && *v != '0';
}

/* Debug builds check the program after every pass (a broken pass fails here, named). */
static int verify(const kl_program *pg, const char *name, char *err, size_t errlen) {
#ifdef NDEBUG
  (void)pg, (void)name, (void)err, (void)errlen;
  return 0;
#else
  char why[512];
  if (!kl_program_verify(pg, why, sizeof why)) return 0;
  return kl_error(err, errlen, kl_status_last() == KL_ERR_NOMEM ? KL_ERR_NOMEM : KL_ERR_INTERNAL,
                  "internal error: the program after pass %s is malformed: %s", name, why);
#endif
}

static void dump(const kl_program *pg, int step, const char *name) {
  char what[64];
  kl_str text;
  kl_str_init(&text);
  kl_program_print(pg, &text);
  kl_str_append(&text, "\n");
  snprintf(what, sizeof what, "ir-%d-%s.txt", step, name);
  if (!text.failed) kl_dump(what, text.data); /* out of memory: the dump is skipped, not the pass */
  kl_str_free(&text);
}

/* Runs pass i inside the bodies of pg's equations too (checkpoint and custom rule bodies stay
 * programs in the OPTIMIZE pipeline): each body is copied, the pass runs on the copy (and its
 * bodies), and the copy replaces it (bodies are shared and never change in place). */
static int run_in_bodies(kl_program *pg, int i, char *err, size_t errlen) {
  for (int k = 0; k < pg->neqns; k++) {
    kl_eqn *e = &pg->eqns[k];
    for (const kl_param_field *f = kl_prim_get(e->prim)->fields; f->name; f++) {
      if (f->kind != KL_PF_PROGRAM) continue;
      kl_program **at = kl_param_ptr(&e->p, f);
      if (!*at) continue;
      kl_program *body = kl_program_copy(*at);
      if (!body) return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory copying a body for pass %s", passes[i].name);
      if (passes[i].run(body, err, errlen) || run_in_bodies(body, i, err, errlen) || body->oom) {
        int oom = body->oom;
        kl_program_free(body);
        return oom ? kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass %s", passes[i].name) : -1;
      }
      kl_params held; /* pg holds the new body through its body list; the old one it held stays there */
      memset(&held, 0, sizeof held);
      *(kl_program **)kl_param_ptr(&held, f) = body;
      kl_params copy;
      if (kl_params_copy(pg, e->prim, &copy, &held)) {
        kl_program_free(body);
        return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass %s", passes[i].name);
      }
      *at = body;
      kl_program_free(body); /* pg's reference remains */
    }
  }
  return 0;
}

kl_program *kl_pipeline_run(const kl_program *traced, kl_pipeline_kind kind, char *err, size_t errlen) {
  if (traced->oom) {
    kl_error(err, errlen, KL_ERR_NOMEM, "out of memory: the traced program is incomplete");
    return NULL;
  }
  kl_program *pg = kl_program_copy(traced);
  if (!pg) {
    kl_error(err, errlen, KL_ERR_NOMEM, "out of memory copying a program for the pass pipeline");
    return NULL;
  }
  int dumping = kl_dump_enabled(), step = 0;
  const char *log = getenv("KILN_LOG_COMPILES");
  int timing = log && *log == '2'; /* one line with each pass's time */
  char times[512];
  size_t tl = (size_t)snprintf(times, sizeof times, "kiln: passes (%d equations):", traced->neqns);
  if (dumping) dump(pg, step++, "traced");
  for (int i = 0; i < NPASSES; i++) {
    if (!(passes[i].pipelines & (1 << kind)) || (passes[i].optional && disabled(passes[i].name))) continue;
    struct timespec t0, t1;
    if (timing) clock_gettime(CLOCK_MONOTONIC, &t0);
    if (passes[i].run(pg, err, errlen) || run_in_bodies(pg, i, err, errlen) ||
        (pg->oom && kl_error(err, errlen, KL_ERR_NOMEM, "out of memory in pass %s", passes[i].name)) ||
        verify(pg, passes[i].name, err, errlen)) {
      kl_program_free(pg);
      return NULL;
    }
    if (timing && tl < sizeof times) {
      clock_gettime(CLOCK_MONOTONIC, &t1);
      double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
      tl += (size_t)snprintf(times + tl, sizeof times - tl, " %s %.2f ms", passes[i].name, ms);
    }
    if (dumping) dump(pg, step++, passes[i].name);
  }
  if (timing && kind == KL_PIPE_COMPILE) fprintf(stderr, "%s\n", times);
  return pg;
}
