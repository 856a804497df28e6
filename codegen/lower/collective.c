/* collective.c: lowering of the collective family: a library step. The participant the step runs
 * for, and its group, come from the launch (runtime/collective.h: each participant of an SPMD
 * launch runs on its own thread); the participants post their operands, each computes its own
 * result over its group's posts (reduced with the reductions' host combiners, gathered, permuted
 * or exchanged), then waits until nobody reads its operand any more. A program run alone (no
 * group) over a mesh of one device computes the same. On GPUs the step queues NCCL's collectives
 * (runtime/nccl.c), or, for a big float sum over two GPUs of this process, the copy engines'
 * (runtime/peer.c). Depends on lower.h and runtime/collective.h. */
#include <stdlib.h>
#include <string.h>

#include "../../runtime/collective.h"
#include "../../runtime/cuda.h"
#include "../../runtime/nccl.h"
#include "../../runtime/peer.h"
#include "lower.h"

/* Bytes of a's dims from `from` on, elements of es bytes. */
static size_t tail_bytes(const kl_aval *a, int from, size_t es) {
  size_t n = es;
  for (int i = from; i < a->ndim; i++) n *= (size_t)a->dims[i];
  return n;
}

static int64_t lead(const kl_aval *a, int upto) {
  int64_t n = 1;
  for (int i = 0; i < upto; i++) n *= a->dims[i];
  return n;
}

/* all_to_all (tiled): y's element at idx comes from group member idx[c] / x.dims[c] (a != c) or
 * idx[a] / (x.dims[a] / G) (a == c), at x's index with this member's chunk of axis a. */
static void all_to_all(const kl_aval *x, const kl_aval *y, int a, int c, int64_t g, int64_t pos,
                       const void *const *src, char *dst, size_t es) {
  int64_t idx[KL_MAX_RANK] = {0}, n = kl_aval_size(y), chunk = x->dims[a] / g;
  for (int64_t k = 0; k < n; k++) {
    int64_t from, xi[KL_MAX_RANK];
    memcpy(xi, idx, sizeof xi);
    if (a == c) {
      from = idx[a] / chunk;
      xi[a] = pos * chunk + idx[a] % chunk;
    } else {
      from = idx[c] / x->dims[c];
      xi[c] = idx[c] % x->dims[c];
      xi[a] = pos * chunk + idx[a];
    }
    int64_t off = 0;
    for (int d = 0; d < x->ndim; d++) off = off * x->dims[d] + xi[d];
    memcpy(dst + (size_t)k * es, (const char *)src[from] + (size_t)off * es, es);
    for (int d = y->ndim - 1; d >= 0 && ++idx[d] == y->dims[d]; d--) idx[d] = 0;
  }
}

/* The group this participant runs c in (NULL on a mesh of one device) and its rank there, checked
 * against c's mesh: 0, or -1 with a message naming c. */
static int current_group(const kl_libcall *c, kl_coll_group **grp, int *rank, char *err, size_t errlen) {
  const char *name = kl_prim_get(c->prim)->name;
  int64_t n = kl_collective_mesh_size(&c->p);
  *rank = 0;
  if (c->p.collective.frame)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "%s over a vmap axis name reached the compiler (vmap replays it on "
                    "the batch)", name);
  *grp = kl_coll_current(rank);
  if (!*grp && n != 1)
    return kl_error(err, errlen, KL_ERR_VALUE, "%s: a collective over a mesh of %lld devices runs only inside shard_map "
                    "or pmap over that mesh", name, (long long)n);
  if (*grp && kl_coll_group_size(*grp) != n)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "%s: launched on %d devices, but its mesh has %lld", name,
                    kl_coll_group_size(*grp), (long long)n);
  return 0;
}

static int run_collective(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  const char *name = kl_prim_get(c->prim)->name;
  int rank;
  kl_coll_group *grp;
  if (current_group(c, &grp, &rank, err, errlen)) return -1;
  int64_t g = kl_collective_group_size(&c->p);
  int64_t *members = malloc(sizeof(int64_t) * (size_t)g);
  if (!members) return kl_error(err, errlen, KL_ERR_NOMEM, "%s: out of host memory", name);
  int64_t pos = kl_collective_group(&c->p, rank, members);
  if (c->prim == KL_P_AXIS_INDEX) { /* nothing to exchange */
    *(int32_t *)ptrs[0] = (int32_t)pos;
    free(members);
    return 0;
  }
  const void *alone = ptrs[0];
  char why[400];
  const void *const *posts =
      grp ? kl_coll_exchange(grp, rank, ptrs[0], tail_bytes(&c->avals[0], 0, kl_dtype_size(c->avals[0].dtype)), name,
                             why, sizeof why)
          : &alone;
  if (!posts) {
    free(members);
    return kl_error(err, errlen, kl_status_last(), "%s: %s", name, why);
  }
  const void **src = malloc(sizeof(void *) * (size_t)g);
  int rc = 0;
  if (!src) rc = kl_error(err, errlen, KL_ERR_NOMEM, "%s: out of host memory", name);
  for (int64_t k = 0; src && k < g; k++) src[k] = posts[members[k]];
  const kl_aval *x = &c->avals[0], *y = &c->avals[1];
  size_t es = kl_dtype_size(x->dtype);
  char *dst = ptrs[1];
  int a = (int)c->p.collective.axis;
  switch (rc ? KL_NPRIMS : c->prim) {
  case KL_P_PSUM:
  case KL_P_PMAX:
  case KL_P_PMIN: {
    kl_prim r = c->prim == KL_P_PSUM ? KL_P_REDUCE_SUM : c->prim == KL_P_PMAX ? KL_P_REDUCE_MAX : KL_P_REDUCE_MIN;
    kl_reduce_combine(r, x->dtype, dst, (void *const *)src, (int)g, kl_aval_size(x));
    break;
  }
  case KL_P_ALL_GATHER: { /* y = [outer][member][x's dims from axis on], tiled or not */
    size_t blk = tail_bytes(x, a, es);
    for (int64_t o = 0, outer = lead(x, a); o < outer; o++)
      for (int64_t k = 0; k < g; k++) memcpy(dst + ((size_t)o * (size_t)g + (size_t)k) * blk, (const char *)src[k] + (size_t)o * blk, blk);
    break;
  }
  case KL_P_REDUCE_SCATTER: { /* x = [outer][member][blk]: this member's block, summed */
    size_t blk = tail_bytes(y, a, es); /* y's dims from axis on: x's block, tiled (m of G * m) or not */
    const void **parts = malloc(sizeof(void *) * (size_t)g);
    if (!parts) {
      rc = kl_error(err, errlen, KL_ERR_NOMEM, "%s: out of host memory", name);
      break;
    }
    for (int64_t o = 0, outer = lead(x, a); o < outer; o++) {
      for (int64_t k = 0; k < g; k++) parts[k] = (const char *)src[k] + ((size_t)o * (size_t)g + (size_t)pos) * blk;
      kl_reduce_combine(KL_P_REDUCE_SUM, x->dtype, dst + (size_t)o * blk, (void *const *)parts, (int)g, (int64_t)(blk / es));
    }
    free(parts);
    break;
  }
  case KL_P_PPERMUTE: { /* zeros unless a pair sends here */
    const kl_ivec *pm = &c->p.collective.perm;
    size_t bytes = tail_bytes(x, 0, es);
    memset(dst, 0, bytes);
    for (int k = 0; k < pm->n; k += 2)
      if (pm->v[k + 1] == pos) memcpy(dst, src[pm->v[k]], bytes);
    break;
  }
  case KL_P_ALL_TO_ALL:
    all_to_all(x, y, a, (int)c->p.collective.concat_axis, g, pos, src, dst, es);
    break;
  default: break;
  }
  free(src);
  free(members);
  char late[256];
  if (grp && kl_coll_rendezvous(grp, rc ? late : err, rc ? sizeof late : errlen)) rc = -1;
  return rc;
}

/* ---- on GPUs: NCCL ----
 * Each participant of a CUDA SPMD launch queues its part on its GPU's stream from a thread of its
 * own (runtime/cuda.c), so NCCL's calls meet as one rank per thread. Layouts NCCL does not produce
 * (a gather or scatter along an axis other than the leading one, all_to_all's chunks) are made by
 * strided device copies around it. */

static int nccl_type(kl_dtype t, int *dtype, size_t *mult) {
  *mult = 1;
  switch (t) {
  case KL_I8: *dtype = KL_NCCL_I8; return 0;
  case KL_U8: case KL_BOOL: *dtype = KL_NCCL_U8; return 0;
  case KL_I32: *dtype = KL_NCCL_I32; return 0;
  case KL_U32: *dtype = KL_NCCL_U32; return 0;
  case KL_I64: *dtype = KL_NCCL_I64; return 0;
  case KL_U64: *dtype = KL_NCCL_U64; return 0;
  case KL_F16: *dtype = KL_NCCL_F16; return 0;
  case KL_BF16: *dtype = KL_NCCL_BF16; return 0;
  case KL_F32: *dtype = KL_NCCL_F32; return 0;
  case KL_F64: *dtype = KL_NCCL_F64; return 0;
  case KL_C64: *dtype = KL_NCCL_F32, *mult = 2; return 0; /* moved or summed as pairs of reals */
  case KL_C128: *dtype = KL_NCCL_F64, *mult = 2; return 0;
  default: return -1;
  }
}

/* Copies the g blocks of `rows` rows of blk bytes: from [member][row] layout to [row][member]
 * (to_rows 1), or back (0). */
static int regroup(char *dst, const char *src, int64_t g, int64_t rows, size_t blk, int to_rows, char *err, size_t errlen) {
  for (int64_t k = 0; k < g; k++) {
    size_t spitch = to_rows ? blk : (size_t)g * blk, dpitch = to_rows ? (size_t)g * blk : blk;
    const char *s = to_rows ? src + (size_t)k * (size_t)rows * blk : src + (size_t)k * blk;
    char *d = to_rows ? dst + (size_t)k * blk : dst + (size_t)k * (size_t)rows * blk;
    if (kl_cuda_copy_2d(d, dpitch, s, spitch, blk, (size_t)rows, err, errlen)) return -1;
  }
  return 0;
}

/* The communicator set of this participant's group when the launch spans processes: made the first
 * time the group meets (every participant of the launch is at this collective then, so all of them
 * exchange: the group's first member posts a new NCCL id, the others read it, then each joins), cached
 * after. */
static const kl_nccl_comms *span_comms(kl_coll_group *grp, int rank, const int64_t *members, int64_t g, int64_t pos,
                                       char *err, size_t errlen) {
  const kl_nccl_comms *c = kl_nccl_span_find(members, (int)g, (int)pos);
  if (c) return c;
  char id[128];
  memset(id, 0, sizeof id);
  if (pos == 0 && kl_nccl_unique_id(id, err, errlen)) {
    kl_coll_abort(grp, err); /* the others must not wait for this id */
    return NULL;
  }
  const void *const *posts = kl_coll_exchange(grp, rank, id, sizeof id, "NCCL id exchange", err, errlen);
  if (!posts) return NULL;
  memcpy(id, posts[members[0]], sizeof id);
  if (kl_coll_rendezvous(grp, err, errlen)) return NULL;
  kl_cuda_queue_stream(); /* this participant's GPU current: NCCL takes the communicator's device from it */
  return kl_nccl_span_join(members, (int)g, (int)pos, id, err, errlen);
}

int kl_lower_collective_gpu(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  const char *name = kl_prim_get(c->prim)->name;
  int rank;
  kl_coll_group *grp;
  if (current_group(c, &grp, &rank, err, errlen)) return -1;
  int64_t g = kl_collective_group_size(&c->p);
  const int *group_ords = grp ? kl_coll_group_ordinals(grp) : NULL;
  if (grp && !group_ords)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "%s: an SPMD launch without its GPUs", name);
  int64_t *members = malloc(sizeof(int64_t) * (size_t)g);
  int *ords = malloc(sizeof(int) * (size_t)g);
  if (!members || !ords) {
    free(members);
    free(ords);
    return kl_error(err, errlen, KL_ERR_NOMEM, "%s: out of host memory", name);
  }
  int64_t pos = kl_collective_group(&c->p, rank, members);
  for (int64_t k = 0; grp && k < g; k++) ords[k] = group_ords[members[k]];
  const kl_aval *x = &c->avals[0], *y = &c->avals[1];
  size_t es = kl_dtype_size(x->dtype), xbytes = tail_bytes(x, 0, es), ybytes = tail_bytes(y, 0, es);
  int a = (int)c->p.collective.axis, rc = 0, dtype = 0;
  size_t mult = 1;
  const char *src = ptrs[0];
  char *dst = ptrs[1];
  const kl_nccl_comms *comms = NULL;
  void *stream = kl_cuda_queue_stream();
  if (c->prim == KL_P_AXIS_INDEX) {
    int32_t v = (int32_t)pos;
    rc = kl_cuda_copy(ptrs[0], 1, &v, 0, sizeof v, err, errlen);
    goto out;
  }
  if (g == 1) { /* alone in its group: every collective is the identity, ppermute keeps what it sends itself */
    const kl_ivec *pm = &c->p.collective.perm;
    int self = c->prim != KL_P_PPERMUTE;
    for (int k = 0; k < pm->n && !self; k += 2) self = pm->v[k] == 0 && pm->v[k + 1] == 0;
    rc = self ? kl_cuda_copy(dst, 1, src, 1, ybytes, err, errlen) : kl_cuda_memset0(dst, ybytes);
    goto out;
  }
  if (nccl_type(x->dtype, &dtype, &mult) ||
      (mult == 2 && (c->prim == KL_P_PMAX || c->prim == KL_P_PMIN)) || (x->dtype == KL_BOOL && c->prim == KL_P_PSUM)) {
    rc = kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s of %s between GPUs is not supported yet by kiln", name,
                  kl_dtype_name(x->dtype));
    goto out;
  }
  size_t ebytes = es / mult; /* bytes of one NCCL element */
  /* a launch's first on these GPUs: nobody calls NCCL before every participant is here, nobody goes
   * on (to load kernels lazily, CUDA waiting for its GPU) before every one has queued its part */
  int careful = grp && kl_coll_group_careful(grp);
  if (careful && kl_coll_rendezvous(grp, err, errlen)) {
    rc = -1;
    goto out;
  }
  if (c->prim == KL_P_PSUM && grp && !kl_coll_group_spans(grp) && kl_peer_all_reduce_ok(ords, (int)g, x->dtype, xbytes)) {
    rc = kl_peer_all_reduce(grp, rank, (int)members[1 - pos], ords, (int)pos, src, dst, xbytes / es, x->dtype, err,
                            errlen); /* two GPUs' copy engines (runtime/peer.c) */
    if (!rc && careful && kl_coll_rendezvous(grp, err, errlen)) rc = -1;
    goto out;
  }
  comms = grp && kl_coll_group_spans(grp) ? span_comms(grp, rank, members, g, pos, err, errlen)
                                          : kl_nccl_comms_for(ords, (int)g, err, errlen);
  kl_cuda_context_lost();
  stream = kl_cuda_queue_stream(); /* (the thread's GPU's context current again) */
  if (!comms) {
    rc = -1;
    goto out;
  }
  switch (c->prim) {
  case KL_P_PSUM:
  case KL_P_PMAX:
  case KL_P_PMIN: {
    int op = c->prim == KL_P_PSUM ? KL_NCCL_SUM : c->prim == KL_P_PMAX ? KL_NCCL_MAX : KL_NCCL_MIN;
    rc = kl_nccl_all_reduce(comms, (int)pos, src, dst, xbytes / ebytes, dtype, op, stream, err, errlen);
    break;
  }
  case KL_P_ALL_GATHER: { /* NCCL gives [member][x]; y is [outer][member][x's dims from axis on] */
    int64_t outer = lead(x, a);
    void *tmp = NULL;
    if (outer > 1 && kl_cuda_alloc(ybytes, &tmp, err, errlen)) {
      rc = -1;
      break;
    }
    rc = kl_nccl_all_gather(comms, (int)pos, src, tmp ? tmp : dst, xbytes / ebytes, dtype, stream, err, errlen);
    if (!rc && tmp) rc = regroup(dst, tmp, g, outer, tail_bytes(x, a, es), 1, err, errlen);
    if (tmp) kl_cuda_free(tmp, ybytes);
    break;
  }
  case KL_P_REDUCE_SCATTER: { /* x = [outer][member][blk]: NCCL wants [member][outer][blk] */
    int64_t outer = lead(x, a);
    void *tmp = NULL;
    if (outer > 1 && kl_cuda_alloc(xbytes, &tmp, err, errlen)) {
      rc = -1;
      break;
    }
    if (tmp) rc = regroup(tmp, src, g, outer, tail_bytes(y, a, es), 0, err, errlen);
    if (!rc)
      rc = kl_nccl_reduce_scatter(comms, (int)pos, tmp ? tmp : src, dst, ybytes / ebytes, dtype, KL_NCCL_SUM, stream, err,
                                  errlen);
    if (tmp) kl_cuda_free(tmp, xbytes);
    break;
  }
  case KL_P_PPERMUTE: { /* zeros unless a pair sends here */
    const kl_ivec *pm = &c->p.collective.perm;
    int to = -1, from = -1;
    for (int k = 0; k < pm->n; k += 2) {
      if (pm->v[k] == pos) to = (int)pm->v[k + 1];
      if (pm->v[k + 1] == pos) from = (int)pm->v[k];
    }
    if (from < 0) rc = kl_cuda_memset0(dst, ybytes);
    if (!rc && to == pos) rc = kl_cuda_copy(dst, 1, src, 1, ybytes, err, errlen); /* to itself */
    else if (!rc && (to >= 0 || from >= 0))
      rc = kl_nccl_send_recv(comms, (int)pos, src, to, dst, from, xbytes / ebytes, dtype, stream, err, errlen);
    break;
  }
  case KL_P_ALL_TO_ALL: {
    /* send: chunk k of x along axis a, for member k, contiguous ([k][lead(a)][chunk rows]); recv:
     * member k's chunk for this one, [k][piece]; y: the pieces concatenated along axis c. */
    int ca = (int)c->p.collective.concat_axis;
    int64_t outer_a = lead(x, a), chunk = x->dims[a] / g;
    size_t row = (size_t)chunk * tail_bytes(x, a + 1, es), piece = xbytes / (size_t)g;
    kl_aval pa = *x; /* a piece: x with axis a cut to one chunk */
    pa.dims[a] = chunk;
    int64_t outer_c = lead(&pa, ca);
    size_t prow = tail_bytes(&pa, ca, es);
    void *sendb = NULL, *recvb = NULL;
    if (kl_cuda_alloc(xbytes, &sendb, err, errlen) || kl_cuda_alloc(xbytes, &recvb, err, errlen)) rc = -1;
    for (int64_t k = 0; !rc && k < g; k++) /* x as [outer_a][g][row] -> [g][outer_a][row] */
      rc = kl_cuda_copy_2d((char *)sendb + (size_t)k * piece, row, src + (size_t)k * row, (size_t)g * row, row,
                           (size_t)outer_a, err, errlen);
    if (!rc) rc = kl_nccl_all_to_all(comms, (int)pos, sendb, recvb, piece / ebytes, dtype, stream, err, errlen);
    for (int64_t k = 0; !rc && k < g; k++) /* [g][outer_c][prow] -> y as [outer_c][g][prow] */
      rc = kl_cuda_copy_2d(dst + (size_t)k * prow, (size_t)g * prow, (char *)recvb + (size_t)k * piece, prow, prow,
                           (size_t)outer_c, err, errlen);
    if (sendb) kl_cuda_free(sendb, xbytes);
    if (recvb) kl_cuda_free(recvb, xbytes);
    break;
  }
  default:
    rc = kl_lower_missing(c->prim, "GPU (NCCL)", err, errlen);
    break;
  }
  if (!rc && careful && kl_coll_rendezvous(grp, err, errlen)) rc = -1;
out:
  if (comms) kl_cuda_context_lost(); /* NCCL sets the runtime's device as it likes */
  free(members);
  free(ords);
  return rc;
}

#define COLLECTIVE(P) {P, .fuses = 0, .cpu_lib = run_collective, .gpu_library = KL_GPU_LIB_COLLECTIVE}
const kl_lowering kl_lower_collective[] = {
    COLLECTIVE(KL_P_PSUM),     COLLECTIVE(KL_P_PMAX),     COLLECTIVE(KL_P_PMIN),       COLLECTIVE(KL_P_ALL_GATHER),
    COLLECTIVE(KL_P_REDUCE_SCATTER), COLLECTIVE(KL_P_PPERMUTE), COLLECTIVE(KL_P_ALL_TO_ALL), COLLECTIVE(KL_P_AXIS_INDEX),
};
#undef COLLECTIVE
const int kl_lower_collective_n = sizeof kl_lower_collective / sizeof *kl_lower_collective;
