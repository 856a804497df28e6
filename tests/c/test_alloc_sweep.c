/* test_alloc_sweep.c: makes the nth allocation of the core fail (ir/alloc.h), for every n, while
 * tracing (building a program), transforming it (jvp, vjp, vmap) and running the pass pipeline;
 * each step must then fail cleanly with KL_ERR_NOMEM (no abort, no crash; the ASan build also
 * finds no leak) or succeed, and the library must work afterwards. Compiling to machine code is
 * swept from Python (tests/test_alloc_failures.py). */
#include <string.h>

#include "../../include/kiln.h"
#include "check.h"

static char err[512];

/* f(x, i) = sum(take(sin(x) * x, i) * 2) over axis 0, with a checkpointed body: builds it in a
 * fresh program; NULL (status KL_ERR_NOMEM) when an allocation failed. */
static kl_program *build(void) {
  kl_program *body = kl_program_new(), *pg = kl_program_new();
  if (!body || !pg) goto fail;
  kl_aval xa = {.ndim = 2, .dtype = KL_F32, .dims = {4, 3}}, ia = {.ndim = 1, .dtype = KL_I32, .dims = {5}};
  int bx = kl_program_add_input(body, &xa), o[KL_MAX_OUTS], n;
  kl_params none;
  kl_params_init(&none, KL_P_SIN);
  if (bx < 0 || kl_program_add_eqn(body, KL_P_SIN, &bx, 1, &none, o, &n, err, sizeof err)) goto fail;
  int s = o[0];
  if (kl_program_add_eqn(body, KL_P_MUL, (int[]){s, bx}, 2, &none, o, &n, err, sizeof err)) goto fail;
  kl_program_set_outputs(body, o, 1);
  if (body->oom) goto fail;
  int x = kl_program_add_input(pg, &xa), i = kl_program_add_input(pg, &ia);
  if (x < 0 || i < 0) goto fail;
  kl_params cp, tp, sp;
  kl_params_init(&cp, KL_P_CHECKPOINT);
  cp.checkpoint.body = body;
  cp.checkpoint.prevent_cse = 1;
  if (kl_program_add_eqn(pg, KL_P_CHECKPOINT, &x, 1, &cp, o, &n, err, sizeof err)) goto fail;
  kl_params_init(&tp, KL_P_TAKE);
  if (kl_program_add_eqn(pg, KL_P_TAKE, (int[]){o[0], i}, 2, &tp, o, &n, err, sizeof err)) goto fail;
  int t = o[0];
  kl_params lit;
  kl_params_init(&lit, KL_P_CONST);
  lit.literal.dtype = KL_F32;
  lit.literal.value = 2;
  if (kl_program_add_eqn(pg, KL_P_CONST, NULL, 0, &lit, o, &n, err, sizeof err)) goto fail;
  int two = o[0];
  kl_params bp;
  kl_params_init(&bp, KL_P_BROADCAST_IN_DIM);
  int64_t shape[2] = {5, 3};
  bp.broadcast.shape = (kl_ivec){shape, 2};
  if (kl_program_add_eqn(pg, KL_P_BROADCAST_IN_DIM, &two, 1, &bp, o, &n, err, sizeof err)) goto fail;
  if (kl_program_add_eqn(pg, KL_P_MUL, (int[]){t, o[0]}, 2, &none, o, &n, err, sizeof err)) goto fail;
  int64_t axis0 = 0;
  kl_params_init(&sp, KL_P_REDUCE_SUM);
  sp.reduce.axes = (kl_ivec){&axis0, 1};
  if (kl_program_add_eqn(pg, KL_P_REDUCE_SUM, &o[0], 1, &sp, o, &n, err, sizeof err)) goto fail;
  kl_program_set_outputs(pg, o, 1);
  if (pg->oom) goto fail;
  kl_program_free(body);
  return pg;
fail:
  kl_program_free(body);
  kl_program_free(pg);
  return NULL;
}

/* The whole chain; returns the number of steps that failed, each checked to be out of memory. */
static int chain(void) {
  int failed = 0;
  kl_status_clear();
  kl_program *pg = build();
  if (!pg) {
    CHECK(kl_status_last() == KL_ERR_NOMEM || kl_status_last() == KL_OK, "build failed with status %d: %s",
          (int)kl_status_last(), err);
    return 1;
  }
  kl_program *outs[4] = {NULL, NULL, NULL, NULL};
  kl_status_clear();
  outs[0] = kl_jvp(pg, (const char[]){1, 0}, NULL, err, sizeof err);
  outs[1] = kl_vjp(pg, (const char[]){1, 0}, err, sizeof err);
  char batched;
  outs[2] = kl_vmap(pg, (const int[]){0, -1}, 3, &batched, err, sizeof err);
  outs[3] = outs[1] ? kl_pipeline_run(outs[1], KL_PIPE_COMPILE, err, sizeof err) : NULL;
  for (int k = 0; k < 4; k++) {
    if (outs[k]) {
      CHECK(!outs[k]->oom, "step %d returned a program marked out of memory", k);
      continue;
    }
    failed++;
    CHECK(kl_status_last() == KL_ERR_NOMEM, "step %d failed with status %d, not out of memory: %s", k,
          (int)kl_status_last(), err);
  }
  for (int k = 0; k < 4; k++) kl_program_free(outs[k]);
  kl_program_free(pg);
  return failed;
}

int main(void) {
  kl_alloc_fail_at(0);
  long before = kl_alloc_count();
  CHECK(chain() == 0, "the chain fails without any allocation failure: %s", err);
  long total = kl_alloc_count() - before, failures_seen = 0;
  CHECK(total > 50, "the chain makes %ld allocations: is the hook in the path?", total);
  for (long n = 1; n <= total; n++) {
    kl_alloc_fail_at(n);
    failures_seen += chain() > 0;
    kl_alloc_fail_at(0);
    if (failures) break; /* the first failing n is the one to debug */
  }
  CHECK(failures_seen > total / 2, "only %ld of %ld injected failures were noticed", failures_seen, total);
  CHECK(chain() == 0, "the library does not work after the sweep: %s", err);
  if (!failures) printf("test_alloc_sweep: ok (%ld allocations swept, %ld failures reported)\n", total, failures_seen);
  return failures != 0;
}
