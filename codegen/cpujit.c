/* cpujit.c: LLVM module -> object file -> ORC LLJIT, with memory and disk caches.
 * Disk entries are "KILNOBJ2" | key | length | checksum | object bytes, written to a temporary
 * file and renamed into place (atomic); an entry that fails any check, or fails to load, is
 * deleted and recompiled. */
#define _GNU_SOURCE
#include "cpujit.h"

#include <errno.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/BitWriter.h>
#include <llvm-c/Core.h>
#include <llvm-c/Support.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <mlir-c/Target/LLVMIR.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../ir/alloc.h"
#include "../ir/status.h"
#include "fatal.h"

#define CACHE_VERSION "kiln-cpu-obj-2"
static const char MAGIC[8] = {'K', 'I', 'L', 'N', 'O', 'B', 'J', '2'};

static pthread_mutex_t jit_mu = PTHREAD_MUTEX_INITIALIZER;
static LLVMOrcLLJITRef jit;
static LLVMTargetMachineRef tm, tm_fast; /* tm_fast: for very large kernels (kl_cpujit_compile) */
static char *host_cpu, *host_features, *host_triple;
static int jit_ready;
static long n_compiled, n_disk, n_memory;

/* Loaded objects by key (never unloaded). */
typedef struct {
  uint64_t key;
} loaded_t;
static loaded_t *loaded;
static int nloaded, caploaded;

static int take_error(LLVMErrorRef e, const char *what, char *err, size_t errlen) {
  if (!e) return 0;
  char *msg = LLVMGetErrorMessage(e);
  snprintf(err, errlen, "%s: %s", what, msg);
  LLVMDisposeErrorMessage(msg);
  return -1;
}

static int jit_init(char *err, size_t errlen) {
  if (jit_ready) return 0;
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  const char *opts = getenv("KILN_LLVM_OPTIONS"); /* e.g. "-force-vector-interleave=1", for experiments */
  if (opts && *opts) {
    const char *argv[2] = {"kiln", opts};
    LLVMParseCommandLineOptions(2, argv, NULL);
  }
  LLVMOrcLLJITBuilderRef b = LLVMOrcCreateLLJITBuilder();
  LLVMOrcJITTargetMachineBuilderRef jtmb;
  if (take_error(LLVMOrcJITTargetMachineBuilderDetectHost(&jtmb), "cannot detect the host CPU", err, errlen)) return -1;
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(b, jtmb);
  if (take_error(LLVMOrcCreateLLJIT(&jit, b), "cannot create the JIT", err, errlen)) return -1;
  LLVMOrcDefinitionGeneratorRef gen;
  if (take_error(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(jit), NULL, NULL),
                 "cannot expose process symbols to the JIT", err, errlen))
    return -1;
  LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(jit), gen);
  host_triple = LLVMGetDefaultTargetTriple();
  host_cpu = LLVMGetHostCPUName();
  host_features = LLVMGetHostCPUFeatures();
  LLVMTargetRef target;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(host_triple, &target, &msg)) {
    snprintf(err, errlen, "no LLVM target for %s: %s", host_triple, msg ? msg : "");
    LLVMDisposeMessage(msg);
    return -1;
  }
  tm = LLVMCreateTargetMachine(target, host_triple, host_cpu, host_features, LLVMCodeGenLevelDefault, LLVMRelocPIC,
                               LLVMCodeModelDefault);
  tm_fast = LLVMCreateTargetMachine(target, host_triple, host_cpu, host_features, LLVMCodeGenLevelNone, LLVMRelocPIC,
                                    LLVMCodeModelDefault);
  jit_ready = 1;
  return 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

uint64_t kl_cpujit_key(const char *text) {
  char e[256];
  pthread_mutex_lock(&jit_mu);
  int ok = jit_init(e, sizeof e) == 0;
  pthread_mutex_unlock(&jit_mu);
  uint64_t h = 0xcbf29ce484222325ULL;
  h = fnv(h, CACHE_VERSION, sizeof CACHE_VERSION);
  if (ok) {
    h = fnv(h, host_cpu, strlen(host_cpu));
    h = fnv(h, host_features, strlen(host_features));
    h = fnv(h, host_triple, strlen(host_triple));
  }
  return fnv(h, text, strlen(text));
}

void kl_cpujit_stats(long *compiled, long *disk_hits, long *memory_hits) {
  *compiled = n_compiled;
  *disk_hits = n_disk;
  *memory_hits = n_memory;
}

/* ---- disk cache ---- */

static int cache_path(uint64_t key, char *path, size_t n) {
  const char *dir = getenv("KILN_CACHE_DIR");
  char base[900];
  if (dir && (!*dir || !strcmp(dir, "off") || !strcmp(dir, "0"))) return -1;
  if (dir) snprintf(base, sizeof base, "%s", dir);
  else {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(base, sizeof base, "%s/kiln", xdg);
    else if (home && *home) snprintf(base, sizeof base, "%s/.cache/kiln", home);
    else return -1;
  }
  /* mkdir -p */
  for (char *p = base + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(base, 0755);
      *p = '/';
    }
  if (mkdir(base, 0755) && errno != EEXIST) return -1;
  snprintf(path, n, "%s/%016llx.kobj", base, (unsigned long long)key);
  return 0;
}

static void cache_write(uint64_t key, const char *data, size_t len) {
  char path[1024], tmp[1100];
  if (cache_path(key, path, sizeof path)) return;
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return;
  uint64_t hdr[3] = {key, (uint64_t)len, fnv(0xcbf29ce484222325ULL, data, len)};
  int ok = fwrite(MAGIC, 1, 8, f) == 8 && fwrite(hdr, 8, 3, f) == 3 && fwrite(data, 1, len, f) == len;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path)) unlink(tmp);
}

/* Reads a validated entry (malloc'd bytes) or NULL; removes entries that fail the checks. */
static char *cache_read(uint64_t key, size_t *len) {
  char path[1024];
  if (cache_path(key, path, sizeof path)) return NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char magic[8];
  uint64_t hdr[3];
  char *data = NULL;
  int ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, MAGIC, 8) && fread(hdr, 8, 3, f) == 3 && hdr[0] == key &&
           hdr[1] < ((uint64_t)1 << 31);
  if (ok) {
    data = kl_malloc(hdr[1] + 1);
    if (!data) { /* out of memory: a miss, and the entry stays */
      fclose(f);
      return NULL;
    }
    ok = fread(data, 1, hdr[1], f) == hdr[1] && fnv(0xcbf29ce484222325ULL, data, hdr[1]) == hdr[2];
  }
  fclose(f);
  if (!ok) {
    free(data);
    unlink(path);
    return NULL;
  }
  *len = hdr[1];
  return data;
}

void kl_diskcache_write(uint64_t key, const void *data, size_t len) { cache_write(key, data, len); }
void *kl_diskcache_read(uint64_t key, size_t *len) { return cache_read(key, len); }

static void remove_entry(uint64_t key) {
  char path[1024];
  if (!cache_path(key, path, sizeof path)) unlink(path);
}

/* ---- loading ---- */

static int lookup_all(const char *prefix, int n, kl_kernel_fn *fns, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    char name[64];
    LLVMOrcExecutorAddress addr = 0;
    snprintf(name, sizeof name, "%s%d", prefix, i);
    if (take_error(LLVMOrcLLJITLookup(jit, &addr, name), "kernel lookup", err, errlen)) return -1;
    fns[i] = (kl_kernel_fn)(uintptr_t)addr;
  }
  return 0;
}

static int is_loaded(uint64_t key) {
  for (int i = 0; i < nloaded; i++)
    if (loaded[i].key == key) return 1;
  return 0;
}

/* Room for one more loaded key, made (under jit_mu) before an object is added, so that
 * recording it cannot fail: 0, or -1 (with a message when err is not NULL). */
static int reserve_loaded(char *err, size_t errlen) {
  if (nloaded < caploaded) return 0;
  int cap = caploaded ? 2 * caploaded : 64;
  loaded_t *p = kl_realloc(loaded, sizeof *loaded * (size_t)cap);
  if (!p) return err ? kl_error(err, errlen, KL_ERR_NOMEM, "out of memory recording compiled kernels") : -1;
  loaded = p;
  caploaded = cap;
  return 0;
}

static void mark_loaded(uint64_t key) { loaded[nloaded++].key = key; } /* after reserve_loaded */

/* Adds an object (copied) to the JIT under a resource tracker; on failure the tracker is removed. */
static int add_object(const char *data, size_t len, char *err, size_t errlen) {
  LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit);
  LLVMOrcResourceTrackerRef rt = LLVMOrcJITDylibCreateResourceTracker(jd);
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(data, len, "kiln-kernels");
  int rc = take_error(LLVMOrcLLJITAddObjectFileWithRT(jit, rt, buf), "loading compiled kernels", err, errlen);
  if (rc) LLVMConsumeError(LLVMOrcResourceTrackerRemove(rt));
  LLVMOrcReleaseResourceTracker(rt);
  return rc;
}

/* A module compiled in parts (kl_cpujit_compile) is cached as one entry: "KLPARTS1", the
 * number of objects, then each object's length and bytes. */
static const char PARTS[8] = {'K', 'L', 'P', 'A', 'R', 'T', 'S', '1'};

/* Adds the object, or each object of a container, under one resource tracker (removed whole on
 * failure). */
static int add_objects(const char *data, size_t len, char *err, size_t errlen) {
  if (len < 16 || memcmp(data, PARTS, 8)) return add_object(data, len, err, errlen);
  LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit);
  LLVMOrcResourceTrackerRef rt = LLVMOrcJITDylibCreateResourceTracker(jd);
  uint64_t count;
  memcpy(&count, data + 8, 8);
  size_t at = 16;
  int rc = 0;
  for (uint64_t i = 0; i < count && !rc; i++) {
    uint64_t n;
    if (at + 8 > len) { rc = kl_error(err, errlen, KL_ERR_INTERNAL, "a cached kernel container is truncated"); break; }
    memcpy(&n, data + at, 8);
    at += 8;
    if (n > len - at) { rc = kl_error(err, errlen, KL_ERR_INTERNAL, "a cached kernel container is truncated"); break; }
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(data + at, n, "kiln-kernels");
    rc = take_error(LLVMOrcLLJITAddObjectFileWithRT(jit, rt, buf), "loading compiled kernels", err, errlen);
    at += n;
  }
  if (rc) LLVMConsumeError(LLVMOrcResourceTrackerRemove(rt));
  LLVMOrcReleaseResourceTracker(rt);
  return rc;
}

int kl_cpujit_find(uint64_t key, const char *prefix, int n, kl_kernel_fn *fns) {
  char err[512];
  pthread_mutex_lock(&jit_mu);
  int hit = 0;
  if (jit_init(err, sizeof err) == 0) {
    if (is_loaded(key)) {
      hit = lookup_all(prefix, n, fns, err, sizeof err) == 0;
      if (hit) n_memory++;
    } else if (reserve_loaded(NULL, 0) == 0) { /* else a miss: compiling reports it */
      size_t len;
      char *data = cache_read(key, &len);
      if (data) {
        if (add_objects(data, len, err, sizeof err) == 0) {
          mark_loaded(key);
          hit = lookup_all(prefix, n, fns, err, sizeof err) == 0;
          if (hit) n_disk++;
        } else remove_entry(key); /* a bad entry is recompiled, never trusted */
        free(data);
      }
    }
  }
  pthread_mutex_unlock(&jit_mu);
  return hit;
}

/* ---- compiling in parallel ----
 * A module of many kernels is split by function into parts, one per core: each part is the
 * whole module's bitcode read into a context of its own, with the other parts' kernels reduced
 * to declarations, optimized and turned into an object on its own thread. */

typedef struct {
  const char *bitcode;
  size_t bitlen;
  const char *prefix;  /* kernel function names start with it */
  const int *part_of;  /* per kernel function, in module order: its part */
  int part;
  const char *passes;
  long fast_above;     /* functions of more instructions: the fast code generator */
  LLVMMemoryBufferRef obj;
  char err[1024];
} part_job;

static long count_instrs(LLVMValueRef f) {
  long n = 0;
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb))
    for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) n++;
  return n;
}

static int is_kernel(LLVMValueRef f, const char *prefix) {
  size_t len;
  const char *name = LLVMGetValueName2(f, &len);
  size_t pl = strlen(prefix);
  return !LLVMIsDeclaration(f) && len >= pl && !memcmp(name, prefix, pl);
}

static void compile_part_unguarded(part_job *j) {
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(j->bitcode, j->bitlen, "kiln-part");
  LLVMModuleRef m = NULL;
  LLVMTargetMachineRef ptm = NULL;
  if (LLVMParseBitcodeInContext2(ctx, buf, &m)) {
    snprintf(j->err, sizeof j->err, "internal error: reading a kernel module part failed");
    goto out;
  }
  long largest = 0;
  int fi = 0;
  for (LLVMValueRef f = LLVMGetFirstFunction(m); f; f = LLVMGetNextFunction(f)) {
    if (!is_kernel(f, j->prefix)) continue;
    if (j->part_of[fi++] != j->part) { /* another part's kernel: a declaration here */
      LLVMBasicBlockRef bb;
      while ((bb = LLVMGetFirstBasicBlock(f))) LLVMDeleteBasicBlock(bb);
      LLVMSetLinkage(f, LLVMExternalLinkage);
    } else {
      long c = count_instrs(f);
      if (c > largest) largest = c;
    }
  }
  for (LLVMValueRef f = LLVMGetFirstFunction(m); f; f = LLVMGetNextFunction(f)) /* helpers: private copies */
    if (!LLVMIsDeclaration(f) && !is_kernel(f, j->prefix)) LLVMSetLinkage(f, LLVMInternalLinkage);
  LLVMTargetRef target;
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(host_triple, &target, &msg)) {
    snprintf(j->err, sizeof j->err, "no LLVM target: %s", msg ? msg : "");
    LLVMDisposeMessage(msg);
    goto out;
  }
  ptm = LLVMCreateTargetMachine(target, host_triple, host_cpu, host_features,
                                largest > j->fast_above ? LLVMCodeGenLevelNone : LLVMCodeGenLevelDefault, LLVMRelocPIC,
                                LLVMCodeModelDefault);
  LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(opts, 1);
  LLVMPassBuilderOptionsSetSLPVectorization(opts, 1);
  int rc = take_error(LLVMRunPasses(m, j->passes, ptm, opts), "LLVM optimization", j->err, sizeof j->err);
  LLVMDisposePassBuilderOptions(opts);
  if (!rc && LLVMTargetMachineEmitToMemoryBuffer(ptm, m, LLVMObjectFile, &msg, &j->obj)) {
    snprintf(j->err, sizeof j->err, "internal error: machine code generation failed: %s", msg ? msg : "");
    LLVMDisposeMessage(msg);
    j->obj = NULL;
  }
out:
  if (ptm) LLVMDisposeTargetMachine(ptm);
  if (m) LLVMDisposeModule(m);
  LLVMDisposeMemoryBuffer(buf);
  LLVMContextDispose(ctx);
}

/* One part behind a fatal-error guard of its thread (fatal.h): a fatal error fails the part. */
static void *compile_part(void *arg) {
  part_job *j = arg;
  kl_fatal_guard g;
  kl_fatal_push(&g, j->prefix);
  if (setjmp(g.jb)) {
    kl_fatal_message(&g, j->err, sizeof j->err);
    j->obj = NULL;
    return NULL;
  }
  compile_part_unguarded(j);
  kl_fatal_pop(&g);
  return NULL;
}

/* Threads for compiling a module: KILN_COMPILE_THREADS, else the cores (at most 8). */
static int compile_threads(void) {
  const char *e = getenv("KILN_COMPILE_THREADS");
  long n = e && *e ? atol(e) : sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

/* Optimizes and compiles mod in nparts parts on as many threads into one container (malloc'd,
 * *len bytes), or NULL with a message. */
static char *compile_parts(LLVMModuleRef mod, const char *prefix, const char *passes, long fast_above, int nparts,
                           size_t *len, char *err, size_t errlen) {
  int nk = 0;
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) nk += is_kernel(f, prefix);
  int *part_of = kl_calloc((size_t)nk + 1, sizeof(int));
  long *load = kl_calloc((size_t)nparts, sizeof(long));
  part_job *jobs = kl_calloc((size_t)nparts, sizeof *jobs);
  pthread_t *th = kl_calloc((size_t)nparts, sizeof *th);
  LLVMMemoryBufferRef bc = NULL;
  char *out = NULL;
  if (!part_of || !load || !jobs || !th) {
    kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling kernels in parallel");
    goto done;
  }
  int fi = 0; /* kernels in order, each to the least loaded part (by instructions) */
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
    if (!is_kernel(f, prefix)) continue;
    int best = 0;
    for (int p = 1; p < nparts; p++)
      if (load[p] < load[best]) best = p;
    load[best] += count_instrs(f) + 1;
    part_of[fi++] = best;
  }
  bc = LLVMWriteBitcodeToMemoryBuffer(mod);
  if (!bc) {
    kl_error(err, errlen, KL_ERR_INTERNAL, "internal error: writing the kernels' bitcode failed");
    goto done;
  }
  int started[8] = {0};
  for (int p = 0; p < nparts; p++) {
    jobs[p] = (part_job){LLVMGetBufferStart(bc), LLVMGetBufferSize(bc), prefix, part_of, p, passes, fast_above, NULL, {0}};
    if (p) started[p] = !pthread_create(&th[p], NULL, compile_part, &jobs[p]);
  }
  compile_part(&jobs[0]);
  for (int p = 1; p < nparts; p++) {
    if (started[p]) pthread_join(th[p], NULL);
    else compile_part(&jobs[p]); /* no thread to be had: here */
  }
  size_t total = 16;
  for (int p = 0; p < nparts; p++) {
    if (!jobs[p].obj) {
      kl_error(err, errlen, KL_ERR_INTERNAL, "%s", jobs[p].err[0] ? jobs[p].err : "internal error: a kernel part failed");
      goto done;
    }
    total += 8 + LLVMGetBufferSize(jobs[p].obj);
  }
  out = kl_malloc(total);
  if (!out) {
    kl_error(err, errlen, KL_ERR_NOMEM, "out of memory collecting compiled kernels");
    goto done;
  }
  memcpy(out, PARTS, 8);
  uint64_t cnt = (uint64_t)nparts;
  memcpy(out + 8, &cnt, 8);
  size_t at = 16;
  for (int p = 0; p < nparts; p++) {
    uint64_t n = LLVMGetBufferSize(jobs[p].obj);
    memcpy(out + at, &n, 8);
    memcpy(out + at + 8, LLVMGetBufferStart(jobs[p].obj), n);
    at += 8 + n;
  }
  *len = total;
done:
  for (int p = 0; jobs && p < nparts; p++)
    if (jobs[p].obj) LLVMDisposeMemoryBuffer(jobs[p].obj);
  if (bc) LLVMDisposeMemoryBuffer(bc);
  free(part_of);
  free(load);
  free(jobs);
  free(th);
  return out;
}

#define MS(a, b) ((double)((b).tv_sec - (a).tv_sec) * 1e3 + (double)((b).tv_nsec - (a).tv_nsec) * 1e-6)

/* Translates module to LLVM IR, optimizes it and generates machine code: malloc'd bytes (*len),
 * one object or, when *parts, a container of parts (compile_parts); NULL with a message. The
 * caller holds jit_mu and guards the call against LLVM's fatal errors (build_object). */
static char *build_object_unguarded(MlirModule module, const char *prefix, const char *passes, size_t *len, int *parts,
                                    char *err, size_t errlen) {
  int log = getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") == '2';
  struct timespec q0, q1, q2, q3;
  clock_gettime(CLOCK_MONOTONIC, &q0);
  char *out = NULL;
  LLVMMemoryBufferRef obj = NULL;
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = mlirTranslateModuleToLLVMIR(mlirModuleGetOperation(module), ctx);
  clock_gettime(CLOCK_MONOTONIC, &q1);
  if (!mod) {
    snprintf(err, errlen, "internal error: translation of the kernels to LLVM IR failed");
    goto done;
  }
  LLVMSetTarget(mod, host_triple);
  LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(mod, dl);
  LLVMDisposeTargetData(dl);
  const char *thr = getenv("KILN_FAST_CODEGEN_INSTRS");
  long fast_above = thr && *thr ? atol(thr) : 4000;
  const char *pipeline = getenv("KILN_LLVM_PASSES");
  if (pipeline && *pipeline) passes = pipeline;
  /* many kernels, enough work: in parallel (each part gets the whole pipeline) */
  int nk = 0, nthreads = compile_threads();
  long instrs = 0;
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
    if (is_kernel(f, prefix)) nk++, instrs += count_instrs(f);
  int nparts = nk < nthreads ? nk : nthreads;
  if (nparts > 1 && instrs >= 2000) {
    out = compile_parts(mod, prefix, passes, fast_above, nparts, len, err, errlen);
    *parts = 1;
    clock_gettime(CLOCK_MONOTONIC, &q2);
    if (log)
      fprintf(stderr, "kiln: llvm: translate %.1f ms, optimize + codegen on %d threads %.1f ms (%d kernels, %ld instructions)\n",
              MS(q0, q1), nparts, MS(q1, q2), nk, instrs);
    goto done;
  }
  *parts = 0;
  LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(opts, 1);
  LLVMPassBuilderOptionsSetSLPVectorization(opts, 1);
  int rc = take_error(LLVMRunPasses(mod, passes, tm, opts), "LLVM optimization", err, errlen);
  LLVMDisposePassBuilderOptions(opts);
  clock_gettime(CLOCK_MONOTONIC, &q2);
  if (rc) goto done;
  const char *dump_dir = getenv("KILN_DUMP");
  if (dump_dir && *dump_dir) { /* the optimized LLVM IR, to check vectorization */
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.ll", dump_dir, prefix);
    char *text = LLVMPrintModuleToString(mod);
    FILE *f = fopen(path, "w");
    if (f) {
      fputs(text, f);
      fclose(f);
    }
    LLVMDisposeMessage(text);
  }
  char *msg = NULL;
  /* Machine code generation (instruction selection, scheduling, register allocation over one
   * long block) grows faster than linearly with a function's size: a module with a kernel of
   * many thousands of instructions (a long fused elementwise chain) gets the fast code
   * generator, linear in size (KILN_FAST_CODEGEN_INSTRS sets the size). */
  long largest = 0;
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
    long c = count_instrs(f);
    if (c > largest) largest = c;
  }
  LLVMTargetMachineRef use = largest > fast_above ? tm_fast : tm;
  if (LLVMTargetMachineEmitToMemoryBuffer(use, mod, LLVMObjectFile, &msg, &obj)) {
    snprintf(err, errlen, "internal error: machine code generation failed: %s", msg ? msg : "");
    LLVMDisposeMessage(msg);
    obj = NULL;
    goto done;
  }
  *len = LLVMGetBufferSize(obj);
  out = kl_malloc(*len ? *len : 1);
  if (!out) kl_error(err, errlen, KL_ERR_NOMEM, "out of memory copying %zu bytes of machine code", *len);
  else memcpy(out, LLVMGetBufferStart(obj), *len);
  clock_gettime(CLOCK_MONOTONIC, &q3);
  if (log)
    fprintf(stderr, "kiln: llvm: translate %.1f ms, optimize %.1f ms, codegen %.1f ms\n", MS(q0, q1), MS(q1, q2),
            MS(q2, q3));
done:
  if (obj) LLVMDisposeMemoryBuffer(obj);
  if (mod) LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  return out;
}

/* build_object_unguarded behind a fatal-error guard (fatal.h): an LLVM fatal error is a failed
 * compile naming the kernels, not the end of the process. */
static char *build_object(MlirModule module, const char *prefix, const char *passes, size_t *len, int *parts, char *err,
                          size_t errlen) {
  kl_fatal_guard g;
  kl_fatal_push(&g, prefix);
  if (setjmp(g.jb)) {
    kl_fatal_message(&g, err, errlen);
    return NULL;
  }
  char *out = build_object_unguarded(module, prefix, passes, len, parts, err, errlen);
  kl_fatal_pop(&g);
  return out;
}

int kl_cpujit_compile(MlirModule module, uint64_t key, const char *prefix, int n, kl_kernel_fn *fns,
                      const char *passes, char *err, size_t errlen) {
  pthread_mutex_lock(&jit_mu);
  int rc = jit_init(err, errlen);
  if (rc) goto done;
  if (is_loaded(key)) { /* another thread compiled the same module since our lookup missed */
    rc = lookup_all(prefix, n, fns, err, errlen);
    goto done;
  }
  if ((rc = reserve_loaded(err, errlen))) goto done;
  size_t len = 0;
  int parts = 0;
  char *data = build_object(module, prefix, passes, &len, &parts, err, errlen);
  if (!data) {
    rc = -1;
    goto done;
  }
  rc = parts ? add_objects(data, len, err, errlen) : add_object(data, len, err, errlen);
  if (!rc) {
    mark_loaded(key);
    n_compiled++;
    cache_write(key, data, len);
    rc = lookup_all(prefix, n, fns, err, errlen);
  }
  free(data);
done:
  pthread_mutex_unlock(&jit_mu);
  return rc;
}
