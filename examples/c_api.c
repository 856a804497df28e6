/* c_api.c: kiln's core from C, with no Python: builds f(x) = sum(sin(x) * x), transforms it (its
 * VJP, then vmap of f over a batch of rows), runs the pass pipeline, compiles for the CPU, runs
 * the executables and checks the numbers against the closed forms. Built and run by `make test`
 * (ctest), so the public header include/kiln.h stays enough for a client. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../include/kiln.h"

enum { N = 8, B = 3 };

static char err[1024];

static void fail(const char *what) {
  fprintf(stderr, "c_api: %s: %s\n", what, err);
  exit(1);
}

/* Appends prim(ins) to pg; returns its (first) result. */
static int emit(kl_program *pg, kl_prim prim, const int *ins, int nin, const kl_params *params) {
  int outs[KL_MAX_OUTS], nout;
  if (kl_program_add_eqn(pg, prim, ins, nin, params, outs, &nout, err, sizeof err)) fail("add_eqn");
  return outs[0];
}

static void borrowed(void *owner) { (void)owner; } /* the buffers below wrap arrays of main's */

/* Runs traced program pg on the CPU over float32 inputs; writes the outputs. */
static void run(const kl_program *pg, float **ins, const size_t *in_bytes, float **outs, const size_t *out_bytes) {
  kl_program *opt = kl_pipeline_run(pg, KL_PIPE_COMPILE, err, sizeof err);
  if (!opt) fail("pipeline");
  kl_exec *exe = kl_compile_cpu(opt, NULL, err, sizeof err);
  kl_program_free(opt);
  if (!exe) fail("compile");
  kl_buffer *in[4], *out[4];
  for (int i = 0; i < exe->ninputs; i++) in[i] = kl_buf_wrap(ins[i], in_bytes[i], borrowed, NULL);
  if (kl_exec_launch(exe, in, out, err, sizeof err)) fail("launch");
  for (int i = 0; i < exe->noutputs; i++) {
    if (kl_buf_wait(out[i]) != KL_BUF_READY) fail("wait");
    for (size_t k = 0; k < out_bytes[i] / sizeof(float); k++) outs[i][k] = ((float *)out[i]->data)[k];
    kl_buf_release(out[i]);
  }
  for (int i = 0; i < exe->ninputs; i++) kl_buf_release(in[i]);
  kl_exec_release(exe);
}

static int close_to(float got, double want) { return fabs(got - want) <= 1e-5 * (1 + fabs(want)); }

int main(void) {
  /* f(x) = sum(sin(x) * x) over x: f32[N] */
  kl_program *f = kl_program_new();
  kl_aval xa = {.ndim = 1, .dtype = KL_F32, .dims = {N}};
  int x = kl_program_add_input(f, &xa);
  kl_params none, sum;
  kl_params_init(&none, KL_P_SIN);
  kl_params_init(&sum, KL_P_REDUCE_SUM);
  int64_t axis0 = 0;
  sum.reduce.axes = (kl_ivec){&axis0, 1};
  int s = emit(f, KL_P_SIN, &x, 1, &none);
  int m = emit(f, KL_P_MUL, (int[]){s, x}, 2, &none);
  int y = emit(f, KL_P_REDUCE_SUM, &m, 1, &sum);
  kl_program_set_outputs(f, &y, 1);
  if (kl_program_verify(f, err, sizeof err)) fail("verify");
  kl_str text;
  kl_str_init(&text);
  kl_program_print(f, &text);
  printf("f =\n%s\n", text.data);
  kl_str_free(&text);

  /* its VJP: (x, cotangent of y) -> (y, dy/dx * cotangent) */
  kl_program *g = kl_vjp(f, (const char[]){1}, err, sizeof err);
  if (!g) fail("vjp");
  float xs[N], ct = 1, val, grad[N];
  for (int i = 0; i < N; i++) xs[i] = (float)(0.3 * i - 1.1);
  run(g, (float *[]){xs, &ct}, (size_t[]){sizeof xs, sizeof ct}, (float *[]){&val, grad},
      (size_t[]){sizeof val, sizeof grad});
  double want = 0;
  for (int i = 0; i < N; i++) {
    want += sin(xs[i]) * xs[i];
    if (!close_to(grad[i], cos(xs[i]) * xs[i] + sin(xs[i]))) {
      fprintf(stderr, "c_api: grad[%d] = %g, want %g\n", i, grad[i], cos(xs[i]) * xs[i] + sin(xs[i]));
      return 1;
    }
  }
  if (!close_to(val, want)) {
    fprintf(stderr, "c_api: f = %g, want %g\n", val, want);
    return 1;
  }

  /* vmap of f over B rows: f32[B, N] -> f32[B] */
  char batched;
  kl_program *v = kl_vmap(f, (const int[]){0}, B, &batched, err, sizeof err);
  if (!v) fail("vmap");
  float rows[B][N], per_row[B];
  for (int b = 0; b < B; b++)
    for (int i = 0; i < N; i++) rows[b][i] = (float)(0.1 * (b + 1) * i);
  run(v, (float *[]){&rows[0][0]}, (size_t[]){sizeof rows}, (float *[]){per_row}, (size_t[]){sizeof per_row});
  for (int b = 0; b < B; b++) {
    double w = 0;
    for (int i = 0; i < N; i++) w += sin(rows[b][i]) * rows[b][i];
    if (!batched || !close_to(per_row[b], w)) {
      fprintf(stderr, "c_api: vmap row %d = %g, want %g\n", b, per_row[b], w);
      return 1;
    }
  }
  kl_program_free(v);
  kl_program_free(g);
  kl_program_free(f);
  printf("c_api: ok (f, its gradient and its vmap match the closed forms)\n");
  return 0;
}
