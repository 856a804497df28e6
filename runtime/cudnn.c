/* cudnn.c: convolutions on the GPU through cuDNN's backend (graph) API, or its legacy convolution
 * API where a plan cannot be made that way (cuDNN 9 ships both),
 * opened at run time (KILN_CUDNN_LIB, libcudnn.so.9 from the system, CUDA_HOME, /usr/local/cuda,
 * or paths python/ registers such as the nvidia-cudnn wheel's nvidia/cudnn/lib); never linked.
 * Channels-last tensors (NHWC, filters KRSC), one descriptor set, algorithm and work area cached
 * per shape, queued on kiln's stream. Knows nothing of the IR, and reaches the GPU only through
 * runtime/cuda.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../ir/status.h"
#include "cuda.h"
#include "libfind.h"
#include "profile.h"

/* cuDNN's types and the enum values kiln uses (cudnn_graph.h / cudnn_cnn.h of cuDNN 9). */
typedef void *cudnnHandle_t, *cudnnTensorDescriptor_t, *cudnnFilterDescriptor_t, *cudnnConvolutionDescriptor_t;
enum { D_FLOAT = 0, D_DOUBLE = 1, D_HALF = 2, D_BFLOAT16 = 9 };   /* cudnnDataType_t */
enum { F_NHWC = 1 };                                               /* cudnnTensorFormat_t */
enum { CROSS_CORRELATION = 1 };                                    /* cudnnConvolutionMode_t */
enum { M_DEFAULT = 0, M_TENSOR_OP = 1, M_FMA = 3 };                /* cudnnMathType_t */
enum { CAPTURE_RELAXED = 2 };                                      /* CUstreamCaptureMode */
typedef struct { /* cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: one layout for the three */
  int algo, status;
  float time;
  size_t memory;
  int determinism, mathType, reserved[3];
} algo_perf;

static int (*p_create)(cudnnHandle_t *);
static int (*p_set_stream)(cudnnHandle_t, void *);
static const char *(*p_error_string)(int);
static int (*p_create_tensor)(cudnnTensorDescriptor_t *);
static int (*p_set_tensor_nd)(cudnnTensorDescriptor_t, int, int, const int *, const int *);
static int (*p_destroy_tensor)(cudnnTensorDescriptor_t);
static int (*p_create_filter)(cudnnFilterDescriptor_t *);
static int (*p_set_filter_nd)(cudnnFilterDescriptor_t, int, int, int, const int *);
static int (*p_destroy_filter)(cudnnFilterDescriptor_t);
static int (*p_create_conv)(cudnnConvolutionDescriptor_t *);
static int (*p_set_conv_nd)(cudnnConvolutionDescriptor_t, int, const int *, const int *, const int *, int, int);
static int (*p_set_group_count)(cudnnConvolutionDescriptor_t, int);
static int (*p_set_math_type)(cudnnConvolutionDescriptor_t, int);
static int (*p_destroy_conv)(cudnnConvolutionDescriptor_t);
/* [kind]: the algorithm heuristics, work area sizes and the runs of forward, backward data and
 * backward filter; the descriptor order of each is cuDNN's (see run_plan). */
static int (*p_get_algo[3])(cudnnHandle_t, void *, void *, cudnnConvolutionDescriptor_t, void *, int, int *, algo_perf *);
static int (*p_work_size[3])(cudnnHandle_t, void *, void *, cudnnConvolutionDescriptor_t, void *, int, size_t *);
static int (*p_run[3])(cudnnHandle_t, const void *, void *, const void *, void *, const void *,
                       cudnnConvolutionDescriptor_t, int, void *, size_t, const void *, void *, void *);
/* the driver's, for plans made while a graph is captured (as runtime/cufft.c) */
static int (*p_exchange_capture_mode)(int *);
static int (*p_mem_alloc)(unsigned long long *, size_t);
/* measuring the algorithms (measure_algo): cudnnFind...AlgorithmEx, on a stream of its own over
 * scratch operands, and the driver calls that needs */
static int (*p_find[3])(cudnnHandle_t, void *, const void *, void *, const void *, cudnnConvolutionDescriptor_t, void *,
                        void *, int, int *, algo_perf *, void *, size_t);
static int (*p_mem_free)(unsigned long long);
static int (*p_memset8)(unsigned long long, unsigned char, size_t, void *);
static int (*p_stream_create)(void **, unsigned);
static int (*p_stream_sync)(void *);
static void *find_stream;

/* The backend (graph) API, optional: a plan made once per shape runs with one cudnnBackendExecute
 * per call, about 40 us less host time than the legacy entry points, which cuDNN 9 builds on the
 * same engines for every call. */
static int (*b_create)(int, void **);
static int (*b_destroy)(void *);
static int (*b_set)(void *, int, int, int64_t, const void *);
static int (*b_get)(void *, int, int, int64_t, int64_t *, void *);
static int (*b_finalize)(void *);
static int (*b_execute)(cudnnHandle_t, void *, void *);
enum { /* cudnnBackendDescriptorType_t */
  BD_CONVOLUTION = 1, BD_ENGINE = 2, BD_ENGINECFG = 3, BD_ENGINEHEUR = 4, BD_PLAN = 5, BD_OP_FWD = 10,
  BD_OP_BWD_FILTER = 11, BD_OP_BWD_DATA = 12, BD_OPGRAPH = 15, BD_VARIANT_PACK = 16, BD_TENSOR = 17
};
enum { /* cudnnBackendAttributeType_t */
  BT_HANDLE = 0, BT_DATA_TYPE = 1, BT_INT64 = 3, BT_FLOAT = 4, BT_DOUBLE = 5, BT_VOID_PTR = 6, BT_CONV_MODE = 7,
  BT_HEUR_MODE = 8, BT_NUMERICAL_NOTE = 11, BT_DESCRIPTOR = 15, BT_BEHAVIOR_NOTE = 19
};
enum { /* cudnnBackendAttributeName_t */
  BA_CONV_COMP_TYPE = 100, BA_CONV_MODE = 101, BA_CONV_DILATIONS = 102, BA_CONV_STRIDES = 103,
  BA_CONV_POST_PAD = 104, BA_CONV_PRE_PAD = 105, BA_CONV_SPATIAL_DIMS = 106, BA_HEUR_MODE = 200,
  BA_HEUR_GRAPH = 201, BA_HEUR_RESULTS = 202, BA_CFG_ENGINE = 300, BA_PLAN_HANDLE = 400, BA_PLAN_CFG = 401,
  BA_PLAN_WORKSPACE = 402, BA_OP_FWD_ALPHA = 700, BA_GRAPH_HANDLE = 800, BA_GRAPH_OPS = 801,
  BA_TENSOR_ALIGNMENT = 900, BA_TENSOR_DATA_TYPE = 901, BA_TENSOR_DIMS = 902, BA_TENSOR_STRIDES = 903,
  BA_TENSOR_UID = 906, BA_PACK_UIDS = 1000, BA_PACK_POINTERS = 1001, BA_PACK_WORKSPACE = 1003,
  BA_ENGINE_NUMERICAL_NOTE = 1303, BA_ENGINE_BEHAVIOR_NOTE = 1305
};
/* each operation's attributes, from its alpha on: alpha, beta, conv, then its three tensors as
 * (x, w, y) — forward (704 X, 703 W, 705 Y), backward data (dx 710, w 709, dy 711), backward
 * filter (x 716, dw 715, dy 717) */
static const int op_type[3] = {BD_OP_FWD, BD_OP_BWD_DATA, BD_OP_BWD_FILTER};
static const int op_attr[3][6] = {{700, 701, 702, 704, 703, 705}, {706, 707, 708, 710, 709, 711},
                                  {712, 713, 714, 716, 715, 717}};
enum { NOTE_TENSOR_CORE = 0, NOTE_DOWN_CONVERT = 1, NOTE_RUNTIME_COMPILATION = 0, HEUR_A = 3 };
#define ALIGN 16 /* the byte alignment the plans assume of every operand (kiln's buffers have 256) */

static const char *const kind_names[3] = {"conv_general_dilated", "conv_bwd_data", "conv_bwd_filter"};

/* A cached plan: its key, cuDNN's descriptors, the algorithm and its work area. */
typedef struct {
  int kind, dtype, precision; /* key: kl_hostconv_kind, kl_dtype, lax.Precision */
  kl_conv_geom g;             /* key (zero-padded beyond g.nd) */
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  int algo;
  void *bplan;                /* the backend API's execution plan, or NULL: the legacy call runs */
  void *bkeep[24];            /* the descriptors it was made from, kept while it lives */
  int align;                  /* key: the byte alignment of the operands (16 or less) */
  void *work;                 /* device memory, work_bytes long (NULL for none) */
  size_t work_bytes;
  int pinned;                 /* run while a graph was captured: the graph holds work, kept */
  int from_driver;            /* work from cuMemAlloc (made under capture), never freed */
  unsigned long long last_used;
} plan;

#define MAX_PLANS 64
#define KEEP_PLANS 32
static plan plans[MAX_PLANS];
static int nplans;
static unsigned long long clock_now;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int tried, ready;
static cudnnHandle_t handle;
static char why[512];
static kl_libfind find = KL_LIBFIND_INIT; /* registered candidates, the path opened */

int kl_cudnn_add_search_path(const char *path) {
  return kl_libfind_add(&find, path);
}

static void *try_open(const char *path) { return kl_libfind_open(&find, path); }

static void *try_folder(const char *dir, const char *sub) {
  char p[4400];
  snprintf(p, sizeof p, "%s/%slibcudnn.so.9", dir, sub);
  return try_open(p);
}

#define SYM(var, name)                                \
  do {                                                \
    *(void **)&(var) = dlsym(h, name);                \
    if (!(var)) missing = missing ? missing : name;   \
  } while (0)

static void open_cudnn(void) {
  tried = 1;
  void *h = NULL;
  const char *env = getenv("KILN_CUDNN_LIB"); /* an explicit choice wins over what the system has */
  if (env && *env) h = try_open(env);
  if (!h) h = try_open("libcudnn.so.9");
  const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  for (int i = 0; !h && i < 3; i++)
    if (homes[i] && *homes[i] && !(h = try_folder(homes[i], "lib64/"))) h = try_folder(homes[i], "targets/x86_64-linux/lib/");
  const char *wheel_subs[] = {"", "nvidia/cudnn/lib/"};
  for (int i = 0; !h && i < find.nextra; i++) {
    h = try_open(find.extra[i]);
    for (int s = 0; !h && s < 2; s++) h = try_folder(find.extra[i], wheel_subs[s]);
  }
  if (!h) {
    snprintf(why, sizeof why, "cuDNN not found (tried libcudnn.so.9, $CUDA_HOME, /usr/local/cuda and the nvidia-cudnn "
                              "wheel; set KILN_CUDNN_LIB to its path)");
    return;
  }
  const char *missing = NULL;
  SYM(p_create, "cudnnCreate");
  SYM(p_set_stream, "cudnnSetStream");
  SYM(p_error_string, "cudnnGetErrorString");
  SYM(p_create_tensor, "cudnnCreateTensorDescriptor");
  SYM(p_set_tensor_nd, "cudnnSetTensorNdDescriptor");
  SYM(p_destroy_tensor, "cudnnDestroyTensorDescriptor");
  SYM(p_create_filter, "cudnnCreateFilterDescriptor");
  SYM(p_set_filter_nd, "cudnnSetFilterNdDescriptor");
  SYM(p_destroy_filter, "cudnnDestroyFilterDescriptor");
  SYM(p_create_conv, "cudnnCreateConvolutionDescriptor");
  SYM(p_set_conv_nd, "cudnnSetConvolutionNdDescriptor");
  SYM(p_set_group_count, "cudnnSetConvolutionGroupCount");
  SYM(p_set_math_type, "cudnnSetConvolutionMathType");
  SYM(p_destroy_conv, "cudnnDestroyConvolutionDescriptor");
  SYM(p_get_algo[0], "cudnnGetConvolutionForwardAlgorithm_v7");
  SYM(p_get_algo[1], "cudnnGetConvolutionBackwardDataAlgorithm_v7");
  SYM(p_get_algo[2], "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
  SYM(p_work_size[0], "cudnnGetConvolutionForwardWorkspaceSize");
  SYM(p_work_size[1], "cudnnGetConvolutionBackwardDataWorkspaceSize");
  SYM(p_work_size[2], "cudnnGetConvolutionBackwardFilterWorkspaceSize");
  SYM(p_run[0], "cudnnConvolutionForward");
  SYM(p_run[1], "cudnnConvolutionBackwardData");
  SYM(p_run[2], "cudnnConvolutionBackwardFilter");
  if (missing) {
    snprintf(why, sizeof why, "%.400s lacks %s (kiln needs cuDNN 9's legacy convolution API)", find.path, missing);
    return;
  }
  *(void **)&p_exchange_capture_mode = kl_cuda_driver_symbol("cuThreadExchangeStreamCaptureMode");
  *(void **)&p_mem_alloc = kl_cuda_driver_symbol("cuMemAlloc");
  /* optional: without them the heuristics choose */
  *(void **)&p_find[0] = dlsym(h, "cudnnFindConvolutionForwardAlgorithmEx");
  *(void **)&p_find[1] = dlsym(h, "cudnnFindConvolutionBackwardDataAlgorithmEx");
  *(void **)&p_find[2] = dlsym(h, "cudnnFindConvolutionBackwardFilterAlgorithmEx");
  *(void **)&p_mem_free = kl_cuda_driver_symbol("cuMemFree");
  *(void **)&p_memset8 = kl_cuda_driver_symbol("cuMemsetD8Async");
  *(void **)&p_stream_create = kl_cuda_driver_symbol("cuStreamCreate");
  *(void **)&p_stream_sync = kl_cuda_driver_symbol("cuStreamSynchronize");
  /* optional: without them the legacy entry points run every convolution */
  *(void **)&b_create = dlsym(h, "cudnnBackendCreateDescriptor");
  *(void **)&b_destroy = dlsym(h, "cudnnBackendDestroyDescriptor");
  *(void **)&b_set = dlsym(h, "cudnnBackendSetAttribute");
  *(void **)&b_get = dlsym(h, "cudnnBackendGetAttribute");
  *(void **)&b_finalize = dlsym(h, "cudnnBackendFinalize");
  *(void **)&b_execute = dlsym(h, "cudnnBackendExecute");
  if (!b_destroy || !b_set || !b_get || !b_finalize || !b_execute) b_create = NULL;
  ready = 1;
}
#undef SYM

int kl_cudnn_available(char *reason, size_t n) {
  pthread_mutex_lock(&mu);
  if (!tried && kl_cuda_available(NULL, 0)) open_cudnn();
  int ok = ready;
  pthread_mutex_unlock(&mu);
  if (!ok && reason) snprintf(reason, n, "%s", why[0] ? why : "no GPU");
  return ok;
}

const char *kl_cudnn_library(void) { return ready ? find.path : ""; }

/* "conv_bwd_data of x[8,56,56,64] w[64,3,3,64] y[8,56,56,64] float32 (groups 1)", for messages. */
static const char *describe(char *buf, size_t len, int kind, int dtype, const kl_conv_geom *g) {
  char s[3][80];
  for (int t = 0; t < 3; t++) {
    int at = snprintf(s[t], sizeof s[t], "[%lld", (long long)(t == 1 ? g->o : g->n));
    for (int i = 0; i < g->nd; i++)
      at += snprintf(s[t] + at, sizeof s[t] - (size_t)at, ",%lld", (long long)(t == 0 ? g->in[i] : t == 1 ? g->k[i] : g->out[i]));
    snprintf(s[t] + at, sizeof s[t] - (size_t)at, ",%lld]", (long long)(t == 0 ? g->c : t == 1 ? g->c / g->g : g->o));
  }
  snprintf(buf, len, "%s of x%.72s w%.72s y%.72s %s (groups %lld)", kind_names[kind], s[0], s[1], s[2],
           kl_dtype_name((kl_dtype)dtype), (long long)g->g);
  return buf;
}

static const char *status_name(int rc, char *buf, size_t len) {
  const char *s = p_error_string ? p_error_string(rc) : NULL;
  snprintf(buf, len, "%s (status %d)", s ? s : "cuDNN error", rc);
  return buf;
}

/* Frees a plan (caller holds mu; no graph being captured: kl_cuda_free would be captured). */
static void drop(plan *p) {
  if (p->x) p_destroy_tensor(p->x);
  if (p->y) p_destroy_tensor(p->y);
  if (p->w) p_destroy_filter(p->w);
  if (p->conv) p_destroy_conv(p->conv);
  if (p->bplan) b_destroy(p->bplan);
  for (int i = 0; i < 24; i++)
    if (p->bkeep[i]) b_destroy(p->bkeep[i]);
  if (p->work && !p->from_driver) kl_cuda_free(p->work, p->work_bytes);
  *p = plans[--nplans];
}

/* An NHWC tensor descriptor of (n, spatial..., c) as cuDNN's (n, c, spatial...) with strides;
 * sp has sd (2 or 3) entries. */
static int set_tensor(cudnnTensorDescriptor_t d, int dt, int64_t n, const int64_t *sp, int sd, int64_t c) {
  int dims[5], strides[5];
  dims[0] = (int)n, dims[1] = (int)c;
  for (int i = 0; i < sd; i++) dims[2 + i] = (int)sp[i];
  int64_t s = c;
  strides[1] = 1;
  for (int i = sd - 1; i >= 0; i--) {
    strides[2 + i] = (int)s;
    s *= sp[i];
  }
  strides[0] = (int)s;
  return p_set_tensor_nd(d, dt, sd + 2, dims, strides);
}

/* Runs cuDNN's own timing of every algorithm for p (descriptors made) over scratch operands of
 * its shapes, zeroed, with up to 256 MiB of work area, on a stream of its own, and returns the
 * results fastest first in perf (*found of them); -1 when it cannot (then the heuristics choose).
 * The real operands are never touched: under capture they are not written yet, and outside it
 * other work may still be using the memory a plan's outputs will take. KILN_CUDNN_FIND=0 skips
 * it (the heuristics' first choice, an A/B switch). */
static int measure_algo(const plan *p, void *const d[3], int64_t nelem[3], algo_perf *perf, int *found) {
  const char *env = getenv("KILN_CUDNN_FIND");
  if ((env && *env == '0') || !p_find[p->kind] || !p_mem_alloc || !p_mem_free || !p_memset8 || !p_stream_create ||
      !p_stream_sync)
    return -1;
  if (!find_stream && p_stream_create(&find_stream, 1 /* non-blocking */)) find_stream = NULL;
  if (!find_stream) return -1;
  size_t elt = p->dtype == KL_F64 ? 8 : p->dtype == KL_F32 ? 4 : 2;
  unsigned long long buf[3] = {0, 0, 0}, work = 0;
  size_t work_bytes = 256u << 20;
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++) {
    rc = p_mem_alloc(&buf[i], (size_t)nelem[i] * elt);
    if (!rc) rc = p_memset8(buf[i], 0, (size_t)nelem[i] * elt, find_stream);
  }
  while (!rc && work_bytes && p_mem_alloc(&work, work_bytes)) work_bytes >>= 2; /* less when memory is short */
  if (!work) work_bytes = 0;
  /* the buffers in cuDNN's order for this kind (d's): forward (x, w, y), backward data (w, dy,
   * dx), backward filter (x, dy, dw); buf is (x, w, y) */
  static const int order[3][3] = {{0, 1, 2}, {1, 2, 0}, {0, 2, 1}};
  const int *o = order[p->kind];
  if (!rc) rc = p_set_stream(handle, find_stream);
  if (!rc)
    rc = p_find[p->kind](handle, d[0], (void *)(uintptr_t)buf[o[0]], d[1], (void *)(uintptr_t)buf[o[1]], p->conv, d[2],
                         (void *)(uintptr_t)buf[o[2]], 16, found, perf, (void *)(uintptr_t)work, work_bytes);
  p_stream_sync(find_stream);
  for (int i = 0; i < 3; i++)
    if (buf[i]) p_mem_free(buf[i]);
  if (work) p_mem_free(work);
  return rc || *found < 1 ? -1 : 0;
}

/* g's spatial axes as cuDNN takes them (2 or 3: a 1-D convolution runs as 2-D over a leading
 * axis of extent 1), into the arrays given; returns their count. */
static int spatial(const kl_conv_geom *g, int64_t in[3], int64_t k[3], int64_t out[3], int pad[3], int stride[3],
                   int dil[3]) {
  int sd = g->nd < 2 ? 2 : g->nd, off = sd - g->nd;
  for (int i = 0; i < sd; i++) {
    int s = i - off, one = s < 0;
    in[i] = one ? 1 : g->in[s], k[i] = one ? 1 : g->k[s], out[i] = one ? 1 : g->out[s];
    pad[i] = one ? 0 : (int)g->lo[s], stride[i] = one ? 1 : (int)g->stride[s], dil[i] = one ? 1 : (int)g->dil[s];
  }
  return sd;
}

/* A finalized backend tensor descriptor of dims (n, c, sp...) laid out channels last (dims[1]'s
 * stride 1), or NULL. */
static void *b_tensor(int64_t uid, int dt, int64_t n, int64_t c, const int64_t *sp, int sd, int64_t align) {
  int64_t dims[5] = {n, c}, strides[5];
  for (int i = 0; i < sd; i++) dims[2 + i] = sp[i];
  int64_t s = c;
  strides[1] = 1;
  for (int i = sd - 1; i >= 0; i--) strides[2 + i] = s, s *= sp[i];
  strides[0] = s;
  void *d = NULL;
  if (b_create(BD_TENSOR, &d)) return NULL;
  if (b_set(d, BA_TENSOR_DATA_TYPE, BT_DATA_TYPE, 1, &dt) || b_set(d, BA_TENSOR_DIMS, BT_INT64, sd + 2, dims) ||
      b_set(d, BA_TENSOR_STRIDES, BT_INT64, sd + 2, strides) || b_set(d, BA_TENSOR_UID, BT_INT64, 1, &uid) ||
      b_set(d, BA_TENSOR_ALIGNMENT, BT_INT64, 1, &align) || b_finalize(d)) {
    b_destroy(d);
    return NULL;
  }
  return d;
}

/* Whether an engine configuration may run p: not one needing run-time compilation (seconds on
 * first use), and at precision HIGHEST on float32 none that rounds operands to TF32. */
static int engine_allowed(const plan *p, void *cfg) {
  static int rtc = -1;
  if (rtc < 0) rtc = getenv("KILN_CUDNN_RTC") && *getenv("KILN_CUDNN_RTC") == '1'; /* experiments */
  void *eng = NULL;
  int ok = 0;
  int64_t count = 0;
  if (b_create(BD_ENGINE, &eng)) return 0;
  if (!b_get(cfg, BA_CFG_ENGINE, BT_DESCRIPTOR, 1, &count, &eng) && count == 1) {
    int notes[32];
    ok = 1;
    if (!b_get(eng, BA_ENGINE_BEHAVIOR_NOTE, BT_BEHAVIOR_NOTE, 32, &count, notes))
      for (int i = 0; i < count; i++) ok &= rtc || notes[i] != NOTE_RUNTIME_COMPILATION;
    if (p->dtype == KL_F32 && p->precision >= 2 &&
        !b_get(eng, BA_ENGINE_NUMERICAL_NOTE, BT_NUMERICAL_NOTE, 32, &count, notes))
      for (int i = 0; i < count; i++) ok &= notes[i] != NOTE_TENSOR_CORE && notes[i] != NOTE_DOWN_CONVERT;
  }
  b_destroy(eng);
  return ok;
}

/* Runs plan bp once over the operands ptrs (x, w, y order) with work area w on the handle's
 * stream; 0 or cuDNN's status. */
static int b_run(void *bp, void *const ptrs[3], void *w) {
  static const int64_t uids[3] = {1, 2, 3};
  void *pack = NULL;
  int rc = b_create(BD_VARIANT_PACK, &pack);
  if (!rc) rc = b_set(pack, BA_PACK_UIDS, BT_INT64, 3, uids);
  if (!rc) rc = b_set(pack, BA_PACK_POINTERS, BT_VOID_PTR, 3, ptrs);
  if (!rc) rc = b_set(pack, BA_PACK_WORKSPACE, BT_VOID_PTR, 1, &w);
  if (!rc) rc = b_finalize(pack);
  if (!rc) rc = b_execute(handle, bp, pack);
  if (pack) b_destroy(pack);
  return rc;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Picks the fastest of the candidate plans cand[0..n) by running each over scratch operands of
 * p's shapes on a stream of its own (measure_algo's rules: the real operands are never touched);
 * returns its index, 0 (the heuristics' first) when it cannot measure. KILN_CUDNN_FIND=0 skips it. */
static int time_plans(const plan *p, void *const *cand, const int64_t *work, int n, const int64_t nelem[3],
                      double *times, int capturing) {
  const char *env = getenv("KILN_CUDNN_FIND");
  if (n < 2 || (env && *env == '0') || !p_mem_alloc || !p_mem_free || !p_memset8 || !p_stream_create || !p_stream_sync)
    return 0;
  if (!find_stream && p_stream_create(&find_stream, 1 /* non-blocking */)) find_stream = NULL;
  if (!find_stream) return 0;
  size_t elt = p->dtype == KL_F64 ? 8 : p->dtype == KL_F32 ? 4 : 2;
  unsigned long long buf[3] = {0, 0, 0}, wbuf = 0;
  int64_t most = 0;
  for (int i = 0; i < n; i++) most = work[i] > most ? work[i] : most;
  int rc = 0, best = 0;
  for (int i = 0; i < 3 && !rc; i++) {
    rc = p_mem_alloc(&buf[i], (size_t)nelem[i] * elt);
    if (!rc) rc = p_memset8(buf[i], 0, (size_t)nelem[i] * elt, find_stream);
  }
  if (!rc && most) rc = p_mem_alloc(&wbuf, (size_t)most);
  if (!rc) rc = p_set_stream(handle, find_stream);
  double best_t = 1e30;
  void *ptrs[3] = {(void *)(uintptr_t)buf[0], (void *)(uintptr_t)buf[1], (void *)(uintptr_t)buf[2]};
  /* the GPU idle first (work queued before this plan would slow the first candidates), unless a
   * graph is being captured; each candidate's best of 5 runs after one to warm up */
  if (!rc && !capturing) p_stream_sync(kl_cuda_stream());
  for (int i = 0; i < n && !rc; i++) {
    if (b_run(cand[i], ptrs, (void *)(uintptr_t)wbuf) || p_stream_sync(find_stream)) continue; /* warm up */
    double t = 1e30;
    for (int r = 0; r < 5; r++) {
      double t0 = now_s();
      if (b_run(cand[i], ptrs, (void *)(uintptr_t)wbuf) || p_stream_sync(find_stream)) {
        t = 1e30;
        break;
      }
      double dt = now_s() - t0;
      t = dt < t ? dt : t;
    }
    times[i] = t;
    if (t < best_t) best_t = t, best = i;
  }
  p_stream_sync(find_stream);
  for (int i = 0; i < 3; i++)
    if (buf[i]) p_mem_free(buf[i]);
  if (wbuf) p_mem_free(wbuf);
  return best;
}

/* Makes p's backend execution plan: the operation graph of its one convolution, the heuristics'
 * engine configurations (up to 8 that finalize and are allowed), the fastest of them measured;
 * its work area size in *work. -1 (nothing kept) when cuDNN refuses any step: the legacy entry
 * points run it then. KILN_CUDNN_BACKEND=0 always refuses (an A/B switch). */
static int make_backend(plan *p, size_t *work, int capturing) {
  const char *env = getenv("KILN_CUDNN_BACKEND");
  if ((env && *env == '0') || !b_create) return -1;
  const kl_conv_geom *g = &p->g;
  int64_t in[3], k[3], out[3], pre[3], post[3], strd[3], dil[3];
  int pad_i[3], stride_i[3], dil_i[3];
  int sd = spatial(g, in, k, out, pad_i, stride_i, dil_i);
  for (int i = 0; i < sd; i++) { /* the high padding the output's extent implies */
    pre[i] = pad_i[i], strd[i] = stride_i[i], dil[i] = dil_i[i];
    post[i] = (out[i] - 1) * strd[i] + dil[i] * (k[i] - 1) + 1 - in[i] - pre[i];
    if (post[i] < 0) post[i] = 0;
  }
  int dt = p->dtype == KL_F64 ? D_DOUBLE : p->dtype == KL_F16 ? D_HALF : p->dtype == KL_BF16 ? D_BFLOAT16 : D_FLOAT;
  int compute = p->dtype == KL_F64 ? D_DOUBLE : D_FLOAT, mode = CROSS_CORRELATION, heur = HEUR_A;
  int64_t align = p->align, sdims = sd;
  void *x = b_tensor(1, dt, g->n, g->c, in, sd, align), *w = b_tensor(2, dt, g->o, g->c / g->g, k, sd, align);
  void *y = b_tensor(3, dt, g->n, g->o, out, sd, align);
  void *conv = NULL, *op = NULL, *graph = NULL, *hr = NULL, *cfg[16] = {0}, *cand[8] = {0};
  int64_t cwork[8];
  int ncand = 0, rc = !x || !w || !y;
  if (!rc) rc = b_create(BD_CONVOLUTION, &conv);
  if (!rc)
    rc = b_set(conv, BA_CONV_SPATIAL_DIMS, BT_INT64, 1, &sdims) || b_set(conv, BA_CONV_COMP_TYPE, BT_DATA_TYPE, 1, &compute) ||
         b_set(conv, BA_CONV_MODE, BT_CONV_MODE, 1, &mode) || b_set(conv, BA_CONV_DILATIONS, BT_INT64, sd, dil) ||
         b_set(conv, BA_CONV_STRIDES, BT_INT64, sd, strd) || b_set(conv, BA_CONV_PRE_PAD, BT_INT64, sd, pre) ||
         b_set(conv, BA_CONV_POST_PAD, BT_INT64, sd, post) || b_finalize(conv);
  const int *a = op_attr[p->kind];
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  int st = p->dtype == KL_F64 ? BT_DOUBLE : BT_FLOAT;
  if (!rc) rc = b_create(op_type[p->kind], &op);
  if (!rc)
    rc = b_set(op, a[0], st, 1, st == BT_DOUBLE ? (const void *)&one_d : (const void *)&one_f) ||
         b_set(op, a[1], st, 1, st == BT_DOUBLE ? (const void *)&zero_d : (const void *)&zero_f) ||
         b_set(op, a[2], BT_DESCRIPTOR, 1, &conv) || b_set(op, a[3], BT_DESCRIPTOR, 1, &x) ||
         b_set(op, a[4], BT_DESCRIPTOR, 1, &w) || b_set(op, a[5], BT_DESCRIPTOR, 1, &y) || b_finalize(op);
  if (!rc) rc = b_create(BD_OPGRAPH, &graph);
  if (!rc)
    rc = b_set(graph, BA_GRAPH_HANDLE, BT_HANDLE, 1, &handle) || b_set(graph, BA_GRAPH_OPS, BT_DESCRIPTOR, 1, &op) ||
         b_finalize(graph);
  if (!rc) rc = b_create(BD_ENGINEHEUR, &hr);
  if (!rc)
    rc = b_set(hr, BA_HEUR_GRAPH, BT_DESCRIPTOR, 1, &graph) || b_set(hr, BA_HEUR_MODE, BT_HEUR_MODE, 1, &heur) ||
         b_finalize(hr);
  int64_t ncfg = 0;
  for (int i = 0; !rc && i < 16; i++) rc = b_create(BD_ENGINECFG, &cfg[i]);
  if (!rc) rc = b_get(hr, BA_HEUR_RESULTS, BT_DESCRIPTOR, 16, &ncfg, cfg);
  static int most = -1;
  if (most < 0) most = getenv("KILN_CUDNN_CANDIDATES") && atoi(getenv("KILN_CUDNN_CANDIDATES")) > 0 ? atoi(getenv("KILN_CUDNN_CANDIDATES")) : 8;
  if (most > 8) most = 8;
  for (int i = 0; !rc && i < ncfg && i < 16 && ncand < most; i++) {
    void *bp = NULL;
    if (!engine_allowed(p, cfg[i]) || b_create(BD_PLAN, &bp)) continue;
    int64_t ws = 0, got = 0;
    if (b_set(bp, BA_PLAN_HANDLE, BT_HANDLE, 1, &handle) || b_set(bp, BA_PLAN_CFG, BT_DESCRIPTOR, 1, &cfg[i]) ||
        b_finalize(bp) || b_get(bp, BA_PLAN_WORKSPACE, BT_INT64, 1, &got, &ws) || ws > (int64_t)(256u << 20)) {
      b_destroy(bp);
      continue;
    }
    cand[ncand] = bp, cwork[ncand++] = ws;
  }
  if (!rc && ncand) {
    int64_t nelem[3] = {g->n * g->c, (g->c / g->g) * g->o, g->n * g->o}; /* x, w, y */
    for (int i = 0; i < g->nd; i++) nelem[0] *= g->in[i], nelem[1] *= g->k[i], nelem[2] *= g->out[i];
    double times[8] = {0};
    int best = time_plans(p, cand, cwork, ncand, nelem, times, capturing);
    p->bplan = cand[best], cand[best] = NULL;
    *work = (size_t)cwork[best];
    if (getenv("KILN_LOG_COMPILES")) { /* the library's choice, visible as kernel choices are */
      char shape[320];
      fprintf(stderr, "kiln: cuDNN %s: backend engine config %d of %d (heuristics order), work area %lld bytes; "
              "measured (us):", describe(shape, sizeof shape, p->kind, p->dtype, g), best + 1, ncand, (long long)*work);
      for (int i = 0; i < ncand; i++) fprintf(stderr, " %.1f", times[i] < 1 ? times[i] * 1e6 : -1.0);
      fprintf(stderr, "\n");
    }
  }
  for (int i = 0; i < ncand; i++)
    if (cand[i]) b_destroy(cand[i]);
  void *all[23] = {hr, graph, op, conv, x, w, y}; /* kept with the plan (cuDNN may refer to them), else freed */
  memcpy(all + 7, cfg, sizeof cfg);
  for (int i = 0; i < 23; i++)
    if (p->bplan) p->bkeep[i] = all[i];
    else if (all[i]) b_destroy(all[i]);
  return p->bplan ? 0 : -1;
}

/* Makes p's descriptors, algorithm and work area (its key filled in). cuDNN needs 2 or 3
 * spatial axes: a 1-D convolution runs as 2-D over a leading axis of extent 1. Under capture the
 * thread's capture mode is relaxed while cuDNN plans, and the work area comes from cuMemAlloc
 * (as runtime/cufft.c does): the plan is pinned by the caller. */
static int make_plan(plan *p, int capturing, char *err, size_t errlen) {
  char shape[320], code[96];
  const kl_conv_geom *g = &p->g;
  int64_t in[3], k[3], out[3];
  int pad[3], stride[3], dil[3];
  int sd = spatial(g, in, k, out, pad, stride, dil);
  int dt = p->dtype == KL_F64 ? D_DOUBLE : p->dtype == KL_F16 ? D_HALF : p->dtype == KL_BF16 ? D_BFLOAT16 : D_FLOAT;
  int compute = p->dtype == KL_F64 ? D_DOUBLE : D_FLOAT; /* half types accumulate in float32 */
  int half = p->dtype == KL_F16 || p->dtype == KL_BF16;
  /* float32 may use TF32 tensor cores unless precision is HIGHEST (runtime/cublas.c's rule) */
  int math = half ? M_TENSOR_OP : (p->dtype == KL_F64 || p->precision >= 2) ? M_FMA : M_DEFAULT;
  int mode = CAPTURE_RELAXED, relaxed = capturing && p_exchange_capture_mode && !p_exchange_capture_mode(&mode);
  int rc = 0, step = 0;
  const char *what = "descriptors";
  if (!handle) {
    what = "cudnnCreate";
    rc = p_create(&handle);
  }
  size_t work = 0;
  if (!rc && !make_backend(p, &work, capturing)) goto work_area; /* else the legacy entry points */
  if (!rc) rc = p_create_tensor(&p->x);
  if (!rc) rc = p_create_tensor(&p->y);
  if (!rc) rc = p_create_filter(&p->w);
  if (!rc) rc = p_create_conv(&p->conv);
  if (!rc) rc = set_tensor(p->x, dt, g->n, in, sd, g->c);
  if (!rc) rc = set_tensor(p->y, dt, g->n, out, sd, g->o);
  if (!rc) {
    int fd[5] = {(int)g->o, (int)(g->c / g->g)};
    for (int i = 0; i < sd; i++) fd[2 + i] = (int)k[i];
    rc = p_set_filter_nd(p->w, dt, F_NHWC, sd + 2, fd);
  }
  if (!rc) rc = p_set_conv_nd(p->conv, sd, pad, stride, dil, CROSS_CORRELATION, compute);
  if (!rc) rc = p_set_group_count(p->conv, (int)g->g);
  if (!rc) rc = p_set_math_type(p->conv, math);
  /* the fastest workable algorithm as cuDNN measures it over scratch operands (measure_algo),
   * or the heuristics' first workable choice; descriptor order: forward (x, w, conv, y), backward data (w, y, conv, x),
   * backward filter (x, y, conv, w) */
  void *d[3][3] = {{p->x, p->w, p->y}, {p->w, p->y, p->x}, {p->x, p->y, p->w}};
  algo_perf perf[16];
  int found = 0;
  int64_t nelem[3] = {g->n * g->c, (g->c / g->g) * g->o, g->n * g->o}; /* x, w, y */
  for (int i = 0; i < g->nd; i++) nelem[0] *= g->in[i], nelem[1] *= g->k[i], nelem[2] *= g->out[i];
  int pick = -1;
  for (int round = 0; round < 2 && !rc && pick < 0; round++) { /* measured, then the heuristics */
    found = 0;
    if (round == 0 && measure_algo(p, d[p->kind], nelem, perf, &found)) continue;
    if (round == 1) {
      what = "the algorithm heuristics";
      step = 1;
      rc = p_get_algo[p->kind](handle, d[p->kind][0], d[p->kind][1], p->conv, d[p->kind][2], 16, &found, perf);
    }
    for (int i = 0; !rc && i < found && pick < 0; i++)
      if (perf[i].status == 0 && (math != M_FMA || perf[i].mathType == M_FMA || perf[i].mathType == M_DEFAULT)) pick = i;
  }
  if (!rc && pick < 0) {
    if (relaxed) p_exchange_capture_mode(&mode);
    describe(shape, sizeof shape, p->kind, p->dtype, g);
    return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "cuDNN: no algorithm for %s (KILN_CUDNN=0 runs it on the host)", shape);
  }
  if (!rc) {
    p->algo = perf[pick].algo;
    if (math != M_FMA) rc = p_set_math_type(p->conv, perf[pick].mathType); /* the math the algorithm was rated with */
  }
  if (!rc) {
    what = "the work area size";
    rc = p_work_size[p->kind](handle, d[p->kind][0], d[p->kind][1], p->conv, d[p->kind][2], p->algo, &work);
  }
work_area:;
  int failed_alloc = 0;
  char aerr[256] = "";
  if (!rc && work) {
    p->work_bytes = (work + 255) & ~(size_t)255;
    p->from_driver = capturing;
    if (capturing) {
      unsigned long long dptr = 0;
      failed_alloc = !p_mem_alloc || p_mem_alloc(&dptr, p->work_bytes);
      if (failed_alloc) snprintf(aerr, sizeof aerr, "cuMemAlloc of %zu bytes failed", p->work_bytes);
      p->work = (void *)(uintptr_t)dptr;
    } else {
      failed_alloc = kl_cuda_alloc(p->work_bytes, &p->work, aerr, sizeof aerr) != 0;
    }
  }
  if (relaxed) p_exchange_capture_mode(&mode);
  if (rc || failed_alloc) {
    describe(shape, sizeof shape, p->kind, p->dtype, g);
    if (p->x) p_destroy_tensor(p->x);
    if (p->y) p_destroy_tensor(p->y);
    if (p->w) p_destroy_filter(p->w);
    if (p->conv) p_destroy_conv(p->conv);
    if (p->bplan) b_destroy(p->bplan);
    for (int i = 0; i < 24; i++)
      if (p->bkeep[i]) b_destroy(p->bkeep[i]);
    if (failed_alloc) return kl_error(err, errlen, KL_ERR_NOMEM, "cuDNN: work area for %s: %s", shape, aerr);
    return kl_error(err, errlen, step ? KL_ERR_UNSUPPORTED : KL_ERR_INTERNAL, "cuDNN: %s for %s failed: %s", what,
                    shape, status_name(rc, code, sizeof code));
  }
  return 0;
}

static int same_key(const plan *p, int kind, int dtype, int precision, int align, const kl_conv_geom *g) {
  return p->kind == kind && p->dtype == dtype && p->precision == precision && p->align == align &&
         !memcmp(&p->g, g, sizeof *g);
}

/* The cached plan for a key, made if missing (caller holds mu); NULL with a message. */
static plan *find_plan(int kind, int dtype, int precision, int align, const kl_conv_geom *g, int capturing,
                       char *err, size_t errlen) {
  for (int i = 0; i < nplans; i++)
    if (same_key(&plans[i], kind, dtype, precision, align, g)) {
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
    char shape[320];
    kl_error(err, errlen, KL_ERR_UNSUPPORTED, "cuDNN: no room for a plan for %s: %d convolution shapes in use by "
             "captured graphs", describe(shape, sizeof shape, kind, dtype, g), MAX_PLANS);
    return NULL;
  }
  plan key = {.kind = kind, .dtype = dtype, .precision = precision, .align = align, .g = *g};
  if (make_plan(&key, capturing, err, errlen)) return NULL;
  key.last_used = ++clock_now;
  plans[nplans] = key;
  return &plans[nplans++];
}

int kl_cudnn_conv(int kind, kl_dtype t, int precision, const kl_conv_geom *geom, const void *a, const void *b, void *out,
                  char *err, size_t errlen) {
  char shape[320], code[96];
  if (kind < 0 || kind > 2 || geom->nd < 1 || geom->nd > 3 || geom->g < 1)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "internal error: cuDNN convolution kind %d, rank %d", kind, geom->nd);
  if (t != KL_F32 && t != KL_F64 && t != KL_F16 && t != KL_BF16)
    return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "cuDNN: %s takes floating operands, got %s", kind_names[kind],
                    kl_dtype_name(t));
  kl_conv_geom g = {.nd = geom->nd, .n = geom->n, .c = geom->c, .o = geom->o, .g = geom->g};
  int64_t elems = 1; /* cuDNN's descriptors take int dims and strides */
  for (int i = 0; i < geom->nd; i++) {
    g.in[i] = geom->in[i], g.k[i] = geom->k[i], g.out[i] = geom->out[i];
    g.stride[i] = geom->stride[i], g.lo[i] = geom->lo[i], g.dil[i] = geom->dil[i];
    elems *= geom->in[i] > geom->out[i] ? geom->in[i] : geom->out[i];
  }
  elems *= (geom->c > geom->o ? geom->c : geom->o) * geom->n;
  if (elems > INT32_MAX)
    return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "cuDNN: %s has more than 2^31 elements in one tensor",
                    describe(shape, sizeof shape, kind, t, &g));
  if (!kl_cudnn_available(err, errlen)) return -1;
  if (g.n == 0 || g.c == 0 || g.o == 0) { /* nothing to sum: zeros (cuDNN refuses empty tensors) */
    int64_t count = kind == 0 ? g.n * g.o : kind == 1 ? g.n * g.c : g.o * (g.c / g.g);
    for (int i = 0; i < g.nd; i++) count *= kind == 0 ? g.out[i] : kind == 1 ? g.in[i] : g.k[i];
    return kl_cuda_memset0(out, (size_t)count * (t == KL_F64 ? 8 : t == KL_F32 ? 4 : 2));
  }
  void *q = kl_cuda_queue_stream(), *stream = q ? q : kl_cuda_stream();
  int capturing = kl_cuda_capturing() || stream != kl_cuda_stream();
  uintptr_t bits = (uintptr_t)a | (uintptr_t)b | (uintptr_t)out;
  int align = 1;
  while (align < ALIGN && !(bits & (uintptr_t)align)) align <<= 1;
  pthread_mutex_lock(&mu);
  plan *p = find_plan(kind, t, precision >= 2 ? 2 : 0, align, &g, capturing, err, errlen);
  if (!p) {
    pthread_mutex_unlock(&mu);
    return -1;
  }
  if (capturing) p->pinned = 1; /* the graph holds the work area from now on */
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const void *alpha = t == KL_F64 ? (const void *)&one_d : (const void *)&one_f;
  const void *beta = t == KL_F64 ? (const void *)&zero_d : (const void *)&zero_f;
  /* operands in cuDNN's order: forward (x, w) -> y; backward data (w, dy) -> dx; backward filter
   * (x, dy) -> dw. kiln's: forward (x, w), backward data (dy, w), backward filter (x, dy). */
  void *da[3] = {p->x, p->w, p->x}, *db[3] = {p->w, p->y, p->y}, *dout[3] = {p->y, p->x, p->w};
  const void *pa = kind == 1 ? b : a, *pb = kind == 1 ? a : b;
  int rc = p_set_stream(handle, stream);
  uint64_t t0 = kl_prof_begin();
  static const char *const legacy[3] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                        "cudnnConvolutionBackwardFilter"};
  if (!rc && p->bplan) { /* the backend plan's operands in (x, w, y) order */
    void *ptrs[3][3] = {{(void *)a, (void *)b, out}, {out, (void *)b, (void *)a}, {(void *)a, out, (void *)b}};
    rc = b_run(p->bplan, ptrs[kind], p->work);
  } else if (!rc)
    rc = p_run[kind](handle, alpha, da[kind], pa, db[kind], pb, p->conv, p->algo, p->work, p->work_bytes, beta,
                     dout[kind], out);
  KL_PROF_END(t0, "library", p->bplan ? "cudnnBackendExecute" : legacy[kind], "\"call\": \"%s\"",
               describe(shape, sizeof shape, kind, t, &g));
  pthread_mutex_unlock(&mu);
  if (rc)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "cuDNN: %s failed: %s", describe(shape, sizeof shape, kind, t, &g),
                    status_name(rc, code, sizeof code));
  return 0;
}
