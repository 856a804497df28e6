/* test_mathfn.c: accuracy, special values and vectorization of codegen/mathfn's expansions.
 * Every function is emitted for f32 and f64 into a loop kernel, JIT-compiled through MLIR's CPU
 * pipeline, run on ~100k inputs (random bit patterns, the function's interesting range, log-spaced
 * magnitudes, special values) and compared with glibc's long double libm. Prints max error per
 * function; returns 1 if any exceeds its tolerance. Seed: KILN_TEST_SEED (default: time). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "../../codegen/mathfn.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlir-c/ExecutionEngine.h"
#include "mlir-c/IR.h"
#include "mlir-c/Pass.h"
#include "mlir-c/RegisterEverything.h"

#define NIN 100000
static const long double PI_L = 3.141592653589793238462643383279502884L;

/* ---- references (long double) ---- */

static long double r_exp(long double x) { return expl(x); }
static long double r_exp2(long double x) { return exp2l(x); }
static long double r_expm1(long double x) { return expm1l(x); }
static long double r_log(long double x) { return logl(x); }
static long double r_log2(long double x) { return log2l(x); }
static long double r_log10(long double x) { return log10l(x); }
static long double r_log1p(long double x) { return log1pl(x); }
static long double r_tanh(long double x) { return tanhl(x); }
static long double r_logistic(long double x) {
  return x >= 0 ? 1 / (1 + expl(-x)) : expl(x) / (1 + expl(x));
}
static long double r_erf(long double x) { return erfl(x); }
static long double r_erfc(long double x) { return erfcl(x); }
static long double r_sin(long double x) { return sinl(x); }
static long double r_cos(long double x) { return cosl(x); }
static long double r_tan(long double x) { return tanl(x); }
static long double r_sinh(long double x) { return sinhl(x); }
static long double r_cosh(long double x) { return coshl(x); }
static long double r_asin(long double x) { return asinl(x); }
static long double r_acos(long double x) { return acosl(x); }
static long double r_atan(long double x) { return atanl(x); }
static long double r_asinh(long double x) { return asinhl(x); }
static long double r_acosh(long double x) { return acoshl(x); }
static long double r_atanh(long double x) { return atanhl(x); }
static long double r_cbrt(long double x) { return cbrtl(x); }
static long double r_lgamma(long double x) { return lgammal(x); }

/* erf_inv: bisection then Newton, on erfc for |x| > 1/2 so that 1 - |x| keeps its digits. */
static long double r_erf_inv(long double x) {
  if (isnan(x) || fabsl(x) > 1) return NAN;
  if (fabsl(x) == 1) return copysignl(INFINITY, x);
  long double a = fabsl(x), y;
  int tail = a > 0.5L;
  if (a < 1e-6L) {
    y = a * sqrtl(PI_L) / 2 * (1 + PI_L * a * a / 12);
  } else {
    long double lo = 0, hi = 7;
    for (int i = 0; i < 100; i++) {
      long double mid = (lo + hi) / 2;
      long double g = tail ? (1 - a) - erfcl(mid) : erfl(mid) - a;
      if (g < 0) lo = mid; else hi = mid;
    }
    y = (lo + hi) / 2;
  }
  for (int i = 0; i < 3 && a >= 1e-6L; i++) {
    long double d = 2 / sqrtl(PI_L) * expl(-y * y);
    long double g = tail ? (1 - a) - erfcl(y) : erfl(y) - a;
    y -= g / d;
  }
  return copysignl(y, x);
}

/* digamma: reflection, recurrence up to 20, asymptotic series. NaN at the poles (as XLA). */
static long double r_digamma(long double x) {
  if (isnan(x)) return x;
  if (x <= 0 && floorl(x) == x) return NAN;
  if (isinf(x)) return INFINITY;
  long double res = 0;
  if (x < 0.5L) {
    res = -PI_L / tanl(PI_L * (x - nearbyintl(x)));
    x = 1 - x;
  }
  for (; x < 20; x += 1) res -= 1 / x;
  long double w = 1 / (x * x);
  res += logl(x) - 0.5L / x -
         w * (1.0L / 12 - w * (1.0L / 120 - w * (1.0L / 252 - w * (1.0L / 240 - w * (1.0L / 132)))));
  return res;
}

static long double r_pow(long double x, long double y) { return powl(x, y); }
static long double r_atan2(long double y, long double x) { return atan2l(y, x); }

/* ---- cases ---- */

typedef struct {
  kl_mathfn fn;
  long double (*ref)(long double);
  double lo, hi;     /* interesting interval (f64; f32 clips it to its range) */
  double lim32, lim64; /* strict check only for |x| <= lim (0: everywhere) */
  double tol32;      /* max ulp (f32) */
  double tol64;      /* max relative error (f64) */
  double floor64;    /* relative error denominator floor (f64): absolute error below it */
} case1;

static const case1 cases[] = {
    {KL_MF_EXP, r_exp, -750, 750, 0, 0, 4, 1e-14, 0},
    {KL_MF_EXP2, r_exp2, -1100, 1100, 0, 0, 4, 1e-14, 0},
    {KL_MF_EXPM1, r_expm1, -50, 750, 0, 0, 4, 1e-14, 0},
    {KL_MF_LOG, r_log, 0, 10, 0, 0, 4, 1e-14, 0},
    {KL_MF_LOG2, r_log2, 0, 10, 0, 0, 4, 1e-14, 0},
    {KL_MF_LOG10, r_log10, 0, 10, 0, 0, 4, 1e-14, 0},
    {KL_MF_LOG1P, r_log1p, -1, 10, 0, 0, 4, 1e-14, 0},
    {KL_MF_TANH, r_tanh, -20, 20, 0, 0, 4, 1e-14, 0},
    {KL_MF_LOGISTIC, r_logistic, -750, 750, 0, 0, 4, 1e-14, 0},
    {KL_MF_ERF, r_erf, -6, 6, 0, 0, 4, 1e-14, 0},
    {KL_MF_ERFC, r_erfc, -6, 30, 0, 0, 4, 1e-14, 0},
    {KL_MF_ERF_INV, r_erf_inv, -1, 1, 0, 0, 168, 1e-14, 0}, /* 168 ulp ~ 1e-5 */
    {KL_MF_SIN, r_sin, -10, 10, 0, 1e9, 4, 1e-14, 0},
    {KL_MF_COS, r_cos, -10, 10, 0, 1e9, 4, 1e-14, 0},
    {KL_MF_TAN, r_tan, -10, 10, 0, 1e9, 4, 1e-14, 0},
    {KL_MF_SINH, r_sinh, -720, 720, 0, 0, 4, 1e-14, 0},
    {KL_MF_COSH, r_cosh, -720, 720, 0, 0, 4, 1e-14, 0},
    {KL_MF_ASIN, r_asin, -1, 1, 0, 0, 4, 1e-14, 0},
    {KL_MF_ACOS, r_acos, -1, 1, 0, 0, 4, 1e-14, 0},
    {KL_MF_ATAN, r_atan, -10, 10, 0, 0, 4, 1e-14, 0},
    {KL_MF_ASINH, r_asinh, -100, 100, 0, 0, 4, 1e-14, 0},
    {KL_MF_ACOSH, r_acosh, 1, 100, 0, 0, 4, 1e-14, 0},
    {KL_MF_ATANH, r_atanh, -1, 1, 0, 0, 4, 1e-14, 0},
    {KL_MF_CBRT, r_cbrt, -100, 100, 0, 0, 4, 1e-14, 0},
    /* Near the zeros (1, 2, ~1.46 for digamma, one between each pair of negative poles) the
       recurrence/reflection cancels terms of size ~40: the f64 error is judged absolute below 1
       (it reaches ~1e-14 there) and relative above. f32 evaluates in f64. */
    {KL_MF_LGAMMA, r_lgamma, -50, 50, 0, 0, 168, 5e-14, 1},
    {KL_MF_DIGAMMA, r_digamma, -50, 50, 0, 0, 168, 5e-14, 1},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* ---- inputs ---- */

static uint64_t rng_state;
static uint64_t rnd64(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static double unif(void) { return (rnd64() >> 11) * 0x1p-53; }

static const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, -1.0, 0.5, -0.5, 2.0,
                                  -2.0, 3.0, -3.0, 1e-300, -1e-300, 4.9e-324, 1e-40, -1e-40,
                                  1.17549435e-38, 2.2250738585072014e-308, 3.4028234663852886e38,
                                  -3.4028234663852886e38, DBL_MAX, -DBL_MAX, 0.25, 10.0, -10.0,
                                  88.7, 89.5, -103.9, -87.3, 709.7, 710.0, -745.1, -708.5};

/* Fills in[0..n): specials, random bit patterns, uniform in [lo, hi], log-spaced magnitudes. */
static void gen_inputs(double *in, int n, int f64, double lo, double hi) {
  int ns = (int)(sizeof specials / sizeof specials[0]);
  double mag = fmax(fabs(lo), fabs(hi));
  for (int i = 0; i < n; i++) {
    double v;
    int kind = i < ns ? -1 : (int)(rnd64() % 3);
    if (kind < 0) {
      v = specials[i];
    } else if (kind == 0) {
      if (f64) {
        uint64_t b = rnd64();
        memcpy(&v, &b, 8);
      } else {
        uint32_t b = (uint32_t)rnd64();
        float f;
        memcpy(&f, &b, 4);
        v = f;
      }
    } else if (kind == 1) {
      v = lo + (hi - lo) * unif();
    } else {
      double e = (f64 ? -320.0 : -45.0) + unif() * (log10(mag) - (f64 ? -320.0 : -45.0));
      v = pow(10.0, e);
      if (lo < 0 && (rnd64() & 1)) v = -v;
      if (v < lo || v > hi) v = lo + (hi - lo) * unif();
    }
    in[i] = f64 ? v : (double)(float)v;
  }
}

/* ---- error measures ---- */

/* f32: error in units of the last place of the correctly rounded result (inf: mismatch). */
static double err32(float got, long double ref) {
  if (isnan(ref)) return isnan(got) ? 0 : INFINITY;
  if (isnan(got)) return INFINITY;
  float rf = (float)ref;
  if (got == rf) return signbit(got) == signbit(rf) ? 0 : INFINITY; /* signed zeros must match */
  if (isinf(got)) return INFINITY;
  long double a = fabsl(ref) > FLT_MAX ? FLT_MAX : fabsl(ref);
  int e;
  frexpl(a, &e);
  long double ulp = ldexpl(1, (e - 24 < -149) ? -149 : e - 24);
  return (double)(fabsl((long double)got - ref) / ulp);
}

/* f64: relative error with the denominator floored at fl (and at DBL_MIN: subnormal results are
 * judged relative to the smallest normal). */
static double err64(double got, long double ref, double fl) {
  if (isnan(ref)) return isnan(got) ? 0 : INFINITY;
  if (isnan(got)) return INFINITY;
  double rd = (double)ref;
  if (got == rd) return signbit(got) == signbit(rd) ? 0 : INFINITY;
  if (isinf(got)) return INFINITY;
  long double den = fabsl(ref);
  if (den < fl) den = fl;
  if (den < DBL_MIN) den = DBL_MIN;
  if (den > DBL_MAX) den = DBL_MAX;
  return (double)(fabsl((long double)got - ref) / den);
}

/* ---- MLIR ---- */

/* Appends func @<name>(%pa, %pb, %po: memref<1xT>, %n: index): o[i] = fn(a[i] [, b[i]]). fn2 < 0
 * selects the unary fn. The bare-pointer convention needs static memref arguments; the kernel
 * reinterprets them to the dynamic length. */
static void emit_kernel(kl_str *s, const char *name, const char *ty, int fn, int fn2) {
  kl_str_printf(s,
                "  func.func @%s(%%pa: memref<1x%s>, %%pb: memref<1x%s>, %%po: memref<1x%s>, "
                "%%n: index) {\n",
                name, ty, ty, ty);
  const char *arg[3] = {"a", "b", "o"};
  for (int i = 0; i < 3; i++)
    kl_str_printf(s,
                  "    %%%s = memref.reinterpret_cast %%p%s to offset: [0], sizes: [%%n], strides: "
                  "[1] : memref<1x%s> to memref<?x%s>\n",
                  arg[i], arg[i], ty, ty);
  kl_str_printf(s, "    %%c0 = arith.constant 0 : index\n    %%c1 = arith.constant 1 : index\n");
  kl_str_printf(s, "    scf.for %%i = %%c0 to %%n step %%c1 {\n");
  kl_str_printf(s, "      %%x = memref.load %%a[%%i] : memref<?x%s>\n", ty);
  kl_str_printf(s, "      %%y = memref.load %%b[%%i] : memref<?x%s>\n", ty);
  kl_emitter e = {.out = s};
  char out[24];
  char *r = fn2 >= 0 ? kl_math_emit2(&e, (kl_mathfn2)fn2, "%x", "%y", ty, "      ", out)
                     : kl_math_emit(&e, (kl_mathfn)fn, "%x", ty, "      ", out);
  if (!r) {
    fprintf(stderr, "kl_math_emit refused %s\n", name);
    exit(1);
  }
  kl_str_printf(s, "      memref.store %s, %%o[%%i] : memref<?x%s>\n    }\n    return\n  }\n", r, ty);
}

/* Only ops that lower to vectorizable LLVM instructions may appear in the expansions. */
static int check_ops(const char *text) {
  static const char *allowed[] = {"arith.", "math.fma ", "math.absf ", "math.copysign ",
                                  "math.sqrt ", "math.floor ", "math.ceil ", "math.roundeven "};
  int bad = 0;
  for (const char *line = text; line && *line;) {
    const char *eq = strstr(line, " = ");
    const char *nl = strchr(line, '\n');
    if (eq && (!nl || eq < nl) && strncmp(line, "      %t", 8) == 0) {
      const char *op = eq + 3;
      int ok = 0;
      for (size_t k = 0; k < sizeof allowed / sizeof allowed[0]; k++)
        if (strncmp(op, allowed[k], strlen(allowed[k])) == 0) ok = 1;
      if (!ok) {
        fprintf(stderr, "disallowed op: %.*s\n", (int)(nl ? nl - line : (long)strlen(line)), line);
        bad = 1;
      }
    }
    line = nl ? nl + 1 : NULL;
  }
  return bad;
}

static MlirExecutionEngine compile(MlirContext ctx, const char *text) {
  MlirModule m = mlirModuleCreateParse(ctx, mlirStringRefCreateFromCString(text));
  if (mlirModuleIsNull(m)) {
    fprintf(stderr, "module failed to parse\n");
    return (MlirExecutionEngine){NULL};
  }
  MlirPassManager pm = mlirPassManagerCreate(ctx);
  const char *pipe =
      "builtin.module(convert-math-to-llvm,convert-math-to-libm,convert-scf-to-cf,"
      "expand-strided-metadata,finalize-memref-to-llvm,convert-arith-to-llvm,convert-cf-to-llvm,"
      "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1},reconcile-unrealized-casts)";
  MlirLogicalResult pr =
      mlirParsePassPipeline(mlirPassManagerGetAsOpPassManager(pm), mlirStringRefCreateFromCString(pipe),
                            NULL, NULL);
  if (mlirLogicalResultIsFailure(pr) ||
      mlirLogicalResultIsFailure(mlirPassManagerRunOnOp(pm, mlirModuleGetOperation(m)))) {
    fprintf(stderr, "lowering failed\n");
    mlirPassManagerDestroy(pm);
    return (MlirExecutionEngine){NULL};
  }
  mlirPassManagerDestroy(pm);
  MlirExecutionEngine ee = mlirExecutionEngineCreate(m, 3, 0, NULL, false);
  mlirModuleDestroy(m);
  return ee;
}

typedef void (*kern32)(float *, float *, float *, int64_t);
typedef void (*kern64)(double *, double *, double *, int64_t);

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Runs kernel `name` on a (and b) as type f64/f32; results as doubles in out. */
static int run(MlirExecutionEngine ee, const char *name, int f64, const double *a, const double *b,
               double *out, int n) {
  void *fp = mlirExecutionEngineLookup(ee, mlirStringRefCreateFromCString(name));
  if (!fp) {
    fprintf(stderr, "lookup of %s failed\n", name);
    return 1;
  }
  if (f64) {
    ((kern64)fp)((double *)a, (double *)b, out, n);
    return 0;
  }
  float *fa = malloc(sizeof(float) * n), *fb = malloc(sizeof(float) * n), *fo = malloc(sizeof(float) * n);
  for (int i = 0; i < n; i++) fa[i] = (float)a[i], fb[i] = (float)b[i];
  ((kern32)fp)(fa, fb, fo, n);
  for (int i = 0; i < n; i++) out[i] = fo[i];
  free(fa), free(fb), free(fo);
  return 0;
}

/* Worst error over the inputs within lim (0: all). Reports the worst input. */
static double score(const char *label, int f64, const double *a, const double *b, const double *got,
                    const long double *ref, int n, double lim, double fl, int show) {
  double worst = 0;
  int wi = n > 0 ? 0 : -1;
  for (int i = 0; i < n; i++) {
    if (lim > 0 && !(fabs(a[i]) <= lim)) continue;
    double e = f64 ? err64(got[i], ref[i], fl) : err32((float)got[i], ref[i]);
    if (!(e <= worst)) worst = e, wi = i;
  }
  if (show && wi >= 0) {
    printf("  %-10s %s max %s %-9.3g at x=%.17g", label, f64 ? "f64" : "f32", f64 ? "rel" : "ulp",
           worst, a[wi]);
    if (b) printf(" y=%.17g", b[wi]);
    printf(" got %.17g want %.17Lg\n", got[wi], ref[wi]);
  }
  return worst;
}

int main(void) {
  const char *seed_env = getenv("KILN_TEST_SEED");
  uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL);
  rng_state = seed * 2654435761u + 1;
  printf("test_mathfn: seed %llu\n", (unsigned long long)seed);

  MlirContext ctx = mlirContextCreate();
  MlirDialectRegistry reg = mlirDialectRegistryCreate();
  mlirRegisterAllDialects(reg);
  mlirContextAppendDialectRegistry(ctx, reg);
  mlirDialectRegistryDestroy(reg);
  mlirContextLoadAllAvailableDialects(ctx);
  mlirRegisterAllLLVMTranslations(ctx);
  mlirRegisterAllPasses();

  kl_str text;
  kl_str_init(&text);
  kl_str_append(&text, "module {\n");
  char name[64];
  for (int f64 = 0; f64 < 2; f64++) {
    const char *ty = f64 ? "f64" : "f32";
    for (int k = 0; k < NCASES; k++) {
      snprintf(name, sizeof name, "%s_%s", kl_math_name(cases[k].fn), ty);
      emit_kernel(&text, name, ty, cases[k].fn, -1);
    }
    snprintf(name, sizeof name, "pow_%s", ty);
    emit_kernel(&text, name, ty, 0, KL_MF2_POW);
    snprintf(name, sizeof name, "atan2_%s", ty);
    emit_kernel(&text, name, ty, 0, KL_MF2_ATAN2);
  }
  kl_str_append(&text, "}\n");
  int failed = check_ops(text.data);
  double t0 = now();
  MlirExecutionEngine ee = compile(ctx, text.data);
  if (mlirExecutionEngineIsNull(ee)) {
    if (getenv("KILN_DUMP_MATHFN")) fputs(text.data, stderr);
    return 1;
  }
  printf("  module: %zu bytes of MLIR, JIT %.2f s\n", text.len, now() - t0);

  double *a = malloc(sizeof(double) * NIN), *b = malloc(sizeof(double) * NIN);
  double *got = malloc(sizeof(double) * NIN);
  long double *ref = malloc(sizeof(long double) * NIN);
  for (int f64 = 0; f64 < 2; f64++) {
    const char *ty = f64 ? "f64" : "f32";
    for (int k = 0; k < NCASES; k++) {
      const case1 *cs = &cases[k];
      gen_inputs(a, NIN, f64, cs->lo, cs->hi);
      for (int i = 0; i < NIN; i++) b[i] = 0;
      snprintf(name, sizeof name, "%s_%s", kl_math_name(cs->fn), ty);
      if (run(ee, name, f64, a, b, got, NIN)) return 1;
      for (int i = 0; i < NIN; i++) ref[i] = cs->ref(a[i]);
      double lim = f64 ? cs->lim64 : cs->lim32;
      double w = score(kl_math_name(cs->fn), f64, a, NULL, got, ref, NIN, lim, cs->floor64, 1);
      double tol = f64 ? cs->tol64 : cs->tol32;
      if (!(w <= tol)) {
        printf("  FAIL %s %s: %.3g > %.3g\n", kl_math_name(cs->fn), ty, w, tol);
        failed = 1;
      }
      if (!f64 && cs->lim64 > 0) /* f32 trig: the exact reduction, enforced over the whole range */
        for (double big = 1e7; big < 3.5e38; big *= 1e6) {
          for (int i = 0; i < NIN; i++) a[i] = (float)((2 * unif() - 1) * (big < 3e38 ? big : 3.4e38));
          if (run(ee, name, f64, a, b, got, NIN)) return 1;
          for (int i = 0; i < NIN; i++) ref[i] = cs->ref(a[i]);
          double wb = score("", f64, a, NULL, got, ref, NIN, 0, cs->floor64, 0);
          if (!(wb <= cs->tol32)) {
            printf("  FAIL %s f32 for |x| <= %g: %.3g ulp > %.3g\n", kl_math_name(cs->fn), big, wb, cs->tol32);
            failed = 1;
          }
        }
      if (lim > 0) { /* documented, not enforced: accuracy of the Cody-Waite reduction far out */
        for (double big = lim * 100; big <= (f64 ? 1e15 : 1e9); big *= 100) {
          for (int i = 0; i < NIN; i++) {
            a[i] = (2 * unif() - 1) * big;
            if (!f64) a[i] = (float)a[i];
          }
          run(ee, name, f64, a, b, got, NIN);
          for (int i = 0; i < NIN; i++) ref[i] = cs->ref(a[i]);
          double wb = score("", f64, a, NULL, got, ref, NIN, 0, cs->floor64, 0);
          printf("    (info) |x| <= %g: max %s %.3g\n", big, f64 ? "rel" : "ulp", wb);
        }
      }
    }
    /* pow and atan2: random pairs plus every pair of special values */
    for (int which = 0; which < 2; which++) {
      int ns = (int)(sizeof specials / sizeof specials[0]);
      int i = 0;
      for (int p = 0; p < ns && i < NIN; p++)
        for (int q = 0; q < ns && i < NIN; q++, i++) a[i] = specials[p], b[i] = specials[q];
      for (; i < NIN; i++) {
        int kind = (int)(rnd64() % 4);
        if (which == 1 || kind == 0) { /* any finite-or-not pair */
          a[i] = (2 * unif() - 1) * pow(10.0, 40 * unif() - 20);
          b[i] = (2 * unif() - 1) * pow(10.0, 40 * unif() - 20);
        } else if (kind == 1) { /* results in range */
          a[i] = pow(10.0, 6 * unif() - 3);
          b[i] = (2 * unif() - 1) * (f64 ? 100 : 12);
        } else if (kind == 2) { /* negative base, integer exponent */
          a[i] = -(0.5 + 3 * unif());
          b[i] = (double)(int)(60 * unif() - 30);
        } else { /* near 1 with large exponents: needs the extra precision of log */
          a[i] = 1 + (2 * unif() - 1) * 1e-3;
          b[i] = (2 * unif() - 1) * (f64 ? 7e5 : 8e4);
        }
        if (!f64) a[i] = (float)a[i], b[i] = (float)b[i];
      }
      for (int j = 0; j < NIN; j++) {
        if (!f64) a[j] = (float)a[j], b[j] = (float)b[j];
        ref[j] = which == 0 ? r_pow(a[j], b[j]) : r_atan2(a[j], b[j]);
      }
      const char *fname = which == 0 ? "pow" : "atan2";
      snprintf(name, sizeof name, "%s_%s", fname, ty);
      if (run(ee, name, f64, a, b, got, NIN)) return 1;
      double w = score(fname, f64, a, b, got, ref, NIN, 0, 0, 1);
      if (!(w <= (f64 ? 1e-14 : 4))) {
        printf("  FAIL %s %s: %.3g\n", fname, ty, w);
        failed = 1;
      }
    }
  }

  /* Vectorization: the f32 exp expansion over 10M floats against a loop of libm expf calls. */
  int nbig = 10 * 1000 * 1000;
  float *xs = malloc(sizeof(float) * nbig), *ys = malloc(sizeof(float) * nbig);
  for (int i = 0; i < nbig; i++) xs[i] = (float)(160 * unif() - 80);
  kern32 kexp = (kern32)mlirExecutionEngineLookup(ee, mlirStringRefCreateFromCString("exp_f32"));
  kexp(xs, xs, ys, nbig); /* warm up */
  double best_k = 1e9, best_l = 1e9;
  for (int rep = 0; rep < 3; rep++) {
    double t = now();
    kexp(xs, xs, ys, nbig);
    best_k = fmin(best_k, now() - t);
    t = now();
    for (int i = 0; i < nbig; i++) ys[i] = expf(xs[i]);
    best_l = fmin(best_l, now() - t);
  }
  printf("  exp f32 over 10M: emitted %.1f ms, libm expf loop %.1f ms (%.1fx)\n", best_k * 1e3,
         best_l * 1e3, best_l / best_k);
  if (best_l / best_k < 1.5) {
    printf("  FAIL exp f32 is not faster than scalar expf: the loop did not vectorize\n");
    failed = 1;
  }
  free(xs), free(ys), free(a), free(b), free(got), free(ref);
  mlirExecutionEngineDestroy(ee);
  kl_str_free(&text);
  mlirContextDestroy(ctx);
  printf(failed ? "test_mathfn: FAILED\n" : "test_mathfn: ok\n");
  return failed;
}
