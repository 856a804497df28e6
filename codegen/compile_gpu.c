/* compile_gpu.c: Program -> executable for the CUDA device. Kernels become one gpu.module,
 * lowered to PTX for the device's compute capability, linked by the driver into device code
 * that the disk cache keeps (a warm process compiles nothing). Library calls without a GPU
 * routine run on the host over copies of their operands (see kl_step.on_host).
 * Depends on ir/, transforms/, runtime/ (device.h, and cuda.h for what only CUDA has) and the MLIR C API. */
#define _GNU_SOURCE
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/Dialect/GPU.h>
#include <mlir-c/Pass.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "../ir/alloc.h"
#include "../ir/status.h"
#include "../transforms/fuse.h"
#include "compile.h"
#include "loop.h"
#include "cpujit.h"
#include "kernel.h"
#include "../runtime/cuda.h"
#include "../runtime/cudnn_sdpa.h"
#include "../runtime/nccl.h"
#include "libcall.h"
#include "lower/lower.h"
#include "mlirctx.h"

typedef struct gpu_kernel {
  void *fn;             /* CUfunction */
  unsigned grid, block;
  int nargs;
  int in_place;         /* KL_GPU_IN_PLACE_* (kernel.h): when argument 0 is the output's buffer... */
  struct gpu_kernel *alt; /* ...this kernel runs instead (_SECOND), or none (_SKIP_FIRST) */
} gpu_kernel;

typedef struct { /* a dot_general through cuBLAS */
  kl_dtype t, in; /* the result's dtype, the operands' (kl_dot_mixed) */
  int precision, transl, transr;
  int64_t batch, m, n, k;
} gpu_dot;

typedef struct {
  gpu_dot *dots;        /* owned; one per plan step at most */
  int ndots;
  kl_solver_call *solves; /* owned; one per plan step at most: linalg steps through cuSOLVER */
  int nsolves, nffts;   /* cuSOLVER steps, cuFFT steps (for KILN_LOG_COMPILES) */
  kl_gpusort_call *sorts; /* owned; one per plan step at most: sort steps through gpusort.c */
  int nsorts;
  gpu_kernel *kernels;  /* owned; two per plan step at most */
  int nkernels;
  char (*names)[64];    /* owned; entry names, parallel to kernels */
  kl_libcall **libs;    /* owned */
  int nlibs;
  kl_loop **loops;      /* owned: while loops, host steps */
  int nloops;
} gpu_owner;

static void owner_destroy(void *p) {
  gpu_owner *o = p;
  if (!o) return;
  for (int i = 0; i < o->nlibs; i++) kl_libcall_free(o->libs[i]);
  for (int i = 0; i < o->nloops; i++) kl_loop_free(o->loops[i]);
  free(o->libs);
  free(o->loops);
  free(o->dots);
  free(o->solves);
  free(o->sorts);
  free(o->kernels);
  free(o->names);
  free(o);
}

static int kernel_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  gpu_kernel *g = ctx;
  if (g->in_place != KL_GPU_IN_PLACE_SAME && ptrs[0] == ptrs[g->nargs - 1]) { /* a carry updated in place */
    if (!g->alt) return 0;
    g = g->alt;
  }
  return kl_cuda_launch(g->fn, g->grid, g->block, ptrs, g->nargs, err, errlen);
}

/* cuFFT plans, cuDNN and cuSOLVER handles are made in GPU 0's context: other GPUs refuse them. */
static int gpu0_library(const char *lib, const char *off, char *err, size_t errlen) {
  if (!kl_cuda_ordinal()) return 0;
  return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s calls on GPU %d are not supported yet by kiln (only GPU 0 "
                  "runs them; %s runs them on the host instead)", lib, kl_cuda_ordinal(), off);
}

/* cuFFT for fft steps unless KILN_CUFFT=0 (then the host routine over copies, an A/B switch). */
static int cufft_wanted(void) {
  const char *v = getenv("KILN_CUFFT");
  return !(v && *v == '0');
}

static int fft_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_libcall *c = ctx;
  if (gpu0_library("cuFFT", "KILN_CUFFT=0", err, errlen)) return -1;
  int t, dbl;
  int64_t howmany;
  if (kl_lower_fft_layout(c, &t, &dbl, &howmany)) return kl_lower_missing(c->prim, "GPU (unpacked)", err, errlen);
  return kl_cufft_exec(t, dbl, c->p.fft.fft_lengths.n, c->p.fft.fft_lengths.v, howmany, ptrs[0], ptrs[c->nin], err,
                       errlen);
}

/* cuDNN for conv steps unless KILN_CUDNN=0 (then the host routine over copies, an A/B switch). */
static int cudnn_wanted(void) {
  const char *v = getenv("KILN_CUDNN");
  return !(v && *v == '0');
}

static int conv_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_libcall *c = ctx;
  if (gpu0_library("cuDNN", "KILN_CUDNN=0", err, errlen)) return -1;
  kl_conv_geom g;
  int kind;
  if (kl_lower_conv_geom(c, &g, &kind)) return kl_lower_missing(c->prim, "GPU (operands not legalized)", err, errlen);
  return kl_cudnn_conv(kind, c->avals[c->nin].dtype, c->p.conv.precision, &g, ptrs[0], ptrs[1], ptrs[c->nin], err,
                       errlen);
}

/* An attention of shape g over JAX's [B, T, N, H] arrays of dtype t as cuDNN's fused attention
 * takes it: (batch, head, seq, dim) strides. */
static void sdpa_desc(const kl_attn_geom *g, kl_dtype t, kl_sdpa_desc *d) {
  *d = (kl_sdpa_desc){.b = g->b, .hq = g->n, .hkv = g->kv, .sq = g->t, .skv = g->s, .d = g->h, .dtype = t,
                      .causal = g->causal, .scale = (float)g->scale,
                      .q_stride = {g->t * g->n * g->h, g->h, g->n * g->h, 1},
                      .k_stride = {g->s * g->kv * g->h, g->h, g->kv * g->h, 1},
                      .v_stride = {g->s * g->kv * g->h, g->h, g->kv * g->h, 1},
                      .o_stride = {g->t * g->n * g->h, g->h, g->n * g->h, 1}};
}

/* The same for an attention step: 0, or -1 when the step is not attention's. */
static int sdpa_desc_of(const kl_libcall *c, kl_sdpa_desc *d) {
  kl_attn_geom g;
  if (kl_lower_attention_geom(c, &g)) return -1;
  sdpa_desc(&g, c->avals[0].dtype, d);
  return 0;
}

static int attention_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_libcall *c = ctx;
  if (gpu0_library("cuDNN", "KILN_CUDNN=0", err, errlen)) return -1;
  kl_sdpa_desc d;
  if (sdpa_desc_of(c, &d)) return kl_lower_missing(c->prim, "GPU (not an attention step)", err, errlen);
  if (c->prim == KL_P_ATTENTION) return kl_cudnn_sdpa_fwd(&d, ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], err, errlen);
  return kl_cudnn_sdpa_bwd(&d, ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7], ptrs[8], err,
                           errlen);
}

int kl_gpu_attention_why_not(kl_dtype t, const kl_attn_geom *g, char *why, size_t n) {
  if (!cudnn_wanted()) return snprintf(why, n, "cuDNN is turned off (KILN_CUDNN=0)"), -1;
  if (!kl_cudnn_sdpa_available(why, n)) return -1;
  kl_sdpa_desc d;
  sdpa_desc(g, t, &d);
  return kl_cudnn_sdpa_supported(&d, why, n);
}

/* cuSOLVER (and cuBLAS's batched routines) for linalg steps unless KILN_CUSOLVER=0 (then the host
 * routine over copies, an A/B switch). */
static int cusolver_wanted(void) {
  const char *v = getenv("KILN_CUSOLVER");
  return !(v && *v == '0');
}

static int solver_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_solver_call *s = ctx;
  if (gpu0_library("cuSOLVER", "KILN_CUSOLVER=0", err, errlen)) return -1;
  return kl_cusolver_run(s, ptrs, ptrs + (s->op == KL_SOLVER_TRSM ? 2 : 1), err, errlen);
}

/* kiln's radix sort kernels for sort steps unless KILN_GPU_SORT=0 (then the host routine over
 * copies, an A/B switch). */
static int gpusort_wanted(void) {
  const char *v = getenv("KILN_GPU_SORT");
  return !(v && *v == '0');
}

/* ptrs: the operands, the results, then the step's scratch slot. */
static int sort_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  const kl_gpusort_call *g = ctx;
  if (gpu0_library("kiln's GPU sort", "KILN_GPU_SORT=0", err, errlen)) return -1;
  return kl_gpusort_run(g, ptrs, ptrs + g->nin, ptrs[2 * g->nin], err, errlen);
}

/* Collectives on a side stream per GPU, overlapping the queue's later work (the hoist pass puts
 * each right after its operand's producer): a data-parallel MLP step on 4 x H100, pipelined, 2.34
 * -> 2.20 ms (4 GPUs) and 2.20 -> 2.09 ms (2). KILN_NCCL_OVERLAP=0 queues them in line. */
static int nccl_overlap_wanted(void) {
  const char *e = getenv("KILN_NCCL_OVERLAP");
  return !(e && *e == '0');
}

static int collective_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  return kl_lower_collective_gpu(ctx, ptrs, err, errlen);
}

static int dot_run(void *ctx, void **ptrs, char *err, size_t errlen) {
  gpu_dot *d = ctx;
  return kl_cublas_gemm(d->in, d->t, d->precision, d->batch, d->m, d->n, d->k, ptrs[0], d->transl, ptrs[1], d->transr, ptrs[2],
                        err, errlen);
}

/* One line naming a step that runs on the host: "  sort f32[1024] -> f32[1024]". */
static void note_host_step(kl_str *s, const kl_program *pg, const kl_eqn *e) {
  kl_str_append(s, "  ");
  kl_str_append(s, kl_prim_get(e->prim)->name);
  for (int i = 0; i < e->nin + e->nout; i++) {
    const kl_aval *a = &pg->vals[i < e->nin ? e->ins[i] : e->outs[i - e->nin]].aval;
    char buf[32];
    kl_str_append(s, i == e->nin ? " -> " : i ? ", " : " ");
    kl_str_append(s, kl_dtype_name(a->dtype));
    kl_str_append(s, "[");
    for (int d = 0; d < a->ndim; d++) {
      snprintf(buf, sizeof buf, d ? ",%lld" : "%lld", (long long)a->dims[d]);
      kl_str_append(s, buf);
    }
    kl_str_append(s, "]");
  }
  kl_str_append(s, "\n");
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Loaded modules stay for the life of the process, found again by key. */
static pthread_mutex_t mod_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  uint64_t key;
  void *module;
} *mods;
static int nmods, capmods;
static long n_ptx_compiled, n_disk_hits, n_mem_hits;

void kl_gpu_graph_stats(long *graphs, long *branches, long *loops) { kl_cuda_graph_stats(graphs, branches, loops); }

void kl_gpu_compile_stats(long *compiled, long *disk_hits, long *memory_hits) {
  *compiled = n_ptx_compiled;
  *disk_hits = n_disk_hits;
  *memory_hits = n_mem_hits;
}

static void *find_module(uint64_t key) {
  void *m = NULL;
  pthread_mutex_lock(&mod_mu);
  for (int i = 0; i < nmods && !m; i++)
    if (mods[i].key == key) m = mods[i].module;
  pthread_mutex_unlock(&mod_mu);
  return m;
}

/* Room for one more module, made before loading one (so that recording it cannot fail): 0, or
 * -1 with a message. */
static int reserve_module(char *err, size_t errlen) {
  int rc = 0;
  pthread_mutex_lock(&mod_mu);
  if (nmods == capmods) {
    int cap = capmods ? 2 * capmods : 64;
    void *p = kl_realloc(mods, sizeof *mods * (size_t)cap);
    if (p) {
      mods = p;
      capmods = cap;
    } else rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory recording a loaded GPU module");
  }
  pthread_mutex_unlock(&mod_mu);
  return rc;
}

/* After reserve_module (another thread may have used the room: then it grows here, and a module
 * that cannot be recorded stays loaded, only not found again by key). */
static void add_module(uint64_t key, void *m) {
  pthread_mutex_lock(&mod_mu);
  if (nmods == capmods) {
    int cap = capmods ? 2 * capmods : 64;
    void *p = kl_realloc(mods, sizeof *mods * (size_t)cap);
    if (!p) {
      pthread_mutex_unlock(&mod_mu);
      return;
    }
    mods = p;
    capmods = cap;
  }
  mods[nmods].key = key;
  mods[nmods++].module = m;
  pthread_mutex_unlock(&mod_mu);
}

/* Runs pass pipeline `pipeline` on module m: 0, or 1 with the message in err. */
static int run_pipeline(MlirModule m, const char *pipeline, kl_str *diag, char *err, size_t errlen) {
  int bad = kl_mlir_run_pipeline(m, pipeline, err, errlen);
  if (bad > 0) snprintf(err, errlen, "internal error: GPU lowering failed: %.2000s", diag->data ? diag->data : "");
  return bad != 0;
}

/* Whether the lowered gpu.module of m calls a libdevice function (declares an llvm.func __nv_*:
 * kiln's own calls, or what MLIR lowers to libdevice itself, such as a float remainder). */
static int calls_libdevice(MlirModule m) {
  MlirBlock body = mlirModuleGetBody(m);
  for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op); op = mlirOperationGetNextInBlock(op)) {
    MlirStringRef nm = mlirIdentifierStr(mlirOperationGetName(op));
    if (nm.length != 10 || memcmp(nm.data, "gpu.module", 10)) continue;
    MlirBlock inner = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0));
    for (MlirOperation f = mlirBlockGetFirstOperation(inner); !mlirOperationIsNull(f); f = mlirOperationGetNextInBlock(f)) {
      MlirAttribute sym = mlirOperationGetAttributeByName(f, mlirStringRefCreateFromCString("sym_name"));
      if (mlirAttributeIsNull(sym) || !mlirAttributeIsAString(sym)) continue;
      MlirStringRef v = mlirStringAttrGetValue(sym);
      if (v.length > 5 && !memcmp(v.data, "__nv_", 5)) return 1;
    }
  }
  return 0;
}

/* MLIR text -> PTX (malloc'd) through the NVVM pipeline: the kernels lowered to the LLVM dialect,
 * then serialized; libdevice is linked only into a module that calls it (MLIR would otherwise
 * load the toolkit's into every module: about 1.7 ms of each compile). */
static char *to_ptx(const char *text, int cc_major, int cc_minor, int index32, const char *libdevice, char *err,
                    size_t errlen) {
  char lower[1024], serialize[1024];
  snprintf(lower, sizeof lower,
           "builtin.module(gpu.module(convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1 index-bitwidth=%d},"
           "convert-vector-to-llvm,convert-math-to-llvm,reconcile-unrealized-casts,canonicalize))",
           index32 ? 32 : 64);
  MlirContext ctx = kl_mlir_lock();
  kl_str diag;
  kl_str_init(&diag);
  char *ptx = NULL;
  MlirDiagnosticHandlerID hid = mlirContextAttachDiagnosticHandler(ctx, kl_mlir_on_diag, &diag, NULL);
  MlirModule m = mlirModuleCreateParse(ctx, mlirStringRefCreateFromCString(text));
  if (mlirModuleIsNull(m)) {
    snprintf(err, errlen, "internal error: generated GPU MLIR does not parse: %s", diag.data ? diag.data : "");
    goto out;
  }
  int bad = run_pipeline(m, lower, &diag, err, errlen);
  if (!bad) {
    int needs = calls_libdevice(m);
    if (needs && !libdevice) libdevice = kl_gpu_libdevice(); /* what MLIR lowered to libdevice itself */
    snprintf(serialize, sizeof serialize,
             "builtin.module(nvvm-attach-target{chip=sm_%d%d features=+ptx80 O=3%s%s},gpu-module-to-binary{format=isa%s})",
             cc_major, cc_minor, needs && libdevice ? " l=" : "", needs && libdevice ? libdevice : "",
             needs ? "" : " toolkit=/nonexistent/kiln-no-libdevice");
    bad = run_pipeline(m, serialize, &diag, err, errlen);
  }
  if (!bad) { /* the PTX is the first object of the gpu.binary op */
    MlirBlock body = mlirModuleGetBody(m);
    for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op);
         op = mlirOperationGetNextInBlock(op)) {
      MlirStringRef nm = mlirIdentifierStr(mlirOperationGetName(op));
      if (nm.length != 10 || memcmp(nm.data, "gpu.binary", 10)) continue;
      MlirAttribute objs = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("objects"));
      if (mlirAttributeIsNull(objs) || mlirArrayAttrGetNumElements(objs) < 1) break;
      MlirStringRef s = mlirGPUObjectAttrGetObject(mlirArrayAttrGetElement(objs, 0));
      ptx = kl_malloc(s.length + 1);
      if (!ptx) {
        kl_error(err, errlen, KL_ERR_NOMEM, "out of memory copying %zu bytes of PTX", s.length + 1);
        bad = 1;
        break;
      }
      memcpy(ptx, s.data, s.length);
      ptx[s.length] = 0;
    }
    if (!ptx && !bad) snprintf(err, errlen, "internal error: GPU lowering produced no PTX");
  }
  mlirModuleDestroy(m);
out:
  mlirContextDetachDiagnosticHandler(ctx, hid);
  kl_str_free(&diag);
  kl_mlir_unlock();
  return ptx;
}

/* The module for `text`: from memory, from the disk cache (device code), or compiled. */
static void *build_module(kl_str *text, int index32, const char *libdevice, char *prefix, size_t prefix_len, char *err,
                          size_t errlen) {
  kl_device_info dev;
  kl_device_get(KL_DEV_CUDA)->info(&dev);
  char tag[700];
  snprintf(tag, sizeof tag, "// gpu sm_%d%d driver %d index%d libdevice %s\n", dev.cc_major, dev.cc_minor,
           dev.driver_version, index32 ? 32 : 64, libdevice ? libdevice : "none");
  kl_str_append(text, tag);
  if (text->failed) goto nomem;
  uint64_t key = kl_cpujit_key(text->data);
  snprintf(prefix, prefix_len, "kg_%016llx_", (unsigned long long)key);
  kl_codegen_set_prefix(text, prefix);
  if (text->failed) goto nomem;
  void *m = find_module(key);
  if (m) {
    n_mem_hits++;
    return m;
  }
  if (reserve_module(err, errlen)) return NULL;
  kl_codegen_dump("kernels-gpu.mlir", text->data);
  size_t len = 0;
  void *image = kl_diskcache_read(key, &len);
  if (image && !kl_cuda_module_load(image, len, &m, err, errlen)) {
    free(image);
    n_disk_hits++;
    add_module(key, m);
    return m;
  }
  free(image); /* missing or unloadable (a different driver): compile again */
  double t0 = now();
  char *ptx = to_ptx(text->data, dev.cc_major, dev.cc_minor, index32, libdevice, err, errlen);
  if (!ptx) return NULL;
  kl_codegen_dump("kernels.ptx", ptx);
  double t1 = now();
  if (strstr(ptx, ".extern")) { /* an unresolved function (libdevice math) would fail to load */
    const char *x = strstr(ptx, ".extern"), *nv = strstr(x, "__nv_");
    if (nv && !libdevice) { /* MLIR lowers some operations (a float remainder) to libdevice itself */
      int n = 0;
      while (nv[n] && (nv[n] == '_' || (nv[n] >= 'a' && nv[n] <= 'z') || (nv[n] >= '0' && nv[n] <= '9'))) n++;
      kl_error(err, errlen, KL_ERR_UNSUPPORTED,
               "this GPU program needs NVIDIA's libdevice (for %.*s, e.g. a float remainder or fmod) and none was "
               "found: install the CUDA toolkit, or the nvidia-cuda-nvcc wheel, or set KILN_LIBDEVICE to the path of "
               "libdevice.10.bc",
               n, nv);
    } else
      snprintf(err, errlen, "internal error: generated PTX calls an external function: %.120s", x);
    free(ptx);
    return NULL;
  }
  int rc = kl_cuda_link_ptx(ptx, strlen(ptx) + 1, &image, &len, err, errlen);
  free(ptx);
  if (rc) return NULL;
  rc = kl_cuda_module_load(image, len, &m, err, errlen);
  if (!rc) kl_diskcache_write(key, image, len);
  free(image);
  if (rc) return NULL;
  n_ptx_compiled++;
  if (getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") == '2')
    fprintf(stderr, "kiln: gpu: mlir->ptx %.1f ms, ptx->device code %.1f ms\n", (t1 - t0) * 1e3, (now() - t1) * 1e3);
  add_module(key, m);
  return m;
nomem:
  kl_error(err, errlen, KL_ERR_NOMEM, "out of memory writing the GPU kernels' MLIR text");
  return NULL;
}

/* libdevice, NVIDIA's bitcode math library, where the machine has one: KILN_LIBDEVICE=path (or
 * 0 to use kiln's own math), else $CUDA_HOME, $CUDA_PATH, /usr/local/cuda. Math functions call it
 * when it is found (the NVVM serializer links what is used); kiln's polynomials otherwise, and
 * for good after a module that uses it fails to link. */
static char libdevice_file[512];
static int libdevice_from_env; /* found through KILN_LIBDEVICE, not where MLIR looks itself */
static pthread_once_t libdevice_once = PTHREAD_ONCE_INIT;
static atomic_int libdevice_failed;

static void find_libdevice(void) {
  const char *env = getenv("KILN_LIBDEVICE");
  if (env && *env) {
    if (strcmp(env, "0") && strcmp(env, "off") && !strpbrk(env, ",} ") && !access(env, R_OK)) {
      snprintf(libdevice_file, sizeof libdevice_file, "%s", env);
      libdevice_from_env = 1;
    }
    return;
  }
  const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  for (int i = 0; i < 3 && !libdevice_file[0]; i++) {
    if (!homes[i] || !*homes[i] || strpbrk(homes[i], ",} ")) continue; /* it goes into a pass option */
    char p[512];
    snprintf(p, sizeof p, "%s/nvvm/libdevice/libdevice.10.bc", homes[i]);
    if (!access(p, R_OK)) snprintf(libdevice_file, sizeof libdevice_file, "%s", p);
  }
}

const char *kl_gpu_libdevice(void) {
  pthread_once(&libdevice_once, find_libdevice);
  return libdevice_file[0] && !atomic_load(&libdevice_failed) ? libdevice_file : NULL;
}

/* Loop steps on the GPU (codegen/loop.c): bodies compiled for the GPU and queued on kiln's stream. */
static int gpu_alloc(size_t n, void **p, char *err, size_t errlen) { return kl_cuda_alloc(n, p, err, errlen); }
static int gpu_copy(void *dst, const void *src, size_t n, char *err, size_t errlen) {
  return kl_cuda_copy(dst, 1, src, 1, n, err, errlen);
}
static int gpu_read(void *host, const void *src, size_t n, char *err, size_t errlen) {
  return kl_cuda_copy(host, 0, src, 1, n, err, errlen);
}
static int gpu_zero(void *dst, size_t n, char *err, size_t errlen) {
  return kl_cuda_memset0(dst, n) ? kl_error(err, errlen, KL_ERR_INTERNAL, "GPU memset of %zu bytes failed", n) : 0;
}
static void *gpu_bind(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen) {
  return kl_cuda_bind(x, in, out, err, errlen);
}
static int gpu_bound_run(const void *b, char *err, size_t errlen) { return kl_cuda_bound_run(b, err, errlen); }
static void gpu_unbind(void *b) { kl_cuda_unbind(b); }
static void gpu_retarget(void *b, void *const *in, void *const *out) { kl_cuda_bound_retarget(b, in, out); }
static int gpu_upload(void *dst, const void *host, size_t n, char *err, size_t errlen) {
  return kl_cuda_copy(dst, 1, host, 0, n, err, errlen);
}
static void **gpu_bound_args(void *b, int s) { return kl_cuda_bound_args(b, s); }
static int gpu_has_if(void) { return !getenv("KILN_GPU_HOST_COND") && kl_cuda_has_conditionals(NULL, 0); }
static kl_exec *compile_body(kl_program *pg, char *err, size_t errlen) { return kl_compile_gpu(pg, NULL, err, errlen); }

static const kl_loop_target loop_gpu = {compile_body, kl_cuda_exec_run, gpu_alloc, kl_cuda_free, gpu_copy, gpu_read, gpu_zero,
                                         gpu_bind, gpu_bound_run, gpu_unbind, NULL, NULL,
                                         kl_cuda_while_graph, kl_cuda_while_graph_launch, kl_cuda_while_graph_free, gpu_retarget,
                                         kl_cuda_capturing, kl_cuda_if_captured, gpu_has_if, gpu_upload, kl_cuda_scan_move,
                                         gpu_bound_args};

/* Compiles for the GPU; with ptx_only, stops at the PTX for compute capability ptx_cc (no
 * driver needed) and returns NULL with *ptx_only set (or NULL and a message). With use_ld,
 * math calls libdevice where there is one; *used_ld says whether the module did. */
static kl_exec *compile_gpu(kl_program *pg, const char *donatable, char **ptx_only, int ptx_cc, int use_ld, int *used_ld, char *err,
                            size_t errlen) {
  const char *ld = use_ld ? kl_gpu_libdevice() : NULL;
  uint64_t ld_used = 0;
  *used_ld = 0;
  double t0 = now();
  if (!ptx_only && !kl_device_get(KL_DEV_CUDA)->available(err, errlen)) return NULL;
  kl_plan plan;
  int *slot_of;
  kl_exec *x = kl_compile_prepare(pg, &plan, &slot_of, pg->neqns, donatable, err, errlen); /* + scratch slots */
  if (!x) return NULL;
  gpu_owner *o = kl_calloc(1, sizeof *o);
  x->device = KL_DEV_CUDA;
  x->owner = o;
  x->destroy = owner_destroy;
  int64_t biggest = 0;
  for (int v = 0; v < pg->nvals; v++)
    if (kl_aval_size(&pg->vals[v].aval) > biggest) biggest = kl_aval_size(&pg->vals[v].aval);
  x->steps = kl_calloc(2 * (size_t)plan.nsteps + 1, sizeof *x->steps);
  if (o) {
    o->kernels = kl_calloc(2 * (size_t)plan.nsteps + 1, sizeof *o->kernels);
    o->names = kl_calloc(2 * (size_t)plan.nsteps + 1, sizeof *o->names);
    o->libs = kl_calloc((size_t)plan.nsteps + 1, sizeof *o->libs);
    o->dots = kl_calloc((size_t)plan.nsteps + 1, sizeof *o->dots);
    o->solves = kl_calloc((size_t)plan.nsteps + 1, sizeof *o->solves);
    o->sorts = kl_calloc((size_t)plan.nsteps + 1, sizeof *o->sorts);
    o->loops = kl_calloc((size_t)plan.nsteps + 1, sizeof *o->loops);
  }

  kl_str mod, host, libs; /* libs: the library each linalg or sort step runs as (KILN_LOG_COMPILES) */
  kl_kernel_dedup dedup = {0};
  kl_str_init(&mod);
  kl_str_init(&host);
  kl_str_init(&libs);
  int rc = 0;
  if (!o || !x->steps || !o->kernels || !o->names || !o->libs || !o->dots || !o->solves || !o->sorts || !o->loops) {
    rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling %d steps for the GPU", plan.nsteps);
    goto finish;
  }
  kl_str_append(&mod, "module attributes {gpu.container_module} {\n  gpu.module @kiln {\n");
  for (int s = 0; s < plan.nsteps && !rc; s++) {
    const kl_plan_step *ps = &plan.steps[s];
    if (ps->kind == KL_STEP_LIB && kl_lower_get(pg->eqns[ps->eqn].prim)->loop) { /* its bodies run on the GPU */
      if (ptx_only) continue; /* the bodies are programs of their own */
      kl_step *st = &x->steps[x->nsteps++];
      if ((rc = kl_compile_loop_step(pg, &pg->eqns[ps->eqn], slot_of, &loop_gpu, st, &o->loops[o->nloops], err, errlen)))
        break;
      o->nloops++;
      /* a scan reads nothing back, a cond in a graph becomes conditional nodes: graphs take them whole */
      st->synchronizes |= pg->eqns[ps->eqn].prim != KL_P_SCAN && !st->if_node;
      x->cost += 1 << 20; /* a loop of unknown cost: its own event */
      continue;
    }
    if (ps->kind == KL_STEP_LIB) {
      const kl_eqn *e = &pg->eqns[ps->eqn];
      kl_step *st = &x->steps[x->nsteps++];
      kl_libcall *lc;
      if ((rc = kl_compile_lib_step(pg, e, slot_of, st, &lc, err, errlen))) break;
      o->libs[o->nlibs++] = lc;
      st->on_host = 1; /* a host routine over copies, unless the GPU has one (below) */
      if (kl_lower_get(e->prim)->gpu_kernel) { /* kernels of their own (kernel_gpu.c) */
        char name[32];
        unsigned grid[2], block[2];
        snprintf(name, sizeof name, "KLPFX%d", o->nkernels);
        int in_place = KL_GPU_IN_PLACE_SAME;
        int nk = kl_kernel_emit_gpu_move(lc, name, &mod, grid, block, &in_place, err, errlen);
        if (nk < 0) {
          rc = -1;
          break;
        }
        for (int i = 0; i < nk; i++) {
          gpu_kernel *g = &o->kernels[o->nkernels];
          snprintf(o->names[o->nkernels++], 64, i ? "%s_s" : "%s", name);
          g->grid = grid[i];
          g->block = block[i];
          g->nargs = st->nslots;
          if (i == 0) g->in_place = in_place;
          if (i == 1 && in_place == KL_GPU_IN_PLACE_SECOND) { /* not a pass: the first's stand-in */
            g[-1].alt = g;
            continue;
          }
          kl_step *ks = st;
          if (i) { /* the second pass: the same arguments */
            int *slots = kl_malloc(sizeof(int) * (size_t)st->nslots);
            if (!slots) {
              rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling GPU kernel %s", name);
              break;
            }
            ks = &x->steps[x->nsteps++];
            *ks = *st;
            ks->slots = slots;
            memcpy(ks->slots, st->slots, sizeof(int) * (size_t)st->nslots);
          }
          ks->ctx = g;
          ks->run_checked = kernel_run;
          ks->on_host = 0;
        }
        if (rc) break;
        if (nk) {
          x->cost += kl_aval_size(&pg->vals[e->outs[0]].aval);
          continue;
        }
      }
      gpu_dot d;
      if (kl_lower_get(e->prim)->gpu_library == KL_GPU_LIB_GEMM &&
          kl_libcall_dot_layout(lc, &d.batch, &d.m, &d.n, &d.k, &d.transl, &d.transr)) {
        d.t = pg->vals[e->outs[0]].aval.dtype;
        d.in = pg->vals[e->ins[0]].aval.dtype;
        d.precision = e->p.dot.precision;
        if ((d.t == KL_F32 || d.t == KL_F64 || d.t == KL_F16 || d.t == KL_BF16) && (ptx_only || kl_cublas_available(NULL, 0))) {
          x->cost += d.batch * d.m * d.n;
          o->dots[o->ndots] = d;
          st->ctx = &o->dots[o->ndots++];
          st->run_checked = dot_run;
          st->is_library = 1;
          st->on_host = 0;
        }
      }
      int ft, fdbl;
      int64_t fhow;
      if (kl_lower_get(e->prim)->gpu_library == KL_GPU_LIB_FFT && !kl_lower_fft_layout(lc, &ft, &fdbl, &fhow) &&
          (ptx_only || (cufft_wanted() && kl_cufft_available(NULL, 0)))) {
        x->cost += kl_aval_size(&pg->vals[e->outs[0]].aval);
        st->ctx = lc;
        st->run_checked = fft_run;
        st->is_library = 1;
        st->on_host = 0;
        o->nffts++;
      }
      kl_solver_call *sv = &o->solves[o->nsolves];
      char solver_why[300];
      if (kl_lower_get(e->prim)->gpu_library == KL_GPU_LIB_SOLVER && !kl_lower_solver_layout(lc, sv) && !ptx_only &&
          cusolver_wanted() && !kl_cusolver_available(solver_why, sizeof solver_why) && getenv("KILN_LOG_COMPILES") &&
          *getenv("KILN_LOG_COMPILES") == '1') {
        static atomic_int told;
        if (!atomic_exchange(&told, 1)) fprintf(stderr, "kiln: linalg steps run on the host: %s\n", solver_why);
      }
      if (kl_lower_get(e->prim)->gpu_library == KL_GPU_LIB_SOLVER && !kl_lower_solver_layout(lc, sv) &&
          (ptx_only || (cusolver_wanted() && kl_cusolver_available(NULL, 0)))) {
        x->cost += kl_aval_size(&pg->vals[e->outs[0]].aval);
        o->nsolves++;
        st->ctx = sv;
        st->run_checked = solver_run;
        st->is_library = 1;
        st->on_host = 0;
        st->synchronizes = !kl_cusolver_capturable(sv); /* no CUDA graph around it */
        kl_str_append(&libs, "  ");
        kl_str_append(&libs, kl_prim_get(e->prim)->name);
        kl_str_append(&libs, ": ");
        kl_str_append(&libs, kl_cusolver_routine(sv));
        kl_str_append(&libs, "\n");
      }
      kl_gpusort_call *gs = &o->sorts[o->nsorts];
      char sort_why[300];
      if (kl_lower_get(e->prim)->gpu_library == KL_GPU_LIB_SORT && !ptx_only && gpusort_wanted() &&
          !kl_lower_sort_layout(pg, e, lc, gs) && !kl_gpusort_available(sort_why, sizeof sort_why) &&
          getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") == '1') {
        static atomic_int told;
        if (!atomic_exchange(&told, 1)) fprintf(stderr, "kiln: sort steps run on the host: %s\n", sort_why);
      }
      if (kl_lower_get(e->prim)->gpu_library == KL_GPU_LIB_SORT && !kl_lower_sort_layout(pg, e, lc, gs) &&
          (ptx_only || (gpusort_wanted() && kl_gpusort_available(NULL, 0)))) {
        int *slots = kl_realloc(st->slots, sizeof(int) * ((size_t)st->nslots + 1));
        if (!slots) {
          rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling a GPU sort step");
          break;
        }
        st->slots = slots;
        st->slots[st->nslots++] = x->nslots; /* the step's scratch memory, a temporary of its own */
        x->slot_bytes[x->nslots++] = kl_gpusort_scratch_bytes(gs);
        x->cost += kl_aval_size(&pg->vals[e->outs[0]].aval);
        o->nsorts++;
        st->ctx = gs;
        st->run_checked = sort_run;
        st->is_library = 1;
        st->on_host = 0;
        st->launches = kl_gpusort_launches(gs);
        char what[160];
        kl_str_append(&libs, "  sort: ");
        kl_str_append(&libs, kl_gpusort_describe(gs, what, sizeof what));
        kl_str_append(&libs, "\n");
      }
      if (kl_lower_get(e->prim)->gpu_library == KL_GPU_LIB_COLLECTIVE && (ptx_only || kl_nccl_available(NULL, 0))) {
        x->cost += 1 << 20; /* NCCL's work: an event of its own */
        st->ctx = lc;
        st->run_checked = collective_run;
        st->is_library = 1;
        st->on_host = 0;
        st->synchronizes = 1; /* no CUDA graph around NCCL's calls */
        st->side_stream = nccl_overlap_wanted();
      }
      kl_conv_geom cg;
      int ckind;
      /* float64 stays on the host: cuDNN has no channels-last float64 algorithm for most shapes */
      if (kl_lower_get(e->prim)->gpu_library == KL_GPU_LIB_CONV && lc->avals[0].dtype != KL_F64 &&
          !kl_lower_conv_geom(lc, &cg, &ckind) &&
          (ptx_only || (cudnn_wanted() && kl_cudnn_available(NULL, 0)))) {
        x->cost += kl_aval_size(&pg->vals[e->outs[0]].aval);
        st->ctx = lc;
        st->run_checked = conv_run;
        st->is_library = 1;
        st->on_host = 0;
      }
      kl_attn_geom ag;
      char sdpa_why[1024] = "";
      if (kl_lower_get(e->prim)->gpu_library == KL_GPU_LIB_ATTENTION && !kl_lower_attention_geom(lc, &ag) &&
          (ptx_only || !kl_gpu_attention_why_not(lc->avals[0].dtype, &ag, sdpa_why, sizeof sdpa_why))) {
        x->cost += kl_aval_size(&pg->vals[e->ins[0]].aval);
        st->ctx = lc;
        st->run_checked = attention_run;
        st->is_library = 1;
        st->on_host = 0;
      } else if (kl_lower_get(e->prim)->gpu_library == KL_GPU_LIB_ATTENTION && getenv("KILN_LOG_COMPILES") &&
                 *getenv("KILN_LOG_COMPILES") >= '1')
        fprintf(stderr, "kiln: %s runs on the host over copies: %s\n", kl_prim_get(e->prim)->name, sdpa_why);
      if (st->on_host) note_host_step(&host, pg, e);
      continue;
    }
    if (kl_aval_size(&pg->vals[ps->root].aval) == 0) continue;
    kl_gpu_kernel_info ki;
    char name[32];
    snprintf(name, sizeof name, "KLPFX%d", o->nkernels);
    size_t before = mod.len;
    rc = kl_kernel_emit_gpu(&plan, s, name, &mod, &ki, ld ? &ld_used : NULL, err, errlen);
    if (rc) break;
    const char *same = kl_kernel_dedup_add(&dedup, &mod, before, name); /* a repeat runs the earlier code */
    if (same) snprintf(name, sizeof name, "%s", same);
    int nin = ki.nargs - 1, out_slot = slot_of[ki.args[ki.nargs - 1]];
    gpu_kernel *g = &o->kernels[o->nkernels];
    snprintf(o->names[o->nkernels++], 64, "%s", name);
    g->grid = ki.grid;
    g->block = ki.block;
    x->cost += kl_aval_size(&pg->vals[ps->root].aval);
    kl_step *st = &x->steps[x->nsteps++];
    st->ctx = g;
    st->run_checked = kernel_run;
    st->extent = 1;
    st->partial_arg = -1;
    if (!ki.partials) {
      g->nargs = ki.nargs;
      st->nslots = ki.nargs;
      st->slots = kl_malloc(sizeof(int) * (size_t)ki.nargs);
      if (!st->slots) {
        free(ki.args);
        rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling GPU kernel %s", name);
        break;
      }
      for (int i = 0; i < ki.nargs; i++) st->slots[i] = slot_of[ki.args[i]];
    } else { /* name(inputs..., scratch); name_f(scratch, output) */
      int scratch = x->nslots++;
      x->slot_bytes[scratch] = (size_t)ki.partials * (size_t)kl_gpu_partial_size(ki.partial_dtype);
      g->nargs = nin + 1;
      st->nslots = nin + 1;
      st->slots = kl_malloc(sizeof(int) * (size_t)(nin + 1));
      if (!st->slots) {
        free(ki.args);
        rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling GPU kernel %s", name);
        break;
      }
      for (int i = 0; i < nin; i++) st->slots[i] = slot_of[ki.args[i]];
      st->slots[nin] = scratch;
      gpu_kernel *g2 = &o->kernels[o->nkernels];
      snprintf(o->names[o->nkernels++], 64, "%s_f", name);
      g2->grid = 1;
      g2->block = ki.block;
      g2->nargs = 2;
      kl_step *st2 = &x->steps[x->nsteps++];
      st2->ctx = g2;
      st2->run_checked = kernel_run;
      st2->extent = 1;
      st2->partial_arg = -1;
      st2->nslots = 2;
      st2->slots = kl_malloc(sizeof(int) * 2);
      if (!st2->slots) {
        free(ki.args);
        rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory compiling GPU kernel %s_f", name);
        break;
      }
      st2->slots[0] = scratch;
      st2->slots[1] = out_slot;
    }
    free(ki.args);
  }
  kl_str_append(&mod, "  }\n}\n");
  if (!rc && ld_used) { /* declare the libdevice functions the kernels call, inside the gpu.module */
    static const char head[] = "module attributes {gpu.container_module} {\n  gpu.module @kiln {\n";
    kl_str full;
    kl_str_init(&full);
    kl_str_append(&full, head);
    kl_libdevice_declare(ld_used, &full);
    if (mod.failed || !mod.data) full.failed = 1; /* seen below */
    else kl_str_append(&full, mod.data + strlen(head));
    kl_str_free(&mod);
    mod = full;
    *used_ld = 1;
  }
  /* MLIR links the toolkit's libdevice into every module by itself (what it lowers to libdevice:
   * arith.remf to __nv_fmodf); one named by KILN_LIBDEVICE (a pip wheel's) is linked explicitly */
  const char *ld_link = ld_used || (ld && libdevice_from_env) ? ld : NULL;
  if (!rc && mod.failed) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory writing the GPU kernels' MLIR text");
  if (!rc && getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") == '2')
    fprintf(stderr, "kiln: gpu: plan + MLIR text %.1f ms (%d kernels, %d distinct, %.0f KB)\n", (now() - t0) * 1e3,
            o->nkernels, dedup.n, mod.len / 1024.0);
  if (!rc && o->nkernels) {
    int index32 = biggest + ((int64_t)1 << 26) < ((int64_t)1 << 31); /* grid-stride steps must not overflow */
    char prefix[40];
    void *m = NULL;
    if (ptx_only) {
      kl_codegen_set_prefix(&mod, "kg_");
      if (mod.failed) {
        rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory writing the GPU kernels' MLIR text");
        goto finish;
      }
      kl_codegen_dump("kernels-gpu.mlir", mod.data);
      *ptx_only = to_ptx(mod.data, ptx_cc / 10, ptx_cc % 10, index32, ld_link, err, errlen);
      if (!*ptx_only) rc = -1;
      goto finish;
    }
    m = build_module(&mod, index32, ld_link, prefix, sizeof prefix, err, errlen); /* entry names carry its key */
    if (!m) rc = -1;
    for (int i = 0; !rc && i < o->nkernels; i++) {
      char full[128];
      snprintf(full, sizeof full, "%s%s", prefix, o->names[i] + 5); /* names start with KLPFX */
      rc = kl_cuda_function(m, full, &o->kernels[i].fn, err, errlen);
    }
  }
finish:
  kl_kernel_dedup_free(&dedup);
  kl_str_free(&mod);
  kl_plan_free(&plan);
  free(slot_of);
  if (ptx_only) {
    kl_str_free(&host);
    kl_str_free(&libs);
    kl_exec_release(x);
    return NULL;
  }
  kl_compile_note(now() - t0);
  if (!rc && host.failed) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory naming the host steps");
  if (!rc && host.data) x->host_steps = strdup(host.data);
  if (!rc && host.data && !x->host_steps) rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of memory naming the host steps");
  if (!rc && getenv("KILN_LOG_COMPILES") && *getenv("KILN_LOG_COMPILES") == '1') {
    int nhost = 0;
    for (int i = 0; i < x->nsteps; i++) nhost += x->steps[i].on_host;
    kl_str loops;
    kl_str_init(&loops);
    kl_loops_describe(o->loops, o->nloops, &loops);
    fprintf(stderr, "kiln: compiled %d equations into %d GPU kernels + %d cuBLAS calls + %d cuFFT calls + %d cuSOLVER "
            "calls + %d GPU sorts + %d host library calls + %d loops%s in %.1f ms\n",
            pg->neqns, o->nkernels, o->ndots, o->nffts, o->nsolves, o->nsorts, nhost, o->nloops,
            loops.data ? loops.data : "", (now() - t0) * 1e3);
    kl_str_free(&loops);
    if (libs.data) fprintf(stderr, "kiln: linear algebra and sorts on the GPU:\n%s", libs.data);
    if (host.data) fprintf(stderr, "kiln: host round trips (operands copied to the host and back):\n%s", host.data);
  }
  kl_str_free(&host);
  kl_str_free(&libs);
  if (rc) {
    kl_exec_release(x);
    return NULL;
  }
  return x;
}

kl_exec *kl_compile_gpu(kl_program *pg, const char *donatable, char *err, size_t errlen) {
  int used_ld;
  kl_status_clear();
  kl_exec *x = compile_gpu(pg, donatable, NULL, 0, 1, &used_ld, err, errlen);
  if (!x && used_ld && kl_status_last() != KL_ERR_NOMEM) { /* libdevice did not link here: kiln's own math from now on */
    fprintf(stderr, "kiln: linking libdevice (%s) failed, using kiln's own math functions: %s\n", kl_gpu_libdevice(), err);
    atomic_store(&libdevice_failed, 1);
    x = compile_gpu(pg, donatable, NULL, 0, 0, &used_ld, err, errlen);
  }
  kl_compile_dump_memory(x);
  return x;
}

char *kl_compile_gpu_ptx(kl_program *pg, int cc, char *err, size_t errlen) {
  char *ptx = NULL;
  int used_ld;
  err[0] = 0;
  compile_gpu(pg, NULL, &ptx, cc, 1, &used_ld, err, errlen);
  if (!ptx && !err[0]) { /* nothing to generate: no kernels */
    ptx = kl_malloc(1);
    if (!ptx) kl_error(err, errlen, KL_ERR_NOMEM, "out of memory returning the PTX");
    else ptx[0] = 0;
  }
  return ptx;
}
