/* cudnn_sdpa.c: fused scaled dot-product attention (flash attention), forward and backward, through
 * cuDNN 9's backend graph API. cuDNN has no single attention operation here: like cudnn-frontend's
 * composite SDPA nodes (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h, the
 * graphs it builds when no newer unified SDPA operation is asked for) we describe attention as an
 * operation graph of matmuls, pointwise ops and reductions over virtual tensors, and cuDNN's
 * heuristics match it to its fused attention engines. One plan per (shape, strides, dtype, mask,
 * scale, direction, GPU), cached, with its work area; queued on kiln's stream. The library is the
 * one runtime/cudnn.c opened (found again with RTLD_NOLOAD). Knows nothing of the IR; reaches the GPU
 * only through runtime/cuda.h. KILN_CUDNN_SDPA_DEBUG=1 prints every build step to stderr and waits
 * for every run, reporting a kernel that failed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/status.h"
#include "cuda.h"
#include "cudnn_sdpa.h"
#include "device.h"
#include "profile.h"

/* ---- cuDNN's enum values (cudnn_graph.h of cuDNN 9.x; names as there, less the CUDNN_ prefix) ---- */
enum { /* cudnnDataType_t */
  DATA_FLOAT = 0, DATA_HALF = 2, DATA_INT32 = 4, DATA_BFLOAT16 = 9, DATA_BOOLEAN = 11
};
enum { /* cudnnBackendDescriptorType_t */
  BACKEND_POINTWISE_DESCRIPTOR = 0, BACKEND_ENGINE_DESCRIPTOR = 2, BACKEND_ENGINECFG_DESCRIPTOR = 3,
  BACKEND_ENGINEHEUR_DESCRIPTOR = 4, BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5, BACKEND_OPERATION_POINTWISE_DESCRIPTOR = 13,
  BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15, BACKEND_VARIANT_PACK_DESCRIPTOR = 16, BACKEND_TENSOR_DESCRIPTOR = 17,
  BACKEND_MATMUL_DESCRIPTOR = 18, BACKEND_OPERATION_MATMUL_DESCRIPTOR = 19, BACKEND_REDUCTION_DESCRIPTOR = 21,
  BACKEND_OPERATION_REDUCTION_DESCRIPTOR = 22, BACKEND_OPERATION_RESHAPE_DESCRIPTOR = 31
};
enum { /* cudnnBackendAttributeType_t */
  TYPE_HANDLE = 0, TYPE_DATA_TYPE = 1, TYPE_BOOLEAN = 2, TYPE_INT64 = 3, TYPE_FLOAT = 4, TYPE_VOID_PTR = 6,
  TYPE_HEUR_MODE = 8, TYPE_NUMERICAL_NOTE = 11, TYPE_POINTWISE_MODE = 14, TYPE_BACKEND_DESCRIPTOR = 15,
  TYPE_REDUCTION_OPERATOR_TYPE = 18, TYPE_BEHAVIOR_NOTE = 19
};
enum { /* cudnnBackendAttributeName_t */
  ATTR_POINTWISE_MODE = 0, ATTR_POINTWISE_MATH_PREC = 1, ATTR_POINTWISE_AXIS = 9,
  ATTR_ENGINEHEUR_MODE = 200, ATTR_ENGINEHEUR_OPERATION_GRAPH = 201, ATTR_ENGINEHEUR_RESULTS = 202,
  ATTR_ENGINECFG_ENGINE = 300,
  ATTR_EXECUTION_PLAN_HANDLE = 400, ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401, ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,
  ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR = 750, ATTR_OPERATION_POINTWISE_XDESC = 751,
  ATTR_OPERATION_POINTWISE_BDESC = 752, ATTR_OPERATION_POINTWISE_YDESC = 753, ATTR_OPERATION_POINTWISE_ALPHA1 = 754,
  ATTR_OPERATION_POINTWISE_ALPHA2 = 755, ATTR_OPERATION_POINTWISE_TDESC = 758,
  ATTR_OPERATIONGRAPH_HANDLE = 800, ATTR_OPERATIONGRAPH_OPS = 801,
  ATTR_TENSOR_BYTE_ALIGNMENT = 900, ATTR_TENSOR_DATA_TYPE = 901, ATTR_TENSOR_DIMENSIONS = 902,
  ATTR_TENSOR_STRIDES = 903, ATTR_TENSOR_UNIQUE_ID = 906, ATTR_TENSOR_IS_VIRTUAL = 907, ATTR_TENSOR_IS_BY_VALUE = 908,
  ATTR_VARIANT_PACK_UNIQUE_IDS = 1000, ATTR_VARIANT_PACK_DATA_POINTERS = 1001, ATTR_VARIANT_PACK_WORKSPACE = 1003,
  ATTR_ENGINE_GLOBAL_INDEX = 1301, ATTR_ENGINE_NUMERICAL_NOTE = 1303, ATTR_ENGINE_BEHAVIOR_NOTE = 1305,
  ATTR_MATMUL_COMP_TYPE = 1500,
  ATTR_OPERATION_MATMUL_ADESC = 1520, ATTR_OPERATION_MATMUL_BDESC = 1521, ATTR_OPERATION_MATMUL_CDESC = 1522,
  ATTR_OPERATION_MATMUL_DESC = 1523,
  ATTR_REDUCTION_OPERATOR = 1600, ATTR_REDUCTION_COMP_TYPE = 1601,
  ATTR_OPERATION_REDUCTION_XDESC = 1610, ATTR_OPERATION_REDUCTION_YDESC = 1611, ATTR_OPERATION_REDUCTION_DESC = 1612,
  ATTR_OPERATION_RESHAPE_XDESC = 2200, ATTR_OPERATION_RESHAPE_YDESC = 2201
};
enum { /* cudnnPointwiseMode_t */
  POINTWISE_ADD = 0, POINTWISE_MUL = 1, POINTWISE_DIV = 6, POINTWISE_SUB = 9, POINTWISE_EXP = 13, POINTWISE_LOG = 15,
  POINTWISE_IDENTITY = 21, POINTWISE_CMP_GE = 303, POINTWISE_GEN_INDEX = 501, POINTWISE_BINARY_SELECT = 601
};
enum { REDUCE_TENSOR_ADD = 0, REDUCE_TENSOR_MAX = 3 };   /* cudnnReduceTensorOp_t */
enum { HEUR_MODE_FALLBACK = 2, HEUR_MODE_A = 3 };          /* cudnnBackendHeurMode_t */
enum { BEHAVIOR_NOTE_RUNTIME_COMPILATION = 0 };            /* cudnnBackendBehaviorNote_t */
enum { CAPTURE_RELAXED = 2 };                              /* CUstreamCaptureMode (the driver's) */

/* The tensors a variant pack names (uids); virtual tensors count up from UID_VIRTUAL. */
enum {
  UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV, UID_SCALE, UID_NEG_INF, UID_ONE,
  UID_SOFTMAX_SUM, UID_DQ_ACCUM, UID_VIRTUAL = 100
};
#define ALIGN 16 /* the byte alignment the plans assume of every operand (cudnn-frontend's default) */

/* ---- the library: cuDNN's entry points, found in the library runtime/cudnn.c opened ---- */
static int (*c_create)(void **);
static int (*c_set_stream)(void *, void *);
static const char *(*c_error_string)(int);
static void (*c_last_error)(char *, size_t); /* cudnnGetLastErrorString: optional */
static size_t (*c_version)(void);
static int (*b_create)(int, void **);
static int (*b_destroy)(void *);
static int (*b_set)(void *, int, int, int64_t, const void *);
static int (*b_get)(void *, int, int, int64_t, int64_t *, void *);
static int (*b_finalize)(void *);
static int (*b_execute)(void *, void *, void *);
/* the driver's: plans made while a graph is captured (as runtime/cudnn.c), and waiting in debug mode */
static int (*d_exchange_capture_mode)(int *);
static int (*d_mem_alloc)(unsigned long long *, size_t);
static int (*d_stream_sync)(void *);
static int (*d_error_string)(int, const char **);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int tried, ready;
static size_t version;               /* cudnnGetVersion: 90600 for 9.6.0 */
static char why_not[512];            /* why ready is 0 */
static void *handles[KL_CUDA_MAX_GPUS]; /* one cuDNN handle per GPU, made on first use */

static int debug_on(void) {
  static int on = -1;
  if (on < 0) {
    const char *e = getenv("KILN_CUDNN_SDPA_DEBUG");
    on = e && *e && *e != '0';
  }
  return on;
}

static void dbg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void dbg(const char *fmt, ...) {
  if (!debug_on()) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kiln cudnn-sdpa: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

#define SYM(var, name)                              \
  do {                                              \
    *(void **)&(var) = dlsym(h, name);              \
    if (!(var)) missing = missing ? missing : name; \
  } while (0)

/* Finds cuDNN's entry points (caller holds mu). runtime/cudnn.c finds and opens the library (one
 * loader per library); dlopen with RTLD_NOLOAD hands back that same copy. */
static void load(void) {
  tried = 1;
  char reason[400];
  if (!kl_cuda_available(reason, sizeof reason) || !kl_cudnn_available(reason, sizeof reason)) {
    snprintf(why_not, sizeof why_not, "%s", reason);
    return;
  }
  const char *path = kl_cudnn_library();
  void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why_not, sizeof why_not, "cannot reopen cuDNN (%.300s): %.150s", path, dlerror());
    return;
  }
  const char *missing = NULL;
  SYM(c_create, "cudnnCreate");
  SYM(c_set_stream, "cudnnSetStream");
  SYM(c_error_string, "cudnnGetErrorString");
  SYM(c_version, "cudnnGetVersion");
  SYM(b_create, "cudnnBackendCreateDescriptor");
  SYM(b_destroy, "cudnnBackendDestroyDescriptor");
  SYM(b_set, "cudnnBackendSetAttribute");
  SYM(b_get, "cudnnBackendGetAttribute");
  SYM(b_finalize, "cudnnBackendFinalize");
  SYM(b_execute, "cudnnBackendExecute");
  if (missing) {
    snprintf(why_not, sizeof why_not, "%.300s lacks %s (fused attention needs cuDNN 9's backend API)", path, missing);
    return;
  }
  *(void **)&c_last_error = dlsym(h, "cudnnGetLastErrorString");
  *(void **)&d_exchange_capture_mode = kl_cuda_driver_symbol("cuThreadExchangeStreamCaptureMode");
  *(void **)&d_mem_alloc = kl_cuda_driver_symbol("cuMemAlloc");
  *(void **)&d_stream_sync = kl_cuda_driver_symbol("cuStreamSynchronize");
  *(void **)&d_error_string = kl_cuda_driver_symbol("cuGetErrorString");
  version = c_version();
  if (version < 90000) {
    snprintf(why_not, sizeof why_not, "%.300s is cuDNN %zu; fused attention needs cuDNN 9", path, version);
    return;
  }
  if (version == 91000 || version == 91001) { /* cudnn-frontend refuses these too */
    snprintf(why_not, sizeof why_not, "cuDNN 9.10.0 and 9.10.1 have known fused-attention bugs; use 9.10.2 or newer "
             "(KILN_CUDNN_LIB picks the library)");
    return;
  }
  dbg("cuDNN %zu.%zu.%zu from %s%s", version / 10000, version / 100 % 100, version % 100, path,
      c_last_error ? "" : " (no cudnnGetLastErrorString)");
  ready = 1;
}
#undef SYM

/* The calling thread's GPU's compute capability as major * 10 + minor, 0 when unknown. */
static int sm_version(void) {
  const kl_device *dev = kl_device_get(KL_DEV_CUDA);
  if (!dev) return 0;
  kl_device_info info;
  dev->info(&info);
  return info.cc_major * 10 + info.cc_minor;
}

int kl_cudnn_sdpa_available(char *why, size_t n) {
  pthread_mutex_lock(&mu);
  if (!tried) load();
  int ok = ready;
  pthread_mutex_unlock(&mu);
  if (!ok) {
    if (why) snprintf(why, n, "%s", why_not[0] ? why_not : "no GPU");
    return 0;
  }
  int sm = sm_version();
  if (sm < 80) {
    if (why) snprintf(why, n, "the GPU is sm_%d: cuDNN's fused attention needs sm80 (Ampere) or newer", sm);
    return 0;
  }
  return 1;
}

/* kl_cudnn_sdpa_available's answer as an error (KL_ERR_UNSUPPORTED: the caller may take another
 * road): 0 when available, else -1 with the reason. */
static int unavailable(char *err, size_t errlen) {
  char why[600];
  if (kl_cudnn_sdpa_available(why, sizeof why)) return 0;
  return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "cuDNN fused attention is not available: %s", why);
}

/* "cuDNN SDPA backward of q[2,4,128,64] k,v[2,2,256,64] bfloat16 causal scale 0.125", for messages. */
static const char *describe(char *buf, size_t len, const kl_sdpa_desc *d, int bwd) {
  snprintf(buf, len, "cuDNN SDPA %s of q[%lld,%lld,%lld,%lld] k,v[%lld,%lld,%lld,%lld] %s%s scale %g",
           bwd ? "backward" : "forward", (long long)d->b, (long long)d->hq, (long long)d->sq, (long long)d->d,
           (long long)d->b, (long long)d->hkv, (long long)d->skv, (long long)d->d, kl_dtype_name(d->dtype),
           d->causal ? " causal" : "", (double)d->scale);
  return buf;
}

/* "CUDNN_STATUS_NOT_SUPPORTED (status 3000)". */
static const char *status_name(int rc, char *buf, size_t len) {
  const char *s = c_error_string ? c_error_string(rc) : NULL;
  snprintf(buf, len, "%s (status %d)", s ? s : "cuDNN error", rc);
  return buf;
}

/* cuDNN's own account of its last failure on this thread, or "". */
static const char *last_error(char *buf, size_t len) {
  buf[0] = 0;
  if (c_last_error) c_last_error(buf, len);
  buf[len - 1] = 0;
  return buf;
}

/* What cuDNN cannot do for d in direction bwd, checked before building so the message is kiln's, not
 * a status code (the limits cudnn-frontend checks for its composite SDPA nodes); NULL when nothing
 * is known wrong. The backend may still refuse what passes. */
static const char *refusal(const kl_sdpa_desc *d, int bwd, char *buf, size_t len) {
  if (d->dtype != KL_BF16 && d->dtype != KL_F16)
    return snprintf(buf, len, "it takes bfloat16 or float16 operands, not %s", kl_dtype_name(d->dtype)), buf;
  if (d->b < 1 || d->hq < 1 || d->hkv < 1 || d->sq < 1 || d->skv < 1 || d->d < 1)
    return snprintf(buf, len, "it needs every extent at least 1"), buf;
  if (d->hq % d->hkv)
    return snprintf(buf, len, "query heads (%lld) must be a multiple of key/value heads (%lld)", (long long)d->hq,
                    (long long)d->hkv), buf;
  if (d->d % 8) return snprintf(buf, len, "the head dim (%lld) must be a multiple of 8", (long long)d->d), buf;
  if (!isfinite(d->scale)) return snprintf(buf, len, "the scale is not finite"), buf;
  const int64_t *st[4] = {d->q_stride, d->k_stride, d->v_stride, d->o_stride};
  static const char names[4] = {'q', 'k', 'v', 'o'};
  for (int t = 0; t < 4; t++) {
    if (st[t][3] != 1)
      return snprintf(buf, len, "%c's head-dim stride must be 1 (it is %lld)", names[t], (long long)st[t][3]), buf;
    for (int i = 0; i < 3; i++)
      if (st[t][i] < 0) return snprintf(buf, len, "%c has a negative stride", names[t]), buf;
  }
  int sm = sm_version();
  /* head dim: the backward takes 256 on Hopper, 128 elsewhere; the forward 256, except 128 off
   * Hopper before cuDNN 9.9.1 */
  int64_t most = sm / 10 == 9 ? 256 : (bwd || version <= 90900) ? 128 : 256;
  if (d->d > most)
    return snprintf(buf, len, "the head dim (%lld) exceeds cuDNN's %s limit of %lld on sm_%d", (long long)d->d,
                    bwd ? "backward" : "forward", (long long)most, sm), buf;
  if (bwd && d->sq == 1 && d->skv == 1) return snprintf(buf, len, "the backward cannot run with one query and one key"), buf;
  /* cudnn-frontend adds a padding mask of the full lengths to the backward here, working around the
   * engines; kiln does not build that graph */
  if (bwd && d->skv % 128 && version <= 91500)
    return snprintf(buf, len, "cuDNN %zu.%zu.%zu's backward needs the key length (%lld) a multiple of 128 (9.15.1 "
                    "or newer lifts this)", version / 10000, version / 100 % 100, version % 100, (long long)d->skv), buf;
  return NULL;
}

/* ---- building a plan: every descriptor is made through a `build`, which remembers them (freed
 * with the plan) and the first failure (every later step is skipped) ---- */

#define MAX_KEEP 256
typedef struct {
  int bad;                /* a step failed: the rest are skipped */
  int rc;                 /* its cuDNN status (0: kiln's own failure) */
  char what[240];         /* which step */
  char said[512];         /* cuDNN's last error string then */
  void *keep[MAX_KEEP];   /* every descriptor made, destroyed with the plan */
  int nkeep;
  void *ops[32];          /* the operations of the graph, in order */
  int nops;
  struct {
    void *d;
    const char *name;
  } names[64];            /* tensor names, for debug lines */
  int nnames;
  int64_t next_uid;       /* the next virtual tensor's uid */
} build;

static void failed(build *b, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void failed(build *b, int rc, const char *fmt, ...) {
  if (b->bad) return;
  b->bad = 1, b->rc = rc;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->what, sizeof b->what, fmt, ap);
  va_end(ap);
  last_error(b->said, sizeof b->said);
  char code[96];
  dbg("  FAILED: %s: %s%s%s", b->what, rc ? status_name(rc, code, sizeof code) : "(kiln)", b->said[0] ? "; cuDNN: " : "",
      b->said);
}

static void *make(build *b, int type, const char *name) {
  void *d = NULL;
  if (b->bad) return NULL;
  if (b->nkeep == MAX_KEEP) {
    failed(b, 0, "making %s: more than %d descriptors", name, MAX_KEEP);
    return NULL;
  }
  int rc = b_create(type, &d);
  if (rc || !d) {
    failed(b, rc, "cudnnBackendCreateDescriptor (descriptor type %d) for %s", type, name);
    return NULL;
  }
  return b->keep[b->nkeep++] = d;
}

static void set(build *b, void *d, const char *dname, int attr, const char *aname, int type, int64_t count,
                const void *v) {
  if (b->bad) return;
  int rc = b_set(d, attr, type, count, v);
  if (rc) failed(b, rc, "setting %s of %s", aname, dname);
}
#define SET(b, d, dname, attr, type, count, v) set(b, d, dname, attr, "CUDNN_" #attr, type, count, v)

static void finalize(build *b, void *d, const char *dname) {
  if (b->bad) return;
  int rc = b_finalize(d);
  if (rc) failed(b, rc, "cudnnBackendFinalize of %s", dname);
}

static const char *name_of(const build *b, const void *t) {
  for (int i = 0; i < b->nnames; i++)
    if (b->names[i].d == t) return b->names[i].name;
  return "?";
}

enum { REAL, VIRTUAL, BY_VALUE };
static const char *const data_names[12] = {[DATA_FLOAT] = "float", [DATA_HALF] = "half", [DATA_INT32] = "int32",
                                           [DATA_BFLOAT16] = "bfloat16", [DATA_BOOLEAN] = "boolean"};

/* A finalized 4-d tensor descriptor (kind REAL: in the variant pack; VIRTUAL: inside the graph;
 * BY_VALUE: a host scalar passed in the variant pack), or NULL after a failure. */
static void *tensor(build *b, const char *name, int64_t uid, int dt, const int64_t dims[4], const int64_t strides[4],
                    int kind) {
  void *t = make(b, BACKEND_TENSOR_DESCRIPTOR, name);
  int64_t align = ALIGN;
  bool yes = true;
  SET(b, t, name, ATTR_TENSOR_DATA_TYPE, TYPE_DATA_TYPE, 1, &dt);
  SET(b, t, name, ATTR_TENSOR_DIMENSIONS, TYPE_INT64, 4, dims);
  SET(b, t, name, ATTR_TENSOR_STRIDES, TYPE_INT64, 4, strides);
  SET(b, t, name, ATTR_TENSOR_UNIQUE_ID, TYPE_INT64, 1, &uid);
  SET(b, t, name, ATTR_TENSOR_BYTE_ALIGNMENT, TYPE_INT64, 1, &align);
  if (kind == VIRTUAL) SET(b, t, name, ATTR_TENSOR_IS_VIRTUAL, TYPE_BOOLEAN, 1, &yes);
  if (kind == BY_VALUE) SET(b, t, name, ATTR_TENSOR_IS_BY_VALUE, TYPE_BOOLEAN, 1, &yes);
  finalize(b, t, name);
  if (b->bad) return NULL;
  if (b->nnames < 64) b->names[b->nnames].d = t, b->names[b->nnames++].name = name;
  dbg("  tensor %-22s uid %3lld %-8s dims [%lld,%lld,%lld,%lld] strides [%lld,%lld,%lld,%lld]%s", name, (long long)uid,
      data_names[dt], (long long)dims[0], (long long)dims[1], (long long)dims[2], (long long)dims[3],
      (long long)strides[0], (long long)strides[1], (long long)strides[2], (long long)strides[3],
      kind == VIRTUAL ? " virtual" : kind == BY_VALUE ? " by value" : "");
  return t;
}

static void *virt(build *b, const char *name, int dt, const int64_t dims[4], const int64_t strides[4]) {
  return tensor(b, name, b->next_uid++, dt, dims, strides, VIRTUAL);
}

static void add_op(build *b, void *op, const char *name) {
  if (b->bad) return;
  if (b->nops == 32) {
    failed(b, 0, "adding %s: more than 32 operations", name);
    return;
  }
  b->ops[b->nops++] = op;
}

/* y = mode(x[, bt[, t]]): one pointwise operation computing in `compute` (axis: GEN_INDEX's).
 * Returns y. As cudnn-frontend sets them: mode, math precision (and axis) on the pointwise
 * descriptor; x, y, b, t and both alphas 1 on the operation. */
static void *pointwise(build *b, const char *name, int mode, int compute, int64_t axis, void *x, void *bt, void *t,
                       void *y) {
  void *pw = make(b, BACKEND_POINTWISE_DESCRIPTOR, name);
  SET(b, pw, name, ATTR_POINTWISE_MODE, TYPE_POINTWISE_MODE, 1, &mode);
  SET(b, pw, name, ATTR_POINTWISE_MATH_PREC, TYPE_DATA_TYPE, 1, &compute);
  if (mode == POINTWISE_GEN_INDEX) SET(b, pw, name, ATTR_POINTWISE_AXIS, TYPE_INT64, 1, &axis);
  finalize(b, pw, name);
  void *op = make(b, BACKEND_OPERATION_POINTWISE_DESCRIPTOR, name);
  float one = 1.0f;
  SET(b, op, name, ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, TYPE_BACKEND_DESCRIPTOR, 1, &pw);
  SET(b, op, name, ATTR_OPERATION_POINTWISE_XDESC, TYPE_BACKEND_DESCRIPTOR, 1, &x);
  SET(b, op, name, ATTR_OPERATION_POINTWISE_YDESC, TYPE_BACKEND_DESCRIPTOR, 1, &y);
  if (bt) SET(b, op, name, ATTR_OPERATION_POINTWISE_BDESC, TYPE_BACKEND_DESCRIPTOR, 1, &bt);
  if (t) SET(b, op, name, ATTR_OPERATION_POINTWISE_TDESC, TYPE_BACKEND_DESCRIPTOR, 1, &t);
  SET(b, op, name, ATTR_OPERATION_POINTWISE_ALPHA1, TYPE_FLOAT, 1, &one);
  SET(b, op, name, ATTR_OPERATION_POINTWISE_ALPHA2, TYPE_FLOAT, 1, &one);
  finalize(b, op, name);
  add_op(b, op, name);
  if (!b->bad)
    dbg("  op %2d POINTWISE mode %d %-24s %s = f(%s%s%s%s%s)", b->nops - 1, mode, name, name_of(b, y), name_of(b, x),
        bt ? ", " : "", bt ? name_of(b, bt) : "", t ? ", " : "", t ? name_of(b, t) : "");
  return y;
}

/* c = a @ b over the last two axes (batch axes broadcast: grouped heads), accumulating in float. */
static void matmul(build *b, const char *name, void *a, void *bm, void *c) {
  int comp = DATA_FLOAT;
  void *mm = make(b, BACKEND_MATMUL_DESCRIPTOR, name);
  SET(b, mm, name, ATTR_MATMUL_COMP_TYPE, TYPE_DATA_TYPE, 1, &comp);
  finalize(b, mm, name);
  void *op = make(b, BACKEND_OPERATION_MATMUL_DESCRIPTOR, name);
  SET(b, op, name, ATTR_OPERATION_MATMUL_ADESC, TYPE_BACKEND_DESCRIPTOR, 1, &a);
  SET(b, op, name, ATTR_OPERATION_MATMUL_BDESC, TYPE_BACKEND_DESCRIPTOR, 1, &bm);
  SET(b, op, name, ATTR_OPERATION_MATMUL_CDESC, TYPE_BACKEND_DESCRIPTOR, 1, &c);
  SET(b, op, name, ATTR_OPERATION_MATMUL_DESC, TYPE_BACKEND_DESCRIPTOR, 1, &mm);
  finalize(b, op, name);
  add_op(b, op, name);
  if (!b->bad) dbg("  op %2d MATMUL %-31s %s = %s @ %s", b->nops - 1, name, name_of(b, c), name_of(b, a), name_of(b, bm));
}

/* y = reduce(x) over the axes where y's extent is 1 (or down to y's head count: grouped heads). */
static void reduction(build *b, const char *name, int op_kind, void *x, void *y) {
  int comp = DATA_FLOAT;
  void *rd = make(b, BACKEND_REDUCTION_DESCRIPTOR, name);
  SET(b, rd, name, ATTR_REDUCTION_COMP_TYPE, TYPE_DATA_TYPE, 1, &comp);
  SET(b, rd, name, ATTR_REDUCTION_OPERATOR, TYPE_REDUCTION_OPERATOR_TYPE, 1, &op_kind);
  finalize(b, rd, name);
  void *op = make(b, BACKEND_OPERATION_REDUCTION_DESCRIPTOR, name);
  SET(b, op, name, ATTR_OPERATION_REDUCTION_DESC, TYPE_BACKEND_DESCRIPTOR, 1, &rd);
  SET(b, op, name, ATTR_OPERATION_REDUCTION_XDESC, TYPE_BACKEND_DESCRIPTOR, 1, &x);
  SET(b, op, name, ATTR_OPERATION_REDUCTION_YDESC, TYPE_BACKEND_DESCRIPTOR, 1, &y);
  finalize(b, op, name);
  add_op(b, op, name);
  if (!b->bad)
    dbg("  op %2d REDUCTION %s %-24s %s = reduce(%s)", b->nops - 1, op_kind == REDUCE_TENSOR_MAX ? "max" : "add", name,
        name_of(b, y), name_of(b, x));
}

/* y = x seen with y's dims and strides (a transpose view). */
static void reshape(build *b, const char *name, void *x, void *y) {
  void *op = make(b, BACKEND_OPERATION_RESHAPE_DESCRIPTOR, name);
  SET(b, op, name, ATTR_OPERATION_RESHAPE_XDESC, TYPE_BACKEND_DESCRIPTOR, 1, &x);
  SET(b, op, name, ATTR_OPERATION_RESHAPE_YDESC, TYPE_BACKEND_DESCRIPTOR, 1, &y);
  finalize(b, op, name);
  add_op(b, op, name);
  if (!b->bad) dbg("  op %2d RESHAPE %-30s %s = view(%s)", b->nops - 1, name, name_of(b, y), name_of(b, x));
}

/* The value a masked logit gets: cudnn-frontend uses float's lowest before cuDNN 9.10, -inf after. */
static float neg_inf(void) { return version < 91000 ? -FLT_MAX : -INFINITY; }

/* JAX's causal mask on logits s ([b, hq, sq, skv], dims sd, strides ss): keep s[i, j] where row i
 * >= column j, else neg_inf (cudnn-frontend's top-left diagonal band with right bound 0). */
static void *causal_mask(build *b, void *s, const int64_t sd[4], const int64_t ss[4], void *ninf) {
  void *row = pointwise(b, "gen_row_index", POINTWISE_GEN_INDEX, DATA_FLOAT, 2, s, NULL, NULL,
                        virt(b, "row_index", DATA_INT32, sd, ss));
  void *col = pointwise(b, "gen_col_index", POINTWISE_GEN_INDEX, DATA_FLOAT, 3, s, NULL, NULL,
                        virt(b, "col_index", DATA_INT32, sd, ss));
  void *keep = pointwise(b, "row>=col", POINTWISE_CMP_GE, DATA_BOOLEAN, 0, row, col, NULL,
                         virt(b, "causal_keep", DATA_BOOLEAN, sd, ss));
  return pointwise(b, "binary_select", POINTWISE_BINARY_SELECT, DATA_FLOAT, 0, s, ninf, keep,
                   virt(b, "masked_logits", DATA_FLOAT, sd, ss));
}

/* The shapes both graphs use. */
typedef struct {
  int64_t q[4], kt[4], ktst[4], kv[4], s[4], sst[4], row[4], rowst[4], one[4];
} shapes;

static void shapes_of(const kl_sdpa_desc *d, shapes *h) {
  int64_t B = d->b, H = d->hq, G = d->hkv, S = d->sq, T = d->skv, D = d->d;
  const int64_t *k = d->k_stride;
  *h = (shapes){.q = {B, H, S, D}, .kt = {B, G, D, T}, .ktst = {k[0], k[1], k[3], k[2]}, .kv = {B, G, T, D},
                .s = {B, H, S, T}, .sst = {H * S * T, S * T, T, 1}, .row = {B, H, S, 1}, .rowst = {H * S, S, 1, 1},
                .one = {1, 1, 1, 1}};
}

/* The forward (cudnn-frontend's CompositeSDPANode with stats, no bias, no dropout, and its composite
 * softmax):
 *   S = Q @ K^T;  S *= scale;  [causal: S = select(row >= col, S, neg_inf)]
 *   M = max_j S;  E = exp(S - M);  Z = sum_j E;  Stats = M + log Z;  P = E / Z (io type);  O = P @ V */
static void forward_graph(build *b, const kl_sdpa_desc *d, int io) {
  shapes h;
  shapes_of(d, &h);
  void *q = tensor(b, "Q", UID_Q, io, h.q, d->q_stride, REAL);
  void *kt = tensor(b, "K^T", UID_K, io, h.kt, h.ktst, REAL);
  void *v = tensor(b, "V", UID_V, io, h.kv, d->v_stride, REAL);
  void *o = tensor(b, "O", UID_O, io, h.q, d->o_stride, REAL);
  void *stats = tensor(b, "Stats", UID_STATS, DATA_FLOAT, h.row, h.rowst, REAL);
  void *scale = tensor(b, "attn_scale", UID_SCALE, DATA_FLOAT, h.one, h.one, BY_VALUE);
  void *ninf = d->causal ? tensor(b, "neg_inf", UID_NEG_INF, DATA_FLOAT, h.one, h.one, BY_VALUE) : NULL;
  void *s = virt(b, "bmm1::S", DATA_FLOAT, h.s, h.sst);
  matmul(b, "bmm1", q, kt, s);
  s = pointwise(b, "attn_scale", POINTWISE_MUL, DATA_FLOAT, 0, s, scale, NULL, virt(b, "scaled_S", DATA_FLOAT, h.s, h.sst));
  if (d->causal) s = causal_mask(b, s, h.s, h.sst, ninf);
  void *m = virt(b, "softmax::max", DATA_FLOAT, h.row, h.rowst);
  reduction(b, "softmax max", REDUCE_TENSOR_MAX, s, m);
  void *e = pointwise(b, "softmax sub", POINTWISE_SUB, DATA_FLOAT, 0, s, m, NULL, virt(b, "sub_M", DATA_FLOAT, h.s, h.sst));
  e = pointwise(b, "softmax exp", POINTWISE_EXP, DATA_FLOAT, 0, e, NULL, NULL, virt(b, "exp_sub_M", DATA_FLOAT, h.s, h.sst));
  void *z = virt(b, "softmax::SumExp", DATA_FLOAT, h.row, h.rowst);
  reduction(b, "softmax sum", REDUCE_TENSOR_ADD, e, z);
  void *lz = pointwise(b, "softmax log", POINTWISE_LOG, DATA_FLOAT, 0, z, NULL, NULL,
                       virt(b, "log_SumExp", DATA_FLOAT, h.row, h.rowst));
  pointwise(b, "softmax stats", POINTWISE_ADD, DATA_FLOAT, 0, m, lz, NULL, stats);
  void *p = pointwise(b, "softmax div", POINTWISE_DIV, DATA_FLOAT, 0, e, z, NULL, virt(b, "softmax::P", io, h.s, h.sst));
  matmul(b, "bmm2", p, v, o);
}

/* The backward (cudnn-frontend's CompositeSDPABackwardNode, no bias, no dropout, dQ through a
 * float32 accumulator; hq > hkv: full-head dK/dV reduced over each group):
 *   softmax_sum = sum_d(dO * O) * 1                      (float32, in the work area)
 *   P = exp(scale * Q @ K^T - Stats)  [causal: masked before the exp]
 *   dV = P^T @ dO
 *   dS = (dO @ V^T - softmax_sum) * P * scale
 *   dK = dS^T @ Q;  dQ_accum = dS @ K (float32, in the work area);  dQ = identity(dQ_accum) */
static void backward_graph(build *b, const kl_sdpa_desc *d, int io) {
  shapes h;
  shapes_of(d, &h);
  int64_t B = d->b, H = d->hq, S = d->sq, T = d->skv, D = d->d;
  const int64_t *vs = d->v_stride;
  int64_t vtst[4] = {vs[0], vs[1], vs[3], vs[2]};
  void *q = tensor(b, "Q", UID_Q, io, h.q, d->q_stride, REAL);
  void *kt = tensor(b, "K^T", UID_K, io, h.kt, h.ktst, REAL);
  void *vt = tensor(b, "V^T", UID_V, io, h.kt, vtst, REAL);
  void *o = tensor(b, "O", UID_O, io, h.q, d->o_stride, REAL);
  void *dout = tensor(b, "dO", UID_DO, io, h.q, d->o_stride, REAL);
  void *stats = tensor(b, "Stats", UID_STATS, DATA_FLOAT, h.row, h.rowst, REAL);
  void *dq = tensor(b, "dQ", UID_DQ, io, h.q, d->q_stride, REAL);
  void *dk = tensor(b, "dK", UID_DK, io, h.kv, d->k_stride, REAL);
  void *dv = tensor(b, "dV", UID_DV, io, h.kv, d->v_stride, REAL);
  void *scale = tensor(b, "attn_scale", UID_SCALE, DATA_FLOAT, h.one, h.one, BY_VALUE);
  void *one = tensor(b, "one", UID_ONE, DATA_FLOAT, h.one, h.one, BY_VALUE);
  void *ninf = d->causal ? tensor(b, "neg_inf", UID_NEG_INF, DATA_FLOAT, h.one, h.one, BY_VALUE) : NULL;

  /* softmax_sum: the frontend's odd strides for the virtual dO*O, copied as they are */
  int64_t doo_st[4] = {H * S * D, S * D, H * D, 1};
  void *doo = pointwise(b, "mul_dO_O", POINTWISE_MUL, DATA_FLOAT, 0, dout, o, NULL, virt(b, "dO*O", DATA_FLOAT, h.q, doo_st));
  void *rowsum = virt(b, "sum(dO*O)", DATA_FLOAT, h.row, h.rowst);
  reduction(b, "reduce_dO_o", REDUCE_TENSOR_ADD, doo, rowsum);
  void *ssum = tensor(b, "softmax_sum", UID_SOFTMAX_SUM, DATA_FLOAT, h.row, h.rowst, REAL);
  pointwise(b, "scale_dropout_inv", POINTWISE_MUL, DATA_FLOAT, 0, rowsum, one, NULL, ssum);

  /* P recomputed from the forward's stats */
  void *s = virt(b, "S", DATA_FLOAT, h.s, h.sst);
  matmul(b, "matmul_Q_KT", q, kt, s);
  s = pointwise(b, "mul_s_attn_scale", POINTWISE_MUL, DATA_FLOAT, 0, s, scale, NULL, virt(b, "scaled_S", DATA_FLOAT, h.s, h.sst));
  s = pointwise(b, "sub_s_m", POINTWISE_SUB, DATA_FLOAT, 0, s, stats, NULL, virt(b, "S-stats", DATA_FLOAT, h.s, h.sst));
  if (d->causal) s = causal_mask(b, s, h.s, h.sst, ninf);
  void *p = pointwise(b, "exp_s", POINTWISE_EXP, DATA_FLOAT, 0, s, NULL, NULL, virt(b, "P", DATA_FLOAT, h.s, h.sst));

  /* dV */
  int64_t td[4] = {B, H, T, S}, tst[4] = {H * S * T, S * T, 1, T};
  int64_t fd[4] = {B, H, T, D}, fst[4] = {H * T * D, T * D, D, 1};
  void *pt = virt(b, "P^T", io, td, tst);
  reshape(b, "reshape_p", p, pt);
  if (d->hq == d->hkv) {
    matmul(b, "matmul_pT_dO", pt, dout, dv);
  } else {
    void *full = virt(b, "dV_fullhead", io, fd, fst);
    matmul(b, "matmul_pT_dO", pt, dout, full);
    reduction(b, "red_dV_head", REDUCE_TENSOR_ADD, full, dv);
  }

  /* dS */
  void *dp = virt(b, "dP", DATA_FLOAT, h.s, h.sst);
  matmul(b, "matmul_dO_VT", dout, vt, dp);
  void *x = pointwise(b, "sub_dP_softmax_sum", POINTWISE_SUB, DATA_FLOAT, 0, dp, ssum, NULL,
                      virt(b, "dP-softmax_sum", DATA_FLOAT, h.s, h.sst));
  x = pointwise(b, "mul_dP_exp_s", POINTWISE_MUL, DATA_FLOAT, 0, x, p, NULL, virt(b, "(dP-sum)*P", DATA_FLOAT, h.s, h.sst));
  void *ds = pointwise(b, "mul_dS_attn_scale", POINTWISE_MUL, DATA_FLOAT, 0, x, scale, NULL, virt(b, "dS", DATA_FLOAT, h.s, h.sst));

  /* dK */
  void *dst = virt(b, "dS^T", io, td, tst);
  reshape(b, "reshape_dS", ds, dst);
  if (d->hq == d->hkv) {
    matmul(b, "matmul_dST_Q", dst, q, dk);
  } else {
    void *full = virt(b, "dK_fullhead", io, fd, fst);
    matmul(b, "matmul_dST_Q", dst, q, full);
    reduction(b, "red_dK_head", REDUCE_TENSOR_ADD, full, dk);
  }

  /* dQ: K seen untransposed (a float virtual view, as the frontend leaves its type to the graph's
   * intermediate type), into the float32 accumulator, then converted */
  void *k = virt(b, "K", DATA_FLOAT, h.kv, d->k_stride);
  reshape(b, "reshape_k", kt, k);
  int64_t accst[4] = {H * S * D, S * D, D, 1};
  void *acc = tensor(b, "dQ_accum", UID_DQ_ACCUM, DATA_FLOAT, h.q, accst, REAL);
  matmul(b, "matmul_dS_K", ds, k, acc);
  pointwise(b, "identity_dQ", POINTWISE_IDENTITY, DATA_FLOAT, 0, acc, NULL, NULL, dq);
}

/* ---- plans ---- */

/* A cached plan: its key, the descriptors it was made from, its work area. */
typedef struct {
  kl_sdpa_desc key;        /* key */
  int bwd, ordinal;        /* key: direction, GPU */
  void *plan;              /* the execution plan */
  void *keep[MAX_KEEP];    /* every descriptor it was made from, kept while it lives */
  int nkeep;
  int64_t engine;          /* the engine's global index (messages) */
  size_t engine_bytes;     /* the engine's work area */
  size_t off_accum, off_sum, off_engine; /* the work area: the backward's dQ accumulator and softmax sums, then the engine's */
  size_t work_bytes;
  void *work;              /* device memory, work_bytes long, made on the first run (NULL: not yet or none needed) */
  int from_driver;         /* work from cuMemAlloc (made under capture), never freed */
  int pinned;              /* run while a graph was captured: the graph holds work, kept */
  unsigned long long last_used;
} sdpa_plan;

#define MAX_PLANS 64
#define KEEP_PLANS 32
static sdpa_plan plans[MAX_PLANS];
static int nplans;
static unsigned long long clock_now;

static int same_key(const sdpa_plan *p, const kl_sdpa_desc *d, int bwd, int ordinal) {
  const kl_sdpa_desc *k = &p->key;
  return p->bwd == bwd && p->ordinal == ordinal && k->b == d->b && k->hq == d->hq && k->hkv == d->hkv &&
         k->sq == d->sq && k->skv == d->skv && k->d == d->d && k->dtype == d->dtype && !k->causal == !d->causal &&
         !memcmp(&k->scale, &d->scale, sizeof d->scale) && !memcmp(k->q_stride, d->q_stride, sizeof d->q_stride) &&
         !memcmp(k->k_stride, d->k_stride, sizeof d->k_stride) && !memcmp(k->v_stride, d->v_stride, sizeof d->v_stride) &&
         !memcmp(k->o_stride, d->o_stride, sizeof d->o_stride);
}

static void destroy_all(void **keep, int n) {
  for (int i = n - 1; i >= 0; i--)
    if (keep[i]) b_destroy(keep[i]);
}

/* Frees a plan (caller holds mu; no graph being captured: freeing would be captured). */
static void drop(sdpa_plan *p) {
  if (p->plan) b_destroy(p->plan);
  destroy_all(p->keep, p->nkeep);
  if (p->work && !p->from_driver) {
    int old = kl_cuda_use(p->ordinal);
    kl_cuda_free(p->work, p->work_bytes);
    kl_cuda_use(old);
  }
  *p = plans[--nplans];
}

/* Notes of engine configuration cfg, for debug lines: its global index and whether it compiles at
 * run time. */
static int64_t engine_of(void *cfg, int *rtc) {
  void *eng = NULL;
  int64_t count = 0, index = -1;
  *rtc = 0;
  if (b_create(BACKEND_ENGINE_DESCRIPTOR, &eng)) return -1;
  if (!b_get(cfg, ATTR_ENGINECFG_ENGINE, TYPE_BACKEND_DESCRIPTOR, 1, &count, &eng) && count == 1) {
    int notes[32];
    if (b_get(eng, ATTR_ENGINE_GLOBAL_INDEX, TYPE_INT64, 1, &count, &index)) index = -1;
    if (!b_get(eng, ATTR_ENGINE_BEHAVIOR_NOTE, TYPE_BEHAVIOR_NOTE, 32, &count, notes))
      for (int i = 0; i < count && i < 32; i++) *rtc |= notes[i] == BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  }
  b_destroy(eng);
  return index;
}

/* Appends to the list of reasons the engines gave (kept short: the first ones say the most). */
static void note(char *tried, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(char *tried, size_t len, const char *fmt, ...) {
  size_t at = strlen(tried);
  if (at + 8 >= len) return;
  if (at) at += (size_t)snprintf(tried + at, len - at, "; ");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tried + at, len - at, fmt, ap);
  va_end(ap);
}

/* The execution plan of graph: the heuristics' engine configurations (mode A, then FALLBACK), the
 * first whose plan finalizes, as cudnn-frontend's build_plans picks it. Its descriptors go to b's
 * keep list; NULL with the reasons in tried when none does. */
static void *choose_plan(build *b, void *graph, void *handle, int64_t *engine, char *tried, size_t tlen) {
  static const int modes[2] = {HEUR_MODE_A, HEUR_MODE_FALLBACK};
  static const char *const mode_names[2] = {"heuristics mode A", "heuristics mode FALLBACK"};
  char code[96], said[512];
  for (int m = 0; m < 2; m++) {
    void *heur = NULL, *cfg[16] = {0};
    int rc = b_create(BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    const char *step = "creating the heuristics descriptor";
    if (!rc) {
      b->keep[b->nkeep++] = heur;
      step = "setting the heuristics' graph";
      rc = b_set(heur, ATTR_ENGINEHEUR_OPERATION_GRAPH, TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    }
    if (!rc) step = "setting the heuristics' mode", rc = b_set(heur, ATTR_ENGINEHEUR_MODE, TYPE_HEUR_MODE, 1, &modes[m]);
    if (!rc) step = "finalizing the heuristics (cuDNN matching the graph to its engines)", rc = b_finalize(heur);
    for (int i = 0; !rc && i < 16; i++) {
      step = "creating engine configuration descriptors";
      rc = b_create(BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]);
      if (!rc) b->keep[b->nkeep++] = cfg[i];
    }
    int64_t ncfg = 0;
    if (!rc) step = "reading the heuristics' results", rc = b_get(heur, ATTR_ENGINEHEUR_RESULTS, TYPE_BACKEND_DESCRIPTOR, 16, &ncfg, cfg);
    if (rc) {
      last_error(said, sizeof said);
      note(tried, tlen, "%s: %s: %s%s%s", mode_names[m], step, status_name(rc, code, sizeof code), said[0] ? "; cuDNN: " : "", said);
      dbg("  %s: %s failed: %s%s%s", mode_names[m], step, code, said[0] ? "; cuDNN: " : "", said);
      continue;
    }
    dbg("  %s: %lld engine configuration(s)", mode_names[m], (long long)ncfg);
    if (ncfg == 0) note(tried, tlen, "%s: no engine configuration", mode_names[m]);
    for (int i = 0; i < ncfg && i < 16; i++) {
      int rtc = 0;
      int64_t index = engine_of(cfg[i], &rtc);
      void *plan = NULL;
      step = "creating the plan descriptor";
      rc = b_create(BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
      if (!rc) step = "setting the plan's handle", rc = b_set(plan, ATTR_EXECUTION_PLAN_HANDLE, TYPE_HANDLE, 1, &handle);
      if (!rc)
        step = "setting the plan's engine configuration",
        rc = b_set(plan, ATTR_EXECUTION_PLAN_ENGINE_CONFIG, TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
      if (!rc) step = "finalizing the plan", rc = b_finalize(plan);
      if (!rc) {
        dbg("  %s: configuration %d (engine %lld%s): plan finalized", mode_names[m], i, (long long)index,
            rtc ? ", compiled at run time" : "");
        *engine = index;
        return plan;
      }
      last_error(said, sizeof said);
      note(tried, tlen, "%s: engine %lld%s: %s: %s%s%s", mode_names[m], (long long)index, rtc ? " (run-time compiled)" : "",
           step, status_name(rc, code, sizeof code), said[0] ? "; cuDNN: " : "", said);
      dbg("  %s: configuration %d (engine %lld%s): %s failed: %s%s%s", mode_names[m], i, (long long)index,
          rtc ? ", compiled at run time" : "", step, code, said[0] ? "; cuDNN: " : "", said);
      if (plan) b_destroy(plan);
    }
  }
  return NULL;
}

static size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Builds p's plan (its key filled in); caller holds mu. Under capture the thread's capture mode is
 * relaxed while cuDNN plans (it may allocate or synchronize). 0, or -1 with a message
 * (KL_ERR_UNSUPPORTED: the caller may take another road). */
static int make_plan(sdpa_plan *p, int capturing, char *err, size_t errlen) {
  char what[320], code[96], why[320];
  const kl_sdpa_desc *d = &p->key;
  describe(what, sizeof what, d, p->bwd);
  if (refusal(d, p->bwd, why, sizeof why)) return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s: %s", what, why);
  int mode = CAPTURE_RELAXED, relaxed = capturing && d_exchange_capture_mode && !d_exchange_capture_mode(&mode);
  int ord = kl_cuda_ordinal();
  if (ord < 0 || ord >= KL_CUDA_MAX_GPUS) ord = 0;
  int rc = 0;
  if (!handles[ord]) rc = c_create(&handles[ord]);
  if (rc) {
    handles[ord] = NULL;
    if (relaxed) d_exchange_capture_mode(&mode);
    return kl_error(err, errlen, KL_ERR_INTERNAL, "%s: cudnnCreate failed: %s", what, status_name(rc, code, sizeof code));
  }
  void *handle = handles[ord];
  dbg("%s: building (cuDNN %zu, sm_%d)", what, version, sm_version());
  build *b = calloc(1, sizeof *b);
  if (!b) {
    if (relaxed) d_exchange_capture_mode(&mode);
    return kl_error(err, errlen, KL_ERR_NOMEM, "%s: out of host memory", what);
  }
  b->next_uid = UID_VIRTUAL;
  int io = d->dtype == KL_BF16 ? DATA_BFLOAT16 : DATA_HALF;
  if (p->bwd) backward_graph(b, d, io);
  else forward_graph(b, d, io);
  void *graph = make(b, BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the operation graph");
  SET(b, graph, "the operation graph", ATTR_OPERATIONGRAPH_HANDLE, TYPE_HANDLE, 1, &handle);
  SET(b, graph, "the operation graph", ATTR_OPERATIONGRAPH_OPS, TYPE_BACKEND_DESCRIPTOR, b->nops, b->ops);
  finalize(b, graph, "the operation graph");
  char tried[1200] = "";
  void *plan = NULL;
  if (!b->bad) {
    dbg("  graph of %d operations finalized", b->nops);
    if (b->nkeep + 40 > MAX_KEEP) failed(b, 0, "too many descriptors for the heuristics");
    else plan = choose_plan(b, graph, handle, &p->engine, tried, sizeof tried);
  }
  int64_t ws = 0, got = 0;
  if (plan && (rc = b_get(plan, ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, TYPE_INT64, 1, &got, &ws))) {
    failed(b, rc, "reading the plan's work area size");
    b_destroy(plan);
    plan = NULL;
  }
  if (relaxed) d_exchange_capture_mode(&mode);
  if (!plan) {
    destroy_all(b->keep, b->nkeep);
    if (b->bad)
      kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s: %s failed: %s%s%s (KILN_CUDNN_SDPA_DEBUG=1 shows every step)", what,
               b->what, b->rc ? status_name(b->rc, code, sizeof code) : "kiln's limit", b->said[0] ? "; cuDNN: " : "", b->said);
    else
      kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s: no cuDNN engine takes this graph: %s (KILN_CUDNN_SDPA_DEBUG=1 shows "
               "every step)", what, tried[0] ? tried : "the heuristics gave no engine");
    free(b);
    return -1;
  }
  p->plan = plan;
  memcpy(p->keep, b->keep, sizeof b->keep);
  p->nkeep = b->nkeep;
  p->ordinal = ord;
  free(b);
  p->engine_bytes = (size_t)(ws > 0 ? ws : 0);
  if (p->bwd) {
    size_t accum = (size_t)(d->b * d->hq * d->sq * d->d) * sizeof(float), sums = (size_t)(d->b * d->hq * d->sq) * sizeof(float);
    p->off_accum = 0;
    p->off_sum = round256(accum);
    p->off_engine = p->off_sum + round256(sums);
  }
  p->work_bytes = p->off_engine + round256(p->engine_bytes);
  dbg("%s: plan ready: engine %lld, work area %zu bytes (engine %zu)", what, (long long)p->engine, p->work_bytes,
      p->engine_bytes);
  if (getenv("KILN_LOG_COMPILES"))
    fprintf(stderr, "kiln: %s: engine %lld, work area %zu bytes\n", what, (long long)p->engine, p->work_bytes);
  return 0;
}

/* The cached plan for a key, made if missing (caller holds mu); NULL with a message. */
static sdpa_plan *find_plan(const kl_sdpa_desc *d, int bwd, int capturing, char *err, size_t errlen) {
  int ord = kl_cuda_ordinal();
  if (ord < 0 || ord >= KL_CUDA_MAX_GPUS) ord = 0;
  for (int i = 0; i < nplans; i++)
    if (same_key(&plans[i], d, bwd, ord)) {
      plans[i].last_used = ++clock_now;
      return &plans[i];
    }
  for (;;) { /* room for one more, the least recently used unpinned plans going first */
    int unpinned = 0, lru = -1;
    for (int i = 0; i < nplans; i++)
      if (!plans[i].pinned) {
        unpinned++;
        if (lru < 0 || plans[i].last_used < plans[lru].last_used) lru = i;
      }
    if (capturing || lru < 0 || (unpinned < KEEP_PLANS && nplans < MAX_PLANS)) break;
    drop(&plans[lru]);
  }
  if (nplans == MAX_PLANS) {
    char what[320];
    kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s: no room for another plan: %d attention shapes in use by captured "
             "graphs", describe(what, sizeof what, d, bwd), MAX_PLANS);
    return NULL;
  }
  sdpa_plan *p = &plans[nplans];
  memset(p, 0, sizeof *p);
  p->key = *d, p->bwd = bwd;
  if (make_plan(p, capturing, err, errlen)) return NULL;
  p->last_used = ++clock_now;
  nplans++;
  return p;
}

/* p's work area, made on its first run: stream-ordered memory, or under capture the driver's (as
 * runtime/cudnn.c does; the plan is then pinned by the caller). 0, or -1 with a message. */
static int ensure_work(sdpa_plan *p, int capturing, char *err, size_t errlen) {
  if (p->work || !p->work_bytes) return 0;
  char what[320], aerr[256] = "";
  if (capturing) {
    unsigned long long ptr = 0;
    int mode = CAPTURE_RELAXED, relaxed = d_exchange_capture_mode && !d_exchange_capture_mode(&mode);
    if (!d_mem_alloc || d_mem_alloc(&ptr, p->work_bytes)) {
      snprintf(aerr, sizeof aerr, "cuMemAlloc of %zu bytes failed", p->work_bytes);
      ptr = 0;
    }
    if (relaxed) d_exchange_capture_mode(&mode);
    p->work = (void *)(uintptr_t)ptr;
    p->from_driver = 1;
  } else if (kl_cuda_alloc(p->work_bytes, &p->work, aerr, sizeof aerr)) {
    p->work = NULL;
  }
  if (!p->work)
    return kl_error(err, errlen, KL_ERR_NOMEM, "%s: work area of %zu bytes: %s", describe(what, sizeof what, &p->key, p->bwd),
                    p->work_bytes, aerr);
  return 0;
}

/* Runs plan p over the variant pack (uids, ptrs: n of them) on stream; 0 or -1 with a message. In
 * debug mode it waits for the stream and reports a kernel that failed. */
static int execute(sdpa_plan *p, void *stream, int capturing, const int64_t *uids, void **ptrs, int n, char *err,
                   size_t errlen) {
  char what[320], code[96], said[512];
  void *pack = NULL, *handle = handles[p->ordinal], *ws = p->work ? (char *)p->work + p->off_engine : NULL;
  const char *step = "cudnnSetStream";
  int rc = c_set_stream(handle, stream);
  if (!rc) step = "creating the variant pack", rc = b_create(BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (!rc) step = "setting the variant pack's uids", rc = b_set(pack, ATTR_VARIANT_PACK_UNIQUE_IDS, TYPE_INT64, n, uids);
  if (!rc) step = "setting the variant pack's pointers", rc = b_set(pack, ATTR_VARIANT_PACK_DATA_POINTERS, TYPE_VOID_PTR, n, ptrs);
  if (!rc) step = "setting the variant pack's work area", rc = b_set(pack, ATTR_VARIANT_PACK_WORKSPACE, TYPE_VOID_PTR, 1, &ws);
  if (!rc) step = "finalizing the variant pack", rc = b_finalize(pack);
  uint64_t t0 = kl_prof_begin();
  if (!rc) step = "cudnnBackendExecute", rc = b_execute(handle, p->plan, pack);
  KL_PROF_END(t0, "library", p->bwd ? "cudnnBackendExecute (SDPA backward)" : "cudnnBackendExecute (SDPA forward)",
              "\"call\": \"%s\"", describe(what, sizeof what, &p->key, p->bwd));
  if (rc) last_error(said, sizeof said);
  if (pack) b_destroy(pack);
  if (rc)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "%s (engine %lld): %s failed: %s%s%s",
                    describe(what, sizeof what, &p->key, p->bwd), (long long)p->engine, step,
                    status_name(rc, code, sizeof code), said[0] ? "; cuDNN: " : "", said);
  if (debug_on() && d_stream_sync && !capturing) {
    int r = d_stream_sync(stream);
    const char *s = NULL;
    if (r && d_error_string) d_error_string(r, &s);
    dbg("%s: ran (engine %lld), stream synchronized: %s", describe(what, sizeof what, &p->key, p->bwd), (long long)p->engine,
        r ? (s ? s : "CUDA error") : "ok");
    if (r)
      return kl_error(err, errlen, KL_ERR_INTERNAL, "%s (engine %lld): the kernels failed: %s (CUDA error %d)", what,
                      (long long)p->engine, s ? s : "CUDA error", r);
  }
  return 0;
}

/* The common start of a run: availability, the operands' alignment, the stream, the plan and its
 * work area (mu held on success). NULL with a message. */
static sdpa_plan *begin(const kl_sdpa_desc *d, int bwd, void *const *ptrs, int nptrs, void **stream, int *capturing,
                        char *err, size_t errlen) {
  char what[320];
  if (unavailable(err, errlen)) return NULL;
  for (int i = 0; i < nptrs; i++)
    if (!ptrs[i] || ((uintptr_t)ptrs[i] & (ALIGN - 1)))
      return kl_error(err, errlen, KL_ERR_INTERNAL, "%s: operand %d at %p is not %d-byte aligned device memory",
                      describe(what, sizeof what, d, bwd), i, ptrs[i], ALIGN), NULL;
  void *q = kl_cuda_queue_stream();
  *stream = q ? q : kl_cuda_stream();
  *capturing = kl_cuda_capturing() || *stream != kl_cuda_stream();
  pthread_mutex_lock(&mu);
  sdpa_plan *p = find_plan(d, bwd, *capturing, err, errlen);
  if (p && ensure_work(p, *capturing, err, errlen)) p = NULL;
  if (!p) {
    pthread_mutex_unlock(&mu);
    return NULL;
  }
  if (*capturing) p->pinned = 1; /* the graph holds the work area from now on */
  return p;
}

int kl_cudnn_sdpa_supported(const kl_sdpa_desc *d, char *why, size_t n) {
  char what[320], reason[320];
  if (unavailable(why, n)) return -1;
  for (int bwd = 0; bwd < 2; bwd++)
    if (refusal(d, bwd, reason, sizeof reason)) {
      kl_error(why, n, KL_ERR_UNSUPPORTED, "%s: %s", describe(what, sizeof what, d, bwd), reason);
      return -1;
    }
  int capturing = kl_cuda_capturing();
  pthread_mutex_lock(&mu);
  int rc = find_plan(d, 0, capturing, why, n) && find_plan(d, 1, capturing, why, n) ? 0 : -1;
  pthread_mutex_unlock(&mu);
  return rc;
}

int64_t kl_cudnn_sdpa_work_bytes(const kl_sdpa_desc *d, int bwd, char *err, size_t errlen) {
  if (unavailable(err, errlen)) return -1;
  pthread_mutex_lock(&mu);
  sdpa_plan *p = find_plan(d, !!bwd, kl_cuda_capturing(), err, errlen);
  int64_t bytes = p ? (int64_t)p->work_bytes : -1;
  pthread_mutex_unlock(&mu);
  return bytes;
}

int kl_cudnn_sdpa_fwd(const kl_sdpa_desc *d, const void *q, const void *k, const void *v, void *o, float *stats,
                      char *err, size_t errlen) {
  void *ptrs[7] = {(void *)(uintptr_t)q, (void *)(uintptr_t)k, (void *)(uintptr_t)v, o, stats};
  void *stream;
  int capturing;
  sdpa_plan *p = begin(d, 0, ptrs, 5, &stream, &capturing, err, errlen);
  if (!p) return -1;
  float scale = d->scale, ninf = neg_inf(); /* by value: read when the run is queued */
  int64_t uids[7] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF};
  ptrs[5] = &scale, ptrs[6] = &ninf;
  int rc = execute(p, stream, capturing, uids, ptrs, d->causal ? 7 : 6, err, errlen);
  pthread_mutex_unlock(&mu);
  return rc;
}

int kl_cudnn_sdpa_bwd(const kl_sdpa_desc *d, const void *q, const void *k, const void *v, const void *o,
                      const void *do_, const float *stats, void *dq, void *dk, void *dv, char *err, size_t errlen) {
  void *ptrs[14] = {(void *)(uintptr_t)q,  (void *)(uintptr_t)k,   (void *)(uintptr_t)v, (void *)(uintptr_t)o,
                    (void *)(uintptr_t)stats, (void *)(uintptr_t)do_, dq, dk, dv};
  void *stream;
  int capturing;
  sdpa_plan *p = begin(d, 1, ptrs, 9, &stream, &capturing, err, errlen);
  if (!p) return -1;
  float scale = d->scale, one = 1.0f, ninf = neg_inf();
  char *work = p->work;
  int64_t uids[14] = {UID_Q,  UID_K,  UID_V,  UID_O,     UID_STATS, UID_DO,          UID_DQ,
                      UID_DK, UID_DV, UID_SCALE, UID_ONE, UID_SOFTMAX_SUM, UID_DQ_ACCUM, UID_NEG_INF};
  ptrs[9] = &scale, ptrs[10] = &one, ptrs[11] = work + p->off_sum, ptrs[12] = work + p->off_accum, ptrs[13] = &ninf;
  int rc = 0;
  /* before cuDNN 9.6.0 the accumulator starts zeroed by the caller (cudnn-frontend memsets it) */
  if (version < 90600 && kl_cuda_memset0(work + p->off_accum, p->off_sum - p->off_accum)) {
    char what[320];
    rc = kl_error(err, errlen, KL_ERR_INTERNAL, "%s: zeroing the dQ accumulator failed", describe(what, sizeof what, d, 1));
  }
  if (!rc) rc = execute(p, stream, capturing, uids, ptrs, d->causal ? 14 : 13, err, errlen);
  pthread_mutex_unlock(&mu);
  return rc;
}
