/* cusolver.c: cholesky, lu, qr, eigh, svd and triangular solves on the GPU (see cusolver.h)
 * through cuSOLVER, opened at run time (libcusolver.so.12 or .11 from the system, CUDA_HOME,
 * /usr/local/cuda, or paths registered for the nvidia-cusolver wheel; KILN_CUSOLVER_LIB wins),
 * and cuBLAS's trsm and getrfBatched (runtime/cublas.c lends its handle). One cuSOLVER handle,
 * pointed at the stream this thread queues to before each call; work areas cached per shape;
 * the small kernels around the routines are cusolver_ptx.c's. Knows nothing of the IR, and
 * reaches the GPU only through runtime/cuda.h.
 *
 * Layouts. kiln's buffers are row-major, LAPACK's column-major: a row-major buffer read
 * column-major is the transpose. The tricks are lapack.c's, with the same outputs: cholesky and
 * eigh factor the transposed view in place (symmetric/Hermitian: only a triangle is read), the
 * triangular solve swaps sides, svd factors a^T (gesvd needs rows >= columns, so a is transposed
 * first when it is wider than tall), lu and qr work on transposed copies. Transposes and
 * conjugations are kl_sol_strided launches.
 *
 * Failures. devInfo is never read back (a synchronous round trip): kl_sol_fix turns a nonzero
 * info into NaN in the step's results, on the device, as the host routines do (cholesky of a
 * matrix that is not positive definite, eigh and svd that do not converge). lu's info > 0
 * (an exactly singular U) is a result, as on the host. Arguments are checked here before any
 * call, so cuSOLVER's info < 0 (a rejected argument) can only come from NaN input, which the
 * host routines also answer with NaN. */
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
#include "cusolver.h"

typedef void *solver_handle;
enum { FILL_LOWER = 0, FILL_UPPER = 1, EIG_NOVECTOR = 0, EIG_VECTOR = 1, SIDE_LEFT = 0, SIDE_RIGHT = 1, OP_N = 0,
       OP_T = 1, OP_C = 2, DIAG_NON_UNIT = 0, DIAG_UNIT = 1, CAPTURE_RELAXED = 2 };

/* ------------------------------------------------------------------ routines */

/* cuSOLVER's routines, the second index of fn[][] (the first is the precision: 0 S, 1 D, 2 C,
 * 3 Z; bit 0 double, bit 1 complex). names: [real, complex]; sized: has a _bufferSize query. */
enum { R_POTRF, R_POTRF_BATCHED, R_GETRF, R_GEQRF, R_ORGQR, R_SYEVD, R_SYEVJ_BATCHED, R_GESVD, R_GESVDJ_BATCHED,
       R_COUNT };
static const struct {
  const char *name[2];
  int sized;
} routines[R_COUNT] = {
    {{"potrf", "potrf"}, 1},       {{"potrfBatched", "potrfBatched"}, 0}, {{"getrf", "getrf"}, 1},
    {{"geqrf", "geqrf"}, 1},       {{"orgqr", "ungqr"}, 1},               {{"syevd", "heevd"}, 1},
    {{"syevjBatched", "heevjBatched"}, 1}, {{"gesvd", "gesvd"}, 1},      {{"gesvdjBatched", "gesvdjBatched"}, 1},
};
/* cuBLAS's, the second index of blas_fn[][]: "%c" is the precision letter. */
enum { B_TRSM, B_TRSM_BATCHED, B_GETRF_BATCHED, B_GEAM, B_COUNT };
static const char *const blas_names[B_COUNT] = {"cublas%ctrsm_v2", "cublas%ctrsmBatched", "cublas%cgetrfBatched",
                                                "cublas%cgeam"};
static const char letters[] = "SDCZ";

static void *fn[4][R_COUNT], *fn_size[4][R_COUNT], *blas_fn[4][B_COUNT];

/* The routines' types: matrices, vectors and scalars by pointer (void *: one type serves the four
 * precisions), enums as int. */
typedef int (*potrf_size_fn)(solver_handle, int, int, void *, int, int *);
typedef int (*potrf_fn)(solver_handle, int, int, void *, int, void *, int, int *);
typedef int (*potrf_batched_fn)(solver_handle, int, int, void **, int, int *, int);
typedef int (*mn_size_fn)(solver_handle, int, int, void *, int, int *); /* getrf, geqrf */
typedef int (*getrf_fn)(solver_handle, int, int, void *, int, void *, int *, int *);
typedef int (*geqrf_fn)(solver_handle, int, int, void *, int, void *, void *, int, int *);
typedef int (*orgqr_size_fn)(solver_handle, int, int, int, const void *, int, const void *, int *);
typedef int (*orgqr_fn)(solver_handle, int, int, int, void *, int, const void *, void *, int, int *);
typedef int (*syevd_size_fn)(solver_handle, int, int, int, const void *, int, const void *, int *);
typedef int (*syevd_fn)(solver_handle, int, int, int, void *, int, void *, void *, int, int *);
typedef int (*syevj_size_fn)(solver_handle, int, int, int, const void *, int, const void *, int *, void *, int);
typedef int (*syevj_fn)(solver_handle, int, int, int, void *, int, void *, void *, int, int *, void *, int);
typedef int (*gesvd_size_fn)(solver_handle, int, int, int *);
typedef int (*gesvd_fn)(solver_handle, signed char, signed char, int, int, void *, int, void *, void *, int, void *, int,
                        void *, int, void *, int *);
typedef int (*gesvdj_size_fn)(solver_handle, int, int, int, const void *, int, const void *, const void *, int,
                              const void *, int, int *, void *, int);
typedef int (*gesvdj_fn)(solver_handle, int, int, int, void *, int, void *, void *, int, void *, int, void *, int, int *,
                         void *, int);
typedef int (*trsm_fn)(void *, int, int, int, int, int, int, const void *, const void *, int, void *, int);
typedef int (*trsm_batched_fn)(void *, int, int, int, int, int, int, const void *, void *const *, int, void *const *,
                               int, int);
typedef int (*getrf_batched_fn)(void *, int, void *const *, int, int *, int *, int);

static int (*p_create)(solver_handle *);
static int (*p_set_stream)(solver_handle, void *);
static int (*p_create_syevj)(void **);
static int (*p_create_gesvdj)(void **);
static int (*p_gesvdj_sort)(void *, int);
/* the driver's, for work areas made while a graph is captured (see make_plan) */
static int (*p_exchange_capture_mode)(int *);
static int (*p_mem_alloc)(unsigned long long *, size_t);

static solver_handle handle;
static void *syevj_params, *gesvdj_params; /* cuSOLVER's defaults: sorted, tolerance eps, 100 sweeps */
static void *k_strided, *k_fix, *k_perm, *k_ptrs; /* cusolver_ptx.c's kernels */

/* ------------------------------------------------------------------- loading */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int tried, ready;
static char why[512];
static kl_libfind find = KL_LIBFIND_INIT; /* registered candidates, the path opened */

int kl_cusolver_add_search_path(const char *path) {
  return kl_libfind_add(&find, path);
}

static void *try_open(const char *path) { return kl_libfind_open(&find, path); }

/* libcusolver.so.12 (CUDA 12.x and 13.x ship cuSOLVER 11.x and 12.x), then .11, in dir. */
static const int versions[] = {12, 11};
static void *try_folder(const char *dir, const char *sub) {
  void *h = NULL;
  for (int v = 0; !h && v < 2; v++) {
    char p[1200];
    snprintf(p, sizeof p, "%.520s/%.40slibcusolver.so.%d", dir, sub, versions[v]);
    h = try_open(p);
  }
  return h;
}

/* A registered path: the library itself; a folder holding it or the wheel (site-packages); or
 * another library of the wheels (libcublas in nvidia/cublas/lib or nvidia/cu13/lib), whose
 * folder or sibling nvidia/cusolver/lib may hold it. */
static void *try_registered(const char *path) {
  void *h = strstr(path, "cusolver") ? try_open(path) : NULL;
  const char *subs[] = {"", "nvidia/cusolver/lib/", "nvidia/cu13/lib/", "nvidia/cu12/lib/"};
  for (int s = 0; !h && s < 4; s++) h = try_folder(path, subs[s]);
  const char *slash = strrchr(path, '/');
  if (!h && slash) {
    char dir[512];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (!(h = try_folder(dir, ""))) h = try_folder(dir, "../../cusolver/lib/");
  }
  return h;
}

static void open_cusolver(void) {
  tried = 1;
  void *h = NULL;
  const char *env = getenv("KILN_CUSOLVER_LIB"); /* an explicit choice wins over what the system has */
  if (env && *env) h = try_open(env);
  for (int v = 0; !h && v < 2; v++) {
    char name[32];
    snprintf(name, sizeof name, "libcusolver.so.%d", versions[v]);
    h = try_open(name);
  }
  if (!h) h = try_open("libcusolver.so");
  const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  for (int i = 0; !h && i < 3; i++)
    if (homes[i] && *homes[i] && !(h = try_folder(homes[i], "lib64/"))) h = try_folder(homes[i], "targets/x86_64-linux/lib/");
  for (int i = 0; !h && i < find.nextra; i++) h = try_registered(find.extra[i]);
  if (!h) {
    snprintf(why, sizeof why, "cuSOLVER not found (tried libcusolver.so.12/.11, $CUDA_HOME, /usr/local/cuda and the "
                              "nvidia-cusolver wheel; set KILN_CUSOLVER_LIB to its path)");
    return;
  }
  *(void **)&p_create = dlsym(h, "cusolverDnCreate");
  *(void **)&p_set_stream = dlsym(h, "cusolverDnSetStream");
  *(void **)&p_create_syevj = dlsym(h, "cusolverDnCreateSyevjInfo");
  *(void **)&p_create_gesvdj = dlsym(h, "cusolverDnCreateGesvdjInfo");
  *(void **)&p_gesvdj_sort = dlsym(h, "cusolverDnXgesvdjSetSortEig");
  const char *missing = !p_create ? "cusolverDnCreate" : !p_set_stream ? "cusolverDnSetStream"
                      : !p_create_syevj ? "cusolverDnCreateSyevjInfo" : !p_create_gesvdj ? "cusolverDnCreateGesvdjInfo"
                                                                                        : NULL;
  static char name[64];
  for (int p = 0; !missing && p < 4; p++)
    for (int r = 0; !missing && r < R_COUNT; r++) {
      snprintf(name, sizeof name, "cusolverDn%c%s", letters[p], routines[r].name[p >> 1]);
      if (!(fn[p][r] = dlsym(h, name))) missing = name;
      snprintf(name, sizeof name, "cusolverDn%c%s_bufferSize", letters[p], routines[r].name[p >> 1]);
      if (!missing && routines[r].sized && !(fn_size[p][r] = dlsym(h, name))) missing = name;
    }
  for (int p = 0; !missing && p < 4; p++)
    for (int b = 0; !missing && b < B_COUNT; b++) {
      snprintf(name, sizeof name, blas_names[b], letters[p]);
      if (!(blas_fn[p][b] = kl_cublas_symbol(name))) missing = name;
    }
  if (missing) {
    snprintf(why, sizeof why, "%.400s (or cuBLAS) lacks %s", find.path, missing);
    return;
  }
  *(void **)&p_exchange_capture_mode = kl_cuda_driver_symbol("cuThreadExchangeStreamCaptureMode");
  *(void **)&p_mem_alloc = kl_cuda_driver_symbol("cuMemAlloc");
  int rc = p_create(&handle);
  if (!rc) rc = p_create_syevj(&syevj_params);
  if (!rc) rc = p_create_gesvdj(&gesvdj_params);
  if (!rc && p_gesvdj_sort) rc = p_gesvdj_sort(gesvdj_params, 1); /* descending, as LAPACK (the default too) */
  if (rc) {
    snprintf(why, sizeof why, "cusolverDnCreate failed (status %d)", rc);
    return;
  }
  void *image = NULL, *mod = NULL;
  size_t n = 0;
  char err[256];
  const char *ptx = kl_cusolver_ptx();
  if (kl_cuda_link_ptx(ptx, strlen(ptx) + 1, &image, &n, err, sizeof err) || kl_cuda_module_load(image, n, &mod, err, sizeof err) ||
      kl_cuda_function(mod, "kl_sol_strided", &k_strided, err, sizeof err) ||
      kl_cuda_function(mod, "kl_sol_fix", &k_fix, err, sizeof err) ||
      kl_cuda_function(mod, "kl_sol_perm", &k_perm, err, sizeof err) ||
      kl_cuda_function(mod, "kl_sol_ptrs", &k_ptrs, err, sizeof err)) {
    free(image);
    snprintf(why, sizeof why, "cuSOLVER's helper kernels did not load: %.400s", err);
    return;
  }
  free(image);
  ready = 1;
}

int kl_cusolver_available(char *reason, size_t n) {
  char blas_why[256];
  if (!kl_cublas_available(blas_why, sizeof blas_why)) { /* trsm, getrfBatched; also opens cuBLAS first */
    if (reason) snprintf(reason, n, "cuSOLVER steps also use cuBLAS: %s", blas_why);
    return 0;
  }
  pthread_mutex_lock(&mu);
  if (!tried && kl_cuda_available(NULL, 0)) open_cusolver();
  int ok = ready;
  pthread_mutex_unlock(&mu);
  if (!ok && reason) snprintf(reason, n, "%s", why[0] ? why : "no GPU");
  return ok;
}

const char *kl_cusolver_library(void) { return ready ? find.path : ""; }

/* ---------------------------------------------------------------- the calls */

static int prec_of(kl_dtype t) { return t == KL_F32 ? 0 : t == KL_F64 ? 1 : t == KL_C64 ? 2 : t == KL_C128 ? 3 : -1; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Which variant runs c: the batched routines for batches of small matrices (one launch for all,
 * where a loop over the batch would be launch-bound), the single-matrix ones otherwise. */
static int batched(const kl_solver_call *c) {
  if (c->batch < 2) return 0;
  switch (c->op) {
  case KL_SOLVER_CHOLESKY: return c->n <= 128;
  case KL_SOLVER_LU: return c->m == c->n && c->n <= 128; /* cuBLAS getrfBatched: square only */
  case KL_SOLVER_EIGH: return c->n <= 32;                /* syevjBatched's limit */
  case KL_SOLVER_SVD: return c->m <= 32 && c->n <= 32;   /* gesvdjBatched's limit */
  case KL_SOLVER_TRSM: return 1;
  default: return 0; /* qr: geqrf and orgqr per matrix (orgqr has no batched form) */
  }
}

int kl_cusolver_check(const kl_solver_call *c) {
  if (prec_of(c->t) < 0 || c->batch < 1 || c->m < 1 || c->n < 1) return -1;
  if (c->batch > 0x7fffffff || c->m * c->n > 0x7fffffff) return -1; /* cuSOLVER's int sizes */
  if ((c->op == KL_SOLVER_CHOLESKY || c->op == KL_SOLVER_EIGH) && c->m != c->n) return -1;
  if (c->op == KL_SOLVER_TRSM) {
    int64_t s = c->left_side ? c->m : c->n;
    if (s * s > 0x7fffffff) return -1;
  }
  return c->op <= KL_SOLVER_TRSM ? 0 : -1;
}

const char *kl_cusolver_routine(const kl_solver_call *c) {
  int b = batched(c);
  switch (c->op) {
  case KL_SOLVER_CHOLESKY: return b ? "cuSOLVER potrfBatched" : "cuSOLVER potrf";
  case KL_SOLVER_LU: return b ? "cuBLAS getrfBatched" : "cuSOLVER getrf";
  case KL_SOLVER_QR: return "cuSOLVER geqrf + orgqr/ungqr";
  case KL_SOLVER_EIGH: return b ? "cuSOLVER syevjBatched/heevjBatched" : "cuSOLVER syevd/heevd";
  case KL_SOLVER_SVD: return b ? "cuSOLVER gesvdjBatched" : "cuSOLVER gesvd";
  case KL_SOLVER_TRSM: return b ? "cuBLAS trsmBatched" : "cuBLAS trsm";
  }
  return "?";
}

/* The iterative drivers (syevd, the Jacobi ones, gesvd) are not known to be safe to capture into a
 * CUDA graph (they may synchronize or allocate inside); executables holding them run step by step.
 * The factorizations and solves are plain kernel sequences on the stream. */
int kl_cusolver_capturable(const kl_solver_call *c) { return c->op != KL_SOLVER_EIGH && c->op != KL_SOLVER_SVD; }

/* ---------------------------------------------------------- work areas, cached */

/* The areas of a plan's block (offsets 256-aligned). */
enum { A_WORK, A_INFO, A_PTRS, A_BUF1, A_BUF2, A_BUF3, A_RWORK, A_COUNT };

typedef struct {
  kl_solver_call key;
  int lwork;                    /* elements of A_WORK, as the routines take it */
  size_t off[A_COUNT], bytes;   /* areas' offsets in block, and its size */
  void *block;
  int pinned;                   /* used while a graph was captured: the graph holds block, kept */
  int from_driver;              /* block from cuMemAlloc (made under capture), never freed */
  unsigned long long last_used; /* for eviction, least recently used first */
} plan;

#define MAX_PLANS 64 /* slots; at most KEEP_PLANS of them not pinned once a call returns */
#define KEEP_PLANS 16
static plan plans[MAX_PLANS];
static int nplans;
static unsigned long long clock_now;

static int same_call(const kl_solver_call *a, const kl_solver_call *b) {
  return a->op == b->op && a->t == b->t && a->batch == b->batch && a->m == b->m && a->n == b->n &&
         a->full_matrices == b->full_matrices && a->compute_uv == b->compute_uv && a->lower == b->lower &&
         a->left_side == b->left_side && a->transpose_a == b->transpose_a && a->unit_diagonal == b->unit_diagonal;
}

static size_t esize(int p) { return (size_t)((p & 1) ? 8 : 4) << (p >> 1); }

/* "eigh of 512x[32,32] float32", for messages. */
static const char *describe(const kl_solver_call *c, char *buf, size_t len) {
  static const char *const ops[] = {"cholesky", "lu", "qr", "eigh", "svd", "triangular_solve"};
  snprintf(buf, len, "%s of %lldx[%lld,%lld] %s", ops[c->op], (long long)c->batch, (long long)c->m, (long long)c->n,
           kl_dtype_name(c->t));
  return buf;
}

/* The sizes of c's areas in bytes and its routines' workspace in elements (the _bufferSize
 * queries, which read no matrix: NULL stands for each). 0, or a cuSOLVER status. */
static int sizes(const kl_solver_call *c, size_t *area, int *lwork) {
  int p = prec_of(c->t), b = batched(c), rc = 0, l1 = 0, l2 = 0;
  size_t esz = esize(p), rsz = (p & 1) ? 8 : 4, batch = (size_t)c->batch;
  int m = (int)c->m, n = (int)c->n, k = (int)min64(c->m, c->n);
  int qc = c->full_matrices ? m : k, vrows = c->full_matrices ? n : k;
  memset(area, 0, sizeof(size_t) * A_COUNT);
  area[A_INFO] = batch * 4;
  switch (c->op) {
  case KL_SOLVER_CHOLESKY:
    if (b) area[A_PTRS] = batch * 8;
    else {
      area[A_BUF1] = batch * (size_t)n * n * esz;
      rc = ((potrf_size_fn)fn_size[p][R_POTRF])(handle, FILL_LOWER, n, NULL, n, &l1);
    }
    break;
  case KL_SOLVER_LU:
    area[A_BUF1] = batch * (size_t)m * n * esz;
    if (b) area[A_PTRS] = batch * 8;
    else rc = ((mn_size_fn)fn_size[p][R_GETRF])(handle, m, n, NULL, m, &l1);
    break;
  case KL_SOLVER_QR:
    area[A_BUF1] = batch * (size_t)m * n * esz;
    area[A_BUF2] = batch * (size_t)k * esz;
    area[A_BUF3] = batch * (size_t)m * qc * esz;
    rc = ((mn_size_fn)fn_size[p][R_GEQRF])(handle, m, n, NULL, m, &l1);
    if (!rc) rc = ((orgqr_size_fn)fn_size[p][R_ORGQR])(handle, m, qc, k, NULL, m, NULL, &l2);
    break;
  case KL_SOLVER_EIGH: {
    int uplo = c->lower ? FILL_UPPER : FILL_LOWER;
    area[A_BUF1] = batch * (size_t)n * n * esz;
    if (b)
      rc = ((syevj_size_fn)fn_size[p][R_SYEVJ_BATCHED])(handle, EIG_VECTOR, uplo, n, NULL, n, NULL, &l1, syevj_params,
                                                         (int)batch);
    else rc = ((syevd_size_fn)fn_size[p][R_SYEVD])(handle, EIG_VECTOR, uplo, n, NULL, n, NULL, &l1);
    break;
  }
  case KL_SOLVER_SVD:
    area[A_BUF1] = batch * (size_t)m * n * esz;
    if (b) { /* a^T (n x m) = U' S V'^H: U' n x n, V' m x m */
      area[A_BUF2] = batch * (size_t)n * n * esz;
      area[A_BUF3] = batch * (size_t)m * m * esz;
      rc = ((gesvdj_size_fn)fn_size[p][R_GESVDJ_BATCHED])(handle, c->compute_uv ? EIG_VECTOR : EIG_NOVECTOR, n, m, NULL,
                                                          n, NULL, NULL, n, NULL, m, &l1, gesvdj_params, (int)batch);
    } else if (n >= m) { /* gesvd of a^T straight into the outputs */
      rc = ((gesvd_size_fn)fn_size[p][R_GESVD])(handle, n, m, &l1);
    } else { /* gesvd of a (transposed first) into temporaries, transposed out */
      if (c->compute_uv) {
        area[A_BUF2] = batch * (size_t)m * (c->full_matrices ? m : k) * esz;
        area[A_BUF3] = batch * (size_t)vrows * n * esz;
      }
      rc = ((gesvd_size_fn)fn_size[p][R_GESVD])(handle, m, n, &l1);
    }
    area[A_RWORK] = (size_t)k * rsz;
    break;
  case KL_SOLVER_TRSM:
    area[A_INFO] = 0;
    if (b) area[A_PTRS] = 2 * batch * 8;
    break;
  }
  *lwork = l1 > l2 ? l1 : l2;
  area[A_WORK] = (size_t)*lwork * esz;
  return rc;
}

/* Frees a plan (caller holds mu, no graph is being captured). The block goes back in stream
 * order, after the calls queued with it. */
static void drop(plan *p) {
  if (p->block && !p->from_driver) kl_cuda_free(p->block, p->bytes);
  *p = plans[--nplans];
}

/* Sizes and allocates p's block (its key filled in). Outside capture the block comes from kiln's
 * stream-ordered allocator; while a graph is captured on this thread the queries and the block are
 * no work of that graph: the thread's capture mode is relaxed while they run and the block comes
 * from cuMemAlloc (outside kiln's counts, kept for the process: the caller pins the plan). */
static int make_plan(plan *p, int capturing, char *err, size_t errlen) {
  char shape[160];
  int mode = CAPTURE_RELAXED, relaxed = capturing && p_exchange_capture_mode && !p_exchange_capture_mode(&mode);
  size_t area[A_COUNT];
  int rc = sizes(&p->key, area, &p->lwork);
  if (rc) {
    if (relaxed) p_exchange_capture_mode(&mode);
    return kl_error(err, errlen, KL_ERR_INTERNAL, "cuSOLVER: workspace query for %s failed (status %d)",
                    describe(&p->key, shape, sizeof shape), rc);
  }
  p->bytes = 0;
  for (int a = 0; a < A_COUNT; a++) {
    p->off[a] = p->bytes;
    p->bytes += (area[a] + 255) & ~(size_t)255;
  }
  p->block = NULL;
  p->from_driver = capturing;
  char aerr[256] = "";
  int failed = 0;
  if (p->bytes && capturing) {
    unsigned long long d = 0;
    failed = !p_mem_alloc || p_mem_alloc(&d, p->bytes);
    if (failed) snprintf(aerr, sizeof aerr, "cuMemAlloc of %zu bytes failed", p->bytes);
    p->block = (void *)(uintptr_t)d;
  } else if (p->bytes) {
    failed = kl_cuda_alloc(p->bytes, &p->block, aerr, sizeof aerr) != 0;
  }
  if (relaxed) p_exchange_capture_mode(&mode);
  if (failed)
    return kl_error(err, errlen, KL_ERR_NOMEM, "cuSOLVER: work area for %s: %s", describe(&p->key, shape, sizeof shape),
                    aerr);
  return 0;
}

/* The cached plan for c, made if missing (caller holds mu); NULL with a message. Eviction only
 * happens outside capture; pinned plans are never evicted. */
static plan *find_plan(const kl_solver_call *c, int capturing, char *err, size_t errlen) {
  for (int i = 0; i < nplans; i++)
    if (same_call(&plans[i].key, c)) {
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
  char shape[160];
  if (nplans == MAX_PLANS) {
    kl_error(err, errlen, KL_ERR_UNSUPPORTED, "cuSOLVER: no room for a work area for %s: %d shapes in use by captured "
             "graphs", describe(c, shape, sizeof shape), MAX_PLANS);
    return NULL;
  }
  plan fresh;
  memset(&fresh, 0, sizeof fresh);
  fresh.key = *c;
  if (make_plan(&fresh, capturing, err, errlen)) return NULL;
  fresh.last_used = ++clock_now;
  plans[nplans] = fresh;
  return &plans[nplans++];
}

/* ------------------------------------------------------------------ the steps */

/* One call's context: the call, its plan, and what every step needs. */
typedef struct {
  const kl_solver_call *c;
  plan *pl;
  int p, nc;  /* precision index; real scalars per element */
  size_t esz; /* bytes of an element */
  char *err;
  size_t errlen;
} job;

#define AREA(j, a) ((char *)(j)->pl->block + (j)->pl->off[a])
#define AT(ptr, elems, j) ((char *)(ptr) + (size_t)(elems) * (j)->esz) /* ptr advanced by elems elements */

static int launch(const job *j, void *kernel, void **args, int nargs, int64_t total) {
  int64_t blocks = (total + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  if (blocks < 1) blocks = 1;
  return kl_cuda_launch(kernel, (unsigned)blocks, 256, args, nargs, j->err, j->errlen);
}

#define U64(x) ((void *)(uintptr_t)(x))

static int failed(const job *j, const char *routine, int status);

typedef int (*geam_fn)(void *, int, int, int, int, const void *, const void *, int, const void *, const void *, int,
                       void *, int);

typedef struct {
  const job *j;
  void *dst;
  const void *src;
  int rows, cols, conj;
} geam_ctx;

/* dst = src^T (conjugated) for each matrix of the batch by cuBLAS's geam: src read column-major is
 * rows x cols (leading dimension rows), dst column-major cols x rows is dst row-major rows x cols. */
static int call_geam(void *h, void *ctx) {
  geam_ctx *g = ctx;
  const double one_d[2] = {1.0, 0.0}, zero_d[2] = {0.0, 0.0};
  const float one_f[2] = {1.0f, 0.0f}, zero_f[2] = {0.0f, 0.0f};
  int dbl = g->j->p & 1, rc = 0;
  const void *alpha = dbl ? (const void *)one_d : (const void *)one_f, *beta = dbl ? (const void *)zero_d : (const void *)zero_f;
  int64_t mat = (int64_t)g->rows * g->cols;
  for (int64_t b = 0; b < g->j->c->batch && !rc; b++) {
    void *d = AT(g->dst, b * mat, g->j);
    rc = ((geam_fn)blas_fn[g->j->p][B_GEAM])(h, g->conj ? OP_C : OP_T, OP_N, g->cols, g->rows, alpha,
                                             AT(g->src, b * mat, g->j), g->rows, beta, d, g->cols, d, g->cols);
  }
  return rc;
}

/* dst[b] (rows x cols, dense) = src[b*sstride + i*si + j*sj] for batch b < c->batch, in elements;
 * conj: conjugated (complex elements). A dense transpose of a few matrices goes to cuBLAS's geam
 * (tiled: about 4x the strided kernel's speed on a 4096 x 4096 float32 matrix); the rest to the
 * strided kernel. */
static int strided(const job *j, void *dst, const void *src, int64_t rows, int64_t cols, int64_t si, int64_t sj,
                   int64_t sstride, int conj) {
  int64_t total = j->c->batch * rows * cols;
  if (si == 1 && sj == rows && sstride == rows * cols && j->c->batch <= 4 && rows * cols >= 4096 && rows < INT32_MAX &&
      cols < INT32_MAX) {
    geam_ctx g = {j, dst, src, (int)rows, (int)cols, conj && j->nc == 2};
    int rc = kl_cublas_with_handle(call_geam, &g, j->err, j->errlen);
    return rc < 0 ? -1 : rc ? failed(j, "geam (cuBLAS)", rc) : 0;
  }
  void *args[] = {dst, (void *)src, U64(rows), U64(cols), U64(si), U64(sj), U64(sstride), U64(total), U64(j->esz),
                  U64(conj && j->nc == 2)};
  return launch(j, k_strided, args, 10, total);
}

/* NaN in each matrix of data (per elements of nc scalars, one per batch entry) whose info is
 * nonzero (info NULL: none); tri 1/2 zeroes the elements above/below the diagonal of the others
 * (rows of cols elements). A block a row. */
static int fix(const job *j, void *data, const int *info, int64_t per, int64_t cols, int nc, int tri) {
  int64_t nrows = j->c->batch * (per / cols);
  void *args[] = {data, (void *)info, U64(nrows), U64(per / cols), U64(cols), U64(nc), U64(tri), U64(j->p & 1)};
  int64_t blocks = nrows < 1 ? 1 : nrows > 8192 ? 8192 : nrows;
  return kl_cuda_launch(k_fix, (unsigned)blocks, cols >= 256 ? 256 : 64, args, 8, j->err, j->errlen);
}

/* A device array of c->batch pointers base + b * stride_elems elements. */
static int pointers(const job *j, void *dst, void *base, int64_t stride_elems) {
  void *args[] = {dst, base, U64((int64_t)j->esz * stride_elems), U64(j->c->batch)};
  return launch(j, k_ptrs, args, 4, j->c->batch);
}

static int dcopy(const job *j, void *dst, const void *src, int64_t elems) {
  return kl_cuda_copy(dst, 1, src, 1, (size_t)elems * j->esz, j->err, j->errlen);
}

/* A cuSOLVER/cuBLAS status into a message. */
static int failed(const job *j, const char *routine, int status) {
  char shape[160];
  return kl_error(j->err, j->errlen, KL_ERR_INTERNAL, "cuSOLVER: %c%s for %s failed (status %d)", letters[j->p], routine,
                  describe(j->c, shape, sizeof shape), status);
}

static int run_cholesky(const job *j, void *const *in, void *const *out) {
  const kl_solver_call *c = j->c;
  int n = (int)c->n, *info = (int *)AREA(j, A_INFO), rc = 0;
  int64_t mat = c->n * c->n;
  /* batched: the buffer read column-major is a^T, whose upper triangle is a's lower one:
   * potrf('U') leaves U with U^H U = a^T, and U read back row-major is the lower factor (lapack.c
   * says why). One large matrix: cuSOLVER's lower factorization runs about twice as fast as its
   * upper one (4096 x 4096 float32 on an H200: 1.9 vs 4.7 ms), so a is transposed into a
   * column-major copy, factored with potrf('L') and its L transposed back. */
  if (batched(c)) {
    if (dcopy(j, out[0], in[0], c->batch * mat)) return -1;
    if (pointers(j, AREA(j, A_PTRS), out[0], mat)) return -1;
    rc = ((potrf_batched_fn)fn[j->p][R_POTRF_BATCHED])(handle, FILL_UPPER, n, (void **)AREA(j, A_PTRS), n, info,
                                                       (int)c->batch);
    if (rc) return failed(j, "potrfBatched", rc);
  } else {
    void *a = AREA(j, A_BUF1);
    if (strided(j, a, in[0], c->n, c->n, 1, c->n, mat, 0)) return -1;
    for (int64_t b = 0; b < c->batch && !rc; b++)
      rc = ((potrf_fn)fn[j->p][R_POTRF])(handle, FILL_LOWER, n, AT(a, b * mat, j), n, AREA(j, A_WORK), j->pl->lwork,
                                         info + b);
    if (rc) return failed(j, "potrf", rc);
    if (strided(j, out[0], a, c->n, c->n, 1, c->n, mat, 0)) return -1;
  }
  return fix(j, out[0], info, mat, c->n, j->nc, 1); /* NaN where not positive definite, else zero above */
}

typedef struct {
  const job *j;
  void *ptrs;
  int *piv, *info;
} getrf_batched_ctx;

static int call_getrf_batched(void *h, void *ctx) {
  getrf_batched_ctx *g = ctx;
  int n = (int)g->j->c->n;
  return ((getrf_batched_fn)blas_fn[g->j->p][B_GETRF_BATCHED])(h, n, g->ptrs, n, g->piv, g->info, (int)g->j->c->batch);
}

static int run_lu(const job *j, void *const *in, void *const *out) {
  const kl_solver_call *c = j->c;
  int m = (int)c->m, n = (int)c->n, k = (int)min64(c->m, c->n), *info = (int *)AREA(j, A_INFO), *piv = out[1], rc = 0;
  void *w = AREA(j, A_BUF1);
  int64_t mat = c->m * c->n;
  /* pivoting is by rows: LU works on a column-major copy (row-major n x m) */
  if (strided(j, w, in[0], c->n, c->m, 1, c->n, mat, 0)) return -1;
  if (batched(c)) {
    if (pointers(j, AREA(j, A_PTRS), w, mat)) return -1;
    getrf_batched_ctx g = {j, AREA(j, A_PTRS), piv, info};
    rc = kl_cublas_with_handle(call_getrf_batched, &g, j->err, j->errlen);
    if (rc) return rc < 0 ? -1 : failed(j, "getrfBatched (cuBLAS)", rc);
  } else {
    for (int64_t b = 0; b < c->batch && !rc; b++)
      rc = ((getrf_fn)fn[j->p][R_GETRF])(handle, m, n, AT(w, b * mat, j), m, AREA(j, A_WORK), piv + b * k, info + b);
    if (rc) return failed(j, "getrf", rc);
  }
  if (strided(j, out[0], w, c->m, c->n, 1, c->m, mat, 0)) return -1;
  void *args[] = {piv, out[2], U64(c->batch), U64(k), U64(m)}; /* 1-based pivots -> 0-based, and the permutation */
  return launch(j, k_perm, args, 5, c->batch);
}

static int run_qr(const job *j, void *const *in, void *const *out) {
  const kl_solver_call *c = j->c;
  int m = (int)c->m, n = (int)c->n, k = (int)min64(c->m, c->n), *info = (int *)AREA(j, A_INFO), rc = 0;
  int qc = c->full_matrices ? m : k, rr = qc;
  char *w = AREA(j, A_BUF1), *tau = AREA(j, A_BUF2), *qb = AREA(j, A_BUF3);
  int64_t mat = c->m * c->n, qmat = c->m * qc;
  if (strided(j, w, in[0], c->n, c->m, 1, c->n, mat, 0)) return -1; /* column-major copy */
  if (kl_cuda_memset0(qb, (size_t)(c->batch * qmat) * j->esz))
    return kl_error(j->err, j->errlen, KL_ERR_INTERNAL, "cuSOLVER qr: clearing a work area failed");
  /* geqrf leaves R in the upper triangle and the reflectors below it; orgqr/ungqr expands those
   * (the first k columns) into the first qc columns of Q */
  for (int64_t b = 0; b < c->batch && !rc; b++) {
    char *wb = AT(w, b * mat, j), *tb = AT(tau, b * k, j), *qbb = AT(qb, b * qmat, j);
    rc = ((geqrf_fn)fn[j->p][R_GEQRF])(handle, m, n, wb, m, tb, AREA(j, A_WORK), j->pl->lwork, info + b);
    if (rc) return failed(j, "geqrf", rc);
    if (dcopy(j, qbb, wb, c->m * k)) return -1;
    rc = ((orgqr_fn)fn[j->p][R_ORGQR])(handle, m, qc, k, qbb, m, tb, AREA(j, A_WORK), j->pl->lwork, info + b);
    if (rc) return failed(j, routines[R_ORGQR].name[j->p >> 1], rc);
  }
  if (strided(j, out[0], qb, c->m, qc, 1, c->m, qmat, 0)) return -1;
  if (strided(j, out[1], w, rr, c->n, 1, c->m, mat, 0)) return -1; /* R: w's first rr rows... */
  return fix(j, out[1], NULL, (int64_t)rr * c->n, c->n, j->nc, 2);   /* ...upper triangle */
}

static int run_eigh(const job *j, void *const *in, void *const *out) {
  const kl_solver_call *c = j->c;
  int n = (int)c->n, *info = (int *)AREA(j, A_INFO), rc = 0;
  int uplo = c->lower ? FILL_UPPER : FILL_LOWER; /* the buffer read column-major is a^T */
  char *buf = AREA(j, A_BUF1);
  int64_t mat = c->n * c->n;
  size_t rsz = (j->p & 1) ? 8 : 4;
  if (dcopy(j, buf, in[0], c->batch * mat)) return -1;
  if (batched(c)) {
    rc = ((syevj_fn)fn[j->p][R_SYEVJ_BATCHED])(handle, EIG_VECTOR, uplo, n, buf, n, out[1], AREA(j, A_WORK),
                                               j->pl->lwork, info, syevj_params, (int)c->batch);
    if (rc) return failed(j, routines[R_SYEVJ_BATCHED].name[j->p >> 1], rc);
  } else {
    for (int64_t b = 0; b < c->batch && !rc; b++)
      rc = ((syevd_fn)fn[j->p][R_SYEVD])(handle, EIG_VECTOR, uplo, n, AT(buf, b * mat, j), n,
                                         (char *)out[1] + (size_t)(b * c->n) * rsz, AREA(j, A_WORK), j->pl->lwork,
                                         info + b);
    if (rc) return failed(j, routines[R_SYEVD].name[j->p >> 1], rc);
  }
  /* a^T = conj(a) has a's eigenvalues and conjugated eigenvectors, in columns of the column-major
   * buffer: v = the buffer conjugate-transposed */
  if (strided(j, out[0], buf, c->n, c->n, 1, c->n, mat, 1)) return -1;
  if (fix(j, out[0], info, mat, c->n, j->nc, 0)) return -1;
  return fix(j, out[1], info, c->n, 1, 1, 0);
}

static int run_svd(const job *j, void *const *in, void *const *out) {
  const kl_solver_call *c = j->c;
  int m = (int)c->m, n = (int)c->n, k = (int)min64(c->m, c->n), *info = (int *)AREA(j, A_INFO), rc = 0;
  int uv = c->compute_uv, ucols = c->full_matrices ? m : k, vrows = c->full_matrices ? n : k;
  void *u = uv ? out[0] : NULL, *s = uv ? out[1] : out[0], *vt = uv ? out[2] : NULL;
  char *a = AREA(j, A_BUF1), *b2 = AREA(j, A_BUF2), *b3 = AREA(j, A_BUF3);
  int64_t mat = c->m * c->n, umat = c->m * ucols, vmat = (int64_t)vrows * c->n;
  size_t rsz = (j->p & 1) ? 8 : 4;
  signed char job = !uv ? 'N' : c->full_matrices ? 'A' : 'S';
  if (batched(c)) {
    /* the buffer read column-major is a^T = U' S V'^H, so a = conj(V') S U'^T: u = conj(V'), whose
     * columns are V' read row-major and conjugated, and vh = U'^T, the rows of U' read row-major */
    if (dcopy(j, a, in[0], c->batch * mat)) return -1;
    rc = ((gesvdj_fn)fn[j->p][R_GESVDJ_BATCHED])(handle, uv ? EIG_VECTOR : EIG_NOVECTOR, n, m, a, n, s, b2, n, b3, m,
                                                 AREA(j, A_WORK), j->pl->lwork, info, gesvdj_params, (int)c->batch);
    if (rc) return failed(j, "gesvdjBatched", rc);
    if (uv && (strided(j, u, b3, c->m, ucols, 1, c->m, c->m * c->m, 1) ||
               strided(j, vt, b2, vrows, c->n, c->n, 1, c->n * c->n, 0)))
      return -1;
  } else if (n >= m) {
    /* gesvd of a^T (n x m, rows >= columns) writes straight into the outputs (lapack.c's svd_call
     * says why): its U' is vh read row-major, its V'^H is u */
    if (dcopy(j, a, in[0], c->batch * mat)) return -1;
    for (int64_t b = 0; b < c->batch && !rc; b++)
      rc = ((gesvd_fn)fn[j->p][R_GESVD])(handle, job, job, n, m, AT(a, b * mat, j), n, (char *)s + (size_t)(b * k) * rsz,
                                         uv ? AT(vt, b * vmat, j) : NULL, n, uv ? AT(u, b * umat, j) : NULL, ucols,
                                         AREA(j, A_WORK), j->pl->lwork, AREA(j, A_RWORK), info + b);
    if (rc) return failed(j, "gesvd", rc);
  } else {
    /* wider than tall: gesvd of a itself (a column-major copy), its U and V^H transposed out */
    if (strided(j, a, in[0], c->n, c->m, 1, c->n, mat, 0)) return -1;
    for (int64_t b = 0; b < c->batch && !rc; b++)
      rc = ((gesvd_fn)fn[j->p][R_GESVD])(handle, job, job, m, n, AT(a, b * mat, j), m, (char *)s + (size_t)(b * k) * rsz,
                                         uv ? AT(b2, b * umat, j) : NULL, m, uv ? AT(b3, b * vmat, j) : NULL, vrows,
                                         AREA(j, A_WORK), j->pl->lwork, AREA(j, A_RWORK), info + b);
    if (rc) return failed(j, "gesvd", rc);
    if (uv && (strided(j, u, b2, c->m, ucols, 1, c->m, umat, 0) || strided(j, vt, b3, vrows, c->n, 1, vrows, vmat, 0)))
      return -1;
  }
  if (fix(j, s, info, k, 1, 1, 0)) return -1; /* no convergence (or NaN input): NaN, as the host */
  if (uv && (fix(j, u, info, umat, ucols, j->nc, 0) || fix(j, vt, info, vmat, c->n, j->nc, 0))) return -1;
  return 0;
}

typedef struct {
  const job *j;
  const void *a;
  void *x, *ptrs;
} trsm_ctx;

/* Row-major x is column-major x^T, and a's buffer column-major a^T: op(a) x = b becomes
 * x^T op(a)^T = b^T, a solve from the other side with lower/upper swapped (lapack.c's trick). */
static int call_trsm(void *h, void *ctx) {
  trsm_ctx *t = ctx;
  const kl_solver_call *c = t->j->c;
  int m = (int)c->m, n = (int)c->n, s = c->left_side ? m : n;
  int side = c->left_side ? SIDE_RIGHT : SIDE_LEFT, uplo = c->lower ? FILL_UPPER : FILL_LOWER;
  int op = c->transpose_a ? OP_T : OP_N, diag = c->unit_diagonal ? DIAG_UNIT : DIAG_NON_UNIT;
  const double one_d[2] = {1.0, 0.0}; /* alpha; complex 1 + 0i */
  const float one_f[2] = {1.0f, 0.0f};
  const void *alpha = (t->j->p & 1) ? (const void *)one_d : (const void *)one_f;
  if (!batched(c)) return ((trsm_fn)blas_fn[t->j->p][B_TRSM])(h, side, uplo, op, diag, n, m, alpha, t->a, s, t->x, n);
  void **pa = t->ptrs, **px = pa + c->batch;
  return ((trsm_batched_fn)blas_fn[t->j->p][B_TRSM_BATCHED])(h, side, uplo, op, diag, n, m, alpha, pa, s, px, n,
                                                            (int)c->batch);
}

static int run_trsm(const job *j, void *const *in, void *const *out) {
  const kl_solver_call *c = j->c;
  int64_t s = c->left_side ? c->m : c->n, mat = c->m * c->n;
  if (dcopy(j, out[0], in[1], c->batch * mat)) return -1; /* trsm solves in place */
  trsm_ctx t = {j, in[0], out[0], AREA(j, A_PTRS)};
  if (batched(c) && (pointers(j, t.ptrs, in[0], s * s) || pointers(j, (void **)t.ptrs + c->batch, out[0], mat)))
    return -1;
  int rc = kl_cublas_with_handle(call_trsm, &t, j->err, j->errlen);
  return rc < 0 ? -1 : rc ? failed(j, batched(c) ? "trsmBatched (cuBLAS)" : "trsm (cuBLAS)", rc) : 0;
}

int kl_cusolver_run(const kl_solver_call *c, void *const *in, void *const *out, char *err, size_t errlen) {
  char shape[160];
  if (kl_cusolver_check(c))
    return kl_error(err, errlen, KL_ERR_INTERNAL, "internal error: cuSOLVER cannot run %s", describe(c, shape, sizeof shape));
  if (!kl_cusolver_available(err, errlen)) return -1;
  /* a branch being captured into a conditional node queues on a stream of its own */
  void *q = kl_cuda_queue_stream(), *stream = q ? q : kl_cuda_stream();
  int capturing = kl_cuda_capturing() || stream != kl_cuda_stream();
  pthread_mutex_lock(&mu); /* one handle, and each plan's one work area: calls only enqueue work */
  plan *pl = find_plan(c, capturing, err, errlen);
  if (!pl) {
    pthread_mutex_unlock(&mu);
    return -1;
  }
  if (capturing) pl->pinned = 1; /* the graph holds the plan's block from now on */
  int p = prec_of(c->t), rc = p_set_stream(handle, stream);
  job j = {c, pl, p, 1 + (p >> 1), esize(p), err, errlen};
  uint64_t t0 = kl_prof_begin(); /* one event for the routines a call queues (one per matrix for some) */
  if (rc) rc = kl_error(err, errlen, KL_ERR_INTERNAL, "cusolverDnSetStream failed (status %d)", rc);
  else {
    switch (c->op) {
    case KL_SOLVER_CHOLESKY: rc = run_cholesky(&j, in, out); break;
    case KL_SOLVER_LU: rc = run_lu(&j, in, out); break;
    case KL_SOLVER_QR: rc = run_qr(&j, in, out); break;
    case KL_SOLVER_EIGH: rc = run_eigh(&j, in, out); break;
    case KL_SOLVER_SVD: rc = run_svd(&j, in, out); break;
    case KL_SOLVER_TRSM: rc = run_trsm(&j, in, out); break;
    }
  }
  static const char *const routine[] = {"cusolverDn potrf", "cusolverDn getrf", "cusolverDn geqrf",
                                        "cusolverDn syevd", "cusolverDn gesvd", "cublas trsm"};
  KL_PROF_END(t0, "library", routine[c->op], "\"call\": \"%s\"", describe(c, shape, sizeof shape));
  pthread_mutex_unlock(&mu);
  return rc;
}
