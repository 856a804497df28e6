/* compile.c: the CPU compiler driver. */
#define _GNU_SOURCE
#include "compile.h"
#include "loop.h"

#include <mlir-c/Diagnostics.h>
#include <mlir-c/IR.h>
#include <mlir-c/Pass.h>
#include <mlir-c/RegisterEverything.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lower/lower.h"
#include "lower/table.h"

#include "../ir/alloc.h"
#include "../ir/loc.h"
#include "../ir/status.h"
#include "../transforms/fuse.h"
#include "cpujit.h"
#include "fatal.h"
#include "mlirctx.h"
#include "kernel.h"
#include "libcall.h"

static pthread_mutex_t mlir_mu = PTHREAD_MUTEX_INITIALIZER;
static MlirContext mlir_ctx;
static int mlir_ready;
static double compile_seconds;
static long compile_count;

/* arith-expand (needed for bf16 conversions) also expands maxnumf & co. into compare+select,
 * which stops LLVM from vectorizing max/min reductions: it runs only for modules with bf16. */
static const char *CPU_PIPELINE_BF16 =
    "builtin.module(arith-expand{include-bf16=true},convert-math-to-llvm,convert-math-to-libm,convert-scf-to-cf,"
    "expand-strided-metadata,finalize-memref-to-llvm,convert-arith-to-llvm,convert-cf-to-llvm,"
    "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1},reconcile-unrealized-casts)";
static const char *CPU_PIPELINE =
    "builtin.module(func.func(convert-math-to-llvm),convert-math-to-libm,func.func(convert-scf-to-cf,"
    "expand-strided-metadata),finalize-memref-to-llvm,func.func(convert-arith-to-llvm),convert-cf-to-llvm,"
    "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1},reconcile-unrealized-casts)";

/* The context runs passes on the calling thread: kiln's modules are one gpu.module or a few
 * small functions, and waking MLIR's thread pool for them cost more than it gave (a small GPU
 * kernel's MLIR -> PTX: 9.6 -> 7.1 ms median here). */
static void mlir_init(void) {
  if (mlir_ready) return;
  MlirDialectRegistry reg = mlirDialectRegistryCreate();
  mlirRegisterAllDialects(reg);
  mlir_ctx = mlirContextCreateWithRegistry(reg, false);
  mlirDialectRegistryDestroy(reg);
  mlirContextLoadAllAvailableDialects(mlir_ctx);
  mlirRegisterAllLLVMTranslations(mlir_ctx);
  mlirRegisterAllPasses();
  mlir_ready = 1;
}

/* MLIR's context and LLVM's JIT take ~10-20 ms to set up; doing it on a background thread at
 * import hides that from the first compilation. */
static void *warmup_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mlir_mu);
  mlir_init();
  pthread_mutex_unlock(&mlir_mu);
  (void)kl_cpujit_key("");
  return NULL;
}

void kl_compile_warmup_async(void) {
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &a, warmup_main, NULL) != 0) warmup_main(NULL);
  pthread_attr_destroy(&a);
}

MlirContext kl_mlir_lock(void) {
  pthread_mutex_lock(&mlir_mu);
  mlir_init();
  return mlir_ctx;
}

void kl_mlir_unlock(void) { pthread_mutex_unlock(&mlir_mu); }

/* Pass managers by pipeline text, made once: a pass manager run again skips its passes'
 * initialization (canonicalize's pattern set over every loaded dialect is most of a small
 * module's lowering). Kept for the process; a full table is emptied. */
enum { PM_CACHE = 32 };
static struct {
  char *pipeline;
  MlirPassManager pm;
} pms[PM_CACHE];
static int npms;

/* Runs pm on m: 0, 1 when a pass failed. A fatal error inside a pass lands here (fatal.h): the
 * pass managers made so far may hold the failed run's state, so they are forgotten (leaked) and
 * made again; -1 with the message. */
static int run_guarded(MlirPassManager pm, MlirModule m, char *err, size_t errlen) {
  kl_fatal_guard g;
  kl_fatal_push(&g, "an MLIR module");
  if (setjmp(g.jb)) {
    npms = 0;
    return kl_fatal_message(&g, err, errlen);
  }
  int failed = mlirLogicalResultIsFailure(mlirPassManagerRunOnOp(pm, mlirModuleGetOperation(m)));
  kl_fatal_pop(&g);
  return failed ? 1 : 0;
}

int kl_mlir_run_pipeline(MlirModule m, const char *pipeline, char *err, size_t errlen) {
  MlirPassManager pm = {NULL};
  for (int i = 0; i < npms && !pm.ptr; i++)
    if (!strcmp(pms[i].pipeline, pipeline)) pm = pms[i].pm;
  if (!pm.ptr) {
    if (npms == PM_CACHE) {
      for (int i = 0; i < npms; i++) {
        mlirPassManagerDestroy(pms[i].pm);
        free(pms[i].pipeline);
      }
      npms = 0;
    }
    char *copy = strdup(pipeline);
    if (!copy) return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory for an MLIR pass pipeline");
    pm = mlirPassManagerCreate(mlir_ctx);
    kl_str perr;
    kl_str_init(&perr);
    if (mlirLogicalResultIsFailure(mlirParsePassPipeline(mlirPassManagerGetAsOpPassManager(pm),
                                                         mlirStringRefCreateFromCString(pipeline), kl_mlir_collect_text, &perr))) {
      snprintf(err, errlen, "internal error: bad pass pipeline %s: %s", pipeline, perr.data ? perr.data : "");
      kl_str_free(&perr);
      mlirPassManagerDestroy(pm);
      free(copy);
      return -1;
    }
    kl_str_free(&perr);
    pms[npms].pipeline = copy;
    pms[npms++].pm = pm;
  }
  return run_guarded(pm, m, err, errlen);
}

void kl_compile_note(double seconds) {
  compile_seconds += seconds;
  compile_count++;
}

double kl_compile_seconds(void) { return compile_seconds; }
long kl_compile_count(void) { return compile_count; }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Diagnostics go into a buffer so errors reach Python. */
void kl_mlir_collect_text(MlirStringRef s, void *user) {
  kl_str *b = user;
  char tmp[512];
  size_t n = s.length < sizeof tmp - 1 ? s.length : sizeof tmp - 1;
  memcpy(tmp, s.data, n);
  tmp[n] = 0;
  if (b->len < 4000) kl_str_append(b, tmp);
}

MlirLogicalResult kl_mlir_on_diag(MlirDiagnostic d, void *user) {
  mlirDiagnosticPrint(d, kl_mlir_collect_text, user);
  kl_str_append(user, "\n");
  return mlirLogicalResultSuccess();
}

/* ---- executable owner ---- */

typedef struct {
  kl_kernel_fn fn; /* fn(argument pointers, lo, hi) */
  int nargs;
  kl_prim reduce;
  kl_dtype out_dtype;
  int64_t out_elems; /* elements of the output, for merging per-thread partial reductions */
  int fn_index;      /* which of the module's distinct kernel functions it runs */
} kernel_ctx;

typedef struct {
  kernel_ctx *kernels;
  int nkernels;
  kl_libcall **libs;
  int nlibs;
  kl_loop **loops;
  int nloops;
} owner_t;

static void owner_destroy(void *p) {
  owner_t *o = p;
  if (!o) return;
  for (int i = 0; i < o->nlibs; i++) kl_libcall_free(o->libs[i]);
  for (int i = 0; i < o->nloops; i++) kl_loop_free(o->loops[i]);
  free(o->libs);
  free(o->loops);
  free(o->kernels);
  free(o);
}

static void kernel_run(void *ctx, void **ptrs, int64_t lo, int64_t hi) {
  kernel_ctx *k = ctx;
  k->fn(ptrs, lo, hi);
}

static void kernel_combine(void *ctx, void *dst, void *const *parts, int n) {
  kernel_ctx *k = ctx;
  kl_reduce_combine(k->reduce, k->out_dtype, dst, parts, n, k->out_elems);
}

void kl_codegen_dump(const char *what, const char *text) { kl_dump(what, text); }

/* FNV-1a over text, each occurrence of name hashed as one marker byte. */
static uint64_t text_hash(const char *t, size_t n, const char *name) {
  size_t nl = strlen(name);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)t[i];
    if (c == name[0] && i + nl <= n && !memcmp(t + i, name, nl)) c = 0xff, i += nl;
    else i++;
    h = (h ^ c) * 0x100000001b3ULL;
  }
  return h;
}

/* Whether texts a (kernel named an) and b (named bn) are the same, names aside. */
static int same_text(const char *a, size_t alen, const char *an, const char *b, size_t blen, const char *bn) {
  size_t al = strlen(an), bl = strlen(bn), i = 0, j = 0;
  while (i < alen && j < blen) {
    int na = a[i] == an[0] && i + al <= alen && !memcmp(a + i, an, al);
    int nb = b[j] == bn[0] && j + bl <= blen && !memcmp(b + j, bn, bl);
    if (na != nb) return 0;
    if (na) i += al, j += bl;
    else if (a[i++] != b[j++]) return 0;
  }
  return i == alen && j == blen;
}

const char *kl_kernel_dedup_add(kl_kernel_dedup *d, kl_str *mod, size_t before, const char *name) {
  if (mod->failed || !mod->data || strlen(name) >= sizeof d->names[0]) return NULL;
  const char *t = mod->data + before;
  size_t n = mod->len - before;
  uint64_t h = text_hash(t, n, name);
  for (int i = 0; i < d->n; i++) {
    if (d->hash[i] != h || !same_text(t, n, name, mod->data + d->start[i], d->end[i] - d->start[i], d->names[i])) continue;
    mod->len = before; /* a repeat: its text goes */
    mod->data[before] = 0;
    return d->names[i];
  }
  if (d->n == d->cap) {
    int cap = d->cap ? 2 * d->cap : 32;
    size_t *st = kl_realloc(d->start, sizeof(size_t) * (size_t)cap);
    if (st) d->start = st;
    size_t *en = st ? kl_realloc(d->end, sizeof(size_t) * (size_t)cap) : NULL;
    if (en) d->end = en;
    uint64_t *hs = en ? kl_realloc(d->hash, sizeof(uint64_t) * (size_t)cap) : NULL;
    if (hs) d->hash = hs;
    char(*nm)[32] = hs ? kl_realloc(d->names, sizeof d->names[0] * (size_t)cap) : NULL;
    if (!nm) return NULL;
    d->names = nm;
    d->cap = cap;
  }
  d->start[d->n] = before;
  d->end[d->n] = mod->len;
  d->hash[d->n] = h;
  snprintf(d->names[d->n++], sizeof d->names[0], "%s", name);
  return NULL;
}

void kl_kernel_dedup_free(kl_kernel_dedup *d) {
  free(d->start);
  free(d->end);
  free(d->hash);
  free(d->names);
  memset(d, 0, sizeof *d);
}



/* Replaces every "KLPFX" in text with prefix (the kernels' unique symbol prefix). */
void kl_codegen_set_prefix(kl_str *text, const char *prefix) {
  if (text->failed || !text->data) return; /* the caller sees text->failed */
  kl_str out;
  kl_str_init(&out);
  const char *p = text->data, *q;
  while ((q = strstr(p, "KLPFX"))) {
    kl_str_printf(&out, "%.*s%s", (int)(q - p), p, prefix);
    p = q + 5;
  }
  kl_str_append(&out, p);
  kl_str_free(text);
  *text = out;
}

/* Machine code for the module's kernels: from memory, from the disk cache, or compiled. */
/* The kernels of a module being written: one or several executables' (a loop's bodies). */
typedef struct {
  kl_str mod;
  kl_kernel_dedup dedup;
  uint64_t outlined; /* out-of-line math functions the kernels call */
  size_t largest;    /* MLIR text of the largest kernel */
  int nfns;          /* distinct kernel functions so far (KLPFX<i>) */
  int64_t cost;
} cpu_module;

/* Machine code for the module's kernels (and `nextra` functions after them, named KLPFX<nfns + j>,
 * into extra): from memory, from the disk cache, or compiled; each executable's kernel steps get
 * their functions. */
static int build_kernels(cpu_module *cm, kl_exec **xs, int nxs, int nextra, kl_kernel_fn *extra, char *err, size_t errlen) {
  kl_str *mod = &cm->mod;
  int64_t cost = cm->cost;
  size_t largest = cm->largest;
  int outlined = cm->outlined != 0;
  double tp0 = now();
  /* Small kernels are not worth LLVM's vectorizer and unroller (which can take 200 ms on an
   * 8-bit loop of 20 elements); they get the light pipeline. The choice is part of the key. */
  /* Kernels are simple loop nests: the loop vectorizer and cleanups give O3's code in half its
   * time; reductions also get their vectorized loops unrolled (more accumulators in flight). */
  /* A very large kernel over few elements (a long fused chain: hundreds of KB of MLIR, or one
   * calling its math out of line) gets only the cleanups: optimizing it would cost more than it
   * could save. */
  const char *passes = cost < 32768 && (largest > ((size_t)256 << 10) || outlined) ? "function(early-cse,simplifycfg)"
                       : cost < 32768 ? "default<O1>"
                       : strstr(mod->data, "iter_args")
                           ? "function(sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,loop-simplify,lcssa,loop-mssa(loop-rotate,"
                             "licm),indvars,loop-vectorize,loop-unroll,instcombine<no-verify-fixpoint>,simplifycfg)"
                           : "function(sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,loop-simplify,lcssa,loop-mssa(loop-rotate,"
                             "licm),indvars,loop-vectorize,instcombine<no-verify-fixpoint>,simplifycfg)";
  /* KILN_LLVM_VERIFY=1 (the ASan build's suite): LLVM's verifier before and after the passes, so a
   * kernel whose IR is broken fails its compile (fatal.h) instead of miscompiling quietly. */
  char verified[640];
  const char *verify = getenv("KILN_LLVM_VERIFY");
  if (verify && *verify == '1') {
    snprintf(verified, sizeof verified, "verify,%s,verify", passes);
    passes = verified;
  }
  kl_str_printf(mod, "// llvm: %s\n", passes);
  if (mod->failed) return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory writing the kernels' MLIR text");
  uint64_t key = kl_cpujit_key(mod->data);
  char prefix[40];
  snprintf(prefix, sizeof prefix, "kl_%016llx_", (unsigned long long)key);
  kl_codegen_set_prefix(mod, prefix);
  if (mod->failed) return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory writing the kernels' MLIR text");
  kl_codegen_dump("kernels.mlir", mod->data);
  int n = cm->nfns + nextra, rc = 0;
  kl_kernel_fn *fns = kl_calloc((size_t)n + 1, sizeof *fns);
  if (!fns) return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory looking up %d kernels", n);
  if (!kl_cpujit_find(key, prefix, n, fns)) {
    pthread_mutex_lock(&mlir_mu);
    mlir_init();
    kl_str diag;
    kl_str_init(&diag);
    MlirDiagnosticHandlerID hid = mlirContextAttachDiagnosticHandler(mlir_ctx, kl_mlir_on_diag, &diag, NULL);
    MlirModule m = mlirModuleCreateParse(mlir_ctx, mlirStringRefCreateFromCString(mod->data));
    double tp1 = now(), tp2 = tp1;
    if (mlirModuleIsNull(m)) {
      snprintf(err, errlen, "internal error: generated MLIR does not parse: %s", diag.data ? diag.data : "");
      rc = -1;
    } else {
      int bad = kl_mlir_run_pipeline(m, strstr(mod->data, "bf16") ? CPU_PIPELINE_BF16 : CPU_PIPELINE, err, errlen);
      if (bad) {
        if (bad > 0) snprintf(err, errlen, "internal error: lowering failed: %s", diag.data ? diag.data : "");
        rc = -1;
      }
      tp2 = now();
      if (!rc) rc = kl_cpujit_compile(m, key, prefix, n, fns, passes, err, errlen);
      mlirModuleDestroy(m);
    }
    mlirContextDetachDiagnosticHandler(mlir_ctx, hid);
    kl_str_free(&diag);
    pthread_mutex_unlock(&mlir_mu);
    if (getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") == '2')
      fprintf(stderr, "kiln: parse %.1f ms, lower %.1f ms, llvm %.1f ms\n", (tp1 - tp0) * 1e3, (tp2 - tp1) * 1e3,
              (now() - tp2) * 1e3);
  }
  for (int k = 0; !rc && k < nxs; k++) {
    owner_t *o = xs[k]->owner;
    for (int i = 0; i < o->nkernels; i++) o->kernels[i].fn = fns[o->kernels[i].fn_index];
  }
  for (int j = 0; !rc && j < nextra; j++) extra[j] = fns[cm->nfns + j];
  free(fns);
  return rc;
}

/* What step s reads, into r (step_reads): each value it reads from a buffer, once in r->list,
 * with r->how[v] bit 1 when read at the output's own index, bit 2 when anywhere else. A kernel's
 * reads are the buffers its expression reaches (through elementwise primitives of its shape:
 * aligned); a library call's, its operands, all "elsewhere" but an update's operand 0 (the
 * buffer an in-place update writes into). last[v]: the last step reading v, or -1. Shared by
 * donation and buffer reuse. */
typedef struct {
  int gen;     /* bumped by each step_reads: stamp and seen below are current when they match */
  int *stamp;  /* per value: the walk whose read flags how[] holds */
  char *how;   /* per value: bit 1 aligned, bit 2 skewed */
  int *seen;   /* per value: (walk << 2) | the walk's visited bits */
  int *list, n;
  int *last;   /* per value: the last step reading it, or -1 */
} step_reads_t;

static void note_read(step_reads_t *r, int v, int bits) {
  if (r->stamp[v] != r->gen) r->stamp[v] = r->gen, r->how[v] = 0, r->list[r->n++] = v;
  r->how[v] |= (char)bits;
}

static void walk_reads(const kl_program *pg, const kl_plan *plan, int u, int root, int aligned, step_reads_t *r) {
  if ((u != root && plan->materialized[u]) || pg->vals[u].producer < 0) {
    note_read(r, u, aligned ? 1 : 2);
    return;
  }
  int bit = aligned ? 1 : 2;
  if (r->seen[u] >> 2 != r->gen) r->seen[u] = r->gen << 2;
  if (r->seen[u] & bit) return;
  r->seen[u] |= bit;
  const kl_eqn *e = &pg->eqns[pg->vals[u].producer];
  const kl_aval *ua = &pg->vals[u].aval;
  int elementwise = kl_form_elementwise(kl_prim_get(e->prim)->form) && kl_aval_same_shape(ua, &pg->vals[root].aval);
  for (int i = 0; i < e->nin; i++)
    walk_reads(pg, plan, e->ins[i], root, aligned && elementwise && kl_aval_same_shape(&pg->vals[e->ins[i]].aval, ua), r);
}

static int is_update(const kl_eqn *e) { return kl_lower_get(e->prim)->updates && e->nout == 1; }

/* The source location an update records (its KL_PF_LOC param, ir/loc.h), or 0. */
static int update_loc(const kl_eqn *e) {
  for (const kl_param_field *f = kl_prim_get(e->prim)->fields; f->name; f++)
    if (f->kind == KL_PF_LOC) return *(const int *)kl_param_cptr(&e->p, f);
  return 0;
}

static void step_reads(const kl_program *pg, const kl_plan *plan, int s, step_reads_t *r) {
  const kl_plan_step *ps = &plan->steps[s];
  r->n = 0;
  r->gen++;
  if (ps->kind == KL_STEP_KERNEL) {
    walk_reads(pg, plan, ps->root, ps->root, 1, r);
    return;
  }
  const kl_eqn *e = &pg->eqns[ps->eqn];
  for (int a = 0; a < e->nin; a++) note_read(r, e->ins[a], a == 0 && is_update(e) ? 1 : 2);
}

static void reads_free(step_reads_t *r) {
  free(r->stamp);
  free(r->how);
  free(r->seen);
  free(r->list);
  free(r->last);
}

/* r ready, with every value's last reading step: 0, or -1 when out of memory. */
static int reads_init(const kl_program *pg, const kl_plan *plan, step_reads_t *r) {
  size_t n = (size_t)pg->nvals + 1;
  *r = (step_reads_t){0, kl_malloc(sizeof(int) * n), kl_malloc(n), kl_malloc(sizeof(int) * n), kl_malloc(sizeof(int) * n),
                      0, kl_malloc(sizeof(int) * n)};
  if (!r->stamp || !r->how || !r->seen || !r->list || !r->last) {
    reads_free(r);
    return -1;
  }
  for (int v = 0; v < pg->nvals; v++) r->last[v] = -1, r->stamp[v] = -1, r->seen[v] = -4;
  for (int s = 0; s < plan->nsteps; s++) {
    step_reads(pg, plan, s, r);
    for (int k = 0; k < r->n; k++) r->last[r->list[k]] = s;
  }
  return 0;
}

/* Per value, the earlier value whose buffer it is written into (-1: a buffer of its own), for
 * buffer reuse inside a program: a kernel's elementwise result, or a dynamic_update_slice's or
 * scatter's result (x.at[i].set(v) on a temporary: the update then writes only what changes),
 * takes the buffer of a temporary of its shape and dtype that this step reads only at the
 * result's own index and that no later step reads. The two values then share one slot (its
 * live range the union of theirs), so the update runs in place and the program holds one
 * buffer where it held two. Inputs and outputs never give their buffer (donation is the way for
 * inputs), and an output that may take a donated input's buffer (donor, per output, or NULL)
 * keeps that chance. NULL when out of memory (no sharing). */
static int *share_dying(const kl_program *pg, const kl_plan *plan, const int *donor, step_reads_t *r) {
  int n = pg->nvals, *last = r->last;
  int *share = kl_malloc(sizeof(int) * ((size_t)n + 1));
  char *pinned = kl_calloc((size_t)n + 1, 1);
  if (!share || !pinned) {
    free(share);
    free(pinned);
    return NULL;
  }
  for (int v = 0; v < n; v++) share[v] = -1;
  for (int i = 0; i < pg->noutputs; i++) pinned[pg->outputs[i]] = 1;
  for (int i = 0; i < pg->ninputs; i++) pinned[pg->inputs[i]] = 1;
  for (int j = 0; donor && j < pg->noutputs; j++)
    if (donor[j] >= 0) share[pg->outputs[j]] = -2; /* not a taker */
  for (int s = 0; s < plan->nsteps; s++) {
    const kl_plan_step *ps = &plan->steps[s];
    const kl_eqn *e = &pg->eqns[ps->kind == KL_STEP_KERNEL ? pg->vals[ps->root].producer : ps->eqn];
    if (ps->kind == KL_STEP_LIB && kl_lower_get(e->prim)->loop) { /* carries kept in place */
      for (int j = 0; j < e->nout; j++) {
        int at = kl_loop_carry_init(e, j), o = e->outs[j], v = at >= 0 ? e->ins[at] : -1, once = v >= 0;
        for (int a = 0; a < e->nin && once; a++) once = a == at || e->ins[a] != v;
        if (once && share[o] != -2 && last[v] == s && !pinned[v] && v < o && kl_aval_size(&pg->vals[o].aval) > 0) {
          share[o] = v;
          pinned[v] = 1;
        }
      }
      continue;
    }
    int o = ps->kind == KL_STEP_KERNEL ? ps->root : is_update(e) ? e->outs[0] : -1;
    /* (a row kernel may write its output row before its main loop reads the row: softmax's
     * exp(x - max), stashed there by the reduction stage) */
    if (o < 0 || share[o] == -2 || (ps->kind == KL_STEP_KERNEL && (!kl_form_elementwise(kl_prim_get(e->prim)->form) || ps->nstages)) ||
        kl_aval_size(&pg->vals[o].aval) == 0)
      continue;
    step_reads(pg, plan, s, r);
    for (int k = 0; k < r->n; k++) {
      int v = r->list[k];
      if (r->how[v] != 1 || last[v] != s || pinned[v] || v >= o || pg->vals[v].aval.dtype != pg->vals[o].aval.dtype ||
          !kl_aval_same_shape(&pg->vals[v].aval, &pg->vals[o].aval))
        continue;
      share[o] = v;
      pinned[v] = 1; /* its buffer has gone to o */
      break;
    }
  }
  free(pinned);
  return share;
}

/* x->updates: the user's updates (dynamic_update_slice and scatter steps with a source location,
 * recorded while the copy log or forbid-copies is on) and whether each writes into its operand's
 * buffer (share) or why not. Without memory for the table: none (nothing is reported). */
static void find_updates(const kl_program *pg, const kl_plan *plan, const int *share, kl_exec *x) {
  int n = 0;
  for (int s = 0; s < plan->nsteps; s++) {
    const kl_eqn *e = &pg->eqns[plan->steps[s].eqn];
    n += plan->steps[s].kind == KL_STEP_LIB && is_update(e) && update_loc(e);
  }
  if (!n || !(x->updates = kl_calloc((size_t)n, sizeof *x->updates))) return;
  for (int s = 0; s < plan->nsteps; s++) {
    const kl_eqn *e = &pg->eqns[plan->steps[s].eqn];
    int loc = update_loc(e);
    if (plan->steps[s].kind != KL_STEP_LIB || !is_update(e) || !loc) continue;
    kl_update *u = &x->updates[x->nupdates++];
    int v = e->ins[0], o = e->outs[0], is_out = 0;
    const kl_aval *a = &pg->vals[v].aval;
    u->loc = loc;
    u->prim = kl_prim_get(e->prim)->name;
    u->in_place = share && share[o] == v;
    u->operand_input = u->output = -1;
    for (int i = 0; i < pg->ninputs; i++)
      if (pg->inputs[i] == v) u->operand_input = i;
    for (int j = 0; j < pg->noutputs; j++) {
      if (pg->outputs[j] == o) u->output = j;
      is_out |= pg->outputs[j] == v;
    }
    u->donor_ok = u->operand_input >= 0 && u->output >= 0 && x->donor && x->donor[u->output] == u->operand_input;
    u->why = u->operand_input >= 0 ? KL_COPY_INPUT : is_out ? KL_COPY_OUTPUT : KL_COPY_LIVE;
    u->bytes = (size_t)kl_aval_size(a) * kl_dtype_size(a->dtype);
    int at = snprintf(u->type, sizeof u->type, "%s[", kl_dtype_name(a->dtype));
    for (int d = 0; d < a->ndim && at < (int)sizeof u->type; d++)
      at += snprintf(u->type + at, sizeof u->type - (size_t)at, d ? ",%lld" : "%lld", (long long)a->dims[d]);
    if (at < (int)sizeof u->type - 1) strcat(u->type, "]");
  }
}

int kl_compile_report_copies(const kl_exec *x, char *err, size_t errlen) {
  for (int k = 0; x && k < x->nupdates; k++) {
    const kl_update *u = &x->updates[k];
    if (!u->in_place && !u->donor_ok && kl_copy_report(u->loc, u->prim, u->type, u->bytes, u->why, 0, err, errlen)) return -1;
  }
  return 0;
}

/* Per output, the input whose buffer it may be written into when that input is donated (x->donor):
 * the same shape and dtype, the output written by a kernel that reads the input only at its own
 * index, or by a dynamic_update_slice or scatter into the input (which then writes only what
 * changes: x.at[i].set(v) in place), and no step after it reading the input. Each input at most
 * once. Conservative: -1 wherever one of these is not known to hold. */
static void find_donors(const kl_program *pg, const kl_plan *plan, const char *donatable, step_reads_t *r, kl_exec *x) {
  if (!(x->donor = kl_malloc(sizeof(int) * ((size_t)pg->noutputs + 1)))) return;
  char *taken = kl_calloc((size_t)pg->ninputs + 1, 1);
  for (int j = 0; j < pg->noutputs; j++) {
    x->donor[j] = -1;
    int o = pg->outputs[j], w = -1, own = -1; /* own: the operand whose buffer step w writes o into */
    for (int s = 0; s < plan->nsteps && w < 0; s++) {
      const kl_plan_step *ps = &plan->steps[s];
      const kl_eqn *e = &pg->eqns[ps->eqn];
      if (ps->kind == KL_STEP_KERNEL && ps->root == o) w = s;
      else if (ps->kind == KL_STEP_LIB && is_update(e) && e->outs[0] == o) w = s, own = 0;
      else if (ps->kind == KL_STEP_LIB && kl_lower_get(e->prim)->loop) /* a carry kept in place */
        for (int k = 0; k < e->nout; k++)
          if (e->outs[k] == o && (own = kl_loop_carry_init(e, k)) >= 0) w = s;
    }
    if (w < 0 || !taken) continue;
    const kl_plan_step *pw = &plan->steps[w];
    const kl_eqn *ew = &pg->eqns[pw->eqn];
    if (pw->kind == KL_STEP_KERNEL) step_reads(pg, plan, w, r); /* how step w reads each value */
    for (int i = 0; i < pg->ninputs && x->donor[j] < 0; i++) {
      int v = pg->inputs[i], ok = donatable && donatable[i] && !taken[i] && v != o &&
                                  pg->vals[v].aval.dtype == pg->vals[o].aval.dtype &&
                                  kl_aval_same_shape(&pg->vals[v].aval, &pg->vals[o].aval) && r->last[v] <= w;
      for (int k = 0; k < pg->noutputs && ok; k++) ok = pg->outputs[k] != v;
      if (ok && r->last[v] == w) { /* read where o is written: only at o's own index */
        if (pw->kind == KL_STEP_KERNEL) ok = r->stamp[v] == r->gen && r->how[v] == 1;
        else { /* as the operand whose buffer o takes, and as nothing else */
          ok = own >= 0 && ew->ins[own] == v;
          for (int a = 0; a < ew->nin && ok; a++) ok = a == own || ew->ins[a] != v;
        }
      }
      if (ok) {
        x->donor[j] = i;
        taken[i] = 1;
      }
    }
  }
  free(taken);
}

kl_exec *kl_compile_prepare(kl_program *pg, kl_plan *plan, int **slot_of, int extra_slots, const char *donatable, char *err,
                            size_t errlen) {
  memset(plan, 0, sizeof *plan);
  if (pg->oom) {
    kl_error(err, errlen, KL_ERR_NOMEM, "out of memory building the program to compile");
    return NULL;
  }
  if (kl_plan_build(pg, plan, kl_lower_fuse_traits())) { /* the plan ran out of memory */
    kl_error(err, errlen, KL_ERR_NOMEM, "out of memory planning the kernels");
    return NULL;
  }
  kl_exec *x = kl_calloc(1, sizeof *x);
  int *so = kl_malloc(sizeof(int) * ((size_t)pg->nvals + 1));
  if (x) {
    x->callbacks = kl_program_has_callbacks(pg);
    x->slot_bytes = kl_calloc((size_t)pg->nvals + (size_t)extra_slots + 1, sizeof(size_t));
    x->in_slots = kl_malloc(sizeof(int) * ((size_t)pg->ninputs + 1));
    x->out_slots = kl_malloc(sizeof(int) * ((size_t)pg->noutputs + 1));
  }
  if (!x || !so || !x->slot_bytes || !x->in_slots || !x->out_slots) {
    if (x) {
      free(x->slot_bytes);
      free(x->in_slots);
      free(x->out_slots);
      free(x);
    }
    free(so);
    kl_plan_free(plan);
    kl_error(err, errlen, KL_ERR_NOMEM, "out of memory preparing the executable");
    return NULL;
  }
  x->refcount = 1;
  step_reads_t reads;
  int reuse = !getenv("KILN_BUFFER_REUSE") || *getenv("KILN_BUFFER_REUSE") != '0'; /* (an A/B switch) */
  int *share = NULL, nomem = reads_init(pg, plan, &reads) != 0;
  if (!nomem) {
    find_donors(pg, plan, donatable, &reads, x); /* without memory for the table: no donation */
    if (reuse && !(share = share_dying(pg, plan, x->donor, &reads))) nomem = 1;
    reads_free(&reads);
  }
  if (nomem) { /* out of memory: an error, not a different program */
    kl_exec_release(x);
    free(so);
    kl_plan_free(plan);
    kl_error(err, errlen, KL_ERR_NOMEM, "out of memory planning buffer reuse");
    return NULL;
  }
  for (int v = 0; v < pg->nvals; v++) {
    so[v] = -1;
    if (share && share[v] >= 0 && so[share[v]] >= 0) so[v] = so[share[v]];
    else if (plan->materialized[v]) {
      so[v] = x->nslots;
      const kl_aval *a = &pg->vals[v].aval;
      x->slot_bytes[x->nslots++] = (size_t)kl_aval_size(a) * kl_dtype_size(a->dtype);
    }
  }
  x->ninputs = pg->ninputs;
  for (int i = 0; i < pg->ninputs; i++) x->in_slots[i] = so[pg->inputs[i]];
  x->noutputs = pg->noutputs;
  for (int i = 0; i < pg->noutputs; i++) x->out_slots[i] = so[pg->outputs[i]];
  find_updates(pg, plan, share, x);
  for (int v = 0; share && v < pg->nvals; v++)
    if (share[v] < 0 || so[share[v]] < 0) share[v] = -1;
  plan->buffer_of = share; /* the kernels' arguments follow it (kernel.c kk_arg_index) */
  plan->nbuffer_of = share ? pg->nvals : 0; /* (the GPU driver adds values of its own later) */
  *slot_of = so;
  return x;
}

int kl_compile_lib_step(const kl_program *pg, const kl_eqn *e, const int *slot_of, kl_step *st, kl_libcall **lc, char *err,
                        size_t errlen) {
  const char *why = kl_lower_get(e->prim)->unsupported;
  if (why) {
    kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s", why);
    return -1;
  }
  *lc = kl_libcall_new(pg, e);
  int *slots = kl_malloc(sizeof(int) * (size_t)(e->nin + e->nout));
  if (!*lc || !slots) {
    kl_libcall_free(*lc);
    *lc = NULL;
    free(slots);
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling a %s library call", kl_prim_get(e->prim)->name);
  }
  kl_host_step(e, slot_of, slots, *lc, kl_libcall_run, st);
  return 0;
}

void kl_host_step(const kl_eqn *e, const int *slot_of, int *slots, void *ctx,
                  int (*run)(void *ctx, void **ptrs, char *err, size_t errlen), kl_step *st) {
  st->ctx = ctx;
  st->run_checked = run;
  st->nslots = e->nin + e->nout;
  st->slots = slots;
  for (int i = 0; i < e->nin; i++) st->slots[i] = slot_of[e->ins[i]];
  for (int i = 0; i < e->nout; i++) st->slots[e->nin + i] = slot_of[e->outs[i]];
  st->extent = 1;
  st->partial_arg = -1;
  st->host_nin = e->nin;
}

/* Plans pg and writes its kernels into cm's module (their code comes from build_kernels): the
 * executable, or NULL with a message. */
static kl_exec *emit_program(kl_program *pg, cpu_module *cm, const char *donatable, char *err, size_t errlen) {
  kl_plan plan;
  int *slot_of;
  kl_exec *x = kl_compile_prepare(pg, &plan, &slot_of, 0, donatable, err, errlen);
  if (!x) return NULL;
  kl_str *mod = &cm->mod;
  kl_kernel_info *infos = kl_calloc((size_t)plan.nsteps + 1, sizeof *infos);
  owner_t *o = kl_calloc(1, sizeof *o);
  x->owner = o;
  x->destroy = owner_destroy;
  x->steps = kl_calloc((size_t)plan.nsteps + 1, sizeof *x->steps);
  if (o) {
    o->kernels = kl_calloc((size_t)plan.nsteps + 1, sizeof *o->kernels);
    o->libs = kl_calloc((size_t)plan.nsteps + 1, sizeof *o->libs);
    o->loops = kl_calloc((size_t)plan.nsteps + 1, sizeof *o->loops);
  }
  int rc = 0;
  if (!infos || !o || !x->steps || !o->kernels || !o->libs || !o->loops) {
    rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling %d steps", plan.nsteps);
    goto done;
  }
  for (int s = 0; s < plan.nsteps && !rc; s++) {
    const kl_plan_step *ps = &plan.steps[s];
    kl_step *st = &x->steps[x->nsteps];
    if (ps->kind == KL_STEP_LIB && kl_lower_get(pg->eqns[ps->eqn].prim)->loop) {
      if ((rc = kl_compile_loop_step(pg, &pg->eqns[ps->eqn], slot_of, &kl_loop_cpu, st, &o->loops[o->nloops], err, errlen))) break;
      st->cost = kl_loop_cost(o->loops[o->nloops++]); /* a large one goes to the executor thread */
      x->cost += st->cost;
      x->nsteps++;
      continue;
    }
    if (ps->kind == KL_STEP_LIB) {
      const kl_eqn *e = &pg->eqns[ps->eqn];
      kl_libcall *lc;
      if ((rc = kl_compile_lib_step(pg, e, slot_of, st, &lc, err, errlen))) break;
      o->libs[o->nlibs++] = lc;
      int64_t cost = 0;
      for (int i = 0; i < e->nin; i++) cost += kl_aval_size(&pg->vals[e->ins[i]].aval);
      st->cost = cost;
      /* library calls are worth running asynchronously, except small products: handing them to
       * the executor thread and waking the caller costs more than the product itself */
      const kl_lowering *lw = kl_lower_get(e->prim);
      if (lw->flops && lw->flops(pg, e) < 262144) x->cost += 1;
      else x->cost += cost > 1 ? cost * 8 : 1;
      x->nsteps++;
      continue;
    }
    if (kl_aval_size(&pg->vals[ps->root].aval) == 0) continue; /* nothing to write */
    char name[32];
    snprintf(name, sizeof name, "KLPFX%d", cm->nfns);
    kl_kernel_info *ki = &infos[s];
    size_t before = mod->len;
    rc = kl_kernel_emit(&plan, s, name, mod, ki, &cm->outlined, err, errlen);
    if (rc) break;
    if (mod->len - before > cm->largest) cm->largest = mod->len - before;
    const char *same = kl_kernel_dedup_add(&cm->dedup, mod, before, name);
    kernel_ctx *kc = &o->kernels[o->nkernels++];
    kc->fn_index = same ? atoi(same + 5) : cm->nfns++; /* KLPFX<function index> */
    kc->nargs = ki->nargs;
    kc->reduce = ki->reduce;
    kc->out_dtype = pg->vals[ps->root].aval.dtype;
    kc->out_elems = kl_aval_size(&pg->vals[ps->root].aval);
    st->ctx = kc;
    st->run = kernel_run;
    st->nslots = ki->nargs;
    st->slots = kl_malloc(sizeof(int) * (size_t)ki->nargs);
    if (!st->slots) {
      rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling kernel %s", name);
      break;
    }
    for (int i = 0; i < ki->nargs; i++) st->slots[i] = slot_of[ki->args[i]];
    st->extent = ki->extent;
    st->cost = ki->cost;
    st->partial_arg = ki->full_reduce ? ki->nargs - 1 : -1;
    st->combine = kernel_combine;
    x->cost += ki->cost;
    x->nsteps++;
  }
  cm->cost += x->cost;
done:
  for (int s = 0; infos && s < plan.nsteps; s++) free(infos[s].args);
  free(infos);
  kl_plan_free(&plan);
  free(slot_of);
  if (rc) {
    kl_exec_release(x);
    return NULL;
  }
  return x;
}

static void log_compile(kl_exec **xs, int nxs, const kl_program *pg, double t0) {
  int neq = 0, nk = 0, nlib = 0, nloop = 0;
  kl_str loops;
  kl_str_init(&loops);
  for (int k = 0; k < nxs; k++) {
    owner_t *o = xs[k]->owner;
    nk += o->nkernels, nlib += o->nlibs, nloop += o->nloops;
    kl_loops_describe(o->loops, o->nloops, &loops);
  }
  neq = pg->neqns;
  fprintf(stderr, "kiln: compiled %d equations into %d kernels + %d library calls + %d loops%s in %.1f ms\n", neq, nk, nlib,
          nloop, loops.data ? loops.data : "", (now() - t0) * 1e3);
  kl_str_free(&loops);
}

void kl_compile_dump_memory(kl_exec *x) {
  if (!x || !kl_dump_enabled()) return;
  const int *live = kl_exec_live(x), n = x->nslots;
  if (!live) return;
  const int *first = live, *last = live + n;
  kl_str t;
  kl_str_init(&t);
  kl_str_printf(&t, "memory plan: %d slots, %d inputs, %d outputs, %d steps\n", n, x->ninputs, x->noutputs, x->nsteps);
  kl_str_printf(&t, "slot %14s  %-6s  steps\n", "bytes", "kind");
  size_t all = 0, peak = 0;
  for (int sl = 0; sl < n; sl++) {
    int temp = first[sl] >= 0 && last[sl] != INT_MAX;
    kl_str_printf(&t, "%4d %14zu  %-6s  ", sl, x->slot_bytes[sl], first[sl] < 0 ? "input" : temp ? "temp" : "output");
    if (first[sl] == INT_MAX) kl_str_append(&t, "unused");
    else if (first[sl] < 0) kl_str_append(&t, "before..end (kept)");
    else if (!temp) kl_str_printf(&t, "%d..end (kept)", first[sl]);
    else kl_str_printf(&t, "%d..%d, freed after step %d", first[sl], last[sl], last[sl]);
    for (int j = 0; x->donor && j < x->noutputs; j++)
      if (x->out_slots[j] == sl && x->donor[j] >= 0) kl_str_printf(&t, ", may take donated input %d", x->donor[j]);
    kl_str_append(&t, "\n");
    if (temp && first[sl] != INT_MAX) all += x->slot_bytes[sl];
  }
  for (int s = 0; s < x->nsteps; s++) { /* temporaries alive during step s */
    size_t alive = 0;
    for (int sl = 0; sl < n; sl++)
      if (first[sl] >= 0 && last[sl] != INT_MAX && first[sl] <= s && s <= last[sl]) alive += x->slot_bytes[sl];
    if (alive > peak) peak = alive;
  }
  kl_str_printf(&t, "temporaries: %zu bytes alive at most at once, %zu bytes in all\n", peak, all);
  if (!t.failed) kl_codegen_dump("memory-plan.txt", t.data);
  kl_str_free(&t);
}

kl_exec *kl_compile_cpu(kl_program *pg, const char *donatable, char *err, size_t errlen) {
  double t0 = now();
  cpu_module cm;
  memset(&cm, 0, sizeof cm);
  kl_str_init(&cm.mod);
  kl_str_append(&cm.mod, "module {\n");
  kl_exec *x = emit_program(pg, &cm, donatable, err, errlen);
  int rc = x ? 0 : -1;
  if (cm.outlined) kl_math_define_outlined(cm.outlined, &cm.mod);
  kl_str_append(&cm.mod, "}\n");
  if (!rc && cm.mod.failed) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory writing the kernels' MLIR text");
  if (!rc && getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") == '2')
    fprintf(stderr, "kiln: plan + MLIR text %.1f ms (%d kernels, %d distinct, %.0f KB)\n", (now() - t0) * 1e3,
            ((owner_t *)x->owner)->nkernels, cm.nfns, cm.mod.len / 1024.0);
  if (!rc && cm.nfns) rc = build_kernels(&cm, &x, 1, 0, NULL, err, errlen);
  kl_kernel_dedup_free(&cm.dedup);
  kl_str_free(&cm.mod);
  compile_seconds += now() - t0;
  compile_count++;
  if (!rc && getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") == '1') log_compile(&x, 1, pg, t0);
  if (rc) {
    if (x) kl_exec_release(x);
    return NULL;
  }
  kl_compile_dump_memory(x);
  return x;
}

/* A loop's driver inlines its small kernels (their argument loads fold away); larger ones it
 * calls, so that their code is not compiled twice (the function and its copy in the loop). */
#define LOOP_INLINE_MAX_TEXT 4000

static void mark_noinline(cpu_module *cm) {
  kl_str out;
  kl_str_init(&out);
  const char *t = cm->mod.data;
  size_t at = 0;
  for (int i = 0; i < cm->dedup.n; i++) {
    if (cm->dedup.end[i] - cm->dedup.start[i] <= LOOP_INLINE_MAX_TEXT) continue;
    const char *head = strstr(t + cm->dedup.start[i], ") {\n");
    if (!head || (size_t)(head - t) > cm->dedup.end[i]) continue;
    size_t cut = (size_t)(head - t) + 1; /* after the parameters' ")" */
    kl_str_printf(&out, "%.*s attributes {passthrough = [\"noinline\"]}", (int)(cut - at), t + at);
    at = cut;
  }
  if (!at) {
    kl_str_free(&out);
    return;
  }
  kl_str_append(&out, t + at);
  if (out.failed) {
    kl_str_free(&out);
    return; /* the module keeps its text (inlined: slower to compile, not wrong) */
  }
  kl_str_free(&cm->mod);
  cm->mod = out;
  kl_kernel_dedup_free(&cm->dedup); /* its offsets no longer hold; no kernel follows */
}

static int is_direct(const kl_step *st) { return st->run == kernel_run && !st->run_checked && st->cost < KL_CPU_PARALLEL_MIN_COST; }

/* (NULL until the step's module is compiled.) */
kl_kernel_fn kl_cpu_direct_fn(const kl_step *st) { return is_direct(st) ? ((kernel_ctx *)st->ctx)->fn : NULL; }

static int all_direct(const kl_exec *x) {
  for (int s = 0; s < x->nsteps; s++)
    if (!is_direct(&x->steps[s])) return 0;
  return 1;
}

int kl_cpu_cond_direct(const kl_step *st) {
  kl_exec *f, *t;
  return kl_loop_cond_branches(st, &f, &t) && all_direct(f) && all_direct(t);
}

/* Which of x's steps a compiled loop calls directly: a kernel small enough for one thread (its
 * function's index), a cond whose branches are such kernels and that reads no per-trip slice
 * (KL_LOOP_COND: the driver branches itself); the others, -1, go through their step. */
static void loop_calls(const kl_exec *x, const kl_loop_slices *sl, int *fn) {
  for (int s = 0; s < x->nsteps; s++) {
    const kl_step *st = &x->steps[s];
    fn[s] = is_direct(st) ? ((kernel_ctx *)st->ctx)->fn_index : kl_cpu_cond_direct(st) ? KL_LOOP_COND : -1;
    for (int j = 0; j < st->nslots && fn[s] == KL_LOOP_COND; j++)
      if (kl_loop_slice_of(x, sl, st->slots[j]) >= 0) fn[s] = -1;
  }
}

int kl_compile_cpu_loop(kl_program *first, kl_program *body, int scan, const kl_loop_slices *sl, kl_exec **xfirst,
                        kl_exec **xbody, kl_kernel_fn *driver, char *err, size_t errlen) {
  double t0 = now();
  cpu_module cm;
  memset(&cm, 0, sizeof cm);
  kl_str_init(&cm.mod);
  kl_str_append(&cm.mod, "module {\n");
  kl_exec *xs[2] = {NULL, NULL};
  int nxs = 0, rc = 0;
  *xfirst = *xbody = NULL;
  if (first && !(xs[nxs++] = emit_program(first, &cm, NULL, err, errlen))) rc = -1;
  if (!rc && !(xs[nxs++] = emit_program(body, &cm, NULL, err, errlen))) rc = -1;
  if (!rc) {
    kl_loop_shape sh[2];
    int *fns = kl_calloc((size_t)(nxs == 2 ? xs[0]->nsteps + xs[1]->nsteps : xs[0]->nsteps) + 1, sizeof(int));
    if (!fns) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling a loop");
    for (int k = 0, at = 0; k < nxs && !rc; k++) {
      loop_calls(xs[k], k == nxs - 1 ? sl : NULL, fns + at);
      sh[k].x = xs[k];
      sh[k].fn = fns + at;
      sh[k].sl = k == nxs - 1 ? sl : NULL;
      at += xs[k]->nsteps;
    }
    char name[32];
    snprintf(name, sizeof name, "KLPFX%d", cm.nfns);
    if (!rc) mark_noinline(&cm);
    if (!rc) kl_loop_driver_emit(scan, sh, name, &cm.mod);
    free(fns);
  }
  if (cm.outlined) kl_math_define_outlined(cm.outlined, &cm.mod);
  kl_str_append(&cm.mod, "}\n");
  if (!rc && cm.mod.failed) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory writing a loop's MLIR text");
  if (!rc) rc = build_kernels(&cm, xs, nxs, 1, driver, err, errlen);
  kl_kernel_dedup_free(&cm.dedup);
  kl_str_free(&cm.mod);
  compile_seconds += now() - t0;
  compile_count++;
  if (!rc && getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") == '1') log_compile(&xs[nxs - 1], 1, body, t0);
  if (rc) {
    for (int k = 0; k < nxs; k++)
      if (xs[k]) kl_exec_release(xs[k]);
    return -1;
  }
  if (first) *xfirst = xs[0];
  *xbody = xs[nxs - 1];
  return 0;
}
