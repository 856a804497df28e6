/* collective.c: lowering of the collective family: a library step. The participant the step runs
 * for, and its group, come from the launch (runtime/collective.h: each participant of an SPMD
 * launch runs on its own thread); the participants post their operands, each computes its own
 * result over its group's posts (reduced with the reductions' host combiners, gathered, permuted
 * or exchanged), then waits until nobody reads its operand any more. A program run alone (no
 * group) over a mesh of one device computes the same. On the GPU the step runs on the host over
 * copies for now (one GPU: groups of one); NCCL is runtime/nccl.c's. Depends on lower.h and
 * runtime/collective.h. */
#include <stdlib.h>
#include <string.h>

#include "../../runtime/collective.h"
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

static int run_collective(const kl_libcall *c, void *const *ptrs, char *err, size_t errlen) {
  const char *name = kl_prim_get(c->prim)->name;
  int rank = 0;
  kl_coll_group *grp = kl_coll_current(&rank);
  int64_t n = kl_collective_mesh_size(&c->p), g = kl_collective_group_size(&c->p);
  if (!grp && n != 1)
    return kl_error(err, errlen, KL_ERR_VALUE, "%s: a collective over a mesh of %lld devices runs only inside shard_map "
                    "or pmap over that mesh", name, (long long)n);
  if (grp && kl_coll_group_size(grp) != n)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "%s: launched on %d devices, but its mesh has %lld", name,
                    kl_coll_group_size(grp), (long long)n);
  int64_t *members = malloc(sizeof(int64_t) * (size_t)g);
  if (!members) return kl_error(err, errlen, KL_ERR_NOMEM, "%s: out of host memory", name);
  int64_t pos = kl_collective_group(&c->p, rank, members);
  if (c->prim == KL_P_AXIS_INDEX) { /* nothing to exchange */
    *(int32_t *)ptrs[0] = (int32_t)pos;
    free(members);
    return 0;
  }
  const void *alone = ptrs[0];
  const void *const *posts = grp ? kl_coll_exchange(grp, rank, ptrs[0], err, errlen) : &alone;
  if (!posts) {
    free(members);
    return -1;
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
  if (grp && kl_coll_release_posts(grp, rc ? late : err, rc ? sizeof late : errlen)) rc = -1;
  return rc;
}

#define COLLECTIVE(P) {P, .fuses = 0, .cpu_lib = run_collective}
const kl_lowering kl_lower_collective[] = {
    COLLECTIVE(KL_P_PSUM),     COLLECTIVE(KL_P_PMAX),     COLLECTIVE(KL_P_PMIN),       COLLECTIVE(KL_P_ALL_GATHER),
    COLLECTIVE(KL_P_REDUCE_SCATTER), COLLECTIVE(KL_P_PPERMUTE), COLLECTIVE(KL_P_ALL_TO_ALL), COLLECTIVE(KL_P_AXIS_INDEX),
};
#undef COLLECTIVE
const int kl_lower_collective_n = sizeof kl_lower_collective / sizeof *kl_lower_collective;
