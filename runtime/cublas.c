/* cublas.c: matrix products on the GPU through cuBLAS, opened at run time (libcublas.so.13 or
 * .12 from the system, CUDA_HOME, /usr/local/cuda, or paths python/ registers such as the
 * nvidia-cublas wheel). One handle on kiln's stream. Knows nothing of the IR beyond dtypes, and
 * reaches the GPU only through runtime/cuda.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/status.h"
#include "cuda.h"
#include "libfind.h"
#include "profile.h"

typedef void *cublasHandle_t;
enum { OP_N = 0, OP_T = 1, R_32F = 0, R_64F = 1, R_16F = 2, R_16BF = 14, COMPUTE_32F = 68, COMPUTE_64F = 70,
       COMPUTE_32F_FAST_TF32 = 77, GEMM_DEFAULT = -1 };

static int (*p_create)(cublasHandle_t *);
static int (*p_set_stream)(cublasHandle_t, void *);
static int (*p_gemm)(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int, long long,
                     const void *, int, int, long long, const void *, void *, int, int, long long, int, int, int);

static int (*p_sgeam)(cublasHandle_t, int, int, int, int, const float *, const float *, int, const float *,
                      const float *, int, float *, int);
static int (*p_dgeam)(cublasHandle_t, int, int, int, int, const double *, const double *, int, const double *,
                      const double *, int, double *, int);
static int (*p_sscal)(cublasHandle_t, int, const float *, float *, int);
static int (*p_dscal)(cublasHandle_t, int, const double *, double *, int);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* opening the library */
static int tried, ready;
static char why[512];
#define WORKSPACE_BYTES ((size_t)32 << 20)
static int (*p_set_ws)(cublasHandle_t, void *, size_t);
static int (*p_set_sms)(cublasHandle_t, int);
static kl_libfind find = KL_LIBFIND_INIT; /* registered candidates, the path opened */
static void *lib; /* the dlopen handle, for kl_cublas_symbol */
/* A handle and workspace (cuBLAS's, for the life of the process) per GPU: a handle belongs to the
 * context it was made in. Calls on one GPU are serialized by its lock (they only enqueue work);
 * the participants of a launch over several GPUs call at once. */
typedef struct {
  cublasHandle_t h;
  void *ws;
  int sm_target; /* what cublasSetSmCountTarget was last given (0: every multiprocessor) */
} gpu_handle;
static gpu_handle gpus[KL_CUDA_MAX_GPUS];
static pthread_mutex_t gpu_mu[KL_CUDA_MAX_GPUS];

int kl_cublas_add_search_path(const char *path) {
  return kl_libfind_add(&find, path);
}

static void *try_open(const char *path) { return kl_libfind_open(&find, path); }

static void open_cublas(void) {
  tried = 1;
  void *h = NULL;
  const char *env = getenv("KILN_CUBLAS_LIB");
  if (env && *env) h = try_open(env);
  const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
  for (int i = 0; !h && i < 3; i++) h = try_open(names[i]);
  const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  for (int i = 0; !h && i < 3; i++) {
    if (!homes[i] || !*homes[i]) continue;
    for (int v = 13; !h && v >= 12; v--) {
      char p[600];
      snprintf(p, sizeof p, "%s/lib64/libcublas.so.%d", homes[i], v);
      h = try_open(p);
    }
  }
  for (int i = 0; !h && i < find.nextra; i++) h = try_open(find.extra[i]);
  if (!h) {
    snprintf(why, sizeof why, "cuBLAS not found (tried libcublas.so.13/.12, $CUDA_HOME, /usr/local/cuda and the "
                              "nvidia-cublas wheel; set KILN_CUBLAS_LIB to its path)");
    return;
  }
  lib = h;
  *(void **)&p_create = dlsym(h, "cublasCreate_v2");
  *(void **)&p_set_stream = dlsym(h, "cublasSetStream_v2");
  *(void **)&p_gemm = dlsym(h, "cublasGemmStridedBatchedEx");
  *(void **)&p_sgeam = dlsym(h, "cublasSgeam"); /* optional: transposes for TN products */
  *(void **)&p_dgeam = dlsym(h, "cublasDgeam");
  *(void **)&p_sscal = dlsym(h, "cublasSscal_v2"); /* optional: kl_cublas_scal (cuFFT's inverses) */
  *(void **)&p_dscal = dlsym(h, "cublasDscal_v2");
  if (!p_create || !p_set_stream || !p_gemm) {
    snprintf(why, sizeof why, "%.400s lacks the cuBLAS functions kiln needs", find.path);
    return;
  }
  *(void **)&p_set_ws = dlsym(h, "cublasSetWorkspace_v2");
  *(void **)&p_set_sms = dlsym(h, "cublasSetSmCountTarget"); /* optional: room for a collective beside a product */
  for (int g = 0; g < KL_CUDA_MAX_GPUS; g++) pthread_mutex_init(&gpu_mu[g], NULL);
  cublasHandle_t probe;
  int rc = p_create(&probe); /* (the first GPU's handle is made here, to say why when it cannot be) */
  if (!rc) rc = p_set_stream(probe, kl_cuda_stream());
  if (rc) {
    snprintf(why, sizeof why, "cublasCreate failed (status %d)", rc);
    return;
  }
  gpus[kl_cuda_ordinal()].h = probe;
  /* a workspace of its own (NVIDIA's size for Hopper): without one cuBLAS allocates under stream
   * capture, which a loop body captured into a conditional graph node may not do */
  gpu_handle *H = &gpus[kl_cuda_ordinal()];
  char werr[256];
  if (p_set_ws && !kl_cuda_alloc(WORKSPACE_BYTES, &H->ws, werr, sizeof werr) && p_set_ws(H->h, H->ws, WORKSPACE_BYTES)) {
    kl_cuda_free(H->ws, WORKSPACE_BYTES);
    H->ws = NULL;
  }
  ready = 1;
}

/* The calling thread's GPU's handle and workspace, its lock held (made on first use there), or
 * NULL with *status cuBLAS's (the lock not held). */
static gpu_handle *lock_gpu(int *status) {
  int g = kl_cuda_ordinal();
  gpu_handle *H = &gpus[g];
  pthread_mutex_lock(&gpu_mu[g]);
  if (!H->h) {
    void *s = kl_cuda_stream(); /* (makes the GPU's context current) */
    int rc = p_create(&H->h);
    if (!rc) rc = p_set_stream(H->h, s);
    if (rc) {
      H->h = NULL;
      pthread_mutex_unlock(&gpu_mu[g]);
      *status = rc;
      return NULL;
    }
    char werr[256];
    if (p_set_ws && !kl_cuda_alloc(WORKSPACE_BYTES, &H->ws, werr, sizeof werr) && p_set_ws(H->h, H->ws, WORKSPACE_BYTES)) {
      kl_cuda_free(H->ws, WORKSPACE_BYTES);
      H->ws = NULL;
    }
  }
  return H;
}

static void unlock_gpu(gpu_handle *H) { pthread_mutex_unlock(&gpu_mu[H - gpus]); }

int kl_cublas_available(char *reason, size_t n) {
  pthread_mutex_lock(&mu);
  if (!tried && kl_cuda_available(NULL, 0)) open_cublas();
  int ok = ready;
  pthread_mutex_unlock(&mu);
  if (!ok && reason) snprintf(reason, n, "%s", why[0] ? why : "no GPU");
  return ok;
}

const char *kl_cublas_library(void) { return ready ? find.path : ""; }

/* Points H's handle at stream s (cuBLAS then forgets a workspace given before: given again). */
static int handle_to(gpu_handle *H, void *s) {
  int rc = p_set_stream(H->h, s);
  if (!rc && H->ws) rc = p_set_ws(H->h, H->ws, WORKSPACE_BYTES);
  return rc;
}

/* Whether a TN product is worth transposing A first (KILN_GPU_TN_TRANSPOSE=0 turns it off). */
static int tn_transposes(kl_dtype t, int64_t m, int64_t n, int64_t k) {
  static int enabled = -1;
  if (enabled < 0) {
    const char *e = getenv("KILN_GPU_TN_TRANSPOSE");
    enabled = !(e && *e == '0');
  }
  if (!enabled || (t == KL_F32 ? !p_sgeam : t == KL_F64 ? !p_dgeam : 1)) return 0;
  return m >= 256 && n >= 256 && k >= 256 && (double)m * n * k >= (double)(1 << 30);
}

/* Row-major C[b] (m x n) = A[b] (m x k, or k x m when transl) . B[b] (k x n, or n x k when transr),
 * as cuBLAS's column-major C^T = B^T . A^T. precision: 0/1 may use TF32, 2 is full float32. */
int kl_cublas_gemm(kl_dtype t, kl_dtype ot, int precision, int64_t batch, int64_t m, int64_t n, int64_t k, const void *a, int transl,
                   const void *b, int transr, void *c, char *err, size_t errlen) {
  if (!kl_cublas_available(err, errlen)) return -1;
  if (m > 0x7fffffff || n > 0x7fffffff || k > 0x7fffffff || batch > 0x7fffffff) {
    snprintf(err, errlen, "dot_general: matrix dimensions (%lld, %lld, %lld) exceed cuBLAS's int range", (long long)m,
             (long long)n, (long long)k);
    return -1;
  }
  int dt, ct;
  if (t == KL_F32) dt = R_32F, ct = precision >= 2 ? COMPUTE_32F : COMPUTE_32F_FAST_TF32;
  else if (t == KL_F64) dt = R_64F, ct = COMPUTE_64F;
  else if (t == KL_F16) dt = R_16F, ct = COMPUTE_32F;
  else if (t == KL_BF16) dt = R_16BF, ct = COMPUTE_32F;
  else {
    snprintf(err, errlen, "internal error: cuBLAS gemm on %s", kl_dtype_name(t));
    return -1;
  }
  int odt = dt; /* C's type: A's, or float32 from float16/bfloat16 (accumulated in float32) */
  if (ot != t) {
    if (!((t == KL_F16 || t == KL_BF16) && ot == KL_F32)) {
      snprintf(err, errlen, "internal error: cuBLAS gemm of %s into %s", kl_dtype_name(t), kl_dtype_name(ot));
      return -1;
    }
    odt = R_32F;
  }
  double one64 = 1.0, zero64 = 0.0;
  float one32 = 1.0f, zero32 = 0.0f;
  const void *alpha = t == KL_F64 ? (const void *)&one64 : (const void *)&one32;
  const void *beta = t == KL_F64 ? (const void *)&zero64 : (const void *)&zero32;
  if (m == 0 || n == 0) return 0;
  if (k == 0) return kl_cuda_memset0(c, (size_t)(batch * m * n) * kl_dtype_size(ot));
  int status = 0;
  gpu_handle *H = lock_gpu(&status);
  if (!H) return kl_error(err, errlen, KL_ERR_INTERNAL, "cuBLAS: no handle on GPU %d (status %d)", kl_cuda_ordinal(), status);
  cublasHandle_t handle = H->h;
  /* a branch being captured into a conditional node queues on a stream of its own */
  void *q = kl_cuda_queue_stream();
  int moved = q && q != kl_cuda_stream();
  if (moved && handle_to(H, q)) {
    unlock_gpu(H);
    return kl_error(err, errlen, KL_ERR_INTERNAL, "cuBLAS could not queue a product on a branch's stream");
  }
  void *at = NULL;
  size_t at_bytes = 0;
  if (transl && !transr && batch == 1 && !moved && !kl_cuda_capturing() && tn_transposes(t, m, n, k)) {
    /* Large products contracting the leading axis of both operands (weight gradients) run much
     * slower in cuBLAS than the same product with the left operand transposed first (H100, TF32:
     * 551 us against 376 + a 50 us transpose for 4096^3), so transpose A into a temporary. */
    char aerr[256];
    at_bytes = (size_t)(m * k) * kl_dtype_size(t);
    if (!kl_cuda_alloc(at_bytes, &at, aerr, sizeof aerr)) {
      int grc = t == KL_F32 ? p_sgeam(handle, OP_T, OP_N, (int)k, (int)m, &one32, a, (int)m, &zero32, at, (int)k, at, (int)k)
                            : p_dgeam(handle, OP_T, OP_N, (int)k, (int)m, &one64, a, (int)m, &zero64, at, (int)k, at, (int)k);
      if (grc) {
        kl_cuda_free(at, at_bytes);
        at = NULL;
      } else {
        a = at;
        transl = 0;
      }
    }
  }
  int sms = kl_cuda_gemm_sm_target();
  if (p_set_sms && sms != H->sm_target && !p_set_sms(handle, sms)) H->sm_target = sms;
  uint64_t t0 = kl_prof_begin();
  int rc = p_gemm(handle, transr ? OP_T : OP_N, transl ? OP_T : OP_N, (int)n, (int)m, (int)k, alpha, b, dt,
                  (int)(transr ? k : n), (long long)(k * n), a, dt, (int)(transl ? m : k), (long long)(m * k), beta, c, odt,
                  (int)n, (long long)(m * n), (int)batch, ct, GEMM_DEFAULT);
  KL_PROF_END(t0, "library", "cublasGemmStridedBatchedEx", "\"m\": %lld, \"n\": %lld, \"k\": %lld, \"batch\": %lld, "
               "\"dtype\": \"%s\"", (long long)m, (long long)n, (long long)k, (long long)batch, kl_dtype_name(t));
  if (at) kl_cuda_free(at, at_bytes); /* in stream order: after the product */
  if (moved) handle_to(H, kl_cuda_stream());
  unlock_gpu(H);
  if (rc) {
    snprintf(err, errlen, "cuBLAS gemm (%lld x %lld x %lld, batch %lld) failed with status %d", (long long)m, (long long)n,
             (long long)k, (long long)batch, rc);
    return -1;
  }
  return 0;
}

/* x[0..n) *= alpha in place on kiln's stream, float32 (dbl 0) or float64 (dbl 1) elements
 * (complex data as 2n reals); in pieces where n exceeds cuBLAS's int range. */
int kl_cublas_scal(int dbl, int64_t n, double alpha, void *x, char *err, size_t errlen) {
  if (!kl_cublas_available(err, errlen)) return -1;
  if (dbl ? !p_dscal : !p_sscal)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "%.400s lacks cublas%cscal", find.path, dbl ? 'D' : 'S');
  if (n <= 0) return 0;
  float alpha32 = (float)alpha;
  const int64_t piece = (int64_t)1 << 30;
  void *q = kl_cuda_queue_stream();
  int moved = q && q != kl_cuda_stream(), rc = 0;
  gpu_handle *H = lock_gpu(&rc);
  if (H && moved) rc = handle_to(H, q);
  uint64_t t0 = kl_prof_begin();
  for (int64_t at = 0; H && !rc && at < n; at += piece) {
    int len = (int)(n - at < piece ? n - at : piece);
    rc = dbl ? p_dscal(H->h, len, &alpha, (double *)x + at, 1) : p_sscal(H->h, len, &alpha32, (float *)x + at, 1);
  }
  KL_PROF_END(t0, "library", dbl ? "cublasDscal" : "cublasSscal", "\"n\": %lld", (long long)n);
  if (H && moved) handle_to(H, kl_cuda_stream());
  if (H) unlock_gpu(H);
  if (rc)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "cuBLAS scal of %lld %s failed with status %d", (long long)n,
                    dbl ? "float64" : "float32", rc);
  return 0;
}

void *kl_cublas_symbol(const char *name) { return kl_cublas_available(NULL, 0) ? dlsym(lib, name) : NULL; }

/* The handle lent to runtime/cusolver.c for its batched cuBLAS routines: fn(handle, ctx) runs
 * under the GPU's lock with the handle on the stream this thread queues to (a branch's, when one is captured),
 * its workspace kept. */
int kl_cublas_with_handle(int (*fn)(void *handle, void *ctx), void *ctx, char *err, size_t errlen) {
  if (!kl_cublas_available(err, errlen)) return -1;
  void *q = kl_cuda_queue_stream();
  int moved = q && q != kl_cuda_stream(), rc = 0;
  gpu_handle *H = lock_gpu(&rc);
  if (!H) return rc ? rc : -1;
  if (moved) rc = handle_to(H, q);
  if (!rc) rc = fn(H->h, ctx);
  if (moved) handle_to(H, kl_cuda_stream());
  unlock_gpu(H);
  return rc;
}
