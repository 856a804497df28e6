/* test_ir.c: unit tests of kiln's IR (ir/): building programs, shape rules and their
 * error messages, the printer's exact text, the verifier, the structural hash, DCE
 * (transforms/fuse.h) and the arena. Known bugs are checked with XFAIL (strict: a bug
 * that gets fixed fails the test until the XFAIL is turned into a CHECK).
 * Usage: test_ir   (exit status 0 on success) */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/arena.h"
#include "../../ir/program.h"
#include "../../transforms/fuse.h"
#include "../../codegen/lower/table.h"

#include "check.h"
/* A known bug: `cond` states the correct behaviour and is expected to be false today. */
#define XFAIL(cond, bug)                                                                  \
  do {                                                                                    \
    if (cond) {                                                                           \
      failures++;                                                                         \
      fprintf(stderr, "XPASS %s:%d: known bug fixed, make this a CHECK: %s\n", __FILE__, \
              __LINE__, bug);                                                             \
    } else {                                                                              \
      fprintf(stderr, "xfail %s:%d: %s\n", __FILE__, __LINE__, bug);                     \
    }                                                                                     \
  } while (0)

static kl_aval aval(kl_dtype t, int ndim, const int64_t *dims) {
  kl_aval a;
  memset(&a, 0, sizeof a);
  a.dtype = t;
  a.ndim = (int8_t)ndim;
  for (int i = 0; i < ndim; i++) a.dims[i] = dims[i];
  return a;
}

static kl_aval aval2(kl_dtype t, int64_t d0, int64_t d1) {
  int64_t d[2] = {d0, d1};
  return aval(t, 2, d);
}

static kl_prim prim(const char *name) {
  kl_prim p;
  if (kl_prim_from_name(name, &p)) {
    fprintf(stderr, "FAIL: unknown primitive %s\n", name);
    exit(1);
  }
  return p;
}

static char err[512];

/* Appends `name(ins)` and returns its first output id, or -1 (message in err). */
static int eqn(kl_program *pg, const char *name, const int *ins, int nin, const kl_params *p) {
  kl_params none;
  kl_params_init(&none, prim(name));
  int outs[KL_MAX_OUTS], nout = 0;
  err[0] = 0;

  if (kl_program_add_eqn(pg, prim(name), ins, nin, p ? p : &none, outs, &nout, err, sizeof err))
    return -1;
  return outs[0];
}

static int eqn1(kl_program *pg, const char *name, int a) { return eqn(pg, name, &a, 1, NULL); }
static int eqn2(kl_program *pg, const char *name, int a, int b) {
  int ins[2] = {a, b};
  return eqn(pg, name, ins, 2, NULL);
}

static int reduce_sum(kl_program *pg, int x, int64_t axis) {
  kl_params p;
  kl_params_init(&p, KL_P_REDUCE_SUM);
  p.reduce.axes.v = &axis;
  p.reduce.axes.n = 1;
  return eqn(pg, "reduce_sum", &x, 1, &p);
}

static char *text_of(const kl_program *pg) {
  kl_str s;
  kl_str_init(&s);
  kl_program_print(pg, &s);
  return s.data; /* owned by the caller */
}

/* x:f32[2,3], y:f32[2,3] -> reduce_sum(sin(x) * y, axis 1) */
static kl_program *small_program(void) {
  kl_program *pg = kl_program_new();
  kl_aval a = aval2(KL_F32, 2, 3);
  int x = kl_program_add_input(pg, &a);
  int y = kl_program_add_input(pg, &a);
  int s = eqn1(pg, "sin", x);
  int m = eqn2(pg, "mul", s, y);
  int r = reduce_sum(pg, m, 1);
  kl_program_set_outputs(pg, &r, 1);
  return pg;
}

/* -------------------------------------------------------------------- tests */

static void test_build(void) {
  kl_program *pg = small_program();
  CHECK(pg->ninputs == 2 && pg->neqns == 3 && pg->noutputs == 1, "counts %d %d %d", pg->ninputs, pg->neqns,
        pg->noutputs);
  CHECK(pg->nvals == 5, "nvals %d", pg->nvals);
  const kl_aval *out = &pg->vals[pg->outputs[0]].aval;
  CHECK(out->ndim == 1 && out->dims[0] == 2 && out->dtype == KL_F32 && !out->weak, "reduce_sum aval");
  CHECK(pg->vals[0].producer == -1 && pg->vals[1].producer == -1, "inputs have no producer");
  CHECK(pg->vals[2].producer == 0 && pg->vals[4].producer == 2, "producers");
  CHECK(kl_program_verify(pg, err, sizeof err) == 0, "verify: %s", err);
  kl_program_free(pg);

  /* Comparisons give bool; convert gives the new dtype; multi-output primitives (qr). */
  pg = kl_program_new();
  kl_aval a = aval2(KL_F64, 4, 3);
  int x = kl_program_add_input(pg, &a);
  int c = eqn2(pg, "lt", x, x);
  CHECK(c >= 0 && pg->vals[c].aval.dtype == KL_BOOL && pg->vals[c].aval.dims[1] == 3, "lt -> bool");
  kl_params p;
  kl_params_init(&p, KL_P_CONVERT);
  p.convert.new_dtype = KL_I8;
  int cv = eqn(pg, "convert_element_type", &x, 1, &p);
  CHECK(cv >= 0 && pg->vals[cv].aval.dtype == KL_I8, "convert -> i8");
  kl_params_init(&p, KL_P_QR);
  p.qr.full_matrices = 0; /* full_matrices=False */
  int outs[KL_MAX_OUTS], nout = 0;
  int rc = kl_program_add_eqn(pg, prim("qr"), &x, 1, &p, outs, &nout, err, sizeof err);
  CHECK(rc == 0 && nout == 2, "qr: rc %d nout %d %s", rc, nout, err);
  if (rc == 0 && nout == 2) {
    const kl_aval *q = &pg->vals[outs[0]].aval, *r = &pg->vals[outs[1]].aval;
    CHECK(q->dims[0] == 4 && q->dims[1] == 3 && r->dims[0] == 3 && r->dims[1] == 3, "reduced qr shapes");
  }
  /* dot_general with a batch dimension: [5,4,3] x [5,3,2] -> [5,4,2] */
  int64_t d1[3] = {5, 4, 3}, d2[3] = {5, 3, 2};
  kl_aval l = aval(KL_F32, 3, d1), r = aval(KL_F32, 3, d2);
  int li = kl_program_add_input(pg, &l), ri = kl_program_add_input(pg, &r);
  int64_t lc = 2, rcn = 1, lb = 0, rb = 0;
  kl_params_init(&p, KL_P_DOT_GENERAL);
  p.dot.lhs_contracting.v = &lc; p.dot.lhs_contracting.n = 1;
  p.dot.rhs_contracting.v = &rcn; p.dot.rhs_contracting.n = 1;
  p.dot.lhs_batch.v = &lb; p.dot.lhs_batch.n = 1;
  p.dot.rhs_batch.v = &rb; p.dot.rhs_batch.n = 1;
  int ins[2] = {li, ri};
  int dg = eqn(pg, "dot_general", ins, 2, &p);
  CHECK(dg >= 0, "dot_general: %s", err);
  if (dg >= 0) {
    const kl_aval *o = &pg->vals[dg].aval;
    CHECK(o->ndim == 3 && o->dims[0] == 5 && o->dims[1] == 4 && o->dims[2] == 2, "dot_general shape");
  }
  /* Params are copied into the program's arena: the caller's vectors may go away. */
  int64_t perm[2] = {1, 0};
  kl_params_init(&p, KL_P_TRANSPOSE);
  p.transpose.permutation.v = perm;
  p.transpose.permutation.n = 2;
  int t = eqn(pg, "transpose", &x, 1, &p);
  perm[0] = 7;
  CHECK(t >= 0 && pg->eqns[pg->neqns - 1].p.transpose.permutation.v != perm &&
            pg->eqns[pg->neqns - 1].p.transpose.permutation.v[0] == 1,
        "params copied");
  CHECK(pg->vals[t].aval.dims[0] == 3 && pg->vals[t].aval.dims[1] == 4, "transpose shape");
  kl_program_set_outputs(pg, &t, 1);
  CHECK(kl_program_verify(pg, err, sizeof err) == 0, "verify: %s", err);
  kl_program_free(pg);
}

/* A failed add_eqn leaves the program unchanged and names the primitive. */
/* Expects a failure with status want ('T': KL_ERR_TYPE, 'V': KL_ERR_VALUE) naming needle. */
static void expect_error(int rc, char want_kind, const char *needle) {
  kl_status want = want_kind == 'T' ? KL_ERR_TYPE : KL_ERR_VALUE, got = kl_status_last();
  CHECK(rc == -1, "expected an error mentioning '%s'", needle);
  CHECK(got == want, "error status %d, want %d (%s)", (int)got, (int)want, err);
  kl_status_clear();
  CHECK(strstr(err, needle) != NULL, "error '%s' should mention '%s'", err, needle);
}

static void test_shape_rule_errors(void) {
  kl_program *pg = kl_program_new();
  kl_aval a = aval2(KL_F32, 2, 3), b = aval2(KL_F32, 3, 2), c = aval2(KL_I32, 2, 3);
  int x = kl_program_add_input(pg, &a), y = kl_program_add_input(pg, &b), z = kl_program_add_input(pg, &c);
  int nvals = pg->nvals;

  expect_error(eqn2(pg, "add", x, y), 'V', "add");
  CHECK(strstr(err, "[2,3]") && strstr(err, "[3,2]"), "shapes in message: %s", err);
  expect_error(eqn2(pg, "mul", x, z), 'T', "mul");
  CHECK(strstr(err, "int32") && strstr(err, "float32"), "dtypes in message: %s", err);
  expect_error(eqn1(pg, "sin", z), 'T', "sin");
  expect_error(eqn2(pg, "and", x, x), 'T', "and");
  expect_error(eqn2(pg, "shift_left", x, x), 'T', "shift_left");
  expect_error(eqn1(pg, "sin", 99), 'V', "sin"); /* unknown value id */
  CHECK(eqn2(pg, "add", x, x) >= 0 && pg->neqns == 1, "a good add is appended: %s", err);
  {
    int ins[3] = {x, x, x};
    expect_error(eqn(pg, "add", ins, 3, NULL), 'V', "add");
  }
  kl_params p;
  kl_params_init(&p, KL_P_RESHAPE);
  int64_t ns[2] = {4, 2};
  p.reshape.new_sizes.v = ns;
  p.reshape.new_sizes.n = 2;
  expect_error(eqn(pg, "reshape", &x, 1, &p), 'V', "reshape");
  int64_t perm[2] = {0, 0};
  kl_params_init(&p, KL_P_TRANSPOSE);
  p.transpose.permutation.v = perm;
  p.transpose.permutation.n = 2;
  expect_error(eqn(pg, "transpose", &x, 1, &p), 'V', "transpose");
  expect_error(reduce_sum(pg, x, 2), 'V', "reduce_sum");
  int64_t bshape[2] = {5, 3}, bdims[2] = {0, 1};
  kl_params_init(&p, KL_P_BROADCAST_IN_DIM);
  p.broadcast.shape.v = bshape; p.broadcast.shape.n = 2;
  p.broadcast.broadcast_dimensions.v = bdims; p.broadcast.broadcast_dimensions.n = 2;
  expect_error(eqn(pg, "broadcast_in_dim", &x, 1, &p), 'V', "broadcast_in_dim");
  int64_t st[2] = {0, 0}, lim[2] = {3, 3}, str[2] = {1, 1};
  kl_params_init(&p, KL_P_SLICE);
  p.slice.start_indices.v = st; p.slice.start_indices.n = 2;
  p.slice.limit_indices.v = lim; p.slice.limit_indices.n = 2;
  p.slice.strides.v = str; p.slice.strides.n = 2;
  expect_error(eqn(pg, "slice", &x, 1, &p), 'V', "slice");
  kl_params_init(&p, KL_P_CONCATENATE);
  p.concatenate.dimension = 0;
  {
    int ins[2] = {x, z};
    expect_error(eqn(pg, "concatenate", ins, 2, &p), 'V', "concatenate");
  }
  {
    int64_t lc = 1, rc = 1;
    kl_params_init(&p, KL_P_DOT_GENERAL);
    p.dot.lhs_contracting.v = &lc; p.dot.lhs_contracting.n = 1;
    p.dot.rhs_contracting.v = &rc; p.dot.rhs_contracting.n = 1;
    int ins[2] = {x, y}; /* contracting 3 with 2 */
    expect_error(eqn(pg, "dot_general", ins, 2, &p), 'T', "dot_general");
  }
  expect_error(eqn1(pg, "cholesky", x), 'V', "cholesky"); /* not square */
  {
    int ins[3] = {x, x, x}; /* a float predicate */
    expect_error(eqn(pg, "select_n", ins, 3, NULL), 'T', "select_n");
  }
  CHECK(pg->neqns == 1 && pg->nvals == nvals + 1, "failed equations leave the program unchanged (%d eqns, %d vals)",
        pg->neqns, pg->nvals);
  kl_program_free(pg);

  /* The rule itself, without a program. */
  kl_aval outs[KL_MAX_OUTS];
  int nout;
  kl_aval ins[2] = {a, b};
  kl_params_init(&p, KL_P_SUB);
  CHECK(kl_prim_infer(prim("sub"), ins, 2, &p, outs, &nout, err, sizeof err) == -1 && strstr(err, "sub"),
        "kl_prim_infer sub: %s", err);
  ins[1] = a;
  CHECK(kl_prim_infer(prim("sub"), ins, 2, &p, outs, &nout, err, sizeof err) == 0 && nout == 1 &&
            kl_aval_equal(&outs[0], &a),
        "kl_prim_infer sub ok");
  kl_prim q;
  CHECK(kl_prim_from_name("no_such_prim", &q) != 0, "unknown names are rejected");
  CHECK(strcmp(kl_prim_get(prim("shift_right_logical"))->name, "shift_right_logical") == 0, "name round trip");
  const kl_param_field *pf = kl_prim_param(prim("slice"), "strides");
  CHECK(pf && pf->kind == KL_PF_IVEC && pf->offset == offsetof(kl_params, slice.strides), "field of slice.strides");
  pf = kl_prim_param(prim("dot_general"), "preferred_element_type");
  CHECK(pf && pf->kind == KL_PF_DTYPE && pf->offset == offsetof(kl_params, dot.preferred_element_type),
        "field of a dtype param");
  CHECK(kl_prim_param(prim("add"), "axes") == NULL, "add has no axes");
  /* a hint (sort's random_keys) is never printed, but hashed and compared: a program using it
   * compiles apart from one that does not */
  pf = kl_prim_param(prim("sort"), "random_keys");
  CHECK(pf && pf->kind == KL_PF_HINT, "sort's random_keys is a hint");
  kl_params s0, s1;
  kl_params_init(&s0, KL_P_SORT);
  s0.sort.num_keys = 1;
  s1 = s0;
  s1.sort.random_keys = 1;
  kl_str t0, t1;
  kl_str_init(&t0);
  kl_str_init(&t1);
  kl_params_print(&t0, KL_P_SORT, &s0, 0);
  kl_params_print(&t1, KL_P_SORT, &s1, 0);
  CHECK(t0.data && t1.data && strcmp(t0.data, t1.data) == 0 && !strstr(t1.data, "random"), "a hint is not printed: %s",
        t1.data ? t1.data : "(null)");
  CHECK(kl_params_hash(0, KL_P_SORT, &s0) != kl_params_hash(0, KL_P_SORT, &s1), "a hint is hashed");
  CHECK(!kl_params_equal(KL_P_SORT, &s0, &s1), "a hint is compared");
  kl_str_free(&t0);
  kl_str_free(&t1);
}

static void test_printer(void) {
  kl_program *pg = small_program();
  char *t = text_of(pg);
  const char *want =
      "{ lambda ; a:f32[2,3] b:f32[2,3] . let\n"
      "    c:f32[2,3] = sin a\n"
      "    d:f32[2,3] = mul c b\n"
      "    e:f32[2] = reduce_sum[axes=(1,)] d\n"
      "  in (e,) }";
  CHECK(t && strcmp(t, want) == 0, "printer:\n%s\nwant:\n%s", t ? t : "(null)", want);
  free(t);
  kl_program_free(pg);

  /* Weak types, 0-d values, int params, several outputs, dtype params. */
  pg = kl_program_new();
  int64_t d = 4;
  kl_aval v = aval(KL_I32, 1, &d);
  int x = kl_program_add_input(pg, &v);
  kl_params p;
  kl_params_init(&p, KL_P_CONST);
  p.literal.dtype = KL_I32;
  p.literal.weak_type = 1;
  p.literal.int_value = 3;
  int lit = eqn(pg, "literal", NULL, 0, &p);
  int64_t shape = 4;
  kl_params_init(&p, KL_P_BROADCAST_IN_DIM);
  p.broadcast.shape.v = &shape;
  p.broadcast.shape.n = 1;
  int bc = eqn(pg, "broadcast_in_dim", &lit, 1, &p);
  int s = eqn2(pg, "add", x, bc);
  kl_params_init(&p, KL_P_CONVERT);
  p.convert.new_dtype = KL_BF16;
  int cv = eqn(pg, "convert_element_type", &s, 1, &p);
  int outs[2] = {cv, x};
  kl_program_set_outputs(pg, outs, 2);
  t = text_of(pg);
  want =
      "{ lambda ; a:i32[4] . let\n"
      "    b:i32[]{weak} = literal[dtype=int32 weak_type=1 int_value=3 value=0]\n"
      "    c:i32[4]{weak} = broadcast_in_dim[shape=(4,) broadcast_dimensions=()] b\n";
  CHECK(t && strncmp(t, want, strlen(want)) == 0, "printer (literal):\n%s", t ? t : "(null)");
  CHECK(t && strstr(t, "    e:bf16[4] = convert_element_type[new_dtype=bfloat16 weak_type=0] d\n"), "convert line:\n%s", t ? t : "");
  CHECK(t && strstr(t, "  in (e, a) }"), "two outputs:\n%s", t ? t : "");
  /* add(i32, i32{weak}) is strong */
  CHECK(t && strstr(t, "    d:i32[4] = add a c\n"), "add line:\n%s", t ? t : "");
  free(t);
  kl_program_free(pg);

  /* Names past z: a..z, ba, bb, ... */
  pg = kl_program_new();
  kl_aval sc = aval(KL_F32, 0, NULL);
  int y = kl_program_add_input(pg, &sc);
  for (int i = 0; i < 27; i++) y = eqn1(pg, "neg", y);
  kl_program_set_outputs(pg, &y, 1);
  t = text_of(pg);
  CHECK(t && strstr(t, "    z:f32[] = neg y\n") && strstr(t, "    ba:f32[] = neg z\n") &&
            strstr(t, "    bb:f32[] = neg ba\n") && strstr(t, "  in (bb,) }"),
        "names past z:\n%s", t ? t : "");
  free(t);
  kl_program_free(pg);
}

static void test_verifier(void) {
  kl_program *pg = small_program();
  CHECK(kl_program_verify(pg, err, sizeof err) == 0, "good program: %s", err);

  /* Use before definition: the mul reads the reduce_sum's output. */
  int saved = pg->eqns[1].ins[0];
  pg->eqns[1].ins[0] = pg->eqns[2].outs[0];
  CHECK(kl_program_verify(pg, err, sizeof err) == -1, "use before definition accepted");
  CHECK(strstr(err, "mul") != NULL, "message names the equation's primitive: %s", err);
  pg->eqns[1].ins[0] = saved;
  CHECK(kl_program_verify(pg, err, sizeof err) == 0, "restored: %s", err);

  /* An out-of-range value id. */
  pg->eqns[1].ins[1] = 1000;
  CHECK(kl_program_verify(pg, err, sizeof err) == -1, "unknown value id accepted");
  pg->eqns[1].ins[1] = 1;

  /* A wrong recorded output type. */
  pg->vals[pg->eqns[0].outs[0]].aval.dtype = KL_F64;
  CHECK(kl_program_verify(pg, err, sizeof err) == -1, "wrong output dtype accepted");
  pg->vals[pg->eqns[0].outs[0]].aval.dtype = KL_F32;
  pg->vals[pg->eqns[2].outs[0]].aval.dims[0] = 3;
  CHECK(kl_program_verify(pg, err, sizeof err) == -1, "wrong output shape accepted");
  pg->vals[pg->eqns[2].outs[0]].aval.dims[0] = 2;

  /* Corrupted params: the rule rejects them again. */
  pg->eqns[2].p.reduce.axes.v[0] = 5;
  CHECK(kl_program_verify(pg, err, sizeof err) == -1 && strstr(err, "reduce_sum"), "bad axes accepted: %s", err);
  pg->eqns[2].p.reduce.axes.v[0] = 1;

  /* An input whose type no longer fits its consumer. */
  pg->vals[1].aval.dtype = KL_I32;
  CHECK(kl_program_verify(pg, err, sizeof err) == -1, "dtype mismatch accepted");
  pg->vals[1].aval.dtype = KL_F32;

  /* Equations out of order. */
  kl_eqn tmp = pg->eqns[0];
  pg->eqns[0] = pg->eqns[1];
  pg->eqns[1] = tmp;
  CHECK(kl_program_verify(pg, err, sizeof err) == -1, "swapped equations accepted");
  pg->eqns[1] = pg->eqns[0];
  pg->eqns[0] = tmp;

  /* An output that is never defined. */
  int bad = 4;
  pg->neqns = 2; /* drop the reduce_sum: its value is now undefined */
  kl_program_set_outputs(pg, &bad, 1);
  CHECK(kl_program_verify(pg, err, sizeof err) == -1, "undefined output accepted");
  pg->neqns = 3;
  CHECK(kl_program_verify(pg, err, sizeof err) == 0, "restored again: %s", err);
  kl_program_free(pg);
}

/* Verifier and equations with more than 64 operands (a concatenate of many arrays). */
static void test_verify_many_operands(void) {
  enum { N = 70 };
  kl_program *pg = kl_program_new();
  int64_t d = 2;
  kl_aval a = aval(KL_F32, 1, &d);
  int ins[N];
  for (int i = 0; i < N; i++) ins[i] = kl_program_add_input(pg, &a);
  kl_params p;
  kl_params_init(&p, KL_P_CONCATENATE);
  p.concatenate.dimension = 0;
  int c = eqn(pg, "concatenate", ins, N, &p);
  CHECK(c >= 0 && pg->vals[c].aval.dims[0] == 2 * N, "concatenate of %d: %s", N, err);
  int n = eqn1(pg, "neg", c);
  kl_program_set_outputs(pg, &n, 1);
  int rc = kl_program_verify(pg, err, sizeof err);
  /* regression: the verifier skipped equations with more than 64 operands without marking their
   * outputs defined, so a valid 70-way concatenate was rejected */
  CHECK(rc == 0, "verify of a 70-way concatenate: %s", err);
  if (rc) fprintf(stderr, "      (verify said: %s)\n", err);
  kl_program_free(pg);
}

static kl_program *hash_program(kl_dtype t, int64_t axis, int extra_first) {
  kl_program *pg = kl_program_new();
  kl_aval a = aval2(t, 2, 3);
  int x = kl_program_add_input(pg, &a);
  int y = kl_program_add_input(pg, &a);
  int s, m;
  if (extra_first) { /* same program, equations emitted in another order: other value ids */
    m = eqn2(pg, "mul", x, y);
    s = eqn1(pg, "exp", x);
  } else {
    s = eqn1(pg, "exp", x);
    m = eqn2(pg, "mul", x, y);
  }
  int add = eqn2(pg, "add", s, m);
  int r = reduce_sum(pg, add, axis);
  kl_program_set_outputs(pg, &r, 1);
  return pg;
}

static void test_hash(void) {
  kl_program *p1 = hash_program(KL_F32, 1, 0), *p2 = hash_program(KL_F32, 1, 0);
  CHECK(kl_program_hash(p1) == kl_program_hash(p2), "identical programs hash equal");

  /* Renumbered: the same program built with an unused value in between (then DCE'd away),
   * so every later value id shifts by one. */
  kl_program *p3 = kl_program_new();
  kl_aval a = aval2(KL_F32, 2, 3);
  int x = kl_program_add_input(p3, &a), y = kl_program_add_input(p3, &a);
  eqn1(p3, "cos", y); /* dead */
  int s = eqn1(p3, "exp", x);
  int m = eqn2(p3, "mul", x, y);
  int r = reduce_sum(p3, eqn2(p3, "add", s, m), 1);
  kl_program_set_outputs(p3, &r, 1);
  CHECK(kl_program_hash(p3) != kl_program_hash(p1), "the dead cos still counts before DCE");
  kl_dce(p3);
  CHECK(p3->neqns == 4, "dce left %d equations", p3->neqns);
  CHECK(r != p1->outputs[0], "value ids really differ (%d vs %d)", r, p1->outputs[0]);
  CHECK(kl_program_hash(p3) == kl_program_hash(p1), "renumbered-equal programs hash equal");

  kl_program *q1 = hash_program(KL_F32, 0, 0); /* differs in a param */
  kl_program *q2 = hash_program(KL_F64, 1, 0); /* differs in a dtype */
  kl_program *q3 = hash_program(KL_F32, 1, 1); /* differs in equation order */
  CHECK(kl_program_hash(q1) != kl_program_hash(p1), "a param changes the hash");
  CHECK(kl_program_hash(q2) != kl_program_hash(p1), "a dtype changes the hash");
  CHECK(kl_program_hash(q3) != kl_program_hash(p1), "equation order changes the hash");

  /* Operand order matters (sub is not commutative). */
  kl_program *s1 = kl_program_new(), *s2 = kl_program_new();
  int a1 = kl_program_add_input(s1, &a), b1 = kl_program_add_input(s1, &a);
  int a2 = kl_program_add_input(s2, &a), b2 = kl_program_add_input(s2, &a);
  int o1 = eqn2(s1, "sub", a1, b1), o2 = eqn2(s2, "sub", b2, a2);
  kl_program_set_outputs(s1, &o1, 1);
  kl_program_set_outputs(s2, &o2, 1);
  CHECK(kl_program_hash(s1) != kl_program_hash(s2), "operand order changes the hash");
  /* So does which value is an output, and weak typing of an input. */
  kl_program_set_outputs(s2, &a2, 1);
  kl_program *s3 = kl_program_new();
  kl_aval w = a;
  w.weak = 1;
  int a3 = kl_program_add_input(s3, &a), b3 = kl_program_add_input(s3, &w);
  int o3 = eqn2(s3, "sub", a3, b3);
  kl_program_set_outputs(s3, &o3, 1);
  CHECK(kl_program_hash(s3) != kl_program_hash(s1), "a weak input changes the hash");
  /* A literal's value is a param too. */
  kl_program *l1 = kl_program_new(), *l2 = kl_program_new();
  kl_params p;
  kl_params_init(&p, KL_P_CONST);
  p.literal.dtype = KL_F32;
  p.literal.value = 1.5;
  int v1 = eqn(l1, "literal", NULL, 0, &p);
  p.literal.value = 2.5;
  int v2 = eqn(l2, "literal", NULL, 0, &p);
  kl_program_set_outputs(l1, &v1, 1);
  kl_program_set_outputs(l2, &v2, 1);
  CHECK(kl_program_hash(l1) != kl_program_hash(l2), "literal values change the hash");

  kl_program *all[] = {p1, p2, p3, q1, q2, q3, s1, s2, s3, l1, l2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) kl_program_free(all[i]);
}

static void test_dce(void) {
  kl_program *pg = kl_program_new();
  kl_aval a = aval2(KL_F32, 2, 3);
  int x = kl_program_add_input(pg, &a), y = kl_program_add_input(pg, &a);
  int dead1 = eqn1(pg, "exp", x);
  int live1 = eqn1(pg, "sin", x);
  int dead2 = eqn2(pg, "add", dead1, y); /* dead chain */
  int live2 = eqn2(pg, "mul", live1, y);
  (void)dead2;
  int outs[2] = {live2, live1};
  kl_program_set_outputs(pg, outs, 2);
  kl_dce(pg);
  CHECK(pg->neqns == 2, "dce kept %d equations, want 2", pg->neqns);
  CHECK(pg->eqns[0].prim == prim("sin") && pg->eqns[1].prim == prim("mul"), "dce keeps order");
  CHECK(pg->vals[live1].producer == 0 && pg->vals[live2].producer == 1, "producers renumbered");
  CHECK(pg->ninputs == 2, "inputs are kept even when unused");
  CHECK(kl_program_verify(pg, err, sizeof err) == 0, "after dce: %s", err);
  char *t = text_of(pg);
  CHECK(t && !strstr(t, "exp") && !strstr(t, "add") && strstr(t, "sin") && strstr(t, "mul"), "text after dce:\n%s",
        t ? t : "");
  free(t);
  kl_dce(pg); /* idempotent */
  CHECK(pg->neqns == 2, "second dce");
  kl_program_free(pg);

  /* A multi-output equation stays when any of its outputs is used. */
  pg = kl_program_new();
  kl_aval sq = aval2(KL_F32, 3, 3);
  x = kl_program_add_input(pg, &sq);
  kl_params p;
  kl_params_init(&p, KL_P_QR);
  p.qr.full_matrices = 1;
  int qo[KL_MAX_OUTS], nq = 0;
  CHECK(kl_program_add_eqn(pg, prim("qr"), &x, 1, &p, qo, &nq, err, sizeof err) == 0, "qr: %s", err);
  kl_program_set_outputs(pg, &qo[1], 1); /* only R */
  kl_dce(pg);
  CHECK(pg->neqns == 1, "qr kept");
  /* Nothing used: everything goes. */
  kl_program_set_outputs(pg, &x, 1);
  kl_dce(pg);
  CHECK(pg->neqns == 0, "all dead: %d left", pg->neqns);
  CHECK(kl_program_verify(pg, err, sizeof err) == 0, "identity program: %s", err);
  kl_program_free(pg);
}

/* Evaluations one kernel performs per element for value v: materialized inputs are loads,
 * everything else is recomputed inline (counted as a tree; memo[] caches per value, < 0 unset). */
static double inline_cost(const kl_program *pg, const kl_plan *plan, int v, int is_root, double *memo) {
  if (!is_root && plan->materialized[v]) return 0;
  if (!is_root && memo[v] >= 0) return memo[v];
  int k = pg->vals[v].producer;
  double c = 0;
  if (k >= 0) {
    const kl_eqn *e = &pg->eqns[k];
    c = 1;
    for (int i = 0; i < e->nin; i++) c += inline_cost(pg, plan, e->ins[i], 0, memo);
  }
  if (!is_root) memo[v] = c;
  return c;
}

/* Evaluations per element of a kernel as its emitter does them: a value that elementwise
 * operations read at the element being computed is computed once however many reads there are
 * (kk_emit_value memoizes it per element); below an index-moving operation (rev, slice, ...)
 * every read recomputes (inline_cost). */
static double kernel_evals(const kl_program *pg, const kl_plan *plan, int v, int is_root, char *seen, double *memo) {
  if (!is_root && plan->materialized[v]) return 0;
  if (seen[v]) return 0;
  seen[v] = 1;
  int k = pg->vals[v].producer;
  if (k < 0) return 0;
  const kl_eqn *e = &pg->eqns[k];
  double c = 1;
  for (int i = 0; i < e->nin; i++)
    c += kl_form_elementwise(kl_prim_get(e->prim)->form) ? kernel_evals(pg, plan, e->ins[i], 0, seen, memo) : inline_cost(pg, plan, e->ins[i], 0, memo);
  return c;
}

static double worst_kernel(const kl_program *pg, const kl_plan *plan) {
  double worst = 0, *memo = malloc(sizeof(double) * (size_t)pg->nvals);
  char *seen = malloc((size_t)pg->nvals);
  for (int i = 0; i < pg->nvals; i++) memo[i] = -1;
  for (int i = 0; i < plan->nsteps; i++)
    if (plan->steps[i].kind == KL_STEP_KERNEL) {
      memset(seen, 0, (size_t)pg->nvals);
      double c = kernel_evals(pg, plan, plan->steps[i].root, 1, seen, memo);
      if (c > worst) worst = c;
    }
  free(memo);
  free(seen);
  return worst;
}

static void test_fusion_plan(void) {
  unsetenv("KILN_DISABLE_FUSION");
  kl_program *pg = small_program(); /* sin, mul, reduce_sum */
  kl_plan plan;
  kl_plan_build(pg, &plan, kl_lower_fuse_traits());
  CHECK(plan.nsteps == 1 && plan.steps[0].kind == KL_STEP_KERNEL && plan.steps[0].root == pg->outputs[0],
        "sin/mul fuse into the reduce_sum kernel: %d steps", plan.nsteps);
  CHECK(!plan.materialized[pg->eqns[0].outs[0]] && !plan.materialized[pg->eqns[1].outs[0]], "intermediates fused");
  CHECK(plan.materialized[pg->inputs[0]] && plan.materialized[pg->outputs[0]], "inputs and outputs live in buffers");
  kl_plan_free(&plan);
  setenv("KILN_DISABLE_FUSION", "1", 1);
  kl_plan_build(pg, &plan, kl_lower_fuse_traits());
  CHECK(plan.nsteps == 3, "KILN_DISABLE_FUSION=1 gives one kernel per equation: %d", plan.nsteps);
  kl_plan_free(&plan);
  unsetenv("KILN_DISABLE_FUSION");
  kl_program_free(pg);

  /* Library equations are steps of their own, with materialized operands (a contraction of 32:
   * products contracting <= 16 elements are computed inside kernels instead: codegen/lower/dot.c). */
  pg = kl_program_new();
  kl_aval a = aval2(KL_F32, 32, 32);
  int x = kl_program_add_input(pg, &a);
  int s = eqn1(pg, "exp", x);
  int64_t lc = 1, rc = 0;
  kl_params p;
  kl_params_init(&p, KL_P_DOT_GENERAL);
  p.dot.lhs_contracting.v = &lc; p.dot.lhs_contracting.n = 1;
  p.dot.rhs_contracting.v = &rc; p.dot.rhs_contracting.n = 1;
  int ins[2] = {s, s};
  int d = eqn(pg, "dot_general", ins, 2, &p);
  int o = eqn1(pg, "tanh", d);
  kl_program_set_outputs(pg, &o, 1);
  kl_plan_build(pg, &plan, kl_lower_fuse_traits());
  CHECK(plan.nsteps == 3 && plan.steps[1].kind == KL_STEP_LIB && plan.materialized[s] && plan.materialized[d],
        "exp kernel, dot_general library call, tanh kernel: %d steps", plan.nsteps);
  kl_plan_free(&plan);
  kl_program_free(pg);

  /* The same with a contraction of 3: one kernel computes exp, the product and tanh. */
  pg = kl_program_new();
  a = aval2(KL_F32, 3, 3);
  x = kl_program_add_input(pg, &a);
  s = eqn1(pg, "exp", x);
  ins[0] = ins[1] = s;
  d = eqn(pg, "dot_general", ins, 2, &p);
  o = eqn1(pg, "tanh", d);
  kl_program_set_outputs(pg, &o, 1);
  kl_plan_build(pg, &plan, kl_lower_fuse_traits());
  CHECK(plan.nsteps == 1 && plan.steps[0].kind == KL_STEP_KERNEL && !plan.materialized[d],
        "a small product fuses with its producer and consumer: %d steps", plan.nsteps);
  kl_plan_free(&plan);
  kl_program_free(pg);

  /* A value read by several consumers, chained: v' = v * v + v, 24 times. Its reads are all in
   * place, so one kernel computes the chain with each value once per element (3 * 24
   * evaluations), never 3 * 2^24 recomputations. */
  pg = kl_program_new();
  int64_t n = 8;
  kl_aval vec = aval(KL_F32, 1, &n);
  int v = kl_program_add_input(pg, &vec);
  for (int i = 0; i < 24; i++) v = eqn2(pg, "add", eqn2(pg, "mul", v, v), v);
  kl_program_set_outputs(pg, &v, 1);
  kl_plan_build(pg, &plan, kl_lower_fuse_traits());
  double worst = worst_kernel(pg, &plan);
  CHECK(plan.nsteps == 1 && worst <= 1.0 * pg->neqns, "the chain is one kernel computing each value once: %d steps, "
        "%.0f evaluations per element for %d equations", plan.nsteps, worst, pg->neqns);
  kl_plan_free(&plan);
  kl_program_free(pg);

  /* The same with a reversed read: v' = v * rev(v) + v. Values read at other elements are
   * recomputed per read, so the plan must materialize some of them to keep kernels linear in
   * the program. Regression: fusion once materialized no multi-use value, so a jitted 5-step
   * heat-diffusion stencil (each step reads its input 5 times) took ~5 minutes to compile. */
  pg = kl_program_new();
  v = kl_program_add_input(pg, &vec);
  for (int i = 0; i < 24; i++) {
    int64_t dim0 = 0;
    kl_params rp;
    kl_params_init(&rp, KL_P_REV);
    rp.rev.dimensions = (kl_ivec){&dim0, 1};
    int rin[1] = {v};
    int r = eqn(pg, "rev", rin, 1, &rp);
    v = eqn2(pg, "add", eqn2(pg, "mul", v, r), v);
  }
  kl_program_set_outputs(pg, &v, 1);
  kl_plan_build(pg, &plan, kl_lower_fuse_traits());
  worst = worst_kernel(pg, &plan);
  CHECK(worst <= 4.0 * pg->neqns, "exponential recomputation: worst kernel does %.0f evaluations per element "
        "for %d equations", worst, pg->neqns);
  kl_plan_free(&plan);
  kl_program_free(pg);
}

static void test_arena(void) {
  kl_arena ar;
  kl_arena_init(&ar);
  unsigned char *prev = NULL;
  for (int i = 1; i < 2000; i++) {
    size_t n = (size_t)(i * 37 % 300) + 1;
    unsigned char *p = kl_arena_alloc(&ar, n);
    CHECK(((uintptr_t)p & 15) == 0, "alignment of allocation %d", i);
    int zero = 1;
    for (size_t k = 0; k < n; k++) zero &= p[k] == 0;
    CHECK(zero, "allocation %d is not zeroed", i);
    memset(p, 0xAB, n); /* must not clobber earlier allocations */
    if (prev) CHECK(prev[0] == 0xAB, "earlier allocation clobbered");
    prev = p;
  }
  /* Larger than a block. */
  size_t big = 200000;
  unsigned char *b = kl_arena_alloc(&ar, big);
  CHECK(((uintptr_t)b & 15) == 0 && b[0] == 0 && b[big - 1] == 0, "big allocation");
  memset(b, 1, big);
  const char msg[] = "kiln arena";
  char *dup = kl_arena_dup(&ar, msg, sizeof msg);
  CHECK(dup != msg && strcmp(dup, msg) == 0, "dup copies");
  CHECK(kl_arena_dup(&ar, NULL, 0) != NULL, "dup of 0 bytes gives a pointer");
  kl_arena_free(&ar);
  CHECK(ar.head == NULL, "freed arena is empty");
  kl_arena_free(&ar); /* double free of an empty arena is harmless */
  void *again = kl_arena_alloc(&ar, 8); /* reusable after free */
  CHECK(again != NULL, "alloc after free");
  kl_arena_free(&ar);
}

static void test_dtypes(void) {
  CHECK(kl_dtype_size(KL_BF16) == 2 && kl_dtype_size(KL_F64) == 8 && kl_dtype_size(KL_BOOL) == 1, "sizes");
  CHECK(strcmp(kl_dtype_name(KL_BF16), "bfloat16") == 0 && strcmp(kl_dtype_short(KL_U32), "u32") == 0, "names");
  for (int t = 0; t < KL_NDTYPES; t++) {
    kl_dtype back;
    CHECK(kl_dtype_from_name(kl_dtype_name((kl_dtype)t), &back) == 0 && back == (kl_dtype)t, "name round trip %d", t);
  }
  kl_dtype dummy;
  CHECK(kl_dtype_from_name("complex32", &dummy) != 0, "unknown dtype rejected");
  CHECK(kl_dtype_size(KL_C64) == 8 && kl_dtype_size(KL_C128) == 16 && kl_dtype_is_complex(KL_C64), "complex");
  CHECK(kl_dtype_real_part(KL_C128) == KL_F64 && kl_dtype_complex_of(KL_F32) == KL_C64, "complex parts");
}

int main(void) {
  test_build();
  test_shape_rule_errors();
  test_printer();
  test_verifier();
  test_verify_many_operands();
  test_hash();
  test_dce();
  test_fusion_plan();
  test_arena();
  test_dtypes();
  if (failures) {
    fprintf(stderr, "test_ir: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_ir: ok\n");
  return 0;
}
