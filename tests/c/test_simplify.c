/* test_simplify.c: unit tests of the algebraic simplifier (transforms/simplify.c). Each program
 * is built by hand, simplified and DCE'd, then checked: the rule fired (the output is the
 * expected value or equation) or, for rewrites that would not be bit-exact (x + 0.0 on floats,
 * x * 0 on floats...), it did not. Every simplified program must still verify.
 * Usage: test_simplify   (exit status 0 on success) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/program.h"
#include "../../transforms/fuse.h"
#include "../../transforms/pipeline.h"

#include "check.h"

static char err[512];

static kl_aval aval(kl_dtype t, int weak, int ndim, const int64_t *dims) {
  kl_aval a;
  memset(&a, 0, sizeof a);
  a.dtype = t;
  a.weak = (uint8_t)weak;
  a.ndim = (int8_t)ndim;
  for (int i = 0; i < ndim; i++) a.dims[i] = dims[i];
  return a;
}

static const int64_t S3[] = {3}, S23[] = {2, 3}, S33[] = {3, 3}, S234[] = {2, 3, 4}, S6[] = {6};

static int input(kl_program *pg, kl_dtype t, int weak, int ndim, const int64_t *dims) {
  kl_aval a = aval(t, weak, ndim, dims);
  return kl_program_add_input(pg, &a);
}

static int op(kl_program *pg, kl_prim p, const int *ins, int nin, const kl_params *prm) {
  kl_params none;
  kl_params_init(&none, p);
  int outs[KL_MAX_OUTS], nout;
  if (kl_program_add_eqn(pg, p, ins, nin, prm ? prm : &none, outs, &nout, err, sizeof err)) {
    fprintf(stderr, "FAIL: building the test program: %s\n", err);
    exit(1);
  }
  return outs[0];
}

static int un(kl_program *pg, kl_prim p, int x) { return op(pg, p, &x, 1, NULL); }
static int bin(kl_program *pg, kl_prim p, int x, int y) {
  int ins[2] = {x, y};
  return op(pg, p, ins, 2, NULL);
}

static int lit(kl_program *pg, kl_dtype t, int weak, double v) {
  kl_params p;
  kl_params_init(&p, KL_P_CONST);
  p.literal.dtype = t;
  p.literal.weak_type = weak;
  if (t == KL_F16 || t == KL_BF16 || t == KL_F32 || t == KL_F64) p.literal.value = v;
  else p.literal.int_value = (int64_t)v;
  return op(pg, KL_P_CONST, NULL, 0, &p);
}

static int vec_op(kl_program *pg, kl_prim p, int x, const int64_t *v0, int n0, const int64_t *v1, int n1) {
  kl_params prm;
  kl_params_init(&prm, p);
  kl_ivec a = {(int64_t *)v0, n0}, b = {(int64_t *)v1, n1};
  switch (p) { /* the primitive's first two vector params, in the order of their fields */
    case KL_P_BROADCAST_IN_DIM: prm.broadcast.shape = a; prm.broadcast.broadcast_dimensions = b; break;
    case KL_P_RESHAPE: prm.reshape.new_sizes = a; break;
    case KL_P_TRANSPOSE: prm.transpose.permutation = a; break;
    case KL_P_REV: prm.rev.dimensions = a; break;
    case KL_P_SLICE: prm.slice.start_indices = a; prm.slice.limit_indices = b; break;
    default: fprintf(stderr, "FAIL: vec_op of %s\n", kl_prim_get(p)->name); exit(1);
  }
  return op(pg, p, &x, 1, &prm);
}

static int bcast(kl_program *pg, int x, const int64_t *shape, int n, const int64_t *dims, int nd) {
  return vec_op(pg, KL_P_BROADCAST_IN_DIM, x, shape, n, dims, nd);
}
static int reshape(kl_program *pg, int x, const int64_t *shape, int n) {
  return vec_op(pg, KL_P_RESHAPE, x, shape, n, NULL, 0);
}
static int transpose(kl_program *pg, int x, const int64_t *perm, int n) {
  return vec_op(pg, KL_P_TRANSPOSE, x, perm, n, NULL, 0);
}

static int convert(kl_program *pg, int x, kl_dtype t, int weak) {
  kl_params p;
  kl_params_init(&p, KL_P_CONVERT);
  p.convert.new_dtype = t;
  p.convert.weak_type = weak;
  return op(pg, KL_P_CONVERT, &x, 1, &p);
}

/* Sets `out` as the only output, simplifies, DCEs and verifies; returns the output value. */
static int finish(kl_program *pg, int out) {
  kl_program_set_outputs(pg, &out, 1);
  kl_simplify(pg);
  kl_dce(pg);
  CHECK(kl_program_verify(pg, err, sizeof err) == 0, "verify after simplify: %s", err);
  return pg->outputs[0];
}

/* The primitive producing v, or -1 for an input. */
static int prim_of(const kl_program *pg, int v) {
  int k = pg->vals[v].producer;
  return k < 0 ? -1 : (int)pg->eqns[k].prim;
}

static const kl_eqn *eqn_of(const kl_program *pg, int v) { return &pg->eqns[pg->vals[v].producer]; }

/* A float32 [3] input x op'd with a rank-0 literal c (on the left when lhs); returns 1 when the
 * simplifier reduced the program to x. */
static int folds_to_x(kl_prim p, kl_dtype t, double c, int lhs) {
  kl_program *pg = kl_program_new();
  int x = input(pg, t, 0, 1, S3);
  int l = lit(pg, t, 0, c);
  int out = finish(pg, lhs ? bin(pg, p, l, x) : bin(pg, p, x, l));
  int ok = out == x && pg->neqns == 0;
  kl_program_free(pg);
  return ok;
}

static void test_identity_elements(void) {
  CHECK(folds_to_x(KL_P_MUL, KL_F32, 1.0, 0), "x*1.0 -> x");
  CHECK(folds_to_x(KL_P_MUL, KL_F32, 1.0, 1), "1.0*x -> x");
  CHECK(folds_to_x(KL_P_DIV, KL_F32, 1.0, 0), "x/1.0 -> x");
  CHECK(!folds_to_x(KL_P_DIV, KL_F32, 1.0, 1), "1.0/x must stay");
  CHECK(folds_to_x(KL_P_MUL, KL_I32, 1, 0), "int x*1 -> x");
  CHECK(folds_to_x(KL_P_DIV, KL_I32, 1, 0), "int x/1 -> x");
  CHECK(!folds_to_x(KL_P_MUL, KL_F32, 2.0, 0), "x*2.0 must stay");
  /* -0.0 + +0.0 = +0.0, so adding +0.0 is not the identity on floats; adding -0.0 is */
  CHECK(!folds_to_x(KL_P_ADD, KL_F32, 0.0, 0), "float x+0.0 must stay (x=-0.0 gives +0.0)");
  CHECK(!folds_to_x(KL_P_ADD, KL_F32, 0.0, 1), "float 0.0+x must stay");
  CHECK(folds_to_x(KL_P_ADD, KL_F32, -0.0, 0), "float x+(-0.0) -> x");
  CHECK(folds_to_x(KL_P_ADD, KL_F64, -0.0, 1), "float (-0.0)+x -> x");
  CHECK(folds_to_x(KL_P_SUB, KL_F32, 0.0, 0), "float x-0.0 -> x");
  CHECK(!folds_to_x(KL_P_SUB, KL_F32, -0.0, 0), "float x-(-0.0) must stay");
  CHECK(!folds_to_x(KL_P_SUB, KL_F32, 0.0, 1), "0.0-x must stay");
  CHECK(folds_to_x(KL_P_ADD, KL_I32, 0, 0), "int x+0 -> x");
  CHECK(folds_to_x(KL_P_ADD, KL_U8, 0, 1), "int 0+x -> x");
  CHECK(folds_to_x(KL_P_SUB, KL_I64, 0, 0), "int x-0 -> x");
  CHECK(!folds_to_x(KL_P_SUB, KL_I32, 0, 1), "int 0-x must stay");
  CHECK(!folds_to_x(KL_P_MUL, KL_F32, 0.0, 0), "float x*0.0 must stay (inf*0 = NaN)");

  /* a broadcast 1 of the operand's shape is still a 1 */
  kl_program *pg = kl_program_new();
  int x = input(pg, KL_F32, 0, 2, S23);
  int one = bcast(pg, lit(pg, KL_F32, 0, 1.0), S23, 2, NULL, 0);
  int out = finish(pg, bin(pg, KL_P_MUL, one, x));
  CHECK(out == x && pg->neqns == 0, "broadcast(1)*x -> x (%d equations left)", pg->neqns);
  kl_program_free(pg);

  /* rank-0 x times a broadcast 1 of shape [3] is a [3] array: it becomes broadcast_in_dim(x) */
  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 0, NULL);
  one = bcast(pg, lit(pg, KL_F32, 0, 1.0), S3, 1, NULL, 0);
  out = finish(pg, bin(pg, KL_P_MUL, x, one));
  CHECK(prim_of(pg, out) == KL_P_BROADCAST_IN_DIM && eqn_of(pg, out)->ins[0] == x && pg->neqns == 1,
        "rank-0 x * broadcast(1) -> broadcast_in_dim(x)");
  CHECK(pg->vals[out].aval.ndim == 1 && pg->vals[out].aval.dims[0] == 3, "result keeps shape [3]");
  kl_program_free(pg);

  /* weak x times a strong 1 is strong: the rule keeps the aval with a convert */
  pg = kl_program_new();
  x = input(pg, KL_F32, 1, 1, S3);
  out = finish(pg, bin(pg, KL_P_MUL, x, lit(pg, KL_F32, 0, 1.0)));
  CHECK(prim_of(pg, out) == KL_P_CONVERT && eqn_of(pg, out)->ins[0] == x && !pg->vals[out].aval.weak,
        "weak x * strong 1 -> convert_element_type(x, weak_type=0)");
  kl_program_free(pg);

  /* a weak 1 does not change a strong x's aval */
  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 1, S3);
  out = finish(pg, bin(pg, KL_P_MUL, x, lit(pg, KL_F32, 1, 1.0)));
  CHECK(out == x, "strong x * weak 1 -> x");
  kl_program_free(pg);
}

static void test_integer_zero(void) {
  kl_program *pg = kl_program_new();
  int x = input(pg, KL_I32, 0, 1, S3);
  int z = lit(pg, KL_I32, 0, 0);
  int out = finish(pg, bin(pg, KL_P_MUL, x, z));
  CHECK(prim_of(pg, out) == KL_P_BROADCAST_IN_DIM && prim_of(pg, eqn_of(pg, out)->ins[0]) == KL_P_CONST,
        "int x*0 -> broadcast of the literal 0");
  CHECK(pg->neqns == 2, "no mul left: %d equations", pg->neqns);
  kl_program_free(pg);

  pg = kl_program_new();
  x = input(pg, KL_I64, 0, 0, NULL);
  z = lit(pg, KL_I64, 0, 0);
  out = finish(pg, bin(pg, KL_P_MUL, z, x));
  CHECK(out == z, "rank-0 int 0*x -> the literal");
  kl_program_free(pg);
}

static void test_unary(void) {
  kl_program *pg = kl_program_new();
  int x = input(pg, KL_F32, 0, 1, S3);
  int out = finish(pg, un(pg, KL_P_NEG, un(pg, KL_P_NEG, x)));
  CHECK(out == x && pg->neqns == 0, "neg(neg(x)) -> x");
  kl_program_free(pg);

  pg = kl_program_new();
  x = input(pg, KL_I32, 0, 1, S3);
  out = finish(pg, un(pg, KL_P_NEG, un(pg, KL_P_NEG, un(pg, KL_P_NEG, x))));
  CHECK(prim_of(pg, out) == KL_P_NEG && eqn_of(pg, out)->ins[0] == x && pg->neqns == 1, "neg^3(x) -> neg(x)");
  kl_program_free(pg);

  for (int y = 1; y <= 2; y++) {
    pg = kl_program_new();
    x = input(pg, KL_F32, 0, 1, S3);
    kl_params p;
    kl_params_init(&p, KL_P_INTEGER_POW);
    p.integer_pow.y = y;
    out = finish(pg, op(pg, KL_P_INTEGER_POW, &x, 1, &p));
    CHECK((out == x) == (y == 1), "integer_pow[y=%d]: fires only for y=1", y);
    kl_program_free(pg);
  }

  /* stop_gradient goes only where nothing can flow through it */
  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 1, S3);
  out = finish(pg, un(pg, KL_P_STOP_GRADIENT, x));
  CHECK(prim_of(pg, out) == KL_P_STOP_GRADIENT, "stop_gradient(input) must stay");
  kl_program_free(pg);
  pg = kl_program_new();
  int c = un(pg, KL_P_EXP, bcast(pg, lit(pg, KL_F32, 0, 2.0), S3, 1, NULL, 0));
  out = finish(pg, un(pg, KL_P_STOP_GRADIENT, c));
  CHECK(out == c, "stop_gradient(constant) -> the constant");
  kl_program_free(pg);
}

static void test_convert(void) {
  kl_program *pg = kl_program_new();
  int x = input(pg, KL_F32, 0, 1, S3);
  int out = finish(pg, convert(pg, x, KL_F32, 0));
  CHECK(out == x, "convert f32 -> f32 -> x");
  kl_program_free(pg);

  pg = kl_program_new();
  x = input(pg, KL_F32, 1, 1, S3);
  out = finish(pg, convert(pg, x, KL_F32, 0));
  CHECK(prim_of(pg, out) == KL_P_CONVERT, "convert that drops the weak flag must stay");
  kl_program_free(pg);

  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 1, S3);
  out = finish(pg, convert(pg, convert(pg, x, KL_I32, 0), KL_F32, 0));
  CHECK(prim_of(pg, out) == KL_P_CONVERT && pg->neqns == 2, "f32 -> i32 -> f32 is lossy and must stay");
  kl_program_free(pg);
}

static void test_structural(void) {
  static const int64_t id2[] = {0, 1}, swap[] = {1, 0}, rot[] = {1, 2, 0}, unrot[] = {2, 0, 1};
  static const int64_t p102[] = {1, 0, 2}, p021[] = {0, 2, 1};
  kl_program *pg = kl_program_new();
  int x = input(pg, KL_F32, 0, 2, S23);
  int out = finish(pg, transpose(pg, reshape(pg, bcast(pg, x, S23, 2, id2, 2), S23, 2), id2, 2));
  CHECK(out == x && pg->neqns == 0, "identity broadcast/reshape/transpose -> x");
  kl_program_free(pg);

  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 2, S33);
  out = finish(pg, transpose(pg, x, swap, 2));
  CHECK(prim_of(pg, out) == KL_P_TRANSPOSE, "transpose (1,0) of a square matrix must stay");
  kl_program_free(pg);

  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 1, S6);
  out = finish(pg, reshape(pg, reshape(pg, x, S23, 2), S6, 1));
  CHECK(out == x && pg->neqns == 0, "reshape(reshape(x)) back to x's shape -> x");
  kl_program_free(pg);

  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 1, S6);
  static const int64_t s32[] = {3, 2};
  out = finish(pg, reshape(pg, reshape(pg, x, S23, 2), s32, 2));
  CHECK(prim_of(pg, out) == KL_P_RESHAPE && eqn_of(pg, out)->ins[0] == x && pg->neqns == 1,
        "reshape(reshape(x)) -> one reshape of x");
  kl_program_free(pg);

  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 3, S234);
  out = finish(pg, transpose(pg, transpose(pg, x, rot, 3), unrot, 3));
  CHECK(out == x && pg->neqns == 0, "transpose of its inverse -> x");
  kl_program_free(pg);

  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 3, S234);
  out = finish(pg, transpose(pg, transpose(pg, x, p102, 3), p021, 3));
  const kl_eqn *e = eqn_of(pg, out);
  CHECK(e->prim == KL_P_TRANSPOSE && e->ins[0] == x && e->p.transpose.permutation.v[0] == 1 &&
            e->p.transpose.permutation.v[1] == 2 && e->p.transpose.permutation.v[2] == 0,
        "transpose(transpose(x,(1,0,2)),(0,2,1)) -> transpose(x,(1,2,0))");
  CHECK(pg->vals[out].aval.dims[0] == 3 && pg->vals[out].aval.dims[1] == 4 && pg->vals[out].aval.dims[2] == 2,
        "composed transpose keeps the shape");
  kl_program_free(pg);

  /* [3] -> [2,3] (dims (1,)) -> [4,2,3] (dims (1,2,)): one broadcast with dims (2,) */
  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 1, S3);
  static const int64_t d1[] = {1}, d12[] = {1, 2}, s423[] = {4, 2, 3};
  out = finish(pg, bcast(pg, bcast(pg, x, S23, 2, d1, 1), s423, 3, d12, 2));
  e = eqn_of(pg, out);
  CHECK(e->prim == KL_P_BROADCAST_IN_DIM && e->ins[0] == x && e->p.broadcast.broadcast_dimensions.n == 1 &&
            e->p.broadcast.broadcast_dimensions.v[0] == 2 && pg->neqns == 1,
        "broadcast of broadcast -> one broadcast_in_dim(x, dims=(2,))");
  kl_program_free(pg);

  /* a broadcast scalar reshaped or transposed is that scalar broadcast to the final shape */
  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 0, NULL);
  out = finish(pg, transpose(pg, reshape(pg, bcast(pg, x, S6, 1, NULL, 0), S23, 2), swap, 2));
  e = eqn_of(pg, out);
  CHECK(e->prim == KL_P_BROADCAST_IN_DIM && e->ins[0] == x && pg->neqns == 1 && pg->vals[out].aval.dims[0] == 3,
        "transpose(reshape(broadcast(scalar))) -> broadcast(scalar)");
  kl_program_free(pg);

  /* rev over extent-1 dims, a whole slice, a zero pad, a one-operand concatenate */
  pg = kl_program_new();
  static const int64_t s13[] = {1, 3}, zero2[] = {0, 0}, ax0[] = {0}, ax1[] = {1};
  x = input(pg, KL_F32, 0, 2, s13);
  out = finish(pg, vec_op(pg, KL_P_REV, x, ax0, 1, NULL, 0));
  CHECK(out == x, "rev of an extent-1 dim -> x");
  kl_program_free(pg);
  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 2, s13);
  out = finish(pg, vec_op(pg, KL_P_REV, x, ax1, 1, NULL, 0));
  CHECK(prim_of(pg, out) == KL_P_REV, "rev of an extent-3 dim must stay");
  kl_program_free(pg);
  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 2, S23);
  out = finish(pg, vec_op(pg, KL_P_SLICE, x, zero2, 2, S23, 2));
  CHECK(out == x, "slice of everything -> x");
  kl_program_free(pg);
  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 2, S23);
  static const int64_t one3[] = {1, 3};
  out = finish(pg, vec_op(pg, KL_P_SLICE, x, zero2, 2, one3, 2));
  CHECK(prim_of(pg, out) == KL_P_SLICE, "a real slice must stay");
  kl_program_free(pg);
  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 2, S23);
  {
    kl_params p;
    kl_params_init(&p, KL_P_PAD);
    p.pad.low = p.pad.high = p.pad.interior = (kl_ivec){(int64_t *)zero2, 2};
    int ins[2] = {x, lit(pg, KL_F32, 0, 0.0)};
    out = finish(pg, op(pg, KL_P_PAD, ins, 2, &p));
    CHECK(out == x, "pad by nothing -> x");
  }
  kl_program_free(pg);
  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 2, S23);
  {
    kl_params p;
    kl_params_init(&p, KL_P_CONCATENATE);
    p.concatenate.dimension = 1;
    out = finish(pg, op(pg, KL_P_CONCATENATE, &x, 1, &p));
    CHECK(out == x, "concatenate of one operand -> x");
  }
  kl_program_free(pg);
}

static void test_select(void) {
  for (int which = 0; which < 2; which++) {
    kl_program *pg = kl_program_new();
    int a = input(pg, KL_F32, 0, 1, S3), b = input(pg, KL_F32, 0, 1, S3);
    int ins[3] = {lit(pg, KL_BOOL, 0, which), a, b};
    int out = finish(pg, op(pg, KL_P_SELECT_N, ins, 3, NULL));
    CHECK(out == (which ? b : a) && pg->neqns == 0, "select_n(literal %d, a, b) picks its case", which);
    kl_program_free(pg);
  }
  kl_program *pg = kl_program_new();
  int a = input(pg, KL_F32, 0, 1, S3), b = input(pg, KL_F32, 0, 1, S3);
  int ins[3] = {lit(pg, KL_I32, 0, 2), a, b};
  int out = finish(pg, op(pg, KL_P_SELECT_N, ins, 3, NULL));
  CHECK(prim_of(pg, out) == KL_P_SELECT_N, "select_n with an out-of-range int predicate must stay");
  kl_program_free(pg);

  pg = kl_program_new();
  int pred = input(pg, KL_BOOL, 0, 1, S3);
  a = input(pg, KL_F32, 0, 1, S3);
  b = input(pg, KL_F32, 0, 1, S3);
  int ins2[3] = {pred, a, b};
  out = finish(pg, op(pg, KL_P_SELECT_N, ins2, 3, NULL));
  CHECK(prim_of(pg, out) == KL_P_SELECT_N, "select_n with a traced predicate must stay");
  kl_program_free(pg);

  pg = kl_program_new();
  pred = input(pg, KL_BOOL, 0, 1, S3);
  a = input(pg, KL_F32, 0, 1, S3);
  int ins3[3] = {pred, a, a};
  out = finish(pg, op(pg, KL_P_SELECT_N, ins3, 3, NULL));
  CHECK(out == a, "select_n(p, a, a) -> a");
  kl_program_free(pg);
}

/* Chains collapse in one pass, and uses inside later equations are redirected. */
static void test_chain_and_uses(void) {
  kl_program *pg = kl_program_new();
  int x = input(pg, KL_F32, 0, 1, S3);
  int one = lit(pg, KL_F32, 0, 1.0);
  int t = un(pg, KL_P_NEG, un(pg, KL_P_NEG, bin(pg, KL_P_MUL, x, one)));
  int out = finish(pg, un(pg, KL_P_SIN, convert(pg, t, KL_F32, 0)));
  CHECK(prim_of(pg, out) == KL_P_SIN && eqn_of(pg, out)->ins[0] == x && pg->neqns == 1,
        "sin(convert(neg(neg(x*1)))) -> sin(x)");
  kl_program_free(pg);
}

/* grad's output cotangent is an input bound to 1: the seed multiplications disappear. */
static void test_bind_input(void) {
  kl_program *pg = kl_program_new();
  int x = input(pg, KL_F32, 0, 1, S3);
  int ct = input(pg, KL_F32, 0, 0, NULL);
  int g = bin(pg, KL_P_MUL, bcast(pg, ct, S3, 1, NULL, 0), un(pg, KL_P_COS, x));
  kl_program_set_outputs(pg, &g, 1);
  CHECK(kl_simplify_bind_input(pg, 1, 1.0) == 0, "bind input 1");
  CHECK(kl_program_verify(pg, err, sizeof err) == 0, "verify after bind: %s", err);
  int out = finish(pg, pg->outputs[0]);
  CHECK(prim_of(pg, out) == KL_P_COS && pg->neqns == 1 && pg->ninputs == 2, "ct*cos(x) with ct=1 -> cos(x)");
  CHECK(kl_simplify_bind_input(pg, 2, 1.0) == -1, "binding a missing input fails");
  kl_program_free(pg);

  /* a shaped input is bound to a broadcast literal; an output that was the input follows it */
  pg = kl_program_new();
  x = input(pg, KL_F32, 0, 1, S3);
  kl_program_set_outputs(pg, &x, 1);
  CHECK(kl_simplify_bind_input(pg, 0, -0.0) == 0, "bind a shaped input");
  out = finish(pg, pg->outputs[0]);
  CHECK(prim_of(pg, out) == KL_P_BROADCAST_IN_DIM && pg->vals[out].aval.dims[0] == 3, "output is the splat");
  kl_program_free(pg);
}

/* The OPTIMIZE pipeline simplifies, CSEs and DCEs inside bodies too, on copies: the traced
 * program and its body are left as they were. */
static void test_passes_recurse_into_bodies(void) {
  int64_t d4[1] = {4};
  kl_program *body = kl_program_new(), *pg = kl_program_new();
  int bx = input(body, KL_F32, 0, 1, d4);
  int s1 = un(body, KL_P_SIN, bx), s2 = un(body, KL_P_SIN, bx); /* CSE: one sin */
  int m = bin(body, KL_P_MUL, s1, bcast(body, lit(body, KL_F32, 0, 1.0), d4, 1, NULL, 0)); /* simplify: no mul */
  int out = bin(body, KL_P_ADD, m, s2);
  kl_program_set_outputs(body, &out, 1);
  int body_eqns = body->neqns;
  int x = input(pg, KL_F32, 0, 1, d4);
  kl_params cp;
  kl_params_init(&cp, KL_P_CHECKPOINT);
  cp.checkpoint.body = body;
  int y = op(pg, KL_P_CHECKPOINT, &x, 1, &cp);
  kl_program_set_outputs(pg, &y, 1);
  kl_program *opt = kl_pipeline_run(pg, KL_PIPE_OPTIMIZE, err, sizeof err);
  CHECK(opt != NULL, "pipeline: %s", err);
  if (opt) {
    const kl_program *nb = opt->eqns[0].p.checkpoint.body;
    CHECK(nb != body && nb->neqns == 2, "the body keeps %d equations, want 2 (sin, add)", nb->neqns);
    CHECK(kl_program_verify(opt, err, sizeof err) == 0, "verify: %s", err);
    kl_program_free(opt);
  }
  CHECK(body->neqns == body_eqns && pg->eqns[0].p.checkpoint.body == body, "the traced program changed");
  kl_program_free(pg);
  kl_program_free(body);
}

int main(void) {
  test_passes_recurse_into_bodies();
  test_identity_elements();
  test_integer_zero();
  test_unary();
  test_convert();
  test_structural();
  test_select();
  test_chain_and_uses();
  test_bind_input();
  if (failures) fprintf(stderr, "test_simplify: %d failure(s)\n", failures);
  else printf("test_simplify: ok\n");
  return failures ? 1 : 0;
}
